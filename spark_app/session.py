"""The SparkSession of the mirror: quiet, small, and local-friendly.

`build_session(master, app_name)` promises:
- Spark's own logging at WARN from the first line (a log4j2 file is handed to the driver JVM
  before it starts), so the mirror's structured progress lines are what a user sees;
- no web UI (tests run many sessions on shared machines; clusters configure their own UI);
- few shuffle partitions (the mirror never shuffles) and Python workers from `PYSPARK_PYTHON`
  (defaulting to this interpreter, so executors import the same packages);
- with `quick_start`, a JVM it launches maps a class-data-sharing archive of Spark's classes,
  made by the first clean run (`spark_app.jvm_classes`; the caller calls `jvm_classes.finish()`
  after `stop()`);
- on a cluster (`master` None) the cluster's confs win: only the quiet logging is applied,
  and `REQUIRED_CONFS`, which no conf can override (`session_confs`).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import Any

log = logging.getLogger("kmirror.session")

LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
logger.spark.name = org.apache.spark
logger.spark.level = warn
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
# "falling behind" repeats every batch of a backlog; lag is in the progress lines instead
logger.trigger.name = org.apache.spark.sql.execution.streaming.ProcessingTimeExecutor
logger.trigger.level = error
# Spark 4.1+ moved the class (4.0, EMR's newest, still uses the name above)
logger.trigger41.name = org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor
logger.trigger41.level = error
# Without admission control for Python sources (Spark 4.0, 4.1) --once runs one AvailableNow
# query per bounded batch on purpose (spark_app.stream_readers): the fallback warning is expected
logger.mbe.name = org.apache.spark.sql.execution.streaming.MicroBatchExecution
logger.mbe.filter.avnow.type = RegexFilter
logger.mbe.filter.avnow.regex = .*does not support Trigger.AvailableNow.*
logger.mbe.filter.avnow.onMatch = DENY
logger.mbe.filter.avnow.onMismatch = NEUTRAL
# "Failed to cancel job group" is logged by every clean stop between batches
logger.dag.name = org.apache.spark.scheduler.DAGScheduler
logger.dag.level = error
# NativeCodeLoader and the "Unable to load native-hadoop" line are noise on every laptop
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
"""

LOCAL_CONFS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.adaptive.enabled": "false",  # unsupported by streaming queries: warned about otherwise
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.metricsEnabled": "false",
    # the app never caches: leave memory to the copying Python workers
    "spark.python.worker.reuse": "true",
    # a Python worker that dies (a native abort, a segfault) leaves its stack in the log
    "spark.python.worker.faulthandler.enabled": "true",
}
# Forced everywhere, over any conf: a speculative copy of a writer task would write its
# partitions' records a second time, interleaved with the first attempt's in the target
# partition (at-least-once duplicates out of order; exactly-once fences one of the two only
# after both wrote).
REQUIRED_CONFS: dict[str, str] = {"spark.speculation": "false"}


def session_confs(master: str | None, confs: dict[str, str] | None = None) -> dict[str, str]:
    """The Spark confs `build_session` applies: local defaults (local masters only), then
    `confs`, then `REQUIRED_CONFS`."""
    base = dict(LOCAL_CONFS) if master is not None else {}
    # The worker daemon is a local-master measure: on a cluster master (spark://, yarn, k8s://) the
    # executors' Python may not import spark_app before their tasks add the app's --py-files, and
    # their pyspark is not the driver's (tests/cluster ran both ways on a standalone cluster).
    if is_local(master) and _pip_installed_pyspark():
        base["spark.python.daemon.module"] = "spark_app.worker_daemon"  # see that module
    if is_local(master):
        base.update(local_checkpoint_confs())
    return {**base, **(confs or {}), **REQUIRED_CONFS}


def is_local(master: str | None) -> bool:
    """Whether `master` runs executors as threads of this driver (`local`, `local[N]`, `local[*]`...)."""
    return master is not None and (master == "local" or master.startswith("local["))


# Spark's default checkpoint file manager for file: paths goes through Hadoop's FileContext,
# whose local file system asks `readlink` (a process) about every path it renames or checks,
# and writes a .crc file beside each file (`chmod`, another process, per file): ~10 processes
# per micro-batch from the driver JVM, 100-150 ms of its walCommit + commitOffsets (Spark 4.3,
# docs/performance.md). Hadoop's raw local file system with the FileSystem-based manager
# (write a temporary file, rename it: atomic on a POSIX file system) does neither.
CHECKPOINT_MANAGERS = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",  # 4.1+
    "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager",  # 4.0
)


