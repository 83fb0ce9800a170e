"""`kmirror import mm2|mm1` (issue 23): the topology written plans the same flows and settings;
what cannot be carried over is listed, secrets redacted."""

from __future__ import annotations

import yaml

from kmirror.estate.planner import plan_topology
from kmirror.estate.topology import parse_topology
from kmirror_cli.cli import main

# apache/kafka config/connect-mirror-maker.properties (trunk), its comments left out: every
# property line, verbatim.
MM2_SAMPLE = """\
clusters = A, B
A.bootstrap.servers = A_host1:9092, A_host2:9092, A_host3:9092
B.bootstrap.servers = B_host1:9092, B_host2:9092, B_host3:9092
A->B.enabled = true
A->B.topics = .*
B->A.enabled = true
B->A.topics = .*
replication.factor=1
checkpoints.topic.replication.factor=1
heartbeats.topic.replication.factor=1
offset-syncs.topic.replication.factor=1
offset.storage.replication.factor=1
status.storage.replication.factor=1
config.storage.replication.factor=1
"""


def test_mm2_sample_round_trips(tmp_path, capsys):
    src = tmp_path / "mm2.properties"
    src.write_text(
        MM2_SAMPLE
        + "A.ssl.truststore.password = hunter2\nA.producer.linger.ms = 5\nB.producer.compression.type = zstd\n"
    )
    out = tmp_path / "topology.yaml"
    assert main(["import", "mm2", str(src), "-o", str(out), "--allow-lossy"]) == 0
    err = capsys.readouterr().err
    topo = parse_topology(yaml.safe_load(out.read_text()))
    assert sorted(topo.flows) == ["A->B", "B->A"]
    assert topo.clusters["A"].bootstrap_servers == "A_host1:9092,A_host2:9092,A_host3:9092"
    for flow in topo.flows.values():
        assert flow.settings["topics"] == [".*"]
        assert flow.settings["replication_factor"] == 1
        assert flow.settings["replication_policy"] == {"type": "default", "separator": "."}
    assert topo.flows["A->B"].settings["producer"] == {"compression.type": "zstd"}
    assert topo.flows["B->A"].settings["producer"] == {"linger.ms": "5"}
    assert plan_topology(topo).flows
    # every property not carried over is named, on stderr and in the file; the secret never appears
    # the internal topics' replication factor sizes the target clusters (issue 45)
    assert {c.internal_topics.replication_factor for c in topo.clusters.values()} == {1}
    assert "checkpoints.topic.replication.factor" not in err
    for key in (
        "offset.storage.replication.factor",
        "A.ssl.truststore.password",
    ):
        assert f"not carried over: {key}=" in err
        assert f"# not carried over: {key}=" in out.read_text()
    assert "hunter2" not in err + out.read_text()


def test_mm2_identity_policy_and_disabled_flow(tmp_path, capsys):
    src = tmp_path / "mm2.properties"
    src.write_text(
        "clusters = a, b\na.bootstrap.servers = a:9092\nb.bootstrap.servers = b:9092\n"
        "a->b.enabled = true\na->b.topics.exclude = tmp.*\nb->a.topics = x\n"
        "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n"
        "emit.checkpoints.interval.seconds = 30\nsync.group.offsets.enabled = true\n"
    )
    assert main(["import", "mm2", str(src), "-o", "-"]) == 0
    captured = capsys.readouterr()
    topo = parse_topology(yaml.safe_load(captured.out))
    assert list(topo.flows) == ["a->b"]
    s = topo.flows["a->b"].settings
    assert s["replication_policy"] == {"type": "identity"}
    assert s["topics_exclude"] == ["tmp.*"]
    assert s["checkpoint_interval_ms"] == 30000 and s["sync_group_offsets"] is True
    assert "b->a.*" in captured.err  # the disabled flow's settings are listed, not dropped


def test_mm1_command_line(tmp_path, capsys):
    (tmp_path / "c.properties").write_text("bootstrap.servers=src:9092\ngroup.id=mm1\nauto.commit.enable=false\n")
    (tmp_path / "p.properties").write_text("bootstrap.servers=dst:9092\nacks=all\nsasl.jaas.config=secret-stuff\n")
    out = tmp_path / "t.yaml"
    argv = [
        "import",
        "mm1",
        "--consumer.config",
        str(tmp_path / "c.properties"),
        "--producer.config",
        str(tmp_path / "p.properties"),
        "--whitelist",
        "orders.*|payments.*",
        "-o",
        str(out),
        "--allow-lossy",
    ]
    assert main(argv) == 0
    err = capsys.readouterr().err
    flow = parse_topology(yaml.safe_load(out.read_text())).flows["source->target"]
    assert flow.settings["topics"] == ["orders.*", "payments.*"]
    assert flow.settings["replication_policy"] == {"type": "identity"}
    assert flow.settings["consumer_group"] == "mm1" and flow.settings["producer"] == {"acks": "all"}
    assert "consumer.config:auto.commit.enable=false" in err
    assert "secret-stuff" not in err + out.read_text()


def test_missing_file_is_invalid_input(tmp_path, capsys):
    assert main(["import", "mm2", str(tmp_path / "nope.properties")]) == 2
    assert "nope.properties" in capsys.readouterr().err
