"""The local drill's Kafka side (`kmirror drill`, kmirror_cli/commands/drill.py): its brokers, its
topic and group, the records it writes and checks, one mirror pass through the engine, and the
group's reads. The drill's steps, checks and report stay in the command."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kmirror.errors import KmirrorError

SOURCE_ALIAS, TARGET_ALIAS = "drill-a", "drill-b"
TOPIC, GROUP = "orders", "drill-app"
REMOTE = f"{SOURCE_ALIAS}.{TOPIC}"  # the default replication policy's name on B
FENCE_KEY = b"__kmirror_drill_fence__"  # tansu only: makes the newest batch visible (see demo.py)
READ_TIMEOUT_S = 30.0


def default_broker() -> str:
    """Apache Kafka 4.1 when its jars are already cached (never a Maven download here), else tansu."""
    from kmirror_cli.local_kafka import KAFKA_LINES, cache_dir

    return "kafka-4.1" if (cache_dir() / f"kafka-{KAFKA_LINES['4.1']}" / ".complete").exists() else "tansu"


def new_local_broker(kind: str, name: str) -> Any:
    if kind == "tansu":
        from kmirror_cli.local_brokers import LocalBroker

        return LocalBroker(name)
    from kmirror_cli.local_kafka import KafkaBroker

    return KafkaBroker(name, line=kind.removeprefix("kafka-"))


def value(partition: int, offset: int) -> bytes:
    """The drill's record at `offset` of `partition` on A: every check compares against it."""
    return f"p{partition}-{offset}".encode()


def group_at(records: int, partition: int) -> int:
    """Where the application group stands on A: mid-way, one record apart per partition."""
    return records // 2 - partition


def flow_raw(source: str, target: str, workdir: Path) -> dict[str, Any]:
    return {
        "id": f"{SOURCE_ALIAS}->{TARGET_ALIAS}",
        "checkpoint_location": str(workdir / "checkpoints"),
        "source": {"alias": SOURCE_ALIAS, "bootstrap_servers": source},
        "target": {"alias": TARGET_ALIAS, "bootstrap_servers": target},
        "topics": [TOPIC],
        "topics_exclude": [],
        "replication_policy": {"type": "default"},
        "groups": [GROUP],
        "sync_group_offsets": False,
        "checkpoint_interval_ms": 3_600_000,
    }


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes | None, bytes]]) -> None:
    """(partition, key, value) records, each delivery confirmed; raises KmirrorError otherwise."""
    from kmirror_engine.clients import new_producer

    errors: list[Any] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            errors.append(error)

    producer = new_producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True}, role="drill-producer"
    )
    for partition, key, data in records:
        producer.produce(topic, data, key=key, partition=partition, on_delivery=delivered)
    if producer.flush(60) or errors:
        raise KmirrorError(f"drill: producing to {topic} on {bootstrap} failed: {errors[:3]}; see the broker's log")


def fence(kind: str, bootstrap: str, topic: str, partitions: int, key: bytes = FENCE_KEY, data: bytes = b"") -> int:
    """tansu hides each partition's newest batch from offset queries: append one record per
    partition in its own batch. Returns the fences written per partition (0 on Apache Kafka)."""
    if kind != "tansu":
        return 0
    produce(bootstrap, topic, [(p, key, data) for p in range(partitions)])
    return 1


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic

    from kmirror_engine.clients import new_admin

    admin = new_admin({"bootstrap.servers": bootstrap}, role="drill-admin")
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(timeout=30)


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import TopicPartition

    from kmirror_engine.clients import new_consumer

    consumer = new_consumer({"bootstrap.servers": bootstrap}, role="drill-ends", group_id="kmirror-drill-ends")
    try:
        return {
            p: int(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]) for p in range(partitions)
        }
    finally:
        consumer.close()


