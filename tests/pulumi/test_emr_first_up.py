"""A green `up` on EMR means the flow's step runs, and a replaced step never leaves two writers nor
kills its replacement (issue 43's blockers 6 and 10).

- The step function waits for an added step to be RUNNING, against moto's EMR (server mode, real
  boto3 calls; `tests/pulumi/moto_support.py` runs an added step while a slot is free, as EMR does).
- The order of a replacement, against fakes that behave as AWS documents: EMR shows a cancelled step
  CANCELLED once the step's JVM is gone, before its wrapper finished killing the YARN application, so
  the replacement step starts while the old wrapper is still stopping (`tests/pulumi/test_emr_yarn_stop.py`
  has the fake YARN and spark-submit).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from kafka_mirror.emr.step_lambda import StepNotRunning, StepRunner, apply_action, handler
from tests.pulumi.moto_support import moto_server, set_step_state
from tests.pulumi.test_emr_yarn_stop import (  # noqa: F401 (yarn: the fixture)
    FAKE_SPARK_SUBMIT,
    FAKE_TABLE,
    FakeEmr,
    FakeYarn,
    step_args,
    wait_for,
    yarn,
)

REGION = "eu-central-1"


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture
def cluster(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_ENDPOINT_URL_EMR", endpoint)
    emr = boto3.client("emr", region_name=REGION, endpoint_url=endpoint)
    return str(
        emr.run_job_flow(
            Name="kafka-mirror-central",
            ReleaseLabel="emr-7.9.0",
            JobFlowRole="EMR_EC2_DefaultRole",
            ServiceRole="EMR_DefaultRole",
            Instances={"InstanceCount": 1, "MasterInstanceType": "m5.xlarge", "KeepJobFlowAliveWhenNoSteps": True},
        )["JobFlowId"]
    )


def event(cluster_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "cluster_id": cluster_id,
        "name": "mirror-a-to-b",
        "region": REGION,
        "stop_timeout_s": 5,
        "args": ["python", "-c", "...", "--tag", "kmirror-a-to-b", "--", "spark-submit", "v1"],
        "tf": {"action": "create", "prev_input": None},
        **extra,
    }


def other_flow_running(cluster_id: str) -> None:
    """Another flow's step holds the cluster's only step slot (StepConcurrencyLevel 1)."""
    emr = boto3.client("emr", region_name=REGION)
    emr.add_job_flow_steps(
        JobFlowId=cluster_id,
        Steps=[
            {
                "Name": "mirror-other",
                "ActionOnFailure": "CONTINUE",
                "HadoopJarStep": {"Jar": "command-runner.jar", "Args": ["x"]},
            }
        ],
    )


def test_create_returns_once_the_step_runs(cluster: str) -> None:
    result = handler(event(cluster), None)
    emr = boto3.client("emr", region_name=REGION)
    assert emr.describe_step(ClusterId=cluster, StepId=result["step_id"])["Step"]["Status"]["State"] == "RUNNING"


def test_a_step_still_pending_fails_the_up_after_its_start_timeout(cluster: str) -> None:
    other_flow_running(cluster)
    started = time.monotonic()
    with pytest.raises(StepNotRunning) as raised:
        handler(event(cluster, start_timeout_s=2), None)
    assert 2 <= time.monotonic() - started < 10
    [step_id] = [
        s["Id"]
        for s in boto3.client("emr", region_name=REGION).list_steps(ClusterId=cluster)["Steps"]
        if s["Name"] == "mirror-a-to-b"
    ]
    assert str(raised.value) == (
        f"EMR step {step_id} (mirror-a-to-b) on cluster {cluster} is still PENDING 2 s after it was added "
        "(start_timeout_s): a step slot or the cluster is busy; see the cluster's steps in the EMR console, then "
        "run `pulumi up` again"
    )


def test_a_step_that_fails_before_running_fails_the_up_at_once(cluster: str) -> None:
    other_flow_running(cluster)
    emr = boto3.client("emr", region_name=REGION)

    def fail_it() -> None:  # EMR: the step's command failed (a bad argument, a missing file)
        found = wait_for(
            lambda: [s["Id"] for s in emr.list_steps(ClusterId=cluster)["Steps"] if s["Name"] == "mirror-a-to-b"]
        )
        set_step_state(cluster, found[0], "FAILED")

    threading.Thread(target=fail_it).start()
    started = time.monotonic()
    with pytest.raises(StepNotRunning, match=r"is FAILED instead of RUNNING: the flow is not mirroring"):
        handler(event(cluster, start_timeout_s=60), None)
    assert time.monotonic() - started < 30


class FaithfulEmr(FakeEmr):
    """FakeEmr, but a cancelled step shows CANCELLED once its JVM (the step runner) is gone, 0.2 s
    after the cancel, whether or not the wrapper it started has finished its kill."""

    def cancel_steps(self, ClusterId: str, StepIds: list[str], StepCancellationOption: str) -> dict[str, Any]:
        for step_id in StepIds:
            self.steps[step_id]["cancelled_at"] = time.monotonic()
        return super().cancel_steps(ClusterId, StepIds, StepCancellationOption)

    def _state(self, step_id: str) -> str:
        step = self.steps[step_id]
        if step["cancel"]:
            return "CANCELLED" if time.monotonic() - step["cancelled_at"] >= 0.2 else "CANCEL_PENDING"
        return super()._state(step_id)


def test_the_old_wrappers_exit_kill_spares_the_replacement(yarn: FakeYarn) -> None:  # noqa: F811
    # The first (old) step's spark-submit hangs and ignores SIGTERM (a client stuck on the network): its
    # wrapper's kill starts CLIENT_STOP_S (10 s) after the cancel, long after EMR showed the step
    # CANCELLED and the replacement submitted its application. Later submits behave as before.
    bin_dir = Path(yarn.env["PATH"].split(os.pathsep, 1)[0])
    stuck = FAKE_SPARK_SUBMIT.replace(
        "app_id = locked(submit)\n",
        "app_id = locked(submit)\nif app_id.endswith('_0001'):\n"
        "    import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)\n    time.sleep(3600)\n",
    )
    assert stuck != FAKE_SPARK_SUBMIT
    (bin_dir / "spark-submit").write_text(f"#!{sys.executable}\n{FAKE_TABLE}\n{stuck}")
    emr = FaithfulEmr(yarn)
    runner = StepRunner(lambda region: emr)
    step = {
        "cluster_id": "j-1",
        "name": "mirror-a-to-b",
        "args": step_args(stop_timeout_s=30),
        "region": REGION,
        "stop_timeout_s": 30,
    }
    apply_action(runner, {**step, "tf": {"action": "create", "prev_input": None}})
    [first] = wait_for(yarn.live)
    new_args = [*step["args"][:-1], "flow-v2.json"]
    apply_action(runner, {**step, "args": new_args, "tf": {"action": "update", "prev_input": step}})
    [second] = wait_for(lambda: [i for i in yarn.live() if i != first])
    old_wrapper = emr.steps["s-1"]["proc"]
    assert old_wrapper.poll() is None  # still stopping its client while the replacement runs
    old_wrapper.wait(30)
    apps = yarn.apps()
    assert apps[first]["state"] == "KILLED" and apps[second]["submitted_at"] >= apps[first]["kill_at"]
    assert apps[second]["state"] == "RUNNING" and yarn.live() == [second]
    emr.steps["s-2"]["proc"].send_signal(signal.SIGTERM)


FAKE_AWS = """#!{python}
# `aws s3 cp - s3://BUCKET/KEY` (the step wrapper's marker) into the test's moto S3
import sys, boto3
assert sys.argv[1:4] == ["s3", "cp", "-"], sys.argv
bucket, key = sys.argv[4][len("s3://"):].split("/", 1)
s3 = boto3.client("s3", region_name="{region}", endpoint_url="{endpoint}",
                  aws_access_key_id="testing", aws_secret_access_key="testing")
