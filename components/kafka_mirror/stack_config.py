"""The stack's `kafka-mirror:*` configuration, validated in one pass (no pulumi import).

    kafka-mirror:datacenter: east                   # required: flows whose run_in is this are deployed
    kafka-mirror:topology: stacks/topology.yaml     # default
    kafka-mirror:spark: {platform: eks | emr, ...}  # EksSparkConfig / EmrSparkConfig below
    kafka-mirror:secrets: {NAME: {type: scram | kerberos | tls | generic, ...}}   # SECRET_TYPES below

`spark` is checked by a pydantic model per platform (`extra="forbid"`, strict types: `nodes:
"3"` is refused, never coerced into a number AWS would then see), then by the rules that span
several keys (`_eks_rules`, `_emr_rules`). A secret's NAME is the Kubernetes Secret's name /
the directory the app reads, i.e. what the topology references as `{k8s_secret: NAME, key: ...}`.

Every problem is collected and raised once as a `kmirror.errors.ValidationError` whose paths
name the config key (`kafka-mirror:spark.cluster.nodes`), with "did you mean" for typos.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from kafka_mirror.eks_specs import CHECKPOINT_MOUNT, DEFAULT_METRICS_PORT, DEFAULT_NAMESPACE
from kmirror.errors import Problem, Problems, did_you_mean
from kmirror.stack_config import DEFAULT_TOPOLOGY, NAMESPACE

NS = NAMESPACE
PLATFORMS = ("eks", "emr")
# An image reference pinned by content: `repo@sha256:<64 hex>` or `repo:tag@sha256:<64 hex>`.
DIGEST_RE = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")
LogType = Literal["api", "audit", "authenticator", "controllerManager", "scheduler"]  # EKS control-plane logs
RWX = "ReadWriteMany"


class _Strict(BaseModel):
    """Unknown keys are errors and values keep their YAML type (no "3" -> 3)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _Common(_Strict):
    checkpoint_root: str | None = Field(None, description="durable directory of the flows' checkpoints")
    executors: int | None = Field(None, ge=1, description="default executors per flow")
    driver_memory: str | None = Field(None, description="default driver memory")
    executor_memory: str | None = Field(None, description="default executor memory")
    driver_cores: int | None = Field(None, ge=1, description="default driver cores")
    executor_cores: int | None = Field(None, ge=1, description="default executor cores")
    spark_conf: dict[str, str] = Field(default_factory=dict, description="Spark confs added to every app")


class OperatorConfig(_Strict):
    install: bool = Field(True, description="install the Kubeflow Spark Operator chart")
    namespace: str = Field("spark-operator", description="the operator's namespace")
    repository: str = Field("https://kubeflow.github.io/spark-operator", description="the chart repository")
    replicas: int = Field(2, ge=1, description="controller and webhook replicas (2+: highly available)")


class EksClusterConfig(_Strict):
    create: bool = Field(False, description="create the EKS cluster (pulumi-eks)")
    name: str | None = None
    version: str = "1.33"
    subnet_ids: list[str] = Field(default_factory=list, description="private subnets of the cluster and nodes")
    vpc_id: str | None = Field(None, description="the VPC of subnet_ids")
    instance_type: str = "m7i.xlarge"
    nodes: int = Field(3, ge=1)
    endpoint_public_access: bool = Field(False, description="expose the API endpoint publicly (default private)")
    public_access_cidrs: list[str] = Field(default_factory=list)
    kms_key_arn: str | None = Field(None, description="KMS key for secrets envelope encryption (default: created)")
    log_types: list[LogType] = Field(default_factory=lambda: list(get_args(LogType)))


class KubeconfigConfig(_Strict):
    """An existing cluster's kubeconfig: a secret config value, or a file plus context."""

    config: str | None = Field(None, description="secret config key holding the kubeconfig")
    file: str | None = Field(None, description="kubeconfig file")
    context: str | None = Field(None, description="context of `file`")


