"""Day-two faults against real brokers (issue 15, items 1, 2, 3, 6, 7): what tansu can show.
The halves it cannot (batch-level rejections, offset metadata, ACLs, partition growth, secret
rotation, Kerberos): tests/test_day_two_unit.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from kmirror.errors import DataLossError
from kmirror.flow.spec import FlowSpec, parse_flow_spec
from kmirror_engine.copying.exactly_once import StaleOffsetsError, TransactionalCopier
from kmirror_engine.copying.ranges import CopyRange
from kmirror_engine.copying.task_copy import copy_task_ranges
from kmirror_engine.planning.internal_names import offsets_group, transactional_id
from tests.brokers import IS_TANSU
from tests.kafka_helpers import add_fences, consume_all, create_topic, flow_raw, produce, transactional_clients

pytestmark = [pytest.mark.e2e, pytest.mark.spark40]


def _spec(clusters: Any, unique: str, **options: Any) -> FlowSpec:
    raw = flow_raw(clusters, "west", "east", [f".*-{unique}"], "/tmp/unused", id=f"west-{unique}->east")
    return parse_flow_spec({**raw, "topic_refresh_interval_ms": 0, **options})


def test_records_over_the_target_topic_limit_are_dead_lettered_and_the_rest_mirrored(
    clusters: Any, unique: str
) -> None:
    """Before: no cap from the topic's max.message.bytes (tansu does not enforce it either), so
    the 5,000-byte record landed on a topic that allows 2,000 (on Kafka its batch is refused)."""
    src, dst, dlq = f"lim-{unique}", f"west.lim-{unique}", f"dlq-{unique}"
    # the source took the 5,000-byte record (its limit was lowered later, or the target's is lower)
    create_topic(clusters.source, src, 1, {"max.message.bytes": "10000"})
    create_topic(clusters.target, dst, 1, {"max.message.bytes": "2000"})
    create_topic(clusters.target, dlq, 1)
    values = [b"a" * 1500, b"b" * 1500, b"x" * 5000, b"c" * 1500]  # fit alone; together over 2000
    produce(clusters.source, src, [{"key": b"k", "value": v, "partition": 0} for v in values])
    add_fences(clusters.source, src, 1)

    spec = _spec(clusters, unique, dead_letter_topic=dlq)
    [progress] = copy_task_ranges(spec, [CopyRange(src, 0, 0, 4, dst)], 0)

    assert (progress.records, progress.dead_lettered, progress.next_offset) == (3, 1, 4)
    add_fences(clusters.target, dst, 1)
    add_fences(clusters.target, dlq, 1)
    assert [m.value() for m in consume_all(clusters.target, dst, 1)[0]] == [values[0], values[1], values[3]]
    [pointer] = consume_all(clusters.target, dlq, 1)[0]
    assert dict(pointer.headers())["kmirror.origin.offset"] == b"2" and pointer.value() == values[2]


@pytest.fixture
def eos_task(clusters: Any) -> Iterator[Any]:
    consumers: list[Consumer] = []

    def make(spec: FlowSpec, task_id: int, **kwargs: Any) -> TransactionalCopier:
        source, producer, offsets = transactional_clients(clusters, spec, task_id)
        consumers.extend([source, offsets])
        admin = AdminClient({"bootstrap.servers": clusters.source})
        return TransactionalCopier(
            source, producer, offsets, source_admin=admin, group=offsets_group(spec.id), stall_timeout_s=30, **kwargs
        )

    yield make
    for consumer in consumers:
        consumer.close()


def test_exactly_once_offsets_of_a_recreated_topic_fail_instead_of_skipping_it(
    clusters: Any, unique: str, eos_task: Any
) -> None:
    """Runbook 'recreate the topic, reset the checkpoint': before, the stale committed offset
    (120) turned the new log's range [0, 30) into nothing, silently."""
    src, dst = f"again-{unique}", f"west.again-{unique}"
    create_topic(clusters.source, src, 1)
    create_topic(clusters.target, dst, 1)
    spec = _spec(clusters, unique, exactly_once=True)
    produce(clusters.source, src, [{"value": f"old-{i}".encode(), "partition": 0} for i in range(120)])
    add_fences(clusters.source, src, 1)
    [first] = eos_task(spec, 0).copy([CopyRange(src, 0, 0, 120, dst)])
    assert first.records == 120
    admin = AdminClient({"bootstrap.servers": clusters.source})
    for future in admin.delete_topics([src], operation_timeout=30).values():
        future.result(timeout=30)
    create_topic(clusters.source, src, 1)
    produce(clusters.source, src, [{"value": f"new-{i}".encode(), "partition": 0} for i in range(30)])
    add_fences(clusters.source, src, 1)

    # Apache Kafka names topic ids (the commit's metadata holds the old one); tansu has none, so
    # there the offset past the new log's end is the sign
    stale = (
        rf"belong to an earlier incarnation of the source topic: {dst}\[0\] holds 120, committed for topic "
        rf"id [^;]+; {src} is now [^;]+; "
        if not IS_TANSU
        else rf"{dst}\[0\] holds 120, past the end of "
        rf"{src}\[0\] \(3\d\); "
    )
    with pytest.raises(StaleOffsetsError, match=stale + r"nothing was skipped or copied\. Reset that group"):
        eos_task(spec, 0).copy([CopyRange(src, 0, 0, 30, dst)])
    add_fences(clusters.target, dst, 1)
    assert len(consume_all(clusters.target, dst, 1)[0]) == 120  # the first log's copy, nothing more


