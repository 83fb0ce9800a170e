"""The unauthenticated /metrics endpoint is not on every interface by default (issue 26)."""

from __future__ import annotations

import io
import json

import pytest

from kmirror_engine.observability.metrics import FlowMetrics, metrics_bind_address


def test_the_bind_address_is_localhost_unless_a_pod_ip_or_an_explicit_address_is_given() -> None:
    assert metrics_bind_address({}) == "127.0.0.1"
    assert metrics_bind_address({"POD_IP": "10.1.2.3"}) == "10.1.2.3"
    assert metrics_bind_address({"POD_IP": "10.1.2.3", "KMIRROR_METRICS_ADDR": "0.0.0.0"}) == "0.0.0.0"


def test_serve_binds_localhost_by_default_and_logs_the_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KMIRROR_METRICS_ADDR", raising=False)
    monkeypatch.delenv("POD_IP", raising=False)
    out = io.StringIO()
    metrics = FlowMetrics("west->east", out=out)
    try:
        metrics.serve(0)
        assert metrics._server is not None
        assert metrics._server.server_address[0] == "127.0.0.1"  # was 0.0.0.0: every interface
        [line] = out.getvalue().splitlines()
        assert json.loads(line.removeprefix("kmirror metrics "))["addr"] == "127.0.0.1"
    finally:
        metrics.close()


def test_the_eks_driver_gets_its_pod_ip_so_the_service_can_still_scrape_metrics() -> None:
    from kafka_mirror.eks.specs import EksSettings, spark_application_manifest
    from tests.planner_fakes import spec

    manifest = spark_application_manifest(spec().to_dict(), {}, EksSettings())
    driver_env = manifest["spec"]["driver"]["env"]
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in driver_env
    assert all(e["name"] != "POD_IP" for e in manifest["spec"]["executor"]["env"])
