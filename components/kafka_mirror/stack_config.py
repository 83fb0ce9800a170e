"""The stack's `kafka-mirror:*` configuration, validated in one pass (no pulumi import).

    kafka-mirror:datacenter: east                   # required: flows whose run_in is this are deployed
    kafka-mirror:topology: stacks/topology.yaml     # default
    kafka-mirror:spark: {platform: eks | emr, ...}  # EKS_KEYS / EMR_KEYS below
    kafka-mirror:secrets: {NAME: {type: scram | kerberos | tls | generic, ...}}   # SECRET_TYPES below

A secret's NAME is the Kubernetes Secret / Secrets Manager secret name, i.e. what the topology
references as `{k8s_secret: NAME, key: ...}`.

Every problem is collected and raised once as a `kmirror.errors.ValidationError` whose paths
name the config key (`kafka-mirror:spark.executors`), with "did you mean" for typos.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka_mirror.specs import CHECKPOINT_MOUNT
from kmirror.errors import Problem, Problems, did_you_mean
from kmirror.stack_config import DEFAULT_TOPOLOGY, NAMESPACE

NS = NAMESPACE
PLATFORMS = ("eks", "emr")
COMMON_KEYS = {
    "platform": "eks or emr",
    "checkpoint_root": "durable directory under which each flow checkpoints (s3a:// on EKS, s3:// on EMR)",
    "executors": "default executors per flow (a flow's own `spark` section wins)",
    "driver_memory": "default driver memory",
    "executor_memory": "default executor memory",
    "driver_cores": "default driver cores",
    "executor_cores": "default executor cores",
    "spark_conf": "Spark confs added to every app (string -> string)",
}
EKS_KEYS = {
    **COMMON_KEYS,
    "namespace": "namespace of the apps (created)",
    "image": "the app image (Dockerfile)",
    "image_pull_policy": "IfNotPresent | Always | Never",
    "spark_version": "Spark version of the image",
    "service_account": "service account of driver and executors (created)",
    "irsa_role_arn": "IAM role for the service account (IRSA), e.g. for S3 checkpoints",
    "metrics_port": "driver Prometheus port when a flow sets none (default 9404)",
    "operator": "{install: true, namespace, chart_version, repository}: the Kubeflow Spark Operator",
    "cluster": "{create: true, name, version, subnet_ids, instance_type, nodes}: create the EKS cluster",
    "checkpoint_pvc": "{name, size, storage_class}: a PersistentVolumeClaim mounted at /var/lib/kmirror/checkpoints",
}
EMR_KEYS = {
    **COMMON_KEYS,
    "bucket": "S3 bucket of bundle, flow specs, logs and (by default) checkpoints",
    "create_bucket": "create the bucket (default true)",
    "region": "AWS region (default: aws:region)",
    "release_label": "EMR release with Spark 4.0+",
    "cluster_id": "use this existing cluster instead of creating one",
    "subnet_id": "subnet of the created cluster",
    "master_instance_type": "primary node type",
    "core_instance_type": "core node type",
    "core_instance_count": "core nodes",
    "gssapi": "build a GSSAPI-capable confluent-kafka on the nodes (Kerberos clusters)",
    "step_concurrency_level": "concurrent steps (default: number of flows, at least 1)",
}
OPERATOR_KEYS = {"install", "namespace", "chart_version", "repository"}
CLUSTER_KEYS = {"create", "name", "version", "subnet_ids", "instance_type", "nodes"}
PVC_KEYS = {"name", "size", "storage_class"}
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
    spark: dict[str, Any]
    secrets: tuple[SecretConfig, ...] = field(default_factory=tuple)

    def get(self, key: str, default: Any = None) -> Any:
        return self.spark.get(key, default)


def _unknown(raw: Mapping[str, Any], allowed: Any, path: str) -> list[Problem]:
    return [
        Problem(f"{path}.{k}", f"unknown key{did_you_mean(str(k), allowed)}; allowed: {', '.join(sorted(allowed))}")
        for k in sorted(set(raw) - set(allowed), key=str)
    ]


def _positive_ints(raw: Mapping[str, Any], keys: tuple[str, ...], path: str) -> list[Problem]:
    return [
        Problem(f"{path}.{k}", f"must be an integer >= 1, got {raw[k]!r}")
        for k in keys
        if k in raw and (isinstance(raw[k], bool) or not isinstance(raw[k], int) or raw[k] < 1)
    ]


INT_KEYS = ("executors", "driver_cores", "executor_cores", "metrics_port", "core_instance_count",
            "step_concurrency_level")  # fmt: skip


def _eks_problems(spark: Mapping[str, Any], path: str) -> list[Problem]:
    problems = []
    if not isinstance(spark.get("image"), str) or not spark.get("image"):
        problems.append(Problem(f"{path}.image", "required: the app image built from the Dockerfile"))
    root = spark.get("checkpoint_root")
    if root is None and "checkpoint_pvc" not in spark:
        problems.append(Problem(f"{path}.checkpoint_root",
                                "required (e.g. s3a://BUCKET/checkpoints) unless checkpoint_pvc is set"))  # fmt: skip
    elif isinstance(root, str) and root.startswith("/") and not root.startswith(CHECKPOINT_MOUNT):
        # A path inside the pod is lost with the pod: the mirror would restart from starting_offsets.
        problems.append(Problem(f"{path}.checkpoint_root", f"{root!r} is not durable on Kubernetes; use "
                                f"s3a://BUCKET/PREFIX or checkpoint_pvc (mounted at {CHECKPOINT_MOUNT})"))  # fmt: skip
    for key, keys in (("operator", OPERATOR_KEYS), ("cluster", CLUSTER_KEYS), ("checkpoint_pvc", PVC_KEYS)):
        sub = spark.get(key)
        if isinstance(sub, dict):
            problems += _unknown(sub, keys, f"{path}.{key}")
        elif key in spark:
            problems.append(Problem(f"{path}.{key}", f"must be a mapping of {', '.join(sorted(keys))}, got {sub!r}"))
    cluster = spark.get("cluster") or {}
    if isinstance(cluster, dict) and cluster.get("create") and not cluster.get("subnet_ids"):
        problems.append(Problem(f"{path}.cluster.subnet_ids", "required when cluster.create is true"))
    return problems


def _emr_problems(spark: Mapping[str, Any], path: str) -> list[Problem]:
    problems = []
    if not isinstance(spark.get("bucket"), str) or not spark.get("bucket"):
        problems.append(Problem(f"{path}.bucket", "required: the S3 bucket of bundle, flow specs and logs"))
    if "cluster_id" not in spark and not spark.get("release_label"):
        problems.append(Problem(f"{path}.release_label", "required when no cluster_id is given (Spark 4.0+)"))
    return problems


def _spark_problems(spark: Mapping[str, Any], path: str) -> list[Problem]:
    platform = spark.get("platform")
    if platform not in PLATFORMS:
        return [Problem(f"{path}.platform", f"must be one of {', '.join(PLATFORMS)}, got {platform!r}")]
    problems = _unknown(spark, EKS_KEYS if platform == "eks" else EMR_KEYS, path)
    problems += _positive_ints(spark, INT_KEYS, path)
    if "spark_conf" in spark and not isinstance(spark["spark_conf"], dict):
        problems.append(Problem(f"{path}.spark_conf", f"must be a mapping of Spark confs, got {spark['spark_conf']!r}"))
    root = spark.get("checkpoint_root")
    if root is not None and (not isinstance(root, str) or ("://" not in root and not root.startswith("/"))):
        problems.append(Problem(f"{path}.checkpoint_root", f"must be a URI or absolute path, got {root!r}"))
    return problems + (_eks_problems(spark, path) if platform == "eks" else _emr_problems(spark, path))


def _secret_problems(name: str, raw: Any, path: str) -> list[Problem]:
    if not _NAME_RE.fullmatch(name):
        return [Problem(path, f"secret name must be a short lowercase DNS label, got {name!r}")]
    if not isinstance(raw, dict) or raw.get("type") not in SECRET_TYPES:
        return [Problem(f"{path}.type", f"must be one of {', '.join(SECRET_TYPES)}, got {raw!r}")]
    required, allowed = SECRET_TYPES[raw["type"]]
    fields = {k: v for k, v in raw.items() if k != "type"}
    problems = _unknown(fields, allowed, path)
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
    if not isinstance(spark, dict):
        problems.add(f"{NS}:spark", f"required mapping with platform: eks|emr, got {spark!r}")
        spark = {}
    else:
        problems.extend(_spark_problems(spark, f"{NS}:spark"))
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
    return StackConfig(str(datacenter), str(topology), str(spark["platform"]), dict(spark), secrets)
