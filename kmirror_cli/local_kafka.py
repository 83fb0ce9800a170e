"""Apache Kafka brokers on loopback for the test bed and benchmarks: the broker users run.

The jars come from Maven Central (`org.apache.kafka:kafka_2.13`, pinned per line in
`KAFKA_LINES`), resolved once by `mvn dependency:copy-dependencies` into a cache that later
runs reuse (`$KMIRROR_CACHE_DIR`, default `~/.cache/kmirror`). One `KafkaBroker` is one
single-node KRaft cluster (broker and controller in one JVM) on free loopback ports, with its
storage formatted on a temporary directory that survives `kill()`/`start()` (a broker killed
with -9 restarts with its log), a small heap, and its log kept for failures.

tansu (`local_brokers.LocalBroker`) stays the demo's embedded default: it starts in ~50 ms and
needs no JVM; this module is what the end-to-end suites run against.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from kmirror.errors import KmirrorError
from kmirror_cli.local_brokers import BrokerProcess, free_port

# The pinned Apache Kafka lines: the current one, and the 3.x line many production clusters run.
KAFKA_LINES = {"4.1": "4.1.2", "3.9": "3.9.1"}
DEFAULT_LINE = "4.1"
SLF4J_VERSION = "1.7.36"  # the slf4j-api both lines use; slf4j-simple writes the broker's log
DEPENDENCY_PLUGIN_VERSION = "3.8.1"
START_TIMEOUT_S = 90.0
STARTED_LINE = "Kafka Server started"

POM_TEMPLATE = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <!-- written by kmirror_cli/local_kafka.py: the jars of one Apache Kafka broker line -->
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.kmirror.testbed</groupId>
  <artifactId>apache-kafka-{version}</artifactId>
  <version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{version}</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId><version>{slf4j}</version></dependency>
  </dependencies>
  <build><plugins><plugin>
    <groupId>org.apache.maven.plugins</groupId><artifactId>maven-dependency-plugin</artifactId>
    <version>{plugin}</version>
  </plugin></plugins></build>
</project>
"""


def cache_dir() -> Path:
    return Path(os.environ.get("KMIRROR_CACHE_DIR") or Path.home() / ".cache" / "kmirror")


