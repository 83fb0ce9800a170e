"""Offset-range planning: the contract between the stream reader and the writer, and the pure
functions that turn "where we are" and "what is available" into writer tasks.

Reader output (one row per topic-partition offset range, end exclusive, target topic already
renamed through the replication policy) is `RANGE_SCHEMA`. Streaming offsets are JSON
`{"topic": {"partition": next_offset}}` (partition keys are strings: JSON object keys).

Everything here is plain Python (no Spark, no Kafka) and unit-tested with plain values.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

RANGE_SCHEMA = "source_topic STRING, partition INT, start_offset BIGINT, end_offset BIGINT, target_topic STRING"

TopicPartition = tuple[str, int]
Offsets = dict[TopicPartition, int]


@dataclass(frozen=True)
class OffsetRange:
    """Records [start_offset, end_offset) of one source partition, mirrored into target_topic."""

    source_topic: str
    partition: int
    start_offset: int
    end_offset: int
    target_topic: str

    @property
    def size(self) -> int:
        """Offsets spanned (an upper bound of the records: markers and compaction leave holes)."""
        return max(0, self.end_offset - self.start_offset)

    def as_row(self) -> tuple[str, int, int, int, str]:
        return (self.source_topic, self.partition, self.start_offset, self.end_offset, self.target_topic)


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """`{(topic, p): n}` -> Spark's streaming offset `{"topic": {"p": n}}` (sorted, stable)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_from_json(raw: Mapping[str, Mapping[str, int]] | None) -> Offsets:
    """Inverse of `offsets_to_json`; `None` or `{}` means no partition known yet."""
    return {(topic, int(p)): int(n) for topic, parts in (raw or {}).items() for p, n in parts.items()}


