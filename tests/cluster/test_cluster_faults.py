"""Faults of a real cluster (tests/cluster/standalone.py): an executor JVM killed with -9 mid-copy,
a worker lost for good mid-stream, the driver killed and restarted. Every test records its figures
with `report()` (printed; appended to $KMIRROR_FAULT_FIGURES when set), as tests/e2e/test_faults.py does."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from tests.cluster.conftest import ClusterApp
from tests.cluster.standalone import StandaloneCluster
from tests.e2e.fault_helpers import (
    Clock,
    committed,
    expected_values,
    flow_spec,
    group_of,
    produce_values,
    report,
    target_values,
    wait_mirrored,
    wait_until,
)
from tests.kafka_helpers import create_topic

# pytest-timeout's 600 s counts the session's cluster start (~1 min in CI, 5 min under a load of ~30)
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.cluster, pytest.mark.spark40, pytest.mark.timeout(1200)]
# a cluster app starts its driver and two executor JVMs (~30 s on an idle 2-core box; minutes under load)
FIRST_BATCH_TIMEOUT_S = 480.0  # a hang detector: under a load of ~30 on 2 cores a driver took 3+ min to its query
RATE = 400  # records/s of the whole flow: the executor kill's batch of 6000 records takes ~15 s


def first_durable_batch(app: ClusterApp, flow: dict[str, Any], source: str, topic: str, partitions: int) -> None:
    wait_until(
        "a first durable batch",
        lambda: any(o > 0 for o in committed(source, group_of(flow), topic, partitions).values()),
        FIRST_BATCH_TIMEOUT_S,
        app,
    )


def running_executors(cluster: StandaloneCluster, app: ClusterApp) -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    wait_until(
        "an executor on each worker",
        lambda: len(found.update(cluster.executor_pids()) or {w: p for w, p in found.items() if p}) >= 2,
        60,
        app,
    )
    return found


def target_records(bootstrap: str, topic: str, partitions: int) -> int:
    """Records in the target topic's log (aborted transactional ones too); 0 before it exists."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cluster-watcher", "log_level": 0})
    try:
        if topic not in consumer.list_topics(timeout=10).topics:
            return 0
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions))
    except KafkaException:
        return 0
    finally:
        consumer.close()


