"""The typed settings of a stack's `kafka-mirror:spark`: one pydantic model per platform.

`EksSparkConfig` and `EmrSparkConfig` own the stack-level defaults (unknown keys are errors,
values keep their YAML type: `nodes: "3"` is refused, never coerced into a number AWS would then
see). `kmirror.stack.config` validates a stack with them and adds the rules that span several
keys. Pure: pydantic only, no pulumi.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from kmirror.stack.deploy_layout import DEFAULT_METRICS_PORT, DEFAULT_NAMESPACE

PLATFORMS = ("eks", "emr")
LogType = Literal["api", "audit", "authenticator", "controllerManager", "scheduler"]  # EKS control-plane logs
RWX = "ReadWriteMany"
# Defaults the stack models and the components' own arguments share (written once, here).
SPARK_VERSION = "4.0.2"  # the app image's Spark
# A created EKS cluster's Kubernetes: one in EKS standard support (1.33 left it in July 2026); the
# manifests are validated against this version's published schemas (tests/pulumi/sparkapp_schema.py).
EKS_VERSION = "1.35"
SERVICE_ACCOUNT = "kafka-mirror"  # the drivers' service account
IMAGE_PULL_POLICY: Literal["IfNotPresent"] = "IfNotPresent"
OPERATOR_NAMESPACE = "spark-operator"
OPERATOR_REPOSITORY = "https://kubeflow.github.io/spark-operator"
OPERATOR_REPLICAS = 2  # controller and webhook: highly available
PVC_NAME = "kmirror-checkpoints"
PVC_SIZE = "10Gi"
STEP_STOP_TIMEOUT_S = 600  # how long an EMR step replacement waits for the old step
# A count >= 1 (the option tables' `positive_int`); stack_config words its error with `bound_message`.
PositiveInt = Annotated[int, Field(ge=1)]


class _Strict(BaseModel):
    """Unknown keys are errors and values keep their YAML type (no "3" -> 3)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _Common(_Strict):
    check_prerequisites: bool = Field(
        True,
        description="check what the platform team creates by hand before creating anything (docs/deploy.md); "
        "false only for a test bed without AWS",
    )
    checkpoint_root: str | None = Field(None, description="durable directory of the flows' checkpoints")
    executors: PositiveInt | None = Field(None, description="default executors per flow")
    driver_memory: str | None = Field(None, description="default driver memory")
    executor_memory: str | None = Field(None, description="default executor memory")
    driver_cores: PositiveInt | None = Field(None, description="default driver cores")
    executor_cores: PositiveInt | None = Field(None, description="default executor cores")
    spark_conf: dict[str, str] = Field(default_factory=dict, description="Spark confs added to every app")
    apps_per: Literal["flow", "target"] = Field(
        "flow",
        description="`flow`: one Spark application per flow; `target`: one per target cluster, running every "
        "flow of that cluster (docs/deploy.md, one application per target cluster)",
    )


class OperatorConfig(_Strict):
    install: bool = Field(True, description="install the Kubeflow Spark Operator chart")
    namespace: str = Field(OPERATOR_NAMESPACE, description="the operator's namespace")
    repository: str = Field(OPERATOR_REPOSITORY, description="the chart repository")
    replicas: PositiveInt = Field(
        OPERATOR_REPLICAS, description="controller and webhook replicas (2+: highly available)"
    )
    image_digest: str | None = Field(
        None, pattern=r"^sha256:[0-9a-f]{64}$", description="the operator image's digest (pulled by tag without one)"
    )


class EksAccessConfig(_Strict):
    """IAM principals given access entries on a created cluster (authentication mode API)."""

    deploy_roles: list[str] = Field(default_factory=list, description="cluster admins: the roles that run `up`")
    preview_roles: list[str] = Field(
        default_factory=list, description="read-only in the apps' namespace: the roles that run `pulumi preview`"
    )
    view_roles: list[str] = Field(default_factory=list, description="read-only cluster-wide: on-call")
    drift_roles: list[str] = Field(
        default_factory=list,
        description="read-only cluster-wide, Secrets included (AmazonEKSAdminViewPolicy): the nightly drift job's "
        "role (`pulumi preview --refresh` reads every object the stack owns: its Secrets, the Helm release's "
        "storage, the Spark CRDs); main's code only, never a pull request's preview role",
    )


class EksClusterConfig(_Strict):
    create: bool = Field(False, description="create the EKS cluster (pulumi-eks)")
    name: str | None = None
    version: str = EKS_VERSION
    subnet_ids: list[str] = Field(default_factory=list, description="private subnets of the cluster and nodes")
    vpc_id: str | None = Field(None, description="the VPC of subnet_ids")
    instance_type: str = "m7i.xlarge"
    nodes: PositiveInt = 3
    endpoint_public_access: bool = Field(False, description="expose the API endpoint publicly (default private)")
    deploy_from_vpc: bool = Field(
        False, description="the runner of `pulumi up` reaches the private API endpoint (inside the VPC or peered)"
    )
    runner_security_group_id: str | None = Field(
        None, description="with deploy_from_vpc: the runner's security group, admitted to the API endpoint"
    )
    runner_cidr_blocks: list[str] = Field(
        default_factory=list, description="with deploy_from_vpc: the runners' address ranges, admitted on 443"
    )
    runner_labels: list[str] = Field(
        default_factory=list,
        description="with deploy_from_vpc (required then): the `runs-on` labels of the self-hosted GitHub Actions "
        "runner inside the VPC that previews, drift checks and deploys this stack, e.g. [self-hosted, kmirror-east]",
    )
    public_access_cidrs: list[str] = Field(default_factory=list)
    kms_key_arn: str | None = Field(None, description="KMS key for secrets envelope encryption (default: created)")
    log_types: list[LogType] = Field(default_factory=lambda: list(get_args(LogType)))
    protect: bool = Field(True, description="Pulumi protect + EKS deletion protection on the created cluster")
    access: EksAccessConfig = Field(default_factory=lambda: EksAccessConfig(), description="access entries")


