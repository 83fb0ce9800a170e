"""What every copy loop (Python, native, batch) shares: the planned range (`CopyRange`), the
error that fails its batch (`CopyError`), the client tuning layered under and over the configured
clients, rounds of one range per source partition, and the offset syncs of a finished range.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError

from kmirror.errors import KmirrorError
from kmirror_engine.observability.progress import PartitionProgress

# Messages per consume() call: 1,000 used ~25% less CPU per record than 10,000 here (the
# batch of Message objects stays in cache); both keep the prefetch queue full.
CONSUME_BATCH = 1_000
# The consumer position must move at least once per this many seconds, or the copy fails
# (a range planned past what the broker serves would otherwise hang the task forever).
DEFAULT_STALL_TIMEOUT_S = 300.0

# Throughput defaults layered *under* the configured clients (user/clients.py values win):
# large fetches and batches: fewer, bigger requests (linger.ms 100 rather than 20: ~5% more
# records/s measured) save client and broker CPU on a machine the copy shares with the brokers.
CONSUMER_TUNING: dict[str, Any] = {
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 8 * 1024 * 1024,
    # bounds the prefetch (memory) per copy loop; 64 MiB is ~0.5 s of records at full speed
    "queued.max.messages.kbytes": 64 * 1024,
    "fetch.wait.max.ms": 50,
}
# Layered *over* the configured consumer: the end of a range whose last offsets are
# transaction markers is only seen through the partition-EOF event.
# auto.offset.reset=error: a start offset deleted by retention after planning must fail the
# copy, never silently jump to the log end (librdkafka's default) and skip records.
CONSUMER_REQUIRED: dict[str, Any] = {"enable.partition.eof": True, "auto.offset.reset": "error"}
# Consumer events that only mean "a broker is unreachable for now": librdkafka reconnects by
# itself, so they are logged and the copy waits (bounded by the stall timeout).
TRANSIENT = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError._RESOLVE,
    }
)
PRODUCER_TUNING: dict[str, Any] = {
    "linger.ms": 100,
    "batch.size": 1024 * 1024,
    "batch.num.messages": 100_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 128 * 1024,  # bounds memory per copy loop
}


class CopyError(KmirrorError):
    """A record could not be mirrored; the batch must be retried (nothing was committed)."""


@dataclass(frozen=True)
class CopyRange:
    """One planned offset range: [start_offset, end_offset) of a source partition."""

    source_topic: str
    partition: int
    start_offset: int
    end_offset: int
    target_topic: str
    skipped_before: int = 0  # offsets retention deleted before start_offset (fail_on_data_loss=false)
    rate_share: float | None = None  # of the flow's rate limits (`rate_limit.range_shares`); None: not planned
    source_end: int | None = None  # the source partition's end offset when planned (None: unknown)


def closed_syncs(
    syncs: Sequence[tuple[int, int]], drift: int | None, last_upstream: int
) -> tuple[tuple[int, int], ...]:
    """A range's offset syncs for its progress: the first record and every drift change as
    recorded, plus the last record when it is not already the last sync (every copy loop's rule)."""
    closed = list(syncs)
    if drift is not None and closed[-1][0] != last_upstream:
        closed.append((last_upstream, last_upstream + drift))
    return tuple(closed)


def copy_in_rounds(
    ranges: Iterable[CopyRange], copy_round: Callable[[Sequence[CopyRange]], list[PartitionProgress]]
) -> list[PartitionProgress]:
    """Every range copied by `copy_round`, one range per source partition per round (`rounds_of`);
    their progress in input order (the native and batch loops' `copy`)."""
    ordered = list(ranges)
    results: dict[int, PartitionProgress] = {}
    for round_ in rounds_of(ordered):
        for index, progress in zip(round_, copy_round([ordered[i] for i in round_]), strict=True):
            results[index] = progress
    return [results[i] for i in range(len(ordered))]


def rounds_of(ranges: Sequence[CopyRange]) -> list[list[int]]:
    """Group range indexes so that each round holds at most one range per source partition."""
    rounds: list[list[int]] = []
    seen: list[set[tuple[str, int]]] = []
    for index, rng in enumerate(ranges):
        key = (rng.source_topic, rng.partition)
        for round_, keys in zip(rounds, seen, strict=True):
            if key not in keys:
                round_.append(index)
                keys.add(key)
                break
        else:
            rounds.append([index])
            seen.append({key})
    return rounds
