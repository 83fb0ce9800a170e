"""Each planned range's share of the flow's rate limits (issue 26): a bytes limit is split by
estimated bytes, a records limit by offsets (`split_rate_limits`); the bytes per offset of each
partition are sampled from the source (`RecordSizes`) and kept a while.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import TopicPartition

from kmirror_engine.planning.ranges import OffsetRange

# Byte-limited flows: records the planner reads at the start of each planned partition to learn its
# bytes per offset, how long it waits for them at most, and how long a partition's figure is kept.
SIZE_SAMPLE_RECORDS = 5
SIZE_SAMPLE_TIMEOUT_S = 5.0
SIZE_SAMPLE_TTL_S = 600.0


def split_rate_limits(
    tasks: Sequence[Sequence[OffsetRange]],
    bytes_per_offset: Mapping[tuple[str, int], float],
    records_limited: bool = False,
) -> list[list[float]]:
    """Each range's share of the flow's limits, per task; they sum to 1 over the batch.

    Without byte figures: offsets over the batch's. With them (a bytes limit): estimated bytes
    (offsets times the partition's bytes per offset; a partition without a figure counts at the
    mean of the others) over the batch's, so a partition of large records gets its byte share,
    not a record-count share. One share carries both limits: when a records limit is set too,
    each range gets the larger of its two shares, renormalized (at least half of each).
    """
    sizes = [[r.size for r in task] for task in tasks]
    offsets = _normalized(sizes)
    known = [v for v in bytes_per_offset.values() if v > 0]
    if not known:
        return offsets
    fallback = sum(known) / len(known)
    estimated = [
        [r.size * bytes_per_offset.get((r.source_topic, r.partition), fallback) for r in task] for task in tasks
    ]
    by_bytes = _normalized(estimated)
    if not records_limited:
        return by_bytes
    return _normalized([[max(a, b) for a, b in zip(o, s, strict=True)] for o, s in zip(offsets, by_bytes, strict=True)])


def _normalized(weights: Sequence[Sequence[float]]) -> list[list[float]]:
    total = sum(max(0.0, w) for task in weights for w in task)
    return [[max(0.0, w) / total if total else 0.0 for w in task] for task in weights]


class RecordSizes:
    """Bytes (key + value) per offset of source partitions, sampled at the start of their planned
    ranges and kept `SIZE_SAMPLE_TTL_S` (a workload's record sizes change slowly; a sample costs
    a fetch). `make_consumer` None (fake clients): nothing is sampled, every figure is unknown.
    A partition whose sample times out stays unknown (its share falls back to the batch's mean)."""

    def __init__(self, make_consumer: Callable[[], Any] | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.make_consumer, self.clock = make_consumer, clock
        self.known: dict[tuple[str, int], tuple[float, float]] = {}  # tp -> (sampled at, bytes per offset)

    def bytes_per_offset(self, ranges: Sequence[OffsetRange]) -> dict[tuple[str, int], float]:
        """The figure of every range's partition that has one, sampling the stale ones first."""
        now = self.clock()
        stale = [
            r
            for r in ranges
            if now - self.known.get((r.source_topic, r.partition), (-1e18, 0.0))[0] >= SIZE_SAMPLE_TTL_S and r.size > 0
        ]
        if stale and self.make_consumer is not None:
            for tp, value in self._sample(stale).items():
                self.known[tp] = (now, value)
        return {tp: self.known[tp][1] for tp in ((r.source_topic, r.partition) for r in ranges) if tp in self.known}

    def _sample(self, ranges: Sequence[OffsetRange]) -> dict[tuple[str, int], float]:
        """Up to `SIZE_SAMPLE_RECORDS` records of each range from its start, read for at most
        `SIZE_SAMPLE_TIMEOUT_S`: bytes over the offsets they span."""
        assert self.make_consumer is not None
        consumer = self.make_consumer()
        wanted = {(r.source_topic, r.partition): r for r in ranges}
        seen: dict[tuple[str, int], list[int]] = {}  # tp -> [first offset, last offset, bytes, records]
        try:
            consumer.assign([TopicPartition(r.source_topic, r.partition, r.start_offset) for r in ranges])
            deadline = time.monotonic() + SIZE_SAMPLE_TIMEOUT_S
            while wanted and time.monotonic() < deadline:
                for msg in consumer.consume(500, timeout=0.2):
                    tp = (msg.topic(), msg.partition())
                    rng = wanted.get(tp)
                    if rng is None:
                        continue
                    if msg.error() is None:
                        _tally(seen.setdefault(tp, [msg.offset(), msg.offset(), 0, 0]), msg)
                    got = seen.get(tp)
                    if msg.error() is not None or (
                        got and (got[3] >= SIZE_SAMPLE_RECORDS or got[1] + 1 >= rng.end_offset)
                    ):
                        del wanted[tp]  # enough, its planned end, or an end-of-partition event
                        consumer.pause([TopicPartition(*tp)])
        finally:
            consumer.close()
        return {tp: got[2] / (got[1] - got[0] + 1) for tp, got in seen.items() if got[3] > 0}


def _tally(got: list[int], msg: Any) -> None:
    value, key = msg.value(), msg.key()
    got[1] = msg.offset()
    got[2] += (len(value) if value else 0) + (len(key) if key else 0)
    got[3] += 1
