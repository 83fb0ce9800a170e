"""Fault injection against the real app: `python -m spark_app` as a subprocess (so it can be
killed), real brokers, loopback only, every wait bounded.

Tests that freeze a broker (SIGSTOP) start their own broker pair (tests/brokers.py), so the session brokers
other tests use are never frozen; the others use the `clusters` fixture (external Kafka works).
Every test records its figures (records sent, on the target, duplicates) with `report()`:
printed, and appended as JSON lines to $KMIRROR_FAULT_FIGURES when set (docs/reliability.md).
Helpers: tests/e2e/fault_helpers.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from kmirror_cli.local_brokers import free_port
from tests.brokers import new_broker
from tests.conftest import require_copy_loop
from tests.e2e.fault_helpers import (
    APP_START_TIMEOUT_S,
    Clock,
    MirrorApp,
    app_factory,
    committed,
    expected_values,
    flow_spec,
    group_of,
    planned_offsets,
    produce_values,
    read_all,
    report,
    target_values,
    uncommitted_batches,
    wait_mirrored,
    wait_until,
)
from tests.kafka_helpers import add_fences, create_topic, produce

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.spark40]
__all__ = ["app_factory"]  # a fixture, used by name


# ---------- crash ----------


@pytest.mark.parametrize(
    ("exactly_once", "loop"),
    [(False, "python"), (False, "native"), (True, "python")],
    ids=["at-least-once-python", "at-least-once-native", "exactly-once"],
)
def test_kill_9_mid_stream_then_restart_from_the_checkpoint_loses_nothing(
    clusters: Any, unique: str, tmp_path: Path, app_factory: Callable[..., MirrorApp], exactly_once: bool, loop: str
) -> None:
    """kill -9 right after a batch's writes were acknowledged (EOS: its transaction committed),
    before Spark's commit log recorded it: the restart replays that batch. At-least-once counts
    the duplicates; exactly-once must show none to read_committed readers."""
    topic, remote, partitions = f"crash-{unique}", f"west.crash-{unique}", 2
    create_topic(clusters.source, topic, partitions)
    fences = produce_values(clusters.source, topic, partitions, 1500, "a")  # each partition's fence offset
    copy_loop = require_copy_loop(loop)
    flow = flow_spec(
        unique, clusters.source, clusters.target, [topic], tmp_path, exactly_once=exactly_once, copy_loop=copy_loop
    )
    clock = Clock()
    app = app_factory(flow).start()
    eos_group = "kmirror-eos-" + flow["id"].replace("->", "-to-")
    # the first sign that a batch's writes are durable: the EOS offsets on the target, or the
    # source group commit (at-least-once; written by the sink commit, before Spark's commit log)
    group, bootstrap, watched = (
        (eos_group, clusters.target, remote) if exactly_once else (group_of(flow), clusters.source, topic)
    )
    wait_until(
        "a first durable batch",
        lambda: any(o > 0 for o in committed(bootstrap, group, watched, partitions).values()),
        APP_START_TIMEOUT_S,
        app,
    )
    clock.lap("first batch")
    # poll fast with one consumer: the window before Spark's commit log is a fraction of a second
    watcher = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    watched_tps = [TopicPartition(watched, p) for p in range(partitions)]
    try:
        before = [tp.offset for tp in watcher.committed(watched_tps, timeout=10)]
        deadline = time.monotonic() + 30
        while [tp.offset for tp in watcher.committed(watched_tps, timeout=10)] == before:
            assert time.monotonic() < deadline and app.alive, app.log()[-3000:]
            time.sleep(0.01)
        app.kill9()
    finally:
        watcher.close()
    clock.lap("killed")
    replayed = uncommitted_batches(tmp_path / "checkpoint")
    at_kill = committed(bootstrap, group, watched, partitions)
    second = produce_values(clusters.source, topic, partitions, 300, "b")  # produced while the mirror is down

    app.start()
    # the wait includes a whole app start (JVM, session, query): as long as the first start's, not 90 s
    # (a CI-like run at load 13 restarted for over 90 s without a line)
    wait_mirrored(app, clusters.source, flow, topic, second, timeout_s=APP_START_TIMEOUT_S)
    clock.lap("caught up after restart")
    assert app.stop() == 0, app.log()[-3000:]
    clock.lap("stopped")

    sent = expected_values(partitions, 1500, "a") + expected_values(partitions, 300, "b")
    got = target_values(clusters.target, remote, partitions, read_committed=True)
    restart_log = app.log().split("===== run 2 =====")[-1]
    # only this test's topic: MM2 mirrors every heartbeats topic, and other tests leave some on the source
    replay_lines = [
        r
        for r in (
            json.loads(line.split("kmirror replay ", 1)[1])
            for line in restart_log.splitlines()
            if line.startswith("kmirror replay ")
        )
        if r["topic"] == topic
    ]
    reported = sum(r["possible_duplicates"] for r in replay_lines if not r["exactly_once"])
    # a replayed range can hold the fence record after the data: copied twice, but not a data value
    fences_replayed = sum(
        1
        for r in replay_lines
        if not r["exactly_once"] and r["first_offset"] <= fences[r["partition"]] < r["delivered_to"]
    )
    figures = report(
        f"crash kill -9 ({'exactly-once' if exactly_once else 'at-least-once'})",
        sent,
        got,
        committed_at_kill=at_kill,
        replayed_batches=replayed,
        app_reported_duplicates=reported,
        seconds=clock.laps,
    )
    # the app's own count of replayed, already delivered records is what the target shows
    # (the kill follows the source group commit of a batch; a batch in flight at a crash can add
    # duplicates the app cannot see: up to max_records_per_trigger)
    assert reported - fences_replayed == figures.duplicates, (reported, fences_replayed, figures, replay_lines)
    if not exactly_once:
        assert bool(replay_lines) == bool(replayed), (replay_lines, replayed)
    assert figures.missing == 0
    if exactly_once:
        assert figures.duplicates == 0
    runs = app.log().split("===== run 2 =====")
    assert len(runs) == 2 and "Traceback" not in runs[1], runs[-1][-3000:]
    if exactly_once and replayed:
        # Each writer task has its own transaction. Where the kill followed the commit of at least
        # one of the replayed batch's transactions (its EOS offsets at the kill lie past the batch's
        # start), that task found its offsets committed on the target and wrote nothing again (a
        # task whose transaction had not committed copies its share again, which is correct and
        # adds no duplicate, asserted above). Where Spark was quicker than the watcher (the commit
        # log recorded the batch whose offsets it saw, and the next one was planned but none of its
        # transactions committed: seen once in ~20 runs), the replayed batch is copied whole.
        first_after = json.loads(runs[1].split("kmirror progress ", 1)[1].splitlines()[0])
        assert first_after["batch"] == replayed[0], first_after
        start = planned_offsets(tmp_path / "checkpoint", replayed[0] - 1, topic)
        end = planned_offsets(tmp_path / "checkpoint", replayed[0], topic)
        if any(at_kill.get(p, 0) > start.get(p, 0) for p in range(partitions)):
            assert first_after["records"] < flow["max_records_per_trigger"], (first_after, start, at_kill)
        else:
            assert first_after["records"] == sum(end[p] - start.get(p, 0) for p in end), (first_after, start, end)


# ---------- unreachable cluster, broker outages ----------


def test_unreachable_target_with_once_exits_non_zero_in_bounded_time_naming_it(
    clusters: Any, unique: str, tmp_path: Path, app_factory: Callable[..., MirrorApp]
) -> None:
    address = f"127.0.0.1:{free_port()}"
    flow = flow_spec(unique, clusters.source, address, [f"never-{unique}"], tmp_path)
    app = app_factory(flow)
    started = time.monotonic()
    code = app.start("--once").wait(timeout_s=60)
    elapsed = time.monotonic() - started
    assert code == 1 and elapsed < 45, (code, elapsed)
    assert f"cluster 'east' ({address})" in app.log() and "Traceback" not in app.log(), app.log()[-2000:]
    report("unreachable target at start (--once)", [], [], exit_code=code, seconds=round(elapsed, 1))


def test_broker_outages_unreachable_at_start_then_target_then_source_frozen(
    unique: str, tmp_path: Path, app_factory: Callable[..., MirrorApp], copy_loop: str
) -> None:
    """One streaming run through three faults (one Spark start keeps the suite fast):
    1. the target is not up when the app starts: it retries with backoff and says so, then mirrors;
    2. the target is frozen (SIGSTOP) for 20 s mid-stream, then resumed;
    3. the source is frozen for 20 s mid-stream, then resumed.
    After each: everything sent so far is mirrored, the app never exited."""
    clock = Clock()
    topic, remote, partitions = f"outage-{unique}", f"west.outage-{unique}", 2
    target_port = free_port()
    with new_broker(f"outage-src-{unique}", freezes=True) as src:
        create_topic(src.bootstrap_servers, topic, partitions)
        ends = produce_values(src.bootstrap_servers, topic, partitions, 500, "a")
        flow = flow_spec(
            unique, src.bootstrap_servers, f"127.0.0.1:{target_port}", [topic], tmp_path, copy_loop=copy_loop
        )
        app = app_factory(flow).start()
        wait_until("a retry report", lambda: "retrying in" in app.log(), 60, app)
        clock.lap("unreachable target reported")
        retry_line = next(line for line in app.log().splitlines() if "retrying in" in line)
        assert f"cluster 'east' (127.0.0.1:{target_port})" in retry_line, retry_line
        with new_broker(f"outage-dst-{unique}", freezes=True, port=target_port) as dst:
            wait_mirrored(app, src.bootstrap_servers, flow, topic, ends, timeout_s=APP_START_TIMEOUT_S)
            clock.lap("mirrored once the target came up")
            sent = expected_values(partitions, 500, "a")
            report(
                "unreachable target at start (streaming)",
                sent,
                target_values(dst.bootstrap_servers, remote, partitions),
                seconds=dict(clock.laps),
            )

            for phase, frozen in (("target", dst), ("source", src)):
                tag = f"{phase[0]}"
                frozen.pause()
                try:
                    if phase == "target":
                        ends = produce_values(src.bootstrap_servers, topic, partitions, 500, tag)
                    time.sleep(20)
                    assert app.alive, app.log()[-3000:]
                finally:
                    frozen.resume()
                clock.lap(f"{phase} frozen")
                if phase == "source":
                    ends = produce_values(src.bootstrap_servers, topic, partitions, 500, tag)
                sent += expected_values(partitions, 500, tag)
                recovered = wait_mirrored(app, src.bootstrap_servers, flow, topic, ends, timeout_s=120)
                clock.lap(f"recovered from {phase} outage")
                got = target_values(dst.bootstrap_servers, remote, partitions)
                figures = report(f"{phase} frozen 20 s (SIGSTOP/SIGCONT)", sent, got, recovery_s=round(recovered, 1))
                assert figures.missing == 0
            assert app.stop() == 0, app.log()[-3000:]
    log = app.log()
    assert "Traceback" not in log, log[-3000:]
    assert log.count("===== run") == 1  # one process all along: no crash loop


# ---------- topology changes under load ----------


def test_topics_added_and_deleted_under_load_are_picked_up_or_reported(
    clusters: Any, unique: str, tmp_path: Path, app_factory: Callable[..., MirrorApp]
) -> None:
    """A topic deleted on the source while it still has a backlog, another created and written
    to while the mirror runs, then a third: no crash, no restart, the new topics mirrored
    completely, the deletion reported. `fail_on_data_loss: false`: the deletion may land while a
    task copies the doomed topic's planned range, which is data loss by the flag's rule (on, the
    default: DataLossError, tests/test_deleted_sources.py; a CI run once deleted it mid-copy);
    off, the range is dropped, reported, and the task's other ranges copied. (Partition growth:
    tests/test_fault_logic.py, with fakes: tansu has no CreatePartitions.)"""
    prefix, partitions = f"topo-{unique}", 2
    doomed, added, late = f"{prefix}-a", f"{prefix}-b", f"{prefix}-c"
    create_topic(clusters.source, doomed, partitions)
    produce_values(clusters.source, doomed, partitions, 3000, "a")
    flow = flow_spec(unique, clusters.source, clusters.target, [f"{prefix}-.*"], tmp_path, fail_on_data_loss=False)
    app = app_factory(flow).start()
    group = group_of(flow)
    wait_until(
        "a first batch of the doomed topic",
        lambda: any(o > 0 for o in committed(clusters.source, group, doomed, partitions).values()),
        APP_START_TIMEOUT_S,
        app,
    )
    admin = AdminClient({"bootstrap.servers": clusters.source})
    for future in admin.delete_topics([doomed], operation_timeout=30).values():
        future.result(timeout=30)
    create_topic(clusters.source, added, partitions)
    ends = {}
    for round_ in range(5):  # written while the mirror runs, in several rounds
        ends = produce_values(clusters.source, added, partitions, 200, f"b{round_}")
        time.sleep(1)
    wait_mirrored(app, clusters.source, flow, added, ends)
    create_topic(clusters.source, late, 1)
    late_end = produce_values(clusters.source, late, 1, 100, "c")
    wait_mirrored(app, clusters.source, flow, late, late_end)
    assert app.stop() == 0, app.log()[-3000:]

    sent = [v for r in range(5) for v in expected_values(partitions, 200, f"b{r}")]
    got = target_values(clusters.target, f"west.{added}", partitions)
    figures = report("topic added under load", sent, got)
    late_figures = report(
        "topic added later", expected_values(1, 100, "c"), target_values(clusters.target, f"west.{late}", 1)
    )
    assert figures.missing == 0 and late_figures.missing == 0
    log = app.log()
    assert f"source topic {doomed} is gone" in log, log[-3000:]
    assert "Traceback" not in log and log.count("===== run") == 1, log[-3000:]


# ---------- retention / truncation ----------


def in_process_flow(unique: str, clusters: Any, topics: list[str], tmp_path: Path, **options: Any) -> Any:
    from kmirror.flow.spec import parse_flow_spec

    return parse_flow_spec(flow_spec(unique, clusters.source, clusters.target, topics, tmp_path, **options))


def test_offsets_gone_before_they_were_mirrored_fail_naming_them_or_the_new_log_is_mirrored(
    spark: Any, clusters: Any, unique: str, tmp_path: Path
) -> None:
    """tansu has no DeleteRecords and no retention, so the nearest real thing: the source topic
    is deleted and recreated (its offsets go back: what truncation after an unclean leader
    election does too). The log-start-past-the-mirror case (retention, DeleteRecords) is
    tested with fakes in tests/test_fault_logic.py (tests/planner_fakes.py, tests/kafka_fakes.py)."""
    from kmirror.errors import DataLossError
    from spark_app.main import run_flow

    topic, remote = f"loss-{unique}", f"west.loss-{unique}"
    create_topic(clusters.source, topic, 1)
    produce_values(clusters.source, topic, 1, 100, "a")
    run_flow(in_process_flow(unique, clusters, [topic], tmp_path), spark=spark, once=True)
    admin = AdminClient({"bootstrap.servers": clusters.source})
    for future in admin.delete_topics([topic], operation_timeout=30).values():
        future.result(timeout=30)
    time.sleep(1)
    create_topic(clusters.source, topic, 1)
    produce_values(clusters.source, topic, 1, 30, "b")

    with pytest.raises(DataLossError, match=rf"data loss on {topic}\[0\]: its end offset went back from at least 10"):
        run_flow(in_process_flow(unique, clusters, [topic], tmp_path), spark=spark, once=True)
    run_flow(in_process_flow(unique, clusters, [topic], tmp_path, fail_on_data_loss=False), spark=spark, once=True)

    got = target_values(clusters.target, remote, 1)
    figures = report(
        "source offsets went back (topic recreated), fail_on_data_loss=false",
        expected_values(1, 100, "a") + expected_values(1, 30, "b"),
        got,
    )
    assert figures.missing == 0 and figures.duplicates == 0


# ---------- oversized records, poison headers ----------

POISON_HEADERS = [("", b""), ("null", None), ("bin", bytes(range(256))), ("dup", b"1"), ("dup", b"2")] + [
    (f"h{i}", b"x") for i in range(100)
]


def test_oversized_records_fail_the_batch_or_go_to_the_dead_letter_topic(
    spark: Any, clusters: Any, unique: str, tmp_path: Path
) -> None:
    """A record over the remote topic's `max.message.bytes` fails the batch naming it; with a
    dead-letter topic it lands there whole (issue 25: the record itself, not a pointer)."""
    from kmirror.errors import KmirrorError
    from spark_app.main import run_flow

    topic, remote, dlq = f"big-{unique}", f"west.big-{unique}", f"dlq-{unique}"
    create_topic(clusters.source, topic, 1)
    create_topic(clusters.target, dlq, 1)
    small = [
        {"key": f"k{i}".encode(), "value": f"s-0-{i}".encode(), "partition": 0, "headers": POISON_HEADERS}
        for i in range(10)
    ]
    big = {"key": b"big", "value": b"x" * 60_000, "partition": 0}
    produce(clusters.source, topic, [*small[:5], big, *small[5:]])
    add_fences(clusters.source, topic, 1)
    create_topic(clusters.target, remote, 1, {"max.message.bytes": "20000"})  # kept: not a topic the mirror created

    # either loop (auto picks the native one without a dead-letter topic), each naming record and limit
    refused = rf"cannot produce source record {topic}\[0\]@5 .*to {remote}\[0\]: .*max.message.bytes \(20000\)"
    with pytest.raises(KmirrorError, match=refused):
        run_flow(in_process_flow(unique, clusters, [topic], tmp_path), spark=spark, once=True)
    run_flow(in_process_flow(unique, clusters, [topic], tmp_path, dead_letter_topic=dlq), spark=spark, once=True)

    mirrored = read_all(clusters.target, remote)
    figures = report(
        "oversized record (60 kB > 20 kB limit), dead-letter topic on",
        [r["value"] for r in small],
        [m.value() for m in mirrored],
        dead_lettered=1,
    )
    assert figures.missing == 0
    assert all(m.headers() == POISON_HEADERS for m in mirrored)
    [pointer] = read_all(clusters.target, dlq)
    headers = dict(pointer.headers())
    assert (pointer.key(), pointer.value()) == (b"big", b"x" * 60_000)
    assert headers["kmirror.origin.topic"] == topic.encode() and headers["kmirror.origin.offset"] == b"5"
    assert headers["kmirror.origin.bytes"] == b"60003"
