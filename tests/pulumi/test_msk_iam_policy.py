"""Issue 45: a flow whose source or target uses AWS MSK IAM gets the IAM policy `kmirror acls`
renders, created by the components and attached to the app's role: the IRSA role on EKS (the one
the platform creates, or `irsa_role_arn`), the nodes' instance-profile role on EMR. The whole stack
program runs under the SDK's mocks (tests/pulumi/harness.py)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kafka_mirror.eks.specs import app_name
from kafka_mirror.msk_iam_policy import iam_topic_name
from kmirror_cli.cli import main as kmirror
from policy.kafka_mirror_policy import hygiene
from tests.pulumi.harness import ROOT, Run, run_program, stack_config, unwrap
from tests.pulumi.test_program import bundle  # noqa: F401  (autouse: the program's bundle and wheelhouse)

POLICY = "aws:iam/policy:Policy"
ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
WEST1 = "arn:aws:kafka:eu-west-1:123456789012:cluster/west-1/0c1d2e3f-1111-2222-3333-444455556666-7"
BASE = "arn:aws:kafka:eu-west-1:123456789012"
NAME = "west-1/0c1d2e3f-1111-2222-3333-444455556666-7"
READ_TOPIC = [
    "kafka-cluster:DescribeTopic",
    "kafka-cluster:DescribeTopicDynamicConfiguration",
    "kafka-cluster:ReadData",
]
GROUP = ["kafka-cluster:AlterGroup", "kafka-cluster:DescribeGroup"]
_runs: dict[str, Run] = {}


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """stacks/topology.yaml with west-1 on MSK IAM (west-1 is the source of west-1->east-1 and
    west-1->central, the target of east-2->west-1)."""
    raw = yaml.safe_load((ROOT / "stacks" / "topology.yaml").read_text())
    raw["clusters"]["west-1"]["security"] = {
        "protocol": "SASL_SSL",
        "msk_iam": {"region": "eu-west-1", "cluster_arn": WEST1},
    }
    path = tmp_path_factory.mktemp("msk") / "topology.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _run(stack: str, topology: Path) -> Run:
    if stack not in _runs:
        _runs[stack] = run_program(stack, stack_config(stack, topology=str(topology)))
    return _runs[stack]


def _policy(run: Run, flow_id: str) -> tuple[dict[str, Any], str]:
    """The flow's policy document and the role its attachment names."""
    [policy] = [p for p in run.of_type(POLICY) if p.name == f"{app_name(flow_id)}-msk-iam"]
    [attachment] = [a for a in run.of_type(ATTACHMENT) if a.name == f"{app_name(flow_id)}-msk-iam"]
    assert unwrap(attachment.inputs)["policyArn"] == f"arn:aws:iam::123456789012:policy/{policy.name}-5b2e8d0"
    assert hygiene.wildcard_iam_violations(POLICY, unwrap(policy.inputs)) == []  # the policy pack's rule
    return json.loads(unwrap(policy.inputs)["policy"]), unwrap(attachment.inputs)["role"]


def _acls_policies(run: Run, flow_id: str, tmp_path: Path, topics: list[str]) -> list[dict[str, Any]]:
    """What `kmirror acls --format json` renders for the flow spec the app reads, for `topics`."""
    [flow_map] = [c for c in run.of_type("kubernetes:core/v1:ConfigMap") if c.name == f"{app_name(flow_id)}-flow"]
    flow = tmp_path / "flow.json"
    flow.write_text(unwrap(flow_map.inputs)["data"]["flow.json"])
    out = io.StringIO()
    argv = ["acls", "--flow", str(flow), "--format", "json", *[a for t in topics for a in ("--topic", t)]]
    with contextlib.redirect_stdout(out):
        assert kmirror(argv) == 0
    return [item["iam_policy"] for item in json.loads(out.getvalue()) if "iam_policy" in item]


