"""The EKS platform's settings (`EksSettings`) and what every Kubernetes object of the mirror
derives from: apps' names (from the flow id only), the flow spec's JSON, the `part-of` label and
the Spark ports the platform's NetworkPolicy opens. No pulumi import.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from kmirror.stack.deploy_layout import DEFAULT_METRICS_PORT, DEFAULT_NAMESPACE
from kmirror.stack.models import IMAGE_PULL_POLICY, SERVICE_ACCOUNT, SPARK_VERSION

DEFAULT_MONITORING_NAMESPACE = "monitoring"
PART_OF = {"app.kubernetes.io/part-of": "kafka-mirror"}
# Spark's RPC and block-manager ports, fixed (executors' block manager is random by default) so
# the NetworkPolicy can open exactly them; 7078/7079 are Spark's own Kubernetes defaults for the driver.
SPARK_PORT_CONF = {
    "spark.driver.port": "7078",
    "spark.driver.blockManager.port": "7079",
    "spark.blockManager.port": "7079",
}


def app_name(flow_id: str) -> str:
    """`west-1->east-1` -> `mirror-west-1-to-east-1` (a DNS-1123 label, <= 63 chars).

    Raises ValueError when the id cannot become a valid label.
    """
    name = "mirror-" + re.sub(r"[^a-z0-9-]+", "-", flow_id.lower().replace("->", "-to-")).strip("-")
    if len(name) > 63 or not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name):
        raise ValueError(f"flow id {flow_id!r} gives app name {name!r}, not a DNS-1123 label of <= 63 chars")
    return name


def flow_json(flow_spec: dict[str, Any]) -> str:
    """The flow spec as the app reads it; keys sorted so an unchanged spec renders identically."""
    return json.dumps(flow_spec, sort_keys=True, indent=2)


def flow_sha256(flow_spec: dict[str, Any]) -> str:
    return hashlib.sha256(flow_json(flow_spec).encode()).hexdigest()


def with_metrics_port(flow_spec: dict[str, Any], default_port: int) -> dict[str, Any]:
    """The spec with `metrics_port` set (the flow's own setting wins), so every app is scraped."""
    if flow_spec.get("metrics_port") is not None:
        return dict(flow_spec)
    return {**flow_spec, "metrics_port": default_port}


@dataclass(frozen=True)
class EksSettings:
    """Per-platform settings of the SparkApplications (from the stack's `kafka-mirror:spark`)."""

    namespace: str = DEFAULT_NAMESPACE
    # Pure-spec default only: EksSparkPlatform requires `image` (`required_image`), so no deploy runs it.
    image: str = "kafka-mirror:unset"
    image_pull_policy: str = IMAGE_PULL_POLICY
    service_account: str = SERVICE_ACCOUNT
    spark_version: str = SPARK_VERSION
    retry_interval_s: int = 10
    metrics_port: int = DEFAULT_METRICS_PORT
    spark_conf: dict[str, str] = field(default_factory=dict)
    # Flow-level `spark` keys (executors, memory, ...) a flow does not set itself.
    spark_defaults: dict[str, Any] = field(default_factory=dict)
    checkpoint_claim: str | None = None  # a ReadWriteMany PVC mounted at CHECKPOINT_MOUNT; else s3a://
    priority_class_name: str | None = None
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    read_only_root_filesystem: bool = True
    pod_monitor: bool = False
    monitoring_labels: dict[str, str] = field(default_factory=dict)
    # How long `pulumi up` waits for each SparkApplication to report RUNNING (`app_wait_annotations`).
    app_start_timeout_s: int = 600
    # The platform's NetworkPolicy (`network_policy_manifest`) and the namespace it admits Prometheus from.
    network_policy: bool = True
    monitoring_namespace: str = DEFAULT_MONITORING_NAMESPACE


def spark_ports(settings: EksSettings) -> list[int]:
    """The driver's RPC and the block managers' ports every app of the platform uses (the
    hardened defaults unless the platform's `spark_conf` sets its own): what the NetworkPolicy opens."""
    conf = {**SPARK_PORT_CONF, **settings.spark_conf}
    return sorted({int(conf[key]) for key in SPARK_PORT_CONF})
