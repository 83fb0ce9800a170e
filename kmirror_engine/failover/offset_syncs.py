"""Offset syncs: which downstream offset each upstream offset was mirrored to, per partition.

`SyncStore` is the pure in-memory history and the translation rule; `OffsetSyncTopic`
(`offset_sync_topic.py`) persists it in MM2's OffsetSync format to
`mm2-offset-syncs.<source>.internal` on the TARGET (MM2's `offset-syncs.topic.location=target`)
and loads it back, so translation survives restarts.

Translation (`SyncStore.translate`), for a group at upstream offset `u`, with `s` the greatest
sync whose upstream offset is <= u:
- u == s.upstream: exactly s.downstream;
- MM2's rule otherwise: s.downstream + 1, because records between two syncs may have been
  dropped or shifted (MM2 loses precision there: a group re-reads up to a sync interval);
- better when the history is *continuous* from s to the next sync n (every record between
  them kept s's drift, which the copy loop guarantees by syncing at every drift change):
  min(s.downstream + (u - s.upstream), n.downstream), i.e. the exact shifted offset;
- past the newest sync, inside its *clean tail* (every record from s up to `clean_until`,
  exclusive, was mirrored with s's drift): exactly s.downstream + (u - s.upstream); beyond
  it, the downstream offset after the last mirrored record (never beyond what was mirrored;
  without a known tail s.downstream + 1);
- before the oldest sync: untranslatable (None), the records were never mirrored.
For a fixed store the result is monotonic in u, and it never exceeds the downstream offset
of the first mirrored record at or after u, so a consumer failing over skips nothing.

What is written (`thin_pairs`): only syncs translation needs, as MM2 writes one per
`offset.lag.max` or on a gap. A range that keeps the newest sync's drift writes nothing (the
clean tail grows); a drift change is written unless the next one follows within
`offset_lag_max` records; a head sync (the range's last record) is written at most once per
checkpoint interval per partition (`keep_last`), so a restarted mirror and the driver's second
writer know the head to within an interval. A continuous source at 4,000 partitions writes
4,000 syncs per interval instead of two per partition per batch (docs/failover.md).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, replace
from operator import attrgetter

from kmirror.errors import KmirrorError

MAX_SYNCS_PER_PARTITION = 1024
DENSE_TAIL = 512  # newest syncs always kept as they are
PER_BUCKET = 4  # older syncs kept per power-of-two distance from the newest


class OffsetSyncError(KmirrorError):
    """The offset-syncs topic could not be read or written."""


@dataclass(frozen=True)
class Sync:
    upstream: int
    downstream: int
    # every record strictly between the previous stored sync and this one kept the previous one's drift
    continuous: bool = False

    @property
    def drift(self) -> int:
        return self.downstream - self.upstream


@dataclass
class PartitionSyncs:
    syncs: list[Sync]
    # no unknown record lies between the newest sync and this upstream offset (exclusive)
    mirrored_until: int | None = None
    # every record from the newest sync up to this upstream offset (exclusive) was mirrored with
    # the newest sync's drift: translation there is exact (None: only the sync itself is known)
    clean_until: int | None = None


class SyncStore:
    """Per (source topic, partition) sync history, bounded to `max_per_partition` entries.

    Bounding keeps: the oldest sync (so far-behind groups stay translatable), the newest
    `dense_tail` syncs, and `PER_BUCKET` syncs per power-of-two upstream distance from the
    newest; redundant syncs (same drift as a continuous predecessor) go first, losslessly.
    """

    def __init__(
        self,
        max_per_partition: int = MAX_SYNCS_PER_PARTITION,
        dense_tail: int = DENSE_TAIL,
        offset_lag_max: int | None = None,
    ) -> None:
        """`offset_lag_max`: thin each added range with `thin_pairs` (None: keep every pair)."""
        if dense_tail + 2 > max_per_partition:
            raise ValueError(f"dense_tail {dense_tail} must be < max_per_partition {max_per_partition} - 1")
        self.max_per_partition = max_per_partition
        self.dense_tail = dense_tail
        self.offset_lag_max = offset_lag_max
        self.partitions: dict[tuple[str, int], PartitionSyncs] = {}

    def syncs(self, topic: str, partition: int) -> list[Sync]:
        entry = self.partitions.get((topic, partition))
        return list(entry.syncs) if entry else []

    def mirrored_until(self, topic: str, partition: int) -> int | None:
        entry = self.partitions.get((topic, partition))
        return entry.mirrored_until if entry else None

    def clean_until(self, topic: str, partition: int) -> int | None:
        entry = self.partitions.get((topic, partition))
        return entry.clean_until if entry else None

    def add_segment(
        self,
        topic: str,
        partition: int,
        start_offset: int,
        next_offset: int,
        pairs: Iterable[tuple[int, int]],
        keep_last: bool = False,
    ) -> list[Sync]:
        """Record a copied range [start_offset, next_offset) and its (upstream, downstream) pairs
        (first record, every drift change, last record). Returns the syncs as stored, to persist:
        only those translation needs (`thin_pairs`); `keep_last` also keeps the range's last
        record (a head sync) when nothing else ends the range."""
        entry = self.partitions.setdefault((topic, partition), PartitionSyncs([]))
        pairs = list(pairs)
        joined = entry.mirrored_until is not None and start_offset <= entry.mirrored_until and bool(entry.syncs)
        anchor = entry.syncs[-1] if joined else None
        if anchor is not None and pairs and pairs[0][0] <= anchor.upstream:
            anchor = None  # a replay: the pairs start over (see _append)
        added: list[Sync] = []
        for upstream, downstream, clean in thin_pairs(pairs, self.offset_lag_max, anchor, keep_last):
            stored = self._append(entry, Sync(upstream, downstream, continuous=joined and clean))
            if stored is not None:
                added.append(stored)
            joined = True
        if added or joined:
            entry.mirrored_until = max(next_offset, entry.mirrored_until or next_offset)
        if pairs and entry.syncs:
            # the last pair is the range's last mirrored record: either stored, or skipped because
            # every record since the newest sync kept its drift (thin_pairs keeps it otherwise)
            entry.clean_until = pairs[-1][0] + 1
        self._bound(entry)
        return added

    def add_loaded(
        self, topic: str, partition: int, sync: Sync, next_offset: int | None, clean_until: int | None = None
    ) -> None:
        """Replay one sync read back from the offset-syncs topic (`clean_until`: its header)."""
        entry = self.partitions.setdefault((topic, partition), PartitionSyncs([]))
        if self._append(entry, sync) is not None:
            entry.mirrored_until = next_offset if next_offset is not None else sync.upstream + 1
            entry.clean_until = clean_until if clean_until is not None else sync.upstream + 1
            self._bound(entry)

    def restore(self, topic: str, partition: int, state: PartitionSyncs) -> None:
        """Replace one partition's history with a snapshot of it (`kmirror_engine.failover.offset_sync_snapshots`)."""
        self.partitions[(topic, partition)] = PartitionSyncs(list(state.syncs), state.mirrored_until, state.clean_until)
        self._bound(self.partitions[(topic, partition)])

    @staticmethod
    def _append(entry: PartitionSyncs, sync: Sync) -> Sync | None:
        if entry.syncs:
            newest = entry.syncs[-1]
            if sync.upstream == newest.upstream and sync.downstream == newest.downstream:
                return None  # the same sync again (a replayed batch)
            if sync.upstream <= newest.upstream or sync.downstream <= newest.downstream:
                # the source was mirrored again from an earlier offset: old syncs no longer
                # describe the newest copies, so start over (as MM2's OffsetSyncStore does)
                entry.syncs.clear()
                entry.mirrored_until = entry.clean_until = None
                sync = replace(sync, continuous=False)
        else:
            sync = replace(sync, continuous=False)
        entry.syncs.append(sync)
        return sync

    def _bound(self, entry: PartitionSyncs) -> None:
        if len(entry.syncs) <= self.max_per_partition:
            return
        syncs = entry.syncs
        keep = [True] * len(syncs)
        for i in range(1, len(syncs) - 1):  # lossless: same drift as a continuous predecessor
            if syncs[i].continuous and syncs[i].drift == syncs[i - 1].drift and syncs[i + 1].continuous:
                keep[i] = False
        if sum(keep) > self.max_per_partition:
            keep = self._exponential(syncs, keep)
        entry.syncs = _drop(syncs, keep)

    def _exponential(self, syncs: list[Sync], keep: list[bool]) -> list[bool]:
        newest = syncs[-1].upstream
        kept = [i for i, k in enumerate(keep) if k]
        out = [False] * len(syncs)
        for i in [*kept[-self.dense_tail :], kept[0]]:
            out[i] = True
        per_bucket: dict[int, int] = {}
        for i in reversed(kept[1 : -self.dense_tail]):
            bucket = (newest - syncs[i].upstream).bit_length()
            if per_bucket.get(bucket, 0) < PER_BUCKET:
                per_bucket[bucket] = per_bucket.get(bucket, 0) + 1
                out[i] = True
        return out

    def translate(self, topic: str, partition: int, upstream_offset: int) -> int | None:
        """The downstream offset a group at `upstream_offset` resumes from; None when untranslatable."""
        entry = self.partitions.get((topic, partition))
        if entry is None or not entry.syncs:
            return None
        return translate_through(entry.syncs, upstream_offset, clean_until=entry.clean_until)


