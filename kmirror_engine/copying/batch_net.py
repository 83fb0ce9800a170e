"""Connections of the batch copy path (`kmirror_engine.copying.batch_copy`): one cluster's
brokers through kafka-python's connection layer (TLS, SASL PLAIN/SCRAM, API version
negotiation, metadata), driven on the copying thread itself: no I/O thread, callbacks run
inside `poll`.

librdkafka has no raw-batch produce, so this path speaks Fetch, Produce and InitProducerId
itself; the flow's client configs are librdkafka properties, translated here. What cannot be
translated (GSSAPI, OAUTHBEARER, PKCS#12 keystores, PEM strings) is a reason to copy with the
record loops instead (`link_config` returns it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from kafka import errors as kafka_errors
from kafka.future import Future
from kafka.net.manager import KafkaConnectionManager
from kafka.net.selector import NetworkSelector
from kafka.net.transport import KafkaTCPTransport
from kafka.structs import TopicPartition

from kmirror.errors import KmirrorError

log = logging.getLogger("kmirror.batch_copy")
# librdkafka property -> kafka-python connection setting (values copied as they are)
_SAME_VALUE = {
    "bootstrap.servers": "bootstrap_servers",
    "client.id": "client_id",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "ssl.crl.location": "ssl_crlfile",
}
_SASL_MECHANISMS = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"})
# Security properties with nothing to translate to: the flow copies with the record loops.
_UNTRANSLATED_PREFIXES = ("ssl.keystore.", "ssl.truststore.", "ssl.certificate.pem", "ssl.key.pem", "ssl.ca.pem",
                          "sasl.kerberos.", "sasl.oauthbearer.", "sasl.jaas.")  # fmt: skip
# Fetch answers carry whole batches: one over the fetch limit still comes whole (KIP-74), so the
# frame limit leaves room for topics with a large max.message.bytes.
RECEIVE_MAX_BYTES = 80 * 1024 * 1024
CONNECT_TIMEOUT_MS = 30_000


class LinkError(KmirrorError):
    """A broker connection or request of the batch path failed (retried by the caller when retriable)."""


def link_config(config: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """kafka-python connection settings for librdkafka `config`, and the reasons it cannot
    be translated (empty: the batch path can connect as the record loops would)."""
    out: dict[str, Any] = {"receive_message_max_bytes": RECEIVE_MAX_BYTES, "max_in_flight_requests_per_connection": 5}
    reasons: list[str] = []
    for name, value in config.items():
        if callable(value):
            reasons.append(f"client property {name} is a Python callable")
        elif name in _SAME_VALUE:
            out[_SAME_VALUE[name]] = value
        elif name.startswith(_UNTRANSLATED_PREFIXES) and name != "sasl.kerberos.service.name":
            reasons.append(f"client property {name} has no equivalent on the batch path")
    protocol = str(config.get("security.protocol", "plaintext")).upper()
    out["security_protocol"] = protocol
    if protocol.startswith("SASL"):
        mechanism = str(config.get("sasl.mechanisms", config.get("sasl.mechanism", "GSSAPI"))).upper()
        if mechanism not in _SASL_MECHANISMS:
            reasons.append(f"SASL mechanism {mechanism} is not supported on the batch path (PLAIN and SCRAM are)")
        out["sasl_mechanism"] = mechanism
    if str(config.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        out["ssl_check_hostname"] = False
    return out, reasons


# Bytes read per recv() on plaintext connections (kafka-python reads 4 KiB at a time: 12,000
# calls and joins per 46 MB fetched; 1 MiB cut the copy's CPU by ~20% here, docs/performance.md).
RECV_CHUNK_BYTES = 1024 * 1024


class _WideReadTransport(KafkaTCPTransport):
    """kafka-python's plaintext transport reading up to `RECV_CHUNK_BYTES` per call (same contract:
    everything readable now, and an error when the peer closed)."""

    def _sock_recv(self) -> tuple[bytes, Exception | None]:
        chunks: list[bytes] = []
        while True:
            try:
                data = self._sock.recv(RECV_CHUNK_BYTES)
            except (BlockingIOError, InterruptedError):
                break
            except Exception as exc:  # the library's own contract: the caller aborts the connection
                return b"".join(chunks), kafka_errors.KafkaConnectionError(exc)
            if not data:
                return b"".join(chunks), kafka_errors.KafkaConnectionError("socket disconnected")
            chunks.append(data)
            if len(data) < RECV_CHUNK_BYTES:
                break
        return (chunks[0] if len(chunks) == 1 else b"".join(chunks)), None


class _Manager(KafkaConnectionManager):
    """kafka-python's connection manager with `_WideReadTransport` on plaintext connections
    (TLS keeps the library's transport). Relies on kafka-python 3.0.12's `_build_transport`."""

    async def _build_transport(self, node: Any, timeout_at: float | None = None) -> Any:
        transport = await super()._build_transport(node, timeout_at)
        if type(transport) is KafkaTCPTransport:
            transport.__class__ = _WideReadTransport
        return transport


class BrokerLink:
    """The brokers of one cluster: requests to a partition's leader, metadata on demand.

    Not thread-safe: one copying thread owns it (the selector runs inside `poll`)."""

    def __init__(
        self, config: Mapping[str, Any], role: str, net: NetworkSelector | None = None,
        timeout_ms: int = CONNECT_TIMEOUT_MS,
    ) -> None:  # fmt: skip
        """Connect to the cluster `config` names (bootstrap and metadata within `timeout_ms`).
        `net`: another link's selector, so that one `poll` serves both clusters."""
        settings, reasons = link_config(config)
        if reasons:
            raise KmirrorError(f"{role}: the batch copy path cannot connect: {'; '.join(reasons)}")
        self.role = role
        self.owns_net = net is None
        self.net = net if net is not None else NetworkSelector(client_id=settings.get("client_id", f"kmirror-{role}"))
        self.manager = _Manager(self.net, **settings)
        try:
            self.manager.bootstrap(timeout_ms)
        except Exception as exc:
            self.close()
            raise LinkError(f"{role}: cannot reach {settings.get('bootstrap_servers')}: {exc}") from exc
        self._topics: set[str] = set()

    def leaders(self, topics: Iterable[str], timeout_s: float = 30.0) -> dict[tuple[str, int], int]:
        """The leader node of every partition of `topics`, after a metadata refresh; a partition
        without a leader right now is left out (the caller retries)."""
        new = set(topics) - self._topics
        self._topics |= new
        # one metadata round trip: naming new topics refreshes (a second request right after it
        # waited out kafka-python's refresh backoff: ~150 ms per task on a cold copier)
        cluster_meta = self.manager.cluster
        update = cluster_meta.set_topics(sorted(self._topics)) if new else cluster_meta.request_update()
        self.wait(update, timeout_s, "metadata")
        cluster = self.manager.cluster
        out: dict[tuple[str, int], int] = {}
        for topic in self._topics:
            for partition in cluster.partitions_for_topic(topic) or ():
                leader = cluster.leader_for_partition(TopicPartition(topic, partition))
                if leader is not None and leader >= 0:
                    out[(topic, partition)] = leader
        return out

    def send(self, request: Any, node_id: int) -> Future:
        """Send `request` to broker `node_id`; the Future holds its response (or the failure)."""
        return self.manager.send(request, node_id=node_id)

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
