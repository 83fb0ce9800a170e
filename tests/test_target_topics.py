"""Target topics: created with the source's partitions and configs (minus MM2's excludes),
grown when the source grows. CreatePartitions is missing on tansu, so growth is tested with fakes."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from kmirror.errors import ConnectionFailure, KmirrorError
from kmirror.flow.spec import ClusterEndpoint
from kmirror_engine.planning.discovery import MirroredTopic
from kmirror_engine.planning.target_topics import TargetTopics, configs_to_copy
from tests.brokers import real_kafka, tansu_only
from tests.kafka_helpers import create_topic

EAST = ClusterEndpoint("east", "127.0.0.1:2")


def done(value: Any = None, error: KafkaError | None = None) -> Future[Any]:
    future: Future[Any] = Future()
    if error is not None:
        future.set_exception(KafkaException(error))
    else:
        future.set_result(value)
    return future


def entry(value: str, default: bool = False) -> Any:
    return SimpleNamespace(value=value, is_default=default, is_read_only=False, is_sensitive=False)


class FakeAdmin:
    def __init__(self, topics: dict[str, int], configs: dict[str, dict[str, Any]] | None = None) -> None:
        self.topics, self.configs = topics, configs or {}
        self.created: list[Any] = []
        self.grown: list[Any] = []
        self.grow_error: KafkaError | None = None

    def list_topics(self, timeout: float) -> Any:
        return SimpleNamespace(
            topics={
                n: SimpleNamespace(partitions={i: SimpleNamespace(leader=0, error=None) for i in range(c)}, error=None)
                for n, c in self.topics.items()
            }
        )

    def describe_configs(self, resources: list[Any]) -> dict[Any, Future[Any]]:
        return {r: done(self.configs.get(r.name, {})) for r in resources}

    def create_topics(self, new: list[Any]) -> dict[str, Future[Any]]:
        self.created += new
        for t in new:
            self.topics[t.topic] = t.num_partitions
        return {t.topic: done() for t in new}

    def create_partitions(self, new: list[Any]) -> dict[str, Future[Any]]:
        self.grown += new
        if self.grow_error is None:
            self.topics.update({p.topic: p.new_total_count for p in new})
        return {p.topic: done(error=self.grow_error) for p in new}


class SlowToHost(FakeAdmin):
    """A target whose new topics are listed leaderless for `polls` listings after creation (a
    loaded KRaft broker that committed the topic but does not serve it yet)."""

    def __init__(self, polls: int) -> None:
        super().__init__({})
        self.polls, self.listings = polls, 0

    def list_topics(self, timeout: float) -> Any:
        listing = super().list_topics(timeout)
        self.listings += 1
        if self.created and self.polls > 0:
            self.polls -= 1
            for t in self.created:
                listing.topics[t.topic].partitions[0].leader = -1
        return listing


def test_configs_to_copy_keeps_explicit_ones_minus_mm2_excludes() -> None:
    described = {
        "retention.ms": entry("1000"),
        "cleanup.policy": entry("delete", default=True),
        "min.insync.replicas": entry("2"),
        "message.timestamp.type": entry("LogAppendTime"),
        "max.message.bytes": entry("2000000"),
    }
    assert configs_to_copy(described) == {"retention.ms": "1000", "max.message.bytes": "2000000"}


def test_missing_topic_created_with_partitions_configs_and_replication_factor() -> None:
    source = FakeAdmin({"orders": 3}, {"orders": {"retention.ms": entry("1000"), "min.insync.replicas": entry("2")}})
    target = FakeAdmin({})
    TargetTopics(source, target, EAST, replication_factor=3).ensure(
        {"orders": MirroredTopic("orders", 3, "west.orders")}
    )
    [new] = target.created
    assert (new.topic, new.num_partitions, new.replication_factor, new.config) == (
        "west.orders",
        3,
        3,
        {"retention.ms": "1000"},
    )


def test_a_created_topic_is_waited_for_until_every_partition_has_a_leader() -> None:
    """CI saw a producer fail every record with UNKNOWN_TOPIC_OR_PART 30 s after the topic's
    creation on a loaded broker: ensure() returns only once the target serves the new topic."""
    target = SlowToHost(polls=3)
    TargetTopics(FakeAdmin({"orders": 2}), target, EAST, sync_configs=False).ensure(
        {"orders": MirroredTopic("orders", 2, "west.orders")}
    )
    assert target.polls == 0  # the three leaderless listings were all waited through
    assert target.listings == 1 + 3 + 1  # the first listing, three leaderless ones, the served one


def test_a_topic_still_leaderless_at_the_deadline_is_logged_and_the_copy_goes_on(caplog) -> None:
    target = SlowToHost(polls=10_000)
    with caplog.at_level("WARNING", logger="kmirror.target_topics"):
        TargetTopics(FakeAdmin({"orders": 2}), target, EAST, sync_configs=False, timeout_s=0.3).ensure(
            {"orders": MirroredTopic("orders", 2, "west.orders")}
        )
    assert "west.orders[0]" in caplog.text and "without a leader on east" in caplog.text


class OrderedRegistry:
    """A created-topics registry that notes when it is made to exist and what it records."""

    def __init__(self, target: FakeAdmin, events: list[str]) -> None:
        self.target, self.events = target, events

    def ensure_exists(self) -> None:
        self.events.append(f"registry exists ({len(self.target.created)} topics created before)")

    def record(self, pairs: list[tuple[str, str]]) -> None:
        self.events.append(f"recorded {sorted(pairs)}")


def test_the_registry_exists_before_the_topics_it_records_are_created() -> None:
    """A broker applies topic creations in order: a registry created after thousands of new topics
    is writable only once their partitions exist (docs/performance.md, the 2,000-topic start-up)."""
    events: list[str] = []
    target = FakeAdmin({"west.known": 1})
    source = FakeAdmin({"a": 1, "b": 2, "known": 1})
    topics = TargetTopics(source, target, EAST, created=OrderedRegistry(target, events))
    topics.ensure({"a": MirroredTopic("a", 1, "west.a"), "known": MirroredTopic("known", 1, "west.known")})
    topics.ensure({"b": MirroredTopic("b", 2, "west.b")})
    topics.ensure({"b": MirroredTopic("b", 2, "west.b")})  # nothing missing: no registry call
    assert events == [
        "registry exists (0 topics created before)",
        "recorded [('west.a', 'a')]",
        "registry exists (1 topics created before)",
        "recorded [('west.b', 'b')]",
    ]


def test_verified_topics_are_not_checked_again_and_growth_creates_partitions() -> None:
    source, target = FakeAdmin({"orders": 2}), FakeAdmin({})
    topics = TargetTopics(source, target, EAST, sync_configs=False)
    topics.ensure({"orders": MirroredTopic("orders", 2, "west.orders")})
    target.list_topics = None  # type: ignore[assignment,method-assign]  # a second listing would fail
    topics.ensure({"orders": MirroredTopic("orders", 2, "west.orders")})
    del target.list_topics
    topics.ensure({"orders": MirroredTopic("orders", 5, "west.orders")})
    assert [(p.topic, p.new_total_count) for p in target.grown] == [("west.orders", 5)]
    assert target.created[0].config == {} and target.created[0].replication_factor == -1


def test_failed_growth_names_topic_counts_and_fix() -> None:
    source, target = FakeAdmin({"orders": 4}), FakeAdmin({"west.orders": 2})
    target.grow_error = KafkaError(KafkaError.INVALID_REQUEST, "not supported by broker")
    with pytest.raises(KmirrorError) as caught:
        TargetTopics(source, target, EAST).ensure({"orders": MirroredTopic("orders", 4, "west.orders")})
    assert str(caught.value) == (
        "target topic 'west.orders' on 'east' has 2 partitions but source topic 'orders' has 4 (records keep "
        "their source partition), and growing it failed: not supported by broker; add the partitions on 'east' "
        "(kafka-topics.sh --alter --topic west.orders --partitions 4), or delete the empty target topic so the "
        "mirror creates it"
    )
    assert [(p.topic, p.new_total_count) for p in target.grown] == [("west.orders", 4)]


class RacingAdmin(FakeAdmin):
    """A target where someone else creates the topic (with `their_partitions`) between our
    listing and our CreateTopics, which then answers TOPIC_ALREADY_EXISTS."""

    def __init__(self, their_partitions: int | None) -> None:
        super().__init__({})
        self.their_partitions = their_partitions

    def create_topics(self, new: list[Any]) -> dict[str, Future[Any]]:
        for t in new:
            if self.their_partitions is not None:
                self.topics[t.topic] = self.their_partitions
        error = KafkaError(KafkaError.TOPIC_ALREADY_EXISTS, "Topic already exists")
        return {t.topic: done(error=error) for t in new}


def test_a_topic_created_meanwhile_with_fewer_partitions_is_grown_not_trusted() -> None:
    """Before: TOPIC_ALREADY_EXISTS was taken as success and the topic recorded as having the
    source's 4 partitions, so the 1-partition topic was never grown (and never checked again)."""
    source, target = FakeAdmin({"orders": 4}), RacingAdmin(their_partitions=1)
    TargetTopics(source, target, EAST, sync_configs=False).ensure({"orders": MirroredTopic("orders", 4, "west.orders")})
    assert [(p.topic, p.new_total_count) for p in target.grown] == [("west.orders", 4)]
    refusing = RacingAdmin(their_partitions=1)
    refusing.grow_error = KafkaError(KafkaError.INVALID_REQUEST, "not supported by broker")
    with pytest.raises(KmirrorError, match=r"^target topic 'west.orders' on 'east' has 1 partitions but source "):
        TargetTopics(source, refusing, EAST, sync_configs=False).ensure(
            {"orders": MirroredTopic("orders", 4, "west.orders")}
        )


