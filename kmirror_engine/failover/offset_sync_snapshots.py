"""The persisted offset-sync history of a flow, loaded in time that does not grow with its age.

Two topics on the TARGET:
- MM2's `mm2-offset-syncs.<source>.internal`: every persisted sync, MM2's OffsetSync format
  (plus kmirror's two headers), as before; MM2 tooling keeps reading it. Here it is the *tail*.
- `kmirror-offset-syncs-snapshot.<source>.internal` (one partition, compacted): snapshots of the
  in-memory `SyncStore`. A *generation* is one record per partition (its bounded history and
  the offset of the syncs topic it covers), then a marker record naming the generation's first
  offset. Keys are per partition (and one marker key), so compaction keeps one generation.

Loading (`SyncLog.load`): find the newest marker by reading back from the end (it is normally
the last record), read the snapshot records from its generation's start (O(partitions)), then
the syncs topic from where the snapshots end (the tail, bounded by `snapshot_after_syncs`
syncs or `snapshot_interval_s` of them). Each partition snapshot says which syncs-topic offset
it covers, so a tail record already inside it is skipped, and a partition snapshotted later
than the marker (a generation cut short by a crash) is still used.

The writer (the process that persists syncs: the sink's commit worker) writes a generation
when the tail is long or old enough. A failed snapshot never fails a batch: the tail stays in
the syncs topic, and the next batch tries again (counted by the caller).
"""

from __future__ import annotations

import json
import logging
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kmirror.flow.replication_policy import offset_syncs_topic
from kmirror.flow.spec import ClusterEndpoint
from kmirror_engine.clients.topic_admin import ensure_topic
from kmirror_engine.failover.offset_sync_topic import OffsetSyncTopic, read_partition0
from kmirror_engine.failover.offset_syncs import OffsetSyncError, PartitionSyncs, Sync, SyncStore
from kmirror_engine.planning.internal_names import layout, reader_group, snapshot_topic

log = logging.getLogger("kmirror.failover")

SNAPSHOT_AFTER_SYNCS = 10_000  # a tail this long loads in ~0.2 s (~57k syncs/s measured here)
SNAPSHOT_INTERVAL_S = 3600.0  # and at least hourly, far inside the syncs topic's 7-day retention
# a load never reads more of the tail than this (~5 s at the ~57k syncs/s measured here): when
# snapshots keep failing, restart time stays flat and the oldest tail is not loaded (reported)
MAX_TAIL_SYNCS = 300_000
SNAPSHOT_TOPIC_CONFIG = layout("offset_sync_snapshots")
VERSION = 1  # 1 added clean_until; 0 is still read (its clean tail is the newest sync itself)
MARKER_KEY = b"\x00generation"
PARTITION_KIND = b"\x01"
_HEAD_V0 = struct.Struct(">hqqi")  # version, syncs_offset, mirrored_until (-1: none), count
_HEAD = struct.Struct(">hqqiq")  # ... then clean_until (-1: none)
_ENTRY = struct.Struct(">qqb")  # upstream, downstream, continuous
_MARKER = struct.Struct(">hqqi")  # version, first_offset, syncs_offset, partitions


@dataclass(frozen=True)
class PartitionSnapshot:
    topic: str
    partition: int
    syncs_offset: int  # every record of the syncs topic below this offset is reflected in `state`
    state: PartitionSyncs


@dataclass(frozen=True)
class Marker:
    first_offset: int  # snapshot-topic offset of the generation's first partition record
    syncs_offset: int
    partitions: int


def encode_partition(snapshot: PartitionSnapshot) -> tuple[bytes, bytes]:
    name = snapshot.topic.encode()
    key = PARTITION_KIND + struct.pack(">h", len(name)) + name + struct.pack(">i", snapshot.partition)
    state = snapshot.state
    until = -1 if state.mirrored_until is None else state.mirrored_until
    clean = -1 if state.clean_until is None else state.clean_until
    value = _HEAD.pack(VERSION, snapshot.syncs_offset, until, len(state.syncs), clean) + b"".join(
        _ENTRY.pack(s.upstream, s.downstream, 1 if s.continuous else 0) for s in state.syncs
    )
    return key, value


