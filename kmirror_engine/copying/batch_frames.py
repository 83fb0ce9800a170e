"""Fetch v12 and Produce v9 framed here, sent over kafka-python's connections (batch copy path).

kafka-python encodes and decodes every request generically: a fetch answer's records are copied
twice out of its receive buffer, and a produce request copies each batch into an encode buffer
and out again. The batch path moves nothing but those bytes, so its two requests are framed by
hand (Kafka's FetchRequest.json / FetchResponse.json v12 and ProduceRequest.json v9, flexible
versions: compact strings and arrays, tagged fields):

- `FetchCall` encodes the request; its answer (`FetchAnswer`) is decoded in place: each
  partition's `records` is a view of the receive buffer, never a copy.
- `ProduceCall` writes each batch once, straight from the fetch answer's buffer into the
  request, rewriting the header fields the target's producer owns in place
  (`batch_wire.patch_header`); a resend encodes the same bytes again.

The buffers they are read from and written into, reused, and the pieces of a vectored send live
in `kmirror_engine.copying.batch_buffers`.

Both plug into kafka-python's connection like its own requests (`with_header`, `encode`,
`expect_response`, and a header whose `get_response_class` names the answer's decoder), so
connection set-up, TLS, SASL, correlation ids and timeouts stay the library's. The produce
answer is small and decoded by kafka-python (`ProduceResponse`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kafka.protocol.producer.produce import ProduceResponse

from kmirror_engine.copying.batch_buffers import BufferPool, Frame, Gather
from kmirror_engine.copying.batch_wire import Batch, patch_header, read_uvarint, uvarint

FETCH_KEY, FETCH_VERSION = 1, 12
PRODUCE_KEY, PRODUCE_VERSION = 0, 9
_REQUEST_HEAD = struct.Struct(">hhih")  # api key, version, correlation id, client id length (header v2)
_FETCH_HEAD = struct.Struct(">iiiibii")  # replica, max wait, min bytes, max bytes, isolation, session, epoch
_FETCH_PARTITION = struct.Struct(">iiqiqi")  # partition, leader epoch, offset, last fetched epoch, log start, max
_PRODUCE_HEAD = struct.Struct(">hi")  # acks, timeout (after a null transactional id)
_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_PARTITION_ANSWER = struct.Struct(">ihqqq")  # index, error, high watermark, last stable, log start
_ABORTED = struct.Struct(">qq")


def _skip_tags(view: memoryview, at: int) -> int:
    """Past a tagged-fields section (none of its fields is read here)."""
    count, at = read_uvarint(view, at)
    for _ in range(count):
        _, at = read_uvarint(view, at)
        size, at = read_uvarint(view, at)
        at += size
    return at


def _compact_string(text: str) -> bytes:
    raw = text.encode()
    return uvarint(len(raw) + 1) + raw


class _InFlight:
    """What kafka-python's parser keeps per request in flight: the correlation id and the decoder."""

    __slots__ = ("correlation_id", "response_class")

    def __init__(self, correlation_id: int, response_class: Any) -> None:
        self.correlation_id, self.response_class = correlation_id, response_class

    def get_response_class(self) -> Any:
        return self.response_class


