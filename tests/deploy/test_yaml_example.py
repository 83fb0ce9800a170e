"""The YAML example (examples/yaml) through the real engine and the real `pulumi-language-yaml`,
against the component provider (components/, started by the engine through the Python host)
and the test API server: preview, up (objects read back), secrets kept, destroy.

Two edits of the copy, both for this test bed: the package path made absolute (the copy lives
elsewhere) and `operator: {install: false}` on the platform (the operator's chart cannot be fetched
here; the cluster has the operator's CRDs, tests/deploy/conftest.py). The cluster is reached
through the ambient KUBECONFIG, as the example expects."""

from __future__ import annotations

import base64
import json
import secrets
import shutil

import pytest
import yaml

from tests.deploy.apiserver import ControlPlane
from tests.deploy.conftest import _require_tools
from tests.deploy.engine import REPO, Engine
from tests.deploy.test_stacks import namespace_gone, operator_stand_in

NS = "kafka-mirror"


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
    env = {"KUBECONFIG": str(cluster.kubeconfig_path)}

    engine.run("stack", "init", "dev", "--secrets-provider", "passphrase", cwd=project)
    engine.run("config", "set", "--secret", "eastScramPassword", password, "-s", "dev", cwd=project)
    preview = engine.run("preview", "-s", "dev", cwd=project, env=env)
    assert "kafka-mirror:index:MirrorDeployment" in preview.stdout, preview.stdout
    with operator_stand_in(cluster) as marked:  # the app's RUNNING state, which `up` awaits
        up = engine.run("up", "--yes", "--skip-preview", "-s", "dev", cwd=project, env=env)
    outputs = json.loads(engine.run("stack", "output", "--json", "-s", "dev", cwd=project).stdout)
    assert outputs["app"] == "mirror-west-1-to-east-1" and marked == [outputs["app"]], outputs
    assert "west-1->east-1" in outputs["flows"]

    app = cluster.get(f"/apis/sparkoperator.k8s.io/v1beta2/namespaces/{NS}/sparkapplications/{outputs['app']}")
    assert app and app["spec"]["image"] == "ghcr.io/acme/kafka-mirror:0.1.0", app
    secret = cluster.get(f"/api/v1/namespaces/{NS}/secrets/east-1-scram") or {}
    assert base64.b64decode(secret["data"]["password"]).decode() == password
    assert password not in engine.state_text() and password not in up.stdout + up.stderr

    engine.run("destroy", "--yes", "--skip-preview", "-s", "dev", cwd=project, env=env)
    assert cluster.get(f"/api/v1/namespaces/{NS}/secrets/east-1-scram") is None
    assert cluster.list_names(f"/apis/sparkoperator.k8s.io/v1beta2/namespaces/{NS}/sparkapplications") == []
    assert namespace_gone(cluster)
    engine.run("stack", "rm", "dev", "--yes", cwd=project)  # the Python example's stack has the same name
