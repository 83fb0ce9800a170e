"""EksSparkPlatform: where a datacenter's SparkApplications run on Kubernetes (EKS).

Children: optionally the EKS cluster itself (`kafka_mirror.eks.cluster`), the apps' namespace,
their service account (with an optional IRSA role annotation), the driver's Role/RoleBinding,
the Kubeflow Spark Operator from its Helm chart (optional: an existing operator), an optional
checkpoint PersistentVolumeClaim, and the stack's secrets as Kubernetes Secrets.

`deployment_target` is what a MirrorDeployment needs from the platform (its `eks` argument): plain
data, so it crosses language boundaries, and an output that depends on everything apps need first.
(No `from __future__ import annotations`: Pulumi's component analyzer reads these annotations.)
"""

import gzip
from collections.abc import Sequence
from dataclasses import asdict
from functools import cache
from pathlib import Path
from typing import Any, cast

import pulumi
import pulumi_kubernetes as k8s
import yaml

from kafka_mirror.eks import platform_specs as specs
from kafka_mirror.eks.cluster import EksClusterSettings, create_eks_cluster, create_irsa_role
from kafka_mirror.eks.monitoring import dashboard_config_map, prometheus_rule
from kafka_mirror.eks.platform_args import (
    CheckpointPvcArgs,
    EksClusterArgs,
    EksSparkPlatformArgs,
    MonitoringArgs,
    OperatorArgs,
    check_runbook_url,
    eks_settings,
    required_image,
)
from kafka_mirror.eks.settings import DEFAULT_MONITORING_NAMESPACE, PART_OF
from kafka_mirror.input_types import EksDeploymentTarget
from kafka_mirror.secrets.stack import MadeSecret, StackSecrets, create_stack_secrets
from kmirror.stack.models import OPERATOR_NAMESPACE, OPERATOR_REPLICAS, OPERATOR_REPOSITORY, PVC_NAME, PVC_SIZE

TOKEN = "kafka-mirror:index:EksSparkPlatform"
HELM_TIMEOUT_S = 600  # a chart whose pods are not ready by then fails the `up` (and is rolled back: atomic)
PRIORITY_CLASS_VALUE = 1_000_000  # above the default 0; below system-cluster-critical (2e9)
# The one place the operator's version is pinned (stack config cannot override it; the CRD schema
# the tests validate against, tests/pulumi/data/, is this release's).
# The Kubeflow Spark Operator release whose controller image submits with Spark 4: chart 2.5.2
# (appVersion 2.5.2) builds its image FROM apache/spark:4.0.4 (its Dockerfile's SPARK_IMAGE);
# charts up to 2.2.x carried Spark 3.5's spark-submit. The app image must run Spark 4.0.x.
SPARK_OPERATOR_CHART_VERSION = "2.5.2"
# The Prometheus operator's CRDs (PodMonitor, PrometheusRule, ...) for a cluster that has none yet:
# prometheus-community's CRD-only chart (prometheus-operator v0.95), pinned like the operator's.
PROMETHEUS_CRDS_CHART = "prometheus-operator-crds"
PROMETHEUS_CRDS_CHART_VERSION = "33.0.2"
PROMETHEUS_CRDS_REPOSITORY = "https://prometheus-community.github.io/helm-charts"
# The operator chart's CRDs (its crds/ directory at that tag), applied by Pulumi: Helm installs a
# chart's crds/ once and never upgrades them, so a chart upgrade would run a new operator against
# old CRD schemas. The release skips them (skip_crds); a chart upgrade ships the new file here.
SPARK_OPERATOR_CRDS = Path(__file__).parent / "crds" / f"spark-operator-{SPARK_OPERATOR_CHART_VERSION}.yaml.gz"
DEFAULT_PVC_NAME = PVC_NAME
DEFAULT_PVC_SIZE = PVC_SIZE