class PvcConfig(_Strict):
    name: str = "kmirror-checkpoints"
    size: str = "10Gi"
    storage_class: str | None = Field(None, description="a ReadWriteMany class, e.g. EFS's efs-sc")
    access_mode: str = RWX


class MonitoringConfig(_Strict):
    pod_monitor: bool = Field(False, description="a PodMonitor per app (kube-prometheus-stack CRDs)")
    prometheus_rule: bool = Field(False, description="the mirror's PrometheusRule alerts")
    dashboard: bool = Field(False, description="the Grafana dashboard as a ConfigMap (sidecar-loaded)")
    labels: dict[str, str] = Field(default_factory=dict, description="labels the Prometheus operator selects")


class Toleration(_Strict):
    key: str | None = None
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None


class EksSparkConfig(_Common):
    platform: Literal["eks"]
    namespace: str = DEFAULT_NAMESPACE
    image: str = Field(description="the app image built from the Dockerfile, by digest (repo@sha256:...)")
    image_pull_policy: Literal["IfNotPresent", "Always", "Never"] = "IfNotPresent"
    spark_version: str = "4.0.2"
    service_account: str = "kafka-mirror"
    irsa_role_arn: str | None = None
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
    region: str | None = None
    release_label: str | None = None
    cluster_id: str | None = None
    subnet_id: str | None = None
    vpc_id: str | None = None
    master_instance_type: str | None = None
    core_instance_type: str | None = None
    core_instance_count: int | None = Field(None, ge=1)
    gssapi: bool = False
    step_concurrency_level: int | None = Field(None, ge=1)
    protect: bool = Field(True, description="Pulumi protect + EMR termination protection on cluster and bucket")
    encryption: EmrEncryptionConfig | None = None
    prometheus: EmrPrometheusConfig | None = None
    secret_recovery_window_days: int = Field(7, ge=0, le=30)
    log_retention_days: int = Field(30, ge=1)
    noncurrent_version_days: int = Field(30, ge=1)
    step_stop_timeout_s: int = Field(600, ge=30, description="how long a step replacement waits for the old step")


MODELS: dict[str, type[_Common]] = {"eks": EksSparkConfig, "emr": EmrSparkConfig}
SECRET_TYPES = {
    "scram": ({"username", "password"}, {"username", "password"}),
    "kerberos": ({"principal", "keytab_b64"}, {"principal", "keytab_b64", "krb5_conf", "realm", "kdcs"}),
    "tls": ({"ca_pem"}, {"ca_pem", "cert_pem", "key_pem", "key_password", "pkcs12_b64", "pkcs12_password"}),
    # Any key names: {KEY: {config: CONFIG_KEY, base64: true|false} | {value: "not secret"}}
    "generic": ({"keys"}, {"keys"}),
}
# Fields that must come from Pulumi secret config (`{config: KEY}`), never inline.
SECRET_FIELDS = {"password", "keytab_b64", "key_pem", "key_password", "pkcs12_b64", "pkcs12_password"}
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class SecretConfig:
    """One secret component to create; values are `{config: KEY}` references or plain strings."""

    name: str
    type: str
    fields: dict[str, Any]


@dataclass(frozen=True)
class StackConfig:
    datacenter: str
    topology: str
    platform: str
    spark: dict[str, Any]  # the keys the stack set, validated (nested settings as dicts)
    secrets: tuple[SecretConfig, ...] = field(default_factory=tuple)
    model: Any = None  # the EksSparkConfig / EmrSparkConfig, defaults filled in

    def get(self, key: str, default: Any = None) -> Any:
        return self.spark.get(key, default)


def _model_at(model: Any, loc: tuple[Any, ...]) -> Any:
    """The pydantic model class found by following `loc` (field names, list indexes) from `model`."""
    for part in loc:
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or part not in model.model_fields:
            continue  # an index or a union branch: stay on the nearest model
        annotation = model.model_fields[part].annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        for arg in list(candidates):
            candidates += list(getattr(arg, "__args__", ()))
        model = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), model)
    return model


