"""Fixtures of the end-to-end tests (the shared ones, clusters and spark, are in tests/conftest.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.e2e.streaming_run import DriverLog


@pytest.fixture
def driver_log(request: pytest.FixtureRequest, capfd: pytest.CaptureFixture[str]) -> DriverLog:
    """The test's view of the driver's log (tests/e2e/streaming_run.py)."""
    from tests.e2e.streaming_run import DriverLog

    return DriverLog(request, capfd)