def encode_marker(marker: Marker) -> tuple[bytes, bytes]:
    return MARKER_KEY, _MARKER.pack(VERSION, marker.first_offset, marker.syncs_offset, marker.partitions)


def decode_snapshot_record(key: bytes, value: bytes) -> PartitionSnapshot | Marker:
    """Raises OffsetSyncError on a record this version cannot read."""
    try:
        if key == MARKER_KEY:
            version, first, syncs_offset, partitions = _MARKER.unpack(value)
            _check_version(version)
            return Marker(first, syncs_offset, partitions)
        if key[:1] != PARTITION_KIND:
            raise ValueError(f"unknown key kind {key[:1]!r}")
        (size,) = struct.unpack_from(">h", key, 1)
        topic = key[3 : 3 + size].decode()
        (partition,) = struct.unpack_from(">i", key, 3 + size)
        (version,) = struct.unpack_from(">h", value)
        _check_version(version)
        if version == 0:
            _, syncs_offset, until, count = _HEAD_V0.unpack_from(value)
            clean, head = -1, _HEAD_V0.size
        else:
            _, syncs_offset, until, count, clean = _HEAD.unpack_from(value)
            head = _HEAD.size
        syncs = [
            Sync(up, down, bool(cont))
            for up, down, cont in (_ENTRY.unpack_from(value, head + i * _ENTRY.size) for i in range(count))
        ]
        if clean < 0 and syncs:
            clean = syncs[-1].upstream + 1
        state = PartitionSyncs(syncs, None if until < 0 else until, None if clean < 0 else clean)
        return PartitionSnapshot(topic, partition, syncs_offset, state)
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise OffsetSyncError(f"unreadable offset-sync snapshot record (key {key[:40]!r}): {exc}") from exc


def _check_version(version: int) -> None:
    if version not in (0, VERSION):
        raise ValueError(f"snapshot version {version}, this kafka-mirror reads versions 0 to {VERSION}")


def read_newest_generation(
    endpoint: ClusterEndpoint, topic: str, timeout_s: float = 60.0
) -> tuple[dict[tuple[str, int], PartitionSnapshot], int]:
    """The newest snapshot of every partition from the newest complete generation on, and the
    number of records read (O(partitions), whatever the topic's age or compaction)."""
    from confluent_kafka import TopicPartition

    from kmirror_engine.clients.factory import new_consumer

    deadline = time.monotonic() + timeout_s
    probe = new_consumer(
        endpoint, role="internal-topic-reader", group_id=reader_group(topic), **{"enable.auto.commit": False}
    )
    try:
        metadata = probe.list_topics(topic, timeout=30).topics.get(topic)
        if metadata is None or metadata.error is not None or 0 not in metadata.partitions:
            return {}, 0
        low, high = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    finally:
        probe.close()
    read, end, window = 0, high, 64
    marker: tuple[int, Marker] | None = None
    while marker is None and end > low:  # the newest marker, reading back in doubling windows
        start = max(low, end - window)
        for msg in read_partition0(endpoint, topic, max(deadline - time.monotonic(), 1.0), start, end):
            read += 1
            record = decode_snapshot_record(msg.key() or b"", msg.value() or b"")
            if isinstance(record, Marker):
                marker = (msg.offset(), record)
        end, window = start, window * 2
    if marker is None:
        return {}, read
    newest: dict[tuple[str, int], PartitionSnapshot] = {}
    for msg in read_partition0(endpoint, topic, max(deadline - time.monotonic(), 1.0), marker[1].first_offset, high):
        read += 1
        record = decode_snapshot_record(msg.key() or b"", msg.value() or b"")
        if isinstance(record, PartitionSnapshot):
            key = (record.topic, record.partition)
            if key not in newest or record.syncs_offset >= newest[key].syncs_offset:
                newest[key] = record
    return newest, read


