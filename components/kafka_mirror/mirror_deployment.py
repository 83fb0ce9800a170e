"""MirrorDeployment: one flow running on one platform.

- EKS: the flow spec ConfigMap, a SparkApplication (cluster mode, restartPolicy Always, secrets
  mounted on driver and executors, hardened pods), a metrics Service in front of the driver, a
  PodDisruptionBudget keeping the driver, and optionally a PodMonitor.
- EMR: the flow spec as a content-addressed S3 object and a streaming step, managed by the
  platform's Lambda function through an `aws.lambda_.Invocation` with the CRUD lifecycle
  (`kafka_mirror.emr.step_lambda`: a changed flow stops its old step, then adds the new one;
  never the cluster). Real resources, so any language's program runs it.
Every child is named `<name>-...`; which children exist depends only on which platform argument
(`eks` or `emr`) is given, so every other input may be an output: manifests render in applies.
The component's own `depends_on` also applies to its children (e.g. the Secrets it mounts).
(No `from __future__ import annotations`: Pulumi's component analyzer reads these annotations.)
"""

import json
from collections.abc import Sequence
from typing import Any, TypedDict, cast

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
from typing_extensions import NotRequired

from kafka_mirror.eks.monitoring import pod_monitor
from kafka_mirror.eks.specs import (
    EksSettings,
    SecretMount,
    app_name,
    driver_disruption_budget,
    flow_config_map,
    flow_json,
    metrics_endpoint,
    metrics_service,
    spark_application_manifest,
    with_metrics_port,
)
from kafka_mirror.emr.specs import EmrSettings, emr_metrics_port, emr_step_args, emr_step_input, flow_object_key
from kafka_mirror.emr.step_drift import step_triggers
from kafka_mirror.input_types import EksDeploymentTarget, EmrDeploymentTarget, FlowSpark
from kafka_mirror.msk_iam_policy import attach_msk_iam_policy
from kmirror.errors import Problem, ValidationError

TOKEN = "kafka-mirror:index:MirrorDeployment"
PLATFORMS = ("eks", "emr")


class MirrorDeploymentArgs(TypedDict):
    """Arguments of MirrorDeployment: a flow (from ReplicationTopology) and exactly one platform target."""

    flow_spec: pulumi.Input[dict[str, Any]]
    """The flow spec the app runs: `ReplicationTopology.flow_specs[<flow id>]` (references, never secret values); a map:
    its keys are the app's flow-spec contract (docs/spark-app.md), produced by the planner, never written by hand."""
    spark: NotRequired[pulumi.Input[FlowSpark]]
    """The flow's Spark resources (executors, executor_memory, ...): `ReplicationTopology.flow_spark[<flow id>]`."""
    eks: NotRequired[pulumi.Input[EksDeploymentTarget]]
    """Run on Kubernetes: `EksSparkPlatform.deployment_target` (`deploymentTarget`), passed as it is."""
    emr: NotRequired[pulumi.Input[EmrDeploymentTarget]]
    """Run on EMR: `EmrSparkPlatform.deployment_target` (`deploymentTarget`), passed as it is."""
    secret_names: NotRequired[pulumi.Input[list[str]]]
    """Secrets (directories under /etc/kmirror/secrets) the flow reads: `ReplicationTopology.secret_names[<flow id>]`.
    On EKS they are mounted on driver and executors."""
    pod_monitor: NotRequired[bool]
    """EKS: a PodMonitor (kube-prometheus-stack) scraping the driver."""
    kubeconfig: NotRequired[pulumi.Input[str]]
    """EKS: a kubeconfig of the cluster to deploy to (e.g. `EksSparkPlatform.kubeconfig`); default: the program's
    Kubernetes provider."""


