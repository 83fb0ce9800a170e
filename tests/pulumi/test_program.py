"""The whole Pulumi program under the SDK's mocks, once per example stack: what is deployed
where, parents, secrets (secret end to end, mounted where the app reads them), rendered objects
valid against Kubernetes' schemas and the SparkApplication CRD, and names that survive an
unrelated topology edit."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from kafka_mirror.bundle import build_bundle
from kafka_mirror.eks.specs import app_name
from kmirror.estate.planner import load_topology, plan_topology
from kmirror.flow.spec import parse_flow_spec
from tests.pulumi.harness import ROOT, SECRET_VALUES, Run, is_secret, run_program, stack_config, unwrap
from tests.pulumi.sparkapp_schema import validate_k8s, validate_spark_application

SPARK_APP = "kubernetes:sparkoperator.k8s.io/v1beta2:SparkApplication"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
K8S_SECRET = "kubernetes:core/v1:Secret"
STEP = "aws:lambda/invocation:Invocation"  # a flow's EMR step, through the platform's step function
COMPONENT = re.compile(r"^kafka-mirror:index:")
EXPECTED = {  # from stacks/topology.yaml: each flow runs in its target's datacenter unless run_in says otherwise
    "west": ["central->west-2", "east-2->west-1", "east-2->west-2"],
    "east": ["central->east-2", "west-1->east-1", "west-2->east-2"],
    "central": ["east-1->central", "west-1->central"],
    "local": ["local-a->local-b"],
}
_runs: dict[str, Run] = {}


WHEELS = (
    "pip-26.3-py3-none-any.whl",
    "boto3-1.44.5-py3-none-any.whl",
    "pyyaml-6.0.3-cp311-cp311-manylinux_2_28_aarch64.whl",
)
GSSAPI_WHEEL = "confluent_kafka-2.16.1-1gssapi-cp311-cp311-manylinux_2_34_aarch64.whl"


def fake_wheelhouse(root: Path, kafka_wheel: str = GSSAPI_WHEEL, extra: str = "") -> Path:
    """A prebuilt `$KMIRROR_WHEELHOUSE` for the example stacks' Graviton nodes (placeholder wheels:
    the program only uploads them; tests/pulumi/test_wheelhouse.py resolves real ones)."""
    house = root / "cp311-aarch64"
    house.mkdir(parents=True)
    lock = []
    for name in (*WHEELS, kafka_wheel):
        (house / name).write_bytes(f"{name}{extra}".encode())
        dist, version = name.split("-")[:2]
        lock.append(f"{dist.replace('_', '-').lower()}=={version} --hash=sha256:{'0' * 64}")
    (house / "requirements.lock").write_text("\n".join(sorted(lock)) + "\n")
    return root


@contextmanager
def prebuilt_artifacts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """While inside: a bundle built from this tree in `$KMIRROR_BUNDLE` and a placeholder
    wheelhouse (`fake_wheelhouse`) in `$KMIRROR_WHEELHOUSE`, so a program run builds nothing."""
    path, _ = build_bundle(ROOT, tmp_path_factory.mktemp("bundle"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KMIRROR_BUNDLE", str(path))
        patch.setenv("KMIRROR_WHEELHOUSE", str(fake_wheelhouse(tmp_path_factory.mktemp("wheelhouse"))))
        yield


@pytest.fixture(scope="module", autouse=True)
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One bundle and wheelhouse for every run: other work on the source tree must not change step
    args mid-test, and the program must not download wheels."""
    with prebuilt_artifacts(tmp_path_factory):
        yield


def stack_run(stack: str) -> Run:
    if stack not in _runs:
        _runs[stack] = run_program(stack)
    return _runs[stack]


def step_input(step: Any) -> dict[str, Any]:
    """The JSON input a flow's step Invocation sends to the step function."""
    return dict(json.loads(unwrap(step.inputs)["input"]))


def manifest(resource: Any, api_version: str, kind: str) -> dict[str, Any]:
    body = {k: v for k, v in unwrap(resource.inputs).items() if k not in ("apiVersion", "kind")}
    return {"apiVersion": api_version, "kind": kind, **body}


def test_expectations_match_the_planner() -> None:
    plan = plan_topology(load_topology(str(ROOT / "stacks" / "topology.yaml")))
    assert {dc: [f.id for f in plan.flows_in(dc)] for dc in EXPECTED} == EXPECTED


