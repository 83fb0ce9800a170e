"""Which remote topics the mirror created: config sync alters only those (unless told otherwise).

Kafka keeps no creator per topic, so the mirror records its own creations in a compacted
one-partition topic on the target, `kmirror-created-topics.<source alias>.internal` (internal by
MM2's naming: never mirrored itself). Key: the remote topic; value: JSON `{"flow", "source_topic",
"created_ms"}`. Written by `TargetTopics` right after a successful CreateTopics (a topic that
already existed, created by someone else, is never recorded); read by the config sync.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

from kmirror.errors import ConnectionFailure
from kmirror.flow.spec import ClusterEndpoint
from kmirror_engine.clients.delivery import DeliveryFailure
from kmirror_engine.planning.internal_names import created_topics_topic, layout
from kmirror_engine.planning.keyed_reader import read_keyed_to_end

TOPIC_CONFIG = layout("created_topics")


class CreatedTopics:
    """The registry of one source alias on one target cluster (module doc)."""

    def __init__(self, target: ClusterEndpoint, source_alias: str, flow_id: str) -> None:
        self.target, self.flow_id = target, flow_id
        self.topic = created_topics_topic(source_alias)
        self._producer: Any = None
        self._exists = False

    def ensure_exists(self) -> None:
        """Create the registry topic unless it exists. `TargetTopics` calls it before creating the
        topics it will record: a broker applies topic creations in order, so a registry created
        after 2,000 new topics could be written only once their 4,000 partitions existed (about
        5 s of a 2,000-topic first start-up, docs/performance.md)."""
        from kmirror_engine.clients.topic_admin import ensure_topic

        if not self._exists:
            ensure_topic(self.target, self.topic, TOPIC_CONFIG)
            self._exists = True

    def record(self, created: Iterable[tuple[str, str]], timeout_s: float = 30.0) -> None:
        """Record `(remote topic, source topic)` pairs; raises ConnectionFailure when a record is
        not acknowledged (the caller keeps them and tries again)."""
        from kmirror_engine.clients.factory import renewing_delivery_producer

        pairs = list(created)
        if not pairs:
            return
        self.ensure_exists()
        if self._producer is None:  # kept for the planner's life: rebuilt when the target's credentials rotate
            self._producer = renewing_delivery_producer(
                self.target,
                role="created-topics-producer",
                what="created topic record",
                error=ConnectionFailure,
                describe=self._message,
            )
        now = int(time.time() * 1000)
        for remote, source in pairs:
            value = json.dumps({"flow": self.flow_id, "source_topic": source, "created_ms": now})
            self._producer.produce(self.topic, value.encode(), remote.encode())
        try:
            self._producer.confirm(timeout_s)
        except ConnectionFailure:
            self._exists = False  # checked (and made again if it was deleted) before the retry
            raise

    def _message(self, failures: list[DeliveryFailure], remaining: int, timeout_s: float) -> str:
        return (
            f"recording created topics in {self.topic} on {self.target.alias!r} failed: "
            f"{failures[0].reason if failures else 'no acknowledgement in time'}"
        )

    def load(self, timeout_s: float = 30.0) -> set[str]:
        """Every remote topic recorded so far (empty when the registry does not exist yet)."""
        return load_created(self.target, self.topic, timeout_s)


def load_created(target: ClusterEndpoint, topic: str, timeout_s: float = 30.0) -> set[str]:
    """Read the registry to its end (the partition-EOF event, as of the read)."""
    return {
        key.decode() for key, _ in read_keyed_to_end(target, topic, role="created-topics-reader", timeout_s=timeout_s)
    }
