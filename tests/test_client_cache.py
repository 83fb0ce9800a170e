"""The copying tasks' client cache: reuse after success only, one idle pair, closed when idle."""

from __future__ import annotations

import time

import pytest

from kmirror_engine.clients.cache import ClientCache, CopyClients, config_key


class FakeConsumer:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class FakeProducer:
    def __init__(self, outstanding: int = 0) -> None:
        self.outstanding = outstanding

    def __len__(self) -> int:
        return self.outstanding


def make(made: list[CopyClients]) -> CopyClients:
    made.append(CopyClients(FakeConsumer(), FakeProducer()))
    return made[-1]


def test_clients_are_reused_after_a_clean_task_and_replaced_for_other_configs() -> None:
    cache, made = ClientCache(idle_close_s=0), []
    with cache.lease("a", lambda: make(made)) as first:
        pass
    with cache.lease("a", lambda: make(made)) as second:
        assert second is first
    with cache.lease("b", lambda: make(made)) as other:
        assert other is not first
    assert len(made) == 2 and first.consumer.closed  # one idle pair per process: a's went away


def test_clients_of_a_failed_task_are_closed_never_reused() -> None:
    cache, made = ClientCache(idle_close_s=0), []
    with pytest.raises(RuntimeError), cache.lease("a", lambda: make(made)):
        raise RuntimeError("delivery failed")
    assert made[0].consumer.closed
    with cache.lease("a", lambda: make(made)) as fresh:
        assert fresh is not made[0]


def test_clients_with_outstanding_records_are_not_kept() -> None:
    cache, made = ClientCache(idle_close_s=0), []
    with cache.lease("a", lambda: make(made)) as clients:
        clients.producer.outstanding = 3
    assert clients.consumer.closed
    with cache.lease("a", lambda: make(made)) as fresh:
        assert fresh is not clients


def test_idle_clients_are_closed_after_the_idle_timeout() -> None:
    cache, made = ClientCache(idle_close_s=0.05), []
    with cache.lease("a", lambda: make(made)) as clients:
        pass
    deadline = time.monotonic() + 5
    while not clients.consumer.closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert clients.consumer.closed


def test_config_key_depends_on_every_setting() -> None:
    assert config_key({"a": 1}, {"b": 2}) == config_key({"a": 1}, {"b": 2})
    assert config_key({"a": 1}, {"b": 2}) != config_key({"a": 1}, {"b": 3})
    assert "secret" not in config_key({"sasl.password": "secret"})


def test_concurrent_leases_get_their_own_clients_and_both_are_kept() -> None:
    cache, made = ClientCache(idle_close_s=0), []
    with cache.lease("a", lambda: make(made)) as one, cache.lease("a", lambda: make(made)) as two:
        assert one is not two
    with cache.lease("a", lambda: make(made)) as again, cache.lease("a", lambda: make(made)) as other:
        assert {id(again), id(other)} == {id(one), id(two)}
    assert len(made) == 2
