"""`kmirror demo`: the whole product on a laptop in about a minute.

Starts two local tansu brokers (local-a, local-b), fills a few demo topics on local-a, runs the
example topology's `local` flow (local-a -> local-b, topics `demo.*`) with the Spark app in
streaming mode, shows live progress until every record arrived, prints a summary per topic and
stops everything it started. Exit 0 only if every record of every mirrored topic arrived and the
internal / unselected topics were left alone.

tansu hides the newest record batch of each partition from offset queries (see the test notes),
so the demo appends one "fence" record per partition after its data; fences are mirrored like
any record and left out of the counts.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kmirror.errors import KmirrorError


def _collect(errors: list[Any]) -> Any:
    def on_delivery(error: Any, message: Any) -> None:
        if error is not None:
            errors.append(error)

    return on_delivery


FENCE_KEY = b"__kmirror_demo_fence__"
SOURCE_ALIAS, TARGET_ALIAS = "local-a", "local-b"


@dataclass(frozen=True)
class DemoTopic:
    name: str
    partitions: int
    records: int
    mirrored: bool  # expected to reach the target
    note: str = ""


DEMO_TOPICS = (
    DemoTopic("demo.orders", 4, 20_000, True),
    DemoTopic("demo.payments", 2, 5_000, True),
    DemoTopic("demo.audit-internal", 1, 500, False, "internal: never mirrored"),
    DemoTopic("scratch.logs", 1, 500, False, "not selected by demo.*"),
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("demo", help="Mirror demo topics between two local brokers with the Spark app.")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds to wait for the mirror to catch up")
    parser.add_argument("--master", default="local[2]", help="Spark master of the demo run")
    parser.set_defaults(func=run_demo)


def fill_source(bootstrap: str, topics: tuple[DemoTopic, ...] = DEMO_TOPICS) -> None:
    """Create the demo topics and produce their records (keys, a header, CreateTime), then fences."""
    from confluent_kafka.admin import NewTopic

    from kmirror_engine.clients import new_admin, new_producer

    admin = new_admin({"bootstrap.servers": bootstrap}, role="demo-admin")
    futures = admin.create_topics(
        [NewTopic(t.name, t.partitions, 1, config={"retention.ms": "604800000"}) for t in topics]
    )
    for future in futures.values():
        future.result(timeout=30)
    errors: list[Any] = []
    producer = new_producer({"bootstrap.servers": bootstrap, "linger.ms": 20}, role="demo-producer")
    for topic in topics:
        for i in range(topic.records):
            value = json.dumps({"topic": topic.name, "n": i, "amount": i % 977}).encode()
            producer.produce(
                topic.name,
                value,
                key=f"key-{i % 500}".encode(),
                partition=i % topic.partitions,
                headers=[("origin", b"kmirror-demo")],
                on_delivery=_collect(errors),
            )
            if i % 5_000 == 0:
                producer.poll(0)
    _flush(producer, errors)
    for topic in topics:  # fences: each in its own batch, after the data
        for p in range(topic.partitions):
            producer.produce(topic.name, b"", key=FENCE_KEY, partition=p, on_delivery=_collect(errors))
        _flush(producer, errors)


def _flush(producer: Any, errors: list[Any]) -> None:
    if producer.flush(60) or errors:
        raise KmirrorError(f"demo: producing demo records failed: {errors[:3]}")


TOPOLOGY_PATH = Path(__file__).resolve().parents[2] / "stacks" / "topology.yaml"


def demo_flow_spec(checkpoint_root: str, topology_path: Path = TOPOLOGY_PATH) -> dict[str, Any]:
    """The example topology's `local-a->local-b` flow, planned by the same planner as
    `kmirror plan` and the Pulumi program (the caller puts in the local brokers' addresses).

    Raises KmirrorError when the topology file or its `local-a->local-b` flow is missing (the
    demo runs from a clone of the repository, which ships stacks/topology.yaml).
    """
    from kmirror.estate.planner import flow_spec_for, load_topology, plan_topology

    if not topology_path.is_file():
        raise KmirrorError(f"demo: the example topology {str(topology_path)!r} is missing; run the demo from a clone")
    topology = load_topology(topology_path)
    flow_id = f"{SOURCE_ALIAS}->{TARGET_ALIAS}"
    flow = plan_topology(topology).flow(flow_id)  # ValidationError naming the flow when absent
    return flow_spec_for(topology, flow, checkpoint_root)


class TargetCounter:
    """Counts records (fences excluded) per remote topic on the target by consuming from offset 0."""

    def __init__(self, bootstrap: str, topics: tuple[DemoTopic, ...]) -> None:
        from kmirror_engine.clients import new_consumer

        config = {
            "bootstrap.servers": bootstrap,
            "group.id": "kmirror-demo-counter",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
        }
        self.consumer = new_consumer(config, role="demo-counter")
        self.topics = topics
        self.counts = {remote_name(t.name): 0 for t in topics}
        self.fences = {remote_name(t.name): 0 for t in topics}
        self.assigned: set[str] = set()

    def poll(self, seconds: float) -> None:
        from confluent_kafka import TopicPartition

        existing = self.consumer.list_topics(timeout=5).topics
        new = [t for t in self.topics if remote_name(t.name) in existing and remote_name(t.name) not in self.assigned]
        if new:
            self.consumer.incremental_assign(
                [TopicPartition(remote_name(t.name), p, 0) for t in new for p in range(t.partitions)]
            )
            self.assigned.update(remote_name(t.name) for t in new)
        deadline = time.monotonic() + seconds
        while self.assigned and time.monotonic() < deadline:
            for msg in self.consumer.consume(5_000, timeout=0.2):
                if msg.error():
                    raise KmirrorError(f"demo: reading the target failed: {msg.error()}")
                bucket = self.fences if msg.key() == FENCE_KEY else self.counts
                bucket[str(msg.topic())] += 1
        if not self.assigned:
            time.sleep(seconds)

    def caught_up(self) -> bool:
        return all(self.fences[remote_name(t.name)] >= t.partitions for t in self.topics if t.mirrored)

    def close(self) -> None:
        self.consumer.close()


def remote_name(topic: str) -> str:
    return f"{SOURCE_ALIAS}.{topic}"


def render(counter: TargetCounter, elapsed_s: float) -> Any:
    from rich.table import Table

    table = Table(title=f"kmirror demo: {SOURCE_ALIAS} -> {TARGET_ALIAS}  ({elapsed_s:.0f} s)")
    for column in ("source topic", "target topic", "source records", "mirrored records", "lag", "note"):
        table.add_column(column, justify="right" if "records" in column or column == "lag" else "left", no_wrap=True)
    for t in counter.topics:
        mirrored = counter.counts[remote_name(t.name)]
        lag = t.records - mirrored if t.mirrored else 0
        table.add_row(
            t.name,
            remote_name(t.name) if t.mirrored else "-",
            str(t.records),
            str(mirrored),
            str(lag),
            t.note or ("caught up" if lag == 0 else "mirroring"),
        )
    return table


def verdict(counter: TargetCounter) -> list[str]:
    """Every way the demo's outcome is wrong; empty when all is well."""
    problems = []
    for t in counter.topics:
        got = counter.counts[remote_name(t.name)]
        want = t.records if t.mirrored else 0
        if got != want:
            problems.append(f"{t.name}: {got} records on the target, expected {want}")
    return problems


def _start_app(flow_path: Path, master: str, log_path: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "PYSPARK_DRIVER_PYTHON": os.environ.get("PYSPARK_DRIVER_PYTHON", sys.executable),
    }
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "spark_app", "--flow", str(flow_path), "--master", master],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def _stop_app(app: subprocess.Popen[bytes]) -> int:
    if app.poll() is None:
        app.send_signal(signal.SIGTERM)  # the app stops after its current batch
        try:
            app.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(app.pid, signal.SIGKILL)
            app.wait()
    return app.returncode


