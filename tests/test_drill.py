"""`kmirror drill`: the local drill really loses its source broker, fails over, fails back and
reports RPO/RTO; a wrong offset written by the failover fails it (exit 1); the dry drill against
running clusters stops nothing and reports the records at risk the target knows of."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer

from kmirror.flow.spec import parse_flow_spec
from kmirror_cli.cli import main
from kmirror_engine.clients.factory import admin_client
from kmirror_engine.failover import group_sync
from kmirror_engine.failover.failover_listener import FailoverListener
from kmirror_engine.failover.group_sync import committed_offsets
from kmirror_engine.failover.target_only import SOURCE_PROBE_S
from tests.brokers import BROKER
from tests.e2e.test_failover_e2e import END, GROUP_AT, commit
from tests.e2e.test_failover_source_gone_e2e import mirror_until
from tests.kafka_helpers import add_fences, create_topic, dr_topology, flow_raw, produce

LOCAL_STEPS = [
    "start brokers",
    "mirror A->B",
    "write on A, unmirrored",
    "source down",
    "failover",
    "consumer resumes on B",
    "source back",
    "failback",
    "consumer resumes on A",
]


def drill_json(capsys: Any, *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["drill", *args, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.e2e
def test_local_drill_fails_over_and_back_and_counts_the_unmirrored_records(capsys: Any) -> None:
    code, report = drill_json(capsys, "--broker", BROKER, "--partitions", "2", "--records", "12", "--at-risk", "4")
    assert code == 0, json.dumps(report, indent=2)
    assert report["passed"] is True and report["dry"] is False and report["broker"] == BROKER
    assert [s["step"] for s in report["steps"]] == LOCAL_STEPS
    assert all(s["passed"] is True for s in report["steps"])
    assert report["rpo_records"] == 2 * 4, "the records written on A after the last mirror pass"
    # the failover probed the dead source first: the RTO holds the probe, and a consumer's first read
    assert SOURCE_PROBE_S <= report["rto_s"] < SOURCE_PROBE_S + 20
    steps = {s["step"]: s["detail"] for s in report["steps"]}
    assert "source drill-a unreachable after 5 s" in steps["failover"]
    # group at 6 and 5 on A; B's topic held 2 records of its own: resumed at 8 and 7
    assert "B[0]: first offset 8 p0-6, 3 record(s), as expected" in steps["consumer resumes on B"]
    assert "B[1]: first offset 7 p1-5, 3 record(s), as expected" in steps["consumer resumes on B"]
    # home after 3 reads on B: 9 and 8, then the rest of the mirrored records and the 4 at risk
    assert "A[0]: first offset 9 p0-9, 7 record(s), as expected" in steps["consumer resumes on A"]
    assert "A[1]: first offset 8 p1-8, 8 record(s), as expected" in steps["consumer resumes on A"]


@pytest.mark.e2e
def test_a_failover_that_writes_a_wrong_offset_fails_the_drill(capsys: Any, monkeypatch: Any) -> None:
    real_sync = group_sync.sync_group

    def one_too_far(admin: Any, group: str, translated: dict[Any, int], cluster: str) -> Any:
        if cluster == "drill-b":  # the failover's write; the failback's is left alone
            translated = {tp: offset + 1 for tp, offset in translated.items()}
        return real_sync(admin, group, translated, cluster)

    monkeypatch.setattr(group_sync, "sync_group", one_too_far)
    code = main(["drill", "--broker", BROKER, "--partitions", "1", "--records", "10", "--from-checkpoints"])
    out = capsys.readouterr().out
    assert code == 1
    assert "B[0]: first offset 8 p0-6, 3 record(s), WRONG: expected offset 7 p0-5 and 3 in a row" in out
    assert "drill FAILED: consumer resumes on B" in out
    assert "drill: RPO 5 record(s) at risk, RTO " in out


def test_a_dry_drill_needs_both_the_flow_and_the_group(capsys: Any) -> None:
    assert main(["drill", "--flow", "flow.json"]) == 2
    assert "--group: required with --flow (a dry drill needs both)" in capsys.readouterr().err


def test_a_dry_drill_from_the_topology_needs_a_known_flow_id(capsys: Any) -> None:
    assert main(["drill", "--topology", "stacks/topology.yaml", "--group", "g"]) == 2
    assert "--flow: required with --topology (the flow id to drill, e.g. 'a->b'); add --flow ID --group G" in (
        capsys.readouterr().err
    )
    assert main(["drill", "--topology", "stacks/topology.yaml", "--flow", "west-1->east1", "--group", "g"]) == 2
    assert "--flow: no flow 'west-1->east1' in stacks/topology.yaml (did you mean 'west-1->east-1'?)" in (
        capsys.readouterr().err
    )


@pytest.mark.e2e
def test_dry_drill_stops_nothing_and_reports_what_the_target_knows(
    clusters: Any, unique: str, tmp_path: Path, capsys: Any
) -> None:
    src, dst, topic, group = f"s{unique}", f"t{unique}", f"orders-{unique}", f"app-{unique}"
    remote = f"{src}.{topic}"
    options = {"groups": [group], "sync_group_offsets": False, "checkpoint_interval_ms": 3_600_000}
    raw = flow_raw(clusters, src, dst, [topic], tmp_path / "ckpt", **options)
    (flow := tmp_path / "flow.json").write_text(json.dumps(raw))
    spec = parse_flow_spec(raw)
    create_topic(clusters.source, topic)
    create_topic(clusters.target, remote)
    produce(clusters.source, topic, [{"value": f"v{i}".encode(), "partition": 0} for i in range(10)])
    add_fences(clusters.source, topic, 1)
    produce(clusters.source, topic, [{"value": f"late{i}".encode(), "partition": 0} for i in range(3)])
    add_fences(clusters.source, topic, 1)
    commit(clusters.source, group, topic, GROUP_AT)
    listener = FailoverListener.for_flow(spec, serve_metrics=False)
    mirror_until(spec, topic, remote, END, listener)  # the mirror's batch saw 3 more records on the source
    listener.close(final=True)

    code, report = drill_json(capsys, "--flow", str(flow), "--group", group)
    assert code == 0, json.dumps(report, indent=2)
    assert report["dry"] is True and report["passed"] is True and report["rto_s"] is None
    assert report["rpo_records"] == 3 + (1 if BROKER == "tansu" else 0)  # (tansu: its fence is a record too)
    assert [(s["step"], s["passed"]) for s in report["steps"]] == [
        ("translate (target's checkpoints)", True),
        ("failover --dry-run", True),
        ("failback --dry-run", None),  # the group never moved to the target: nothing to fail back yet
    ]
    assert f"{remote}[0]: 4 -> 4, checkpoint " in report["steps"][0]["detail"]
    # the same drill from the topology alone (issue 46): the planner's flow spec, the same answer
    (topology := tmp_path / "topology.yaml").write_text(
        yaml.safe_dump(dr_topology(clusters, src, dst, [topic], [group], ("dc-s", "dc-t"), sync_group_offsets=False))
    )
    code, planned = drill_json(capsys, "--topology", str(topology), "--flow", f"{src}->{dst}", "--group", group)
    assert code == 0, json.dumps(planned, indent=2)
    assert (planned["rpo_records"], [(s["step"], s["passed"]) for s in planned["steps"]]) == (
        report["rpo_records"],
        [(s["step"], s["passed"]) for s in report["steps"]],
    )
    assert f"{remote}[0]: 4 -> 4, checkpoint " in planned["steps"][0]["detail"]
    # nothing was changed or stopped: the group has no offsets on the target, the source answers
    assert committed_offsets(admin_client(spec.target), group, dst) == {}
    probe = Consumer({"bootstrap.servers": clusters.source, "group.id": f"probe-{unique}"})
    try:
        assert topic in probe.list_topics(timeout=10).topics
    finally:
        probe.close()
