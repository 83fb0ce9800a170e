"""A Pulumi dynamic provider managing one EMR streaming step with boto3.

- create: `add_job_flow_steps`; the resource id is the first step id, `step_id` the live one.
- diff: a changed input (cluster, name, args, region) replaces the step, deleting first, so a
  flow never has two writers on one checkpoint; unchanged inputs whose step is no longer
  PENDING/RUNNING (cancelled or failed: the mirror stopped) is an in-place update.
- update: re-adds the step (same inputs) and records the new `step_id`.
- delete: `cancel_steps` when the step is live; a finished step needs nothing.
Changing a flow therefore replaces its step, never the cluster. `endpoint_url` lets tests point
the provider at moto.
"""

from __future__ import annotations

from typing import Any

import boto3
import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider, UpdateResult

LIVE_STATES = ("PENDING", "RUNNING")
INPUT_KEYS = ("cluster_id", "name", "args", "region", "endpoint_url")


def _emr(props: dict[str, Any]) -> Any:
    return boto3.client("emr", region_name=props.get("region") or "us-east-1", endpoint_url=props.get("endpoint_url"))


def step_state(props: dict[str, Any], step_id: str) -> str:
    """The step's current EMR state (e.g. RUNNING, CANCELLED, FAILED)."""
    return str(_emr(props).describe_step(ClusterId=props["cluster_id"], StepId=step_id)["Step"]["Status"]["State"])


def _add_step(props: dict[str, Any]) -> str:
    step = {
        "Name": props["name"],
        # A failed mirror must not take the other flows' steps (or the cluster) down with it.
        "ActionOnFailure": "CONTINUE",
        "HadoopJarStep": {"Jar": "command-runner.jar", "Args": [str(a) for a in props["args"]]},
    }
    return str(_emr(props).add_job_flow_steps(JobFlowId=props["cluster_id"], Steps=[step])["StepIds"][0])


def _inputs(props: dict[str, Any]) -> dict[str, Any]:
    return {k: props.get(k) for k in INPUT_KEYS}


class EmrStepProvider(ResourceProvider):
    """Inputs: cluster_id, name, args (command-runner.jar args), region, endpoint_url."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        step_id = _add_step(props)
        return CreateResult(id_=step_id, outs={**_inputs(props), "step_id": step_id})

    def diff(self, id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = [k for k in INPUT_KEYS if olds.get(k) != news.get(k)]
        if changed:
            return DiffResult(changes=True, replaces=changed, delete_before_replace=True)
        live = step_state(olds, olds.get("step_id") or id) in LIVE_STATES
        return DiffResult(changes=not live, replaces=[], delete_before_replace=True)

    def update(self, id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(outs={**_inputs(news), "step_id": _add_step(news)})

    def delete(self, id: str, props: dict[str, Any]) -> None:
        step_id = props.get("step_id") or id
        if step_state(props, step_id) in LIVE_STATES:
            _emr(props).cancel_steps(ClusterId=props["cluster_id"], StepIds=[step_id])


class EmrStep(pulumi.dynamic.Resource):
    """One streaming step on an EMR cluster (outputs: `step_id` of the live step)."""

    step_id: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cluster_id: pulumi.Input[str],
        step_name: str,
        args: pulumi.Input[list[str]],
        region: str,
        endpoint_url: str | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            "cluster_id": cluster_id,
            "name": step_name,
            "args": args,
            "region": region,
            "endpoint_url": endpoint_url,
            "step_id": None,
        }
        super().__init__(EmrStepProvider(), name, props, opts)
