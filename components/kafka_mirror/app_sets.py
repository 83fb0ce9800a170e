"""One Spark application per target cluster (`kafka-mirror:spark.apps_per: target`): the pure layout.

With `apps_per: flow` (the default) every flow is its own app (`MirrorDeployment`). With `target`
the flows of one target cluster share one app (`TargetMirrorDeployment`), which runs them as
`python -m spark_app --flow A --flow B ...` (spark_app/several_flows.py: one streaming query per
flow, each with its own checkpoint, a failing one restarted alone). Here: the app's name, its
Spark resources, the flow files its arguments name, and its Kubernetes objects / EMR step args.
No pulumi import (see `kafka_mirror.eks.specs`).

Names derive from the target cluster's alias only (`mirror-to-<alias>`), so adding or removing a
flow of that target changes that one app and nothing of another target's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kafka_mirror.eks.monitoring import driver_pod_monitor
from kafka_mirror.eks.specs import (
    PART_OF,
    EksSettings,
    SecretMount,
    app_name,
    application_manifest,
    driver_disruption_budget,
    flow_json,
    metrics_port_name,
)
from kmirror.stack.deploy_layout import FLOW_FILE, FLOW_MOUNT_DIR, FLOW_VOLUME, FLOWS_ANNOTATION

APPS_PER = ("flow", "target")
_MEMORY_UNITS = {"k": 1, "m": 1024, "g": 1024**2, "t": 1024**3}  # in KiB


def app_key(target: str) -> str:
    """The id-like key an app set's names derive from: `app_name(app_key(t))` is `mirror-to-<t>`."""
    return f"to-{target}"


def target_app_name(target: str) -> str:
    """`east-2` -> `mirror-to-east-2`, the app of every flow whose target is cluster `east-2`."""
    return app_name(app_key(target))


def flow_file(flow_id: str) -> str:
    """A flow's file name beside the others of its app: `mirror-west-1-to-east-1.json`."""
    return f"{app_name(flow_id)}.json"