def local_checkpoint_confs(jars: str | None = None) -> dict[str, str]:
    """The confs for checkpoints on local files, for the checkpoint manager class this Spark's
    jars hold (`jars`: defaults to the running pyspark's); none where no jar names either (a
    Spark layout this does not know keeps Spark's defaults)."""
    import glob
    import zipfile

    if jars is None:
        import pyspark

        jars = os.path.join(os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__ or ""), "jars")
    for jar in sorted(glob.glob(os.path.join(jars, "spark-sql_*.jar"))):
        try:
            with zipfile.ZipFile(jar) as archive:
                names = set(archive.namelist())
        except (OSError, zipfile.BadZipFile):
            continue
        for manager in CHECKPOINT_MANAGERS:
            if manager.replace(".", "/") + ".class" in names:
                return {
                    "spark.sql.streaming.checkpointFileManagerClass": manager,
                    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
                }
    return {}


def _pip_installed_pyspark() -> bool:
    """Whether this pyspark is a pip-installed package carrying its own zips (`spark_app.worker_daemon`)."""
    import pyspark

    home = os.path.dirname(pyspark.__file__ or "")
    return os.path.isfile(os.path.join(home, "python", "lib", "pyspark.zip"))


def _log4j_file() -> str:
    """The log4j2 config handed to the driver JVM, in this process's private mkdtemp directory
    (`kmirror.security.kerberos.private_dir`): a fixed name under /tmp could be planted or linked by
    another user to change the JVM's logging (log4j2 configs can point appenders anywhere)."""
    from kmirror.security.kerberos import private_dir

    path = private_dir() / "log4j2.properties"
    if not path.exists() or path.read_text() != LOG4J2:
        path.write_text(LOG4J2)
    return str(path)


# A driver JVM whose work is only planning micro-batches (records never enter it) needs no
# optimizing compiler: C1 alone starts ~1 s sooner and copied as fast (docs/performance.md).
QUICK_JIT = "-XX:TieredStopAtLevel=1"


def build_session(
    master: str | None = "local[*]",
    app_name: str = "kmirror",
    confs: dict[str, str] | None = None,
    quick_start: bool = False,
    quick_jit: bool = False,
) -> Any:
    """Build (or get) the SparkSession; `confs` override the local defaults. For a JVM launched
    here: `quick_start` maps (or makes) the class archive (`spark_app.jvm_classes`: the caller
    then calls `jvm_classes.finish()` after `stop()`); `quick_jit` runs it without the
    optimizing compiler (for runs whose records stay out of the JVM: not for SQL transforms)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if is_local(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "hostname resolves to loopback" warning
    # pyspark warns about pandas 3 on import; the mirror does not use pandas
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark\..*")
    from pyspark.sql import SparkSession

    java_options = [f"-Dlog4j2.configurationFile=file:{_log4j_file()}"]
    launches = _launches_jvm()
    if launches:
        from spark_app.jvm_classes import archive_options

        java_options += [archive_options()] if quick_start else []
        java_options += [QUICK_JIT] if quick_jit else []
    java_options = [option for option in java_options if option]
    builder = SparkSession.builder.appName(app_name).config("spark.driver.extraJavaOptions", " ".join(java_options))
    if master is not None:
        builder = builder.master(master)
    for key, value in session_confs(master, confs).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    if not launches:  # spark-submit's JVM read its own log4j2 config, not LOG4J2: its logger levels at least
        apply_logger_levels(session.sparkContext._jvm)
    return session


def logger_levels(properties: str = LOG4J2) -> dict[str, str]:
    """The named loggers' levels of a log4j2 properties text (`logger.<id>.name` / `.level`)."""
    names: dict[str, str] = {}
    levels: dict[str, str] = {}
    for line in properties.splitlines():
        key, _, value = line.partition("=")
        parts = key.strip().split(".")
        if len(parts) == 3 and parts[0] == "logger" and parts[2] in ("name", "level"):
            (names if parts[2] == "name" else levels)[parts[1]] = value.strip()
    return {names[i]: levels[i].upper() for i in names if i in levels}


def apply_logger_levels(jvm: Any) -> list[str]:
    """Under spark-submit the driver JVM started with the platform's log4j2 config (its appenders
    kept: EMR's step logs, the pod's stderr); the app's quieter levels (`LOG4J2`: Spark at WARN, the
    per-batch "falling behind" and clean-stop lines at ERROR) are set on it at run time. Returns the
    loggers set; a JVM without log4j2's Configurator is logged and left as it is."""
    done = []
    try:
        configurator = jvm.org.apache.logging.log4j.core.config.Configurator
        level = jvm.org.apache.logging.log4j.Level
        for name, value in logger_levels().items():
            configurator.setLevel(name, level.valueOf(value))
            done.append(name)
    except Exception as exc:  # logging only: the mirror runs the same
        log.warning("cannot set the driver JVM's logger levels: %s", exc)
    return done


def _launches_jvm() -> bool:
    """Whether `getOrCreate()` will start the driver JVM here (not when spark-submit started it,
    nor when this process already has one)."""
    from pyspark import SparkContext

    return "PYSPARK_GATEWAY_PORT" not in os.environ and SparkContext._gateway is None