def _message(error: Any, root: type[BaseModel]) -> str:
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    if kind == "extra_forbidden":
        allowed = list(_model_at(root, tuple(error["loc"][:-1])).model_fields)
        return f"unknown key{did_you_mean(str(error['loc'][-1]), allowed)}; allowed: {', '.join(sorted(allowed))}"
    if kind == "missing":
        owner, key = _model_at(root, tuple(error["loc"][:-1])), error["loc"][-1]
        described = owner.model_fields[key].description if key in owner.model_fields else None
        return f"required: {described or 'this key is missing'}"
    if kind in ("greater_than_equal", "less_than_equal"):
        bounds = f">= {ctx['ge']}" if "ge" in ctx else f"<= {ctx['le']}"
        return f"must be an integer {bounds}, got {value!r}"
    if kind in ("int_type", "bool_type", "string_type", "list_type", "dict_type", "model_type"):
        wanted = {"int": "an integer", "bool": "true or false", "string": "a string", "list": "a list",
                  "dict": "a mapping", "model": "a mapping"}[kind.split("_")[0]]  # fmt: skip
        return f"must be {wanted}, got {value!r}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}, got {value!r}"
    return f"{error['msg']}, got {value!r}"


def _model_problems(spark: Mapping[str, Any], path: str) -> tuple[Any, list[Problem]]:
    model = MODELS[str(spark["platform"])]
    try:
        return model.model_validate(dict(spark)), []
    except pydantic.ValidationError as exc:
        problems = [
            Problem(".".join([path, *[str(p) for p in e["loc"]]]), _message(e, model))
            for e in exc.errors(include_url=False)
        ]
        return None, problems


def _eks_rules(spark: Mapping[str, Any], path: str) -> list[Problem]:
    """Rules across keys of an EKS stack (run on the raw mapping, so they are reported next to
    type errors)."""
    problems = []
    image, pull = spark.get("image"), spark.get("image_pull_policy")
    if isinstance(image, str) and image and not DIGEST_RE.match(image) and pull != "Never":
        # A tag can be moved under a running app: the next executor would run other code.
        problems.append(
            Problem(
                f"{path}.image",
                f"{image!r} is not pinned by digest; use REPO[:TAG]@sha256:<digest> "
                "(CI feeds the pushed image's digest; image_pull_policy: Never for local images)",
            )
        )
    root, pvc = spark.get("checkpoint_root"), spark.get("checkpoint_pvc")
    if root is None and pvc is None:
        problems.append(Problem(f"{path}.checkpoint_root",
                                "required (e.g. s3a://BUCKET/checkpoints) unless checkpoint_pvc is set"))  # fmt: skip
    elif isinstance(root, str) and root.startswith("/") and not root.startswith(CHECKPOINT_MOUNT):
        # A path inside the pod is lost with the pod: the mirror would restart from starting_offsets.
        problems.append(Problem(f"{path}.checkpoint_root", f"{root!r} is not durable on Kubernetes; use "
                                f"s3a://BUCKET/PREFIX or checkpoint_pvc (mounted at {CHECKPOINT_MOUNT})"))  # fmt: skip
    if isinstance(pvc, dict):
        mode = pvc.get("access_mode", RWX)
        if mode != RWX:
            problems.append(Problem(f"{path}.checkpoint_pvc.access_mode", f"{mode!r} refused: the driver and every "
                                    "executor of every flow mount the claim, on different nodes; a ReadWriteOnce "
                                    "volume (EBS) attaches to one node and the other pods fail with Multi-Attach "
                                    "errors. Use ReadWriteMany with an RWX class (EFS: efs-sc) or checkpoint_root: "
                                    "s3a://BUCKET/PREFIX"))  # fmt: skip
        if not pvc.get("storage_class"):
            problems.append(Problem(f"{path}.checkpoint_pvc.storage_class", "required: a ReadWriteMany storage "
                                    "class (the cluster's default class is usually ReadWriteOnce EBS)"))  # fmt: skip
    cluster: dict[str, Any] = spark["cluster"] if isinstance(spark.get("cluster"), dict) else {}
    if cluster.get("create"):
        for key in ("subnet_ids", "vpc_id"):
            if not cluster.get(key):
                problems.append(Problem(f"{path}.cluster.{key}", "required when cluster.create is true"))
        if "kubeconfig" in spark:
            problems.append(Problem(f"{path}.kubeconfig", "a created cluster brings its own kubeconfig; remove this"))
        if cluster.get("public_access_cidrs") and not cluster.get("endpoint_public_access"):
            problems.append(Problem(f"{path}.cluster.public_access_cidrs", "needs endpoint_public_access: true"))
    else:
        kube = spark.get("kubeconfig")
        if not isinstance(kube, dict) or not (kube.get("config") or kube.get("file")):
            problems.append(Problem(f"{path}.kubeconfig", "required for an existing cluster: {config: SECRET_KEY} "
                                    "(pulumi config set --secret SECRET_KEY \"$(cat kubeconfig)\") or {file: PATH, "
                                    "context: NAME}; the ambient kubeconfig is never used"))  # fmt: skip
        elif kube.get("config") and kube.get("file"):
            problems.append(Problem(f"{path}.kubeconfig", "give either config or file, not both"))
    return problems


