"""The failover BatchListener of a flow: offset syncs, checkpoints, group offset sync,
heartbeats and metrics, driven by committed batches and the idle ticks between them. It composes
three parts: `OffsetSyncWriter` (sync_writer.py), `CheckpointRound` (checkpoint_round.py, shared
with `IdleCheckpoints` and `final_checkpoint`) and `FailoverMetrics` (failover_metrics.py).

- on_batch: record and persist the batch's offset syncs (raises if they cannot be stored,
  so translation state is never silently behind), update metrics, then do periodic work.
- on_idle: heartbeats every `heartbeat_interval_ms` (only with `heartbeats=True` and
  `emit_heartbeats`: the app leaves them to the driver's `HeartbeatTicker`, so that idle flows
  beat too; tests and direct users of the listener keep this), checkpoints every
  `checkpoint_interval_ms` (when `emit_checkpoints`), followed by the group offset
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

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException

from kmirror.errors import KmirrorError
from kmirror.flow.replication_policy import HEARTBEATS_TOPIC, checkpoints_topic
from kmirror.flow.spec import FlowSpec
from kmirror.flow.views import CheckpointSettings
from kmirror_engine.clients.topic_admin import ensure_topic
from kmirror_engine.failover.checkpoint_round import CheckpointRound
from kmirror_engine.failover.checkpoints import CheckpointEmitter, read_checkpoints
from kmirror_engine.failover.failover_metrics import PREFIX, FailoverMetrics, now_ms
from kmirror_engine.failover.offset_sync_snapshots import SyncLog
from kmirror_engine.failover.offset_sync_writer import OffsetSyncWriter
from kmirror_engine.failover.offset_syncs import SyncStore
from kmirror_engine.observability.heartbeats import HEARTBEATS_TOPIC_CONFIG, HeartbeatEmitter
from kmirror_engine.observability.metrics import FlowMetrics
from kmirror_engine.observability.progress import BatchProgress
from kmirror_engine.scheduler import PeriodicTask

log = logging.getLogger("kmirror.failover")
__all__ = ["PREFIX", "FailoverClients", "FailoverListener", "IdleCheckpoints", "final_checkpoint"]
_access_reported: set[str] = set()  # flows whose internal-topic access this process reported


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
        from kmirror_engine.clients.factory import admin_client, producer_config, renewing_producer

        # long-lived: rebuilt when the target's credentials rotate (the admin clients re-check at every call)
        producer = renewing_producer(
            lambda: producer_config(spec.target, spec.copy, spec.id), role="checkpoints-producer"
        )
        return cls(
            SyncLog(spec.target, spec.source.alias),
            producer,
            admin_client(spec.source),
            admin_client(spec.target),
            lambda: read_checkpoints(spec.target, checkpoints_topic(spec.source.alias)),
            lambda topic, config: ensure_topic(spec.target, topic, config),
        )


class FailoverListener:
    """BatchListener of one flow; see the module docstring for what each callback does."""

    def __init__(
        self,
        flow_id: str,
        checkpoints: CheckpointSettings,
        clients: FailoverClients,
        failover_metrics: FailoverMetrics,
        syncs: OffsetSyncWriter,
        checkpoint_round: CheckpointRound | None = None,
        heartbeats: HeartbeatEmitter | None = None,
    ) -> None:
        """The listener of flow `flow_id` over its parts: `syncs` (loaded), the checkpoint round
        (None: `emit_checkpoints` off), the heartbeat emitter (None: no heartbeats here). No I/O
        here; `for_flow` connects, loads the syncs and prepares the round and heartbeats."""
        self.flow_id = flow_id
        self.failover_metrics = failover_metrics
        self.metrics: FlowMetrics = failover_metrics.flow
        self.clients = clients
        self.syncs = syncs
        self.store: SyncStore = syncs.store
        self.sync_log = clients.sync_log
        self.producer = clients.producer
        self.source_admin, self.target_admin = clients.source_admin, clients.target_admin
        self.checkpoint_round = checkpoint_round
        self.heartbeats = heartbeats
        self._heartbeats_ready = False
        self.checkpoint_interval_ms = checkpoints.interval_ms
        self.last_checkpoint_ms: int | None = None

    @classmethod
    def for_flow(
        cls,
        spec: FlowSpec,
        serve_metrics: bool = True,
        heartbeats: bool = True,
        second_writer: bool = False,
        clients: FailoverClients | None = None,
    ) -> FailoverListener:
        """Connects to both clusters and loads the syncs (raising if they cannot be read: nothing
        can be translated without them). Preparing the checkpoint round (see CheckpointRound) is
        side work, retried before each round until it succeeds.
        `heartbeats=False`: leave heartbeats to the driver's HeartbeatTicker (the app's sink does).
        `second_writer`: checkpoints only inside the syncs read so far (see CheckpointEmitter)."""
        failover_metrics = FailoverMetrics.for_flow(spec)
        clients = clients or FailoverClients.connect(spec)
        syncs = OffsetSyncWriter.for_flow(spec.route, spec.checkpoints, failover_metrics, clients.sync_log)
        if spec.id not in _access_reported:
            _access_reported.add(spec.id)
            from kmirror_engine.planning.internal_topics import InternalTopicAccess

            InternalTopicAccess.for_flow(spec).report(clients.target_admin)
        checkpoint_round: CheckpointRound | None = None
        if spec.checkpoints.emit:
            checkpoint_round = CheckpointRound.for_flow(
                spec.route, spec.checkpoints, spec.consumer_group, syncs, clients, failover_metrics, second_writer
            )
            failover_metrics.side_work("checkpoints_setup", checkpoint_round.prepare)
        emitter: HeartbeatEmitter | None = None
        if heartbeats and spec.heartbeats.emit:
            emitter = HeartbeatEmitter.for_flow(spec.route, spec.heartbeats, clients.producer)
        listener = cls(spec.id, spec.checkpoints, clients, failover_metrics, syncs, checkpoint_round, emitter)
        if emitter is not None:
            failover_metrics.side_work("heartbeats_setup", listener._prepare_heartbeats)
        if serve_metrics and spec.checkpoints.metrics_port is not None:
            listener.metrics.serve(spec.checkpoints.metrics_port)
        return listener

    @property
    def checkpoints(self) -> CheckpointEmitter | None:
        return self.checkpoint_round.emitter if self.checkpoint_round is not None else None

    @property
    def wrote_syncs(self) -> bool:
        return self.syncs.wrote_syncs

    def _prepare_heartbeats(self) -> None:
        if not self._heartbeats_ready:
            self.clients.ensure_topic(HEARTBEATS_TOPIC, HEARTBEATS_TOPIC_CONFIG)
            self._heartbeats_ready = True

    def report_failure(self, work: str, exc: BaseException | str) -> None:
        self.failover_metrics.report_failure(work, exc)

    def on_batch(self, batch: BatchProgress) -> None:
        """Store and persist the batch's syncs (ranges in offset order; raises if they cannot be
        persisted), snapshot the history when due, then update metrics.
        Periodic work (checkpoints, heartbeats) happens in on_idle, which the sink calls next."""
        batch = self.failover_metrics.with_source_ends(batch, self.source_admin)  # bounded (5 s), never raises
        self.syncs.record(batch)
        self.failover_metrics.observe_batch(batch)

    def on_batch_failed(self, batch_id: int) -> None:
        """A batch Spark aborted (the sink's `abort`): counted in kmirror_failed_batches_total."""
        self.metrics.observe_batch_failure(batch_id)

    def on_idle(self, now_ms: int) -> None:
        """Heartbeats and checkpoint rounds when due; never raises (side work, see module docstring)."""
        if self.heartbeats is not None:
            self.failover_metrics.side_work("heartbeats", lambda: self._beat(now_ms))
        due = self.last_checkpoint_ms is None or now_ms - self.last_checkpoint_ms >= self.checkpoint_interval_ms
        if self.checkpoint_round is not None and due:
            self.last_checkpoint_ms = now_ms  # a failed round is retried at the next interval
            self.failover_metrics.side_work("checkpoints", self.checkpoint_round.run)

    def _beat(self, now_ms: int) -> None:
        assert self.heartbeats is not None
        self._prepare_heartbeats()
        self.heartbeats.maybe_emit(now_ms)

    def checkpoint_now(self) -> int:
        """One checkpoint round (see CheckpointRound.run); raises when the round as a whole failed."""
        assert self.checkpoint_round is not None
        return self.checkpoint_round.run()

    def close(self, final: bool) -> None:
        try:
            if final and self.checkpoint_round is not None:
                self.failover_metrics.side_work("checkpoints", self.checkpoint_round.run)
            if self.heartbeats is not None:
                if final:
                    self.failover_metrics.side_work("heartbeats", lambda: self._beat(now_ms()))
                self.failover_metrics.side_work("heartbeats", self.heartbeats.flush)
            self.syncs.close()
            self.producer.flush(30)
        finally:
            self.metrics.close()


def final_checkpoint(listener: FailoverListener) -> int:
    """Emit one checkpoint round (+ group sync) through `listener` (built for it, from the
    persisted syncs, in any process: `FailoverListener.for_flow(spec, serve_metrics=False,
    heartbeats=False)`), then close it.

    For drivers whose listeners live in another process (the sink's commit worker): call it
    after a clean `--once` run. Returns the number of checkpoints written.
    """
    try:
        return listener.checkpoint_now() if listener.checkpoint_round is not None else 0
    finally:
        listener.close(final=False)


class IdleCheckpoints:
    """Checkpoint rounds (+ group sync) on the driver's clock in streaming mode, every
    `checkpoint_interval_ms` (a `PeriodicTask`), so groups that keep consuming while the source
    is idle (no batches, hence no sink commits) still get fresh checkpoints, as MM2's checkpoint
    task does.

    It is a second writer next to the sink's listener, so it reads the persisted syncs and only
    checkpoints offsets inside them (`second_writer`). A failed round is logged with the running
    failure count and retried at the next interval; it never stops the mirror.
    """

    def __init__(self, flow_id: str, checkpoints: CheckpointSettings, listener_factory: Callable[[], Any]) -> None:
        """Rounds of flow `flow_id` every `checkpoints.interval_ms`, through the listener
        `listener_factory()` builds at the first round (no I/O here; `for_flow` builds the real one)."""
        self.flow_id = flow_id
        self.listener_factory = listener_factory
        self.listener: Any = None
        self.task = PeriodicTask(
            f"kmirror-checkpoints {flow_id}",
            max(checkpoints.interval_ms, 100) / 1000,
            self._round,
            errors=(KmirrorError, KafkaException),
            on_failure=self._report,
        )

    @classmethod
    def for_flow(cls, spec: FlowSpec) -> IdleCheckpoints:
        """The idle rounds of `spec`, through a second-writer `FailoverListener` of its own."""
        return cls(
            spec.id,
            spec.checkpoints,
            lambda: FailoverListener.for_flow(spec, serve_metrics=False, heartbeats=False, second_writer=True),
        )

    @property
    def failures(self) -> int:
        return self.task.failures

    def round(self) -> int:
        """One checkpoint round; returns the checkpoints written (0 after a logged failure)."""
        return int(self.task.run_once() or 0)

    def _round(self) -> int:
        if self.listener is None:
            self.listener = self.listener_factory()
        return int(self.listener.checkpoint_now())

    def _report(self, task: PeriodicTask, exc: BaseException) -> None:
        log.warning(
            "flow %s: idle checkpoint round failed (%d failures so far, retried): %s", self.flow_id, task.failures, exc
        )

    def start(self) -> IdleCheckpoints:
        self.task.start()
        return self

    def stop(self) -> None:
        self.task.stop()
        if self.listener is not None:
            self.listener.close(final=False)
