"""`kmirror diff`: the pure plan diff, its renderings, the command and the CI workflow."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from kmirror.estate.diff import diff_plans
from kmirror.estate.diff_render import MARKER, render_markdown, render_text
from kmirror_cli.cli import COMMAND_MODULES, build_parser, main

DEFAULT_POLICY = {"type": "default", "separator": "."}


def flow(source: str, target: str, run_in: str, **overrides: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": f"{source}->{target}",
        "source": source,
        "target": target,
        "topology": "dr",
        "run_in": run_in,
        "topics": ["orders.*"],
        "topics_exclude": [],
        "groups": [".*"],
        "groups_exclude": [],
        "replication_policy": dict(DEFAULT_POLICY),
        "producer": {"compression.type": "lz4"},
        "consumer": {},
        "spark": {"executors": 2},
        "max_records_per_trigger": 500000,
    }
    entry.update(overrides)
    return entry


def plan(*flows: dict[str, Any]) -> dict[str, Any]:
    datacenters: dict[str, list[str]] = {}
    for f in sorted(flows, key=lambda f: f["id"]):
        datacenters.setdefault(f["run_in"], []).append(f["id"])
    return {"flows": sorted(flows, key=lambda f: f["id"]), "datacenters": datacenters}


BASE = plan(flow("west-1", "east-1", "east"), flow("east-1", "west-1", "west"))


def test_identical_plans_have_no_change() -> None:
    diff = diff_plans(BASE, copy.deepcopy(BASE))
    assert not diff.changed
    assert diff.to_dict() == {"datacenters": {}, "warnings": []}
    assert render_text(diff) == "kmirror diff: no flow changes.\n"


def test_added_and_removed_flows_are_listed_under_their_datacenter() -> None:
    head = plan(flow("west-1", "east-1", "east"), flow("central", "east-1", "east"))
    assert diff_plans(BASE, head).to_dict() == {
        "datacenters": {
            "east": {"added": ["central->east-1"], "removed": [], "moved": [], "changed": []},
            "west": {"added": [], "removed": ["east-1->west-1"], "moved": [], "changed": []},
        },
        "warnings": [],
    }


def test_moved_flow_is_listed_once_under_the_new_datacenter() -> None:
    head = plan(flow("west-1", "east-1", "west"), flow("east-1", "west-1", "west"))
    assert diff_plans(BASE, head).to_dict() == {
        "datacenters": {
            "west": {
                "added": [],
                "removed": [],
                "moved": [{"id": "west-1->east-1", "from": "east", "to": "west"}],
                "changed": [],
            },
        },
        "warnings": [],
    }


def test_changed_settings_are_reported_per_field() -> None:
    head = plan(
        flow(
            "west-1",
            "east-1",
            "east",
            topics=["orders.*", "payments.*"],
            producer={"compression.type": "zstd"},
            spark={"executors": 4},
            max_records_per_trigger=100000,
        ),
        flow("east-1", "west-1", "west"),
    )
    assert diff_plans(BASE, head).to_dict()["datacenters"] == {
        "east": {
            "added": [],
            "removed": [],
            "moved": [],
            "changed": [
                {
                    "id": "west-1->east-1",
                    "changes": [
                        {"field": "topics", "old": ["orders.*"], "new": ["orders.*", "payments.*"]},
                        {"field": "max_records_per_trigger", "old": 500000, "new": 100000},
                        {"field": "producer.compression.type", "old": "lz4", "new": "zstd"},
                        {"field": "spark.executors", "old": 2, "new": 4},
                    ],
                }
            ],
        }
    }


def test_widened_topic_regex_lists_topics_that_start_replicating() -> None:
    head = plan(
        flow("west-1", "east-1", "east", topics=["orders.*", "payments\\..*"]),
        flow("east-1", "west-1", "west", topics=["nothing"]),
    )
    topics = {
        "west-1": ["orders", "payments.eu", "payments.us", "audit", "__consumer_offsets"],
        "east-1": ["orders.v2", "east-only"],
    }
    result = diff_plans(BASE, head, topics).to_dict()["datacenters"]
    assert result["east"]["topics"] == [{"id": "west-1->east-1", "start": ["payments.eu", "payments.us"], "stop": []}]
    assert result["west"]["topics"] == [{"id": "east-1->west-1", "start": [], "stop": ["orders.v2"]}]
    text = render_text(diff_plans(BASE, head, topics))
    assert "  topics of west-1->east-1: start payments.eu, payments.us; stop -\n" in text


def test_policy_change_that_renames_remote_topics_warns() -> None:
    head = plan(
        flow("west-1", "east-1", "east", replication_policy={"type": "identity"}), flow("east-1", "west-1", "west")
    )
    diff = diff_plans(BASE, head)
    assert diff.warnings == [
        "west-1->east-1: replication_policy default('.') -> identity renames remote topics on east-1 "
        "(west-1.orders -> orders): consumers on the target will see new topic names"
    ]
    assert diff.to_dict()["datacenters"]["east"]["changed"] == [
        {
            "id": "west-1->east-1",
            "changes": [{"field": "replication_policy", "old": DEFAULT_POLICY, "new": {"type": "identity"}}],
        }
    ]


def test_separator_change_warning_uses_a_topic_from_the_topics_file() -> None:
    head = plan(
        flow("west-1", "east-1", "east", replication_policy={"type": "default", "separator": "_"}),
        flow("east-1", "west-1", "west"),
    )
    diff = diff_plans(BASE, head, {"west-1": ["audit", "orders-eu"]})
    assert diff.warnings == [
        "west-1->east-1: replication_policy default('.') -> default('_') renames remote topics on east-1 "
        "(west-1.orders-eu -> west-1_orders-eu): consumers on the target will see new topic names"
    ]


def test_secret_reference_change_is_shown_and_secret_values_are_hidden() -> None:
    def secured(password: Any, key_password: Any) -> dict[str, Any]:
        security = {
            "protocol": "SASL_SSL",
            "scram": {"mechanism": "SCRAM-SHA-512", "username": "mirror", "password": password},
            "tls": {"ca": {"file": "/etc/ca.pem"}, "key_password": key_password},
        }
        return plan(
            flow("west-1", "east-1", "east", target_security=security, consumer={"sasl.password": key_password})
        )

    diff = diff_plans(secured({"env": "EAST_PW"}, "hunter2"), secured({"k8s_secret": "east", "key": "pw"}, "s3cret"))
    assert diff.to_dict()["datacenters"]["east"]["changed"] == [
        {
            "id": "west-1->east-1",
            "changes": [
                {"field": "consumer.sasl.password", "old": "<redacted>", "new": "<redacted>"},
                {
                    "field": "target_security.scram.password",
                    "old": {"env": "EAST_PW"},
                    "new": {"k8s_secret": "east", "key": "pw"},
                },
                {"field": "target_security.tls.key_password", "old": "<redacted>", "new": "<redacted>"},
            ],
        }
    ]
    rendered = render_markdown(diff) + render_text(diff) + json.dumps(diff.to_dict())
    assert "hunter2" not in rendered and "s3cret" not in rendered


def test_reference_strings_in_password_keys_are_shown() -> None:
    head = plan(flow("west-1", "east-1", "east", producer={"compression.type": "lz4", "sasl.password": "${env:PW}"}))
    diff = diff_plans(plan(flow("west-1", "east-1", "east")), head)
    assert diff.to_dict()["datacenters"]["east"]["changed"][0]["changes"] == [
        {"field": "producer.sasl.password", "old": None, "new": "${env:PW}"}
    ]


def test_text_rendering() -> None:
    head = plan(flow("west-1", "east-1", "west", topics=["orders.*|payments.*"]), flow("central", "west-1", "west"))
    assert render_text(diff_plans(BASE, head)) == (
        "kmirror diff: 1 datacenter affected: 1 flow added, 1 removed, 1 moved, 1 changed.\n"
        "west:\n"
        "  + central->west-1  added\n"
        "  - east-1->west-1  removed\n"
        "  > west-1->east-1  moved east -> west\n"
        "  ~ west-1->east-1  changed\n"
        "      topics: [orders.*] -> [orders.*|payments.*]\n"
    )


def test_markdown_rendering() -> None:
    head = plan(flow("west-1", "east-1", "east", topics=["orders.*|payments.*"]), flow("central", "west-1", "west"))
    clusters = {"west-1": "west", "east-1": "east", "central": "central"}
    assert render_markdown(diff_plans(BASE, head), clusters) == "\n".join(
        [
            MARKER,
            "### kmirror diff",
            "",
            "**2 datacenters affected: 1 flow added, 1 removed, 0 moved, 1 changed.**",
            "",
            "#### east",
            "",
            "| flow | change | details |",
            "|---|---|---|",
            "| `west-1->east-1` | changed | `topics`: `[orders.*]` → `[orders.*\\|payments.*]` |",
            "",
            "#### west",
            "",
            "| flow | change | details |",
            "|---|---|---|",
            "| `central->west-1` | added | |",
            "| `east-1->west-1` | removed | |",
            "",
            "#### Topology",
            "",
            "```mermaid",
            "graph LR",
            '  subgraph dc_central ["central"]',
            '    central["central"]',
            "  end",
            '  subgraph dc_east ["east"]',
            '    east_1["east-1"]',
            "  end",
            '  subgraph dc_west ["west"]',
            '    west_1["west-1"]',
            "  end",
            "  central -->|added| west_1",
            "  east_1 -.->|removed| west_1",
            "  west_1 -->|changed| east_1",
            "  linkStyle 0 stroke:#2da44e,stroke-width:3px",
            "  linkStyle 1 stroke:#cf222e,stroke-width:2px,stroke-dasharray:5 5",
            "  linkStyle 2 stroke:#fb8500,stroke-width:3px",
            "  classDef added fill:#dafbe1,stroke:#2da44e",
            "  classDef removed fill:#ffebe9,stroke:#cf222e,stroke-dasharray:5 5",
            "  class central added",
            "```",
            "",
        ]
    )


# ---------------------------------------------------------------------------- the command


def write_plan(path: Path, plan_dict: dict[str, Any]) -> str:
    path.write_text(json.dumps(plan_dict))
    return str(path)


def test_exit_code_is_0_without_change_1_with_change_2_on_error(tmp_path: Path, capsys: Any) -> None:
    base = write_plan(tmp_path / "base.json", BASE)
    same = write_plan(tmp_path / "same.json", copy.deepcopy(BASE))
    head = write_plan(tmp_path / "head.json", plan(flow("west-1", "east-1", "east")))
    assert main(["diff", base, same, "--exit-code"]) == 0
    assert main(["diff", base, head, "--exit-code"]) == 1
    assert main(["diff", base, head]) == 0
    capsys.readouterr()
    assert main(["diff", base, str(tmp_path / "missing.json"), "--exit-code"]) == 2
    assert capsys.readouterr().err.startswith(f"kmirror diff: cannot read {tmp_path / 'missing.json'}: ")


def test_json_output_is_the_contract(tmp_path: Path, capsys: Any) -> None:
    base = write_plan(tmp_path / "base.json", BASE)
    head = write_plan(tmp_path / "head.json", plan(flow("west-1", "east-1", "east")))
    assert main(["diff", base, head, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "datacenters": {"west": {"added": [], "removed": ["east-1->west-1"], "moved": [], "changed": []}},
        "warnings": [],
    }


def test_topics_file_and_malformed_plan(tmp_path: Path, capsys: Any) -> None:
    base = write_plan(tmp_path / "base.json", BASE)
    head = write_plan(
        tmp_path / "head.json", plan(flow("west-1", "east-1", "east", topics=[".*"]), flow("east-1", "west-1", "west"))
    )
    (tmp_path / "topics.yaml").write_text("west-1: [orders, audit, __consumer_offsets]\n")
    assert main(["diff", base, head, "--format", "json", "--topics-file", str(tmp_path / "topics.yaml")]) == 0
    changed = json.loads(capsys.readouterr().out)["datacenters"]["east"]
    assert changed["topics"] == [{"id": "west-1->east-1", "start": ["audit"], "stop": []}]
    (tmp_path / "bad.json").write_text('{"flows": [{"id": "a->b"}], "datacenters": {}}')
    assert main(["diff", base, str(tmp_path / "bad.json")]) == 2
    assert "flows[0].run_in: required key is missing" in capsys.readouterr().err


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_git_ref_reads_the_file_as_committed(tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "config", "user.email", "ci@example.com")
    git(tmp_path, "config", "user.name", "ci")
    write_plan(tmp_path / "plan.json", BASE)
    git(tmp_path, "add", "plan.json")
    git(tmp_path, "commit", "-q", "-m", "base")
    write_plan(tmp_path / "plan.json", plan(flow("west-1", "east-1", "west"), flow("east-1", "west-1", "west")))
    monkeypatch.chdir(tmp_path)
    assert main(["diff", "git:HEAD:plan.json", "plan.json", "--format", "json", "--exit-code"]) == 1
    assert json.loads(capsys.readouterr().out)["datacenters"] == {
        "west": {
            "added": [],
            "removed": [],
            "moved": [{"id": "west-1->east-1", "from": "east", "to": "west"}],
            "changed": [],
        }
    }
    assert main(["diff", "--git-base", "HEAD", "--topology", "plan.json", "--exit-code"]) == 1
    assert main(["diff", "git:main:plan.json", "git:HEAD:plan.json", "--exit-code"]) == 0
    capsys.readouterr()
    assert main(["diff", "git:nope:plan.json", "plan.json"]) == 2
    assert capsys.readouterr().err.startswith("kmirror diff: git show nope:plan.json failed: ")


# ---------------------------------------------------------------------------- the workflow

ROOT = Path(__file__).resolve().parent.parent


def test_workflow_parses_and_runs_only_existing_commands_and_targets() -> None:
    workflow = yaml.safe_load((ROOT / ".github/workflows/preview.yml").read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert set(triggers) == {"pull_request", "push"}
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    scripts = "\n".join(str(step.get("run", "")) for step in steps)
    subcommands = set(re.findall(r"\bkmirror (\w[\w-]*)", scripts))
    targets = set(re.findall(r"\bmake (\w[\w-]*)", scripts))
    assert subcommands == {"validate", "diff", "stack-info"} and subcommands <= set(COMMAND_MODULES)
    makefile_targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    assert targets == {"setup", "lint"} and targets <= makefile_targets
    diff_lines = re.findall(r"kmirror (diff .*?)(?: >|\)|$)", scripts, re.MULTILINE)
    parsed = [build_parser("diff").parse_args(line.replace('"$BASE"', "origin/main").split()) for line in diff_lines]
    assert [(a.git_base, a.format) for a in parsed] == [("origin/main", "markdown"), ("origin/main", "stack-order")]
    pulumi = [s for s in steps if str(s.get("uses", "")).startswith("pulumi/actions@")]
    assert [s.get("with", {}).get("command") for s in pulumi] == ["preview", None]  # None: installs the CLI for `up`
    assert workflow["jobs"]["up"]["environment"] == "production"
    assert set(workflow["jobs"]["up"]["needs"]) == {"test", "diff", "image"}  # tests gate every deploy
    deploy = (Path(__file__).resolve().parents[1] / "scripts" / "ci-deploy.sh").read_text()
    assert "scripts/ci-deploy.sh" in scripts and "pulumi up" in deploy  # the per-stack loop (tests/test_ci_deploy.py)
    assert "needs.diff.outputs.order" in str(workflow["jobs"]["up"])
    uses = [str(s["uses"]) for s in steps if "uses" in s]
    assert uses and all(re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", u) for u in uses), uses  # pinned by SHA
    assert "PULUMI_ACCESS_TOKEN" not in (ROOT / ".github/workflows/preview.yml").read_text()  # OIDC login


# ---------------------------------------------------------------------------- topology inputs (the planner)

EXAMPLES = ROOT / "docs/examples"


def test_topology_files_are_planned_and_compared(capsys: Any) -> None:
    base, head = str(EXAMPLES / "ci-preview-base.yaml"), str(EXAMPLES / "ci-preview-head.yaml")
    assert main(["diff", base, head, "--format", "json", "--exit-code"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert {dc: (d["added"], d["removed"], d["moved"]) for dc, d in result["datacenters"].items()} == {
        "central": ([], ["east-1->central"], []),
        "west": (["central->west-1"], [], [{"id": "west-1->central", "from": "central", "to": "west"}]),
        "east": ([], [], []),
    }
    changes = {c["field"]: (c["old"], c["new"]) for c in result["datacenters"]["east"]["changed"][0]["changes"]}
    assert changes["target_security.scram.password"] == (
        {"env": "EAST_MIRROR_PASSWORD"},
        {"k8s_secret": "east-mirror", "key": "password"},
    )
    assert changes["producer.compression.type"] == ("lz4", "zstd")
    assert len(result["warnings"]) == 1 and "(west-1.orders -> orders)" in result["warnings"][0]
    assert main(["diff", base, base, "--exit-code"]) == 0


def test_invalid_topology_exits_2_with_the_validation_message(tmp_path: Path, capsys: Any) -> None:
    (tmp_path / "bad.yaml").write_text("clusters: {}\ntopologies: [{name: dr, pattern: active-passive}]\n")
    assert main(["diff", str(EXAMPLES / "ci-preview-base.yaml"), str(tmp_path / "bad.yaml"), "--exit-code"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kmirror diff: ") and f"problem(s) in {tmp_path / 'bad.yaml'}:" in err
