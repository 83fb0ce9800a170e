"""AWS MSK IAM authentication: a cluster's `security.msk_iam` section, its client properties and
the IAM policy that grants the mirror what `kmirror acls` would grant as Kafka ACLs.

    security:
      protocol: SASL_SSL                      # MSK IAM listens on TLS only (port 9098)
      msk_iam: {region: eu-west-1,            # the cluster's region: the token is signed for it
                role_arn: arn:aws:iam::123456789012:role/mirror,   # optional: assume this role
                profile: NAME,                # optional: a named profile (not with role_arn)
                cluster_arn: arn:aws:kafka:eu-west-1:123456789012:cluster/NAME/UUID}  # optional

The client speaks SASL/OAUTHBEARER; its token is a SigV4-presigned `kafka-cluster:Connect` URL made
with the default AWS credential chain (IRSA on EKS, the instance profile on EMR) by
`aws-msk-iam-sasl-signer-python` inside the app (`kmirror_engine.clients.msk_iam`). The section
travels in the client config as `kmirror.msk_iam.*` properties, which the engine turns into
confluent-kafka's `oauth_cb` and removes before librdkafka sees the config. No secret is involved:
the credentials never leave the AWS SDK.

The policy is derived from the same `AclGrant` list that renders `kafka-acls.sh` commands, one
Kafka operation -> the IAM actions MSK checks for it (plus the actions those depend on). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kmirror.errors import KmirrorError, Problem
from kmirror.option_table import unknown_keys

MSK_IAM_KEYS = {"region", "role_arn", "profile", "cluster_arn"}
PREFIX = "kmirror.msk_iam."
REGION_PROPERTY = PREFIX + "region"
ROLE_ARN_PROPERTY = PREFIX + "role_arn"
PROFILE_PROPERTY = PREFIX + "profile"
CLUSTER_ARN_PROPERTY = PREFIX + "cluster_arn"
PROPERTIES = (REGION_PROPERTY, ROLE_ARN_PROPERTY, PROFILE_PROPERTY, CLUSTER_ARN_PROPERTY)
REGION_RE = re.compile(r"[a-z]{2}(-[a-z]+)+-\d{1,2}")
ROLE_ARN_RE = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+")
CLUSTER_ARN_RE = re.compile(r"arn:(aws[a-z-]*):kafka:([a-z0-9-]+):(\d{12}):cluster/([\w-]+)/([\w-]+)")

# Kafka operation on a resource type -> the MSK IAM actions that allow it (AWS's "IAM access
# control" page: "Semantics of actions and resources"); each list includes the actions its
# actions depend on (ReadData needs DescribeTopic, AlterGroup needs DescribeGroup, ...).
ACTIONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("TOPIC", "Read"): ("ReadData", "DescribeTopic"),
    ("TOPIC", "Write"): ("WriteData", "DescribeTopic"),
    ("TOPIC", "Describe"): ("DescribeTopic",),
    ("TOPIC", "Create"): ("CreateTopic",),
    ("TOPIC", "Alter"): ("AlterTopic", "DescribeTopic"),
    ("TOPIC", "DescribeConfigs"): ("DescribeTopicDynamicConfiguration",),
    ("TOPIC", "AlterConfigs"): ("AlterTopicDynamicConfiguration", "DescribeTopicDynamicConfiguration"),
    ("TOPIC", "Delete"): ("DeleteTopic", "DescribeTopic"),
    ("GROUP", "Read"): ("AlterGroup", "DescribeGroup"),
    ("GROUP", "Describe"): ("DescribeGroup",),
    ("GROUP", "Delete"): ("DeleteGroup", "DescribeGroup"),
    ("TRANSACTIONAL_ID", "Write"): ("AlterTransactionalId", "DescribeTransactionalId"),
    ("TRANSACTIONAL_ID", "Describe"): ("DescribeTransactionalId",),
    ("CLUSTER", "Describe"): ("DescribeCluster",),
    ("CLUSTER", "Alter"): ("AlterCluster", "DescribeCluster"),
    ("CLUSTER", "DescribeConfigs"): ("DescribeClusterDynamicConfiguration",),
    ("CLUSTER", "IdempotentWrite"): ("WriteDataIdempotently",),
}
ARN_KINDS = {"TOPIC": "topic", "GROUP": "group", "TRANSACTIONAL_ID": "transactional-id"}


def msk_iam_problems(msk: dict[str, Any], path: str) -> list[Problem]:
    """Every problem of one `security.msk_iam` mapping; messages name field, value and fix."""
    problems = unknown_keys(msk, MSK_IAM_KEYS, path)
    region = msk.get("region")
    if region is None:
        problems.append(Problem(f"{path}.region", "required key is missing; the cluster's AWS region, e.g. eu-west-1"))
    elif not (isinstance(region, str) and REGION_RE.fullmatch(region)):
        problems.append(Problem(f"{path}.region", f"must be an AWS region such as eu-west-1, got {region!r}"))
    role = msk.get("role_arn")
    if role is not None and not (isinstance(role, str) and ROLE_ARN_RE.fullmatch(role)):
        problems.append(
            Problem(f"{path}.role_arn", f"must be an IAM role ARN (arn:aws:iam::ACCOUNT:role/NAME), got {role!r}")
        )
    profile = msk.get("profile")
    if profile is not None and not (isinstance(profile, str) and profile.strip() and profile.isprintable()):
        problems.append(Problem(f"{path}.profile", f"must be the name of an AWS profile, got {profile!r}"))
    if role is not None and profile is not None:
        problems.append(
            Problem(path, "give role_arn or profile, not both (the role is assumed with the default chain)")
        )
    cluster = msk.get("cluster_arn")
    if cluster is not None:
        match = CLUSTER_ARN_RE.fullmatch(cluster) if isinstance(cluster, str) else None
        if match is None:
            problems.append(
                Problem(
                    f"{path}.cluster_arn",
                    f"must be an MSK cluster ARN (arn:aws:kafka:REGION:ACCOUNT:cluster/NAME/UUID), got {cluster!r}",
                )
            )
        elif isinstance(region, str) and match.group(2) != region:
            wrong = f"is in region {match.group(2)!r} but region is {region!r}; make them agree"
            problems.append(Problem(f"{path}.cluster_arn", wrong))
    return problems


def msk_iam_config(msk: Mapping[str, Any]) -> dict[str, str]:
    """The client properties of a validated `msk_iam` section (the `kmirror.msk_iam.*` ones are
    consumed by the engine, which adds the token callback)."""
    config = {"sasl.mechanisms": "OAUTHBEARER", REGION_PROPERTY: msk["region"]}
    for key in ("role_arn", "profile", "cluster_arn"):
        if key in msk:
            config[PREFIX + key] = msk[key]
    return config


def is_msk_iam(config: Mapping[str, Any] | None) -> bool:
    """True when a client config authenticates with MSK IAM."""
    return any(name.startswith(PREFIX) for name in (config or {}))


def msk_iam_config_problems(config: Mapping[str, Any], path: str) -> list[Problem]:
    """Problems of a client config (a flow spec's cluster config) that carries `kmirror.msk_iam.*`."""
    if not is_msk_iam(config):
        return []
    problems = []
    for name in config:
        if name.startswith(PREFIX) and name not in PROPERTIES:
            problems.append(Problem(f"{path}.{name}", f"unknown MSK IAM property; use one of {', '.join(PROPERTIES)}"))
    section = {name[len(PREFIX) :]: value for name, value in config.items() if name in PROPERTIES}
    problems += msk_iam_problems(section, f"{path}.{PREFIX.rstrip('.')}")
    protocol = config.get("security.protocol")
    if protocol != "SASL_SSL":
        wrong = f"MSK IAM needs SASL_SSL, got {protocol!r}; set security.protocol: SASL_SSL"
        problems.append(Problem(f"{path}.security.protocol", wrong))
    mechanism = config.get("sasl.mechanisms", config.get("sasl.mechanism"))
    if mechanism != "OAUTHBEARER":
        wrong = f"MSK IAM tokens travel over OAUTHBEARER, got {mechanism!r}; set it to OAUTHBEARER"
        problems.append(Problem(f"{path}.sasl.mechanisms", wrong))
    if "sasl.oauthbearer.method" in config:
        problems.append(
            Problem(
                f"{path}.sasl.oauthbearer.method", "MSK IAM makes its own tokens; remove sasl.oauthbearer.method (oidc)"
            )
        )
    return problems


# --- the IAM policy ------------------------------------------------------------------------------


def _base(config: Mapping[str, Any]) -> tuple[str, str]:
    """(`arn:aws:kafka:REGION:ACCOUNT`, `NAME/UUID`) of the cluster; any cluster of the region
    when no cluster_arn is given."""
    cluster = config.get(CLUSTER_ARN_PROPERTY)
    if cluster:
        match = CLUSTER_ARN_RE.fullmatch(str(cluster))
        if match is None:
            raise KmirrorError(
                f"{CLUSTER_ARN_PROPERTY}: {cluster!r} is not an MSK cluster ARN "
                "(arn:aws:kafka:REGION:ACCOUNT:cluster/NAME/UUID)"
            )
        partition, region, account, name, uuid = match.groups()
        return f"arn:{partition}:kafka:{region}:{account}", f"{name}/{uuid}"
    region = config.get(REGION_PROPERTY)
    if not region:
        raise KmirrorError(f"{REGION_PROPERTY} is missing: the IAM policy needs the cluster's region")
    return f"arn:aws:kafka:{region}:*", "*/*"


def resource_arn(config: Mapping[str, Any], grant: Any) -> str:
    """The ARN of one grant's resource: cluster/NAME/UUID, topic/NAME/UUID/TOPIC, group/...,
    transactional-id/...; a PREFIXED grant ends in `*`."""
    base, cluster = _base(config)
    if grant.resource_type == "CLUSTER":
        return f"{base}:cluster/{cluster}"
    kind = ARN_KINDS.get(grant.resource_type)
    if kind is None:
        raise KmirrorError(f"grant {grant.name!r}: resource_type {grant.resource_type!r} has no MSK IAM resource")
    return f"{base}:{kind}/{cluster}/{grant.name}{'*' if grant.pattern == 'PREFIXED' else ''}"


def grant_actions(grant: Any) -> list[str]:
    """The `kafka-cluster:*` actions that allow one grant's operations (sorted, deduplicated)."""
    actions: set[str] = set()
    for operation in grant.operations:
        found = ACTIONS.get((grant.resource_type, operation))
        if found is None:
            raise KmirrorError(
                f"grant {grant.name!r}: {grant.resource_type} {operation} has no MSK IAM action; "
                "extend kmirror.security.msk_iam.ACTIONS"
            )
        actions.update(found)
    return sorted(f"kafka-cluster:{a}" for a in actions)


def grant_statement(config: Mapping[str, Any], grant: Any) -> dict[str, Any]:
    """One IAM policy statement allowing `grant` on the cluster `config` connects to."""
    return {"Effect": "Allow", "Action": grant_actions(grant), "Resource": [resource_arn(config, grant)]}


def iam_policy(config: Mapping[str, Any], grants: Iterable[Any]) -> dict[str, Any]:
    """The IAM policy document of one cluster: Connect (and DescribeCluster) on the cluster, then
    one statement per grant, in the grants' order."""
    connect = {
        "Effect": "Allow",
        "Action": ["kafka-cluster:Connect", "kafka-cluster:DescribeCluster"],
        "Resource": [f"{_base(config)[0]}:cluster/{_base(config)[1]}"],
    }
    return {"Version": "2012-10-17", "Statement": [connect, *(grant_statement(config, g) for g in grants)]}


def mirror_iam_policies(configs: Mapping[str, Mapping[str, Any]], grants: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """side -> IAM policy, for each side ("source", "target") whose config uses MSK IAM."""
    return {
        side: iam_policy(config, [g for g in grants if g.side == side])
        for side, config in configs.items()
        if is_msk_iam(config)
    }
