"""Topic discovery on the driver: which source topics (and partitions) a flow mirrors now.

MM2's rule (`kmirror.flow.filters.should_replicate_topic`): a topic is mirrored when the flow
selects it (or it is a heartbeats topic), it is not internal, and it would not loop back to
the target through the replication policy. The list is refreshed at most every
`topic_refresh_interval_ms`, so new topics and new partitions are picked up while a stream runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException

from kmirror.errors import ConnectionFailure
from kmirror.flow.filters import NameSelection, should_replicate_topic
from kmirror.flow.replication_policy import ReplicationPolicy
from kmirror.flow.spec import ClusterEndpoint

log = logging.getLogger("kmirror.discovery")


@dataclass(frozen=True)
class MirroredTopic:
    source_topic: str
    partitions: int
    target_topic: str


def list_topic_partitions(admin: Any, endpoint: ClusterEndpoint, timeout_s: float) -> dict[str, int]:
    """Every topic of a cluster with its partition count.

    Raises ConnectionFailure naming the cluster alias and address when metadata cannot be
    fetched within `timeout_s`. Topics whose metadata carries an error are left out (logged):
    they are picked up at a later refresh.
    """
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise ConnectionFailure(
            f"cluster {endpoint.alias!r} ({endpoint.bootstrap_servers}) is unreachable: {exc.args[0]}; "
            "check bootstrap_servers, the network and the security settings"
        ) from None
    out: dict[str, int] = {}
    for name, topic in metadata.topics.items():
        if topic.error is not None:
            log.warning("topic %s skipped this refresh: %s", name, topic.error)
            continue
        out[name] = len(topic.partitions)
    return out


class TopicDiscovery:
    """The source topics a flow mirrors, refreshed every `refresh_interval_ms` (0: every call)."""

    def __init__(
        self,
        admin: Any,
        endpoint: ClusterEndpoint,
        selection: NameSelection,
        policy: ReplicationPolicy,
        target_alias: str,
        refresh_interval_ms: int,
        timeout_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.admin, self.endpoint, self.selection, self.policy = admin, endpoint, selection, policy
        self.target_alias = target_alias
        self.refresh_interval_s = refresh_interval_ms / 1000
        self.timeout_s = timeout_s
        self.clock = clock
        self._topics: dict[str, MirroredTopic] | None = None
        self._refreshed_at = 0.0

    def select(self, partitions_by_topic: dict[str, int]) -> dict[str, MirroredTopic]:
        """Apply MM2's replication rule and the rename to a topic -> partition count listing."""
        return {
            name: MirroredTopic(name, count, self.policy.format_remote_topic(self.endpoint.alias, name))
            for name, count in sorted(partitions_by_topic.items())
            if should_replicate_topic(self.selection, self.policy, name, self.target_alias)
        }

    def topics(self, force: bool = False) -> dict[str, MirroredTopic]:
        """The mirrored topics, from cache unless the refresh interval passed (or `force`).

        Raises ConnectionFailure when the source cannot be reached and nothing is cached yet;
        with a cache, a failed refresh is logged and the previous listing is kept.
        """
        now = self.clock()
        due = self._topics is None or force or now - self._refreshed_at >= self.refresh_interval_s
        if not due:
            assert self._topics is not None
            return self._topics
        try:
            listing = list_topic_partitions(self.admin, self.endpoint, self.timeout_s)
        except ConnectionFailure as exc:
            if self._topics is None:
                raise
            log.warning("topic refresh failed, keeping the previous listing: %s", exc)
            return self._topics
        fresh = self.select(listing)
        if self._topics is not None:
            self._log_changes(self._topics, fresh)
        self._topics, self._refreshed_at = fresh, now
        return fresh

    @staticmethod
    def _log_changes(old: dict[str, MirroredTopic], new: dict[str, MirroredTopic]) -> None:
        for name in sorted(set(new) - set(old)):
            log.info("new source topic %s (%d partitions) -> %s", name, new[name].partitions, new[name].target_topic)
        for name in sorted(set(old) - set(new)):
            log.warning("source topic %s is gone or no longer selected; its mirroring stops", name)
        for name in sorted(set(old) & set(new)):
            if new[name].partitions != old[name].partitions:
                log.info("source topic %s: %d -> %d partitions", name, old[name].partitions, new[name].partitions)
