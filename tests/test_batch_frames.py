"""The batch path's own framing of Fetch v12 and Produce v9 (`kmirror_engine.copying.batch_frames`)
against kafka-python's generic encoder and decoder of the same messages: the same bytes on the
wire, the same fields read back, and records never copied out of the receive buffer."""

from __future__ import annotations

import collections
import socket
import struct
from typing import Any

from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.frame import KafkaBytes
from kafka.protocol.producer.produce import ProduceRequest

from kmirror_engine.copying.batch_buffers import Gather
from kmirror_engine.copying.batch_frames import FetchAnswer, ProduceCall, ProducedBatch, uvarint
from kmirror_engine.copying.batch_queue import fetch_request
from kmirror_engine.copying.batch_sockets import _DirectReadTransport
from kmirror_engine.copying.batch_wire import crc_ok, rewrite, split_batches
from tests.test_batch_copy import build

Partition = FetchResponse.FetchableTopicResponse.PartitionData


def fetch_answer(partitions: dict[str, list[Any]], throttle_time_ms: int = 0) -> Any:
    """kafka-python's v12 fetch answer (no error, no session) of these partitions of each topic, in order."""
    responses = [FetchResponse.FetchableTopicResponse(topic=t, partitions=p) for t, p in partitions.items()]
    return FetchResponse[12](throttle_time_ms=throttle_time_ms, error_code=0, session_id=0, responses=responses)


def test_uvarint_is_kafkas_unsigned_varint() -> None:
    assert [uvarint(v) for v in (0, 1, 127, 128, 300, 2**21)] == [
        b"\x00",
        b"\x01",
        b"\x7f",
        b"\x80\x01",
        b"\xac\x02",
        b"\x80\x80\x80\x01",
    ]


def test_a_fetch_request_is_byte_for_byte_kafka_pythons() -> None:
    ours = fetch_request([("orders", 1, 42), ("orders", 0, 7), ("pay.ments", 3, 2**40)], wide=[("orders", 0)])
    ours.with_header(correlation_id=99, client_id="kmirror-batch")
    parts = {
        t: [
            FetchRequest.FetchTopic.FetchPartition(
                partition=p, fetch_offset=o, partition_max_bytes=m, current_leader_epoch=-1, log_start_offset=-1
            )
            for tt, p, o, m in ours.partitions
            if tt == t
        ]
        for t in ("orders", "pay.ments")
    }
    theirs = FetchRequest[12](
        replica_id=-1,
        max_wait_ms=50,
        min_bytes=1,
        max_bytes=4 * 1024 * 1024,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        forgotten_topics_data=[],
        rack_id="",
        topics=[FetchRequest.FetchTopic(topic=t, partitions=p) for t, p in parts.items()],
    )
    theirs.with_header(correlation_id=99, client_id="kmirror-batch")
    assert bytes(ours.encode(framed=True, header=True)) == bytes(theirs.encode(framed=True, header=True))
    assert ours.partitions[0][:2] == ("orders", 0)  # the wide partition first (KIP-74)


def test_a_produce_request_is_kafka_pythons_with_each_batch_rewritten_once() -> None:
    first, second = build(0, 3), build(3, 2)
    [a], [b] = split_batches(first), split_batches(second)
    items = [
        ProducedBatch("west.t", 0, a, 4711, 2, 0),
        ProducedBatch("west.t", 1, b, 4711, 2, 9),
        ProducedBatch("west.u", 0, a, 4711, 2, 5),
    ]
    ours = ProduceCall(items, 30_000)
    ours.with_header(correlation_id=5, client_id="kmirror")
    data = ProduceRequest.TopicProduceData.PartitionProduceData
    theirs = ProduceRequest[9](
        transactional_id=None,
        acks=-1,
        timeout_ms=30_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="west.t",
                partition_data=[
                    data(index=0, records=bytes(rewrite(a, 4711, 2, 0))),
                    data(index=1, records=bytes(rewrite(b, 4711, 2, 9))),
                ],
            ),
            ProduceRequest.TopicProduceData(
                name="west.u", partition_data=[data(index=0, records=bytes(rewrite(a, 4711, 2, 5)))]
            ),
        ],
    )
    theirs.with_header(correlation_id=5, client_id="kmirror")
    encoded = ours.encode(framed=True, header=True)
    assert bytes(encoded) == bytes(theirs.encode(framed=True, header=True))
    assert bytes(ours.encode()) == bytes(encoded)  # a resend: the same bytes
    decoded = ProduceRequest[9].decode(bytes(ours.encode(framed=False, header=False)))
    for topic in decoded.topic_data:
        for part in topic.partition_data:
            assert crc_ok(part.records)
            assert struct.unpack_from(">qhi", part.records, 43)[:2] == (4711, 2)
    assert bytes(first[:17]) != bytes(rewrite(a, 4711, 2, 0)[:17])  # base offset and leader epoch were rewritten
    assert bytes(first[61:]) == bytes(rewrite(a, 4711, 2, 0)[61:])  # the records were not touched


