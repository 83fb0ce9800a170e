"""Helpers of the fault tests (tests/e2e/test_faults.py): the app as a killable process,
unique test data in and out, bounded waits, and the figures each test reports."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.kafka_helpers import FENCE_KEY, add_fences, create_topic, produce

END_KEY = b"__fault_end__"
# The app's start to its first durable batch: ~20 s on an idle 2-core box, over 90 s with the load
# of a busy one (a JVM, a Python planner and a worker started while other suites run). A timeout,
# not an expectation: the tests assert what is copied, never how fast.
APP_START_TIMEOUT_S = 240.0


# ---------- the app as a process ----------


@dataclass
class MirrorApp:
    """`python -m spark_app` in its own process group (the Spark JVM and workers are its children)."""

    flow_path: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    runs: int = 0

    def start(self, *extra: str) -> MirrorApp:
        self.runs += 1
        with self.log_path.open("ab") as log:
            log.write(f"===== run {self.runs} =====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "spark_app", "--flow", str(self.flow_path), "--master", "local[2]", *extra],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        """`kill -9` of the whole app (driver, JVM, Python workers): a host crash."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM (clean stop after the current batch); returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        finally:
            self.cleanup()

    def wait(self, timeout_s: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout_s)

    def cleanup(self) -> None:
        if self.proc is not None:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def app_factory(tmp_path: Path) -> Iterator[Callable[..., MirrorApp]]:
    apps: list[MirrorApp] = []

    def make(flow: dict[str, Any]) -> MirrorApp:
        path = tmp_path / f"flow-{len(apps)}.json"
        path.write_text(json.dumps(flow))
        app = MirrorApp(path, tmp_path / f"app-{len(apps)}.log")
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.cleanup()


def flow_spec(
    unique: str, source: str, target: str, topics: list[str], tmp_path: Path, **options: Any
) -> dict[str, Any]:
    return {
        "id": f"west-{unique}->east",
        "source": {"alias": "west", "bootstrap_servers": source, "config": {}},
        "target": {"alias": "east", "bootstrap_servers": target, "config": {}},
        "topics": topics,
        "topics_exclude": [],
        "replication_policy": {"type": "default"},
        "checkpoint_location": str(tmp_path / "checkpoint"),
        "emit_checkpoints": False,
        "emit_heartbeats": False,
        "trigger_interval_ms": 500,
        "topic_refresh_interval_ms": 1000,
        "max_records_per_trigger": 600,
        **options,
    }


@contextmanager
def west_and_north(
    clusters: Any, unique: str, topic: str, partitions: int, tmp_path: Path
) -> Iterator[tuple[Any, dict[str, Any], dict[str, Any]]]:
    """A second source broker aliased `north` (one the test may freeze), `topic` (of `partitions`)
    on it and on the suite's source (west), and two python-loop flows of it into the suite's
    target, one from each: the several-flows-in-one-application tests (local and cluster)."""
    from tests.brokers import new_broker

    with new_broker(f"{topic}-north", freezes=True) as north:
        create_topic(clusters.source, topic, partitions)
        create_topic(north.bootstrap_servers, topic, partitions)
        west_flow = flow_spec(unique, clusters.source, clusters.target, [topic], tmp_path / "w", copy_loop="python")
        north_flow = flow_spec(
            unique, north.bootstrap_servers, clusters.target, [topic], tmp_path / "n", copy_loop="python"
        )
        north_flow["id"] = f"north-{unique}->east"
        north_flow["source"] = {**north_flow["source"], "alias": "north"}
        yield north, west_flow, north_flow


def group_of(flow: dict[str, Any]) -> str:
    return "kmirror-" + flow["id"].replace("->", "-to-")


# ---------- data in, data out ----------


def produce_values(bootstrap: str, topic: str, partitions: int, count: int, tag: str) -> dict[int, int]:
    """`count` records per partition with unique values `tag-p-i`, then a fence per partition.
    Returns, per partition, the offset after the last data record (what the mirror must reach)."""
    last: dict[int, int] = {}
    errors: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        elif msg.key() != FENCE_KEY:
            last[msg.partition()] = max(last.get(msg.partition(), -1), msg.offset())

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    for p in range(partitions):
        for i in range(count):
            producer.produce(topic, f"{tag}-{p}-{i}".encode(), f"k{i}".encode(), p, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors[:3]
    add_fences(bootstrap, topic, partitions)
    return {p: off + 1 for p, off in last.items()}


def expected_values(partitions: int, count: int, tag: str) -> list[bytes]:
    return [f"{tag}-{p}-{i}".encode() for p in range(partitions) for i in range(count)]


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets (empty while the cluster does not answer)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, "log_level": 0}
    )
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=5)
        return {tp.partition: tp.offset for tp in found}
    except KafkaException:
        return {}
    finally:
        consumer.close()


