"""A Spark application on Kubernetes: MirrorDeployment's `eks` side (one flow), and the one builder
of an app's Kubernetes resources that the per-target app (`TargetMirrorDeployment`) uses too.

- `deploy_flow_app`: the flow's spec ConfigMap, a SparkApplication (cluster mode, restartPolicy
  Always, secrets mounted on driver and executors, hardened pods), a metrics Service in front of
  the driver, a PodDisruptionBudget keeping the driver, and optionally a PodMonitor; through a
  provider of its own when a kubeconfig is given.
- `flow_config_map`, `app_resources`: those resources from manifests rendered inside one output
  (pure layouts: `kafka_mirror.eks.specs`, `kafka_mirror.app_sets`), so every input may be an
  output; which resources exist depends only on plain arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pulumi
import pulumi_kubernetes as k8s

from kafka_mirror.eks.monitoring import pod_monitor
from kafka_mirror.eks.specs import (
    EksSettings,
    SecretMount,
    driver_disruption_budget,
    flow_config_map,
    metrics_endpoint,
    metrics_service,
    spark_application_manifest,
    with_metrics_port,
)
from kafka_mirror.rendered import child_options, output_at

Made = TypeVar("Made", bound=pulumi.Resource)


@dataclass(frozen=True)
class AppResources:
    """The Kubernetes resources of one Spark application (`app_resources`)."""

    application: k8s.apiextensions.CustomResource
    service: k8s.core.v1.Service
    disruption_budget: k8s.policy.v1.PodDisruptionBudget
    pod_monitor: k8s.apiextensions.CustomResource | None = None
    metrics_policy: k8s.networking.v1.NetworkPolicy | None = None


@dataclass(frozen=True)
class FlowApp:
    """What `deploy_flow_app` made: the flow's ConfigMap, its app's resources, where its driver is scraped."""

    config_map: k8s.core.v1.ConfigMap
    resources: AppResources
    endpoint: pulumi.Output[Any]


def flow_spec_config_map(
    name: str, out: pulumi.Output[Any], path: Sequence[str], opts: pulumi.ResourceOptions
) -> k8s.core.v1.ConfigMap:
    """The ConfigMap `<name>-flow` holding a flow spec: the rendered `flow_config_map` at `path` of `out`."""
    return k8s.core.v1.ConfigMap(
        f"{name}-flow", metadata=output_at(out, *path, "metadata"), data=output_at(out, *path, "data"), opts=opts
    )


def app_resources(
    name: str,
    out: pulumi.Output[Any],
    opts: pulumi.ResourceOptions,
    config_maps: Sequence[pulumi.Resource],
    *,
    pod_monitor: bool,
    metrics_policy: bool = False,
) -> AppResources:
    """The SparkApplication `<name>-app` (created after the flows' `config_maps`), its metrics Service
    `<name>-metrics`, with `metrics_policy` a NetworkPolicy `<name>-metrics-ingress`, the driver PDB
    `<name>-driver-pdb` and with `pod_monitor` a PodMonitor `<name>-pod-monitor`, from the manifests
    rendered in `out` (keys `app`, `service`, `metrics_policy`, `pdb`, `pod_monitor`)."""
    application = _made(
        k8s.apiextensions.CustomResource,
        f"{name}-app",
        out,
        "app",
        pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=list(config_maps))),
        api_version="sparkoperator.k8s.io/v1beta2",
        kind="SparkApplication",
    )
    service = _made(k8s.core.v1.Service, f"{name}-metrics", out, "service", opts)
    policy = None
    if metrics_policy:
        policy = _made(k8s.networking.v1.NetworkPolicy, f"{name}-metrics-ingress", out, "metrics_policy", opts)
    # The driver is the app: voluntary evictions (drains, consolidation) must not take it.
    budget = _made(k8s.policy.v1.PodDisruptionBudget, f"{name}-driver-pdb", out, "pdb", opts)
    monitor = None
    if pod_monitor:
        monitor = _made(
            k8s.apiextensions.CustomResource,
            f"{name}-pod-monitor",
            out,
            "pod_monitor",
            opts,
            api_version="monitoring.coreos.com/v1",
            kind="PodMonitor",
        )
    return AppResources(application, service, budget, monitor, policy)


def _made(
    make: Callable[..., Made], name: str, out: pulumi.Output[Any], key: str, opts: pulumi.ResourceOptions, **extra: Any
) -> Made:
    """A resource `name` of class `make` whose metadata and spec are the rendered manifest `out[key]`."""
    metadata, spec = output_at(out, key, "metadata"), output_at(out, key, "spec")
    return make(name, metadata=metadata, spec=spec, opts=opts, **extra)


def render_flow_app(values: list[Any]) -> dict[str, Any]:
    """The manifests of one flow's app: `values` is (deployment target, flow spec, spark, secret names)."""
    target, spec, spark_resources, secret_names = values
    settings = EksSettings(**target["settings"])
    spec = with_metrics_port(spec, settings.metrics_port)
    mounts = tuple(SecretMount(n) for n in secret_names)
    return {
        "config_map": flow_config_map(spec, settings.namespace),
        "app": spark_application_manifest(spec, spark_resources, settings, mounts),
        "service": metrics_service(spec, settings),
        "pdb": driver_disruption_budget(spec, settings),
        "pod_monitor": pod_monitor(spec, settings),
        "endpoint": metrics_endpoint(spec, settings),
    }


def deploy_flow_app(
    parent: pulumi.Resource,
    name: str,
    args: Mapping[str, Any],
    spec: pulumi.Output[Any],
    spark: pulumi.Output[Any],
    secret_names: pulumi.Output[Any],
    depends_on: Sequence[pulumi.Resource],
) -> FlowApp:
    """The flow's ConfigMap, SparkApplication, metrics Service, driver PDB (and PodMonitor) as children
    of `parent` (MirrorDeployment `name`, whose `args` give `eks`, `pod_monitor` and `kubeconfig`)."""
    out = pulumi.Output.all(args["eks"], spec, spark, secret_names).apply(render_flow_app)
    if "kubeconfig" in args:
        provider = k8s.Provider(
            f"{name}-k8s", kubeconfig=args["kubeconfig"], opts=pulumi.ResourceOptions(parent=parent)
        )
        opts = pulumi.ResourceOptions.merge(
            child_options(parent, [*depends_on, provider]), pulumi.ResourceOptions(provider=provider)
        )
    else:
        opts = child_options(parent, depends_on)
    config_map = flow_spec_config_map(name, out, ("config_map",), opts)
    resources = app_resources(name, out, opts, [config_map], pod_monitor=bool(args.get("pod_monitor")))
    return FlowApp(config_map, resources, out.apply(lambda r: r["endpoint"]))
