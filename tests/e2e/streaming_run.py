"""A streaming flow run in a thread of the test process, and the driver's log it writes: the
e2e tests of commands that act on a running flow (pause/resume, the topology's commands) and of a
flow that keeps running (topics added, a planning process killed)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from spark_app.main import run_flow
from tests.kafka_helpers import consume_all


class StreamingRun:
    """`run_flow(spec)` streaming on the session's Spark in a daemon thread; what it raised is kept
    in `failures` for the assertions."""

    def __init__(self, spec: Any, spark: Any) -> None:
        self.stop, self.failures = threading.Event(), list[Exception]()
        self.thread = threading.Thread(target=self._run, args=(spec, spark), daemon=True)

    def _run(self, spec: Any, spark: Any) -> None:
        try:
            run_flow(spec, spark=spark, once=False, stop=self.stop)
        except Exception as exc:  # reported by the assertions
            self.failures.append(exc)

    def start(self) -> None:
        self.thread.start()

    def wait_for_first_batch(self, bootstrap: str, topic: str, partitions: int, records: int) -> None:
        """Until `records` records reached `topic` (of `partitions`) on `bootstrap`: the first batch,
        as the query starts (minutes on a loaded box)."""
        consume_all(bootstrap, topic, partitions, timeout_s=300, expect=records)

    def end(self, timeout_s: float = 120) -> None:
        """Stop after the current batch and wait for the thread."""
        self.stop.set()
        self.thread.join(timeout=timeout_s)


class DriverLog:
    """What the mirror writes to stderr. The planning process is a child of Spark's JVM, which the
    session's `spark` fixture started under pytest's global capture: its lines land there, not in
    this test's capfd (read both). Needs pytest's default fd capture (not `-s`)."""

    def __init__(self, request: pytest.FixtureRequest, capfd: pytest.CaptureFixture[str]) -> None:
        self.manager, self.capfd, self.text = request.config.pluginmanager.getplugin("capturemanager"), capfd, ""

    def read(self) -> str:
        self.text += self.capfd.readouterr().err
        if self.manager is not None and self.manager.is_globally_capturing():
            self.text += self.manager.read_global_capture().err
        return self.text

    def wait_for(self, needle: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in self.read().splitlines():
                if needle in line:
                    return line
            time.sleep(0.2)
        raise AssertionError(f"no line with {needle!r} in the driver's log within {timeout_s:g} s")
