"""The failover BatchListener of a flow: offset syncs, checkpoints, group offset sync,
heartbeats and metrics, driven by committed batches and the idle ticks between them.

- on_batch: record and persist the batch's offset syncs (raises if they cannot be stored,
  so translation state is never silently behind), update metrics, then do periodic work.
- on_idle: heartbeats every `heartbeat_interval_ms` (when `emit_heartbeats` and not left to the
  driver's `HeartbeatTicker`, as the app does so that idle flows beat too), checkpoints
  every `checkpoint_interval_ms` (when `emit_checkpoints`), followed by the group offset
  sync (when `sync_group_offsets`) of the groups just checkpointed.
- close(final=True), after a clean `--once` run: one last checkpoint (+ group sync) so
  batch-style runs leave failover state behind; then flush and stop the metrics server.
The sync history is loaded at construction (newest snapshots + short tail, restart-safe).

What may fail a batch: only persisting its offset syncs (a batch whose syncs are lost would
leave translation behind). Everything else is side work on records already delivered: a
failure there (an ACL missing on the checkpoints topic, a coordinator moving, a group turning
active between describe and alter, a snapshot that cannot be written) is printed as a
`kmirror failover {json}` line, counted in `kmirror_failover_work_failures_total{work}` and
retried at the next round. Failing the batch instead would make Spark replay it forever, each
replay adding a batch of duplicates.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from confluent_kafka import KafkaException

from kmirror.errors import KmirrorError
from kmirror.flowspec import FlowSpec
from kmirror.replication_policy import HEARTBEATS_TOPIC, checkpoints_topic
from kmirror_engine.failover.checkpoints import CHECKPOINTS_TOPIC_CONFIG, CheckpointEmitter, read_checkpoints
from kmirror_engine.failover.group_sync import ActiveGroupError, sync_group
from kmirror_engine.failover.offset_syncs import SyncStore, ensure_topic
from kmirror_engine.failover.sync_snapshots import SyncLog
from kmirror_engine.observability.heartbeats import HEARTBEATS_TOPIC_CONFIG, HeartbeatEmitter
from kmirror_engine.observability.metrics import FlowMetrics
from kmirror_engine.observability.progress import BatchProgress
from kmirror_engine.planning.offset_queries import query_offsets

log = logging.getLogger("kmirror.failover")
PREFIX = "kmirror failover "
_access_reported: set[str] = set()  # flows whose internal-topic access this process reported


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class FailoverClients:
    """What the listener talks to; tests inject fakes."""

    sync_log: Any  # SyncLog
    producer: Any  # checkpoints (and heartbeats when the listener beats)
    source_admin: Any
    target_admin: Any
    read_checkpoints: Callable[[], list[Any]]  # the checkpoints written so far
    ensure_topic: Callable[[str, dict[str, str]], None]  # create an internal topic on the target

    @classmethod
    def connect(cls, spec: FlowSpec) -> FailoverClients:
        from kmirror_engine.clients.factory import admin_client, new_producer, producer_config

        producer = new_producer(producer_config(spec), role="checkpoints-producer")
        return cls(
            SyncLog(spec.target, spec.source.alias), producer, admin_client(spec.source),
            admin_client(spec.target), lambda: read_checkpoints(spec.target, checkpoints_topic(spec.source.alias)),
            lambda topic, config: ensure_topic(spec.target, topic, config),
        )  # fmt: skip


class FailoverListener:
    """BatchListener of one flow; see the module docstring for what each callback does."""

    def __init__(
        self,
        spec: FlowSpec,
        serve_metrics: bool = True,
        heartbeats: bool = True,
        second_writer: bool = False,
        clients: FailoverClients | None = None,
    ) -> None:
        """Connects to both clusters and loads the syncs (raising if they cannot be read: nothing
        can be translated without them). Creating the checkpoints topic and reading the last
        checkpoints (so a restarted mirror never emits a checkpoint moving a group back) is side
        work: retried before each checkpoint round until it succeeds; no checkpoint goes out before.
        `heartbeats=False`: leave heartbeats to the driver's HeartbeatTicker (the app's sink does).
        `second_writer`: checkpoints only inside the syncs read so far (see CheckpointEmitter)."""
        self.spec = spec
        self.metrics = FlowMetrics(spec.id)
        self.metrics.set_rate_limits(spec.option("max_bytes_per_second"), spec.option("max_records_per_second"))
        clients = clients or FailoverClients.connect(spec)
        self.clients = clients
        self.store = SyncStore(offset_lag_max=int(spec.option("offset_lag_max")))
        self.sync_log = clients.sync_log
        self.sync_log.ensure_exists()
        self.sync_log.load(self.store)
        log.info("flow %s: loaded offset syncs: %s", spec.id, self.sync_log.last_load)
        self.producer = clients.producer
        self.source_admin, self.target_admin = clients.source_admin, clients.target_admin
        if spec.id not in _access_reported:
            _access_reported.add(spec.id)
            from kmirror_engine.planning.internal_topics import report_internal_topic_access

            report_internal_topic_access(spec, self.target_admin)
        self.checkpoints: CheckpointEmitter | None = None
        self._checkpoints_ready = False
        if spec.option("emit_checkpoints"):
            self.checkpoints = CheckpointEmitter(
                spec, self.store, self.source_admin, self.producer, within_known_history=second_writer
            )
            self._side_work("checkpoints_setup", self._prepare_checkpoints)
        self.heartbeats: HeartbeatEmitter | None = None
        self._heartbeats_ready = False
        if heartbeats and spec.option("emit_heartbeats"):
            self.heartbeats = HeartbeatEmitter(spec, self.producer)
            self._side_work("heartbeats_setup", self._prepare_heartbeats)
        if serve_metrics and spec.option("metrics_port") is not None:
            self.metrics.serve(int(spec.option("metrics_port")))
        self.checkpoint_interval_ms = int(spec.option("checkpoint_interval_ms"))
        self.last_checkpoint_ms: int | None = None
        self.wrote_syncs = False  # True once this process persisted syncs: its store is the newest

    def _prepare_checkpoints(self) -> None:
        assert self.checkpoints is not None
        if self._checkpoints_ready:
            return
        self.clients.ensure_topic(checkpoints_topic(self.spec.source.alias), CHECKPOINTS_TOPIC_CONFIG)
        for checkpoint in self.clients.read_checkpoints():
            self.checkpoints.last[(checkpoint.group, checkpoint.topic, checkpoint.partition)] = checkpoint
        self._checkpoints_ready = True

    def _prepare_heartbeats(self) -> None:
        if not self._heartbeats_ready:
            self.clients.ensure_topic(HEARTBEATS_TOPIC, HEARTBEATS_TOPIC_CONFIG)
            self._heartbeats_ready = True

    def _side_work(self, work: str, action: Callable[[], Any]) -> Any:
        """Run `action`; a failure is reported and counted, never raised (see module docstring)."""
        try:
            return action()
        except Exception as exc:  # any failure: the batch's records are delivered, failing it cannot help
            self.report_failure(work, exc)
            return None

    def report_failure(self, work: str, exc: BaseException | str) -> None:
        count = self.metrics.observe_work_failure(work)
        error = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        record = {"event": "failover_work_failed", "flow": self.spec.id, "work": work, "failures": count,
                  "error": error, "retry": "next round"}  # fmt: skip
        if "AUTHORIZATION" in error.upper():
            record["hint"] = "grant the mirror's principal the ACLs named in the start-up warnings (kafka-acls.sh)"
        log.warning("flow %s: %s failed (%d so far, retried next round): %s", self.spec.id, work, count, error)
        print(PREFIX + json.dumps(record, sort_keys=True), file=sys.stderr, flush=True)

    def on_batch(self, batch: BatchProgress) -> None:
        """Store and persist the batch's syncs (ranges in offset order; raises if they cannot be
        persisted), snapshot the history when due, then update metrics.
        Periodic work (checkpoints, heartbeats) happens in on_idle, which the sink calls next."""
        for p in sorted(batch.partitions, key=lambda p: (p.source_topic, p.partition, p.start_offset)):
            added = self.store.add_segment(p.source_topic, p.partition, p.start_offset, p.next_offset, p.offset_syncs)
            if added:
                self.wrote_syncs = True
                self.sync_log.write(p.source_topic, p.partition, added, p.next_offset)
        self.sync_log.flush()
        if self.wrote_syncs and self.sync_log.snapshot_due():
            self._side_work("offset_sync_snapshot", lambda: self.sync_log.write_snapshot(self.store))
        if not batch.source_end_offsets:  # the sink does not know them: needed for the offset lag metric
            batch = replace(batch, source_end_offsets=self._end_offsets(batch))
        self.metrics.observe_batch(batch, _now_ms())

    def on_batch_failed(self, batch_id: int) -> None:
        """A batch Spark aborted (the sink's `abort`): counted in kmirror_failed_batches_total."""
        self.metrics.observe_batch_failure(batch_id)

    def _end_offsets(self, batch: BatchProgress) -> dict[tuple[str, int], int]:
        """Source end offsets of the batch's partitions; {} (logged, lag left unset) when unreachable."""
        read_committed = self.spec.option("consumer").get("isolation.level", "read_committed") == "read_committed"
        partitions = {(p.source_topic, p.partition) for p in batch.partitions}
        try:
            return query_offsets(self.source_admin, self.spec.source, partitions, "latest", read_committed, 5.0)
        except Exception as exc:  # side work: the lag metric stays unset for this batch
            self.report_failure("offset_lag", exc)
            return {}

    def on_idle(self, now_ms: int) -> None:
        """Heartbeats and checkpoint rounds when due; never raises (side work, see module docstring)."""
        if self.heartbeats is not None:
            self._side_work("heartbeats", lambda: self._beat(now_ms))
        due = self.last_checkpoint_ms is None or now_ms - self.last_checkpoint_ms >= self.checkpoint_interval_ms
        if self.checkpoints is not None and due:
            self.last_checkpoint_ms = now_ms  # a failed round is retried at the next interval
            self._side_work("checkpoints", self.checkpoint_now)

    def _beat(self, now_ms: int) -> None:
        assert self.heartbeats is not None
        self._prepare_heartbeats()
        self.heartbeats.maybe_emit(now_ms)

    def checkpoint_now(self) -> int:
        """Emit checkpoints of every selected group, then sync idle target groups; returns
        checkpoints written. Groups whose offsets could not be read, and group syncs that
        failed, are reported and counted; raises (for the caller to count) when the round
        as a whole failed: checkpoints topic not ready, groups not listed, delivery failed."""
        assert self.checkpoints is not None
        self._prepare_checkpoints()
        if not self.wrote_syncs:
            # another process (the sink's commit worker) may be the writer: catch up first, so
            # this process never checkpoints from a stale history
            self.sync_log.catch_up(self.store)
        try:
            emitted, latency_ms = self.checkpoints.emit()
        finally:
            for group, error in sorted(self.checkpoints.failed_groups.items()):
                self.report_failure("checkpoints", f"group {group!r} skipped this round: {error}")
        for group in sorted({c.group for c in emitted}):
            self.metrics.observe_checkpoints(group, latency_ms)
        if self.spec.option("sync_group_offsets"):
            self._sync_groups()
        return len(emitted)

    def _sync_groups(self) -> None:
        assert self.checkpoints is not None
        by_group: dict[str, dict[tuple[str, int], int]] = {}
        for (group, topic, partition), checkpoint in self.checkpoints.last.items():
            if not self.spec.group_selection.matches(group):
                continue  # read back from the checkpoints topic, but no longer selected
            by_group.setdefault(group, {})[(topic, partition)] = checkpoint.downstream_offset
        for group, offsets in sorted(by_group.items()):
            try:
                result = sync_group(self.target_admin, group, offsets, self.spec.target.alias)
            except ActiveGroupError as exc:
                log.info("flow %s: group offsets not synced: %s", self.spec.id, exc)  # MM2 skips live groups too
                continue
            except (KmirrorError, KafkaException) as exc:  # e.g. the group turned active before the alter
                self.report_failure("group_offset_sync", exc)
                continue
            if result.written:
                log.info(
                    "flow %s: synced group %s on %s: %s", self.spec.id, group, self.spec.target.alias, result.written
                )

    def close(self, final: bool) -> None:
        try:
            if final and self.checkpoints is not None:
                self._side_work("checkpoints", self.checkpoint_now)
            if self.heartbeats is not None:
                if final:
                    self._side_work("heartbeats", lambda: self._beat(_now_ms()))
                self._side_work("heartbeats", self.heartbeats.flush)
            self.sync_log.close()
            self.producer.flush(30)
        finally:
            self.metrics.close()


def final_checkpoint(spec: FlowSpec) -> int:
    """Emit one checkpoint round (+ group sync) from the persisted syncs, in any process.

    For drivers whose listeners live in another process (the sink's commit worker): call it
    after a clean `--once` run. Returns the number of checkpoints written.
    """
    listener = FailoverListener(spec, serve_metrics=False, heartbeats=False)
    try:
        return listener.checkpoint_now() if listener.checkpoints is not None else 0
    finally:
        listener.close(final=False)


class IdleCheckpoints:
    """Checkpoint rounds (+ group sync) on the driver's clock in streaming mode, every
    `checkpoint_interval_ms`, so groups that keep consuming while the source is idle (no
    batches, hence no sink commits) still get fresh checkpoints, as MM2's checkpoint task does.

    It is a second writer next to the sink's listener, so it reads the persisted syncs and only
    checkpoints offsets inside them (`second_writer`). A failed round is logged with the running
    failure count and retried at the next interval; it never stops the mirror.
    """

    def __init__(self, spec: FlowSpec, listener_factory: Any = None) -> None:
        self.spec = spec
        self.listener_factory = listener_factory or (
            lambda: FailoverListener(spec, serve_metrics=False, heartbeats=False, second_writer=True)
        )
        self.listener: Any = None
        self.failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def round(self) -> int:
        """One checkpoint round; returns the checkpoints written (0 after a logged failure)."""
        try:
            if self.listener is None:
                self.listener = self.listener_factory()
            return int(self.listener.checkpoint_now())
        except (KmirrorError, KafkaException) as exc:
            self.failures += 1
            log.warning("flow %s: idle checkpoint round failed (%d failures so far, retried): %s",
                        self.spec.id, self.failures, exc)  # fmt: skip
            return 0

    def start(self) -> IdleCheckpoints:
        self._thread = threading.Thread(target=self._run, name=f"kmirror-checkpoints {self.spec.id}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        wait_s = max(int(self.spec.option("checkpoint_interval_ms")), 100) / 1000
        while not self._stop.wait(wait_s):
            self.round()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.listener is not None:
            self.listener.close(final=False)
