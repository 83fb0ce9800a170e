"""The "spark" contender (`python -m spark_app --once`) and the streaming latency run.

Timing comes from the sink's batch log (KMIRROR_BATCH_LOG): from the first record read by any
writer task to the last delivery acknowledged; start-up is process start -> first read.
Latency: a producer at a fixed rate writes the source while the app streams; a consumer
tailing the target takes (receive time - source timestamp) per record. tansu ignores
LogAppendTime, so the receive time stands in for the target append time (it adds the tail
consumer's fetch wait, <= 10 ms).
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.measure import FENCE_KEY, SAFE_PRODUCER, RssSampler, add_fences, create_topics, peak_total


def flow_spec(source: str, target: str, topic: str, workdir: Path, alias: str = "west", **options: Any) -> Path:
    """A flow spec file mirroring `topic` into `<alias>.<topic>` (flow-spec defaults otherwise)."""
    spec = {
        "id": f"{alias}->east",
        "source": {"alias": alias, "bootstrap_servers": source, "config": {}},
        "target": {"alias": "east", "bootstrap_servers": target, "config": {}},
        "topics": [topic],
        "topics_exclude": [],
        "replication_policy": {"type": "default", "separator": "."},
        "checkpoint_location": str(workdir / f"checkpoint-{alias}-{topic}"),
        **options,
    }
    path = workdir / f"flow-{alias}-{topic}.json"
    path.write_text(json.dumps(spec))
    return path


def _start_app(flow: Path, batch_log: Path, once: bool, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "KMIRROR_BATCH_LOG": str(batch_log),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    cmd = [sys.executable, "-m", "spark_app", "--flow", str(flow), "--master", "local[*]"] + (
        ["--once"] if once else []
    )
    with log.open("wb") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _median(values: list[Any]) -> Any:
    known = sorted(v for v in values if v is not None)
    return known[len(known) // 2] if known else None


def _batches(batch_log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in batch_log.read_text().splitlines()] if batch_log.exists() else []


def run_spark_once(flow: Path, workdir: Path, timeout_s: float = 1800) -> dict[str, Any]:
    """Run the app with --once; returns timing from the batch log and memory (MiB): summed PSS
    peaks per process kind, the largest single process, and the peaks in the first and second
    half of the copy (flat memory: the second half is no higher than the first)."""
    batch_log, log = workdir / f"spark-batches-{flow.stem}.jsonl", workdir / f"spark-once-{flow.stem}.log"
    started = time.time()
    app = _start_app(flow, batch_log, once=True, log=log)
    sampler = RssSampler(app.pid).start()
    try:
        code = app.wait(timeout_s)
    finally:
        peaks = sampler.stop()
        if app.poll() is None:
            os.killpg(app.pid, signal.SIGKILL)
    if code != 0:
        raise RuntimeError(f"spark_app --once exited {code}; see {log}:\n{log.read_text()[-3000:]}")
    batches = _batches(batch_log)
    reads = [b["first_read_ms"] for b in batches if b["first_read_ms"] is not None]
    if not reads:
        raise RuntimeError(f"spark_app --once copied nothing; see {log}")
    first_read, last_delivery = min(reads) / 1000, max(b["last_delivery_ms"] for b in batches) / 1000
    middle = (first_read + last_delivery) / 2
    copying_s = sum(b["last_delivery_ms"] - b["first_read_ms"] for b in batches if b["first_read_ms"]) / 1000
    return {
        "start": first_read,
        "end": last_delivery,
        "startup_s": first_read - started,
        "wall_s": time.time() - started,
        "batches": len(batches),
        "rss": peaks,
        "rss_largest": sampler.largest,
        "pss_app_mib": peak_total(sampler.series),
        "processes": sampler.processes,
        "first_half": sampler.between(first_read, middle),
        "second_half": sampler.between(middle, last_delivery),
        "between_batches_s": max(0.0, (last_delivery - first_read) - copying_s),
        "log": str(log),
        "cpu_s": sampler.cpu_between(first_read, last_delivery),
    }


def _rate_producer(
    bootstrap: str, topic: str, nparts: int, rate: int, seconds: float, size: int, warm_up_s: float = 0.0
) -> int:
    """Produce `rate` records/s for `warm_up_s` + `seconds` in 10 ms ticks; the first `warm_up_s`
    are keyed `warm-` (not measured), the rest `lat-<n>`. Returns the number of `lat-` records."""
    producer = Producer({"bootstrap.servers": bootstrap, **SAFE_PRODUCER, "linger.ms": 5})
    value, per_tick, ticks, sent = b"v" * size, max(1, rate // 100), 0, 0
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < warm_up_s + seconds:
        measured = elapsed >= warm_up_s
        for i in range(per_tick):
            if measured:
                producer.produce(topic, value, b"lat-%d" % sent, sent % nparts)
                sent += 1
            else:
                producer.produce(topic, value, b"warm-%d" % i, i % nparts)
        ticks += 1
        producer.poll(0)
        time.sleep(max(0.0, ticks * 0.01 - (time.monotonic() - started)))
    if producer.flush(60):
        raise RuntimeError("latency producer could not deliver everything")
    return sent


class _Tail(threading.Thread):
    """Consumes the target topic and records (receive ms - record timestamp) per `lat-` record."""

    def __init__(self, bootstrap: str, topic: str, nparts: int) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "bench-tail",
                "fetch.wait.max.ms": 10,
                "enable.auto.commit": False,
            }
        )
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(nparts)])
        self.latencies_ms: list[int] = []
        self.seen = 0  # every record, warm-up included
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                for msg in self.consumer.consume(5000, timeout=0.2):
                    self.seen += 1
                    if msg.error() is None and msg.key() != FENCE_KEY and (msg.key() or b"").startswith(b"lat-"):
                        self.latencies_ms.append(int(time.time() * 1000) - msg.timestamp()[1])
        finally:
            self.consumer.close()


def run_latency(
    source: str, target: str, nparts: int, rate: int, seconds: float, size: int, run: str, **options: Any
) -> dict[str, Any]:
    """Streaming mode at a fixed rate; returns p50/p99 latency (ms) of the records produced after
    a warm-up at the same rate (steady state: the start-up transient is the start-up figure),
    the batches seen while measuring and the memory of the streaming app. `options` go into
    the flow spec (e.g. trigger_interval_ms)."""
    workdir = Path(tempfile.mkdtemp(prefix="kmirror-bench-lat-"))
    topic = f"bench-lat-{run}"
    create_topics(source, [topic], nparts)
    create_topics(target, [f"west.{topic}"], nparts)
    tail = _Tail(target, f"west.{topic}", nparts)
    tail.start()
    batch_log = workdir / "lat-batches.jsonl"
    app = _start_app(flow_spec(source, target, topic, workdir, **options), batch_log, False, workdir / "lat.log")
    sampler = RssSampler(app.pid).start()
    warm_up_s = 10.0
    try:
        _warm_up(source, topic, nparts, tail, app)
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            measuring_from = time.time() + warm_up_s
            sent = pool.apply(_rate_producer, (source, topic, nparts, rate, seconds, size, warm_up_s))
        add_fences(source, topic, nparts)  # exposes the newest batches to tansu's watermark
        deadline = time.monotonic() + 120
        while len(tail.latencies_ms) < sent and time.monotonic() < deadline and app.poll() is None:
            time.sleep(0.2)
    finally:
        tail.stop.set()
        app.send_signal(signal.SIGTERM)
        try:
            app.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(app.pid, signal.SIGKILL)
        sampler.stop()
        tail.join(10)
    received = sorted(tail.latencies_ms)
    if len(received) < sent:
        raise RuntimeError(f"latency run: {len(received)} of {sent} records arrived; see {workdir / 'lat.log'}")
    batches = [b for b in _batches(batch_log) if b["first_read_ms"] and b["first_read_ms"] / 1000 >= measuring_from]
    cycle_ms = [b2["first_read_ms"] - b1["first_read_ms"] for b1, b2 in itertools.pairwise(batches)]
    return {
        "sent": sent,
        "p50_ms": received[len(received) // 2],
        "p99_ms": received[int(len(received) * 0.99)],
        "max_ms": received[-1],
        "batches": len(batches),
        "cycle_ms": sorted(cycle_ms)[len(cycle_ms) // 2] if cycle_ms else None,
        "task_ms": sorted(b["tasks_ms"] for b in batches)[len(batches) // 2] if batches else None,
        "listeners_ms": _median([b.get("listeners_ms") for b in batches]),
        "rss": sampler.peaks,
        "log": str(workdir / "lat.log"),
    }


def _warm_up(source: str, topic: str, nparts: int, tail: _Tail, app: subprocess.Popen[bytes]) -> None:
    """Wait until the streaming app mirrors a first record (session started, query running)."""
    deadline = time.monotonic() + 180
    producer = Producer({"bootstrap.servers": source, **SAFE_PRODUCER})
    while not tail.seen:
        if app.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the streaming app did not start mirroring (exit code {app.poll()})")
        for p in range(nparts):
            producer.produce(topic, b"warm-up", b"warm-up", p)
        producer.flush(10)
        time.sleep(2)
