"""`kmirror plan` / `kmirror validate`: formats, stack selection, exit codes, and the pure core."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kmirror_cli.cli import main

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGY = str(ROOT / "stacks/topology.yaml")


def run_cli(args: list[str], capsys: Any) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_json_is_the_documented_contract(capsys: Any) -> None:
    code, out, _ = run_cli(["plan", "--topology", TOPOLOGY, "--format", "json"], capsys)
    plan = json.loads(out)
    assert code == 0 and set(plan) == {"flows", "datacenters"}
    ids = [f["id"] for f in plan["flows"]]
    assert ids == sorted(ids)
    dr = next(f for f in plan["flows"] if f["id"] == "west-1->east-1")
    assert {k: dr[k] for k in ("source", "target", "topology", "run_in", "topics", "topics_exclude")} == {
        "source": "west-1",
        "target": "east-1",
        "topology": "dr",
        "run_in": "east",
        "topics": ["orders.*", "payments.*"],
        "topics_exclude": [".*[-.]internal", ".*\\.replica", "__.*", "tmp.*"],  # MM2's excludes + the flow's
    }
    assert dr["replication_policy"] == {"type": "default", "separator": "."}
    assert dr["producer"] == {"compression.type": "zstd"}
    assert dr["groups_exclude"] == ["console-consumer-.*", "connect-.*", "__.*"]
    for dc, flow_ids in plan["datacenters"].items():
        assert all(next(f for f in plan["flows"] if f["id"] == i)["run_in"] == dc for i in flow_ids)


def test_plan_for_one_datacenter_and_one_stack(capsys: Any, monkeypatch: Any) -> None:
    code, out, _ = run_cli(["plan", "--topology", TOPOLOGY, "--datacenter", "west", "--format", "json"], capsys)
    plan = json.loads(out)
    assert code == 0 and list(plan["datacenters"]) == ["west"]
    assert {f["run_in"] for f in plan["flows"]} == {"west"}
    monkeypatch.chdir(ROOT)
    code, out, _ = run_cli(["plan", "--stack", "east", "--format", "json"], capsys)
    assert code == 0 and list(json.loads(out)["datacenters"]) == ["east"]


def test_unknown_stack_or_datacenter_exits_2(capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.chdir(ROOT)
    code, _, err = run_cli(["plan", "--stack", "nope"], capsys)
    assert code == 2 and "--stack: no stack config 'stacks/Pulumi.nope.yaml'" in err
    code, _, err = run_cli(["plan", "--datacenter", "eastt"], capsys)
    assert code == 2 and "--datacenter: unknown datacenter 'eastt' (did you mean 'east'?)" in err


def test_text_mermaid_and_dot(capsys: Any) -> None:
    code, out, _ = run_cli(["plan", "--topology", TOPOLOGY], capsys)
    assert code == 0 and "datacenter east: 3 flow(s)" in out and "west-1->east-1" in out
    assert "datacenter onprem: no flows run here" in out
    _, mermaid, _ = run_cli(["plan", "--topology", TOPOLOGY, "--format", "mermaid"], capsys)
    assert mermaid.startswith("flowchart LR\n")
    assert '  subgraph dc_east["datacenter east"]' in mermaid
    assert '  c_west_1 -->|"dr: orders.*, payments.*"| c_east_1' in mermaid
    _, dot, _ = run_cli(["plan", "--topology", TOPOLOGY, "--format", "dot"], capsys)
    assert dot.startswith("digraph kafka_mirror {") and "c_dc_old -> c_aws_1" in dot
    # no secret reference or config leaks into any rendering
    for text in (out, mermaid, dot):
        assert "east1ScramPassword" not in text and "keytab" not in text


def test_validate_exit_codes_and_messages(tmp_path: Path, capsys: Any) -> None:
    code, out, _ = run_cli(["validate", "--topology", TOPOLOGY], capsys)
    assert code == 0 and out.endswith("valid; 11 flow(s) in 6 datacenter(s)\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "clusters:\n  west-1: {bootstrap_servers: 'w:1', datacenter: west}\n"
        "topologies: [{name: dr, pattern: active-passive, primary: west-1, standby: eas-1}]\n"
    )
    code, out, err = run_cli(["validate", "--topology", str(bad)], capsys)
    assert code == 2 and out == ""
    assert err == (
        f"kmirror validate: 1 problem(s) in {bad}:\n"
        "  - topologies[0].standby: unknown cluster 'eas-1' (did you mean 'west-1'?); declare it under clusters\n"
    )
    code, _, err = run_cli(["validate", "--topology", str(tmp_path / "missing.yaml")], capsys)
    assert code == 2 and "file not found" in err
    bad.write_text("clusters: [\n")
    code, _, err = run_cli(["validate", "--topology", str(bad)], capsys)
    assert code == 2 and "not valid YAML" in err and "Traceback" not in err


def test_failed_plan_leaves_no_output_file(tmp_path: Path, capsys: Any) -> None:
    out_file = tmp_path / "plan.json"
    bad = tmp_path / "bad.yaml"
    bad.write_text("clusters: {}\ntopologies: []\n")
    code, _, _ = run_cli(["plan", "--topology", str(bad), "--format", "json", "--output", str(out_file)], capsys)
    assert code == 2 and not out_file.exists() and list(tmp_path.iterdir()) == [bad]
    code, _, _ = run_cli(["plan", "--topology", TOPOLOGY, "--format", "json", "--output", str(out_file)], capsys)
    assert code == 0 and json.loads(out_file.read_text())["flows"]
