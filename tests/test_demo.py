"""`kmirror demo` end to end, as a user runs it from a clean clone."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.e2e


def test_demo_mirrors_every_record_and_stops_what_it_started() -> None:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "kmirror.cli", "demo"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "140"},
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "every record arrived" in result.stdout
    for line in ("demo.orders", "demo.payments"):
        row = next(r for r in result.stdout.splitlines() if f"│ {line} " in r)
        assert "caught up" in row
    assert "internal: never mirrored" in result.stdout and "not selected by demo.*" in result.stdout
    assert time.monotonic() - started < 120