s3.put_object(Bucket=bucket, Key=key, Body=sys.stdin.read().encode())
"""
MARKERS = "s3://kmirror-ckpt/kmirror/yarn-running/"


@pytest.fixture
def s3(endpoint: str) -> Any:
    """moto's S3 with the platform bucket, versioned as `create_bucket` makes it."""
    client = boto3.client(
        "s3", region_name=REGION, endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    if "kmirror-ckpt" not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket="kmirror-ckpt", CreateBucketConfiguration={"LocationConstraint": REGION})
        client.put_bucket_versioning(Bucket="kmirror-ckpt", VersioningConfiguration={"Status": "Enabled"})
    for found in every_version(client):  # an earlier test's
        client.delete_object(Bucket="kmirror-ckpt", Key=found["Key"], VersionId=found["VersionId"])
    return client


def every_version(s3: Any) -> list[dict[str, Any]]:
    """Every object version and delete marker in the bucket."""
    listed = s3.list_object_versions(Bucket="kmirror-ckpt")
    return [*listed.get("Versions", []), *listed.get("DeleteMarkers", [])]


class Reads:
    """An S3 client that records the keys `get_object` found (then does as the real one)."""

    def __init__(self, s3: Any) -> None:
        self.s3, self.found = s3, []

    def get_object(self, **kwargs: Any) -> Any:
        read = self.s3.get_object(**kwargs)
        self.found.append((kwargs["Key"], read["VersionId"]))
        return read

    def __getattr__(self, name: str) -> Any:
        return getattr(self.s3, name)


