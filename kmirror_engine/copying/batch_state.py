"""What the batch copy path (`kmirror_engine.copying.batch_copy`) keeps per range in flight, and
which batches it hands to the record loop (`fallback_reason`): plain data and pure functions."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kmirror_engine.copying.batch_wire import Batch, keys_present, min_timestamp
from kmirror_engine.copying.ranges import CopyRange, closed_syncs
from kmirror_engine.copying.record_limits import TargetRules
from kmirror_engine.observability.progress import PartitionProgress

# Timestamps within this much of the target's message.timestamp window: the record loop checks
# them one by one (its own margin, range_state.TIMESTAMP_GATE_MARGIN_MS).
WINDOW_MARGIN_MS = 600_000
# A compacted target refuses a batch holding a record without a key: uncompressed batches of up to
# this many records have their keys checked here (MM2's heartbeats, small keyed batches) and go as
# they are; compressed or larger ones go to the record loop, which checks them one by one.
COMPACTED_KEY_CHECK_MAX_RECORDS = 256
UNBOUNDED_MS = 2**62  # a timestamp bound at or over this is none (the broker's default is Long.MAX_VALUE)


@dataclass
class SentBatch:
    """One batch for the target: resent with the same sequence (the same bytes) after a retriable error."""

    batch: Batch  # as fetched (a view of the fetch answer's bytes), rewritten into each produce request
    sequence: int | None = None  # its base sequence on the target (None: not sent yet)
    node: int | None = None  # the target broker it was last sent to

    @property
    def source_base(self) -> int:
        return self.batch.base_offset

    @property
    def count(self) -> int:
        return self.batch.record_count

    @property
    def size(self) -> int:
        return len(self.batch.data)


@dataclass(frozen=True)
class RecordSpan:
    """Source offsets [start, end) a record loop copies (after what was produced before them)."""

    start: int
    end: int


@dataclass
class RangeInFlight:
    """One range in flight: fetch position, batches waiting, produce requests in flight, counters."""

    rng: CopyRange
    rules: TargetRules
    limit: int | None
    position: int
    pending: deque[SentBatch | RecordSpan] = field(default_factory=deque)
    in_flight: deque[SentBatch] = field(default_factory=deque)
    pending_bytes: int = 0
    fetching: bool = False
    wide: bool = False  # the last fetch held only part of a batch: fetched first, with the request's limit
    retry: list[SentBatch] = field(default_factory=list)  # failed retriably, resent in order once in_flight is empty
    records: int = 0
    bytes: int = 0
    fallback_records: int = 0
    last_timestamp_ms: int | None = None
    syncs: list[tuple[int, int]] = field(default_factory=list)
    drift: int | None = None
    last_upstream: int = -1
    lat_min: int = 2**62
    lat_max: int = -(2**62)
    lat_sum: int = 0
    lat_count: int = 0

    @property
    def key(self) -> tuple[str, int]:
        return (self.rng.source_topic, self.rng.partition)

    @property
    def target(self) -> tuple[str, int]:
        return (self.rng.target_topic, self.rng.partition)

    @property
    def fetched_all(self) -> bool:
        return self.position >= self.rng.end_offset

    @property
    def done(self) -> bool:
        return self.fetched_all and not self.pending and not self.in_flight and not self.retry

    def failed(self, item: SentBatch) -> None:
        """`item` failed retriably or was refused: it and every batch sent after it are resent in
        order (ahead of those already waiting: a later batch cannot land before it). An item no
        longer in flight was already judged (its answer after a failure of an earlier one)."""
        at = next((i for i, sent in enumerate(self.in_flight) if sent is item), None)
        if at is not None:
            moved = [self.in_flight.pop() for _ in range(len(self.in_flight) - at)]
            self.retry[:0] = reversed(moved)

    def answered(self, item: SentBatch) -> bool:
        """Take `item` out of the in-flight queue; False when it was no longer there."""
        for i, sent in enumerate(self.in_flight):
            if sent is item:
                del self.in_flight[i]
                return True
        return False

    def mapped(self, upstream: int, downstream: int) -> None:
        """Account the record at `upstream` landing at `downstream` (records in between keep the drift)."""
        if downstream - upstream != self.drift:
            self.syncs.append((upstream, downstream))
            self.drift = downstream - upstream
        self.last_upstream = upstream

    def progress(self) -> PartitionProgress:
        syncs = closed_syncs(self.syncs, self.drift, self.last_upstream)
        return PartitionProgress.for_range(
            self.rng,
            next_offset=self.rng.end_offset,
            records=self.records,
            size=self.bytes,
            last_timestamp_ms=self.last_timestamp_ms,
            offset_syncs=syncs,
            latency=(self.lat_min, self.lat_max, self.lat_sum, self.lat_count),
            fallback_records=self.fallback_records,
        )


def fallback_reason(s: RangeInFlight, batch: Batch, now_ms: int) -> str | None:
    """Why `batch` of range `s` cannot be copied as it is (None: it can); a noun phrase for the log."""
    if batch.magic != 2:
        return f"magic {batch.magic} batches (an old message format)"
    if batch.log_append_time:
        return "LogAppendTime batches (the target would stamp its own time)"
    if not batch.contiguous:
        return "batches with offset gaps (a compacted source)"
    if batch.base_offset < s.position or batch.next_offset > s.rng.end_offset:
        return "a batch crossing the range's start or end"
    if s.limit is not None and len(batch.data) > s.limit:
        return f"batches over the target's max.message.bytes ({s.limit})"
    if s.rules.compacted and not keys_present(batch, COMPACTED_KEY_CHECK_MAX_RECORDS):
        return "a compacted target topic (keys checked record by record)"
    if s.rules.create_time and outside_window(s.rules, batch, now_ms):
        return "timestamps near the target's message.timestamp window"
    return None


def outside_window(rules: TargetRules, batch: Batch, now_ms: int) -> bool:
    """Whether the target's timestamp window might refuse a record of `batch` (checked on its base
    and max timestamps, with the record loop's margin: near the edge, records are checked one by one)."""
    margin = WINDOW_MARGIN_MS
    if rules.before_max_ms is not None and rules.before_max_ms < UNBOUNDED_MS:
        # a record may be older than the batch's first one: the lowest is read from the records
        # (None: compressed or long, not told without decoding: the record loop checks them)
        low = min_timestamp(batch, COMPACTED_KEY_CHECK_MAX_RECORDS)
        if low is None or now_ms - min(low, batch.max_timestamp) > rules.before_max_ms - margin:
            return True
    return rules.after_max_ms is not None and batch.max_timestamp - now_ms > rules.after_max_ms - margin
