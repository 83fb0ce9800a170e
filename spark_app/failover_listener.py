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
The sync history is loaded from the offset-syncs topic at construction (restart-safe).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from typing import Any

from confluent_kafka import KafkaException

from kmirror.errors import KmirrorError
from kmirror.flowspec import FlowSpec
from kmirror.policy import HEARTBEATS_TOPIC, checkpoints_topic, offset_syncs_topic
from spark_app.checkpoints import CHECKPOINTS_TOPIC_CONFIG, CheckpointEmitter, read_checkpoints
from spark_app.group_sync import ActiveGroupError, sync_group
from spark_app.heartbeats import HEARTBEATS_TOPIC_CONFIG, HeartbeatEmitter
from spark_app.metrics import FlowMetrics
from spark_app.offset_syncs import OffsetSyncTopic, SyncStore, ensure_topic
from spark_app.offsets import query_offsets
from spark_app.progress import BatchProgress

log = logging.getLogger("kmirror.failover")


def _now_ms() -> int:
    return int(time.time() * 1000)


class FailoverListener:
    """BatchListener of one flow; see the module docstring for what each callback does."""

    def __init__(
        self, spec: FlowSpec, serve_metrics: bool = True, heartbeats: bool = True, second_writer: bool = False
    ) -> None:
        """Connects to both clusters, creates the internal topics it writes, loads the syncs and
        the last checkpoints (so a restarted mirror never emits a checkpoint moving a group back).
        `heartbeats=False`: leave heartbeats to the driver's HeartbeatTicker (the app's sink does).
        `second_writer`: checkpoints only inside the syncs read so far (see CheckpointEmitter)."""
        from confluent_kafka import Producer

        from spark_app.clients import admin_client, producer_config

        self.spec = spec
        self.store = SyncStore()
        self.syncs_topic = OffsetSyncTopic(spec.target, offset_syncs_topic(spec.source.alias))
        self.syncs_topic.ensure_exists()
        loaded = self.syncs_topic.load(self.store)
        log.info("flow %s: loaded %d offset syncs from %s", spec.id, loaded, self.syncs_topic.topic)
        self.producer = Producer(producer_config(spec))
        self.target_admin = admin_client(spec.target)
        self.source_admin = admin_client(spec.source)
        self.checkpoints: CheckpointEmitter | None = None
        if spec.option("emit_checkpoints"):
            topic = checkpoints_topic(spec.source.alias)
            ensure_topic(spec.target, topic, CHECKPOINTS_TOPIC_CONFIG)
            self.checkpoints = CheckpointEmitter(
                spec, self.store, self.source_admin, self.producer, within_known_history=second_writer
            )
            for checkpoint in read_checkpoints(spec.target, topic):
                self.checkpoints.last[(checkpoint.group, checkpoint.topic, checkpoint.partition)] = checkpoint
        self.heartbeats: HeartbeatEmitter | None = None
        if heartbeats and spec.option("emit_heartbeats"):
            ensure_topic(spec.target, HEARTBEATS_TOPIC, HEARTBEATS_TOPIC_CONFIG)
            self.heartbeats = HeartbeatEmitter(spec, self.producer)
        self.metrics = FlowMetrics(spec.id)
        if serve_metrics and spec.option("metrics_port") is not None:
            self.metrics.serve(int(spec.option("metrics_port")))
        self.checkpoint_interval_ms = int(spec.option("checkpoint_interval_ms"))
        self.last_checkpoint_ms: int | None = None
        self.wrote_syncs = False  # True once this process persisted syncs: its store is the newest

    def on_batch(self, batch: BatchProgress) -> None:
        """Store and persist the batch's syncs (ranges in offset order), then update metrics.
        Periodic work (checkpoints, heartbeats) happens in on_idle, which the sink calls next."""
        for p in sorted(batch.partitions, key=lambda p: (p.source_topic, p.partition, p.start_offset)):
            added = self.store.add_segment(p.source_topic, p.partition, p.start_offset, p.next_offset, p.offset_syncs)
            if added:
                self.wrote_syncs = True
                self.syncs_topic.write(p.source_topic, p.partition, added, p.next_offset)
        self.syncs_topic.flush()
        if not batch.source_end_offsets:  # the sink does not know them: needed for the offset lag metric
            batch = replace(batch, source_end_offsets=self._end_offsets(batch))
        self.metrics.observe_batch(batch, _now_ms())

    def _end_offsets(self, batch: BatchProgress) -> dict[tuple[str, int], int]:
        """Source end offsets of the batch's partitions; {} (logged, lag left unset) when unreachable."""
        read_committed = self.spec.option("consumer").get("isolation.level", "read_committed") == "read_committed"
        partitions = {(p.source_topic, p.partition) for p in batch.partitions}
        try:
            return query_offsets(self.source_admin, self.spec.source, partitions, "latest", read_committed, 5.0)
        except KmirrorError as exc:
            log.warning("flow %s: batch %d offset lag not measured: %s", self.spec.id, batch.batch_id, exc)
            return {}

    def on_idle(self, now_ms: int) -> None:
        if self.heartbeats is not None:
            self.heartbeats.maybe_emit(now_ms)
        due = self.last_checkpoint_ms is None or now_ms - self.last_checkpoint_ms >= self.checkpoint_interval_ms
        if self.checkpoints is not None and due:
            self.checkpoint_now()
            self.last_checkpoint_ms = now_ms

    def checkpoint_now(self) -> int:
        """Emit checkpoints of every selected group, then sync idle target groups; returns checkpoints written."""
        assert self.checkpoints is not None
        if not self.wrote_syncs:
            # another process (the sink's commit worker) may be the writer: catch up first, so
            # this process never checkpoints from a stale history
            self.syncs_topic.load(self.store)
        emitted, latency_ms = self.checkpoints.emit()
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
            if result.written:
                log.info(
                    "flow %s: synced group %s on %s: %s", self.spec.id, group, self.spec.target.alias, result.written
                )

    def close(self, final: bool) -> None:
        try:
            if final and self.checkpoints is not None:
                self.checkpoint_now()
            if self.heartbeats is not None:
                if final:
                    self.heartbeats.maybe_emit(_now_ms())
                self.heartbeats.flush()
            self.syncs_topic.close()
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