def test_a_topic_that_exists_but_cannot_be_described_is_not_trusted() -> None:
    source, target = FakeAdmin({"orders": 2}), RacingAdmin(their_partitions=None)
    with pytest.raises(ConnectionFailure) as caught:
        TargetTopics(source, target, EAST, sync_configs=False).ensure(
            {"orders": MirroredTopic("orders", 2, "west.orders")}
        )
    assert str(caught.value) == (
        "target topic(s) 'west.orders' exist on 'east' (127.0.0.1:2) but their metadata cannot be read, so their "
        "partition count cannot be checked; check the mirror's Describe ACL on them (retrying)"
    )


def test_real_broker_creates_topic_with_source_partitions(clusters: Any, unique: str) -> None:
    """Partitions on a real broker. Configs are covered by the fakes above: tansu 0.6 reports the
    configs set on a topic with is_default=True / source DEFAULT_CONFIG (measured), which Kafka's
    semantics (and MM2's) read as "not set", so nothing is copied from a tansu source."""
    name = f"tt-{unique}"
    create_topic(clusters.source, name, 3, {"retention.ms": "86400000"})
    source = AdminClient({"bootstrap.servers": clusters.source})
    target = AdminClient({"bootstrap.servers": clusters.target})
    topics = TargetTopics(source, target, ClusterEndpoint("east", clusters.target))
    topics.ensure({name: MirroredTopic(name, 3, f"west.{name}")})
    assert len(target.list_topics(timeout=10).topics[f"west.{name}"].partitions) == 3
    # a topic that exists already (another flow, a restart) is accepted as is
    TargetTopics(source, target, ClusterEndpoint("east", clusters.target)).ensure(
        {name: MirroredTopic(name, 3, f"west.{name}")}
    )


