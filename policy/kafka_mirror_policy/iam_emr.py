"""IAM attachment and EMR rules as pure functions over (resource type, props); violations as messages.

- `no-broad-managed-iam`: no attachment of an AWS-managed policy that grants a whole service or the
  account (AdministratorAccess, PowerUserAccess, IAMFullAccess, AmazonS3FullAccess, the EMR and MSK full
  access policies, and the deprecated EMR v1 roles, which allow `s3:*` on every bucket), by a
  Role/User/Group policy attachment, a PolicyAttachment or a Role's `managedPolicyArns`. The components
  attach only `AmazonEMRServicePolicy_v2` (scoped by tag) and their own inline policies.
- `protected-emr-encrypted`: an EMR cluster with termination protection (a production cluster, as the
  components make it with `protect`) has a security configuration (encryption in transit and at rest).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

BROAD_MANAGED = (
    "AdministratorAccess",
    "PowerUserAccess",
    "IAMFullAccess",
    "AmazonS3FullAccess",
    "AmazonEC2FullAccess",
    "AmazonElasticMapReduceFullAccess",
    "AmazonEMRFullAccessPolicy_v2",
    "AmazonMSKFullAccess",
    "AmazonElasticMapReduceRole",
    "AmazonElasticMapReduceforEC2Role",
)
AWS_MANAGED = re.compile(r"^arn:aws[a-z-]*:iam::aws:policy/(?:[\w+=,.@-]+/)*(?P<name>[\w+=,.@-]+)$")
ATTACHMENTS = {
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": "role",
    "aws:iam/userPolicyAttachment:UserPolicyAttachment": "user",
    "aws:iam/groupPolicyAttachment:GroupPolicyAttachment": "group",
    "aws:iam/policyAttachment:PolicyAttachment": "name",
}
IAM_ROLE = "aws:iam/role:Role"
EMR_CLUSTER = "aws:emr/cluster:Cluster"


def _broad(arn: Any) -> str | None:
    found = AWS_MANAGED.match(arn) if isinstance(arn, str) else None
    return found["name"] if found and found["name"] in BROAD_MANAGED else None


def broad_attachment_violations(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Attachments of the BROAD_MANAGED AWS policies."""
    if resource_type in ATTACHMENTS:
        arns = [props.get("policyArn")]
        where = f"{resource_type.rsplit(':', 1)[-1]} of {props.get(ATTACHMENTS[resource_type]) or '<unknown>'}"
    elif resource_type == IAM_ROLE:
        arns = list(props.get("managedPolicyArns") or [])
        where = f"Role {props.get('name') or '<unnamed>'} managedPolicyArns"
    else:
        return []
    return [
        f"{where}: attaches the AWS-managed {name}, which grants far more than a mirror needs; grant the "
        "actions on the resources it uses in an inline policy (the components' own policies show which)"
        for name in (n for n in map(_broad, arns) if n)
    ]


def protected_emr_violations(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """A termination-protected EMR cluster without a security configuration."""
    if resource_type != EMR_CLUSTER or not props.get("terminationProtection") or props.get("securityConfiguration"):
        return []
    return [
        f"EMR cluster {props.get('name') or '<unnamed>'} is termination-protected (production) but has no "
        "security configuration: set kafka-mirror:spark.encryption {certificates_zip, kms_key_arn} "
        "(encryption in transit and at rest), or protect: false for a throwaway cluster"
    ]
