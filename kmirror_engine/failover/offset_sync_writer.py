"""The offset-sync part of a flow's failover work: the in-memory history (`SyncStore`) and its
persisted log (`SyncLog`).

- construction: ensure the syncs topic and load the history (newest snapshots + short tail,
  restart-safe); raises if it cannot be read (nothing can be translated without it).
- `record(batch)`: store and persist the batch's syncs, ranges in offset order; raises if they
  cannot be persisted (translation state is never silently behind); then a snapshot of the
  history when due (side work).
- `catch_up()`: before a checkpoint round in a process that wrote no syncs (another process,
  the sink's commit worker, may be the writer), so it never checkpoints from a stale history.
"""

from __future__ import annotations

import logging
from typing import Any

from kmirror.flow.spec import FlowSpec
from kmirror_engine.failover.failover_metrics import FailoverMetrics
from kmirror_engine.failover.offset_syncs import SyncStore
from kmirror_engine.observability.progress import BatchProgress

log = logging.getLogger("kmirror.failover")


class OffsetSyncWriter:
    def __init__(self, spec: FlowSpec, sync_log: Any, metrics: FailoverMetrics) -> None:
        self.metrics = metrics
        self.store = SyncStore(offset_lag_max=spec.checkpoints.offset_lag_max)
        self.sync_log = sync_log
        self.sync_log.ensure_exists()
        self.sync_log.load(self.store)
        log.info("flow %s: loaded offset syncs: %s", spec.id, self.sync_log.last_load)
        self.wrote_syncs = False  # True once this process persisted syncs: its store is the newest

    def record(self, batch: BatchProgress) -> None:
        for p in sorted(batch.partitions, key=lambda p: (p.source_topic, p.partition, p.start_offset)):
            added = self.store.add_segment(p.source_topic, p.partition, p.start_offset, p.next_offset, p.offset_syncs)
            if added:
                self.wrote_syncs = True
                end = batch.source_end_offsets.get((p.source_topic, p.partition))
                self.sync_log.write(p.source_topic, p.partition, added, p.next_offset, end)
        self.sync_log.flush()
        if self.wrote_syncs and self.sync_log.snapshot_due():
            self.metrics.side_work("offset_sync_snapshot", lambda: self.sync_log.write_snapshot(self.store))

    def catch_up(self) -> None:
        """Read syncs another writer persisted, unless this process is the writer."""
        if not self.wrote_syncs:
            self.sync_log.catch_up(self.store)

    def close(self) -> None:
        self.sync_log.close()
