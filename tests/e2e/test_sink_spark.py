"""The kmirror-sink data source in a real local Spark: writer tasks copy planned ranges, the
commit runs, and the target holds every record of every range, in order."""

from __future__ import annotations

from typing import Any

import pytest

from bench.sink_harness import start_fixed_ranges_copy
from tests.kafka_helpers import COPY_ONLY, add_fences, consume_all, create_topic, flow_raw, produce

pytestmark = pytest.mark.e2e


def test_writer_tasks_copy_their_ranges_through_spark(spark: Any, clusters: Any, unique: str, tmp_path: Any) -> None:
    src, dst = f"sink-{unique}", f"west.sink-{unique}"
    create_topic(clusters.source, src, 3)
    create_topic(clusters.target, dst, 3)
    records = [
        {"key": f"k{i}".encode(), "value": f"v{p}-{i}".encode(), "partition": p, "headers": [("h", b"x")]}
        for p in range(3)
        for i in range(30)
    ]
    produce(clusters.source, src, records)
    add_fences(clusters.source, src, 3)
    spec = flow_raw(clusters, "west", "east", [src], tmp_path / "unused", id=f"west-{unique}->east", **COPY_ONLY)
    ranges = [[src, p, 0, 30, dst] for p in range(3)]
    query = start_fixed_ranges_copy(spark, ranges, spec, tmp_path / "checkpoint", tasks=2)
    query.awaitTermination(300)

    assert query.exception() is None
    add_fences(clusters.target, dst, 3)
    mirrored = consume_all(clusters.target, dst, 3)
    for p in range(3):
        assert [m.value() for m in mirrored[p]] == [f"v{p}-{i}".encode() for i in range(30)]
        assert {tuple(m.headers()) for m in mirrored[p]} == {(("h", b"x"),)}
