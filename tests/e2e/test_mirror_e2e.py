"""The whole app (kmirror-source -> kmirror-sink) against two real brokers and a local Spark:
what MirrorMaker 2 users rely on. Runs `run_flow(..., once=True)` in-process with the shared
session; topics carry a unique prefix so flows never see other tests' topics."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from kmirror.flow.replication_policy import checkpoints_topic, offset_syncs_topic
from kmirror.flow.spec import FlowSpec, parse_flow_spec
from kmirror.mm2.formats import Checkpoint, decode_heartbeat
from kmirror_engine.failover.checkpoints import read_checkpoints
from kmirror_engine.failover.offset_sync_topic import read_partition0
from kmirror_engine.planning.target_topics import configs_to_copy
from spark_app.main import run_flow
from tests.e2e.streaming_run import StreamingRun
from tests.kafka_helpers import (
    BASE_TIMESTAMP_MS,
    CHECKPOINT_FENCE,
    FENCE_KEY,
    HEARTBEAT_FENCE,
    SYNC_FENCE,
    add_fences,
    consume_all,
    create_topic,
    produce,
)

pytestmark = [pytest.mark.e2e, pytest.mark.spark40]
END_KEY = b"__e2e_end__"


def flow(
    src_alias: str, src: str, dst_alias: str, dst: str, topics: list[str], checkpoint: Path, **options: Any
) -> FlowSpec:
    return parse_flow_spec(
        {
            "id": f"{src_alias}->{dst_alias}",
            "topics": topics,
            "topics_exclude": [".*[-.]internal", ".*\\.skip"],
            "source": {"alias": src_alias, "bootstrap_servers": src, "config": {}},
            "target": {"alias": dst_alias, "bootstrap_servers": dst, "config": {}},
            "replication_policy": {"type": "default"},
            "checkpoint_location": str(checkpoint),
            "emit_checkpoints": False,
            "emit_heartbeats": False,
            **options,
        }
    )


def mirrored(bootstrap: str, topic: str, partitions: int) -> dict[int, list[Any]]:
    """Every record of `topic` except fences: appends an end marker per partition, reads up to it."""
    produce(bootstrap, topic, [{"key": END_KEY, "value": b"", "partition": p} for p in range(partitions)])
    add_fences(bootstrap, topic, partitions)  # makes the end marker visible on tansu
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "e2e-reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list[Any]] = {p: [] for p in range(partitions)}
    ended: set[int] = set()
    try:
        while len(ended) < partitions:
            msgs = consumer.consume(1000, timeout=10)
            assert msgs, f"{topic}: end markers seen on {sorted(ended)} only"
            for m in msgs:
                partition = int(m.partition() or 0)
                if m.key() == END_KEY:
                    ended.add(partition)
                elif m.key() != FENCE_KEY and partition not in ended:
                    out[partition].append(m)
    finally:
        consumer.close()
    return out


def records(prefix: str, partition: int, count: int, first: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "key": f"k{partition}-{i}".encode(),
            "value": f"{prefix}-{partition}-{i}".encode(),
            "partition": partition,
            "headers": [("n", str(i).encode()), ("dup", b"a"), ("dup", b"b")],
            "timestamp": BASE_TIMESTAMP_MS + i,
        }
        for i in range(first, first + count)
    ]


def topic_configs(bootstrap: str, topic: str) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    return dict(future.result(timeout=10))


def topics_of(bootstrap: str) -> dict[str, int]:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return {name: len(t.partitions) for name, t in metadata.topics.items()}


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return [
            tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        ]
    finally:
        consumer.close()


def test_mirror_preserves_records_resumes_and_picks_up_new_topics(
    spark: Any, clusters: Any, unique: str, tmp_path: Path, copy_loop: str
) -> None:
    orders, new = f"e2e-{unique}.orders", f"e2e-{unique}.new"
    orders_config = {"retention.ms": "86400000", "max.message.bytes": "2000000", "min.insync.replicas": "1"}
    for name, partitions in ((orders, 3), (f"e2e-{unique}.audit-internal", 1), (f"e2e-{unique}.skip", 1)):
        create_topic(clusters.source, name, partitions, orders_config if name == orders else None)
        data = [r for p in range(partitions) for r in records("a", p, 400)]
        produce(clusters.source, name, data)
        add_fences(clusters.source, name, partitions)
    spec = flow(
        "west",
        clusters.source,
        "east",
        clusters.target,
        [f"e2e-{unique}\\..*"],
        tmp_path / "ckpt",
        max_records_per_trigger=1000,
        max_records_per_task=200,
        copy_loop=copy_loop,
    )

    run_flow(spec, spark=spark, once=True)

    target_topics = topics_of(clusters.target)
    assert target_topics.get(f"west.{orders}") == 3
    # configs: what the source reports as explicitly set, minus MM2's excludes (min.insync.replicas).
    # tansu flags every config as a default, so there this is {} (the fakes in test_target_topics
    # cover the copy); on Kafka it is retention.ms and max.message.bytes.
    wanted = configs_to_copy(topic_configs(clusters.source, orders))
    assert "min.insync.replicas" not in wanted
    got = topic_configs(clusters.target, f"west.{orders}")
    assert {k: got[k].value for k in wanted if k in got} == wanted
    assert not {t for t in target_topics if t.startswith(f"west.e2e-{unique}.") and t != f"west.{orders}"}
    # the source group sees the mirror's progress: every data record is committed
    assert all(offset >= 400 for offset in committed(clusters.source, spec.consumer_group, orders, 3))

    # restart from the checkpoint: only the new records, and a topic created meanwhile
    produce(clusters.source, orders, [r for p in range(3) for r in records("b", p, 100, first=400)])
    add_fences(clusters.source, orders, 3)
    create_topic(clusters.source, new, 2)
    produce(clusters.source, new, [r for p in range(2) for r in records("n", p, 50)])
    add_fences(clusters.source, new, 2)

    run_flow(spec, spark=spark, once=True)

    got = mirrored(clusters.target, f"west.{orders}", 3)
    for p in range(3):
        expected = records("a", p, 400) + records("b", p, 100, first=400)
        assert [(m.key(), m.value()) for m in got[p]] == [(r["key"], r["value"]) for r in expected]  # order, no re-copy
        assert [m.timestamp()[1] for m in got[p]] == [r["timestamp"] for r in expected]
        assert [m.headers() for m in got[p]] == [r["headers"] for r in expected]
    got_new = mirrored(clusters.target, f"west.{new}", 2)
    assert {p: len(v) for p, v in got_new.items()} == {0: 50, 1: 50}


def test_active_active_pair_loops_neither_data_nor_heartbeats(
    spark: Any, clusters: Any, unique: str, tmp_path: Path
) -> None:
    w, e = f"w{unique}", f"e{unique}"  # aliases of this test only: its heartbeats topics are its own
    west_topic, east_topic = f"aa-{unique}.w", f"aa-{unique}.e"
    create_topic(clusters.source, west_topic, 1)
    create_topic(clusters.target, east_topic, 1)
    produce(clusters.source, west_topic, records("w", 0, 20))
    add_fences(clusters.source, west_topic, 1)
    produce(clusters.target, east_topic, records("e", 0, 20))
    add_fences(clusters.target, east_topic, 1)
    pattern = [f".*aa-{unique}\\..*"]  # selects the remote topics too: only the policy prevents the loop
    west_to_east = flow(w, clusters.source, e, clusters.target, pattern, tmp_path / "we", emit_heartbeats=True)
    east_to_west = flow(e, clusters.target, w, clusters.source, pattern, tmp_path / "ew", emit_heartbeats=True)

    run_flow(west_to_east, spark=spark, once=True)  # beats into east's heartbeats
    run_flow(east_to_west, spark=spark, once=True)  # beats into west's; east's heartbeats -> west as e.heartbeats
    run_flow(west_to_east, spark=spark, once=True)  # west's heartbeats -> east; e.heartbeats is a cycle

    west, east = topics_of(clusters.source), topics_of(clusters.target)
    assert f"{w}.{west_topic}" in east and f"{e}.{east_topic}" in west
    assert f"{e}.{w}.{west_topic}" not in west and f"{w}.{e}.{east_topic}" not in east  # nothing came back
    assert len(mirrored(clusters.source, f"{e}.{east_topic}", 1)[0]) == 20  # and nothing twice
    assert f"{e}.heartbeats" in west and f"{w}.heartbeats" in east  # each cluster sees its upstream hop
    assert f"{w}.{e}.heartbeats" not in east and f"{e}.{w}.heartbeats" not in west  # heartbeats never loop


def batches_done(spark: Any, spec: FlowSpec) -> int:
    """Micro-batches the flow's query finished (sink commit included)."""
    (query,) = [q for q in spark.streams.active if q.name == f"kmirror {spec.id}"]
    return len([p for p in query.recentProgress if p["numInputRows"] > 0])


