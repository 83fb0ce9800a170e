"""The many-topics run of bench/mirror_bench.py (`--topics N`): the same records spread over N
topics x 2 partitions and over 4 topics x 2 partitions, each mirrored by `python -m spark_app
--once`, whole wall time (process start -> exit: discovery, offset queries, target topics,
planning and the copy) compared. Every output is counted per partition and must match.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.measure import FENCE_KEY, HEADERS, SAFE_PRODUCER, count_fenced
from bench.spark_runs import flow_spec, run_spark_once
from kmirror_engine.copying.ranges import PRODUCER_TUNING

PARTITIONS = 2


def _create(bootstrap: str, topics: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics]).values():
        future.result(timeout=120)


def _fill(bootstrap: str, topics: list[str], records: int, size: int) -> dict[tuple[str, int], int]:
    """records spread round-robin over every topic partition, then a fence on each; returns counts."""
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_TUNING, **SAFE_PRODUCER})
    tps = [(t, p) for t in topics for p in range(PARTITIONS)]
    counts = dict.fromkeys(tps, 0)
    value = b"m" * size
    for i in range(records):
        topic, p = tps[i % len(tps)]
        while True:
            try:
                producer.produce(topic, value, b"key-%d" % i, p, headers=HEADERS)
                break
            except BufferError:
                producer.poll(0.05)
        counts[(topic, p)] += 1
    if producer.flush(300):
        raise RuntimeError("filling the many-topics source failed")
    _fences(bootstrap, topics)
    return counts


def _fences(bootstrap: str, topics: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **SAFE_PRODUCER})
    for topic in topics:
        for p in range(PARTITIONS):
            producer.produce(topic, b"", FENCE_KEY, p)
    if producer.flush(120):
        raise RuntimeError("fences not delivered")


def _count(bootstrap: str, topics: list[str], timeout_s: float = 300) -> dict[tuple[str, int], int]:
    """Records per topic partition before its fence, one consumer for all of them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-many", "enable.auto.commit": False})
    counts, done = count_fenced(consumer, [(t, p) for t in topics for p in range(PARTITIONS)], timeout_s)
    if len(done) < len(counts):
        raise RuntimeError(f"fences seen on {len(done)} of {len(counts)} partitions within {timeout_s} s")
    return counts


def mirror_checked(
    target: str, flow: Path, workdir: Path, alias: str, counts: dict[tuple[str, int], int], what: str
) -> tuple[dict[str, Any], float]:
    """`run_spark_once` of `flow`, its output counted per partition against `counts`; returns the
    run's figures and its whole wall time (s)."""
    started = time.time()
    spark = run_spark_once(flow, workdir)
    wall = time.time() - started
    remote = sorted({f"{alias}.{topic}" for topic, _ in counts})
    _fences(target, remote)
    got = _count(target, remote)
    if {(t.split(".", 1)[1], p): c for (t, p), c in got.items()} != counts:
        raise SystemExit(f"{what}: output does not match the source")
    return spark, wall


def run_many(
    source: str, target: str, run: str, topics: int, records: int, size: int, workdir: Path, **options: Any
) -> dict[str, Any]:
    """Both layouts, verified; returns their whole wall times (s) and the ratio."""
    out: dict[str, Any] = {}
    for label, n in (("few", 4), ("many", topics)):
        prefix = f"bench-{label}-{run}"
        names = [f"{prefix}-{i:05d}" for i in range(n)]
        _create(source, names)
        filled = time.time()
        counts = _fill(source, names, records, size)
        fill_s = time.time() - filled  # one producer writing these records into this layout: the floor
        flow = flow_spec(source, target, f"{prefix}-.*", workdir, alias=f"m{label}", **options)
        spark, wall = mirror_checked(target, flow, workdir, f"m{label}", counts, f"many topics ({label}, {n} topics)")
        out[label] = {
            "topics": n,
            "wall_s": wall,
            "startup_s": spark["startup_s"],
            "copy_s": spark["end"] - spark["start"],
            "fill_s": fill_s,
        }
    out["ratio"] = out["many"]["wall_s"] / out["few"]["wall_s"]
    return out
