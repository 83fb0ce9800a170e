"""The EMR nodes' wheelhouse (kafka_mirror.emr.wheelhouse): the committed, hashed locks (resolved once by
scripts/emr-lock-refresh.sh, never on a deploy), what pip is asked for on a deploy, the GSSAPI wheel,
reuse of an unchanged build; and, against PyPI, that the app's requirements resolve to wheels for
the nodes' Python and Amazon Linux 2023 on both architectures."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kafka_mirror.emr.specs import AL2023_GLIBC_MINOR, EMR_PYTHON_VERSION, NODE_EXTRA_REQUIREMENTS
from kafka_mirror.emr.wheelhouse import (
    LOCK_FILE,
    WheelhouseError,
    build_wheelhouse,
    committed_lock,
    committed_lock_path,
    deploy_wheelhouses,
    lock_lines,
    normalize,
    pip_target_args,
    resolve_lock,
)

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "scripts" / "app-requirements.txt"
DIGEST = "ab" * 32


def _report(*dists: tuple[str, str], python: str = EMR_PYTHON_VERSION) -> dict[str, object]:
    return {
        "environment": {"python_version": python},
        "install": [
            {
                "metadata": {"name": name, "version": version},
                "download_info": {"url": f"https://x/{name}.whl", "archive_info": {"hashes": {"sha256": DIGEST}}},
            }
            for name, version in dists
        ],
    }


class FakePip:
    """Records pip's arguments; `install --report` writes `report`, `download` writes one file per lock line."""

    def __init__(self, report: dict[str, object]) -> None:
        self.report = report
        self.calls: list[list[str]] = []

    def __call__(self, args: list[str]) -> None:
        self.calls.append(args)
        if args[0] == "install":
            Path(args[args.index("--report") + 1]).write_text(json.dumps(self.report))
        else:
            dest = Path(args[args.index("--dest") + 1])
            for line in Path(args[-1]).read_text().splitlines():
                name, version = line.split(" ")[0].split("==")
                (dest / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(b"wheel")


def _locked(tmp_path: Path, *pins: str) -> Path:
    """A copy of the app's requirements with a committed-style lock of `pins` for aarch64 beside it."""
    requirements = tmp_path / "app-requirements.txt"
    requirements.write_text(REQUIREMENTS.read_text())
    text = resolve_lock(requirements, "aarch64", pip=FakePip(_report(*(tuple(p.split("==")) for p in pins))))
    committed_lock_path(requirements, "aarch64").write_text(text)
    return requirements


def test_the_maintainer_resolves_a_lock_for_the_nodes_with_pypis_hashes(tmp_path: Path) -> None:
    requirements = tmp_path / "app-requirements.txt"
    requirements.write_text(REQUIREMENTS.read_text())
    pip = FakePip(_report(("PyYAML", "6.0.3"), ("confluent-kafka", "2.16.1"), ("pip", "26.3")))
    text = resolve_lock(requirements, "aarch64", pip=pip)
    [resolve] = pip.calls
    assert resolve[:3] == ["install", "--dry-run", "--ignore-installed"]
    assert resolve[resolve.index("--python-version") + 1] == "3.11" and resolve[resolve.index("--abi") + 1] == "cp311"
    platforms = [resolve[i + 1] for i, a in enumerate(resolve) if a == "--platform"]
    assert platforms[0] == "manylinux_2_34_aarch64" and "manylinux_2_28_aarch64" in platforms
    assert "--only-binary=:all:" in resolve
    assert [line for line in text.splitlines() if not line.startswith("#")] == [
        f"confluent-kafka==2.16.1 --hash=sha256:{DIGEST}",
        f"pip==26.3 --hash=sha256:{DIGEST}",
        f"pyyaml==6.0.3 --hash=sha256:{DIGEST}",
    ]
    committed_lock_path(requirements, "aarch64").write_text(text)
    assert committed_lock(requirements, "aarch64") == [line for line in text.splitlines() if line[0] != "#"]


def test_a_deploy_downloads_the_committed_lock_with_hashes_and_never_resolves(tmp_path: Path) -> None:
    """Issue 27: `pulumi up` installed from a lock it re-resolved against PyPI on every deploy."""
    pip = FakePip(_report())
    house = build_wheelhouse(REQUIREMENTS, tmp_path, "aarch64", pip=pip)
    [download] = pip.calls  # no `pip install --dry-run --report`: nothing is resolved
    assert download[:4] == ["download", "--quiet", "--no-deps", "--require-hashes"]
    assert download[download.index("--python-version") + 1] == "3.11" and "--only-binary=:all:" in download
    committed = committed_lock(REQUIREMENTS, "aarch64")
    assert committed == [
        line
        for line in (ROOT / "scripts" / "emr-wheelhouse-cp311-aarch64.lock").read_text().splitlines()
        if not line.startswith("#")
    ]
    assert (house.path / LOCK_FILE).read_text().splitlines() == sorted(committed)  # what the nodes install
    assert len(house.files) == len(committed) + 1 and house.files[-1] == LOCK_FILE
    again = FakePip(_report())
    assert build_wheelhouse(REQUIREMENTS, tmp_path, "aarch64", pip=again) == house and again.calls == []
    other = FakePip(_report())
    build_wheelhouse(REQUIREMENTS, tmp_path, "x86_64", pip=other)
    assert [c[0] for c in other.calls] == ["download"]  # another architecture: its own committed lock


@pytest.mark.parametrize("arch", ["aarch64", "x86_64"])
def test_the_committed_locks_are_current_and_fully_hashed(arch: str) -> None:
    """scripts/app-requirements.txt changed without scripts/emr-lock-refresh.sh: this fails (and so would a deploy)."""
    pins = committed_lock(REQUIREMENTS, arch)
    assert all(re.fullmatch(r"\S+==\S+ --hash=sha256:[0-9a-f]{64}", line) for line in pins)
    names = {line.split("==")[0] for line in pins}
    assert {"confluent-kafka", "pyarrow", "pandas", "pyyaml", "prometheus-client", "boto3", "pip"} <= names
    assert {"confluent-kafka==2.16.1", "pyarrow==26.0.1", "pandas==3.1.1"} <= {x.split(" ")[0] for x in pins}
    packaged = ROOT / "components" / "kafka_mirror" / "deploy" / committed_lock_path(REQUIREMENTS, arch).name
    assert packaged.read_text() == committed_lock_path(REQUIREMENTS, arch).read_text()  # what the wheel ships


def test_a_lock_resolved_from_other_requirements_is_refused_with_the_fix(tmp_path: Path) -> None:
    requirements = _locked(tmp_path, "pyyaml==6.0.3")
    requirements.write_text(requirements.read_text().replace("pyyaml==6.0.3", "pyyaml==6.0.2"))
    with pytest.raises(WheelhouseError) as info:
        build_wheelhouse(requirements, tmp_path / "out", "aarch64", pip=FakePip(_report()))
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'emr-wheelhouse-cp311-aarch64.lock'} was resolved from other requirements")
    assert message.endswith(
        "run scripts/emr-lock-refresh.sh (a maintainer, once, with PyPI reachable) and commit the locks"
    )
    with pytest.raises(WheelhouseError, match=r"cp311-x86_64.lock not found: run scripts/emr-lock-refresh.sh"):
        build_wheelhouse(requirements, tmp_path / "out", "x86_64", pip=FakePip(_report()))


