"""Issue 41: the batch path loses, corrupts or duplicates nothing. Each test reproduces a review
finding against a target that behaves as a Kafka broker's idempotent log does (`BrokerLog`):
it appends a batch only at the next expected sequence, answers a resend of a stored batch as a
duplicate, and refuses a batch that skips sequences (OUT_OF_ORDER_SEQUENCE_NUMBER)."""

from __future__ import annotations

import struct
from collections import deque
from types import SimpleNamespace
from typing import Any

import pytest
from kafka.errors import KafkaConnectionError
from kafka.future import Future
from kafka.record.default_records import DefaultRecordBatch

from kmirror_engine.copying import batch_queue
from kmirror_engine.copying.batch_copy import BatchRangeCopier
from kmirror_engine.copying.batch_wire import split_batches
from kmirror_engine.copying.ranges import CopyRange
from tests.test_batch_copy import FakeLink, build, produced_records


class BrokerLog:
    """The target's partitions as an idempotent producer's broker keeps them; produce requests are
    answered at the next `poll` (in order per node), or refused at once when `refuse` says so."""

    def __init__(self, refuse: Any = lambda n: False, leaders: list[int] | None = None) -> None:
        self.log: dict[tuple[str, int], list[tuple[int, bytes | None]]] = {}  # (offset, value) per partition
        self.next_sequence: dict[tuple[str, int], int] = {}
        self.stored: dict[tuple[str, int], dict[int, int]] = {}  # sequence -> base offset (dedup)
        self.waiting: deque[tuple[Future, Any, int]] = deque()
        self.refuse = refuse
        self.requests = 0
        self.leaders = leaders or [1]  # leader of every partition per metadata refresh (the last stays)
        self.refreshed = 0
        self.manager = SimpleNamespace(least_loaded_node=lambda: 1)

    def leaders_now(self) -> int:
        return self.leaders[min(self.refreshed - 1, len(self.leaders) - 1)]

    def leaders_for(self, topics: Any) -> dict[tuple[str, int], int]:
        self.refreshed += 1
        return {(t, 0): self.leaders_now() for t in topics}

    def send(self, request: Any, node_id: int) -> Future:
        if type(request).__name__.startswith("InitProducerId"):
            return Future().success(SimpleNamespace(error_code=0, producer_id=4711, producer_epoch=2))
        self.requests += 1
        if self.refuse(self.requests):
            return Future().failure(KafkaConnectionError("connection paused (throttled): request refused"))
        future = Future()
        self.waiting.append((future, request, node_id))
        return future

    def answer_all(self) -> None:
        """Answer every request; the current leader's first (connections answer independently:
        the new leader can answer before the old one)."""
        waiting = sorted(self.waiting, key=lambda w: w[2] != self.leaders_now())
        self.waiting.clear()
        for future, request, node in waiting:
            future.success(self.append(request, node))

    def append(self, request: Any, node: int) -> Any:
        records = produced_records(request)
        [(topic, [item])] = request.topics.items()
        key = (topic, item.partition)
        if node != self.leaders_now():
            error, base = 6, -1  # NOT_LEADER_OR_FOLLOWER
        else:
            error, base = self._append(key, records)
        part = SimpleNamespace(index=item.partition, error_code=error, base_offset=base)
        return SimpleNamespace(responses=[SimpleNamespace(name=topic, partition_responses=[part])])

    def _append(self, key: tuple[str, int], records: bytes) -> tuple[int, int]:
        [batch] = split_batches(records)
        sequence = struct.unpack_from(">i", records, 53)[0]
        expected = self.next_sequence.get(key, 0)
        if sequence in self.stored.get(key, {}):
            return 0, self.stored[key][sequence]  # a resend of a stored batch: its offset again
        if sequence != expected:
            return 45, -1  # OUT_OF_ORDER_SEQUENCE_NUMBER
        log = self.log.setdefault(key, [])
        base = len(log)
        log.extend((base + i, r.value) for i, r in enumerate(DefaultRecordBatch(bytes(records))))
        self.next_sequence[key] = sequence + batch.record_count
        self.stored.setdefault(key, {})[sequence] = base
        return 0, base


class Target(FakeLink):
    def __init__(self, broker: BrokerLog) -> None:
        super().__init__(None)
        self.broker = broker

    def leaders(self, topics: Any, timeout_s: float = 30.0) -> dict[tuple[str, int], int]:
        return self.broker.leaders_for(topics)

    def send(self, request: Any, node_id: int) -> Future:
        return self.broker.send(request, node_id)


