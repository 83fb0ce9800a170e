"""Consumer failover against real brokers: offsets shift because the target topic already
held unrelated records; checkpoints decode in MM2's format; translate/failover/group sync
give exactly the shifted offsets; a consumer resuming on the target skips nothing; lag is 0
after a mirror pass and grows with new source records; heartbeats and metrics are emitted.

The mirror pass is the real copy loop (kmirror_engine.copying.range_copy.RangeCopier) feeding the real
FailoverListener, plus the source commit the driver does after a batch.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from kmirror.flow.replication_policy import checkpoints_topic, offset_syncs_topic
from kmirror.flow.spec import FlowSpec, parse_flow_spec
from kmirror.mm2.formats import Checkpoint, decode_heartbeat
from kmirror_cli.cli import main
from kmirror_cli.local_brokers import free_port
from kmirror_engine.clients.factory import admin_client, consumer_config, producer_config
from kmirror_engine.copying.range_copy import RangeCopier
from kmirror_engine.copying.ranges import CopyRange
from kmirror_engine.failover.checkpoints import read_checkpoints
from kmirror_engine.failover.failover_listener import FailoverListener
from kmirror_engine.failover.group_sync import committed_offsets
from kmirror_engine.failover.offset_sync_topic import OffsetSyncTopic, read_partition0
from kmirror_engine.failover.offset_syncs import SyncStore
from kmirror_engine.observability.progress import BatchProgress
from tests.brokers import IS_TANSU
from tests.kafka_helpers import (
    CHECKPOINT_FENCE,
    FENCE_KEY,
    HEARTBEAT_FENCE,
    SYNC_FENCE,
    TANSU_FENCES,
    add_fences,
    create_topic,
    flow_raw,
    produce,
)

pytestmark = pytest.mark.spark40  # also in leg 2 (pyspark 4.0.2 / Python 3.10)

END = 10 + TANSU_FENCES  # where a 10-record partition ends (after tansu's fence)

FOREIGN = 3  # unrelated records already on the target topic
GROUP_AT = 4  # where the application's group stands on the source


def commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def fence(bootstrap: str, topic: str, key_value: tuple[bytes, bytes]) -> None:
    """On tansu only, a valid MM2 record after ours: tansu's high watermark hides the newest batch."""
    if not IS_TANSU:
        return
    produce(bootstrap, topic, [{"key": key_value[0], "value": key_value[1], "partition": 0}])


def shifted_names(unique: str) -> tuple[str, str, str, str]:
    """shifted_flow's source and target aliases, its topic and that topic's name on the target."""
    src_alias, topic = f"s{unique}", f"orders-{unique}"
    return src_alias, f"t{unique}", topic, f"{src_alias}.{topic}"


def shifted_flow(
    clusters: Any, unique: str, tmp_path: Path, groups: list[str], **options: Any
) -> tuple[Path, FlowSpec]:
    """The flow s<unique> -> t<unique> of orders-<unique> (checkpoints only when a pass asks, metrics
    on any free port; `options` add to it), written to tmp_path/flow.json. Its source topic holds
    v0..v9 (and tansu's fence), its remote topic FOREIGN unrelated records first: offsets shift."""
    src_alias, dst_alias, topic, remote = shifted_names(unique)
    options = {"groups": groups, "metrics_port": 0, "checkpoint_interval_ms": 3_600_000, **options}
    raw = flow_raw(clusters, src_alias, dst_alias, [topic], tmp_path / "ckpt", **options)
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps(raw))
    create_topic(clusters.source, topic)
    create_topic(clusters.target, remote)
    produce(clusters.target, remote, [{"value": f"unrelated-{i}".encode(), "partition": 0} for i in range(FOREIGN)])
    produce(clusters.source, topic, [{"value": f"v{i}".encode(), "key": b"k", "partition": 0} for i in range(10)])
    add_fences(clusters.source, topic, 1)  # offset 10
    return flow, parse_flow_spec(raw)