@real_kafka
def test_real_broker_grows_a_pre_existing_target_topic_with_fewer_partitions(clusters: Any, unique: str) -> None:
    """Apache Kafka: CreatePartitions grows the remote topic to the source's count."""
    name = f"tt-grow-{unique}"
    create_topic(clusters.source, name, 3)
    create_topic(clusters.target, f"west.{name}", 1)
    source = AdminClient({"bootstrap.servers": clusters.source})
    target = AdminClient({"bootstrap.servers": clusters.target})
    TargetTopics(source, target, ClusterEndpoint("east", clusters.target)).ensure(
        {name: MirroredTopic(name, 3, f"west.{name}")}
    )
    assert len(target.list_topics(timeout=10).topics[f"west.{name}"].partitions) == 3


@tansu_only  # Apache Kafka grows the topic (the test above)
def test_a_broker_without_create_partitions_refuses_a_shorter_target_topic(clusters: Any, unique: str) -> None:
    """tansu has no CreatePartitions, so growth fails there as on a Kafka that forbids it (ACLs):
    the error names the topic, both counts and the fix, and nothing is recorded as verified."""
    name = f"tt-short-{unique}"
    create_topic(clusters.source, name, 3)
    create_topic(clusters.target, f"west.{name}", 1)
    source = AdminClient({"bootstrap.servers": clusters.source})
    target = AdminClient({"bootstrap.servers": clusters.target})
    topics = TargetTopics(source, target, ClusterEndpoint("east", clusters.target))
    with pytest.raises(KmirrorError) as caught:
        topics.ensure({name: MirroredTopic(name, 3, f"west.{name}")})
    message = str(caught.value)
    assert message.startswith(
        f"target topic 'west.{name}' on 'east' has 1 partitions but source topic '{name}' has 3 (records keep "
        "their source partition), and growing it failed: "
    )
    assert message.endswith(
        f"; add the partitions on 'east' (kafka-topics.sh --alter --topic west.{name} --partitions 3), "
        "or delete the empty target topic so the mirror creates it"
    )
    assert topics._verified == {}
    assert len(target.list_topics(timeout=10).topics[f"west.{name}"].partitions) == 1


def test_the_registry_is_checked_once_and_again_after_a_failed_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its existence is checked once, not per record call; a failed record checks (and makes) it
    again before the retry, so a registry deleted while the mirror runs is made again."""
    from kmirror_engine.planning import created_topics

    checks: list[str] = []
    outcomes = [ConnectionFailure("recording failed: Unknown topic"), None, None]

    class Producer:
        def produce(self, *args: Any) -> None:
            pass

        def confirm(self, timeout_s: float) -> None:
            if (failure := outcomes.pop(0)) is not None:
                raise failure

    def ensure_topic(_endpoint: Any, topic: str, _config: Any) -> None:
        checks.append(topic)

    monkeypatch.setattr("kmirror_engine.clients.topic_admin.ensure_topic", ensure_topic)
    monkeypatch.setattr("kmirror_engine.clients.factory.renewing_delivery_producer", lambda *a, **k: Producer())
    registry = created_topics.CreatedTopics(EAST, "west", "west->east")
    registry.ensure_exists()
    with pytest.raises(ConnectionFailure):
        registry.record([("west.a", "a")])
    registry.record([("west.a", "a")])
    registry.record([("west.b", "b")])
    assert checks == ["kmirror-created-topics.west.internal"] * 2
