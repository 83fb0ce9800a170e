"""The EMR step dynamic provider (create/diff/update/delete) against moto in server mode on
127.0.0.1, over boto3's real HTTP calls."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from kafka_mirror.emr_step_provider import EmrStepProvider, step_state
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
        "endpoint_url": endpoint,
    }


def _steps(props: dict[str, Any]) -> list[dict[str, Any]]:
    emr = boto3.client("emr", region_name=REGION, endpoint_url=props["endpoint_url"])
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
    assert out.stdout.split() == ["kafka_mirror.emr_step_provider", "EmrStepProvider", "True", "True"]
