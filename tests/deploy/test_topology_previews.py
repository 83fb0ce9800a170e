"""CI preview of topology diffs, for real: with `west` deployed on the test API server, an edit of
stacks/topology.yaml gives a `pulumi preview` that touches exactly the affected flow's resources;
the policy pack, run by the real engine, passes the estate and refuses a violating one."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kafka_mirror.eks.specs import app_name
from policy.kafka_mirror_policy.pack import PACK_NAME
from tests.deploy import identities as ids
from tests.deploy.apiserver import ControlPlane
from tests.deploy.engine import REPO, Engine, copy_project
from tests.deploy.identities import credential_file, exec_kubeconfig
from tests.deploy.test_stacks import namespace_gone, operator_stand_in, prepare_stack

STACK = "west"


@pytest.fixture(scope="module")
def west(engine: Engine, cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    project = copy_project(tmp_path_factory.mktemp("west-project"))
    shutil.copytree(REPO / "policy", project / "policy", ignore=shutil.ignore_patterns("venv", "__pycache__"))
    prepare_stack(engine, project, STACK, cluster)
    # the stack's kubeconfig names no identity: each run's credential is its own (tests/deploy/identities.py)
    admin = credential_file(project.parent / "admin-credential.json", cluster.token)
    engine.run("config", "set", "--secret", "westKubeconfig", exec_kubeconfig(cluster, admin), "-s", STACK, cwd=project)
    with operator_stand_in(cluster):  # the SparkApplications' RUNNING state, which `up` awaits
        engine.run("up", "--yes", "--skip-preview", "-s", STACK, cwd=project)
    yield project
    engine.run("destroy", "--yes", "--skip-preview", "-s", STACK, cwd=project)
    assert namespace_gone(cluster), "the namespace is gone after destroy"


def planned_changes(engine: Engine, project: Path) -> dict[str, str]:
    """Resource name -> operation, for every step of `pulumi preview` that is not `same`."""
    out = engine.run("preview", "--json", "-s", STACK, cwd=project).stdout
    steps = json.loads(out).get("steps", [])
    return {s["urn"].split("::")[-1]: s["op"] for s in steps if s["op"] != "same"}


def edit_topology(project: Path, edit: object) -> str:
    path = project / "stacks" / "topology.yaml"
    original = path.read_text()
    doc = yaml.safe_load(original)
    edit(doc)  # type: ignore[operator]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return original


def add_flow(doc: dict) -> None:
    doc["topologies"].append({"name": "added", "pattern": "custom", "flows": ["west-1->west-2"], "topics": ["new.*"]})


def change_topics(doc: dict) -> None:
    mesh = next(t for t in doc["topologies"] if t["name"] == "mesh")
    mesh["topics"] = [*mesh["topics"], "stock.*"]


def move_flow(doc: dict) -> None:
    doc["flows"]["east-2->west-1"] = {"run_in": "east"}


@pytest.mark.parametrize(
    ("edit", "flow", "ops", "clusters"),
    [
        (add_flow, "west-1->west-2", {"create"}, set()),
        # the flow's config is a ConfigMap: the provider replaces one whose data changes (named, so delete first)
        (change_topics, "east-2->west-2", {"update", "replace"}, set()),
        # west-1 is the target of no other flow run in west: its KafkaCluster component goes with the flow
        (move_flow, "east-2->west-1", {"delete"}, {"west-topology-west-1"}),
    ],
    ids=["add-a-flow", "change-a-topic-pattern", "move-a-flow-to-east"],
)
def test_a_topology_edit_previews_exactly_the_affected_flows_resources(
    engine: Engine, west: Path, edit: object, flow: str, ops: set[str], clusters: set[str]
) -> None:
    assert planned_changes(engine, west) == {}, "the deployed stack previews no change before the edit"
    original = edit_topology(west, edit)
    try:
        changes = planned_changes(engine, west)
        app = app_name(flow)
        assert changes, f"{flow}: the edit previews no change"
        assert {n for n in changes if not n.startswith(app)} == clusters, f"only {app}'s resources change: {changes}"
        assert set(changes.values()) <= ops, changes
        assert f"{app}-app" in changes, changes  # the SparkApplication itself
        if ops != {"update", "replace"}:  # the whole flow comes or goes: app, config, metrics service, PDB
            assert {app, f"{app}-app", f"{app}-flow", f"{app}-metrics"} <= set(changes), changes
        diff = engine.run("preview", "--diff", "-s", STACK, cwd=west).stdout
        assert app in diff
        others = [app_name(f) for f in ("central->west-2", "east-2->west-1", "east-2->west-2") if f != flow]
        changed_lines = [ln for ln in diff.splitlines() if ln.lstrip()[:1] in "+-~"]
        assert not [ln for ln in changed_lines if any(o in ln for o in others)], diff
    finally:
        (west / "stacks" / "topology.yaml").write_text(original)


def test_the_policy_pack_passes_the_estate_and_refuses_a_second_stack_of_the_same_datacenter(
    engine: Engine, west: Path
) -> None:
    env: dict[str, str] = {}  # no project_dir, no $KMIRROR_PROJECT_DIR: the pack finds the project as in CI
    ok = engine.run("preview", "--policy-pack", "policy", "-s", STACK, cwd=west, env=env)
    assert PACK_NAME in ok.stdout and "mandatory" not in ok.stdout.lower(), ok.stdout
    second = west / "stacks" / "Pulumi.west-b.yaml"
    shutil.copy2(west / "stacks" / f"Pulumi.{STACK}.yaml", second)
    try:
        refused = engine.run("preview", "--policy-pack", "policy", "-s", STACK, cwd=west, env=env, check=False)
    finally:
        second.unlink()
    assert refused.returncode != 0, refused.stdout
    assert "one-stack-per-flow" in refused.stdout, refused.stdout


def test_the_deploy_script_runs_the_real_cli_with_the_policy_pack(
    engine: Engine, west: Path, cluster: ControlPlane, tmp_path: Path
) -> None:
    """scripts/ci-deploy.sh (the workflow's `up` job) with the real `pulumi`: stand-ins only for the
    AWS role assumption (`curl` for GitHub's OIDC token, `aws sts`), which needs no cloud here."""
    from tests.test_ci_deploy import STUBS

    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name in ("curl", "aws"):
        (stubs / name).write_text(f"#!/usr/bin/env bash\n{STUBS[name]}\n")
        (stubs / name).chmod(0o755)
    image = "123456789012.dkr.ecr.us-west-2.amazonaws.com/kafka-mirror@sha256:" + "cd" * 32
    env = engine.env(
        ORDER='["west"]',
        IMAGE=image,
        PULUMI_ORG="organization",
        LOG=str(tmp_path / "log"),
        ACTIONS_ID_TOKEN_REQUEST_URL="https://token?x=1",
        ACTIONS_ID_TOKEN_REQUEST_TOKEN="req",
        AWS_DEPLOY_ROLES=json.dumps({"west": "arn:aws:iam::123456789012:role/deploy-west"}),
        KMIRROR=str(Path(sys.executable).parent / "kmirror"),
    )
    env["PATH"] = f"{stubs}:{env['PATH']}"
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "ci-deploy.sh")],
        cwd=west,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-3000:]
    assert PACK_NAME in done.stdout, "the policy pack ran with the deploy"
    apps = cluster.get("/apis/sparkoperator.k8s.io/v1beta2/namespaces/kafka-mirror/sparkapplications") or {}
    images = {a["metadata"]["name"]: a["spec"]["image"] for a in apps.get("items", [])}
    assert images and set(images.values()) == {image}, images
    assert image in (west / "stacks" / "Pulumi.west.yaml").read_text(), "the digest is recorded in the stack file"


