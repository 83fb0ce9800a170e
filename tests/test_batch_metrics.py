"""Batch metrics the dashboard and alerts use: batch duration, failed batches (the sink's abort
path) and Spark checkpoint age, checked as exact Prometheus text lines."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace
from typing import Any

import pytest

from kmirror_engine.failover.failover_listener import FailoverListener
from kmirror_engine.observability.metrics import FlowMetrics
from kmirror_engine.observability.progress import BatchProgress, PartitionProgress
from spark_app import listeners as listeners_module
from spark_app.sink import MirrorStreamWriter
from tests.test_sink_unit import SPEC


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def lines(metrics: FlowMetrics, prefix: str) -> list[str]:
    return [line for line in metrics.text().splitlines() if line.startswith(prefix)]


def batch(batch_id: int, duration_ms: int) -> BatchProgress:
    part = PartitionProgress("orders", 0, "west.orders", 0, 10, 10, 1_000, None)
    return BatchProgress(batch_id, (part,), duration_ms)


def test_batch_duration_is_a_histogram_of_committed_batches() -> None:
    metrics = FlowMetrics("west->east", out=io.StringIO())
    metrics.observe_batch(batch(0, 1_500), now_ms=0)
    metrics.observe_batch(batch(1, 40_000), now_ms=0)
    found = lines(metrics, "kmirror_batch_duration_seconds")
    assert 'kmirror_batch_duration_seconds_bucket{flow="west->east",le="1.0"} 0.0' in found
    assert 'kmirror_batch_duration_seconds_bucket{flow="west->east",le="2.5"} 1.0' in found
    assert 'kmirror_batch_duration_seconds_bucket{flow="west->east",le="30.0"} 1.0' in found
    assert 'kmirror_batch_duration_seconds_bucket{flow="west->east",le="60.0"} 2.0' in found
    assert 'kmirror_batch_duration_seconds_bucket{flow="west->east",le="+Inf"} 2.0' in found
    assert 'kmirror_batch_duration_seconds_count{flow="west->east"} 2.0' in found
    assert 'kmirror_batch_duration_seconds_sum{flow="west->east"} 41.5' in found


def test_failed_batches_start_at_zero_and_count_each_abort() -> None:
    out = io.StringIO()
    metrics = FlowMetrics("west->east", out=out)
    assert lines(metrics, "kmirror_failed_batches_total") == ['kmirror_failed_batches_total{flow="west->east"} 0.0']
    metrics.observe_batch_failure(7)
    metrics.observe_batch_failure(7)  # Spark's retry of batch 7 failed too
    assert lines(metrics, "kmirror_failed_batches_total") == ['kmirror_failed_batches_total{flow="west->east"} 2.0']
    assert [json.loads(x.removeprefix("kmirror metrics ")) for x in out.getvalue().splitlines()] == [
        {"event": "batch_failed", "flow": "west->east", "batch_id": 7}
    ] * 2


def test_checkpoint_age_is_the_time_since_the_last_committed_batch() -> None:
    clock = Clock(1_000.0)
    metrics = FlowMetrics("west->east", out=io.StringIO(), clock=clock)
    clock.now = 1_030.0  # no batch committed yet: ages from the start
    age = 'kmirror_checkpoint_age_seconds{flow="west->east"}'
    assert lines(metrics, age) == [f"{age} 30.0"]
    metrics.observe_batch(batch(0, 100), now_ms=0)
    clock.now = 1_042.5
    assert lines(metrics, age) == [f"{age} 12.5"]
    metrics.observe_batch_failure(1)  # an aborted batch does not advance the checkpoint
    clock.now = 1_100.0
    assert lines(metrics, age) == [f"{age} 70.0"]


def test_the_sinks_abort_counts_the_failed_batch_through_the_flows_listeners(monkeypatch: pytest.MonkeyPatch) -> None:
    metrics = FlowMetrics("west->east", out=io.StringIO())
    failover: Any = SimpleNamespace(metrics=metrics, close=lambda final: None)
    failover.on_batch_failed = lambda batch_id: FailoverListener.on_batch_failed(failover, batch_id)
    others = SimpleNamespace(close=lambda final: None)  # listeners without on_batch_failed are skipped
    monkeypatch.setattr(listeners_module, "build_listeners", lambda spec: [others, failover])
    listeners_module.close_listeners(False)
    MirrorStreamWriter(json.dumps(SPEC)).abort([None], 3)
    MirrorStreamWriter(json.dumps(SPEC)).abort([None], 4)
    assert lines(metrics, "kmirror_failed_batches_total") == ['kmirror_failed_batches_total{flow="west->east"} 2.0']
    listeners_module.close_listeners(False)
