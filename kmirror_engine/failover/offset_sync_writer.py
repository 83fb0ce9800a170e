"""The offset-sync part of a flow's failover work: the in-memory history (`SyncStore`) and its
persisted log (`SyncLog`).

- `load()` (`for_flow` calls it): ensure the syncs topic and load the history (newest
  snapshots + short tail, restart-safe); raises if it cannot be read (nothing can be translated
  without it). The constructor takes the flow's `CheckpointSettings` view and does no I/O.
- `record(batch)`: store and persist the syncs translation needs (drift changes, MM2's
  `offset.lag.max` rule, and a head sync per partition at most once per checkpoint interval:
  `SyncStore.add_segment`), ranges in offset order; raises if they cannot be persisted
  (translation state is never silently behind). A snapshot of the history, when due, is
  captured here and written by a background thread: never on the commit path.
- `catch_up()`: before a checkpoint round in a process that wrote no syncs (another process,
  the sink's commit worker, may be the writer), so it never checkpoints from a stale history.
- `close()`: head syncs for partitions whose clean tail is not persisted yet (a restart after
  a clean stop translates exactly), then waits for a snapshot in flight.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kmirror.flow.views import CheckpointSettings, FlowRoute
from kmirror_engine.failover.failover_metrics import FailoverMetrics
from kmirror_engine.failover.offset_sync_snapshots import SyncLog
from kmirror_engine.failover.offset_syncs import Sync, SyncStore
from kmirror_engine.observability.progress import BatchProgress

log = logging.getLogger("kmirror.failover")
SNAPSHOT_JOIN_S = 30.0  # close() waits this long for a snapshot in flight


class OffsetSyncWriter:
    def __init__(
        self,
        flow_id: str,
        checkpoints: CheckpointSettings,
        sync_log: Any,
        metrics: FailoverMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """A writer over `sync_log` (a SyncLog, or a fake with its methods), empty: no I/O here;
        `load()` reads the history (`for_flow` builds the real one, loaded)."""
        self.flow_id = flow_id
        self.metrics = metrics
        self.store = SyncStore(offset_lag_max=checkpoints.offset_lag_max)
        self.sync_log = sync_log
        self.wrote_syncs = False  # True once this process persisted syncs: its store is the newest
        self.head_interval_s = checkpoints.interval_ms / 1000
        self.clock = clock
        self.last_written: dict[tuple[str, int], float] = {}  # when each partition last got a sync
        self.persisted_clean: dict[tuple[str, int], int] = {}  # the clean tail the log knows, per partition
        self.next_offsets: dict[tuple[str, int], tuple[int, int | None]] = {}  # newest (next_offset, source end)
        self._snapshot: threading.Thread | None = None
        self.unconfirmed: dict[tuple[str, int], int | None] = {}  # written since the last flush: clean tail
        self.lost: set[tuple[str, int]] = set()  # a flush of their syncs failed: the next one breaks continuity

    @classmethod
    def for_flow(
        cls, route: FlowRoute, checkpoints: CheckpointSettings, metrics: FailoverMetrics, sync_log: Any = None
    ) -> OffsetSyncWriter:
        """The writer of `route`'s syncs (to its target's log, `SyncLog`, unless `sync_log` is
        given), loaded: raises if the history cannot be read."""
        sync_log = sync_log if sync_log is not None else SyncLog(route.target, route.source.alias)
        return cls(route.flow_id, checkpoints, sync_log, metrics).load()

    def load(self) -> OffsetSyncWriter:
        """Ensure the syncs topic and load the history (module doc); returns this writer."""
        self.sync_log.ensure_exists()
        self.sync_log.load(self.store)
        log.info("flow %s: loaded offset syncs: %s", self.flow_id, self.sync_log.last_load)
        return self

    def record(self, batch: BatchProgress) -> None:
        now = self.clock()
        for p in sorted(batch.partitions, key=lambda p: (p.source_topic, p.partition, p.start_offset)):
            key = (p.source_topic, p.partition)
            head_due = key in self.lost or now - self.last_written.get(key, float("-inf")) >= self.head_interval_s
            added = self.store.add_segment(
                p.source_topic, p.partition, p.start_offset, p.next_offset, p.offset_syncs, keep_last=head_due
            )
            end = batch.source_end_offsets.get(key)
            self.next_offsets[key] = (p.next_offset, end)
            if added:
                self._write(key, added, p.next_offset, end, now)
        self._flush()
        self._snapshot_when_due()

    def _write(self, key: tuple[str, int], syncs: list[Sync], next_offset: int, end: int | None, now: float) -> None:
        if key in self.lost:  # syncs before these may be missing from the log: never continuous with them
            syncs = [replace(syncs[0], continuous=False), *syncs[1:]]
        clean = self.store.clean_until(*key)
        self.sync_log.write(key[0], key[1], syncs, next_offset, end, clean)
        self.wrote_syncs = True
        self.last_written[key] = now
        self.unconfirmed[key] = clean

    def _flush(self) -> None:
        """Confirm the syncs written since the last flush. When that fails, some of them may be
        lost while this process's store holds them all: the next sync written for each of those
        partitions is persisted as not continuous (a history loaded back never bridges the lost
        stretch with the drift of a later sync: it translates there by MM2's `+1` rule), and
        a head sync is written for them at their next batch, whatever the interval."""
        written, self.unconfirmed = self.unconfirmed, {}
        try:
            self.sync_log.flush()
        except BaseException:
            self.lost |= set(written)
            for key in written:
                self.last_written.pop(key, None)
            raise
        for key, clean in written.items():
            self.lost.discard(key)
            if clean is not None:
                self.persisted_clean[key] = clean

    def _snapshot_when_due(self) -> None:
        if not self.wrote_syncs or not self.sync_log.snapshot_due():
            return
        if self._snapshot is not None and self._snapshot.is_alive():
            return  # the previous generation is still being written
        job = self.sync_log.capture(self.store)
        self._snapshot = threading.Thread(
            target=self.metrics.side_work,
            args=("offset_sync_snapshot", lambda: self.sync_log.write_captured(job)),
            name="kmirror-offset-sync-snapshot",
            daemon=True,
        )
        self._snapshot.start()

    def wait_for_snapshot(self, timeout_s: float = SNAPSHOT_JOIN_S) -> None:
        """Wait for a snapshot generation in flight (tests, close)."""
        if self._snapshot is not None:
            self._snapshot.join(timeout_s)

    def write_heads(self) -> int:
        """Persist a head sync for every partition whose clean tail the log does not know yet;
        returns how many were written."""
        written = 0
        for key, (next_offset, end) in sorted(self.next_offsets.items()):
            clean = self.store.clean_until(*key)
            syncs = self.store.syncs(*key)
            known = self.persisted_clean.get(key, -1)
            if clean is None or not syncs or clean <= known or clean - 1 <= syncs[-1].upstream:
                continue
            head = self.store.add_segment(
                key[0], key[1], clean - 1, next_offset, [(clean - 1, syncs[-1].drift + clean - 1)], keep_last=True
            )
            if head:
                self._write(key, head, next_offset, end, self.clock())
                written += len(head)
        self._flush()
        return written

    def catch_up(self) -> None:
        """Read syncs another writer persisted, unless this process is the writer."""
        if not self.wrote_syncs:
            self.sync_log.catch_up(self.store)

    def close(self) -> None:
        try:
            if self.wrote_syncs:
                self.metrics.side_work("offset_sync_heads", self.write_heads)
        finally:
            self.wait_for_snapshot()
            self.sync_log.close()
