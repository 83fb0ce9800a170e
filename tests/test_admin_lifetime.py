"""An admin client's last reference is never dropped on librdkafka's own thread.

librdkafka completes admin futures on the client's background thread. When a caller stops
waiting (`future.result(timeout=...)` timed out against a frozen broker) and returns, anything
the futures' done-callbacks hold is released on that thread once the broker answers; if that
is the client, `rd_kafka_destroy()` runs there and librdkafka aborts the whole process:

    Application bug: rd_kafka_destroy() called from librdkafka owned thread

That was CI's "Python worker exited unexpectedly (crashed)" in
tests/e2e/test_faults.py::test_broker_outages_...[native]: a writer task re-read the target
topics' max.message.bytes (`record_limits.topic_limits`, every 60 s) while the target was frozen,
gave up after 10 s, and the worker aborted when the target came back.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import weakref
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from kmirror.flow.spec import ClusterEndpoint
from kmirror_engine.clients.factory import RefreshingAdmin

pytestmark = pytest.mark.spark40  # also in leg 2 (pyspark 4.0.2 / Python 3.10)

# The CI scenario, alone: the answer to a describe the caller gave up on arrives after resume.
FROZEN_TARGET_SCRIPT = textwrap.dedent(
    """
    import time
    from confluent_kafka.admin import AdminClient, NewTopic
    from kmirror.flow.spec import ClusterEndpoint
    from kmirror_cli.local_brokers import LocalBroker
    from kmirror_engine.clients.factory import admin_client
    from kmirror_engine.copying.record_limits import topic_limits

    with LocalBroker("admin-lifetime") as broker:
        setup = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        setup.create_topics([NewTopic("t", 1)])["t"].result(30)
        endpoint = ClusterEndpoint("east", broker.bootstrap_servers)
        topic_limits(admin_client(endpoint), ["t"])  # connected, answered
        broker.pause()
        try:
            print("frozen:", topic_limits(admin_client(endpoint), ["t"], timeout_s=1.0), flush=True)
        finally:
            broker.resume()
        time.sleep(4)  # the broker answers the abandoned describe now
        print("still running", flush=True)
    """
)


def test_a_describe_abandoned_on_a_frozen_broker_does_not_abort_the_process_when_it_is_answered() -> None:
    run = subprocess.run([sys.executable, "-c", FROZEN_TARGET_SCRIPT], capture_output=True, text=True, timeout=120)
    assert "frozen: {'t': None}" in run.stdout, (run.stdout, run.stderr[-2000:])
    assert run.returncode == 0 and "still running" in run.stdout, (run.returncode, run.stderr[-2000:])
    assert "librdkafka owned thread" not in run.stderr


class PendingAdmin:
    """An admin client whose futures the test completes, as librdkafka's thread would."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.futures: list[Future[Any]] = []

    def describe_configs(self, resources: list[str]) -> dict[str, Future[Any]]:
        out: dict[str, Future[Any]] = {name: Future() for name in resources}
        self.futures.extend(out.values())
        return out


def test_pending_futures_hold_neither_the_proxy_nor_its_client() -> None:
    gc.disable()  # reference counting alone must free them: a cycle could be collected on any thread
    try:
        admin = RefreshingAdmin(ClusterEndpoint("east", "127.0.0.1:9"), factory=PendingAdmin)
        futures = admin.describe_configs(["t"])
        client = weakref.ref(admin.current())
        proxy = weakref.ref(admin)
        del admin
        assert proxy() is None and client() is None, "a pending future keeps the admin client alive"
        futures["t"].set_result("late answer")  # completing it later touches nothing freed
    finally:
        gc.enable()


def test_an_authentication_failure_seen_in_a_future_still_rebuilds_the_client() -> None:
    admin = RefreshingAdmin(ClusterEndpoint("east", "127.0.0.1:9"), factory=PendingAdmin)
    futures = admin.describe_configs(["t"])
    first = admin.current()
    futures["t"].set_exception(KafkaException(KafkaError(KafkaError._AUTHENTICATION, "refused")))
    assert admin.current() is not first and admin.rebuilds == 1
    futures = admin.describe_configs(["t"])
    futures["t"].set_exception(KafkaException(KafkaError(KafkaError._TIMED_OUT, "slow")))
    assert admin.rebuilds == 1  # other failures keep the client
