"""The EKS cluster of `EksSparkPlatform` when the stack creates one (`spark.cluster.create: true`),
built with pulumi-eks: an OIDC provider for IRSA, a private API endpoint unless the stack allows a
public one (then only from `public_access_cidrs`), every control-plane log type, secrets
envelope-encrypted with a KMS key (created, with rotation, unless one is given), nodes without
public addresses. Returns a Kubernetes provider built from the cluster's own kubeconfig.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s

from kmirror.stack.models import EKS_VERSION

CONTROL_PLANE_LOGS = ("api", "audit", "authenticator", "controllerManager", "scheduler")
# The worker nodes' AWS-managed policies (none grants S3 or secrets; the apps use IRSA).
NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryReadOnly")


@dataclass(frozen=True)
class EksClusterSettings:
    subnet_ids: Any  # pulumi.Input[list[str]]
    vpc_id: Any = None  # pulumi.Input[str]
    name: str | None = None
    version: str = EKS_VERSION
    instance_type: str = "m7i.xlarge"
    nodes: int = 3
    endpoint_public_access: bool = False
    public_access_cidrs: list[str] = field(default_factory=list)
    kms_key_arn: str | None = None
    log_types: list[str] = field(default_factory=lambda: list(CONTROL_PLANE_LOGS))
    tags: dict[str, str] = field(default_factory=lambda: {"part-of": "kafka-mirror"})


def cluster_args(settings: EksClusterSettings, key_arn: pulumi.Input[str]) -> dict[str, Any]:
    """pulumi-eks `Cluster` arguments (plain, tested without the engine)."""
    args: dict[str, Any] = {
        "name": settings.name,  # create_eks_cluster fills in a stable default
        "version": settings.version,
        "vpc_id": settings.vpc_id,
        "private_subnet_ids": settings.subnet_ids,
        "create_oidc_provider": True,
        "endpoint_private_access": True,
        "endpoint_public_access": settings.endpoint_public_access,
        "enabled_cluster_log_types": list(settings.log_types),
        "encryption_config_key_arn": key_arn,
        "authentication_mode": "API",
        # Nodes come from a managed node group (`_nodes`), not pulumi-eks' default self-managed one.
        "skip_default_node_group": True,
        "node_associate_public_ip_address": False,
        # The VPC CNI enforces NetworkPolicies only with its network policy agent on (the apps' ingress policy).
        "vpc_cni_options": {"enable_network_policy": True},
        "tags": dict(settings.tags),
    }
    if settings.endpoint_public_access:
        args["public_access_cidrs"] = list(settings.public_access_cidrs)
    return args


def create_eks_cluster(
    parent: pulumi.Resource, name: str, settings: EksClusterSettings
) -> tuple[eks.Cluster, k8s.Provider, pulumi.Output[str]]:
    """Children of `parent` named `<name>-...`; returns the cluster, a provider for it and its kubeconfig."""
    child = pulumi.ResourceOptions(parent=parent)
    key_arn: pulumi.Input[str]
    if settings.kms_key_arn:
        key_arn = settings.kms_key_arn
    else:
        key = aws.kms.Key(
            f"{name}-secrets-key",
            description=f"{name}: EKS secrets envelope encryption",
            enable_key_rotation=True,
            tags=settings.tags,
            opts=child,
        )
        key_arn = key.arn
    node_role = aws.iam.Role(
        f"{name}-node-role",
        assume_role_policy=json.dumps({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}),
        tags=settings.tags,
        opts=child,
    )  # fmt: skip
    attachments = [
        aws.iam.RolePolicyAttachment(
            f"{name}-node-{policy.lower().replace('_', '-')}",
            role=node_role.name,
            policy_arn=f"arn:aws:iam::aws:policy/{policy}",
            opts=child,
        )
        for policy in NODE_POLICIES
    ]
    cluster_name = settings.name or f"kafka-mirror-{name}"
    args = {**cluster_args(settings, key_arn), "name": cluster_name}
    # (EKS adds the access entry of a managed node group's role itself.)
    cluster = eks.Cluster(f"{name}-cluster", **args, opts=child)
    # IMDSv2 only, one hop: pods (one network hop further) cannot reach the nodes' credentials; they use IRSA.
    template = aws.ec2.LaunchTemplate(
        f"{name}-nodes-template",
        metadata_options={"http_tokens": "required", "http_put_response_hop_limit": 1, "http_endpoint": "enabled"},
        tags=settings.tags,
        opts=child,
    )
    aws.eks.NodeGroup(
        f"{name}-nodes",
        cluster_name=cluster_name,  # by name: no resource reference into the pulumi-eks component
        node_role_arn=node_role.arn,
        subnet_ids=settings.subnet_ids,
        instance_types=[settings.instance_type],
        launch_template={"id": template.id, "version": template.latest_version.apply(str)},
        scaling_config={"desired_size": settings.nodes, "min_size": 1, "max_size": max(settings.nodes, 1) * 2},
        tags=settings.tags,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[cluster, *attachments]),
    )
    config: pulumi.Output[str] = pulumi.Output.secret(cluster.kubeconfig_json)
    provider = k8s.Provider(f"{name}-k8s", kubeconfig=config, opts=child)
    return cluster, provider, config
