"""Issues 44/45: one room for the internal topics (names, reader groups, layouts, grants) and their
sizing per cluster (`clusters.<alias>.internal_topics`): validated, carried to the flow spec,
imported from MM2, applied when the topics are created; an existing topic of another layout is
reported, never altered (the last test, on the session's real Apache Kafka target)."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import pytest

from kmirror.errors import ValidationError
from kmirror.estate.planner import flow_spec_for, plan_topology
from kmirror.estate.topology import parse_topology
from kmirror.flow.internal_sizing import InternalTopicSizing, sizing_problems
from kmirror.flow.spec import ClusterEndpoint, parse_flow_spec
from kmirror.mm2.config_import import import_mm2
from kmirror_engine.clients.topic_admin import ensure_topic
from kmirror_engine.planning.internal_names import LAYOUTS, flow_internal_topics, layout, reader_group
from kmirror_engine.planning.internal_topics import mirror_acls, needed_access

RAW = {
    "id": "west->east",
    "checkpoint_location": "/tmp/cp",
    "topics": ["orders"],
    "topics_exclude": [],
    "source": {"alias": "west", "bootstrap_servers": "src:9092"},
    "target": {"alias": "east", "bootstrap_servers": "dst:9092"},
    "replication_policy": {"type": "default"},
    "sync_topic_acls": True,
    "dead_letter_topic": "orders-dlq",
}


def topology(east: dict[str, Any]) -> dict[str, Any]:
    return {
        "clusters": {
            "west": {"bootstrap_servers": "w:9092", "datacenter": "w"},
            "east": {"bootstrap_servers": "e:9092", "datacenter": "e", **east},
        },
        "topologies": [{"name": "t", "pattern": "active-passive", "primary": "west", "standby": "east"}],
    }


def test_every_internal_topic_has_one_layout_and_every_reader_its_group_and_grant() -> None:
    spec = parse_flow_spec(RAW)
    topics = flow_internal_topics(spec)
    assert set(topics) == {
        "west.checkpoints.internal",
        "heartbeats",
        "mm2-offset-syncs.west.internal",
        "kmirror-offset-syncs-snapshot.west.internal",
        "kmirror-created-topics.west.internal",
        "kmirror-synced-acls.west.internal",
        "kmirror-flow-control.internal",
        "orders-dlq",
    }
    assert {t.kind for t in topics.values()} == set(LAYOUTS)
    assert topics["mm2-offset-syncs.west.internal"].config == {"cleanup.policy": "delete", "retention.ms": "604800000"}
    assert topics["west.checkpoints.internal"].config == {"cleanup.policy": "compact"}
    groups = {
        (g.name, g.operations)
        for g in mirror_acls(spec, ["orders"])
        if g.resource_type == "GROUP" and g.side == "target"
    }
    for topic in topics.values():
        if "Read" in topic.operations:
            assert topic.reader_group == reader_group(topic.name) == f"kmirror-reader-{topic.name}"
            assert (topic.reader_group, ("Read", "Describe")) in groups
        else:
            assert topic.reader_group is None
    # the control topic is granted (read) but never asked for at start: `kmirror pause` creates it
    assert "kmirror-flow-control.internal" not in needed_access(spec)
    assert needed_access(spec)["orders-dlq"] == ("dead letters: records the target refuses", ("Write",))
    layout("checkpoints")["cleanup.policy"] = "delete"  # a copy: the room is not changed
    assert LAYOUTS["checkpoints"] == {"cleanup.policy": "compact"}


def test_the_topology_sizes_a_clusters_internal_topics_and_the_flow_spec_carries_it() -> None:
    sizing = {"replication_factor": 3, "min_insync_replicas": 2, "partitions": 6}
    topo = parse_topology(topology({"internal_topics": sizing, "production": True}))
    [flow] = plan_topology(topo).flows
    raw = flow_spec_for(topo, flow, "/tmp/cp")
    assert raw["target"]["internal_topics"] == sizing
    assert "internal_topics" not in raw["source"]  # the defaults: nothing written
    spec = parse_flow_spec(raw)
    assert spec.target.internal_topics == InternalTopicSizing(3, 2, 6)
    assert spec.source.internal_topics == InternalTopicSizing()
    assert parse_flow_spec(spec.to_dict()).target.internal_topics == InternalTopicSizing(3, 2, 6)


def test_validate_refuses_replication_factor_1_on_a_production_cluster_naming_field_value_and_fix() -> None:
    parse_topology(topology({"internal_topics": {"replication_factor": 1}}))  # not production: allowed
    with pytest.raises(ValidationError) as err:
        parse_topology(topology({"internal_topics": {"replication_factor": 1}, "production": True}))
    text = str(err.value)
    assert "clusters.east.internal_topics.replication_factor: is 1 on a cluster marked production" in text
    assert "set it to 3 (and min_insync_replicas: 2)" in text


def test_sizing_problems_name_each_bad_value() -> None:
    problems = sizing_problems(
        {"replication_factor": 0, "min_insync_replicas": "2", "partitions": 0, "replicas": 3}, "target.internal_topics"
    )
    assert [(p.path, p.message) for p in problems] == [
        (
            "target.internal_topics.replicas",
            "unknown key; allowed: min_insync_replicas, partitions, replication_factor",
        ),
        (
            "target.internal_topics.replication_factor",
            "must be a whole number >= 1, or -1 for the broker's default.replication.factor, got 0",
        ),
        ("target.internal_topics.min_insync_replicas", "must be a whole number >= 1, got '2'"),
        ("target.internal_topics.partitions", "must be a whole number >= 1, got 0"),
    ]
    [above] = sizing_problems({"replication_factor": 2, "min_insync_replicas": 3}, "x")
    assert above.path == "x.min_insync_replicas" and "set it to at most 2" in above.message
    with pytest.raises(ValidationError, match=r"target.internal_topics.partitions: must be a whole number"):
        parse_flow_spec({**RAW, "target": {**RAW["target"], "internal_topics": {"partitions": -2}}})


def test_mm2_internal_topic_replication_factors_size_the_target_clusters() -> None:
    props = {
        "clusters": "A, B",
        "A.bootstrap.servers": "a:9092",
        "B.bootstrap.servers": "b:9092",
        "A->B.enabled": "true",
        "B->A.enabled": "true",
        "offset-syncs.topic.replication.factor": "3",
        "checkpoints.topic.replication.factor": "3",
        "heartbeats.topic.replication.factor": "3",
        "B->A.checkpoints.topic.replication.factor": "2",
    }
    topo, dropped = import_mm2(props)
    assert topo["clusters"]["B"]["internal_topics"] == {"replication_factor": 3}
    assert topo["clusters"]["A"]["internal_topics"] == {"replication_factor": 2}
    assert "defaults" not in topo and all("_internal" not in str(f) for f in topo.get("flows", {}).values())
    assert [d.key for d in dropped if "replication.factor" in d.key] == []
    parse_topology(topo)  # valid as written
    _, dropped = import_mm2({**props, "checkpoints.topic.replication.factor": "1"})
    assert any(d.key == "checkpoints.topic.replication.factor" and "conflicts" in d.reason for d in dropped)


@pytest.mark.real_kafka
def test_internal_topics_are_created_sized_and_an_existing_other_layout_is_reported_not_altered(
    clusters: Any, unique: str
) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": clusters.target})
    # a single broker: replication factor 1 is all it allows; min.insync.replicas 1 is set explicitly
    sizing = InternalTopicSizing(replication_factor=1, min_insync_replicas=1, partitions=3)
    target = ClusterEndpoint("east", clusters.target, {}, sizing)
    syncs, dlq = f"mm2-offset-syncs.{unique}.internal", f"dlq-{unique}"
    ensure_topic(target, syncs, layout("offset_syncs"))
    ensure_topic(target, dlq, layout("dead_letters"), sizing.partitions or 1)

    def described(topic: str) -> tuple[int, int, dict[str, str]]:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        deadline = time.monotonic() + 20  # a created topic reaches the broker's metadata cache shortly after
        while True:
            meta = admin.list_topics(topic, timeout=30).topics[topic]
            try:
                configs = admin.describe_configs([resource])[resource].result(timeout=30)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        replicas = {len(p.replicas) for p in meta.partitions.values()}
        return len(meta.partitions), max(replicas), {k: v.value for k, v in configs.items()}

    partitions, rf, configs = described(syncs)
    assert (partitions, rf) == (1, 1)
    assert (configs["cleanup.policy"], configs["retention.ms"], configs["min.insync.replicas"]) == (
        "delete",
        "604800000",
        "1",
    )
    assert described(dlq)[0] == 3

    # the same topic wanted compacted with 2 partitions: reported once, left as it is
    out = io.StringIO()
    other = ClusterEndpoint("east", clusters.target, {}, InternalTopicSizing(min_insync_replicas=1))
    ensure_topic(other, syncs, {"cleanup.policy": "compact"}, partitions=2, out=out)
    [line] = out.getvalue().splitlines()
    assert line.startswith("kmirror warning ")
    record = json.loads(line.removeprefix("kmirror warning "))
    assert (record["event"], record["topic"], record["cluster"]) == ("internal_topic_layout", syncs, "east")
    assert record["found"] == {"partitions": 1, "cleanup.policy": "delete"}
    assert record["wanted"] == {"partitions": 2, "cleanup.policy": "compact"}
    partitions, _, configs = described(syncs)
    assert (partitions, configs["cleanup.policy"]) == (1, "delete")  # not altered
    out = io.StringIO()
    ensure_topic(target, syncs, layout("offset_syncs"), out=out)
    assert out.getvalue() == ""  # the layout it was made with: nothing to report
    admin.delete_topics([syncs, dlq])


def test_validate_stack_refuses_replication_factor_1_where_a_production_stack_writes(
    tmp_path: Any, monkeypatch: Any, capsys: Any
) -> None:
    import yaml

    from kmirror_cli.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "stacks").mkdir()
    topo = topology({"internal_topics": {"replication_factor": 1}})
    (tmp_path / "stacks" / "topology.yaml").write_text(yaml.safe_dump(topo))

    def stack(name: str, datacenter: str, spark: dict[str, Any]) -> None:
        config = {"kafka-mirror:datacenter": datacenter, "kafka-mirror:spark": {"platform": "eks", **spark}}
        (tmp_path / "stacks" / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump({"config": config}))

    stack("prod", "e", {})  # protect defaults to true: production
    stack("test", "e", {"protect": False})
    stack("west", "w", {})  # runs no flow into east
    assert main(["validate", "--stack", "prod"]) == 2
    err = capsys.readouterr().err
    assert "clusters.east.internal_topics.replication_factor: is 1 on stack prod, production" in err
    assert "set it to 3 (and min_insync_replicas: 2)" in err
    assert main(["validate", "--stack", "test"]) == 0
    assert main(["validate", "--stack", "west"]) == 0
    assert main(["validate", "--topology", "stacks/topology.yaml"]) == 0
