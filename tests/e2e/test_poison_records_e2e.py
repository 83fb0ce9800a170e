"""Poison records on a real Apache Kafka broker (issue 26): a target topic whose
`message.timestamp.before.max.ms` refuses a source record's old timestamp. Without a dead-letter
topic the copy fails naming the record; with one, the record lands there with its value and
provenance headers and the rest is mirrored; with `skip_offsets` it is skipped and logged.
The same logic with fakes: tests/test_poison_records.py."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from kmirror.flow.spec import FlowSpec, parse_flow_spec
from kmirror_engine.copying.ranges import CopyError, CopyRange
from kmirror_engine.copying.task_copy import copy_task_ranges
from spark_app.main import _require_internal_topic_access
from tests.kafka_helpers import add_fences, consume_all, create_topic, flow_raw, produce

pytestmark = [pytest.mark.e2e, pytest.mark.spark40, pytest.mark.real_kafka]

OLD_MS = 1_500_000_000_000  # 2017: far outside a one-minute window


def _spec(clusters: Any, unique: str, **options: Any) -> FlowSpec:
    raw = flow_raw(clusters, "west", "east", [f".*-{unique}"], "/tmp/unused", id=f"west-{unique}->east")
    return parse_flow_spec({**raw, "copy_loop": "python", **options})


def _poisoned(clusters: Any, unique: str) -> tuple[str, str]:
    """A source partition of 5 records whose offset 2 is older than the target topic accepts."""
    src, dst = f"poison-{unique}", f"west.poison-{unique}"
    create_topic(clusters.source, src, 1)
    create_topic(clusters.target, dst, 1, {"message.timestamp.before.max.ms": "60000"})
    now = int(time.time() * 1000)
    produce(
        clusters.source,
        src,
        [
            {
                "key": f"k{i}".encode(),
                "value": f"v{i}".encode(),
                "partition": 0,
                "headers": [("h", str(i).encode())],
                "timestamp": OLD_MS if i == 2 else now,
            }
            for i in range(5)
        ],
    )
    add_fences(clusters.source, src, 1)
    return src, dst


def test_without_a_dead_letter_topic_the_copy_fails_naming_the_record(clusters: Any, unique: str) -> None:
    src, dst = _poisoned(clusters, unique)
    with pytest.raises(CopyError) as caught:
        copy_task_ranges(_spec(clusters, unique), [CopyRange(src, 0, 0, 5, dst)], 0)
    message = str(caught.value)
    assert f"cannot produce source record {src}[0]@2 to {dst}[0]: the target refuses it: timestamp {OLD_MS}" in message
    assert "message.timestamp.before.max.ms (60000)" in message
    assert "set dead_letter_topic" in message and f'skip_offsets: ["{src}:0:2"]' in message


def test_with_a_dead_letter_topic_the_record_lands_there_whole_and_the_rest_is_mirrored(
    clusters: Any, unique: str
) -> None:
    src, dst = _poisoned(clusters, unique)
    dlq = f"dlq-{unique}"
    spec = _spec(clusters, unique, dead_letter_topic=dlq)
    # the app's start-up creates the dead-letter topic (broker defaults: no timestamp window)
    _require_internal_topic_access(spec)
    [progress] = copy_task_ranges(spec, [CopyRange(src, 0, 0, 5, dst)], 0)

    assert (progress.records, progress.dead_lettered, progress.next_offset) == (4, 1, 5)
    add_fences(clusters.target, dst, 1)
    add_fences(clusters.target, dlq, 1)
    assert [m.value() for m in consume_all(clusters.target, dst, 1)[0]] == [b"v0", b"v1", b"v3", b"v4"]
    [dead] = consume_all(clusters.target, dlq, 1)[0]
    headers = dict(dead.headers())
    assert (dead.key(), dead.value(), dead.timestamp()[1], headers["h"]) == (b"k2", b"v2", OLD_MS, b"2")
    assert (headers["kmirror.origin.cluster"], headers["kmirror.origin.topic"]) == (b"west", src.encode())
    assert (headers["kmirror.origin.partition"], headers["kmirror.origin.offset"]) == (b"0", b"2")
    assert headers["kmirror.error"].startswith(f"refused by {dst}: timestamp {OLD_MS} is ".encode())


def test_with_skip_offsets_the_record_is_skipped_and_logged(
    clusters: Any, unique: str, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dst = _poisoned(clusters, unique)
    spec = _spec(clusters, unique, skip_offsets=[f"{src}:0:2"])
    [progress] = copy_task_ranges(spec, [CopyRange(src, 0, 0, 5, dst)], 0)

    assert (progress.records, progress.skipped_by_option, progress.next_offset) == (4, 1, 5)
    add_fences(clusters.target, dst, 1)
    assert [m.value() for m in consume_all(clusters.target, dst, 1)[0]] == [b"v0", b"v1", b"v3", b"v4"]
    [line] = [
        json.loads(x.removeprefix("kmirror skipped "))
        for x in capsys.readouterr().err.splitlines()
        if x.startswith("kmirror skipped ")
    ]
    assert (line["source_topic"], line["partition"], line["offset"], line["reason"]) == (src, 0, 2, "skip_offsets")
