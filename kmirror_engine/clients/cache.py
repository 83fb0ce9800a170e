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

The side work's long-lived clients (offset-sync and snapshot producers, the checkpoint and
heartbeat producer, the group-commit consumer) are not leased per task; `RenewingClient` keys
them the same way (`config_key`), re-checked every `RECHECK_S` seconds and after an
authentication error, so a rotated password or certificate reaches them too.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kmirror.errors import KmirrorError

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


# How often a long-lived side-work client re-resolves its config (secret references read,
# referenced files stat'ed): a rotation is noticed within this time, or at once after an
# authentication error; the files are not read on every record.
RECHECK_S = 30.0
# How long a producer being replaced may take to deliver what it still holds (then the rest is
# purged and reported failed: `retire_producer`).
RETIRE_FLUSH_S = 30.0


class _Renewal:
    """Set when a client saw an authentication/TLS error. Error callbacks hold this, never the
    client (a callback holding the client could destroy it from a librdkafka thread)."""

    __slots__ = ("due",)

    def __init__(self) -> None:
        self.due = False


class RenewingClient:
    """A long-lived client (offset-sync, snapshot, checkpoint and heartbeat producers, the
    group-commit consumer) that follows credential rotation like the copy clients do.

    `resolve()` returns the complete client config (secret references resolved); `make(config,
    renewal)` builds a client from it, wiring `renewal.due = True` to authentication errors;
    `retire(client)` shuts an old client down (a producer: delivers or fails what it holds,
    `retire_producer`) and returns False when it cannot (the old client is kept and retried
    later, never dropped). `current()` re-resolves at
    most every `recheck_s` seconds, or at once after `invalidate()` or an authentication error,
    and builds a new client when `config_key` of the config changed (a rotated secret, a
    certificate or keytab rewritten under the same path)."""

    def __init__(
        self,
        resolve: Callable[[], Mapping[str, Any]],
        make: Callable[[Mapping[str, Any], _Renewal], Any],
        retire: Callable[[Any], bool],
        *,
        role: str,
        recheck_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`recheck_s`: None reads the module's `RECHECK_S` at each check."""
        self.resolve, self.make, self.retire, self.role = resolve, make, retire, role
        self.recheck_s, self.clock = recheck_s, clock
        self.rebuilds = 0  # clients built after the first one
        self._client: Any = None
        self._key: str | None = None
        self._checked = 0.0
        self._renewal = _Renewal()
        self._lock = threading.Lock()

    def invalidate(self) -> None:
        """Re-resolve at the next use (the client's credentials were refused)."""
        self._renewal.due = True

    def current(self) -> Any:
        """The client built from the newest config (see the class docstring)."""
        recheck_s = RECHECK_S if self.recheck_s is None else self.recheck_s
        if self._client is not None and not self._renewal.due and self.clock() - self._checked < recheck_s:
            return self._client
        with self._lock:
            try:
                config = self.resolve()
            except KmirrorError as exc:
                if self._client is None:
                    raise
                # a secret file being replaced (rename, rewrite): the old credentials may still work
                log.warning(
                    "%s: resolving its config failed, the current client is kept (retried in %.0f s): %s",
                    self.role,
                    recheck_s,
                    exc,
                )
                self._checked = self.clock()
                return self._client
            key = config_key(config)
            self._checked, self._renewal.due = self.clock(), False
            if self._client is not None and key == self._key:
                return self._client
            if self._client is not None:
                if not self.retire(self._client):
                    log.warning(
                        "%s: new credentials found, but the old client still holds records; "
                        "kept until delivered or failed (retried in %.0f s)",
                        self.role,
                        recheck_s,
                    )
                    return self._client
                self.rebuilds += 1
                log.info("%s: rebuilt with rotated credentials", self.role)
            self._client = None  # the old one goes here, in the caller's thread
            self._client, self._key = self.make(config, self._renewal), key
            return self._client

    def built(self) -> Any:
        """The client built so far (None before the first use), without any check."""
        return self._client

    def close(self) -> None:
        """Retire the client (a producer: flushed first); a producer that cannot deliver what it
        holds within `RETIRE_FLUSH_S` is reported by its callers' confirm, not here."""
        with self._lock:
            client, self._client, self._key = self._client, None, None
        if client is not None:
            self.retire(client)


class RenewingProducer(RenewingClient):
    """A `RenewingClient` shaped like a producer: `produce` uses the newest client (the only
    call that may replace it: an old producer is flushed first, so its records are delivered
    and their callbacks run before the new one takes over); `poll`, `flush` and `len` act on the
    client built so far, whose records are the ones to confirm."""

    def produce(self, *args: Any, **kwargs: Any) -> Any:
        return self.current().produce(*args, **kwargs)

    def poll(self, timeout: float = 0) -> Any:
        client = self.built()
        return client.poll(timeout) if client is not None else 0

    def flush(self, timeout: float = -1) -> Any:
        client = self.built()
        return client.flush(timeout) if client is not None else 0

    def list_topics(self, *args: Any, **kwargs: Any) -> Any:
        return self.current().list_topics(*args, **kwargs)

    def __len__(self) -> int:
        client = self.built()
        return len(client) if client is not None else 0


def retire_producer(producer: Any) -> bool:
    """Flush a producer being replaced, for at most `RETIRE_FLUSH_S`: its delivery callbacks run,
    so its callers (`DeliveryConfirmingProducer`) confirm or report every record. What is still
    undelivered then (its old credentials refused) is purged: those records fail through the same
    callbacks (`Local: Purged in queue`) and their callers' confirm raises; none goes missing
    silently. False (kept, retried later) only when even the purge leaves records behind."""
    if int(producer.flush(RETIRE_FLUSH_S)) == 0:
        return True
    producer.purge()
    return int(producer.flush(1.0)) == 0


def retire_consumer(consumer: Any) -> bool:
    """Close a consumer being replaced (a close failure is logged: the new one takes over)."""
    try:
        consumer.close()
    except Exception as exc:  # a broken consumer must not keep its successor from being built
        log.warning("closing a consumer with old credentials failed: %s", exc)
    return True
