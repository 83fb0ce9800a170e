"""Day two on EMR: a flow's step that died since the last `up` is seen by the next preview and re-added by the
next `up` (issue 43, "Drift: a real Read for the EMR step resource").

- The read-only step reader (`kafka_mirror.emr.step_reader`) against moto's EMR (server mode, real boto3
  ListSteps), interleaved with the step function's own create/update (`step_lambda.handler`): its drift token
  changes when a step dies on its own or is cancelled outside Pulumi, and not when Pulumi adds, repairs or
  replaces the step (so a repaired flow shows no diff afterwards).
- The platform's reader function and its list-only role, and `step_drift.step_triggers` as the Invocation's
  `triggers`, under Pulumi mocks (the data source answering as the reader does).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pulumi
import pulumi_aws as aws
import pytest

from kafka_mirror.emr.step_drift import TRIGGER, reader_input, step_triggers
from kafka_mirror.emr.step_function import READER_FILE, handler_code, reader_policy
from kafka_mirror.emr.step_lambda import handler as step_handler
from kafka_mirror.emr.step_reader import NO_DRIFT, YARN_ENDED, YARN_LIVE, read_flow, read_steps
from tests.pulumi.harness import assert_handler_stands_alone
from tests.pulumi.moto_support import set_step_state
from tests.pulumi.test_emr_first_up import REGION, cluster, endpoint, event  # noqa: F401 (fixtures)


def read(cluster_id: str) -> dict[str, Any]:
    return read_flow(lambda region: boto3.client("emr", region_name=region), event(cluster_id))


def update(cluster_id: str, **changed: Any) -> dict[str, Any]:
    """The step function's `update` (the Invocation updated because its triggers or input changed)."""
    before = {k: v for k, v in event(cluster_id).items() if k != "tf"}
    return step_handler(event(cluster_id, tf={"action": "update", "prev_input": before}, **changed), None)


def test_a_step_that_fails_shows_as_drift_once_and_its_repair_shows_none(cluster: str) -> None:  # noqa: F811
    created = step_handler(event(cluster), None)
    healthy = read(cluster)
    assert healthy == {
        "step_id": created["step_id"],
        "state": "RUNNING",
        "yarn_application": YARN_LIVE,
        "drift": NO_DRIFT,
    }

    set_step_state(cluster, created["step_id"], "FAILED")  # the driver died since the `up`
    died = read(cluster)
    assert died["drift"] == f"{created['step_id']} FAILED" and died["state"] == "FAILED"
    assert died["yarn_application"] == YARN_ENDED

    repaired = update(cluster)  # the next `up`: same input, so the function re-adds the dead step
    assert repaired["added"] and repaired["step_id"] != created["step_id"]
    after = read(cluster)
    assert after["step_id"] == repaired["step_id"] and after["state"] == "RUNNING"
    assert after["drift"] == died["drift"]  # what the Invocation stored at the repair: no diff on the next preview


def test_pulumis_own_replacement_is_not_drift(cluster: str) -> None:  # noqa: F811
    step_handler(event(cluster), None)
    before = read(cluster)["drift"]
    replaced = update(cluster, args=["python", "-c", "...", "--tag", "kmirror-a-to-b", "--", "spark-submit", "v2"])
    assert replaced["stopped"] and replaced["added"]  # Pulumi cancelled the old step and added one
    assert read(cluster)["drift"] == before == NO_DRIFT


def test_a_step_cancelled_outside_pulumi_is_drift(cluster: str) -> None:  # noqa: F811
    created = step_handler(event(cluster), None)
    boto3.client("emr", region_name=REGION).cancel_steps(
        ClusterId=cluster, StepIds=[created["step_id"]], StepCancellationOption="SEND_INTERRUPT"
    )
    seen = read(cluster)
    assert seen["drift"] == f"{created['step_id']} CANCELLED" and seen["state"] == "CANCELLED"
    assert update(cluster)["added"]
    assert read(cluster)["state"] == "RUNNING"


def test_other_flows_steps_do_not_count(cluster: str) -> None:  # noqa: F811
    other = step_handler(event(cluster, name="mirror-other"), None)
    set_step_state(cluster, other["step_id"], "FAILED")
    assert read(cluster) == {"step_id": None, "state": "MISSING", "yarn_application": YARN_ENDED, "drift": NO_DRIFT}


def step(step_id: str, state: str, created: float) -> dict[str, Any]:
    return {"Id": step_id, "Name": "m", "Status": {"State": state, "Timeline": {"CreationDateTime": created}}}