@pytest.mark.parametrize("stack", sorted(EXPECTED))
def test_one_deployment_per_local_flow_and_nothing_else(stack: str) -> None:
    run = stack_run(stack)
    deployments = run.of_type("kafka-mirror:index:MirrorDeployment")
    assert sorted(d.name for d in deployments) == sorted(app_name(f) for f in EXPECTED[stack])
    assert run.exports["flows"] == EXPECTED[stack]
    assert run.exports["apps"] == {f: app_name(f) for f in EXPECTED[stack]}
    assert sorted(run.exports["metrics"]) == sorted(app_name(f) for f in EXPECTED[stack])
    other_apps = {app_name(f) for dc, flows in EXPECTED.items() if dc != stack for f in flows}
    assert not [r.name for r in run.resources if any(r.name.startswith(a) for a in other_apps)]
    if stack == "central":
        assert len(run.of_type(STEP)) == len(EXPECTED[stack]) and not run.of_type(SPARK_APP)
        flow_objects = [r for r in run.of_type("aws:s3/bucketObjectv2:BucketObjectv2") if r.name.endswith("-flow")]
        assert len(flow_objects) == len(EXPECTED[stack])
    else:
        flow_maps = [c for c in run.of_type(CONFIG_MAP) if c.name.endswith("-flow")]
        assert len(run.of_type(SPARK_APP)) == len(flow_maps) == len(EXPECTED[stack])
        assert len(run.of_type("kubernetes:policy/v1:PodDisruptionBudget")) == len(EXPECTED[stack])
        assert len(run.of_type("kubernetes:core/v1:Service")) == len(EXPECTED[stack]) and not run.of_type(STEP)
        charts = sorted(unwrap(r.inputs)["chart"] for r in run.of_type("kubernetes:helm.sh/v3:Release"))
        # east declares no Prometheus yet: no PodMonitors, no Prometheus CRDs (tests/pulumi/test_eks_first_up.py)
        assert charts == ["spark-operator"]


@pytest.mark.parametrize("stack", sorted(EXPECTED))
def test_every_resource_has_a_component_parent_named_as_its_prefix(stack: str) -> None:
    run = stack_run(stack)
    for resource in run.resources:
        parent_type = resource.parent.split("::")[-2].split("$")[-1]
        if COMPONENT.match(resource.typ) and parent_type == "pulumi:pulumi:Stack":
            continue  # the program's top-level components
        assert COMPONENT.match(parent_type), f"{resource.typ} {resource.name} has parent {resource.parent}"
        parent_name = resource.parent.split("::")[-1]
        assert resource.name.startswith(f"{parent_name}-"), (resource.name, parent_name)
    tops = {
        r.typ.split(":")[-1] for r in run.resources if r.parent.endswith(f"pulumi:pulumi:Stack::kafka-mirror-{stack}")
    }
    platform = "EmrSparkPlatform" if stack == "central" else "EksSparkPlatform"
    assert tops == {"ReplicationTopology", platform, "MirrorDeployment"}


@pytest.mark.parametrize("stack", ["east", "west", "local"])
def test_kubernetes_objects_validate_and_apps_fit_the_crd(stack: str) -> None:
    run = stack_run(stack)
    kinds = {
        "kubernetes:core/v1:Namespace": "Namespace",
        "kubernetes:core/v1:ServiceAccount": "ServiceAccount",
        "kubernetes:core/v1:Service": "Service",
        CONFIG_MAP: "ConfigMap",
        K8S_SECRET: "Secret",
        "kubernetes:core/v1:PersistentVolumeClaim": "PersistentVolumeClaim",
    }
    apis = {"kubernetes:policy/v1:PodDisruptionBudget": ("policy/v1", "PodDisruptionBudget")}
    rbac = {
        "kubernetes:rbac.authorization.k8s.io/v1:Role": "Role",
        "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding": "RoleBinding",
    }
    checked = 0
    for resource in run.resources:
        if resource.typ in kinds:
            validate_k8s(manifest(resource, "v1", kinds[resource.typ]))
        elif resource.typ in rbac:
            validate_k8s(manifest(resource, "rbac.authorization.k8s.io/v1", rbac[resource.typ]))
        elif resource.typ in apis:
            validate_k8s(manifest(resource, *apis[resource.typ]))
        elif resource.typ == SPARK_APP:
            validate_spark_application(manifest(resource, "sparkoperator.k8s.io/v1beta2", "SparkApplication"))
        else:
            continue
        checked += 1
    dashboards = [c for c in run.of_type(CONFIG_MAP) if c.name.endswith("-dashboard")]
    platform_objects = 4 + len(run.of_type(K8S_SECRET)) + len(run.of_type("kubernetes:core/v1:PersistentVolumeClaim"))
    # namespace, account, role, binding (+ dashboard) + per flow: ConfigMap, app, Service, PDB
    assert checked == platform_objects + len(dashboards) + 4 * len(EXPECTED[stack])
    for cm in [c for c in run.of_type(CONFIG_MAP) if c.name.endswith("-flow")]:  # the app's own validator
        spec = parse_flow_spec(json.loads(unwrap(cm.inputs)["data"]["flow.json"]))
        assert spec.id in EXPECTED[stack] and spec.option("metrics_port") == 9404


