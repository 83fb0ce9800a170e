"""The mirror benchmark's MM2 contender and its report, their pure parts (issue 23 part 4):
MM2's configuration, the copy window read from the watcher's polls, the sample comparison,
the RESULT line and the MM2 jar fetch's error."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from rich.console import Console

from bench import mirror_bench
from bench.bench_report import result_line
from bench.mm2_run import Mm2Flow, Sample, copy_window, mm2_properties
from bench.verify import first_difference, sample_windows
from kmirror.errors import KmirrorError
from kmirror_cli import local_mm2

FLOW = Mm2Flow("mm1", "east", "127.0.0.1:1", "127.0.0.1:2", "bench-src-abc", tasks=2)


def test_mm2_mirrors_one_topic_one_way_with_cores_as_tasks_and_our_producer_safety() -> None:
    props = mm2_properties(FLOW)
    assert props["clusters"] == "mm1, east"
    assert (props["mm1.bootstrap.servers"], props["east.bootstrap.servers"]) == ("127.0.0.1:1", "127.0.0.1:2")
    assert (props["mm1->east.enabled"], props["east->mm1.enabled"]) == ("true", "false")
    assert props["mm1->east.topics"] == "bench-src-abc"
    assert props["tasks.max"] == "2"
    assert {k: v for k, v in props.items() if k.startswith("east.producer.")} == {
        "east.producer.acks": "all",
        "east.producer.enable.idempotence": "true",
        "east.producer.max.in.flight.requests.per.connection": "5",
    }
    assert props["offset.storage.replication.factor"] == props["checkpoints.topic.replication.factor"] == "1"
    assert FLOW.target_topic == "mm1.bench-src-abc"  # DefaultReplicationPolicy's name


def test_the_copy_window_runs_from_the_first_record_seen_to_all_of_them() -> None:
    polls = [
        Sample(10.0, 0, 1.0),
        Sample(10.05, 0, 1.5),
        Sample(10.1, 300, 1.6),
        Sample(12.0, 900, 4.0),
        Sample(12.05, 1000, 4.2),
        Sample(12.1, 1000, 4.25),
    ]
    first, last = copy_window(polls, 1000)
    assert (first.at, first.cpu_s, last.at, last.cpu_s) == (10.1, 1.6, 12.05, 4.2)


def test_a_copy_that_never_completes_is_an_error_naming_the_count() -> None:
    with pytest.raises(ValueError, match="MM2 wrote 900 of 1000 records while watched"):
        copy_window([Sample(1.0, 0, 0.0), Sample(2.0, 900, 1.0)], 1000)


def test_sample_windows_take_first_middle_and_last_records_inside_each_partition() -> None:
    first, middle, last = sample_windows({0: 1000, 1: 50, 2: 0}, window=200)
    assert first == {0: (0, 200), 1: (0, 50)}
    assert middle == {0: (400, 200), 1: (0, 50)}
    assert last == {0: (800, 200), 1: (0, 50)}


def test_a_sample_difference_names_the_offset_and_the_field() -> None:
    source = [(0, b"key-0", b"v", [("bench-origin", b"x")], (1, 100)), (1, b"key-8", b"v", [], (1, 101))]
    assert first_difference(source, list(source)) is None
    no_header = [(*source[0][:3], None, source[0][4]), source[1]]
    assert first_difference(source, no_header) == (
        "offset 0: headers [('bench-origin', b'x')] in the source, None in the target"
    )
    retimed = [source[0], (*source[1][:4], (2, 555))]
    assert first_difference(source, retimed) == "offset 1: timestamp (1, 101) in the source, (2, 555) in the target"
    swapped = [source[1], source[0]]
    assert first_difference(source, swapped) == "offset 0: offset 0 in the source, 1 in the target"
    assert first_difference(source, source[:1]) == "2 records in the source span, 1 in the target's"


def test_the_result_line_keeps_the_old_fields_and_adds_mm2_broker_and_batch() -> None:
    rate = {"limit": 400_000.0, "raw": 100_000.0, "raw_parallel": 150_000.0, "spark": 300_000.0, "mm2": 120_000.0}
    line = result_line(rate, {"spark": 1.5, "mm2": 6.25}, -1, 7.04, "apache-kafka-4.1.2")
    assert line.startswith(
        "RESULT spark_vs_raw=3.00 spark_vs_raw_parallel=2.00 spark_vs_limit=0.75 p99_ms=-1 startup=7.0s "
        "cpu_us_per_record=1.50 spark=300000/s raw=100000/s raw_parallel=150000/s limit=400000/s "
        "spark_vs_mm2=2.50 mm2=120000/s broker=apache-kafka-4.1.2 mm2_cpu_us_per_record=6.25 "
        "cpu_us_per_record_batch=n/a spark_batch=n/a "
    )


def test_spark_batch_runs_only_when_the_batch_copy_loop_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    args = argparse.Namespace(without=[])
    console = Console(file=open("/dev/null", "w"))  # noqa: SIM115 - closed with the test process

    def missing(name: str) -> None:
        raise ModuleNotFoundError(f"No module named {name!r}")

    monkeypatch.setattr(mirror_bench.importlib, "import_module", missing)
    assert "spark_batch" not in mirror_bench.active_contenders(args, console)
    assert "refuses copy_loop 'batch'" in (mirror_bench.spark_batch_missing() or "")
    monkeypatch.setattr(mirror_bench.importlib, "import_module", lambda name: None)
    assert mirror_bench.active_contenders(args, console) == mirror_bench.CONTENDERS
    args.without = ["mm2"]
    assert "mm2" not in mirror_bench.active_contenders(args, console)


def test_a_failed_mm2_fetch_names_the_version_and_maven(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    script = tmp_path / "fetch-mm2.sh"
    script.write_text("#!/bin/sh\necho 'Could not resolve org.apache.kafka:connect-mirror:jar:9.9.9' >&2\nexit 1\n")
    script.chmod(0o755)
    monkeypatch.setattr(local_mm2, "FETCH_SCRIPT", script)
    with pytest.raises(KmirrorError, match=r"MirrorMaker 2 9\.9\.9 from Maven Central failed \(exit 1\)") as error:
        local_mm2.fetch_mm2("9.9.9")
    assert "Could not resolve org.apache.kafka:connect-mirror:jar:9.9.9" in str(error.value)
