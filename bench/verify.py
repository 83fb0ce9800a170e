"""Checking a contender's output before its figure counts.

Two checks: `verify_counts` consumes the whole target topic and compares the records per
partition with the source's (a loss or a duplicate fails); `verify_sample` reads three windows
of each partition (its first, middle and last records) from the source and the target at the
same offsets and compares offset, key, value, headers and timestamp (type and value) record by
record, so a reordering, a dropped header or a rewritten timestamp fails too. The sample check
is for mirrors only: the limit run produces fresh records (new timestamps) on purpose.
"""

from __future__ import annotations

import time
from typing import Any, cast

from confluent_kafka import Consumer, KafkaException, TopicPartition

from bench.measure import add_fences, count_until_fence

SAMPLE_WINDOW = 200  # records per window; 3 windows per partition
Record = tuple[int, bytes | None, bytes | None, Any, tuple[int, int]]


def verify_counts(bootstrap: str, topic: str, nparts: int, expected: dict[int, int], name: str) -> None:
    """Raise SystemExit unless every partition of `topic` holds exactly the source's record count."""
    add_fences(bootstrap, topic, nparts)
    counted = count_until_fence(bootstrap, topic, nparts)
    if counted != expected:
        raise SystemExit(f"{name}: output does not match the source: expected {expected}, counted {counted}")


def sample_windows(expected: dict[int, int], window: int = SAMPLE_WINDOW) -> list[dict[int, tuple[int, int]]]:
    """Per window (first, middle, last), each partition's (start offset, record count) within
    its `expected` records; empty partitions are left out."""
    out: list[dict[int, tuple[int, int]]] = []
    for where in ("first", "middle", "last"):
        spans = {}
        for p, n in expected.items():
            start = {"first": 0, "middle": max(0, n // 2 - window // 2), "last": max(0, n - window)}[where]
            if n:
                spans[p] = (start, min(window, n - start))
        out.append(spans)
    return out


def read_span(
    bootstrap: str, topic: str, spans: dict[int, tuple[int, int]], timeout_s: float = 60
) -> dict[int, list[Record]]:
    """The records of `topic` at each partition's (start offset, count) span. Raises RuntimeError
    when a span is not complete within `timeout_s`."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-verify",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, start) for p, (start, _) in spans.items()])
    out: dict[int, list[Record]] = {p: [] for p in spans}
    deadline = time.monotonic() + timeout_s
    try:
        while any(len(out[p]) < count for p, (_, count) in spans.items()):
            if time.monotonic() > deadline:
                got = {p: len(records) for p, records in out.items()}
                raise RuntimeError(f"{topic}: sample spans {spans} incomplete within {timeout_s} s: got {got}")
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error():
                    raise KafkaException(msg.error())
                p = cast(int, msg.partition())
                if len(out[p]) < spans[p][1]:
                    out[p].append((cast(int, msg.offset()), msg.key(), msg.value(), msg.headers(), msg.timestamp()))
    finally:
        consumer.close()
    return out


def first_difference(source: list[Record], target: list[Record]) -> str | None:
    """Where two record lists first differ ("offset 12: headers [...] != [...]"), or None."""
    fields = ("offset", "key", "value", "headers", "timestamp")
    for ours, theirs in zip(source, target, strict=False):
        for name, a, b in zip(fields, ours, theirs, strict=True):
            if a != b:
                shown = (a, b) if name != "value" else (f"{len(a or b'')} B", f"{len(b or b'')} B differing")
                return f"offset {ours[0]}: {name} {shown[0]!r} in the source, {shown[1]!r} in the target"
    if len(source) != len(target):
        return f"{len(source)} records in the source span, {len(target)} in the target's"
    return None


def verify_sample(source: str, target: str, src: str, dst: str, expected: dict[int, int], name: str) -> int:
    """Raise SystemExit unless the first, middle and last records of every partition of `dst`
    equal the source's at the same offsets (order, keys, values, headers, timestamps).
    Returns the number of records compared."""
    compared = 0
    for spans in sample_windows(expected):
        ours, theirs = read_span(source, src, spans), read_span(target, dst, spans)
        for p in sorted(spans):
            problem = first_difference(ours[p], theirs[p])
            if problem is not None:
                raise SystemExit(f"{name}: {dst} partition {p} differs from {src}: {problem}")
            compared += len(ours[p])
    return compared