def _mounted_dirs(app: dict[str, Any], role: str) -> set[str]:
    return {m["mountPath"] for m in app["spec"][role]["volumeMounts"]}


def _secret_files(flow_spec: dict[str, Any]) -> set[str]:
    """Every secret file the app will open: `${file:...}` references and *.location paths."""
    found = set()
    for side in ("source", "target"):
        for value in flow_spec[side]["config"].values():
            if match := re.fullmatch(r"\$\{file:(.+)\}", str(value)):
                found.add(match.group(1))
            elif str(value).startswith("/etc/kmirror/secrets/"):
                found.add(str(value))
    return found


@pytest.mark.parametrize("stack", ["east", "west"])
def test_secrets_are_mounted_on_driver_and_executors_where_the_app_reads_them(stack: str) -> None:
    run = stack_run(stack)
    specs = {
        app_name(json.loads(unwrap(c.inputs)["data"]["flow.json"])["id"]): json.loads(
            unwrap(c.inputs)["data"]["flow.json"]
        )
        for c in run.of_type(CONFIG_MAP)
        if c.name.endswith("-flow")
    }
    created = {unwrap(s.inputs)["metadata"]["name"]: s.urn for s in run.of_type(K8S_SECRET)}
    files_seen = set()
    for app in run.of_type(SPARK_APP):
        body = unwrap(app.inputs)
        files = _secret_files(specs[app.name.removesuffix("-app")])
        files_seen |= files
        for role in ("driver", "executor"):
            dirs = _mounted_dirs(body, role)
            assert all(any(f.startswith(d + "/") for d in dirs) for f in files), (app.name, role, files, dirs)
        secret_volumes = {v["secret"]["secretName"] for v in body["spec"]["volumes"] if "secret" in v}
        assert secret_volumes == {f.split("/")[4] for f in files}
        # pods wait for the Secrets this stack creates
        assert {created[n] for n in secret_volumes if n in created} <= set(app.dependencies)
    if stack == "east":
        assert "/etc/kmirror/secrets/kmirror-cfg-east1scrampassword/value" in files_seen
        assert sorted(created) == ["central-kerberos", "east-1-tls", "kmirror-cfg-east1scrampassword"]
    else:  # west mounts central's Kerberos Secret, provisioned outside this stack
        assert "/etc/kmirror/secrets/central-kerberos/mirrormaker.keytab" in files_seen and not created


@pytest.mark.parametrize("stack", ["east", "central"])
def test_secret_values_travel_only_as_secrets(stack: str) -> None:
    run = stack_run(stack)
    holders = {K8S_SECRET: ("stringData", "data"), "aws:secretsmanager/secretVersion:SecretVersion": ("secretString",)}
    escaped = {k: json.dumps(v)[1:-1] for k, v in SECRET_VALUES.items()}  # as they appear inside JSON text
    held: set[str] = set()
    for resource in run.resources:
        for key in holders.get(resource.typ, ()):
            if resource.inputs.get(key):
                assert is_secret(resource.inputs[key]), (resource.name, key)
                values = unwrap(resource.inputs[key])
                held |= set((json.loads(values) if isinstance(values, str) else values).values())
        others = {k: v for k, v in resource.inputs.items() if k not in holders.get(resource.typ, ())}
        text = json.dumps(unwrap(others), default=str)
        assert not [k for k, v in escaped.items() if v in text], resource.name
    stack_values = {v for k, v in SECRET_VALUES.items() if k != "westKubeconfig"}  # west's, not used here
    assert stack_values <= held  # every secret value reached its Secret
    outputs = json.dumps([run.outputs, run.exports], default=str)
    assert not [k for k, v in escaped.items() if v in outputs]
    assert run.exports_secret is False  # stack outputs stay readable: they hold no secret


