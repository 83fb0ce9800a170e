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
import os
import selectors
import socket
import struct
import time
from collections.abc import Iterable, Mapping
from typing import Any

from kafka import errors as kafka_errors
from kafka.future import Future
from kafka.net.manager import KafkaConnectionManager
from kafka.net.selector import NetworkSelector, Task
from kafka.net.transport import KafkaTCPTransport
from kafka.protocol.frame import KafkaBytes
from kafka.protocol.parser import KafkaProtocol
from kafka.structs import TopicPartition

from kmirror.errors import KmirrorError
from kmirror_engine.copying.batch_frames import BufferPool, FetchAnswer, Frame, Gather, ProduceCall

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
}
_SASL_MECHANISMS = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"})
# Security properties with nothing to translate to: the flow copies with the record loops.
_UNTRANSLATED_PREFIXES = (
    "ssl.keystore.",
    "ssl.truststore.",
    "ssl.certificate.pem",
    "ssl.key.pem",
    "ssl.ca.pem",
    "sasl.kerberos.",
    "sasl.oauthbearer.",
    "sasl.jaas.",
)
# Fetch answers carry whole batches: one over the fetch limit still comes whole (KIP-74), so the
# frame limit leaves room for topics with a large max.message.bytes.
RECEIVE_MAX_BYTES = 80 * 1024 * 1024
CONNECT_TIMEOUT_MS = 30_000
_FRAME_SIZE = struct.Struct(">i")
_IOV_MAX = 1024  # buffers per sendmsg (Linux's UIO_MAXIOV)
LOW_WATER_MAX_BYTES = 1024 * 1024


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
    reasons += _tls_reasons(config)
    return out, reasons


def _tls_reasons(config: Mapping[str, Any]) -> list[str]:
    """TLS settings kafka-python's connections do not apply as librdkafka does (each failed every
    task of a batch-path flow with a misleading "cannot reach"): the record loops copy such a flow."""
    reasons = []
    if config.get("ssl.crl.location"):
        reasons.append("client property ssl.crl.location (CRL checks) is not applied on the batch path")
    if str(config.get("enable.ssl.certificate.verification", "true")).lower() in ("false", "0"):
        reasons.append("client property enable.ssl.certificate.verification=false is not applied on the batch path")
    ca = config.get("ssl.ca.location")
    if isinstance(ca, str) and ca and (ca == "probe" or os.path.isdir(ca)):
        reasons.append(
            f"client property ssl.ca.location {ca!r} is a directory or 'probe' (the batch path takes one CA file)"
        )
    return reasons


# Fetch answers are read into reused buffers (at most POOL_SIZE per connection, POOLED_MAX_BYTES
# each: a 4 MiB fetch and its framing): a fresh 4 MiB buffer per answer is zero-filled and
# page-faulted in each time (about a third of the copy's CPU on uncompressed topics,
# docs/performance.md). A buffer is reused once no batch of its answer is referenced any more
# (the copier's pending limit bounds how many are); a larger answer gets a fresh buffer.
POOL_SIZE = 16
POOLED_MIN_BYTES = 64 * 1024
POOLED_MAX_BYTES = 4 * 1024 * 1024 + 256 * 1024


