"""Fakes of confluent-kafka's clients and messages, shared by the unit tests that run without a
broker: delivery-report objects (`Msg`, `Err`), a consumed message (`FakeMessage`), a source
consumer over a list of them (`FakeConsumer`) and a target producer whose broker rejects records
over a size limit in the delivery report (`LimitedBroker`); and the futures an admin client
answers with (`done`, `failed`)."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError


class Msg:
    """A delivered (or failed) message as a delivery callback sees it: its topic and offset."""

    def __init__(self, topic: str, offset: int) -> None:
        self._topic, self._offset = topic, offset

    def topic(self) -> str:
        return self._topic

    def offset(self) -> int:
        return self._offset


class Err:
    """A delivery error: `str()` is its reason, as KafkaError's."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def str(self) -> str:
        return self.reason


class FakeMessage:
    def __init__(self, topic: str, partition: int, offset: int, value: bytes | None, key: bytes | None = b"k") -> None:
        self._t, self._p, self._o, self._v, self._k = topic, partition, offset, value, key

    def error(self) -> Any:
        return None

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def value(self) -> bytes | None:
        return self._v

    def key(self) -> bytes | None:
        return self._k

    def headers(self) -> Any:
        return [("h", b"1")]

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)


class FakeConsumer:
    def __init__(self, messages: list[FakeMessage]) -> None:
        self.messages = messages
        self.position_ = 0

    def assign(self, partitions: list[Any]) -> None:
        self.position_ = partitions[0].offset

    def consume(self, n: int, timeout: float) -> list[FakeMessage]:
        out = [m for m in self.messages if m.offset() >= self.position_][:n]
        self.position_ += len(out)
        return out

    def position(self, partitions: list[Any]) -> list[Any]:
        return [SimpleNamespace(topic=p.topic, partition=p.partition, offset=self.position_) for p in partitions]

    def pause(self, partitions: list[Any]) -> None: ...
    def resume(self, partitions: list[Any]) -> None: ...
    def unassign(self) -> None: ...


class LimitedBroker:
    """A producer whose broker rejects records over `limit` bytes in the delivery report."""

    def __init__(self, limit: int) -> None:
        self.limit, self.log, self.pending, self.next_offset = limit, [], [], 0  # type: ignore[var-annotated]

    def produce(
        self, topic: str, value: Any = None, key: Any = None, partition: int = 0, on_delivery: Any = None, **kwargs: Any
    ) -> None:
        self.pending.append((topic, value, key, partition, on_delivery, kwargs.get("headers")))

    def poll(self, timeout: float = 0) -> int:
        return self.flush(timeout)

    def flush(self, timeout: float = 0) -> int:
        pending, self.pending = self.pending, []
        for topic, value, key, partition, on_delivery, headers in pending:
            msg = FakeMessage(topic, partition, self.next_offset, value, key)
            if len(value or b"") > self.limit:
                error = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large")
                on_delivery and on_delivery(error, msg)
                continue
            self.log.append((topic, value, headers))
            self.next_offset += 1
            on_delivery and on_delivery(None, msg)
        return 0


def done(value: Any) -> Future[Any]:
    """A future an admin client answers with: already resolved to `value`."""
    future: Future[Any] = Future()
    future.set_result(value)
    return future


def failed(error: BaseException) -> Future[Any]:
    """A future an admin client answers with: already failed with `error`."""
    future: Future[Any] = Future()
    future.set_exception(error)
    return future