def test_emr_stack_wires_cluster_steps_and_secret_sync() -> None:
    run = stack_run("central")
    [cluster] = run.of_type("aws:emr/cluster:Cluster")
    body = unwrap(cluster.inputs)
    assert body["applications"] == ["Spark"] and body["releaseLabel"] == "emr-spark-8.0.0"
    assert body["stepConcurrencyLevel"] == 2 and body["keepJobFlowAliveWhenNoSteps"] is True
    configurations = {c["Classification"]: c for c in json.loads(body["configurationsJson"])}
    assert configurations["yarn-site"]["Properties"] == {"yarn.resourcemanager.am.max-attempts": "1000"}
    assert configurations["spark-defaults"]["Properties"]["spark.pyspark.python"] == "/opt/kmirror/venv/bin/python"
    [action] = body["bootstrapActions"]
    assert action["path"] == "s3://acme-kafka-mirror-central/bootstrap/emr-bootstrap.sh"
    assert action["args"] == [
        "--wheelhouse",
        "s3://acme-kafka-mirror-central/bootstrap/wheelhouse",
        "--secrets",
        "s3://acme-kafka-mirror-central/bootstrap/secrets.tsv",
        "--sync",
        "s3://acme-kafka-mirror-central/bootstrap/kmirror-sync-secrets.py",
        "--region",
        "eu-central-1",
        "--gssapi",
    ]
    objects = {unwrap(o.inputs)["key"]: o for o in run.of_type("aws:s3/bucketObjectv2:BucketObjectv2")}
    wheel_keys = sorted(k for k in objects if k.startswith("bootstrap/wheelhouse/"))
    expected = sorted(f"bootstrap/wheelhouse/cp311-aarch64/{f}" for f in (*WHEELS, GSSAPI_WHEEL, "requirements.lock"))
    assert wheel_keys == expected  # m7g nodes: aarch64 only
    assert all(objects[k].urn in cluster.dependencies for k in wheel_keys)  # nodes boot after the wheels are there
    assert not [k for k in objects if "requirements.txt" in k or k.endswith("app-requirements.txt")]
    listing = unwrap(run.named("central-emr-secrets-list").inputs)["content"]
    dirs = sorted(line.split("\t")[1] for line in listing.splitlines())
    assert dirs == ["central-kerberos", "east-1-tls", "kmirror-cfg-east1scrampassword"]
    arns = sorted(line.split("\t")[0] for line in listing.splitlines())
    policy = json.loads(unwrap(run.named("central-emr-node-app-policy").inputs)["policy"])
    assert [s["Resource"] for s in policy["Statement"] if "secretsmanager:GetSecretValue" in s["Action"]] == [arns]
    for step in run.of_type(STEP):
        inputs = step_input(step)
        assert inputs["cluster_id"] == "j-MOCKCLUSTER" and inputs["region"] == "eu-central-1"
        flow_uri = inputs["args"][inputs["args"].index("--files") + 1].removesuffix("#flow.json")
        [flow_object] = [
            o
            for o in run.of_type("aws:s3/bucketObjectv2:BucketObjectv2")
            if f"s3://acme-kafka-mirror-central/{unwrap(o.inputs)['key']}" == flow_uri
        ]
        spec = parse_flow_spec(json.loads(unwrap(flow_object.inputs)["content"]))
        assert inputs["name"] == app_name(spec.id) and spec.checkpoint_location.startswith(
            "s3://acme-kafka-mirror-central/"
        )
        assert flow_object.urn in step.dependencies
    metrics = run.exports["metrics"]["mirror-west-1-to-central"]
    assert metrics["yarn_application"] == "mirror-west-1-to-central" and 19500 <= metrics["port"] < 19800


def _edited_topology(tmp_path: Path) -> str:
    """Unrelated edits: a new cluster and flow in east, a flow elsewhere, another flow's topics."""
    topology = yaml.safe_load((ROOT / "stacks" / "topology.yaml").read_text())
    topology["clusters"]["east-3"] = {"bootstrap_servers": "b1.east-3.example.com:9092", "datacenter": "east"}
    topology["topologies"].append({"name": "new", "pattern": "custom", "flows": ["west-2->east-3", "east-3->west-2"]})
    mesh = next(t for t in topology["topologies"] if t["name"] == "mesh")
    mesh["topics"] = ["inventory.*", "stock.*"]  # touches west-2->east-2 (and east-2->west-2, in west)
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(topology))
    return str(path)


@pytest.mark.parametrize("stack", ["east", "central"])
def test_untouched_flows_keep_names_and_inputs_after_a_topology_edit(stack: str, tmp_path: Path) -> None:
    before = stack_run(stack)
    after = run_program(stack, stack_config(stack, topology=_edited_topology(tmp_path)))

    def flow_resources(run: Run, app: str) -> dict[tuple[str, str], Any]:
        return {
            (r.typ, r.urn): unwrap({k: v for k, v in r.inputs.items() if k != "__provider"})
            for r in run.resources
            if r.name.startswith(app)
        }

    touched = {"west-2->east-2"}
    for flow in EXPECTED[stack]:
        old, new = flow_resources(before, app_name(flow)), flow_resources(after, app_name(flow))
        assert old.keys() == new.keys(), flow  # same types, names and parents: nothing renamed
        assert (old == new) is (flow not in touched), flow
    added = {d.name for d in after.of_type("kafka-mirror:index:MirrorDeployment")} - {
        d.name for d in before.of_type("kafka-mirror:index:MirrorDeployment")
    }
    assert added == ({"mirror-west-2-to-east-3"} if stack == "east" else set())


