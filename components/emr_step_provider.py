"""A Pulumi dynamic provider managing one EMR streaming step with boto3.

create = add_job_flow_steps; diff replaces when inputs changed or the step is no longer
PENDING/RUNNING (a cancelled or failed streaming step must be re-added); update is never
in place (replace = create new, delete old); delete = cancel_steps. `endpoint_url` lets
tests point the provider at moto.
"""

from __future__ import annotations

from typing import Any

import boto3
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider

LIVE_STATES = ("PENDING", "RUNNING")
INPUT_KEYS = ("cluster_id", "name", "args", "region", "endpoint_url")


def _emr(props: dict[str, Any]) -> Any:
    return boto3.client("emr", region_name=props.get("region") or "us-east-1", endpoint_url=props.get("endpoint_url"))


def step_state(props: dict[str, Any], step_id: str) -> str:
    """The step's current EMR state (e.g. RUNNING, CANCELLED, FAILED)."""
    return str(_emr(props).describe_step(ClusterId=props["cluster_id"], StepId=step_id)["Step"]["Status"]["State"])


class EmrStepProvider(ResourceProvider):
    """Inputs: cluster_id, name, args (command-runner.jar args), region, endpoint_url."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        step = {
            "Name": props["name"],
            "ActionOnFailure": "CONTINUE",
            "HadoopJarStep": {"Jar": "command-runner.jar", "Args": list(props["args"])},
        }
        step_id = _emr(props).add_job_flow_steps(JobFlowId=props["cluster_id"], Steps=[step])["StepIds"][0]
        return CreateResult(id_=step_id, outs={**props, "step_id": step_id})

    def diff(self, id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = [k for k in INPUT_KEYS if olds.get(k) != news.get(k)]
        if not changed and step_state(olds, id) not in LIVE_STATES:
            changed = ["step_id"]
        return DiffResult(changes=bool(changed), replaces=changed, delete_before_replace=True)

    def delete(self, id: str, props: dict[str, Any]) -> None:
        if step_state(props, id) in LIVE_STATES:
            _emr(props).cancel_steps(ClusterId=props["cluster_id"], StepIds=[id])
