"""The cluster contender's pure logic (bench/cluster_bench.py): which process is which part of the
app on a standalone cluster, CPU over the copy window, per-record figures, the scale-out ratio
and its RESULT line, tasks per executor. No cluster, no brokers."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.cluster_bench import (
    cluster_kind,
    cpu_in_window,
    executors_seen,
    figures,
    finished_tasks,
    parse_args,
    read_batches,
    result_line,
    scale_out,
    submit_confs,
    tasks_per_executor,
)

JAVA = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"
SITE = "/venv/lib/python3.11/site-packages/pyspark"


@pytest.mark.parametrize(
    ("pid", "cmdline", "kind"),
    [
        (10, f"{JAVA} -cp {SITE}/jars/* org.apache.spark.deploy.worker.Worker --cores 1", "daemon"),
        (
            11,
            f"{JAVA} -cp {SITE}/jars/* org.apache.spark.executor.CoarseGrainedExecutorBackend --app-id a",
            "executor_jvm",
        ),
        (12, f"{JAVA} -cp {SITE}/jars/* org.apache.spark.deploy.SparkSubmit kmirror_main.py", "driver_jvm"),
        (13, "/venv/bin/python -m pyspark.daemon", "python"),
        (14, f"bash {SITE}/bin/spark-submit --master spark://127.0.0.1:1", None),  # execs java in the same pid
        (15, "/usr/lib/jvm/java-17-openjdk-amd64/lib/jspawnhelper 17.0.15 3:4:5", None),
        (16, "", None),
    ],
)
def test_cluster_kind_by_program_and_daemon_pids(pid: int, cmdline: str, kind: str | None) -> None:
    assert cluster_kind(pid, cmdline, daemons={10}) == kind


def test_cpu_in_window_counts_each_process_from_its_last_sample_before_the_start() -> None:
    series = [
        (1.0, {1: ("driver_jvm", 5.0), 2: ("daemon", 1.0), 9: ("driver_jvm", 0.7)}),  # 9: the launcher, gone
        (2.0, {1: ("driver_jvm", 6.0), 2: ("daemon", 1.1)}),  # the window starts at 2.0
        (3.0, {1: ("driver_jvm", 7.5), 2: ("daemon", 1.3), 3: ("executor_jvm", 2.0)}),  # 3 started inside it
        (4.0, {1: ("driver_jvm", 8.0), 3: ("executor_jvm", 4.0), 4: ("executor_python", 0.5)}),
        (5.0, {1: ("driver_jvm", 99.0), 3: ("executor_jvm", 99.0)}),  # after the window's end
    ]
    cpu = cpu_in_window(series, start=2.0, end=4.0)
    assert cpu["driver_jvm"] == pytest.approx(2.0)  # 8.0 - 6.0; the ended launcher adds nothing
    assert cpu["executor_jvm"] == pytest.approx(4.0)  # whole: first seen inside the window
    assert cpu["executor_python"] == pytest.approx(0.5)
    assert cpu["daemon"] == pytest.approx(0.2)  # 1.3 - 1.1: its last sample before the end
    assert cpu["driver_python"] == 0.0
    assert executors_seen(series) == 1


def test_figures_count_the_app_and_leave_the_daemons_apart() -> None:
    cpu = {"driver_jvm": 1.0, "driver_python": 0.5, "executor_jvm": 2.0, "executor_python": 6.5, "daemon": 3.0}
    got = figures(100_000, start=10.0, end=12.0, cpu_s=cpu)
    assert got["rate"] == pytest.approx(50_000)
    assert got["cpu_us_per_record"] == pytest.approx(100.0)  # 10 s of app CPU / 100k records
    assert got["daemon_cpu_s"] == 3.0
    assert got["cores_used"] == pytest.approx(5.0)  # 10 s of CPU in a 2 s window
    with pytest.raises(ValueError, match="copy window"):
        figures(10, start=5.0, end=5.0, cpu_s=cpu)


def test_scale_out_and_result_line() -> None:
    one = {"rate": 40_000.0, "cpu_us_per_record": 20.0}
    two = {"rate": 50_000.0, "cpu_us_per_record": 25.0}
    assert scale_out(one, two) == pytest.approx({"rate": 1.25, "cpu": 1.25})
    assert result_line(one, two, cores=2, load=6.5) == (
        "RESULT cluster_one=40000/s cluster_two=50000/s scale_out=1.25"
        " cpu_us_per_record_one=20.00 cpu_us_per_record_two=25.00 cores=2 load=6.50"
    )


def test_read_batches_spans_every_batch(tmp_path: Path) -> None:
    log = tmp_path / "b.jsonl"
    log.write_text(
        '{"records": 700, "first_read_ms": 2000, "last_delivery_ms": 3000}\n'
        '{"records": 0, "first_read_ms": null, "last_delivery_ms": 3100}\n'
        '{"records": 308, "first_read_ms": 1500, "last_delivery_ms": 4500}\n'
    )
    assert read_batches(log) == (1.5, 4.5, 3, 1008)
    with pytest.raises(RuntimeError, match="copied nothing"):
        read_batches(tmp_path / "missing.jsonl")


def test_tasks_per_executor_from_their_stderr(tmp_path: Path) -> None:
    text = (
        "04:40:01 INFO Executor: Running task 0.0 in stage 1.0 (TID 1)\n"
        "04:40:09 INFO Executor: Finished task 0.0 in stage 1.0 (TID 1). 2000 bytes result sent to driver\n"
        "04:40:10 INFO Executor: Finished task 1.0 in stage 2.0 (TID 3). 2000 bytes result sent to driver\n"
    )
    assert finished_tasks(text) == 2
    (tmp_path / "a").write_text(text)
    (tmp_path / "b").write_text("Running task 1.0 in stage 1.0 (TID 2)\n")
    assert tasks_per_executor([tmp_path / "b", tmp_path / "a"]) == [2, 0]


def test_args_and_confs() -> None:
    args = parse_args([])
    assert (args.records, args.partitions, args.copy_loop, args.broker) == (300_000, 8, "batch", "kafka-4.1")
    with pytest.raises(SystemExit):
        parse_args(["--records", "3", "--partitions", "8"])
    confs = submit_confs()
    assert confs["spark.scheduler.minRegisteredResourcesRatio"] == "1.0"  # both executors before the first batch
    assert confs["spark.default.parallelism"] == "2"  # the same tasks with one worker and with two
