"""The batch copy path (`copy_loop: batch`, issue 28) against two real Apache Kafka brokers: a
flow run through Spark `--once` copies uncompressed, lz4 and zstd topics and a transactional
topic with an aborted transaction byte for byte (key, value, headers, timestamp, partition,
order), its offset syncs translate a committed offset exactly, and a compacted topic goes to
the record loop (counted in `fallback_records`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kmirror.flow.spec import parse_flow_spec
from kmirror_engine.copying.batch_copy import new_batch_copier
from kmirror_engine.copying.batch_net import BrokerLink
from kmirror_engine.copying.batch_queue import fetch_request
from kmirror_engine.copying.batch_wire import AbortedTransaction, committed, split_batches
from kmirror_engine.copying.ranges import CONSUMER_REQUIRED, CONSUMER_TUNING, CopyError, CopyRange
from kmirror_engine.copying.record_limits import TargetRules
from kmirror_engine.failover.checkpoints import translate_group
from spark_app.main import run_flow
from tests.kafka_helpers import BASE_TIMESTAMP_MS, COPY_ONLY, consume_all, create_topic, flow_raw

pytestmark = [pytest.mark.e2e, pytest.mark.spark40, pytest.mark.real_kafka]
PARTITIONS = 2


def records(prefix: str, count: int) -> list[dict[str, Any]]:
    """Keys, values (every 7th null), repeated and empty headers, explicit timestamps."""
    return [
        {
            "key": f"{prefix}-k{i}".encode() if i % 5 else None,
            "value": None if i % 7 == 3 else f"{prefix}-value-{i}-".encode() * (1 + i % 4),
            "partition": i % PARTITIONS,
            "timestamp": BASE_TIMESTAMP_MS + i,
            "headers": [("n", str(i).encode()), ("dup", b"a"), ("dup", b""), ("nil", None)] if i % 3 else None,
        }
        for i in range(count)
    ]


def produce_with(bootstrap: str, topic: str, data: list[dict[str, Any]], **config: Any) -> None:
    """Produce `data` with producer `config` (compression); linger so batches hold many records."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all", **config})
    errors: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for r in data:
        producer.produce(
            topic,
            r["value"],
            r["key"],
            r["partition"],
            timestamp=r["timestamp"],
            headers=r["headers"],
            on_delivery=delivered,
        )
    assert producer.flush(60) == 0 and not errors, errors[:3]


def source_consumer(clusters: Any) -> dict[str, Any]:
    """The read_committed consumer config the batch copier tests hand `new_batch_copier`."""
    return {
        "bootstrap.servers": clusters.source,
        "group.id": "kmirror-test-batch",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        **CONSUMER_TUNING,
        **CONSUMER_REQUIRED,
    }


