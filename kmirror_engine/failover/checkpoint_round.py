"""The checkpoint-round part of a flow's failover work, shared by the sink's listener (on idle
ticks and at a final close), the driver's idle checkpoints and `final_checkpoint`.

`run()`: checkpoints of every selected group (MM2's format, to `<source>.checkpoints.internal`
on the target), then the group offset sync (when `sync_group_offsets`) of the groups
checkpointed. Creating the checkpoints topic and reading the last checkpoints (so a restarted
mirror never emits a checkpoint moving a group back) is done before the first round, retried
before each round until it succeeds (`prepare`); no checkpoint goes out before.

On a reverse flow (`reverse_of`), each round first catches up with the forward flow's syncs
(`HomeSyncs`, read from this flow's source) and the emitter also checkpoints groups committed on
the forward flow's remote topics, translated back home (see `checkpoints`). Reading them is side
work of its own: a failure is reported and counted, and the round goes on with what was read.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaException

from kmirror.errors import KmirrorError
from kmirror.flow.replication_policy import checkpoints_topic
from kmirror.flow.views import CheckpointSettings, FlowRoute
from kmirror_engine.failover.checkpoints import CHECKPOINTS_TOPIC_CONFIG, CheckpointEmitter
from kmirror_engine.failover.failover_metrics import FailoverMetrics
from kmirror_engine.failover.group_sync import ActiveGroupError, sync_group
from kmirror_engine.failover.offset_sync_snapshots import SyncLog
from kmirror_engine.failover.offset_sync_writer import OffsetSyncWriter
from kmirror_engine.failover.offset_syncs import SyncStore

log = logging.getLogger("kmirror.failover")


class HomeSyncs:
    """The forward flow's sync history a reverse flow translates back through. It is only read:
    the forward flow writes it to `mm2-offset-syncs.<home>.internal` on its target, which is this
    flow's source. Loaded in full (snapshots + tail) the first time, caught up after."""

    def __init__(self, log: Any) -> None:
        """`log`: a SyncLog (or a fake with `load` and `catch_up`)."""
        self.log = log
        self.store = SyncStore()
        self.loaded = False

    def refresh(self) -> int:
        """Read the syncs written since the last refresh; returns how many. Raises OffsetSyncError."""
        if not self.loaded:
            count = self.log.load(self.store)
            self.loaded = True
            return count
        return int(self.log.catch_up(self.store))


class CheckpointRound:
    def __init__(
        self,
        route: FlowRoute,
        settings: CheckpointSettings,
        syncs: OffsetSyncWriter,
        clients: Any,
        metrics: FailoverMetrics,
        emitter: CheckpointEmitter,
        home: HomeSyncs | None = None,
    ) -> None:
        """Rounds of `route`'s checkpoints through `emitter` (over `syncs.store`), with `clients`
        (a FailoverClients); `home`: on a reverse flow, the forward flow's syncs the emitter also
        translates through (its `home_syncs`). No I/O here; `for_flow` builds the emitter."""
        self.route, self.settings = route, settings
        self.syncs, self.clients, self.metrics = syncs, clients, metrics
        self.home = home
        self.emitter = emitter
        self.ready = False

    @classmethod
    def for_flow(
        cls,
        route: FlowRoute,
        settings: CheckpointSettings,
        own_group: str,
        syncs: OffsetSyncWriter,
        clients: Any,
        metrics: FailoverMetrics,
        second_writer: bool = False,
        home_log: Any = None,
    ) -> CheckpointRound:
        """The round of `route`'s checkpoints (`own_group`: the mirror's own source group, never
        checkpointed). `second_writer`: checkpoints only inside the syncs read so far (see
        CheckpointEmitter). `home_log`: on a reverse flow, the forward flow's sync log (default:
        `SyncLog(route.source, settings.reverse_of)`); ignored on other flows."""
        home_alias = settings.reverse_of
        home = HomeSyncs(home_log or SyncLog(route.source, home_alias)) if home_alias is not None else None
        emitter = CheckpointEmitter(
            route,
            syncs.store,
            clients.source_admin,
            clients.producer,
            within_known_history=second_writer,
            home_syncs=home.store if home is not None else None,
            own_group=own_group,
            reverse_of=home_alias,
        )
        return cls(route, settings, syncs, clients, metrics, emitter, home)

    def prepare(self) -> None:
        if self.ready:
            return
        self.clients.ensure_topic(checkpoints_topic(self.route.source.alias), CHECKPOINTS_TOPIC_CONFIG)
        for checkpoint in self.clients.read_checkpoints():
            self.emitter.last[(checkpoint.group, checkpoint.topic, checkpoint.partition)] = checkpoint
        self.ready = True

    def run(self) -> int:
        """Emit checkpoints of every selected group, then sync idle target groups; returns
        checkpoints written. Groups whose offsets could not be read, and group syncs that
        failed, are reported and counted; raises (for the caller to count) when the round
        as a whole failed: checkpoints topic not ready, groups not listed, delivery failed."""
        self.prepare()
        self.syncs.catch_up()
        if self.home is not None:  # stale forward syncs translate conservatively (re-read, never skip)
            self.metrics.side_work("reverse_checkpoints", self.home.refresh)
        try:
            emitted, latency_ms = self.emitter.emit()
        finally:
            for group, error in sorted(self.emitter.failed_groups.items()):
                self.metrics.report_failure("checkpoints", f"group {group!r} skipped this round: {error}")
        for group in sorted({c.group for c in emitted}):
            self.metrics.flow.observe_checkpoints(group, latency_ms)
        if self.settings.sync_group_offsets:
            self._sync_groups()
        return len(emitted)

    def _sync_groups(self) -> None:
        by_group: dict[str, dict[tuple[str, int], int]] = {}
        for (group, topic, partition), checkpoint in self.emitter.last.items():
            if not self.route.groups.matches(group):
                continue  # read back from the checkpoints topic, but no longer selected
            by_group.setdefault(group, {})[(topic, partition)] = checkpoint.downstream_offset
        for group, offsets in sorted(by_group.items()):
            try:
                result = sync_group(self.clients.target_admin, group, offsets, self.route.target.alias)
            except ActiveGroupError as exc:
                log.info("flow %s: group offsets not synced: %s", self.route.flow_id, exc)  # MM2 skips live groups too
                continue
            except (KmirrorError, KafkaException) as exc:  # e.g. the group turned active before the alter
                self.metrics.report_failure("group_offset_sync", exc)
                continue
            if result.written:
                log.info(
                    "flow %s: synced group %s on %s: %s",
                    self.route.flow_id,
                    group,
                    self.route.target.alias,
                    result.written,
                )
