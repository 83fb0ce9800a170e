"""Session fixtures for the deploy tests (marker `engine`): the real Pulumi engine and a real
Kubernetes control plane on loopback, both started once per session (tests/deploy/engine.py,
tests/deploy/apiserver.py). Their logs stay in pytest's tmp dir (the basetemp printed on failure).

What the test cluster has beforehand, as a cluster admin would have set it up (the program
expects these to exist on an existing cluster):
- the `nfs-client` StorageClass (`local`'s checkpoint claim; WaitForFirstConsumer, as an NFS
  provisioner's class is commonly set; nothing provisions volumes here);
- the `monitoring` namespace, where the cluster's kube-prometheus-stack (Grafana, whose sidecar
  loads `west`'s dashboard ConfigMap from its own namespace) would live;
- the Prometheus operator's PodMonitor and PrometheusRule CRDs (prometheus-operator 0.93.0's own
  files, tests/deploy/data/), which `west` expects (`monitoring.install_crds` is off there);
- the Spark operator's CRDs: the stacks install the operator's Helm chart, which is fetched from the
  internet at deploy time and cannot be here, so the tests set `spark.operator.install: false`
  and apply the CRDs the program would have applied with it (`operator_crds()`, the same objects).
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kmirror_cli.deploy_tools import BuildError, tool_path
from tests.deploy.apiserver import ControlPlane
from tests.deploy.engine import Engine

DATA = Path(__file__).parent / "data"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/deploy/" in item.nodeid:
            item.add_marker(pytest.mark.engine)


def _require_tools(*names: str) -> None:
    try:
        for name in names:
            tool_path(name)
    except BuildError as e:  # a failure, not a skip: `make test` builds them first
        pytest.fail(f"{e}", pytrace=False)


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    _require_tools("pulumi", "pulumi-resource-kubernetes")
    return Engine(tmp_path_factory.mktemp("engine"))


def prometheus_crds() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(DATA.glob("prometheus-operator-*.yaml.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as text:
            docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def wait_established(cp: ControlPlane, names: list[str], timeout: float = 60) -> None:
    import time

    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            crd = cp.get(f"{CRDS}/{name}") or {}
            conds = {c["type"]: c["status"] for c in crd.get("status", {}).get("conditions", [])}
            if conds.get("Established") == "True":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not established")
            time.sleep(0.2)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    _require_tools("etcd", "kube-apiserver", "kube-controller-manager")
    from kafka_mirror.eks.spark_platform import operator_crds

    cp = ControlPlane(tmp_path_factory.mktemp("control-plane")).start()
    try:
        cp.apply(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": "nfs-client"},
                "provisioner": "cluster.local/nfs-subdir-external-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer",
            },
            "/apis/storage.k8s.io/v1/storageclasses",
        )
        cp.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "monitoring"}}, "/api/v1/namespaces")
        crds = [*prometheus_crds(), *operator_crds()]
        for crd in crds:
            cp.apply(crd, CRDS)
        wait_established(cp, [c["metadata"]["name"] for c in crds])
        yield cp
    finally:
        cp.stop()
