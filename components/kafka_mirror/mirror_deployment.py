"""MirrorDeployment: one flow running on one platform.

- EKS (`kafka_mirror.eks.flow_app`): the flow spec ConfigMap, a SparkApplication, a metrics
  Service in front of the driver, a PodDisruptionBudget keeping the driver, optionally a PodMonitor.
- EMR (`kafka_mirror.emr.flow_step`): the flow spec as a content-addressed S3 object and a
  streaming step, managed by the platform's Lambda function (a changed flow stops its old step,
  then adds the new one; never the cluster).
Every child is named `<name>-...`; which children exist depends only on which platform argument
(`eks` or `emr`) is given, so every other input may be an output: manifests render in applies.
The component's own `depends_on` also applies to its children (e.g. the Secrets it mounts).
(No `from __future__ import annotations`: Pulumi's component analyzer reads these annotations.)
"""

from typing import Any, TypedDict, cast

import pulumi
from typing_extensions import NotRequired

from kafka_mirror.eks.flow_app import deploy_flow_app
from kafka_mirror.eks.specs import app_name
from kafka_mirror.emr.flow_step import deploy_flow_step
from kafka_mirror.input_types import EksDeploymentTarget, EmrDeploymentTarget, FlowSpark
from kafka_mirror.msk_iam_policy import attach_msk_iam_policy
from kafka_mirror.rendered import as_resources
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
        self._depends_on: list[pulumi.Resource] = as_resources((opts or pulumi.ResourceOptions()).depends_on)
        spec = pulumi.Output.from_input(args["flow_spec"])
        self.flow_id = spec.apply(lambda s: str(s["id"]))
        self.app_name = self.flow_id.apply(app_name)
        self.platform = pulumi.Output.from_input(given[0])
        spark = pulumi.Output.from_input(args.get("spark") or {})
        names = pulumi.Output.from_input(args.get("secret_names") or [])
        outputs: dict[str, Any] = {"flow_id": self.flow_id, "app_name": self.app_name, "platform": self.platform}
        platform_outputs: dict[str, Any] = {}
        if given[0] == "eks":
            app = deploy_flow_app(self, name, cast(dict[str, Any], args), spec, spark, names, self._depends_on)
            self.config_map, self.metrics_endpoint = app.config_map, app.endpoint
            self.application, self.service = app.resources.application, app.resources.service
            self.disruption_budget = app.resources.disruption_budget
            if app.resources.pod_monitor is not None:
                self.pod_monitor = app.resources.pod_monitor
            self.step_id = pulumi.Output.from_input(cast(str | None, None))
        else:
            step, self.metrics_endpoint = deploy_flow_step(
                self, name, args["emr"], spec, spark, self.app_name, self._depends_on
            )
            [self.flow_object], self.step, self.step_id = step.flow_objects, step.step, step.step_id
            platform_outputs["step_id"] = self.step_id
        # MSK IAM sides: their grants as an IAM policy on the platform's app role (kafka_mirror.msk_iam_policy)
        attach_msk_iam_policy(self, name, args["flow_spec"], pulumi.Output.from_input(args[given[0]]))  # type: ignore[literal-required]
        outputs.update(platform_outputs)
        outputs["metrics_endpoint"] = self.metrics_endpoint
        self.register_outputs(outputs)