def _watch(counter: TargetCounter, app: subprocess.Popen[bytes], timeout_s: float, console: Any) -> None:
    from rich.live import Live

    started = time.monotonic()
    with Live(render(counter, 0), console=console, refresh_per_second=4, transient=True) as live:
        while not counter.caught_up() and time.monotonic() - started < timeout_s and app.poll() is None:
            counter.poll(0.5)
            live.update(render(counter, time.monotonic() - started))
        counter.poll(1.0)  # anything unselected/internal that (wrongly) arrived late
        live.update(render(counter, time.monotonic() - started))


def run_demo(args: argparse.Namespace) -> int:
    from rich.console import Console

    from kmirror_cli.local_brokers import LocalBroker

    console = Console(width=None if sys.stdout.isatty() else 140)
    workdir = Path(tempfile.mkdtemp(prefix="kmirror-demo-"))
    spec = demo_flow_spec(str(workdir / "checkpoints"))  # a broken topology fails before anything starts
    with LocalBroker("demo-a") as source, LocalBroker("demo-b") as target:
        console.print(
            f"[bold]brokers[/]: {SOURCE_ALIAS}={source.bootstrap_servers} {TARGET_ALIAS}={target.bootstrap_servers}"
        )
        fill_source(source.bootstrap_servers)
        console.print("filled: " + ", ".join(f"{t.name} ({t.partitions}p, {t.records} records)" for t in DEMO_TOPICS))
        flow_path = workdir / "flow.json"
        spec["source"]["bootstrap_servers"], spec["target"]["bootstrap_servers"] = (
            source.bootstrap_servers,
            target.bootstrap_servers,
        )
        flow_path.write_text(json.dumps(spec, indent=2))
        log_path = workdir / "spark-app.log"
        console.print(f"planned flow {spec['id']} of topology {spec.get('topology')!r} from {TOPOLOGY_PATH.name}")
        console.print(f"running the Spark app (flow {flow_path}, log {log_path}) ...")
        app = _start_app(flow_path, args.master, log_path)
        started = time.monotonic()
        counter = TargetCounter(target.bootstrap_servers, DEMO_TOPICS)
        try:
            _watch(counter, app, args.timeout, console)
        finally:
            counter.close()
            app_code = _stop_app(app)
    console.print(render(counter, time.monotonic() - started))
    problems = verdict(counter)
    if app_code != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-15:]
        problems.append(f"the Spark app exited with {app_code}; last lines of {log_path}:\n" + "\n".join(tail))
    if problems:
        raise KmirrorError("demo failed:\n  - " + "\n  - ".join(problems))
    console.print("[bold green]every record arrived[/]; brokers and the Spark app are stopped")
    return 0