def test_an_unknown_datacenter_fails_before_anything_is_created() -> None:
    config = stack_config("west")
    config["kafka-mirror:datacenter"] = "wets"
    with pytest.raises(Exception, match=r"unknown datacenter 'wets' \(did you mean 'west'\?\)") as info:
        run_program("west", config)
    assert type(info.value).__name__ == "ValidationError"


@pytest.mark.parametrize("stack", ["east", "west", "local", "central"])
def test_the_policy_pack_accepts_what_the_program_renders(stack: str) -> None:
    from policy.kafka_mirror_policy import estate, hygiene, rules

    run = stack_run(stack)
    resources = [(r.typ, unwrap(r.inputs)) for r in run.resources]
    for typ, props in resources:
        assert rules.restart_policy_violations(typ, props) == []
        assert rules.plaintext_secret_violations(typ, props) == []
        assert hygiene.wildcard_iam_violations(typ, props) == []
        assert hygiene.public_endpoint_violations(typ, props, allowed=False) == []
        if stack != "local":  # local runs a kind-loaded image (imagePullPolicy Never)
            assert hygiene.image_digest_violations(typ, props) == []
    assert sorted(flow for _, flow in rules.app_flow_ids(resources)) == EXPECTED[stack]
    assert rules.duplicate_flow_violations(resources) == []
    assert rules.identity_cycle_violations(resources) == []
    assert estate.estate_violations(stack, resources, estate.load_estate(ROOT)) == []
    assert estate.estate_violations("west" if stack != "west" else "east", resources, estate.load_estate(ROOT))
    # the harness records dependencies per resource, not per property: a bucket's encryption
    # configuration depends only on its bucket
    stack_resources = [
        hygiene.StackResource(r.typ, unwrap(r.inputs), r.urn, r.name, {"bucket": tuple(r.dependencies)})
        for r in run.resources
    ]
    buckets = [r for r in stack_resources if r.resource_type in hygiene.BUCKETS]
    assert len(buckets) == (1 if stack == "central" else 0)
    assert hygiene.bucket_encryption_violations(stack_resources) == []
    unencrypted = [r for r in stack_resources if r.resource_type not in hygiene.BUCKET_ENCRYPTION]
    assert len(hygiene.bucket_encryption_violations(unencrypted)) == len(buckets)


def test_a_created_eks_cluster_gets_every_kubernetes_resource_of_the_stack() -> None:
    east = stack_run("east")
    kubernetes = [r for r in east.resources if r.typ.startswith("kubernetes:")]
    assert len(kubernetes) > 10 and {r.provider.split("::")[-2] for r in kubernetes} == {"east-eks-k8s"}
    provider = east.named("east-eks-k8s")
    assert is_secret(provider.inputs["kubeconfig"])  # the cluster's own kubeconfig, kept secret
    [cluster] = east.of_type("eks:index:Cluster")  # pulumi-eks
    body = unwrap(cluster.inputs)
    assert body["createOidcProvider"] is True and body["endpointPrivateAccess"] is True
    assert body["endpointPublicAccess"] is False and "publicAccessCidrs" not in body
    assert body["enabledClusterLogTypes"] == ["api", "audit", "authenticator", "controllerManager", "scheduler"]
    [key] = east.of_type("aws:kms/key:Key")
    assert unwrap(key.inputs)["enableKeyRotation"] is True and body["encryptionConfigKeyArn"].endswith("secrets-key")
    [template] = east.of_type("aws:ec2/launchTemplate:LaunchTemplate")
    assert unwrap(template.inputs)["metadataOptions"]["httpTokens"] == "required"  # IMDSv2 on the nodes
    [nodes] = east.of_type("aws:eks/nodeGroup:NodeGroup")
    assert unwrap(nodes.inputs)["clusterName"] == body["name"] == "kafka-mirror-east"
    west = stack_run("west")  # an existing cluster: only the kubeconfig the stack names, never the ambient one
    assert not west.of_type("eks:index:Cluster")
    [west_provider] = west.of_type("pulumi:providers:kubernetes")
    assert unwrap(west_provider.inputs)["kubeconfig"] == SECRET_VALUES["westKubeconfig"]
    assert is_secret(west_provider.inputs["kubeconfig"])
    assert {r.provider.split("::")[-2] for r in west.resources if r.typ.startswith("kubernetes:")} == {"west-eks-k8s"}


