"""A source topic deleted while a writer task copies it (`kmirror_engine.copying.deleted_sources`),
with a fake copy loop and a fake source admin; on real brokers: tests/e2e/test_faults.py
(`test_topics_added_and_deleted_under_load_are_picked_up_or_reported`)."""

from __future__ import annotations

import json
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from kmirror.errors import ConnectionFailure, DataLossError, KmirrorError
from kmirror.flow.spec import parse_flow_spec
from kmirror_engine.copying.deleted_sources import DELETED_DURING_COPY, tolerating_deleted_sources
from kmirror_engine.copying.ranges import CopyError, CopyRange
from kmirror_engine.observability.progress import PartitionProgress
from kmirror_engine.planning.data_loss import DATA_LOSS_PREFIX


def flow(**options: Any) -> Any:
    return parse_flow_spec(
        {
            "id": "west->east",
            "topics": ["orders", "gone"],
            "topics_exclude": [],
            "replication_policy": {"type": "default"},
            "source": {"alias": "west", "bootstrap_servers": "w:9092"},
            "target": {"alias": "east", "bootstrap_servers": "e:9092"},
            "checkpoint_location": "/tmp/ckpt",
            **options,
        }
    )


class FakeAdmin:
    """describe_topics answers unknown topic for `deleted`, `error` (a KafkaError code) for the rest."""

    def __init__(self, deleted: set[str], error: int | None = None) -> None:
        self.deleted, self.error, self.asked = deleted, error, list[list[str]]()

    def describe_topics(self, collection: Any, request_timeout: float) -> dict[str, Future]:
        names = list(collection.topic_names)
        self.asked.append(names)
        out = {}
        for name in names:
            future: Future = Future()
            if name in self.deleted:
                future.set_exception(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
            elif self.error is not None:
                future.set_exception(KafkaException(KafkaError(self.error)))
            else:
                future.set_result(object())
            out[name] = future
        return out


def rng(topic: str, partition: int, start: int = 10, end: int = 20) -> CopyRange:
    return CopyRange(topic, partition, start, end, f"west.{topic}")


def progress(r: CopyRange) -> PartitionProgress:
    return PartitionProgress.for_range(
        r,
        next_offset=r.end_offset,
        records=r.end_offset - r.start_offset,
        size=100,
        last_timestamp_ms=1,
        offset_syncs=((r.start_offset, 0),),
        latency=(1, 1, 1, 1),
    )


class FlakyLoop:
    """A copy loop that fails while any range of `failing` topics is in its group, copies otherwise."""

    def __init__(self, failing: set[str], error: Exception | None = None) -> None:
        self.failing, self.error, self.groups = failing, error, list[list[CopyRange]]()

    def __call__(self, group: list[CopyRange]) -> list[PartitionProgress]:
        self.groups.append(list(group))
        if any(r.source_topic in self.failing for r in group):
            raise self.error or CopyError("consuming gone[0] failed: Broker: Unknown topic or partition")
        return [progress(r) for r in group]


ROUTE = flow().route
GROUP = [rng("orders", 0), rng("gone", 0, 5, 50), rng("orders", 1), rng("gone", 1, 7, 8)]


def test_with_fail_on_data_loss_on_a_deleted_topic_is_a_data_loss_error_naming_it_and_the_way_out() -> None:
    loop, admin = FlakyLoop({"gone"}), FakeAdmin({"gone"})
    with pytest.raises(DataLossError) as caught:
        tolerating_deleted_sources(ROUTE, True, loop, lambda: admin)(list(GROUP))
    text = str(caught.value)
    assert text.startswith(
        "west->east: data loss on gone[0]: topic gone was deleted from 'west' (describe: unknown topic) while "
        "offsets 5..49 were being copied (2 ranges in all); set fail_on_data_loss: false to drop them"
    )
    assert "The copy failed with: consuming gone[0] failed" in text
    assert admin.asked == [["gone", "orders"]] and len(loop.groups) == 1


def test_with_fail_on_data_loss_off_the_deleted_ranges_are_reported_and_the_others_copied(
    capsys: pytest.CaptureFixture[str],
) -> None:
    loop = FlakyLoop({"gone"})
    out = tolerating_deleted_sources(ROUTE, False, loop, lambda: FakeAdmin({"gone"}))(list(GROUP))
    assert [(p.source_topic, p.partition) for p in out] == [("orders", 0), ("gone", 0), ("orders", 1), ("gone", 1)]
    assert loop.groups[1] == [GROUP[0], GROUP[2]]  # copied again without the deleted topic
    assert out[0] == progress(GROUP[0]) and out[2] == progress(GROUP[2])
    dropped = out[1]
    assert (dropped.records, dropped.next_offset, dropped.skipped_records, dropped.offset_syncs) == (0, 50, 45, ())
    lines = [json.loads(line[len(DATA_LOSS_PREFIX) :]) for line in capsys.readouterr().err.splitlines()]
    assert lines == [
        {"flow": "west->east", "topic": "gone", "partition": p, "first_lost_offset": f, "skipped": n, "cause": c}
        for p, f, n, c in ((0, 5, 45, DELETED_DURING_COPY), (1, 7, 1, DELETED_DURING_COPY))
    ]


def test_a_group_of_deleted_topics_only_is_dropped_without_copying_again() -> None:
    loop = FlakyLoop({"gone"})
    group = [rng("gone", 0), rng("gone", 1)]
    out = tolerating_deleted_sources(ROUTE, False, loop, lambda: FakeAdmin({"gone"}))(group)
    assert [p.records for p in out] == [0, 0] and len(loop.groups) == 1


@pytest.mark.parametrize(
    "admin",
    [
        pytest.param(FakeAdmin(set()), id="every-topic-still-exists"),
        pytest.param(FakeAdmin(set(), KafkaError.TOPIC_AUTHORIZATION_FAILED), id="describe-not-authorized"),
    ],
)
def test_a_failure_without_a_confirmed_deletion_is_raised_unchanged(admin: FakeAdmin) -> None:
    failure = CopyError("producing to west.gone failed: Broker: Not enough in-sync replicas")
    with pytest.raises(CopyError) as caught:
        tolerating_deleted_sources(ROUTE, False, FlakyLoop({"gone"}, failure), lambda: admin)(GROUP)
    assert caught.value is failure


def test_an_admin_that_cannot_be_made_leaves_the_copy_failure_standing() -> None:
    def broken() -> Any:
        raise ConnectionFailure("cluster 'west': cannot reach w:9092")

    with pytest.raises(KmirrorError, match="Unknown topic or partition"):
        tolerating_deleted_sources(ROUTE, True, FlakyLoop({"gone"}), broken)(GROUP)


def test_a_copy_without_failure_never_asks_the_source() -> None:
    admin = FakeAdmin({"gone"})
    out = tolerating_deleted_sources(ROUTE, True, FlakyLoop(set()), lambda: admin)(GROUP)
    assert out == [progress(r) for r in GROUP] and admin.asked == []


def test_a_fenced_writer_or_a_data_loss_verdict_stands_even_when_the_topic_is_gone() -> None:
    from kmirror_engine.copying.exactly_once import FencedError

    admin = FakeAdmin({"gone"})
    for failure in (FencedError("another driver took west.gone[0]"), DataLossError("retention ran past gone[0]")):
        with pytest.raises(type(failure)) as caught:
            tolerating_deleted_sources(ROUTE, False, FlakyLoop({"gone"}, failure), lambda: admin)(GROUP)
        assert caught.value is failure
    assert admin.asked == []
