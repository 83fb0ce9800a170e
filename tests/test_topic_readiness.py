"""New target partitions: the planner waits until the target hosts them (leader in metadata, a
ListOffsets answered), at most a bound, and never fails a plan over it."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from kmirror_engine.planning.topic_readiness import await_writable


class SlowTarget:
    """A broker that shows a new topic's partitions without a leader for `unled_polls` metadata
    requests, then answers ListOffsets with `error` for `unhosted_polls` more."""

    def __init__(self, unled_polls: int, unhosted_polls: int, error: int = KafkaError.NOT_LEADER_FOR_PARTITION) -> None:
        self.unled_polls, self.unhosted_polls, self.error = unled_polls, unhosted_polls, error
        self.calls: list[str] = []

    def list_topics(self, timeout: float) -> Any:
        self.calls.append("metadata")
        leader = -1 if self.unled_polls > 0 else 1
        self.unled_polls -= 1
        parts = {p: SimpleNamespace(leader=leader) for p in range(2)}
        return SimpleNamespace(topics={"west.a": SimpleNamespace(partitions=parts, error=None)})

    def list_offsets(self, request: dict[Any, Any], **kwargs: Any) -> dict[Any, Future[Any]]:
        self.calls.append("list_offsets")
        out: dict[Any, Future[Any]] = {}
        for tp in request:
            out[tp] = Future()
            if self.unhosted_polls > 0:
                out[tp].set_exception(KafkaException(KafkaError(self.error)))
            else:
                out[tp].set_result(SimpleNamespace(offset=0))
        self.unhosted_polls -= 1
        return out


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_waits_for_a_leader_then_for_the_leader_to_host_the_partitions() -> None:
    target, clock = SlowTarget(unled_polls=2, unhosted_polls=1), Clock()
    assert await_writable(target, {"west.a": 2}, sleep=clock.sleep, clock=lambda: clock.now)
    assert target.calls == ["metadata", "metadata", "metadata", "list_offsets", "metadata", "list_offsets"]
    assert len(clock.sleeps) == 3


def test_gives_up_after_the_bound_without_raising() -> None:
    target, clock = SlowTarget(unled_polls=10**6, unhosted_polls=0), Clock()
    assert not await_writable(target, {"west.a": 2}, timeout_s=1.0, sleep=clock.sleep, clock=lambda: clock.now)
    assert 1.0 <= clock.now <= 1.5


def test_an_error_that_says_nothing_about_readiness_ends_the_wait() -> None:
    """A denied ListOffsets (no Describe) cannot tell readiness: the copy judges the partition."""
    target, clock = SlowTarget(0, 10**6, error=KafkaError.TOPIC_AUTHORIZATION_FAILED), Clock()
    assert await_writable(target, {"west.a": 2}, sleep=clock.sleep, clock=lambda: clock.now)
    assert clock.sleeps == []


def test_nothing_new_asks_nothing() -> None:
    target = SlowTarget(0, 0)
    assert await_writable(target, {})
    assert target.calls == []
