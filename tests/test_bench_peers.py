"""Issue 47's benchmark peers, their pure parts: the tuned MM2's properties, ProducerPerformance's
command line and summary, the raw-bytes copy's batch selection and request building, the
whole-app PSS and the RESULT fields. No brokers."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from bench.bench_report import result_line
from bench.limit_bytes import Part, next_request, take
from bench.limit_java import BEST_SETTINGS, KEY_BYTES, MAIN_CLASS, parse_perf, perf_command
from bench.measure import peak_total, pss_kib
from bench.mirror_bench import cpu_each_round
from bench.mm2_run import Mm2Flow, mm2_properties
from bench.mm2_tuning import TUNED_CONSUMER, TUNED_PRODUCER, tuned_properties, tuned_tasks
from kmirror_engine.copying.batch_crc import crc32c

SUMMARY = (
    "1000000 records sent, 412371.1 records/sec (94.38 MB/sec), 85.12 ms avg latency, 412.00 ms max latency, "
    "77 ms 50th, 190 ms 95th, 260 ms 99th, 390 ms 99.9th."
)


def test_the_tuned_mm2_sets_producer_and_consumer_on_the_right_clusters_and_keeps_the_safety_settings() -> None:
    extra = tuned_properties("mmt0", "east", "lz4")
    flow = Mm2Flow("mmt0", "east", "src:9092", "dst:9092", "t", tuned_tasks(8), tuple(extra.items()))
    props = mm2_properties(flow)
    assert props["tasks.max"] == "8"
    assert props["east.producer.batch.size"] == TUNED_PRODUCER["batch.size"]
    assert props["east.producer.linger.ms"] == "100"
    assert props["east.producer.compression.type"] == "lz4"
    assert props["mmt0.consumer.fetch.max.bytes"] == TUNED_CONSUMER["fetch.max.bytes"]
    assert props["mmt0.consumer.max.poll.records"] == TUNED_CONSUMER["max.poll.records"]
    assert props["east.producer.acks"] == "all" and props["east.producer.enable.idempotence"] == "true"
    assert not any(key.startswith("east.consumer.") or key.startswith("mmt0.producer.") for key in extra)
    default = mm2_properties(Mm2Flow("mm0", "east", "src:9092", "dst:9092", "t", 2))
    assert "east.producer.batch.size" not in default and default["tasks.max"] == "2"


def test_producer_performance_runs_unthrottled_with_acks_all_idempotence_and_the_records_bytes() -> None:
    command = perf_command("/j/java", "/cp/*", "dst:9092", "topic-x", 5000, 200, "zstd")
    assert command[0] == "/j/java" and MAIN_CLASS in command
    assert command[command.index("--num-records") + 1] == "5000"
    assert command[command.index("--record-size") + 1] == str(200 + KEY_BYTES)
    assert command[command.index("--throughput") + 1] == "-1"
    props = dict(item.split("=", 1) for item in command[command.index("--producer-props") + 1 :])
    assert props["acks"] == "all" and props["enable.idempotence"] == "true"
    assert props["bootstrap.servers"] == "dst:9092" and props["compression.type"] == "zstd"
    assert props["batch.size"] == BEST_SETTINGS["batch.size"]


def test_the_producer_performance_summary_is_parsed_and_its_absence_named() -> None:
    progress = "2049123 records sent, 409824.6 records/sec (93.80 MB/sec), 80.0 ms avg latency, 300.0 ms max latency."
    summary = parse_perf(f"{progress}\n{SUMMARY}\n")
    assert summary["records"] == 1_000_000 and summary["rate"] == pytest.approx(412371.1)
    assert summary["p99"] == 260 and summary["mb"] == pytest.approx(94.38)
    with pytest.raises(ValueError, match=r"(?s)no final summary line.*409824\.6"):
        parse_perf(progress)


def _batch(base: int, count: int, value: bytes = b"v" * 20) -> bytes:
    """A v2 record batch of `count` records (offsets base..base+count-1), valid CRC."""
    records = b""
    for i in range(count):
        body = b"\x00" + _varint(0) + _varint(i) + _varint(-1) + _varint(len(value)) + value + _varint(0)
        records += _varint(len(body)) + body
    after_crc = struct.pack(">hiqqqhii", 0, count - 1, 1000, 1000, -1, -1, -1, count) + records
    head = struct.pack(">ib", 0, 2)
    crc = crc32c(memoryview(after_crc))
    batch = head + struct.pack(">I", crc) + after_crc
    return struct.pack(">qi", base, len(batch)) + batch


def _varint(value: int) -> bytes:
    zigzag, out = (value << 1) ^ (value >> 63), b""
    while True:
        byte = zigzag & 0x7F
        zigzag >>= 7
        if zigzag:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def test_the_raw_copy_queues_only_batches_in_its_range_once() -> None:
    part = Part(0, end=10)
    fetched = _batch(0, 4) + _batch(4, 6) + _batch(10, 1)  # the last one is the fence after the data
    assert take(part, fetched) == 10
    assert [b.base_offset for b in part.queue] == [0, 4] and part.position == 10
    assert take(part, fetched) == 0  # fetched again: nothing twice
    assert part.queued_bytes == sum(len(b.data) for b in part.queue)
    assert not part.done


def test_a_produce_request_takes_one_batch_per_partition_within_the_byte_limit() -> None:
    parts = [Part(p, end=100) for p in range(3)]
    for part in parts:
        take(part, _batch(0, 2) + _batch(2, 2))
    size = len(parts[0].queue[0].data)
    first = next_request(parts, max_bytes=2 * size)
    assert [(part.partition, batch.base_offset) for part, batch in first] == [(0, 0), (1, 0)]
    second = next_request(parts, max_bytes=2 * size)
    assert [(part.partition, batch.base_offset) for part, batch in second] == [(0, 2), (1, 2)]
    assert [(part.partition, batch.base_offset) for part, batch in next_request(parts, 1)] == [(2, 0)]
    assert parts[2].queued_bytes == size


def test_pss_is_read_from_smaps_rollup_and_the_app_peak_sums_kinds_at_one_moment() -> None:
    rollup = "00400000-7fff rw-p 00000000 00:00 0  [rollup]\nRss:  204800 kB\nPss:  150016 kB\nPss_Anon: 1 kB\n"
    assert pss_kib(rollup) == 150016
    assert pss_kib("Rss: 5 kB\n", default=5) == 5
    series: list[tuple[float, dict[str, float]]] = [
        (1.0, {"jvm": 400.0, "workers": 100.0, "driver_python": 50.0}),
        (2.0, {"jvm": 300.0, "workers": 300.0, "driver_python": 60.0}),
        (3.0, {"jvm": 450.0, "workers": 10.0, "driver_python": 50.0}),
    ]
    assert peak_total(series) == 660.0  # not 450 + 300 + 60: the kinds peaked at different moments
    assert peak_total([]) == 0.0


def test_the_app_cpu_counts_driver_jvm_and_workers() -> None:
    run: dict[str, Any] = {"cpu_s": {"jvm": 0.2, "workers": 0.3, "driver_python": 0.1}}
    cpu = cpu_each_round({"spark_batch": [run], "mm2_tuned": [{"cpu_s": 2.0}]}, 1_000_000)
    assert cpu["spark_batch"] == [pytest.approx(0.3)]
    assert cpu["spark_batch_app"] == [pytest.approx(0.6)]
    assert cpu["mm2_tuned"] == [pytest.approx(2.0)]


def test_the_result_line_adds_the_peers_the_app_cpu_and_memory() -> None:
    rate = {
        "spark": 300_000.0,
        "spark_batch": 800_000.0,
        "mm2_tuned": 200_000.0,
        "limit_java": 1_000_000.0,
        "limit_bytes": 1_600_000.0,
    }
    line = result_line(rate, {"spark_batch_app": 0.375}, 500, 9.0, "apache-kafka-4.1.2", 612.4)
    assert line.endswith(
        "spark_batch_vs_mm2_tuned=4.00 spark_batch_vs_limit_java=0.80 spark_batch_vs_limit_bytes=0.50 "
        "cpu_us_per_record_app=0.38 pss_mib_app=612 mm2_tuned=200000/s limit_java=1000000/s limit_bytes=1600000/s"
    )
    bare = result_line({"spark": 1.0}, {}, -1, 1.0, "tansu")
    assert "spark_batch_vs_limit_bytes=n/a cpu_us_per_record_app=n/a pss_mib_app=n/a" in bare
