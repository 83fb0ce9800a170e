"""The Lambda handler that adds, replaces and stops one flow's EMR streaming step.

EmrSparkPlatform ships this file alone as a Lambda function (Python 3.12, boto3 from the Lambda
runtime), and MirrorDeployment invokes it through an `aws.lambda_.Invocation` with
`lifecycle_scope="CRUD"`: real pulumi-aws resources, so a TypeScript, YAML or Python program using
the component provider runs EMR flows (a Pulumi dynamic resource cannot cross languages). So this
module imports only the standard library and boto3; its errors cannot be `kmirror.errors` ones.

The event is the Invocation's input (`cluster_id`, `name`, `args`, `region`, `stop_timeout_s`,
`yarn_marker_prefix`)
plus `tf: {action: create|update|delete, prev_input}`. Never two writers on one checkpoint:

- create: stop any live step of the same name (a retried create, or a migration from the old
  dynamic resource, never makes a second writer), then add the step.
- update: a changed cluster, name or args stops the previous step (cancel, then wait until EMR
  reports it stopped), and only then adds the new one. An unchanged step that is no longer live
  (it failed, or was cancelled outside Pulumi) is re-added; a live one is kept.
- delete: cancel the live step and wait until it stopped.
A step added (create, update) is waited for until EMR reports it RUNNING, at most `start_timeout_s`
(StepNotRunning otherwise, or at once when it ends FAILED/CANCELLED first): a green `up` means the
flow's step runs. With `yarn_marker_prefix` (s3://BUCKET/PREFIX/) it then also waits, within the
same `start_timeout_s`, for the step's YARN application to be RUNNING: the step wrapper (inside the
cluster, where YARN is; this Lambda is outside the VPC) writes `PREFIX<step name>/<nonce>.json`
once YARN lists its run's application RUNNING (`--running-marker`, added to the step's args here
with a fresh nonce per added step), and this function reads it (AppNotRunning otherwise), then
deletes it (its version, in a versioned bucket).
"Live" steps are found by name with ListSteps. Cancelling signals the step's process only (its
wrapper, `deploy/kmirror-step.py`, kills the flow's YARN application on SIGTERM and exits once it
is gone), so "stopped" means the driver is gone. A step still not stopped `stop_timeout_s` after
its cancel fails the invocation (StepStillRunning), so the Invocation fails the `pulumi up`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

LIVE_STATES = ("PENDING", "RUNNING")
STOPPING_STATES = ("CANCEL_PENDING",)  # cancelled, but its driver may still write
STOPPED_STATES = ("CANCELLED", "FAILED", "COMPLETED", "INTERRUPTED")
LAMBDA_TIMEOUT_S = 900  # Lambda's maximum run time: the whole invocation, the wait included
MAX_STOP_TIMEOUT_S = 840  # leaves a minute for listing, cancelling and adding the new step
ACTIONS = ("create", "update", "delete")
RETRIES = {"mode": "standard", "max_attempts": 10}
# A role policy made in the same `up` may take seconds to reach EMR: the first call of an invocation
# retries AccessDenied this long (botocore never retries it) before the error is reported.
IAM_PROPAGATION_S = 60
IAM_RETRY_DELAY_S = 5


class StepInputError(ValueError):
    """The invocation's input is not what MirrorDeployment sends: names the field, value and fix."""


class StepNotRunning(RuntimeError):
    """An added step did not reach RUNNING: it ended first, or is still PENDING at the deadline."""


class AppNotRunning(StepNotRunning):
    """The step runs but its YARN application is not RUNNING by the deadline (or the step ended first)."""


class StepStillRunning(RuntimeError):
    """A cancelled step did not stop in time: adding its replacement now would start a second writer."""


