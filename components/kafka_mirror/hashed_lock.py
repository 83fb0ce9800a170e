"""Hash-pinned requirement locks for one interpreter and platform that is not the deploying machine's
(the app image's Python 3.10 per architecture, the deploy job's program venv): resolved once by a
maintainer against PyPI (scripts/hashed-lock-refresh.sh: `resolve_lock`), committed under scripts/,
installed with `pip install --require-hashes --no-deps -r <lock>`. No pulumi.

A lock's header records the sha256 of what it was resolved from (`lock_inputs_digest`): the
requirements text and the target; `check_lock` refuses a lock whose requirements changed since.
A distribution listed in `LockTarget.sdists` is pinned by its source archive's sha256 (PyPI's
simple API), not by a wheel's: the image builds confluent-kafka from source against its own
librdkafka (`pip install --no-binary confluent-kafka --require-hashes`). Its build requirements
are the target's `build_requirements`, locked like the rest (pip hashes nothing it installs into
an isolated build environment, so the image builds with `--no-build-isolation`).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import tempfile
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kmirror.errors import KmirrorError

REFRESH_SCRIPT = "scripts/hashed-lock-refresh.sh"
INPUTS_PREFIX = "# inputs-sha256: "
SIMPLE_INDEX = "https://pypi.org/simple"
PIN = re.compile(r"(\S+)==(\S+) --hash=sha256:([0-9a-f]{64})")
PipRunner = Callable[[str, list[str]], None]
SdistHash = Callable[[str, str], str]


class LockError(KmirrorError):
    """A lock cannot be resolved, or a committed lock is missing, malformed or stale (the message says the fix)."""


@dataclass(frozen=True)
class LockTarget:
    """Where a lock's pins install: `python_version` (CPython) on `platforms` (pip --platform tags)."""

    name: str
    """The lock's file name under scripts/ (`image-cp310-x86_64.lock`)."""
    purpose: str
    python_version: str
    platforms: tuple[str, ...]
    build_requirements: tuple[str, ...] = ()
    sdists: tuple[str, ...] = ()

    def pip_args(self) -> list[str]:
        abi = "cp" + self.python_version.replace(".", "")
        args = ["--only-binary=:all:", "--python-version", self.python_version, "--implementation", "cp", "--abi", abi]
        for platform in self.platforms:
            args += ["--platform", platform]
        return args


