"""Pause and resume a running streaming flow without a restart (issue 46), on real brokers:
`kmirror pause` stops the copying at the next trigger (records produced meanwhile stay on the
source, the target does not move) while heartbeats go on and `kmirror status` says paused (exit 4);
`kmirror resume` copies from where it stopped, every record exactly once. Audit lines
`kmirror control {...}` mark both changes in the driver's log. A `--once` run of a paused flow
copies nothing and ends normally. Also runs in leg 2 (Spark 4.0's position-tracking reader)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from kmirror.flow.spec import parse_flow_spec
from kmirror_cli.cli import main
from spark_app.main import run_flow
from tests.e2e.streaming_run import DriverLog, StreamingRun
from tests.kafka_helpers import consume_all, create_topic, flow_raw, produce

pytestmark = [pytest.mark.e2e, pytest.mark.real_kafka, pytest.mark.spark40]


def delete_control_topic(bootstrap: str) -> None:
    """The shared target cluster goes back to having no control topic (later tests' flows look for it)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    from kmirror_engine.planning.internal_names import control_topic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result: a freed handle aborts it
    try:
        admin.delete_topics([control_topic()])[control_topic()].result(30)
    except KafkaException as exc:  # never created (the test failed before its pause): nothing to delete
        if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise


def records(prefix: str, count: int) -> list[dict[str, Any]]:
    return [
        {"key": f"{prefix}-{i}".encode(), "value": f"{prefix}-value-{i}".encode(), "partition": i % 2}
        for i in range(count)
    ]


def target_count(bootstrap: str, topic: str, partitions: int = 2) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kmirror-test-watermarks"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions))
    finally:
        consumer.close()


def status(flow: Path, log: DriverLog, *extra: str) -> tuple[int, dict[str, Any]]:
    log.read()
    code = main(["status", "--flow", str(flow), "--format", "json", *extra])
    out = log.capfd.readouterr()
    log.text += out.err
    [line] = [line for line in out.out.splitlines() if line.startswith('{"flow"')]
    return code, json.loads(line)


def test_a_paused_flow_copies_nothing_keeps_its_heartbeats_and_resumes_exactly_once(
    spark: Any,
    clusters: Any,
    unique: str,
    tmp_path: Path,
    driver_log: DriverLog,
) -> None:
    topic = f"pause-{unique}"
    create_topic(clusters.source, topic, 2)
    produce(clusters.source, topic, records("a", 100))
    beats = {"emit_heartbeats": True, "heartbeat_interval_ms": 500, "heartbeats_replication_enabled": False}
    options = {"emit_checkpoints": False, "trigger_interval_ms": 200, **beats}
    raw = flow_raw(clusters, f"pw{unique}", f"pe{unique}", [topic], tmp_path / "ckpt", **options)
    spec = parse_flow_spec(raw)
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps(raw))
    remote = f"pw{unique}.{topic}"
    log, run = driver_log, StreamingRun(spec, spark)
    run.start()
    try:
        run.wait_for_first_batch(clusters.target, remote, 2, 100)
        assert main(["pause", "--flow", str(flow), "--reason", "e2e maintenance"]) == 0
        line = log.wait_for('"state": "paused"', 60)
        audit = json.loads(line.split("kmirror control ", 1)[1])
        assert (audit["flow"], audit["reason"]) == (spec.id, "e2e maintenance") and audit["by"] and audit["at"]

        produce(clusters.source, topic, records("b", 100))  # after the driver saw the pause
        held = target_count(clusters.target, remote)
        assert held == 100
        time.sleep(6)  # ~30 triggers of 200 ms: none may copy
        assert target_count(clusters.target, remote) == 100, "a paused flow copied records"
        code, paused = status(flow, log)
        assert code == 4 and paused["paused"] is True and paused["running"] is True
        assert paused["heartbeat_age_ms"] is not None and paused["heartbeat_age_ms"] < 5_000  # heartbeats go on
        assert paused["control"]["state"] == "paused" and paused["control"]["reason"] == "e2e maintenance"
        assert paused["lag_total"] == 100  # the source offsets did not move: b's 100 are all behind
        assert run.thread.is_alive() and not run.failures

        assert main(["resume", "--flow", str(flow)]) == 0
        got = consume_all(clusters.target, remote, 2, timeout_s=60, expect=200)
        log.wait_for('"state": "running"', 30)
        driver_log = tmp_path / "driver.log"
        driver_log.write_text(log.read())
        code, resumed = status(flow, log, "--log", str(driver_log))
        assert code == 0 and resumed["paused"] is False and resumed["control"]["state"] == "running"
        assert resumed["log"]["last_control"]["state"] == "running"
        assert resumed["log"]["last_progress"]["flow"] == spec.id
        run.end()
        assert not run.thread.is_alive() and run.failures == []
        source = consume_all(clusters.source, topic, 2)
        assert sum(len(v) for v in source.values()) == 200
        assert {p: [(m.key(), m.value()) for m in v] for p, v in got.items()} == {
            p: [(m.key(), m.value()) for m in v] for p, v in source.items()
        }

        # `--once` of a paused flow (the driver stopped, paused again): copies nothing and ends normally
        assert main(["pause", "--flow", str(flow), "--reason", "once"]) == 0
        produce(clusters.source, topic, records("c", 10))
        run_flow(spec, spark=spark, once=True)  # returns (the app's exit 0), raises nothing
        assert target_count(clusters.target, remote) == 200, "a paused --once run copied records"
        code, after_once = status(flow, log)
        assert code == 4 and after_once["lag_total"] == 10  # its source offsets did not move either
    finally:
        run.end()
        (tmp_path / "driver-all.log").write_text(log.read())  # kept in pytest's tmp dir, for a failed run
        delete_control_topic(clusters.target)
    assert not run.thread.is_alive() and run.failures == []