class EksSparkPlatform(pulumi.ComponentResource):
    """Where a datacenter's mirror apps run on Kubernetes: namespace, service account and driver RBAC, the Spark
    operator, optionally an EKS cluster and a checkpoint volume.

    Python attributes (in-process users): `settings`, `k8s_provider` (None = default provider), `ready`
    (resources every app depends on), `secrets` (stack secret name -> MadeSecret), `child_opts()`.
    """

    platform = "eks"

    namespace: pulumi.Output[str]
    """The apps' namespace."""
    service_account: pulumi.Output[str]
    """The drivers' service account."""
    image: pulumi.Output[str]
    """The app image."""
    operator: pulumi.Output[str]
    """The operator's Helm release name, or `existing`."""
    secrets: pulumi.Output[list[str]]
    """Names of the Secrets created from the stack's `kafka-mirror:secrets` (stack program only)."""
    kubeconfig: pulumi.Output[str | None]
    """A kubeconfig of the created cluster (`aws eks get-token`; no credentials inside); absent otherwise."""
    deployment_target: pulumi.Output[EksDeploymentTarget]
    """What MirrorDeployment's `eks` argument takes: the platform's settings, once its resources are ready."""

    def __init__(
        self,
        name: str,
        args: EksSparkPlatformArgs,
        opts: pulumi.ResourceOptions | None = None,
        *,
        stack_secrets: StackSecrets | None = None,
        render_dir: str | None = None,
    ) -> None:
        """`stack_secrets`: the stack program's `kafka-mirror:secrets`, created in the namespace.
        `render_dir`: write every Kubernetes object as YAML under this directory instead of
        applying it (the provider's `render_yaml_to_directory`; the kubeconfig is then unused)."""
        super().__init__(TOKEN, name, {}, opts)
        image = required_image(name, args)
        check_runbook_url(name, args)  # refused before anything is made
        self.settings = eks_settings(args)
        pvc = args.get("checkpoint_pvc")
        operator = args.get("operator") or {}
        self.k8s_provider: k8s.Provider | None = None
        self.nodes: pulumi.Resource | None = None  # a created cluster's node group: what pods (charts) need
        irsa = args.get("irsa_role_arn")
        cluster: EksClusterArgs | None = args.get("cluster")
        if render_dir is not None:
            if cluster is not None:
                raise ValueError(f"{name}: render_dir: a stack that creates its cluster cannot be rendered")
            self.k8s_provider = k8s.Provider(
                f"{name}-k8s", render_yaml_to_directory=render_dir, opts=pulumi.ResourceOptions(parent=self)
            )
        elif cluster is not None:
            dashboard = (args.get("monitoring") or {}).get("dashboard")  # its ConfigMap: the monitoring namespace
            readable = (self.settings.monitoring_namespace,) if dashboard else ()
            settings = EksClusterSettings(
                **{**cast(Any, cluster), "namespace": self.settings.namespace, "also_readable": readable}
            )
            self.cluster, self.k8s_provider, kubeconfig, self.nodes = create_eks_cluster(self, name, settings)
            self.kubeconfig = cast(Any, kubeconfig)
            if irsa is None:  # a role trusting the OIDC provider made in this same run
                irsa = create_irsa_role(
                    self,
                    name,
                    self.cluster,
                    self.settings.namespace,
                    self.settings.service_account,
                    args.get("checkpoint_root"),
                    args.get("irsa_policy_arns") or [],
                    settings.tags,
                ).arn
        elif (given := args.get("kubeconfig")) is not None:
            # An existing cluster, reached only through the kubeconfig the stack names.
            self.k8s_provider = k8s.Provider(
                f"{name}-k8s",
                kubeconfig=pulumi.Output.secret(given),
                context=args.get("kubeconfig_context"),
                opts=pulumi.ResourceOptions(parent=self),
            )
        child = self.child_opts()
        ns = self.settings.namespace
        namespace = k8s.core.v1.Namespace(f"{name}-namespace", **_body(specs.namespace_manifest(ns)), opts=child)
        self.namespace = namespace.metadata.apply(lambda m: str(m["name"] if isinstance(m, dict) else m.name))
        dep = self.child_opts(depends_on=[namespace])
        account_meta = pulumi.Output.from_input(irsa).apply(
            lambda arn: specs.service_account_manifest(self.settings, arn)["metadata"]
        )
        account = k8s.core.v1.ServiceAccount(f"{name}-service-account", metadata=account_meta, opts=dep)
        role = k8s.rbac.v1.Role(f"{name}-driver-role", **_body(specs.driver_role_manifest(self.settings)), opts=dep)
        binding = k8s.rbac.v1.RoleBinding(
            f"{name}-driver-binding",
            **_body(specs.driver_role_binding_manifest(self.settings)),
            opts=self.child_opts(depends_on=[role, account]),
        )
        self.ready: list[pulumi.Resource] = [namespace, account, binding, *([self.nodes] if self.nodes else [])]
        if self.settings.priority_class_name:
            self.ready.append(self._priority_class(name, self.settings.priority_class_name))
        if args.get("network_policy", True):
            monitoring_ns = (args.get("monitoring") or {}).get("namespace", DEFAULT_MONITORING_NAMESPACE)
            policy = specs.network_policy_manifest(self.settings, monitoring_ns)
            self.ready.append(
                k8s.networking.v1.NetworkPolicy(
                    f"{name}-network-policy", metadata=policy["metadata"], spec=policy["spec"], opts=dep
                )
            )
        self.operator_release: k8s.helm.v3.Release | None = None
        install = operator.get("install", True)
        if install:
            crds = [
                k8s.apiextensions.v1.CustomResourceDefinition(
                    f"{name}-crd-{crd['spec']['names']['plural']}",
                    metadata=crd["metadata"],
                    spec=crd["spec"],
                    # Deleting a CRD deletes every object of its kind in the cluster: other teams' apps too.
                    opts=pulumi.ResourceOptions.merge(self.child_opts(), pulumi.ResourceOptions(retain_on_delete=True)),
                )
                for crd in operator_crds()
            ]
            nodes = [self.nodes] if self.nodes else []
            self.operator_release = k8s.helm.v3.Release(
                f"{name}-spark-operator",
                name="spark-operator",
                chart="spark-operator",
                version=SPARK_OPERATOR_CHART_VERSION,
                namespace=operator.get("namespace", OPERATOR_NAMESPACE),
                create_namespace=True,
                repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=operator.get("repository", OPERATOR_REPOSITORY)),
                values=_operator_release_values(name, ns, operator),
                skip_crds=True,  # applied above, and upgraded with the chart version
                # Its pods need nodes; a failed install is rolled back, so the next `up` retries it cleanly.
                timeout=HELM_TIMEOUT_S,
                atomic=True,
                cleanup_on_fail=True,
                opts=self.child_opts(depends_on=[namespace, *crds, *nodes]),
            )
            self.ready.extend(crds)
            self.ready.append(self.operator_release)
        if pvc is not None:
            self.ready.append(self._pvc(name, pvc, dep))
        operator_ns = operator.get("namespace", OPERATOR_NAMESPACE) if install else None
        self._monitoring(name, args.get("monitoring") or {}, dep, operator_ns)
        store: Any = {"target": "kubernetes", "namespace": self.namespace}  # an Output: waits for the namespace
        providers = {"kubernetes": self.k8s_provider} if self.k8s_provider else None
        made: dict[str, MadeSecret] = create_stack_secrets(self, name, stack_secrets, store, providers)
        self.stack_secrets = made
        self.service_account = pulumi.Output.from_input(self.settings.service_account)
        self.image = pulumi.Output.from_input(image)
        self.operator = pulumi.Output.from_input("spark-operator" if install else "existing")
        self.secrets = pulumi.Output.from_input(sorted(made))
        target = pulumi.Output.all(self.image, irsa).apply(
            lambda v: {
                "platform": "eks",
                "settings": {**asdict(self.settings), "image": v[0]},
                **({"app_role": v[1]} if v[1] else {}),  # MSK IAM policies attach to it (MirrorDeployment)
            }
        )
        self.deployment_target = _ready_output(target, self.ready)
        outputs: dict[str, Any] = {
            "namespace": self.namespace,
            "service_account": self.service_account,
            "image": self.image,
            "operator": self.operator,
            "secrets": self.secrets,
            "deployment_target": self.deployment_target,
        }
        if cluster is not None:
            outputs["kubeconfig"] = self.kubeconfig
        self.register_outputs(outputs)

    def child_opts(
        self, parent: pulumi.Resource | None = None, depends_on: Sequence[pulumi.Resource] = ()
    ) -> pulumi.ResourceOptions:
        """Options for a Kubernetes child of `parent` (default: this platform) on this platform's cluster."""
        return pulumi.ResourceOptions(parent=parent or self, provider=self.k8s_provider, depends_on=list(depends_on))

    def _priority_class(self, name: str, class_name: str) -> k8s.scheduling.v1.PriorityClass:
        """The drivers' and executors' PriorityClass (cluster-scoped): a pod naming a missing class is
        refused by the API server, so the apps would never start."""
        return k8s.scheduling.v1.PriorityClass(
            f"{name}-priority-class",
            metadata={"name": class_name, "labels": dict(PART_OF)},
            value=PRIORITY_CLASS_VALUE,
            global_default=False,
            preemption_policy="PreemptLowerPriority",
            description="kafka-mirror drivers and executors: a stopped mirror stops replication",
            opts=self.child_opts(),
        )

    def _pvc(
        self, name: str, pvc: CheckpointPvcArgs, opts: pulumi.ResourceOptions
    ) -> k8s.core.v1.PersistentVolumeClaim:
        size = pvc.get("size", DEFAULT_PVC_SIZE)
        mode = pvc.get("access_mode", "ReadWriteMany")
        if mode != "ReadWriteMany":  # the stack config refuses it too; this guards library users
            raise ValueError(
                f"{name}: checkpoint_pvc access_mode {mode!r}: the driver and executors of every flow "
                "mount the claim from different nodes; use ReadWriteMany (EFS) or S3 checkpoints"
            )
        spec: dict[str, Any] = {"accessModes": [mode], "resources": {"requests": {"storage": size}}}
        if storage_class := pvc.get("storage_class"):
            spec["storageClassName"] = storage_class
        claim = pvc.get("name", DEFAULT_PVC_NAME)
        metadata = {"name": claim, "namespace": self.settings.namespace, "labels": dict(PART_OF)}
        body: dict[str, Any] = {"metadata": metadata}
        return k8s.core.v1.PersistentVolumeClaim(f"{name}-checkpoints", **body, spec=cast(Any, spec), opts=opts)

    def _monitoring(
        self, name: str, monitoring: MonitoringArgs, opts: pulumi.ResourceOptions, operator_namespace: str | None
    ) -> None:
        """The PrometheusRule (with the operator's alerts when the stack installs it) and the
        dashboard ConfigMap (PodMonitors come with each app, which wait for `ready`: so for the CRDs too)."""
        if monitoring.get("install_crds") and (monitoring.get("pod_monitor") or monitoring.get("prometheus_rule")):
            crds = k8s.helm.v3.Release(
                f"{name}-prometheus-crds",
                name=PROMETHEUS_CRDS_CHART,
                chart=PROMETHEUS_CRDS_CHART,
                version=PROMETHEUS_CRDS_CHART_VERSION,
                timeout=HELM_TIMEOUT_S,
                atomic=True,
                cleanup_on_fail=True,
                namespace=monitoring.get("namespace", DEFAULT_MONITORING_NAMESPACE),
                create_namespace=True,
                repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=PROMETHEUS_CRDS_REPOSITORY),
                opts=opts,
            )
            self.ready.append(crds)
            opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[crds]))
        if monitoring.get("prometheus_rule"):
            rule = prometheus_rule(self.settings, str(monitoring.get("runbook_url")), operator_namespace)
            k8s.apiextensions.CustomResource(
                f"{name}-alerts",
                api_version=rule["apiVersion"],
                kind=rule["kind"],
                metadata=rule["metadata"],
                spec=rule["spec"],
                opts=opts,
            )
        if monitoring.get("dashboard"):
            board = dashboard_config_map(self.settings)
            k8s.core.v1.ConfigMap(f"{name}-dashboard", metadata=board["metadata"], data=board["data"], opts=opts)