def test_the_newest_ended_step_is_the_token_whatever_the_listing_order() -> None:
    steps = [step("s-3", "RUNNING", 3), step("s-1", "FAILED", 1), step("s-2", "COMPLETED", 2)]
    assert read_steps(steps)["drift"] == "s-2 COMPLETED"
    assert read_steps(list(reversed(steps)))["drift"] == "s-2 COMPLETED"
    pending = read_steps([step("s-4", "PENDING", 4), step("s-3", "CANCELLED", 3)])
    assert pending["step_id"] == "s-4" and pending["drift"] == NO_DRIFT  # Pulumi's cancel, then its new step


def test_the_reader_may_only_list_the_clusters_steps() -> None:
    policy = reader_policy(REGION, "j-1", "arn:aws:logs:eu-central-1:1:log-group:g")
    actions = sorted(a for s in policy["Statement"] for a in s["Action"])
    assert actions == ["elasticmapreduce:ListSteps", "logs:CreateLogStream", "logs:PutLogEvents"]
    assert policy["Statement"][0]["Resource"] == f"arn:aws:elasticmapreduce:{REGION}:*:cluster/j-1"


class ReaderMocks(pulumi.runtime.Mocks):
    """The getInvocation data source answers as the step reader does for a step that died."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[Any]]:
        assert args.token == "aws:lambda/getInvocation:getInvocation"
        self.calls.append(dict(args.args))
        answer = {"step_id": None, "state": "FAILED", "yarn_application": YARN_ENDED, "drift": "s-OLD FAILED"}
        return {"result": json.dumps(answer), "id": "x", **dict(args.args)}, []


STEP_INPUT = json.dumps({"cluster_id": "j-1", "name": "mirror-a-to-b", "region": REGION, "args": ["x"]})


def test_the_invocations_triggers_carry_the_readers_token() -> None:
    mocks = ReaderMocks()
    pulumi.runtime.set_mocks(mocks, preview=False)
    target = {"platform": "emr", "step_function": "steps-fn", "step_reader": "steps-read-fn"}
    triggers = step_triggers(target, STEP_INPUT)
    invocation = aws.lambda_.Invocation(
        "flow-step", function_name="steps-fn", input=STEP_INPUT, lifecycle_scope="CRUD", triggers=triggers
    )

    @pulumi.runtime.test
    def check() -> Any:
        def verify(values: list[Any]) -> None:
            assert values[0] == values[1] == {TRIGGER: "s-OLD FAILED"}
            [call] = mocks.calls
            assert call["functionName"] == "steps-read-fn" and call["input"] == reader_input(STEP_INPUT)
            assert json.loads(call["input"]) == {"cluster_id": "j-1", "name": "mirror-a-to-b", "region": REGION}

        return pulumi.Output.all(triggers, invocation.triggers).apply(verify)

    check()


def test_a_target_without_a_reader_reads_nothing() -> None:
    mocks = ReaderMocks()
    pulumi.runtime.set_mocks(mocks, preview=False)
    triggers = step_triggers({"platform": "emr", "step_function": "steps-fn"}, STEP_INPUT)

    @pulumi.runtime.test
    def check() -> Any:
        return triggers.apply(lambda t: (t is None and not mocks.calls) or pytest.fail(f"{t} {mocks.calls}"))

    check()


def test_the_readers_code_is_its_handler_alone_and_imports_nothing_of_the_project(tmp_path: Path) -> None:
    """The reader function's zip (step_function.handler_code(READER_FILE)) runs on the Lambda runtime: boto3 and
    the standard library only."""
    assert_handler_stands_alone(handler_code(READER_FILE), READER_FILE, tmp_path)


class Denied(Exception):
    def __init__(self) -> None:
        super().__init__("AccessDeniedException")
        self.response = {"Error": {"Code": "AccessDeniedException"}}


def test_access_denied_right_after_the_readers_role_was_made_is_retried_then_raised() -> None:
    """First `up`: the role policy made in the same run may not have reached EMR when the program reads."""
    calls: list[str] = []

    class Emr:
        def get_paginator(self, name: str) -> Any:
            calls.append(name)
            if len(calls) < 3:
                raise Denied()
            return self

        def paginate(self, **kwargs: Any) -> list[dict[str, Any]]:
            return [{"Steps": [step("s-1", "RUNNING", 1) | {"Name": "mirror-a-to-b"}]}]

    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    found = read_flow(lambda r: Emr(), event("j-1"), sleep=sleep, clock=lambda: now[0])
    assert found["step_id"] == "s-1" and len(calls) == 3

    class Never:
        def get_paginator(self, name: str) -> Any:
            raise Denied()

    now[0] = 0.0
    with pytest.raises(Denied):
        read_flow(lambda r: Never(), event("j-1"), sleep=sleep, clock=lambda: now[0])
    assert now[0] >= 40  # IAM_PROPAGATION_S, not forever
