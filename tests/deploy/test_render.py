"""The render switch: `KMIRROR_RENDER_DIR=DIR pulumi up` writes every Kubernetes object of a stack
as YAML under DIR/<stack> instead of applying it (no cluster, no kubeconfig), with the real engine
and Kubernetes provider."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.deploy.engine import Engine, copy_project
from tests.deploy.test_stacks import forget_stack


def rendered(root: Path) -> dict[str, list[dict]]:
    by_kind: dict[str, list[dict]] = {}
    for path in sorted(root.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                by_kind.setdefault(doc["kind"], []).append(doc)
    return by_kind


def test_render_dir_writes_every_object_of_the_local_stack_without_a_cluster(
    engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> None:
    project = copy_project(tmp_path_factory.mktemp("render-project"))
    out = tmp_path_factory.mktemp("rendered")
    env = {"KMIRROR_RENDER_DIR": str(out)}
    forget_stack(engine, project, "local")
    engine.run("stack", "init", "local", "--secrets-provider", "passphrase", cwd=project)
    # the stack's kubeconfig (~/.kube/config, context kind-kind) is not read when rendering
    engine.run(
        "config",
        "set",
        "--path",
        "kafka-mirror:spark.kubeconfig.file",
        "/nonexistent/kubeconfig",
        "-s",
        "local",
        cwd=project,
    )
    engine.run("config", "set", "--path", "kafka-mirror:spark.operator.install", "false", "-s", "local", cwd=project)
    engine.run("up", "--yes", "--skip-preview", "-s", "local", cwd=project, env=env)
    objects = rendered(out / "local")
    apps = [a["metadata"]["name"] for a in objects.get("SparkApplication", [])]
    assert apps, f"rendered: {sorted(objects)}"
    assert [n["metadata"]["name"] for n in objects["Namespace"]] == ["kafka-mirror"]
    for kind in (
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "NetworkPolicy",
        "PersistentVolumeClaim",
        "ConfigMap",
        "Service",
        "PodDisruptionBudget",
    ):
        assert objects.get(kind), f"no {kind} rendered: {sorted(objects)}"
    assert {f"{a}-metrics" for a in apps} <= {s["metadata"]["name"] for s in objects["Service"]}
    engine.run("destroy", "--yes", "--skip-preview", "-s", "local", cwd=project, env=env)
    assert not list((out / "local").rglob("*.yaml")), "destroy removes the rendered files"