def test_a_gathered_produce_request_is_the_encoded_one_with_headers_rewritten_where_fetched() -> None:
    """Plaintext connections send a produce request as pieces: the same bytes as `encode`, each
    batch rewritten in its own (fetch) buffer, not copied; read-only batches are encoded instead."""
    first, second = bytearray(build(0, 3)), bytearray(build(3, 2, codec=1))
    [a], [b] = split_batches(memoryview(first)), split_batches(memoryview(second))
    items = [ProducedBatch("west.t", 0, a, 4711, 2, 0), ProducedBatch("west.u", 1, b, 4711, 2, 9)]
    encoded = ProduceCall(
        [
            ProducedBatch(i.topic, i.partition, split_batches(bytes(i.batch.data))[0], 4711, 2, i.base_sequence)
            for i in items
        ],
        30_000,
    )
    encoded.with_header(correlation_id=5, client_id="kmirror")
    gathered = ProduceCall(items, 30_000)
    gathered.with_header(correlation_id=5, client_id="kmirror")
    pieces = gathered.gather()
    assert pieces is not None and len(pieces.pieces) == 5  # framing, batch, framing, batch, framing
    assert b"".join(bytes(p) for p in pieces.pieces) == bytes(encoded.encode(framed=True, header=True))
    assert pieces.pieces[1].obj is first and pieces.pieces[3].obj is second  # the fetched buffers themselves
    assert crc_ok(first) and crc_ok(second) and struct.unpack_from(">qhi", first, 43) == (4711, 2, 0)
    again = gathered.gather()  # a resend
    assert again is not None and b"".join(bytes(p) for p in again.pieces) == b"".join(bytes(p) for p in pieces.pieces)
    assert ProduceCall([ProducedBatch("t", 0, split_batches(bytes(first))[0], 1, 0, 0)], 1000).gather() is None


def test_gathered_requests_survive_partial_vectored_sends_in_order() -> None:
    """The plaintext transport sends queued pieces with sendmsg; a socket that takes a few KiB at a
    time (partial sends, EAGAIN) still gets every byte once, in order, plain chunks between them."""
    left, right = socket.socketpair()
    left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    left.setblocking(False)
    payload = [bytes(range(256)) * 40, memoryview(bytearray(b"x" * 100_000)), b"tail"]
    transport = _DirectReadTransport.__new__(_DirectReadTransport)
    transport._sock = left
    transport._write_buffer = collections.deque([Gather(list(payload)), b"plain", Gather([b"g2", b"-end"])])
    expected = b"".join(bytes(p) for p in payload) + b"plain" + b"g2-end"
    got, rounds = bytearray(), 0
    while len(got) < len(expected):
        _sent, error = transport._sock_send()
        assert error is None
        rounds += 1
        right.setblocking(False)
        try:
            while chunk := right.recv(65536):
                got += chunk
        except BlockingIOError:
            pass
    assert bytes(got) == expected and rounds > 1 and not transport._write_buffer
    left.close()
    right.close()


def test_a_fetch_answer_is_read_as_kafka_python_encodes_it_and_records_stay_views() -> None:
    records = bytes(build(0, 3) + build(3, 4))
    answer = fetch_answer(
        {
            "orders": [
                Partition(
                    partition_index=1,
                    error_code=0,
                    high_watermark=7,
                    last_stable_offset=7,
                    log_start_offset=0,
                    aborted_transactions=[
                        Partition.AbortedTransaction(producer_id=9, first_offset=2),
                        Partition.AbortedTransaction(producer_id=11, first_offset=5),
                    ],
                    preferred_read_replica=-1,
                    records=records,
                    diverging_epoch=Partition.EpochEndOffset(epoch=3, end_offset=4),
                    current_leader=Partition.LeaderIdAndEpoch(leader_id=2, leader_epoch=8),
                ),
                Partition(
                    partition_index=0,
                    error_code=6,
                    high_watermark=-1,
                    last_stable_offset=-1,
                    log_start_offset=-1,
                    aborted_transactions=None,
                    preferred_read_replica=-1,
                    records=None,
                ),
            ],
            "pay": [],
        },
        throttle_time_ms=3,
    )
    answer.with_header(correlation_id=77)
    wire = answer.encode(framed=False, header=True)
    buffer = KafkaBytes(len(wire))  # what kafka-python's parser hands the decoder
    buffer.write(wire)
    buffer.seek(0)
    header = FetchAnswer.parse_header(buffer)
    ours = FetchAnswer.decode(buffer)
    assert header.correlation_id == 77
    assert (ours.throttle_time_ms, ours.error_code) == (3, 0)
    assert [t.topic for t in ours.responses] == ["orders", "pay"]
    one, zero = ours.responses[0].partitions
    assert (one.partition_index, one.error_code, one.high_watermark) == (1, 0, 7)
    assert [(a.producer_id, a.first_offset) for a in one.aborted_transactions or ()] == [(9, 2), (11, 5)]
    assert isinstance(one.records, memoryview) and bytes(one.records) == records
    assert one.records.obj is buffer  # a view of the receive buffer, not a copy
    assert (zero.partition_index, zero.error_code, zero.aborted_transactions, zero.records) == (0, 6, None, None)
    assert ours.responses[1].partitions == []


