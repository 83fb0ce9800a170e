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

from typing import Any

import pulumi

from kafka_mirror.app_sets import (
    app_spark,
    eks_app_set,
    flow_file,
    target_app_name,
    with_set_metrics_ports,
)
from kafka_mirror.eks.flow_app import app_resources, flow_spec_config_map
from kafka_mirror.eks.specs import EksSettings, SecretMount, app_name, flow_config_map, flow_json, with_metrics_port
from kafka_mirror.emr.flow_step import check_step_function, step_resources
from kafka_mirror.emr.specs import EmrSettings, app_step_args, app_step_input, emr_metrics_port, flow_object_key
from kafka_mirror.msk_iam_policy import attach_msk_iam_policy
from kafka_mirror.rendered import as_resources, child_options
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
        self._depends_on = as_resources((opts or pulumi.ResourceOptions()).depends_on)
        self.target, self.flow_ids = target, sorted(flow_specs)
        self.app_name = name
        specs = [flow_specs[i] for i in self.flow_ids]
        if given[0] == "eks":
            out = pulumi.Output.all(platform["eks"], *specs).apply(
                lambda v: self._render_eks(v[0], v[1:], spark, secret_names)
            )
            self.metrics_endpoint = self._deploy_eks(name, out, bool(platform.get("pod_monitor")))
        else:
            out = pulumi.Output.all(platform["emr"], *specs).apply(lambda v: self._render_emr(name, v[0], v[1:], spark))
            self.metrics_endpoint = self._deploy_emr(name, out, platform["emr"])
        role_target = pulumi.Output.from_input(platform[given[0]])
        for flow_id in self.flow_ids:
            attach_msk_iam_policy(self, self._flow_child(name, flow_id), flow_specs[flow_id], role_target)
        self.register_outputs({"flows": self.flow_ids, "app_name": name, "metrics_endpoint": self.metrics_endpoint})

    def _flow_child(self, name: str, flow_id: str) -> str:
        return f"{name}-{app_name(flow_id)[len('mirror-') :]}"

    def _render_eks(
        self, target: dict[str, Any], flow_specs: list[Any], spark: dict[str, Any], secrets: list[str]
    ) -> dict[str, Any]:
        """The app's manifests (`eks_app_set`) and each flow's ConfigMap."""
        settings = EksSettings(**target["settings"])
        ported = with_set_metrics_ports(flow_specs, settings.metrics_port)
        resources = app_spark(spark, settings.spark_defaults)
        out = eks_app_set(self.target, ported, resources, settings, tuple(SecretMount(n) for n in secrets))
        out["config_maps"] = {str(s["id"]): flow_config_map(s, settings.namespace) for s in ported}
        return out

    def _deploy_eks(self, name: str, out: pulumi.Output[Any], pod_monitor: bool) -> pulumi.Output[Any]:
        opts = child_options(self, self._depends_on)
        maps = [
            flow_spec_config_map(self._flow_child(name, flow_id), out, ("config_maps", flow_id), opts)
            for flow_id in self.flow_ids
        ]
        made = app_resources(name, out, opts, maps, pod_monitor=pod_monitor, metrics_policy=True)
        self.application = made.application
        return out.apply(lambda r: r["endpoint"])

    def _render_emr(
        self, name: str, target: dict[str, Any], flow_specs: list[Any], spark: dict[str, Any]
    ) -> dict[str, Any]:
        """Each flow's S3 object and the step input naming them all."""
        settings = EmrSettings(**target["settings"])
        check_step_function(target, name)
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

    def _deploy_emr(self, name: str, out: pulumi.Output[Any], target: pulumi.Input[Any]) -> pulumi.Output[Any]:
        objects = [(self._flow_child(name, flow_id), ("objects", flow_id)) for flow_id in self.flow_ids]
        made = step_resources(self, name, out, objects, self._depends_on, target)
        self.step, step_id = made.step, made.step_id
        return pulumi.Output.all(out, step_id).apply(
            lambda v: {
                "cluster_id": v[0]["cluster_id"],
                "step_id": v[1],
                "yarn_application": name,
                "ports": v[0]["ports"],
                "path": "/metrics",
            }
        )
