"""One client factory: every Kafka client is made by `kmirror_engine.clients.factory` (checked
statically over every module, with a proof the check can fail), each role's config gets its
secrets resolved and producers stay safe whatever they are given, and the one
"produce, flush, raise on delivery error" step (`DeliveryConfirmingProducer`) names the topic."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from kmirror.errors import KmirrorError, ValidationError
from kmirror.flow.spec import ClusterEndpoint
from kmirror_engine.clients import factory
from kmirror_engine.clients.delivery import DeliveryConfirmingProducer, DeliveryError
from tests.kafka_fakes import Err, Msg

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kmirror", "kmirror_engine", "kmirror_cli", "spark_app")
CLIENT_CLASSES = frozenset({"Consumer", "Producer", "AdminClient"})
# The only module that constructs Kafka clients.
# client_properties: validation asks librdkafka about one property with a client that has no
# brokers (never connects), optionally, where confluent-kafka is importable (issue 25).
FACTORY_MODULES = frozenset({"kmirror_engine/clients/factory.py", "kmirror/security/client_properties.py"})


def direct_constructions(source: str) -> list[str]:
    """`line: what` for every Kafka client made or reached for directly in `source`: a call of
    `Consumer`/`Producer`/`AdminClient` (bare, aliased, or as an attribute: `confluent_kafka.Producer(`),
    or an import of one of them from confluent_kafka (a class handed on is a constructor too)."""
    found: list[str] = []
    aliases = set(CLIENT_CLASSES)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "confluent_kafka":
            for name in node.names:
                if name.name in CLIENT_CLASSES:
                    aliases.add(name.asname or name.name)
                    found.append(f"{node.lineno}: from {node.module} import {name.name}")
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in aliases:
            found.append(f"{node.lineno}: {func.id}(...)")
        elif isinstance(func, ast.Attribute) and func.attr in CLIENT_CLASSES:
            found.append(f"{node.lineno}: {ast.unparse(func)}(...)")
    return sorted(set(found), key=lambda s: int(s.split(":")[0]))


def modules() -> Iterator[Path]:
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


def test_the_check_finds_every_way_of_making_a_client_directly() -> None:
    """The proof that the static test can fail: each spelling below is caught."""
    source = """
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka import Producer as P
from confluent_kafka.admin import AdminClient, NewTopic
import confluent_kafka
import confluent_kafka.admin as ka

a = Consumer({})
b = P({})
c = confluent_kafka.Producer({})
d = ka.AdminClient({})
e = TopicPartition("t", 0)
f = NewTopic("t", 1)
"""
    assert direct_constructions(source) == [
        "2: from confluent_kafka import Consumer",
        "3: from confluent_kafka import Producer",
        "4: from confluent_kafka.admin import AdminClient",
        "8: Consumer(...)",
        "9: P(...)",
        "10: confluent_kafka.Producer(...)",
        "11: ka.AdminClient(...)",
    ]
    assert direct_constructions("from confluent_kafka import KafkaError\nx = make_consumer({})\n") == []


def test_every_kafka_client_is_made_by_the_factory() -> None:
    found = {
        str(path.relative_to(ROOT)): hits
        for path in modules()
        if str(path.relative_to(ROOT)) not in FACTORY_MODULES
        and (hits := direct_constructions(path.read_text(encoding="utf-8")))
    }
    assert not found, (
        "Kafka clients made outside kmirror_engine.clients.factory (use new_consumer / new_producer / "
        f"new_admin / new_delivery_producer / admin_client): {found}"
    )


def test_the_check_covers_the_packages_and_the_factory_module_exists() -> None:
    names = {str(p.relative_to(ROOT)) for p in modules()}
    assert names >= FACTORY_MODULES
    assert {"spark_app/sink.py", "kmirror_cli/commands/lag.py", "kmirror_engine/failover/offset_sync_topic.py"} <= names


class Recorder:
    """Stands in for a confluent_kafka class at the factory's seam: keeps the config it got."""

    made: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        Recorder.made.append((type(self).__name__, config))

    def list_topics(self, *args: Any, **kwargs: Any) -> str:
        return "listed"


class FakeConsumer(Recorder):
    pass


class FakeProducer(Recorder):
    pass


class FakeAdmin(Recorder):
    pass


@pytest.fixture
def seam(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    Recorder.made = []
    monkeypatch.setattr(factory, "Consumer", FakeConsumer)
    monkeypatch.setattr(factory, "Producer", FakeProducer)
    monkeypatch.setattr(factory, "AdminClient", FakeAdmin)
    monkeypatch.setenv("KMIRROR_TEST_PASSWORD", "s3cret")
    return Recorder.made


def endpoint(**config: Any) -> ClusterEndpoint:
    return ClusterEndpoint(
        "east",
        "t:1",
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "mirror",
            "sasl.password": "${env:KMIRROR_TEST_PASSWORD}",
            **config,
        },
    )


