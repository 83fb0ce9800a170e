"""A streaming step on EMR: MirrorDeployment's `emr` side (one flow), and the one builder of a
step's resources that the per-target app (`TargetMirrorDeployment`) uses too.

Each flow's spec is a content-addressed S3 object; the step is managed by the platform's Lambda
function through an `aws.lambda_.Invocation` with the CRUD lifecycle (`kafka_mirror.emr.step_lambda`:
a changed flow stops its old step, then adds the new one; never the cluster). Real resources, so
any language's program runs it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import pulumi
import pulumi_aws as aws

from kafka_mirror.eks.specs import flow_json, with_metrics_port
from kafka_mirror.emr.specs import EmrSettings, emr_metrics_port, emr_step_args, emr_step_input, flow_object_key
from kafka_mirror.emr.step_drift import step_triggers
from kafka_mirror.rendered import child_options, output_at
from kmirror.errors import Problem, ValidationError


@dataclass(frozen=True)
class StepResources:
    """The S3 objects of a step's flow specs, the step's Invocation and the live step's id."""

    flow_objects: list[aws.s3.BucketObjectv2]
    step: aws.lambda_.Invocation
    step_id: pulumi.Output[str | None]


def check_step_function(target: Mapping[str, Any], name: str) -> None:
    """Raises ValidationError naming the fix when the deployment target has no step function."""
    if not target.get("step_function"):
        fix = "missing: pass `EmrSparkPlatform.deployment_target` as it is (its Lambda function runs the steps)"
        raise ValidationError([Problem("emr.step_function", fix)], name)


def step_resources(
    parent: pulumi.Resource,
    name: str,
    out: pulumi.Output[Any],
    objects: Sequence[tuple[str, Sequence[str]]],
    depends_on: Sequence[pulumi.Resource],
    target: pulumi.Input[Any],
) -> StepResources:
    """Each flow's S3 object (`<object name>-flow`, its `key` and `content` at its path of the rendered
    `out`, in `out["bucket"]`) and the step `<name>-step` (`out["step_function"]`, `out["step_input"]`),
    whose triggers read the platform's step reader (`target`, `emr.step_drift`: a step that ended since
    the last `up` shows as drift)."""
    flow_objects = [
        aws.s3.BucketObjectv2(
            f"{object_name}-flow",
            bucket=out.apply(lambda r: r["bucket"]),
            key=output_at(out, *path, "key"),
            content=output_at(out, *path, "content"),
            content_type="application/json",
            opts=child_options(parent, depends_on),
        )
        for object_name, path in objects
    ]
    # Replaced (a new function) only by deleting first: the old step stops before the new one starts.
    step = aws.lambda_.Invocation(
        f"{name}-step",
        function_name=out.apply(lambda r: r["step_function"]),
        input=out.apply(lambda r: r["step_input"]),
        lifecycle_scope="CRUD",
        triggers=step_triggers(target, out.apply(lambda r: r["step_input"])),  # drift: a dead step
        opts=pulumi.ResourceOptions.merge(
            child_options(parent, depends_on, cast(list[pulumi.Resource], flow_objects)),
            pulumi.ResourceOptions(delete_before_replace=True),
        ),
    )
    step_id = step.result.apply(lambda r: cast(str | None, json.loads(r).get("step_id") if r else None))
    return StepResources(flow_objects, step, step_id)


def render_flow_step(name: str, values: list[Any]) -> dict[str, Any]:
    """One flow's S3 object and step input: `values` is (deployment target, flow spec, spark)."""
    target, spec, spark_resources = values
    settings = EmrSettings(**target["settings"])
    check_step_function(target, name)
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


def deploy_flow_step(
    parent: pulumi.Resource,
    name: str,
    target: pulumi.Input[Any],
    spec: pulumi.Output[Any],
    spark: pulumi.Output[Any],
    app_name: pulumi.Output[str],
    depends_on: Sequence[pulumi.Resource],
) -> tuple[StepResources, pulumi.Output[Any]]:
    """The flow's S3 object and streaming step as children of `parent` (secrets come from the nodes'
    sync, so no secret names here); returns them and the flow's metrics endpoint."""
    out = pulumi.Output.all(target, spec, spark).apply(lambda v: render_flow_step(name, v))
    made = step_resources(parent, name, out, [(name, ())], depends_on, target)
    # Cluster mode: YARN picks the driver's node, so the endpoint is the YARN application and a
    # port fixed per flow; Prometheus finds the node via EC2 service discovery on that port.
    endpoint = pulumi.Output.all(out, made.step_id, app_name).apply(
        lambda v: {
            "cluster_id": v[0]["cluster_id"],
            "step_id": v[1],
            "yarn_application": v[2],
            "port": v[0]["port"],
            "path": "/metrics",
        }
    )
    return made, endpoint
