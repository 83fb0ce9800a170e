"""Shared fixtures: two Kafka clusters (tansu, or external via env) and one SparkSession.

Point the suite at real Kafka with KMIRROR_TEST_SOURCE_BOOTSTRAP / KMIRROR_TEST_TARGET_BOOTSTRAP;
otherwise two local tansu brokers start once per session.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@dataclass(frozen=True)
class Clusters:
    source: str
    target: str
    source_broker: object | None = None  # LocalBroker when started here (fault tests pause it)
    target_broker: object | None = None


@pytest.fixture(scope="session")
def clusters() -> Iterator[Clusters]:
    source = os.environ.get("KMIRROR_TEST_SOURCE_BOOTSTRAP")
    target = os.environ.get("KMIRROR_TEST_TARGET_BOOTSTRAP")
    if source and target:
        yield Clusters(source, target)
        return
    from kmirror.local_brokers import LocalBroker

    with LocalBroker("test-source") as src, LocalBroker("test-target") as dst:
        yield Clusters(src.bootstrap_servers, dst.bootstrap_servers, src, dst)


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """One local SparkSession for the whole test session (~6 s to start)."""
    from spark_app.session import build_session

    session = build_session(master="local[2]", app_name="kmirror-tests")
    yield session
    session.stop()


@pytest.fixture
def unique() -> str:
    """A short unique suffix for topic, group and flow names, so tests never share state."""
    return uuid.uuid4().hex[:8]
