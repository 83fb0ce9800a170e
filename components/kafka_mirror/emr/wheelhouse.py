"""The EMR nodes' wheelhouse: every wheel the app and the secrets sync need, for the nodes'
Python and CPU architecture, resolved and downloaded on the deploying machine (no pulumi).

The nodes install from it with `pip install --no-index --find-links DIR --require-hashes -r
requirements.lock` (scripts/emr-bootstrap.sh), so a node never reaches PyPI or GitHub. The lock
pins every distribution with the sha256 PyPI published for it; a GSSAPI-capable confluent-kafka
(no such wheel exists on PyPI) is a wheel the user built once for Amazon Linux 2023
(scripts/build-emr-gssapi-wheel.sh), pinned by its own sha256.

A built wheelhouse is reused while its inputs (requirements text, extras, platform, local wheel)
are unchanged: `pulumi preview` does not download anything twice.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kafka_mirror.emr.specs import (
    EMR_PYTHON_VERSION,
    NODE_EXTRA_REQUIREMENTS,
    wheel_platforms,
    wheelhouse_tag,
)
from kmirror.errors import KmirrorError

LOCK_FILE = "requirements.lock"
STAMP_FILE = ".inputs.sha256"
GSSAPI_DIST = "confluent-kafka"
PipRunner = Callable[[list[str]], None]


class WheelhouseError(KmirrorError):
    """The wheelhouse cannot be resolved, downloaded or completed (the message says how to fix it)."""


@dataclass(frozen=True)
class Wheelhouse:
    """One built wheelhouse directory: `files` (wheels and the lock, names only) under `path`."""

    arch: str
    path: Path
    files: tuple[str, ...]

    @property
    def tag(self) -> str:
        return wheelhouse_tag(self.arch)


def normalize(name: str) -> str:
    """PEP 503 name normalisation (`PyYAML` and `pyyaml`, `confluent_kafka` and `confluent-kafka`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(line: str) -> str | None:
    """The distribution name of a requirements-file line, or None for comments and blank lines."""
    text = line.split("#", 1)[0].strip()
    match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)", text)
    return normalize(match.group(1)) if match else None


def pinned_version(requirements: str, dist: str) -> str | None:
    """The `==` pin of `dist` in `requirements` (None when it is not pinned exactly)."""
    for line in requirements.splitlines():
        if requirement_name(line) == normalize(dist):
            match = re.search(r"==\s*([^;\s]+)", line)
            return match.group(1) if match else None
    return None


def pip_target_args(arch: str) -> list[str]:
    """pip options selecting wheels for the EMR nodes' interpreter (CPython EMR_PYTHON_VERSION) and `arch`."""
    abi = "cp" + EMR_PYTHON_VERSION.replace(".", "")
    args = ["--only-binary=:all:", "--python-version", EMR_PYTHON_VERSION, "--implementation", "cp", "--abi", abi]
    for platform in wheel_platforms(arch):
        args += ["--platform", platform]
    return args


def lock_lines(report: dict[str, object]) -> list[str]:
    """`name==version --hash=sha256:...` for every distribution of a `pip install --report`.

    Raises WheelhouseError when pip evaluated environment markers for another Python than the
    nodes' (pip evaluates markers with the *running* interpreter, whatever `--python-version` says).
    """
    environment = report.get("environment")
    found = environment.get("python_version") if isinstance(environment, dict) else None
    if found != EMR_PYTHON_VERSION:
        raise WheelhouseError(
            f"the wheelhouse was resolved on Python {found}, but the EMR nodes run {EMR_PYTHON_VERSION} and pip "
            f"evaluates requirement markers with the running interpreter; deploy with Python {EMR_PYTHON_VERSION} "
            "(the project's .venv, `make setup`)"
        )
    lines = []
    for item in report.get("install") or []:  # type: ignore[attr-defined]
        meta, info = item["metadata"], item["download_info"]
        digest = (info.get("archive_info") or {}).get("hashes", {}).get("sha256")
        if not digest:
            raise WheelhouseError(f"PyPI gave no sha256 for {meta['name']} {meta['version']} ({info.get('url')})")
        lines.append(f"{normalize(meta['name'])}=={meta['version']} --hash=sha256:{digest}")
    return sorted(lines)


