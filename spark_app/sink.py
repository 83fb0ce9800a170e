"""The "kmirror-sink" Python data source: writer tasks copy the offset ranges the reader
planned (one row per range: source_topic, partition, start_offset, end_offset, target_topic),
and the driver-side commit aggregates what they did into a `BatchProgress` for listeners.

- `write(rows)` (executor) copies every range of its task with one consumer and one
  producer, all partitions in flight at once, and returns a `MirrorCommitMessage` only after
  every delivery was acknowledged; any failure raises, so Spark retries the batch.
- `commit(messages, batch_id)` runs after all tasks succeeded; it raises on a missing
  message rather than report a partial batch.
The flow spec travels as JSON in option "flow_spec" (`FlowSpec.to_dict()`).
What the planner should give it: about one task per executor core, each holding several
partitions' ranges (the copy is CPU-bound per record, and one task keeps all its partitions in
flight); in exactly-once mode never a partition's ranges split across tasks of one batch.
The commit runs in a Python worker the JVM starts for it, not in the driver's Python process
(see spark_app/listeners.py).
Environment variable KMIRROR_BATCH_LOG=<path>: the commit appends one JSON line per batch
(records, bytes, first read and last delivery times), used by the benchmark.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, WriterCommitMessage

from kmirror.errors import KmirrorError
from kmirror.flow.spec import parse_flow_spec
from kmirror_engine.copying import CopyRange, Throttled, auto_copy_loop, copy_task_ranges, fence_for_query
from kmirror_engine.observability import BatchProgress, PartitionProgress
from spark_app.lazy_pandas import defer_pandas_import
from spark_app.listeners import batch_failed, listeners_for, run_side_work

SINK_NAME = "kmirror-sink"
BATCH_LOG_ENV = "KMIRROR_BATCH_LOG"


@dataclass(frozen=True)
class MirrorCommitMessage(WriterCommitMessage):
    """What one writer task did; plain picklable data."""

    task_id: int
    partitions: tuple[PartitionProgress, ...]
    first_read_ms: int | None  # wall clock of the task's start of copying (None: nothing to copy)
    last_delivery_ms: int  # wall clock once every delivery was acknowledged
    throttled_ms: int = 0  # time the task's copy loops waited for the flow's rate limits, summed


def _task_id() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


class MirrorStreamWriter(DataSourceStreamWriter):
    """Made on the driver's host and pickled to the executors: what the tasks need from the
    driver travels in it (on a cluster an executor shares neither its process nor its environment)."""

    def __init__(self, spec_json: str, auto_loop: str | None = None, run: str | None = None) -> None:
        self.spec_json = spec_json
        self.auto_loop = auto_loop  # the driver's KMIRROR_AUTO_COPY_LOOP (`task_copy.auto_copy_loop`)
        self.run = run  # exactly-once: this query's run token (`internal_names.run_token`), kept with the offsets

    def write(self, iterator: Iterator[Any]) -> MirrorCommitMessage:
        defer_pandas_import()  # a task's process: Spark's arrow path would import pandas for nothing
        # skipped_before: the reader's extra column (kmirror-source); plain range rows have none
        # rate_share: the flow's rate limits this range gets (kmirror-source; None: not planned)
        ranges = [
            CopyRange(
                r.source_topic,
                r.partition,
                r.start_offset,
                r.end_offset,
                r.target_topic,
                getattr(r, "skipped_before", 0) or 0,
                getattr(r, "rate_share", None),
                getattr(r, "source_end", None),
            )
            for r in iterator
        ]
        task_id = _task_id()
        if not ranges:
            return MirrorCommitMessage(task_id, (), None, _now_ms())
        spec = parse_flow_spec(json.loads(self.spec_json))
        started = _now_ms()
        throttled = Throttled()
        progress = copy_task_ranges(
            spec, ranges, task_id, throttled, getattr(self, "auto_loop", None) or "", getattr(self, "run", None)
        )
        return MirrorCommitMessage(task_id, tuple(progress), started, _now_ms(), round(throttled.seconds * 1000))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        spec = parse_flow_spec(json.loads(self.spec_json))
        batch, first_read_ms, last_delivery_ms = aggregate(messages, batchId, exactly_once=spec.exactly_once)
        started_ms = _now_ms()
        # The batch is delivered: side work (group commit, checkpoints, offset syncs, progress)
        # is logged and retried at the next batch when it fails, never failing this batch.
        run_side_work(spec.id, lambda listener: listener.on_batch(batch), lambda: listeners_for(spec))
        now = _now_ms()
        run_side_work(spec.id, lambda listener: listener.on_idle(now), lambda: listeners_for(spec))
        log_path = os.environ.get(BATCH_LOG_ENV)
        if log_path:  # the benchmark's record of the batch; listeners_ms: this commit's own work
            _append_batch_log(log_path, batch, first_read_ms, last_delivery_ms, _now_ms() - started_ms)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: copied records stay (at-least-once); the retried batch copies again
        (in exactly-once mode, failed tasks aborted their own transactions). The failure is
        counted (kmirror_failed_batches_total) by the flow's listeners."""
        batch_failed(listeners_for(parse_flow_spec(json.loads(self.spec_json))), batchId)