def mirror_pass(spec: FlowSpec, topic: str, remote: str, end: int, batch_id: int, listener: Any) -> None:
    """Copy [next committed, end) like one micro-batch, then commit and notify the listener."""
    start = committed_offsets(admin_client(spec.source), spec.consumer_group, spec.source.alias).get((topic, 0), (0,))[
        0
    ]
    consumer, producer = (
        Consumer({**consumer_config(spec.source, spec.copy, spec.consumer_group), "enable.partition.eof": True}),
        Producer(producer_config(spec.target, spec.copy, spec.id)),
    )
    try:
        progress = RangeCopier(consumer, producer, stall_timeout_s=30).copy([CopyRange(topic, 0, start, end, remote)])
    finally:
        consumer.close()
    commit(spec.source.bootstrap_servers, spec.consumer_group, topic, end)
    listener.on_batch(BatchProgress(batch_id, tuple(progress), 100, {(topic, 0): end}))
    listener.on_idle(int(time.time() * 1000))  # what the sink does after on_batch


def target_records_from(bootstrap: str, topic: str, offset: int) -> list[bytes]:
    """Values from `offset` to the end (the fence on tansu, the end offset on Apache Kafka)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "failover-e2e-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, 0, offset)])
    values: list[bytes] = []
    try:
        while True:
            msg = consumer.poll(10)
            assert msg is not None, f"no end of {topic} seen"
            if msg.error() is not None and msg.error().code() == KafkaError._PARTITION_EOF and not IS_TANSU:
                return values
            assert not msg.error(), f"no fence on {topic}: {msg.error()}"
            if msg.key() == FENCE_KEY:
                return values
            values.append(msg.value() or b"")
    finally:
        consumer.close()


@pytest.mark.e2e
def test_failover_resumes_at_exactly_the_shifted_offsets(
    clusters: Any, unique: str, tmp_path: Path, capsys: Any
) -> None:
    src_alias, dst_alias, topic, remote = shifted_names(unique)
    group = f"app-{unique}"
    flow, spec = shifted_flow(clusters, unique, tmp_path, [f"app.*-{unique}"], sync_group_offsets=True)
    commit(clusters.source, group, topic, GROUP_AT)
    commit(clusters.source, f"app2-{unique}", topic, 6)
    commit(clusters.source, f"other-{unique}", topic, 5)  # not selected by groups

    listener = FailoverListener.for_flow(spec)
    mirror_pass(spec, topic, remote, END, 0, listener)  # v0..v9 (and tansu's fence)
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{listener.metrics.port}/metrics", timeout=10).read().decode()
    labels = f'flow="{spec.id}",partition="0",topic="{remote}"'
    assert f"kmirror_record_count_total{{{labels}}} {END}.0" in metrics
    assert f"kmirror_offset_lag{{{labels}}} 0.0" in metrics
    assert f'kmirror_checkpoint_latency_ms{{flow="{spec.id}",group="{group}"}}' in metrics
    listener.close(final=True)

    # checkpoints: MM2 format, shifted by FOREIGN, only selected groups
    fence(clusters.target, checkpoints_topic(src_alias), CHECKPOINT_FENCE)
    found = {c.group: c for c in read_checkpoints(spec.target, checkpoints_topic(src_alias)) if c.topic == remote}
    assert found == {
        group: Checkpoint(group, remote, 0, GROUP_AT, GROUP_AT + FOREIGN, ""),
        f"app2-{unique}": Checkpoint(f"app2-{unique}", remote, 0, 6, 6 + FOREIGN, ""),
    }
    # group sync wrote the translated offset into the idle target group
    assert committed_offsets(admin_client(spec.target), group, dst_alias) == {(remote, 0): (GROUP_AT + FOREIGN, "")}
    # a consumer resuming there sees exactly the records after the source position (up to the mirrored fence)
    assert target_records_from(clusters.target, remote, GROUP_AT + FOREIGN) == [f"v{i}".encode() for i in range(4, 10)]

    # translation from the persisted syncs (a fresh process would do the same)
    fence(clusters.target, offset_syncs_topic(src_alias), SYNC_FENCE)
    capsys.readouterr()
    assert main(["translate", "--flow", str(flow), "--group", group, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"topic": remote, "partition": 0, "upstream_offset": GROUP_AT, "downstream_offset": GROUP_AT + FOREIGN}
    ]
    assert main(["failover", "--flow", str(flow), "--group", f"other-{unique}", "--dry-run"]) == 0
    assert capsys.readouterr().out == (
        f"dry run: would move group 'other-{unique}' to {dst_alias}:\n  {remote}[0] -> {5 + FOREIGN}\n"
    )
    assert committed_offsets(admin_client(spec.target), f"other-{unique}", dst_alias) == {}
    assert main(["failover", "--flow", str(flow), "--group", f"other-{unique}"]) == 0
    assert capsys.readouterr().out == (
        f"moved group 'other-{unique}' to {dst_alias}: 1 partition(s) written, 0 kept\n"
        f"  wrote {remote}[0] = {5 + FOREIGN}\n"
    )
    assert committed_offsets(admin_client(spec.target), f"other-{unique}", dst_alias) == {(remote, 0): (8, "")}

    # heartbeats (src, dst) reached the target's heartbeats topic
    fence(clusters.target, "heartbeats", HEARTBEAT_FENCE)
    beats = [decode_heartbeat(m.key(), m.value()) for m in read_partition0(spec.target, "heartbeats")]
    assert any(b.source_cluster_alias == src_alias and b.target_cluster_alias == dst_alias for b in beats)

    # lag: 0 after the pass, grows with new source records
    assert main(["lag", "--flow", str(flow), "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["group"], row["topic"], row["partition"], row["offset"], row["lag"]) == (
        spec.consumer_group,
        topic,
        0,
        END,
        0,
    )
    assert row["target_topic"] == remote and row["delay_ms"] >= 0
    produce(clusters.source, topic, [{"value": f"late{i}".encode(), "partition": 0} for i in range(5)])
    add_fences(clusters.source, topic, 1)
    assert main(["lag", "--flow", str(flow), "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    low_high = Consumer({"bootstrap.servers": clusters.source, "group.id": "x"})
    log_size = low_high.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    low_high.close()
    assert log_size >= 15 + TANSU_FENCES and (row["log_size"], row["lag"]) == (log_size, log_size - END)


def offset_of(bootstrap: str, topic: str, value: bytes) -> int:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "failover-e2e-finder", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        while True:
            msg = consumer.poll(10)
            assert msg is not None and not msg.error(), f"{value!r} not found in {topic}"
            if msg.value() == value:
                return int(msg.offset() or 0)
    finally:
        consumer.close()


@pytest.mark.e2e
def test_translation_stays_exact_across_a_restart_and_a_new_shift(clusters: Any, unique: str, tmp_path: Path) -> None:
    src_alias, dst_alias = f"s{unique}", f"t{unique}"
    topic, group, remote = f"events-{unique}", f"app-{unique}", f"s{unique}.events-{unique}"
    spec = parse_flow_spec(
        flow_raw(clusters, src_alias, dst_alias, [topic], tmp_path, emit_heartbeats=False, groups=[group])
    )
    create_topic(clusters.source, topic)
    create_topic(clusters.target, remote)
    produce(clusters.target, remote, [{"value": b"unrelated", "partition": 0}] * 3)
    produce(clusters.source, topic, [{"value": f"v{i}".encode(), "partition": 0} for i in range(10)])
    first = FailoverListener.for_flow(spec)
    mirror_pass(spec, topic, remote, 10, 0, first)
    first.close(final=False)  # the process goes away
    syncs = offset_syncs_topic(src_alias)
    fence(clusters.target, syncs, SYNC_FENCE)

    produce(clusters.target, remote, [{"value": b"unrelated", "partition": 0}] * 2)  # the shift grows to 5
    produce(clusters.source, topic, [{"value": f"v{i}".encode(), "partition": 0} for i in range(10, 20)])
    commit(clusters.source, group, topic, 15)
    second = FailoverListener.for_flow(spec)  # a new process: history comes from the syncs topic
    mirror_pass(spec, topic, remote, 20, 1, second)
    second.close(final=True)

    expected = offset_of(clusters.target, remote, b"v15")
    assert expected == 15 + 5
    fence(clusters.target, checkpoints_topic(src_alias), CHECKPOINT_FENCE)
    (checkpoint,) = [c for c in read_checkpoints(spec.target, checkpoints_topic(src_alias)) if c.group == group]
    assert checkpoint == Checkpoint(group, remote, 0, 15, expected, "")
    fence(clusters.target, syncs, SYNC_FENCE)
    store = SyncStore()
    OffsetSyncTopic(spec.target, syncs).load(store)
    # every source offset translates exactly to where its record landed, across both runs
    assert [store.translate(topic, 0, u) for u in (0, 9, 10, 19, 20)] == [3, 12, 15, 24, 25]


@pytest.mark.e2e
def test_spark_once_run_leaves_checkpoints_group_offsets_and_lag_behind(
    spark: Any, clusters: Any, unique: str, tmp_path: Path, capsys: Any
) -> None:
    """The real app (run_flow --once in the shared Spark): its commit-side listeners persist
    syncs and checkpoints, and the CLIs read them back with issue 4's contracts."""
    from spark_app.main import run_flow

    src_alias, dst_alias = f"s{unique}", f"t{unique}"
    topic, group = f"pay-{unique}", f"app-{unique}"
    remote = f"{src_alias}.{topic}"
    options = {"groups": [group], "sync_group_offsets": True, "metrics_port": free_port()}
    raw = flow_raw(clusters, src_alias, dst_alias, [topic], tmp_path / "ckpt", **options)
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps(raw))
    spec = parse_flow_spec(raw)
    create_topic(clusters.source, topic, 2)
    create_topic(clusters.target, remote, 2)
    produce(clusters.target, remote, [{"value": b"unrelated", "partition": 0}] * FOREIGN)  # shifts p0 only
    produce(
        clusters.source, topic, [{"value": f"p{p}-{i}".encode(), "partition": p} for p in (0, 1) for i in range(10)]
    )
    add_fences(clusters.source, topic, 2)  # offset 10 of each partition
    consumer = Consumer({"bootstrap.servers": clusters.source, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 7)], asynchronous=False)
    consumer.close()

    run_flow(spec, spark=spark, once=True)

    # the Prometheus endpoint lives in the sink's commit worker, which the session keeps for the next batch
    url = f"http://127.0.0.1:{raw['metrics_port']}/metrics"
    metrics = urllib.request.urlopen(url, timeout=10).read().decode()
    for p in (0, 1):
        labels = f'flow="{spec.id}",partition="{p}",topic="{remote}"'
        assert f"kmirror_record_count_total{{{labels}}} {END}.0" in metrics  # 10 records (and tansu's fence)
        assert f"kmirror_offset_lag{{{labels}}} 0.0" in metrics
    # tansu hides the newest batch of a partition from offset queries: fence the internal topics there
    fence(clusters.target, offset_syncs_topic(src_alias), SYNC_FENCE)
    fence(clusters.target, checkpoints_topic(src_alias), CHECKPOINT_FENCE)
    fence(clusters.target, "heartbeats", HEARTBEAT_FENCE)
    expected = [
        {"topic": remote, "partition": 0, "upstream_offset": 4, "downstream_offset": 4 + FOREIGN},
        {"topic": remote, "partition": 1, "upstream_offset": 7, "downstream_offset": 7},
    ]
    capsys.readouterr()
    assert main(["translate", "--flow", str(flow), "--group", group, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == expected
    latest = {
        (c.topic, c.partition): c
        for c in read_checkpoints(spec.target, checkpoints_topic(src_alias))
        if c.group == group
    }
    assert latest == {
        (remote, 0): Checkpoint(group, remote, 0, 4, 4 + FOREIGN, ""),
        (remote, 1): Checkpoint(group, remote, 1, 7, 7, ""),
    }
    assert committed_offsets(admin_client(spec.target), group, dst_alias) == {
        (remote, 0): (4 + FOREIGN, ""),
        (remote, 1): (7, ""),
    }
    assert target_records_from(clusters.target, remote, 4 + FOREIGN) == [f"p0-{i}".encode() for i in range(4, 10)]
    beats = [decode_heartbeat(m.key(), m.value()) for m in read_partition0(spec.target, "heartbeats")]
    assert any((b.source_cluster_alias, b.target_cluster_alias) == (src_alias, dst_alias) for b in beats)

    # (rows of other tests' heartbeats topics too: MM2 mirrors every `heartbeats` topic)
    assert main(["lag", "--flow", str(flow), "--format", "json"]) == 0
    rows = [r for r in json.loads(capsys.readouterr().out) if r["topic"] == topic]
    assert [(r["topic"], r["partition"], r["offset"], r["lag"], r["target_topic"]) for r in rows] == [
        (topic, 0, END, 0, remote),
        (topic, 1, END, 0, remote),
    ]
    produce(clusters.source, topic, [{"value": b"late", "partition": 1}] * 5)
    add_fences(clusters.source, topic, 2)
    assert main(["lag", "--flow", str(flow), "--format", "json"]) == 0
    rows = [r for r in json.loads(capsys.readouterr().out) if r["topic"] == topic]
    reader = Consumer({"bootstrap.servers": clusters.source, "group.id": "lag-check"})
    ends = [reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in (0, 1)]
    reader.close()
    assert [(r["log_size"], r["lag"]) for r in rows] == [(end, end - END) for end in ends]
    assert rows[1]["lag"] >= 5  # the 5 late records (plus the fence, when the broker shows it)

    # the application moves on while the mirror is stopped; the next --once run's final
    # checkpoint round (driver side, from the persisted syncs) carries its new position
    consumer = Consumer({"bootstrap.servers": clusters.source, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 8)], asynchronous=False)
    consumer.close()
    fence(clusters.target, offset_syncs_topic(src_alias), SYNC_FENCE)
    run_flow(spec, spark=spark, once=True)
    fence(clusters.target, checkpoints_topic(src_alias), CHECKPOINT_FENCE)
    latest = {
        (c.topic, c.partition): c
        for c in read_checkpoints(spec.target, checkpoints_topic(src_alias))
        if c.group == group
    }
    assert latest[(remote, 0)] == Checkpoint(group, remote, 0, 8, 8 + FOREIGN, "")
    assert committed_offsets(admin_client(spec.target), group, dst_alias)[(remote, 0)] == (8 + FOREIGN, "")


@pytest.mark.e2e
def test_failover_refuses_an_unmirrored_partition_unless_allow_partial(
    clusters: Any, unique: str, tmp_path: Path, capsys: Any
) -> None:
    """Partition 1 of the group's topic was never mirrored, so its offset cannot be translated.
    Before `--allow-partial` existed, failover moved partition 0 only and printed "skip" for
    partition 1, whose consumers then started at auto.offset.reset (latest: skipping)."""
    src_alias, dst_alias = f"s{unique}", f"t{unique}"
    topic, group, remote = f"part-{unique}", f"app-{unique}", f"s{unique}.part-{unique}"
    raw = flow_raw(clusters, src_alias, dst_alias, [topic], tmp_path, emit_heartbeats=False, groups=[group])
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps(raw))
    spec = parse_flow_spec(raw)
    create_topic(clusters.source, topic, 2)
    create_topic(clusters.target, remote, 2)
    produce(clusters.source, topic, [{"value": f"p{p}-{i}".encode(), "partition": p} for p in (0, 1) for i in range(6)])
    consumer = Consumer({"bootstrap.servers": clusters.source, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 2)], asynchronous=False)
    consumer.close()
    listener = FailoverListener.for_flow(spec)
    mirror_pass(spec, topic, remote, 6, 0, listener)  # partition 0 only
    listener.close(final=False)
    fence(clusters.target, offset_syncs_topic(src_alias), SYNC_FENCE)
    capsys.readouterr()

    assert main(["failover", "--flow", str(flow), "--group", group]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        f"kmirror failover: group '{group}': 1 of 2 partition(s) have no translated offset on {dst_alias} "
        f"({topic}[1]@2: the group is before every mirrored record of them)"
    )
    assert committed_offsets(admin_client(spec.target), group, dst_alias) == {}

    assert main(["failover", "--flow", str(flow), "--group", group, "--allow-partial"]) == 0
    assert capsys.readouterr().out == (
        f"partial: {topic}[1]@2 has no translated offset; {remote}[1] starts at the target's earliest offset 0 "
        "(re-read)\n"
        f"moved group '{group}' to {dst_alias}: 2 partition(s) written, 0 kept\n"
        f"  wrote {remote}[0] = 4\n  wrote {remote}[1] = 0\n"
    )
    assert committed_offsets(admin_client(spec.target), group, dst_alias) == {
        (remote, 0): (4, ""),
        (remote, 1): (0, ""),
    }
