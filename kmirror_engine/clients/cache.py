"""The copying tasks' Kafka clients, kept warm across the tasks of one Python worker process.

Spark reuses its Python workers (`spark.python.worker.reuse`, on by default), so one worker
copies batch after batch. A fresh consumer and idempotent producer per task cost 0.5-1 s before
the first record moves (connections, metadata, the producer id: librdkafka retries its first
InitProducerId after 500 ms), which is most of a small streaming batch and a gap between the
batches of a backlog (measured in docs/performance.md).

Contract of `CLIENTS.lease(key, make)` (a context manager yielding `CopyClients`):
- hands out the idle clients built for `key` (a digest of the complete client configs), or
  `make()`s new ones; idle pairs are kept for the last key used only (at most `MAX_IDLE`);
  several threads may hold leases at once (each gets its own pair);
- clients that leave the block by an exception are closed, never reused: the producer may hold
  undelivered records or be in a fatal state, the consumer a stale assignment;
- clients that leave it normally are kept only when the producer has nothing outstanding
  (the caller unassigns the consumer: `RangeCopier.copy` does both);
- idle clients are closed after `IDLE_CLOSE_S` without a task (so clients of a stopped query do
  not keep reconnecting to brokers that went away) and at interpreter exit.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("kmirror.client_cache")
# Longer than any trigger interval worth streaming with, short enough that a finished query's
# clients go away soon.
IDLE_CLOSE_S = 60.0
# Idle pairs kept: one per copying thread of a task (kmirror_engine.copying.task_copy.COPY_THREADS_PER_TASK), with room.
MAX_IDLE = 4


@dataclass
class CopyClients:
    """One task's source consumer and target producer."""

    consumer: Any
    producer: Any

    def close(self) -> None:
        try:
            self.consumer.close()
        except Exception as exc:  # closing a broken consumer must not hide the task's own error
            log.warning("closing a source consumer failed: %s", exc)


def config_key(*configs: Mapping[str, Any]) -> str:
    """A digest of client configs: equal configs, equal key (secrets never kept in clear).

    Files the client reads itself (`*.location`, the keytab) count by content stamp (size and
    modification time): a rotated certificate or keytab under the same path is a new key, so
    clients holding the old material are replaced, never reused."""
    text = json.dumps([sorted((str(k), str(v), _file_stamp(k, v)) for k, v in c.items()) for c in configs])
    return hashlib.sha256(text.encode()).hexdigest()


def _file_stamp(name: Any, value: Any) -> str:
    if not (str(name).endswith(".location") or name == "sasl.kerberos.keytab") or not isinstance(value, str):
        return ""
    try:
        stat = os.stat(value)
    except OSError:
        return "missing"
    return f"{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ino}"


class ClientCache:
    """Idle client pairs of one flow's configs (the last key leased), at most `max_idle` of them."""

    def __init__(self, idle_close_s: float = IDLE_CLOSE_S, max_idle: int = MAX_IDLE) -> None:
        self.idle_close_s = idle_close_s
        self.max_idle = max_idle
        self._lock = threading.Lock()
        self._key: str | None = None
        self._idle: list[CopyClients] = []
        self._timer: threading.Timer | None = None

    @contextmanager
    def lease(self, key: str, make: Callable[[], CopyClients]) -> Iterator[CopyClients]:
        clients = self._take(key)
        if clients is None:
            clients = make()
        try:
            yield clients
        except BaseException:
            clients.close()
            raise
        if len(clients.producer) != 0:
            clients.close()  # something still queued: not a clean state to start the next task from
            return
        self._put(key, clients)

    def _take(self, key: str) -> CopyClients | None:
        stale: list[CopyClients] = []
        clients = None
        with self._lock:
            self._cancel_timer()
            if self._key != key:
                stale, self._idle, self._key = self._idle, [], key  # another flow's (or changed) configs
            elif self._idle:
                clients = self._idle.pop()
        for old in stale:
            old.close()
        return clients

    def _put(self, key: str, clients: CopyClients) -> None:
        with self._lock:
            keep = self._key == key and len(self._idle) < self.max_idle
            if keep:
                self._idle.append(clients)
            self._cancel_timer()
            if self.idle_close_s > 0 and self._idle:
                self._timer = threading.Timer(self.idle_close_s, self.close_idle)
                self._timer.daemon = True
                self._timer.start()
        if not keep:
            clients.close()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close_idle(self) -> None:
        """Close the idle clients, if any (idempotent)."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._cancel_timer()
        for clients in idle:
            clients.close()


CLIENTS = ClientCache()
atexit.register(CLIENTS.close_idle)
