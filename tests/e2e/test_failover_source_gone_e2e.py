"""Failover with the source cluster really gone: mirror a partition (checkpoints and offset syncs
land on the target), stop the source broker, then `kmirror translate` and `kmirror failover`
without any flag notice it within the probe bound, say so in one line, and move the group from
the target's checkpoints; a consumer of that group resumes on the target at exactly the
translated offset."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kmirror.flow.replication_policy import checkpoints_topic, offset_syncs_topic
from kmirror_cli.cli import main
from kmirror_engine.clients.factory import admin_client, consumer_config, producer_config
from kmirror_engine.copying.range_copy import RangeCopier
from kmirror_engine.copying.ranges import CopyRange
from kmirror_engine.failover.failover_listener import FailoverListener
from kmirror_engine.failover.group_sync import committed_offsets
from kmirror_engine.failover.target_only import SOURCE_PROBE_S
from kmirror_engine.observability.progress import BatchProgress
from tests.brokers import new_broker, real_kafka
from tests.e2e.test_failover_e2e import (
    END,
    FOREIGN,
    GROUP_AT,
    commit,
    fence,
    shifted_flow,
    shifted_names,
    target_records_from,
)
from tests.kafka_helpers import CHECKPOINT_FENCE, SYNC_FENCE, add_fences, produce

TRANSLATED = GROUP_AT + FOREIGN
UNMIRRORED = 5  # records the source holds that the mirror has not copied when the source dies


def mirror_until(spec: Any, topic: str, remote: str, end: int, listener: Any) -> None:
    """One micro-batch copying [0, end) of topic[0]; the listener asks the source for its end
    offset itself (as it does when the sink does not know it)."""
    consumer = Consumer({**consumer_config(spec.source, spec.copy, spec.consumer_group), "enable.partition.eof": True})
    producer = Producer(producer_config(spec.target, spec.copy, spec.id))
    try:
        progress = RangeCopier(consumer, producer, stall_timeout_s=30).copy([CopyRange(topic, 0, 0, end, remote)])
    finally:
        consumer.close()
    commit(spec.source.bootstrap_servers, spec.consumer_group, topic, end)
    listener.on_batch(BatchProgress(0, tuple(progress), 100))
    listener.on_idle(int(time.time() * 1000))


def first_record_of_group(bootstrap: str, group: str, topic: str) -> bytes:
    """The first value a consumer of `group` reads on topic[0], starting at its committed offset."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "latest"}
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])  # no offset: the group's committed one
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                return msg.value() or b""
        raise AssertionError(f"group {group} read nothing on {topic}")
    finally:
        consumer.close()


@dataclass
class Outage:
    source: Any  # the source broker, stopped
    flow: Path
    spec: Any
    src_alias: str
    dst_alias: str
    topic: str
    remote: str
    group: str


def mirror_then_lose_the_source(clusters: Any, unique: str, tmp_path: Path) -> Outage:
    """Source: v0..v9 then UNMIRRORED late records; the group at GROUP_AT; the mirror copies
    v0..v9 (with checkpoints and syncs) onto a target topic holding FOREIGN records; then the
    source broker is stopped (its data kept on disk on Apache Kafka, so it can come back)."""
    src_alias, dst_alias, topic, remote = shifted_names(unique)
    group = f"app-{unique}"
    source = new_broker(f"gone-src-{unique}").start()
    try:
        gone = replace(clusters, source=source.bootstrap_servers)
        flow, spec = shifted_flow(gone, unique, tmp_path, [f"app.*-{unique}"], sync_group_offsets=False)
        late = [{"value": f"late{i}".encode(), "partition": 0} for i in range(UNMIRRORED)]
        produce(source.bootstrap_servers, topic, late)
        add_fences(source.bootstrap_servers, topic, 1)  # tansu: makes the late records visible to ListOffsets
        commit(source.bootstrap_servers, group, topic, GROUP_AT)
        listener = FailoverListener.for_flow(spec)
        mirror_until(spec, topic, remote, END, listener)  # the late records are never mirrored
        listener.close(final=True)
        fence(clusters.target, checkpoints_topic(src_alias), CHECKPOINT_FENCE)
        fence(clusters.target, offset_syncs_topic(src_alias), SYNC_FENCE)
    finally:
        source.stop()
    return Outage(source, flow, spec, src_alias, dst_alias, topic, remote, group)


