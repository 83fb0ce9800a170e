"""The EKS cluster of `EksSparkPlatform` when the stack creates one (`spark.cluster.create: true`),
built with pulumi-eks: an OIDC provider for IRSA, a private API endpoint unless the stack allows a
public one (then only from `public_access_cidrs`), every control-plane log type, secrets
envelope-encrypted with a KMS key (created, with rotation, unless one is given), nodes without
public addresses, EKS deletion protection and Pulumi `protect` on the cluster (a destroy or a renamed
platform must not take every team's workloads with it), access entries from the stack config
(`access_entries`: deploy roles, a namespace-scoped read-only preview role, on-call viewers), and a
managed node group with explicit timeouts. Returns a Kubernetes provider built from the cluster's own
kubeconfig and the node group (what Helm releases wait for: a chart's pods need nodes).
`create_irsa_role`: the apps' IAM role, trusting that cluster's OIDC provider (made in the same run).
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
    deploy_from_vpc: bool = False  # an acknowledgement checked by the stack config; nothing to create
    public_access_cidrs: list[str] = field(default_factory=list)
    kms_key_arn: Any = None  # pulumi.Input[str]
    log_types: list[str] = field(default_factory=lambda: list(CONTROL_PLANE_LOGS))
    tags: dict[str, str] = field(default_factory=lambda: {"part-of": "kafka-mirror"})
    protect: bool = True  # Pulumi protect + EKS deletion protection
    access: dict[str, Any] = field(default_factory=dict)  # deploy_, preview_, view_, drift_roles (ARNs)
    namespace: str = "kafka-mirror"  # what preview roles may read
    also_readable: tuple[str, ...] = ()  # more namespaces preview roles read (the dashboard's: monitoring)
    runner_security_group_id: Any = None  # pulumi.Input[str]: the deploying runner, admitted on 443
    runner_cidr_blocks: list[str] = field(default_factory=list)


# Who reaches the cluster besides its creator (EKS access policies; authentication_mode API).
ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
VIEW_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy"
# Read everything, Secrets included (get/list/watch): what a refresh of the whole stack reads (its Secrets,
# the Helm release's storage Secrets, CRDs, SparkApplications, RBAC objects); AmazonEKSViewPolicy reads none of those.
ADMIN_VIEW_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSAdminViewPolicy"
NODE_GROUP_TIMEOUTS = pulumi.CustomTimeouts(create="30m", update="60m", delete="30m")


def access_entries(access: dict[str, Any], namespace: str, also_readable: tuple[str, ...] = ()) -> dict[str, Any]:
    """pulumi-eks `access_entries`: deploy roles are cluster admins (`pulumi up`), preview roles read
    the apps' namespace (and `also_readable`: where the stack puts other objects, e.g. the dashboard)
    only, Secrets excepted (a pull request's `pulumi preview`), view roles (on-call) read the whole
    cluster but its Secrets, drift roles read the whole cluster with its Secrets (the nightly
    `pulumi preview --refresh` of main's code: a refresh reads every object the stack owns)."""
    readable = [namespace, *(n for n in dict.fromkeys(also_readable) if n != namespace)]
    kinds = {
        "deploy_roles": ("deploy", ADMIN_POLICY, {"type": "cluster"}),
        "preview_roles": ("preview", VIEW_POLICY, {"type": "namespace", "namespaces": readable}),
        "view_roles": ("view", VIEW_POLICY, {"type": "cluster"}),
        "drift_roles": ("drift", ADMIN_VIEW_POLICY, {"type": "cluster"}),
    }
    entries: dict[str, dict[str, Any]] = {}
    for key, (kind, policy, scope) in kinds.items():
        for index, arn in enumerate(access.get(key) or []):
            policies = {kind: {"policy_arn": policy, "access_scope": scope}}
            entries[f"{kind}-{index}"] = {"principal_arn": arn, "access_policies": policies}
    return entries


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
        "deletion_protection": settings.protect,
    }
    if entries := access_entries(settings.access, settings.namespace, settings.also_readable):
        args["access_entries"] = entries
    if settings.endpoint_public_access:
        args["public_access_cidrs"] = list(settings.public_access_cidrs)
    return args


def create_eks_cluster(
    parent: pulumi.Resource, name: str, settings: EksClusterSettings
) -> tuple[eks.Cluster, k8s.Provider, pulumi.Output[str], aws.eks.NodeGroup]:
    """Children of `parent` named `<name>-...`; returns the cluster, a provider for it, its kubeconfig and
    its node group."""
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
        assume_role_policy=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
                ],
            }
        ),
        tags=settings.tags,
        opts=child,
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
    cluster_name = settings.name or f"kafka-mirror-{name}"
    args = {**cluster_args(settings, key_arn), "name": cluster_name}
    # (EKS adds the access entry of a managed node group's role itself.)
    cluster = eks.Cluster(
        f"{name}-cluster", **args, opts=pulumi.ResourceOptions(parent=parent, protect=settings.protect)
    )
    # IMDSv2 only, one hop: pods (one network hop further) cannot reach the nodes' credentials; they use IRSA.
    template = aws.ec2.LaunchTemplate(
        f"{name}-nodes-template",
        metadata_options={"http_tokens": "required", "http_put_response_hop_limit": 1, "http_endpoint": "enabled"},
        tags=settings.tags,
        opts=child,
    )
    nodes = aws.eks.NodeGroup(
        f"{name}-nodes",
        cluster_name=cluster_name,  # by name: no resource reference into the pulumi-eks component
        node_role_arn=node_role.arn,
        subnet_ids=settings.subnet_ids,
        instance_types=[settings.instance_type],
        launch_template={"id": template.id, "version": template.latest_version.apply(str)},
        scaling_config={"desired_size": settings.nodes, "min_size": 1, "max_size": max(settings.nodes, 1) * 2},
        tags=settings.tags,
        opts=pulumi.ResourceOptions(
            parent=parent, depends_on=[cluster, *attachments], custom_timeouts=NODE_GROUP_TIMEOUTS
        ),
    )
    admitted = _admit_runner(parent, name, cluster, settings)
    config: pulumi.Output[str] = pulumi.Output.secret(cluster.kubeconfig_json)
    provider = k8s.Provider(
        f"{name}-k8s", kubeconfig=config, opts=pulumi.ResourceOptions(parent=parent, depends_on=admitted)
    )
    return cluster, provider, config, nodes


