"""What the YAML and Python example tests run on their prepared copy of an example: the real
engine's preview, up (the objects read back from the API server), the secret kept secret, destroy."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from tests.deploy.apiserver import ControlPlane
from tests.deploy.engine import Engine
from tests.deploy.test_stacks import namespace_gone, operator_stand_in

NS = "kafka-mirror"


def deploy_example(engine: Engine, cluster: ControlPlane, project: Path, password: str) -> None:
    """Stack `dev` of `project`: preview, up, read back, destroy, `stack rm` (both examples name
    their stack `dev`); `password` is the east cluster's SCRAM password the example reads."""
    # the cluster is reached only through the stack's secret `eastKubeconfig`: an ambient kubeconfig
    # that points nowhere proves no object takes the default provider
    env = {"KUBECONFIG": str(project / "no-such-kubeconfig")}
    engine.run("stack", "init", "dev", "--secrets-provider", "passphrase", cwd=project)
    engine.run("config", "set", "--secret", "eastScramPassword", password, "-s", "dev", cwd=project)
    kubeconfig = Path(cluster.kubeconfig_path).read_text()
    engine.run("config", "set", "--secret", "eastKubeconfig", kubeconfig, "-s", "dev", cwd=project)
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
    engine.run("stack", "rm", "dev", "--yes", cwd=project)
