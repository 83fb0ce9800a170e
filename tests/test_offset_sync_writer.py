"""The offset-sync writer writes what translation needs, off the commit path where it can
(issue 26): a continuous flow writes a head sync per partition per checkpoint interval, not
two syncs per partition per batch; snapshots are written by a background thread; a clean stop
leaves the head persisted, so a restarted mirror translates the head exactly."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from kmirror.flow.views import CheckpointSettings
from kmirror_engine.failover.offset_sync_snapshots import SnapshotJob, freeze
from kmirror_engine.failover.offset_sync_writer import OffsetSyncWriter
from kmirror_engine.failover.offset_syncs import Sync, SyncStore
from kmirror_engine.observability.progress import BatchProgress, PartitionProgress
from tests.sync_log_fakes import FakeSyncLog, SyncWrite

PARTITIONS = 4


def checkpoints(interval_ms: int = 60_000) -> CheckpointSettings:
    """The writer's view of a flow: checkpoints every `interval_ms`, MM2's offset.lag.max 100."""
    return CheckpointSettings(
        emit=True, interval_ms=interval_ms, sync_group_offsets=False, offset_lag_max=100, metrics_port=None
    )


def writer_of(log: Any, interval_ms: int = 60_000, clock: Any = time.monotonic) -> OffsetSyncWriter:
    """A writer of flow west->east over `log`, loaded (as `OffsetSyncWriter.for_flow` does)."""
    return OffsetSyncWriter("west->east", checkpoints(interval_ms), log, Metrics(), clock=clock).load()  # type: ignore[arg-type]


class Metrics:
    def __init__(self) -> None:
        self.failures: list[tuple[str, BaseException]] = []

    def side_work(self, work: str, action: Any) -> Any:
        try:
            return action()
        except Exception as exc:  # recorded, as FailoverMetrics does
            self.failures.append((work, exc))
            return None


class RecordingLog(FakeSyncLog):
    """A SyncLog that keeps what is written, as OffsetSyncTopic would (headers included)."""

    def __init__(self, snapshot_due: bool = False, snapshot_gate: threading.Event | None = None) -> None:
        super().__init__()
        self.writes: list[tuple[str, int, Sync, int, int | None]] = []  # topic, partition, sync, next, clean
        self.due = snapshot_due
        self.gate = snapshot_gate
        self.snapshots: list[SnapshotJob] = []

    def record(self, write: SyncWrite) -> None:
        last = len(write.syncs) - 1
        for i, sync in enumerate(write.syncs):
            clean = write.clean_until if i == last else None
            self.writes.append((write.topic, write.partition, sync, write.next_offset, clean))

    def snapshot_due(self) -> bool:
        return self.due

    def capture(self, store: SyncStore) -> SnapshotJob:
        return SnapshotJob(len(self.writes), freeze(store), 0)  # as SyncLog.capture

    def write_captured(self, job: SnapshotJob) -> int:
        if self.gate is not None:
            assert self.gate.wait(10), "the test never opened the gate"
        self.snapshots.append(job)
        self.due = False
        return len(job.states)

    def close(self) -> None: ...

    def loaded_store(self) -> SyncStore:
        store = SyncStore(offset_lag_max=100)
        for topic, partition, sync, next_offset, clean in self.writes:
            store.add_loaded(topic, partition, sync, next_offset, clean)
        return store


def continuous_batch(batch: int, records: int = 100) -> BatchProgress:
    parts = tuple(
        PartitionProgress(
            "orders",
            p,
            "west.orders",
            batch * records,
            (batch + 1) * records,
            records,
            records * 10,
            None,
            ((batch * records, batch * records + 5), ((batch + 1) * records - 1, (batch + 1) * records + 4)),
        )
        for p in range(PARTITIONS)
    )
    return BatchProgress(batch, parts, 10, {("orders", p): (batch + 1) * records for p in range(PARTITIONS)})


def test_a_continuous_flow_writes_a_head_sync_per_partition_per_interval_not_per_batch() -> None:
    clock = [0.0]
    log = RecordingLog()
    writer = writer_of(log, clock=lambda: clock[0])
    for batch in range(600):  # ten minutes of a batch a second
        writer.record(continuous_batch(batch))
        clock[0] += 1.0
    # the first batch (a new stretch: its first record, and a head) then one head per minute
    assert len(log.writes) <= PARTITIONS * (2 + 10), len(log.writes)  # was 2 per partition per batch: 4,800
    assert len(log.writes) >= PARTITIONS * 10
    for p in range(PARTITIONS):  # the writer's own store is exact everywhere ...
        assert writer.store.translate("orders", p, 12_345) == 12_350
        assert writer.store.translate("orders", p, 60_000) == 60_005  # ... up to the head and just past it
    loaded = log.loaded_store()
    for p in range(PARTITIONS):  # and a store loaded back agrees inside what it read
        known = loaded.mirrored_until("orders", p)
        assert known is not None and known >= 60_000 - 60 * 100
        for u in (0, 5_000, 33_333, known - 1, known):
            assert loaded.translate("orders", p, u) == writer.store.translate("orders", p, u) == u + 5


def test_a_clean_stop_persists_the_head_so_a_restart_translates_it_exactly() -> None:
    clock = [0.0]
    log = RecordingLog()
    writer = writer_of(log, clock=lambda: clock[0])
    for batch in range(30):
        writer.record(continuous_batch(batch))
        clock[0] += 1.0
    before = log.loaded_store()
    assert before.translate("orders", 0, 2_999) != 3_004  # the head is not persisted yet (written at 0 s only)
    writer.close()
    after = log.loaded_store()
    for p in range(PARTITIONS):
        assert after.translate("orders", p, 2_999) == 3_004 and after.translate("orders", p, 3_000) == 3_005


def test_a_snapshot_is_written_off_the_commit_path() -> None:
    gate = threading.Event()
    log = RecordingLog(snapshot_due=True, snapshot_gate=gate)
    writer = writer_of(log, interval_ms=0)
    started = time.monotonic()
    writer.record(continuous_batch(0))  # a snapshot is due: captured, then written by a thread
    writer.record(continuous_batch(1))  # the next batch does not wait for it either
    assert time.monotonic() - started < 2.0, "record() waited for the snapshot"
    assert log.snapshots == []
    gate.set()
    writer.wait_for_snapshot(10)
    assert len(log.snapshots) == 1
    # the captured copy is frozen: batch 1's syncs (added after the capture) are not in it
    captured = log.snapshots[0].states[("orders", 0)]
    assert captured.syncs[-1].upstream < 100 <= writer.store.syncs("orders", 0)[-1].upstream


class FailingFlushLog(RecordingLog):
    """A SyncLog whose next flush fails (`fail_next`), losing every sync written since the last one."""

    def __init__(self) -> None:
        super().__init__()
        self.confirmed = 0
        self.fail_next = False

    def flush(self) -> None:
        if self.fail_next:
            self.fail_next = False
            del self.writes[self.confirmed :]
            raise RuntimeError("offset sync delivery failed: broker not available")
        self.confirmed = len(self.writes)


def _range(start: int, end: int, drift: int) -> BatchProgress:
    part = PartitionProgress(
        "orders",
        0,
        "west.orders",
        start,
        end,
        end - start,
        0,
        None,
        ((start, start + drift), (end - 1, end - 1 + drift)),
    )
    return BatchProgress(start, (part,), 10, {("orders", 0): end})


def test_a_failed_sync_write_breaks_the_persisted_continuity_instead_of_bridging_the_lost_syncs() -> None:
    """Issue 41: the syncs of [250, 300) (a drift change: the target lost 10 records) fail to be
    written; the failure is raised (the sink logs it) and the next batch's head sync is written.
    Before: written as continuous with (249, 254), so a history loaded back translated 300 to 305
    (the record sits at 295: a group failing over skipped 10 records). Now it is not continuous:
    the loaded history re-reads (255) instead of skipping, and the next sync is written at once."""
    clock = [0.0]
    log = FailingFlushLog()
    writer = writer_of(log, interval_ms=1000, clock=lambda: clock[0])
    writer.record(_range(200, 250, 5))
    log.fail_next = True
    with pytest.raises(RuntimeError, match="delivery failed"):
        writer.record(_range(250, 300, -5))
    clock[0] += 0.1  # well inside the head interval: the head after the loss is written anyway
    writer.record(_range(300, 350, -5))
    assert writer.store.translate("orders", 0, 300) == 295  # the writer's own store holds every sync
    loaded = log.loaded_store()
    assert loaded.translate("orders", 0, 349) == 344  # re-synced by the head after the loss
    translated = loaded.translate("orders", 0, 300)
    assert translated is not None and translated <= 295, translated  # never past the group's record
    assert [(s.upstream, s.continuous) for _, _, s, _, _ in log.writes][-1] == (349, False)