def wait_until(what: str, condition: Callable[[], bool], timeout_s: float, app: MirrorApp | None = None) -> float:
    """Poll `condition`; fails with the app's log tail on timeout or when the app died. Returns seconds waited."""
    started = time.monotonic()
    while not condition():
        if app is not None and not app.alive:
            pytest.fail(
                f"the app exited ({app.proc and app.proc.returncode}) while waiting for {what}:\n{app.log()[-3000:]}"
            )
        if time.monotonic() - started > timeout_s:
            tail = app.log()[-3000:] if app is not None else ""
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}\n{tail}")
        time.sleep(0.2)
    return time.monotonic() - started


def wait_mirrored(
    app: MirrorApp, source: str, flow: dict[str, Any], topic: str, ends: dict[int, int], timeout_s: float = 90.0
) -> float:
    """Until the mirror's source group committed at least `ends` (every delivery acknowledged)."""
    group = group_of(flow)

    def reached() -> bool:
        now = committed(source, group, topic, len(ends))
        return all(now.get(p, -1) >= end for p, end in ends.items())

    return wait_until(f"{topic} mirrored up to {ends}", reached, timeout_s, app)


def target_values(bootstrap: str, topic: str, partitions: int, read_committed: bool = False) -> list[bytes]:
    """Every data value on the target topic (fences and end markers left out), read up to an end
    marker appended now (tansu hides the newest batch: a fence follows the marker)."""
    end_key = END_KEY + uuid.uuid4().hex.encode()  # earlier calls left their own markers
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(partitions):
        producer.produce(topic, b"", end_key, p)
    assert producer.flush(30) == 0
    add_fences(bootstrap, topic, partitions)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "fault-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    ended: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(ended) < partitions:
            assert time.monotonic() < deadline, f"{topic}: end markers seen on {sorted(ended)} only"
            for msg in consumer.consume(1000, timeout=1):
                assert msg.error() is None, msg.error()
                key = msg.key() or b""
                if key == end_key:
                    ended.add(msg.partition())
                elif key != FENCE_KEY and not key.startswith(END_KEY) and msg.partition() not in ended:
                    values.append(msg.value())
    finally:
        consumer.close()
    return values


class Clock:
    """Seconds per phase of a test, reported with its figures."""

    def __init__(self) -> None:
        self.started = self.last = time.monotonic()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> float:
        now = time.monotonic()
        self.laps[name] = round(now - self.last, 1)
        self.last = now
        return self.laps[name]


@dataclass
class Figures:
    fault: str
    sent: int
    on_target: int
    duplicates: int
    missing: int
    notes: dict[str, Any] = field(default_factory=dict)


def report(fault: str, sent: list[bytes], got: list[bytes], **notes: Any) -> Figures:
    """Count what reached the target; print and record the figures."""
    expected = set(sent)
    figures = Figures(fault, len(sent), len(got), len(got) - len(set(got)), len(expected - set(got)), notes)
    line = json.dumps(figures.__dict__, sort_keys=True)
    print(f"FAULT FIGURES {line}")
    path = os.environ.get("KMIRROR_FAULT_FIGURES")
    if path:
        with open(path, "a") as out:
            out.write(line + "\n")
    assert not set(got) - expected, f"unexpected records on the target: {sorted(set(got) - expected)[:5]}"
    return figures


def uncommitted_batches(checkpoint: Path) -> list[int]:
    """Batches planned in Spark's offset log but not in its commit log: replayed at restart."""
    planned = {int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()}
    done = {int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()}
    return sorted(planned - done)


def planned_offsets(checkpoint: Path, batch: int, topic: str) -> dict[int, int]:
    """The source offsets of `topic` a batch ends at, from Spark's offset log (the next batch
    starts there); an empty dict for a batch before the first (-1)."""
    if batch < 0:
        return {}
    last = (checkpoint / "offsets" / str(batch)).read_text().splitlines()[-1]
    return {int(partition): int(offset) for partition, offset in json.loads(last)[topic].items()}


def read_all(bootstrap: str, topic: str) -> list[Any]:
    """Every data message of a one-partition topic (see target_values)."""
    end_key = END_KEY + uuid.uuid4().hex.encode()
    produce(bootstrap, topic, [{"key": end_key, "value": b"", "partition": 0}])
    add_fences(bootstrap, topic, 1)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fault-reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[Any] = []
    deadline = time.monotonic() + 60
    try:
        while True:
            assert time.monotonic() < deadline, f"{topic}: end marker not seen"
            for msg in consumer.consume(1000, timeout=1):
                key = msg.key() or b""
                if key == end_key:
                    return out
                if key != FENCE_KEY and not key.startswith(END_KEY):
                    out.append(msg)
    finally:
        consumer.close()
