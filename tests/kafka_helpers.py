"""Produce/consume helpers for end-to-end tests.

tansu's high watermark hides the newest batch of each partition, so counts come from
consuming up to a separately produced "fence" record, never from watermark arithmetic.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

FENCE_KEY = b"__kmirror_test_fence__"


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])
    for future in futures.values():
        future.result(timeout=30)


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


def add_fences(bootstrap: str, topic: str, partitions: int) -> None:
    """Append one fence record per partition (its own produce+flush) after the data."""
    produce(bootstrap, topic, [{"key": FENCE_KEY, "value": b"", "partition": p} for p in range(partitions)])


def consume_all(
    bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0, fenced: bool = True
) -> dict[int, list[Any]]:
    """Every record per partition up to (excluding) the fence; fails if a fence never shows up."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "kmirror-test-reader", "enable.auto.commit": False,
         "isolation.level": "read_committed"}
    )  # fmt: skip
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
