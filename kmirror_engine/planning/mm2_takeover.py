"""A flow's first start after a stopped MirrorMaker 2 (`starting_offsets: {from_mm2: {...}}`): read
where MM2 left each partition and plan where kafka-mirror resumes (`kmirror.mm2.takeover`).

Read on the driver, once, when the flow has no Spark checkpoint yet (Spark asks for the initial
offsets only then):
- MM2's committed source offsets: its Connect offsets topic on the TARGET (every partition, up
  to the high watermarks seen at the start; the last record of a key wins);
- MM2's offset syncs (the fallback): its syncs topic on the source (MM2's default location) or
  the target, the newest sync of each partition;
- the source partitions' log start and end, and the end offsets of their remote partitions on
  the target (where kafka-mirror's first copy of each lands).
A partition that cannot be resumed safely raises ValidationError listing every such partition:
nothing is copied, rather than copying MM2's records again from the start.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from kmirror.errors import ConnectionFailure, Problems
from kmirror.flow.spec import ClusterEndpoint
from kmirror.flow.views import FlowRoute, Mm2Takeover
from kmirror.mm2.formats import FormatError, decode_offset_sync
from kmirror.mm2.takeover import (
    Mm2SourceOffset,
    TakeoverPlan,
    alias_problems,
    committed_offsets,
    decode_source_offset,
    plan_takeover,
)
from kmirror_engine.planning.discovery import MirroredTopic, list_topic_partitions
from kmirror_engine.planning.offset_queries import query_offsets

log = logging.getLogger("kmirror.takeover")
TAKEOVER_PREFIX = "kmirror takeover "
OPTION_PATH = "starting_offsets.from_mm2"
READ_TIMEOUT_S = 60.0


def read_topic(endpoint: ClusterEndpoint, topic: str, timeout_s: float = READ_TIMEOUT_S) -> Iterator[Any]:
    """Every record of every partition of `topic` up to the high watermarks seen at the start
    (each partition in log order); nothing when the topic does not exist. Raises
    ConnectionFailure naming the cluster and topic on a read error or after `timeout_s`."""
    from kmirror_engine.clients.factory import new_consumer

    consumer = new_consumer(
        endpoint,
        role="mm2-takeover-reader",
        group_id=f"kmirror-takeover-{topic}",
        **{"enable.auto.commit": False, "enable.partition.eof": True},
    )
    where = f"{topic} on {endpoint.alias!r} ({endpoint.bootstrap_servers})"
    try:
        metadata = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            return
        ends: dict[int, int] = {}
        for partition in metadata.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
            if high > low:
                ends[partition] = high
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING) for partition in ends])
        deadline = time.monotonic() + timeout_s
        while ends:
            if time.monotonic() > deadline:
                raise ConnectionFailure(f"reading {where} timed out with partitions {sorted(ends)} unread")
            for msg in consumer.consume(1000, timeout=0.5):
                error = msg.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise ConnectionFailure(f"reading {where} failed: {error.str()}")
                end = ends.get(msg.partition())
                if end is None:
                    continue  # done: past the end seen at the start
                if error is None and msg.offset() < end:
                    yield msg
                # at the end seen at the start, or at the log's end (transaction markers are never delivered)
                if error is not None or msg.offset() >= end - 1:
                    del ends[msg.partition()]
    except KafkaException as exc:
        raise ConnectionFailure(f"reading {where} failed: {exc.args[0]}") from None
    finally:
        consumer.close()


def mm2_committed(target: ClusterEndpoint, topic: str) -> list[Mm2SourceOffset]:
    """MM2's source-connector records in its Connect offsets topic, in log order per key."""
    out = []
    for msg in read_topic(target, topic):
        try:
            record = decode_source_offset(msg.key(), msg.value())
        except FormatError as exc:
            raise FormatError(
                f"{topic} on {target.alias!r}, partition {msg.partition()} offset {msg.offset()}: "
                f"{exc}; only Kafka Connect should write that topic"
            ) from None
        if record is not None:
            out.append(record)
    return out