def test_a_gssapi_wheelhouse_takes_the_users_wheel_instead_of_pypis(tmp_path: Path) -> None:
    wheels = tmp_path / "gssapi-wheels"
    wheels.mkdir()
    built = wheels / "confluent_kafka-2.16.1-1gssapi-cp311-cp311-manylinux_2_34_aarch64.whl"
    built.write_bytes(b"kerberos inside")
    requirements = _locked(tmp_path, "pyyaml==6.0.3", "confluent-kafka==2.16.1", "pip==26.3")
    pip = FakePip(_report())
    seen: list[str] = []
    real_call = pip.__call__

    def recording(args: list[str]) -> None:
        seen.extend(Path(args[-1]).read_text().splitlines())
        real_call(args)

    house = build_wheelhouse(requirements, tmp_path / "out", "aarch64", wheels, pip=recording)
    assert [c[0] for c in pip.calls] == ["download"]
    assert not [line for line in seen if line.startswith("confluent-kafka")]  # never downloaded from PyPI
    assert {line.split("==")[0] for line in seen} == {"pyyaml", "pip"}
    lock = (house.path / LOCK_FILE).read_text().splitlines()
    assert f"confluent-kafka==2.16.1 --hash=sha256:{hashlib.sha256(b'kerberos inside').hexdigest()}" in lock
    assert built.name in house.files and (house.path / built.name).read_bytes() == b"kerberos inside"


