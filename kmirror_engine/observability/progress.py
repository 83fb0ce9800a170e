"""What a micro-batch did, per source partition: the contract between the copy tasks (which
fill it from delivery reports), the driver-side commit (which aggregates it) and the batch
listeners (offset syncs, checkpoints, metrics, logging) that consume it.

Plain picklable data only: these objects travel from executors to the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class PartitionProgress:
    source_topic: str
    partition: int
    target_topic: str
    start_offset: int  # first upstream offset planned for this range
    next_offset: int  # upstream offset after the last record copied (resume point)
    records: int
    bytes: int
    last_timestamp_ms: int | None  # CreateTime of the last mirrored record
    # (upstream_offset, downstream_offset) of the first record, of every record where the
    # mapping drifts (gaps, compaction, markers, a non-empty target) and of the last record.
    offset_syncs: tuple[tuple[int, int], ...] = ()
    # replication latency (delivery time - record timestamp) over the range, in ms
    latency_min_ms: int | None = None
    latency_max_ms: int | None = None
    latency_sum_ms: int = 0
    latency_count: int = 0
    skipped_records: int = 0  # data loss tolerated with fail_on_data_loss=false (retention gap)
    dead_lettered: int = 0  # records the target refuses (too large, bad timestamp...), sent to dead_letter_topic
    skipped_by_option: int = 0  # records the flow's skip_offsets named, not copied (each logged: `kmirror skipped`)
    source_end: int | None = None  # the source partition's end offset when the batch was planned (None: unknown)
    # records the batch copy path (copy_loop batch) handed to a record loop (LogAppendTime, offset gaps, too large...)
    fallback_records: int = 0
    # records whose provenance header names the target as their origin (provenance_headers): not copied back
    returned_home: int = 0

    @classmethod
    def for_range(
        cls,
        rng: PlannedRange,
        *,
        next_offset: int,
        records: int,
        size: int,
        last_timestamp_ms: int | None,
        offset_syncs: tuple[tuple[int, int], ...],
        latency: tuple[int, int, int, int],
        **counts: int,
    ) -> PartitionProgress:
        """What a copy loop did to one planned range: `latency` = its (min, max, sum, count) in ms,
        min and max shown only when a record was counted; `counts` the loop's own tallies
        (dead_lettered, skipped_by_option, fallback_records, returned_home)."""
        lat_min, lat_max, lat_sum, lat_count = latency
        counted = lat_count > 0
        return cls(
            source_topic=rng.source_topic,
            partition=rng.partition,
            target_topic=rng.target_topic,
            start_offset=rng.start_offset,
            next_offset=next_offset,
            records=records,
            bytes=size,
            last_timestamp_ms=last_timestamp_ms,
            offset_syncs=offset_syncs,
            latency_min_ms=lat_min if counted else None,
            latency_max_ms=lat_max if counted else None,
            latency_sum_ms=lat_sum,
            latency_count=lat_count,
            skipped_records=rng.skipped_before,
            source_end=rng.source_end,
            **counts,
        )


class PlannedRange(Protocol):
    """The planned range a `PartitionProgress` reports on (the copy loops' CopyRange)."""

    @property
    def source_topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def target_topic(self) -> str: ...
    @property
    def start_offset(self) -> int: ...
    @property
    def skipped_before(self) -> int: ...
    @property
    def source_end(self) -> int | None: ...


@dataclass(frozen=True)
class BatchProgress:
    batch_id: int
    partitions: tuple[PartitionProgress, ...]
    duration_ms: int
    # source log end offsets seen when the batch was planned, for lag: (topic, partition) -> offset
    source_end_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    # time the copy loops waited for the flow's rate limits (max_bytes/records_per_second), summed over loops
    throttled_ms: int = 0

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.partitions)


class BatchListener(Protocol):
    """Called on the driver after a batch's writes are committed (all deliveries acknowledged)."""

    def on_batch(self, batch: BatchProgress) -> None: ...

    def on_idle(self, now_ms: int) -> None:
        """Called between batches (and at least every trigger interval) for periodic work."""
        ...

    def close(self, final: bool) -> None:
        """Called once when the query stops; `final` is true after a clean `--once` run."""
        ...


def next_offsets(batch: BatchProgress) -> dict[tuple[str, int], int]:
    """The resume point per source partition after `batch` (max over its ranges)."""
    out: dict[tuple[str, int], int] = {}
    for p in batch.partitions:
        key = (p.source_topic, p.partition)
        out[key] = max(out.get(key, 0), p.next_offset)
    return out