class MirrorDeployment(pulumi.ComponentResource):
    """One replication flow running as a Spark streaming app: a SparkApplication on EKS or a step on EMR."""

    flow_id: pulumi.Output[str]
    """The flow's id (`source->target`)."""
    app_name: pulumi.Output[str]
    """The app's name (`mirror-<source>-to-<target>`)."""
    platform: pulumi.Output[str]
    """`eks` or `emr`."""
    metrics_endpoint: pulumi.Output[Any]
    """Where Prometheus scrapes the driver: a URL on EKS; cluster, step, YARN application and port on EMR."""
    step_id: pulumi.Output[str | None]
    """The live EMR step's id (EMR only)."""

    def __init__(self, name: str, args: MirrorDeploymentArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        given = [p for p in PLATFORMS if cast(dict[str, Any], args).get(p) is not None]
        if len(given) != 1:
            found = " and ".join(given) or "neither"
            raise ValidationError([Problem("args", f"give exactly one of eks, emr; got {found}")], name)
        super().__init__(TOKEN, name, {}, opts)
        self._depends_on: list[pulumi.Resource] = _resources((opts or pulumi.ResourceOptions()).depends_on)
        spec = pulumi.Output.from_input(args["flow_spec"])
        self.flow_id = spec.apply(lambda s: str(s["id"]))
        self.app_name = self.flow_id.apply(app_name)
        self.platform = pulumi.Output.from_input(given[0])
        spark = pulumi.Output.from_input(args.get("spark") or {})
        names = pulumi.Output.from_input(args.get("secret_names") or [])
        outputs: dict[str, Any] = {"flow_id": self.flow_id, "app_name": self.app_name, "platform": self.platform}
        deploy_flow = {"eks": self._deploy_eks_flow, "emr": self._deploy_emr_flow}[given[0]]
        self.metrics_endpoint, platform_outputs = deploy_flow(name, args, spec, spark, names)
        # MSK IAM sides: their grants as an IAM policy on the platform's app role (kafka_mirror.msk_iam_policy)
        attach_msk_iam_policy(self, name, args["flow_spec"], pulumi.Output.from_input(args[given[0]]))  # type: ignore[literal-required]
        outputs.update(platform_outputs)
        outputs["metrics_endpoint"] = self.metrics_endpoint
        self.register_outputs(outputs)

    def _child(self, extra: Sequence[pulumi.Resource] = ()) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, depends_on=[*self._depends_on, *extra])

    def _deploy_eks_flow(
        self,
        name: str,
        args: MirrorDeploymentArgs,
        spec_in: pulumi.Output[Any],
        spark: pulumi.Output[Any],
        names: pulumi.Output[Any],
    ) -> tuple[pulumi.Output[Any], dict[str, Any]]:
        """The flow's ConfigMap, SparkApplication, metrics Service, driver PDB (and PodMonitor); returns the
        metrics endpoint and the outputs only this platform has (none)."""

        def render(v: list[Any]) -> dict[str, Any]:
            target, spec, spark_resources, secret_names = v
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

        out = pulumi.Output.all(args["eks"], spec_in, spark, names).apply(render)
        if "kubeconfig" in args:
            child = pulumi.ResourceOptions(parent=self)
            provider = k8s.Provider(f"{name}-k8s", kubeconfig=args["kubeconfig"], opts=child)
            self._depends_on.append(provider)
            opts = pulumi.ResourceOptions.merge(self._child(), pulumi.ResourceOptions(provider=provider))
        else:
            opts = self._child()

        def part(path: str) -> Any:
            first, second = path.split(".")
            return out.apply(lambda r: r[first][second])

        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-flow", metadata=part("config_map.metadata"), data=part("config_map.data"), opts=opts
        )
        self.application = k8s.apiextensions.CustomResource(
            f"{name}-app",
            api_version="sparkoperator.k8s.io/v1beta2",
            kind="SparkApplication",
            metadata=part("app.metadata"),
            spec=part("app.spec"),
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[self.config_map])),
        )
        self.service = k8s.core.v1.Service(
            f"{name}-metrics", metadata=part("service.metadata"), spec=part("service.spec"), opts=opts
        )
        # The driver is the app: voluntary evictions (drains, consolidation) must not take it.
        self.disruption_budget = k8s.policy.v1.PodDisruptionBudget(
            f"{name}-driver-pdb", metadata=part("pdb.metadata"), spec=part("pdb.spec"), opts=opts
        )
        if args.get("pod_monitor"):
            self.pod_monitor = k8s.apiextensions.CustomResource(
                f"{name}-pod-monitor",
                api_version="monitoring.coreos.com/v1",
                kind="PodMonitor",
                metadata=part("pod_monitor.metadata"),
                spec=part("pod_monitor.spec"),
                opts=opts,
            )
        self.step_id = pulumi.Output.from_input(cast(str | None, None))
        return out.apply(lambda r: r["endpoint"]), {}

    def _deploy_emr_flow(
        self,
        name: str,
        args: MirrorDeploymentArgs,
        spec_in: pulumi.Output[Any],
        spark: pulumi.Output[Any],
        names: pulumi.Output[Any],
    ) -> tuple[pulumi.Output[Any], dict[str, Any]]:
        """The flow's S3 object and streaming step (secrets come from the nodes' sync, so `names` is not
        used here); returns the metrics endpoint and the outputs only this platform has (`step_id`)."""

        def render(v: list[Any]) -> dict[str, Any]:
            target, spec, spark_resources = v
            settings = EmrSettings(**target["settings"])
            if not target.get("step_function"):
                fix = "missing: pass `EmrSparkPlatform.deployment_target` as it is (its Lambda function runs the steps)"
                raise ValidationError([Problem("emr.step_function", fix)], name)
            flow_id = str(spec["id"])
            spec = with_metrics_port(spec, emr_metrics_port(flow_id, settings))
            key = flow_object_key(spec)
            step_args = emr_step_args(
                flow_id, settings.uri(key), target["bundle_uri"], target["entry_uri"], spark_resources, settings
            )
            return dict(
                bucket=settings.bucket,
                key=key,
                content=flow_json(spec),
                cluster_id=target["cluster_id"],
                port=int(spec["metrics_port"]),
                step_function=target["step_function"],
                step_input=emr_step_input(target["cluster_id"], flow_id, step_args, settings),
            )

        out = pulumi.Output.all(args["emr"], spec_in, spark).apply(render)
        self.flow_object = aws.s3.BucketObjectv2(
            f"{name}-flow",
            bucket=out.apply(lambda r: r["bucket"]),
            key=out.apply(lambda r: r["key"]),
            content=out.apply(lambda r: r["content"]),
            content_type="application/json",
            opts=self._child(),
        )
        # Replaced (a new function) only by deleting first: the old step stops before the new one starts.
        self.step = aws.lambda_.Invocation(
            f"{name}-step",
            function_name=out.apply(lambda r: r["step_function"]),
            input=out.apply(lambda r: r["step_input"]),
            lifecycle_scope="CRUD",
            triggers=step_triggers(args["emr"], out.apply(lambda r: r["step_input"])),  # drift: a dead step
            opts=pulumi.ResourceOptions.merge(
                self._child([self.flow_object]), pulumi.ResourceOptions(delete_before_replace=True)
            ),
        )
        self.step_id = self.step.result.apply(lambda r: cast(str | None, json.loads(r).get("step_id") if r else None))
        # Cluster mode: YARN picks the driver's node, so the endpoint is the YARN application and a
        # port fixed per flow; Prometheus finds the node via EC2 service discovery on that port.
        endpoint = pulumi.Output.all(out, self.step_id, self.app_name).apply(
            lambda v: {
                "cluster_id": v[0]["cluster_id"],
                "step_id": v[1],
                "yarn_application": v[2],
                "port": v[0]["port"],
                "path": "/metrics",
            }
        )
        return endpoint, {"step_id": self.step_id}


def _resources(depends_on: Any) -> list[pulumi.Resource]:
    """The component's `depends_on` as a list (a single resource, a list, or nothing)."""
    if depends_on is None:
        return []
    return [depends_on] if isinstance(depends_on, pulumi.Resource) else list(depends_on)
