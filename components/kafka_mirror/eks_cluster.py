"""Optional EKS cluster for `EksSparkPlatform` (`kafka-mirror:spark.cluster.create: true`).

A plain function building children of the platform: cluster role, cluster, node role, a managed
node group and a Kubernetes provider for the new cluster (kubeconfig using `aws eks get-token`,
so it holds no credentials).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryReadOnly")


@dataclass(frozen=True)
class EksClusterSettings:
    subnet_ids: Any  # pulumi.Input[list[str]]
    name: str | None = None
    version: str = "1.33"
    instance_type: str = "m7i.xlarge"
    nodes: int = 3
    tags: dict[str, str] = field(default_factory=lambda: {"part-of": "kafka-mirror"})


def _assume(service: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
        }
    )


def kubeconfig(name: str, endpoint: str, ca_data: str) -> dict[str, Any]:
    """A kubeconfig for the cluster that gets tokens from `aws eks get-token` (no secrets inside)."""
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "aws",
            "args": ["eks", "get-token", "--cluster-name", name],
        }
    }
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": name,
        "clusters": [{"name": name, "cluster": {"server": endpoint, "certificate-authority-data": ca_data}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "users": [{"name": name, "user": user}],
    }


def create_eks_cluster(
    parent: pulumi.Resource, name: str, settings: EksClusterSettings
) -> tuple[aws.eks.Cluster, k8s.Provider, pulumi.Output[str]]:
    """Children of `parent` named `<name>-...`; returns the cluster, a provider for it and its kubeconfig."""
    child = pulumi.ResourceOptions(parent=parent)
    cluster_role = aws.iam.Role(
        f"{name}-cluster-role", assume_role_policy=_assume("eks.amazonaws.com"), tags=settings.tags, opts=child
    )
    attach = aws.iam.RolePolicyAttachment(
        f"{name}-cluster-policy",
        role=cluster_role.name,
        policy_arn="arn:aws:iam::aws:policy/AmazonEKSClusterPolicy",
        opts=child,
    )
    cluster = aws.eks.Cluster(
        f"{name}-cluster",
        name=settings.name,
        role_arn=cluster_role.arn,
        version=settings.version,
        vpc_config=aws.eks.ClusterVpcConfigArgs(subnet_ids=settings.subnet_ids),
        access_config=aws.eks.ClusterAccessConfigArgs(
            authentication_mode="API", bootstrap_cluster_creator_admin_permissions=True
        ),
        tags=settings.tags,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[attach]),
    )
    nodes = _node_group(parent, name, settings, cluster)
    config = pulumi.Output.all(cluster.name, cluster.endpoint, cluster.certificate_authority.data).apply(
        lambda v: json.dumps(kubeconfig(v[0], v[1], v[2]))
    )
    provider = k8s.Provider(
        f"{name}-k8s", kubeconfig=config, opts=pulumi.ResourceOptions(parent=parent, depends_on=[nodes])
    )
    return cluster, provider, config


def _node_group(parent: pulumi.Resource, name: str, settings: EksClusterSettings, cluster: aws.eks.Cluster
                ) -> aws.eks.NodeGroup:  # fmt: skip
    """A managed node group with the standard worker policies (children `<name>-node-*`)."""
    child = pulumi.ResourceOptions(parent=parent)
    node_role = aws.iam.Role(
        f"{name}-node-role", assume_role_policy=_assume("ec2.amazonaws.com"), tags=settings.tags, opts=child
    )
    attachments = [
        aws.iam.RolePolicyAttachment(
            f"{name}-node-{policy.lower().replace('_', '-')}",
            role=node_role.name,
            policy_arn=f"arn:aws:iam::aws:policy/{policy}",
            opts=child,
        )
        for policy in NODE_POLICIES
    ]
    return aws.eks.NodeGroup(
        f"{name}-nodes",
        cluster_name=cluster.name,
        node_role_arn=node_role.arn,
        subnet_ids=settings.subnet_ids,
        instance_types=[settings.instance_type],
        scaling_config=aws.eks.NodeGroupScalingConfigArgs(
            desired_size=settings.nodes, min_size=1, max_size=max(settings.nodes, 1) * 2
        ),
        tags=settings.tags,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=attachments),
    )