def test_emr_bundle_is_built_from_the_checkout_unless_a_prebuilt_one_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kafka_mirror.program import app_bundle

    monkeypatch.delenv("KMIRROR_BUNDLE", raising=False)
    monkeypatch.setenv("KMIRROR_BUILD_DIR", str(tmp_path / "build"))
    built, sha = app_bundle()
    assert built == tmp_path / "build" / "kmirror-bundle.zip" and len(sha) == 64
    prebuilt = tmp_path / "ci.zip"
    prebuilt.write_bytes(b"PK-not-really")
    monkeypatch.setenv("KMIRROR_BUNDLE", str(prebuilt))
    assert app_bundle() == (prebuilt, hashlib.sha256(b"PK-not-really").hexdigest())


def test_an_existing_emr_cluster_gets_steps_and_the_policy_its_nodes_need() -> None:
    config = stack_config("central")
    spark = json.loads(config["kafka-mirror:spark"])
    spark = {**{k: v for k, v in spark.items() if k != "release_label"}, "cluster_id": "j-EXISTING1"}
    config["kafka-mirror:spark"] = json.dumps(spark)
    run = run_program("central", config)
    assert not run.of_type("aws:emr/cluster:Cluster")
    # only the step function's and its read-only step reader's (drift) roles
    assert sorted(r.name for r in run.of_type("aws:iam/role:Role")) == [
        "central-emr-steps-read-role",
        "central-emr-steps-role",
    ]
    assert {step_input(s)["cluster_id"] for s in run.of_type(STEP)} == {"j-EXISTING1"}
    [platform] = [v for urn, v in run.outputs.items() if urn.endswith("EmrSparkPlatform::central-emr")]
    policy = json.loads(platform["node_policy"])
    [secrets] = [s for s in policy["Statement"] if s["Action"] == ["secretsmanager:GetSecretValue"]]
    assert len(secrets["Resource"]) == 3 and all(":secret:" in arn for arn in secrets["Resource"])
    assert platform["cluster_id"] == "j-EXISTING1"


def _emr_run(tmp_path: Path, bundle_text: str, wheel_extra: str = "") -> Run:
    """The central (EMR) stack with a given app bundle and wheelhouse content."""
    bundle = tmp_path / f"bundle-{bundle_text}.zip"
    bundle.write_bytes(bundle_text.encode())
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KMIRROR_BUNDLE", str(bundle))
        patch.setenv(
            "KMIRROR_WHEELHOUSE", str(fake_wheelhouse(tmp_path / f"wh-{bundle_text}-{wheel_extra}", extra=wheel_extra))
        )
        return run_program("central")


def _by_content(value: Any) -> Any:
    """Inputs as the engine diffs them: a file asset by the sha256 of its content, not its path."""
    if isinstance(value, pulumi.FileAsset):
        return {"asset_sha256": hashlib.sha256(Path(value.path).read_bytes()).hexdigest()}
    if isinstance(value, dict):
        return {k: _by_content(v) for k, v in value.items()}
    return [_by_content(v) for v in value] if isinstance(value, list) else value


def _inputs(run: Run, typ: str) -> dict[str, Any]:
    """Each resource's inputs by name (a step's JSON input parsed, so tests can read its args)."""
    found = {}
    for r in run.of_type(typ):
        inputs = unwrap({k: v for k, v in r.inputs.items() if k != "__provider"})
        found[r.name] = _by_content({**inputs, "input": json.loads(inputs["input"])} if typ == STEP else inputs)
    return found


