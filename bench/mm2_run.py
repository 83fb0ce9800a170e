"""The `mm2` contender: a real MirrorMaker 2 in dedicated mode (`org.apache.kafka.connect.mirror.
MirrorMaker mm2.properties`, jars from `kmirror_cli.local_mm2`) mirroring the benchmark's source
topic into `<source alias>.<topic>` on the target, with `tasks.max` = cores.

Configuration: MM2's defaults (DefaultReplicationPolicy, checkpoints, heartbeats, offset syncs,
its Connect worker's producer and consumer), plus the safety settings our producers use
(`bench.measure.SAFE_PRODUCER`: acks=all, idempotence, 5 in flight) on its target producer, and
replication factor 1 (one-node clusters). Each round gets a fresh source alias, hence a fresh
target topic, Connect group and offsets topic: MM2 starts from the first source record.
The JVM runs with the options of Kafka's `connect-mirror-maker.sh` (heap 256 MB..2 GB, G1).

How its figures are taken, from outside (MM2 has no batch log like ours):
- rate: a watcher polls the target topic's end offsets every `POLL_S` from the process start;
  the copy window runs from the first poll that sees a record there to the first poll where the
  target holds as many records as the source. JVM start-up, connector start and task assignment
  are excluded (reported as start-up). Each end of the window is late by at most one poll.
- CPU: utime + stime of the java process (all its threads: tasks, clients, GC, JIT) from
  /proc/<pid>/stat, read at those same two polls; divided by the records copied.
MM2 is stopped with SIGTERM (its shutdown hook stops the connectors) after each round.
"""

from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from bench.measure import SAFE_PRODUCER, RssSampler, process_cpu_s
from kmirror_cli.local_kafka import java_binary
from kmirror_cli.local_mm2 import MM2_MAIN_CLASS

POLL_S = 0.05
STOP_TIMEOUT_S = 60.0
# connect-mirror-maker.sh's heap and kafka-run-class.sh's default JVM performance options
JVM_OPTIONS = (
    "-Xms256M",
    "-Xmx2G",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
)
INTERNAL_TOPICS = (
    "checkpoints.topic",
    "heartbeats.topic",
    "offset-syncs.topic",
    "offset.storage",
    "status.storage",
    "config.storage",
)
LOG4J = """log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


@dataclass(frozen=True)
class Mm2Flow:
    """One MM2 round: `source_alias`->`target_alias` mirroring `topic` with `tasks` tasks."""

    source_alias: str
    target_alias: str
    source: str  # bootstrap servers
    target: str
    topic: str
    tasks: int
    extra: tuple[tuple[str, str], ...] = ()  # further mm2.properties entries (bench/mm2_tuning.py)

    @property
    def target_topic(self) -> str:
        """The name DefaultReplicationPolicy gives the mirrored topic."""
        return f"{self.source_alias}.{self.topic}"


def mm2_properties(flow: Mm2Flow) -> dict[str, str]:
    """The dedicated-mode mm2.properties of `flow`: one enabled direction, one topic, MM2's
    defaults otherwise, plus our producers' safety settings on the target producer."""
    src, dst = flow.source_alias, flow.target_alias
    props = {
        "clusters": f"{src}, {dst}",
        f"{src}.bootstrap.servers": flow.source,
        f"{dst}.bootstrap.servers": flow.target,
        f"{src}->{dst}.enabled": "true",
        f"{dst}->{src}.enabled": "false",
        f"{src}->{dst}.topics": flow.topic,
        "tasks.max": str(flow.tasks),
        "replication.factor": "1",
        **{f"{topic}.replication.factor": "1" for topic in INTERNAL_TOPICS},
    }
    for key, value in SAFE_PRODUCER.items():
        props[f"{dst}.producer.{key}"] = str(value).lower() if isinstance(value, bool) else str(value)
    props.update(flow.extra)
    return props


@dataclass(frozen=True)
class Sample:
    """One watcher poll: wall clock seconds, records in the target topic, MM2's CPU seconds."""

    at: float
    written: int
    cpu_s: float


def copy_window(samples: list[Sample], total: int) -> tuple[Sample, Sample]:
    """The first sample that saw a record written and the first that saw all `total`.
    Raises ValueError (with the last count) when the samples never saw them all."""
    first = next((s for s in samples if s.written > 0), None)
    last = next((s for s in samples if s.written >= total), None)
    if first is None or last is None:
        seen = samples[-1].written if samples else 0
        raise ValueError(f"MM2 wrote {seen} of {total} records while watched")
    return first, last


