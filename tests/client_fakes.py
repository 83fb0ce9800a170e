"""Fakes of confluent-kafka's delivery-report objects, shared by the unit tests that drive the
client factory's producers without a broker."""

from __future__ import annotations


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
