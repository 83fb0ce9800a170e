"""`pulumi preview`/`up`/`destroy` of the `local` and `west` stacks by the real engine against a
real API server (tests/deploy/conftest.py says what the cluster has beforehand).

Per stack: preview, up (every object accepted: read back from the API server), a second up that
changes nothing, the state and outputs keep the test secrets secret, destroy leaves nothing of ours.
"""

from __future__ import annotations

import base64
import json
import secrets
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.deploy.apiserver import ControlPlane
from tests.deploy.engine import Engine, copy_project

NS = "kafka-mirror"
SPARK_APPS = f"/apis/sparkoperator.k8s.io/v1beta2/namespaces/{NS}/sparkapplications"
DASHBOARD = "/api/v1/namespaces/monitoring/configmaps/kafka-mirror-dashboard"  # west: Grafana's namespace
# what each stack makes in its namespace, by API path (the app-level objects are per flow)
NAMESPACED = {
    "configmaps": f"/api/v1/namespaces/{NS}/configmaps",
    "services": f"/api/v1/namespaces/{NS}/services",
    "serviceaccounts": f"/api/v1/namespaces/{NS}/serviceaccounts",
    "secrets": f"/api/v1/namespaces/{NS}/secrets",
    "roles": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles",
    "rolebindings": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings",
    "networkpolicies": f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies",
    "poddisruptionbudgets": f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets",
    "pvcs": f"/api/v1/namespaces/{NS}/persistentvolumeclaims",
    "sparkapplications": SPARK_APPS,
    "podmonitors": f"/apis/monitoring.coreos.com/v1/namespaces/{NS}/podmonitors",
    "prometheusrules": f"/apis/monitoring.coreos.com/v1/namespaces/{NS}/prometheusrules",
}


def forget_stack(engine: Engine, project: Path, stack: str) -> None:
    """An earlier test's `stack` (destroyed, or not if it failed) off the session's file backend.
    `stack rm` also deletes the stack's config file, so it runs in a throwaway copy of the project."""
    scratch = project.parent / f"{project.name}-rm-{stack}"
    engine.run("stack", "rm", stack, "--yes", "--force", cwd=copy_project(scratch), check=False)
    shutil.rmtree(scratch, ignore_errors=True)


def prepare_stack(engine: Engine, project: Path, stack: str, cluster: ControlPlane) -> dict[str, str]:
    """`stack` initialised on the file backend, pointed at the test cluster; returns its test secrets."""
    run = lambda *a: engine.run(*a, "-s", stack, cwd=project)  # noqa: E731
    forget_stack(engine, project, stack)
    engine.run("stack", "init", stack, "--secrets-provider", "passphrase", cwd=project)
    run("config", "set", "--path", "kafka-mirror:spark.operator.install", "false")
    # west's prerequisite checks are AWS data-source reads: this engine has no AWS provider
    run("config", "set", "--path", "kafka-mirror:spark.check_prerequisites", "false")
    made = {"scram": "scram-" + secrets.token_hex(12)}
    if stack == "west":
        run("config", "set", "--secret", "westKubeconfig", cluster.kubeconfig())
    else:
        run("config", "set", "--path", "kafka-mirror:spark.kubeconfig.file", str(cluster.kubeconfig_path))
        run("config", "set", "--path", "kafka-mirror:spark.kubeconfig.context", "kmirror-test")
    run("config", "set", "--secret", "testScramPassword", made["scram"])
    run("config", "set", "--path", "kafka-mirror:secrets.kmirror-test-scram.type", "scram")
    run("config", "set", "--path", "kafka-mirror:secrets.kmirror-test-scram.username", "mirrormaker")
    run("config", "set", "--path", "kafka-mirror:secrets.kmirror-test-scram.password.config", "testScramPassword")
    made["token"] = cluster.token
    return made