def flows_by_target(flows: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """(flow id, target alias) pairs -> target alias -> its flow ids, both sorted."""
    groups: dict[str, list[str]] = {}
    for flow_id, target in flows:
        groups.setdefault(target, []).append(flow_id)
    return {target: sorted(ids) for target, ids in sorted(groups.items())}


def _kib(size: str) -> int:
    return int(size[:-1]) * _MEMORY_UNITS[size[-1].lower()]


def app_spark(sparks: Mapping[str, Mapping[str, Any]], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The Spark resources of one app running every flow of `sparks` (flow id -> its planned `spark`,
    over the platform's `defaults`):
    - `executors`: the sum of the flows' (default 1 each): the app gets the executors the flows
      would have had as apps of their own, and their queries' tasks share them;
    - `executor_cores`, `executor_memory`, `driver_cores`, `driver_memory`: the largest of the
      flows' (one executor shape per app: no flow's tasks get less than it was planned with;
      one driver replaces N, its per-query state is small);
    - `options`: the union; two flows setting one conf to different values is refused.
    Raises ValueError naming the key, the flows and their values, and the fix."""
    merged = {flow_id: {**defaults, **spark} for flow_id, spark in sorted(sparks.items())}
    out: dict[str, Any] = {"executors": sum(int(s.get("executors", 1)) for s in merged.values())}
    for key in ("executor_cores", "driver_cores"):
        values = [int(s[key]) for s in merged.values() if s.get(key) is not None]
        if values:
            out[key] = max(values)
    for key in ("executor_memory", "driver_memory"):
        sizes = [str(s[key]) for s in merged.values() if s.get(key) is not None]
        if sizes:
            out[key] = max(sizes, key=_kib)
    options: dict[str, str] = {}
    owners: dict[str, str] = {}
    for flow_id, spark in merged.items():
        for conf, value in dict(spark.get("options") or {}).items():
            if conf in options and options[conf] != str(value):
                raise ValueError(
                    f"spark.options.{conf}: flows {owners[conf]} ({options[conf]!r}) and {flow_id} ({str(value)!r}) "
                    "share one application (apps_per: target) but set it differently; give them the same value, "
                    "or run one application per flow (apps_per: flow)"
                )
            options[conf], owners[conf] = str(value), flow_id
    if options:
        out["options"] = options
    return out


def with_set_metrics_ports(specs: Sequence[dict[str, Any]], base_port: int) -> list[dict[str, Any]]:
    """The specs (sorted by id) with distinct `metrics_port`s: a flow's own, else `base_port` + its
    index among the app's flows (one driver serves one registry per flow, each on its own port)."""
    ordered = sorted(specs, key=lambda s: str(s["id"]))
    ported = [
        dict(s) if s.get("metrics_port") is not None else {**s, "metrics_port": base_port + i}
        for i, s in enumerate(ordered)
    ]
    seen: dict[int, str] = {}
    for spec in ported:
        port, flow_id = int(spec["metrics_port"]), str(spec["id"])
        if port in seen:  # the app would refuse to start (spark_app.several_flows.check_flow_set)
            raise ValueError(
                f"flows.{flow_id}.metrics_port: port {port} is also {seen[port]}'s in their one application "
                f"(apps_per: target; flows without their own port get {base_port} + their index): "
                "set a port outside that range in the topology's flows section, or remove it"
            )
        seen[port] = flow_id
    return ported


def set_sha256(specs: Sequence[dict[str, Any]]) -> str:
    """A digest of every flow spec of the app: any flow's change changes the pods' template."""
    digest = hashlib.sha256()
    for spec in sorted(specs, key=lambda s: str(s["id"])):
        digest.update(flow_json(spec).encode())
    return digest.hexdigest()


def eks_app_set(
    target: str,
    specs: Sequence[dict[str, Any]],
    spark: dict[str, Any],
    settings: EksSettings,
    mounts: tuple[SecretMount, ...] = (),
) -> dict[str, Any]:
    """The SparkApplication, metrics Service, driver PDB, PodMonitor and metrics endpoints of the app
    running `specs` (each with its `metrics_port`; sorted by id) on target cluster `target`.

    Each flow's ConfigMap is its own (`flow_config_map`, as with `apps_per: flow`); one projected
    volume mounts them all at FLOW_MOUNT_DIR as `<flow app>.json`, one `--flow` argument each."""
    name = target_app_name(target)
    specs = sorted(specs, key=lambda s: str(s["id"]))
    ids = [str(s["id"]) for s in specs]
    ports = tuple(int(s["metrics_port"]) for s in specs)
    volume = {
        "name": FLOW_VOLUME,
        "projected": {
            "defaultMode": 0o444,
            "sources": [
                {"configMap": {"name": f"{app_name(i)}-flow", "items": [{"key": FLOW_FILE, "path": flow_file(i)}]}}
                for i in ids
            ],
        },
    }
    arguments = [arg for i in ids for arg in ("--flow", f"{FLOW_MOUNT_DIR}/{flow_file(i)}")]
    annotations = {FLOWS_ANNOTATION: ",".join(ids)}
    sha = set_sha256(specs)
    app = application_manifest(
        name, annotations, arguments, volume, ports, sha, spark, settings, mounts, ", ".join(ids)
    )
    selector = {"sparkoperator.k8s.io/app-name": name, "spark-role": "driver"}
    labels = {"app.kubernetes.io/name": "kafka-mirror", "app.kubernetes.io/instance": name, **PART_OF}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": f"{name}-metrics",
            "namespace": settings.namespace,
            "labels": {**labels, "app.kubernetes.io/component": "metrics"},
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(ports[0]),
                "prometheus.io/path": "/metrics",
                FLOWS_ANNOTATION: ",".join(ids),
                "pulumi.com/skipAwait": "true",  # as `metrics_service`: the driver starts after the app
            },
        },
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [
                {"name": metrics_port_name(k), "port": p, "targetPort": p, "protocol": "TCP"}
                for k, p in enumerate(ports)
            ],
        },
    }
    pod_monitor = driver_pod_monitor(name, [metrics_port_name(k) for k in range(len(ports))], settings)
    host = f"{name}-metrics.{settings.namespace}.svc.cluster.local"
    return {
        "metrics_policy": metrics_policy(name, ports, settings),
        "app": app,
        "service": service,
        "pdb": driver_disruption_budget({"id": app_key(target)}, settings),
        "pod_monitor": pod_monitor,
        "endpoint": {i: f"http://{host}:{p}/metrics" for i, p in zip(ids, ports, strict=True)},
    }


def metrics_policy(name: str, ports: tuple[int, ...], settings: EksSettings) -> dict[str, Any]:
    """A NetworkPolicy letting Prometheus reach the app's driver on every flow's metrics port: the
    platform's policy (`network_policy_manifest`) opens the platform's one port, and policies add up.
    Without the platform's policy (`network_policy: false`) it admits everything, as no policy would
    (a policy selecting the driver would otherwise shut out its executors)."""
    ingress: list[dict[str, Any]] = [{}]
    if settings.network_policy:
        monitoring = {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": settings.monitoring_namespace}}
        }
        ingress = [{"from": [monitoring], "ports": [{"protocol": "TCP", "port": p} for p in ports]}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"{name}-metrics", "namespace": settings.namespace, "labels": dict(PART_OF)},
        "spec": {
            "podSelector": {"matchLabels": {"sparkoperator.k8s.io/app-name": name, "spark-role": "driver"}},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }
