"""Issue 43, blocker 2: a stack whose EKS API endpoint is private (east: `deploy_from_vpc: true`) is
previewed, drift-checked and deployed from the self-hosted runner inside its VPC
(`spark.cluster.runner_labels`), never from ubuntu-latest. `kmirror stack-info --matrix/--up-runner`
(kmirror.stack.runners) computes each job's `runs-on`; the workflows take it from there (their own
step scripts are run here, with the real kmirror CLI)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kmirror.errors import ValidationError
from kmirror.stack.config import parse_stack_config
from kmirror.stack.runners import matrix, stack_runner, up_runner
from kmirror_cli.cli import main

ROOT = Path(__file__).resolve().parents[1]
STACKS = ROOT / "stacks"
WORKFLOWS = ROOT / ".github" / "workflows"
EAST = ["self-hosted", "kmirror-east"]
HOSTED = ["ubuntu-latest"]


def _jobs(workflow: str) -> dict[str, Any]:
    return dict(yaml.safe_load((WORKFLOWS / workflow).read_text())["jobs"])


def _east_raw(**cluster: Any) -> dict[str, Any]:
    config = yaml.safe_load((STACKS / "Pulumi.east.yaml").read_text())["config"]
    raw = {k.removeprefix("kafka-mirror:"): v for k, v in config.items() if k.startswith("kafka-mirror:")}
    raw["spark"]["cluster"].update(cluster)
    raw["spark"]["cluster"] = {k: v for k, v in raw["spark"]["cluster"].items() if v is not None}
    return raw


def _stacks_dir(tmp_path: Path, **labels: list[str]) -> Path:
    """The repository's stacks, plus a copy of east per entry (a second private-endpoint stack) with those labels."""
    shutil.copytree(STACKS, tmp_path / "stacks")
    text = (STACKS / "Pulumi.east.yaml").read_text()
    for name, wanted in labels.items():
        edited = text.replace("runner_labels: [self-hosted, kmirror-east]", f"runner_labels: {json.dumps(wanted)}")
        assert edited != text
        (tmp_path / "stacks" / f"Pulumi.{name}.yaml").write_text(edited)
    return tmp_path / "stacks"


def test_each_stack_runs_on_its_own_runner_east_inside_its_vpc() -> None:
    assert stack_runner("east", STACKS) == tuple(EAST)
    assert stack_runner("west", STACKS) == stack_runner("central", STACKS) == tuple(HOSTED)
    assert matrix(["west", "east", "central"], STACKS) == {
        "include": [
            {"stack": "west", "runs_on": HOSTED},
            {"stack": "east", "runs_on": EAST},
            {"stack": "central", "runs_on": HOSTED},
        ]
    }


@pytest.mark.parametrize(
    ("order", "runner"),
    [(["central", "west"], HOSTED), (["central", "east", "west", "local"], EAST), (["east"], EAST), ([], HOSTED)],
)
def test_the_up_job_runs_where_every_stack_of_its_order_is_reachable(order: list[str], runner: list[str]) -> None:
    assert up_runner(order, STACKS) == runner


def test_an_order_needing_two_vpc_runners_is_refused_naming_stacks_runners_and_fixes(tmp_path: Path) -> None:
    stacks = _stacks_dir(tmp_path, north=["self-hosted", "kmirror-north"], south=EAST)
    assert up_runner(["east", "south", "central"], stacks) == EAST  # the same runner twice is one runner
    with pytest.raises(ValidationError) as caught:
        up_runner(["central", "east", "north"], stacks)
    text = str(caught.value)
    assert "east on ['self-hosted', 'kmirror-east']" in text and "north on ['self-hosted', 'kmirror-north']" in text
    assert "one runner that reaches every one of their VPCs" in text and "public_access_cidrs" in text
    assert "kafka-mirror:spark.cluster.runner_labels" in text


def test_stack_info_prints_the_matrix_and_the_up_runner_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stack-info", "--stacks-dir", str(STACKS), "--matrix", "west", "east", "central"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("\n") == 1  # one line: a GITHUB_OUTPUT value
    assert json.loads(printed) == matrix(["west", "east", "central"], STACKS)
    assert main(["stack-info", "--stacks-dir", str(STACKS), "--up-runner", '["central","east","west"]']) == 0
    assert json.loads(capsys.readouterr().out) == EAST
    assert main(["stack-info", "--stacks-dir", str(STACKS), "east", "region"]) == 0  # unchanged
    assert capsys.readouterr().out == "us-east-1\n"
    assert main(["stack-info", "--up-runner", "east"]) == 2
    assert "expected a JSON list of stacks" in capsys.readouterr().err


