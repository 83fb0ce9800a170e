"""The MSK IAM policy of a flow's app role (issue 45).

A flow whose source or target authenticates with AWS MSK IAM (`security.msk_iam`) has no Kafka
ACLs: its grants are IAM statements on the role the app's pods or nodes sign their tokens with.
`flow_msk_iam_policy` renders them with the code `kmirror acls` uses (`mirror_acls` for the
grants, `kmirror.security.msk_iam.mirror_iam_policies` for the statements), one document per
flow holding the source side's statements then the target side's; `MirrorDeployment` creates it
as an `aws.iam.Policy` (`<app>-msk-iam`) and attaches it to the platform's app role, the
deployment target's `app_role`: on EKS the IRSA role of the service account (the one the
platform creates, or `irsa_role_arn`), on EMR the nodes' instance-profile role of the cluster the
platform creates. Without one (an existing EMR cluster, EKS without IRSA) the policy is created,
not attached, and a warning names it.

Source topics: `kmirror acls` asks the cluster which topics the selection matches now; a deploy
must not depend on that, so the selection's patterns become IAM resource names
(`iam_topic_names`): a literal name stays, `PREFIX.*` becomes `PREFIX*` and an unescaped `.`
`?` (IAM wildcards; Kafka topic names hold neither), any other regular expression becomes `*`
(every topic of the cluster). Excludes cannot narrow an Allow, so the grant may be wider than the selection: never
narrower.
"""

import json
import re
from typing import Any

import pulumi
import pulumi_aws as aws

from kmirror.errors import Problem, ValidationError
from kmirror.flow.filters import NameSelection
from kmirror.flow.spec import parse_flow_spec
from kmirror.security.msk_iam import mirror_iam_policies

# Pure, and imports no Kafka client (pyproject's import-linter `ignore_imports` names this edge):
# the one list of grants `kmirror acls` and the start-up check use.
from kmirror_engine.planning.internal_topics import mirror_acls

MAX_MANAGED_POLICY_CHARS = 6144  # IAM's limit on a managed policy document (whitespace excluded)
# The regular expressions IAM's wildcards express exactly: `\.` a dot, `.*` any run (`*`), `.` any one
# character (`?`), and topic-name characters; any other pattern is granted as `*`.
_TOKEN = re.compile(r"\\\.|\.\*|\.|[A-Za-z0-9_-]")
_IAM = {"\\.": ".", ".*": "*", ".": "?"}


def iam_topic_name(pattern: str) -> str:
    """One include pattern as an IAM resource name: `orders\\..*` -> `orders.*`, `orders.*` ->
    `orders*`, `a.b` -> `a?b`; any other regular expression -> `*`."""
    tokens = _TOKEN.findall(pattern)
    if "".join(tokens) != pattern:
        return "*"
    return "".join(_IAM.get(t, t) for t in tokens)


def iam_topic_names(selection: NameSelection) -> list[str]:
    """The topic names (IAM wildcards allowed) an IAM policy grants for `selection` (module doc)."""
    names = [iam_topic_name(p) for p in selection.include]
    if selection.heartbeats:  # mirrored whatever the patterns say: `heartbeats` and remote ones
        names += ["heartbeats", "*.heartbeats"]
    if "*" in names:
        return ["*"]
    return sorted(set(names))


def flow_msk_iam_policy(flow_spec: dict[str, Any]) -> dict[str, Any] | None:
    """The IAM policy document of one flow's MSK IAM sides (None: neither side uses MSK IAM)."""
    spec = parse_flow_spec(flow_spec)
    grants = mirror_acls(spec, iam_topic_names(spec.topic_selection))
    configs = {"source": spec.source.config, "target": spec.target.config}
    policies = mirror_iam_policies(configs, grants)
    if not policies:
        return None
    statements = [s for side in ("source", "target") for s in policies.get(side, {}).get("Statement", [])]
    document = {"Version": "2012-10-17", "Statement": statements}
    size = len(json.dumps(document, separators=(",", ":")))
    if size > MAX_MANAGED_POLICY_CHARS:
        raise ValidationError(
            [
                Problem(
                    f"flow {spec.id}: MSK IAM policy",
                    f"{size} characters, over IAM's {MAX_MANAGED_POLICY_CHARS} for one managed policy: "
                    "select topics by prefix (`PREFIX.*`) rather than by many literal names",
                )
            ]
        )
    return document


def role_name(role: str) -> str:
    """An IAM role's name from its ARN (`arn:aws:iam::ACCOUNT:role/PATH/NAME`) or name; an EMR
    instance profile's ARN gives its role's name too (the platform names both alike)."""
    return role.rsplit("/", 1)[-1] if role.startswith("arn:") else role


def attach_msk_iam_policy(
    parent: pulumi.Resource, name: str, flow_spec: Any, target: pulumi.Output[Any]
) -> aws.iam.Policy | None:
    """Create flow `flow_spec`'s MSK IAM policy and attach it to `target["app_role"]`; nothing for a
    flow without MSK IAM. `flow_spec` must be a plain map (as the stack program passes it): whether
    the resource exists cannot depend on an output."""
    if not isinstance(flow_spec, dict):
        pulumi.log.warn(
            f"{name}: flow_spec is an output, so no MSK IAM policy is created for it; "
            "render it with `kmirror acls --flow` and attach it to the app's role",
            parent,
        )
        return None
    document = flow_msk_iam_policy(flow_spec)
    if document is None:
        return None
    child = pulumi.ResourceOptions(parent=parent)
    policy = aws.iam.Policy(
        f"{name}-msk-iam",
        description=f"kafka-mirror flow {flow_spec['id']}: MSK IAM access (kmirror acls)",
        policy=json.dumps(document, sort_keys=True),
        opts=child,
    )

    def attach(role: str | None) -> str | None:
        if not role:
            pulumi.log.warn(
                f"{name}: the platform has no app role (an existing EMR cluster, or EKS without IRSA): "
                "attach the MSK IAM policy of this flow to the role its pods or nodes run as",
                parent,
            )
            return None
        aws.iam.RolePolicyAttachment(f"{name}-msk-iam", role=role_name(role), policy_arn=policy.arn, opts=child)
        return role_name(role)

    target.apply(lambda t: attach(t.get("app_role")))
    return policy
