"""The `limit_java` contender (issue 47): Apache Kafka's own producer benchmark,
`org.apache.kafka.tools.ProducerPerformance`, writing new records into the target with acks=all
and idempotence at its best throughput settings: the broker's ingest limit for new records.

It runs on the cached broker distribution (`kmirror_cli.local_kafka.kafka_jars`) plus the
`kafka-tools` jar of the same version (not a broker dependency: fetched once with Maven into
`<cache>/kafka-tools-<version>/`). Same record count, partitions and bytes per record as the
source topic: value `size` bytes plus the 14 bytes our records' keys take (ProducerPerformance
sends no key and no header, and spreads records over the partitions with the sticky partitioner).
The rate is the tool's own final figure (first send -> last acknowledgement, JVM start-up excluded).
"""

from __future__ import annotations

import fcntl
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from kmirror_cli.local_kafka import DEPENDENCY_PLUGIN_VERSION, cache_dir, java_binary, kafka_jars, resolve_line

MAIN_CLASS = "org.apache.kafka.tools.ProducerPerformance"
KEY_BYTES = len(b"key-%010d" % 0)
# Throughput settings (docs/performance.md, "Fair peers"): large batches and some linger so every
# batch fills, 5 requests in flight (the most idempotence allows), a buffer that never blocks.
BEST_SETTINGS = {
    "acks": "all",
    "enable.idempotence": "true",
    "max.in.flight.requests.per.connection": "5",
    "batch.size": "262144",
    "linger.ms": "10",
    "buffer.memory": "134217728",
}
JVM_OPTIONS = ("-Xmx1G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true")
_FINAL = re.compile(
    r"^(?P<records>\d+) records sent, (?P<rate>[\d.]+) records/sec \((?P<mb>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, (?P<p95>\d+) ms 95th, "
    r"(?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99\.9th\.?$"
)


def tools_jar(version: str) -> Path:
    """`kafka-tools-<version>.jar`, fetched with Maven on first use (locked, cached)."""
    version = resolve_line(version)
    home = cache_dir() / f"kafka-tools-{version}"
    jar = home / f"kafka-tools-{version}.jar"
    if jar.is_file():
        return jar
    home.mkdir(parents=True, exist_ok=True)
    with (home / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if jar.is_file():
            return jar
        mvn = shutil.which("mvn")
        if mvn is None:
            raise RuntimeError("limit_java needs Maven (mvn) to fetch kafka-tools: apt-get install maven")
        done = subprocess.run(
            [
                mvn,
                "-q",
                "-B",
                f"org.apache.maven.plugins:maven-dependency-plugin:{DEPENDENCY_PLUGIN_VERSION}:copy",
                f"-Dartifact=org.apache.kafka:kafka-tools:{version}",
                f"-DoutputDirectory={home}",
            ],
            cwd=home,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0 or not jar.is_file():
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            raise RuntimeError(f"fetching kafka-tools {version} from Maven Central failed:\n{tail}")
    return jar


def perf_command(
    java: str, classpath: str, bootstrap: str, topic: str, records: int, size: int, compression: str
) -> list[str]:
    """The ProducerPerformance command line: unthrottled, `size` value bytes plus the key's,
    BEST_SETTINGS and the topic's compression.type."""
    props = {"bootstrap.servers": bootstrap, **BEST_SETTINGS, "compression.type": compression}
    return [
        java,
        *JVM_OPTIONS,
        "-cp",
        classpath,
        MAIN_CLASS,
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--record-size",
        str(size + KEY_BYTES),
        "--throughput",
        "-1",
        "--producer-props",
        *(f"{key}={value}" for key, value in props.items()),
    ]


def parse_perf(output: str) -> dict[str, float]:
    """The tool's final summary line as numbers (`records`, `rate` records/s, `mb` MB/s, latencies
    in ms: `avg`, `max`, `p50`, `p95`, `p99`, `p999`). Raises ValueError when there is none."""
    for line in reversed(output.splitlines()):
        match = _FINAL.match(line.strip())
        if match:
            return {key: float(value) for key, value in match.groupdict().items()}
    tail = "\n".join(output.splitlines()[-10:])
    raise ValueError(f"ProducerPerformance printed no final summary line; its output ends:\n{tail}")


def run_limit_java(
    bootstrap: str,
    topic: str,
    records: int,
    size: int,
    compression: str,
    version: str,
    log: Path,
    timeout_s: float = 1800,
) -> dict[str, Any]:
    """Run ProducerPerformance into `topic`; returns its summary, its log and a window
    `start`..`end` (ending at its exit) as long as records / its own rate."""
    classpath = f"{tools_jar(version)}:{kafka_jars(version)}/*"
    command = perf_command(java_binary(), classpath, bootstrap, topic, records, size, compression)
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    ended = time.time()
    log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"ProducerPerformance exited {done.returncode}; see {log}")
    summary = parse_perf(done.stdout)
    if int(summary["records"]) != records:
        raise RuntimeError(f"ProducerPerformance sent {summary['records']:.0f} of {records} records; see {log}")
    return {**summary, "start": ended - records / summary["rate"], "end": ended, "log": str(log)}