def test_every_role_gets_its_secrets_resolved(seam: list[tuple[str, dict[str, Any]]]) -> None:
    factory.new_consumer(endpoint(), role="reader", group_id="g", **{"enable.auto.commit": False})
    factory.new_producer(endpoint(), role="writer")
    factory.new_admin(endpoint(), role="admin")
    factory.new_delivery_producer(endpoint(), role="syncs", what="offset sync", error=KmirrorError)
    assert factory.admin_client(endpoint()).list_topics(timeout=1) == "listed"  # the refreshing admin too
    assert [kind for kind, _ in seam] == ["FakeConsumer", "FakeProducer", "FakeAdmin", "FakeProducer", "FakeAdmin"]
    for _kind, config in seam:
        assert config["sasl.password"] == "s3cret" and config["bootstrap.servers"] == "t:1"
    consumer = seam[0][1]
    assert consumer["group.id"] == "g" and consumer["enable.auto.commit"] is False


def test_a_missing_secret_is_an_error_naming_the_property(seam: list[tuple[str, dict[str, Any]]]) -> None:
    with pytest.raises(KmirrorError, match=r"sasl\.password"):
        factory.new_consumer(endpoint(**{"sasl.password": "${env:KMIRROR_TEST_MISSING}"}), role="reader")
    assert seam == []


@pytest.mark.parametrize("source", [endpoint(acks="1", **{"enable.idempotence": False}), {"acks": 0}])
def test_producers_are_safe_whatever_their_config_says(
    seam: list[tuple[str, dict[str, Any]]], source: ClusterEndpoint | dict[str, Any]
) -> None:
    factory.new_producer(source, role="writer", **{"linger.ms": 7})
    [(_, config)] = seam
    assert (config["acks"], config["enable.idempotence"], config["max.in.flight.requests.per.connection"]) == (
        "all",
        True,
        5,
    )
    assert config["retries"] == factory.PRODUCER_SAFETY["retries"] and config["linger.ms"] == 7


@pytest.mark.parametrize(
    ("key", "value"),
    [("acks", "1"), ("enable.idempotence", False), ("max.in.flight.requests.per.connection", 10), ("retries", 3)],
)
def test_unsafe_producer_overrides_are_refused_naming_the_key_and_role(
    seam: list[tuple[str, dict[str, Any]]], key: str, value: Any
) -> None:
    with pytest.raises(ValidationError, match=rf"producer\.{key}: must") as caught:
        factory.new_producer(endpoint(), role="offset-syncs-producer", **{key: value})
    assert "offset-syncs-producer" in str(caught.value)
    with pytest.raises(ValidationError, match=rf"producer\.{key}: must"):
        factory.new_delivery_producer(
            {"bootstrap.servers": "t:1"}, role="x", what="y", error=KmirrorError, **{key: value}
        )
    assert seam == []


def test_safe_settings_already_made_by_producer_config_are_kept(seam: list[tuple[str, dict[str, Any]]]) -> None:
    """A config from `producer_config` (a flow's allowed overrides included) goes through as it is."""
    made = {
        "bootstrap.servers": "t:1",
        "acks": -1,
        "enable.idempotence": "true",
        "transactional.id": "t-1",
        "max.in.flight.requests.per.connection": 1,
        "retries": 2_147_483_647,
    }
    factory.new_producer(made, role="transactional-producer")
    assert seam == [("FakeProducer", made)]


class ScriptedProducer:
    """A producer whose deliveries follow a script: a reason fails a record, None delivers it,
    and `unconfirmed` records stay queued at flush."""

    def __init__(self, outcomes: list[str | None], unconfirmed: int = 0) -> None:
        self.outcomes, self.unconfirmed = list(outcomes), unconfirmed
        self.pending: list[tuple[str, Any]] = []
        self.next_offset = 40

    def produce(self, topic: str, value: Any = None, key: Any = None, on_delivery: Any = None, **_: Any) -> None:
        self.pending.append((topic, on_delivery))

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        for topic, callback in self.pending:
            reason = self.outcomes.pop(0) if self.outcomes else None
            self.next_offset += 1
            callback(Err(reason) if reason else None, Msg(topic, self.next_offset))
        self.pending = []
        return self.unconfirmed


class SyncsError(KmirrorError):
    pass


