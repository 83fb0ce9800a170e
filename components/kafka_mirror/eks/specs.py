"""Pure specs of the EKS apps' objects: ConfigMaps, SparkApplications (hardened pods), metrics
Services, driver PodDisruptionBudgets.

No pulumi import: every layout decision is a plain function of the flow spec dict and
platform settings, so it is tested without the engine and shared by all components.
Logical names derive from the flow id only, so a topology edit that does not touch a
flow never renames (and so never replaces) its resources.
The settings and names live in `kafka_mirror.eks.settings`, the platform's own objects (namespace,
NetworkPolicy, RBAC, operator values) in `kafka_mirror.eks.platform_specs`; both are re-exported
here, so their old import path keeps working.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kafka_mirror.eks.platform_specs import (
    DIGEST_PATTERN,
    OPERATOR_IMAGE,
    POD_SECURITY_LABELS,
    POD_SECURITY_LEVEL,
    driver_role_binding_manifest,
    driver_role_manifest,
    namespace_manifest,
    network_policy_manifest,
    operator_image_values,
    operator_values,
    service_account_manifest,
)
from kafka_mirror.eks.settings import (
    DEFAULT_MONITORING_NAMESPACE,
    PART_OF,
    SPARK_PORT_CONF,
    EksSettings,
    app_name,
    flow_json,
    flow_sha256,
    spark_ports,
    with_metrics_port,
)
from kmirror.security.secret_refs import SECRETS_ROOT
from kmirror.stack.deploy_layout import CHECKPOINT_MOUNT, FLOW_ANNOTATION, FLOW_FILE, FLOW_MOUNT_DIR, FLOW_VOLUME

__all__ = [  # this module's names and those of settings.py and platform_specs.py it re-exports
    "APP_ENTRY",
    "APP_HOME",
    "APP_RUNNING_CONDITION",
    "DEFAULT_MONITORING_NAMESPACE",
    "DIGEST_PATTERN",
    "DRIVER_DISRUPTION_ANNOTATIONS",
    "FLOW_SHA_ANNOTATION",
    "HARDENED_SPARK_CONF",
    "IMAGE_ANNOTATION",
    "OPERATOR_IMAGE",
    "PART_OF",
    "POD_SECURITY_LABELS",
    "POD_SECURITY_LEVEL",
    "SECRET_FILE_MODE",
    "SPARK_GID",
    "SPARK_PORT_CONF",
    "SPARK_RPC_SECURITY_CONF",
    "SPARK_UID",
    "TIMEOUT_ANNOTATION",
    "WAIT_FOR_ANNOTATION",
    "WRITABLE_DIRS",
    "EksSettings",
    "SecretMount",
    "app_name",
    "app_wait_annotations",
    "application_manifest",
    "container_security_context",
    "driver_disruption_budget",
    "driver_role_binding_manifest",
    "driver_role_manifest",
    "flow_config_map",
    "flow_json",
    "flow_sha256",
    "metrics_endpoint",
    "metrics_port_name",
    "metrics_service",
    "namespace_manifest",
    "network_policy_manifest",
    "operator_image_values",
    "operator_values",
    "pod_security_context",
    "service_account_manifest",
    "spark_application_manifest",
    "spark_ports",
    "with_metrics_port",
]

APP_HOME = "/opt/kmirror"
# The entry script sits beside (not inside) the packages: running a file from inside `spark_app/`
# would put that directory first on sys.path, and `kmirror_engine/copying/range_copy.py` would shadow stdlib `copy`.
APP_ENTRY = f"local://{APP_HOME}/kmirror_main.py"
FLOW_SHA_ANNOTATION = "kafka-mirror/flow-sha256"
SPARK_UID = 185  # the `spark` user of the official Spark images (the Dockerfile's USER 185)
SPARK_GID = 185  # its group
IMAGE_ANNOTATION = "kafka-mirror/image"
# Secret files: kubelet makes them root-owned with group fsGroup (185); 0440 lets the `spark`
# group read them and nobody else (0400 would leave them readable by root only, not by the app).
SECRET_FILE_MODE = 0o440
# Writable directories under a read-only root file system: Python's and the app's temporary
# files (krb5.conf, ticket caches) and Spark's working directory in the official images.
WRITABLE_DIRS = {"tmp": "/tmp", "spark-work-dir": "/opt/spark/work-dir"}  # an emptyDir, not a host path
# Drivers must not be moved by consolidation: a restart costs a checkpoint replay.
DRIVER_DISRUPTION_ANNOTATIONS = {
    "karpenter.sh/do-not-disrupt": "true",
    "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
}
# Driver<->executor RPC authenticated and encrypted. On Kubernetes Spark generates a secret per
# application when `spark.authenticate` is on (SPARK-26194: the driver creates it, executors get
# it in an environment variable), so no secret is configured here; apps cannot talk to each other.
SPARK_RPC_SECURITY_CONF = {"spark.authenticate": "true", "spark.network.crypto.enabled": "true"}
HARDENED_SPARK_CONF = {**SPARK_PORT_CONF, **SPARK_RPC_SECURITY_CONF}


@dataclass(frozen=True)
class SecretMount:
    """A Kubernetes Secret mounted on driver and executors at `SECRETS_ROOT/<secret_name>`
    (where `kmirror.security.secret_refs.ref_location` says the app reads it)."""

    secret_name: str

    @property
    def path(self) -> str:
        return f"{SECRETS_ROOT}/{self.secret_name}"

    @property
    def volume(self) -> str:
        return f"secret-{self.secret_name}"[:63].rstrip("-")


def _labels(name: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "kafka-mirror",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": component,
        **PART_OF,
    }


def flow_config_map(flow_spec: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The ConfigMap `<app>-flow` holding `flow.json`, mounted at FLOW_MOUNT_DIR."""
    name = app_name(flow_spec["id"])
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{name}-flow",
            "namespace": namespace,
            "labels": _labels(name, "flow-spec"),
            "annotations": {FLOW_ANNOTATION: flow_spec["id"]},
        },
        "data": {FLOW_FILE: flow_json(flow_spec)},
    }


