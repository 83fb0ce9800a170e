"""TargetMirrorDeployment: every flow of one target cluster in one Spark application
(`kafka-mirror:spark.apps_per: target`; layout in `kafka_mirror.app_sets`).

- EKS: each flow's spec ConfigMap (as MirrorDeployment's), one SparkApplication whose arguments
  name every flow file, one metrics Service (a port per flow) and a NetworkPolicy admitting
  Prometheus to those ports, one driver PDB, optionally one PodMonitor.
- EMR: each flow's spec as its content-addressed S3 object, one streaming step naming them all,
  through the platform's step function (a changed flow set stops the old step, then adds the new).
Python only (the stack program); other languages deploy one MirrorDeployment per flow.
(No `from __future__ import annotations`: Pulumi's component analyzer reads these annotations.)
"""

import json
from typing import Any, cast

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from kafka_mirror.app_sets import (
    app_spark,
    eks_app_set,
    flow_file,
    target_app_name,
    with_set_metrics_ports,
)
from kafka_mirror.eks.specs import EksSettings, SecretMount, app_name, flow_config_map, flow_json, with_metrics_port
from kafka_mirror.emr.specs import EmrSettings, app_step_args, app_step_input, emr_metrics_port, flow_object_key
from kafka_mirror.emr.step_drift import step_triggers
from kafka_mirror.msk_iam_policy import attach_msk_iam_policy
from kmirror.errors import Problem, ValidationError

TOKEN = "kafka-mirror:index:TargetMirrorDeployment"