def test_a_new_app_bundle_replaces_the_steps_and_nothing_of_the_cluster(tmp_path: Path) -> None:
    """In the AWS provider a changed bootstrap action (or any other cluster input) replaces the
    EMR cluster: an app release must reach the nodes through the steps only."""
    v1, v2 = _emr_run(tmp_path, "release-1"), _emr_run(tmp_path, "release-2")
    cluster = "aws:emr/cluster:Cluster"
    assert _inputs(v1, cluster) == _inputs(v2, cluster) and len(_inputs(v1, cluster)) == 1
    for typ in ("aws:iam/role:Role", "aws:iam/rolePolicy:RolePolicy", "aws:iam/instanceProfile:InstanceProfile"):
        assert _inputs(v1, typ) == _inputs(v2, typ)
    steps1, steps2 = _inputs(v1, STEP), _inputs(v2, STEP)
    assert steps1.keys() == steps2.keys() and len(steps1) == 2
    for name in steps1:
        args = [s[name]["input"]["args"] for s in (steps1, steps2)]
        py_files = [a[a.index("--py-files") + 1] for a in args]
        sha1, sha2 = (hashlib.sha256(f"release-{i}".encode()).hexdigest()[:16] for i in (1, 2))
        assert py_files == [
            f"s3://acme-kafka-mirror-central/app/kmirror-bundle-{sha1}.zip",
            f"s3://acme-kafka-mirror-central/app/kmirror-bundle-{sha2}.zip",
        ]
        assert {k: v for k, v in steps1[name]["input"].items() if k != "args"} == {
            k: v for k, v in steps2[name]["input"].items() if k != "args"
        }
        assert {k: v for k, v in steps1[name].items() if k != "input"} == {
            k: v for k, v in steps2[name].items() if k != "input"
        }
    objects1, objects2 = (_inputs(r, "aws:s3/bucketObjectv2:BucketObjectv2") for r in (v1, v2))
    changed = sorted(n for n in objects1 if objects1[n] != objects2[n])
    assert changed == ["central-emr-bundle"]


def test_a_dependency_update_replaces_wheel_objects_and_nothing_of_the_cluster(tmp_path: Path) -> None:
    before, after = _emr_run(tmp_path, "same"), _emr_run(tmp_path, "same", wheel_extra="-rebuilt")
    cluster = "aws:emr/cluster:Cluster"
    assert _inputs(before, cluster) == _inputs(after, cluster)
    assert _inputs(before, STEP) == _inputs(after, STEP)
    objects1, objects2 = (_inputs(r, "aws:s3/bucketObjectv2:BucketObjectv2") for r in (before, after))
    changed = {n for n in objects1 if objects1[n] != objects2[n]}
    assert changed == {
        n for n in objects1 if n.startswith("central-emr-wheel-aarch64-") and n != "central-emr-wheel-aarch64-lock"
    }


def test_a_gssapi_stack_refuses_pypis_confluent_kafka_wheel(tmp_path: Path) -> None:
    pypi = "confluent_kafka-2.16.1-cp311-cp311-manylinux_2_28_aarch64.whl"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KMIRROR_WHEELHOUSE", str(fake_wheelhouse(tmp_path / "wh", kafka_wheel=pypi)))
        with pytest.raises(Exception, match=f"gssapi: true but {pypi} is not a GSSAPI build") as info:
            run_program("central")
    assert type(info.value).__name__ == "WheelhouseError"


def test_the_spark_operator_default_is_the_spark_4_release_and_stacks_do_not_override_it() -> None:
    from kafka_mirror.eks.spark_platform import SPARK_OPERATOR_CHART_VERSION

    assert SPARK_OPERATOR_CHART_VERSION == "2.5.2"
    for stack in ("east", "west", "local"):
        [release] = [
            r
            for r in stack_run(stack).of_type("kubernetes:helm.sh/v3:Release")
            if unwrap(r.inputs)["chart"] == "spark-operator"
        ]
        assert unwrap(release.inputs)["version"] == SPARK_OPERATOR_CHART_VERSION, stack


def test_emr_nodes_can_launch_profile_named_as_its_role_subnet_tagged_unhealthy_nodes_replaced() -> None:
    """AWS requires the instance profile EMR is given to share its role's name; the managed
    service policy (AmazonEMRServicePolicy_v2) launches nodes only into subnets tagged
    `for-use-with-amazon-emr-managed-policies=true`; a degraded core node is replaced."""
    run = stack_run("central")
    [profile] = run.of_type("aws:iam/instanceProfile:InstanceProfile")
    assert unwrap(profile.inputs)["name"] == unwrap(profile.inputs)["role"] == "central-emr-node-role-7f3a9c1"
    [cluster] = run.of_type("aws:emr/cluster:Cluster")
    body = unwrap(cluster.inputs)
    assert body["unhealthyNodeReplacement"] is True
    [tag] = [t for t in run.of_type("aws:ec2/tag:Tag") if unwrap(t.inputs)["resourceId"].startswith("subnet-")]
    assert unwrap(tag.inputs) == {
        "resourceId": body["ec2Attributes"]["subnetId"],
        "key": "for-use-with-amazon-emr-managed-policies",
        "value": "true",
    }
    assert tag.urn in cluster.dependencies  # the cluster launches after the subnet is tagged


