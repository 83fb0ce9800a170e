"""MirrorDeployment: one flow running on one platform.

- EKS: the flow spec ConfigMap, a SparkApplication (cluster mode, restartPolicy Always, secrets
  mounted on driver and executors) and a metrics Service in front of the driver.
- EMR: the flow spec as a content-addressed S3 object and a streaming step managed by the
  `EmrStepProvider` dynamic provider (a changed flow replaces its step, never the cluster).
Every child is named `<name>-...` where `name` derives from the flow id only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.eks_spark_platform import EksSparkPlatform
from components.emr_spark_platform import EmrSparkPlatform
from components.emr_specs import emr_metrics_port, emr_step_args, flow_object_key
from components.emr_step_provider import EmrStep
from components.specs import (
    SecretMount,
    app_name,
    flow_config_map,
    flow_json,
    metrics_endpoint,
    metrics_service,
    spark_application_manifest,
    with_metrics_port,
)

TOKEN = "kafka-mirror:index:MirrorDeployment"


@dataclass
class MirrorDeploymentArgs:
    flow_spec: dict[str, Any]  # `kmirror.planner.flow_spec_for(...)`: references, never secret values
    spark: dict[str, Any]  # the flow's planned Spark resources (PlannedFlow.spark)
    platform: EksSparkPlatform | EmrSparkPlatform
    secret_names: tuple[str, ...] = ()  # directories under /etc/kmirror/secrets the flow reads
    depends_on: list[pulumi.Resource] = field(default_factory=list)  # e.g. the Secrets it mounts


class MirrorDeployment(pulumi.ComponentResource):
    """Outputs: `flow_id`, `app_name`, `platform`, `metrics_endpoint` (and `step_id` on EMR)."""

    def __init__(self, name: str, args: MirrorDeploymentArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TOKEN, name, {}, opts)
        flow_id = str(args.flow_spec["id"])
        self.flow_id = flow_id
        self.app_name = app_name(flow_id)
        platform = args.platform
        outputs: dict[str, Any] = {"flow_id": flow_id, "app_name": self.app_name, "platform": platform.platform}
        if isinstance(platform, EksSparkPlatform):
            self.metrics_endpoint: pulumi.Output[Any] = pulumi.Output.from_input(self._eks(name, args, platform))
        else:
            self.metrics_endpoint = self._emr(name, args, platform)
            outputs["step_id"] = self.step.step_id
        outputs["metrics_endpoint"] = self.metrics_endpoint
        self.register_outputs(outputs)

    def _eks(self, name: str, args: MirrorDeploymentArgs, platform: EksSparkPlatform) -> str:
        settings = platform.settings
        spec = with_metrics_port(args.flow_spec, settings.metrics_port)
        mounts = tuple(SecretMount(n) for n in args.secret_names)
        config_map = flow_config_map(spec, settings.namespace)
        app = spark_application_manifest(spec, args.spark, settings, mounts)
        service = metrics_service(spec, settings)
        ready = [*platform.ready, *args.depends_on]
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-flow",
            metadata=config_map["metadata"],
            data=config_map["data"],
            opts=platform.child_opts(self, ready),
        )
        self.application = k8s.apiextensions.CustomResource(
            f"{name}-app",
            api_version=app["apiVersion"],
            kind=app["kind"],
            metadata=app["metadata"],
            spec=app["spec"],
            opts=platform.child_opts(self, [*ready, self.config_map]),
        )
        self.service = k8s.core.v1.Service(
            f"{name}-metrics", metadata=service["metadata"], spec=service["spec"], opts=platform.child_opts(self, ready)
        )
        return metrics_endpoint(spec, settings)

    def _emr(self, name: str, args: MirrorDeploymentArgs, platform: EmrSparkPlatform) -> pulumi.Output[Any]:
        settings = platform.settings
        spec = with_metrics_port(args.flow_spec, emr_metrics_port(self.flow_id, settings))
        key = flow_object_key(spec)
        ready = [*platform.ready, *args.depends_on]
        self.flow_object = aws.s3.BucketObjectv2(
            f"{name}-flow",
            bucket=settings.bucket,
            key=key,
            content=flow_json(spec),
            content_type="application/json",
            opts=pulumi.ResourceOptions(parent=self, depends_on=ready),
        )
        step_args = emr_step_args(
            self.flow_id, settings.uri(key), platform.bundle_uri, platform.entry_uri, args.spark, settings
        )
        self.step = EmrStep(
            f"{name}-step",
            platform.cluster_id,
            self.app_name,
            step_args,
            settings.region,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*ready, self.flow_object]),
        )
        port = int(spec["metrics_port"])
        # Cluster mode: YARN picks the driver's node, so the endpoint is the YARN application and a
        # port fixed per flow; Prometheus finds the node via EC2 service discovery on that port.
        return pulumi.Output.all(platform.cluster_id, self.step.step_id).apply(
            lambda v: {
                "cluster_id": v[0],
                "step_id": v[1],
                "yarn_application": self.app_name,
                "port": port,
                "path": "/metrics",
            }
        )
