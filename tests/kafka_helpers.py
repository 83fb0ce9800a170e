"""Produce/consume helpers for end-to-end tests.

On Apache Kafka a reader consumes up to the end offsets (the last stable offset with
read_committed), signalled by librdkafka's partition EOF. tansu's high watermark hides the
newest batch of each partition, so on tansu only, a separately produced "fence" record follows
the data and readers consume up to it (`add_fences` does nothing on Apache Kafka).
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kmirror.mm2.formats import (
    Checkpoint,
    Heartbeat,
    OffsetSync,
    encode_checkpoint,
    encode_heartbeat,
    encode_offset_sync,
)
from tests.brokers import IS_TANSU

FENCE_KEY = b"__kmirror_test_fence__"
# Records `add_fences` adds per partition: one on tansu, none on Apache Kafka.
TANSU_FENCES = 1 if IS_TANSU else 0
# A valid (key, value) of each MM2 internal topic, for a fence there: its readers decode every record.
SYNC_FENCE = encode_offset_sync(OffsetSync("__fence", 0, 0, 0))
CHECKPOINT_FENCE = encode_checkpoint(Checkpoint("fence", "f", 0, 0, 0))
HEARTBEAT_FENCE = encode_heartbeat(Heartbeat("fence", "fence", 0))
# Record timestamps for test data: an hour ago. A real broker applies time-based retention to
# CreateTime: records stamped years ago roll their segment and are deleted within minutes. A topic
# holding them needs retention.ms well over an hour plus the session (tests use a day): with an
# hour they expire at the first retention check of a slow run (seen: a 2-core CI machine).
BASE_TIMESTAMP_MS = (int(time.time()) - 3600) * 1000


# A flow that only copies: no checkpoints, no heartbeats (flow_raw's options).
COPY_ONLY = {"emit_checkpoints": False, "emit_heartbeats": False}


def flow_raw(
    clusters: Any, source_alias: str, target_alias: str, topics: list[str], checkpoint_location: Any, **options: Any
) -> dict[str, Any]:
    """A flow spec as a dict, from `clusters.source` (named `source_alias`) to `clusters.target`:
    its id `source_alias->target_alias`, the default replication policy, no topic excluded;
    `options` add or replace top-level keys (`id`, `groups`, `emit_heartbeats`...)."""
    return {
        "id": f"{source_alias}->{target_alias}",
        "checkpoint_location": str(checkpoint_location),
        "source": {"alias": source_alias, "bootstrap_servers": clusters.source},
        "target": {"alias": target_alias, "bootstrap_servers": clusters.target},
        "topics": list(topics),
        "topics_exclude": [],
        "replication_policy": {"type": "default"},
        **options,
    }


def dr_topology(
    clusters: Any,
    primary: str,
    standby: str,
    topics: list[str],
    groups: list[str],
    datacenters: tuple[str, str] = ("dc-a", "dc-b"),
    defaults: dict[str, Any] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """A topology as a dict: `clusters.source` named `primary` (in the first of `datacenters`) and
    `clusters.target` named `standby`, one active-passive topology "dr" between them of `topics`
    and `groups`; `defaults` (when given) and `options` (the topology's own settings) add to it."""
    return {
        "clusters": {
            primary: {"bootstrap_servers": clusters.source, "datacenter": datacenters[0]},
            standby: {"bootstrap_servers": clusters.target, "datacenter": datacenters[1]},
        },
        **({"defaults": defaults} if defaults is not None else {}),
        "topologies": [
            {
                "name": "dr",
                "pattern": "active-passive",
                "primary": primary,
                "standby": standby,
                **options,
                "topics": list(topics),
                "groups": list(groups),
            }
        ],
    }


def transactional_clients(clusters: Any, spec: Any, task_id: int) -> tuple[Consumer, Producer, Consumer]:
    """The clients of one exactly-once task of `spec` between `clusters`, as the app makes them: a
    read_committed source consumer of the flow's group, the task's transactional producer and the
    consumer of the target's offsets group."""
    from kmirror_engine.copying.ranges import CONSUMER_REQUIRED, CONSUMER_TUNING
    from kmirror_engine.planning.internal_names import offsets_group, transactional_id

    source = Consumer(
        {
            "bootstrap.servers": clusters.source,
            "group.id": spec.consumer_group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            **CONSUMER_TUNING,
            **CONSUMER_REQUIRED,
        }
    )
    offsets = Consumer(
        {"bootstrap.servers": clusters.target, "group.id": offsets_group(spec.id), "enable.auto.commit": False}
    )
    producer = Producer(
        {
            "bootstrap.servers": clusters.target,
            "transactional.id": transactional_id(spec.id, task_id),
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    return source, producer, offsets


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])
    for future in futures.values():
        future.result(timeout=30)
    # The controller answered; the broker serving the next request may not know the topic yet
    # (KRaft metadata propagates asynchronously): wait until it lists every partition with a leader.
    deadline = time.monotonic() + 30
    while True:
        topic = admin.list_topics(name, timeout=10).topics.get(name)
        if (
            topic is not None
            and topic.error is None
            and len(topic.partitions) == partitions
            and all(p.leader >= 0 for p in topic.partitions.values())
        ):
            return
        assert time.monotonic() < deadline, f"topic {name} created but not in the broker's metadata after 30 s"
        time.sleep(0.1)


def produce(bootstrap: str, topic: str, records: list[dict[str, Any]]) -> None:
    """Produce records ({key, value, partition, headers, timestamp}) and wait for every delivery."""
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    for index, record in enumerate(records):
        kwargs = {k: record[k] for k in ("key", "partition", "headers", "timestamp") if k in record}
        producer.produce(topic, value=record.get("value"), on_delivery=lambda e, m: e and errors.append(e), **kwargs)
        if index % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0 and not errors, f"test produce failed: {errors[:3]} remaining={remaining}"


def keyed_topic(bootstrap: str, topic: str, count: int) -> None:
    """`topic` created with 2 partitions, holding `count` records k<i>/v<i>, spread round-robin."""
    create_topic(bootstrap, topic, 2)
    produce(
        bootstrap,
        topic,
        [{"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % 2} for i in range(count)],
    )


def add_fences(bootstrap: str, topic: str, partitions: int) -> None:
    """On tansu only: append one fence record per partition (its own produce+flush) after the
    data, so the data's last batch becomes visible to offset queries. Nothing on Apache Kafka."""
    if not IS_TANSU:
        return
    produce(bootstrap, topic, [{"key": FENCE_KEY, "value": b"", "partition": p} for p in range(partitions)])


def consume_all(
    bootstrap: str,
    topic: str,
    partitions: int,
    timeout_s: float = 60.0,
    fenced: bool = True,
    expect: int | None = None,
) -> dict[int, list[Any]]:
    """Every committed record per partition: on Apache Kafka up to the end offsets (at least
    `expect` records in all when given: waits for them, e.g. while a mirror is running); on tansu
    up to (excluding) the fence, failing if a fence never shows up."""
    if not IS_TANSU or not fenced:
        return consume_to_end(bootstrap, topic, partitions, timeout_s, expect)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "kmirror-test-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list[Any]] = {p: [] for p in range(partitions)}
    done: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(done) < partitions and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error():
                    raise KafkaException(msg.error())
                if fenced and msg.key() == FENCE_KEY:
                    done.add(msg.partition())
                elif msg.partition() not in done:
                    out[msg.partition()].append(msg)
    finally:
        consumer.close()
    if fenced:
        assert len(done) == partitions, f"fences seen on {sorted(done)} of {partitions} partitions of {topic}"
    return out


def consume_to_end(
    bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0, expect: int | None = None
) -> dict[int, list[Any]]:
    """Every committed record per partition up to the end offsets (partition EOF with
    read_committed: aborted records and control markers never show); waits until at least
    `expect` records arrived in all when given, and fails naming what it saw on timeout."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "kmirror-test-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list[Any]] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            count = sum(len(v) for v in out.values())
            if len(at_end) == partitions and (expect is None or count >= expect):
                return out
            assert time.monotonic() < deadline, (
                f"{topic}: read {count} records (expected {expect}), at the end of partitions {sorted(at_end)}"
            )
            for msg in consumer.consume(1000, timeout=0.5):
                error = msg.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(int(msg.partition() or 0))
                elif error is not None:
                    raise KafkaException(error)
                else:
                    at_end.discard(int(msg.partition() or 0))
                    out[int(msg.partition() or 0)].append(msg)
    finally:
        consumer.close()
