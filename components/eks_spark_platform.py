"""EksSparkPlatform: where a datacenter's SparkApplications run on Kubernetes (EKS).

Children: optionally the EKS cluster itself (`components.eks_cluster`), the apps' namespace,
their service account (with an optional IRSA role annotation), the driver's Role/RoleBinding,
the Kubeflow Spark Operator from its Helm chart (optional: an existing operator), an optional
checkpoint PersistentVolumeClaim, and the stack's secrets as Kubernetes Secrets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import pulumi
import pulumi_kubernetes as k8s

from components.eks_cluster import EksClusterSettings, create_eks_cluster
from components.secret_store import SecretStoreArgs
from components.specs import (
    PART_OF,
    EksSettings,
    driver_role_binding_manifest,
    driver_role_manifest,
    namespace_manifest,
    operator_values,
    service_account_manifest,
)
from components.stack_config import SecretConfig
from components.stack_secrets import MadeSecret, create_stack_secrets

TOKEN = "kafka-mirror:index:EksSparkPlatform"
# The Kubeflow Spark Operator release whose controller image submits with Spark 4: chart 2.5.2
# (appVersion 2.5.2) builds its image FROM apache/spark:4.0.4 (its Dockerfile's SPARK_IMAGE);
# charts up to 2.2.x carried Spark 3.5's spark-submit. The app image must run Spark 4.0.x.
SPARK_OPERATOR_CHART_VERSION = "2.5.2"


@dataclass(frozen=True)
class OperatorSettings:
    install: bool = True
    namespace: str = "spark-operator"
    chart_version: str = SPARK_OPERATOR_CHART_VERSION
    repository: str = "https://kubeflow.github.io/spark-operator"


@dataclass(frozen=True)
class CheckpointPvc:
    name: str = "kmirror-checkpoints"
    size: str = "10Gi"
    storage_class: str | None = None


@dataclass
class EksSparkPlatformArgs:
    settings: EksSettings
    irsa_role_arn: str | None = None
    operator: OperatorSettings = field(default_factory=OperatorSettings)
    cluster: EksClusterSettings | None = None  # None: use the ambient kubeconfig / default provider
    checkpoint_pvc: CheckpointPvc | None = None
    secrets: Sequence[tuple[SecretConfig, Mapping[str, Any]]] = ()
    config_secrets: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)


class EksSparkPlatform(pulumi.ComponentResource):
    """Outputs: `namespace`, `service_account`, `image`, `operator` (release name or "existing").

    Attributes for `MirrorDeployment`: `settings`, `k8s_provider` (None = default provider),
    `ready` (resources every app depends on), `secrets` (secret name -> MadeSecret).
    """

    platform = "eks"

    def __init__(self, name: str, args: EksSparkPlatformArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TOKEN, name, {}, opts)
        self.settings = args.settings
        self.checkpoint_pvc = args.checkpoint_pvc
        self.k8s_provider: k8s.Provider | None = None
        if args.cluster is not None:
            self.cluster, self.k8s_provider = create_eks_cluster(self, name, args.cluster)
        child = self.child_opts()
        ns = args.settings.namespace
        namespace = k8s.core.v1.Namespace(f"{name}-namespace", **_body(namespace_manifest(ns)), opts=child)
        self.namespace = namespace.metadata.apply(lambda m: str(m["name"] if isinstance(m, dict) else m.name))
        dep = self.child_opts(depends_on=[namespace])
        account = k8s.core.v1.ServiceAccount(
            f"{name}-service-account", **_body(service_account_manifest(args.settings, args.irsa_role_arn)), opts=dep
        )
        role = k8s.rbac.v1.Role(f"{name}-driver-role", **_body(driver_role_manifest(args.settings)), opts=dep)
        binding = k8s.rbac.v1.RoleBinding(
            f"{name}-driver-binding",
            **_body(driver_role_binding_manifest(args.settings)),
            opts=self.child_opts(depends_on=[role, account]),
        )
        self.ready: list[pulumi.Resource] = [namespace, account, binding]
        self.operator_release: k8s.helm.v3.Release | None = None
        if args.operator.install:
            self.operator_release = k8s.helm.v3.Release(
                f"{name}-spark-operator",
                name="spark-operator",
                chart="spark-operator",
                version=args.operator.chart_version,
                namespace=args.operator.namespace,
                create_namespace=True,
                repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=args.operator.repository),
                values=operator_values(ns),
                opts=dep,
            )
            self.ready.append(self.operator_release)
        if args.checkpoint_pvc is not None:
            self.ready.append(self._pvc(name, args.checkpoint_pvc, dep))
        store = SecretStoreArgs("kubernetes", namespace=cast(str, self.namespace))  # Output: waits for the namespace
        providers = {"kubernetes": self.k8s_provider} if self.k8s_provider else None
        self.secrets: dict[str, MadeSecret] = create_stack_secrets(
            self, name, args.secrets, args.config_secrets, store, providers
        )
        self.register_outputs(
            {
                "namespace": self.namespace,
                "service_account": args.settings.service_account,
                "image": args.settings.image,
                "operator": "spark-operator" if args.operator.install else "existing",
                "secrets": sorted(self.secrets),
            }
        )

    def child_opts(
        self, parent: pulumi.Resource | None = None, depends_on: Sequence[pulumi.Resource] = ()
    ) -> pulumi.ResourceOptions:
        """Options for a Kubernetes child of `parent` (default: this platform) on this platform's cluster."""
        return pulumi.ResourceOptions(parent=parent or self, provider=self.k8s_provider, depends_on=list(depends_on))

    def _pvc(self, name: str, pvc: CheckpointPvc, opts: pulumi.ResourceOptions) -> k8s.core.v1.PersistentVolumeClaim:
        spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": pvc.size}}}
        if pvc.storage_class:
            spec["storageClassName"] = pvc.storage_class
        body: dict[str, Any] = {
            "metadata": {"name": pvc.name, "namespace": self.settings.namespace, "labels": dict(PART_OF)}
        }
        return k8s.core.v1.PersistentVolumeClaim(f"{name}-checkpoints", **body, spec=cast(Any, spec), opts=opts)


def _body(manifest: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of a typed pulumi-kubernetes resource from a rendered manifest."""
    body = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind")}
    if "roleRef" in body:
        body["role_ref"] = body.pop("roleRef")
    return body
