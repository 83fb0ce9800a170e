"""Read a one-partition internal registry (created topics, synced ACLs) to its end.

Both registries are compacted one-partition topics on the target keyed by what they record;
their readers want every keyed record up to the end as of the read, in log order.
"""

from __future__ import annotations

import time

from kmirror.errors import ConnectionFailure
from kmirror.flow.spec import ClusterEndpoint
from kmirror_engine.planning.internal_names import reader_group


def read_keyed_to_end(
    target: ClusterEndpoint, topic: str, *, role: str, timeout_s: float, hint: str = ""
) -> list[tuple[bytes, bytes | None]]:
    """Every keyed `(key, value)` record of one-partition `topic` up to its end as of the read
    (the partition-EOF event; [] when the topic does not exist yet); ConnectionFailure naming the
    topic (and `hint`, appended to a read error) when it cannot be read to its end in time."""
    from confluent_kafka import KafkaError, TopicPartition

    from kmirror_engine.clients.factory import new_consumer

    consumer = new_consumer(
        target,
        role=role,
        group_id=reader_group(topic),
        **{"enable.auto.commit": False, "enable.partition.eof": True},
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if metadata is None or metadata.error is not None or 0 not in metadata.partitions:
            return []
        consumer.assign([TopicPartition(topic, 0, 0)])
        records: list[tuple[bytes, bytes | None]] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.5):
                error = msg.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    return records
                if error is not None:
                    raise ConnectionFailure(f"reading {topic} on {target.alias!r} failed: {error.str()}{hint}")
                key = msg.key()
                if key:
                    records.append((key, msg.value()))
        raise ConnectionFailure(f"reading {topic} on {target.alias!r} did not reach its end in {timeout_s:.0f} s")
    finally:
        consumer.close()
