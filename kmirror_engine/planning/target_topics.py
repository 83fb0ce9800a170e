"""Target topics exist before data flows: created with the source's partition count and its
explicitly set topic configs (minus MM2's `config.properties.exclude` defaults), and grown
when the source grows.

`TargetTopics.ensure(topics)` promises: after it returns, every remote topic exists on the
target with at least its source's partition count (records keep their source partition). A
topic that already exists (created by hand, by another flow, by a restart, or by someone else
between our listing and our CreateTopics) is checked for its partition count like any other,
never trusted for merely existing. It raises KmirrorError naming the topic, both counts and the
fix when a topic cannot be created or grown (e.g. the target refuses CreatePartitions),
because copying into too few partitions would fail later or scramble per-key order.

A topic it created or grew is also waited for until every partition has a leader
(`kmirror_engine.clients.topic_admin.await_leaders`, up to `timeout_s`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic, ResourceType

from kmirror.errors import ConnectionFailure, KmirrorError
from kmirror.flow.spec import ClusterEndpoint
from kmirror_engine.clients.topic_admin import await_leaders
from kmirror_engine.planning.discovery import MirroredTopic, list_topic_partitions

log = logging.getLogger("kmirror.target_topics")

# MM2's DefaultConfigPropertyFilter `config.properties.exclude` defaults: broker-local or
# dangerous-to-copy settings that stay as the target cluster decides.
EXCLUDED_CONFIGS = frozenset(
    {
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas",
        "message.timestamp.difference.max.ms",
        "message.timestamp.type",
        "unclean.leader.election.enable",
        "min.insync.replicas",
    }
)


# ConfigSource.DYNAMIC_TOPIC_CONFIG: a value set on the topic itself (CreateTopics, AlterConfigs).
DYNAMIC_TOPIC_CONFIG = 1


def set_on_topic(entry: Any) -> bool:
    """Whether a DescribeConfigs entry was set on the topic itself, as MM2 copies: not a default,
    and not inherited from the broker's static file or its dynamic cluster/broker defaults
    (copying those would pin one cluster's broker settings onto every remote topic). Entries
    without a `source` (fakes) fall back to `not is_default`."""
    source = getattr(entry, "source", None)
    if source is None:
        return not entry.is_default
    return int(getattr(source, "value", source)) == DYNAMIC_TOPIC_CONFIG


def configs_to_copy(entries: Mapping[str, Any]) -> dict[str, str]:
    """Topic configs worth copying: set on the topic (`set_on_topic`), not read-only, not
    sensitive, not excluded. `entries` are confluent-kafka ConfigEntry objects by name."""
    out = {}
    for name, entry in entries.items():
        if name in EXCLUDED_CONFIGS or not set_on_topic(entry) or entry.is_read_only or entry.is_sensitive:
            continue
        if entry.value is not None:
            out[name] = str(entry.value)
    return out


def _result(future: Any, timeout_s: float) -> Any:
    """The admin future's result; no answer in time (a frozen broker) is a retriable ConnectionFailure."""
    try:
        return future.result(timeout=timeout_s)
    except FutureTimeout:
        raise ConnectionFailure(f"an admin request got no answer within {timeout_s:.0f} s") from None


class TargetTopics:
    """Creates and grows remote topics; remembers what it verified to avoid admin calls per batch."""

    def __init__(
        self,
        source_admin: Any,
        target_admin: Any,
        target: ClusterEndpoint,
        replication_factor: int | None = None,
        sync_configs: bool = True,
        timeout_s: float = 30.0,
        created: Any = None,
    ) -> None:
        self.source_admin, self.target_admin, self.target = source_admin, target_admin, target
        # `kmirror_engine.planning.created_topics.CreatedTopics` (None: creations are not recorded, so config
        # sync never alters them); pairs not recorded yet are retried at the next ensure()
        self.created = created
        self._unrecorded: list[tuple[str, str]] = []
        self.replication_factor = replication_factor if replication_factor is not None else -1  # -1: broker default
        self.sync_configs = sync_configs
        self.timeout_s = timeout_s
        self._verified: dict[str, int] = {}  # remote topic -> partitions known to exist

    def ensure(self, topics: Mapping[str, MirroredTopic]) -> None:
        """Make every remote topic of `topics` exist with enough partitions (see module doc)."""
        todo = [t for t in topics.values() if self._verified.get(t.target_topic, -1) < t.partitions]
        if not todo:
            self._record_created()
            return
        existing = list_topic_partitions(self.target_admin, self.target, self.timeout_s)
        missing = [t for t in todo if t.target_topic not in existing]
        if missing and self.created is not None:
            self.created.ensure_exists()  # before the topics it will record (CreatedTopics.ensure_exists)
        raced: set[str] = set()
        if missing and (raced := self._create(missing)):
            # Someone created them after our listing (or their metadata was hidden from it): their
            # partition count is whatever that creator chose, so it is checked like any other.
            existing = self._recount(raced, existing)
        short = [t for t in todo if t.target_topic in existing and existing[t.target_topic] < t.partitions]
        if short:
            self._grow(short, existing)
        # what this call created (not what someone else did meanwhile) or grew (raced ones included)
        made = {t.target_topic: t.partitions for t in missing if t.target_topic not in raced}
        made.update({t.target_topic: t.partitions for t in short})
        if made:
            await_leaders(self.target_admin, self.target, made, self.timeout_s)
        for topic in todo:
            self._verified[topic.target_topic] = max(topic.partitions, existing.get(topic.target_topic, 0))
        self._record_created()

    def _record_created(self) -> None:
        if self.created is not None and self._unrecorded:
            self.created.record(self._unrecorded)  # ConnectionFailure: kept, retried at the next ensure()
            self._unrecorded = []

    def _source_configs(self, names: list[str]) -> dict[str, dict[str, str]]:
        if not self.sync_configs:
            return {name: {} for name in names}
        resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
        futures = self.source_admin.describe_configs(resources)
        return {resource.name: configs_to_copy(_result(f, self.timeout_s)) for resource, f in futures.items()}

    def _recount(self, names: set[str], existing: Mapping[str, int]) -> dict[str, int]:
        """`existing` plus fresh partition counts of `names`; a name still missing from the
        metadata cannot be checked yet: a retriable ConnectionFailure (its leader may be moving)."""
        fresh = list_topic_partitions(self.target_admin, self.target, self.timeout_s)
        unseen = sorted(names - set(fresh))
        if unseen:
            raise ConnectionFailure(
                f"target topic(s) {', '.join(map(repr, unseen))} exist on {self.target.alias!r} "
                f"({self.target.bootstrap_servers}) but their metadata cannot be read, so their partition "
                "count cannot be checked; check the mirror's Describe ACL on them (retrying)"
            )
        return {**existing, **{name: fresh[name] for name in names}}

    def _create(self, topics: list[MirroredTopic]) -> set[str]:
        """Create `topics`; returns the names that turned out to exist already."""
        configs = self._source_configs([t.source_topic for t in topics])
        new = [
            NewTopic(t.target_topic, t.partitions, self.replication_factor, config=configs[t.source_topic])
            for t in topics
        ]
        by_name = {t.target_topic: t for t in topics}
        raced: set[str] = set()
        for name, future in self.target_admin.create_topics(new).items():
            topic = by_name[name]
            try:
                _result(future, self.timeout_s)
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    raced.add(name)  # created meanwhile (another flow, a restart, by hand): counted by ensure
                    continue
                raise KmirrorError(
                    f"cannot create target topic {name!r} on {self.target.alias!r} ({self.target.bootstrap_servers}) "
                    f"with {topic.partitions} partitions: {exc.args[0].str()}; "
                    "create it by hand or fix the target's ACLs"
                ) from None
            self._unrecorded.append((name, topic.source_topic))
            log.info(
                "created target topic %s (%d partitions, configs %s)",
                name,
                topic.partitions,
                sorted(configs[topic.source_topic]),
            )
        return raced

    def _grow(self, topics: list[MirroredTopic], existing: Mapping[str, int]) -> None:
        requests = [NewPartitions(t.target_topic, t.partitions) for t in topics]
        futures = self.target_admin.create_partitions(requests)
        by_name = {t.target_topic: t for t in topics}
        for name, future in futures.items():
            topic = by_name[name]
            try:
                _result(future, self.timeout_s)
            except KafkaException as exc:
                raise KmirrorError(
                    f"target topic {name!r} on {self.target.alias!r} has {existing[name]} partitions but source "
                    f"topic {topic.source_topic!r} has {topic.partitions} (records keep their source partition), "
                    f"and growing it failed: {exc.args[0].str()}; add the partitions on {self.target.alias!r} "
                    f"(kafka-topics.sh --alter --topic {name} --partitions {topic.partitions}), or delete the "
                    "empty target topic so the mirror creates it"
                ) from None
            log.info("grew target topic %s from %d to %d partitions", name, existing[name], topic.partitions)