class _DirectParser(KafkaProtocol):
    """kafka-python's protocol parser, filled from the socket by `fill`: each answer is read with
    recv_into straight into its frame buffer (a pooled one for fetch answers, `Frame`), which the
    decoder then reads in place (the library reads 4 KiB chunks into fresh bytes, joins them and
    copies them into a fresh frame). Data handed to `receive_bytes` the library's way still works."""

    _receiving: bool  # the library's state: a frame is being read into _rbuffer
    _rbuffer: Any
    _head: bytearray
    _head_at: int
    _at: int
    _done: list[Any]
    _lowat: int
    _pool: BufferPool
    bytes_to_send: list[Any]  # the library's queue of encoded requests

    def adopt(self) -> None:
        """Set up the state `fill` keeps (the instance was the library's parser until now)."""
        self._head, self._head_at, self._at, self._done, self._lowat = bytearray(4), 0, 0, [], 1
        self._pool = BufferPool(POOLED_MAX_BYTES, POOL_SIZE)

    def fill(self, sock: Any) -> bool:
        """Read everything readable now; completed answers wait for `receive_bytes`. Returns False
        when the peer closed the connection."""
        while True:
            try:
                if not self._receiving:
                    got = sock.recv_into(memoryview(self._head)[self._head_at :])
                elif isinstance(self._rbuffer, Frame):
                    got = sock.recv_into(self._rbuffer.view[self._at :])
                else:
                    got = sock.recv_into(memoryview(self._rbuffer)[self._at :])
            except (BlockingIOError, InterruptedError):
                self._low_water(sock)
                return True
            if not got:
                return False
            if not self._receiving:
                self._head_at += got
                if self._head_at == 4:
                    (size,) = _FRAME_SIZE.unpack(self._head)
                    self._validate_frame_size(size)
                    self._rbuffer, self._at, self._head_at, self._receiving = self._frame(size), 0, 0, True
                    if size == 0:
                        self._complete()
                continue
            self._at += got
            if self._at == len(self._rbuffer):
                self._complete()

    def _low_water(self, sock: Any) -> None:
        """Wake the event loop for this socket only once the rest of the answer being read is there
        (up to `LOW_WATER_MAX_BYTES`; SO_RCVLOWAT), not for every piece of it that arrives."""
        want = min(len(self._rbuffer) - self._at, LOW_WATER_MAX_BYTES) if self._receiving else 1
        if want != self._lowat:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, max(1, want))
            self._lowat = want

    def _frame(self, size: int) -> Any:
        """Where the next answer of `size` bytes is read: a pooled buffer for a fetch answer."""
        head = self.in_flight_requests[0] if self.in_flight_requests else None
        if getattr(head, "response_class", None) is FetchAnswer and size >= POOLED_MIN_BYTES:
            view = self._pool.take(size)
            if view is not None:
                return Frame(view)
        return KafkaBytes(size)

    def _complete(self) -> None:
        self._rbuffer.seek(0)
        self._done.append(self._process_response(self._rbuffer))
        self._reset_buffer()

    def receive_bytes(self, data: Any) -> list[Any]:
        if data:
            return list(super().receive_bytes(data))
        done, self._done = self._done, []
        return done

    def send_request(self, request: Any, correlation_id: int | None = None) -> int:
        """The library's, but a produce request is queued as pieces (`ProduceCall.gather`): its
        batches go from their fetch buffers to the socket (`_DirectReadTransport._sock_send`)."""
        if not isinstance(request, ProduceCall):
            return int(super().send_request(request, correlation_id))
        if correlation_id is None:
            correlation_id = self._next_correlation_id()
        request.with_header(correlation_id=correlation_id, client_id=self._client_id)
        pieces = request.gather()
        self.bytes_to_send.append(pieces if pieces is not None else request.encode(framed=True, header=True))
        self.in_flight_requests.append(request.header)
        return correlation_id

    def send_bytes(self) -> Any:
        if not any(isinstance(data, Gather) for data in self.bytes_to_send):
            return super().send_bytes()
        pieces: list[Any] = []
        for data in self.bytes_to_send:
            pieces += data.pieces if isinstance(data, Gather) else [data]
        self.bytes_to_send = []
        return Gather(pieces)


