"""MirrorMaker 2's offset translation over the offset syncs a real MM2 wrote (pure, no Kafka client).

Why a second store beside `kmirror_engine.failover.offset_syncs.SyncStore`: MM2's syncs carry no
kafka-mirror headers (nothing says which stretch was copied without gaps), and MM2 does not
translate with every sync it wrote: its `OffsetSyncStore` (apache/kafka connect/mirror, 3.5+)
keeps 64 syncs per partition, spaced by powers of two back from the newest one, and translates a
group at upstream offset `u` with the newest *kept* sync `s` at or before `u`:
`s.downstream` when `u == s.upstream`, else `s.downstream + 1` (records after a sync may have been
dropped, so MM2 never guesses further). A group older than every kept sync gets no checkpoint.
Translating with all syncs would give a different (higher) answer than MM2 for a group far
behind; replaying MM2's own rules gives what its checkpoint task emits, which is what consumers
failing over through `RemoteClusterUtils` get.

The replay is that of a store which read the whole syncs topic after MM2's checkpoint store
loaded (MM2's usual start, `initializationMustReadToEnd = false`), the state of a running MM2.
"""

from __future__ import annotations

from collections.abc import Iterable

from kmirror.mm2.formats import OffsetSync

SLOTS = 64  # MM2's SYNCS_PER_PARTITION (Long.SIZE): one sync per bit of the offset
_LONG_MOD = 1 << 64


def _long(value: int) -> int:
    """`value` as a Java long (two's complement wrap): MM2's bounds overflow on purpose at slot 63."""
    value %= _LONG_MOD
    return value - _LONG_MOD if value >= 1 << 63 else value


def _shift(bits: int) -> int:
    """Java's `1L << bits`."""
    return _long(1 << bits)


def recent_enough(newer: OffsetSync, older: OffsetSync, i: int, j: int) -> bool:
    """MM2's invariant B for slots i <= j: `older` is at most 2^j - 2^i offsets behind `newer`."""
    bound = _long(_long(older.upstream_offset + _shift(j)) - _shift(i))
    return newer is older or bound < 0 or newer.upstream_offset <= bound


def spaced(newer: OffsetSync, older: OffsetSync, i: int) -> bool:
    """MM2's invariant C: slot i+1 is at least 2^max(i-2, 0) offsets behind slot i."""
    bound = _long(older.upstream_offset + _shift(max(i - 2, 0)))
    return newer is older or (bound >= 0 and newer.upstream_offset >= bound)


def _replacement_for(
    syncs: list[OffsetSync], original: list[OffsetSync], current: int, replacement: OffsetSync, index: int
) -> tuple[OffsetSync, int]:
    """The best sync of the previous state that may fill slot `current` (MM2 prefers keeping old,
    distinct syncs over repeating the new one); returns it and the next index to consider."""
    previous = current - 1
    while True:
        old = original[index]
        is_recent = recent_enough(syncs[previous], old, previous, current)
        separated_from_previous = spaced(syncs[previous], old, previous)
        separated_from_next = current + 1 >= SLOTS or spaced(old, syncs[current + 1], current)
        duplicate = index + 1 < SLOTS and old is original[index + 1]
        promote = is_recent and separated_from_previous and separated_from_next
        if promote:
            replacement = old
        skip = duplicate or not separated_from_previous
        if promote or skip:
            index += 1
        if not (index < current and skip):
            return replacement, index


def updated(original: list[OffsetSync], sync: OffsetSync) -> list[OffsetSync]:
    """The slots after `sync` arrived (MM2's `updateSyncArray`); `original` is left unchanged.
    An upstream offset going back (a topic re-created) invalidates every older sync."""
    if sync.upstream_offset < original[0].upstream_offset:
        return [sync] * SLOTS
    syncs = list(original)
    syncs[0] = sync
    replacement, index = sync, 0
    for current in range(1, SLOTS):
        replacement, index = _replacement_for(syncs, original, current, replacement, index)
        if recent_enough(syncs[current - 1], syncs[current], current - 1, current):
            break  # this slot still holds: every later one does too
        syncs[current] = replacement
    return syncs


class Mm2SyncStore:
    """Per source (topic, partition): MM2's 64 kept syncs, newest first."""

    def __init__(self, syncs: Iterable[OffsetSync] = ()) -> None:
        self.partitions: dict[tuple[str, int], list[OffsetSync]] = {}
        for sync in syncs:
            self.add(sync)

    def add(self, sync: OffsetSync) -> None:
        """One sync, in the syncs topic's order."""
        key = (sync.topic, sync.partition)
        kept = self.partitions.get(key)
        self.partitions[key] = [sync] * SLOTS if kept is None else updated(kept, sync)

    def kept(self, topic: str, partition: int) -> list[OffsetSync]:
        """The distinct syncs MM2 would keep, newest first (for tests and reports)."""
        out: list[OffsetSync] = []
        for sync in self.partitions.get((topic, partition), []):
            if not out or out[-1] is not sync:
                out.append(sync)
        return out

    def translate(self, topic: str, partition: int, upstream_offset: int) -> int | None:
        """MM2's checkpoint for a group at `upstream_offset`; None where MM2 emits none (no sync of
        the partition, or the group is older than every kept sync)."""
        syncs = self.partitions.get((topic, partition))
        if not syncs:
            return None
        sync = next((s for s in syncs if s.upstream_offset <= upstream_offset), syncs[-1])
        if sync.upstream_offset > upstream_offset:
            return None
        return sync.downstream_offset + (0 if sync.upstream_offset == upstream_offset else 1)
