"""The AWS resources of `EmrSparkPlatform` that must be production-grade: the stack's bucket
(private, versioned, encrypted, with a lifecycle, TLS-only) and the EMR cluster (least-privilege
roles without AWS-managed `s3:*` policies, a SecurityConfiguration with encryption in transit and
at rest and IMDSv2, termination protection, a security group letting Prometheus scrape the
drivers' metrics ports). Plain functions building children of the platform (like
`kafka_mirror.eks.cluster`); every policy and setting comes from `kafka_mirror.emr.specs`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from kafka_mirror.emr.specs import (
    METRICS_PORT_BASE,
    METRICS_PORT_SPAN,
    bucket_lifecycle_rules,
    security_configuration,
    service_kms_policy,
    service_pass_role_policy,
    spark_configurations,
)

# AmazonEMRServicePolicy_v2 acts only on resources carrying this tag (AWS's scoping for v2).
EMR_MANAGED_TAG = {"for-use-with-amazon-emr-managed-policies": "true"}
SERVICE_POLICY = "arn:aws:iam::aws:policy/service-role/AmazonEMRServicePolicy_v2"
TAGS = {"part-of": "kafka-mirror", **EMR_MANAGED_TAG}


@dataclass(frozen=True)
class BucketSettings:
    protect: bool = True
    log_retention_days: int = 30
    noncurrent_version_days: int = 30


@dataclass(frozen=True)
class ClusterSettings:
    release_label: str
    master_instance_type: str
    core_instance_type: str
    core_instance_count: int
    step_concurrency_level: int
    max_app_attempts: int
    subnet_id: Any = None
    protect: bool = True
    certificates_zip: Any = None  # pulumi.Input[str]
    kms_key_arn: Any = None  # pulumi.Input[str]
    primary_node_count: int = 3
    vpc_id: Any = None  # pulumi.Input[str]
    prometheus_security_group_id: Any = None  # pulumi.Input[str]
    prometheus_cidr_blocks: Sequence[str] = field(default_factory=tuple)


def _assume(service: str) -> str:
    statement = {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


def tls_only_bucket_policy(bucket: str) -> dict[str, Any]:
    """Deny every request to the bucket that does not use TLS."""
    resources = [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "TlsOnly",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": resources,
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }
        ],
    }


def create_bucket(
    parent: pulumi.Resource, name: str, bucket: pulumi.Input[str], settings: BucketSettings
) -> list[pulumi.Resource]:
    """The bucket and its settings, children `<name>-bucket*`; returns what uploads wait for."""
    child = pulumi.ResourceOptions(parent=parent)
    made = aws.s3.Bucket(
        f"{name}-bucket", bucket=bucket, tags=TAGS, opts=pulumi.ResourceOptions(parent=parent, protect=settings.protect)
    )
    on = pulumi.ResourceOptions(parent=parent, depends_on=[made])
    block = aws.s3.BucketPublicAccessBlock(
        f"{name}-bucket-private",
        bucket=made.id,
        block_public_acls=True,
        block_public_policy=True,
        ignore_public_acls=True,
        restrict_public_buckets=True,
        opts=child,
    )
    versioning = aws.s3.BucketVersioning(
        f"{name}-bucket-versioning",
        bucket=made.id,
        versioning_configuration={"status": "Enabled"},
        opts=on,
    )
    encryption = aws.s3.BucketServerSideEncryptionConfiguration(
        f"{name}-bucket-encryption",
        bucket=made.id,
        rules=[{"apply_server_side_encryption_by_default": {"sse_algorithm": "AES256"}, "bucket_key_enabled": True}],
        opts=on,
    )
    lifecycle = aws.s3.BucketLifecycleConfiguration(
        f"{name}-bucket-lifecycle",
        bucket=made.id,
        rules=bucket_lifecycle_rules(settings.log_retention_days, settings.noncurrent_version_days),  # type: ignore[arg-type]
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[versioning]),
    )
    policy = aws.s3.BucketPolicy(
        f"{name}-bucket-tls-only",
        bucket=made.id,
        policy=made.bucket.apply(lambda b: json.dumps(tls_only_bucket_policy(b))),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[block]),
    )
    return [made, block, versioning, encryption, lifecycle, policy]


def _roles(
    parent: pulumi.Resource, name: str, node_policy: pulumi.Output[str], kms_key_arn: Any = None
) -> tuple[aws.iam.Role, aws.iam.InstanceProfile, list[pulumi.Resource]]:
    child = pulumi.ResourceOptions(parent=parent)
    service_role = aws.iam.Role(
        f"{name}-service-role", assume_role_policy=_assume("elasticmapreduce.amazonaws.com"), tags=TAGS, opts=child
    )
    service_attach = aws.iam.RolePolicyAttachment(
        f"{name}-service-policy", role=service_role.name, policy_arn=SERVICE_POLICY, opts=child
    )
    node_role = aws.iam.Role(
        f"{name}-node-role", assume_role_policy=_assume("ec2.amazonaws.com"), tags=TAGS, opts=child
    )
    pass_role = aws.iam.RolePolicy(
        f"{name}-service-pass-role",
        role=service_role.id,
        policy=node_role.arn.apply(lambda arn: json.dumps(service_pass_role_policy(arn))),
        opts=child,
    )
    inline = aws.iam.RolePolicy(f"{name}-node-app-policy", role=node_role.id, policy=node_policy, opts=child)
    # EMR finds the nodes' role through the instance profile and requires both to share one name.
    profile = aws.iam.InstanceProfile(
        f"{name}-node-profile", name=node_role.name, role=node_role.name, tags=TAGS, opts=child
    )
    made: list[pulumi.Resource] = [service_attach, pass_role, inline]
    if kms_key_arn is not None:  # EBS encryption: EMR launches the volumes with this key (docs/deploy.md)
        made.append(
            aws.iam.RolePolicy(
                f"{name}-service-ebs-key",
                role=service_role.id,
                policy=pulumi.Output.from_input(kms_key_arn).apply(lambda arn: json.dumps(service_kms_policy(arn))),
                opts=child,
            )
        )
    return service_role, profile, made


def _metrics_group(parent: pulumi.Resource, name: str, s: ClusterSettings) -> aws.ec2.SecurityGroup | None:
    """A security group on every node letting the Prometheus scrapers reach the drivers' ports."""
    if s.prometheus_security_group_id is None and not s.prometheus_cidr_blocks:
        return None
    child = pulumi.ResourceOptions(parent=parent)
    group = aws.ec2.SecurityGroup(
        f"{name}-metrics-sg",
        vpc_id=s.vpc_id,
        description="Prometheus scrapes the kafka-mirror drivers",
        tags=TAGS,
        opts=child,
    )
    ports: Mapping[str, Any] = {"from_port": METRICS_PORT_BASE, "to_port": METRICS_PORT_BASE + METRICS_PORT_SPAN - 1}
    aws.ec2.SecurityGroupRule(
        f"{name}-metrics-ingress",
        type="ingress",
        protocol="tcp",
        security_group_id=group.id,
        source_security_group_id=s.prometheus_security_group_id,
        cidr_blocks=list(s.prometheus_cidr_blocks) or None,
        description="Prometheus -> kafka-mirror driver metrics",
        opts=child,
        **ports,
    )
    return group