def _emr_rules(spark: Mapping[str, Any], path: str) -> list[Problem]:
    problems = []
    if "cluster_id" not in spark:
        if not spark.get("release_label"):
            problems.append(Problem(f"{path}.release_label", "required when no cluster_id is given (Spark 4.0+)"))
        if "encryption" not in spark:
            problems.append(
                Problem(
                    f"{path}.encryption",
                    "required for a created cluster: {certificates_zip: "
                    "s3://BUCKET/KEY.zip, kms_key_arn: ARN} (encryption in transit and at rest)",
                )
            )
        if "prometheus" in spark and not spark.get("vpc_id"):
            problems.append(Problem(f"{path}.vpc_id", "required with prometheus: the metrics security group's VPC"))
    window = spark.get("secret_recovery_window_days")
    if isinstance(window, int) and 0 < window < 7:
        problems.append(Problem(f"{path}.secret_recovery_window_days",
                                f"must be 0 (delete at once) or 7-30, got {window}"))  # fmt: skip
    prom = spark.get("prometheus")
    if isinstance(prom, dict) and not (prom.get("security_group_id") or prom.get("cidr_blocks")):
        problems.append(Problem(f"{path}.prometheus",
                                "give security_group_id or cidr_blocks of the Prometheus scrapers"))  # fmt: skip
    return problems


def _spark_problems(spark: Mapping[str, Any], path: str) -> tuple[Any, list[Problem]]:
    platform = spark.get("platform")
    if platform not in PLATFORMS:
        return None, [Problem(f"{path}.platform", f"must be one of {', '.join(PLATFORMS)}, got {platform!r}")]
    model, problems = _model_problems(spark, path)
    root = spark.get("checkpoint_root")
    if isinstance(root, str) and "://" not in root and not root.startswith("/"):
        problems.append(Problem(f"{path}.checkpoint_root", f"must be a URI or absolute path, got {root!r}"))
    problems += _eks_rules(spark, path) if platform == "eks" else _emr_rules(spark, path)
    return model, problems


