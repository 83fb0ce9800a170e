"""Fault injection against the real app: `python -m spark_app` as a subprocess (so it can be
killed), real brokers, loopback only, every wait bounded.

Tests that freeze a broker (SIGSTOP) start their own LocalBroker pair, so the session brokers
other tests use are never frozen; the others use the `clusters` fixture (external Kafka works).
Every test records its figures (records sent, on the target, duplicates) with `report()`:
printed, and appended as JSON lines to $KMIRROR_FAULT_FIGURES when set (docs/reliability.md).
"""

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

from kmirror.local_brokers import LocalBroker, free_port
from tests.kafka_helpers import FENCE_KEY, add_fences, create_topic

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
END_KEY = b"__fault_end__"
APP_START_TIMEOUT_S = 90.0


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
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
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

    def progress(self) -> list[dict[str, Any]]:
        prefix = "kmirror progress "
        return [json.loads(line[len(prefix) :]) for line in self.log().splitlines() if line.startswith(prefix)]


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


@contextmanager
def fresh_brokers(name: str) -> Iterator[tuple[LocalBroker, LocalBroker]]:
    """A source and a target broker of this test alone (they may be frozen)."""
    with LocalBroker(f"{name}-src") as src, LocalBroker(f"{name}-dst") as dst:
        yield src, dst


def flow_spec(
    unique: str, source: str, target: str, topics: list[str], tmp_path: Path, **options: Any
) -> dict[str, Any]:
    return {
        "id": f"west-{unique}->east",
        "source": {"alias": "west", "bootstrap_servers": source, "config": {}},
        "target": {"alias": "east", "bootstrap_servers": target, "config": {}},
        "topics": topics, "topics_exclude": [], "replication_policy": {"type": "default"},
        "checkpoint_location": str(tmp_path / "checkpoint"),
        "emit_checkpoints": False, "emit_heartbeats": False,
        "trigger_interval_ms": 500, "topic_refresh_interval_ms": 1000, "max_records_per_trigger": 600,
        **options,
    }  # fmt: skip


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
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "log_level": 0})  # fmt: skip
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


def wait_mirrored(app: MirrorApp, source: str, flow: dict[str, Any], topic: str, ends: dict[int, int],
                  timeout_s: float = 90.0) -> float:  # fmt: skip
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
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fault-reader", "enable.auto.commit": False,
                         "isolation.level": "read_committed" if read_committed else "read_uncommitted"})  # fmt: skip
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


# ---------- crash ----------


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
def test_kill_9_mid_stream_then_restart_from_the_checkpoint_loses_nothing(
    clusters: Any, unique: str, tmp_path: Path, app_factory: Callable[..., MirrorApp], exactly_once: bool
) -> None:
    """kill -9 right after a batch's writes were acknowledged (EOS: its transaction committed),
    before Spark's commit log recorded it: the restart replays that batch. At-least-once counts
    the duplicates; exactly-once must show none to read_committed readers."""
    topic, remote, partitions = f"crash-{unique}", f"west.crash-{unique}", 2
    create_topic(clusters.source, topic, partitions)
    produce_values(clusters.source, topic, partitions, 1500, "a")
    flow = flow_spec(unique, clusters.source, clusters.target, [topic], tmp_path, exactly_once=exactly_once)
    clock = Clock()
    app = app_factory(flow).start()
    eos_group = "kmirror-eos-" + flow["id"].replace("->", "-to-")
    # the first sign that a batch's writes are durable: the EOS offsets on the target, or the
    # source group commit (at-least-once; written by the sink commit, before Spark's commit log)
    group, bootstrap, watched = (eos_group, clusters.target, remote) if exactly_once else (
        group_of(flow), clusters.source, topic)  # fmt: skip
    wait_until("a first durable batch",
               lambda: any(o > 0 for o in committed(bootstrap, group, watched, partitions).values()),
               APP_START_TIMEOUT_S, app)  # fmt: skip
    clock.lap("first batch")
    before = committed(bootstrap, group, watched, partitions)
    wait_until("the next durable batch", lambda: committed(bootstrap, group, watched, partitions) != before, 30, app)
    app.kill9()
    clock.lap("killed")
    at_kill = committed(bootstrap, group, watched, partitions)
    second = produce_values(clusters.source, topic, partitions, 300, "b")  # produced while the mirror is down

    app.start()
    wait_mirrored(app, clusters.source, flow, topic, second)
    clock.lap("caught up after restart")
    assert app.stop() == 0, app.log()[-3000:]
    clock.lap("stopped")

    sent = expected_values(partitions, 1500, "a") + expected_values(partitions, 300, "b")
    got = target_values(clusters.target, remote, partitions, read_committed=True)
    figures = report(f"crash kill -9 ({'exactly-once' if exactly_once else 'at-least-once'})", sent, got,
                     committed_at_kill=at_kill, seconds=clock.laps)  # fmt: skip
    assert figures.missing == 0
    if exactly_once:
        assert figures.duplicates == 0
    runs = app.log().split("===== run 2 =====")
    assert len(runs) == 2 and "Traceback" not in runs[1], runs[-1][-3000:]


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
    unique: str, tmp_path: Path, app_factory: Callable[..., MirrorApp]
) -> None:
    """One streaming run through three faults (one Spark start keeps the suite fast):
    1. the target is not up when the app starts: it retries with backoff and says so, then mirrors;
    2. the target is frozen (SIGSTOP) for 20 s mid-stream, then resumed;
    3. the source is frozen for 20 s mid-stream, then resumed.
    After each: everything sent so far is mirrored, the app never exited."""
    clock = Clock()
    topic, remote, partitions = f"outage-{unique}", f"west.outage-{unique}", 2
    target_port = free_port()
    with LocalBroker(f"outage-src-{unique}") as src:
        create_topic(src.bootstrap_servers, topic, partitions)
        ends = produce_values(src.bootstrap_servers, topic, partitions, 500, "a")
        flow = flow_spec(unique, src.bootstrap_servers, f"127.0.0.1:{target_port}", [topic], tmp_path)
        app = app_factory(flow).start()
        wait_until("a retry report", lambda: "retrying in" in app.log(), 60, app)
        clock.lap("unreachable target reported")
        retry_line = next(line for line in app.log().splitlines() if "retrying in" in line)
        assert f"cluster 'east' (127.0.0.1:{target_port})" in retry_line, retry_line
        with LocalBroker(f"outage-dst-{unique}", port=target_port) as dst:
            wait_mirrored(app, src.bootstrap_servers, flow, topic, ends, timeout_s=APP_START_TIMEOUT_S)
            clock.lap("mirrored once the target came up")
            sent = expected_values(partitions, 500, "a")
            report("unreachable target at start (streaming)", sent,
                   target_values(dst.bootstrap_servers, remote, partitions), seconds=dict(clock.laps))  # fmt: skip

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
                figures = report(f"{phase} frozen 20 s (SIGSTOP/SIGCONT)", sent, got,
                                 recovery_s=round(recovered, 1))  # fmt: skip
                assert figures.missing == 0
            assert app.stop() == 0, app.log()[-3000:]
    log = app.log()
    assert "Traceback" not in log, log[-3000:]
    assert log.count("===== run") == 1  # one process all along: no crash loop