def end_offsets(consumer: Consumer, topic: str, nparts: int) -> dict[int, int]:
    """Each partition's end offset (high watermark), asked of the broker (not cached)."""
    ends = {}
    for p in range(nparts):
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
        ends[p] = high
    return ends


def _tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else "(no log)"


def watch(
    process: subprocess.Popen[bytes], target: str, topic: str, nparts: int, total: int, log: Path, timeout_s: float
) -> list[Sample]:
    """Poll the target topic's end offsets and MM2's CPU until it holds `total` records.
    Raises RuntimeError (with the log's tail) when MM2 exits or the timeout passes first."""
    consumer = Consumer({"bootstrap.servers": target, "group.id": "bench-mm2-watch", "enable.auto.commit": False})
    samples: list[Sample] = []
    deadline = time.monotonic() + timeout_s
    try:
        while not samples or samples[-1].written < total:
            written = sum(end_offsets(consumer, topic, nparts).values())
            cpu = process_cpu_s(process.pid)
            if cpu is None or process.poll() is not None:
                raise RuntimeError(
                    f"MM2 exited ({process.poll()}) after {written} of {total} records; {log}:\n{_tail(log)}"
                )
            samples.append(Sample(time.time(), written, cpu))
            if time.monotonic() > deadline:
                raise RuntimeError(f"MM2 wrote {written} of {total} records in {timeout_s:.0f} s; {log}:\n{_tail(log)}")
            time.sleep(POLL_S)
    finally:
        consumer.close()
    return samples


def stop(process: subprocess.Popen[bytes]) -> tuple[str, float]:
    """Stop MM2 cleanly (SIGTERM: its shutdown hook stops the connectors and commits offsets);
    SIGKILL only after `STOP_TIMEOUT_S`. Returns how it stopped and how long that took."""
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_TIMEOUT_S)
        # 143 = 128 + SIGTERM: the JVM's exit status after its shutdown hook ran
        how = f"SIGTERM (exit {process.returncode})"
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        how = f"SIGKILL after {STOP_TIMEOUT_S:.0f} s"
    return how, time.monotonic() - started


def start(flow: Mm2Flow, jars: Path, workdir: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """Write the flow's mm2.properties and log4j config under `workdir` and start MM2; returns
    the process and its log."""
    props, log4j = workdir / f"mm2-{flow.source_alias}.properties", workdir / "mm2-log4j.properties"
    props.write_text("".join(f"{key} = {value}\n" for key, value in mm2_properties(flow).items()))
    log4j.write_text(LOG4J)
    log = workdir / f"mm2-{flow.source_alias}.log"
    command = [
        java_binary(),
        *JVM_OPTIONS,
        f"-Dlog4j.configuration=file:{log4j}",
        "-cp",
        f"{jars}/*",
        MM2_MAIN_CLASS,
        str(props),
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return process, log


def source_records(flow: Mm2Flow, nparts: int) -> int:
    """Records in the source topic (its end offsets: the data and the fences after it)."""
    consumer = Consumer({"bootstrap.servers": flow.source, "group.id": "bench-mm2-watch", "enable.auto.commit": False})
    try:
        return sum(end_offsets(consumer, flow.topic, nparts).values())
    finally:
        consumer.close()


def run_mm2(flow: Mm2Flow, jars: Path, workdir: Path, nparts: int, timeout_s: float = 1800) -> dict[str, Any]:
    """Run MM2 on `flow` until the target topic holds as many records as the source, then stop it.

    Returns the copy window (`start`, `end`, wall clock s), `startup_s` (process start -> first
    record seen in the target), `cpu_s` (the java process's CPU over the window), `rss_mib`
    (its peak RSS), how it stopped and its log. Raises RuntimeError when MM2 fails."""
    total = source_records(flow, nparts)
    started = time.time()
    process, log = start(flow, jars, workdir)
    sampler = RssSampler(process.pid).start()
    try:
        samples = watch(process, flow.target, flow.target_topic, nparts, total, log, timeout_s)
    finally:
        sampler.stop()
        stopped, stop_s = stop(process)
    first, last = copy_window(samples, total)
    return {
        "start": first.at,
        "end": last.at,
        "startup_s": first.at - started,
        "cpu_s": last.cpu_s - first.cpu_s,
        "rss_mib": sampler.largest["jvm"],
        "pid": process.pid,
        "stopped": stopped,
        "stop_s": stop_s,
        "polls": len(samples),
        "log": str(log),
    }
