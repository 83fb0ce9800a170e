"""Exactly-once mode against real brokers: a replayed batch after a committed transaction
adds nothing (zero duplicates for read_committed consumers) and loses nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer

from kmirror.flow.spec import parse_flow_spec
from kmirror_engine.copying.exactly_once import TransactionalCopier, resume_ranges
from kmirror_engine.copying.ranges import CopyRange
from kmirror_engine.copying.task_copy import copy_task_ranges
from kmirror_engine.planning.internal_names import run_token, transactional_id
from tests.kafka_helpers import add_fences, consume_all, create_topic, flow_raw, produce, transactional_clients

pytestmark = pytest.mark.spark40  # also in leg 2 (pyspark 4.0.2 / Python 3.10)


def test_resume_ranges_skips_what_a_previous_transaction_committed() -> None:
    ranges = [CopyRange("t", 0, 10, 20, "w.t"), CopyRange("t", 1, 10, 20, "w.t"), CopyRange("t", 2, 10, 20, "w.t")]
    resumed = resume_ranges(ranges, {("w.t", 0): 25, ("w.t", 1): 15})
    assert [(r.partition, r.start_offset, r.end_offset) for r in resumed] == [(0, 20, 20), (1, 15, 20), (2, 10, 20)]


@pytest.fixture
def eos(clusters: Any, unique: str) -> Iterator[Any]:
    raw = flow_raw(clusters, "west", "east", [".*"], "/tmp/unused", id=f"west-{unique}->east", exactly_once=True)
    spec = parse_flow_spec(raw)
    consumers: list[Consumer] = []

    def task(task_id: int) -> TransactionalCopier:
        source, producer, offsets = transactional_clients(clusters, spec, task_id)
        consumers.extend([source, offsets])
        return TransactionalCopier(source, producer, offsets, stall_timeout_s=30)

    yield spec, task
    for consumer in consumers:
        consumer.close()


@pytest.mark.e2e
def test_a_replayed_batch_adds_no_duplicates_and_the_next_batch_loses_nothing(
    clusters: Any, unique: str, eos: Any
) -> None:
    spec, task = eos
    src, dst = f"eos-{unique}", f"west.eos-{unique}"
    create_topic(clusters.source, src, 2)
    create_topic(clusters.target, dst, 2)
    values = {p: [f"{p}-{i}".encode() for i in range(80)] for p in range(2)}
    produce(clusters.source, src, [{"value": v, "partition": p, "key": b"k"} for p in range(2) for v in values[p][:50]])
    produce(clusters.source, src, [{"value": v, "partition": p, "key": b"k"} for p in range(2) for v in values[p][50:]])
    add_fences(clusters.source, src, 2)
    batch_0 = [CopyRange(src, p, 0, 50, dst) for p in range(2)]

    first = task(0).copy(batch_0)
    # The driver died before Spark's commit log recorded batch 0: Spark replays the same ranges,
    # here through the sink's own client wiring (clients built from the flow spec).
    replay = copy_task_ranges(spec, batch_0, 0)
    following = task(0).copy([CopyRange(src, p, 50, 80, dst) for p in range(2)])

    assert [(p.records, p.next_offset) for p in first] == [(50, 50), (50, 50)]
    assert [(p.records, p.start_offset, p.next_offset) for p in replay] == [(0, 0, 50), (0, 0, 50)]
    assert [(p.records, p.next_offset) for p in following] == [(30, 80), (30, 80)]
    add_fences(clusters.target, dst, 2)
    mirrored = consume_all(clusters.target, dst, 2)
    assert {p: [m.value() for m in mirrored[p]] for p in range(2)} == values
    assert spec.id.startswith("west-") and transactional_id(spec.id, 3) == f"kmirror-west-{unique}-to-east-3"


@pytest.mark.e2e
@pytest.mark.real_kafka  # tansu returns aborted records to read_committed consumers
def test_two_live_drivers_never_both_commit_a_range_and_the_older_one_stops(
    clusters: Any, unique: str, eos: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Driver A (run `older`) copies partitions 0 and 1 in its task 0; right after it read the
    committed offsets of partition 1, driver B (run `newer`, another plan: partition 1 in its task 1)
    copies and commits partition 1. On main each task had its own transactional id, so both
    committed 0..40 of partition 1 (40 duplicates for read_committed consumers)."""
    import kmirror_engine.copying.exactly_once as eo

    spec, _ = eos
    src, dst = f"eos2-{unique}", f"west.eos2-{unique}"
    create_topic(clusters.source, src, 2)
    create_topic(clusters.target, dst, 2)
    values = {p: [f"{p}-{i}".encode() for i in range(40)] for p in range(2)}
    produce(clusters.source, src, [{"value": v, "partition": p, "key": b"k"} for p in range(2) for v in values[p]])
    add_fences(clusters.source, src, 2)
    older, newer = run_token(1), run_token(2)
    real = eo.committed_offsets
    b_copied: list[Any] = []

    def b_runs_in_between(consumer: Any, ranges: Any, timeout_s: float, *args: Any, **kwargs: Any) -> Any:
        found = real(consumer, ranges, timeout_s, *args, **kwargs)
        if not b_copied and any(r.partition == 1 for r in ranges):
            b_copied.append(None)
            b_copied.extend(copy_task_ranges(spec, [CopyRange(src, 1, 0, 40, dst)], 1, run=newer))
        return found

    monkeypatch.setattr(eo, "committed_offsets", b_runs_in_between)
    fenced = r"another writer initialised transactional id \S+-1 .*one driver per flow"
    with pytest.raises(eo.FencedError, match=fenced):
        copy_task_ranges(spec, [CopyRange(src, p, 0, 40, dst) for p in range(2)], 0, run=older)
    assert [(p.partition, p.records, p.next_offset) for p in b_copied[1:]] == [(1, 40, 40)]
    # A's next batch: B's offsets name a newer run, so A stops before copying anything
    produce(clusters.source, src, [{"value": b"late", "partition": 1, "key": b"k"}])
    with pytest.raises(eo.SupersededError, match=r"newer driver .* run \S+ .*This older one stops"):
        copy_task_ranges(spec, [CopyRange(src, 1, 40, 42, dst)], 0, run=older)

    add_fences(clusters.target, dst, 2)
    mirrored = consume_all(clusters.target, dst, 2)
    assert {p: [m.value() for m in mirrored[p]] for p in range(2)} == values
