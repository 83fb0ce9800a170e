"""The EKS image's recipe agrees with itself: base image, its Python, the app's requirements.

No Docker here (TEST-ENV.md), so the nearest real things: hadolint on the Dockerfile, and pip
resolving the app's requirements for the image's Python and platforms from PyPI without
installing (`--dry-run --only-binary=:all: --python-version ... --platform ...`), the way the
image's `pip3 install` will. The EMR nodes' resolution is in tests/pulumi/test_wheelhouse.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kafka_mirror.hashed_lock import (
    IMAGE_ARCHITECTURES,
    LockError,
    check_lock,
    image_target,
    normalize,
    resolve_lock,
)

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
# apache/spark's 4.0.x images build on eclipse-temurin:17-jammy (Ubuntu 22.04: Python 3.10, glibc 2.35)
IMAGE_PYTHON = "3.10"
IMAGE_GLIBC_MINOR = 35
APP_PYTHONS = ("3.10", "3.11", "3.12", "3.13")  # the range the README promises for the app


def _hadolint() -> str:
    found = Path(sys.executable).with_name("hadolint")
    return str(found) if found.exists() else shutil.which("hadolint") or "hadolint"


def test_hadolint_reports_nothing_on_the_dockerfile() -> None:
    done = subprocess.run([_hadolint(), str(ROOT / "Dockerfile")], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_the_image_is_spark_4_0_with_python_3_10_and_checks_itself_at_build_time() -> None:
    version = re.search(r"^ARG SPARK_VERSION=(\d+)\.(\d+)\.(\d+)$", DOCKERFILE, re.MULTILINE)
    assert version and version.groups()[:2] == ("4", "0")  # what EMR 8 and the 4.0 images run
    assert re.search(
        r"^FROM apache/spark:\$\{SPARK_VERSION\}-scala2\.13-java17-python3-ubuntu@\$\{SPARK_BASE_DIGEST\}$",
        DOCKERFILE,
        re.M,
    )  # by digest, never by tag alone (issue 43, first review)
    assert "RUN python3 -m spark_app --self-check" in DOCKERFILE  # loads the data sources into the image's Spark
    assert "sha256sum -c -" in DOCKERFILE and "LIBRDKAFKA_SHA256 is required" in DOCKERFILE
    assert "pyspark" not in (ROOT / "scripts" / "app-requirements.txt").read_text().split("pyspark itself")[1]


def _platforms(arch: str, glibc_minor: int) -> list[str]:
    """pip matches --platform tags exactly: every manylinux tag a glibc 2.<minor> system accepts."""
    return [f"manylinux_2_{m}_{arch}" for m in range(glibc_minor, 16, -1)] + [f"manylinux2014_{arch}"]


def requirements_for(python: str, target: Path) -> Path:
    """scripts/app-requirements.txt with its markers evaluated for `python`: pip evaluates them
    against the interpreter it runs on, whatever `--python-version` says."""
    from packaging.requirements import Requirement

    environment = {"python_version": python, "python_full_version": f"{python}.0"}
    lines = []
    for line in (ROOT / "scripts" / "app-requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate(environment):
                requirement.marker = None
                lines.append(str(requirement))
    target.write_text("\n".join(lines) + "\n")
    return target


def resolve(python: str, arch: str, tmp_path: Path, glibc_minor: int = IMAGE_GLIBC_MINOR) -> dict[str, str]:
    """name -> version pip would install from scripts/app-requirements.txt for that interpreter."""
    abi = "cp" + python.replace(".", "")
    requirements = requirements_for(python, tmp_path / f"requirements-{python}.txt")
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--quiet",
        "--ignore-installed",
        "--only-binary=:all:",
        "--python-version",
        python,
        "--implementation",
        "cp",
        "--abi",
        abi,
        *[f"--platform={p}" for p in _platforms(arch, glibc_minor)],
        "--target",
        "/nonexistent/kmirror-resolve",
        "--report",
        "-",
        "-r",
        str(requirements),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, f"Python {python} {arch}: {done.stderr[-2000:]}"
    report = json.loads(done.stdout)
    return {
        re.sub(r"[-_.]+", "-", item["metadata"]["name"]).lower(): item["metadata"]["version"]
        for item in report["install"]
    }


@pytest.mark.registry
@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_the_app_requirements_resolve_for_the_image_python_and_platforms(arch: str, tmp_path: Path) -> None:
    resolved = resolve(IMAGE_PYTHON, arch, tmp_path)
    assert {k: resolved[k] for k in ("confluent-kafka", "pyarrow", "pandas", "pyyaml", "prometheus-client")} == {
        "confluent-kafka": "2.16.1",
        "pyarrow": "25.0.1",
        "pandas": "2.3.3",
        "pyyaml": "6.0.3",
        "prometheus-client": "0.26.0",
    }
    assert "pyspark" not in resolved  # the image's Spark distribution provides it


@pytest.mark.registry
@pytest.mark.parametrize("python", APP_PYTHONS[1:])
def test_the_app_requirements_resolve_on_every_supported_python(python: str, tmp_path: Path) -> None:
    resolved = resolve(python, "x86_64", tmp_path)
    assert (resolved["pyarrow"], resolved["pandas"]) == ("26.0.1", "3.1.1")


# The main-branch image job builds this Dockerfile: its build step must pass every build arg the
# Dockerfile refuses to build without (an ARG with an empty default that a RUN checks with -z),
# and only args the Dockerfile declares (a misspelt one is silently ignored by docker build).
WORKFLOW = ROOT / ".github" / "workflows" / "preview.yml"


def _dockerfile_args() -> dict[str, str]:
    return dict(re.findall(r"^ARG ([A-Z0-9_]+)=(.*)$", DOCKERFILE, re.MULTILINE))


def _required_args() -> set[str]:
    froms = " ".join(re.findall(r"^FROM .*$", DOCKERFILE, re.MULTILINE))
    return {
        name
        for name, default in _dockerfile_args().items()
        if default in ('""', "")
        and (re.search(r'\[ -z "\$\{' + name + r'\}" \]', DOCKERFILE) or "${" + name + "}" in froms)
    }


def _image_build_step() -> dict:
    import yaml

    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["image"]
    builds = [step for step in job["steps"] if str(step.get("uses", "")).startswith("docker/build-push-action@")]
    assert len(builds) == 1, "the image job has exactly one docker/build-push-action step"
    return {"job": job, "build": builds[0]}


def _build_args(step: dict) -> dict[str, str]:
    lines = str(step.get("with", {}).get("build-args", "")).splitlines()
    return dict(line.strip().split("=", 1) for line in lines if line.strip())


def test_the_dockerfile_requires_the_librdkafka_sha256() -> None:
    # the parser below sees what the Dockerfile checks, and the base image's digest its FROM needs
    assert _required_args() == {"LIBRDKAFKA_SHA256", "SPARK_BASE_DIGEST"}


def test_the_ci_image_build_passes_every_arg_the_dockerfile_requires_and_no_unknown_one() -> None:
    build = _image_build_step()["build"]
    args = _build_args(build)
    assert build["with"]["context"] == "." and (ROOT / "Dockerfile").exists()
    assert _required_args() <= set(args), f"missing build args: {sorted(_required_args() - set(args))}"
    unknown = sorted(set(args) - set(_dockerfile_args()))
    assert not unknown, f"not ARGs of the Dockerfile: {unknown}"
    for name in _required_args():
        assert args[name].strip() not in ("", '""'), f"{name} is passed empty"


def test_the_image_job_refuses_early_without_a_well_formed_sha256() -> None:
    """The value comes from a repository variable: a step before the build checks it is 64 hex
    digits and names the variable and the fix, instead of failing deep inside docker build."""
    parts = _image_build_step()
    steps = parts["job"]["steps"]
    build_at = steps.index(parts["build"])
    source = _build_args(parts["build"])["LIBRDKAFKA_SHA256"]
    guards = [
        step
        for step in steps[:build_at]
        if "run" in step and "^[0-9a-f]{64}$" in step["run"] and step.get("env", {}).get("LIBRDKAFKA_SHA256") == source
    ]
    assert len(guards) == 1
    script = guards[0]["run"]
    for value, ok in (("", False), ("abc", False), ("a" * 64, True), ("A" * 64, False)):
        done = subprocess.run(["bash", "-c", script], env={"LIBRDKAFKA_SHA256": value}, capture_output=True, text=True)
        assert (done.returncode == 0) is ok, (value, done.stderr)
        if not ok:
            assert "LIBRDKAFKA_SHA256" in done.stderr and "docs/deploy.md" in done.stderr


def test_the_image_job_refuses_early_without_a_well_formed_base_digest() -> None:
    """SPARK_BASE_DIGEST (the apache/spark base by digest) comes from a repository variable too: checked before
    the build, naming the variable and the fix."""
    parts = _image_build_step()
    steps = parts["job"]["steps"]
    source = _build_args(parts["build"])["SPARK_BASE_DIGEST"]
    [guard] = [
        s
        for s in steps[: steps.index(parts["build"])]
        if "run" in s and s.get("env", {}).get("SPARK_BASE_DIGEST") == source
    ]
    for value, ok in (("", False), ("a" * 64, False), ("sha256:" + "a" * 64, True), ("sha256:" + "A" * 64, False)):
        done = subprocess.run(
            ["bash", "-c", guard["run"]], env={"SPARK_BASE_DIGEST": value}, capture_output=True, text=True
        )
        assert (done.returncode == 0) is ok, (value, done.stderr)
        if not ok:
            assert "SPARK_BASE_DIGEST" in done.stderr and "docs/deploy.md" in done.stderr


# Issue 43 (first review): every pip install in the image is hash-pinned from a committed lock per
# architecture (scripts/image-cp310-<arch>.lock, kafka_mirror.hashed_lock), resolved from
# scripts/app-requirements.txt; confluent-kafka by its source archive's sha256 (built from source).
def _pip_installs() -> list[str]:
    runs = re.findall(r"^RUN (?:.*\\\n)*.*$", DOCKERFILE, re.MULTILINE)
    return [part for run in runs for part in re.split(r"&&", run) if re.search(r"\bpip3? install\b", part)]


def test_every_pip_install_in_the_dockerfile_is_hash_pinned_from_a_committed_lock() -> None:
    installs = _pip_installs()
    assert len(installs) == 2, installs  # the build requirements, then the whole lock
    for install in installs:
        assert "--require-hashes" in install and "--no-deps" in install, install
        files = re.findall(r"-r (\S+)", install)
        assert files and all(f in ('"$lock"', "/opt/kmirror/locks/build-requirements.lock") for f in files), install
        assert not re.search(r"\s[a-zA-Z][\w.-]*==", install), install  # no pin by name outside the lock
    assert "--no-build-isolation --no-binary confluent-kafka" in installs[1]
    copied = re.search(
        r"^COPY (scripts/image-cp310-\S+\.lock) (scripts/image-cp310-\S+\.lock) /opt/kmirror/locks/$", DOCKERFILE, re.M
    )
    assert copied and set(copied.groups()) == {f"scripts/image-cp310-{arch}.lock" for arch in IMAGE_ARCHITECTURES}
    assert 'lock="/opt/kmirror/locks/image-cp310-$(uname -m).lock"' in DOCKERFILE


@pytest.mark.parametrize("arch", IMAGE_ARCHITECTURES)
def test_the_image_lock_pins_exactly_the_app_requirements_for_python_3_10(arch: str, tmp_path: Path) -> None:
    from packaging.requirements import Requirement

    requirements = ROOT / "scripts" / "app-requirements.txt"
    target = image_target(arch)
    pins = check_lock(ROOT / "scripts" / target.name, requirements, target)  # refuses a stale lock
    wanted = {}
    for line in requirements_for(IMAGE_PYTHON, tmp_path / "reqs.txt").read_text().splitlines():
        requirement = Requirement(line)
        wanted[normalize(requirement.name)] = str(requirement.specifier).removeprefix("==")
    assert {name: pins[name] for name in wanted} == wanted
    assert {"setuptools", "wheel"} <= set(pins)  # confluent-kafka builds with --no-build-isolation
    assert "pyspark" not in pins


def test_a_lock_resolved_from_other_requirements_is_refused(tmp_path: Path) -> None:
    target = image_target("x86_64")
    requirements = tmp_path / "app-requirements.txt"
    requirements.write_text((ROOT / "scripts" / "app-requirements.txt").read_text().replace("2.16.1", "2.16.2"))
    with pytest.raises(LockError, match="resolved from other requirements"):
        check_lock(ROOT / "scripts" / target.name, requirements, target)


def test_resolving_pins_the_sdist_by_its_archive_hash_and_refuses_another_python(tmp_path: Path) -> None:
    requirements = tmp_path / "app-requirements.txt"
    requirements.write_text("confluent-kafka==2.16.1\n")
    target = image_target("aarch64")
    seen: list[list[str]] = []

    def pip(python: str, args: list[str], version: str = "3.10") -> None:
        seen.append(args)
        report = {
            "environment": {"python_version": version},
            "install": [
                {
                    "metadata": {"name": name, "version": v},
                    "download_info": {"archive_info": {"hashes": {"sha256": c * 64}}},
                }
                for name, v, c in (("confluent_kafka", "2.16.1", "a"), ("setuptools", "80.0", "b"))
            ],
        }
        Path(args[args.index("--report") + 1]).write_text(json.dumps(report))

    text = resolve_lock(requirements, target, "python3.10", pip=pip, sdist_hash=lambda n, v: "c" * 64)
    assert "confluent-kafka==2.16.1 --hash=sha256:" + "c" * 64 in text.splitlines()
    assert "setuptools==80.0 --hash=sha256:" + "b" * 64 in text.splitlines()
    assert "manylinux_2_35_aarch64" in seen[0] and "--only-binary=:all:" in seen[0]
    lock = tmp_path / target.name
    lock.write_text(text)
    assert check_lock(lock, requirements, target) == {"confluent-kafka": "2.16.1", "setuptools": "80.0"}
    with pytest.raises(LockError, match=r"resolved on Python 3\.11"):
        resolve_lock(
            requirements, target, "python3.11", pip=lambda p, a: pip(p, a, "3.11"), sdist_hash=lambda n, v: "c" * 64
        )