def admit(
    start: Mapping[TopicPartition, int], available: Mapping[TopicPartition, int], max_records: int | None
) -> Offsets:
    """Admission control: end offsets for the next batch, at most `max_records` offsets in all.

    Returns an offset for every partition of `start`, and never moves one backwards or past
    `available`. The budget is shared in proportion to each partition's backlog (like Spark's
    Kafka source), the rounding remainder going to the largest backlogs, so no partition starves;
    a partition missing from `available` (deleted topic) stays where it is.
    """
    backlog = {tp: max(0, available.get(tp, off) - off) for tp, off in start.items()}
    total = sum(backlog.values())
    if max_records is None or total <= max_records:
        return {tp: off + backlog[tp] for tp, off in start.items()}
    share = {tp: (max_records * b) // total for tp, b in backlog.items()}
    remainder = max_records - sum(share.values())
    for tp in sorted(backlog, key=lambda t: (-(backlog[t] - share[t]), t)):
        if remainder <= 0:
            break
        if share[tp] < backlog[tp]:
            share[tp] += 1
            remainder -= 1
    return {tp: off + share[tp] for tp, off in start.items()}


def split_range(rng: OffsetRange, max_records_per_task: int) -> list[OffsetRange]:
    """Split a range into consecutive pieces of at most `max_records_per_task` offsets."""
    if max_records_per_task < 1:
        raise ValueError(f"max_records_per_task must be >= 1, got {max_records_per_task}")
    pieces = []
    start = rng.start_offset
    while rng.end_offset - start > max_records_per_task:
        pieces.append(replace(rng, start_offset=start, end_offset=start + max_records_per_task))
        start += max_records_per_task
    pieces.append(replace(rng, start_offset=start))
    return pieces


def group_into_tasks(ranges: Iterable[OffsetRange], task_count: int) -> list[tuple[OffsetRange, ...]]:
    """Balance ranges over at most `task_count` tasks by offsets spanned (largest first onto the
    least loaded task). Empty ranges are dropped; no empty task is returned. Ranges of one
    partition keep their offset order inside a task. Deterministic for equal inputs."""
    if task_count < 1:
        raise ValueError(f"task_count must be >= 1, got {task_count}")
    work = sorted(
        (r for r in ranges if r.size > 0), key=lambda r: (-r.size, r.source_topic, r.partition, r.start_offset)
    )
    heap: list[tuple[int, int]] = [(0, i) for i in range(min(task_count, len(work)))]
    tasks: list[list[OffsetRange]] = [[] for _ in heap]
    for rng in work:
        load, index = heapq.heappop(heap)
        tasks[index].append(rng)
        heapq.heappush(heap, (load + rng.size, index))
    return [tuple(sorted(t, key=lambda r: (r.source_topic, r.partition, r.start_offset))) for t in tasks]


# A topic holding at most 1/(SMALL_TOPIC_SHARE x tasks) of a batch's offsets goes to one task
# whole: with thousands of small topics every task would otherwise hold a partition of nearly
# every topic, and each task pays per topic it writes (the target topics' configs it reads, the
# metadata its links refresh). Balance stays within one such topic of the per-partition one.
SMALL_TOPIC_SHARE = 8


def _balance_keeping_small_topics(stand_ins: Sequence[OffsetRange], count: int) -> list[tuple[OffsetRange, ...]]:
    """`group_into_tasks` of `stand_ins` (one per partition), a small topic's partitions as one unit."""
    total = sum(r.size for r in stand_ins)
    by_topic: dict[str, list[OffsetRange]] = {}
    for r in stand_ins:
        by_topic.setdefault(r.source_topic, []).append(r)
    small = {
        topic
        for topic, parts in by_topic.items()
        if len(parts) > 1 and sum(r.size for r in parts) * SMALL_TOPIC_SHARE * count <= total
    }
    if not small:
        return group_into_tasks(stand_ins, count)
    units = [r for r in stand_ins if r.source_topic not in small] + [
        OffsetRange(topic, -1, 0, sum(r.size for r in by_topic[topic]), "") for topic in sorted(small)
    ]
    return [
        tuple(part for unit in task for part in (by_topic[unit.source_topic] if unit.partition == -1 else [unit]))
        for task in group_into_tasks(units, count)
    ]


def plan_tasks(
    ranges: Sequence[OffsetRange], task_count: int, max_records_per_task: int, keep_partitions_whole: bool = False
) -> list[tuple[OffsetRange, ...]]:
    """Writer tasks for a batch: whole source partitions balanced over `task_count` tasks, or
    over a multiple of it when that keeps each task within `max_records_per_task` offsets (at
    most one task per partition; a partition larger than the cap stays whole).

    All ranges of one source partition land in the same task, in offset order (the copier copies
    them in successive rounds): the tasks of a batch run concurrently, and two tasks writing one
    target partition would interleave its records, breaking per-partition order. For the same
    reason a large range is never split here (admission control sizes the batch instead).
    Exactly-once mode relies on this too (one task per partition per batch);
    `keep_partitions_whole` is kept for callers that say so explicitly: it is always the case.
    """
    if max_records_per_task < 1:
        raise ValueError(f"max_records_per_task must be >= 1, got {max_records_per_task}")
    by_partition: dict[TopicPartition, OffsetRange] = {}
    extra: list[OffsetRange] = []  # further ranges of a partition: they follow it into its task
    for rng in sorted((r for r in ranges if r.size > 0), key=lambda r: (r.source_topic, r.partition, r.start_offset)):
        if (rng.source_topic, rng.partition) in by_partition:
            extra.append(rng)
        else:
            by_partition[(rng.source_topic, rng.partition)] = rng
    sizes = {tp: r.size for tp, r in by_partition.items()}
    for rng in extra:
        sizes[(rng.source_topic, rng.partition)] += rng.size
    total = sum(sizes.values())
    # whole waves of `task_count` tasks: a last, partial wave would leave task slots idle
    waves = -(-total // (max_records_per_task * task_count)) if total else 1
    count = task_count * max(1, waves)
    # balance the partitions (as stand-in ranges spanning their total size), then put each
    # partition's real ranges where its stand-in went
    stand_ins = [replace(r, end_offset=r.start_offset + sizes[tp]) for tp, r in by_partition.items()]
    balanced = _balance_keeping_small_topics(stand_ins, count)
    placed = {(r.source_topic, r.partition): i for i, task in enumerate(balanced) for r in task}
    tasks: list[list[OffsetRange]] = [[] for _ in balanced]
    for rng in [*by_partition.values(), *extra]:
        tasks[placed[(rng.source_topic, rng.partition)]].append(rng)
    return [tuple(sorted(t, key=lambda r: (r.source_topic, r.partition, r.start_offset))) for t in tasks]
