"""`kmirror import mm2|strimzi` is faithful or loud (issue 45): Apache Kafka's and Strimzi's own sample
configs (tests/data/mm2, verbatim) round-trip with every setting carried over or named; a setting
with no equivalent refuses the import (exit 1, nothing written) unless --allow-lossy, then listed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kmirror.estate.planner import plan_topology
from kmirror.estate.topology import parse_topology
from kmirror.mm2.config_import import parse_properties
from kmirror_cli.cli import main

DATA = Path(__file__).resolve().parents[1] / "data" / "mm2"


def _run(tmp_path, capsys, *argv: str) -> tuple[int, str, Path]:
    out = tmp_path / "topology.yaml"
    code = main(["import", *argv, "-o", str(out)])
    return code, capsys.readouterr().err, out


def _named(err: str) -> set[str]:
    """The keys every stderr line names ('refused: KEY=...' / 'not carried over: KEY=...')."""
    return {line.split(": ", 1)[1].split("=", 1)[0] for line in err.splitlines() if "=" in line and ": " in line}


def test_kafka_sample_carries_internal_rf_to_the_target_clusters_and_the_rest(tmp_path, capsys):
    sample = DATA / "connect-mirror-maker.properties"
    code, err, out = _run(tmp_path, capsys, "mm2", str(sample))
    assert code == 0, err
    for key in (
        "checkpoints.topic.replication.factor",
        "heartbeats.topic.replication.factor",
        "offset-syncs.topic.replication.factor",
    ):
        assert key not in err  # carried: clusters.<target>.internal_topics.replication_factor (issue 45)
    for key in (
        "offset.storage.replication.factor",
        "status.storage.replication.factor",
        "config.storage.replication.factor",
    ):
        assert f"not carried over: {key}=1: not applicable:" in err
    topo = parse_topology(yaml.safe_load(out.read_text()))
    assert {a: c.internal_topics.replication_factor for a, c in topo.clusters.items()} == {"A": 1, "B": 1}
    assert sorted(topo.flows) == ["A->B", "B->A"]
    assert {f.settings["replication_factor"] for f in topo.flows.values()} == {1}
    assert {f.settings["replication_policy"]["type"] for f in topo.flows.values()} == {"default"}
    # every property of the sample is either in the topology or named on stderr (and in the file)
    props = parse_properties(sample.read_text())
    carried = {
        "clusters",
        "A.bootstrap.servers",
        "B.bootstrap.servers",
        "A->B.enabled",
        "B->A.enabled",
        "A->B.topics",
        "B->A.topics",
        "replication.factor",
        "checkpoints.topic.replication.factor",
        "heartbeats.topic.replication.factor",
        "offset-syncs.topic.replication.factor",
    }
    assert set(props) == carried | _named(err)
    for key in _named(err):
        assert f"# not carried over: {key}=" in out.read_text()
    assert plan_topology(topo).flows


@pytest.mark.parametrize(
    ("sample", "refused", "expected"),
    [
        (
            "strimzi-mm2.yaml",
            set(),  # its internal topics' replication factor 1 sizes cluster-b (issue 45)
            {"replication_factor": 1, "sync_topic_acls": False, "emit_heartbeats": False},
        ),
        (
            "strimzi-mm2-tls.yaml",
            set(),  # tls: carried onto clusters.<alias>.security (tests/mm2/test_import_security.py)
            {"replication_factor": None, "sync_topic_acls": False, "emit_heartbeats": False},
        ),
        (
            "strimzi-mm2-sync-groups.yaml",
            set(),
            {"replication_factor": None, "sync_group_offsets": True, "emit_heartbeats": False},
        ),
        (
            "strimzi-mm2-custom-replication-policy.yaml",
            {"cluster-a->cluster-b.refresh.groups.interval.seconds"},
            {
                "replication_policy": {"type": "identity"},
                "topic_refresh_interval_ms": 600_000,
                "sync_group_offsets": False,
                "emit_heartbeats": False,
            },
        ),
    ],
)
def test_strimzi_samples_round_trip_or_name_what_they_lose(tmp_path, capsys, sample, refused, expected):
    code, err, out = _run(tmp_path, capsys, "strimzi", str(DATA / sample))
    refused_lines = {line.split(": ", 1)[1].split("=", 1)[0] for line in err.splitlines() if line.startswith("refused")}
    assert refused_lines == refused
    assert code == (1 if refused else 0) and out.exists() == (not refused)
    # Connect's own settings are named, never refused
    assert "spec.mirrors[0].sourceConnector.tasksMax=1: not applicable" in err
    assert "cluster-b.offset.storage.replication.factor=-1: not applicable" in err
    if refused:
        code, err, out = _run(tmp_path, capsys, "strimzi", str(DATA / sample), "--allow-lossy")
        assert code == 0
    topo = parse_topology(yaml.safe_load(out.read_text()))
    flow = topo.flows["cluster-a->cluster-b"]
    assert topo.clusters["cluster-a"].bootstrap_servers.startswith("cluster-a-kafka-bootstrap:909")
    assert flow.settings["topics"] == [".*"] and flow.settings["groups"] == [".*"]
    for key, value in expected.items():
        assert flow.settings[key] == value, key
    if sample == "strimzi-mm2.yaml":
        assert topo.clusters["cluster-b"].internal_topics.replication_factor == 1
    assert plan_topology(topo).flows


def test_identity_policy_separator_exactly_once_and_sync_intervals_carry_over(tmp_path, capsys):
    src = tmp_path / "mm2.properties"
    src.write_text(
        "clusters = a, b\na.bootstrap.servers = a:9092\nb.bootstrap.servers = b:9092\n"
        "a->b.enabled = true\n"
        "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n"
        "replication.policy.separator = _\n"
        "b.exactly.once.source.support = enabled\n"
        "a->b.groups.exclude = test.*\noffset.lag.max = 50\nrefresh.topics.interval.seconds = 20\n"
        "emit.heartbeats.interval.seconds = 5\nsync.topic.configs.interval.seconds = 60\n"
        "key.converter = org.apache.kafka.connect.converters.ByteArrayConverter\n"
    )
    code, err, out = _run(tmp_path, capsys, "mm2", str(src))
    assert code == 0, err
    s = parse_topology(yaml.safe_load(out.read_text())).flows["a->b"].settings
    assert s["replication_policy"] == {"type": "identity", "separator": "_"}
    assert s["exactly_once"] is True and s["groups_exclude"] == ["test.*"] and s["offset_lag_max"] == 50
    assert s["topic_refresh_interval_ms"] == 20_000 and s["heartbeat_interval_ms"] == 5_000
    assert s["sync_topic_configs_interval_ms"] == 60_000


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("replication.policy.class = com.example.MyPolicy", "replication.policy.class=com.example.MyPolicy"),
        ("a->b.topic.filter.class = com.example.Filter", "a->b.topic.filter.class=com.example.Filter"),
        ("config.properties.exclude = retention.*", "config.properties.exclude=retention.*"),
        ("exactly.once.source.support = preparing", "exactly.once.source.support=preparing"),
        ('a.sasl.jaas.config = x required password="hunter2";', "a.sasl.jaas.config=<redacted>"),
        ("a.consumer.auto.offset.reset = latest", "a.consumer.auto.offset.reset=latest"),
    ],
)
def test_a_setting_without_equivalent_is_refused_by_name_unless_allow_lossy(tmp_path, capsys, line, named):
    src = tmp_path / "mm2.properties"
    src.write_text(
        f"clusters = a, b\na.bootstrap.servers = a:9092\nb.bootstrap.servers = b:9092\na->b.enabled = true\n{line}\n"
    )
    code, err, out = _run(tmp_path, capsys, "mm2", str(src))
    assert code == 1 and not out.exists()
    assert f"refused: {named}: lossy:" in err and "--allow-lossy" in err
    assert "hunter2" not in err
    code, err, out = _run(tmp_path, capsys, "mm2", str(src), "--allow-lossy")
    assert code == 0 and f"not carried over: {named}: lossy:" in err
    assert f"# not carried over: {named}: lossy:" in out.read_text() and "hunter2" not in out.read_text()
    assert (
        parse_topology(yaml.safe_load(out.read_text())).flows["a->b"].settings["replication_policy"]["type"]
        == "default"
    )