def mid_copy_victim(
    cluster: StandaloneCluster, app: ClusterApp, target: str, remote: str, partitions: int, total: int
) -> tuple[int, int, list[str]]:
    """Waits for the kill point: the target holds some of the batch's records but not all, and an
    executor JVM runs a task. Returns (worker index, executor pid, its running tasks)."""
    found: list[tuple[int, int, list[str]]] = []

    def mid_copy() -> bool:
        if not 0 < target_records(target, remote, partitions) < total:
            return False
        busy = [(w, pid, tasks) for w, pids in cluster.running_tasks().items() for pid, tasks in pids.items() if tasks]
        found[:] = busy[-1:]  # the second worker's executor when both copy
        return bool(found)

    wait_until("an executor copying, part of the batch on the target", mid_copy, FIRST_BATCH_TIMEOUT_S, app)
    return found[0]


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
def test_executor_killed_mid_copy_is_rescheduled_on_the_other_worker_and_loses_nothing(
    clusters: Any,
    unique: str,
    tmp_path: Path,
    cluster_app: Callable[..., ClusterApp],
    standalone: StandaloneCluster,
    exactly_once: bool,
) -> None:
    """kill -9 of one executor JVM while its task copies: one batch of every record, paced at the
    flow's rate limit for ~15 s (a task per executor, each at its share), killed when the target
    holds part of the batch and the victim's stderr shows a task started and not finished. Spark
    retries that task (its next attempt, on an executor still alive or the worker's replacement);
    nothing is lost; the retried range's records count as duplicates (at-least-once), none of which
    a read_committed reader sees under exactly-once. The flow's rate limit holds across the executors."""
    topic, remote, partitions, count = f"exk-{unique}", f"west.exk-{unique}", 4, 1500
    total = partitions * count
    create_topic(clusters.source, topic, partitions)
    ends = produce_values(clusters.source, topic, partitions, count, "a")
    # one batch (the fences too), at the flow's rate limit
    paced = {"copy_loop": "python", "max_records_per_second": RATE, "max_records_per_trigger": total + partitions}
    flow = flow_spec(unique, clusters.source, clusters.target, [topic], tmp_path, exactly_once=exactly_once, **paced)
    clock = Clock()
    app = cluster_app(flow).start()
    worker, victim, tasks = mid_copy_victim(standalone, app, clusters.target, remote, partitions, total)
    copy_started = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    on_target = target_records(clusters.target, remote, partitions)
    clock.lap("copying, then the kill")
    offsets = committed(clusters.source, group_of(flow), topic, partitions)  # -1001: none yet
    assert not any(o > 0 for o in offsets.values()), f"the batch committed before the kill: {offsets}"
    assert on_target < total, f"the batch was on the target before the kill ({on_target} of {total})"
    wait_mirrored(app, clusters.source, flow, topic, ends, timeout_s=240)
    copying_s = time.monotonic() - copy_started
    clock.lap("caught up after the kill")
    assert app.stop() == 0, app.log()[-3000:]
    log = app.log()
    assert "Lost executor" in log, log[-3000:]  # the driver saw the executor die...
    assert "ExecutorLostFailure" in log, log[-3000:]  # ...while its task ran
    executors = standalone.executor_log()
    for task in tasks:  # "0.0 in stage 3.0" ran again as attempt 0.1 on another executor
        index, attempt, stage = re.fullmatch(r"(\d+)\.(\d+) in stage (\S+)", task).groups()  # type: ignore[union-attr]
        retry = f"Running task {index}.{int(attempt) + 1} in stage {stage}"
        assert retry in executors, (task, executors[-3000:])
    sent = expected_values(partitions, count, "a")
    got = target_values(clusters.target, remote, partitions, read_committed=exactly_once)
    written = target_values(clusters.target, remote, partitions) if exactly_once else got
    figures = report(
        f"cluster executor kill -9 ({'exactly-once' if exactly_once else 'at-least-once'})",
        sent,
        got,
        written_with_aborted=len(written),
        seconds=clock.laps,
    )
    print(f"killed executor {victim} of worker {worker} running {tasks} with {on_target} of {total} on the target")
    assert figures.missing == 0
    if exactly_once:
        assert figures.duplicates == 0
    # the limit holds over the cluster: every record written after the kill point (duplicates and
    # aborted ones too) took at least its share of the flow's rate, though two executors copied
    assert (len(written) - on_target) / copying_s <= RATE * 1.3, (len(written), on_target, copying_s)


def test_worker_lost_for_good_then_driver_killed_and_restarted_loses_nothing(
    clusters: Any, unique: str, tmp_path: Path, cluster_app: Callable[..., ClusterApp], standalone: StandaloneCluster
) -> None:
    """A worker killed with -9 (its executor with it) mid-stream: the flow keeps mirroring on the
    other worker. Then the driver is killed with -9 and started again: it resumes from its checkpoint."""
    topic, remote, partitions = f"wl-{unique}", f"west.wl-{unique}", 4
    create_topic(clusters.source, topic, partitions)
    produce_values(clusters.source, topic, partitions, 1500, "a")
    paced = {"copy_loop": "python", "max_records_per_second": 2000, "max_records_per_trigger": 1000}
    flow = flow_spec(unique, clusters.source, clusters.target, [topic], tmp_path, **paced)
    clock = Clock()
    app = cluster_app(flow).start()
    first_durable_batch(app, flow, clusters.source, topic, partitions)
    running_executors(standalone, app)
    clock.lap("first batch")
    standalone.worker_daemons[1].kill9()  # for good: the worker and its executor
    second = produce_values(clusters.source, topic, partitions, 500, "b")
    wait_mirrored(app, clusters.source, flow, topic, second, timeout_s=240)
    clock.lap("mirrored on one worker")
    assert standalone.alive_workers() == 1 and not standalone.worker_daemons[1].alive

    app.kill9()  # the driver: spark-submit's JVM and the app's Python
    third = produce_values(clusters.source, topic, partitions, 300, "c")
    app.start()
    wait_mirrored(app, clusters.source, flow, topic, third, timeout_s=240)
    clock.lap("resumed after the driver's restart")
    assert app.stop() == 0, app.log()[-3000:]
    sent = [
        *expected_values(partitions, 1500, "a"),
        *expected_values(partitions, 500, "b"),
        *expected_values(partitions, 300, "c"),
    ]
    got = target_values(clusters.target, remote, partitions)
    figures = report("cluster worker lost, then driver kill -9 and restart", sent, got, seconds=clock.laps)
    assert figures.missing == 0
    run2 = app.log().split("===== run 2")[-1]
    assert "Traceback" not in run2, run2[-3000:]
