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
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException

from kmirror.errors import KmirrorError
from kmirror.flow.spec import FlowSpec
from kmirror_engine.scheduler import PeriodicTask

log = logging.getLogger("kmirror.sync_ticker")


class SyncTicker:
    def __init__(
        self, spec: FlowSpec, once: bool, admin_factory: Any = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        from kmirror_engine.topic_sync.acls import AclSync
        from kmirror_engine.topic_sync.configs import ConfigSync

        self.spec, self.once, self.clock = spec, once, clock
        self.jobs: list[PeriodicTask] = []  # one per sync, driven by the ticker's due times
        if spec.topic_sync.configs:
            self._add("config sync", ConfigSync(spec, admin_factory), spec.topic_sync.configs_interval_ms)
        if spec.topic_sync.acls:
            self._add("ACL sync", AclSync(spec, admin_factory), spec.topic_sync.acls_interval_ms)
        self.due = [0.0 for _ in self.jobs]
        self.failures = 0  # over all jobs
        self.task = PeriodicTask(f"kmirror-sync {spec.id}", 1.0, self.tick, join_timeout_s=5.0)

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
            self.spec.id,
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