def gssapi_wheel(directory: Path, arch: str, version: str) -> Path:
    """The user-built GSSAPI confluent-kafka wheel for `arch` in `directory`; raises WheelhouseError
    naming the script that builds it when there is none (or more than one)."""
    abi = "cp" + EMR_PYTHON_VERSION.replace(".", "")
    pattern = f"confluent_kafka-{version}-*gssapi-{abi}-{abi}-*{arch}.whl"
    found = sorted(directory.glob(pattern)) if directory.is_dir() else []
    if len(found) != 1:
        raise WheelhouseError(
            f"gssapi: true needs exactly one {pattern} in {directory} (found {len(found)}): PyPI has no "
            "confluent-kafka wheel with GSSAPI; build it once on Amazon Linux 2023 on the nodes' architecture "
            f"({arch}) with scripts/build-emr-gssapi-wheel.sh and put it there (or set KMIRROR_GSSAPI_WHEELS)"
        )
    return found[0]


def _run_pip(args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise WheelhouseError(f"pip {' '.join(args[:2])} failed ({done.returncode}):\n{done.stderr.strip()}")


def _inputs_digest(requirements: str, arch: str, local_wheel: Path | None) -> str:
    parts = [requirements, *NODE_EXTRA_REQUIREMENTS, *pip_target_args(arch)]
    if local_wheel is not None:
        parts += [local_wheel.name, hashlib.sha256(local_wheel.read_bytes()).hexdigest()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _cached(path: Path, digest: str) -> tuple[str, ...] | None:
    """The files of the wheelhouse at `path` if it was built from the same inputs and is complete."""
    stamp, lock = path / STAMP_FILE, path / LOCK_FILE
    if not (stamp.is_file() and lock.is_file() and stamp.read_text().strip() == digest):
        return None
    wheels = sorted(p.name for p in path.iterdir() if p.suffix == ".whl")
    return (*wheels, LOCK_FILE) if len(wheels) == len(lock.read_text().splitlines()) else None


def build_wheelhouse(
    requirements_path: Path,
    out_root: Path,
    arch: str,
    gssapi_wheels: Path | None = None,
    pip: PipRunner = _run_pip,
) -> Wheelhouse:
    """Resolve and download `requirements_path` (+ NODE_EXTRA_REQUIREMENTS) for the nodes into
    `out_root/<wheelhouse_tag(arch)>/` with a hash-pinned `requirements.lock`.

    `gssapi_wheels`: a directory holding the user-built GSSAPI confluent-kafka wheel, which replaces
    PyPI's. Raises WheelhouseError (resolution failures, a missing GSSAPI wheel, wrong Python).
    """
    requirements = requirements_path.read_text()
    local = None
    if gssapi_wheels is not None:
        version = pinned_version(requirements, GSSAPI_DIST)
        if version is None:
            raise WheelhouseError(f"{requirements_path}: {GSSAPI_DIST} must be pinned with == for the GSSAPI wheel")
        local = gssapi_wheel(gssapi_wheels, arch, version)
    path = out_root / wheelhouse_tag(arch)
    digest = _inputs_digest(requirements, arch, local)
    if (cached := _cached(path, digest)) is not None:
        return Wheelhouse(arch, path, cached)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    kept = [line for line in requirements.splitlines() if local is None or requirement_name(line) != GSSAPI_DIST]
    with tempfile.TemporaryDirectory() as tmp:
        reqs, report_path = Path(tmp) / "requirements.txt", Path(tmp) / "report.json"
        reqs.write_text("\n".join([*kept, *NODE_EXTRA_REQUIREMENTS]) + "\n")
        target = pip_target_args(arch)
        pip(["install", "--dry-run", "--ignore-installed", "--quiet", *target, "--target", str(Path(tmp) / "t"),
             "--report", str(report_path), "-r", str(reqs)])  # fmt: skip
        lines = lock_lines(json.loads(report_path.read_text()))
        (Path(tmp) / "lock.txt").write_text("\n".join(lines) + "\n")
        pip(["download", "--quiet", "--no-deps", "--require-hashes", *target, "--dest", str(path),
             "-r", str(Path(tmp) / "lock.txt")])  # fmt: skip
    if local is not None:
        shutil.copy2(local, path / local.name)
        lines.append(f"{GSSAPI_DIST}=={pinned_version(requirements, GSSAPI_DIST)} --hash=sha256:"
                     f"{hashlib.sha256(local.read_bytes()).hexdigest()}")  # fmt: skip
    (path / LOCK_FILE).write_text("\n".join(sorted(lines)) + "\n")
    wheels = sorted(p.name for p in path.iterdir() if p.suffix == ".whl")
    if len(wheels) != len(lines):
        raise WheelhouseError(f"{path}: {len(lines)} locked distributions but {len(wheels)} wheels: {wheels}")
    (path / STAMP_FILE).write_text(digest + "\n")
    return Wheelhouse(arch, path, (*wheels, LOCK_FILE))


def load_wheelhouse(root: Path, arch: str) -> Wheelhouse:
    """A prebuilt wheelhouse (`$KMIRROR_WHEELHOUSE/<tag>/`, e.g. the one CI built); raises
    WheelhouseError when its lock names a wheel that is not there."""
    path = root / wheelhouse_tag(arch)
    lock = path / LOCK_FILE
    if not lock.is_file():
        raise WheelhouseError(f"{lock} not found: build it with scripts/build-bundle.py build --wheelhouse {arch}")
    wheels = sorted(p.name for p in path.iterdir() if p.suffix == ".whl")
    locked = {line.split("==", 1)[0] for line in lock.read_text().splitlines() if line.strip()}
    present = {normalize(w.split("-", 1)[0]) for w in wheels}
    if missing := sorted(locked - present):
        raise WheelhouseError(f"{path}: {LOCK_FILE} pins {', '.join(missing)} but has no wheel for it")
    return Wheelhouse(arch, path, (*wheels, LOCK_FILE))


def deploy_wheelhouses(
    requirements_path: Path, arches: Sequence[str], gssapi: bool, environ: Mapping[str, str]
) -> list[Wheelhouse]:
    """The wheelhouse of every architecture in `arches` for a deploy.

    `$KMIRROR_WHEELHOUSE`: a prebuilt root (one `<tag>/` per architecture, e.g. CI's); otherwise
    built into `$KMIRROR_BUILD_DIR/wheelhouse` (default `build/wheelhouse`). With `gssapi`, the
    confluent-kafka wheel comes from `$KMIRROR_GSSAPI_WHEELS` (default `build/gssapi-wheels`), and a
    prebuilt wheelhouse must hold such a wheel (build tag `*gssapi`), never PyPI's.
    """
    root = Path(__file__).resolve().parents[1]
    build_dir = Path(environ.get("KMIRROR_BUILD_DIR") or root / "build")
    if prebuilt := environ.get("KMIRROR_WHEELHOUSE"):
        houses = [load_wheelhouse(Path(prebuilt), arch) for arch in sorted(set(arches))]
        for house in houses if gssapi else []:
            kafka = [f for f in house.files if normalize(f.split("-", 1)[0]) == GSSAPI_DIST]
            if not all(f.split("-")[2].endswith("gssapi") for f in kafka):
                raise WheelhouseError(
                    f"{house.path}: gssapi: true but {', '.join(kafka)} is not a GSSAPI build "
                    "(scripts/build-emr-gssapi-wheel.sh names its wheels confluent_kafka-<version>-1gssapi-...)"
                )
        return houses
    gssapi_dir = Path(environ.get("KMIRROR_GSSAPI_WHEELS") or build_dir / "gssapi-wheels") if gssapi else None
    return [
        build_wheelhouse(requirements_path, build_dir / "wheelhouse", arch, gssapi_dir) for arch in sorted(set(arches))
    ]