def test_a_pull_requests_preview_needs_only_the_view_role_in_the_namespaces_and_drift_needs_secrets(
    engine: Engine, west: Path, cluster: ControlPlane, tmp_path: Path
) -> None:
    """Issue 43 item 7 against a real API server: `preview_roles` get AmazonEKSViewPolicy in the apps'
    and the dashboard's namespaces only. Its stand-in here is a ServiceAccount bound there to what the
    `view` ClusterRole aggregates (no Secrets, no RBAC objects, no custom resources, nothing
    cluster-scoped). A pull request's `pulumi preview --diff` (no refresh) passes with it, the changed
    objects and the unchanged ones: the provider diffs against the
    state, and the server-side dry-run of a changed object, which RBAC refuses (`patch`), is skipped
    in a preview. A `--refresh` (the drift job) reads every
    object and is refused; the drift role's read-all grant (AmazonEKSAdminViewPolicy) passes it."""
    rules = (cluster.get(f"{ids.RBAC}/clusterroles/system:aggregate-to-view") or {})["rules"]
    ids.cluster_role(cluster, "kmirror-test-view", rules)  # `view` here: no aggregation controller runs
    read_all = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}]
    ids.cluster_role(cluster, "kmirror-test-admin-view", read_all)
    as_preview = {
        ids.CREDENTIAL_ENV: str(credential_file(tmp_path / "p.json", ids.service_account_token(cluster, "preview")))
    }
    as_drift = {
        ids.CREDENTIAL_ENV: str(credential_file(tmp_path / "d.json", ids.service_account_token(cluster, "drift")))
    }
    for namespace in ("kafka-mirror", "monitoring"):
        ids.bind(cluster, "preview", "kmirror-test-view", namespace)
    ids.bind(cluster, "drift", "kmirror-test-admin-view")
    run = lambda *a, env: engine.run(*a, "-s", STACK, cwd=west, env=env, check=False)  # noqa: E731

    original = edit_topology(west, change_topics)
    try:
        changed = run("preview", "--diff", env=as_preview)
    finally:
        (west / "stacks" / "topology.yaml").write_text(original)
    assert changed.returncode == 0, changed.stdout[-3000:] + changed.stderr[-3000:]
    # every other object is previewed unchanged: nothing read from the cluster
    assert re.search(r"\b2 changes\. \d+ unchanged", changed.stdout), changed.stdout
    app = app_name("east-2->west-2")
    assert f"ConfigMap::{app}-flow" in changed.stdout and '+ [1]: "stock.*"' in changed.stdout, changed.stdout
    # the dry-run was tried and refused (the provider logs it): the read-only identity wrote nothing
    assert f'configmaps "{app}-flow" is forbidden' in changed.stderr and "cannot patch" in changed.stderr

    refresh = run("preview", "--diff", "--refresh", env=as_preview)
    assert refresh.returncode != 0, refresh.stdout[-3000:]
    text = refresh.stdout + refresh.stderr
    refused = set(re.findall(r'cannot (?:get|list) resource "([a-z]+)"', text))
    # what `view` does not read (Secrets; RBAC objects; custom resources; cluster-scoped objects:
    # the PriorityClass, and the CRDs and Helm's storage Secrets too with operator.install, docs/ci-preview.md);
    # never what it does (the flows' ConfigMaps, Services, PDBs, the dashboard's ConfigMap)
    beyond_view = {"secrets", "roles", "rolebindings", "priorityclasses", "customresourcedefinitions"}
    assert refused and refused <= beyond_view | {"sparkapplications", "podmonitors", "prometheusrules"}, text[-4000:]

    drift = run("preview", "--diff", "--refresh", "--expect-no-changes", env=as_drift)
    assert drift.returncode == 0, drift.stdout[-3000:] + drift.stderr[-3000:]