class Source(FakeLink):
    """Serves `records` from offset 0 (each fetch from its position); a poll answers the target."""

    def __init__(self, records: bytes, broker: BrokerLog) -> None:
        super().__init__(self.fetched)
        self.records, self.broker = records, broker

    def fetched(self, request: Any) -> Any:
        [(topic, partition, offset, _)] = request.partitions
        try:
            data = b"".join(bytes(b.data) for b in split_batches(self.records) if b.next_offset > offset)
        except ValueError:  # bytes mutated on the way (tests/test_batch_wire_property.py): served as they are
            data = self.records
        part = SimpleNamespace(partition_index=partition, error_code=0, records=data, aborted_transactions=[])
        return SimpleNamespace(responses=[SimpleNamespace(topic=topic, partitions=[part])])

    def poll(self, timeout_ms: float) -> None:
        self.broker.answer_all()


def _values(broker: BrokerLog) -> list[bytes | None]:
    return [value for _, value in broker.log.get(("west.t", 0), [])]


def test_a_produce_the_client_refuses_at_once_is_resent_in_order_never_counted_as_landed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A paused connection (a quota throttle) refuses the second request at once while the first
    is in flight: the refused batch (and only it) is resent after the first one's answer, every
    record lands once and in order, and the offset syncs map each record to where it landed.
    Before: the in-flight first batch was moved to the resend and the refused one booked as
    landed: 12 records reported, 10 on the target, syncs going backwards."""
    monkeypatch.setattr(batch_queue, "MERGE_BELOW_RECORDS", 0)  # three batches, three requests
    source_records = build(0, 4) + build(4, 6) + build(10, 2)
    broker = BrokerLog(refuse=lambda n: n == 2)
    copier = BatchRangeCopier(Source(source_records, broker), Target(broker), fallback=lambda: None)  # type: ignore[arg-type]
    [progress] = copier.copy([CopyRange("t", 0, 0, 12, "west.t")])
    expected = [r.value for b in split_batches(source_records) for r in DefaultRecordBatch(bytes(b.data))]
    assert _values(broker) == expected  # every record once, in order
    assert progress.records == 12
    assert progress.offset_syncs == ((0, 0), (11, 11))
    assert broker.requests == 4  # three batches and one resend


def test_a_leader_move_with_batches_in_flight_at_the_old_leader_books_each_answer_to_its_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The target partition's leader moves (node 1 -> 2) while batches are in flight to node 1:
    no batch goes to node 2 before node 1 answered its own (which then fail and are resent in
    order), so no answer is booked against another batch and no out-of-order error is raised."""
    monkeypatch.setattr(batch_queue, "MERGE_BELOW_RECORDS", 0)
    source_records = b"".join(build(3 * i, 3) for i in range(6))
    broker = BrokerLog(leaders=[1, 2])  # the round's metadata says 1; every refresh after it says 2
    copier = BatchRangeCopier(Source(source_records, broker), Target(broker), fallback=lambda: None)  # type: ignore[arg-type]
    # the first two batches go to node 1; then a refresh (another range's retry) names node 2
    original = copier._produce_once
    calls = [0]

    def produce_once(live: Any) -> bool:
        calls[0] += 1
        if calls[0] == 2:
            copier._target_leaders = copier.target.leaders({"west.t"})
        return original(live)

    monkeypatch.setattr(copier, "_produce_once", produce_once)
    [progress] = copier.copy([CopyRange("t", 0, 0, 18, "west.t")])
    expected = [r.value for b in split_batches(source_records) for r in DefaultRecordBatch(bytes(b.data))]
    assert _values(broker) == expected
    assert (progress.records, progress.offset_syncs) == (18, ((0, 0), (17, 17)))


def _legacy_message_set(first: int, count: int, magic: int = 1) -> bytes:
    """A gzip-compressed old-format message set as a broker stores it: one wrapper message at the
    offset of its last inner record (`first + count - 1`), the inner records inside."""
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic, LegacyRecordBatchBuilder.CODEC_GZIP, 1 << 20)
    for i in range(count):
        builder.append(
            i if magic == 1 else first + i,
            1_700_000_000_000 + i if magic else None,
            b"k",
            f"value-{first + i}".encode(),
        )
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, first + count - 1)  # the wrapper's offset: its last inner record's
    return bytes(data)


class RecordLoop:
    """The record loop the batch path falls back to: copies whatever span it is asked to (counted)."""

    def __init__(self) -> None:
        self.spans: list[tuple[int, int]] = []
        self.limits: Any = {}
        self.rules: Any = {}

    def copy(self, ranges: list[CopyRange]) -> list[Any]:
        from kmirror_engine.observability.progress import PartitionProgress

        out = []
        for r in ranges:
            self.spans.append((r.start_offset, r.end_offset))
            n = r.end_offset - r.start_offset
            syncs = ((r.start_offset, r.start_offset), (r.end_offset - 1, r.end_offset - 1))
            out.append(
                PartitionProgress(
                    r.source_topic, r.partition, r.target_topic, r.start_offset, r.end_offset, n, 10 * n, None, syncs
                )
            )
        return out


