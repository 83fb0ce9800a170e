"""The YAML example (examples/yaml) through the real engine and the real `pulumi-language-yaml`,
against the component provider (components/, started by the engine through the Python host)
and the test API server: preview, up (objects read back), secrets kept, destroy.

Two edits of the copy, both for this test bed: the package path made absolute (the copy lives
elsewhere) and `operator: {install: false}` on the platform (the operator's chart cannot be fetched
here; the cluster has the operator's CRDs, tests/deploy/conftest.py). The cluster is reached
only through the stack's secret `eastKubeconfig` (tests/deploy/examples.py)."""

from __future__ import annotations

import secrets
import shutil

import pytest
import yaml

from tests.deploy.apiserver import ControlPlane
from tests.deploy.conftest import _require_tools
from tests.deploy.engine import REPO, Engine
from tests.deploy.examples import deploy_example


def test_the_yaml_example_previews_deploys_and_destroys_through_the_real_yaml_host(
    engine: Engine, cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _require_tools("pulumi-language-yaml")
    project = tmp_path_factory.mktemp("yaml-example") / "yaml"
    shutil.copytree(REPO / "examples" / "yaml", project)
    doc = yaml.safe_load((project / "Pulumi.yaml").read_text())
    doc["packages"]["kafka-mirror"] = str(REPO / "components")
    doc["resources"]["eastEks"]["properties"]["operator"] = {"install": False}
    (project / "Pulumi.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    password = "yaml-scram-" + secrets.token_hex(12)
    deploy_example(engine, cluster, project, password)
