"""Driver-side periodic sync of what MM2 keeps in step besides records: topic configs
(`kmirror_engine.planning.config_sync`, when `sync_topic_configs`) and topic ACLs
(`kmirror_engine.planning.acl_sync`, when `sync_topic_acls`).

`start()` runs one round of each at once (so every `--once` run re-syncs), then, in streaming
mode, one per `sync_topic_configs_interval_ms` / `sync_topic_acls_interval_ms` from a daemon
thread. Side work: a failed round is logged with the running failure count (`failures`) and
retried at the next interval; it never fails the mirror.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException

from kmirror.errors import KmirrorError
from kmirror.flowspec import FlowSpec

log = logging.getLogger("kmirror.sync_ticker")


class SyncTicker:
    def __init__(self, spec: FlowSpec, once: bool, admin_factory: Any = None,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        from kmirror_engine.planning.acl_sync import AclSync
        from kmirror_engine.planning.config_sync import ConfigSync

        self.spec, self.once, self.clock = spec, once, clock
        self.jobs: list[tuple[str, Any, float]] = []  # (what, sync with run(), interval s)
        if spec.option("sync_topic_configs"):
            self.jobs.append(("config sync", ConfigSync(spec, admin_factory),
                              spec.option("sync_topic_configs_interval_ms") / 1000))  # fmt: skip
        if spec.option("sync_topic_acls"):
            self.jobs.append(("ACL sync", AclSync(spec, admin_factory),
                              spec.option("sync_topic_acls_interval_ms") / 1000))  # fmt: skip
        self.due = [0.0 for _ in self.jobs]
        self.failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> None:
        """Run every job whose interval elapsed; failures are logged and counted, never raised."""
        now = self.clock()
        for index, (what, job, interval_s) in enumerate(self.jobs):
            if now < self.due[index]:
                continue
            self.due[index] = now + interval_s
            try:
                job.run()
            except (KmirrorError, KafkaException) as exc:
                self.failures += 1
                log.warning("%s: %s failed (%d failures so far, retried in %.0f s): %s",
                            self.spec.id, what, self.failures, interval_s, exc)  # fmt: skip

    def start(self) -> SyncTicker:
        self.tick()
        if not self.once and self.jobs:
            self._thread = threading.Thread(target=self._run, name=f"kmirror-sync {self.spec.id}", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.tick()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