@contextlib.contextmanager
def filled_once(home: Path) -> Iterator[bool]:
    """A cache directory filled once: yields False when `home` carries its `.complete` marker, else
    True while holding `home/.lock`, for the caller to fill `home` and then write the marker.
    Concurrent callers wait on the lock and then find the marker; an interrupted fill leaves none,
    so it is redone."""
    if (home / ".complete").exists():
        yield False
        return
    home.mkdir(parents=True, exist_ok=True)
    with (home / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield not (home / ".complete").exists()


def resolve_line(line: str) -> str:
    """The pinned version of a Kafka line ("4.1") or an exact pinned version; raises naming the choices."""
    if line in KAFKA_LINES:
        return KAFKA_LINES[line]
    if line in KAFKA_LINES.values():
        return line
    choices = ", ".join(f"{k} ({v})" for k, v in KAFKA_LINES.items())
    raise KmirrorError(f"unknown Apache Kafka line {line!r}: choose one of {choices}")


def kafka_jars(line: str = DEFAULT_LINE) -> Path:
    """The directory holding every jar of the broker line `line`, fetched with Maven on first use.

    Concurrent callers (two test legs, a benchmark) wait on a file lock; a finished directory
    carries a `.complete` marker, so an interrupted fetch is redone. Raises KmirrorError when
    Maven is missing or the resolution fails (with Maven's last lines)."""
    version = resolve_line(line)
    home = cache_dir() / f"kafka-{version}"
    jars = home / "lib"
    with filled_once(home) as to_fill:
        if not to_fill:
            return jars
        mvn = shutil.which("mvn")
        if mvn is None:
            raise KmirrorError(
                "the Apache Kafka test brokers need Maven (mvn) and Java 17: "
                "apt-get install maven openjdk-17-jre-headless"
            )
        (home / "pom.xml").write_text(
            POM_TEMPLATE.format(version=version, slf4j=SLF4J_VERSION, plugin=DEPENDENCY_PLUGIN_VERSION)
        )
        shutil.rmtree(jars, ignore_errors=True)
        started = time.monotonic()
        done = subprocess.run(
            [mvn, "-q", "-B", "dependency:copy-dependencies", f"-DoutputDirectory={jars}"],
            cwd=home,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            raise KmirrorError(f"fetching Apache Kafka {version} from Maven Central failed:\n{tail}")
        (home / ".complete").write_text(f"fetched in {time.monotonic() - started:.1f} s\n")
    return jars


def java_binary() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise KmirrorError("the Apache Kafka test brokers need Java 17: apt-get install openjdk-17-jre-headless")
    return java


def random_cluster_id() -> str:
    """A KRaft cluster id: a UUID in unpadded URL-safe base64, as `kafka-storage random-uuid` prints.
    Never one that starts with "-" (as Kafka's Uuid.randomUuid): the storage tool's argument parser
    would take it for an option ("--cluster-id: expected one argument", 1 id in 64)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


@dataclass(frozen=True)
class Listener:
    """An extra client listener: `name` (e.g. "SASL_SSL"), its security protocol, port and the
    listener-scoped settings (`listener.name.<name>.*` keys written with that prefix)."""

    name: str
    protocol: str
    port: int = field(default_factory=free_port)
    settings: dict[str, str] = field(default_factory=dict)


@dataclass
class KafkaBroker(BrokerProcess):
    """One single-node KRaft Apache Kafka cluster on 127.0.0.1; a context manager.

    `bootstrap_servers` is the PLAINTEXT listener (the test harness's own super user when the
    authorizer is on); `extra_listeners` add TLS/SASL listeners; `scram_users` are written into
    the storage at format time (`--add-scram`), so SASL/SCRAM works from the first start."""

    name: str
    line: str = DEFAULT_LINE
    port: int = 0  # 0: a free port, picked now (and again if another process takes it before the first start)
    controller_port: int = 0  # as `port`
    authorizer: bool = True
    super_users: tuple[str, ...] = ("User:ANONYMOUS",)
    extra_listeners: tuple[Listener, ...] = ()
    scram_users: dict[str, str] = field(default_factory=dict)  # name -> password (SCRAM-SHA-512)
    settings: dict[str, str] = field(default_factory=dict)
    jvm_options: tuple[str, ...] = ()
    classpath: tuple[str, ...] = ()  # more class directories/jars (a test's own callback handler)
    heap_mb: int = 512
    process: subprocess.Popen[bytes] | None = None
    work_dir: Path | None = None
    # a controlled shutdown (stop) leaves the storage until remove(); it may take a while
    stop_timeout_s: ClassVar[float] = 30.0
    # first starts that lost a picked port to another process (`start`)
    bind_attempts: ClassVar[int] = 3
    picked_ports: frozenset[str] = field(default=frozenset(), init=False, repr=False)

    def __post_init__(self) -> None:
        picked = {name for name in ("port", "controller_port") if getattr(self, name) == 0}
        for name in picked:
            setattr(self, name, free_port())
        self.picked_ports = frozenset(picked)

    @property
    def version(self) -> str:
        return resolve_line(self.line)

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        assert self.work_dir is not None, "the broker has not been started"
        return self.work_dir / "broker.log"

    def listener_address(self, name: str) -> str:
        for listener in self.extra_listeners:
            if listener.name == name:
                return f"127.0.0.1:{listener.port}"
        raise KeyError(name)

    def server_properties(self) -> dict[str, str]:
        """Every broker setting: small and quick for tests, otherwise as a production broker."""
        assert self.work_dir is not None
        listeners = [f"PLAINTEXT://127.0.0.1:{self.port}", f"CONTROLLER://127.0.0.1:{self.controller_port}"]
        protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.work_dir / "data"),
            "num.partitions": "1",
            "default.replication.factor": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "3",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # A broker killed with -9 registers again only once its old session expired (9 s by
            # default); a shorter session keeps restart tests quick, long enough for a loaded 2-core CI machine.
            "broker.session.timeout.ms": "6000",
            "broker.heartbeat.interval.ms": "1000",
            # The app must create every topic it writes, with the source's partitions, as on a
            # production cluster (auto-creation would hide a topic it forgot).
            "auto.create.topics.enable": "false",
            "log.segment.bytes": str(64 * 1024 * 1024),
        }
        if self.authorizer:
            props["authorizer.class.name"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
            props["super.users"] = ";".join(self.super_users)
        for listener in self.extra_listeners:
            listeners.append(f"{listener.name}://127.0.0.1:{listener.port}")
            protocols.append(f"{listener.name}:{listener.protocol}")
            for key, value in listener.settings.items():
                props[f"listener.name.{listener.name.lower()}.{key}"] = value
        props["listeners"] = ",".join(listeners)
        props["advertised.listeners"] = ",".join(item for item in listeners if not item.startswith("CONTROLLER:"))
        props["listener.security.protocol.map"] = ",".join(protocols)
        props.update(self.settings)
        return props

    def _java(self, main_class: str, *args: str, heap_mb: int) -> list[str]:
        return [
            java_binary(),
            f"-Xmx{heap_mb}m",
            "-Xms64m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
            "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients=warn",
            *self.jvm_options,
            "-cp",
            os.pathsep.join([f"{kafka_jars(self.line)}/*", *self.classpath]),
            main_class,
            *args,
        ]

    def _format(self) -> None:
        assert self.work_dir is not None
        props = self.work_dir / "server.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in self.server_properties().items()))
        command = self._java(
            "kafka.tools.StorageTool", "format", "-t", random_cluster_id(), "-c", str(props), heap_mb=256
        )
        for user, password in self.scram_users.items():
            command += ["--add-scram", f"SCRAM-SHA-512=[name={user},password={password}]"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise KmirrorError(f"formatting the storage of broker {self.name!r} failed: {done.stdout}{done.stderr}")

    def start(self) -> KafkaBroker:
        """Start (formatting the storage on the first start); returns when the broker serves
        requests. Raises KmirrorError with the log's last lines when it does not within 90 s.

        A port picked by `free_port` is free when picked, not when the broker binds it: another
        process (a client's outgoing connection, another broker or Spark of a concurrent test chain)
        can take it in between. A first start that fails to bind therefore starts over with new
        ports and new storage, up to `bind_attempts` times; a restart keeps its ports (its clients
        know them)."""
        for attempt in range(1, self.bind_attempts + 1):
            first = self.work_dir is None
            if first:
                self.work_dir = Path(tempfile.mkdtemp(prefix=f"kmirror-kafka-{self.name}-"))
                self._format()
            assert self.work_dir is not None
            log = self.log_path.open("ab")
            offset = self.log_path.stat().st_size
            command = self._java("kafka.Kafka", str(self.work_dir / "server.properties"), heap_mb=self.heap_mb)
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            log.close()
            try:
                self._wait_started(offset)
                return self
            except KmirrorError:
                if not (first and self.picked_ports and attempt < self.bind_attempts and self._bind_failed(offset)):
                    raise
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None
            for name in self.picked_ports:
                setattr(self, name, free_port())
        raise AssertionError("unreachable: the last attempt raises")

    def _bind_failed(self, log_offset: int) -> bool:
        with self.log_path.open("rb") as log:
            log.seek(log_offset)
            return b"Address already in use" in log.read()

    def _wait_started(self, log_offset: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        assert self.process is not None
        while time.monotonic() < deadline:
            with self.log_path.open("rb") as log:
                log.seek(log_offset)
                if STARTED_LINE.encode() in log.read():
                    return
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-20:])
        self.stop()
        raise KmirrorError(f"Apache Kafka broker {self.name!r} did not start (log {self.log_path}):\n{tail}")

    def kill(self) -> None:
        """SIGKILL, as a crashed host: no controlled shutdown; `start()` recovers from the log."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()
            self.process = None

    def remove(self) -> None:
        """Stop and delete the storage; the log is kept (`KMIRROR_KEEP_BROKER_LOGS=0` drops it too)."""
        self.stop()
        if self.work_dir is not None:
            shutil.rmtree(self.work_dir / "data", ignore_errors=True)
            if os.environ.get("KMIRROR_KEEP_BROKER_LOGS") == "0":
                shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.remove()


def main(argv: list[str] | None = None) -> int:
    """`python -m kmirror_cli.local_kafka fetch [LINE ...]`: fill the jar cache (set-up, CI)."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "fetch":
        print("usage: python -m kmirror_cli.local_kafka fetch [LINE ...]", file=sys.stderr)
        return 2
    for line in args[1:] or list(KAFKA_LINES):
        started = time.monotonic()
        jars = kafka_jars(line)
        print(f"Apache Kafka {resolve_line(line)}: {jars} ({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
