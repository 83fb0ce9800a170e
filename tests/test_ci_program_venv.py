"""Issue 43 (first review): the Pulumi program's venv in the jobs that deploy, preview or check drift is
installed from a committed hashed lock (scripts/program-requirements.txt), not by `make setup`
(constraints.txt pins, no hashes, dev tools)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import tomllib
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
LOCK = "scripts/program-requirements.txt"
INSTALL = f".venv/bin/python -m pip install -q --disable-pip-version-check --require-hashes -r {LOCK}"
PROGRAM_JOBS = [("preview.yml", "preview"), ("preview.yml", "up"), ("drift.yml", "drift"), ("drift.yml", "stacks")]
HASH_PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)(?: ;.*?)?((?: --hash=sha256:[0-9a-f]{64})+)")


def _steps(workflow: str, job: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load((WORKFLOWS / workflow).read_text())["jobs"][job]["steps"])


def _runs_the_program(step: dict[str, Any]) -> bool:
    """A step that runs .venv's python or kmirror, a CI script that does, or Pulumi (__main__.py in .venv)."""
    run, uses = str(step.get("run", "")), str(step.get("uses", ""))
    pulumi = uses.startswith("pulumi/actions@") and "command" in step.get("with", {})
    return ".venv/" in run or run in ("scripts/ci-deploy.sh", "scripts/ci-drift.sh") or pulumi


def _lock_pins() -> tuple[list[str], dict[str, str]]:
    text = (ROOT / LOCK).read_text().replace("\\\n", " ")
    lines = [" ".join(line.split()) for line in text.splitlines() if line.strip() and not line.startswith("#")]
    includes = [line for line in lines if line.startswith("-r ")]
    pins = {}
    for line in lines:
        if line in includes:
            continue
        match = HASH_PIN.fullmatch(line)
        assert match, f"{LOCK}: not a hash pin: {line!r}"
        pins[match.group(1).lower()] = match.group(2)
    return includes, pins


@pytest.mark.parametrize(("workflow", "job"), PROGRAM_JOBS)
def test_the_program_venv_is_installed_only_from_the_hashed_lock(workflow: str, job: str) -> None:
    steps = _steps(workflow, job)
    runs = [str(step.get("run", "")) for step in steps]
    assert not any("make setup" in run or "make " in run for run in runs), f"{job}: make setup (unhashed) is back"
    [at] = [i for i, run in enumerate(runs) if INSTALL in run]
    lines = [line.strip() for line in runs[at].splitlines() if line.strip()]
    assert lines[lines.index(INSTALL) - 1] == "python3 -m venv .venv"  # a fresh venv, Pulumi.yaml's virtualenv
    # the only pip install into .venv, the only requirement file: nothing resolves or is named outside the lock
    venv_installs = [line for run in runs for line in run.splitlines() if ".venv/bin/" in line and " install" in line]
    assert [line.strip() for line in venv_installs] == [INSTALL]
    # the wheel the lock includes is built in this job before the install, and every step that runs the
    # program (its python, the kmirror CLI, pulumi) comes after it
    built = [i for i, run in enumerate(runs) if "scripts/ci-kafka-mirror-wheel.sh dist" in run]
    assert built and built[0] <= at
    first_use = min(i for i, step in enumerate(steps) if _runs_the_program(step) and i != at)
    assert at < first_use
    assert yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["runtime"]["options"]["virtualenv"] == ".venv"


def test_the_program_lock_pins_pyprojects_dependencies_at_the_constraints_versions_by_hash() -> None:
    includes, pins = _lock_pins()
    assert includes == ["-r ../dist/kafka-mirror-wheel.txt"]  # kafka-mirror: the built wheel, by its sha256
    assert "kafka-mirror" not in pins  # never by name from an index
    constraints = dict(
        line.split("==", 1) for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line
    )
    for name, version in pins.items():
        assert constraints.get(name) == version, f"{name}=={version}: constraints.txt has {constraints.get(name)}"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for requirement in map(Requirement, project):
        name = re.sub(r"[-_.]+", "-", requirement.name).lower()
        assert name in pins and requirement.specifier.contains(pins[name]), requirement
    # components/requirements.txt (the plugin's venv) is the same list (tests/pulumi/test_packaging.py)
    assert "pulumi" in pins and "pulumi-aws" in pins and "pydantic" in pins


def test_the_jobs_that_lint_and_test_still_use_make_setup() -> None:
    """`make setup` is for the jobs that need the dev tools (lint, pytest) or run no cloud credentials."""
    runs = [str(step.get("run", "")) for step in _steps("preview.yml", "test")]
    assert "make setup" in " ".join(runs) or "make lint" in " ".join(runs)
