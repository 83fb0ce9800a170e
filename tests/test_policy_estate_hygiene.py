"""The policy pack's estate rule (one stack per flow, through the planner) and hygiene rules,
as pure functions over resource props and through the pulumi_policy API with fake args."""

from __future__ import annotations

import ast
import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from kafka_mirror.eks.specs import EksSettings, flow_config_map, spark_application_manifest
from policy.kafka_mirror_policy import estate, hygiene, rules
from policy.kafka_mirror_policy.pack import build_policies

ROOT = Path(__file__).resolve().parent.parent
SA = rules.SPARK_APPLICATION
# The pack's estate and hygiene policies, in its order (after the rules' policies: tests/test_policy_rules.py)
ESTATE_AND_HYGIENE_POLICIES = [
    "one-stack-per-flow",
    "image-by-digest",
    "encrypted-buckets",
    "no-wildcard-iam",
    "no-broad-managed-iam",
    "protected-emr-encrypted",
    "no-public-eks-endpoint",
]
DIGEST = "repo/kafka-mirror:0.1.0@sha256:" + "ab" * 32
TOPOLOGY = """
clusters:
  a-1: {bootstrap_servers: "a1:9092", datacenter: a}
  b-1: {bootstrap_servers: "b1:9092", datacenter: b}
topologies:
  - {name: ab, pattern: active-active, clusters: [a-1, b-1], topics: ["orders.*"]}
"""


def stack_file(project: Path, stack: str, datacenter: str, spark: dict[str, Any] | None = None) -> None:
    config = {
        "kafka-mirror:datacenter": datacenter,
        "kafka-mirror:topology": "stacks/topology.yaml",
        "kafka-mirror:spark": spark or {"platform": "eks"},
    }
    (project / "stacks" / f"Pulumi.{stack}.yaml").write_text(json.dumps({"config": config}))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "topology.yaml").write_text(TOPOLOGY)
    stack_file(tmp_path, "sa", "a")
    stack_file(tmp_path, "sb", "b")
    return tmp_path


def flow_spec(flow_id: str) -> dict[str, Any]:
    source, target = flow_id.split("->")
    return {
        "id": flow_id,
        "source": {"alias": source, "bootstrap_servers": f"{source}:9092", "config": {}},
        "target": {"alias": target, "bootstrap_servers": f"{target}:9092", "config": {}},
        "topics": ["orders.*"],
        "replication_policy": {"type": "default"},
        "checkpoint_location": "/tmp/c",
    }


def eks_app(flow_id: str) -> list[rules.Resource]:
    spec = flow_spec(flow_id)
    return [
        (rules.CONFIG_MAP, flow_config_map(spec, "kafka-mirror")),
        (SA, spark_application_manifest(spec, {}, EksSettings(image=DIGEST))),
    ]


def emr_step(flow_id: str, app: str | None = None) -> list[rules.Resource]:
    """What MirrorDeployment renders on EMR: the flow object and the step function's Invocation."""
    key = f"flows/{app or 'mirror-x'}/0123456789abcdef/flow.json"
    step = {
        "cluster_id": "j-1",
        "name": app or "mirror-x",
        "region": "eu-central-1",
        "stop_timeout_s": 600,
        "args": ["spark-submit", "s3://bucket/bundle.zip", f"s3://bucket/{key}#flow.json"],
    }
    invocation = {"functionName": "central-emr-steps", "lifecycleScope": "CRUD", "input": json.dumps(step)}
    return [
        (rules.BUCKET_OBJECT, {"bucket": "bucket", "key": key, "content": json.dumps(flow_spec(flow_id))}),
        (rules.LAMBDA_INVOCATION, invocation),
    ]


# --- one-stack-per-flow -------------------------------------------------------------------------


def test_the_estate_is_planned_per_stack_by_the_programs_planner(project: Path) -> None:
    found = estate.load_estate(project)
    assert found.stack_datacenters == {"sa": "a", "sb": "b"}
    assert found.stack_flows == {"sa": ("b-1->a-1",), "sb": ("a-1->b-1",)}
    assert found.app_flows == {"mirror-b-1-to-a-1": "b-1->a-1", "mirror-a-1-to-b-1": "a-1->b-1"}


def test_a_flow_planned_for_another_stack_is_a_second_writer(project: Path) -> None:
    found = estate.load_estate(project)
    assert estate.estate_violations("sa", eks_app("b-1->a-1"), found) == []
    assert estate.estate_violations("sa", [*eks_app("b-1->a-1"), *eks_app("a-1->b-1")], found) == [
        "mirror-a-1-to-b-1 runs flow a-1->b-1, which the topology does not place in datacenter a (stack sa); "
        "stack sb deploys it: deploy only the flows `kmirror plan --stack sa` lists"
    ]


