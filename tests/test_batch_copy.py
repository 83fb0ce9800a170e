"""The batch copy path without brokers: record batch bytes (split, rewrite, CRC32C), the
read_committed filter of aborted transactions, which batches fall back to the record loop,
the connection settings translated from librdkafka properties, and the `copy_loop: batch`
validation."""

from __future__ import annotations

import contextlib
import dataclasses
import struct
import time
from types import SimpleNamespace
from typing import Any

import google_crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.future import Future
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from kmirror.errors import ValidationError
from kmirror.flow.spec import parse_flow_spec
from kmirror_engine.copying import batch_copy, batch_queue
from kmirror_engine.copying.batch_copy import BatchRangeCopier
from kmirror_engine.copying.batch_crc import crc_update
from kmirror_engine.copying.batch_merge import merge
from kmirror_engine.copying.batch_queue import queue_run
from kmirror_engine.copying.batch_settings import link_config
from kmirror_engine.copying.batch_state import RangeInFlight, fallback_reason
from kmirror_engine.copying.batch_wire import (
    CONTROL_BIT,
    TIMESTAMP_TYPE_BIT,
    AbortedTransaction,
    committed,
    control_type,
    crc_ok,
    patch_header,
    rewrite,
    split_batches,
)
from kmirror_engine.copying.ranges import CopyError, CopyRange
from kmirror_engine.copying.record_limits import TargetRules
from tests.planner_fakes import raw_spec

GZIP = DefaultRecordBatchBuilder.CODEC_GZIP
NONE = DefaultRecordBatchBuilder.CODEC_NONE


def build(
    base: int,
    count: int,
    *,
    producer_id: int = -1,
    transactional: bool = False,
    codec: int = NONE,
    offsets: list[int] | None = None,
    timestamp: int = 1_700_000_000_000,
) -> bytes:
    """A record batch as a broker serves it: `count` records (or those at `offsets` deltas) at `base`."""
    builder = DefaultRecordBatchBuilder(
        2, codec, transactional, producer_id, 0 if producer_id >= 0 else -1, 7 if producer_id >= 0 else -1, 1 << 20
    )
    for delta in offsets if offsets is not None else range(count):
        value = None if delta == 1 else f"value-{base + delta}".encode()
        builder.append(delta, timestamp + delta, f"key-{delta}".encode(), value, [("h", b"x"), ("dup", b"")])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base)
    return bytes(data)


def marker(offset: int, producer_id: int, kind: int) -> bytes:
    """A control batch (transaction marker) of `producer_id`: kind 0 abort, 1 commit."""
    data = bytearray(build(offset, 1, producer_id=producer_id, transactional=True))
    # the one record's key (version 0, type kind): rebuild with that key, set the control bit, fix the CRC
    builder = DefaultRecordBatchBuilder(2, NONE, True, producer_id, 0, -1, 1 << 20)
    builder.append(0, 1_700_000_000_000, struct.pack(">hh", 0, kind), struct.pack(">hi", 0, 0), [])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, offset)
    struct.pack_into(">h", data, 21, struct.unpack_from(">h", data, 21)[0] | CONTROL_BIT)
    _fix_crc(data)
    return bytes(data)


def _fix_crc(data: bytearray) -> None:
    from kafka.record.util import calc_crc32c  # kafka-python's own (an implementation other than ours)

    struct.pack_into(">I", data, 17, calc_crc32c(bytes(data[21:])))


def test_split_reads_headers_and_leaves_a_truncated_tail_out() -> None:
    first, second = build(100, 5), build(105, 3, codec=GZIP)
    batches = split_batches(first + second + second[:30])
    assert [(b.base_offset, b.record_count, b.next_offset, b.contiguous) for b in batches] == [
        (100, 5, 105, True),
        (105, 3, 108, True),
    ]
    assert bytes(batches[1].data) == second


