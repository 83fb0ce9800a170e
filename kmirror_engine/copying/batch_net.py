"""Connections of the batch copy path (`kmirror_engine.copying.batch_copy`): one cluster's
brokers through kafka-python's connection layer (TLS, SASL PLAIN/SCRAM, API version
negotiation, metadata), driven on the copying thread itself: no I/O thread, callbacks run
inside `poll`.

librdkafka has no raw-batch produce, so this path speaks Fetch, Produce and InitProducerId
itself; the flow's client configs are librdkafka properties, translated by `batch_settings`
(`link_config`); the I/O layer under the connections is `batch_sockets`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from kafka import errors as kafka_errors
from kafka.future import Future
from kafka.net.selector import NetworkSelector
from kafka.structs import TopicPartition

from kmirror.errors import KmirrorError
from kmirror_engine.copying.batch_settings import link_config
from kmirror_engine.copying.batch_sockets import LeanSelector, LinkManager

log = logging.getLogger("kmirror.batch_copy")


class _OncePerMinute(logging.Filter):
    """kafka-python warns on every answer a quota throttled (thousands a minute under a fetch quota):
    one such line per minute is kept."""

    def __init__(self) -> None:
        super().__init__()
        self.last = float("-inf")

    def filter(self, record: logging.LogRecord) -> bool:
        if "throttled by broker" not in record.getMessage():
            return True
        now = time.monotonic()
        if now - self.last < 60.0:
            return False
        self.last = now
        return True


logging.getLogger("kafka.net.connection").addFilter(_OncePerMinute())
CONNECT_TIMEOUT_MS = 30_000


class LinkError(KmirrorError):
    """A broker connection or request of the batch path failed (retried by the caller when retriable)."""


class BrokerLink:
    """The brokers of one cluster: requests to a partition's leader, metadata on demand.

    Not thread-safe: one copying thread owns it (the selector runs inside `poll`)."""

    def __init__(
        self,
        config: Mapping[str, Any],
        role: str,
        net: NetworkSelector | None = None,
        timeout_ms: int = CONNECT_TIMEOUT_MS,
    ) -> None:
        """Connect to the cluster `config` names (bootstrap and metadata within `timeout_ms`).
        `net`: another link's selector, so that one `poll` serves both clusters."""
        settings, reasons = link_config(config)
        if reasons:
            raise KmirrorError(f"{role}: the batch copy path cannot connect: {'; '.join(reasons)}")
        self.role = role
        self.owns_net = net is None
        self.net = net if net is not None else LeanSelector(client_id=settings.get("client_id", f"kmirror-{role}"))
        self.manager = LinkManager(self.net, **settings)
        try:
            self.manager.bootstrap(timeout_ms)
        except Exception as exc:
            self.close()
            raise LinkError(f"{role}: cannot reach {settings.get('bootstrap_servers')}: {exc}") from exc
        self._topics: set[str] = set()
        self._forgot: set[str] = set()  # topics left out of the metadata set since the last refresh
        self.unknown: set[str] = set()  # topics of the last `leaders()` call its metadata answer did not know

    def leaders(self, topics: Iterable[str], timeout_s: float = 30.0) -> dict[tuple[str, int], int]:
        """The leader node of every partition of `topics`, after a metadata refresh; a partition
        without a leader right now is left out (the caller retries)."""
        new = set(topics) - self._topics or self._forgot
        self._topics |= set(topics)
        self._forgot = set()
        # one metadata round trip: naming new topics refreshes (a second request right after it
        # waited out kafka-python's refresh backoff: ~150 ms per task on a cold copier)
        cluster_meta = self.manager.cluster
        update = cluster_meta.set_topics(sorted(self._topics)) if new else cluster_meta.request_update()
        try:
            self.wait(update, timeout_s, "metadata")
        except LinkError as exc:  # kafka-python fails the answer of a one-topic request for that topic's error
            if not isinstance(exc.__cause__, kafka_errors.UnknownTopicOrPartitionError):
                raise
        cluster = self.manager.cluster
        out: dict[tuple[str, int], int] = {}
        self.unknown = {topic for topic in set(topics) if cluster.partitions_for_topic(topic) is None}
        for topic in self._topics:
            for partition in cluster.partitions_for_topic(topic) or ():
                leader = cluster.leader_for_partition(TopicPartition(topic, partition))
                if leader is not None and leader >= 0:
                    out[(topic, partition)] = leader
        return out

    def forget(self, keep: Iterable[str]) -> None:
        """Keep only `keep` in the topics whose metadata this link refreshes (a topic deleted or no
        longer mirrored is not asked for forever); the next `leaders()` call narrows the request."""
        keep = set(keep)
        self._forgot |= self._topics - keep
        self._topics &= keep

    def send(self, request: Any, node_id: int) -> Future:
        """Send `request` to broker `node_id`; the Future holds its response (or the failure)."""
        return self.manager.send(request, node_id=node_id)

    def throttled(self, node_id: int) -> bool:
        """Whether broker `node_id` throttles this link now (a quota: the connection is paused until
        the throttle time its last answer named has passed; a request sent meanwhile is refused)."""
        conn = self.manager._conns.get(node_id)
        return conn is not None and "throttle" in conn.paused

    def poll(self, timeout_ms: float) -> None:
        """Run the connections for up to `timeout_ms` (responses complete their Futures)."""
        self.net.poll(timeout_ms=timeout_ms)

    def wait(self, future: Future, timeout_s: float, what: str) -> Any:
        """The value of `future`, polling until it is done; LinkError after `timeout_s` or on failure."""
        deadline = time.monotonic() + timeout_s
        while not future.is_done and time.monotonic() < deadline:
            self.net.poll(timeout_ms=max(1.0, (deadline - time.monotonic()) * 1000), future=future)
        if not future.is_done:
            raise LinkError(f"{self.role}: no answer to {what} within {timeout_s:.0f} s")
        if future.failed():
            raise LinkError(f"{self.role}: {what} failed: {future.exception}") from future.exception
        return future.value

    def close(self) -> None:
        """End every connection of this link (and its selector, when it made it)."""
        try:
            self.manager.close()
            self.net.poll(timeout_ms=0)
            if self.owns_net:
                self.net.close()
        except Exception as exc:  # closing must not hide the task's own error
            log.warning("%s: closing the connections failed: %s", self.role, exc)