def _secret_problems(name: str, raw: Any, path: str) -> list[Problem]:
    if not _NAME_RE.fullmatch(name):
        return [Problem(path, f"secret name must be a short lowercase DNS label, got {name!r}")]
    if not isinstance(raw, dict) or raw.get("type") not in SECRET_TYPES:
        return [Problem(f"{path}.type", f"must be one of {', '.join(SECRET_TYPES)}, got {raw!r}")]
    required, allowed = SECRET_TYPES[raw["type"]]
    fields = {k: v for k, v in raw.items() if k != "type"}
    problems = [
        Problem(f"{path}.{k}", f"unknown key{did_you_mean(str(k), allowed)}; allowed: {', '.join(sorted(allowed))}")
        for k in sorted(set(fields) - set(allowed), key=str)
    ]
    problems += [Problem(f"{path}.{k}", "required key is missing") for k in sorted(required - set(fields))]
    if raw["type"] == "generic":
        return problems + _generic_problems(fields.get("keys"), f"{path}.keys")
    for key, value in fields.items():
        is_ref = isinstance(value, dict) and set(value) == {"config"} and isinstance(value["config"], str)
        if key in SECRET_FIELDS and not is_ref:
            problems.append(
                Problem(
                    f"{path}.{key}",
                    "must be {config: KEY} naming a secret config value "
                    "(pulumi config set --secret KEY ...), never inline",
                )
            )
    return problems


def _generic_problems(keys: Any, path: str) -> list[Problem]:
    if not isinstance(keys, dict) or not keys:
        return [Problem(path, f"must map file names to {{config: KEY}} or {{value: TEXT}}, got {keys!r}")]
    problems = []
    for key, value in keys.items():
        if not isinstance(key, str) or not re.fullmatch(r"[-._a-zA-Z0-9]+", key):
            problems.append(Problem(f"{path}.{key}", "must be a secret key name ([-._a-zA-Z0-9]+)"))
        elif not isinstance(value, dict) or not (
            (
                set(value) <= {"config", "base64"}
                and isinstance(value.get("config"), str)
                and isinstance(value.get("base64", False), bool)
            )
            or (set(value) == {"value"} and isinstance(value["value"], str))
        ):
            problems.append(
                Problem(
                    f"{path}.{key}",
                    "must be {config: KEY} (optionally base64: true for binary "
                    "files) or {value: TEXT} for a non-secret value",
                )
            )
    return problems


def parse_stack_config(raw: Mapping[str, Any], stack: str = "") -> StackConfig:
    """Validate `raw` (config key without namespace -> value, YAML/JSON decoded); raise every problem."""
    problems = Problems(f"stack {stack}" if stack else "stack config")
    datacenter = raw.get("datacenter")
    if not isinstance(datacenter, str) or not datacenter:
        problems.add(f"{NS}:datacenter", f"required: the datacenter this stack deploys, got {datacenter!r}")
    topology = raw.get("topology", DEFAULT_TOPOLOGY)
    if not isinstance(topology, str) or not topology:
        problems.add(f"{NS}:topology", f"must be a file path, got {topology!r}")
    spark = raw.get("spark")
    model = None
    if not isinstance(spark, dict):
        problems.add(f"{NS}:spark", f"required mapping with platform: eks|emr, got {spark!r}")
        spark = {}
    else:
        model, found = _spark_problems(spark, f"{NS}:spark")
        problems.extend(found)
    secrets_raw = raw.get("secrets") or {}
    if not isinstance(secrets_raw, dict):
        problems.add(f"{NS}:secrets", f"must be a mapping of secret name to settings, got {secrets_raw!r}")
        secrets_raw = {}
    for name, value in secrets_raw.items():
        problems.extend(_secret_problems(str(name), value, f"{NS}:secrets.{name}"))
    problems.raise_if_any()
    secrets = tuple(
        SecretConfig(str(n), v["type"], {k: x for k, x in v.items() if k != "type"})
        for n, v in sorted(secrets_raw.items())
    )
    validated = model.model_dump(exclude_unset=True) if model is not None else {}
    return StackConfig(str(datacenter), str(topology), str(spark["platform"]), validated, secrets, model)