def freeze(store: SyncStore) -> dict[tuple[str, int], PartitionSyncs]:
    """A copy of every partition's state that later batches do not change (syncs are immutable)."""
    return {
        key: PartitionSyncs(list(state.syncs), state.mirrored_until, state.clean_until)
        for key, state in store.partitions.items()
    }


@dataclass(frozen=True)
class SnapshotJob:
    """A store captured for one generation: what `SyncLog.write_captured` writes."""

    syncs_offset: int  # the syncs topic below this offset is reflected in `states`
    states: dict[tuple[str, int], PartitionSyncs]
    tail_syncs: int  # the tail the generation covers (since_snapshot when captured)


class SyncLog:
    """One flow's persisted sync history (see the module docstring): load, append, snapshot."""

    def __init__(
        self,
        target: ClusterEndpoint,
        source_alias: str,
        snapshot_after_syncs: int = SNAPSHOT_AFTER_SYNCS,
        snapshot_interval_s: float = SNAPSHOT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        max_tail_syncs: int = MAX_TAIL_SYNCS,
    ) -> None:
        self.target = target
        self.syncs = OffsetSyncTopic(target, offset_syncs_topic(source_alias))
        self.snapshot_topic = snapshot_topic(source_alias)
        self.snapshot_after_syncs = snapshot_after_syncs
        self.snapshot_interval_s = snapshot_interval_s
        self.max_tail_syncs = max_tail_syncs
        self.clock = clock
        self._since_loaded = 0  # see since_snapshot
        self.write = self.syncs.write  # appends go to the topic as they are; it counts them (`queued`)
        self.last_snapshot_s = clock()
        self.last_load: dict[str, int] = {}  # records read by the last full load, for tests and logs
        self._producer: Any = None  # DeliveryConfirmingProducer
        self._offsets: list[int] = []

    def ensure_exists(self) -> None:
        self.syncs.ensure_exists()
        ensure_topic(self.target, self.snapshot_topic, SNAPSHOT_TOPIC_CONFIG)

    def load(self, store: SyncStore, timeout_s: float = 60.0) -> int:
        """Fill `store` from the newest snapshots and the tail after them; returns the syncs loaded
        from the tail. Bounded whatever failed before: an unreadable snapshot topic is reported
        (a `kmirror offset_sync_load` warning) and the load goes on from the tail alone, and a tail
        longer than `max_tail_syncs` (snapshots failing for long) is read from its newest
        `max_tail_syncs` records only, each partition's first sync there loaded as after a gap
        (translation there falls back to MM2's rule; partitions with no sync in the window keep
        their snapshot or become untranslatable: never wrong, reported). Raises OffsetSyncError
        when the syncs topic cannot be read within `timeout_s`."""
        started = time.monotonic()
        problems: list[str] = []
        try:
            snapshots, snapshot_records = read_newest_generation(self.target, self.snapshot_topic, timeout_s)
        except OffsetSyncError as exc:
            snapshots, snapshot_records = {}, 0
            problems.append(f"snapshots unreadable ({exc}); loading from the syncs topic alone")
        for (topic, partition), snapshot in sorted(snapshots.items()):
            store.restore(topic, partition, snapshot.state)
        if snapshots:
            self.syncs.read_until = max(self.syncs.read_until, min(s.syncs_offset for s in snapshots.values()))
        low, high = self.syncs.bounds()
        skipped = max(high - max(self.syncs.read_until, low) - self.max_tail_syncs, 0)
        if skipped:
            self.syncs.read_until = high - self.max_tail_syncs
            problems.append(
                f"the tail after the newest snapshot holds {skipped + self.max_tail_syncs} syncs; "
                f"read the newest {self.max_tail_syncs} only ({skipped} older ones not loaded: "
                "groups behind them translate by MM2's rule or not at all)"
            )
        remaining = max(timeout_s - (time.monotonic() - started), 1.0)
        skip = {key: s.syncs_offset for key, s in snapshots.items()}
        tail = self.syncs.load(store, remaining, skip_below=skip, after_gap=bool(skipped))
        self.since_snapshot = tail
        self.last_load = {
            "snapshot_records": snapshot_records,
            "partitions": len(snapshots),
            "tail_records": tail,
            "tail_skipped": skipped,
        }
        for problem in problems:
            log.warning("offset sync history of %s: %s", self.syncs.topic, problem)
            print(
                "kmirror offset_sync_load " + json.dumps({"topic": self.syncs.topic, "problem": problem}),
                file=sys.stderr,
                flush=True,
            )
        return tail

    def catch_up(self, store: SyncStore, timeout_s: float = 60.0) -> int:
        """Read the syncs appended since the last load (for readers next to the writer)."""
        return self.syncs.load(store, timeout_s)

    @property
    def since_snapshot(self) -> int:
        """Syncs in the tail (loaded or written) not in a snapshot yet."""
        return self._since_loaded + self.syncs.queued

    @since_snapshot.setter
    def since_snapshot(self, count: int) -> None:
        self._since_loaded = count - self.syncs.queued

    def flush(self) -> None:
        self.syncs.flush()

    def snapshot_due(self) -> bool:
        if self.since_snapshot == 0:
            return False
        old = self.clock() - self.last_snapshot_s >= self.snapshot_interval_s
        return self.since_snapshot >= self.snapshot_after_syncs or old

    def capture(self, store: SyncStore) -> SnapshotJob:
        """A frozen copy of `store` for a generation (call after `flush`, so it covers every sync
        written). Cheap (references to immutable syncs): the encoding and writing happen in
        `write_captured`, off the commit path."""
        return SnapshotJob(max(self.syncs.read_until, self.syncs.written_until), freeze(store), self.since_snapshot)

    def write_snapshot(self, store: SyncStore, timeout_s: float = 30.0) -> int:
        """Capture and write a generation of `store` now (see `capture`, `write_captured`)."""
        return self.write_captured(self.capture(store), timeout_s)

    def write_captured(self, job: SnapshotJob, timeout_s: float = 30.0) -> int:
        """Write a generation of a captured store; returns the partition records written. Raises
        OffsetSyncError on a failed delivery. One at a time (it owns the snapshot producer)."""
        records = [
            encode_partition(PartitionSnapshot(t, p, job.syncs_offset, state))
            for (t, p), state in sorted(job.states.items())
        ]
        if not records:
            return 0
        for key, value in records:
            self._produce(key, value)
        first = min(self._confirm(timeout_s))  # the marker goes out alone, after its generation
        self._produce(*encode_marker(Marker(first, job.syncs_offset, len(records))))
        self._confirm(timeout_s)
        self.since_snapshot = max(self.since_snapshot - job.tail_syncs, 0)
        self.last_snapshot_s = self.clock()
        return len(records)

    def _produce(self, key: bytes, value: bytes) -> None:
        if self._producer is None:  # rebuilt inside when the target's credentials rotate
            from kmirror_engine.clients.factory import renewing_delivery_producer

            self._producer = renewing_delivery_producer(
                self.target,
                role="offset-sync-snapshots-producer",
                what="offset-sync snapshot",
                counted="snapshot record",
                error=OffsetSyncError,
                on_delivered=self._delivered,
            )
        self._producer.produce(self.snapshot_topic, value, key, partition=0)

    def _delivered(self, msg: Any) -> None:
        self._offsets.append(msg.offset())

    def _confirm(self, timeout_s: float) -> list[int]:
        try:
            self._producer.confirm(timeout_s)
        finally:
            offsets, self._offsets = self._offsets, []
        if not offsets:  # no record confirmed written
            raise OffsetSyncError("0 snapshot record(s) failed, 0 unconfirmed; first: []")
        return offsets

    def close(self) -> None:
        self.syncs.close()
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None