def test_emr_steps_are_checked_by_their_flow_object_or_their_app_name(project: Path) -> None:
    found = estate.load_estate(project)
    assert estate.estate_violations("sb", emr_step("a-1->b-1"), found) == []
    named_only = [emr_step("a-1->b-1", "mirror-a-1-to-b-1")[1]]  # no flow object (e.g. its content unknown)
    assert rules.app_flow_ids(named_only) == [("mirror-a-1-to-b-1", "mirror-a-1-to-b-1")]
    assert estate.estate_violations("sb", named_only, found) == []
    assert estate.estate_violations("sa", named_only, found) == [
        "mirror-a-1-to-b-1 runs flow a-1->b-1, which the topology does not place in datacenter a (stack sa); "
        "stack sb deploys it: deploy only the flows `kmirror plan --stack sa` lists"
    ]


def test_two_stacks_of_one_datacenter_both_deploy_its_flows(project: Path) -> None:
    stack_file(project, "sb-copy", "b")
    found = estate.load_estate(project)
    assert estate.estate_violations("sb", emr_step("a-1->b-1"), found) == [
        "mirror-x runs flow a-1->b-1, which stack sb-copy (b) also deploys: two writers on one target; "
        "give each datacenter exactly one stack and each flow one run_in"
    ]


def test_an_unknown_flow_or_stack_is_reported(project: Path) -> None:
    found = estate.load_estate(project)
    assert estate.estate_violations("sa", eks_app("c->d"), found) == [
        "mirror-c-to-d runs flow c->d, which the topology does not place in datacenter a (stack sa); no stack's "
        "plan deploys it: deploy only the flows `kmirror plan --stack sa` lists"
    ]
    assert estate.estate_violations("prod", [], found) == [
        "stack prod: no stacks/Pulumi.prod.yaml in the project (stacks: sa, sb); the estate cannot be checked "
        "for flows deployed twice"
    ]


def test_the_repositorys_own_stacks_deploy_each_flow_once() -> None:
    found = estate.load_estate(ROOT)
    deployed = [f for flows in found.stack_flows.values() for f in flows]
    assert len(deployed) == len(set(deployed)) > 5
    assert estate.stack_of_urn("urn:pulumi:west::kafka-mirror::pulumi:pulumi:Stack::kafka-mirror-west") == "west"
    with pytest.raises(ValueError, match="not a Pulumi URN"):
        estate.stack_of_urn("west")


# --- hygiene --------------------------------------------------------------------------------------


def test_images_must_be_pinned_by_digest() -> None:
    [_, (_, app)] = eks_app("a-1->b-1")
    assert hygiene.image_digest_violations(SA, app) == []
    tagged = copy.deepcopy(app)
    tagged["spec"]["image"] = "repo/kafka-mirror:0.1.0"
    tagged["spec"]["executor"]["image"] = "repo/other:latest"
    assert hygiene.image_digest_violations(SA, tagged) == [
        "SparkApplication mirror-a-1-to-b-1: spec.image 'repo/kafka-mirror:0.1.0' is not pinned by digest; use "
        "REPO[:TAG]@sha256:<digest> (CI sets the pushed image's digest in kafka-mirror:spark.image)",
        "SparkApplication mirror-a-1-to-b-1: spec.executor.image 'repo/other:latest' is not pinned by digest; use "
        "REPO[:TAG]@sha256:<digest> (CI sets the pushed image's digest in kafka-mirror:spark.image)",
    ]
    tagged["spec"]["imagePullPolicy"] = "Never"  # a local image (kind), never pulled
    assert hygiene.image_digest_violations(SA, tagged) == []


def _bucket(name: str) -> hygiene.StackResource:
    urn = f"urn:pulumi:s::p::aws:s3/bucket:Bucket::{name}"
    return hygiene.StackResource("aws:s3/bucket:Bucket", {"bucket": name}, urn, name)


def _sse(bucket_urn: str | None, bucket: Any, algorithm: str = "AES256") -> hygiene.StackResource:
    props = {"bucket": bucket, "rules": [{"applyServerSideEncryptionByDefault": {"sseAlgorithm": algorithm}}]}
    return hygiene.StackResource(
        hygiene.BUCKET_ENCRYPTION[0], props, "urn:sse", "sse", {"bucket": (bucket_urn,)} if bucket_urn else {}
    )


