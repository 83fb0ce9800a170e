"""The `mm2_tuned` contender's settings (issue 47): MirrorMaker 2 as a platform team tuned for
throughput would run it, each setting from published tuning guidance (docs/performance.md,
"Fair peers, real limits", names the sources with their URLs):

- Strimzi / Red Hat Streams for Apache Kafka, "Handling high volumes of messages" and its
  KafkaMirrorMaker2 example: producer batch.size 327680 and linger.ms 100, consumer
  fetch.max.bytes 52428800, max.partition.fetch.bytes 1048576, max.poll.records, tasksMax;
- AWS MSK, "Migrate to an Amazon MSK cluster" (MirrorMaker best practices): for producer
  throughput tune buffer.memory, batch.size, linger.ms; acks=all;
- Aiven, "Configuration parameters for MirrorMaker 2": tasks close to the partition count,
  consumer fetch.min.bytes;
- Apache Kafka's documentation (producer configs): compression.type as the data's (a batch
  compressed like the topic is stored as it is, no broker recompression).
The safety settings of every contender stay (acks=all, idempotence, 5 in flight).
"""

from __future__ import annotations

TUNED_PRODUCER = {
    "batch.size": "327680",
    "linger.ms": "100",
    "buffer.memory": "67108864",
}
TUNED_CONSUMER = {
    "fetch.min.bytes": "65536",
    "fetch.max.bytes": "52428800",
    "max.partition.fetch.bytes": "1048576",
    "max.poll.records": "2000",
}


def tuned_properties(source_alias: str, target_alias: str, compression: str) -> dict[str, str]:
    """mm2.properties entries on top of `mm2_run.mm2_properties`: the target producer's and the
    source consumer's throughput settings, compression.type as the source topic's."""
    props = {f"{target_alias}.producer.{key}": value for key, value in TUNED_PRODUCER.items()}
    props[f"{target_alias}.producer.compression.type"] = compression
    props.update({f"{source_alias}.consumer.{key}": value for key, value in TUNED_CONSUMER.items()})
    return props


def tuned_tasks(partitions: int) -> int:
    """tasks.max up to the partitions: one task per source partition."""
    return max(1, partitions)
