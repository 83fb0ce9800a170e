"""EksSparkPlatform's arguments: their types (what the schema lists; Python programs pass them as
dicts) and what they mean for the apps (`eks_settings`, `required_image`).
(No `from __future__ import annotations`: Pulumi's component analyzer reads these annotations.)
"""

from typing import TypedDict

import pulumi
from typing_extensions import NotRequired

from kafka_mirror.eks.settings import DEFAULT_MONITORING_NAMESPACE, EksSettings
from kafka_mirror.input_types import FlowSpark
from kmirror.errors import Problem, ValidationError
from kmirror.stack.models import PVC_NAME
from kmirror.stack.platform_rules import runbook_url_problem


class OperatorArgs(TypedDict):
    """The Kubeflow Spark Operator (Helm chart) the SparkApplications need."""

    install: NotRequired[bool]
    """Install the chart (default true); false: an operator watching the namespace already runs."""
    namespace: NotRequired[str]
    """The operator's namespace (default `spark-operator`)."""
    repository: NotRequired[str]
    """The chart repository (default `https://kubeflow.github.io/spark-operator`)."""
    replicas: NotRequired[int]
    """Controller and webhook replicas (default 2: highly available, with PodDisruptionBudgets)."""
    image_digest: NotRequired[str]
    """The operator image's digest (`sha256:` + 64 hex) for the chart's version, e.g. `crane digest
    ghcr.io/kubeflow/spark-operator/controller:2.5.2`; pins the controller and webhook image. Without it the
    chart's tag is used (a warning says so)."""


class CheckpointPvcArgs(TypedDict):
    """A PersistentVolumeClaim mounted at /var/lib/kmirror/checkpoints (when checkpoints are not on S3)."""

    name: NotRequired[str]
    """The claim's name (default `kmirror-checkpoints`)."""
    size: NotRequired[str]
    """The requested storage (default `10Gi`)."""
    storage_class: NotRequired[str]
    """A ReadWriteMany storage class (e.g. EFS's `efs-sc`): the driver and executors of every flow mount it."""
    access_mode: NotRequired[str]
    """Must be `ReadWriteMany` (the default); ReadWriteOnce volumes fail with Multi-Attach errors."""


class EksClusterArgs(TypedDict):
    """An EKS cluster (with a managed node group) created for the mirror."""

    subnet_ids: pulumi.Input[list[str]]
    """The (private) subnets of the cluster and its nodes."""
    vpc_id: pulumi.Input[str]
    """The VPC of the subnets."""
    endpoint_public_access: NotRequired[bool]
    """A public API endpoint (default false: private only)."""
    public_access_cidrs: NotRequired[list[str]]
    """Who may reach a public endpoint."""
    kms_key_arn: NotRequired[pulumi.Input[str]]
    """KMS key of the secrets envelope encryption (default: a key created with rotation); may be an output."""
    log_types: NotRequired[list[str]]
    """Control-plane log types (default: all five)."""
    name: NotRequired[str]
    """The cluster's name (default: generated)."""
    version: NotRequired[str]
    """The Kubernetes version (default `kmirror.stack.models.EKS_VERSION`, 1.35)."""
    deploy_from_vpc: NotRequired[bool]
    """The runner of `pulumi up` reaches a private API endpoint (self-hosted in the VPC, VPN, peering).
    The stack config refuses a private-only endpoint without it: the same run installs into the cluster."""
    instance_type: NotRequired[str]
    """The nodes' instance type (default `m7i.xlarge`)."""
    nodes: NotRequired[int]
    """The node group's desired size (default 3)."""
    tags: NotRequired[dict[str, str]]
    """Tags of the AWS resources (default `part-of: kafka-mirror`)."""
    protect: NotRequired[bool]
    """Pulumi protect and EKS deletion protection on the cluster (default true)."""
    access: NotRequired[dict[str, list[str]]]
    """Access entries: `deploy_roles` (admin), `preview_roles`/`view_roles` (no Secrets), `drift_roles` (read all)."""
    runner_security_group_id: NotRequired[pulumi.Input[str]]
    """With deploy_from_vpc: the deploying runner's security group, admitted to the API endpoint (443)."""
    runner_cidr_blocks: NotRequired[list[str]]
    """With deploy_from_vpc: the deploying runners' private address ranges, admitted to the API endpoint (443)."""