@dataclass(frozen=True)
class StepSpec:
    """One flow's step as the Invocation's input describes it."""

    cluster_id: str
    name: str
    args: tuple[str, ...]
    region: str
    stop_timeout_s: int
    start_timeout_s: int = 300
    yarn_marker_prefix: str = ""  # s3://BUCKET/PREFIX/: wait for the YARN application RUNNING too

    @property
    def identity(self) -> tuple[str, str, tuple[str, ...]]:
        """What makes a different step: a change of any of these replaces the running one."""
        return self.cluster_id, self.name, self.args


def stop_timeout_problem(value: Any) -> str | None:
    """Why `value` cannot bound the wait for a stopped step inside one Lambda run, or None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value or value < 1:
        return f"must be a whole number of seconds from 1 to {MAX_STOP_TIMEOUT_S}, got {value!r}"
    if value > MAX_STOP_TIMEOUT_S:
        return (
            f"{int(value)} s does not fit in one Lambda run ({LAMBDA_TIMEOUT_S} s at most, a minute of it "
            f"for the EMR calls); set it to {MAX_STOP_TIMEOUT_S} or less"
        )
    return None


def _text(payload: Mapping[str, Any], key: str, where: str) -> str:
    value = payload.get(key)
    if not isinstance(value, str) or not value:
        raise StepInputError(
            f"{where}.{key}: expected a non-empty string, got {value!r}; "
            "pass the flow's step as MirrorDeployment renders it"
        )
    return value


def parse_step(payload: Mapping[str, Any], where: str = "input") -> StepSpec:
    """The step described by `payload` (the Invocation's input, or `tf.prev_input`).

    Raises StepInputError naming the field, the value found and the fix."""
    args = payload.get("args")
    if not isinstance(args, list) or not args or not all(isinstance(a, str) for a in args):
        raise StepInputError(
            f"{where}.args: expected the step's command-runner.jar arguments (a non-empty "
            f"list of strings), got {args!r}"
        )
    if problem := stop_timeout_problem(payload.get("stop_timeout_s")):
        raise StepInputError(f"{where}.stop_timeout_s: {problem}")
    start = payload.get("start_timeout_s", StepSpec.start_timeout_s)
    if isinstance(start, bool) or not isinstance(start, int) or not 1 <= start <= MAX_STOP_TIMEOUT_S:
        raise StepInputError(
            f"{where}.start_timeout_s: must be a whole number of seconds from 1 to {MAX_STOP_TIMEOUT_S}, got {start!r}"
        )
    marker = payload.get("yarn_marker_prefix", "")
    if not isinstance(marker, str) or (marker and not (marker.startswith("s3://") and marker.endswith("/"))):
        raise StepInputError(f"{where}.yarn_marker_prefix: expected s3://BUCKET/PREFIX/ or nothing, got {marker!r}")
    return StepSpec(
        cluster_id=_text(payload, "cluster_id", where),
        name=_text(payload, "name", where),
        args=tuple(args),
        region=_text(payload, "region", where),
        stop_timeout_s=int(payload["stop_timeout_s"]),
        start_timeout_s=start,
        yarn_marker_prefix=marker,
    )


@dataclass
class StepRunner:
    """EMR calls for steps of one flow. `emr_for(region)` gives an EMR client; `sleep` and
    `clock` are injectable so tests do not wait for real."""

    emr_for: Callable[[str], Any]
    s3_for: Callable[[str], Any] | None = None  # an S3 client per region (yarn_marker_prefix)
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    started: float | None = None  # when the invocation began: every wait ends before Lambda's own timeout
    yarn_application: str | None = None  # the added step's application, once its wrapper reported it RUNNING
    marker_left: str | None = None  # a marker read but not deleted (delete_marker)

    def steps_named(self, step: StepSpec, states: Sequence[str]) -> list[dict[str, Any]]:
        """The cluster's steps called `step.name` in one of `states` (ListSteps, every page).

        Every action starts here, so this is where a just-created role policy may not be visible
        yet: AccessDenied is retried for IAM_PROPAGATION_S, then raised as it is."""
        deadline = self.clock() + IAM_PROPAGATION_S
        while True:
            try:
                pages = self.emr_for(step.region).get_paginator("list_steps")
                found = pages.paginate(ClusterId=step.cluster_id, StepStates=list(states))
                return [s for page in found for s in page.get("Steps", []) if s.get("Name") == step.name]
            except Exception as exc:
                if _error_code(exc) not in ("AccessDeniedException", "AccessDenied") or self.clock() >= deadline:
                    raise
            self.sleep(IAM_RETRY_DELAY_S)

    def state(self, step: StepSpec, step_id: str) -> str:
        found = self.emr_for(step.region).describe_step(ClusterId=step.cluster_id, StepId=step_id)
        return str(found["Step"]["Status"]["State"])

    def add(self, step: StepSpec, marker: str = "") -> str:
        """Add the step (its wrapper told to write `marker` once its application runs); return its id."""
        args = list(step.args)
        if marker and "--" in args:
            args[args.index("--") : args.index("--")] = ["--running-marker", marker]
        request = {
            "Name": step.name,
            # A failed mirror must not take the other flows' steps (or the cluster) down with it.
            "ActionOnFailure": "CONTINUE",
            "HadoopJarStep": {"Jar": "command-runner.jar", "Args": args},
        }
        added = self.emr_for(step.region).add_job_flow_steps(JobFlowId=step.cluster_id, Steps=[request])
        return str(added["StepIds"][0])

    def start_deadline(self, step: StepSpec) -> float:
        """`start_timeout_s` from now, within what the stop wait left of this Lambda run (minus a margin)."""
        deadline = self.clock() + step.start_timeout_s
        if self.started is not None:
            deadline = min(deadline, self.started + LAMBDA_TIMEOUT_S - 30)
        return deadline

    def wait_running(self, step: StepSpec, step_id: str, deadline: float | None = None) -> None:
        """Return once EMR reports `step_id` RUNNING; raises StepNotRunning when it ends first (FAILED,
        CANCELLED: the flow does not run) or is still PENDING `step.start_timeout_s` after it was added."""
        deadline = self.start_deadline(step) if deadline is None else deadline
        while (state := self.state(step, step_id)) != "RUNNING":
            where = f"EMR step {step_id} ({step.name}) on cluster {step.cluster_id}"
            if state in STOPPED_STATES or state in STOPPING_STATES:
                raise StepNotRunning(
                    f"{where} is {state} instead of RUNNING: the flow is not mirroring. Its "
                    f"stderr is under the cluster's log URI (steps/{step_id}/stderr.gz); fix "
                    "the cause, then run `pulumi up` again (the step is added anew)"
                )
            if self.clock() >= deadline:
                raise StepNotRunning(
                    f"{where} is still {state} {step.start_timeout_s} s after it was added "
                    "(start_timeout_s): a step slot or the cluster is busy; see the cluster's "
                    "steps in the EMR console, then run `pulumi up` again"
                )
            self.sleep(1 if step.start_timeout_s < 60 else 5)

    def wait_app_running(self, step: StepSpec, step_id: str, marker: str, deadline: float) -> str:
        """The YARN application id the step's wrapper wrote to `marker` once YARN listed it RUNNING;
        raises AppNotRunning when the step ends first or `marker` is still missing at `deadline`."""
        bucket, key = marker[len("s3://") :].split("/", 1)
        s3 = (self.s3_for or _boto3_s3)(step.region)
        tag = _yarn_tag(step.args)
        while True:
            try:
                read = s3.get_object(Bucket=bucket, Key=key)
                found = json.loads(read["Body"].read())
                self.delete_marker(s3, bucket, key, read.get("VersionId"))
                return str(found["application_id"])
            except Exception as exc:
                if _error_code(exc) not in ("NoSuchKey", "404"):
                    raise
            where = f"the YARN application of EMR step {step_id} ({step.name}, YARN tag {tag})"
            if (state := self.state(step, step_id)) != "RUNNING":
                raise AppNotRunning(
                    f"{where} never reported RUNNING: the step is {state}. Its stderr is under the cluster's "
                    f"log URI (steps/{step_id}/stderr.gz); fix the cause, then run `pulumi up` again"
                )
            if self.clock() >= deadline:
                raise AppNotRunning(
                    f"{where} is not RUNNING {step.start_timeout_s} s after the step was added "
                    f"(start_timeout_s; its wrapper writes {marker} once it is): YARN has not started it "
                    f"(queue or capacity: `yarn application -list -appTags {tag}` on the primary node), "
                    "or the nodes cannot write to the bucket; then run `pulumi up` again"
                )
            self.sleep(1 if step.start_timeout_s < 60 else 5)

    def delete_marker(self, s3: Any, bucket: str, key: str, version: str | None) -> None:
        """Delete a marker once read (nothing reads it again): its version in a versioned bucket, so
        neither a delete marker nor a noncurrent version is left. Best effort: the flow runs, so a
        failed delete is logged, not raised (a created bucket's lifecycle expires it, YARN_MARKER_DAYS)."""
        try:
            if version and version != "null":
                s3.delete_object(Bucket=bucket, Key=key, VersionId=version)
            else:
                s3.delete_object(Bucket=bucket, Key=key)
        except Exception as exc:
            self.marker_left = f"s3://{bucket}/{key}"
            print(
                f"warning: could not delete the YARN RUNNING marker {self.marker_left} "
                f"({_error_code(exc) or type(exc).__name__}); the function's role needs s3:DeleteObject and "
                "s3:DeleteObjectVersion on it (kafka_mirror.emr.step_function), or the bucket a lifecycle rule "
                "expiring kmirror/yarn-running/"
            )

    def stop(self, step: StepSpec, timeout_s: int) -> list[str]:
        """Cancel every live step called `step.name` and wait until each is stopped; return their ids.

        SEND_INTERRUPT (SIGTERM) lets the step's wrapper kill the YARN application before it exits;
        TERMINATE_PROCESS would SIGKILL the wrapper and leave the application running.
        Raises StepStillRunning when one is not stopped `timeout_s` after the cancel."""
        running = self.steps_named(step, (*LIVE_STATES, *STOPPING_STATES))
        cancel = [s["Id"] for s in running if s["Status"]["State"] in LIVE_STATES]
        if cancel:
            self.emr_for(step.region).cancel_steps(
                ClusterId=step.cluster_id, StepIds=cancel, StepCancellationOption="SEND_INTERRUPT"
            )
        deadline = self.clock() + timeout_s
        for found in running:
            self._wait_stopped(step, str(found["Id"]), deadline, timeout_s)
        return [str(s["Id"]) for s in running]

    def _wait_stopped(self, step: StepSpec, step_id: str, deadline: float, timeout_s: int) -> None:
        delay_s = 1 if timeout_s < 60 else 10
        while (state := self.state(step, step_id)) not in STOPPED_STATES:
            if self.clock() >= deadline:
                tag = _yarn_tag(step.args)
                raise StepStillRunning(
                    f"EMR step {step_id} ({step.name}) on cluster {step.cluster_id} is still {state} "
                    f"{timeout_s} s after it was cancelled; its replacement was not started, so the flow has no "
                    f"second writer. Find its YARN application (yarn application -list -appTags {tag} on the "
                    "primary node), kill it (yarn application -kill APP_ID), then run `pulumi up` again"
                )
            self.sleep(delay_s)


def _error_code(exc: Exception) -> str:
    """A botocore ClientError's code ("" for anything else), without importing botocore here."""
    response = getattr(exc, "response", None)
    return str(((response or {}).get("Error") or {}).get("Code") or "") if isinstance(response, dict) else ""


def _yarn_tag(args: Sequence[str]) -> str:
    """The flow's YARN tag from the step's `--tag` (kafka_mirror.emr.specs.yarn_tag), for messages."""
    return args[args.index("--tag") + 1] if "--tag" in args[:-1] else "<the flow's tag>"


def _ensure(runner: StepRunner, step: StepSpec) -> dict[str, Any]:
    """Keep the one live step of an unchanged flow, else (stopped, or several) stop all and add one."""
    live = runner.steps_named(step, (*LIVE_STATES, *STOPPING_STATES))
    if len(live) == 1 and live[0]["Status"]["State"] in LIVE_STATES:
        return {"step_id": str(live[0]["Id"]), "stopped": [], "added": False}
    stopped = runner.stop(step, step.stop_timeout_s)
    return {"step_id": _add_running(runner, step), "stopped": stopped, "added": True}


def _add_running(runner: StepRunner, step: StepSpec) -> str:
    """Add the step and wait until it is RUNNING (and its YARN application, with a marker prefix); its id."""
    marker = f"{step.yarn_marker_prefix}{step.name}/{uuid.uuid4().hex}.json" if step.yarn_marker_prefix else ""
    step_id = runner.add(step, marker)
    deadline = runner.start_deadline(step)
    runner.wait_running(step, step_id, deadline)
    if marker:
        runner.yarn_application = runner.wait_app_running(step, step_id, marker, deadline)
    return step_id


def apply_action(runner: StepRunner, event: Mapping[str, Any]) -> dict[str, Any]:
    """What one Invocation lifecycle event does (module docstring); returns `step_id` (the live
    step after create/update, None after delete), `stopped` (step ids stopped) and `added`."""
    lifecycle = event.get("tf")
    action = lifecycle.get("action") if isinstance(lifecycle, Mapping) else None
    if action not in ACTIONS:
        raise StepInputError(
            f"input.tf.action: expected one of {', '.join(ACTIONS)}, got {action!r}; invoke "
            "this function through aws.lambda_.Invocation with lifecycle_scope CRUD"
        )
    step = parse_step(event)
    if runner.started is None:
        runner.started = runner.clock()
    if action == "delete":
        return {"step_id": None, "stopped": runner.stop(step, step.stop_timeout_s), "added": False}
    if action == "create":
        stopped = runner.stop(step, step.stop_timeout_s)
        return {"step_id": _add_running(runner, step), "stopped": stopped, "added": True}
    previous = lifecycle.get("prev_input") if isinstance(lifecycle, Mapping) else None
    if not previous:
        return _ensure(runner, step)
    old = parse_step({**previous, "stop_timeout_s": step.stop_timeout_s}, "input.tf.prev_input")
    if old.identity == step.identity and old.region == step.region:
        return _ensure(runner, step)
    stopped = runner.stop(old, step.stop_timeout_s)
    if (old.cluster_id, old.name, old.region) != (step.cluster_id, step.name, step.region):
        stopped += runner.stop(step, step.stop_timeout_s)  # a same-name step already on the new cluster
    return {"step_id": _add_running(runner, step), "stopped": stopped, "added": True}


def _boto3_emr(region: str) -> Any:
    import boto3  # the Lambda runtime's; imported here so tests of the logic need no AWS session
    from botocore.config import Config

    return boto3.client("emr", region_name=region, config=Config(retries=RETRIES, connect_timeout=10, read_timeout=60))


def _boto3_s3(region: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client("s3", region_name=region, config=Config(retries=RETRIES, connect_timeout=10, read_timeout=60))


def handler(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """The Lambda entry point (`step_lambda.handler`): raises on any failure, which the Invocation
    reports as a failed create/update/delete."""
    clients: dict[str, Any] = {}

    def emr_for(region: str) -> Any:
        if region not in clients:
            clients[region] = _boto3_emr(region)
        return clients[region]

    runner = StepRunner(emr_for, s3_for=_boto3_s3)
    result = apply_action(runner, event)
    return {**result, "yarn_application": runner.yarn_application} if runner.yarn_application else result