@pytest.mark.parametrize("magic", [0, 1])
def test_old_format_compressed_message_sets_go_to_the_record_loop_whole_not_only_their_last_record(
    magic: int,
) -> None:
    """Two compressed v0/v1 message sets of 5 records (wrappers at offsets 4 and 9), as pre-0.11
    segments of an old compacted topic hold them: the record loop is asked for all 10 offsets.
    Before: for [4, 5) and [9, 10), each wrapper's own offset, and 8 of 10 records were lost."""
    records = _legacy_message_set(0, 5, magic) + _legacy_message_set(5, 5, magic)
    assert [(b.base_offset, b.magic) for b in split_batches(records)] == [(4, magic), (9, magic)]
    broker = BrokerLog()
    loop = RecordLoop()
    copier = BatchRangeCopier(Source(records, broker), Target(broker), fallback=lambda: loop)  # type: ignore[arg-type]
    [progress] = copier.copy([CopyRange("t", 0, 0, 10, "west.t")])
    assert loop.spans == [(0, 10)]
    assert (progress.records, progress.fallback_records) == (10, 10)
    # a range starting inside the first message set: from its start, not from the wrapper's offset
    loop.spans.clear()
    copier.copy([CopyRange("t", 0, 2, 10, "west.t")])
    assert loop.spans == [(2, 10)]


def test_a_corrupted_small_batch_is_never_merged_under_a_fresh_crc() -> None:
    """A flipped byte in a small source batch: merging would give it a fresh CRC the target
    accepts (corrupted records stored as good ones). Its own CRC is checked before the merge:
    the copy fails naming partition and offset, and nothing of the run is produced."""
    from kmirror_engine.copying.batch_merge import merge
    from kmirror_engine.copying.batch_wire import BatchFormatError
    from kmirror_engine.copying.ranges import CopyError

    middle = bytearray(build(3, 2))
    middle[-3] ^= 0x01  # inside the last record's header value: the CRC no longer matches
    records = build(0, 3) + bytes(middle) + build(5, 4)
    with pytest.raises(BatchFormatError, match="batch at offset 3 does not match its CRC32C"):
        merge(split_batches(records))
    broker = BrokerLog()
    copier = BatchRangeCopier(Source(records, broker), Target(broker), fallback=lambda: None)  # type: ignore[arg-type]
    with pytest.raises(CopyError, match=r"t\[0\] from offset 0: batch at offset 3 does not match its CRC32C"):
        copier.copy([CopyRange("t", 0, 0, 9, "west.t")])
    assert _values(broker) == []


def test_malformed_fetched_batches_fail_naming_partition_and_offset_not_a_bare_index_error() -> None:
    """A control batch whose record is cut inside a varint (a fuzz of the codec found such inputs:
    bare IndexErrors naming nothing): the copy fails with a CopyError naming partition and offset."""
    from kmirror_engine.copying.batch_crc import crc32c
    from kmirror_engine.copying.ranges import CopyError
    from tests.test_batch_copy import marker

    cut = bytearray(marker(3, 77, 1)[:61] + b"\x80")  # the marker's one record: an unterminated varint
    struct.pack_into(">i", cut, 8, len(cut) - 12)
    struct.pack_into(">I", cut, 17, crc32c(memoryview(cut)[21:]))
    broker = BrokerLog()

    def copy_fails(records: bytes, end: int, match: str) -> None:
        copier = BatchRangeCopier(Source(records, broker), Target(broker), fallback=lambda: None)  # type: ignore[arg-type]
        with pytest.raises(CopyError, match=match):
            copier.copy([CopyRange("t", 0, 0, end, "west.t")])

    copy_fails(
        build(0, 3) + bytes(cut),
        4,
        r"fetching t\[0\] at offset 0: the fetched record batches are malformed \(IndexError",
    )
    # a magic 2 batch whose length is shorter than a batch header (struct.error at produce time before)
    short = bytearray(build(3, 2))
    struct.pack_into(">i", short, 8, 8)
    copy_fails(
        build(0, 3) + bytes(short[:20]),
        5,
        r"fetching t\[0\] at offset 0: .*batch at offset 3 is 20 bytes, shorter than a batch header",
    )


