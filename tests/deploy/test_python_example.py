"""The Python example (examples/python) through the real engine (the Python host of
kmirror_cli/python_host.py running the SDK's own pulumi-language-python-exec) against the test
API server: preview, up (objects read back), the secret kept secret, destroy.

Two edits of the copy, both for this test bed: the runtime's `virtualenv` option dropped (the
program runs in the test's own venv, which has the package) and `operator: {install: False}` on
the platform (the operator's chart cannot be fetched here; the cluster has the operator's CRDs,
tests/deploy/conftest.py). The cluster is reached only through the stack's secret `eastKubeconfig`
(tests/deploy/examples.py)."""

from __future__ import annotations

import secrets
import shutil

import pytest
import yaml

from tests.deploy.apiserver import ControlPlane
from tests.deploy.engine import REPO, Engine
from tests.deploy.examples import deploy_example

PLATFORM = '"image": "ghcr.io/acme/kafka-mirror:0.1.0"}'


def test_the_python_example_previews_deploys_and_destroys_through_the_real_engine(
    engine: Engine, cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> None:
    project = tmp_path_factory.mktemp("python-example") / "python"
    shutil.copytree(REPO / "examples" / "python", project, ignore=shutil.ignore_patterns("venv", "__pycache__"))
    doc = yaml.safe_load((project / "Pulumi.yaml").read_text())
    doc["runtime"] = "python"
    (project / "Pulumi.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    program = (project / "__main__.py").read_text()
    assert PLATFORM in program, "the example's platform line changed: update this test's edit"
    (project / "__main__.py").write_text(program.replace(PLATFORM, PLATFORM[:-1] + ', "operator": {"install": False}}'))
    password = "python-scram-" + secrets.token_hex(12)
    deploy_example(engine, cluster, project, password)
