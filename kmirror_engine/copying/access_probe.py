"""Why a copy loop sees no records: a source topic the mirror may not read (issue 45).

librdkafka reports a denied Fetch as a consumer error on a fresh consumer, but a consumer reused
from an earlier task (`kmirror_engine.clients.cache`) assigned a newly denied topic only waits: the
copy then stalled for the whole stall timeout (300 s) before failing with "no progress". After
`PROBE_AFTER_S` without progress the loop asks the source for the stuck topics' metadata and fails at
once, naming the topic and the grant, when the broker says the mirror is not authorized.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError

PROBE_AFTER_S = 10.0
_DENIED = (KafkaError.TOPIC_AUTHORIZATION_FAILED,)


class AccessProbe:
    """`check(consumer, topics, idle_s)` raises `error(topic)` for the first denied topic; probes at
    most every `PROBE_AFTER_S` of idleness (one metadata request per stuck topic)."""

    def __init__(self, probe_after_s: float = PROBE_AFTER_S) -> None:
        self.probe_after_s = probe_after_s
        self._last = 0.0

    def denied(self, consumer: Any, topics: Iterable[str], idle_s: float) -> str | None:
        now = time.monotonic()
        if idle_s < self.probe_after_s or now - self._last < self.probe_after_s:
            return None
        self._last = now
        for topic in sorted(set(topics)):
            try:
                meta = consumer.list_topics(topic, timeout=5)
            except Exception:  # a metadata timeout is the stall timeout's business
                return None
            error = getattr(meta.topics.get(topic), "error", None)
            if error is not None and error.code() in _DENIED:
                return topic
        return None


def denied_message(topic: str) -> str:
    return (
        f"the source cluster refuses to let the mirror read topic {topic!r} (TOPIC_AUTHORIZATION_FAILED): grant "
        f"the mirror's principal Describe and Read on topic {topic!r} (`kmirror acls` lists every grant it needs)"
    )