@contextmanager
def operator_stand_in(cluster: ControlPlane, namespaces: tuple[str, ...] = (NS,)) -> Iterator[list[str]]:
    """What the Spark operator does first for every SparkApplication: set its application state.
    No driver can run here, so the stand-in marks each new app in `namespaces` RUNNING (the state
    the program's `pulumi.com/waitFor` awaits) and yields the names it marked."""
    marked: list[str] = []
    seen: set[str] = set()
    failed: list[BaseException] = []
    stop = threading.Event()

    def mark() -> None:
        while not stop.wait(0.5):
            try:
                for path in (SPARK_APPS.replace(f"/{NS}/", f"/{ns}/") for ns in namespaces):
                    for name in cluster.list_names(path):
                        if f"{path}/{name}" not in seen:  # the CRD's schema requires driverInfo beside the state
                            status = {"applicationState": {"state": "RUNNING"}, "driverInfo": {}}
                            cluster.patch_status(f"{path}/{name}", status)
                            seen.add(f"{path}/{name}")
                            marked.append(name)
            except Exception as e:  # reported when the stand-in stops, never swallowed
                failed.append(e)
                return

    thread = threading.Thread(target=mark, daemon=True)
    thread.start()
    try:
        yield marked
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not failed, f"the operator stand-in failed: {failed[0]!r}"


def namespace_gone(cluster: ControlPlane, timeout: float = 90) -> bool:
    """True once the deleted namespace is finalized (by the controller manager's namespace controller)."""
    deadline = time.monotonic() + timeout
    while cluster.get(f"/api/v1/namespaces/{NS}") is not None and time.monotonic() < deadline:
        time.sleep(1)
    return cluster.get(f"/api/v1/namespaces/{NS}") is None


def ours(cluster: ControlPlane) -> dict[str, list[str]]:
    """Our objects in the namespace (the API server's own: the root CA ConfigMap, `default` SA, excluded)."""
    found = {kind: cluster.list_names(path) for kind, path in NAMESPACED.items()}
    found["configmaps"] = [n for n in found["configmaps"] if n != "kube-root-ca.crt"]
    found["serviceaccounts"] = [n for n in found["serviceaccounts"] if n != "default"]
    return {k: v for k, v in found.items() if v}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_project(tmp_path_factory.mktemp("project"))


@pytest.mark.parametrize("stack", ["local", "west"])
def test_preview_up_again_and_destroy_against_a_real_api_server(
    engine: Engine, cluster: ControlPlane, project: Path, stack: str
) -> None:
    made = prepare_stack(engine, project, stack, cluster)
    run = lambda *a, **kw: engine.run(*a, "-s", stack, cwd=project, **kw)  # noqa: E731

    preview = run("preview", "--diff")
    assert "+ " in preview.stdout and "kubernetes:core/v1:Namespace" in preview.stdout, preview.stdout
    assert made["scram"] not in preview.stdout + preview.stderr

    with operator_stand_in(cluster) as marked:
        up = run("up", "--yes", "--skip-preview")
    outputs = json.loads(run("stack", "output", "--json").stdout)
    apps = outputs["apps"]
    assert apps, f"{stack} deploys at least one flow: {outputs}"

    # every object the program made is in the API server, as the program meant it
    found = ours(cluster)
    assert sorted(found["sparkapplications"]) == sorted(apps.values()) == sorted(marked)
    assert set(found["configmaps"]) >= {f"{a}-flow" for a in apps.values()} or len(found["configmaps"]) >= len(apps)
    assert {f"{a}-metrics" for a in apps.values()} <= set(found["services"])
    assert "kafka-mirror" in found["serviceaccounts"]
    assert found["roles"] and found["rolebindings"] and found["networkpolicies"]
    assert "kmirror-test-scram" in found["secrets"]
    secret = cluster.get(f"/api/v1/namespaces/{NS}/secrets/kmirror-test-scram") or {}
    assert base64.b64decode(secret["data"]["password"]).decode() == made["scram"]
    app = cluster.get(f"{SPARK_APPS}/{sorted(apps.values())[0]}") or {}
    assert app["spec"]["sparkVersion"] and app["spec"]["mainApplicationFile"], app["spec"]
    if stack == "west":
        assert sorted(found["podmonitors"]) and found["prometheusrules"], found
        rule = cluster.get(f"/apis/monitoring.coreos.com/v1/namespaces/{NS}/prometheusrules/kafka-mirror") or {}
        links = {r["annotations"]["runbook_url"] for r in rule["spec"]["groups"][0]["rules"]}
        assert len(links) == 1 and links.pop().startswith("https://"), "each alert links an absolute runbook URL"
        assert cluster.get(DASHBOARD), "the dashboard is in Grafana's (monitoring) namespace, where its sidecar looks"
    else:
        assert found["pvcs"] == ["kmirror-checkpoints"], found

    # secrets: never in plaintext in the state (file backend, every file) nor in outputs or logs
    state = engine.state_text()
    for name, value in made.items():
        assert value not in state, f"the {name} test secret is in the stack state in plaintext"
        assert value not in up.stdout + up.stderr
    shown = run("stack", "output", "--show-secrets", "--json").stdout
    assert made["scram"] not in shown

    # a second up changes nothing (the applications' status is the operator's, not the program's)
    again = run("up", "--yes", "--expect-no-changes", "--skip-preview")
    assert again.returncode == 0

    run("destroy", "--yes", "--skip-preview")
    assert namespace_gone(cluster), "the namespace is gone after destroy"
    assert ours(cluster) == {}, "nothing of ours is left after destroy"
    assert not cluster.get(DASHBOARD), "the dashboard ConfigMap is gone after destroy"
    # the cluster's CRDs stay (the program never owned them here: operator.install is off)
    assert cluster.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/sparkapplications.sparkoperator.k8s.io")


