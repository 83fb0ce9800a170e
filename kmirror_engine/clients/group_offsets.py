"""A consumer group's committed offsets, read by a consumer of that group, never by the admin API.

librdkafka's admin `ListConsumerGroupOffsets` shares the consumer's OffsetFetch response handler.
When the broker answers NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS (a coordinator moving in
a rolling restart, a `__consumer_offsets` partition still loading after a broker start) that
handler asks the client's group handle to look the coordinator up again; an admin client has no
group handle, so it dereferences NULL and the process dies of SIGSEGV (librdkafka #5040, open in
2.16). A consumer created with `group.id` has that handle: the same error there is a retried
lookup. The consumer never subscribes, so it never joins the group; it only fetches offsets.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

DEFAULT_TIMEOUT_S = 30.0


def all_partitions(consumer: Any, timeout_s: float) -> list[TopicPartition]:
    """Every partition of every topic on the cluster (what the admin API's "all the group
    committed" reads): a group's committed offsets can only be for partitions that exist."""
    metadata = consumer.list_topics(timeout=timeout_s)
    return [
        TopicPartition(name, p)
        for name, topic in sorted(metadata.topics.items())
        if topic.error is None
        for p in sorted(topic.partitions)
    ]


def read_group_offsets(new_consumer: Any, request: Any, timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
    """`request` (a ConsumerGroupTopicPartitions; no partitions: all the group committed) answered
    as the admin API answers it: a ConsumerGroupTopicPartitions whose partitions without a commit
    carry a negative offset. `new_consumer(group_id)` makes the consumer; it is closed here."""
    consumer = new_consumer(request.group_id)
    try:
        partitions = list(request.topic_partitions or []) or all_partitions(consumer, timeout_s)
        wanted = [TopicPartition(tp.topic, tp.partition) for tp in partitions]
        committed = consumer.committed(wanted, timeout=timeout_s) if wanted else []
    finally:
        consumer.close()
    return ConsumerGroupTopicPartitions(request.group_id, committed)


def group_offsets_futures(new_consumer: Any, requests: list[Any], timeout_s: float) -> dict[str, Future]:
    """The admin API's `list_consumer_group_offsets` shape: group id -> completed future."""
    out: dict[str, Future] = {}
    for request in requests:
        future: Future = Future()
        try:
            future.set_result(read_group_offsets(new_consumer, request, timeout_s))
        except KafkaException as exc:
            future.set_exception(exc)
        out[request.group_id] = future
    return out