def test_a_gssapi_stack_without_the_users_wheel_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(WheelhouseError) as info:
        build_wheelhouse(REQUIREMENTS, tmp_path, "aarch64", tmp_path / "none", pip=FakePip(_report()))
    assert str(info.value) == (
        f"gssapi: true needs exactly one confluent_kafka-2.16.1-*gssapi-cp311-cp311-*aarch64.whl in {tmp_path / 'none'}"
        " (found 0): PyPI has no confluent-kafka wheel with GSSAPI; build it once on Amazon Linux 2023 on the nodes'"
        " architecture (aarch64) with scripts/build-emr-gssapi-wheel.sh and put it there (or set KMIRROR_GSSAPI_WHEELS)"
    )


def test_markers_evaluated_for_another_python_are_refused() -> None:
    with pytest.raises(WheelhouseError, match=r"resolved on Python 3\.12, but the EMR nodes run 3\.11"):
        lock_lines(_report(("pyyaml", "6.0.3"), python="3.12"))


def test_a_prebuilt_wheelhouse_must_hold_every_locked_wheel(tmp_path: Path) -> None:
    house = tmp_path / "cp311-aarch64"
    house.mkdir()
    (house / LOCK_FILE).write_text(f"pyyaml==6.0.3 --hash=sha256:{DIGEST}\n")
    with pytest.raises(WheelhouseError, match=r"requirements.lock pins pyyaml but has no wheel for it"):
        deploy_wheelhouses(REQUIREMENTS, ["aarch64"], False, {"KMIRROR_WHEELHOUSE": str(tmp_path)})
    with pytest.raises(WheelhouseError, match=r"cp311-x86_64/requirements.lock not found"):
        deploy_wheelhouses(REQUIREMENTS, ["x86_64"], False, {"KMIRROR_WHEELHOUSE": str(tmp_path)})


def _wheel_fits_al2023(file_name: str, arch: str) -> bool:
    """A wheel pip may install on CPython 3.11 / glibc 2.34 / `arch` (its python, abi and platform tags)."""
    python, abi, platform = file_name.removesuffix(".whl").split("-")[-3:]
    pythons_ok = any(p in ("py3", "cp311") or p.startswith("py3") for p in python.split("."))
    abi_ok = any(a in ("none", "cp311", "abi3") for a in abi.split("."))
    platform_ok = platform == "any" or any(
        p == f"manylinux2014_{arch}"
        or ((m := re.fullmatch(rf"manylinux_2_(\d+)_{arch}", p)) is not None and int(m.group(1)) <= AL2023_GLIBC_MINOR)
        for p in platform.split(".")
    )
    return pythons_ok and abi_ok and platform_ok


@pytest.mark.registry
@pytest.mark.parametrize("arch", ["aarch64", "x86_64"])
def test_app_requirements_resolve_to_wheels_for_the_emr_nodes(arch: str, tmp_path: Path) -> None:
    """What the deploy's wheelhouse build resolves, against PyPI, without installing anything."""
    report = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            *pip_target_args(arch),
            "--target",
            str(tmp_path / "t"),
            "--report",
            str(report),
            "-r",
            str(REQUIREMENTS),
            *NODE_EXTRA_REQUIREMENTS,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(report.read_text())
    files = {normalize(i["metadata"]["name"]): i["download_info"]["url"].rsplit("/", 1)[-1] for i in data["install"]}
    assert {"confluent-kafka", "pyarrow", "pandas", "pyyaml", "prometheus-client", "boto3", "pip"} <= set(files)
    assert not [f for f in files.values() if not _wheel_fits_al2023(f, arch)], files
    lock = lock_lines(data)
    assert len(lock) == len(files) and all(re.fullmatch(r"\S+==\S+ --hash=sha256:[0-9a-f]{64}", x) for x in lock)
    pinned = {x.split(" ")[0] for x in lock}
    assert {"confluent-kafka==2.16.1", "pyarrow==26.0.1", "pandas==3.1.1"} <= pinned  # the >= 3.11 pins