class KubeconfigConfig(_Strict):
    """An existing cluster's kubeconfig: a secret config value, or a file plus context."""

    config: str | None = Field(None, description="secret config key holding the kubeconfig")
    file: str | None = Field(None, description="kubeconfig file")
    context: str | None = Field(None, description="context of `file`")


class PvcConfig(_Strict):
    name: str = PVC_NAME
    size: str = PVC_SIZE
    storage_class: str | None = Field(None, description="a ReadWriteMany class, e.g. EFS's efs-sc")
    access_mode: str = RWX


class MonitoringConfig(_Strict):
    pod_monitor: bool = Field(False, description="a PodMonitor per app (kube-prometheus-stack CRDs)")
    prometheus_rule: bool = Field(False, description="the mirror's PrometheusRule alerts (requires runbook_url)")
    runbook_url: str | None = Field(
        None, description="absolute http(s) URL of the runbook each alert links to (docs/deploy.md's, on your Git host)"
    )
    dashboard: bool = Field(False, description="the Grafana dashboard as a ConfigMap (sidecar-loaded)")
    labels: dict[str, str] = Field(default_factory=dict, description="labels the Prometheus operator selects")
    prometheus: str | None = Field(
        None,
        description="NAMESPACE/NAME of the Prometheus (operator) that scrapes the PodMonitors and evaluates "
        "the rules, with an Alertmanager and kube-state-metrics; required with pod_monitor or prometheus_rule",
    )
    install_crds: bool | None = Field(
        None, description="install the Prometheus operator's CRDs first (default: when the stack creates the cluster)"
    )


class Toleration(_Strict):
    key: str | None = None
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None


class EksSparkConfig(_Common):
    platform: Literal["eks"]
    namespace: str = DEFAULT_NAMESPACE
    image: str = Field(description="the app image built from the Dockerfile, by digest (repo@sha256:...)")
    image_pull_policy: Literal["IfNotPresent", "Always", "Never"] = IMAGE_PULL_POLICY
    spark_version: str = SPARK_VERSION
    service_account: str = SERVICE_ACCOUNT
    irsa_role_arn: str | None = None
    irsa_policy_arns: list[str] = Field(
        default_factory=list, description="policies of the IRSA role a created cluster's stack creates"
    )
    metrics_port: int = Field(DEFAULT_METRICS_PORT, ge=1, le=65535)
    operator: OperatorConfig = Field(default_factory=lambda: OperatorConfig())
    cluster: EksClusterConfig = Field(default_factory=lambda: EksClusterConfig())
    kubeconfig: KubeconfigConfig | None = None
    checkpoint_pvc: PvcConfig | None = None
    monitoring: MonitoringConfig = Field(default_factory=lambda: MonitoringConfig())
    priority_class_name: str | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    read_only_root_filesystem: bool = True
    app_start_timeout_s: PositiveInt = Field(
        600, description="how long `pulumi up` waits for each SparkApplication to be RUNNING (then fails)"
    )


class EmrEncryptionConfig(_Strict):
    certificates_zip: str = Field(description="s3:// zip of the PEM certificates for in-transit encryption")
    kms_key_arn: str = Field(description="KMS key for local disks and EBS (at rest)")


class EmrPrometheusConfig(_Strict):
    security_group_id: str | None = Field(None, description="the Prometheus scrapers' security group")
    cidr_blocks: list[str] = Field(default_factory=list)


class EmrSparkConfig(_Common):
    platform: Literal["emr"]
    bucket: str = Field(description="the S3 bucket of bundle, flow specs and logs")
    create_bucket: bool = True
    bucket_kms_key_arn: str | None = Field(
        None, description="the SSE-KMS key of an existing bucket (create_bucket: false): its users get to use it"
    )
    region: str | None = None
    release_label: str | None = None
    cluster_id: str | None = None
    subnet_id: str | None = None
    vpc_id: str | None = None
    master_instance_type: str | None = None
    core_instance_type: str | None = None
    core_instance_count: PositiveInt | None = None
    primary_node_count: Literal[1, 3] | None = Field(
        None, description="primary nodes of a created cluster: 3 (default, survives losing one) or 1"
    )
    gssapi: bool = False
    step_concurrency_level: PositiveInt | None = None
    protect: bool = Field(True, description="Pulumi protect + EMR termination protection on cluster and bucket")
    encryption: EmrEncryptionConfig | None = None
    prometheus: EmrPrometheusConfig | None = None
    alarms: bool = Field(True, description="CloudWatch alarms on the cluster (docs/deploy.md)")
    alarm_actions: list[str] = Field(default_factory=list, description="SNS topics the alarms notify")
    secret_recovery_window_days: int = Field(7, ge=0, le=30)
    log_retention_days: PositiveInt = 30
    noncurrent_version_days: PositiveInt = 30
    step_stop_timeout_s: int = Field(
        STEP_STOP_TIMEOUT_S, ge=30, description="how long a step replacement waits for the old step"
    )
    step_start_timeout_s: int | None = Field(  # 840: the step function's bound (one Lambda run, step_lambda.py)
        None, ge=1, le=840, description="how long `up` waits for an added step and its YARN app RUNNING (300)"
    )


MODELS: dict[str, type[_Common]] = {"eks": EksSparkConfig, "emr": EmrSparkConfig}
