"""`kmirror demo`: its flow comes from the planner, and it works end to end as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kmirror.errors import KmirrorError
from kmirror.flow.spec import parse_flow_spec
from kmirror_cli.commands.demo import demo_flow_spec


def test_demo_flow_is_the_planned_local_flow_of_the_example_topology(tmp_path: Path) -> None:
    raw = demo_flow_spec(str(tmp_path / "ckpt"))
    spec = parse_flow_spec(raw)
    assert (spec.id, raw["topology"], spec.topics) == ("local-a->local-b", "local", ("demo.*",))
    assert spec.checkpoint_location == f"{tmp_path / 'ckpt'}/local-a-to-local-b"
    assert spec.topic_selection.matches("demo.orders") and not spec.topic_selection.matches("demo.audit-internal")


def test_demo_refuses_a_missing_topology_before_starting_anything(tmp_path: Path) -> None:
    missing = tmp_path / "topology.yaml"
    with pytest.raises(KmirrorError, match=r"example topology .*topology\.yaml' is missing"):
        demo_flow_spec(str(tmp_path), missing)


@pytest.mark.e2e
def test_demo_mirrors_every_record_and_stops_what_it_started() -> None:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "kmirror_cli.cli", "demo"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "140"},
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "planned flow local-a->local-b of topology 'local' from topology.yaml" in result.stdout
    assert "every record arrived" in result.stdout
    for line in ("demo.orders", "demo.payments"):
        row = next(r for r in result.stdout.splitlines() if f"│ {line} " in r)
        assert "caught up" in row
    assert "internal: never mirrored" in result.stdout and "not selected by demo.*" in result.stdout
    flow_line = next(r for r in result.stdout.splitlines() if "running the Spark app (flow " in r)
    flow_path = Path(flow_line.split("(flow ")[1].split(",")[0])
    assert json.loads(flow_path.read_text())["source"]["bootstrap_servers"].startswith("127.0.0.1:")
    assert time.monotonic() - started < 120