def wait_for_batch_commit(spark: Any, spec: FlowSpec, failures: list[Exception], timeout_s: float = 60.0) -> int:
    deadline = time.monotonic() + timeout_s
    while not batches_done(spark, spec):
        assert not failures, f"the mirror failed: {failures[0]!r}"
        assert time.monotonic() < deadline, f"no batch of {spec.id} finished within {timeout_s:.0f} s"
        time.sleep(0.2)
    return batches_done(spark, spec)


def wait_for_checkpoint(spec: FlowSpec, group: str, failures: list[Exception], timeout_s: float = 60.0) -> Any:
    """The newest checkpoint of `group` once there is one (a valid fence first: tansu)."""
    topic, deadline = checkpoints_topic(spec.source.alias), time.monotonic() + timeout_s
    fence_key, fence_value = CHECKPOINT_FENCE
    while True:
        produce(spec.target.bootstrap_servers, topic, [{"key": fence_key, "value": fence_value, "partition": 0}])
        found = [c for c in read_checkpoints(spec.target, topic) if c.group == group]
        if found:
            return found[-1]
        assert not failures, f"the mirror failed while waiting for a checkpoint: {failures[0]!r}"
        assert time.monotonic() < deadline, f"no checkpoint of {group} in {topic} after {timeout_s:.0f} s"
        time.sleep(0.5)


