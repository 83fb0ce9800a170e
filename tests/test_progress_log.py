"""The progress line: at most one a second while the mirror is behind, a caught-up batch always
at once, nothing dropped (kmirror_engine.observability.progress_log)."""

from __future__ import annotations

import io
import json

from kmirror_engine.observability.progress import BatchProgress, PartitionProgress
from kmirror_engine.observability.progress_log import PREFIX, ProgressLogListener
from tests.planner_fakes import spec


class Listener(ProgressLogListener):
    """End offsets from a dict the test moves (the source's log end)."""

    def __init__(self, interval_s: float) -> None:
        flow = spec()
        super().__init__(flow.id, flow.source, flow.copy, out=io.StringIO())
        self.interval_s = interval_s
        self.log_end: dict[tuple[str, int], int] | None = {}

    def _end_offsets(self, batch: BatchProgress) -> dict[tuple[str, int], int] | None:
        return self.log_end

    def lines(self) -> list[dict]:
        assert isinstance(self.out, io.StringIO)
        return [json.loads(line.removeprefix(PREFIX)) for line in self.out.getvalue().splitlines()]


def batch(batch_id: int, start: int, end: int, partition: int = 0) -> BatchProgress:
    copied = PartitionProgress("orders", partition, "west.orders", start, end, end - start, 10 * (end - start), None)
    return BatchProgress(batch_id, (copied,), duration_ms=100)


def test_batches_behind_within_the_interval_are_summed_into_one_line_and_a_caught_up_batch_prints() -> None:
    listener = Listener(interval_s=3600)
    listener.log_end = {("orders", 0): 1000, ("orders", 1): 1000}
    listener.on_batch(batch(1, 0, 100))  # the first line is never held
    listener.on_batch(batch(2, 100, 200))  # behind, within the interval: held
    listener.on_batch(batch(3, 0, 50, partition=1))  # held
    assert [line["batch"] for line in listener.lines()] == [1]
    listener.log_end = {("orders", 0): 300, ("orders", 1): 50}
    listener.on_batch(batch(4, 200, 300))  # partition 0 caught up, partition 1 too: printed at once
    first, summed = listener.lines()
    assert (first["batches"], first["records"], first["lag"]) == (1, 100, 900)
    assert (summed["batch"], summed["batches"], summed["records"], summed["bytes"]) == (4, 3, 250, 2500)
    assert (summed["partitions"], summed["lag"], summed["duration_ms"]) == (2, 0, 300)


def test_every_batch_prints_once_the_interval_passed_and_an_unknown_lag_never_holds() -> None:
    listener = Listener(interval_s=0)
    listener.log_end = {("orders", 0): 10_000}
    for n in range(3):
        listener.on_batch(batch(n, n * 100, n * 100 + 100))
    assert [line["batches"] for line in listener.lines()] == [1, 1, 1]
    held = Listener(interval_s=3600)
    held.log_end = None  # the source did not answer: lag null, printed
    held.on_batch(batch(1, 0, 100))
    held.on_batch(batch(2, 100, 200))
    assert [line["lag"] for line in held.lines()] == [None, None]


def test_a_held_line_is_printed_at_close() -> None:
    listener = Listener(interval_s=3600)
    listener.log_end = {("orders", 0): 1000}
    listener.on_batch(batch(1, 0, 100))
    listener.on_batch(batch(2, 100, 200))
    assert len(listener.lines()) == 1
    listener.close(final=False)
    assert [(line["batch"], line["records"], line["lag"]) for line in listener.lines()] == [
        (1, 100, 900),
        (2, 100, 800),
    ]
    listener.close(final=False)  # nothing held any more
    assert len(listener.lines()) == 2