@pytest.mark.parametrize("platform", ["eks", "emr"])
def test_every_stack_setting_reaches_its_component_or_the_program(platform: str) -> None:
    """Issue 29: the stack model is the one declaration of a stack input. Each of its fields is
    passed to the platform component as it is, computed by the program, or read by the program;
    a field added to the model and wired nowhere (or a computed key the model or the component
    no longer has) fails here instead of being dropped silently."""
    from kafka_mirror import program
    from kafka_mirror.eks.spark_platform import EksSparkPlatformArgs
    from kafka_mirror.emr.platform_args import EmrSparkPlatformArgs
    from kmirror.stack.models import EksSparkConfig, EmrSparkConfig

    model, args, keys, computed = {
        "eks": (EksSparkConfig, EksSparkPlatformArgs, program.EKS_KEYS, program.EKS_COMPUTED),
        "emr": (EmrSparkConfig, EmrSparkPlatformArgs, program.EMR_KEYS, program.EMR_COMPUTED),
    }[platform]
    fields = set(model.model_fields)
    assert computed <= fields & (args.__required_keys__ | args.__optional_keys__)
    assert fields - set(keys) - computed - program.PROGRAM_KEYS == set()
    assert set(keys) <= args.__required_keys__ | args.__optional_keys__


def test_a_reverse_flow_is_deployed_in_the_primarys_datacenter_as_a_reverse_flow(tmp_path: Path) -> None:
    """`reverse_flow: true` on the dr topology: east-1->west-1 runs in west (where west-1 lives) with
    `reverse_of` and the loop exclude in the flow spec its app reads; east's flows are unchanged."""
    topology = yaml.safe_load((ROOT / "stacks" / "topology.yaml").read_text())
    next(t for t in topology["topologies"] if t["name"] == "dr")["reverse_flow"] = True
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(topology))
    run = run_program("west", stack_config("west", topology=str(path)))
    assert run.exports["flows"] == sorted([*EXPECTED["west"], "east-1->west-1"])
    (flow_map,) = [c for c in run.of_type(CONFIG_MAP) if c.name == f"{app_name('east-1->west-1')}-flow"]
    spec = parse_flow_spec(json.loads(unwrap(flow_map.inputs)["data"]["flow.json"]))
    assert (spec.checkpoints.reverse_of, spec.topics_exclude[-1]) == ("west-1", "west-1\\..*")
    assert not spec.topic_selection.matches("west-1.orders.eu") and spec.topic_selection.matches("orders.eu")
    east = run_program("east", stack_config("east", topology=str(path)))
    assert east.exports["flows"] == EXPECTED["east"]


def test_a_created_emr_cluster_has_three_primary_nodes_unless_told_one() -> None:
    """Issue 27: a single primary node is a single point of failure for every mirror on the
    cluster; EMR's three-primary group survives losing one (and replaces it)."""
    [cluster] = stack_run("central").of_type("aws:emr/cluster:Cluster")
    assert unwrap(cluster.inputs)["masterInstanceGroup"]["instanceCount"] == 3
    from kafka_mirror.emr.platform_args import primary_nodes

    assert primary_nodes(1) == 1
    with pytest.raises(Exception, match="primary_node_count: EMR runs 1 or 3 primary nodes, got 2"):
        primary_nodes(2)


def test_an_emr_platform_alarms_in_cloudwatch_when_mirrors_or_nodes_are_gone() -> None:
    """Issue 27: EKS has PrometheusRule alerts; an EMR stack had none. The cluster's own
    CloudWatch metrics (JobFlowId) alarm when no mirror runs (a missing metric breaches: the
    cluster is gone), an application failed, nodes are unhealthy or core nodes are missing."""
    run = stack_run("central")
    [cluster] = run.of_type("aws:emr/cluster:Cluster")
    found = run.of_type("aws:cloudwatch/metricAlarm:MetricAlarm")
    alarms = {unwrap(a.inputs)["metricName"]: unwrap(a.inputs) for a in found}
    assert set(alarms) == {"AppsRunning", "AppsFailed", "MRUnhealthyNodes", "CoreNodesRunning"}
    core = unwrap(cluster.inputs)["coreInstanceGroup"]["instanceCount"]
    for alarm in alarms.values():
        assert alarm["namespace"] == "AWS/ElasticMapReduce" and set(alarm["dimensions"]) == {"JobFlowId"}
    assert (
        alarms["AppsRunning"]["comparisonOperator"],
        alarms["AppsRunning"]["threshold"],
        alarms["AppsRunning"]["treatMissingData"],
    ) == ("LessThanThreshold", 1, "breaching")
    assert alarms["CoreNodesRunning"]["threshold"] == core
    from kafka_mirror.emr.alarms import alarm_specs

    assert "CoreNodesRunning" not in {s["metric"] for s in alarm_specs(None)}  # an existing cluster: its own size