def test_eks_source_side_policy_statement_by_statement_on_the_created_irsa_role(topology: Path, tmp_path: Path) -> None:
    run = _run("east", topology)
    document, role = _policy(run, "west-1->east-1")
    [irsa] = [r for r in run.of_type("aws:iam/role:Role") if r.name.endswith("-irsa")]
    assert role == f"{irsa.name}-7f3a9c1"  # the created IRSA role's name (the mocks' auto-name)
    topic = f"{BASE}:topic/{NAME}"
    assert document == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": ["kafka-cluster:Connect", "kafka-cluster:DescribeCluster"],
                "Resource": [f"{BASE}:cluster/{NAME}"],
            },
            # dr selects orders.* and payments.*; heartbeats topics are mirrored whatever the selection
            {"Effect": "Allow", "Action": READ_TOPIC, "Resource": [f"{topic}/*.heartbeats"]},
            {"Effect": "Allow", "Action": READ_TOPIC, "Resource": [f"{topic}/heartbeats"]},
            {"Effect": "Allow", "Action": READ_TOPIC, "Resource": [f"{topic}/orders*"]},
            {"Effect": "Allow", "Action": READ_TOPIC, "Resource": [f"{topic}/payments*"]},
            {"Effect": "Allow", "Action": GROUP, "Resource": [f"{BASE}:group/{NAME}/kmirror-west-1-to-east-1"]},
        ],
    }
    # the same statements `kmirror acls` renders for the flow spec the app reads (east-1 is SCRAM: no IAM side)
    topics = ["*.heartbeats", "heartbeats", "orders*", "payments*"]
    assert _acls_policies(run, "west-1->east-1", tmp_path, topics) == [document]
    # flows with no MSK IAM side get no policy
    assert [p.name for p in run.of_type(POLICY)] == [f"{app_name('west-1->east-1')}-msk-iam"]


def test_eks_target_side_policy_on_the_given_irsa_role(topology: Path, tmp_path: Path) -> None:
    run = _run("west", topology)
    document, role = _policy(run, "east-2->west-1")
    assert role == "kafka-mirror-west"  # stacks/Pulumi.west.yaml's irsa_role_arn
    statements = document["Statement"]
    assert statements[0]["Action"] == ["kafka-cluster:Connect", "kafka-cluster:DescribeCluster"]
    by_resource = {s["Resource"][0].split(f"{NAME}/", 1)[-1]: s["Action"] for s in statements[1:]}
    # the remote topics (prefix `east-2.`): created, written, grown, their configs synced
    assert by_resource["east-2.*"] == [
        "kafka-cluster:AlterTopic",
        "kafka-cluster:AlterTopicDynamicConfiguration",
        "kafka-cluster:CreateTopic",
        "kafka-cluster:DescribeTopic",
        "kafka-cluster:DescribeTopicDynamicConfiguration",
        "kafka-cluster:WriteData",
    ]
    rw = [
        "kafka-cluster:CreateTopic",
        "kafka-cluster:DescribeTopic",
        "kafka-cluster:ReadData",
        "kafka-cluster:WriteData",
    ]
    assert by_resource["mm2-offset-syncs.east-2.internal"] == rw
    assert by_resource["kmirror-reader-mm2-offset-syncs.east-2.internal"] == GROUP
    assert by_resource["heartbeats"] == [
        "kafka-cluster:CreateTopic",
        "kafka-cluster:DescribeTopic",
        "kafka-cluster:WriteData",
    ]
    assert _acls_policies(run, "east-2->west-1", tmp_path, ["audit", "heartbeats", "*.heartbeats"]) == [document]


def test_emr_policy_on_the_node_instance_profile_role(topology: Path) -> None:
    run = _run("central", topology)
    document, role = _policy(run, "west-1->central")
    [node_role] = [r for r in run.of_type("aws:iam/role:Role") if r.name.endswith("-node-role")]
    assert role == f"{node_role.name}-7f3a9c1"  # the instance profile shares its role's name
    assert f"{BASE}:topic/{NAME}/clicks*" in [s["Resource"][0] for s in document["Statement"]]
    assert [p.name for p in run.of_type(POLICY)] == [f"{app_name('west-1->central')}-msk-iam"]


@pytest.mark.parametrize(
    ("pattern", "name"),
    [("orders.*", "orders*"), ("orders\\..*", "orders.*"), ("a.b", "a?b"), ("audit", "audit"), ("(a|b).*", "*")],
)
def test_a_selection_pattern_becomes_the_iam_name_that_matches_the_same_topics(pattern: str, name: str) -> None:
    assert iam_topic_name(pattern) == name
