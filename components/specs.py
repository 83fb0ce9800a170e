"""Pure specs for deployments: names, ConfigMaps, SparkApplications and EMR step args.

No pulumi import: every layout decision is a plain function of the flow spec dict and
platform settings, so it is tested without the engine and shared by all components.
Logical names derive from the flow id only, so a topology edit that does not touch a
flow never renames (and so never replaces) its resources.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

FLOW_MOUNT_DIR = "/etc/kmirror/flow"
FLOW_FILE = "flow.json"
SECRETS_ROOT = "/etc/kmirror/secrets"
APP_ENTRY = "local:///opt/kmirror/spark_app/__main__.py"


def app_name(flow_id: str) -> str:
    """`west-1->east-1` -> `mirror-west-1-to-east-1` (a DNS-1123 label, <= 63 chars).

    Raises ValueError when the id cannot become a valid label.
    """
    name = "mirror-" + re.sub(r"[^a-z0-9-]+", "-", flow_id.lower().replace("->", "-to-")).strip("-")
    if len(name) > 63 or not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name):
        raise ValueError(f"flow id {flow_id!r} gives app name {name!r}, not a DNS-1123 label of <= 63 chars")
    return name


@dataclass(frozen=True)
class SecretMount:
    """A Kubernetes Secret mounted on driver and executors at `SECRETS_ROOT/<secret_name>`."""

    secret_name: str
    mount_path: str = ""

    @property
    def path(self) -> str:
        return self.mount_path or f"{SECRETS_ROOT}/{self.secret_name}"


@dataclass(frozen=True)
class EksSettings:
    namespace: str = "kafka-mirror"
    image: str = "ghcr.io/example/kafka-mirror:latest"
    service_account: str = "kafka-mirror"
    spark_version: str = "4.0.1"
    checkpoint_root: str = "s3a://kafka-mirror/checkpoints"
    secrets: tuple[SecretMount, ...] = field(default_factory=tuple)
    retry_interval_s: int = 10


def flow_config_map(flow_spec: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The ConfigMap holding `flow.json` (keys sorted, so unchanged specs render identically)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{app_name(flow_spec['id'])}-flow", "namespace": namespace},
        "data": {FLOW_FILE: json.dumps(flow_spec, sort_keys=True, indent=2)},
    }


def _resources(spark: dict[str, Any], role: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "cores": int(spark.get(f"{role}_cores", 1)),
        "memory": str(spark.get(f"{role}_memory", "1g")),
    }
    return out


def _pod(spark: dict[str, Any], role: str, settings: EksSettings, metrics_port: int | None) -> dict[str, Any]:
    pod = _resources(spark, role)
    pod["labels"] = {"app.kubernetes.io/name": "kafka-mirror", "app.kubernetes.io/component": role}
    pod["volumeMounts"] = [{"name": "flow", "mountPath": FLOW_MOUNT_DIR, "readOnly": True}] + [
        {"name": f"secret-{m.secret_name}", "mountPath": m.path, "readOnly": True} for m in settings.secrets
    ]
    if role == "driver":
        pod["serviceAccount"] = settings.service_account
        if metrics_port is not None:
            pod["ports"] = [{"name": "metrics", "containerPort": metrics_port, "protocol": "TCP"}]
    else:
        pod["instances"] = int(spark.get("executors", 1))
    return pod


def spark_application_manifest(
    flow_spec: dict[str, Any], spark: dict[str, Any], settings: EksSettings
) -> dict[str, Any]:
    """A `sparkoperator.k8s.io/v1beta2` SparkApplication running one flow in cluster mode.

    The flow spec is read from the ConfigMap of `flow_config_map`; secrets are mounted on
    driver and executors; the checkpoint lives under `settings.checkpoint_root/<app name>`.
    """
    name = app_name(flow_spec["id"])
    metrics_port = flow_spec.get("metrics_port")
    volumes = [{"name": "flow", "configMap": {"name": f"{name}-flow"}}] + [
        {"name": f"secret-{m.secret_name}", "secret": {"secretName": m.secret_name}} for m in settings.secrets
    ]
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": name, "namespace": settings.namespace},
        "spec": {
            "type": "Python",
            "pythonVersion": "3",
            "mode": "cluster",
            "image": settings.image,
            "sparkVersion": settings.spark_version,
            "mainApplicationFile": APP_ENTRY,
            "arguments": [
                "--flow",
                f"{FLOW_MOUNT_DIR}/{FLOW_FILE}",
                "--checkpoint",
                f"{settings.checkpoint_root}/{name}",
            ],
            "sparkConf": {str(k): str(v) for k, v in sorted(dict(spark.get("options", {})).items())},
            "restartPolicy": {
                "type": "Always",
                "onFailureRetryInterval": settings.retry_interval_s,
                "onSubmissionFailureRetryInterval": settings.retry_interval_s,
            },
            "volumes": volumes,
            "driver": _pod(spark, "driver", settings, metrics_port),
            "executor": _pod(spark, "executor", settings, metrics_port),
        },
    }


def emr_step_args(flow_spec_s3_uri: str, bundle_s3_uri: str, checkpoint_uri: str) -> list[str]:
    """`command-runner.jar` args for a streaming spark-submit step of one flow on EMR."""
    return [
        "spark-submit",
        "--deploy-mode",
        "cluster",
        "--py-files",
        bundle_s3_uri,
        "--files",
        flow_spec_s3_uri,
        "s3://" + bundle_s3_uri.removeprefix("s3://").rsplit("/", 1)[0] + "/__main__.py",
        "--flow",
        FLOW_FILE,
        "--checkpoint",
        checkpoint_uri,
    ]