def wait_for_topic(bootstrap: str, topic: str, failures: list[Exception], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while topic not in topics_of(bootstrap):
        assert not failures, f"the mirror failed while waiting for {topic}: {failures[0]!r}"
        assert time.monotonic() < deadline, f"{topic} never appeared on {bootstrap}"
        time.sleep(0.5)


def test_streaming_mode_picks_up_new_topics_beats_and_checkpoints_while_idle_and_stops_on_request(
    spark: Any, clusters: Any, unique: str, tmp_path: Path
) -> None:
    first, later = f"st-{unique}.a", f"st-{unique}.b"
    src_alias, dst_alias = f"sw{unique}", f"se{unique}"
    create_topic(clusters.source, first, 2)
    produce(clusters.source, first, [r for p in range(2) for r in records("a", p, 50)])
    add_fences(clusters.source, first, 2)
    spec = flow(
        src_alias,
        clusters.source,
        dst_alias,
        clusters.target,
        [f"st-{unique}\\..*"],
        tmp_path / "ckpt",
        emit_heartbeats=True,
        heartbeat_interval_ms=300,
        topic_refresh_interval_ms=0,
        trigger_interval_ms=200,
        emit_checkpoints=True,
        checkpoint_interval_ms=500,
        groups=[f"idle-{unique}"],
    )
    run = StreamingRun(spec, spark)
    runner, stop, failures = run.thread, run.stop, run.failures
    runner.start()
    try:
        wait_for_topic(clusters.target, f"{src_alias}.{first}", failures)
        got = consume_all(clusters.target, f"{src_alias}.{first}", 2, timeout_s=120, expect=100)  # waits for the copy
        assert {p: len(v) for p, v in got.items()} == {0: 50, 1: 50}
        beats_while_idle = time.monotonic()
        done = wait_for_batch_commit(spark, spec, failures)  # its commit (and the listener's round) is over
        # an application consumes while the source is idle (no batches): the driver's own
        # checkpoint rounds translate its new position
        sync_key, sync_value = SYNC_FENCE  # tansu: see kafka_helpers
        produce(
            clusters.target, offset_syncs_topic(src_alias), [{"key": sync_key, "value": sync_value, "partition": 0}]
        )
        consumer = Consumer({"bootstrap.servers": clusters.source, "group.id": f"idle-{unique}"})
        consumer.commit(offsets=[TopicPartition(first, 0, 20)], asynchronous=False)
        consumer.close()
        expected = Checkpoint(f"idle-{unique}", f"{src_alias}.{first}", 0, 20, 20, "")
        assert wait_for_checkpoint(spec, f"idle-{unique}", failures) == expected
        assert batches_done(spark, spec) == done  # no batch ran meanwhile: the driver's round did it
        create_topic(clusters.source, later, 1)  # created while the query runs
        produce(clusters.source, later, records("b", 0, 30))
        add_fences(clusters.source, later, 1)
        wait_for_topic(clusters.target, f"{src_alias}.{later}", failures)
        assert len(consume_all(clusters.target, f"{src_alias}.{later}", 1, timeout_s=120, expect=30)[0]) == 30
        time.sleep(max(0.0, 1.5 - (time.monotonic() - beats_while_idle)))
    finally:
        stop.set()
        runner.join(timeout=120)
    assert not runner.is_alive() and failures == []
    fence_key, fence_value = HEARTBEAT_FENCE  # a valid record: others read it
    produce(clusters.target, "heartbeats", [{"key": fence_key, "value": fence_value, "partition": 0}])
    beats = [decode_heartbeat(m.key(), m.value()) for m in read_partition0(spec.target, "heartbeats")]
    ours = [b for b in beats if (b.source_cluster_alias, b.target_cluster_alias) == (src_alias, dst_alias)]
    assert len(ours) >= 4  # one per 300 ms on the driver's clock, batches or not
