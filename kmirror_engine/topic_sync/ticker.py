"""Driver-side periodic sync of what MM2 keeps in step besides records: topic configs
(`kmirror_engine.topic_sync.configs`, when `sync_topic_configs`) and topic ACLs
(`kmirror_engine.topic_sync.acls`, when `sync_topic_acls`).

`start()` runs one round of each at once (so every `--once` run re-syncs), then, in streaming
mode, one per `sync_topic_configs_interval_ms` / `sync_topic_acls_interval_ms`, checked every
second by a `PeriodicTask` (each sync is one too, run when due). Side work: a failed round is
logged with the running failure count (`failures`) and retried at the next interval; it never
fails the mirror.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import KafkaException

from kmirror.errors import KmirrorError
from kmirror.flow.views import FlowRoute, TopicSyncSettings
from kmirror_engine.scheduler import PeriodicTask

log = logging.getLogger("kmirror.sync_ticker")


class SyncTicker:
    def __init__(
        self,
        flow_id: str,
        once: bool,
        syncs: Sequence[tuple[str, Any, int]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """A ticker of flow `flow_id` running `syncs`: (what, an object with `run()`, interval in
        ms) each (no I/O here; `for_flow` builds the flow's config and ACL syncs)."""
        self.flow_id, self.once, self.clock = flow_id, once, clock
        self.jobs: list[PeriodicTask] = []  # one per sync, driven by the ticker's due times
        for what, sync, interval_ms in syncs:
            self._add(what, sync, interval_ms)
        self.due = [0.0 for _ in self.jobs]
        self.failures = 0  # over all jobs
        self.task = PeriodicTask(f"kmirror-sync {flow_id}", 1.0, self.tick, join_timeout_s=5.0)

    @classmethod
    def for_flow(
        cls, route: FlowRoute, settings: TopicSyncSettings, once: bool, admin_factory: Any = None
    ) -> SyncTicker:
        """The syncs of `route` its `topic_sync` view (`settings`) asks for (configs, then ACLs),
        over the clusters' admin clients (`admin_factory(endpoint)`, default `admin_client`)."""
        from kmirror_engine.topic_sync.acls import AclSync
        from kmirror_engine.topic_sync.configs import ConfigSync

        syncs: list[tuple[str, Any, int]] = []
        if settings.configs:
            syncs.append(
                ("config sync", ConfigSync.for_flow(route, settings, admin_factory), settings.configs_interval_ms)
            )
        if settings.acls:
            syncs.append(("ACL sync", AclSync.for_flow(route, admin_factory), settings.acls_interval_ms))
        return cls(route.flow_id, once, syncs)

    def _add(self, what: str, sync: Any, interval_ms: int) -> None:
        self.jobs.append(
            PeriodicTask(
                what, interval_ms / 1000, sync.run, errors=(KmirrorError, KafkaException), on_failure=self._report
            )
        )

    def _report(self, job: PeriodicTask, exc: BaseException) -> None:
        self.failures += 1
        log.warning(
            "%s: %s failed (%d failures so far, retried in %.0f s): %s",
            self.flow_id,
            job.name,
            self.failures,
            job.interval_s,
            exc,
        )

    def tick(self) -> None:
        """Run every job whose interval elapsed; failures are logged and counted, never raised."""
        now = self.clock()
        for index, job in enumerate(self.jobs):
            if now < self.due[index]:
                continue
            self.due[index] = now + job.interval_s
            job.run_once()

    def start(self) -> SyncTicker:
        self.tick()
        if not self.once and self.jobs:
            self.task.start()
        return self

    def stop(self) -> None:
        self.task.stop()