def commit_group(bootstrap: str, topic: str, offsets: dict[int, int]) -> None:
    from confluent_kafka import TopicPartition

    from kmirror_engine.clients import new_consumer

    consumer = new_consumer(
        {"bootstrap.servers": bootstrap}, role="drill-app", group_id=GROUP, **{"enable.auto.commit": False}
    )
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def mirror_pass(spec: Any, ends: dict[int, int]) -> dict[int, int]:
    """One micro-batch as the app's tasks and driver do it: copy [0, end) of every partition, then
    the listener persists the offset syncs and writes a checkpoint round. Returns the mirrored end
    per partition; raises when the copy or the checkpoint round fails."""
    from kmirror_engine.clients import consumer_config, new_consumer, new_producer, producer_config
    from kmirror_engine.copying import CopyRange, RangeCopier
    from kmirror_engine.failover import FailoverListener
    from kmirror_engine.observability import BatchProgress

    started = time.monotonic()
    consumer = new_consumer(
        {**consumer_config(spec.source, spec.copy, spec.consumer_group), "enable.partition.eof": True},
        role="drill-mirror",
    )
    producer = new_producer(producer_config(spec.target, spec.copy, spec.id), role="drill-mirror")
    try:
        ranges = [CopyRange(TOPIC, p, 0, end, REMOTE) for p, end in ends.items()]
        progress = RangeCopier(consumer, producer, stall_timeout_s=30).copy(ranges)
    finally:
        consumer.close()
    listener = FailoverListener.for_flow(spec, serve_metrics=False, heartbeats=False)
    try:
        duration_ms = int((time.monotonic() - started) * 1000)
        listener.on_batch(BatchProgress(0, tuple(progress), duration_ms, {(TOPIC, p): e for p, e in ends.items()}))
        listener.checkpoint_now()  # raises when the round failed: a drill without checkpoints proves nothing
    finally:
        listener.close(final=False)
    return {p.partition: p.next_offset for p in progress}


def read_group(
    bootstrap: str, partitions: int, topic: str, want: Callable[[int], int]
) -> tuple[dict[int, list[Any]], float]:
    """A consumer of GROUP resumes at its committed offsets on `topic` and reads `want(p)` records
    of each partition (fences skipped). Returns ((offset, value) per partition, monotonic time of
    the first record); raises KmirrorError naming what it got when they do not come in time."""
    from confluent_kafka import TopicPartition

    from kmirror_engine.clients import new_consumer

    consumer = new_consumer(
        {"bootstrap.servers": bootstrap},
        role="drill-app",
        group_id=GROUP,
        **{"enable.auto.commit": False, "auto.offset.reset": "latest"},
    )
    got: dict[int, list[Any]] = {p: [] for p in range(partitions)}
    first_at: float | None = None
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])  # no offset: the committed one
        deadline = time.monotonic() + READ_TIMEOUT_S
        while any(len(got[p]) < want(p) for p in got) and time.monotonic() < deadline:
            for msg in consumer.consume(100, timeout=0.5):
                if msg.error() is None and msg.key() != FENCE_KEY and len(got[msg.partition()]) < want(msg.partition()):
                    first_at = first_at or time.monotonic()
                    got[msg.partition()].append((msg.offset(), msg.value()))
        short = {p: len(v) for p, v in got.items() if len(v) < want(p)}
        if short or first_at is None:
            raise KmirrorError(
                f"group {GROUP} read too few records on {topic} within {READ_TIMEOUT_S:g} s: "
                f"{short} (partition: records); is the cluster serving?"
            )
        reads = [TopicPartition(topic, p, v[-1][0] + 1) for p, v in got.items() if v]
        if reads:
            consumer.commit(offsets=reads, asynchronous=False)
    finally:
        consumer.close()
    return got, first_at


def wait_serving(bootstrap: str, topic: str, timeout_s: float = 90.0) -> None:
    """Until every partition of `topic` (and of the group coordinator's topic, where it exists)
    has a leader: a broker restarted after kill -9 registers again only after its old session."""
    from kmirror_engine.clients import new_admin

    admin = new_admin({"bootstrap.servers": bootstrap}, role="drill-admin")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            topics = admin.list_topics(timeout=5).topics
            wanted = [topics[t] for t in (topic, "__consumer_offsets") if t in topics]
            if topic in topics and all(p.leader >= 0 for t in wanted for p in t.partitions.values()):
                return
        time.sleep(0.5)
    raise KmirrorError(f"drill: {bootstrap} did not serve {topic} within {timeout_s:g} s after its restart")


def mirror_fences(kind: str, bootstrap: str) -> None:
    """tansu only: valid MM2 records after the checkpoints and offset syncs the pass wrote."""
    if kind != "tansu":
        return
    from kmirror.flow.replication_policy import checkpoints_topic, offset_syncs_topic
    from kmirror.mm2.formats import Checkpoint, OffsetSync, encode_checkpoint, encode_offset_sync

    checkpoint = encode_checkpoint(Checkpoint("fence", "f", 0, 0, 0))
    sync = encode_offset_sync(OffsetSync("__fence", 0, 0, 0))
    for topic, (key, data) in ((checkpoints_topic(SOURCE_ALIAS), checkpoint), (offset_syncs_topic(SOURCE_ALIAS), sync)):
        produce(bootstrap, topic, [(0, key, data)])