def marker_step(yarn: FakeYarn, endpoint: str, s3: Any, **extra: Any) -> tuple[FakeEmr, StepRunner, dict[str, Any]]:  # noqa: F811
    """The real step (args as rendered) on FakeEmr, whose steps run the real wrapper against the fake
    YARN; the wrapper's `aws` writes to moto's S3, where the step function reads."""
    bin_dir = Path(yarn.env["PATH"].split(os.pathsep, 1)[0])
    (bin_dir / "aws").write_text(FAKE_AWS.format(python=sys.executable, region=REGION, endpoint=endpoint))
    (bin_dir / "aws").chmod(0o755)
    emr = FakeEmr(yarn)
    runner = StepRunner(lambda region: emr, s3_for=lambda region: s3)
    step = {"cluster_id": "j-1", "name": "mirror-a-to-b", "args": step_args(), "region": REGION, "stop_timeout_s": 30}
    return emr, runner, {**step, "yarn_marker_prefix": MARKERS, **extra, "tf": {"action": "create", "prev_input": None}}


def test_up_waits_for_the_yarn_application_the_wrapper_reports_running(yarn: FakeYarn, endpoint: str, s3: Any) -> None:  # noqa: F811
    emr, runner, create = marker_step(yarn, endpoint, s3, start_timeout_s=45)
    reads = Reads(s3)
    runner.s3_for = lambda region: reads
    result = apply_action(runner, create)
    # the application the wrapper submitted, RUNNING in YARN, is the one the step function names
    assert yarn.live() == [runner.yarn_application]
    [(key, version)] = reads.found
    assert key.startswith("kmirror/yarn-running/mirror-a-to-b/") and key.endswith(".json") and version != "null"
    # ... and the marker, read once, is gone: no object, no noncurrent version, no delete marker left
    assert every_version(s3) == [] and runner.marker_left is None
    emr.steps[result["step_id"]]["proc"].send_signal(signal.SIGTERM)


class NoDelete(Reads):
    """A role without s3:DeleteObject*: the marker can be read, not deleted."""

    def delete_object(self, **kwargs: Any) -> Any:
        from botocore.exceptions import ClientError

        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "denied"}}, "DeleteObject")


def test_a_marker_the_function_may_not_delete_is_left_and_named_not_fatal(
    yarn: FakeYarn,  # noqa: F811
    endpoint: str,
    s3: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    emr, runner, create = marker_step(yarn, endpoint, s3, start_timeout_s=45)
    reads = NoDelete(s3)
    runner.s3_for = lambda region: reads
    result = apply_action(runner, create)  # the flow runs: the up is green
    assert yarn.live() == [runner.yarn_application]
    [(key, _)] = reads.found
    assert runner.marker_left == f"s3://kmirror-ckpt/{key}"
    assert [v["Key"] for v in every_version(s3)] == [key]  # left for the lifecycle rule
    out = capsys.readouterr().out
    assert f"could not delete the YARN RUNNING marker s3://kmirror-ckpt/{key} (AccessDenied)" in out, out
    emr.steps[result["step_id"]]["proc"].send_signal(signal.SIGTERM)


def test_an_application_yarn_never_runs_fails_the_up_naming_it(yarn: FakeYarn, endpoint: str, s3: Any) -> None:  # noqa: F811
    bin_dir = Path(yarn.env["PATH"].split(os.pathsep, 1)[0])
    accepted = FAKE_SPARK_SUBMIT.replace('"state": "RUNNING"', '"state": "ACCEPTED"').replace(
        'if now != "RUNNING":', 'if now not in ("RUNNING", "ACCEPTED"):'
    )  # a full queue: YARN accepted the application, spark-submit waits for it to start
    assert accepted != FAKE_SPARK_SUBMIT
    (bin_dir / "spark-submit").write_text(f"#!{sys.executable}\n{FAKE_TABLE}\n{accepted}")
    emr, runner, create = marker_step(yarn, endpoint, s3, start_timeout_s=3)
    started = time.monotonic()
    with pytest.raises(StepNotRunning) as raised:
        apply_action(runner, create)
    assert 3 <= time.monotonic() - started < 30
    message = str(raised.value)
    assert "the YARN application of EMR step s-1 (mirror-a-to-b, YARN tag kmirror-a-to-b)" in message, message
    assert "is not RUNNING 3 s after the step was added" in message and MARKERS + "mirror-a-to-b/" in message
    assert yarn.live()  # ACCEPTED, not RUNNING: the wrapper wrote nothing
    assert every_version(s3) == []
    emr.steps["s-1"]["proc"].send_signal(signal.SIGTERM)
