"""The policy pack's IAM-attachment and EMR rules (issue 43, first review: "policy rules for EMR and IAM
attachments"): `no-broad-managed-iam` and `protected-emr-encrypted` (policy/kafka_mirror_policy/iam_emr.py), and
the central stack's own resources under mocks pass both."""

from __future__ import annotations

import pytest

from policy.kafka_mirror_policy.iam_emr import broad_attachment_violations, protected_emr_violations
from tests.pulumi.harness import Run, unwrap
from tests.pulumi.test_emr_step_function import central  # noqa: F401 (the fixture: central under mocks)

ATTACH = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"


@pytest.mark.parametrize(
    "arn",
    [
        "arn:aws:iam::aws:policy/AdministratorAccess",
        "arn:aws:iam::aws:policy/AmazonS3FullAccess",
        "arn:aws:iam::aws:policy/service-role/AmazonElasticMapReduceRole",
        "arn:aws:iam::aws:policy/service-role/AmazonElasticMapReduceforEC2Role",
        "arn:aws-us-gov:iam::aws:policy/AmazonMSKFullAccess",
    ],
)
def test_broad_aws_managed_attachments_are_refused_naming_the_policy(arn: str) -> None:
    [message] = broad_attachment_violations(ATTACH, {"role": "nodes", "policyArn": arn})
    assert arn.rsplit("/", 1)[1] in message and "nodes" in message and "inline policy" in message
    [by_role] = broad_attachment_violations("aws:iam/role:Role", {"name": "r", "managedPolicyArns": [arn]})
    assert "Role r managedPolicyArns" in by_role


def test_scoped_and_own_policies_pass() -> None:
    for arn in (
        "arn:aws:iam::aws:policy/service-role/AmazonEMRServicePolicy_v2",
        "arn:aws:iam::123456789012:policy/AdministratorAccess",  # a customer policy of that name: not AWS's
        "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    ):
        assert broad_attachment_violations(ATTACH, {"role": "r", "policyArn": arn}) == []
    assert broad_attachment_violations("aws:s3/bucket:Bucket", {"policyArn": "arn:aws:iam::aws:policy/x"}) == []


def test_a_protected_emr_cluster_needs_a_security_configuration() -> None:
    cluster = "aws:emr/cluster:Cluster"
    [message] = protected_emr_violations(cluster, {"name": "c", "terminationProtection": True})
    assert "kafka-mirror:spark.encryption" in message and "protect: false" in message
    assert protected_emr_violations(cluster, {"terminationProtection": True, "securityConfiguration": "s"}) == []
    assert protected_emr_violations(cluster, {"terminationProtection": False}) == []


def test_the_central_stack_passes_both_rules(central: Run) -> None:  # noqa: F811
    checked = 0
    for resource in central.resources:
        props = unwrap(resource.inputs)
        if resource.typ == "aws:emr/cluster:Cluster":
            checked += 1
            assert props["terminationProtection"] is True
        assert broad_attachment_violations(resource.typ, props) == []
        assert protected_emr_violations(resource.typ, props) == []
    assert checked == 1
