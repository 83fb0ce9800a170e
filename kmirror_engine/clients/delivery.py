"""Produce, flush, and raise on any delivery failure: the one copy of the confirm step of every
producer whose records must not go missing silently (checkpoints, offset syncs and their
snapshots, heartbeats, the created-topics registry).

Contract of `DeliveryConfirmingProducer`:
- `produce(topic, value, key, **kwargs)` queues a record with this wrapper's delivery callback
  (the caller passes no `on_delivery`); failures are kept as `DeliveryFailure`s naming the topic
  and librdkafka's reason, each delivered record goes to `on_delivered(msg)` if given;
- `confirm(timeout_s)` flushes and raises `error(message)` when a record produced since the last
  confirm failed or is still unconfirmed after `timeout_s`. The failures are taken either way
  (a raised error reports them once);
- `check()` raises for failures reported so far without waiting (callers that produce and poll);
- several wrappers may share one producer (the failover listener's checkpoints and heartbeats):
  each confirms and reports its own records; a flush by one delivers the others' too.
The message is `describe(failures, remaining, timeout_s)`; the default one is
`N <counted>(s) failed, R unconfirmed; first: ['<what> to <topic> failed: <reason>']`.
Clients themselves are made by `kmirror_engine.clients.factory` (`new_delivery_producer`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kmirror.errors import KmirrorError


class DeliveryError(KmirrorError):
    """Records were not delivered (the default error of a DeliveryConfirmingProducer)."""


@dataclass(frozen=True)
class DeliveryFailure:
    what: str  # what the record is ("checkpoint", "offset sync")
    topic: str
    reason: str  # librdkafka's

    def __str__(self) -> str:
        return f"{self.what} to {self.topic} failed: {self.reason}"


Describe = Callable[[list[DeliveryFailure], int, float], str]


class DeliveryConfirmingProducer:
    """A producer whose records are confirmed delivered, or reported (see the module docstring)."""

    def __init__(
        self,
        producer: Any,
        *,
        what: str,
        error: Callable[[str], Exception] = DeliveryError,
        counted: str | None = None,
        describe: Describe | None = None,
        on_delivered: Callable[[Any], None] | None = None,
    ) -> None:
        """`what`: names each failure; `counted`: the noun counted in the default message
        (default `what`); `on_delivered(msg)`: called for each delivered record."""
        self.producer = producer
        self.what = what
        self.counted = counted or what
        self.error = error
        self.describe = describe or self._default_message
        self.on_delivered = on_delivered
        self._failures: list[DeliveryFailure] = []

    def produce(self, topic: str, value: Any = None, key: Any = None, **kwargs: Any) -> None:
        self.producer.produce(topic, value, key, on_delivery=self._delivered, **kwargs)

    def poll(self, timeout: float = 0) -> Any:
        return self.producer.poll(timeout)

    def flush(self, timeout: float) -> Any:
        """The producer's own flush: waits, reports nothing (shutdown paths)."""
        return self.producer.flush(timeout)

    def __len__(self) -> int:
        return len(self.producer)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._failures.append(DeliveryFailure(self.what, msg.topic(), err.str()))
        elif self.on_delivered is not None:
            self.on_delivered(msg)

    def check(self) -> None:
        """Raise `error` for failures reported so far (without waiting for the others)."""
        failures, self._failures = self._failures, []
        if failures:
            raise self.error(self.describe(failures, 0, 0.0))

    def confirm(self, timeout_s: float) -> None:
        """Flush; raise `error` unless every record produced since the last confirm was delivered."""
        remaining = self.producer.flush(timeout_s)
        failures, self._failures = self._failures, []
        if failures or remaining:
            raise self.error(self.describe(failures, remaining, timeout_s))

    def _default_message(self, failures: list[DeliveryFailure], remaining: int, timeout_s: float) -> str:
        first = [str(f) for f in failures[:1]]
        return f"{len(failures)} {self.counted}(s) failed, {remaining} unconfirmed; first: {first}"
