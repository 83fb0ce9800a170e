"""Failover and failback of many groups at once, from the topology alone, on real brokers
(issue 46): `--group` patterns and `--all-groups`, each group moved or refused on its own, one
report (JSON and table) with per-group result, checkpoint age and records at risk; `--dry-run`
writes nothing. The mirror pass is the real copy loop and FailoverListener (no Spark), as in
test_failover_e2e. On today's main `--all-groups` and patterns do not exist (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kmirror.estate.planner import flow_spec_for, parse_topology, plan_topology
from kmirror.flow.spec import parse_flow_spec
from kmirror_cli.cli import main
from kmirror_engine.clients.factory import admin_client
from kmirror_engine.failover.failover_listener import FailoverListener
from kmirror_engine.failover.group_sync import committed_offsets
from tests.e2e.test_failover_e2e import END, FOREIGN, commit, mirror_pass
from tests.kafka_helpers import add_fences, create_topic, dr_topology, produce

pytestmark = pytest.mark.e2e


def report(capsys: Any, *argv: str) -> tuple[int, dict[str, Any]]:
    code = main([*argv, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def results(out: dict[str, Any]) -> dict[str, str]:
    return {g["group"]: g["result"] for g in out["groups"]}


def test_many_groups_fail_over_and_back_each_on_its_own(
    clusters: Any, unique: str, tmp_path: Path, capsys: Any
) -> None:
    a, b = f"s{unique}", f"t{unique}"
    topic, remote = f"orders-{unique}", f"s{unique}.orders-{unique}"
    g1, g2, g3 = f"app1-{unique}", f"app2-{unique}", f"app3-{unique}"
    raw = dr_topology(clusters, a, b, [topic], [f"app.*-{unique}"], sync_group_offsets=False)
    (topology_file := tmp_path / "topology.yaml").write_text(yaml.safe_dump(raw))
    topology = parse_topology(raw)
    spec = parse_flow_spec(flow_spec_for(topology, plan_topology(topology).flow(f"{a}->{b}"), str(tmp_path)))
    flow = ["--topology", str(topology_file), "--flow", f"{a}->{b}"]

    create_topic(clusters.source, topic)
    create_topic(clusters.source, f"unmirrored-{unique}")
    create_topic(clusters.target, remote)
    produce(clusters.target, remote, [{"value": f"unrelated-{i}".encode(), "partition": 0} for i in range(FOREIGN)])
    produce(clusters.source, topic, [{"value": f"v{i}".encode(), "partition": 0} for i in range(10)])
    add_fences(clusters.source, topic, 1)
    commit(clusters.source, g1, topic, 4)
    commit(clusters.source, g2, topic, 6)
    commit(clusters.source, g3, f"unmirrored-{unique}", 0)  # nothing of it translates: refused on its own
    commit(clusters.source, f"other-{unique}", topic, 5)  # not in the flow's groups: never touched
    listener = FailoverListener.for_flow(spec, serve_metrics=False)
    mirror_pass(spec, topic, remote, END, 0, listener)
    listener.close(final=True)

    # status from the topology alone: running (fresh heartbeat), nothing behind, ages known
    assert main(["status", *flow, "--format", "json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert (status["flow"], status["running"], status["lag"], status["lag_total"]) == (f"{a}->{b}", True, {topic: 0}, 0)
    for key in ("heartbeat_age_ms", "last_copy_age_ms", "newest_checkpoint_age_ms"):
        assert 0 <= status[key] < 60_000, (key, status)
    assert main(["lag", *flow, "--format", "json"]) == 0  # `kmirror lag` from the topology too
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["group"], row["topic"], row["offset"], row["lag"]) == (spec.consumer_group, topic, END, 0)
    produce(clusters.source, topic, [{"value": b"late", "partition": 0}])  # lag grows; a stale heartbeat: exit 1
    assert main(["status", *flow, "--format", "json", "--stale-after", "0.001"]) == 1
    status = json.loads(capsys.readouterr().out)
    assert (status["running"], status["lag"]) == (False, {topic: 1})

    # a dry run of a pattern: a plan per group, nothing written, exit 1 (one group would be refused)
    code, out = report(capsys, "failover", *flow, "--group", f"app*-{unique}", "--dry-run")
    assert code == 1 and out["dry_run"] is True and (out["moved"], out["refused"]) == (2, 1)
    assert results(out) == {g1: "planned", g2: "planned", g3: "refused"}
    rows = {g["group"]: g for g in out["groups"]}
    assert f"{remote}[0] -> {4 + FOREIGN}" in rows[g1]["detail"]
    assert f"{remote}[0] -> {6 + FOREIGN}" in rows[g2]["detail"]
    assert rows[g3]["detail"] == f"error: nothing to fail over: no offset of group {g3!r} translates onto {b}"
    for g in (g1, g2):  # the mirror's checkpoints for them: their age, and nothing at risk (all mirrored)
        assert isinstance(rows[g]["checkpoint_age_ms"], int) and rows[g]["checkpoint_age_ms"] >= 0
        assert rows[g]["records_at_risk"] == 0
    assert rows[g3]["checkpoint_age_ms"] is None and rows[g3]["records_at_risk"] is None
    assert all(committed_offsets(admin_client(spec.target), g, b) == {} for g in (g1, g2, g3))

    # --all-groups: the two translatable groups committed on b, the third refused, `other` untouched
    code, out = report(capsys, "failover", *flow, "--all-groups")
    assert code == 1 and results(out) == {g1: "moved", g2: "moved", g3: "refused"}
    assert (out["flow"], out["command"], out["dry_run"]) == (f"{a}->{b}", "failover", False)
    assert committed_offsets(admin_client(spec.target), g1, b) == {(remote, 0): (4 + FOREIGN, "")}
    assert committed_offsets(admin_client(spec.target), g2, b) == {(remote, 0): (6 + FOREIGN, "")}
    assert committed_offsets(admin_client(spec.target), f"other-{unique}", b) == {}

    # the groups read on b, then fail back by pattern (text table): each translated home, forward only
    commit(clusters.target, g1, remote, FOREIGN + 8)
    commit(clusters.target, g2, remote, FOREIGN + 9)
    assert main(["failback", *flow, "--group", f"app?-{unique}"]) == 0
    text = capsys.readouterr().out
    assert "failback of 2 group(s) along" in text and "2 group(s) moved, 0 refused" in text
    assert committed_offsets(admin_client(spec.source), g1, a)[(topic, 0)][0] == 8
    assert committed_offsets(admin_client(spec.source), g2, a)[(topic, 0)][0] == 9
