"""A flow's EMR step as the program sees it on every run: the drift check behind its Invocation's `triggers`.

`aws.lambda_.Invocation` reads nothing back on refresh, so MirrorDeployment (and the per-target
app) pass `step_triggers(target, step_input)` as the Invocation's `triggers`: it invokes the
platform's read-only step reader (`step_reader.py`) through the `aws.lambda_.getInvocation` data
source, in previews too. A step that died since the last `up` changes the `step_ended` trigger,
so `pulumi preview` (the nightly drift job's `--refresh --expect-no-changes` included) shows the
Invocation updated, and the next `up` invokes the step function with `update`, which re-adds a
step that is no longer live (`step_lambda._ensure`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_aws as aws

TRIGGER = "step_ended"


def reader_input(step_input: str) -> str:
    """The reader's event: the step input's cluster, name and region (canonical JSON)."""
    step = json.loads(step_input)
    return json.dumps({k: step[k] for k in ("cluster_id", "name", "region")}, sort_keys=True, separators=(",", ":"))


def drift_trigger(result: str) -> dict[str, str]:
    """The Invocation's `triggers` from the reader's answer (`step_reader.read_steps`)."""
    return {TRIGGER: str(json.loads(result)["drift"])}


def step_triggers(target: pulumi.Input[Mapping[str, Any]], step_input: pulumi.Input[str]) -> pulumi.Output[Any]:
    """The `triggers` of a flow's step Invocation: `{step_ended: <token>}` read on this run, or None for a
    deployment target from before the reader (no `step_reader`: nothing to read)."""

    def read(values: list[Any]) -> Any:
        reader = values[0].get("step_reader")
        if not reader:
            return None
        found = aws.lambda_.get_invocation_output(function_name=reader, input=reader_input(values[1]))
        return found.result.apply(drift_trigger)

    return pulumi.Output.all(target, step_input).apply(read)
