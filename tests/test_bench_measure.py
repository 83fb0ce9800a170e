"""The benchmark's CPU accounting by kind of process (bench/measure.py): a process is counted as
the program it finally runs, not as the script or spawn helper that started it in the same pid."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench.measure import FENCE_KEY, RssSampler, _kind, count_fenced

JAVA = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"
SITE = "/venv/lib/python3.11/site-packages/pyspark"


@pytest.mark.parametrize(
    ("cmdline", "kind"),
    [
        (f"bash {SITE}/./bin/spark-submit --conf spark.ui.enabled=false pyspark-shell", None),
        ("/usr/lib/jvm/java-17-openjdk-amd64/lib/jspawnhelper 17.0.15 328:329:331", None),
        ("", None),  # a zombie's
        (f"{JAVA} -cp {SITE}/jars/* org.apache.spark.deploy.SparkSubmit pyspark-shell", "jvm"),
        ("java -Xmx128m -cp x org.apache.spark.launcher.Main", "jvm"),
        ("/venv/bin/python -m pyspark.daemon pyspark.sql.worker.plan_data_source_read", "workers"),
        ("/venv/bin/python3.10 -m spark_app.worker_daemon pyspark.worker", "workers"),
        ("/venv/bin/python -m spark_app --flow f.json --master local[*] --once", "driver_python"),
    ],
)
def test_a_process_is_of_the_program_it_runs(cmdline: str, kind: str | None) -> None:
    assert _kind(cmdline) == kind


def test_cpu_of_a_script_that_execs_python_counts_as_the_program_it_became(tmp_path: Path) -> None:
    """The Spark JVM's pid first runs pyspark's bin/spark-submit script: a kind read then and kept
    put the whole process under `workers`. Here a script under a `pyspark/bin` directory waits,
    then execs a Python loop that spins 0.6 s of CPU and names no pyspark: driver Python."""
    script = tmp_path / "pyspark" / "bin" / "launch"
    script.parent.mkdir(parents=True)
    spin = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass\n"
    script.write_text(f"#!/bin/bash\nsleep 0.3\nexec {sys.executable} -c '{spin}'\n")
    script.chmod(0o755)
    root = subprocess.Popen(["bash", "-c", f"{script}; true"])  # the sampler's root: a parent of the script
    sampler = RssSampler(root.pid).start()
    start = time.time()
    try:
        assert root.wait(timeout=30) == 0
        time.sleep(0.1)
    finally:
        sampler.stop()
    cpu = sampler.cpu_between(start - 1, time.time())
    assert cpu["driver_python"] >= 0.4, cpu
    assert cpu["workers"] < 0.1, cpu


def test_cpu_per_record_of_every_round_and_their_median() -> None:
    from bench.mirror_bench import cpu_each_round, cpu_per_record

    def spark(workers_s: float) -> dict[str, Any]:
        return {"cpu_s": {"workers": workers_s, "jvm": 9.0, "driver_python": 9.0}}

    batch = [spark(0.27), spark(0.45), spark(0.31)]
    runs: dict[str, list[dict[str, Any]]] = {"spark_batch": batch, "mm2": [{"cpu_s": 13.0}], "limit": [{}]}
    each = cpu_each_round(runs, 1_000_000)
    assert each["spark_batch"] == pytest.approx([0.27, 0.45, 0.31])  # in order, the JVM's and driver's left out
    assert each["mm2"] == pytest.approx([13.0])
    assert each["spark_batch_app"] == pytest.approx([18.27, 18.45, 18.31])  # the whole app: driver + JVM + workers
    assert set(each) == {"spark_batch", "spark_batch_app", "mm2"}
    assert cpu_per_record(each) == pytest.approx({"spark_batch": 0.31, "spark_batch_app": 18.31, "mm2": 13.0})


def test_a_process_that_ended_before_the_window_adds_nothing_to_it() -> None:
    """Spark's launcher JVM runs and exits before the copy: its CPU is not the copy's. A process
    still running adds its growth over the window; one started in the window all of its CPU."""
    sampler = RssSampler(root_pid=1)
    sampler.cpu_series = [
        (1.0, {10: ("jvm", 0.30), 20: ("jvm", 2.0), 30: ("workers", 0.10)}),
        (2.0, {20: ("jvm", 2.1), 30: ("workers", 0.15)}),  # 10 has ended
        (3.0, {20: ("jvm", 2.2), 30: ("workers", 0.40), 40: ("workers", 0.05)}),
        (4.0, {20: ("jvm", 2.3), 30: ("workers", 0.60), 40: ("workers", 0.20)}),
    ]
    cpu = sampler.cpu_between(2.5, 4.0)
    assert cpu["jvm"] == pytest.approx(0.2)  # 20's growth only, not 10's whole 0.30
    assert cpu["workers"] == pytest.approx(0.45 + 0.20)


class _Msg:
    def __init__(self, topic: str, partition: int, key: bytes | None) -> None:
        self._tp, self._key = (topic, partition), key

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return self._tp[0]

    def partition(self) -> int:
        return self._tp[1]

    def key(self) -> bytes | None:
        return self._key


class _Consumer:
    def __init__(self, batches: list[list[_Msg]]) -> None:
        self.batches, self.assigned, self.closed = batches, [], False

    def assign(self, partitions: list[Any]) -> None:
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in partitions]

    def consume(self, _n: int, timeout: float) -> list[_Msg]:
        return self.batches.pop(0) if self.batches else []

    def close(self) -> None:
        self.closed = True


def test_count_fenced_counts_each_partition_up_to_its_fence() -> None:
    """Both benchmarks' counters (one topic, many topics): records after a partition's fence are not counted."""
    a0, a1, b0 = ("a", 0), ("a", 1), ("b", 0)
    batches = [
        [_Msg(*a0, b"k"), _Msg(*a0, b"k"), _Msg(*a1, None), _Msg(*b0, b"k")],
        [_Msg(*a0, FENCE_KEY), _Msg(*a0, b"late"), _Msg(*a1, FENCE_KEY), _Msg(*b0, FENCE_KEY)],
    ]
    consumer = _Consumer(batches)
    counts, done = count_fenced(consumer, [a0, a1, b0], timeout_s=5)
    assert counts == {a0: 2, a1: 1, b0: 1}
    assert done == {a0, a1, b0}
    assert consumer.assigned == [("a", 0, 0), ("a", 1, 0), ("b", 0, 0)] and consumer.closed


def test_count_fenced_names_the_partitions_whose_fence_never_came() -> None:
    consumer = _Consumer([[_Msg("a", 0, b"k"), _Msg("a", 1, FENCE_KEY)]])
    counts, done = count_fenced(consumer, [("a", 0), ("a", 1)], timeout_s=0.2)
    assert counts == {("a", 0): 1, ("a", 1): 0} and done == {("a", 1)} and consumer.closed
