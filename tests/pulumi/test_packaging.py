"""The package others install: ranges in pyproject.toml, exact pins in constraints.txt (and the
pin files derived from it), a wheel that carries what a deploy needs, the Python example run from
a fresh venv with that wheel, the TypeScript example checked against schema.json (the YAML example
is run against the provider: test_yaml_example.py), and an install into a venv with another
pulumi-aws that pulls no Spark."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import venv
import zipfile
from pathlib import Path
from typing import Any

import pytest
import tomllib
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SCHEMA = json.loads((ROOT / "components" / "schema.json").read_text())
SPARK_STACK = {"pyspark", "pandas", "pyarrow", "confluent-kafka", "py4j"}


def pins(path: Path) -> dict[str, str]:
    """name -> version of the `==` lines of a requirements file whose markers hold here (continued
    lines joined, `--hash` options left out)."""
    found = {}
    for line in path.read_text().replace("\\\n", " ").splitlines():
        text = line.split("#", 1)[0].split(" --hash=", 1)[0].strip()
        if "==" in text and not text.startswith("-"):
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate():
                found[canonicalize_name(req.name)] = str(req.specifier).removeprefix("==")
    return found


CONSTRAINTS = pins(ROOT / "constraints.txt")


def test_every_dependency_is_a_range_and_its_pin_satisfies_it() -> None:
    extras = PROJECT["optional-dependencies"]
    for line in [*PROJECT["dependencies"], *extras["app"], *extras["policy"], *extras["dev"]]:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        assert not any(s.operator == "==" for s in req.specifier), f"{line}: ranges here, pins in constraints.txt"
        assert name in CONSTRAINTS, f"{name} has no pin in constraints.txt"
        pin = CONSTRAINTS[name]
        assert req.specifier.contains(pin, prereleases=True), f"{name}=={pin} is outside {line}"
    core = {canonicalize_name(Requirement(r).name) for r in PROJECT["dependencies"]}
    assert not core & SPARK_STACK, "the IaC side must not pull the Spark app's runtime"
    assert {canonicalize_name(Requirement(r).name) for r in extras["app"]} >= {"pyspark", "pandas", "pyarrow"}


def test_pin_files_agree_with_the_constraints() -> None:
    for path, own in (
        (ROOT / "scripts" / "app-requirements.txt", set()),
        (ROOT / "scripts" / "spark40-requirements.txt", {"pyspark"}),  # the Spark 4.0 leg's own
        (ROOT / "policy" / "requirements.txt", {"setuptools"}),
    ):  # pulumi-policy's
        found = pins(path)
        assert found, path
        assert {k: v for k, v in found.items() if k not in own} == {k: CONSTRAINTS[k] for k in found if k not in own}


def test_the_plugin_venv_gets_the_package_dependencies() -> None:
    lines = [x for x in (ROOT / "components" / "requirements.txt").read_text().splitlines() if x and x[0] != "#"]
    assert lines == PROJECT["dependencies"]
    plugin = yaml.safe_load((ROOT / "components" / "PulumiPlugin.yaml").read_text())
    assert plugin["runtime"]["name"] == "python"
    entry = (ROOT / "components" / "__main__.py").read_text()
    assert "from kafka_mirror.provider import main" in entry
    assert (
        "KafkaMirrorProvider(list(COMPONENTS), PACKAGE, None, package_version())"
        in (ROOT / "components" / "kafka_mirror" / "provider.py").read_text()
    )


def _resource(token: str) -> dict[str, Any]:
    assert token in SCHEMA["resources"], f"{token} is not in schema.json"
    return dict(SCHEMA["resources"][token])


def _check_object(props: dict[str, Any], value: dict[str, Any], where: str) -> None:
    """Every key of `value` is a property in `props`; nested objects against their schema types."""
    for key, item in value.items():
        assert key in props, f"{where}: no property {key!r} (has {sorted(props)})"
        ref = props[key].get("$ref", "")
        if ref.startswith("#/types/") and isinstance(item, dict):
            _check_object(SCHEMA["types"][ref.removeprefix("#/types/")]["properties"], item, f"{where}.{key}")


def test_the_typescript_example_uses_only_what_the_schema_has() -> None:
    text = (ROOT / "examples" / "typescript" / "index.ts").read_text()
    declared = dict(re.findall(r"const (\w+) = new kafkaMirror\.(\w+)\(", text))
    assert set(declared.values()) == {"ReplicationTopology", "ScramSecret", "EksSparkPlatform", "MirrorDeployment"}
    for var, typ in declared.items():
        body = text.split(f"const {var} = new kafkaMirror.{typ}(", 1)[1].split("\n});", 1)[0]
        resource = _resource(f"kafka-mirror:index:{typ}")
        keys = re.findall(r"^    (\w+):", body, re.MULTILINE)
        _check_object(resource["inputProperties"], dict.fromkeys(keys), var)
        assert set(resource.get("requiredInputs", [])) <= set(keys), var
        for key, nested in re.findall(r"^    (\w+): \{ (.*) \},?$", body, re.MULTILINE):
            _check_object(resource["inputProperties"], {key: dict.fromkeys(re.findall(r"(\w+):", nested))}, var)
    for var, prop in re.findall(r"\b(\w+)\.(\w+)\b", text):
        if var in declared:
            assert prop in _resource(f"kafka-mirror:index:{declared[var]}")["properties"], f"{var}.{prop}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)], check=True, timeout=600
    )
    [built] = out.glob("kafka_mirror-*.whl")
    return built


@pytest.mark.registry
@pytest.mark.slow
def test_the_wheel_carries_what_a_deploy_needs(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for f in (
        "kmirror_main.py",
        "emr-bootstrap.sh",
        "app-requirements.txt",
        "kmirror-sync-secrets.py",
        "emr-wheelhouse-cp311-aarch64.lock",
        "emr-wheelhouse-cp311-x86_64.lock",
    ):
        assert f"kafka_mirror/deploy/{f}" in names
        assert zipfile.ZipFile(wheel).read(f"kafka_mirror/deploy/{f}") == (ROOT / "scripts" / f).read_bytes()
    assert {
        "kafka_mirror/__init__.py",
        "kafka_mirror/provider.py",
        "kmirror/estate/planner.py",
        "spark_app/main.py",
    } <= names
    assert not any(n.startswith("components/") for n in names)


@pytest.mark.registry
@pytest.mark.slow
def test_the_python_example_runs_under_mocks_from_a_fresh_venv(tmp_path: Path) -> None:
    """Installed from examples/python/requirements.txt as a user of this repository does: the wheel
    scripts/ci-kafka-mirror-wheel.sh builds, pinned by its sha256, everything else by hash."""
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "ci-kafka-mirror-wheel.sh"), str(tmp_path / "dist")], check=True, timeout=600
    )
    (tmp_path / "examples" / "python").mkdir(parents=True)
    requirements = tmp_path / "examples" / "python" / "requirements.txt"  # `-r ../../dist/...` as in the checkout
    requirements.write_text((ROOT / "examples" / "python" / "requirements.txt").read_text())
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--require-hashes", "-r", str(requirements)],
        check=True,
        timeout=900,
    )
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True, check=True
    ).stdout
    installed = {canonicalize_name(p["name"]) for p in json.loads(listed)}
    assert "kafka-mirror" in installed and not installed & SPARK_STACK
    runner = [str(python), str(ROOT / "tests" / "pulumi" / "example_runner.py"), str(ROOT / "examples" / "python")]

    def run_example(*config: str) -> subprocess.CompletedProcess[str]:
        """The Python example under tests/pulumi/example_runner.py with this stack `config`."""
        return subprocess.run(
            [*runner, *config], capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False
        )

    done = run_example("eastScramPassword=from-the-stack", "eastKubeconfig=apiVersion: v1")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["kafka_mirror"].startswith(str(env_dir))  # the wheel, not the checkout
    assert result["exports"] == {
        "flows": ["west-1->east-1"],
        "app": "mirror-west-1-to-east-1",
        "metrics": "http://mirror-west-1-to-east-1-metrics.kafka-mirror.svc.cluster.local:9404/metrics",
    }
    assert "kubernetes:sparkoperator.k8s.io/v1beta2:SparkApplication west-1-to-east-1-app" in result["resources"]
    print(done.stdout)
    # no password fallback: without the stack secret the example refuses to run, naming it
    unset = run_example("eastKubeconfig=apiVersion: v1")
    assert unset.returncode != 0 and "eastScramPassword" in unset.stderr, unset.stderr[-2000:]


@pytest.mark.registry
def test_installs_next_to_another_pulumi_aws_without_spark(wheel: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--dry-run",
            "--ignore-installed",
            "--report",
            str(report),
            str(wheel),
            "pulumi-aws==7.25.0",
            "pulumi-kubernetes==4.19.0",
        ],
        check=True,
        timeout=600,
    )
    installs = json.loads(report.read_text())["install"]
    resolved = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in installs}
    assert resolved["pulumi-aws"] == "7.25.0" and resolved["pulumi-kubernetes"] == "4.19.0"
    assert resolved["kafka-mirror"] == PROJECT["version"]
    assert not set(resolved) & SPARK_STACK, sorted(set(resolved) & SPARK_STACK)
