"""The EMR step dynamic provider (create/diff/update/delete) against moto in server mode on
127.0.0.1, over boto3's real HTTP calls."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.core.responses import ActionResult
from moto.emr.responses import ElasticMapReduceResponse

from kafka_mirror.aws_session import aws_settings
from kafka_mirror.emr.step_provider import REPLACE_KEYS, UPDATE_KEYS, EmrStepProvider, StepStillRunning, step_state
from kmirror.errors import ValidationError
from tests.pulumi.moto_support import moto_server, set_step_state

REGION = "eu-central-1"


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture
def props(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    # botocore's own per-service endpoint variables: the provider has no endpoint input at all.
    monkeypatch.setenv("AWS_ENDPOINT_URL_EMR", endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", endpoint)
    emr = boto3.client("emr", region_name=REGION, endpoint_url=endpoint)
    cluster = emr.run_job_flow(
        Name="kafka-mirror-central",
        ReleaseLabel="emr-7.9.0",
        Instances={"InstanceCount": 1, "MasterInstanceType": "m5.xlarge", "KeepJobFlowAliveWhenNoSteps": True},
        JobFlowRole="EMR_EC2_DefaultRole",
        ServiceRole="EMR_DefaultRole",
    )
    return {
        "cluster_id": cluster["JobFlowId"],
        "name": "mirror-a-to-b",
        "args": ["spark-submit", "--flow", "x"],
        "region": REGION,
        "aws": {"region": REGION, "profile": "", "assume_roles": []},
        "stop_timeout_s": 5,
    }


def _steps(props: dict[str, Any]) -> list[dict[str, Any]]:
    emr = boto3.client("emr", region_name=REGION)
    return list(emr.list_steps(ClusterId=props["cluster_id"])["Steps"])


def test_create_adds_a_streaming_step(props: dict[str, Any]) -> None:
    created = EmrStepProvider().create(props)
    [step] = _steps(props)
    assert step["Id"] == created.id == created.outs["step_id"]
    assert step["Name"] == "mirror-a-to-b" and step["ActionOnFailure"] == "CONTINUE"
    assert step["Config"]["Jar"] == "command-runner.jar" and step["Config"]["Args"] == props["args"]
    assert step_state(props, created.id) in ("PENDING", "RUNNING")


def test_diff_replaces_on_changed_inputs_and_keeps_a_live_unchanged_step(props: dict[str, Any]) -> None:
    provider = EmrStepProvider()
    created = provider.create(props)
    same = provider.diff(created.id, created.outs, props)
    assert same.changes is False and not same.replaces
    changed = provider.diff(created.id, created.outs, {**props, "args": ["spark-submit", "--flow", "y"]})
    assert changed.changes is True and changed.replaces == ["args"] and changed.delete_before_replace is True
    moved = provider.diff(created.id, created.outs, {**props, "cluster_id": "j-OTHER"})
    assert moved.replaces == ["cluster_id"]


def test_a_failed_step_is_re_added_by_update(props: dict[str, Any]) -> None:
    provider = EmrStepProvider()
    created = provider.create(props)
    set_step_state(props["cluster_id"], created.id, "FAILED")
    diff = provider.diff(created.id, created.outs, props)
    assert diff.changes is True and not diff.replaces  # in place: the cluster and resource stay
    updated = provider.update(created.id, created.outs, props)
    new_id = updated.outs["step_id"]
    assert new_id != created.id and step_state(props, new_id) in ("PENDING", "RUNNING")
    assert provider.diff(created.id, updated.outs, props).changes is False  # diff now follows the new step
    assert [s["Status"]["State"] for s in _steps(props) if s["Id"] == created.id] == ["FAILED"]


def test_delete_cancels_the_live_step_only(props: dict[str, Any]) -> None:
    provider = EmrStepProvider()
    live = provider.create(props)
    provider.delete(live.id, live.outs)
    assert step_state(props, live.id) == "CANCELLED"
    done = provider.create({**props, "name": "mirror-c-to-d"})
    set_step_state(props["cluster_id"], done.id, "FAILED")
    provider.delete(done.id, done.outs)  # nothing to cancel; must not raise
    assert step_state(props, done.id) == "FAILED"


def test_replacing_a_flow_cancels_the_old_step_and_adds_the_new_one(props: dict[str, Any]) -> None:
    """What the engine does for `replaces` with delete_before_replace: delete old, then create new."""
    provider = EmrStepProvider()
    old = provider.create(props)
    news = {**props, "args": ["spark-submit", "--flow", "v2"]}
    assert provider.diff(old.id, old.outs, news).replaces == ["args"]
    provider.delete(old.id, old.outs)
    new = provider.create(news)
    states = {s["Id"]: s["Status"]["State"] for s in _steps(props)}
    assert states[old.id] == "CANCELLED" and states[new.id] in ("PENDING", "RUNNING")


def test_the_provider_survives_pulumis_serialisation_in_a_fresh_interpreter(tmp_path: Path) -> None:
    """The engine runs dynamic providers from their pickled form (by reference to this module)."""
    from pulumi.dynamic.dynamic import serialize_provider

    blob = serialize_provider(EmrStepProvider())
    code = (
        "import base64, sys, dill; p = dill.loads(base64.b64decode(sys.argv[1])); "
        "print(type(p).__module__, type(p).__name__, callable(p.diff), callable(p.update))"
    )
    out = subprocess.run([sys.executable, "-c", code, blob], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["kafka_mirror.emr.step_provider", "EmrStepProvider", "True", "True"]


def test_delete_waits_until_the_cancelled_step_stopped_before_the_replacement_starts(
    props: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """EMR's CancelSteps is asynchronous (CANCEL_PENDING while YARN stops the app): the engine
    creates the replacement once delete returns, so delete must return only after the stop."""
    events: list[str] = []

    def cancel_later(self: Any) -> Any:
        cluster = self.backend.clusters[self._get_param("ClusterId")]
        [step] = [s for s in cluster.steps if s.id in self._get_param("StepIds", [])]
        step.state = "CANCEL_PENDING"

        def stop() -> None:
            events.append("old step stopped")
            step.state = "CANCELLED"

        threading.Timer(1.5, stop).start()
        return ActionResult({"CancelStepsInfoList": [{"StepId": step.id, "Status": "SUBMITTED", "Reason": ""}]})

    monkeypatch.setattr(ElasticMapReduceResponse, "cancel_steps", cancel_later, raising=False)
    provider = EmrStepProvider()
    old = provider.create(props)
    news = {**props, "args": ["spark-submit", "--flow", "v2"]}
    assert provider.diff(old.id, old.outs, news).delete_before_replace is True
    started = time.monotonic()
    provider.delete(old.id, old.outs)
    events.append("delete returned")
    new = provider.create(news)
    events.append("new step added")
    assert events == ["old step stopped", "delete returned", "new step added"]
    assert time.monotonic() - started >= 1.5
    states = {s["Id"]: s["Status"]["State"] for s in _steps(props)}
    assert states[old.id] == "CANCELLED" and states[new.id] in ("PENDING", "RUNNING")


def test_a_step_that_never_stops_fails_the_delete_with_what_to_do(
    props: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def cancel_never(self: Any) -> Any:
        cluster = self.backend.clusters[self._get_param("ClusterId")]
        for step in cluster.steps:
            if step.id in self._get_param("StepIds", []):
                step.state = "CANCEL_PENDING"
        return ActionResult({"CancelStepsInfoList": []})

    monkeypatch.setattr(ElasticMapReduceResponse, "cancel_steps", cancel_never, raising=False)
    provider = EmrStepProvider()
    old = provider.create({**props, "stop_timeout_s": 2})
    started = time.monotonic()
    with pytest.raises(StepStillRunning) as info:
        provider.delete(old.id, old.outs)
    assert 1.0 <= time.monotonic() - started < 10  # bounded
    expected = (f"EMR step {old.id} (mirror-a-to-b) on cluster {props['cluster_id']} is still CANCEL_PENDING "
                "2 s after it was cancelled; its replacement was not started")  # fmt: skip
    assert str(info.value).startswith(expected)
    assert "yarn application -kill" in str(info.value)
    # and update (a dead step being re-added) never adds a step next to a stopping one
    with pytest.raises(StepStillRunning):
        provider.update(old.id, old.outs, old.outs)
    assert [s["Id"] for s in _steps(props)] == [old.id]


def test_changed_credentials_update_in_place_and_keep_the_live_step(props: dict[str, Any]) -> None:
    provider = EmrStepProvider()
    created = provider.create(props)
    news = {**props, "aws": {**props["aws"], "profile": ""}, "stop_timeout_s": 900}
    diff = provider.diff(created.id, created.outs, news)
    assert diff.changes is True and not diff.replaces
    updated = provider.update(created.id, created.outs, news)
    assert updated.outs["step_id"] == created.id and updated.outs["stop_timeout_s"] == 900
    assert len(_steps(props)) == 1


def test_read_refreshes_the_live_state_and_forgets_a_vanished_step(props: dict[str, Any]) -> None:
    provider = EmrStepProvider()
    created = provider.create(props)
    set_step_state(props["cluster_id"], created.id, "FAILED")
    read = provider.read(created.id, created.outs)
    assert read.id == created.id and read.outs is not None and read.outs["state"] == "FAILED"
    gone = provider.read("s-NOPE", {**created.outs, "step_id": "s-NOPE"})
    assert gone.id is None


def test_the_stacks_assume_role_chain_and_region_are_used(props: dict[str, Any]) -> None:
    from moto.sts.models import sts_backends

    role = "arn:aws:iam::123456789012:role/kafka-mirror-deployer"
    settings = aws_settings(REGION, None, [{"roleArn": role, "sessionName": "pulumi-central", "externalId": "x1"}])
    chain = [{"role_arn": role, "external_id": "x1", "session_name": "pulumi-central"}]
    assert settings == {"region": REGION, "profile": "", "assume_roles": chain}
    created = EmrStepProvider().create({**props, "aws": settings})
    assert step_state({**props, "aws": settings}, created.id) in ("PENDING", "RUNNING")
    assumed = [r for backend in sts_backends.values() for b in backend.values() for r in b.assumed_roles]
    assert any(r.role_arn == role and r.session_name == "pulumi-central" for r in assumed)
    with pytest.raises(ValidationError, match="aws:region: required"):
        aws_settings(None, None, None)


def test_the_endpoint_is_no_input_of_the_step() -> None:
    assert "endpoint_url" not in (*REPLACE_KEYS, *UPDATE_KEYS)
    assert REPLACE_KEYS == ("cluster_id", "name", "args", "region")
