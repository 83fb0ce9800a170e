"""Interop with a real MirrorMaker 2 (issue 23, parts 1a and 1b): MM2 4.x in dedicated mode mirrors
A->B on two Apache Kafka brokers; a group committed on A is translated by MM2's own Java client
(`RemoteClusterUtils.translateOffsets`, compiled here) and by `kmirror translate`; they must agree,
over MM2's checkpoints and offset syncs (1b) and over the checkpoints a kafka-mirror flow run wrote
beside MM2's into the same `A.checkpoints.internal` (1a). One MM2 per module (its start-up and
first checkpoint cost ~30 s)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kmirror.flow.replication_policy import offset_syncs_topic
from tests.mm2.mm2_process import ONE_REPLICA, start_mm2, wait_for_first_syncs, wait_for_stores
from tests.mm2.test_mm2_jars import ROOT, fetch_mm2

pytestmark = [pytest.mark.e2e, pytest.mark.real_kafka, pytest.mark.slow]
COMMITTED = {0: 300, 1: 420}


def _java_translate(jars: Path, classes: Path, bootstrap: str, group: str = "g1") -> dict[tuple[str, int], int]:
    out = subprocess.run(
        ["java", "-cp", f"{jars}/*:{classes}", "TranslateOffsets", bootstrap, "A", group],
        capture_output=True,
        text=True,
        timeout=60,
    )
    result = {}
    for line in out.stdout.splitlines():
        topic, partition, offset = line.split()
        result[(topic, int(partition))] = int(offset)
    return result


@pytest.fixture(scope="module")
def mm2_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from kmirror_cli.local_kafka import KafkaBroker

    tmp = tmp_path_factory.mktemp("mm2")
    a, b = KafkaBroker("mm2-A").start(), KafkaBroker("mm2-B").start()
    mm = None
    try:
        jars = fetch_mm2(a.version)
        subprocess.run(
            ["javac", "-d", str(tmp), "-cp", f"{jars}/*", str(ROOT / "tests/mm2/TranslateOffsets.java")],
            check=True,
            timeout=120,
        )
        admin = AdminClient({"bootstrap.servers": a.bootstrap_servers})
        admin.create_topics([NewTopic("orders", 2, 1)])["orders"].result()
        consumer = Consumer({"bootstrap.servers": a.bootstrap_servers, "group.id": "g1", "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition("orders", p, o) for p, o in COMMITTED.items()], asynchronous=False)
        consumer.close()
        props = tmp / "mm2.properties"
        props.write_text(
            f"clusters = A, B\nA.bootstrap.servers = {a.bootstrap_servers}\n"
            f"B.bootstrap.servers = {b.bootstrap_servers}\n"
            "A->B.enabled = true\nA->B.topics = orders\n"
            + ONE_REPLICA
            + "emit.checkpoints.interval.seconds = 1\nrefresh.groups.interval.seconds = 1\n"
            "refresh.topics.interval.seconds = 1\nsync.group.offsets.enabled = false\n"
        )
        mm, log = start_mm2(jars, props, tmp)
        wait_for_stores(log)  # the records only then (tests/mm2/mm2_process.py, STORES_STARTED)
        producer = Producer({"bootstrap.servers": a.bootstrap_servers})
        for i in range(1000):
            producer.produce("orders", key=str(i), value=b"v%d" % i, partition=i % 2)
            if i == 1:  # each partition's first record synced before the rest (the reason: there)
                producer.flush()
                wait_for_first_syncs(a.bootstrap_servers, offset_syncs_topic("B"), "orders", 2, log)
        producer.flush()
        deadline, java = time.monotonic() + 120, {}
        while len(java) < len(COMMITTED) and time.monotonic() < deadline:
            time.sleep(2)
            java = _java_translate(jars, tmp, b.bootstrap_servers)
        assert len(java) == len(COMMITTED), f"MM2 checkpointed {sorted(java)} within 120 s; log: {log}"
        spec = tmp / "flow.json"
        spec.write_text(
            json.dumps(
                {
                    "id": "A->B",
                    "checkpoint_location": str(tmp / "ckpt"),
                    "topics": ["orders"],
                    "topics_exclude": [],
                    "replication_policy": {"type": "default", "separator": "."},
                    "source": {"alias": "A", "bootstrap_servers": a.bootstrap_servers},
                    "target": {"alias": "B", "bootstrap_servers": b.bootstrap_servers},
                }
            )
        )
        yield {
            "java": java,
            "spec": spec,
            "jars": jars,
            "classes": tmp,
            "target": b.bootstrap_servers,
            "source": a.bootstrap_servers,
            "tmp": tmp,
        }
    finally:
        if mm is not None:
            mm.terminate()
            mm.wait(30)
        a.stop()
        b.stop()


def _kmirror_translate(spec: Path, *extra: str, group: str = "g1") -> dict[tuple[str, int], int]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kmirror_cli.cli",
            "translate",
            "--flow",
            str(spec),
            "--group",
            group,
            "--format",
            "json",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    return {(row["topic"], row["partition"]): row["downstream_offset"] for row in json.loads(out.stdout)}


def test_translate_from_mm2_checkpoints_matches_remote_cluster_utils(mm2_run):
    java = mm2_run["java"]
    assert set(java) == {("A.orders", 0), ("A.orders", 1)}
    assert _kmirror_translate(mm2_run["spec"], "--from-checkpoints") == java


def test_translate_with_source_up_matches_remote_cluster_utils(mm2_run):
    """Before: the flow's own (empty) sync history left every partition untranslatable; now the
    partitions kafka-mirror never mirrored are translated from MM2's mm2-offset-syncs.B.internal on A."""
    assert _kmirror_translate(mm2_run["spec"]) == mm2_run["java"]