@cache
def operator_crds() -> list[dict[str, Any]]:
    """The Spark operator chart's CRDs (`SPARK_OPERATOR_CRDS`), each with the annotation that lets
    Pulumi take over fields an earlier Helm install of the chart owns."""
    with gzip.open(SPARK_OPERATOR_CRDS, "rt", encoding="utf-8") as text:
        docs = [d for d in yaml.safe_load_all(text) if d]
    for doc in docs:
        annotations = doc["metadata"].setdefault("annotations", {})
        annotations["pulumi.com/patchForce"] = "true"
        annotations["kafka-mirror/chart-version"] = SPARK_OPERATOR_CHART_VERSION
    return docs


def _operator_release_values(name: str, namespace: str, operator: OperatorArgs) -> dict[str, Any]:
    """The chart's values: `operator_values` plus the image pinned by `image_digest` (a warning without one)."""
    values = specs.operator_values(namespace, int(operator.get("replicas", OPERATOR_REPLICAS)))
    digest = operator.get("image_digest")
    if digest is None:
        pulumi.log.warn(
            f"{name}: the Spark operator image {specs.OPERATOR_IMAGE}:{SPARK_OPERATOR_CHART_VERSION} is pulled by tag; "
            "set operator.image_digest (`crane digest` of that image) to pin it"
        )
    return {**values, **specs.operator_image_values(SPARK_OPERATOR_CHART_VERSION, digest)}


def _body(manifest: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of a typed pulumi-kubernetes resource from a rendered manifest."""
    body = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind")}
    if "roleRef" in body:
        body["role_ref"] = body.pop("roleRef")
    return body


def _ready_output(value: pulumi.Output[Any], ready: Sequence[pulumi.Resource]) -> pulumi.Output[Any]:
    """`value`, depending on every resource of `ready` (a consumer's resources wait for them)."""
    return pulumi.Output.all(value, *[r.urn for r in ready]).apply(lambda v: v[0])
