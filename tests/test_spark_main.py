"""`python -m spark_app` / `kmirror run` exit codes and messages (no Spark needed to fail fast)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from kmirror.errors import DataLossError, KmirrorError
from kmirror_cli.local_brokers import free_port
from spark_app.query_watch import explain


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=timeout)


def flow_file(tmp_path: Path, **changes: object) -> str:
    raw = {
        "id": "west->east",
        "topics": ["orders"],
        "topics_exclude": [],
        "source": {"alias": "west", "bootstrap_servers": f"127.0.0.1:{free_port()}", "config": {}},
        "target": {"alias": "east", "bootstrap_servers": f"127.0.0.1:{free_port()}", "config": {}},
        "replication_policy": {"type": "default"},
        "checkpoint_location": str(tmp_path / "ckpt"),
        **changes,
    }
    path = tmp_path / "flow.json"
    path.write_text(json.dumps(raw))
    return str(path)


def test_invalid_spec_exits_2_naming_the_key_without_traceback(tmp_path: Path) -> None:
    result = run("spark_app", "--flow", flow_file(tmp_path, max_records_per_triger=5), "--once")
    assert result.returncode == 2
    assert "max_records_per_triger: unknown key (did you mean 'max_records_per_trigger'?)" in result.stderr
    assert "Traceback" not in result.stderr
    missing = run("kmirror_cli.cli", "run", "--flow", str(tmp_path / "nope.json"), "--once")
    assert missing.returncode == 2 and "file not found" in missing.stderr and "Traceback" not in missing.stderr


def test_unreachable_cluster_with_once_fails_in_bounded_time_naming_it(tmp_path: Path) -> None:
    path = flow_file(tmp_path)
    address = json.loads(Path(path).read_text())["source"]["bootstrap_servers"]
    started = time.monotonic()
    result = run("spark_app", "--flow", path, "--once")
    assert result.returncode == 1
    assert time.monotonic() - started < 40
    assert f"cluster 'west' ({address})" in result.stderr and "Traceback" not in result.stderr


def test_errors_crossing_the_jvm_become_one_line_with_their_type() -> None:
    jvm_text = (
        "[STREAM_FAILED] Query terminated with exception\n"
        'Traceback (most recent call last):\n  File "x.py", line 1\n'
        "kmirror.errors.DataLossError: west->east: data loss on orders[0]: offsets 0..9 were deleted\n"
    )
    error = explain(RuntimeError(jvm_text))
    assert isinstance(error, DataLossError) and str(error).startswith("west->east: data loss on orders[0]")
    other = explain(RuntimeError("kmirror_engine.copying.range_copy.CopyError: delivery failed for t[0]@5"))
    assert type(other) is KmirrorError and str(other) == "CopyError: delivery failed for t[0]@5"


class _Query:
    """A query double: `awaitTermination` raises the JVM failure it was made with (or ends)."""

    def __init__(self, failure: BaseException | None) -> None:
        self.failure = failure

    def awaitTermination(self, _timeout: float) -> bool:
        if self.failure is not None:
            raise self.failure
        return True

    def exception(self) -> None:
        return None


def _lost() -> BaseException:
    from pyspark.errors import StreamingQueryException

    return StreamingQueryException(
        "[STREAM_FAILED] terminated with exception: java.io.EOFException\n"
        "\tat org.apache.spark.sql.execution.python.streaming.PythonStreamingSourceRunner.partitions(x.scala:270)"
    )


def test_a_lost_planning_process_restarts_the_query_a_bounded_number_of_times() -> None:
    import threading

    import pytest

    from spark_app.query_watch import PLANNER_RESTARTS, PlanningProcessLost, planning_process_lost, run_query

    assert planning_process_lost(_lost())
    assert not planning_process_lost(KmirrorError("java.io.EOFException while reading a file"))
    from pyspark.errors import StreamingQueryException

    never_connected = StreamingQueryException(  # as a CI run saw it: the planner's start timed out
        "[STREAM_FAILED] terminated with exception: Python worker failed to connect back. SQLSTATE: XXKST\n"
        "\tat org.apache.spark.api.python.PythonWorkerFactory.createSimpleWorker(PythonWorkerFactory.scala:328)\n"
        "\tat org.apache.spark.sql.execution.python.streaming.PythonStreamingSourceRunner.init(x.scala:109)"
    )
    assert planning_process_lost(never_connected)
    assert not planning_process_lost(KmirrorError("Python worker failed to connect back (a task's worker)"))
    reset = StreamingQueryException(  # as a CI run saw it: the planner was killed with bytes unread
        "[STREAM_FAILED] terminated with exception: java.net.SocketException: Connection reset\n"
        "\tat org.apache.spark.sql.execution.python.streaming.PythonStreamingSourceRunner.latestOffset(x.scala:137)"
    )
    assert planning_process_lost(reset)
    broken = StreamingQueryException(  # Spark's next call written to a planner already gone
        "[STREAM_FAILED] terminated with exception: java.net.SocketException: Broken pipe\n"
        "\tat org.apache.spark.sql.execution.python.streaming.PythonStreamingSourceRunner.latestOffset(x.scala:130)"
    )
    assert planning_process_lost(broken)
    assert not planning_process_lost(KmirrorError("java.net.SocketException: Connection reset (a broker)"))
    started: list[int] = []

    def crashes_then_ends() -> _Query:
        started.append(1)
        return _Query(_lost() if len(started) <= 2 else None)

    run_query(crashes_then_ends, threading.Event())
    assert len(started) == 3  # two restarts, then the query ended normally
    started.clear()
    with pytest.raises(PlanningProcessLost, match="planning process ended"):
        run_query(lambda: started.append(1) or _Query(_lost()), threading.Event())  # type: ignore[func-returns-value]
    assert len(started) == PLANNER_RESTARTS + 1  # a planner that always dies is a failure, not a loop
    other = ValueError("boom")
    with pytest.raises(ValueError):
        run_query(lambda: _Query(other), threading.Event())


def test_local_python_workers_import_the_installed_pyspark_not_its_zip(tmp_path: Path) -> None:
    """The zips of a pip-installed pyspark leave the workers' path (compiled code is cached for
    the package, never for a zip); a Spark distribution's zips (no package around them) stay."""
    import pyspark

    from spark_app.session import session_confs
    from spark_app.worker_daemon import installed_spark_zips

    home = Path(pyspark.__file__).parent
    pip_zips = [str(home / "python" / "lib" / "pyspark.zip"), str(home / "python" / "lib" / "py4j-0.10.9.9-src.zip")]
    distribution = tmp_path / "spark" / "python" / "lib"
    distribution.mkdir(parents=True)
    other = [str(distribution / "pyspark.zip"), str(distribution / "py4j-0.10.9.9-src.zip"), "/usr/lib/python311.zip"]
    assert installed_spark_zips([*pip_zips, *other, str(home.parent)]) == pip_zips
    assert session_confs("local[2]")["spark.python.daemon.module"] == "spark_app.worker_daemon"
    assert "spark.python.daemon.module" not in session_confs(None)  # a cluster's own Spark decides
    for cluster in ("spark://127.0.0.1:7077", "yarn", "k8s://https://api:443", "localhost-cluster"):
        assert "spark.python.daemon.module" not in session_confs(cluster), cluster  # executors elsewhere
    # and a worker really runs without the zip: pyspark comes from the package, compiled
    probe = (
        "import sys, zipimport; import spark_app.worker_daemon as d; d.drop_installed_zips(); import pyspark; "
        "print(pyspark.__file__); print(sum(isinstance(f, zipimport.zipimporter) "
        "for f in sys.path_importer_cache.values()))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": ":".join(pip_zips), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    where, zip_importers = result.stdout.split()
    assert where == str(home / "__init__.py")
    assert zip_importers == "0"  # none left to read its zip again at every task


def test_local_checkpoints_use_the_raw_file_system_with_the_class_this_spark_has(tmp_path: Path) -> None:
    """Local masters write checkpoints through Hadoop's raw local file system with the
    FileSystem-based manager, named as this Spark's jars name it (4.0 and 4.1+ differ); an
    unknown layout keeps Spark's defaults, and a cluster's Spark decides for itself."""
    import zipfile

    from spark_app.session import CHECKPOINT_MANAGERS, local_checkpoint_confs, session_confs

    key = "spark.sql.streaming.checkpointFileManagerClass"
    ours = local_checkpoint_confs()
    assert ours[key] in CHECKPOINT_MANAGERS and ours["spark.hadoop.fs.file.impl"].endswith("RawLocalFileSystem")
    assert session_confs("local[2]")[key] == ours[key]
    assert key not in session_confs(None) and key not in session_confs("spark://elsewhere:7077")
    assert session_confs("local[2]", {key: "mine"})[key] == "mine"  # the user's conf wins
    for manager in CHECKPOINT_MANAGERS:
        jars = tmp_path / manager.split(".")[-2]
        jars.mkdir()
        with zipfile.ZipFile(jars / "spark-sql_2.13-9.9.9.jar", "w") as jar:
            jar.writestr(manager.replace(".", "/") + ".class", b"")
        assert local_checkpoint_confs(str(jars))[key] == manager
    (tmp_path / "none").mkdir()
    with zipfile.ZipFile(tmp_path / "none" / "spark-sql_2.13-9.9.9.jar", "w") as jar:
        jar.writestr("org/apache/spark/Other.class", b"")
    assert local_checkpoint_confs(str(tmp_path / "none")) == {}


def _preload_in_a_fresh_process(env: dict[str, str] | None = None) -> list[str]:
    """`worker_daemon.preload()` in a fresh interpreter: whether it kept the modules, the threads
    after it, whether the sink, numpy and pyarrow are imported, whether the process is as before
    (no module and no attribute left of the attempt), and which never-preloaded modules it holds."""
    probe = """
from spark_app import worker_daemon as d
import sys
before = set(sys.modules)
loaded = d.preload()
starters = sorted(m for m in d.THREAD_STARTERS if m in sys.modules)
live = {id(m) for m in sys.modules.values()}
stale = [f"{n}.{a}" for n in before for a, v in vars(sys.modules[n]).items()
         if type(v) is type(sys) and id(v) not in live]
unchanged = set(sys.modules) == before and not stale
print(loaded, d.threads(), "spark_app.sink" in sys.modules, "numpy" in sys.modules and "pyarrow" in sys.modules,
      unchanged, starters)
"""
    root = Path(__file__).resolve().parents[1]
    base = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "JE_ARROW_MALLOC_CONF")}
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, "PYTHONPATH": str(root), **(env or {})},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split(maxsplit=5)