def test_remote_cluster_utils_reads_our_checkpoints(mm2_run):
    """1a at the format level: checkpoints encoded as the engine writes them
    (kmirror_engine/failover/checkpoints.py uses encode_checkpoint) are read by MM2's Java client."""
    from confluent_kafka import Producer

    from kmirror.mm2.formats import Checkpoint, encode_checkpoint

    producer = Producer({"bootstrap.servers": mm2_run["target"]})
    for partition, (up, down) in {0: (310, 111), 1: (430, 222)}.items():
        key, value = encode_checkpoint(Checkpoint("g2", "A.orders", partition, up, down))
        producer.produce("A.checkpoints.internal", key=key, value=value)
    producer.flush()
    java = _java_translate(mm2_run["jars"], mm2_run["classes"], mm2_run["target"], "g2")
    assert java == {("A.orders", 0): 111, ("A.orders", 1): 222}
    assert _kmirror_translate(mm2_run["spec"], "--from-checkpoints", group="g2") == java


def test_checkpoints_of_a_kafka_mirror_run_read_by_remote_cluster_utils_equal_kmirror_translate(mm2_run):
    """1a end to end: a kafka-mirror flow A->B (topic `payments`, beside MM2's `orders`) copies and
    checkpoints g3 into the `A.checkpoints.internal` MM2 created and writes too; MM2's Java client
    reads g3 there exactly as `kmirror translate` gives it, with the source up and from checkpoints."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.mm2.flow_pass import FlowRun, flow_spec

    source, target = mm2_run["source"], mm2_run["target"]
    admin = AdminClient({"bootstrap.servers": source})
    admin.create_topics([NewTopic("payments", 2, 1)])["payments"].result()
    producer = Producer({"bootstrap.servers": source})
    for i in range(600):
        producer.produce("payments", key=str(i), value=b"p%d" % i, partition=i % 2)
    producer.flush()
    consumer = Consumer({"bootstrap.servers": source, "group.id": "g3", "enable.auto.commit": False})
    committed = {0: 120, 1: 257}
    consumer.commit(offsets=[TopicPartition("payments", p, o) for p, o in committed.items()], asynchronous=False)
    consumer.close()
    spec = flow_spec("A->B", ("A", source), ("B", target), mm2_run["tmp"], topics=["payments"], groups=["g3"])
    run = FlowRun(spec, heartbeats=False)
    try:
        assert run.run() >= 600  # and MM2's heartbeats on A (A.heartbeats): heartbeats topics are always mirrored
        assert run.checkpoint_now() == 0  # the batch's round (on_idle) wrote g3's two checkpoints already
    finally:
        run.close()
    spec_file = mm2_run["tmp"] / "payments-flow.json"
    spec_file.write_text(json.dumps(spec.to_dict()))

    java = _java_translate(mm2_run["jars"], mm2_run["classes"], target, "g3")
    assert java == {("A.payments", p): o for p, o in committed.items()}  # an empty target: no drift
    assert _kmirror_translate(spec_file, "--from-checkpoints", group="g3") == java
    assert _kmirror_translate(spec_file, group="g3") == java