def test_a_deleted_topic_with_planned_offsets_fails_when_fail_on_data_loss_is_on(clusters: Any, unique: str) -> None:
    """Before: the planned range was dropped (reported on stderr) although the flag was on."""
    from kmirror_engine.planning.range_planner import RangePlanner

    doomed, kept = f"doomed-{unique}", f"kept-{unique}"
    for topic in (doomed, kept):
        create_topic(clusters.source, topic, 1)
        produce(clusters.source, topic, [{"value": b"v", "partition": 0}] * 10)
        add_fences(clusters.source, topic, 1)
    planner = RangePlanner.for_flow(_spec(clusters, unique), once=True, task_count=1)
    start = planner.initial_offsets()
    end = planner.next_end(start, None)
    admin = AdminClient({"bootstrap.servers": clusters.source})
    for future in admin.delete_topics([doomed], operation_timeout=30).values():
        future.result(timeout=30)
    with pytest.raises(
        DataLossError,
        match=rf"data loss on {doomed}\[0\]: topic {doomed} was deleted from 'west' "
        r"\(describe: unknown topic\) with offsets 0\.\.\d+ planned",
    ):
        planner.plan(start, end)


def test_the_sink_fences_every_transactional_id_of_an_earlier_run_before_the_first_batch(
    clusters: Any, unique: str
) -> None:
    """A zombie task of a previous run (id index 2) still holds an open transaction on a
    partition that the new run gives to task 0. Before: only ids the new tasks use were fenced,
    so the zombie could still commit its copy next to the new owner's."""
    from spark_app.sink import MirrorSink

    topic, remote = f"zomb-{unique}", f"west.zomb-{unique}"
    create_topic(clusters.source, topic, 3)
    create_topic(clusters.target, remote, 3)
    spec = _spec(clusters, unique, exactly_once=True)
    zombie = Producer({"bootstrap.servers": clusters.target, "transactional.id": transactional_id(spec.id, 2)})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(remote, b"zombie copy", partition=0)
    zombie.flush(30)

    MirrorSink(options={"flow_spec": json.dumps(spec.to_dict())}).streamWriter(None, False)

    with pytest.raises(KafkaException) as caught:
        zombie.commit_transaction(30)
    assert caught.value.args[0].code() != 0  # fenced: its transaction can no longer commit


def test_exactly_once_transactions_are_bounded_by_bytes(clusters: Any, unique: str, eos_task: Any) -> None:
    """Before: one transaction per task however many bytes (a slow target could pass
    transaction.timeout.ms). 3,000 records of ~1 kB with a 300 kB budget: several transactions (the
    budget is checked per consumed batch of up to 1,000 records, so one may overshoot it by that)."""
    src, dst = f"bytes-{unique}", f"west.bytes-{unique}"
    create_topic(clusters.source, src, 2)
    create_topic(clusters.target, dst, 2)
    values = {p: [f"{p}-{i}-".encode() + b"x" * 1000 for i in range(1500)] for p in range(2)}
    produce(clusters.source, src, [{"value": v, "partition": p} for p in range(2) for v in values[p]])
    add_fences(clusters.source, src, 2)
    spec = _spec(clusters, unique, exactly_once=True)
    task = eos_task(spec, 0, max_transaction_bytes=300_000)
    commits: list[int] = []

    progress = _count_commits(task, commits).copy([CopyRange(src, p, 0, 1500, dst) for p in range(2)])

    assert [(p.records, p.next_offset) for p in progress] == [(1500, 1500), (1500, 1500)]
    assert len(commits) >= 3
    add_fences(clusters.target, dst, 2)
    mirrored = consume_all(clusters.target, dst, 2)
    assert {p: [m.value() for m in mirrored[p]] for p in range(2)} == values


def _count_commits(task: TransactionalCopier, commits: list[int]) -> TransactionalCopier:
    """The task, its producer wrapped to count committed transactions."""
    producer = task.copier.producer
    commit = producer.commit_transaction

    class Counting:
        def __getattr__(self, name: str) -> Any:
            return getattr(producer, name)

        def __len__(self) -> int:
            return len(producer)

        def commit_transaction(self, *args: Any) -> None:
            commits.append(1)
            commit(*args)

    counting = Counting()
    task.producer = counting
    task.copier.producer = counting
    return task