class MonitoringArgs(TypedDict):
    """Monitoring objects of the kube-prometheus-stack (its CRDs must be installed)."""

    pod_monitor: NotRequired[bool]
    """A PodMonitor per app's driver."""
    prometheus_rule: NotRequired[bool]
    """The mirror's PrometheusRule alerts (requires `runbook_url`)."""
    runbook_url: NotRequired[str]
    """Absolute http(s) URL of the runbook each alert links to (docs/deploy.md's runbook on your Git host)."""
    dashboard: NotRequired[bool]
    """The Grafana dashboard as a ConfigMap (label `grafana_dashboard: "1"`)."""
    labels: NotRequired[dict[str, str]]
    """Labels the Prometheus operator selects PodMonitors and rules by (e.g. `release: kube-prometheus-stack`)."""
    namespace: NotRequired[str]
    """Prometheus' namespace: the NetworkPolicy lets it scrape the drivers' metrics port (default `monitoring`)."""
    install_crds: NotRequired[bool]
    """Install the Prometheus operator's CRDs (chart `prometheus-operator-crds`) before the PodMonitors and rules:
    a new cluster has none, and a custom resource of an unknown kind fails the `up` (default false; the stack
    program sets it for a cluster it creates)."""


class EksSparkPlatformArgs(TypedDict):
    """Arguments of EksSparkPlatform (every one optional but `image`)."""

    image: pulumi.Input[str]
    """The app image (the repository's Dockerfile: Spark 4.0 with the app), by digest (`REPO@sha256:...`);
    may be an output (e.g. an ECR URL). Required: there is no usable default image."""
    namespace: NotRequired[str]
    """The apps' namespace (default `kafka-mirror`), created here."""
    image_pull_policy: NotRequired[str]
    """The image pull policy (default `IfNotPresent`)."""
    service_account: NotRequired[str]
    """The drivers' service account (default `kafka-mirror`), created here."""
    irsa_role_arn: NotRequired[pulumi.Input[str]]
    """An IAM role the service account assumes (IRSA), e.g. for S3 checkpoints. With `cluster` and no role,
    the platform creates one trusting the new cluster's OIDC provider (a role made before the run cannot)."""
    irsa_policy_arns: NotRequired[list[pulumi.Input[str]]]
    """Policies attached to the IRSA role the platform creates with `cluster`."""
    checkpoint_root: NotRequired[str]
    """Where the flows' checkpoints go (`s3a://BUCKET/PREFIX`): the IRSA role created with `cluster` may read and
    write there."""
    spark_version: NotRequired[str]
    """The image's Spark version (default `4.0.2`)."""
    metrics_port: NotRequired[int]
    """The drivers' Prometheus port (default 9404)."""
    spark_conf: NotRequired[dict[str, str]]
    """Spark properties every app gets."""
    spark_defaults: NotRequired[FlowSpark]
    """Flow-level Spark resources (executors, executor_memory, ...) a flow does not set itself."""
    operator: NotRequired[OperatorArgs]
    """The Spark operator to install (default: install chart 2.5.2 in `spark-operator`)."""
    cluster: NotRequired[EksClusterArgs]
    """Create an EKS cluster for the mirror with pulumi-eks (default: `kubeconfig`, else the program's provider)."""
    kubeconfig: NotRequired[pulumi.Input[str]]
    """An existing cluster's kubeconfig (keep it a secret); a provider is made from it."""
    kubeconfig_context: NotRequired[str]
    """The context of `kubeconfig` to use."""
    checkpoint_pvc: NotRequired[CheckpointPvcArgs]
    """A ReadWriteMany PersistentVolumeClaim for checkpoints (default: none; checkpoints on S3)."""
    monitoring: NotRequired[MonitoringArgs]
    """PodMonitors, PrometheusRule alerts and the Grafana dashboard (kube-prometheus-stack)."""
    priority_class_name: NotRequired[str]
    """The drivers' and executors' PriorityClass."""
    node_selector: NotRequired[dict[str, str]]
    """Node labels the apps' pods require."""
    tolerations: NotRequired[list[dict[str, str]]]
    """Taints the apps' pods tolerate (`{key, operator, value, effect}`)."""
    read_only_root_filesystem: NotRequired[bool]
    """Run the Spark containers with a read-only root file system (default true; /tmp and Spark's work dir are
    emptyDirs)."""
    app_start_timeout_s: NotRequired[int]
    """How long `pulumi up` waits for each SparkApplication to be RUNNING before failing (default 600)."""
    network_policy: NotRequired[bool]
    """Deny ingress to the mirror pods but Spark RPC between them and Prometheus scrapes (default true)."""


