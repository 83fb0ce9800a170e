"""Identity active/active on real brokers and a local Spark (issue 46): an active-active topology
with the identity policy and `provenance_headers: true` plans a->b and b->a copying `events` under
its own name. Both clusters produce to `events` while the two flows run `--once` rounds, one way
then the other; after the producers stop, more rounds copy nothing new. Each cluster then holds
every record exactly once (its own and the other's), the mirrored ones stamped with their origin
and the users' headers untouched, and both directions emitted heartbeats and checkpoints.

Without provenance filtering (today's main: the option does not exist, the app has no guard)
every round copies the other side's copies back, and the counts grow round after round."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kmirror.estate.planner import flow_spec_for, parse_topology, plan_topology
from kmirror.flow.replication_policy import checkpoints_topic
from kmirror.flow.spec import FlowSpec, parse_flow_spec
from kmirror.mm2.formats import decode_heartbeat
from kmirror_engine.failover.checkpoints import read_checkpoints
from spark_app.main import run_flow
from tests.brokers import real_kafka
from tests.kafka_helpers import add_fences, consume_all, create_topic, produce

pytestmark = [pytest.mark.e2e, pytest.mark.spark40]
PER_CLUSTER = 600  # records each cluster's producers write (in PRODUCE_BURSTS bursts, while the flows run)
PRODUCE_BURSTS = 6
PARTITIONS = 2
USER_HEADER = ("app.trace", b"t-1")


def planned(clusters: Any, a: str, b: str, unique: str, root: Path) -> tuple[FlowSpec, FlowSpec]:
    """The two flow specs the planner makes of the active/active identity topology."""
    topology = parse_topology(
        {
            "clusters": {
                a: {"bootstrap_servers": clusters.source, "datacenter": "dc-a"},
                b: {"bootstrap_servers": clusters.target, "datacenter": "dc-b"},
            },
            "defaults": {"heartbeat_interval_ms": 200},
            "topologies": [
                {
                    "name": "aa",
                    "pattern": "active-active",
                    "clusters": [a, b],
                    "replication_policy": {"type": "identity"},
                    "provenance_headers": True,
                    "topics": [f"events-{unique}"],
                    "groups": [f"app-{unique}-.*"],
                }
            ],
        }
    )
    plan = plan_topology(topology)
    return (
        parse_flow_spec(flow_spec_for(topology, plan.flow(f"{a}->{b}"), str(root))),
        parse_flow_spec(flow_spec_for(topology, plan.flow(f"{b}->{a}"), str(root))),
    )


def producer_thread(bootstrap: str, topic: str, tag: str, errors: list[BaseException]) -> threading.Thread:
    """Writes PER_CLUSTER records `<tag>-<i>` (with a user header) in bursts, 0.5 s apart."""
    per_burst = PER_CLUSTER // PRODUCE_BURSTS

    def run() -> None:
        try:
            for burst in range(PRODUCE_BURSTS):
                produce(
                    bootstrap,
                    topic,
                    [
                        {
                            "key": f"{tag}-{i}".encode(),
                            "value": f"{tag}-{i}".encode(),
                            "partition": i % PARTITIONS,
                            "headers": [USER_HEADER],
                        }
                        for i in range(burst * per_burst, (burst + 1) * per_burst)
                    ],
                )
                time.sleep(0.5)
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)

    return threading.Thread(target=run, name=f"produce-{tag}", daemon=True)


def values_of(bootstrap: str, topic: str) -> list[Any]:
    return [m for msgs in consume_all(bootstrap, topic, PARTITIONS).values() for m in msgs if m.value()]


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def heartbeats_on(bootstrap: str) -> set[tuple[str, str]]:
    msgs = consume_all(bootstrap, "heartbeats", 1, fenced=False)[0]
    beats = [decode_heartbeat(m.key(), m.value()) for m in msgs]
    return {(h.source_cluster_alias, h.target_cluster_alias) for h in beats}


@real_kafka  # tansu's fences would be mirrored too: counts here are for Apache Kafka
def test_both_clusters_produce_to_the_same_names_and_each_ends_with_every_record_once(
    clusters: Any, spark: Any, unique: str, tmp_path: Path
) -> None:
    a, b = f"a{unique}", f"b{unique}"
    topic = f"events-{unique}"
    forward, backward = planned(clusters, a, b, unique, tmp_path)
    assert forward.options["provenance_headers"] is True and backward.options["provenance_headers"] is True
    for bootstrap in (clusters.source, clusters.target):
        create_topic(bootstrap, topic, PARTITIONS)

    errors: list[BaseException] = []
    producers = [
        producer_thread(clusters.source, topic, "a", errors),
        producer_thread(clusters.target, topic, "b", errors),
    ]
    for thread in producers:
        thread.start()
    rounds = 0
    while any(t.is_alive() for t in producers):  # the flows run while both sides produce
        run_flow(forward, spark=spark, once=True)
        run_flow(backward, spark=spark, once=True)
        rounds += 1
    for thread in producers:
        thread.join()
    assert not errors, errors
    # groups of each side, committed at home: checkpointed to the other side by the next rounds
    commit(clusters.source, f"app-{unique}-a", topic, {0: 10, 1: 10})
    commit(clusters.target, f"app-{unique}-b", topic, {0: 10, 1: 10})
    for _ in range(3):  # after the producers stopped: everything arrives, then nothing more moves
        add_fences(clusters.source, topic, PARTITIONS)
        add_fences(clusters.target, topic, PARTITIONS)
        run_flow(forward, spark=spark, once=True)
        run_flow(backward, spark=spark, once=True)

    expected = Counter([f"a-{i}" for i in range(PER_CLUSTER)] + [f"b-{i}" for i in range(PER_CLUSTER)])
    for bootstrap, home, other in ((clusters.source, "a", b), (clusters.target, "b", a)):
        msgs = values_of(bootstrap, topic)
        counts = Counter(m.value().decode() for m in msgs)
        assert counts == expected, f"on {home}: {sum(counts.values())} records, {len(+counts - expected)} extra"
        for m in msgs:  # partitions and keys kept; the user's header first and unchanged
            value = m.value().decode()
            assert m.key().decode() == value and m.partition() == int(value.split("-")[1]) % PARTITIONS
            headers = m.headers()
            assert headers[0] == USER_HEADER
            if value.startswith(home):  # produced here: untouched
                assert headers == [USER_HEADER]
            else:  # mirrored: stamped with its origin, once
                assert headers == [USER_HEADER, ("kmirror.provenance", other.encode())]
    # heartbeats and checkpoints in both directions
    assert (a, b) in heartbeats_on(clusters.target) and (b, a) in heartbeats_on(clusters.source)
    on_b = {c.group for c in read_checkpoints(forward.target, checkpoints_topic(a))}
    on_a = {c.group for c in read_checkpoints(backward.target, checkpoints_topic(b))}
    assert f"app-{unique}-a" in on_b and f"app-{unique}-b" in on_a
    print(
        f"active/active identity: {PER_CLUSTER} records produced on each cluster, {rounds} rounds while "
        f"producing + 3 after; each cluster holds {2 * PER_CLUSTER}, each record once"
    )