def test_stack_info_exits_2_when_the_order_needs_two_vpc_runners(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stacks = _stacks_dir(tmp_path, north=["self-hosted", "kmirror-north"])
    assert main(["stack-info", "--stacks-dir", str(stacks), "--up-runner", '["east","north"]']) == 2
    assert "needs two different VPC runners" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        ({"runner_labels": None}, "runner_labels: required with deploy_from_vpc: true"),
        ({"runner_labels": []}, "runner_labels: required with deploy_from_vpc: true"),
        ({"runner_labels": "self-hosted"}, "runner_labels: must be a list, got 'self-hosted'"),
        ({"runner_labels": ["ubuntu-latest"]}, "runner_labels.0: 'ubuntu-latest' is a GitHub-hosted runner"),
        ({"runner_labels": ["self-hosted", "ubuntu-24.04"]}, "runner_labels.1: 'ubuntu-24.04' is a GitHub-hosted"),
        ({"runner_labels": ["self hosted"]}, "runner_labels.0: 'self hosted' is not a runner label"),
        ({"runner_labels": ["a", "a"]}, "runner_labels: ['a', 'a'] names a label twice"),
        (
            {"deploy_from_vpc": False, "endpoint_public_access": True, "public_access_cidrs": ["203.0.113.0/24"]},
            "runner_labels: ['self-hosted', 'kmirror-east'] is only used with deploy_from_vpc: true",
        ),
    ],
)
def test_runner_labels_are_required_with_a_private_endpoint_and_well_formed(
    cluster: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_stack_config(_east_raw(**cluster), "east")
    assert f"kafka-mirror:spark.cluster.{message}" in str(caught.value)


def _run_step(script: str, env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """A workflow step's `run:` script under bash in the repository, with GITHUB_OUTPUT: what it set."""
    output = tmp_path / "github_output"
    output.write_text("")
    done = subprocess.run(
        ["bash", "-e", "-c", script],
        env={**os.environ, **env, "GITHUB_OUTPUT": str(output)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(line.split("=", 1) for line in output.read_text().splitlines())


def test_the_preview_and_up_jobs_take_their_runners_from_the_diff_job(tmp_path: Path) -> None:
    jobs = _jobs("preview.yml")
    [step] = [s for s in jobs["diff"]["steps"] if s.get("id") == "runners"]
    assert step["env"]["ORDER"] == "${{ steps.order.outputs.order }}"
    assert jobs["diff"]["outputs"]["matrix"] == "${{ steps.runners.outputs.matrix }}"
    assert jobs["diff"]["outputs"]["up_runs_on"] == "${{ steps.runners.outputs.up_runs_on }}"
    outputs = _run_step(step["run"], {"ORDER": '["central","east","west","local"]'}, tmp_path)
    deployed = sorted(p.name.split(".")[1] for p in STACKS.glob("Pulumi.*.yaml") if ".local." not in p.name)
    assert sorted(i["stack"] for i in json.loads(outputs["matrix"])["include"]) == deployed
    assert json.loads(outputs["matrix"]) == matrix(["west", "east", "central"], STACKS)
    assert json.loads(outputs["up_runs_on"]) == EAST
    preview = jobs["preview"]
    assert preview["strategy"]["matrix"] == "${{ fromJSON(needs.diff.outputs.matrix) }}"
    assert preview["runs-on"] == "${{ matrix.runs_on }}" and "diff" in preview["needs"]
    assert jobs["up"]["runs-on"] == "${{ fromJSON(needs.diff.outputs.up_runs_on) }}" and "diff" in jobs["up"]["needs"]


def test_the_drift_jobs_take_their_runners_from_a_stacks_job(tmp_path: Path) -> None:
    jobs = _jobs("drift.yml")
    [step] = [s for s in jobs["stacks"]["steps"] if s.get("id") == "runners"]
    assert jobs["stacks"]["outputs"]["matrix"] == "${{ steps.runners.outputs.matrix }}"
    outputs = _run_step(step["run"], {}, tmp_path)
    assert json.loads(outputs["matrix"]) == matrix(["west", "east", "central"], STACKS)
    drift = jobs["drift"]
    assert drift["needs"] == "stacks" and drift["runs-on"] == "${{ matrix.runs_on }}"
    assert drift["strategy"]["matrix"] == "${{ fromJSON(needs.stacks.outputs.matrix) }}"


@pytest.mark.parametrize("workflow", ["preview.yml", "drift.yml"])
def test_no_job_that_reaches_a_stack_runs_on_a_hard_coded_hosted_runner(workflow: str) -> None:
    """Jobs that assume a cloud role for a stack (and so reach its API endpoint) run where stack-info says."""
    for name, job in _jobs(workflow).items():
        reaches = any("configure-aws-credentials" in str(s.get("uses", "")) for s in job["steps"]) or any(
            "ci-deploy.sh" in str(s.get("run", "")) for s in job["steps"]
        )
        if reaches and name != "image":  # the image job pushes to ECR only, never a cluster
            assert "${{" in str(job["runs-on"]), f"{workflow} {name}: runs-on {job['runs-on']!r}"
