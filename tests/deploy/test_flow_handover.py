"""A flow moved between datacenters, on the real engine and API server (issue 43, "Day two":
cross-stack safety). Two stacks of one file backend, `dc1` and `dc2`, each listing the other in
`kafka-mirror:peer_stacks`. The flow moves from dc1 to dc2: dc2's `up` is refused while dc1's
`flows` output (read through a StackReference) still lists it, and its app is not created; once
dc1's `up` has removed the flow, dc2's `up` deploys it.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from tests.deploy.apiserver import ControlPlane
from tests.deploy.engine import Engine, copy_project
from tests.deploy.test_stacks import forget_stack, operator_stand_in

FLOW = "local-a->local-b"
APP = "mirror-local-a-to-local-b"
STACKS = ("dc1", "dc2")


def apps_path(stack: str) -> str:
    return f"/apis/sparkoperator.k8s.io/v1beta2/namespaces/kmirror-{stack}/sparkapplications"


def write_topology(project: Path, run_in: str) -> None:
    topology = {
        "clusters": {
            "local-a": {"bootstrap_servers": "127.0.0.1:19092", "datacenter": "dc1"},
            "local-b": {"bootstrap_servers": "127.0.0.1:19093", "datacenter": "dc2"},
        },
        "topologies": [{"name": "moved", "pattern": "custom", "flows": [FLOW], "topics": ["demo.*"]}],
        "flows": {FLOW: {"run_in": run_in}},
    }
    (project / "handover.yaml").write_text(yaml.safe_dump(topology), encoding="utf-8")


def write_stack(project: Path, stack: str, cluster: ControlPlane) -> None:
    other = next(s for s in STACKS if s != stack)
    spark = {
        "platform": "eks",
        "namespace": f"kmirror-{stack}",
        "image": "kafka-mirror:dev",
        "image_pull_policy": "Never",
        "executors": 1,
        "executor_memory": "1g",
        "checkpoint_pvc": {
            "name": "kmirror-checkpoints",
            "size": "1Gi",
            "storage_class": "nfs-client",
            "access_mode": "ReadWriteMany",
        },
        "kubeconfig": {"file": str(cluster.kubeconfig_path), "context": "kmirror-test"},
        "operator": {"install": False},
        "check_prerequisites": False,  # AWS data-source reads: this engine has no AWS provider
    }
    config = {
        "kafka-mirror:datacenter": stack,
        "kafka-mirror:topology": "handover.yaml",
        "kafka-mirror:spark": spark,
        "kafka-mirror:peer_stacks": [f"organization/kafka-mirror/{other}"],
    }
    (project / "stacks" / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}), encoding="utf-8")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_project(tmp_path_factory.mktemp("handover"))


def test_the_gaining_stack_refuses_a_flow_the_losing_stack_still_runs(
    engine: Engine, cluster: ControlPlane, project: Path
) -> None:
    def run(stack: str, *args: str, check: bool = True) -> str:
        done = engine.run(*args, "-s", stack, cwd=project, check=check)
        return done.stdout + done.stderr if check else f"{done.returncode}\n{done.stdout}{done.stderr}"

    for stack in STACKS:
        forget_stack(engine, project, stack)
        write_stack(project, stack, cluster)
        engine.run("stack", "init", stack, "--secrets-provider", "passphrase", cwd=project)
    write_topology(project, run_in="dc1")
    started = time.monotonic()
    try:
        with operator_stand_in(cluster, namespaces=("kmirror-dc1", "kmirror-dc2")):
            run("dc1", "up", "--yes", "--skip-preview")  # dc2 exists (`stack init`): its outputs are none yet
            assert cluster.list_names(apps_path("dc1")) == [APP]

            write_topology(project, run_in="dc2")  # the flow moves; dc2 is deployed first, by mistake
            refused = run("dc2", "up", "--yes", "--skip-preview", check=False)
            assert not refused.startswith("0\n"), refused
            assert f"flow {FLOW}: stack organization/kafka-mirror/dc1 still runs this flow" in refused, refused
            assert "deploy organization/kafka-mirror/dc1 first" in refused, refused
            assert cluster.list_names(apps_path("dc2")) == [], "the refused stack created the flow's app"
            assert cluster.list_names(apps_path("dc1")) == [APP], "the losing stack's app is untouched"
            outputs = json.loads(run("dc2", "stack", "output", "--json"))
            assert outputs.get("flows", []) == [], outputs

            run("dc1", "up", "--yes", "--skip-preview")  # the losing stack removes the flow
            assert cluster.list_names(apps_path("dc1")) == []
            run("dc2", "up", "--yes", "--skip-preview")  # now the gaining stack deploys it
            assert cluster.list_names(apps_path("dc2")) == [APP]
            assert json.loads(run("dc2", "stack", "output", "--json"))["flows"] == [FLOW]
    finally:  # both at once: the CI time this test adds
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda s: engine.run("destroy", "--yes", "--skip-preview", "-s", s, cwd=project), STACKS))
    print(f"handover: {time.monotonic() - started:.0f} s")