def produce_transactions(bootstrap: str, topic: str, unique: str) -> None:
    """Committed, aborted, committed again (the aborted records and the markers are holes)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"batch-e2e-{unique}", "linger.ms": 5})
    producer.init_transactions(30)
    for part, commit in (("t1", True), ("aborted", False), ("t2", True)):
        producer.begin_transaction()
        for r in records(part, 40):
            producer.produce(
                topic, r["value"], r["key"], r["partition"], timestamp=r["timestamp"], headers=r["headers"]
            )
        producer.flush(30)
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)


def batch_shapes(bootstrap: str, topic: str, partition: int) -> list[tuple[int, int, bool]]:
    """(record count, compression codec, transactional) of each committed data batch, as stored."""
    link = BrokerLink({"bootstrap.servers": bootstrap}, "test-reader")
    try:
        leader = link.leaders([topic])[(topic, partition)]
        answer = link.wait(link.send(fetch_request([(topic, partition, 0)]), leader), 30, "fetch")
        [part] = answer.responses[0].partitions
        aborted = [AbortedTransaction(a.producer_id, a.first_offset) for a in part.aborted_transactions or ()]
        return [
            (b.record_count, b.attributes & 7, b.is_transactional)
            for b in committed(split_batches(part.records), aborted)
        ]
    finally:
        link.close()


def as_compared(messages: dict[int, list[Any]]) -> dict[int, list[tuple[Any, ...]]]:
    return {
        p: [(m.key(), m.value(), m.headers(), m.timestamp(), m.partition()) for m in msgs]
        for p, msgs in messages.items()
    }


def test_batch_flow_copies_compressed_and_transactional_topics_byte_for_byte(
    spark: Any, clusters: Any, unique: str, tmp_path: Path
) -> None:
    topics = {
        f"bc-{unique}.plain": {},
        f"bc-{unique}.lz4": {"compression.type": "lz4"},
        f"bc-{unique}.zstd": {"compression.type": "zstd"},
    }
    for topic, config in topics.items():
        create_topic(clusters.source, topic, PARTITIONS)
        produce_with(clusters.source, topic, records(topic, 600), **config)
    txn = f"bc-{unique}.txn"
    create_topic(clusters.source, txn, PARTITIONS)
    produce_transactions(clusters.source, txn, unique)
    pattern = f"bc-{unique}\\..*"
    spec = parse_flow_spec(
        flow_raw(clusters, f"w{unique}", f"e{unique}", [pattern], tmp_path / "ckpt", copy_loop="batch", **COPY_ONLY)
    )

    run_flow(spec, spark=spark, once=True)

    for topic in [*topics, txn]:
        source = as_compared(consume_all(clusters.source, topic, PARTITIONS))
        target = as_compared(consume_all(clusters.target, f"w{unique}.{topic}", PARTITIONS))
        assert target == source, topic
        assert sum(len(v) for v in source.values()) == (80 if topic == txn else 600)
        # the batches themselves were copied: the same record counts and codecs (lz4 3, zstd 4),
        # the transactional flag dropped (the target's producer is idempotent, not transactional);
        # small uncompressed batches may go merged (`batch_merge.merge`), never split
        for p in range(PARTITIONS):
            shapes = batch_shapes(clusters.source, topic, p)
            copied = batch_shapes(clusters.target, f"w{unique}.{topic}", p)
            if topic.endswith(".plain"):
                assert sum(n for n, _, _ in copied) == sum(n for n, _, _ in shapes) and len(copied) <= len(shapes)
                assert {c for _, c, t in copied} == {0} and not any(t for _, _, t in copied)
            else:
                assert copied == [(n, c, False) for n, c, _ in shapes]
            assert {c for _, c, _ in shapes} == {{"lz4": 3, "zstd": 4}.get(topic.rsplit(".", 1)[1], 0)}
    # a group committed after the aborted transaction translates exactly: the source offsets hold
    # the aborted records and three markers, the target's are contiguous
    committed_records = consume_all(clusters.source, txn, PARTITIONS)[0]
    at = committed_records[30].offset()
    assert at > 30  # past the first commit marker at least
    group = f"app-{unique}"
    consumer = Consumer({"bootstrap.servers": clusters.source, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(txn, 0, at)], asynchronous=False)
    consumer.close()
    [translation] = [t for t in translate_group(spec.route, group) if t.source_topic == txn]
    assert (translation.upstream_offset, translation.downstream_offset) == (at, 30)


def test_batch_copier_sends_a_compacted_target_to_the_record_loop_and_counts_it(clusters: Any, unique: str) -> None:
    """A compacted target refuses a batch with a record without a key: compressed batches go to the
    record loop (which checks keys one by one); uncompressed keyed ones (MM2's heartbeats) go as
    they are, their keys checked in place."""
    topic, keyed = f"bcc-{unique}", f"bck-{unique}"
    for name in (topic, keyed):
        create_topic(clusters.source, name, 1)
        create_topic(clusters.target, name, 1, {"cleanup.policy": "compact"})
    plain = f"bcp-{unique}"
    create_topic(clusters.source, plain, 1)
    create_topic(clusters.target, plain, 1)
    data = [dict(r, key=r["key"] or b"k", partition=0) for r in records("c", 200)]  # compacted: keys required
    # one batch, compressed: a producer slowed by load split the data at 20 ms of linger, and librdkafka
    # stores a small tail batch uncompressed when lz4 does not shrink it (then it rightly goes as it is)
    produce_with(clusters.source, topic, data, **{"compression.type": "lz4", "linger.ms": 2000})
    for chunk in range(0, 200, 20):  # batches of 20 records: offsets 140..159 are one batch
        produce_with(clusters.source, plain, data[chunk : chunk + 20])
        produce_with(clusters.source, keyed, data[chunk : chunk + 20])
    consumer_config = source_consumer(clusters)
    copier = new_batch_copier(
        consumer_config,
        {"bootstrap.servers": clusters.target, "acks": "all", "enable.idempotence": True},
        stall_timeout_s=30,
    )
    try:
        copier.use_rules({}, {topic: TargetRules(compacted=True), keyed: TargetRules(compacted=True)})
        compacted, straight, in_place = copier.copy(
            [CopyRange(topic, 0, 0, 200, topic), CopyRange(plain, 0, 0, 200, plain), CopyRange(keyed, 0, 0, 200, keyed)]
        )
        # again from the middle of the batches: the first batch straddles the start, the rest go as they are
        [resumed] = copier.copy([CopyRange(plain, 0, 150, 200, plain)])
    finally:
        copier.close()
    assert (compacted.records, compacted.fallback_records, compacted.offset_syncs) == (200, 200, ((0, 0), (199, 199)))
    assert (straight.records, straight.fallback_records, straight.offset_syncs) == (200, 0, ((0, 0), (199, 199)))
    assert (in_place.records, in_place.fallback_records, in_place.offset_syncs) == (200, 0, ((0, 0), (199, 199)))
    assert as_compared(consume_all(clusters.target, keyed, 1)) == as_compared(consume_all(clusters.source, keyed, 1))
    assert (resumed.records, resumed.fallback_records) == (50, 10)  # 150..159 by the record loop
    assert resumed.offset_syncs == ((150, 200), (199, 249))
    assert as_compared(consume_all(clusters.target, topic, 1)) == as_compared(consume_all(clusters.source, topic, 1))
    got = as_compared(consume_all(clusters.target, plain, 1))[0]
    expected = as_compared(consume_all(clusters.source, plain, 1))[0]
    assert got == expected + expected[150:]


def assert_the_copy_fails(clusters: Any, topic: str, error: str) -> None:
    """The batch copy of topic[0]@0..100 onto the target's `topic` fails naming the source
    offsets and the target's `error` (a regular expression)."""
    consumer_config = source_consumer(clusters)
    copier = new_batch_copier(consumer_config, {"bootstrap.servers": clusters.target}, stall_timeout_s=30)
    try:
        with pytest.raises(
            CopyError, match=rf"producing source records {topic}\[0\]@0\.\.\d+ to {topic}\[0\] failed: {error}"
        ):
            copier.copy([CopyRange(topic, 0, 0, 100, topic)])
    finally:
        copier.close()


def test_a_batch_the_target_refuses_fails_the_copy_naming_partition_and_offsets(clusters: Any, unique: str) -> None:
    """Not retriable: the copy fails naming the source offsets (the target's max.message.bytes was
    not read, so the batch was not sent to the record loop first)."""
    topic = f"bct-{unique}"
    create_topic(clusters.source, topic, 1)
    create_topic(clusters.target, topic, 1, {"max.message.bytes": "2000"})
    produce_with(clusters.source, topic, [dict(r, partition=0) for r in records("big", 100)])
    assert_the_copy_fails(clusters, topic, r"MessageSizeTooLargeError \(10\)")


def test_a_batch_corrupted_on_the_way_is_refused_by_the_target_not_copied(
    clusters: Any, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy updates the source's CRC for the fields it rewrites instead of computing a new one,
    so a byte changed between the source's disk and the target (here: in the fetched answer's
    buffer) still fails the CRC: the real broker refuses the batch (CORRUPT_MESSAGE) and the copy
    fails naming it; nothing of that batch is on the target."""
    import kmirror_engine.copying.batch_queue as batch_queue

    topic = f"bcx-{unique}"
    create_topic(clusters.source, topic, 1)
    create_topic(clusters.target, topic, 1)
    produce_with(clusters.source, topic, [dict(r, partition=0) for r in records("crc", 100)])
    split = batch_queue.split_batches

    def flip_a_record_byte(records: Any) -> list[Any]:
        batches = split(records)
        if batches:
            batches[0].data[-2] ^= 0x01  # a byte of the first batch's last record (the fetch buffer)
        return batches

    monkeypatch.setattr(batch_queue, "split_batches", flip_a_record_byte)
    assert_the_copy_fails(clusters, topic, r"CorruptRecordError \(2\)")
    assert consume_all(clusters.target, topic, 1) == {0: []}


def test_a_batch_larger_than_the_partition_fetch_limit_is_fetched_whole(
    clusters: Any, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka serves a batch over the per-partition limit whole only to a request's first partition
    (KIP-74) and cuts or leaves out the others': a cut batch is never produced, the partition is
    fetched again (first, with the request's limit) until every batch came whole. The limit is made
    tiny here instead of the batches big."""
    import kmirror_engine.copying.batch_queue as batch_queue

    monkeypatch.setattr(batch_queue, "PARTITION_FETCH_BYTES", 512)
    topic = f"bcw-{unique}"
    create_topic(clusters.source, topic, 3)
    create_topic(clusters.target, topic, 3)
    data = [dict(r, partition=i % 3) for i, r in enumerate(records("wide", 300))]  # ~100 records per batch
    produce_with(clusters.source, topic, data)
    consumer_config = source_consumer(clusters)
    copier = new_batch_copier(consumer_config, {"bootstrap.servers": clusters.target}, stall_timeout_s=20)
    try:
        done = copier.copy([CopyRange(topic, p, 0, 100, topic) for p in range(3)])
    finally:
        copier.close()
    assert [(p.records, p.fallback_records) for p in done] == [(100, 0)] * 3
    assert as_compared(consume_all(clusters.target, topic, 3)) == as_compared(consume_all(clusters.source, topic, 3))


def test_small_batches_are_copied_merged_record_for_record(clusters: Any, unique: str) -> None:
    """A topic written one or two records per batch (a producer at a low rate): the copier sends
    them merged into far fewer batches, every record identical and in order, offsets mapped exactly."""
    topic = f"bc-{unique}.small"
    create_topic(clusters.source, topic, PARTITIONS)
    create_topic(clusters.target, f"w.{topic}", PARTITIONS)
    produce_with(clusters.source, topic, records(topic, 400), **{"linger.ms": 0, "batch.num.messages": 2})
    source_shapes = [batch_shapes(clusters.source, topic, p) for p in range(PARTITIONS)]
    assert all(max(n for n, _, _ in shapes) <= 2 for shapes in source_shapes)
    copier = new_batch_copier(
        {"bootstrap.servers": clusters.source, **CONSUMER_TUNING, **CONSUMER_REQUIRED},
        {"bootstrap.servers": clusters.target, "acks": "all", "enable.idempotence": True},
    )
    try:
        progress = copier.copy([CopyRange(topic, p, 0, 200, f"w.{topic}") for p in range(PARTITIONS)])
    finally:
        copier.close()
    assert [r.records for r in progress] == [200, 200]
    assert as_compared(consume_all(clusters.target, f"w.{topic}", PARTITIONS)) == as_compared(
        consume_all(clusters.source, topic, PARTITIONS)
    )
    for p in range(PARTITIONS):
        copied = batch_shapes(clusters.target, f"w.{topic}", p)
        assert sum(n for n, _, _ in copied) == 200 and len(copied) * 10 <= len(source_shapes[p])
    assert all(r.offset_syncs[0] == (0, 0) and r.offset_syncs[-1] == (199, 199) for r in progress)


def _producer_quota(bootstrap: str, client_id: str, byte_rate: float | None) -> None:
    """Set (None: remove) a producer byte-rate quota for `client_id` (AlterClientQuotas)."""
    from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest as Alter

    link = BrokerLink({"bootstrap.servers": bootstrap}, "test-quota")
    try:
        entry = Alter.EntryData(
            entity=[Alter.EntryData.EntityData(entity_type="client-id", entity_name=client_id)],
            ops=[Alter.EntryData.OpData(key="producer_byte_rate", value=byte_rate or 0.0, remove=byte_rate is None)],
        )
        request = Alter[1](entries=[entry], validate_only=False)
        answer = link.wait(link.send(request, link.manager.least_loaded_node()), 30, "AlterClientQuotas")
        assert all(e.error_code == 0 for e in answer.entries), answer
    finally:
        link.close()


def test_a_target_throttled_by_a_producer_quota_gets_every_record_once_in_order(clusters: Any, unique: str) -> None:
    """Issue 41 item 1, as the review reproduced it: a 1 MB/s producer quota on the target and
    20,000 records of 1 KB. The throttled connection is paused and refuses requests at once;
    before, a refused batch was booked as landed (142 records of a partition lost, exit 0)."""
    topic, client_id = f"bcq-{unique}", f"kmirror-quota-{unique}"
    create_topic(clusters.source, topic, 1)
    create_topic(clusters.target, topic, 1)
    data = [
        {
            "key": f"k{i}".encode(),
            "value": f"{i:08d}".encode() * 128,
            "partition": 0,
            "timestamp": BASE_TIMESTAMP_MS + i,
            "headers": None,
        }
        for i in range(20_000)
    ]
    produce_with(clusters.source, topic, data, **{"batch.size": 64 * 1024})
    _producer_quota(clusters.target, client_id, 1024 * 1024)
    copier = new_batch_copier(
        source_consumer(clusters), {"bootstrap.servers": clusters.target, "client.id": client_id}, stall_timeout_s=120
    )
    try:
        [progress] = copier.copy([CopyRange(topic, 0, 0, 20_000, topic)])
    finally:
        copier.close()
        _producer_quota(clusters.target, client_id, None)
    landed = consume_all(clusters.target, topic, 1, expect=20_000)
    assert [m.value() for m in landed[0]] == [r["value"] for r in data]  # every record once, in order
    assert progress.records == 20_000 and progress.offset_syncs == ((0, 0), (19_999, 19_999))


def test_a_deleted_source_topic_is_unknown_to_the_link_not_a_failed_metadata_request(
    clusters: Any, unique: str
) -> None:
    """kafka-python fails a one-topic metadata request with that topic's error: a topic deleted
    while the batch path copies it made `leaders()` raise `LinkError: metadata failed:
    UnknownTopicOrPartitionError` (the app's exit in a CI run). Now, alone or beside a live
    topic, it is left out of the leaders and named in `unknown` (`copying.deleted_sources`)."""
    from confluent_kafka.admin import AdminClient

    doomed, alive = f"bdd-{unique}", f"bda-{unique}"
    create_topic(clusters.source, doomed, 1)
    create_topic(clusters.source, alive, 1)
    link = BrokerLink({"bootstrap.servers": clusters.source}, "test-deleted")
    try:
        assert set(link.leaders([doomed])) == {(doomed, 0)} and link.unknown == set()
        admin = AdminClient({"bootstrap.servers": clusters.source})
        for future in admin.delete_topics([doomed], operation_timeout=30).values():
            future.result(timeout=30)
        deadline = time.monotonic() + 30
        while link.leaders([doomed]) and time.monotonic() < deadline:  # the broker's metadata catches up
            time.sleep(0.2)
        assert link.leaders([doomed]) == {} and link.unknown == {doomed}
        assert set(link.leaders([doomed, alive])) == {(alive, 0)} and link.unknown == {doomed}
    finally:
        link.close()
