"""The EMR step provider against moto in server mode."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from components.emr_step_provider import EmrStepProvider, step_state

MOTO = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "moto_server"


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [str(MOTO), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def props(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    emr = boto3.client("emr", region_name="us-east-1", endpoint_url=endpoint)
    cluster = emr.run_job_flow(
        Name="c",
        ReleaseLabel="emr-7.9.0",
        Instances={"InstanceCount": 1, "MasterInstanceType": "m5.xlarge", "KeepJobFlowAliveWhenNoSteps": True},
        JobFlowRole="EMR_EC2_DefaultRole",
        ServiceRole="EMR_DefaultRole",
    )
    return {
        "cluster_id": cluster["JobFlowId"],
        "name": "mirror-a-to-b",
        "args": ["spark-submit", "x"],
        "region": "us-east-1",
        "endpoint_url": endpoint,
    }


def test_create_and_diff(props: dict) -> None:
    provider = EmrStepProvider()
    created = provider.create(props)
    step_id = created.id
    assert step_state(props, step_id) in ("PENDING", "RUNNING")
    assert provider.diff(step_id, created.outs, props).changes is False
    changed = provider.diff(step_id, created.outs, {**props, "args": ["spark-submit", "y"]})
    assert changed.changes and changed.replaces == ["args"]
    # moto 5.2.1 does not implement CancelSteps (HTTP 500), so delete is not exercised here.
