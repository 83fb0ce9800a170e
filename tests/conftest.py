"""Shared fixtures: two Kafka clusters (Apache Kafka by default, see tests/brokers.py) and one SparkSession.

Point the suite at brokers run elsewhere with KMIRROR_TEST_SOURCE_BOOTSTRAP /
KMIRROR_TEST_TARGET_BOOTSTRAP; otherwise two local single-node clusters of the kind
KMIRROR_TEST_BROKER names start once per session.
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


_FAULT_LOG: Any = None  # kept open for the whole session: faulthandler writes to its descriptor


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """With KMIRROR_FAULT_LOG set (`make test`), a crash of the test process (a native fault)
    dumps every thread's Python stack into that file, where scripts/crash-report.sh finds it
    (after pytest's own faulthandler set-up, which this replaces)."""
    global _FAULT_LOG
    path = os.environ.get("KMIRROR_FAULT_LOG")
    if path and _FAULT_LOG is None:
        import faulthandler

        _FAULT_LOG = open(path, "w")  # noqa: SIM115 - open until the process ends
        faulthandler.enable(file=_FAULT_LOG, all_threads=True)


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    """The test now running, next to the fault log (the crash report names it)."""
    if _FAULT_LOG is not None:
        with open(_FAULT_LOG.name + ".current", "w") as out:
            out.write(nodeid + "\n")


@dataclass(frozen=True)
class Clusters:
    source: str
    target: str
    source_broker: Any = None  # KafkaBroker/LocalBroker when started here (fault tests pause or kill it)
    target_broker: Any = None


@contextmanager
def cluster_pair(name: str) -> Iterator[Clusters]:
    """A source and a target broker named `name`-source/-target, or the external pair the
    environment names (KMIRROR_TEST_SOURCE_BOOTSTRAP / KMIRROR_TEST_TARGET_BOOTSTRAP)."""
    source = os.environ.get("KMIRROR_TEST_SOURCE_BOOTSTRAP")
    target = os.environ.get("KMIRROR_TEST_TARGET_BOOTSTRAP")
    if source and target:
        yield Clusters(source, target)
        return
    from tests.brokers import new_broker

    with new_broker(f"{name}-source") as src, new_broker(f"{name}-target") as dst:
        yield Clusters(src.bootstrap_servers, dst.bootstrap_servers, src, dst)


@pytest.fixture(scope="session")
def clusters() -> Iterator[Clusters]:
    with cluster_pair("test") as pair:
        yield pair


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests of what only Apache Kafka shows are deselected on tansu, and tests of tansu's own
    gaps on Apache Kafka (reported as deselected, never as passed)."""
    from tests.brokers import IS_TANSU

    other = "real_kafka" if IS_TANSU else "tansu_only"
    dropped = [item for item in items if item.get_closest_marker(other) is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item.get_closest_marker(other) is None]


_HEARTBEATS_AT_FIRST_SIGHT: dict[str, set[str]] = {}  # bootstrap -> heartbeats topics its first test found


def _heartbeats_topics(admin: Any) -> set[str]:
    names = admin.list_topics(timeout=10).topics
    return {n for n in names if n == "heartbeats" or n.endswith(".heartbeats")}


@pytest.fixture(autouse=True)
def _heartbeats_stay_in_their_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Heartbeats topics a test's flows created on the shared clusters are deleted when it ends.

    Every flow mirrors every heartbeats topic of its source whatever its patterns (MM2's rule), and
    each test names its clusters afresh, so without this each test would copy every earlier test's
    heartbeats again under a longer name: hundreds of topics and ~100k records by the end of a session,
    work that grew with the session and bent every later test's batch sizes and timings. A clean-up
    that fails (a broker a fault test left down) is retried after the next test on that cluster."""
    if "clusters" not in request.fixturenames:
        yield
        return
    from confluent_kafka.admin import AdminClient

    pair = request.getfixturevalue("clusters")
    bootstraps = [b for b in (getattr(pair, "source", None), getattr(pair, "target", None)) if isinstance(b, str)]
    if len(bootstraps) != 2:  # a module's own secured clusters, not a plain pair: left alone
        yield
        return
    admins = {b: AdminClient({"bootstrap.servers": b}) for b in bootstraps}
    for bootstrap, admin in admins.items():
        if bootstrap not in _HEARTBEATS_AT_FIRST_SIGHT:
            with contextlib.suppress(Exception):  # unreachable now: its first reachable teardown sets it
                _HEARTBEATS_AT_FIRST_SIGHT[bootstrap] = _heartbeats_topics(admin)
    yield
    for bootstrap, admin in admins.items():
        try:
            found = _heartbeats_topics(admin)
            created = sorted(found - _HEARTBEATS_AT_FIRST_SIGHT.setdefault(bootstrap, found))
            if created:
                for future in admin.delete_topics(created, operation_timeout=10).values():
                    future.result(timeout=15)
        except Exception as exc:
            print(f"heartbeats clean-up after {request.node.nodeid}: {exc}", file=sys.stderr)


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


@pytest.fixture(params=["python", "native"])
def copy_loop(request: pytest.FixtureRequest) -> str:
    """Each copy loop in turn (flow option `copy_loop`). The native one needs its module: where
    scripts/build-native.sh built it for this venv (`make setup`/`make test`) a missing or
    broken module fails the test; elsewhere (no librdkafka headers) it is skipped, not passed."""
    return require_copy_loop(str(request.param))


def require_copy_loop(name: str) -> str:
    """`name` when that loop can run here (see the `copy_loop` fixture), else fail or skip."""
    if name == "native":
        from kmirror_engine.copying.native_copy import built_for_this_python, native_module

        if native_module() is None:
            if built_for_this_python():
                pytest.fail(f"the native copy loop was built for {sys.prefix} but does not load")
            pytest.skip("the native copy loop is not built for this Python (scripts/build-native.sh)")
    return name


def pytest_ignore_collect(collection_path: Any, config: pytest.Config) -> bool | None:
    """Leg 2 (`-m spark40`) runs in a venv with only the app's dependencies (no pulumi, boto3):
    there, test modules that do not carry the spark40 marker are not even imported."""
    if config.getoption("markexpr", "") != "spark40":
        return None
    path = str(collection_path)
    if path.endswith(".py") and collection_path.name.startswith("test_"):
        return "pytest.mark.spark40" not in collection_path.read_text()
    return None
