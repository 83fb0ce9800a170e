"""The operator commands from the topology alone, on real brokers and one running mirror (issue 46):
a topology YAML written here (clusters = the test brokers, one active-passive flow) and a stack
file naming it are all `kmirror pause|resume|status|lag|translate|acls|failover --dry-run` get
(`--stack S --flow ID` or `--topology FILE --flow ID`, no flow spec JSON; `status` of every flow
of the stack or topology without `--flow`). Each command's effect is
asserted on the clusters: the control record written on the target and obeyed by the driver,
status exit codes (4 paused, 0 running), lag numbers, the translated offset, the dry run's plan
with nothing committed, the ACL commands naming the test brokers and topics.

The plain test brokers need no credentials, so the topology has no secret references (the
planner's secret references are unit-tested in tests/test_flow_args.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kmirror.estate.planner import flow_spec_for, parse_topology, plan_topology
from kmirror.flow.spec import parse_flow_spec
from kmirror_cli.cli import main
from kmirror_engine.clients.factory import admin_client
from kmirror_engine.failover.group_sync import committed_offsets
from kmirror_engine.failover.offset_sync_topic import read_partition0
from kmirror_engine.planning.flow_control import newest_record
from kmirror_engine.planning.internal_names import control_topic
from tests.e2e.streaming_run import DriverLog, StreamingRun
from tests.e2e.test_failover_e2e import commit
from tests.e2e.test_pause_resume_e2e import delete_control_topic, target_count
from tests.kafka_helpers import consume_all, create_topic, dr_topology, produce

pytestmark = [pytest.mark.e2e, pytest.mark.real_kafka]
GROUP_AT = 40  # the application group's position on the source


def cli(log: DriverLog, *argv: str) -> tuple[int, Any]:
    """Run one command with `--format json`; its exit code and parsed stdout (the driver's lines go to the log)."""
    log.read()
    code = main([*argv, "--format", "json"])
    out = log.capfd.readouterr()
    log.text += out.err
    lines = [line for line in out.out.splitlines() if line.startswith(("{", "["))]
    assert lines, (argv, code, out.out, out.err)
    return code, json.loads(lines[-1])


def test_the_operator_commands_work_from_the_topology_alone(
    spark: Any,
    clusters: Any,
    unique: str,
    tmp_path: Path,
    driver_log: DriverLog,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = f"tw{unique}", f"te{unique}"
    topic, group, flow_id = f"ops-{unique}", f"app-{unique}", f"tw{unique}->te{unique}"
    remote = f"{a}.{topic}"
    beats = {"heartbeat_interval_ms": 500, "heartbeats_replication_enabled": False}
    defaults = {**beats, "checkpoint_interval_ms": 500, "trigger_interval_ms": 200}
    settings = {"sync_group_offsets": False}  # the group moves only by the failover command
    settings["reverse_flow"] = True  # a second flow (b->a, run in dc-a, never started): status of many
    raw = dr_topology(clusters, a, b, [topic], [group], defaults=defaults, **settings)
    (tmp_path / "topology.yaml").write_text(yaml.safe_dump(raw))
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "Pulumi.dcb.yaml").write_text(
        yaml.safe_dump({"config": {"kafka-mirror:datacenter": "dc-b", "kafka-mirror:topology": "topology.yaml"}})
    )
    monkeypatch.chdir(tmp_path)  # `--stack dcb` reads stacks/Pulumi.dcb.yaml here
    topology = parse_topology(raw)
    plan = plan_topology(topology)
    assert sorted((f.id, f.run_in) for f in plan.flows) == sorted([(flow_id, "dc-b"), (f"{b}->{a}", "dc-a")])
    spec = parse_flow_spec(flow_spec_for(topology, plan.flow(flow_id), str(tmp_path)))  # what the deploy runs
    stack = ["--stack", "dcb", "--flow", flow_id]
    by_file = ["--topology", str(tmp_path / "topology.yaml"), "--flow", flow_id]

    create_topic(clusters.source, topic, 1)
    produce(clusters.source, topic, [{"value": f"a-{i}".encode(), "partition": 0} for i in range(100)])
    commit(clusters.source, group, topic, GROUP_AT)
    log, run = driver_log, StreamingRun(spec, spark)
    run.start()
    try:
        run.wait_for_first_batch(clusters.target, remote, 1, 100)

        # acls: the commands for this flow's clusters and topic (the source asked which topics match)
        code, grants = cli(log, "acls", *by_file)
        assert code == 0
        by_side = {(g["side"], g["resource_type"], g["name"]) for g in grants}
        assert ("source", "TOPIC", topic) in by_side and ("target", "TOPIC", control_topic()) in by_side
        assert all(clusters.source in g["command"] for g in grants if g["side"] == "source")
        assert all(clusters.target in g["command"] for g in grants if g["side"] == "target")

        # translate: the group's checkpoint (emitted by the running mirror) maps 40 onto the remote topic
        deadline, translated = time.monotonic() + 60, None
        while time.monotonic() < deadline:
            code, translated = cli(log, "translate", *by_file, "--group", group)
            if code == 0 and translated:
                break
            time.sleep(0.5)
        assert translated == [
            {"topic": remote, "partition": 0, "upstream_offset": GROUP_AT, "downstream_offset": GROUP_AT}
        ]
        # failover --dry-run: the plan for the group, nothing committed on the target
        code, dry = cli(log, "failover", *by_file, "--group", group, "--dry-run")
        assert code == 0 and dry["dry_run"] is True and (dry["moved"], dry["refused"]) == (1, 0)
        (row,) = dry["groups"]
        assert row["group"] == group and row["result"] == "planned" and f"{remote}[0] -> {GROUP_AT}" in row["detail"]
        assert committed_offsets(admin_client(spec.target), group, b) == {}

        # pause from the stack: the control record on the target, obeyed by the driver
        assert main(["pause", *stack, "--reason", "topology e2e"]) == 0
        control = newest_record([(m.key(), m.value()) for m in read_partition0(spec.target, control_topic())], flow_id)
        assert control is not None and control.paused and control.reason == "topology e2e"
        log.wait_for('"state": "paused"', 60)
        produce(clusters.source, topic, [{"value": f"b-{i}".encode(), "partition": 0} for i in range(50)])
        time.sleep(3)  # ~15 triggers: none may copy
        assert target_count(clusters.target, remote, 1) == 100, "a paused flow copied records"
        code, paused = cli(log, "status", *stack)
        assert code == 4 and paused["paused"] is True and paused["running"] is True
        assert paused["lag"] == {topic: 50} and paused["control"]["reason"] == "topology e2e"
        # every flow: the stack's (only a->b, paused: 4); the topology's (b->a never ran: 1, the worst)
        code, flows = cli(log, "status", "--stack", "dcb")
        assert code == 4 and [(s["flow"], s["paused"]) for s in flows] == [(flow_id, True)]
        code, flows = cli(log, "status", "--topology", str(tmp_path / "topology.yaml"))
        assert code == 1 and [s["flow"] for s in flows] == [f.id for f in plan.flows]  # plan order
        states = {s["flow"]: (s["running"], s["paused"], s["heartbeat_age_ms"]) for s in flows}
        assert states[f"{b}->{a}"] == (False, False, None) and states[flow_id][:2] == (True, True)
        code, lag = cli(log, "lag", *by_file)
        assert code == 0
        assert [(r["group"], r["topic"], r["offset"], r["lag"]) for r in lag] == [(spec.consumer_group, topic, 100, 50)]

        # resume from the stack: the 50 arrive, status says running with nothing behind
        assert main(["resume", *stack]) == 0
        consume_all(clusters.target, remote, 1, timeout_s=60, expect=150)
        deadline = time.monotonic() + 30
        while True:
            code, running = cli(log, "status", *stack)
            if (code, running["lag_total"]) == (0, 0) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert (code, running["paused"], running["running"], running["lag"]) == (0, False, True, {topic: 0})
        assert run.thread.is_alive() and not run.failures
    finally:
        run.end()
        delete_control_topic(clusters.target)
    assert not run.thread.is_alive() and run.failures == []
