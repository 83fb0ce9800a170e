"""The copy loop against two real brokers: what arrives on the target, offset syncs, failures."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from kmirror_cli.local_brokers import free_port
from kmirror_engine.copying.native_copy import NativeRangeCopier, new_loop
from kmirror_engine.copying.range_copy import RangeCopier
from kmirror_engine.copying.ranges import CONSUMER_REQUIRED, CONSUMER_TUNING, PRODUCER_TUNING, CopyError, CopyRange
from tests.kafka_helpers import BASE_TIMESTAMP_MS, add_fences, consume_all, create_topic, produce

pytestmark = [pytest.mark.e2e, pytest.mark.spark40]


@pytest.fixture
def copier_factory(clusters: Any, copy_loop: str) -> Iterator[Any]:
    """Copiers of the loop `copy_loop` names (both loops run every test that takes this fixture)."""
    made: list[Any] = []

    def make(producer: dict[str, Any] | None = None, **kwargs: Any) -> RangeCopier | NativeRangeCopier:
        consumer_config = {
            "bootstrap.servers": clusters.source,
            "group.id": "kmirror-test-copy",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            **CONSUMER_TUNING,
            **CONSUMER_REQUIRED,
        }
        config = {
            "bootstrap.servers": clusters.target,
            "acks": "all",
            "enable.idempotence": True,
            **PRODUCER_TUNING,
            "linger.ms": 5,
            **(producer or {}),
        }
        kwargs = {"stall_timeout_s": 30, **kwargs}
        if copy_loop == "native":
            loop = new_loop(consumer_config, config)
            made.append(loop)
            return NativeRangeCopier(loop, **kwargs)
        consumer = Consumer(consumer_config)
        made.append(consumer)
        return RangeCopier(consumer, Producer(config), **kwargs)

    yield make
    for consumer in made:
        consumer.close()


def _mirrored(clusters: Any, name: str, partitions: int) -> tuple[str, str]:
    """Source topic `name` and its mirror `west.<name>` on the target, with `partitions` each."""
    create_topic(clusters.source, name, partitions)
    create_topic(clusters.target, f"west.{name}", partitions)
    return name, f"west.{name}"


def _records(partitions: int, per_partition: int) -> list[dict[str, Any]]:
    return [
        {
            "key": f"k{p}-{i}".encode(),
            "value": f"v{p}-{i}".encode() * 3,
            "partition": p,
            "headers": [("h", f"{p}:{i}".encode()), ("empty", b"")],
            "timestamp": BASE_TIMESTAMP_MS + p * 1000 + i,
        }
        for p in range(partitions)
        for i in range(per_partition)
    ]


def test_copy_preserves_partition_key_value_headers_and_timestamp(
    clusters: Any, unique: str, copier_factory: Any
) -> None:
    src, dst = _mirrored(clusters, f"copy-src-{unique}", 3)
    records = _records(3, 20)
    produce(clusters.source, src, records)
    add_fences(clusters.source, src, 3)

    ranges = [CopyRange(src, p, 0, 20, dst) for p in range(3)] + [CopyRange(src, 0, 20, 20, dst)]
    progress = copier_factory().copy(ranges)

    add_fences(clusters.target, dst, 3)
    mirrored = consume_all(clusters.target, dst, 3)
    for p in range(3):
        want = [r for r in records if r["partition"] == p]
        got = mirrored[p]
        assert [m.key() for m in got] == [r["key"] for r in want]
        assert [m.value() for m in got] == [r["value"] for r in want]
        assert [m.headers() for m in got] == [r["headers"] for r in want]
        assert [m.timestamp()[1] for m in got] == [r["timestamp"] for r in want]
    assert [(p.partition, p.records, p.next_offset) for p in progress] == [
        (0, 20, 20),
        (1, 20, 20),
        (2, 20, 20),
        (0, 0, 20),
    ]
    assert progress[1].bytes == sum(len(r["key"]) + len(r["value"]) for r in records if r["partition"] == 1)
    assert progress[2].last_timestamp_ms == BASE_TIMESTAMP_MS + 2000 + 19
    assert progress[0].latency_count == 20 and progress[0].latency_min_ms is not None


def _transaction(bootstrap: str, topic: str, values: list[bytes], unique: str) -> None:
    """Committed transactional records: the commit marker after them leaves a hole in the offsets.

    (tansu does not filter aborted transactions for read_committed consumers, so holes come
    from commit markers here.)
    """
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"kmirror-test-txn-{unique}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value, partition=0)
    producer.flush(30)
    producer.commit_transaction(30)


def test_offset_syncs_follow_drift_from_holes_and_a_non_empty_target(
    clusters: Any, unique: str, copier_factory: Any
) -> None:
    src, dst = _mirrored(clusters, f"sync-src-{unique}", 1)
    produce(clusters.target, dst, [{"value": b"already-there", "partition": 0}] * 2)  # target offsets 0-1
    produce(clusters.source, src, [{"value": f"a{i}".encode(), "partition": 0} for i in range(5)])  # 0-4
    _transaction(clusters.source, src, [b"t0", b"t1", b"t2"], unique)  # 5-7, 8 the commit marker
    produce(clusters.source, src, [{"value": f"b{i}".encode(), "partition": 0} for i in range(4)])  # 9-12
    add_fences(clusters.source, src, 1)  # 13

    copier = copier_factory()
    only_markers = copier.copy([CopyRange(src, 0, 8, 9, dst)])[0]
    [progress] = copier.copy([CopyRange(src, 0, 0, 13, dst)])

    assert (only_markers.records, only_markers.next_offset, only_markers.offset_syncs) == (0, 9, ())
    assert (progress.records, progress.next_offset) == (12, 13)
    assert progress.offset_syncs == ((0, 2), (9, 10), (12, 13))
    add_fences(clusters.target, dst, 1)
    values = [m.value() for m in consume_all(clusters.target, dst, 1)[0]]
    a, t, b = ([f"{c}{i}".encode() for i in range(n)] for c, n in (("a", 5), ("t", 3), ("b", 4)))
    assert values == [b"already-there"] * 2 + a + t + b


def test_a_record_the_producer_cannot_send_fails_the_copy_naming_it(
    clusters: Any, unique: str, copier_factory: Any
) -> None:
    src, dst = _mirrored(clusters, f"big-src-{unique}", 2)
    produce(clusters.source, src, [{"value": b"small", "partition": 1}, {"value": b"x" * 5000, "partition": 1}])
    add_fences(clusters.source, src, 2)

    copier = copier_factory(producer={"message.max.bytes": 2000})
    with pytest.raises(CopyError) as caught:
        copier.copy([CopyRange(src, 1, 0, 2, dst)])
    assert f"cannot produce source record {src}[1]@1 (5000 bytes) to {dst}[1]" in str(caught.value)
    assert "too large" in str(caught.value)


@pytest.mark.parametrize("copy_loop", ["python"])  # dead-letter flows always run the Python loop
def test_too_large_records_go_to_the_dead_letter_topic_when_configured(
    clusters: Any, unique: str, copier_factory: Any
) -> None:
    src, dst = _mirrored(clusters, f"dlq-src-{unique}", 1)
    dlq = f"dlq-{unique}"
    create_topic(clusters.target, dlq, 1)
    values = [b"one", b"x" * 5000, b"three"]
    produce(clusters.source, src, [{"key": b"k", "value": v, "partition": 0, "headers": [("h", b"1")]} for v in values])
    add_fences(clusters.source, src, 1)

    # the topic's limit, not the producer's own: only what the target refuses is dead-lettered (issue 25)
    copier = copier_factory(limits={dst: 2000}, dead_letter_topic=dlq)
    [progress] = copier.copy([CopyRange(src, 0, 0, 3, dst)])

    assert (progress.records, progress.dead_lettered, progress.next_offset) == (2, 1, 3)
    add_fences(clusters.target, dst, 1)
    add_fences(clusters.target, dlq, 1)
    assert [m.value() for m in consume_all(clusters.target, dst, 1)[0]] == [b"one", b"three"]
    [dead] = consume_all(clusters.target, dlq, 1)[0]
    headers = dict(dead.headers())
    assert dead.key() == b"k" and dead.value() == b"x" * 5000  # the record itself
    assert headers["h"] == b"1"
    assert (headers["kmirror.origin.topic"], headers["kmirror.origin.partition"]) == (src.encode(), b"0")
    assert (headers["kmirror.origin.offset"], headers["kmirror.origin.bytes"]) == (b"1", b"5001")


def test_a_start_offset_the_source_no_longer_serves_fails_instead_of_skipping(
    clusters: Any, unique: str, copier_factory: Any
) -> None:
    src, dst = _mirrored(clusters, f"gone-src-{unique}", 1)
    produce(clusters.source, src, [{"value": b"a", "partition": 0}] * 3)
    add_fences(clusters.source, src, 1)

    # Apache Kafka answers OFFSET_OUT_OF_RANGE (auto.offset.reset=error makes it a consumer
    # error); tansu answers nothing, so the stall timeout ends the copy. Either way it fails.
    with pytest.raises(CopyError, match=rf"(consuming {src}\[0\] failed|no progress for 3 s .* {src}\[0\] end 1005)"):
        copier_factory(stall_timeout_s=3).copy([CopyRange(src, 0, 1000, 1005, dst)])


def test_a_failed_delivery_fails_the_copy_naming_the_source_record(
    clusters: Any, unique: str, copier_factory: Any
) -> None:
    src, dst = f"nodst-src-{unique}", f"west.nodst-src-{unique}"
    create_topic(clusters.source, src, 1)
    produce(clusters.source, src, [{"value": b"a", "partition": 0}] * 2)
    add_fences(clusters.source, src, 1)

    # a target nobody listens on: the records wait in the producer until message.timeout.ms
    copier = copier_factory(producer={"bootstrap.servers": f"127.0.0.1:{free_port()}", "message.timeout.ms": 2000})
    with pytest.raises(
        CopyError,
        match=rf"record\(s\) failed; first: delivery to {dst}\[0\] failed for source "
        rf"record {src}\[0\]@0: ",
    ):
        copier.copy([CopyRange(src, 0, 0, 2, dst)])


def test_a_record_over_the_target_topics_limit_fails_before_it_is_produced(
    clusters: Any, unique: str, copier_factory: Any, copy_loop: str
) -> None:
    src, dst = _mirrored(clusters, f"limit-src-{unique}", 1)
    produce(clusters.source, src, [{"value": v, "partition": 0} for v in (b"small", b"x" * 3000, b"after")])
    add_fences(clusters.source, src, 1)

    with pytest.raises(CopyError) as caught:
        copier_factory(limits={dst: 2000}).copy([CopyRange(src, 0, 0, 3, dst)])
    if copy_loop == "native":  # the C loop's own message (flows with skip_offsets/dead letters run the Python loop)
        assert str(caught.value) == (
            f"cannot produce source record {src}[0]@1 (3082 bytes) to {dst}[0]: over the topic's max.message.bytes "
            "(2000); raise it on the target or set dead_letter_topic"
        )
        return
    assert str(caught.value) == (
        f"cannot produce source record {src}[0]@1 to {dst}[0]: the target refuses it: record of 3082 bytes over "
        "the topic's max.message.bytes (2000). Ways out (docs/reliability.md#poison-records): set dead_letter_topic "
        f'(the record goes there with its origin in headers), skip it with skip_offsets: ["{src}:0:1"], or change '
        "that config of the target topic"
    )
