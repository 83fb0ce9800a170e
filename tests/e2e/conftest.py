"""Fixtures of the end-to-end tests (the shared ones, clusters and spark, are in tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.e2e.streaming_run import DriverLog


@pytest.fixture
def driver_log(request: pytest.FixtureRequest, capfd: pytest.CaptureFixture[str]) -> DriverLog:
    """The test's view of the driver's log (tests/e2e/streaming_run.py)."""
    return DriverLog(request, capfd)
