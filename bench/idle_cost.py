"""What an idle streaming mirror costs per trigger interval (issue 16: the latency default).

    python bench/idle_cost.py [--intervals 200 1000] [--seconds 30] [--partitions 8]

For each `trigger_interval_ms`, the app streams one source topic with no new records: after it
mirrored a first record (warm-up), the CPU of its processes (JVM, Spark's Python workers, the
driver's Python; all threads, from /proc) is summed over `--seconds` of idling and printed as
CPU milliseconds per second of wall time, beside the micro-batches it ran (none expected: an
idle trigger only asks the source for its end offsets). Figures from one run, side by side.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.measure import SAFE_PRODUCER, RssSampler, create_topics
from bench.mirror_bench import load_averages
from bench.spark_runs import _batches, _start_app, flow_spec
from kmirror_cli.local_brokers import LocalBroker


def _wait_mirrored(target: str, topic: str, nparts: int, app: subprocess.Popen[bytes], timeout_s: float) -> None:
    consumer = Consumer({"bootstrap.servers": target, "group.id": "idle-cost", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(nparts)])
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if app.poll() is not None:
                raise SystemExit(f"the app exited ({app.returncode}) before mirroring")
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                return
        raise SystemExit("the app mirrored nothing within the timeout")
    finally:
        consumer.close()


def idle_cost(source: str, target: str, interval_ms: int, seconds: float, nparts: int, workdir: Path) -> dict:
    topic = f"idle-{interval_ms}-{uuid.uuid4().hex[:6]}"
    create_topics(source, [topic], nparts)
    create_topics(target, [f"west.{topic}"], nparts)
    batch_log = workdir / f"batches-{interval_ms}.jsonl"
    app = _start_app(
        flow_spec(source, target, topic, workdir, trigger_interval_ms=interval_ms),
        batch_log,
        False,
        workdir / f"app-{interval_ms}.log",
    )
    sampler = RssSampler(app.pid).start()
    try:
        producer = Producer({"bootstrap.servers": source, **SAFE_PRODUCER})
        for p in range(nparts):
            producer.produce(topic, b"warm-up", b"warm-up", p)
        producer.flush(10)
        _wait_mirrored(target, f"west.{topic}", nparts, app, 180)
        time.sleep(5)  # the warm-up batch's commit and side work end
        batches_before = len(_batches(batch_log))
        start = time.time()
        time.sleep(seconds)
        end = time.time()
        time.sleep(sampler.interval_s * 2)
        cpu = sampler.cpu_between(start, end)
        batches = len(_batches(batch_log)) - batches_before
    finally:
        app.send_signal(signal.SIGTERM)
        try:
            app.wait(60)
        except subprocess.TimeoutExpired:
            app.kill()
        sampler.stop()
    wall = end - start
    return {
        "interval_ms": interval_ms,
        "batches": batches,
        **{kind: cpu_s * 1000 / wall for kind, cpu_s in cpu.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--intervals", type=int, nargs="+", default=[200, 1000])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--partitions", type=int, default=8)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="kmirror-idle-"))
    print(f"load average before: {load_averages()}", flush=True)
    rows = []
    with LocalBroker("idle-source") as source_broker, LocalBroker("idle-target") as target_broker:
        for interval in args.intervals:
            rows.append(
                idle_cost(
                    source_broker.bootstrap_servers,
                    target_broker.bootstrap_servers,
                    interval,
                    args.seconds,
                    args.partitions,
                    workdir,
                )
            )
    print(f"idle streaming app, {args.seconds:.0f} s each, {args.partitions} partitions; CPU ms per second of wall:")
    for row in rows:
        total = row["jvm"] + row["workers"] + row["driver_python"]
        print(
            f"  trigger_interval_ms {row['interval_ms']:>5}: total {total:6.1f} (JVM {row['jvm']:.1f}, Python "
            f"workers {row['workers']:.1f}, driver Python {row['driver_python']:.1f}); batches run {row['batches']}"
        )
    print(f"load average after: {load_averages()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