def test_rewrite_changes_only_the_producer_fields_and_keeps_records_byte_identical() -> None:
    for codec in (NONE, GZIP):
        original = build(4242, 10, producer_id=99, transactional=True, codec=codec)
        [batch] = split_batches(original)
        out = rewrite(batch, producer_id=12345, producer_epoch=3, base_sequence=700)
        assert struct.unpack_from(">q", out, 0)[0] == 0  # baseOffset
        assert struct.unpack_from(">i", out, 12)[0] == -1  # partitionLeaderEpoch
        assert struct.unpack_from(">qhi", out, 43) == (12345, 3, 700)
        assert struct.unpack_from(">h", out, 21)[0] == codec  # transactional bit cleared, compression kept
        assert out[61:] == original[61:] and out[23:43] == original[23:43] and out[57:61] == original[57:61]
        assert crc_ok(out) and crc_ok(original) and not crc_ok(out[:17] + original[17:21] + out[21:])
        parsed = DefaultRecordBatch(bytes(out))  # kafka-python's reader agrees: CRC, records, headers
        assert parsed.validate_crc() and not parsed.is_transactional
        records = list(parsed)
        assert [(r.key, r.value, r.headers, r.timestamp) for r in records][:2] == [
            (b"key-0", b"value-4242", [("h", b"x"), ("dup", b"")], 1_700_000_000_000),
            (b"key-1", None, [("h", b"x"), ("dup", b"")], 1_700_000_000_001),
        ]


@settings(max_examples=200, deadline=None)
@given(
    body=st.binary(max_size=5000),
    zeros=st.integers(0, 1 << 23),
    before=st.binary(min_size=36, max_size=36),
    after=st.binary(min_size=36, max_size=36),
)
def test_the_crc_update_equals_the_crc_of_the_changed_bytes(
    body: bytes, zeros: int, before: bytes, after: bytes
) -> None:
    """Against google-crc32c over the whole message: any length (zeros stretch it to 8 MiB without
    random bytes), any change of the first 36 bytes (the rewritten header fields)."""
    tail = body + bytes(zeros)
    crc = google_crc32c.value(before + tail)
    assert crc_update(crc, before, after, len(before) + len(tail)) == google_crc32c.value(after + tail)