def check_runbook_url(name: str, args: EksSparkPlatformArgs) -> None:
    """With `monitoring.prometheus_rule`, the absolute runbook URL its alerts link (`runbook_url_problem`)."""
    monitoring = args.get("monitoring") or {}
    if monitoring.get("prometheus_rule"):
        problem = runbook_url_problem(monitoring.get("runbook_url"), "monitoring.runbook_url")
        if problem is not None:
            raise ValidationError([problem], name)


def required_image(name: str, args: EksSparkPlatformArgs) -> pulumi.Input[str]:
    """The app image the platform's apps run; raises ValidationError naming the input when it is
    missing or empty (a default image would deploy apps that can never start)."""
    image = args.get("image")
    if image is None or (isinstance(image, str) and not image.strip()):
        raise ValidationError(
            [
                Problem(
                    f"EksSparkPlatform {name}: image",
                    f"required, got {image!r}: pass the app image built from "
                    "the Dockerfile by digest (REPO@sha256:...), e.g. the ECR image CI pushed",
                )
            ]
        )
    return image


def eks_settings(args: EksSparkPlatformArgs) -> EksSettings:
    """The apps' settings from the platform's arguments (an output `image` is filled in by `deployment_target`)."""
    defaults = EksSettings()
    pvc = args.get("checkpoint_pvc")
    monitoring = args.get("monitoring") or {}
    image = args.get("image")
    return EksSettings(
        namespace=args.get("namespace", defaults.namespace),
        image=image if isinstance(image, str) else defaults.image,
        image_pull_policy=args.get("image_pull_policy", defaults.image_pull_policy),
        service_account=args.get("service_account", defaults.service_account),
        spark_version=args.get("spark_version", defaults.spark_version),
        metrics_port=int(args.get("metrics_port", defaults.metrics_port)),
        spark_conf={str(k): str(v) for k, v in (args.get("spark_conf") or {}).items()},
        spark_defaults=dict(args.get("spark_defaults") or {}),
        checkpoint_claim=pvc.get("name", PVC_NAME) if pvc is not None else None,
        priority_class_name=args.get("priority_class_name"),
        node_selector=dict(args.get("node_selector") or {}),
        tolerations=[dict(t) for t in args.get("tolerations") or []],
        read_only_root_filesystem=bool(args.get("read_only_root_filesystem", defaults.read_only_root_filesystem)),
        pod_monitor=bool(monitoring.get("pod_monitor", False)),
        monitoring_labels=dict(monitoring.get("labels") or {}),
        app_start_timeout_s=int(args.get("app_start_timeout_s", defaults.app_start_timeout_s)),
        network_policy=bool(args.get("network_policy", True)),
        monitoring_namespace=monitoring.get("namespace", DEFAULT_MONITORING_NAMESPACE),
    )