def aggregate(
    messages: Sequence[WriterCommitMessage | None], batch_id: int, exactly_once: bool = False
) -> tuple[BatchProgress, int | None, int]:
    """The batch's progress and its first-read / last-delivery wall clock times (ms).

    Raises KmirrorError on a missing or foreign commit message, and in exactly-once mode when
    one source partition was copied by two tasks (their offsets cannot both be committed).
    """
    partitions: list[PartitionProgress] = []
    owners: dict[tuple[str, int], int] = {}
    for index, message in enumerate(messages):
        if not isinstance(message, MirrorCommitMessage):
            raise KmirrorError(f"batch {batch_id}: task {index} returned {message!r}, not a MirrorCommitMessage")
        for p in message.partitions:
            owner = owners.setdefault((p.source_topic, p.partition), message.task_id)
            if exactly_once and owner != message.task_id:
                raise KmirrorError(
                    f"batch {batch_id}: {p.source_topic}[{p.partition}] was split across tasks {owner} and "
                    f"{message.task_id}; exactly-once mode needs one task per partition per batch"
                )
        partitions.extend(message.partitions)
    valid = [m for m in messages if isinstance(m, MirrorCommitMessage)]
    starts = [m.first_read_ms for m in valid if m.first_read_ms is not None]
    first_read_ms = min(starts) if starts else None
    last_delivery_ms = max((m.last_delivery_ms for m in valid), default=_now_ms())
    duration_ms = last_delivery_ms - first_read_ms if first_read_ms is not None else 0
    ends: dict[tuple[str, int], int] = {}
    for p in partitions:  # the end offsets the planner saw: lag without asking the source again
        if p.source_end is not None:
            ends[(p.source_topic, p.partition)] = max(p.source_end, ends.get((p.source_topic, p.partition), 0))
    throttled_ms = sum(m.throttled_ms for m in valid)
    batch = BatchProgress(batch_id, tuple(partitions), duration_ms, ends, throttled_ms=throttled_ms)
    return batch, first_read_ms, last_delivery_ms


def _append_batch_log(
    path: str, batch: BatchProgress, first_read_ms: int | None, last_delivery_ms: int, listeners_ms: int
) -> None:
    line = {
        "batch_id": batch.batch_id,
        "records": batch.records,
        "bytes": batch.bytes,
        "tasks_ms": batch.duration_ms,
        "throttled_ms": batch.throttled_ms,
        "first_read_ms": first_read_ms,
        "last_delivery_ms": last_delivery_ms,
        "committed_ms": _now_ms(),
        "listeners_ms": listeners_ms,
        "commit_pid": os.getpid(),
    }
    with open(path, "a") as log:
        log.write(json.dumps(line) + "\n")


def _now_ms() -> int:
    return int(time.time() * 1000)


class MirrorSink(DataSource):
    """`df.writeStream.format("kmirror-sink").option("flow_spec", json)`."""

    @classmethod
    def name(cls) -> str:
        return SINK_NAME

    def streamWriter(self, schema: Any, overwrite: bool) -> MirrorStreamWriter:
        spec_json = self.options.get("flow_spec")
        if not spec_json:
            raise KmirrorError(f'the {SINK_NAME} data source needs option "flow_spec" (FlowSpec.to_dict() as JSON)')
        spec = parse_flow_spec(json.loads(spec_json))
        token = self.options.get("query_token")
        if spec.exactly_once:
            _fence_once(partial(fence_for_query, spec.route, spec.copy), token)
        return MirrorStreamWriter(spec_json, auto_copy_loop(), token if spec.exactly_once else None)


# Queries (start_query's `query_token`) this process has fenced for. Spark calls `streamWriter`
# when the query starts, before any task, but also in the sink's commit runner at every commit
# (4.0 and 4.3) and when planning every batch's write (4.0): fencing there would create and
# initialise one transactional producer per source partition per batch for nothing (every
# transaction of the batch is already committed or aborted by then).
_FENCED: set[str] = set()


def _fence_once(fence: Callable[[], object], query_token: str | None) -> None:
    """Fence the earlier runs' transactional ids (`fence()`: `fence_for_query` of the flow) once
    per query start in this process (without a token, as before: every call)."""
    if query_token is not None and query_token in _FENCED:
        return
    fence()
    if query_token is not None:
        _FENCED.add(query_token)
