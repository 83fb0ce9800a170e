"""A Spark standalone cluster on loopback from the installed pyspark: one master, N workers.

The nearest thing to the deploy targets (EMR, EKS) these machines can run: executors are JVMs of
their own (children of a worker), Python workers are forked from them, the driver is the test's
`spark-submit` in client mode (standalone runs no Python driver in cluster mode). Started once per
test session (`tests/cluster/conftest.py`); every daemon's log stays in the session's directory and
is printed by a failing test (`StandaloneCluster.logs_tail`).

`SPARK_HOME` is the pip-installed pyspark package (it ships `bin/spark-class`, `bin/spark-submit`
and the jars); work, local and log directories live under the given base directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from kmirror_cli.local_brokers import free_port

START_TIMEOUT_S = 120.0
DAEMON_MEMORY = "256m"  # the master's and each worker's own JVM heap
WORKER_MEMORY = "1g"  # what a worker offers to executors
EXECUTOR_MEMORY = "512m"  # Spark refuses executors under 450 MiB

# The executor confs the deployments use (components/kafka_mirror/emr/specs.py `emr_step_args`, the
# EKS SparkApplication's `HARDENED_SPARK_CONF`): fixed executors of one core, no dynamic allocation,
# driver<->executor RPC authenticated and encrypted. tests/cluster/test_cluster_confs.py checks
# these against the components (leg 1: leg 2's venv has no pulumi). Memory is the test machine's.
DEPLOY_EXECUTOR_CONFS: dict[str, str] = {
    "spark.executor.cores": "1",
    "spark.dynamicAllocation.enabled": "false",
    "spark.authenticate": "true",
    "spark.network.crypto.enabled": "true",
}


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__ or "")


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    webui_port: int

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        """kill -9 of the daemon's whole process group (a worker's executors and their Python workers too)."""
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


@dataclass
class StandaloneCluster:
    base: Path
    workers: int = 2
    secret: str = field(default_factory=lambda: os.urandom(16).hex())
    master: Daemon | None = None
    worker_daemons: list[Daemon] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The environment of every Spark process started here (daemons and spark-submit)."""
        env = dict(os.environ)
        home = spark_home()
        env.update(
            SPARK_HOME=home,
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOG_DIR=str(self.base / "logs"),
            SPARK_LOCAL_DIRS=str(self.base / "local"),
            SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
            SPARK_CONF_DIR=str(self.base / "conf"),
            PYSPARK_PYTHON=env.get("PYSPARK_PYTHON", sys.executable),
            PYSPARK_DRIVER_PYTHON=env.get("PYSPARK_DRIVER_PYTHON", sys.executable),
        )
        # the daemons check the applications' shared secret (spark.authenticate, as on EKS)
        env["SPARK_DAEMON_JAVA_OPTS"] = f"-Dspark.authenticate=true -Dspark.authenticate.secret={self.secret}"
        return env

    def _spawn(self, name: str, args: list[str], webui_port: int) -> Daemon:
        log = self.base / "logs" / f"{name}.out"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [os.path.join(spark_home(), "bin", "spark-class"), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env(),
                start_new_session=True,
            )
        return Daemon(name, proc, log, webui_port)

    def start(self) -> StandaloneCluster:
        for sub in ("logs", "local", "conf", "work"):
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        # the daemons' own logging: WARN to their .out files (quiet, and kept for failures)
        (self.base / "conf" / "log4j2.properties").write_text(
            "rootLogger.level = warn\nrootLogger.appenderRef.stderr.ref = console\n"
            "appender.console.type = Console\nappender.console.name = console\nappender.console.target = SYSTEM_ERR\n"
            "appender.console.layout.type = PatternLayout\n"
            "appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex\n"
            "logger.master.name = org.apache.spark.deploy\nlogger.master.level = info\n"
            # each task's start and end in its executor's stderr (`running_tasks`)
            "logger.executor.name = org.apache.spark.executor.Executor\nlogger.executor.level = info\n"
        )
        self.port = free_port()
        ui = free_port()
        self.master = self._spawn(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--webui-port",
                str(ui),
            ],
            ui,
        )
        self._wait(lambda: self._state() is not None, "the master's web UI")
        for _ in range(self.workers):
            self.add_worker()
        return self

    def add_worker(self) -> Daemon:
        index = len(self.worker_daemons)
        ui = free_port()
        work = self.base / "work" / f"worker-{index}"
        work.mkdir(parents=True, exist_ok=True)
        daemon = self._spawn(
            f"worker-{index}",
            [
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                WORKER_MEMORY,
                "--work-dir",
                str(work),
                "--webui-port",
                str(ui),
                self.url,
            ],
            ui,
        )
        self.worker_daemons.append(daemon)
        self._wait(lambda: self.alive_workers() >= sum(d.alive for d in self.worker_daemons), f"worker {index}")
        return daemon

    def ensure_workers(self) -> None:
        """Two live workers again (a test that killed one replaces it)."""
        while sum(d.alive for d in self.worker_daemons) < self.workers:
            self.add_worker()

    def _state(self) -> dict[str, object] | None:
        assert self.master is not None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.master.webui_port}/json/", timeout=5) as answer:
                return json.loads(answer.read())  # type: ignore[no-any-return]
        except (OSError, ValueError):  # not up yet, or its page before the JSON view is attached (under load)
            return None

    def alive_workers(self) -> int:
        state = self._state() or {}
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")  # type: ignore[union-attr]

    def _wait(self, condition: object, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not condition():  # type: ignore[operator]
            if self.master is not None and not self.master.alive:
                raise RuntimeError(f"the Spark master exited while waiting for {what}:\n{self.logs_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}:\n{self.logs_tail()}")
            time.sleep(0.3)

    def executor_pids(self) -> dict[int, list[int]]:
        """Per worker index: the pids of its executor JVMs (children of the worker JVM)."""
        found: dict[int, list[int]] = {}
        for index, daemon in enumerate(self.worker_daemons):
            if daemon.alive:
                found[index] = [
                    pid for pid in _descendants(daemon.proc.pid) if "CoarseGrainedExecutorBackend" in _cmdline(pid)
                ]
        return found

    def running_tasks(self) -> dict[int, dict[int, list[str]]]:
        """Per worker index, per executor JVM pid: the tasks it runs now ("0.0 in stage 3.0"), from its
        stderr's `Executor` lines (a "Running task" without its "Finished task")."""
        found: dict[int, dict[int, list[str]]] = {}
        for index, pids in self.executor_pids().items():
            found[index] = {}
            for pid in pids:
                args = _cmdline(pid).split()
                try:
                    app, executor = args[args.index("--app-id") + 1], args[args.index("--executor-id") + 1]
                except (ValueError, IndexError):
                    continue
                found[index][pid] = running_in(self.base / "work" / f"worker-{index}" / app / executor / "stderr")
        return found

    def executor_log(self) -> str:
        """Every executor's stderr of the session, each headed by its path."""
        return "\n".join(
            f"--- {path.relative_to(self.base)}\n{path.read_text(errors='replace')}"
            for path in sorted((self.base / "work").glob("*/app-*/*/stderr"))
        )

    def logs_tail(self, chars: int = 3000) -> str:
        parts = []
        for path in sorted((self.base / "logs").glob("*.out")):
            parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-chars:]}")
        for path in sorted((self.base / "work").glob("*/app-*/*/stderr")):
            parts.append(f"--- {path.relative_to(self.base)}\n{path.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        for daemon in [*self.worker_daemons, *([self.master] if self.master else [])]:
            if daemon.alive:
                daemon.kill9()

    def submit_command(self, entry: str, *args: str, confs: dict[str, str] | None = None) -> list[str]:
        """`spark-submit --master spark://... --deploy-mode client` of `entry` with the deployments'
        executor confs (two executors of one core, one per worker)."""
        conf = {
            **DEPLOY_EXECUTOR_CONFS,
            "spark.authenticate.secret": self.secret,
            "spark.cores.max": str(self.workers),
            "spark.executor.memory": EXECUTOR_MEMORY,
            "spark.driver.host": "127.0.0.1",
            "spark.ui.enabled": "false",
            **(confs or {}),
        }
        # in a properties file readable by this user only: the shared secret stays off command lines
        properties = self.base / "conf" / f"submit-{len(list((self.base / 'conf').glob('submit-*')))}.properties"
        properties.touch(mode=0o600)
        properties.write_text("".join(f"{key} {value}\n" for key, value in conf.items()))
        return [
            os.path.join(spark_home(), "bin", "spark-submit"),
            "--master",
            self.url,
            "--deploy-mode",
            "client",
            "--driver-memory",
            "512m",
            "--properties-file",
            str(properties),
            entry,
            *args,
        ]


def running_in(stderr: Path) -> list[str]:
    """The tasks an executor's stderr shows started and not finished: ["0.0 in stage 3.0", ...]."""
    try:
        text = stderr.read_text(errors="replace")
    except OSError:
        return []
    started = {tid: task for task, tid in TASK_LINE.findall(text)}
    for tid in re.findall(r"Finished task [^(]*\(TID (\d+)\)", text):
        started.pop(tid, None)
    return list(started.values())


TASK_LINE = re.compile(r"Running task (\S+ in stage \S+) \(TID (\d+)\)")


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(c) for c in f.read().split()]
    return found


def _descendants(pid: int) -> Iterator[int]:
    for child in _children(pid):
        yield child
        yield from _descendants(child)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def has_java() -> bool:
    return shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME"))
