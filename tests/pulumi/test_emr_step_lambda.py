"""The step function's handler (`kafka_mirror.emr.step_lambda.handler`) against moto's EMR in
server mode on 127.0.0.1, over boto3's real HTTP calls, with the events an
`aws.lambda_.Invocation` (lifecycle_scope CRUD) sends: the input plus `tf: {action, prev_input}`."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.core.responses import ActionResult
from moto.emr.responses import ElasticMapReduceResponse

from kafka_mirror.emr.platform_args import EmrSparkPlatformArgs, emr_settings
from kafka_mirror.emr.step_function import HANDLER_FILE, handler_code
from kafka_mirror.emr.step_lambda import StepInputError, StepRunner, StepStillRunning, apply_action, handler
from kmirror.errors import ValidationError
from tests.pulumi.harness import assert_handler_stands_alone
from tests.pulumi.moto_support import moto_server, set_step_state

REGION = "eu-central-1"


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with moto_server() as url:
        yield url


def _cluster(endpoint: str) -> str:
    emr = boto3.client("emr", region_name=REGION, endpoint_url=endpoint)
    return str(
        emr.run_job_flow(
            Name="kafka-mirror-central",
            ReleaseLabel="emr-7.9.0",
            Instances={"InstanceCount": 1, "MasterInstanceType": "m5.xlarge", "KeepJobFlowAliveWhenNoSteps": True},
            JobFlowRole="EMR_EC2_DefaultRole",
            ServiceRole="EMR_DefaultRole",
        )["JobFlowId"]
    )


@pytest.fixture
def step(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The Invocation's input for one flow on a fresh cluster."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_ENDPOINT_URL_EMR", endpoint)  # botocore's own: the handler has no endpoint input
    return {
        "cluster_id": _cluster(endpoint),
        "name": "mirror-a-to-b",
        "args": ["/opt/kmirror/venv/bin/python", "-c", "...", "--tag", "kmirror-a-to-b", "--", "spark-submit", "v1"],
        "region": REGION,
        "stop_timeout_s": 5,
    }


def invoke(action: str, step: dict[str, Any], prev: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the Invocation sends for `action` (prev_input: the last input on update and delete)."""
    if action == "delete":
        prev = step
    return handler({**step, "tf": {"action": action, "prev_input": prev}}, None)


def states(cluster_id: str) -> dict[str, str]:
    emr = boto3.client("emr", region_name=REGION)
    return {s["Id"]: s["Status"]["State"] for s in emr.list_steps(ClusterId=cluster_id)["Steps"]}


def with_args(step: dict[str, Any], version: str) -> dict[str, Any]:
    return {**step, "args": [*step["args"][:-1], version]}