def test_a_pooled_buffer_is_handed_out_again_only_once_no_view_of_it_is_alive() -> None:
    from kmirror_engine.copying.batch_buffers import BufferPool

    pool = BufferPool(capacity=1024, count=2)
    first = pool.take(100)
    assert first is not None and len(first) == 100
    batch = first[10:20]  # a batch kept by a pending produce
    del first
    second = pool.take(50)
    assert second is not None and second.obj is not batch.obj  # the first buffer is still referenced
    assert pool.take(10) is None and pool.take(2048) is None  # every buffer in use; too large
    del batch
    third = pool.take(1000)
    assert third is not None and third.obj is pool.buffers[0]


def test_pooled_buffers_are_as_large_as_the_frames_asked_of_them() -> None:
    """A buffer is sized to its frame in GRAIN steps, never past the capacity; a free buffer too
    small for a frame is replaced, a large enough one reused, a referenced one kept."""
    from kmirror_engine.copying.batch_buffers import BufferPool

    grain = BufferPool.GRAIN
    pool = BufferPool(capacity=5 * grain, count=2)
    small = pool.take(grain + 1)
    assert small is not None and len(small) == grain + 1 and len(pool.buffers[0]) == 2 * grain
    held = pool.take(10)
    assert held is not None and len(pool.buffers[1]) == grain
    del small
    large = pool.take(4 * grain + 5)  # the free buffer is too small: replaced by a larger one
    assert large is not None and large.obj is pool.buffers[0] and len(pool.buffers[0]) == 5 * grain
    assert pool.take(10) is None  # both referenced, the pool full
    del large
    again = pool.take(3 * grain)
    assert again is not None and again.obj is pool.buffers[0]  # reused, not grown or shrunk
    assert held.obj is pool.buffers[1] and len(pool.buffers) == 2


def test_the_direct_parser_reads_answers_split_anyhow_into_their_frames_in_order() -> None:
    """Answers arrive in pieces on a real socket: a fetch answer lands in a pooled buffer and is
    decoded in place, a produce answer through kafka-python's decoder, in request order."""
    import socket

    from kafka.protocol.parser import KafkaProtocol
    from kafka.protocol.producer.produce import ProduceResponse

    from kmirror_engine.copying.batch_buffers import Frame
    from kmirror_engine.copying.batch_frames import ProduceCall
    from kmirror_engine.copying.batch_sockets import POOLED_MIN_BYTES, _DirectParser

    records = bytes(build(0, 3)) * (POOLED_MIN_BYTES // len(build(0, 3)) + 1)  # large enough for the pool
    fetch = fetch_answer(
        {
            "t": [
                Partition(
                    partition_index=0,
                    error_code=0,
                    high_watermark=3,
                    last_stable_offset=3,
                    log_start_offset=0,
                    aborted_transactions=None,
                    preferred_read_replica=-1,
                    records=records,
                )
            ]
        }
    )
    fetch.with_header(correlation_id=1)
    produced = ProduceResponse[9](
        throttle_time_ms=0,
        responses=[
            ProduceResponse.TopicProduceResponse(
                name="west.t",
                partition_responses=[
                    ProduceResponse.TopicProduceResponse.PartitionProduceResponse(
                        index=0, error_code=0, base_offset=96, log_append_time_ms=-1, log_start_offset=0
                    )
                ],
            )
        ],
    )
    produced.with_header(correlation_id=2)
    wire = bytes(fetch.encode(framed=True, header=True)) + bytes(produced.encode(framed=True, header=True))
    parser = KafkaProtocol(client_id="t")
    parser.__class__ = _DirectParser
    parser.adopt()
    fetch_call, produce_call = fetch_request([("t", 0, 0)]), ProduceCall([], 1000)
    for cid, call in ((1, fetch_call), (2, produce_call)):
        call.with_header(correlation_id=cid)
        parser.in_flight_requests.append(call.header)
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    answers: list[object] = []
    try:
        for at in range(0, len(wire), 7001):  # pieces that cut headers and frames anywhere
            theirs.sendall(wire[at : at + 7001])
            assert parser.fill(ours)
            answers += parser.receive_bytes(b"")
    finally:
        ours.close()
        theirs.close()
    assert [cid for cid, _ in answers] == [1, 2]
    fetched, landed = answers[0][1], answers[1][1]
    [part] = fetched.responses[0].partitions  # type: ignore[attr-defined]
    assert bytes(part.records) == records and part.records.obj in parser._pool.buffers
    assert landed.responses[0].partition_responses[0].base_offset == 96  # type: ignore[attr-defined]
    assert not isinstance(parser._rbuffer, Frame) and parser.receive_bytes(b"") == []
