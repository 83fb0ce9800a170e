"""What a platform team creates by hand before a stack's first `up`, and the program's check of each
before it creates anything (docs/deploy.md, "First deploy": one row per `Prerequisite.kind`).

`stack_prerequisites` is pure: the stack's typed settings in, plain `Prerequisite`s out (the config
key naming each, what it is, what must hold, how to create it). `check_prerequisites` asks a
`lookup(kind, identifier)` for each (the program's lookup is `aws_lookup`: the AWS provider's data
sources, so a preview checks them too, with the stack's credentials) and returns every problem at
once, naming the key, the value and the fix.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kmirror.errors import Problem
from kmirror.stack.config import NS

Lookup = Callable[[str, str], Mapping[str, Any]]  # (kind, identifier) -> what AWS says; raises when absent
KINDS = ("vpc", "subnet", "kms_key", "bucket", "s3_object", "sns_topic", "security_group", "iam_role")


@dataclass(frozen=True)
class Prerequisite:
    """One thing the stack names but does not create."""

    path: str  # the stack config key, e.g. `kafka-mirror:spark.subnet_id`
    kind: str  # one of KINDS
    identifier: str  # its id, ARN, name or s3:// URI
    fix: str  # how a platform team creates it
    expect: Mapping[str, str] | None = None  # attributes AWS must report (e.g. a subnet's vpc_id)


def _bucket_of(uri: str) -> str | None:
    scheme, _, rest = uri.partition("://")
    return rest.split("/", 1)[0] if scheme in ("s3", "s3a") and rest else None


def _emr(spark: Any) -> list[Prerequisite]:
    p = f"{NS}:spark"
    found: list[Prerequisite] = []
    if spark.vpc_id:
        found.append(
            Prerequisite(
                f"{p}.vpc_id",
                "vpc",
                spark.vpc_id,
                "the network team's VPC (the platform tags it for-use-with-amazon-emr-managed-policies)",
            )
        )
    if spark.subnet_id:
        found.append(
            Prerequisite(
                f"{p}.subnet_id",
                "subnet",
                spark.subnet_id,
                "a private subnet of vpc_id with a route to S3 and the brokers",
                {"vpc_id": spark.vpc_id} if spark.vpc_id else None,
            )
        )
    if spark.encryption is not None:
        found.append(
            Prerequisite(
                f"{p}.encryption.kms_key_arn",
                "kms_key",
                spark.encryption.kms_key_arn,
                "a customer-managed key whose key policy lets IAM policies grant its use (AWS's default key policy)",
            )
        )
        found.append(
            Prerequisite(
                f"{p}.encryption.certificates_zip",
                "s3_object",
                spark.encryption.certificates_zip,
                "the PEM certificates zip EMR's in-transit encryption reads",
            )
        )
    if not spark.create_bucket:
        found.append(Prerequisite(f"{p}.bucket", "bucket", spark.bucket, "the app bucket (create_bucket: false)"))
    if spark.bucket_kms_key_arn:
        found.append(
            Prerequisite(
                f"{p}.bucket_kms_key_arn",
                "kms_key",
                spark.bucket_kms_key_arn,
                "the bucket's default-encryption key, customer-managed, whose key policy lets IAM policies grant "
                "its use (a bucket on the AWS-managed aws/s3 key needs no bucket_kms_key_arn: remove it)",
            )
        )
    for index, arn in enumerate(spark.alarm_actions):
        found.append(
            Prerequisite(
                f"{p}.alarm_actions[{index}]",
                "sns_topic",
                arn,
                "an SNS topic whose policy lets cloudwatch.amazonaws.com and events.amazonaws.com publish",
            )
        )
    if spark.prometheus is not None and spark.prometheus.security_group_id:
        found.append(
            Prerequisite(
                f"{p}.prometheus.security_group_id",
                "security_group",
                spark.prometheus.security_group_id,
                "the Prometheus scrapers' security group",
            )
        )
    return found


def _eks(spark: Any) -> list[Prerequisite]:
    p = f"{NS}:spark"
    found: list[Prerequisite] = []
    if spark.checkpoint_root and (bucket := _bucket_of(spark.checkpoint_root)):
        found.append(
            Prerequisite(
                f"{p}.checkpoint_root",
                "bucket",
                bucket,
                "a versioned, encrypted bucket for the "
                "flows' checkpoints (never deleted with a stack: it holds the flows' progress)",
            )
        )
    if spark.irsa_role_arn:
        found.append(
            Prerequisite(
                f"{p}.irsa_role_arn",
                "iam_role",
                spark.irsa_role_arn,
                "the apps' IRSA role, trusting the cluster's OIDC provider for NAMESPACE/SERVICE_ACCOUNT",
            )
        )
    cluster = spark.cluster
    if cluster.create:
        if cluster.vpc_id:
            found.append(Prerequisite(f"{p}.cluster.vpc_id", "vpc", cluster.vpc_id, "the network team's VPC"))
        for index, subnet in enumerate(cluster.subnet_ids):
            expect = {"vpc_id": cluster.vpc_id} if cluster.vpc_id else None
            found.append(
                Prerequisite(
                    f"{p}.cluster.subnet_ids[{index}]",
                    "subnet",
                    subnet,
                    "a private subnet of cluster.vpc_id (two availability zones at least)",
                    expect,
                )
            )
        if cluster.kms_key_arn:
            found.append(
                Prerequisite(
                    f"{p}.cluster.kms_key_arn",
                    "kms_key",
                    cluster.kms_key_arn,
                    "a customer-managed key for secrets envelope encryption",
                )
            )
        if cluster.runner_security_group_id:
            found.append(
                Prerequisite(
                    f"{p}.cluster.runner_security_group_id",
                    "security_group",
                    cluster.runner_security_group_id,
                    "the self-hosted deploy runner's group",
                )
            )
    return found


def stack_prerequisites(platform: str, spark: Any) -> list[Prerequisite]:
    """Everything the stack's settings (`kmirror.stack.models` EksSparkConfig / EmrSparkConfig) name
    but the program does not create."""
    return _emr(spark) if platform == "emr" else _eks(spark)


def _mismatch(item: Prerequisite, found: Mapping[str, Any]) -> str | None:
    if item.kind == "kms_key":
        state, manager = found.get("key_state"), found.get("key_manager")
        if state != "Enabled" or manager != "CUSTOMER":
            return f"is {state} and {manager}-managed; it must be an Enabled customer-managed key"
    for key, value in (item.expect or {}).items():
        if found.get(key) != value:
            return f"has {key} {found.get(key)!r}, expected {value!r}"
    return None


def check_prerequisites(items: list[Prerequisite], lookup: Lookup) -> list[Problem]:
    """One problem per prerequisite that is missing or not as the stack needs it (none: all there)."""
    problems = []
    for item in items:
        try:
            found = lookup(item.kind, item.identifier)
        except Exception as exc:  # the provider's "not found" / access errors, whatever their class
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            problems.append(
                Problem(
                    item.path,
                    f"{item.kind} {item.identifier!r} cannot be read ({reason}); it is "
                    f"created by hand before the first `up`: {item.fix} (docs/deploy.md)",
                )
            )
            continue
        if (wrong := _mismatch(item, found)) is not None:
            problems.append(Problem(item.path, f"{item.kind} {item.identifier!r} {wrong}; {item.fix}"))
    return problems


def aws_lookup(kind: str, identifier: str) -> Mapping[str, Any]:
    """What the AWS provider's data sources say about `identifier` (raises when it does not exist)."""
    import pulumi_aws as aws  # the provider only here: the rest of this module is pure

    if kind == "vpc":
        return {"id": aws.ec2.get_vpc(id=identifier).id}
    if kind == "subnet":
        return {"vpc_id": aws.ec2.get_subnet(id=identifier).vpc_id}
    if kind == "kms_key":
        found = aws.kms.get_key(key_id=identifier)
        return {"key_state": found.key_state, "key_manager": found.key_manager}
    if kind == "bucket":
        return {"arn": aws.s3.get_bucket(bucket=identifier).arn}
    if kind == "s3_object":
        bucket, _, object_key = identifier.removeprefix("s3://").partition("/")
        return {"etag": aws.s3.get_object(bucket=bucket, key=object_key).etag}
    if kind == "sns_topic":
        return {"arn": aws.sns.get_topic(name=identifier.rsplit(":", 1)[-1]).arn}
    if kind == "security_group":
        return {"vpc_id": aws.ec2.get_security_group(id=identifier).vpc_id}
    if kind == "iam_role":
        return {"arn": aws.iam.get_role(name=identifier.rsplit("/", 1)[-1]).arn}
    raise ValueError(f"unknown prerequisite kind {kind!r} (one of {', '.join(KINDS)})")