class TargetMirrorDeployment(pulumi.ComponentResource):
    """The flows of one target cluster running as one Spark streaming app on EKS or EMR."""

    def __init__(
        self,
        target: str,
        flow_specs: dict[str, Any],
        spark: dict[str, dict[str, Any]],
        platform: dict[str, Any],
        secret_names: list[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """`flow_specs`: flow id -> its spec (a map or an output); `spark`: flow id -> its planned Spark
        resources; `platform`: `{"eks": target, "pod_monitor": bool}` or `{"emr": target}` (the
        platform's `deployment_target`); `secret_names`: every secret the flows read."""
        given = [p for p in ("eks", "emr") if platform.get(p) is not None]
        name = target_app_name(target)
        if len(given) != 1 or not flow_specs:
            raise ValidationError([Problem("args", f"give one platform and flows; got {given}, {sorted(flow_specs)}")])
        super().__init__(TOKEN, name, {}, opts)
        self._depends_on = list((opts or pulumi.ResourceOptions()).depends_on or [])  # type: ignore[arg-type]
        self.target, self.flow_ids = target, sorted(flow_specs)
        self.app_name = name
        specs = [flow_specs[i] for i in self.flow_ids]
        deploy = self._deploy_eks if given[0] == "eks" else self._deploy_emr
        self.metrics_endpoint = deploy(name, platform, specs, spark, secret_names)
        role_target = pulumi.Output.from_input(platform[given[0]])
        for flow_id in self.flow_ids:
            attach_msk_iam_policy(
                self, f"{name}-{app_name(flow_id)[len('mirror-') :]}", flow_specs[flow_id], role_target
            )
        self.register_outputs({"flows": self.flow_ids, "app_name": name, "metrics_endpoint": self.metrics_endpoint})

    def _child(self, extra: list[pulumi.Resource] | None = None) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, depends_on=[*self._depends_on, *(extra or [])])

    def _flow_child(self, name: str, flow_id: str) -> str:
        return f"{name}-{app_name(flow_id)[len('mirror-') :]}"

    def _deploy_eks(
        self, name: str, platform: dict[str, Any], specs: list[Any], spark: dict[str, Any], secrets: list[str]
    ) -> pulumi.Output[Any]:
        def render(v: list[Any]) -> dict[str, Any]:
            target, flow_specs = v[0], v[1:]
            settings = EksSettings(**target["settings"])
            ported = with_set_metrics_ports(flow_specs, settings.metrics_port)
            resources = app_spark(spark, settings.spark_defaults)
            out = eks_app_set(self.target, ported, resources, settings, tuple(SecretMount(n) for n in secrets))
            out["config_maps"] = {str(s["id"]): flow_config_map(s, settings.namespace) for s in ported}
            return out

        out = pulumi.Output.all(platform["eks"], *specs).apply(render)
        opts = self._child()
        maps = [
            k8s.core.v1.ConfigMap(
                f"{self._flow_child(name, flow_id)}-flow",
                metadata=_at(out, "config_maps", flow_id, "metadata"),
                data=_at(out, "config_maps", flow_id, "data"),
                opts=opts,
            )
            for flow_id in self.flow_ids
        ]

        def part(path: str) -> Any:
            return _at(out, *path.split("."))

        self.application = k8s.apiextensions.CustomResource(
            f"{name}-app",
            api_version="sparkoperator.k8s.io/v1beta2",
            kind="SparkApplication",
            metadata=part("app.metadata"),
            spec=part("app.spec"),
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=maps)),
        )
        k8s.core.v1.Service(f"{name}-metrics", metadata=part("service.metadata"), spec=part("service.spec"), opts=opts)
        k8s.networking.v1.NetworkPolicy(
            f"{name}-metrics-ingress",
            metadata=part("metrics_policy.metadata"),
            spec=part("metrics_policy.spec"),
            opts=opts,
        )
        k8s.policy.v1.PodDisruptionBudget(
            f"{name}-driver-pdb", metadata=part("pdb.metadata"), spec=part("pdb.spec"), opts=opts
        )
        if platform.get("pod_monitor"):
            k8s.apiextensions.CustomResource(
                f"{name}-pod-monitor",
                api_version="monitoring.coreos.com/v1",
                kind="PodMonitor",
                metadata=part("pod_monitor.metadata"),
                spec=part("pod_monitor.spec"),
                opts=opts,
            )
        return out.apply(lambda r: r["endpoint"])

    def _deploy_emr(
        self, name: str, platform: dict[str, Any], specs: list[Any], spark: dict[str, Any], secrets: list[str]
    ) -> pulumi.Output[Any]:
        def render(v: list[Any]) -> dict[str, Any]:
            target, flow_specs = v[0], v[1:]
            settings = EmrSettings(**target["settings"])
            if not target.get("step_function"):
                fix = "missing: pass `EmrSparkPlatform.deployment_target` as it is (its Lambda function runs the steps)"
                raise ValidationError([Problem("emr.step_function", fix)], name)
            ported = sorted(
                (with_metrics_port(s, emr_metrics_port(str(s["id"]), settings)) for s in flow_specs),
                key=lambda s: str(s["id"]),
            )
            objects = {str(s["id"]): {"key": flow_object_key(s), "content": flow_json(s)} for s in ported}
            files = [(settings.uri(objects[i]["key"]), flow_file(i)) for i in self.flow_ids]
            resources = app_spark(spark, settings.spark_defaults)
            step_args = app_step_args(name, files, target["bundle_uri"], target["entry_uri"], resources, settings)
            return dict(
                bucket=settings.bucket,
                objects=objects,
                cluster_id=target["cluster_id"],
                ports={str(s["id"]): int(s["metrics_port"]) for s in ported},
                step_function=target["step_function"],
                step_input=app_step_input(target["cluster_id"], name, step_args, settings),
            )

        out = pulumi.Output.all(platform["emr"], *specs).apply(render)
        objects = [
            aws.s3.BucketObjectv2(
                f"{self._flow_child(name, flow_id)}-flow",
                bucket=out.apply(lambda r: r["bucket"]),
                key=_at(out, "objects", flow_id, "key"),
                content=_at(out, "objects", flow_id, "content"),
                content_type="application/json",
                opts=self._child(),
            )
            for flow_id in self.flow_ids
        ]
        # As MirrorDeployment's: replaced only by deleting first, so the old step stops before the new one starts.
        self.step = aws.lambda_.Invocation(
            f"{name}-step",
            function_name=out.apply(lambda r: r["step_function"]),
            input=out.apply(lambda r: r["step_input"]),
            lifecycle_scope="CRUD",
            triggers=step_triggers(platform["emr"], out.apply(lambda r: r["step_input"])),  # drift: a dead step
            opts=pulumi.ResourceOptions.merge(
                self._child(cast(list[pulumi.Resource], objects)), pulumi.ResourceOptions(delete_before_replace=True)
            ),
        )
        step_id = self.step.result.apply(lambda r: cast(str | None, json.loads(r).get("step_id") if r else None))
        return pulumi.Output.all(out, step_id).apply(
            lambda v: {
                "cluster_id": v[0]["cluster_id"],
                "step_id": v[1],
                "yarn_application": name,
                "ports": v[0]["ports"],
                "path": "/metrics",
            }
        )


def _at(out: pulumi.Output[Any], *path: str) -> pulumi.Output[Any]:
    """The value at `path` (keys) inside the rendered `out`."""

    def pick(value: Any) -> Any:
        for key in path:
            value = value[key]
        return value

    return out.apply(pick)