def test_every_bucket_needs_server_side_encryption() -> None:
    data, logs, old = _bucket("data"), _bucket("logs"), _bucket("old")
    legacy = hygiene.StackResource(
        "aws:s3/bucketV2:BucketV2",
        {
            "bucket": "legacy",
            "serverSideEncryptionConfiguration": {
                "rule": {"applyServerSideEncryptionByDefault": {"sseAlgorithm": "aws:kms"}}
            },
        },
        "urn:legacy",
        "legacy",
    )
    resources = [data, logs, old, legacy, _sse(data.urn, None), _sse(None, "old"), _sse(logs.urn, None, "none")]
    assert hygiene.bucket_encryption_violations(resources) == [
        "S3 bucket logs has no server-side encryption; add an aws.s3.BucketServerSideEncryptionConfiguration "
        "(sse_algorithm AES256 or aws:kms) for it"
    ]
    assert hygiene.bucket_encryption_violations([data, _sse(data.urn, None, "aws:kms")]) == []


def _policy(*statements: dict[str, Any]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def test_no_wildcard_iam_in_role_policies_and_inline_policies() -> None:
    scoped = {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject"], "Resource": "arn:aws:s3:::b/*"}
    everything = {"Effect": "Allow", "Action": "*", "Resource": "*"}
    all_s3 = {"Action": ["s3:GetObject", "s3:*"], "Resource": ["*"]}  # Effect defaults to Allow
    denied = {"Effect": "Deny", "Action": "*", "Resource": "*"}
    s3_on_bucket = {"Effect": "Allow", "Action": "s3:*", "Resource": "arn:aws:s3:::b"}
    role_policy = "aws:iam/rolePolicy:RolePolicy"
    fine = {"name": "ok", "policy": _policy(scoped, denied, s3_on_bucket)}
    assert hygiene.wildcard_iam_violations(role_policy, fine) == []
    assert hygiene.wildcard_iam_violations(role_policy, {"name": "app", "policy": _policy(scoped, all_s3)}) == [
        "RolePolicy app: Statement[1] allows 's3:*' on Resource '*'; name the actions and the ARNs (the bucket, "
        "the secrets) the mirror needs"
    ]
    role = {"name": "node", "inlinePolicies": [{"name": "admin", "policy": _policy(everything)}]}
    assert hygiene.wildcard_iam_violations(hygiene.IAM_ROLE, role) == [
        "Role node inline policy admin: Statement[0] allows '*' on Resource '*'; name the actions and the ARNs "
        "(the bucket, the secrets) the mirror needs"
    ]
    assert hygiene.wildcard_iam_violations("aws:iam/policy:Policy", {"policy": {"Statement": everything}})
    assert hygiene.wildcard_iam_violations(rules.CONFIG_MAP, {"policy": _policy(everything)}) == []
    # every MSK IAM action on every cluster (issue 45: the components name the actions and ARNs instead)
    all_msk = {"Effect": "Allow", "Action": ["kafka-cluster:*"], "Resource": ["*"]}
    msk_violations = hygiene.wildcard_iam_violations("aws:iam/policy:Policy", {"name": "m", "policy": _policy(all_msk)})
    assert msk_violations == [
        "Policy m: Statement[0] allows 'kafka-cluster:*' on Resource '*'; name the actions and the ARNs "
        "(the bucket, the secrets) the mirror needs"
    ]


def test_public_eks_endpoints_need_the_stack_configs_consent(project: Path) -> None:
    private = {"name": "east", "endpointPublicAccess": False}
    assert hygiene.public_endpoint_violations(hygiene.EKS_COMPONENT, private, allowed=False) == []
    assert hygiene.public_endpoint_violations(hygiene.EKS_COMPONENT, {"name": "east"}, allowed=False) == [
        "EKS cluster east: the API endpoint is public (endpointPublicAccess True); keep it private or set "
        "kafka-mirror:spark.cluster.endpoint_public_access: true (with public_access_cidrs) in the stack config"
    ]
    raw = {"name": "raw", "vpcConfig": {"endpointPublicAccess": True}}
    assert len(hygiene.public_endpoint_violations(hygiene.EKS_CLUSTER, raw, allowed=False)) == 1
    assert hygiene.public_endpoint_violations(hygiene.EKS_CLUSTER, raw, allowed=True) == []
    stack_file(project, "sb", "b", {"platform": "eks", "cluster": {"create": True, "endpoint_public_access": True}})
    found = estate.load_estate(project)
    assert estate.public_endpoint_allowed("sb", found) and not estate.public_endpoint_allowed("sa", found)


# --- through the pulumi_policy API ----------------------------------------------------------------


class Res:
    def __init__(
        self,
        resource_type: str,
        props: Mapping[str, Any],
        name: str,
        stack: str = "sa",
        deps: dict[str, list[Res]] | None = None,
    ) -> None:
        self.resource_type, self.props, self.name = resource_type, props, name
        self.urn = f"urn:pulumi:{stack}::kafka-mirror::{resource_type}::{name}"
        self.property_dependencies = deps or {}


class Args:
    def __init__(self, resources: list[Res], config: dict[str, Any]) -> None:
        self.resources, self._config = resources, config

    def get_config(self) -> dict[str, Any]:
        return self._config


def test_the_pack_reports_estate_and_hygiene_violations_through_pulumi_policy(project: Path) -> None:
    policies: dict[str, Any] = {p.name: p for p in build_policies()}
    assert [p.name for p in build_policies()][-7:] == ESTATE_AND_HYGIENE_POLICIES
    config = {"project_dir": str(project)}
    bucket = Res("aws:s3/bucket:Bucket", {"bucket": "b"}, "bucket")
    resources = [Res(t, p, f"r{i}") for i, (t, p) in enumerate([*eks_app("a-1->b-1"), *eks_app("b-1->a-1")])]
    reported: list[str] = []
    policies["one-stack-per-flow"].validate(Args([*resources, bucket], config), lambda m, u: reported.append(m))
    assert [m.split(",")[0] for m in reported] == ["mirror-a-1-to-b-1 runs flow a-1->b-1"]
    reported.clear()
    policies["encrypted-buckets"].validate(Args([bucket], config), lambda m, u: reported.append(m))
    sse = Res(hygiene.BUCKET_ENCRYPTION[0], dict(_sse(None, None).props), "sse", deps={"bucket": [bucket]})
    policies["encrypted-buckets"].validate(Args([bucket, sse], config), lambda m, u: reported.append(m))
    assert [m.split(" has")[0] for m in reported] == ["S3 bucket bucket"]

    cluster = Res(hygiene.EKS_COMPONENT, {"name": "c"}, "cluster", stack="sb")
    cluster.get_config = lambda: config  # type: ignore[attr-defined]  # ResourceValidationArgs' accessor
    policies["no-public-eks-endpoint"].validate(cluster, lambda m, u: reported.append(m))
    assert len(reported) == 2 and reported[1].startswith("EKS cluster c: the API endpoint is public")
    stack_file(project, "sb", "b", {"platform": "eks", "cluster": {"endpoint_public_access": True}})
    estate.load_estate.cache_clear()
    policies["no-public-eks-endpoint"].validate(cluster, lambda m, u: reported.append(m))
    assert len(reported) == 2


# --- publishable --------------------------------------------------------------------------------


def test_the_pack_is_publishable_on_its_own() -> None:
    pack = ROOT / "policy"
    settings = (pack / "PulumiPolicy.yaml").read_text()
    assert "../" not in settings and "virtualenv: venv" in settings
    lines = (pack / "requirements.txt").read_text().replace("\\\n", " ").splitlines()  # hashed pins: joined
    required = {
        Requirement(line.split(" --hash=")[0]).name.lower()
        for line in lines
        if line and not line.startswith(("#", "-r "))
    }
    if "-r ../dist/kafka-mirror-wheel.txt" in lines:  # the built wheel's pin (scripts/ci-kafka-mirror-wheel.sh)
        required.add("kafka-mirror")
    provides = {
        "kmirror": "kafka-mirror",
        "kafka_mirror": "kafka-mirror",
        "pulumi_policy": "pulumi-policy",
        "pulumi": "pulumi",
        "yaml": "pyyaml",
    }
    for path in pack.rglob("*.py"):
        if "venv" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            is_attr = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            sys_path = is_attr and node.attr == "path" and node.value.id == "sys"  # type: ignore[attr-defined]
            assert not sys_path, f"{path}: edits sys.path"
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for top in {n.split(".")[0] for n in names} - {"kafka_mirror_policy", "__future__"}:
                if top in provides:
                    assert provides[top] in required, (path, top)
                else:
                    __import__(top)  # the standard library
                    assert top in {
                        "ast",
                        "collections",
                        "dataclasses",
                        "functools",
                        "json",
                        "os",
                        "pathlib",
                        "re",
                        "typing",
                    }, (path, top)


def test_the_pack_finds_the_project_in_its_working_directory_then_its_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Python host runs the pack in the program's directory (the real engine showed it: the pack
    found no stacks from `..` and refused every deploy), another engine in `policy/`."""
    from policy.kafka_mirror_policy.estate import project_dir

    (tmp_path / "stacks").mkdir()
    (tmp_path / "policy").mkdir()
    monkeypatch.chdir(tmp_path)
    assert project_dir({}, {}).resolve() == tmp_path.resolve()
    monkeypatch.chdir(tmp_path / "policy")
    assert project_dir({}, {}).resolve() == tmp_path.resolve()
    assert project_dir({"project_dir": "/x"}, {"KMIRROR_PROJECT_DIR": "/y"}) == Path("/x")
    assert project_dir({}, {"KMIRROR_PROJECT_DIR": "/y"}) == Path("/y")