def manylinux_platforms(arch: str, glibc_minor: int) -> tuple[str, ...]:
    """Every manylinux tag a glibc 2.<glibc_minor> system on `arch` accepts (pip matches tags exactly)."""
    return (*(f"manylinux_2_{minor}_{arch}" for minor in range(glibc_minor, 16, -1)), f"manylinux2014_{arch}")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_inputs_digest(requirements: str, target: LockTarget) -> str:
    """What a lock was resolved from: the requirements text, the build requirements and the target."""
    parts = [requirements, *target.build_requirements, *target.pip_args(), *(f"sdist:{d}" for d in target.sdists)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def lock_lines(report: dict[str, object], target: LockTarget, sdist_hash: SdistHash) -> list[str]:
    """`name==version --hash=sha256:...` for each distribution of a `pip install --report`, sorted.

    Raises LockError when pip ran on another Python than the target's (pip evaluates requirement
    markers with the running interpreter, whatever --python-version says) or gave no sha256."""
    environment = report.get("environment")
    found = environment.get("python_version") if isinstance(environment, dict) else None
    if found != target.python_version:
        raise LockError(
            f"{target.name} was resolved on Python {found}, but its target runs {target.python_version} and pip "
            f"evaluates requirement markers with the running interpreter: run {REFRESH_SCRIPT} with "
            f"PYTHON{target.python_version.replace('.', '')}=<a Python {target.python_version}>"
        )
    lines = []
    for item in report.get("install") or []:  # type: ignore[attr-defined]
        name, version = normalize(item["metadata"]["name"]), item["metadata"]["version"]
        if name in target.sdists:
            digest = sdist_hash(name, version)
        else:
            info = item["download_info"]
            digest = (info.get("archive_info") or {}).get("hashes", {}).get("sha256")
        if not digest:
            raise LockError(f"PyPI gave no sha256 for {name} {version}")
        lines.append(f"{name}=={version} --hash=sha256:{digest}")
    return sorted(lines)


def pypi_sdist_sha256(name: str, version: str, index: str = SIMPLE_INDEX) -> str:
    """The sha256 PyPI's simple API (PEP 691) publishes for `name` `version`'s source archive."""
    request = urllib.request.Request(
        f"{index}/{normalize(name)}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    stem = f"{normalize(name).replace('-', '_')}-{version}.tar.gz"
    found = [f["hashes"]["sha256"] for f in files if f["filename"].lower() == stem]
    if len(found) != 1:
        raise LockError(f"{index} lists {len(found)} source archives {stem} for {name} {version} (expected one)")
    return str(found[0])


def _run_pip(python: str, args: list[str]) -> None:
    done = subprocess.run([python, "-m", "pip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise LockError(f"{python} -m pip {' '.join(args[:2])} failed ({done.returncode}):\n{done.stderr.strip()}")


def resolve_lock(
    requirements_path: Path,
    target: LockTarget,
    python: str,
    *,
    constraints: Path | None = None,
    pip: PipRunner = _run_pip,
    sdist_hash: SdistHash = pypi_sdist_sha256,
) -> str:
    """The text of `target`'s lock: `requirements_path` + its build requirements resolved against PyPI by
    `python` (a CPython `target.python_version`), every pin with PyPI's sha256. Maintainers only.

    Raises LockError (resolution failures, wrong Python)."""
    requirements = requirements_path.read_text()
    with tempfile.TemporaryDirectory() as tmp:
        reqs, report_path = Path(tmp) / "requirements.txt", Path(tmp) / "report.json"
        reqs.write_text("\n".join([requirements, *target.build_requirements]) + "\n")
        extra = ["-c", str(constraints)] if constraints else []
        output = ["--target", str(Path(tmp) / "t"), "--report", str(report_path)]
        pip(
            python,
            [
                "install",
                "--dry-run",
                "--ignore-installed",
                "--quiet",
                *target.pip_args(),
                *output,
                "-r",
                str(reqs),
                *extra,
            ],
        )
        lines = lock_lines(json.loads(report_path.read_text()), target, sdist_hash)
    header = [
        f"# {target.purpose}: generated by {REFRESH_SCRIPT}, do not edit.",
        f"# {requirements_path.name} + {', '.join(target.build_requirements) or 'nothing'} for CPython "
        f"{target.python_version} on {target.platforms[0]}"
        + (f"; source archives: {', '.join(target.sdists)}" if target.sdists else ""),
        INPUTS_PREFIX + lock_inputs_digest(requirements, target),
    ]
    return "\n".join([*header, *lines]) + "\n"


def committed_pin_lines(
    lock_path: Path, requirements_path: Path, expected: str, fix: str, error: type[KmirrorError] = LockError
) -> list[str]:
    """The pin lines of a committed lock whose header records inputs-sha256 `expected`; raises `error`
    when it is missing, resolved from other inputs, or has a line that is not a hash pin."""
    if not lock_path.is_file():
        raise error(f"{lock_path} not found: {fix}")
    text = lock_path.read_text().splitlines()
    found = next((line.removeprefix(INPUTS_PREFIX) for line in text if line.startswith(INPUTS_PREFIX)), None)
    if found != expected:
        raise error(
            f"{lock_path} was resolved from other requirements than {requirements_path} "
            f"(inputs-sha256 {found}, now {expected}): {fix}"
        )
    pins = [line.strip() for line in text if line.strip() and not line.startswith("#")]
    if bad := [line for line in pins if not PIN.fullmatch(line)]:
        raise error(f"{lock_path}: not a hash pin: {bad[0]!r}; {fix}")
    return pins


def check_lock(lock_path: Path, requirements_path: Path, target: LockTarget) -> dict[str, str]:
    """name -> version of a committed lock; raises LockError when it is missing, not all hash pins, or
    resolved from other requirements than `requirements_path` (the fix: the maintainer's refresh)."""
    fix = f"run {REFRESH_SCRIPT} (a maintainer, with PyPI reachable) and commit {lock_path.name}"
    expected = lock_inputs_digest(requirements_path.read_text(), target)
    pins = committed_pin_lines(lock_path, requirements_path, expected, fix)
    return {match.group(1): match.group(2) for match in map(PIN.fullmatch, pins) if match}


IMAGE_PYTHON = "3.10"
IMAGE_GLIBC_MINOR = 35  # the apache/spark 4.0 images' Ubuntu 22.04
IMAGE_ARCHITECTURES = ("x86_64", "aarch64")


def image_target(arch: str) -> LockTarget:
    """The app image's lock for `arch` (the Dockerfile installs scripts/image-cp310-$(uname -m).lock)."""
    return LockTarget(
        name=f"image-cp310-{arch}.lock",
        purpose="The app image's Python deps (Dockerfile)",
        python_version=IMAGE_PYTHON,
        platforms=manylinux_platforms(arch, IMAGE_GLIBC_MINOR),
        build_requirements=("setuptools>=62", "wheel"),  # confluent-kafka's [build-system] requires
        sdists=("confluent-kafka",),
    )