def create_cluster(
    parent: pulumi.Resource,
    name: str,
    s: ClusterSettings,
    bootstrap: pulumi.Output[dict[str, Any]],
    log_uri: pulumi.Output[str],
    node_policy: pulumi.Output[str],
    opts: pulumi.ResourceOptions,
) -> aws.emr.Cluster:
    """The EMR cluster and its roles, security configuration and metrics security group."""
    child = pulumi.ResourceOptions(parent=parent)
    service_role, profile, policies = _roles(parent, name, node_policy, s.kms_key_arn)
    security = None
    if s.certificates_zip and s.kms_key_arn:
        security = aws.emr.SecurityConfiguration(
            f"{name}-security",
            configuration=pulumi.Output.all(s.certificates_zip, s.kms_key_arn).apply(
                lambda v: json.dumps(security_configuration(v[0], v[1]), sort_keys=True)
            ),
            opts=child,
        )
        policies.append(security)
    # AmazonEMRServicePolicy_v2 only lets EMR launch nodes into subnets carrying this tag, and create
    # its managed security groups only in a VPC carrying it (emr_network_problems requires vpc_id).
    [(tag_key, tag_value)] = EMR_MANAGED_TAG.items()
    for part, resource_id in (("subnet", s.subnet_id), ("vpc", s.vpc_id)):
        if resource_id is not None:
            policies.append(
                aws.ec2.Tag(f"{name}-{part}-emr-tag", resource_id=resource_id, key=tag_key, value=tag_value, opts=child)
            )
    group = _metrics_group(parent, name, s)
    extra_groups = group.id.apply(lambda i: i) if group is not None else None
    return aws.emr.Cluster(
        f"{name}-cluster",
        name=f"kafka-mirror-{name}",
        release_label=s.release_label,
        applications=["Spark"],
        service_role=service_role.arn,
        security_configuration=security.name if security is not None else None,
        termination_protection=s.protect,
        log_uri=log_uri,
        ec2_attributes=aws.emr.ClusterEc2AttributesArgs(
            instance_profile=profile.arn,
            subnet_id=s.subnet_id,
            additional_master_security_groups=extra_groups,
            additional_slave_security_groups=extra_groups,
        ),
        # three primaries: EMR keeps the cluster (and the streaming steps) when one fails and replaces it
        master_instance_group=aws.emr.ClusterMasterInstanceGroupArgs(
            instance_type=s.master_instance_type, instance_count=s.primary_node_count
        ),
        core_instance_group=aws.emr.ClusterCoreInstanceGroupArgs(
            instance_type=s.core_instance_type, instance_count=s.core_instance_count
        ),
        bootstrap_actions=[
            aws.emr.ClusterBootstrapActionArgs(
                name="kafka-mirror",
                path=bootstrap.apply(lambda b: b["path"]),
                args=bootstrap.apply(lambda b: b["args"]),
            )
        ],
        configurations_json=json.dumps(spark_configurations(s.max_app_attempts)),
        keep_job_flow_alive_when_no_steps=True,
        # A degraded core node is replaced instead of taking its executors (and drivers) down for good.
        unhealthy_node_replacement=True,
        # Mirror steps never finish: each flow needs its own concurrent step slot.
        step_concurrency_level=s.step_concurrency_level,
        tags=TAGS,
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=policies, protect=s.protect)),
    )
