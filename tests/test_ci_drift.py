"""Drift (issue 43, "Day two"): the deploy script refreshes each stack before its `up`, and a
nightly workflow runs `pulumi preview --refresh --expect-no-changes` per stack (scripts/ci-drift.sh,
run here with a stand-in `pulumi`), failing with the stack and the fix when the cloud drifted."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.test_ci_deploy import ROLES, constraint, deploy

ROOT = Path(__file__).resolve().parents[1]
DRIFT = yaml.safe_load((ROOT / ".github" / "workflows" / "drift.yml").read_text())


def test_each_stack_is_refreshed_before_its_up(tmp_path: Path) -> None:
    code, log, err = deploy(tmp_path, ["central", "east"], ROLES)
    assert code == 0, err
    runs = [line.split(" key=")[0] for line in log if line.startswith("pulumi ") and "config set" not in line]
    assert [(r.split()[1], r.split("--stack ")[1].split()[0]) for r in runs] == [
        ("refresh", "acme/central"),
        ("up", "acme/central"),
        ("refresh", "acme/east"),
        ("up", "acme/east"),
    ]
    assert all("--yes" in r for r in runs)
    refreshes = [line for line in log if line.startswith("pulumi refresh")]
    assert "key=AK-deploy-central" in refreshes[0] and "region=us-east-1" in refreshes[1]  # the stack's own


def test_drift_detection_runs_nightly_for_every_deployed_stack_read_only() -> None:
    on = DRIFT[True] if True in DRIFT else DRIFT["on"]  # YAML 1.1 reads the `on` key as True
    assert on["schedule"][0]["cron"].split()[2:] == ["*", "*", "*"]  # every day
    job = DRIFT["jobs"]["drift"]
    deployed = sorted(p.name.split(".")[1] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))
    [runners] = [s for s in DRIFT["jobs"]["stacks"]["steps"] if s.get("id") == "runners"]
    matrix_stacks = runners["run"].split("--matrix ")[1].split(")")[0].split()  # tests/test_ci_runners.py runs it
    assert sorted(matrix_stacks) == [s for s in deployed if s != "local"]
    assert job["strategy"]["fail-fast"] is False
    # Not the PR preview role: a refresh reads the stack's Secrets and the Helm release's storage Secrets
    # (AmazonEKSViewPolicy reads none); the drift role does, in an environment only main's code gets.
    assert job["environment"] == "drift"
    [aws] = [s for s in job["steps"] if "configure-aws-credentials" in str(s.get("uses", ""))]
    assert aws["with"]["role-to-assume"] == "${{ vars.AWS_DRIFT_ROLE_ARN }}"
    assert "AWS_PREVIEW_ROLE_ARN" not in str(DRIFT) and "AWS_DEPLOY_ROLES" not in str(DRIFT)
    [cli] = [s for s in job["steps"] if str(s.get("uses", "")).startswith("pulumi/actions@")]
    assert str(cli["with"]["pulumi-version"]) == constraint("pulumi") and "command" not in cli["with"]
    assert job["steps"][-1]["run"] == "scripts/ci-drift.sh"


def drift(tmp_path: Path, exit_code: int) -> tuple[int, list[str], str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = f'echo "pulumi $* region=${{AWS_REGION:-}}" >> "$LOG"\nexit {exit_code}'
    (bin_dir / "pulumi").write_text(f"#!/usr/bin/env bash\n{stub}\n")
    (bin_dir / "pulumi").chmod(0o755)
    log = tmp_path / "log"
    log.write_text("")
    environ = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "LOG": str(log),
        "STACK": "east",
        "PULUMI_ORG": "acme",
        "KMIRROR": str(ROOT / ".venv" / "bin" / "kmirror"),
    }
    done = subprocess.run(
        [str(ROOT / "scripts" / "ci-drift.sh")], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120
    )
    return done.returncode, log.read_text().splitlines(), done.stdout + done.stderr


def test_a_stack_without_drift_passes(tmp_path: Path) -> None:
    code, log, out = drift(tmp_path, 0)
    assert code == 0 and "stack east: no drift" in out
    assert log == ["pulumi preview --refresh --expect-no-changes --diff --stack acme/east region=us-east-1"]


@pytest.mark.parametrize("exit_code", [1, 255])
def test_a_drifted_stack_fails_naming_the_stack_and_the_fix(tmp_path: Path, exit_code: int) -> None:
    code, _, out = drift(tmp_path, exit_code)
    assert code == exit_code
    assert "::error::stack east: drift" in out and "pulumi refresh --stack acme/east" in out