def test_a_record_older_than_its_batchs_first_goes_to_the_record_loop_under_a_timestamp_window() -> None:
    """Issue 41: only the batch's base and max timestamps were checked, but a record's delta may
    be negative: a batch whose first and highest timestamps are fresh could hold a record the
    target's message.timestamp.before.max.ms refuses (the whole batch refused). The lowest is read
    from the records; a compressed batch under a finite window is not told and goes to the record
    loop. Without a bound (the broker's default, Long.MAX_VALUE) nothing changes."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    from kmirror_engine.copying.batch_state import RangeInFlight, fallback_reason
    from kmirror_engine.copying.record_limits import TargetRules

    now = 1_800_000_000_000

    def batch(timestamps: list[int], codec: int = 0) -> Any:
        builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 20)
        for delta, ts in enumerate(timestamps):
            builder.append(delta, ts, b"k", b"v" * 200, [])
        data = bytearray(builder.build())
        struct.pack_into(">q", data, 0, 100)
        [out] = split_batches(bytes(data))
        return out

    day = 86_400_000
    state = RangeInFlight(
        CopyRange("t", 0, 100, 200, "west.t"), TargetRules(create_time=True, before_max_ms=day), None, 100
    )
    hidden_old = batch([now - 1000, now - 30 * day, now - 500])  # first and highest fresh, the middle one not
    assert hidden_old.base_timestamp == now - 1000 and hidden_old.max_timestamp == now - 500
    assert fallback_reason(state, hidden_old, now) == "timestamps near the target's message.timestamp window"
    assert fallback_reason(state, batch([now - 1000, now - 900]), now) is None
    gzip = batch([now - 1000, now - 900], codec=DefaultRecordBatchBuilder.CODEC_GZIP)
    assert gzip.attributes & 0x07
    assert fallback_reason(state, gzip, now) == "timestamps near the target's message.timestamp window"
    unbounded = RangeInFlight(state.rng, TargetRules(create_time=True, before_max_ms=2**63 - 1), None, 100)
    assert fallback_reason(unbounded, hidden_old, now) is None and fallback_reason(unbounded, gzip, now) is None


def test_a_fetch_quota_pause_waits_for_the_broker_no_metadata_or_log_storm(caplog: pytest.LogCaptureFixture) -> None:
    """A source broker throttling the copier (a fetch quota) pauses its connection: a fetch sent
    meanwhile is refused at once. The copier waits out the pause: no refused fetch, no metadata
    refresh, no warning per poll. Before: every poll sent a fetch, had it refused, logged "fetch
    from the source failed" and refreshed the source's metadata."""
    from kafka.errors import NodeNotReadyError

    broker = BrokerLog()

    class Throttled(Source):
        def __init__(self) -> None:
            super().__init__(build(0, 3) + build(3, 3), broker)
            self.paused_polls, self.refused = 20, 0

        def throttled(self, node_id: int) -> bool:
            return self.paused_polls > 0

        def send(self, request: Any, node_id: int) -> Future:
            if self.throttled(node_id):
                self.refused += 1
                return Future().failure(NodeNotReadyError("Node paused: {'throttle'}"))
            return super().send(request, node_id)

        def poll(self, timeout_ms: float) -> None:
            self.paused_polls -= 1
            super().poll(timeout_ms)

    source = Throttled()
    source.paused_polls = 0
    copier = BatchRangeCopier(source, Target(broker), fallback=lambda: None)  # type: ignore[arg-type]
    copier.source.leaders({"t"})  # connected; the first answer throttles the link for 20 polls
    source.paused_polls = 20
    with caplog.at_level("WARNING", logger="kmirror.batch_copy"):
        [progress] = copier.copy([CopyRange("t", 0, 0, 6, "west.t")])
    assert progress.records == 6 and _values(broker) == [r.value for r in DefaultRecordBatch(bytes(build(0, 3)))] + [
        r.value for r in DefaultRecordBatch(bytes(build(3, 3)))
    ]
    assert (source.refused, source.refreshed) == (0, 2)  # the refresh above and the copy's first
    assert not [r for r in caplog.records if "fetch from the source failed" in r.getMessage()]


def test_kafka_pythons_throttle_warning_is_kept_once_a_minute_not_once_an_answer() -> None:
    import logging

    from kmirror_engine.copying import batch_net  # noqa: F401  (installs the filter)

    logger = logging.getLogger("kafka.net.connection")
    made = [
        logger.makeRecord(
            logger.name,
            logging.WARNING,
            __file__,
            1,
            "%s: %s throttled by broker (%d ms)",
            ("<conn node=1>", "FetchResponse", 5),
            None,
        )
        for _ in range(3)
    ]
    other = logger.makeRecord(logger.name, logging.WARNING, __file__, 1, "connection reset", (), None)
    [throttle_filter] = [f for f in logger.filters if type(f).__name__ == "_OncePerMinute"]
    throttle_filter.last = float("-inf")
    assert [logger.filter(r) for r in made] == [True, False, False] and logger.filter(other)
