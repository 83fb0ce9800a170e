"""A copy loop that gets no records from a topic it may not read fails at once naming topic and grant
(issue 45), instead of waiting out the 300 s stall timeout. End to end: the oauthbearer-batch case of
tests/security/test_plain_oauthbearer_kafka.py (a reused consumer, Kafka 4.1 with the authorizer on)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from confluent_kafka import KafkaError

from kmirror_engine.copying.access_probe import AccessProbe, denied_message


class _Meta:
    def __init__(self, errors: dict[str, int | None]) -> None:
        self.errors = errors
        self.asked: list[str] = []

    def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
        self.asked.append(topic)
        code = self.errors.get(topic)
        error = None if code is None else KafkaError(code)
        return SimpleNamespace(topics={topic: SimpleNamespace(error=error)})


def test_a_denied_topic_is_named_after_the_probe_delay_only():
    consumer = _Meta({"ok": None, "secret": KafkaError.TOPIC_AUTHORIZATION_FAILED})
    probe = AccessProbe(probe_after_s=0.2)
    assert probe.denied(consumer, ["ok", "secret"], idle_s=0.1) is None and consumer.asked == []
    assert probe.denied(consumer, ["secret", "ok", "ok"], idle_s=0.3) == "secret"
    assert consumer.asked == ["ok", "secret"]
    # at most one probe per delay, whatever the idle time
    assert probe.denied(consumer, ["secret"], idle_s=5) is None and len(consumer.asked) == 2
    time.sleep(0.25)
    assert probe.denied(consumer, ["secret"], idle_s=5) == "secret"
    message = denied_message("secret")
    assert "'secret'" in message and "Describe and Read" in message and "kmirror acls" in message


def test_other_metadata_errors_and_failures_leave_it_to_the_stall_timeout():
    assert AccessProbe(0).denied(_Meta({"t": KafkaError.UNKNOWN_TOPIC_OR_PART}), ["t"], idle_s=1) is None

    class Broken:
        def list_topics(self, topic: str, timeout: float) -> None:
            raise RuntimeError("timed out")

    assert AccessProbe(0).denied(Broken(), ["t"], idle_s=1) is None
    assert AccessProbe(0).denied(object(), ["t"], idle_s=1) is None  # a client without metadata calls
