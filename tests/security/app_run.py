"""Test-only: the app (`python -m spark_app --once`, a new process) on a flow whose source is secured."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.kafka_helpers import flow_raw


def run_once(
    tmp_path: Path, source: tuple[str, str], source_config: dict[str, Any], target: tuple[str, str]
) -> tuple[subprocess.CompletedProcess[str], float]:
    """A flow of every topic from (alias, bootstrap servers) `source`, with that client config, to
    `target`, written to tmp_path/flow.json and run once; what the process did and its seconds."""
    servers = SimpleNamespace(source=source[1], target=target[1])
    raw = flow_raw(servers, source[0], target[0], [".*"], tmp_path / "checkpoint")
    raw["source"]["config"] = source_config
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps(raw))
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "spark_app", "--flow", str(flow), "--once"], capture_output=True, text=True, timeout=120
    )
    return done, time.monotonic() - started
