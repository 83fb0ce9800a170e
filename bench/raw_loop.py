"""The "raw" contender: a single-process confluent-kafka consume->produce loop with the same
safety settings as the app (acks=all, idempotence), i.e. MirrorMaker 1's design in Python.
It keeps partition, key, headers and timestamp, like the app, and uses the same client tuning,
so the comparison measures the architecture rather than configuration.
"""

from __future__ import annotations

import multiprocessing
import time
from typing import Any, cast

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from bench.measure import SAFE_PRODUCER
from kmirror_engine.copying.ranges import CONSUMER_TUNING, PRODUCER_TUNING


def raw_mirror(source: str, target: str, src_topic: str, dst_topic: str, expected: dict[int, int]) -> dict[str, Any]:
    """Copy `expected[p]` records of each partition; returns first-read / last-delivery times (s)."""
    consumer = Consumer(
        {
            "bootstrap.servers": source,
            "group.id": "bench-raw",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            **CONSUMER_TUNING,
            "enable.partition.eof": False,
        }
    )
    producer = Producer({"bootstrap.servers": target, **PRODUCER_TUNING, **SAFE_PRODUCER})
    errors: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)

    remaining = dict(expected)
    consumer.assign([TopicPartition(src_topic, p, 0) for p, n in expected.items() if n])
    first_read: float | None = None
    produce, poll = producer.produce, producer.poll
    try:
        while any(remaining.values()):
            msgs = consumer.consume(10_000, timeout=1.0)
            if msgs and first_read is None:
                first_read = time.time()
            for msg in msgs:
                if msg.error():
                    raise KafkaException(msg.error())
                p = cast(int, msg.partition())
                if remaining[p] == 0:
                    continue  # the fence after the data
                remaining[p] -= 1
                while True:
                    try:
                        produce(
                            dst_topic,
                            msg.value(),
                            msg.key(),
                            p,
                            on_delivery=delivered,
                            timestamp=msg.timestamp()[1],
                            headers=msg.headers(),
                        )
                        break
                    except BufferError:
                        poll(0.05)
            poll(0)
            if errors:
                raise RuntimeError(f"raw loop delivery failed: {errors[:3]}")
        if producer.flush(120) or errors:
            raise RuntimeError(f"raw loop delivery failed: {errors[:3]}")
    finally:
        consumer.close()
    return {"start": first_read or time.time(), "end": time.time()}


def raw_parallel(
    source: str, target: str, src_topic: str, dst_topic: str, expected: dict[int, int], procs: int
) -> dict[str, Any]:
    """`raw_mirror` as `procs` processes over disjoint partitions (MirrorMaker 1's num.streams):
    first read of any -> last delivery of all (s)."""
    shares = [{p: expected[p] for p in sorted(expected)[k::procs]} for k in range(procs)]
    with multiprocessing.get_context("spawn").Pool(procs) as pool:
        results = pool.starmap(raw_mirror, [(source, target, src_topic, dst_topic, share) for share in shares if share])
    return {"start": min(r["start"] for r in results), "end": max(r["end"] for r in results)}