def mm2_synced(endpoint: ClusterEndpoint, topic: str) -> dict[tuple[str, int], int]:
    """The upstream offset of MM2's newest offset sync per source partition (log order: MM2's
    own store also starts over when a partition's syncs go back)."""
    out: dict[tuple[str, int], int] = {}
    for msg in read_topic(endpoint, topic):
        try:
            sync = decode_offset_sync(msg.key() or b"", msg.value() or b"")
        except FormatError as exc:
            raise FormatError(
                f"{topic} on {endpoint.alias!r}, offset {msg.offset()}: not an MM2 offset sync "
                f"({exc}); check starting_offsets.from_mm2.offset_syncs_topic"
            ) from None
        out[(sync.topic, sync.partition)] = sync.upstream_offset
    return out


def _remote_ends(
    target_admin: Any, target: ClusterEndpoint, topics: dict[str, MirroredTopic]
) -> dict[tuple[str, int], int]:
    """End offsets of the remote partitions that exist on the target, by SOURCE (topic, partition)."""
    existing = list_topic_partitions(target_admin, target, 30.0)
    by_remote = {
        (t.target_topic, p): (t.source_topic, p)
        for t in topics.values()
        for p in range(min(t.partitions, existing.get(t.target_topic, 0)))
    }
    ends = query_offsets(target_admin, target, list(by_remote), "latest", read_committed=False)
    return {by_remote[tp]: end for tp, end in ends.items()}


def plan_mm2_takeover(
    route: FlowRoute,
    read_committed: bool,
    takeover: Mm2Takeover,
    topics: dict[str, MirroredTopic],
    source_admin: Any,
    target_admin: Any,
) -> TakeoverPlan:
    """Where each mirrored partition of the flow `route` resumes after MM2 (source offsets read
    `read_committed` or not, as `spec.planning` says); raises ValidationError listing every
    partition that cannot resume safely (see the module doc)."""
    source, target = route.source, route.target
    offsets_topic, syncs_topic = takeover.topics(source.alias, target.alias)
    syncs_on = source if takeover.offset_syncs_cluster == "source" else target
    records = mm2_committed(target, offsets_topic)
    partitions = [(t.source_topic, p) for t in topics.values() for p in range(t.partitions)]
    starts = query_offsets(source_admin, source, partitions, "earliest", read_committed)
    ends = query_offsets(source_admin, source, partitions, "latest", read_committed)
    plan = plan_takeover(
        partitions,
        committed_offsets(records, takeover.connector, source.alias),
        mm2_synced(syncs_on, syncs_topic),
        {tp: (starts[tp], ends[tp]) for tp in partitions},
        _remote_ends(target_admin, target, topics),
        lambda topic: route.policy.format_remote_topic(source.alias, topic),
        OPTION_PATH,
    )
    problems = Problems(
        f"flow {route.flow_id}: taking over from MirrorMaker 2 ({offsets_topic} on {target.alias!r}, "
        f"{syncs_topic} on {syncs_on.alias!r})"
    )
    problems.extend(alias_problems(records, takeover.connector, source.alias, OPTION_PATH))
    problems.extend(plan.problems)
    problems.raise_if_any()
    report_takeover(route.flow_id, plan)
    return plan


def report_takeover(flow_id: str, plan: TakeoverPlan) -> None:
    """One structured stderr line per resumed partition (the planner's worker has no logging
    configured; stderr reaches the driver's log, like the data-loss lines)."""
    for point in plan.points:
        print(TAKEOVER_PREFIX + json.dumps({"flow": flow_id, **asdict(point)}), file=sys.stderr, flush=True)
    log.info(
        "%s: taking over from MirrorMaker 2: %d partition(s) resume where MM2 stopped, %d it never copied "
        "start at their log start",
        flow_id,
        len(plan.points),
        len(plan.resume) - len(plan.points),
    )
