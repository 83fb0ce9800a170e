"""Pure specs of the EKS platform's own objects (`EksSparkPlatform`): the apps' namespace (Pod
Security Admission `restricted`), the NetworkPolicy, the drivers' service account and RBAC, and the
Kubeflow Spark Operator chart's values. No pulumi import; the apps' objects: `kafka_mirror.eks.specs`.
"""

from __future__ import annotations

import re
from typing import Any

from kafka_mirror.eks.settings import DEFAULT_MONITORING_NAMESPACE, PART_OF, EksSettings, spark_ports
from kmirror.stack.models import OPERATOR_REPLICAS

# Pod Security Admission on the apps' namespace: driver and executor pods meet `restricted`
# (`pod_security_context`, `container_security_context`; the operator's webhook applies them before
# admission checks the pod), so anything weaker (a pod without them) is refused, not just logged.
POD_SECURITY_LEVEL = "restricted"
POD_SECURITY_LABELS = {
    f"pod-security.kubernetes.io/{mode}{suffix}": value
    for mode in ("enforce", "audit", "warn")
    for suffix, value in (("", POD_SECURITY_LEVEL), ("-version", "latest"))
}


def namespace_manifest(namespace: str) -> dict[str, Any]:
    """The apps' namespace, with Pod Security Admission enforcing `restricted` (POD_SECURITY_LABELS)."""
    labels = {**PART_OF, **POD_SECURITY_LABELS}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}}


def network_policy_manifest(
    settings: EksSettings, monitoring_namespace: str = DEFAULT_MONITORING_NAMESPACE
) -> dict[str, Any]:
    """Ingress of the mirror pods (drivers and executors), deny by default: only other mirror pods
    of the namespace on Spark's RPC/block-manager ports (`spark_ports`), and Prometheus from
    `monitoring_namespace` on the drivers' metrics port. Apps share the namespace's rule; each
    app's own `spark.authenticate` secret keeps one app's pods out of another's RPC.

    Nothing else reaches them: the operator's webhook runs in the operator's pods (the API server
    calls it, not the mirror pods), and the operator watches pods through the API server. Egress
    stays open: brokers are outside the cluster at addresses a NetworkPolicy cannot name (DNS
    names behind changing IPs), and the driver needs the API server and S3."""
    rpc_ports = [{"protocol": "TCP", "port": port} for port in spark_ports(settings)]
    metrics_ports = [{"protocol": "TCP", "port": "metrics"}, {"protocol": "TCP", "port": settings.metrics_port}]
    monitoring = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": monitoring_namespace}}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "kafka-mirror-ingress", "namespace": settings.namespace, "labels": dict(PART_OF)},
        "spec": {
            "podSelector": {"matchLabels": dict(PART_OF)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": dict(PART_OF)}}], "ports": rpc_ports},
                {"from": [monitoring], "ports": metrics_ports},
            ],
        },
    }


def service_account_manifest(settings: EksSettings, irsa_role_arn: str | None) -> dict[str, Any]:
    """The drivers' service account; with IRSA its pods get the role's AWS credentials (S3 checkpoints)."""
    metadata: dict[str, Any] = {
        "name": settings.service_account,
        "namespace": settings.namespace,
        "labels": dict(PART_OF),
    }
    if irsa_role_arn:
        metadata["annotations"] = {"eks.amazonaws.com/role-arn": irsa_role_arn}
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata}


def driver_role_manifest(settings: EksSettings) -> dict[str, Any]:
    """What a Spark driver does in its namespace: create and watch executor pods and their services."""
    rules = [
        {
            "apiGroups": [""],
            "resources": ["pods", "services", "configmaps", "persistentvolumeclaims"],
            "verbs": ["create", "get", "list", "watch", "update", "patch", "delete", "deletecollection"],
        },
    ]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {
            "name": f"{settings.service_account}-driver",
            "namespace": settings.namespace,
            "labels": dict(PART_OF),
        },
        "rules": rules,
    }


def driver_role_binding_manifest(settings: EksSettings) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": f"{settings.service_account}-driver",
            "namespace": settings.namespace,
            "labels": dict(PART_OF),
        },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": f"{settings.service_account}-driver",
        },
        "subjects": [{"kind": "ServiceAccount", "name": settings.service_account, "namespace": settings.namespace}],
    }


OPERATOR_IMAGE = "ghcr.io/kubeflow/spark-operator/controller"  # the chart's default (registry/repository)
DIGEST_PATTERN = re.compile(r"sha256:[0-9a-f]{64}")


def operator_image_values(chart_version: str, digest: str | None) -> dict[str, Any]:
    """The chart's `image` values pinning the operator by digest: its template renders
    `registry/repository:tag`, so the tag carries `<appVersion>@sha256:...` (the digest wins at pull).

    Without a digest the chart's tag (its appVersion) is used; raises ValueError when `digest` is
    not `sha256:` and 64 lower-case hex digits."""
    if digest is None:
        return {}
    if not DIGEST_PATTERN.fullmatch(digest):
        raise ValueError(
            f"operator.image_digest {digest!r} is not a digest; use sha256:<64 hex digits>, e.g. from "
            f"`crane digest {OPERATOR_IMAGE}:{chart_version}`"
        )
    return {"image": {"tag": f"{chart_version}@{digest}"}}


def operator_values(namespace: str, replicas: int = OPERATOR_REPLICAS) -> dict[str, Any]:
    """Helm values of the Kubeflow Spark Operator chart: watch only the mirror's namespace, leave
    its service account to us (`service_account_manifest`), and run controller and webhook
    highly available. The webhook stays fail-closed (`failurePolicy: Fail`): it is what puts the
    secret volumes, security contexts and tolerations on driver and executor pods, so a pod
    admitted without it would run without its secrets or hardening. Two replicas with a
    PodDisruptionBudget (and leader election for the controller) keep it answering."""
    ha = replicas > 1
    budget = {"enable": ha, "minAvailable": 1}
    return {
        "spark": {"jobNamespaces": [namespace], "serviceAccount": {"create": False}, "rbac": {"create": False}},
        "controller": {"replicas": replicas, "leaderElection": {"enable": True}, "podDisruptionBudget": budget},
        "webhook": {"enable": True, "replicas": replicas, "failurePolicy": "Fail", "podDisruptionBudget": budget},
        "prometheus": {"metrics": {"enable": True}},
    }
