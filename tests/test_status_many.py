"""`kmirror status` over every flow of a stack or topology, and the flow's error counters from its
metrics endpoint (issue 46). The clusters are stubbed (`flow_status`); the metrics come from the
app's own `FlowMetrics` registry, served over HTTP."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from kmirror_cli.cli import main
from kmirror_cli.commands import status
from kmirror_cli.status_metrics import summarize_metrics
from kmirror_engine.observability.metrics import FlowMetrics

EAST = ["central->east-2", "west-1->east-1", "west-2->east-2"]  # stacks/topology.yaml's flows run in east


def fake_status(states: dict[str, Any]) -> Any:
    """flow_status returning `states[flow id]`: (running, paused), or an exception to raise."""

    def flow_status(spec: Any, stale: float, now: int) -> dict[str, Any]:
        state = states[spec.id]
        if isinstance(state, Exception):
            raise state
        running, paused = state
        return {
            "flow": spec.id,
            "running": running,
            "heartbeat_age_ms": 1500 if running else None,
            "last_copy_age_ms": 2000,
            "newest_checkpoint_age_ms": None,
            "lag": {"orders": 7},
            "lag_total": 7,
            "paused": paused,
            "control": None,
        }

    return flow_status


@pytest.mark.parametrize(
    ("states", "code"),
    [
        ([(True, False), (True, False), (True, False)], 0),
        ([(True, False), (None, False), (True, True)], 3),  # unknown is worse than paused
        ([(True, True), (True, False), (True, False)], 4),
        ([(True, True), (False, False), (None, False)], 1),  # not running is the worst
    ],
)
def test_a_stack_reports_every_flow_it_runs_and_exits_with_the_worst(
    states: list[Any], code: int, monkeypatch: Any, capsys: Any
) -> None:
    monkeypatch.setattr(status, "flow_status", fake_status(dict(zip(EAST, states, strict=True))))
    assert main(["status", "--stack", "east", "--format", "json"]) == code
    out = json.loads(capsys.readouterr().out)
    assert [s["flow"] for s in out] == EAST
    assert [(s["running"], s["paused"]) for s in out] == states


def test_the_table_has_a_row_a_flow_and_an_unreadable_flow_is_an_error_row(monkeypatch: Any, capsys: Any) -> None:
    states = dict(zip(EAST, [(True, True), RuntimeError("east-2 unreachable"), (True, False)], strict=True))
    monkeypatch.setattr(status, "flow_status", fake_status(states))
    assert main(["status", "--stack", "east"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["FLOW", "STATE", "HEARTBEAT", "LAST-COPY", "CHECKPOINT", "LAG"]
    assert lines[1].split() == ["central->east-2", "paused", "1.5s", "2.0s", "-", "7"]
    assert lines[2].split()[:2] == ["west-1->east-1", "ERROR"] and "RuntimeError: east-2 unreachable" in lines[2]
    assert lines[3].split() == ["west-2->east-2", "running", "1.5s", "2.0s", "-", "7"]
    assert lines[4] == "3 flow(s)"


def test_a_topology_alone_reports_all_its_flows(monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.setattr(status, "flow_status", fake_status(dict.fromkeys(ALL, (True, False))))
    assert main(["status", "--topology", "stacks/topology.yaml", "--format", "json"]) == 0
    assert [s["flow"] for s in json.loads(capsys.readouterr().out)] == ALL


ALL = [
    "aws-1->aws-2",
    "central->east-2",
    "central->west-2",
    "dc-old->aws-1",
    "east-1->central",
    "east-2->west-1",
    "east-2->west-2",
    "local-a->local-b",
    "west-1->central",
    "west-1->east-1",
    "west-2->east-2",
]


def test_without_a_flow_or_a_topology_and_with_per_flow_flags_it_is_bad_input(capsys: Any) -> None:
    assert main(["status"]) == 2
    assert "--flow: missing" in capsys.readouterr().err
    assert main(["status", "--stack", "east", "--log", "driver.log"]) == 2
    assert "--log: is for one flow" in capsys.readouterr().err
    assert main(["status", "--stack", "east", "--metrics", "http://127.0.0.1:1/metrics"]) == 2


def app_metrics(flow: str) -> FlowMetrics:
    """The app's registry with some errors of `flow`."""
    metrics = FlowMetrics(flow, out=open("/dev/null", "w"))  # noqa: SIM115 (closed with the test process)
    metrics.observe_batch_failure(3)
    metrics.observe_batch_failure(4)
    metrics.observe_work_failure("checkpoints")
    metrics.observe_work_failure("heartbeats")
    metrics.observe_work_failure("heartbeats")
    return metrics


def test_the_error_counters_of_the_flow_are_read_from_the_apps_metrics_text() -> None:
    summary = summarize_metrics(app_metrics("a->b").text(), "a->b")
    assert summary["failed_batches"] == 2
    assert summary["failover_work_failures"] == {"checkpoints": 1, "heartbeats": 2}
    assert (summary["dead_lettered_records"], summary["skipped_records"]) == (0, {})
    assert isinstance(summary["checkpoint_age_s"], float)
    assert summarize_metrics(app_metrics("a->b").text(), "other->b")["failed_batches"] == 0  # another flow's


def test_status_with_metrics_scrapes_the_endpoint_and_an_unreachable_one_is_reported(
    monkeypatch: Any, capsys: Any
) -> None:
    text = app_metrics("west-1->east-1").text().encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(text)

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(status, "flow_status", fake_status({"west-1->east-1": (True, False)}))
    flow = ["status", "--stack", "east", "--flow", "west-1->east-1", "--format", "json"]
    try:
        assert main([*flow, "--metrics", f"http://127.0.0.1:{server.server_port}/metrics"]) == 0
    finally:
        server.shutdown()
        server.server_close()
    out = json.loads(capsys.readouterr().out)
    assert out["metrics"]["failed_batches"] == 2 and out["metrics"]["failover_work_failures"]["heartbeats"] == 2
    assert main([*flow, "--metrics", f"http://127.0.0.1:{server.server_port}/metrics"]) == 0  # exit unchanged
    error = json.loads(capsys.readouterr().out)["metrics"]["error"]
    assert error.startswith(f"cannot read the metrics at http://127.0.0.1:{server.server_port}/metrics: ")