def _admit_runner(
    parent: pulumi.Resource, name: str, cluster: eks.Cluster, settings: EksClusterSettings
) -> list[pulumi.Resource]:
    """pulumi-eks opens the private endpoint (443) to its nodes only: with deploy_from_vpc the runner
    of `pulumi up` (inside the VPC) is admitted on the cluster security group, before the provider is used."""
    if not settings.deploy_from_vpc:
        return []
    group = cluster.cluster_security_group_id  # pulumi-eks' group on the control plane's interfaces
    source: dict[str, Any] = (
        {"source_security_group_id": settings.runner_security_group_id}
        if settings.runner_security_group_id is not None
        else {"cidr_blocks": list(settings.runner_cidr_blocks)}
    )
    rule = aws.ec2.SecurityGroupRule(
        f"{name}-api-from-runner",
        type="ingress",
        protocol="tcp",
        from_port=443,
        to_port=443,
        security_group_id=group,
        description="the deploy runner -> EKS API (pulumi up)",
        opts=pulumi.ResourceOptions(parent=parent),
        **source,
    )
    return [rule]


def irsa_trust_policy(provider_arn: str, provider_url: str, namespace: str, service_account: str) -> dict[str, Any]:
    """The IRSA trust policy: only `namespace/service_account` of the cluster behind the OIDC provider."""
    issuer = provider_url.removeprefix("https://")
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Federated": provider_arn},
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": {
                    "StringEquals": {
                        f"{issuer}:sub": f"system:serviceaccount:{namespace}:{service_account}",
                        f"{issuer}:aud": "sts.amazonaws.com",
                    }
                },
            }
        ],
    }


def checkpoint_access_policy(checkpoint_root: str) -> dict[str, Any] | None:
    """Read/write under an `s3a://BUCKET/PREFIX` (or s3://) checkpoint root; None for other roots."""
    scheme, _, rest = checkpoint_root.partition("://")
    if scheme not in ("s3", "s3a") or not rest:
        return None
    bucket, _, prefix = rest.partition("/")
    prefix = prefix.strip("/")
    objects = f"arn:aws:s3:::{bucket}/{prefix}/*" if prefix else f"arn:aws:s3:::{bucket}/*"
    listing: dict[str, Any] = {
        "Effect": "Allow",
        "Action": ["s3:ListBucket", "s3:GetBucketLocation"],
        "Resource": f"arn:aws:s3:::{bucket}",
    }
    if prefix:
        listing["Condition"] = {"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}}
    return {
        "Version": "2012-10-17",
        "Statement": [
            listing,
            {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"], "Resource": objects},
        ],
    }


def create_irsa_role(
    parent: pulumi.Resource,
    name: str,
    cluster: eks.Cluster,
    namespace: str,
    service_account: str,
    checkpoint_root: str | None,
    policy_arns: list[Any],
    tags: dict[str, str],
) -> aws.iam.Role:
    """The apps' IAM role (IRSA) for a cluster created in this run: its trust names the cluster's
    OIDC provider by output, so it is made after the provider; S3 access to the checkpoint root."""
    child = pulumi.ResourceOptions(parent=parent)
    trust = pulumi.Output.all(cluster.oidc_provider_arn, cluster.oidc_provider_url).apply(
        lambda v: json.dumps(irsa_trust_policy(v[0], v[1], namespace, service_account))
    )
    role = aws.iam.Role(f"{name}-irsa", assume_role_policy=trust, tags=tags, opts=child)
    access = checkpoint_access_policy(checkpoint_root) if checkpoint_root else None
    if access is not None:
        aws.iam.RolePolicy(f"{name}-irsa-checkpoints", role=role.name, policy=json.dumps(access), opts=child)
    for index, arn in enumerate(policy_arns):
        aws.iam.RolePolicyAttachment(f"{name}-irsa-policy-{index}", role=role.name, policy_arn=arn, opts=child)
    return role
