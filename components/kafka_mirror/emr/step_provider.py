"""A Pulumi dynamic provider managing one EMR streaming step with boto3.

- create: `add_job_flow_steps`; the resource id is the first step id, `step_id` the live one.
- diff: a changed cluster, name, args or region replaces the step, deleting first; changed AWS
  credentials settings or stop timeout are an in-place update that keeps a live step; an
  unchanged step that is no longer PENDING/RUNNING (the mirror stopped) is re-added in place.
- delete: `cancel_steps` when the step is live, then **wait** until EMR reports it stopped
  (CANCELLED/FAILED/COMPLETED/INTERRUPTED), bounded by `stop_timeout_s`, raising
  `StepStillRunning` past it. The engine creates the replacement only after delete returns.
  Cancelling signals the step's process only, and a cluster-mode YARN application outlives it:
  the step's process is therefore the wrapper (`deploy/kmirror-step.py`, see
  `kafka_mirror.emr.specs.emr_step_args`), which on SIGTERM kills the flow's tagged YARN
  applications and exits only once YARN lists none, and at its start kills any a previous step
  left. So "stopped" means the driver is gone, and a flow never has two writers on one checkpoint.
- read (`pulumi refresh`): the step's live state; a step EMR no longer knows is gone.
Every call uses the stack's AWS settings (`kafka_mirror.aws_session`), with botocore retries.
"""

from __future__ import annotations

import math
from typing import Any

import pulumi
from botocore.exceptions import ClientError, WaiterError
from botocore.waiter import WaiterModel, create_waiter_with_client
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from kafka_mirror.aws_session import client
from kmirror.errors import KmirrorError

LIVE_STATES = ("PENDING", "RUNNING")
STOPPED_STATES = ("CANCELLED", "FAILED", "COMPLETED", "INTERRUPTED")
REPLACE_KEYS = ("cluster_id", "name", "args", "region")
UPDATE_KEYS = ("aws", "stop_timeout_s")
DEFAULT_STOP_TIMEOUT_S = 600


class StepStillRunning(KmirrorError):
    """A cancelled step did not stop in time: replacing it now would start a second writer."""


def _waiter_model(delay_s: int, attempts: int) -> WaiterModel:
    acceptors = [{"state": "success", "matcher": "path", "argument": "Step.Status.State", "expected": s}
                 for s in STOPPED_STATES]  # fmt: skip
    waiter = {"operation": "DescribeStep", "delay": delay_s, "maxAttempts": attempts, "acceptors": acceptors}
    return WaiterModel({"version": 2, "waiters": {"StepStopped": waiter}})


def _emr(props: dict[str, Any]) -> Any:
    settings = dict(props.get("aws") or {})
    settings["region"] = props["region"]
    return client("emr", settings)


def step_state(props: dict[str, Any], step_id: str) -> str:
    """The step's current EMR state (e.g. RUNNING, CANCEL_PENDING, CANCELLED, FAILED)."""
    return str(_emr(props).describe_step(ClusterId=props["cluster_id"], StepId=step_id)["Step"]["Status"]["State"])


def _yarn_tag(props: dict[str, Any]) -> str:
    """The flow's YARN tag from the step's `--tag` (kafka_mirror.emr.specs.yarn_tag), for messages."""
    args = [str(a) for a in props.get("args") or []]
    return args[args.index("--tag") + 1] if "--tag" in args[:-1] else "<the flow's tag>"


def wait_until_stopped(props: dict[str, Any], step_id: str) -> str:
    """Block until the step is in a STOPPED_STATES state; return it. Polls every second for
    timeouts under a minute (tests), else every 10 s, for at most `stop_timeout_s`.

    Raises StepStillRunning naming the step, its last state and what to do."""
    timeout = int(props.get("stop_timeout_s") or DEFAULT_STOP_TIMEOUT_S)
    delay = 1 if timeout < 60 else 10
    emr = _emr(props)
    waiter = create_waiter_with_client("StepStopped", _waiter_model(delay, max(1, math.ceil(timeout / delay))), emr)
    try:
        waiter.wait(ClusterId=props["cluster_id"], StepId=step_id)
    except WaiterError as exc:
        last = (exc.last_response or {}).get("Step", {}).get("Status", {}).get("State", "unknown")
        raise StepStillRunning(
            f"EMR step {step_id} ({props.get('name')}) on cluster {props['cluster_id']} is still {last} "
            f"{timeout} s after it was cancelled; its replacement was not started, so the flow has no "
            f"second writer. Find its YARN application (yarn application -list -appTags {_yarn_tag(props)} "
            f"on the primary node), kill it (yarn application -kill APP_ID), then run `pulumi up` again"
        ) from None
    return step_state(props, step_id)