class _DirectReadTransport(KafkaTCPTransport):
    """kafka-python's plaintext transport, reading through the connection's parser (`_DirectParser`):
    it hands the connection an empty read, after which the parser returns the answers it completed;
    requests queued as pieces (`Gather`) go out by vectored writes."""

    def _sock_recv(self) -> tuple[bytes, Exception | None]:
        parser = getattr(self._protocol, "parser", None)
        if parser is None:
            return super()._sock_recv()
        if type(parser) is not _DirectParser:
            parser.__class__ = _DirectParser
            parser.adopt()
        try:
            open_ = parser.fill(self._sock)
        except kafka_errors.KafkaProtocolError as exc:
            return b"", exc
        except Exception as exc:  # the library's own contract: the caller aborts the connection
            return b"", kafka_errors.KafkaConnectionError(exc)
        return b"", None if open_ else kafka_errors.KafkaConnectionError("socket disconnected")

    def _sock_send(self) -> tuple[int, Exception | None]:
        """The library's, with requests queued as pieces (`Gather`) sent by vectored writes."""
        if not any(isinstance(chunk, Gather) for chunk in self._write_buffer):
            return super()._sock_send()
        total = 0
        if self._sock is None:
            return total, kafka_errors.KafkaConnectionError("Connection closed during send")
        while self._write_buffer:
            chunk = self._write_buffer.popleft()
            if not isinstance(chunk, Gather):
                chunk = Gather([memoryview(chunk)])
            while chunk.pieces:
                try:
                    sent = self._sock.sendmsg(chunk.pieces[:_IOV_MAX])
                except (BlockingIOError, InterruptedError):
                    self._write_buffer.appendleft(chunk)
                    return total, None
                except Exception as exc:  # the library's own contract: the caller aborts the connection
                    return total, kafka_errors.KafkaConnectionError(exc)
                total += sent
                chunk.advance(sent)
        return total, None


class _LeanSelector(NetworkSelector):
    """kafka-python's event loop with a socket's read interest kept in epoll between reads.

    The library registers a socket before each read and unregisters it after: two epoll_ctl calls
    per read, and the registration's look-up misses, which formats the socket's repr twice (two
    getsockname/getpeername pairs). Here a read wait that ends leaves the registration in place
    with no reader, and the next wait only names its task; a read event that finds no reader
    (reading paused) drops the interest then. Writes and closes unregister as the library does
    (a writable socket kept registered would wake every poll). Relies on kafka-python 3.0.12's
    `register_event`/`unregister_event`/`_process_events` and their (reader, writer) key data."""

    def register_event(self, fileobj: Any, event: int, task: Any) -> None:
        if not isinstance(task, Task):
            task = Task(task)
        fd = fileobj.fileno()
        # looked up by number: a miss formats the number, not the socket
        key = self._selector.get_map().get(fd) if fd >= 0 else None
        if key is not None and key.fileobj is not fileobj:  # a closed socket's number, reused
            self._selector.unregister(key.fileobj)
            key = None
        if key is None:
            self._selector.register(fileobj, event, (task, None) if event == selectors.EVENT_READ else (None, task))
            return
        reader, writer = key.data
        if (reader if event == selectors.EVENT_READ else writer) is not None:
            raise RuntimeError(f"event {event} already registered for {fileobj} by another task")
        data = (task, writer) if event == selectors.EVENT_READ else (reader, task)
        self._selector.modify(fileobj, key.events | event, data)  # no syscall when the events are kept

    def unregister_event(self, fileobj: Any, event: int) -> None:
        if event != selectors.EVENT_READ:
            super().unregister_event(fileobj, event)
            return
        fd = fileobj.fileno()
        key = self._selector.get_map().get(fd) if fd >= 0 else None
        if key is not None and key.fileobj is fileobj:
            self._selector.modify(fileobj, key.events, (None, key.data[1]))  # the interest stays

    def _process_events(self, event_list: list[Any]) -> None:
        ready = []
        for key, events in event_list:
            if events & selectors.EVENT_READ and key.fileobj is not self._wakeup_r and key.data[0] is None:
                events &= ~selectors.EVENT_READ  # nobody reads it now: stop watching until someone waits
                super().unregister_event(key.fileobj, selectors.EVENT_READ)
            if events:
                ready.append((key, events))
        super()._process_events(ready)


class _Manager(KafkaConnectionManager):
    """kafka-python's connection manager with `_DirectReadTransport` on plaintext connections
    (TLS keeps the library's transport). Relies on kafka-python 3.0.12's `_build_transport`."""

    async def _build_transport(self, node: Any, timeout_at: float | None = None) -> Any:
        transport = await super()._build_transport(node, timeout_at)
        if type(transport) is KafkaTCPTransport:
            transport.__class__ = _DirectReadTransport
        return transport


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
        self.net = net if net is not None else _LeanSelector(client_id=settings.get("client_id", f"kmirror-{role}"))
        self.manager = _Manager(self.net, **settings)
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