def _pod(
    spark: dict[str, Any],
    role: str,
    name: str,
    settings: EksSettings,
    mounts: tuple[SecretMount, ...],
    metrics_ports: tuple[int, ...],
    sha: str,
) -> dict[str, Any]:
    annotations = {FLOW_SHA_ANNOTATION: sha, IMAGE_ANNOTATION: settings.image}
    if role == "driver":
        annotations.update(DRIVER_DISRUPTION_ANNOTATIONS)
    pod: dict[str, Any] = {
        "cores": int(spark.get(f"{role}_cores", 1)),
        "memory": str(spark.get(f"{role}_memory", "1g")),
        "labels": _labels(name, role),
        # A new flow spec or image changes the pod template, so the operator resubmits the app with it.
        "annotations": annotations,
        "serviceAccount": settings.service_account,
        "env": [{"name": "PYTHONPATH", "value": APP_HOME}, {"name": "PYTHONUNBUFFERED", "value": "1"}],
        "volumeMounts": [{"name": FLOW_VOLUME, "mountPath": FLOW_MOUNT_DIR, "readOnly": True}]
        + [{"name": m.volume, "mountPath": m.path, "readOnly": True} for m in mounts],
        "podSecurityContext": pod_security_context(),
        "securityContext": container_security_context(settings.read_only_root_filesystem),
    }
    if settings.read_only_root_filesystem:
        pod["volumeMounts"] += [{"name": volume, "mountPath": path} for volume, path in WRITABLE_DIRS.items()]
    if settings.checkpoint_claim:
        pod["volumeMounts"].append({"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT})
    if settings.priority_class_name:
        pod["priorityClassName"] = settings.priority_class_name
    if settings.node_selector:
        pod["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        pod["tolerations"] = [{k: v for k, v in t.items() if v is not None} for t in settings.tolerations]
    if role == "driver":
        pod["ports"] = [
            {"name": metrics_port_name(i), "containerPort": port, "protocol": "TCP"}
            for i, port in enumerate(metrics_ports)
        ]
        # /metrics binds the pod IP (scraped through the Service), not every interface (issue 26).
        pod["env"].append({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    else:
        pod["instances"] = int(spark.get("executors", 1))
    return pod


def pod_security_context() -> dict[str, Any]:
    """Every driver and executor pod: the image's `spark` user, never root, the runtime's
    default seccomp profile; fsGroup makes mounted secrets and a checkpoint claim the group's."""
    return {
        "runAsNonRoot": True,
        "runAsUser": SPARK_UID,
        "runAsGroup": SPARK_GID,
        "fsGroup": SPARK_GID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context(read_only_root: bool) -> dict[str, Any]:
    """The Spark container: no privilege escalation, no capabilities, read-only root unless turned off."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": read_only_root,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


# The Kubernetes provider (pulumi-kubernetes >= 4.18) awaits a custom resource until this JSONPath
# condition holds, failing the update after `pulumi.com/timeoutSeconds`.
WAIT_FOR_ANNOTATION = "pulumi.com/waitFor"
TIMEOUT_ANNOTATION = "pulumi.com/timeoutSeconds"
APP_RUNNING_CONDITION = "jsonpath={.status.applicationState.state}=RUNNING"


def app_wait_annotations(settings: EksSettings) -> dict[str, str]:
    """What makes `pulumi up` wait until the operator reports the app RUNNING (a green `up` means the
    flow's driver started), and fail naming the app after `app_start_timeout_s` otherwise."""
    return {WAIT_FOR_ANNOTATION: APP_RUNNING_CONDITION, TIMEOUT_ANNOTATION: str(settings.app_start_timeout_s)}


def spark_application_manifest(
    flow_spec: dict[str, Any], spark: dict[str, Any], settings: EksSettings, mounts: tuple[SecretMount, ...] = ()
) -> dict[str, Any]:
    """A `sparkoperator.k8s.io/v1beta2` SparkApplication running one flow in cluster mode, forever.

    The flow spec (with its `checkpoint_location`) is read from the ConfigMap of
    `flow_config_map`; `mounts` are mounted on driver and executors (both create Kafka
    clients); the driver exposes the Prometheus port of the flow spec (`metrics_port`).
    `spark` is the flow's planned Spark resources over `settings.spark_defaults`.
    """
    name = app_name(flow_spec["id"])
    return application_manifest(
        name,
        {FLOW_ANNOTATION: flow_spec["id"]},
        ["--flow", f"{FLOW_MOUNT_DIR}/{FLOW_FILE}"],
        {"name": FLOW_VOLUME, "configMap": {"name": f"{name}-flow", "defaultMode": 0o444}},
        (int(flow_spec.get("metrics_port") or settings.metrics_port),),
        flow_sha256(flow_spec),
        {**settings.spark_defaults, **spark},
        settings,
        mounts,
        str(flow_spec["id"]),
    )


def metrics_port_name(index: int) -> str:
    """The driver's container port serving the `index`-th flow's metrics: `metrics`, `metrics-2`, ..."""
    return "metrics" if index == 0 else f"metrics-{index + 1}"


def application_manifest(
    name: str,
    annotations: dict[str, str],
    arguments: list[str],
    flow_volume: dict[str, Any],
    metrics_ports: tuple[int, ...],
    sha: str,
    spark: dict[str, Any],
    settings: EksSettings,
    mounts: tuple[SecretMount, ...],
    owner: str,
) -> dict[str, Any]:
    """The SparkApplication `name` running the flow files `arguments` name (mounted from `flow_volume`
    at FLOW_MOUNT_DIR); `spark`: the app's resources; `owner` names the flow(s) in errors."""
    options = {str(k): str(v) for k, v in dict(spark.get("options") or {}).items()}
    _refuse_port_overrides(owner, options, settings)
    conf = {**HARDENED_SPARK_CONF, **settings.spark_conf, **options}
    volumes = [flow_volume] + [
        {"name": m.volume, "secret": {"secretName": m.secret_name, "defaultMode": SECRET_FILE_MODE}} for m in mounts
    ]
    if settings.read_only_root_filesystem:
        volumes += [{"name": volume, "emptyDir": {}} for volume in WRITABLE_DIRS]
    if settings.checkpoint_claim:
        volumes.append({"name": "checkpoints", "persistentVolumeClaim": {"claimName": settings.checkpoint_claim}})
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {
            "name": name,
            "namespace": settings.namespace,
            "labels": _labels(name, "mirror"),
            "annotations": {**annotations, **app_wait_annotations(settings)},
        },
        "spec": {
            "type": "Python",
            "pythonVersion": "3",
            "mode": "cluster",
            "image": settings.image,
            "imagePullPolicy": settings.image_pull_policy,
            "sparkVersion": settings.spark_version,
            "mainApplicationFile": APP_ENTRY,
            "arguments": arguments,
            "sparkConf": {str(k): str(v) for k, v in sorted(conf.items())},
            # A mirror is a streaming job: a stopped one silently stops replicating.
            "restartPolicy": {
                "type": "Always",
                "onFailureRetryInterval": settings.retry_interval_s,
                "onSubmissionFailureRetryInterval": settings.retry_interval_s,
            },
            "volumes": volumes,
            "driver": _pod(spark, "driver", name, settings, mounts, metrics_ports, sha),
            "executor": _pod(spark, "executor", name, settings, mounts, metrics_ports, sha),
        },
    }


def _refuse_port_overrides(flow_id: str, options: dict[str, str], settings: EksSettings) -> None:
    """A flow's own Spark options may not move the RPC ports: the namespace's NetworkPolicy opens
    the platform's ports only, so executors would never reach a driver on another one.

    Raises ValueError naming the flow, the key, its value and the fix."""
    platform = {**SPARK_PORT_CONF, **settings.spark_conf}
    for key in sorted(SPARK_PORT_CONF):
        if key in options and options[key] != platform[key]:
            raise ValueError(
                f"flow {flow_id}: spark option {key}={options[key]!r} differs from the platform's {platform[key]!r}, "
                "which the NetworkPolicy opens; drop it from the flow or set it in the platform's spark_conf"
            )


def metrics_service(flow_spec: dict[str, Any], settings: EksSettings) -> dict[str, Any]:
    """A ClusterIP Service `<app>-metrics` in front of the driver's Prometheus port."""
    name = app_name(flow_spec["id"])
    port = int(flow_spec.get("metrics_port") or settings.metrics_port)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": f"{name}-metrics",
            "namespace": settings.namespace,
            "labels": _labels(name, "metrics"),
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(port),
                "prometheus.io/path": "/metrics",
                FLOW_ANNOTATION: flow_spec["id"],
                # Pulumi would wait for the Service's endpoints, i.e. for the driver pod the operator
                # starts only after the SparkApplication is created: `up` blocked up to 10 min (and
                # failed) whenever the app had not started yet. Found by a real `pulumi up` (issue 40).
                "pulumi.com/skipAwait": "true",
            },
        },
        "spec": {
            "type": "ClusterIP",
            # Labels the operator puts on the driver pod it creates for this SparkApplication.
            "selector": {"sparkoperator.k8s.io/app-name": name, "spark-role": "driver"},
            "ports": [{"name": "metrics", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }


def driver_disruption_budget(flow_spec: dict[str, Any], settings: EksSettings) -> dict[str, Any]:
    """The flow's driver PodDisruptionBudget: `maxUnavailable: 1`, so a node drain (managed
    node-group upgrade, Karpenter, `kubectl drain`) always may evict the driver.

    Why not `maxUnavailable: 0`: a budget that can never be satisfied blocks every drain of the
    driver's node forever (EKS gives up a node-group upgrade after 15 minutes). The driver comes
    back through the operator instead: the SparkApplication's `restartPolicy` is `Always` with
    `onFailureRetryInterval` (the operator waits interval x attempts: a linear backoff), and the
    stream resumes from its checkpoint. The budget stays (one per app, evicting at most its one
    driver at a time) so the resource keeps its name across this change."""
    name = app_name(flow_spec["id"])
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": f"{name}-driver", "namespace": settings.namespace, "labels": _labels(name, "driver")},
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": {"sparkoperator.k8s.io/app-name": name, "spark-role": "driver"}},
        },
    }


def metrics_endpoint(flow_spec: dict[str, Any], settings: EksSettings) -> str:
    """Where Prometheus scrapes the flow's driver (through `metrics_service`)."""
    port = int(flow_spec.get("metrics_port") or settings.metrics_port)
    return f"http://{app_name(flow_spec['id'])}-metrics.{settings.namespace}.svc.cluster.local:{port}/metrics"