def translate_through(
    syncs: list[Sync], offset: int, *, back: bool = False, clean_until: int | None = None
) -> int | None:
    """`offset` on one side of `syncs` (upstream; downstream when `back`) translated to the other:
    exact at a sync, carried forward across a continuous stretch up to the next sync, else just
    past the sync before it; `clean_until` (the store's clean tail after the newest sync) carries
    the newest sync's drift up to it. None when `offset` stands before every sync."""
    side, other = (_DOWNSTREAM, _UPSTREAM) if back else (_UPSTREAM, _DOWNSTREAM)
    index = bisect.bisect_right([side(s) for s in syncs], offset) - 1
    if index < 0:
        return None
    sync = syncs[index]
    if offset == side(sync):
        return other(sync)
    if index + 1 < len(syncs) and syncs[index + 1].continuous:
        return min(other(sync) + (offset - side(sync)), other(syncs[index + 1]))
    if index + 1 == len(syncs) and clean_until is not None and clean_until > side(sync):
        return other(sync) + (min(offset, clean_until) - side(sync))
    return other(sync) + 1


_UPSTREAM, _DOWNSTREAM = attrgetter("upstream"), attrgetter("downstream")


def thin_pairs(
    pairs: list[tuple[int, int]], offset_lag_max: int | None, anchor: Sync | None, keep_last: bool = False
) -> list[tuple[int, int, bool]]:
    """The pairs of one copied range worth persisting, as (upstream, downstream, clean).

    `pairs` is what the copy loop reports (first record, every drift change, last record);
    `anchor` the stored sync the range continues from, its clean tail reaching the range (None:
    a new stretch). MM2's `offset.lag.max` rule, made exact where it can be:
    - a pair with the drift of the last kept pair (or the anchor) says nothing and is dropped,
      losslessly: the store's clean tail covers it;
    - a drift change is kept, unless the next pair follows within `offset_lag_max` downstream
      of the last kept one: then it is dropped and the stretch is *dirty* until the next kept
      pair (`clean` False: translation there falls back to MM2's `+1` rule, re-reading fewer
      than `offset_lag_max` records);
    - the last pair is kept when the stretch is dirty or its drift changed, so the tail after a
      range is always clean (exact up to the last mirrored record), and with `keep_last`.
    None keeps every pair.
    """
    if offset_lag_max is None:
        return [(u, d, True) for u, d in pairs]
    out: list[tuple[int, int, bool]] = []
    last = (anchor.upstream, anchor.downstream) if anchor is not None else None
    dirty = False
    for i, (upstream, downstream) in enumerate(pairs):
        final = i == len(pairs) - 1
        same = last is not None and not dirty and downstream - upstream == last[1] - last[0]
        if same and not (final and keep_last):
            continue  # the stretch keeps the kept pair's drift: nothing to say
        following = pairs[i + 1] if not final else None
        # the next pair is the range's last record at this drift: dropping this one would only
        # make that one needed, so keep this one (exact) and let that one go
        closes = following is not None and following[1] - following[0] == downstream - upstream
        keep = same or last is None or following is None or closes or following[1] - last[1] > offset_lag_max
        if keep:
            out.append((upstream, downstream, not dirty))
            last, dirty = (upstream, downstream), False
        else:
            dirty = True
    return out


def _drop(syncs: list[Sync], keep: list[bool]) -> list[Sync]:
    """Remove unkept syncs; a kept sync stays continuous only if everything dropped before it
    was continuous with the same drift as the kept sync preceding them."""
    out: list[Sync] = []
    intact = True
    for sync, kept in zip(syncs, keep, strict=True):
        if kept:
            out.append(sync if intact or not sync.continuous else replace(sync, continuous=False))
            intact = True
        else:
            intact = intact and sync.continuous and bool(out) and sync.drift == out[-1].drift
    return out
