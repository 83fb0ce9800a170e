"""The deploy workflow's rules (issue 27): previews only for this repository's branches, in an
environment; the Pulumi CLI pinned to the SDK's version; the main branch's diff base is the last
deployed commit; and the deploy script, run here with stand-in `aws`, `curl` and `pulumi`, uses
each stack's own role, in the given order, with the image digest recorded in the stack file."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = yaml.safe_load((ROOT / ".github" / "workflows" / "preview.yml").read_text())
JOBS: dict[str, Any] = WORKFLOW["jobs"]
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/kafka-mirror@sha256:" + "ab" * 32
ROLES = {s: f"arn:aws:iam::12345678901{i}:role/deploy-{s}" for i, s in enumerate(("west", "east", "central"))}


def constraint(name: str) -> str:
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.lower().startswith(f"{name}=="):
            return line.split("==", 1)[1].split()[0]
    raise AssertionError(f"{name} is not pinned in constraints.txt")


def test_previews_run_only_for_this_repositorys_branches_in_an_environment() -> None:
    preview = JOBS["preview"]
    assert "github.event.pull_request.head.repo.full_name == github.repository" in preview["if"]
    assert preview["environment"] == "preview"


def test_the_pulumi_cli_is_pinned_to_the_sdks_version() -> None:
    uses = [
        (name, step)
        for name, job in JOBS.items()
        for step in job["steps"]
        if str(step.get("uses", "")).startswith("pulumi/actions@")
    ]
    assert len(uses) == 2
    for name, step in uses:
        assert str(step["with"]["pulumi-version"]) == constraint("pulumi"), name


def test_the_main_diff_starts_at_the_last_deployed_commit() -> None:
    [step] = [s for s in JOBS["diff"]["steps"] if s.get("id") == "order"]
    assert "refs/tags/kmirror-deployed" in step["run"]
    assert "github.event.before" not in step["env"]["BASE"]
    record = JOBS["up"]["steps"][-1]["run"]
    assert "git tag -f kmirror-deployed" in record and "git push" in record
    assert "stacks/" in record  # the image digest the script set is committed
    assert JOBS["up"]["permissions"]["contents"] == "write"


def test_the_deploy_uses_the_script_and_no_shared_role() -> None:
    steps = JOBS["up"]["steps"]
    assert not [s for s in steps if "configure-aws-credentials" in str(s.get("uses", ""))]
    [deploy] = [s for s in steps if s.get("run") == "scripts/ci-deploy.sh"]
    assert deploy["env"]["AWS_DEPLOY_ROLES"] == "${{ vars.AWS_DEPLOY_ROLES }}"


STUBS = {
    "curl": 'echo "curl $*" >> "$LOG"; echo \'{"value": "oidc-token"}\'',
    "aws": 'echo "aws $*" >> "$LOG"; role="${4##*/}"\n'
    'echo "{\\"AccessKeyId\\": \\"AK-$role\\", \\"SecretAccessKey\\": \\"s\\", \\"SessionToken\\": \\"t\\"}"',
    "pulumi": 'echo "pulumi $* key=$AWS_ACCESS_KEY_ID region=${AWS_REGION:-}" >> "$LOG"\n'
    '[ "$1" = up ] && [ "${FAIL_UP:-}" = "$5" ] && exit 7\nexit 0',
}


def deploy(tmp_path: Path, order: list[str], roles: dict[str, str], **env: str) -> tuple[int, list[str], str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in STUBS.items():
        (bin_dir / name).write_text(f"#!/usr/bin/env bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "log"
    log.write_text("")
    environ = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "LOG": str(log),
        "ORDER": json.dumps(order),
        "IMAGE": IMAGE,
        "PULUMI_ORG": "acme",
        "AWS_DEPLOY_ROLES": json.dumps(roles),
        "ACTIONS_ID_TOKEN_REQUEST_URL": "https://token?x=1",
        "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "req",
        "KMIRROR": str(ROOT / ".venv" / "bin" / "kmirror"),
        **env,
    }
    done = subprocess.run(
        [str(ROOT / "scripts" / "ci-deploy.sh")], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120
    )
    return done.returncode, log.read_text().splitlines(), done.stderr


def test_each_stack_deploys_with_its_own_role_in_order(tmp_path: Path) -> None:
    code, log, err = deploy(tmp_path, ["central", "local", "east"], ROLES)
    assert code == 0, err
    ups = [line for line in log if line.startswith("pulumi up")]
    assert [u.split("--stack ")[1].split()[0] for u in ups] == ["acme/central", "acme/east"]  # local skipped
    assert "key=AK-deploy-central" in ups[0] and "key=AK-deploy-east" in ups[1]
    assert "region=us-east-1" in ups[1]  # east's aws:region
    assumed = [line for line in log if line.startswith("aws sts assume-role-with-web-identity")]
    assert [a.split("--role-arn ")[1].split()[0] for a in assumed] == [ROLES["central"], ROLES["east"]]
    [image] = [line for line in log if line.startswith("pulumi config set")]
    assert f"kafka-mirror:spark.image {IMAGE} --stack acme/east" in image  # EKS only


def test_a_stack_without_a_role_stops_the_deploy_before_any_change(tmp_path: Path) -> None:
    code, log, err = deploy(tmp_path, ["west", "east"], {"west": ROLES["west"]})
    assert code == 2 and "AWS_DEPLOY_ROLES has no role for: east" in err
    assert not [line for line in log if line.startswith(("pulumi", "aws"))]


@pytest.mark.parametrize("image", ["repo:latest", "repo@sha256:abc"])
def test_an_image_not_by_digest_is_refused(tmp_path: Path, image: str) -> None:
    code, log, err = deploy(tmp_path, ["east"], ROLES, IMAGE=image)
    assert code == 2 and "expected REPO@sha256:" in err and not log


def test_a_failed_up_stops_the_following_stacks(tmp_path: Path) -> None:
    code, log, _ = deploy(tmp_path, ["west", "east"], ROLES, FAIL_UP="acme/west")
    assert code == 7
    assert [line for line in log if line.startswith("pulumi up")][-1].split("--stack ")[1].startswith("acme/west")
    assert not [line for line in log if "acme/east" in line]


WHEEL_STEP = "the kafka-mirror wheel the policy pack's venv installs (policy/requirements.txt)"
LOCK_WRITERS = (
    "pip-compile",
    "pip compile",
    "pip freeze",
    "pip lock",
    "--generate-hashes",
    "ci-lock-refresh",
    "PIP_FIND_LINKS",
    "--find-links",
    "--extra-index-url",
)


def _uses_the_policy_pack(step: dict[str, Any]) -> bool:
    return step.get("with", {}).get("policyPacks") == "policy" or step.get("run") == "scripts/ci-deploy.sh"


@pytest.mark.parametrize("job", ["preview", "up"])
def test_the_policy_pack_venv_installs_the_built_wheel_with_require_hashes(job: str) -> None:
    """kafka-mirror is not on PyPI: the job builds the wheel, pins it by sha256 and installs the pack's
    venv in --require-hashes mode before any step runs the pack; nothing offers it by name."""
    steps = JOBS[job]["steps"]
    [at] = [i for i, s in enumerate(steps) if s.get("name") == WHEEL_STEP]
    [runs_pack] = [i for i, s in enumerate(steps) if _uses_the_policy_pack(s)]
    assert at < runs_pack
    lines = [line.strip() for line in steps[at]["run"].splitlines()]
    assert lines[0] == "scripts/ci-kafka-mirror-wheel.sh dist"  # writes dist/kafka-mirror-wheel.txt
    assert "python3 -m venv policy/venv" in lines  # made here, so the engine does not make it its own way
    [install] = [line for line in lines if " pip install " in line]
    assert install.startswith("policy/venv/bin/python -m pip install") and "--require-hashes" in install.split()
    assert install.endswith("-r policy/requirements.txt")
    assert 'echo "PIP_REQUIRE_HASHES=1" >> "$GITHUB_ENV"' in lines  # an install the engine starts: same mode


def test_no_step_or_ci_script_resolves_rewrites_or_widens_a_lock() -> None:
    """Locks are refreshed by a maintainer (scripts/ci-lock-refresh.sh) and committed; CI installs them."""
    texts = {
        f"{name}: {step.get('name', step.get('uses'))}": json.dumps(step)
        for name, job in JOBS.items()
        for step in job["steps"]
    }
    texts.update(
        {
            str(p.relative_to(ROOT)): p.read_text()
            for p in (ROOT / "scripts").glob("ci-*.sh")
            if p.name != "ci-lock-refresh.sh"
        }
    )
    texts["Makefile"] = (ROOT / "Makefile").read_text()  # `make setup` runs in the test and diff jobs
    found = {where: [w for w in LOCK_WRITERS if w in text] for where, text in texts.items()}
    assert {where: words for where, words in found.items() if words} == {}