def test_up_waits_for_the_app_to_run_and_names_it_when_it_never_does(
    engine: Engine, cluster: ControlPlane, tmp_path: Path
) -> None:
    """With no operator to run it, `up` does not report green: it waits `spark.app_start_timeout_s`
    for the SparkApplication's RUNNING state and fails naming the app (issue 43, item 6)."""
    project = copy_project(tmp_path / "project")
    prepare_stack(engine, project, "local", cluster)
    run = lambda *a, **kw: engine.run(*a, "-s", "local", cwd=project, **kw)  # noqa: E731
    run("config", "set", "--path", "kafka-mirror:spark.app_start_timeout_s", "20")
    started = time.monotonic()
    up = run("up", "--yes", "--skip-preview", check=False)
    waited = time.monotonic() - started
    assert up.returncode != 0, up.stdout
    text = up.stdout + up.stderr
    # the engine's own words (pulumi-kubernetes' waitFor): what it awaited and which app never got there
    assert "{.status.applicationState.state} selected nothing" in text, text[-3000:]
    assert "SparkApplication::mirror-local-a-to-local-b-app" in text, text[-3000:]
    assert "failed to fully initialize or become live" in text, text[-3000:]
    assert waited >= 20, f"up returned after {waited:.0f} s, before the 20 s wait"
    run("destroy", "--yes", "--skip-preview")


def test_apps_per_target_deploys_one_app_per_target_cluster(
    engine: Engine, cluster: ControlPlane, tmp_path: Path
) -> None:
    """`spark.apps_per: target` on the local stack: the API server accepts the target's app (a
    projected volume of the flows' ConfigMaps, one `--flow` per flow) and its metrics NetworkPolicy."""
    project = copy_project(tmp_path / "project")
    prepare_stack(engine, project, "local", cluster)
    run = lambda *a, **kw: engine.run(*a, "-s", "local", cwd=project, **kw)  # noqa: E731
    run("config", "set", "--path", "kafka-mirror:spark.apps_per", "target")
    with operator_stand_in(cluster) as marked:
        run("up", "--yes", "--skip-preview")
    try:
        assert json.loads(run("stack", "output", "apps", "--json").stdout) == {"local-a->local-b": "mirror-to-local-b"}
        assert ours(cluster)["sparkapplications"] == ["mirror-to-local-b"] == marked
        app = cluster.get(f"{SPARK_APPS}/mirror-to-local-b") or {}
        assert app["spec"]["arguments"] == ["--flow", "/etc/kmirror/flow/mirror-local-a-to-local-b.json"]
        assert "mirror-local-a-to-local-b-flow" in ours(cluster)["configmaps"]
        assert "mirror-to-local-b-metrics" in ours(cluster)["networkpolicies"]
    finally:
        run("destroy", "--yes", "--skip-preview")
    assert namespace_gone(cluster) and ours(cluster) == {}
