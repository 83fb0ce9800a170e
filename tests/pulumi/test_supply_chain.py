"""What a deploy job installs (issue 27, supply chain): kafka-mirror is not on PyPI, so the policy
pack's venv and the Python example install the wheel this repository builds, pinned by its sha256
(scripts/ci-kafka-mirror-wheel.sh), never a package of that name from an index; every other
distribution is pinned with its hashes, so pip runs in --require-hashes mode."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import venv
import zipfile
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
INSTALL_INPUTS = [ROOT / "policy" / "requirements.txt", ROOT / "examples" / "python" / "requirements.txt"]
WHEEL_PIN = "dist/kafka-mirror-wheel.txt"
PIN_LINE = re.compile(r"^kafka-mirror @ file://(/\S+\.whl) --hash=sha256:([0-9a-f]{64})$")


def requirement_lines(path: Path) -> list[str]:
    """The logical lines of a requirements file: continuations joined, comments and blanks dropped."""
    joined = path.read_text().replace("\\\n", " ")
    return [text for line in joined.splitlines() if (text := re.sub(r"(^|\s)#.*$", "", line).strip())]


@pytest.mark.parametrize("path", INSTALL_INPUTS, ids=["policy", "example"])
def test_kafka_mirror_comes_only_from_the_built_wheels_pin(path: Path) -> None:
    """No line names kafka-mirror for an index to resolve; the one include is the wheel's pin file."""
    lines = requirement_lines(path)
    includes = [line.split(None, 1)[1] for line in lines if line.startswith(("-r ", "--requirement "))]
    assert len(includes) == 1 and (path.parent / includes[0]).resolve() == ROOT / WHEEL_PIN  # relative to the file
    named = [line for line in lines if not line.startswith("-") and _name(line) == "kafka-mirror"]
    assert named == [], f"{path}: kafka-mirror by name would be fetched from an index: {named}"
    options = [line for line in lines if line.startswith("-") and not line.startswith(("-r ", "--requirement "))]
    assert options == [], f"{path}: no index options (--find-links, --extra-index-url...): {options}"


@pytest.mark.parametrize("path", INSTALL_INPUTS, ids=["policy", "example"])
def test_every_other_distribution_is_pinned_with_hashes(path: Path) -> None:
    """What pip's --require-hashes mode demands: `name==version` and at least one sha256 per line."""
    pinned = []
    for line in requirement_lines(path):
        if line.startswith("-r "):
            continue
        requirement, *options = line.split(" --hash=")
        req = Requirement(requirement)
        assert [s.operator for s in req.specifier] == ["=="], f"{path}: {requirement} is not pinned exactly"
        assert options and all(re.fullmatch(r"sha256:[0-9a-f]{64}", o.strip()) for o in options), line
        pinned.append(canonicalize_name(req.name))
    assert len(pinned) == len(set(pinned)) and {"pulumi", "pulumi-aws", "pyyaml"} <= set(pinned)


def _name(line: str) -> str:
    return canonicalize_name(re.split(r"[\s@=<>!~;\[]", line, maxsplit=1)[0])


def _build(out: Path) -> tuple[str, Path, str]:
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "ci-kafka-mirror-wheel.sh"), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = (out / "kafka-mirror-wheel.txt").read_text().strip()
    found = PIN_LINE.match(line)
    assert found is not None and done.stdout.strip() == line, line
    return line, Path(found.group(1)), found.group(2)


@pytest.mark.registry  # the build backend (setuptools, pinned by hash) comes from PyPI
def test_the_pin_the_script_writes_is_the_sha256_of_the_wheel_it_built(tmp_path: Path) -> None:
    _, wheel, sha = _build(tmp_path / "a")
    assert wheel == tmp_path / "a" / f"kafka_mirror-{VERSION}-py3-none-any.whl"
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == sha
    assert {"kmirror/estate/planner.py", "kafka_mirror/eks/specs.py"} <= set(zipfile.ZipFile(wheel).namelist())
    _, again, sha_again = _build(tmp_path / "b")  # one commit, one wheel: the preview and the up agree
    assert sha_again == sha and again.read_bytes() == wheel.read_bytes()
    # a wheel changed after it was pinned is refused, offline, before anything of it runs
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.writestr("kafka_mirror/_tampered.py", "print('not what was built')\n")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    refused = subprocess.run(
        [
            str(env_dir / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--no-index",
            "--no-deps",
            "--require-hashes",
            "-r",
            str(tmp_path / "a" / "kafka-mirror-wheel.txt"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert refused.returncode != 0 and "DO NOT MATCH THE HASHES" in refused.stderr, refused.stderr[-2000:]


def _squatter(directory: Path) -> Path:
    """A `kafka-mirror` 0.1.99 as a squatted index would serve it (newer than ours, inside >=0.1,<0.2)."""
    directory.mkdir()
    wheel = directory / "kafka_mirror-0.1.99-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("kafka_mirror/__init__.py", "SQUATTED = True\n")
        archive.writestr(
            "kafka_mirror-0.1.99.dist-info/METADATA", "Metadata-Version: 2.1\nName: kafka-mirror\nVersion: 0.1.99\n"
        )
        archive.writestr(
            "kafka_mirror-0.1.99.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        archive.writestr("kafka_mirror-0.1.99.dist-info/RECORD", "")
    return directory


@pytest.mark.registry
@pytest.mark.slow
def test_the_policy_pack_venv_installs_the_built_wheel_in_hash_mode_past_a_squatter(tmp_path: Path) -> None:
    """policy/requirements.txt as the deploy job installs it (a fresh venv, pip --require-hashes), with
    a squatted, newer kafka-mirror on offer: the built wheel is installed, and the pack loads from it.
    (examples/python/requirements.txt is installed the same way by test_packaging.py's example run.)"""
    relative = "policy/requirements.txt"
    _, wheel, _ = _build(tmp_path / "dist")
    (tmp_path / relative).parent.mkdir(parents=True)
    shutil.copy(ROOT / relative, tmp_path / relative)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    done = subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--require-hashes",
            "--find-links",
            str(_squatter(tmp_path / "squat")),
            "-r",
            str(tmp_path / relative),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path / "squat",
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    probe = (
        "import json, importlib.metadata as m, kafka_mirror; d = m.distribution('kafka-mirror'); "
        "print(json.dumps([d.version, json.loads(d.read_text('direct_url.json'))['url'], "
        "hasattr(kafka_mirror, 'SQUATTED')]))"
    )
    installed = json.loads(
        subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path / "squat").stdout
    )  # not the checkout's egg-info
    assert installed == [VERSION, wheel.as_uri(), False]
    # the pack's rules import the planner from the installed wheel
    rules = subprocess.run(
        [python, "-c", "from kafka_mirror_policy.pack import build_policies; print(len(build_policies()))"],
        capture_output=True,
        text=True,
        cwd=ROOT / "policy",
        check=False,
    )
    assert rules.returncode == 0 and int(rules.stdout) > 0, rules.stderr[-2000:]