def test_a_delivery_error_raises_the_named_error_naming_the_topic() -> None:
    delivered: list[int] = []
    producer = DeliveryConfirmingProducer(
        ScriptedProducer([None, "Broker: Topic authorization failed"]),
        what="offset sync",
        error=SyncsError,
        on_delivered=lambda msg: delivered.append(msg.offset()),
    )
    producer.produce("mm2-offset-syncs.west.internal", b"v", b"k", partition=0)
    producer.produce("mm2-offset-syncs.west.internal", b"v", b"k", partition=0)
    with pytest.raises(SyncsError) as caught:
        producer.confirm(5.0)
    assert str(caught.value) == (
        "1 offset sync(s) failed, 0 unconfirmed; first: "
        "['offset sync to mm2-offset-syncs.west.internal failed: Broker: Topic authorization failed']"
    )
    assert delivered == [41]
    producer.produce("mm2-offset-syncs.west.internal", b"v", b"k")
    producer.confirm(5.0)  # failures are reported once; the next confirm starts clean
    assert delivered == [41, 43]


def test_a_flush_timeout_raises_and_check_reports_failures_without_waiting() -> None:
    producer = DeliveryConfirmingProducer(ScriptedProducer([], unconfirmed=2), what="checkpoint")
    producer.produce("west.checkpoints.internal", b"v", b"k")
    with pytest.raises(DeliveryError, match=r"^0 checkpoint\(s\) failed, 2 unconfirmed; first: \[\]$"):
        producer.confirm(0.1)
    inner = ScriptedProducer(["Local: Message timed out"])
    beats = DeliveryConfirmingProducer(inner, what="heartbeat")
    beats.produce("heartbeats", b"v", b"k")
    beats.check()  # nothing reported yet
    inner.flush()
    with pytest.raises(DeliveryError, match="heartbeat to heartbeats failed: Local: Message timed out"):
        beats.check()


def test_engine_writers_keep_their_messages_through_the_factory(
    monkeypatch: pytest.MonkeyPatch, seam: list[tuple[str, dict[str, Any]]]
) -> None:
    """Offset syncs and the created-topics registry get their producers from the factory's seam
    (secrets resolved, safe) and report failures as before."""
    from kmirror_engine.failover.offset_sync_topic import OffsetSyncTopic
    from kmirror_engine.failover.offset_syncs import OffsetSyncError, Sync
    from kmirror_engine.planning import created_topics

    scripted = ScriptedProducer(["Broker: Not enough replicas"])

    def make(config: dict[str, Any]) -> ScriptedProducer:
        seam.append(("FakeProducer", config))
        return scripted

    monkeypatch.setattr(factory, "Producer", make)
    syncs = OffsetSyncTopic(endpoint(), "mm2-offset-syncs.west.internal")
    syncs.write("orders", 0, [Sync(5, 7)], 6)
    with pytest.raises(
        OffsetSyncError,
        match=r"1 offset sync\(s\) failed, 0 unconfirmed; first: \['offset sync to "
        r"mm2-offset-syncs.west.internal failed: Broker: Not enough replicas'\]",
    ):
        syncs.flush()
    [(_, config)] = seam
    assert config["sasl.password"] == "s3cret" and config["acks"] == "all" and config["enable.idempotence"] is True

    monkeypatch.setattr("kmirror_engine.clients.topic_admin.ensure_topic", lambda *args: None)
    registry = created_topics.CreatedTopics(endpoint(), "west", "west->east")
    scripted.outcomes = ["Broker: Topic authorization failed"]
    with pytest.raises(
        KmirrorError,
        match=r"^recording created topics in kmirror-created-topics.west.internal on "
        r"'east' failed: Broker: Topic authorization failed$",
    ):
        registry.record([("west.orders", "orders")])
    # issue 41: the registry's producer lives as long as the planner: it is a renewing one (rebuilt
    # when the target's credentials rotate), or the first new topic after a rotation stops planning
    from kmirror_engine.clients.cache import RenewingProducer

    assert isinstance(registry._producer.producer, RenewingProducer)


def test_librdkafka_lines_go_through_logging_not_straight_to_the_terminal(caplog: Any, capfd: Any) -> None:
    """Issue 41: a client of a stopped broker printed `%3|...|FAIL|...` lines to stderr in
    `make test` and every CLI run; they are records of the `kmirror.librdkafka` logger now."""
    import logging
    import time

    from kmirror_engine.clients.factory import new_producer

    caplog.set_level(logging.DEBUG, logger="kmirror.librdkafka")
    producer = new_producer({"bootstrap.servers": "127.0.0.1:1"}, role="probe")
    deadline = time.monotonic() + 10

    def failed() -> bool:
        return any(r.name == "kmirror.librdkafka" and r.levelno >= logging.ERROR for r in caplog.records)

    while time.monotonic() < deadline and not failed():
        producer.poll(0.2)
    producer.flush(0)
    del producer
    assert failed()
    assert "%3|" not in capfd.readouterr().err
