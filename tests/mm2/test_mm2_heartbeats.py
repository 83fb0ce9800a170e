"""Heartbeats and internal topic names interoperate with a real MirrorMaker 2 (issue 23, part 1c).

Three Apache Kafka brokers A, B, C; one MM2 (dedicated mode) mirrors B->A and B->C; kafka-mirror
(the engine's planner, copier and listener, no Spark: tests/mm2/flow_pass.py) mirrors A->B and A->C.
That is, in one estate:
- MM2 downstream of a kafka-mirror hop: A -kafka-mirror-> B -MM2-> C (`B.A.x`, `B.A.heartbeats`);
- kafka-mirror downstream of an MM2 hop: B -MM2-> A -kafka-mirror-> C (`A.B.y`, `A.B.heartbeats`);
- an active/active pair, one side each: A -kafka-mirror-> B and B -MM2-> A, which must not copy
  records back and forth (no `A.B.A.x`, no `B.A.B.y`).
Each side's heartbeats arrive under MM2's names, with the (source, target) of the flow that wrote
them, and no internal topic (`*.internal`, MM2's `mm2-*`, `__consumer_offsets`) is mirrored.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kmirror.mm2.formats import decode_heartbeat
from tests.mm2.flow_pass import FlowRun, flow_spec
from tests.mm2.mm2_process import ONE_REPLICA
from tests.mm2.test_mm2_jars import fetch_mm2

pytestmark = [pytest.mark.e2e, pytest.mark.real_kafka, pytest.mark.slow]

# user-visible topics once every hop converged (internal and `__` topics left out)
EXPECTED = {
    "A": {"x", "heartbeats", "B.y", "B.heartbeats"},
    "B": {"y", "heartbeats", "A.x", "A.heartbeats"},
    # MM2's B->C, then kafka-mirror's A->C
    "C": {"heartbeats", "B.y", "B.A.x", "B.heartbeats", "B.A.heartbeats"}
    | {"A.x", "A.B.y", "A.heartbeats", "A.B.heartbeats"},
}
# who wrote the heartbeats each topic holds: (source alias, target alias) of the emitting flow
HEARTBEATS = {
    ("A", "heartbeats"): {("B", "A")},  # MM2 B->A
    ("B", "heartbeats"): {("A", "B")},  # kafka-mirror A->B
    ("C", "heartbeats"): {("B", "C"), ("A", "C")},  # MM2 B->C and kafka-mirror A->C
    ("A", "B.heartbeats"): {("A", "B")},  # kafka-mirror's, carried home by MM2 (not a loop: a heartbeat)
    ("B", "A.heartbeats"): {("B", "A")},  # MM2's, carried home by kafka-mirror
    ("C", "B.A.heartbeats"): {("B", "A")},  # two hops: kafka-mirror then MM2
    ("C", "A.B.heartbeats"): {("A", "B")},  # two hops: MM2 then kafka-mirror
}


def _mm2_properties(bootstrap: dict[str, str]) -> str:
    """MM2 on B->A and B->C; heartbeats only from those two flows (MM2 otherwise beats for every
    pair, disabled ones too), so each heartbeat names the flow that wrote it. B->A keeps its offset
    syncs on its target A: with MM2's default (on the source B) they would share B's
    `mm2-offset-syncs.A.internal` with kafka-mirror's A->B, which keeps its syncs on its target B.
    MM2 4.x counts as internal only `mm2*.internal`, `*.checkpoints.internal`, `__*` and `.*` (its
    `ReplicationPolicy.isInternalTopic`, default `topics.exclude`), so without `kmirror-.*[.]internal`
    in `topics.exclude` it mirrors kafka-mirror's own `kmirror-created-topics.A.internal` and
    `kmirror-offset-syncs-snapshot.A.internal` from B to C (seen here: `B.kmirror-...` on C)."""
    lines = ["clusters = A, B, C"]
    lines += [f"{alias}.bootstrap.servers = {servers}" for alias, servers in bootstrap.items()]
    for flow in ("B->A", "B->C"):
        lines += [f"{flow}.enabled = true", f"{flow}.topics = .*", f"{flow}.emit.heartbeats.enabled = true"]
    lines += [
        "topics.exclude = mm2.*[.]internal, kmirror-.*[.]internal, .*[.]replica, __.*",
        "B->A.offset-syncs.topic.location = target",
        "emit.heartbeats.enabled = false",
        "emit.heartbeats.interval.seconds = 1",
        "refresh.topics.interval.seconds = 1",
        "refresh.groups.interval.seconds = 1",
        "emit.checkpoints.interval.seconds = 1",
        "sync.group.offsets.enabled = false",
    ]
    return "\n".join(lines) + "\n" + ONE_REPLICA


def _produce(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, key=b"%d" % i, value=b"%s-%d" % (topic.encode(), i))
    assert producer.flush(30) == 0


def _topics(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics)


def _user_topics(bootstrap: str) -> set[str]:
    return {t for t in _topics(bootstrap) if not t.startswith("__") and not t.endswith(".internal")}


def _heartbeat_writers(bootstrap: str, topic: str) -> set[tuple[str, str]]:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "hb-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    writers: set[tuple[str, str]] = set()
    try:
        while True:
            msg = consumer.poll(10)
            assert msg is not None, f"no end of {topic} seen"
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                return writers
            beat = decode_heartbeat(msg.key() or b"", msg.value() or b"")
            writers.add((beat.source_cluster_alias, beat.target_cluster_alias))
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def estate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A, B, C with `x` on A and `y` on B, MM2 running B->A and B->C, kafka-mirror flows A->B and
    A->C run pass after pass until every expected topic is there (or 180 s)."""
    from kmirror_cli.local_kafka import KafkaBroker

    tmp: Path = tmp_path_factory.mktemp("mm2-hb")
    brokers = {alias: KafkaBroker(f"mm2hb-{alias}") for alias in "ABC"}
    mm, runs = None, []
    try:
        for broker in brokers.values():
            broker.start()
        bootstrap = {alias: b.bootstrap_servers for alias, b in brokers.items()}
        jars = fetch_mm2(brokers["A"].version)
        _produce(bootstrap["A"], "x", 20)
        _produce(bootstrap["B"], "y", 20)
        props = tmp / "mm2.properties"
        props.write_text(_mm2_properties(bootstrap))
        mm = subprocess.Popen(
            ["java", "-Xmx512m", "-cp", f"{jars}/*", "org.apache.kafka.connect.mirror.MirrorMaker", str(props)],
            stdout=(tmp / "mm2.log").open("w"),
            stderr=subprocess.STDOUT,
        )
        runs = [FlowRun(flow_spec(f"A->{t}", ("A", bootstrap["A"]), (t, bootstrap[t]), tmp)) for t in "BC"]
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            for run in runs:
                run.run()
            if all(EXPECTED[a] <= _user_topics(bootstrap[a]) for a in "ABC") and all(
                writers <= _heartbeat_writers(bootstrap[a], t) for (a, t), writers in HEARTBEATS.items()
            ):
                break
            time.sleep(1)
        for _ in range(3):  # a few more rounds of both products: a loop would show up as new topics now
            for run in runs:
                run.run()
            time.sleep(2)
        yield {"bootstrap": bootstrap, "log": tmp / "mm2.log"}
    finally:
        for run in runs:
            run.close()
        if mm is not None:
            mm.terminate()
            mm.wait(30)
        for broker in brokers.values():
            broker.stop()