def _add_step(props: dict[str, Any]) -> str:
    step = {
        "Name": props["name"],
        # A failed mirror must not take the other flows' steps (or the cluster) down with it.
        "ActionOnFailure": "CONTINUE",
        "HadoopJarStep": {"Jar": "command-runner.jar", "Args": [str(a) for a in props["args"]]},
    }
    return str(_emr(props).add_job_flow_steps(JobFlowId=props["cluster_id"], Steps=[step])["StepIds"][0])


def _inputs(props: dict[str, Any]) -> dict[str, Any]:
    return {k: props.get(k) for k in (*REPLACE_KEYS, *UPDATE_KEYS)}


class EmrStepProvider(ResourceProvider):
    """Inputs: cluster_id, name, args (command-runner.jar args), region, aws (profile and
    assume-role chain), stop_timeout_s."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        step_id = _add_step(props)
        return CreateResult(id_=step_id, outs={**_inputs(props), "step_id": step_id})

    def diff(self, id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = [k for k in REPLACE_KEYS if olds.get(k) != news.get(k)]
        if replaces:
            return DiffResult(changes=True, replaces=replaces, delete_before_replace=True)
        settings_changed = any(olds.get(k) != news.get(k) for k in UPDATE_KEYS)
        live = step_state(news, olds.get("step_id") or id) in LIVE_STATES
        return DiffResult(changes=settings_changed or not live, replaces=[], delete_before_replace=True)

    def update(self, id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        step_id = olds.get("step_id") or id
        state = step_state(news, step_id)
        if state not in LIVE_STATES:
            if state not in STOPPED_STATES:  # e.g. CANCEL_PENDING: the old driver may still write
                wait_until_stopped(news, step_id)
            step_id = _add_step(news)
        return UpdateResult(outs={**_inputs(news), "step_id": step_id})

    def read(self, id: str, props: dict[str, Any]) -> ReadResult:
        step_id = props.get("step_id") or id
        try:
            found = _emr(props).describe_step(ClusterId=props["cluster_id"], StepId=step_id)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("InvalidRequestException", "ResourceNotFoundException"):
                return ReadResult(id_=None, outs={})  # the cluster or step is gone
            raise
        if "Step" not in found:
            return ReadResult(id_=None, outs={})
        state = str(found["Step"]["Status"]["State"])
        return ReadResult(id_=id, outs={**_inputs(props), "step_id": step_id, "state": state})

    def delete(self, id: str, props: dict[str, Any]) -> None:
        step_id = props.get("step_id") or id
        state = step_state(props, step_id)
        if state in STOPPED_STATES:
            return
        if state in LIVE_STATES:
            # SIGTERM to the step's wrapper (EMR 5.32+), which kills the YARN application and exits
            # once it is gone (never TERMINATE_PROCESS: a SIGKILLed wrapper cannot kill it); the wait
            # below is what makes the replacement safe.
            _emr(props).cancel_steps(
                ClusterId=props["cluster_id"], StepIds=[step_id], StepCancellationOption="SEND_INTERRUPT"
            )
        wait_until_stopped(props, step_id)


class EmrStep(pulumi.dynamic.Resource):
    """One streaming step on an EMR cluster (outputs: `step_id` of the live step)."""

    step_id: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cluster_id: pulumi.Input[str],
        step_name: str,
        args: pulumi.Input[list[str]],
        region: pulumi.Input[str],
        aws: pulumi.Input[dict[str, Any]] | None = None,
        stop_timeout_s: pulumi.Input[int] = DEFAULT_STOP_TIMEOUT_S,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            "cluster_id": cluster_id,
            "name": step_name,
            "args": args,
            "region": region,
            "aws": aws or {},
            "stop_timeout_s": stop_timeout_s,
            "step_id": None,
        }
        super().__init__(EmrStepProvider(), name, props, opts)