def test_crc_tables_built_by_several_copier_threads_at_once_give_right_crcs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A task's copiers run on threads of one process and the shift tables are built on first use:
    without the lock two threads appended the same table twice and later updates were a power of
    two off (53 wrong CRCs of 80 here; a Spark 4.0 streaming run's target refused a batch)."""
    import os
    import sys
    import threading

    from kmirror_engine.copying import batch_crc

    wrong: list[int] = []

    def update(message: bytes) -> None:
        after = os.urandom(36)
        got = crc_update(google_crc32c.value(message), message[:36], after, len(message))
        if got != google_crc32c.value(after + message[36:]):
            wrong.append(len(message))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        for _ in range(10):
            monkeypatch.setattr(batch_crc, "_SHIFTS", [])
            threads = [
                threading.Thread(target=update, args=(os.urandom(36) + bytes(n),))
                for n in (1 << 20, 3 << 19, 1 << 21, 700_001)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert wrong == []


def test_crc_tables_built_ahead_serve_every_batch_up_to_their_size_and_stay_right(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What Spark's worker daemon builds before it forks (`spark_app.worker_daemon.warm_up`):
    the tables of every power of two up to 8 MiB, after which an update of a batch that size
    builds nothing more and still equals google-crc32c's CRC of the whole message."""
    import os

    from kmirror_engine.copying import batch_crc
    from spark_app.worker_daemon import warm_up

    monkeypatch.setattr(batch_crc, "_SHIFTS", [])
    warm_up()
    assert len(batch_crc._SHIFTS) == 24  # 2**0 .. 2**23 zero bytes
    for size in (8 * 1024 * 1024, 1_000_003, 61):
        message = os.urandom(36) + bytes(size - 36)
        after = os.urandom(36)
        assert crc_update(google_crc32c.value(message), message[:36], after, size) == google_crc32c.value(
            after + message[36:]
        )
    assert len(batch_crc._SHIFTS) == 24


def test_the_rewritten_batch_keeps_the_sources_crc_check_a_corrupted_batch_stays_corrupted() -> None:
    """The CRC is updated for the rewritten fields, not computed again: a batch whose bytes were
    changed on the way fails the check after the rewrite too (the target refuses it: tested on a
    real broker in tests/e2e/test_batch_copy_e2e.py); patching twice with the same fields (a
    resend) changes nothing."""
    for codec in (NONE, GZIP):
        original = bytearray(build(10, 50, producer_id=5, transactional=True, codec=codec))
        [batch] = split_batches(bytes(original))
        once = rewrite(batch, producer_id=77, producer_epoch=1, base_sequence=9)
        twice = bytearray(once)
        patch_header(twice, 0, len(twice), batch.attributes, 77, 1, 9)
        assert crc_ok(once) and twice == once
        corrupted = bytearray(original)
        corrupted[-3] ^= 0x40
        [bad] = split_batches(bytes(corrupted))
        out = rewrite(bad, producer_id=77, producer_epoch=1, base_sequence=9)
        assert not crc_ok(out) and out[:61] == once[:61] and out[61:] != once[61:]  # the same CRC as the good copy


def test_control_type_reads_the_marker_key() -> None:
    [abort] = split_batches(marker(10, 5, 0))
    [commit] = split_batches(marker(11, 5, 1))
    assert abort.is_control and control_type(abort) == 0 and control_type(commit) == 1


def test_committed_drops_markers_and_aborted_transactions_like_the_java_consumer() -> None:
    data = (
        build(0, 3, producer_id=1, transactional=True)  # pid 1: aborted below
        + build(3, 2, producer_id=2, transactional=True)  # pid 2: committed
        + marker(5, 1, 0)  # abort pid 1
        + marker(6, 2, 1)  # commit pid 2
        + build(7, 2)  # not transactional
        + build(9, 2, producer_id=1, transactional=True)  # pid 1 again, after its abort: committed later
    )
    batches = split_batches(data)
    kept = [b.base_offset for b in committed(batches, [AbortedTransaction(producer_id=1, first_offset=0)])]
    assert kept == [3, 7, 9]
    # without the aborted list every data batch is delivered (read_uncommitted view), markers never
    assert [b.base_offset for b in committed(batches, [])] == [0, 3, 7, 9]


def _state(**rules: Any) -> RangeInFlight:
    rng = CopyRange("t", 0, 100, 200, "west.t")
    return RangeInFlight(rng, TargetRules(**rules), rules.get("max_message_bytes"), 100)


def _with_keys(base: int, keys: list[bytes | None], codec: int = NONE) -> bytes:
    """An uncompressed batch whose records have these keys (None: no key), values and a header."""
    builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 20)
    for delta, key in enumerate(keys):
        builder.append(delta, 1_700_000_000_000 + delta, key, b"v" * (delta * 40), [("h", b"x" * delta)])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base)
    return bytes(data)


@settings(max_examples=100, deadline=None)
@given(keys=st.lists(st.one_of(st.none(), st.binary(max_size=300)), min_size=1, max_size=40))
def test_keys_present_tells_a_batch_with_a_record_without_key_from_one_without(keys: list[bytes | None]) -> None:
    """Against kafka-python's builder: any keys (empty ones count as keys, None not), any value and
    header lengths (varints of one and two bytes); compressed batches and those over the record
    limit are not told (None), nor are bytes that do not parse."""
    from kmirror_engine.copying.batch_wire import keys_present

    [batch] = split_batches(_with_keys(0, keys))
    assert keys_present(batch, 256) is all(key is not None for key in keys)
    assert keys_present(batch, len(keys) - 1) is None
    [compressed] = split_batches(_with_keys(0, keys, codec=GZIP))
    if compressed.attributes & 0x07:  # the builder leaves a batch uncompressed where gzip would not shrink it
        assert keys_present(compressed, 256) is None
    [cut] = split_batches(bytes(_with_keys(0, keys)))
    cut = dataclasses.replace(cut, data=cut.data[: len(cut.data) - 1])
    assert keys_present(cut, 256) in (None, False)


def _reason(data: bytes, state: RangeInFlight) -> str | None:
    [batch] = split_batches(data)
    return fallback_reason(state, batch, now_ms=1_800_000_000_000)


def test_batches_that_need_per_record_work_fall_back_and_say_why() -> None:
    plain = build(100, 10)
    assert _reason(plain, _state()) is None
    assert _reason(build(100, 3, offsets=[0, 2, 5]), _state()) == "batches with offset gaps (a compacted source)"
    log_append = bytearray(plain)
    struct.pack_into(">h", log_append, 21, TIMESTAMP_TYPE_BIT)
    _fix_crc(log_append)
    assert _reason(bytes(log_append), _state()).startswith("LogAppendTime batches")  # type: ignore[union-attr]
    assert _reason(build(95, 10), _state()) == "a batch crossing the range's start or end"
    assert _reason(build(195, 10), _state()) == "a batch crossing the range's start or end"
    assert _reason(plain, _state(max_message_bytes=len(plain) - 1)) == (
        f"batches over the target's max.message.bytes ({len(plain) - 1})"
    )
    assert _reason(plain, _state(max_message_bytes=len(plain))) is None
    assert _reason(plain, _state(compacted=True)) is None  # uncompressed, every record keyed
    assert _reason(build(100, 10, codec=GZIP), _state(compacted=True)) == (
        "a compacted target topic (keys checked record by record)"
    )
    assert _reason(_with_keys(100, [b"k", None, b"k"]), _state(compacted=True)) == (
        "a compacted target topic (keys checked record by record)"
    )
    # records from 2023 on a target refusing timestamps older than a day
    assert _reason(plain, _state(create_time=True, before_max_ms=86_400_000)) == (
        "timestamps near the target's message.timestamp window"
    )


def test_link_config_translates_tls_and_scram_and_names_what_it_cannot() -> None:
    settings, reasons = link_config(
        {
            "bootstrap.servers": "b:9093",
            "security.protocol": "sasl_ssl",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "mirror",
            "sasl.password": "pw",
            "ssl.ca.location": "/ca.pem",
            "ssl.endpoint.identification.algorithm": "none",
            "linger.ms": 5,
        }
    )
    assert reasons == []
    expected = {
        "bootstrap_servers": "b:9093",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "mirror",
        "sasl_plain_password": "pw",
        "ssl_cafile": "/ca.pem",
        "ssl_check_hostname": False,
    }
    assert {k: settings[k] for k in expected} == expected
    _, reasons = link_config(
        {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "GSSAPI", "sasl.kerberos.keytab": "/k"}
    )
    assert reasons == [
        "client property sasl.kerberos.keytab has no equivalent on the batch path",
        "SASL mechanism GSSAPI is not supported on the batch path (PLAIN and SCRAM are)",
    ]


def _flow(**options: Any) -> Any:
    return parse_flow_spec(raw_spec(topics=["t"], **options))


def test_copy_loop_batch_is_an_option_refused_with_what_only_record_loops_serve() -> None:
    assert _flow(copy_loop="batch").copy.copy_loop == "batch"
    with pytest.raises(ValidationError) as caught:
        _flow(copy_loop="batch", dead_letter_topic="dlq", max_records_per_second=100)
    text = str(caught.value)
    assert (
        "copy_loop: is 'batch', but dead_letter_topic is set and only the record loops serve it; set copy_loop "
        "to auto (it picks a record loop for such a flow) or remove dead_letter_topic"
    ) in text
    assert "but max_records_per_second is set" in text
    with pytest.raises(ValidationError, match="but exactly_once is set"):
        _flow(copy_loop="batch", exactly_once=True)


class FakeLink:
    """A `BrokerLink` answering from scripted handlers (one leader, node 1, for every partition)."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.sent: list[Any] = []
        self.refreshed = 0
        self.kept: list[set[str]] = []
        self.unknown: set[str] = set()  # topics the last metadata answer did not know
        self.manager = SimpleNamespace(least_loaded_node=lambda: 1)

    def forget(self, keep: Any) -> None:
        self.kept.append(set(keep))

    def leaders(self, topics: Any, timeout_s: float = 30.0) -> dict[tuple[str, int], int]:
        self.refreshed += 1
        return {(t, 0): 1 for t in topics}

    def send(self, request: Any, node_id: int) -> Future:
        self.sent.append(request)
        return Future().success(self.answer(request))

    def throttled(self, node_id: int) -> bool:
        return False

    def poll(self, timeout_ms: float) -> None:
        pass

    def wait(self, future: Future, timeout_s: float, what: str) -> Any:
        return future.value

    def close(self) -> None:
        pass


def produced_records(request: Any) -> bytes:
    """The records of a `ProduceCall`'s only partition, read back by kafka-python's own decoder."""
    from kafka.protocol.producer.produce import ProduceRequest

    request.with_header(correlation_id=7, client_id="t")
    decoded = ProduceRequest[9].decode(bytes(request.encode(framed=False, header=False)))
    return bytes(decoded.topic_data[0].partition_data[0].records)


def test_a_retriable_produce_error_resends_the_same_bytes_and_sequence_after_a_metadata_refresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(batch_queue, "MERGE_BELOW_RECORDS", 0)  # two batches, two requests
    batches = build(0, 4) + build(4, 6)

    def fetched(request: Any) -> Any:
        part = SimpleNamespace(partition_index=0, error_code=0, records=batches, aborted_transactions=[])
        return SimpleNamespace(responses=[SimpleNamespace(topic="t", partitions=[part])])

    answers = iter([6, 0, 0])  # NOT_LEADER_OR_FOLLOWER, then both batches land (at 100 and 104)

    def produced(request: Any) -> Any:
        if type(request).__name__.startswith("InitProducerId"):
            return SimpleNamespace(error_code=0, producer_id=4711, producer_epoch=2)
        error = next(answers)
        part = SimpleNamespace(index=0, error_code=error, base_offset=-1 if error else 96 + 4 * len(produced_at))
        produced_at.append(produced_records(request))
        return SimpleNamespace(responses=[SimpleNamespace(name="west.t", partition_responses=[part])])

    produced_at: list[bytes] = []
    source, target = FakeLink(fetched), FakeLink(produced)
    copier = BatchRangeCopier(source, target, fallback=lambda: None)  # type: ignore[arg-type]
    [progress] = copier.copy([CopyRange("t", 0, 0, 10, "west.t")])
    first_try, resent, second = produced_at
    assert bytes(resent) == bytes(first_try)  # the same batch, the same sequence (0): deduplicated if it landed
    assert struct.unpack_from(">qhi", resent, 43) == (4711, 2, 0)
    assert struct.unpack_from(">qhi", second, 43) == (4711, 2, 4)
    assert target.refreshed == 2  # the round's metadata, then the refresh before the resend
    assert (progress.records, progress.offset_syncs, progress.fallback_records) == (10, ((0, 100), (9, 109)), 0)


def test_many_ranges_failing_retriably_at_once_cost_one_metadata_refresh_not_one_each() -> None:
    """New target partitions not ready at the first produce (a 2,000-topic start): every range's
    batch comes back NOT_LEADER_OR_FOLLOWER in the same round. One refresh serves them all (a
    refresh per range decoded the whole target's metadata once per partition: 40-75 s of that
    copy), and every batch is resent with its own sequence and lands."""
    partitions = 40

    class Partitions(FakeLink):
        def leaders(self, topics: Any, timeout_s: float = 30.0) -> dict[tuple[str, int], int]:
            self.refreshed += 1
            return {(t, p): 1 for t in topics for p in range(partitions)}

    def fetched(request: Any) -> Any:
        parts = [
            SimpleNamespace(
                partition_index=p, error_code=0, records=build(0, 5) if offset == 0 else b"", aborted_transactions=[]
            )
            for _, p, offset, _ in request.partitions
        ]
        return SimpleNamespace(responses=[SimpleNamespace(topic="t", partitions=parts)])

    tries: dict[int, int] = {}

    def produced(request: Any) -> Any:
        if type(request).__name__.startswith("InitProducerId"):
            return SimpleNamespace(error_code=0, producer_id=4711, producer_epoch=2)
        answers = []
        for item in request.topics["west.t"]:
            tries[item.partition] = tries.get(item.partition, 0) + 1
            error = 6 if tries[item.partition] == 1 else 0
            answers.append(SimpleNamespace(index=item.partition, error_code=error, base_offset=-1 if error else 0))
        return SimpleNamespace(responses=[SimpleNamespace(name="west.t", partition_responses=answers)])

    source, target = Partitions(fetched), Partitions(produced)
    copier = BatchRangeCopier(source, target, fallback=lambda: None)  # type: ignore[arg-type]
    progress = list(copier.copy([CopyRange("t", p, 0, 5, "west.t") for p in range(partitions)]))
    assert [p.records for p in progress] == [5] * partitions
    assert tries == dict.fromkeys(range(partitions), 2)
    assert target.refreshed == 2  # the round's metadata, then one refresh before all the resends


def test_client_configs_the_batch_path_cannot_use_send_the_task_to_the_record_loop_counted() -> None:
    from kmirror_engine.copying.task_copy import _fell_back, batch_path_blockers
    from kmirror_engine.observability.progress import PartitionProgress

    kerberos = {"bootstrap.servers": "w:9092", "security.protocol": "SASL_SSL", "sasl.mechanisms": "GSSAPI"}
    assert batch_path_blockers({"bootstrap.servers": "w:9092"}, {"bootstrap.servers": "e:9092"}) == []
    assert batch_path_blockers(kerberos, {"bootstrap.servers": "e:9092"}) == [
        "SASL mechanism GSSAPI is not supported on the batch path (PLAIN and SCRAM are)"
    ]
    [copied] = _fell_back([PartitionProgress("t", 0, "west.t", 0, 10, 7, 70, None)])
    assert (copied.records, copied.fallback_records) == (7, 7)


def test_records_the_record_loop_copied_instead_are_in_the_progress_line_and_the_metrics() -> None:
    """Issue 28: the fallback is reported: `fallback_records` on the progress line (only when
    some fell back) and kmirror_batch_fallback_records_total per target partition."""
    import io

    from prometheus_client import generate_latest

    from kmirror_engine.observability.metrics import FlowMetrics
    from kmirror_engine.observability.progress import BatchProgress, PartitionProgress
    from kmirror_engine.observability.progress_log import progress_record
    from tests.planner_fakes import spec

    fell_back = PartitionProgress("t", 0, "w.t", 0, 50, 50, 500, None, fallback_records=7)
    clean = PartitionProgress("t", 1, "w.t", 0, 50, 50, 500, None)
    assert (
        progress_record(spec().id, spec().copy, BatchProgress(3, (fell_back, clean), 100), None)["fallback_records"]
        == 7
    )
    assert "fallback_records" not in progress_record(spec().id, spec().copy, BatchProgress(4, (clean,), 100), None)
    metrics = FlowMetrics("west->east", out=io.StringIO())
    metrics.observe_batch(BatchProgress(3, (fell_back, clean), 100), 0)
    text = generate_latest(metrics.registry).decode()
    assert 'kmirror_batch_fallback_records_total{flow="west->east",partition="0",topic="w.t"} 7.0' in text
    assert 'partition="1",topic="w.t"} 7.0' not in text


def test_auto_flows_take_the_batch_path_unless_a_flow_needs_a_record_loop_or_the_driver_says_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kmirror.errors import KmirrorError
    from kmirror.flow.spec import AUTO_ORDER, COPY_LOOP_CANNOT_SERVE
    from kmirror_engine.copying.task_copy import AUTO_COPY_LOOP_ENV, auto_copy_loop, takes_batch_path
    from tests.planner_fakes import spec

    monkeypatch.delenv(AUTO_COPY_LOOP_ENV, raising=False)
    assert AUTO_ORDER[0] == "batch" and auto_copy_loop() == "batch"
    assert takes_batch_path(spec().copy) and takes_batch_path(spec(copy_loop="batch").copy)  # auto: the batch path
    assert not takes_batch_path(spec(copy_loop="native").copy) and not takes_batch_path(spec(copy_loop="python").copy)
    needs_records = {
        "exactly_once": True,
        "dead_letter_topic": "dlq",
        "max_records_per_second": 10,
        "max_bytes_per_second": 10_000,
        "skip_offsets": ["orders:0:5"],
    }
    assert set(COPY_LOOP_CANNOT_SERVE["batch"]) <= {*needs_records, "provenance_headers"}
    for name, value in needs_records.items():  # each option the table names keeps its flow on a record loop
        assert not takes_batch_path(spec(**{name: value}).copy), name
    monkeypatch.setenv(AUTO_COPY_LOOP_ENV, "record")  # the way back, deployment-wide
    assert (
        auto_copy_loop() == "record"
        and not takes_batch_path(spec().copy)
        and takes_batch_path(spec(copy_loop="batch").copy)
    )
    assert takes_batch_path(spec().copy, auto_loop="batch")  # the driver's value, not this process's, decides
    monkeypatch.setenv(AUTO_COPY_LOOP_ENV, "fast")
    with pytest.raises(KmirrorError, match=r"KMIRROR_AUTO_COPY_LOOP is 'fast'; set it to one of batch, record"):
        auto_copy_loop()


def test_an_auto_flow_the_batch_path_cannot_connect_with_is_copied_by_a_record_loop_not_counted_as_a_fallback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Client settings the batch path cannot translate (here a source's CRL) send an auto
    flow to the record loops by rule; only `copy_loop: batch` counts its records as fallback_records."""
    import kmirror_engine.copying.task_copy as task_copy
    from kmirror_engine.observability.progress import PartitionProgress
    from tests.planner_fakes import spec

    monkeypatch.delenv(task_copy.AUTO_COPY_LOOP_ENV, raising=False)
    chosen: list[str] = []
    monkeypatch.setattr(task_copy, "copy_in_batches", lambda *a, **k: chosen.append("batch") or [])
    monkeypatch.setattr(task_copy, "use_native_loop", lambda *a: False)
    monkeypatch.setattr(task_copy, "target_limits", lambda *a: {})
    monkeypatch.setattr(task_copy, "cached_rules", lambda *a: {})
    copied = PartitionProgress("t", 0, "w.t", 0, 5, 5, 50, None)

    class Lease:  # the kept clients of a record loop: none needed, the loop is a fake
        def lease(self, key: object, make: object) -> Any:
            return contextlib.nullcontext(SimpleNamespace(consumer=None, producer=None))

    def record_loop(*args: object, **kwargs: object) -> Any:
        chosen.append("record")
        return SimpleNamespace(copy=lambda group: [copied])

    monkeypatch.setattr(task_copy, "CLIENTS", Lease())
    monkeypatch.setattr(task_copy, "RangeCopier", record_loop)
    ranges = [CopyRange("t", 0, 0, 5, "w.t")]
    crl = {"config": {"security.protocol": "SSL", "ssl.crl.location": "/etc/crl.pem"}}
    crl_source = {"source": {"alias": "west", "bootstrap_servers": "s:1", **crl}}  # a CRL: the batch path has none
    assert task_copy.copy_task_ranges(spec(), ranges, 0) == [] and chosen == ["batch"]
    assert task_copy.copy_task_ranges(spec(**crl_source), ranges, 0) == [copied] and chosen[-1] == "record"
    fell_back = task_copy.copy_task_ranges(spec(copy_loop="batch", **crl_source), ranges, 0)
    assert [p.fallback_records for p in fell_back] == [5]


def test_a_kept_copier_renews_its_producer_id_and_forgets_old_topics_past_its_partition_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Weeks of running: sequences and the metadata topic set stay bounded; a new producer id
    restarts the sequences at 0 (what the broker expects of a new id), never an old id's."""
    import kmirror_engine.copying.batch_copy as batch_copy

    monkeypatch.setattr(batch_copy, "RENEW_AFTER_PARTITIONS", 2)
    ids = iter(range(100, 200))

    def fetched(request: Any) -> Any:
        topic, partition, offset, _ = request.partitions[0]
        part = SimpleNamespace(
            partition_index=partition, error_code=0, records=build(offset, 2), aborted_transactions=[]
        )
        return SimpleNamespace(responses=[SimpleNamespace(topic=topic, partitions=[part])])

    def produced(request: Any) -> Any:
        if type(request).__name__.startswith("InitProducerId"):
            return SimpleNamespace(error_code=0, producer_id=next(ids), producer_epoch=0)
        [(topic, [item])] = request.topics.items()
        sent.append((topic, item.producer_id, item.base_sequence))
        part = SimpleNamespace(index=item.partition, error_code=0, base_offset=0)
        return SimpleNamespace(responses=[SimpleNamespace(name=topic, partition_responses=[part])])

    sent: list[tuple[str, int, int]] = []
    source, target = FakeLink(fetched), FakeLink(produced)
    copier = BatchRangeCopier(source, target, fallback=lambda: None)  # type: ignore[arg-type]
    for topic in ("a", "b", "c", "a"):
        copier.copy([CopyRange(topic, 0, 0, 2, f"west.{topic}")])
    copier.copy([CopyRange("a", 0, 2, 4, "west.a")])
    # three partitions written: the fourth round starts with a new id, sequences from 0 again
    assert sent == [("west.a", 100, 0), ("west.b", 100, 0), ("west.c", 100, 0), ("west.a", 101, 0), ("west.a", 101, 2)]
    assert source.kept == [{"a"}] and target.kept == [{"west.a"}]


def test_small_batches_go_merged_in_one_request_and_their_offsets_map_exactly() -> None:
    """Three small batches then a compressed one: the three as one batch (one request slot), the
    compressed one as it is; every record once, in order, offset syncs at each sent batch's ends."""
    fetched_bytes = build(0, 3) + build(3, 2) + build(5, 4) + build(9, 30, codec=GZIP)

    def fetched(request: Any) -> Any:
        part = SimpleNamespace(partition_index=0, error_code=0, records=fetched_bytes, aborted_transactions=[])
        return SimpleNamespace(responses=[SimpleNamespace(topic="t", partitions=[part])])

    produced_at: list[bytes] = []

    def produced(request: Any) -> Any:
        if type(request).__name__.startswith("InitProducerId"):
            return SimpleNamespace(error_code=0, producer_id=4711, producer_epoch=2)
        records = produced_records(request)
        part = SimpleNamespace(
            index=0, error_code=0, base_offset=500 + sum(split_batches(b)[0].record_count for b in produced_at)
        )
        produced_at.append(records)
        return SimpleNamespace(responses=[SimpleNamespace(name="west.t", partition_responses=[part])])

    copier = BatchRangeCopier(FakeLink(fetched), FakeLink(produced), fallback=lambda: None)  # type: ignore[arg-type]
    [progress] = copier.copy([CopyRange("t", 0, 0, 39, "west.t")])
    merged, compressed = (split_batches(b)[0] for b in produced_at)
    assert (merged.record_count, compressed.record_count) == (9, 30)
    assert struct.unpack_from(">qhi", merged.data, 43) == (4711, 2, 0)
    assert struct.unpack_from(">qhi", compressed.data, 43) == (4711, 2, 9)
    assert crc_ok(merged.data) and crc_ok(compressed.data)

    def records(batches: list[bytes]) -> list[tuple[Any, ...]]:
        return [(r.timestamp, r.key, r.value, list(r.headers)) for b in batches for r in DefaultRecordBatch(b)]

    assert records(produced_at) == records([bytes(b.data) for b in split_batches(fetched_bytes)])
    assert [r.offset for r in DefaultRecordBatch(bytes(produced_at[0]))] == list(range(9))
    # one drift (500) from the first record to the last: the syncs at the two ends say it all
    assert (progress.records, progress.offset_syncs) == (39, ((0, 500), (38, 538)))


def test_a_merged_batch_over_the_target_limit_goes_as_its_parts() -> None:
    """Tiny records far apart in time: their merged timestamp deltas take more bytes than the
    batch headers saved, so the merge would pass the target's max.message.bytes; the parts go."""
    parts = [build(i, 1, timestamp=1_700_000_000_000 + i * 10**12) for i in range(4)]
    limit = max(len(p) for p in parts) * 4 - 3 * 61 - 2  # fits each part, not the merge (bigger deltas)
    batches = split_batches(b"".join(parts))
    assert all(len(b.data) <= limit for b in batches) and len(merge(batches).data) > limit
    state = RangeInFlight(CopyRange("t", 0, 0, 4, "west.t"), TargetRules(), limit, 0)
    queue_run(state, batches)
    assert [item.batch.record_count for item in state.pending] == [1, 1, 1, 1]
    unlimited = RangeInFlight(CopyRange("t", 0, 0, 4, "west.t"), TargetRules(), None, 0)
    queue_run(unlimited, batches)
    assert [item.batch.record_count for item in unlimited.pending] == [4]  # without a limit: merged


def test_a_source_topic_deleted_during_the_copy_fails_it_after_the_grace_with_one_metadata_refresh_a_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The source answers UNKNOWN_TOPIC_OR_PARTITION, then its metadata no longer knows the topic:
    the copy fails naming it once the grace has passed (`copying.deleted_sources` then asks
    whether it was deleted), not after the stall timeout, and asks metadata once per pass
    however many of its partitions lost their leader (it asked once per partition)."""
    monkeypatch.setattr(batch_copy, "UNKNOWN_TOPIC_GRACE_S", 0.3)

    class Deleted(FakeLink):
        def leaders(self, topics: Any, timeout_s: float = 30.0) -> dict[tuple[str, int], int]:
            self.refreshed += 1
            if self.refreshed == 1:  # the round's metadata, before the deletion
                return {(t, p): 1 for t in topics for p in range(8)}
            self.unknown = set(topics)
            return {}

        def poll(self, timeout_ms: float) -> None:
            self.polls = getattr(self, "polls", 0) + 1
            time.sleep(timeout_ms / 1000)

    def fetched(request: Any) -> Any:
        parts = [
            SimpleNamespace(partition_index=p, error_code=3, records=b"", aborted_transactions=[])
            for _, p, _, _ in request.partitions
        ]
        return SimpleNamespace(responses=[SimpleNamespace(topic="t", partitions=parts)])

    def produced(request: Any) -> Any:
        return SimpleNamespace(error_code=0, producer_id=4711, producer_epoch=2)

    source = Deleted(fetched)
    copier = BatchRangeCopier(source, FakeLink(produced), fallback=lambda: None, poll_timeout_s=0.05)  # type: ignore[arg-type]
    started = time.monotonic()
    with pytest.raises(CopyError, match="source topic t has been unknown to the source cluster's metadata"):
        copier.copy([CopyRange("t", p, 0, 5, "west.t") for p in range(8)])
    assert time.monotonic() - started < 5
    assert 1 <= source.refreshed - 1 <= source.polls + 1  # one a pass, not eight