def test_each_cluster_holds_exactly_the_topics_mm2_would_name(estate):
    """Both chains and the active/active pair converge to MM2's names; nothing else appears."""
    found = {alias: _user_topics(servers) for alias, servers in estate["bootstrap"].items()}
    assert found == EXPECTED, f"MM2's log: {estate['log']}"


def test_no_record_goes_back_and_forth_in_the_active_active_pair(estate):
    """No topic name carries the same cluster twice (`A.B.A.x`, `B.A.B.heartbeats`): a loop."""
    for alias, servers in estate["bootstrap"].items():
        for topic in _topics(servers):
            hops = topic.split(".")[:-1]
            assert len(hops) == len(set(hops)), f"{topic} on {alias} went round a loop"


def test_heartbeats_arrive_under_mm2s_names_from_the_flow_that_wrote_them(estate):
    found = {(a, t): _heartbeat_writers(estate["bootstrap"][a], t) for a, t in HEARTBEATS}
    assert found == HEARTBEATS


def test_no_internal_topic_is_mirrored(estate):
    """Kafka's, Connect's and MM2's own topics (`__consumer_offsets`, `mm2-offsets.B.internal`,
    `B.checkpoints.internal`, `mm2-offset-syncs.*.internal`...) exist, but no remote copy of them."""
    internal = {
        alias: {t for t in _topics(s) if t.startswith("__") or t.endswith(".internal")}
        for alias, s in estate["bootstrap"].items()
    }
    assert {"mm2-offsets.B.internal", "B.checkpoints.internal", "mm2-offset-syncs.B.internal"} <= internal["A"]
    assert "mm2-offset-syncs.A.internal" in internal["B"]  # kafka-mirror's A->B syncs, on its target
    every = set().union(*internal.values())
    copies = {
        (alias, t)
        for alias, topics in internal.items()
        for t in topics
        if t.split(".", 1)[0] in estate["bootstrap"] and t.split(".", 1)[1] in every
    }
    assert copies == set()