class _Call:
    """A request framed here, sent by kafka-python's connection as it sends its own."""

    API_KEY: int
    API_VERSION: int
    RESPONSE: Any
    header: _InFlight | None = None

    def with_header(self, correlation_id: int = 0, client_id: str = "kmirror") -> None:
        self.header = _InFlight(correlation_id, self.RESPONSE)
        self._client_id = client_id.encode()

    def expect_response(self) -> bool:
        return True

    def _head(self) -> bytes:
        assert self.header is not None, "with_header() first"
        return (
            _REQUEST_HEAD.pack(self.API_KEY, self.API_VERSION, self.header.correlation_id, len(self._client_id))
            + self._client_id
            + b"\x00"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(v{self.API_VERSION})"


# -- Fetch --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AbortedEntry:
    producer_id: int
    first_offset: int


@dataclass(slots=True)
class PartitionData:
    """One partition of a fetch answer; `records` is a view of the answer's receive buffer."""

    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[AbortedEntry] | None
    records: memoryview | None


@dataclass(slots=True)
class TopicData:
    topic: str
    partitions: list[PartitionData]


@dataclass(slots=True)
class _AnswerHeader:
    correlation_id: int


def _view(buffer: Any) -> memoryview:
    return buffer.view if isinstance(buffer, Frame) else memoryview(buffer)


@dataclass(slots=True)
class FetchAnswer:
    """A Fetch v12 answer (the fields the batch path reads)."""

    throttle_time_ms: int
    error_code: int
    responses: list[TopicData]

    @classmethod
    def parse_header(cls, buffer: Any) -> _AnswerHeader:
        """Response header v1 at the buffer's position (kafka-python's `KafkaBytes`): moves past it."""
        view = _view(buffer)
        at = buffer.tell()
        (correlation_id,) = _I32.unpack_from(view, at)
        buffer.seek(_skip_tags(view, at + 4))
        return _AnswerHeader(correlation_id)

    @classmethod
    def decode(cls, buffer: Any) -> FetchAnswer:
        """The answer body from the buffer's position; ValueError/struct.error on malformed bytes."""
        return decode_fetch_answer(_view(buffer), buffer.tell())


def decode_fetch_answer(view: memoryview, at: int = 0) -> FetchAnswer:
    """A Fetch v12 answer body starting at `at` of `view` (records stay views of `view`)."""
    throttle, error = _I32.unpack_from(view, at)[0], _I16.unpack_from(view, at + 4)[0]
    at += 10  # throttle, error, session id
    topic_count, at = read_uvarint(view, at)
    topics: list[TopicData] = []
    for _ in range(max(0, topic_count - 1)):
        name_length, at = read_uvarint(view, at)
        name = bytes(view[at : at + name_length - 1]).decode()
        at += name_length - 1
        partition_count, at = read_uvarint(view, at)
        partitions: list[PartitionData] = []
        for _ in range(max(0, partition_count - 1)):
            index, part_error, high, stable, log_start = _PARTITION_ANSWER.unpack_from(view, at)
            at += _PARTITION_ANSWER.size
            aborted_count, at = read_uvarint(view, at)
            aborted: list[AbortedEntry] | None = None if aborted_count == 0 else []
            for _ in range(max(0, aborted_count - 1)):
                producer_id, first_offset = _ABORTED.unpack_from(view, at)
                assert aborted is not None
                aborted.append(AbortedEntry(producer_id, first_offset))
                at = _skip_tags(view, at + _ABORTED.size)
            at += 4  # preferred read replica
            records_length, at = read_uvarint(view, at)
            records = None if records_length == 0 else view[at : at + records_length - 1]
            at = _skip_tags(view, at + max(0, records_length - 1))
            if records is not None and len(records) != records_length - 1:
                raise ValueError("fetch answer truncated inside a partition's records")
            partitions.append(PartitionData(index, part_error, high, stable, log_start, aborted, records))
        at = _skip_tags(view, at)
        topics.append(TopicData(name, partitions))
    _skip_tags(view, at)
    return FetchAnswer(throttle, error, topics)


class FetchCall(_Call):
    """A read_committed Fetch v12 without a fetch session.

    `partitions`: (topic, partition, fetch offset, partition byte limit), in request order."""

    API_KEY, API_VERSION, RESPONSE = FETCH_KEY, FETCH_VERSION, FetchAnswer

    def __init__(
        self,
        partitions: Sequence[tuple[str, int, int, int]],
        max_wait_ms: int,
        max_bytes: int,
        isolation: int,
    ) -> None:
        topics: dict[str, list[tuple[int, int, int]]] = {}
        for topic, partition, offset, limit in partitions:
            topics.setdefault(topic, []).append((partition, offset, limit))
        body = bytearray(_FETCH_HEAD.pack(-1, max_wait_ms, 1, max_bytes, isolation, 0, -1))
        body += uvarint(len(topics) + 1)
        for topic, parts in topics.items():
            body += _compact_string(topic) + uvarint(len(parts) + 1)
            for partition, offset, limit in parts:
                body += _FETCH_PARTITION.pack(partition, -1, offset, -1, -1, limit) + b"\x00"
            body += b"\x00"
        body += b"\x01\x01\x00"  # no forgotten topics, rack id "", no tagged fields
        self.body = bytes(body)
        self.partitions = list(partitions)

    def encode(self, framed: bool = True, header: bool = True) -> bytes:
        head = self._head() if header else b""
        payload = head + self.body
        return (_I32.pack(len(payload)) + payload) if framed else payload


# -- Produce ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProducedBatch:
    """One batch of a produce request, with the producer fields it is sent with."""

    topic: str
    partition: int
    batch: Batch
    producer_id: int
    producer_epoch: int
    base_sequence: int


class ProduceCall(_Call):
    """An idempotent (not transactional) Produce v9 with acks=-1 of `batches`, each written once
    from its fetched bytes into the request and rewritten there (`patch_header`)."""

    API_KEY, API_VERSION = PRODUCE_KEY, PRODUCE_VERSION
    RESPONSE = ProduceResponse[PRODUCE_VERSION]

    def __init__(self, batches: Iterable[ProducedBatch], timeout_ms: int, pool: BufferPool | None = None) -> None:
        self.topics: dict[str, list[ProducedBatch]] = {}
        for item in batches:
            self.topics.setdefault(item.topic, []).append(item)
        self.timeout_ms, self.pool = timeout_ms, pool

    def _layout(self, header: bool) -> tuple[list[bytes | memoryview], list[tuple[int, ProducedBatch]]]:
        """The request's pieces in order (a batch's piece is its fetched bytes) and where each batch is."""
        head = (self._head() if header else b"") + b"\x00" + _PRODUCE_HEAD.pack(-1, self.timeout_ms)
        pieces: list[bytes | memoryview] = [head, uvarint(len(self.topics) + 1)]
        placed: list[tuple[int, ProducedBatch]] = []  # (index of the batch's piece, batch)
        for topic, items in self.topics.items():
            pieces += [_compact_string(topic), uvarint(len(items) + 1)]
            for item in items:
                pieces.append(_I32.pack(item.partition) + uvarint(len(item.batch.data) + 1))
                placed.append((len(pieces), item))
                pieces += [item.batch.data, b"\x00"]
            pieces.append(b"\x00")
        pieces.append(b"\x00")
        return pieces, placed

    def encode(self, framed: bool = True, header: bool = True) -> bytearray | memoryview:
        """The request's bytes: a view of a pooled buffer (free again once the connection sent it
        and dropped the view) or a new buffer. Each batch is copied once, then rewritten in place."""
        pieces, placed = self._layout(header)
        size = sum(len(p) for p in pieces)
        start = 4 if framed else 0
        out = self.pool.take(start + size) if self.pool is not None else None
        out = out if out is not None else memoryview(bytearray(start + size))
        if framed:
            _I32.pack_into(out, 0, size)
        at, offsets = start, []
        for piece in pieces:
            offsets.append(at)
            out[at : at + len(piece)] = piece
            at += len(piece)
        for index, item in placed:
            begin = offsets[index]
            patch_header(
                out,
                begin,
                begin + len(item.batch.data),
                item.batch.attributes,
                item.producer_id,
                item.producer_epoch,
                item.base_sequence,
            )
        return out

    def gather(self) -> Gather | None:
        """The framed request as pieces for one vectored send, the batches not copied: each batch's
        header is rewritten where it was fetched (a resend rewrites it the same way, which changes
        nothing). None when a batch's bytes are read-only (then `encode`)."""
        if any(item.batch.data.readonly for items in self.topics.values() for item in items):
            return None
        pieces, placed = self._layout(True)
        for _, item in placed:
            data = item.batch.data
            patch_header(
                data, 0, len(data), item.batch.attributes, item.producer_id, item.producer_epoch, item.base_sequence
            )
        batches = {index for index, _ in placed}
        out: list[bytes | memoryview] = [_I32.pack(sum(len(p) for p in pieces))]
        for index, piece in enumerate(pieces):  # the framing between two batches as one piece
            if index in batches or isinstance(out[-1], memoryview):
                out.append(piece)
            else:
                out[-1] = bytes(out[-1]) + piece
        return Gather(out)