@pytest.mark.e2e
def test_translate_and_failover_work_with_the_source_stopped(
    clusters: Any, unique: str, tmp_path: Path, capfd: Any
) -> None:
    o = mirror_then_lose_the_source(clusters, unique, tmp_path)
    decided = time.monotonic()  # the drill's clock: the operator decides the source is gone
    flow, spec, src_alias, dst_alias, remote, group = o.flow, o.spec, o.src_alias, o.dst_alias, o.remote, o.group
    # the source broker is stopped now: nothing listens on its port.
    # A separate process, as a user runs it: its stderr is exactly what reaches the terminal
    started = time.monotonic()
    command = [
        sys.executable,
        "-m",
        "kmirror_cli.cli",
        "translate",
        "--flow",
        str(flow),
        "--group",
        group,
        "--format",
        "json",
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    translate_s = time.monotonic() - started
    assert run.returncode == 0, run.stderr
    assert translate_s < SOURCE_PROBE_S + 10, f"translate took {translate_s:.1f} s with the source gone"
    assert len(run.stderr.splitlines()) == 1, f"more than one line on the terminal:\n{run.stderr}"
    line = run.stderr.strip()
    assert line.startswith(f"source {src_alias} unreachable after {SOURCE_PROBE_S:g} s (")
    assert line.endswith(f"); using the checkpoints on {dst_alias}")
    (row,) = json.loads(run.stdout)
    assert {k: row[k] for k in ("topic", "partition", "upstream_offset", "downstream_offset")} == {
        "topic": remote,
        "partition": 0,
        "upstream_offset": GROUP_AT,
        "downstream_offset": TRANSLATED,
    }
    assert row["checkpoint_age_ms"] >= 0
    assert row["records_at_risk"] == UNMIRRORED, "the last known lag: source end - mirrored, from the syncs"

    capfd.readouterr()
    assert main(["failover", "--flow", str(flow), "--group", group, "--dry-run"]) == 0
    assert committed_offsets(admin_client(spec.target), group, dst_alias) == {}
    assert main(["failover", "--flow", str(flow), "--group", group]) == 0
    out = capfd.readouterr()
    assert out.out.endswith(
        f"moved group {group!r} to {dst_alias}: 1 partition(s) written, 0 kept\n  wrote {remote}[0] = {TRANSLATED}\n"
    )
    assert f"checkpoint: {remote}[0]: upstream {GROUP_AT} -> {TRANSLATED}, checkpoint " in out.out
    assert f"records at risk: {UNMIRRORED}\n" in out.out
    assert committed_offsets(admin_client(spec.target), group, dst_alias) == {(remote, 0): (TRANSLATED, "")}
    assert first_record_of_group(clusters.target, group, remote) == b"v4"
    rto_s = time.monotonic() - decided  # decision -> a consumer of the group read its next record
    with capfd.disabled():  # the drill's report, shown with `pytest -s`
        print(f"drill: RPO {row['records_at_risk']} record(s) at risk, RTO {rto_s:.1f} s (translate, failover)")
    assert target_records_from(clusters.target, remote, TRANSLATED) == [f"v{i}".encode() for i in range(4, 10)]

    # --from-checkpoints: no wait at all
    started = time.monotonic()
    assert main(["translate", "--flow", str(flow), "--group", group, "--from-checkpoints", "--format", "json"]) == 0
    assert time.monotonic() - started < SOURCE_PROBE_S
    assert "unreachable" not in capfd.readouterr().err  # (the test's own leftover clients may still log)


@real_kafka  # the source comes back with its data: tansu keeps nothing across a restart
@pytest.mark.e2e
def test_failback_moves_the_group_home_without_skipping(clusters: Any, unique: str, tmp_path: Path) -> None:
    o = mirror_then_lose_the_source(clusters, unique, tmp_path)
    assert main(["failover", "--flow", str(o.flow), "--group", o.group, "--from-checkpoints"]) == 0
    # consumers on the target read v4, v5, v6 during the outage and commit
    consumer = Consumer({"bootstrap.servers": clusters.target, "group.id": o.group, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(o.remote, 0)])
        read: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(read) < 3 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                read.append(msg.value() or b"")
        assert read == [b"v4", b"v5", b"v6"]
        consumer.commit(offsets=[TopicPartition(o.remote, 0, TRANSLATED + 3)], asynchronous=False)
    finally:
        consumer.close()

    o.source.start()  # the source datacenter is back, with its data and the same address
    try:
        assert main(["failback", "--flow", str(o.flow), "--group", o.group, "--dry-run"]) == 0
        assert committed_offsets(admin_client(o.spec.source), o.group, o.src_alias) == {(o.topic, 0): (GROUP_AT, "")}
        assert main(["failback", "--flow", str(o.flow), "--group", o.group]) == 0
        home = GROUP_AT + 3  # v7: the first record the group had not read on the target
        assert committed_offsets(admin_client(o.spec.source), o.group, o.src_alias) == {(o.topic, 0): (home, "")}
        assert first_record_of_group(o.spec.source.bootstrap_servers, o.group, o.topic) == b"v7"
    finally:
        o.source.stop()