def test_the_worker_daemon_preloads_the_tasks_modules_numpy_and_pyarrow_included_single_threaded() -> None:
    """numpy and pyarrow (Spark's arrow path, ~0.1 s of CPU per task process) are imported in the
    daemon with their threads off (OpenBLAS's pool, pyarrow's jemalloc background thread): it
    stays single-threaded, safe to fork, on every pyspark (4.0 imports numpy with pyspark itself)."""
    loaded, threads, sink, arrow, _, starters = _preload_in_a_fresh_process()
    assert (loaded, threads, sink, arrow, starters.strip()) == ("True", "1", "True", "True", "[]")


def test_a_deployment_asking_for_blas_threads_gets_no_numpy_or_pyarrow_preloaded() -> None:
    """OPENBLAS_NUM_THREADS=2 (a deployment's own setting) would make numpy start a thread when
    imported: numpy and pyarrow are refused, so the daemon stays single-threaded; the rest is
    preloaded where pyspark does not import numpy itself (4.1+), and nothing stays on 4.0."""
    from importlib.metadata import version

    loaded, threads, sink, arrow, unchanged, starters = _preload_in_a_fresh_process({"OPENBLAS_NUM_THREADS": "2"})
    assert (threads, arrow, starters.strip()) == ("1", "False", "[]")
    major, minor = (int(part) for part in version("pyspark").split(".")[:2])
    if (major, minor) >= (4, 1):
        assert (loaded, sink) == ("True", "True")
    else:
        assert (loaded, sink, unchanged) == ("False", "False", "True")


def test_the_daemon_freezes_what_it_preloaded_out_of_the_garbage_collector() -> None:
    """Forks share the daemon's pages until they write to them, and a full collection writes to
    every object it examines: after `prepare()` the preloaded objects are in the permanent
    generation (`gc.freeze`), and the collector's generations hold almost nothing."""
    probe = """
import gc
from spark_app import worker_daemon as d
loaded = d.prepare()
print(loaded, gc.get_freeze_count(), len(gc.get_objects()))
"""
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert result.returncode == 0, result.stderr
    loaded, frozen, tracked = result.stdout.split()
    assert loaded == "True"
    assert int(frozen) > 50_000 and int(tracked) < 1_000
