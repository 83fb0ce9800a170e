"""Exactly-once offsets on the target: a coordinator that is moving or loading is asked again."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kmirror.errors import KmirrorError
from kmirror_engine.copying.exactly_once import committed_offsets
from kmirror_engine.copying.ranges import CopyRange

RANGES = [CopyRange("orders", 0, 0, 10, "west.orders"), CopyRange("orders", 1, 0, 10, "west.orders")]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Answers:
    """`committed()` answering from a script: an exception, or per-partition error codes (None: offset 7)."""

    def __init__(self, clock: Clock, script: list[Any]) -> None:
        self.clock, self.script, self.calls = clock, script, 0

    def committed(self, wanted: list[TopicPartition], timeout: float) -> list[Any]:
        answer = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        self.clock.now += 1.0
        if isinstance(answer, KafkaException):
            raise answer
        return [_Found(tp.topic, tp.partition, answer) for tp in wanted]


class _Found:
    def __init__(self, topic: str, partition: int, code: int | None) -> None:
        self.topic, self.partition, self.metadata = topic, partition, None
        self.offset = 7 if code is None else -1001
        self.error = None if code is None else KafkaError(code)


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("kmirror_engine.copying.exactly_once.time.sleep", lambda s: None)


def test_a_loading_or_moving_coordinator_is_asked_again_until_it_answers() -> None:
    clock = Clock()
    moved = KafkaException(KafkaError(KafkaError.NOT_COORDINATOR))
    consumer = Answers(clock, [KafkaError.COORDINATOR_LOAD_IN_PROGRESS, moved, KafkaError.NOT_COORDINATOR, None])
    found = committed_offsets(consumer, RANGES, timeout_s=30, clock=clock)
    assert {k: v.offset for k, v in found.items()} == {("west.orders", 0): 7, ("west.orders", 1): 7}
    assert consumer.calls == 4


def test_a_coordinator_still_moving_at_the_deadline_fails_the_batch_naming_the_partition() -> None:
    clock = Clock()
    consumer = Answers(clock, [KafkaError.NOT_COORDINATOR])
    with pytest.raises(KmirrorError, match=r"exactly-once offsets of west.orders\[0\] failed .* and 1 more"):
        committed_offsets(consumer, RANGES, timeout_s=5, clock=clock)
    assert 4 <= consumer.calls <= 6


def test_any_other_error_fails_at_once() -> None:
    clock = Clock()
    consumer = Answers(clock, [KafkaError.GROUP_AUTHORIZATION_FAILED, None])
    with pytest.raises(KmirrorError, match=r"GROUP_AUTHORIZATION_FAILED|Group authorization"):
        committed_offsets(consumer, RANGES, timeout_s=30, clock=clock)
    assert consumer.calls == 1
    refused = Answers(clock, [KafkaException(KafkaError(KafkaError._TRANSPORT)), None])
    with pytest.raises(KafkaException):
        committed_offsets(refused, RANGES, timeout_s=30, clock=clock)
    assert refused.calls == 1


def test_every_writer_of_a_partition_shares_its_transactional_id_and_start_up_fences_them_all() -> None:
    """Two drivers of one flow may give a partition to different task indexes: with per-task ids both
    could commit it. The id is the partition's, so the later `init_transactions` fences the other."""
    from kmirror_engine.copying.exactly_once import fence_previous_generation
    from kmirror_engine.planning.internal_names import partition_transactional_id
    from tests.planner_fakes import spec

    flow = spec(exactly_once=True)
    assert partition_transactional_id(flow.id, "west.orders", 1) == "kmirror-west-to-east-west.orders-1"
    initialised: list[str] = []

    class Fencer:
        def __init__(self, txn_id: str) -> None:
            self.txn_id = txn_id

        def init_transactions(self, timeout: float) -> None:
            initialised.append(self.txn_id)

    ids = fence_previous_generation(flow.id, 2, Fencer, [("west.orders", 0), ("west.orders", 1)])
    assert (
        sorted(initialised)
        == sorted(ids)
        == sorted(
            [
                "kmirror-west-to-east-west.orders-0",
                "kmirror-west-to-east-west.orders-1",
                "kmirror-west-to-east-0",  # earlier versions' per-task ids
                "kmirror-west-to-east-1",
            ]
        )
    )


def test_a_newer_drivers_offsets_stop_an_older_driver_and_fencing_is_told_apart_from_other_errors() -> None:
    from kmirror_engine.copying.exactly_once import Committed, _fenced, superseded
    from kmirror_engine.planning.internal_names import run_token

    older, newer = run_token(), run_token()
    assert older < newer and run_token(10**18) > run_token(10**17)  # later start, greater token
    committed = {("w.t", 0): Committed(5, None, older), ("w.t", 1): Committed(9, None, newer)}
    assert superseded(committed, older) == [f"w.t[1] by run {newer}"]
    assert superseded(committed, newer) == [] and superseded(committed, None) == []
    for code in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH):
        try:
            try:
                raise KafkaException(KafkaError(code))
            except KafkaException as inner:
                raise KmirrorError("a record failed") from inner
        except KmirrorError as outer:
            assert _fenced(outer)
    assert not _fenced(KafkaException(KafkaError(KafkaError._TIMED_OUT)))
    assert not _fenced(KmirrorError("producer fenced"))  # only Kafka's error codes count