@pytest.fixture
def slow_cancel(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """CancelSteps as EMR does it: CANCEL_PENDING while the wrapper kills the YARN app, CANCELLED
    1.5 s later. Records when each cancelled step stopped and, for every AddJobFlowSteps, the
    states of the steps already on the cluster at that moment."""
    events: list[str] = []

    def cancel_later(self: Any) -> Any:
        cluster = self.backend.clusters[self._get_param("ClusterId")]
        cancelled = [s for s in cluster.steps if s.id in self._get_param("StepIds", [])]
        for found in cancelled:
            found.state = "CANCEL_PENDING"

        def stop() -> None:
            for found in cancelled:
                events.append(f"stopped {found.id}")
                found.state = "CANCELLED"

        threading.Timer(1.5, stop).start()
        return ActionResult({"CancelStepsInfoList": [{"StepId": s.id, "Status": "SUBMITTED"} for s in cancelled]})

    real_add = ElasticMapReduceResponse.add_job_flow_steps

    def add_recorded(self: Any) -> Any:
        cluster = self.backend.clusters[self._get_param("JobFlowId")]
        events.append("add while " + ",".join(f"{s.id}={s.state}" for s in cluster.steps))
        return real_add(self)

    monkeypatch.setattr(ElasticMapReduceResponse, "cancel_steps", cancel_later, raising=False)
    monkeypatch.setattr(ElasticMapReduceResponse, "add_job_flow_steps", add_recorded)
    return events


def test_create_adds_a_streaming_step(step: dict[str, Any]) -> None:
    result = invoke("create", step)
    emr = boto3.client("emr", region_name=REGION)
    [added] = emr.list_steps(ClusterId=step["cluster_id"])["Steps"]
    assert result == {"step_id": added["Id"], "stopped": [], "added": True}
    assert added["Name"] == "mirror-a-to-b" and added["ActionOnFailure"] == "CONTINUE"
    assert added["Config"]["Jar"] == "command-runner.jar" and added["Config"]["Args"] == step["args"]
    assert added["Status"]["State"] in ("PENDING", "RUNNING")


def test_create_first_stops_a_live_step_of_the_same_name(step: dict[str, Any], slow_cancel: list[str]) -> None:
    """A retried create, or the first `up` after the dynamic resource: never a second writer."""
    old = invoke("create", step)["step_id"]
    slow_cancel.clear()
    result = invoke("create", with_args(step, "v2"))
    assert result["stopped"] == [old] and result["step_id"] != old
    assert slow_cancel == [f"stopped {old}", f"add while {old}=CANCELLED"]
    now = states(step["cluster_id"])
    assert len(now) == 2 and now[old] == "CANCELLED" and now[result["step_id"]] in ("PENDING", "RUNNING")


def test_a_changed_step_stops_the_old_one_before_adding_the_new_one(
    step: dict[str, Any], slow_cancel: list[str]
) -> None:
    old = invoke("create", step)["step_id"]
    slow_cancel.clear()
    started = time.monotonic()
    result = invoke("update", with_args(step, "v2"), prev=step)
    assert time.monotonic() - started >= 1.5  # waited for CANCEL_PENDING to end
    assert slow_cancel == [f"stopped {old}", f"add while {old}=CANCELLED"]
    assert result["stopped"] == [old] and result["added"] is True
    new = result["step_id"]
    assert states(step["cluster_id"])[old] == "CANCELLED" and states(step["cluster_id"])[new] in ("PENDING", "RUNNING")
    emr = boto3.client("emr", region_name=REGION)
    assert emr.describe_step(ClusterId=step["cluster_id"], StepId=new)["Step"]["Config"]["Args"][-1] == "v2"


def test_a_moved_step_stops_on_the_old_cluster_and_starts_on_the_new(step: dict[str, Any], endpoint: str) -> None:
    old = invoke("create", step)["step_id"]
    moved = {**step, "cluster_id": _cluster(endpoint)}
    result = invoke("update", moved, prev=step)
    assert states(step["cluster_id"]) == {old: "CANCELLED"}
    assert list(states(moved["cluster_id"])) == [result["step_id"]]


def test_an_unchanged_live_step_is_kept_and_a_dead_one_is_re_added(step: dict[str, Any]) -> None:
    first = invoke("create", step)["step_id"]
    kept = invoke("update", {**step, "stop_timeout_s": 30}, prev=step)  # e.g. only the stop timeout changed
    assert kept == {"step_id": first, "stopped": [], "added": False} and len(states(step["cluster_id"])) == 1
    set_step_state(step["cluster_id"], first, "FAILED")
    again = invoke("update", step, prev=step)
    assert again["added"] is True and again["step_id"] != first and again["stopped"] == []
    assert states(step["cluster_id"])[first] == "FAILED"
    assert states(step["cluster_id"])[again["step_id"]] in ("PENDING", "RUNNING")


def test_delete_cancels_and_returns_only_once_the_step_stopped(step: dict[str, Any], slow_cancel: list[str]) -> None:
    live = invoke("create", step)["step_id"]
    started = time.monotonic()
    result = invoke("delete", step)
    slow_cancel.append("delete returned")
    assert time.monotonic() - started >= 1.5
    assert slow_cancel[-2:] == [f"stopped {live}", "delete returned"]
    assert result == {"step_id": None, "stopped": [live], "added": False}
    assert states(step["cluster_id"]) == {live: "CANCELLED"}


def test_delete_of_a_stopped_step_cancels_nothing(step: dict[str, Any]) -> None:
    done = invoke("create", step)["step_id"]
    set_step_state(step["cluster_id"], done, "FAILED")
    assert invoke("delete", step)["stopped"] == []
    assert states(step["cluster_id"]) == {done: "FAILED"}


def test_a_step_that_never_stops_fails_the_invocation_and_adds_nothing(
    step: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def cancel_never(self: Any) -> Any:
        cluster = self.backend.clusters[self._get_param("ClusterId")]
        for found in cluster.steps:
            if found.id in self._get_param("StepIds", []):
                found.state = "CANCEL_PENDING"
        return ActionResult({"CancelStepsInfoList": []})

    monkeypatch.setattr(ElasticMapReduceResponse, "cancel_steps", cancel_never, raising=False)
    step = {**step, "stop_timeout_s": 2}
    old = invoke("create", step)["step_id"]
    started = time.monotonic()
    with pytest.raises(StepStillRunning) as info:
        invoke("update", with_args(step, "v2"), prev=step)
    assert 2 <= time.monotonic() - started < 10  # bounded
    assert str(info.value) == (
        f"EMR step {old} (mirror-a-to-b) on cluster {step['cluster_id']} is still CANCEL_PENDING 2 s after it was "
        "cancelled; its replacement was not started, so the flow has no second writer. Find its YARN application "
        "(yarn application -list -appTags kmirror-a-to-b on the primary node), kill it (yarn application -kill "
        "APP_ID), then run `pulumi up` again"
    )
    assert list(states(step["cluster_id"])) == [old]  # no second step next to the stopping one
    with pytest.raises(StepStillRunning):
        invoke("delete", step)


def test_a_stop_timeout_past_the_lambda_limit_is_refused_naming_the_field(step: dict[str, Any]) -> None:
    with pytest.raises(StepInputError) as info:
        invoke("create", {**step, "stop_timeout_s": 900})
    assert str(info.value) == (
        "input.stop_timeout_s: 900 s does not fit in one Lambda run (900 s at most, a minute of it for the EMR "
        "calls); set it to 840 or less"
    )
    assert states(step["cluster_id"]) == {}
    args: EmrSparkPlatformArgs = {"bucket": "acme", "region": REGION, "step_stop_timeout_s": 841}
    with pytest.raises(ValidationError, match=r"step_stop_timeout_s: 841 s does not fit .* set it to 840 or less"):
        emr_settings(args)
    assert emr_settings({**args, "step_stop_timeout_s": 840}).step_stop_timeout_s == 840


def test_events_without_a_crud_action_are_refused(step: dict[str, Any]) -> None:
    with pytest.raises(StepInputError, match=r"input\.tf\.action: expected one of create, update, delete, got None"):
        handler(step, None)
    with pytest.raises(StepInputError, match=r"input\.args: expected the step's command-runner\.jar arguments"):
        invoke("create", {**step, "args": "spark-submit"})
    assert states(step["cluster_id"]) == {}


def test_the_function_code_is_the_handler_alone_and_imports_nothing_of_the_project(tmp_path: Path) -> None:
    """The Lambda runtime has boto3 and the standard library, not kafka_mirror or kmirror."""
    assert_handler_stands_alone(handler_code(), HANDLER_FILE, tmp_path)


def test_access_denied_right_after_the_role_policy_was_made_is_retried(step: dict[str, Any]) -> None:
    """IAM is eventually consistent: the first invocation may run before the new policy reaches EMR."""
    from botocore.exceptions import ClientError

    real = boto3.client("emr", region_name=REGION)

    class Propagating:
        """EMR as a role sees it whose policy arrives after `denials` calls."""

        def __init__(self, denials: int) -> None:
            self.denials = denials

        def get_paginator(self, operation: str) -> Any:
            self.denials -= 1
            if self.denials >= 0:
                raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "ListSteps")
            return real.get_paginator(operation)

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

    waits: list[float] = []
    soon = Propagating(denials=2)
    result = apply_action(StepRunner(lambda region: soon, sleep=waits.append), {**step, "tf": {"action": "create"}})
    assert waits == [5, 5] and list(states(step["cluster_id"])) == [result["step_id"]]
    now = [0.0]
    never = Propagating(denials=1000)
    runner = StepRunner(lambda region: never, sleep=lambda s: now.__setitem__(0, now[0] + s), clock=lambda: now[0])
    with pytest.raises(ClientError, match="AccessDeniedException"):
        apply_action(runner, {**step, "tf": {"action": "delete", "prev_input": step}})
    assert now[0] == 60  # reported after IAM_PROPAGATION_S, not before
