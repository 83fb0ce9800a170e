"""Security against Apache Kafka itself (issue 22): the broker's own TLS, mutual-TLS and
SASL_SSL/SCRAM-SHA-512 listeners with the StandardAuthorizer on, and the mirror principal
holding only the ACLs `kmirror_engine.planning.internal_topics.mirror_acls` lists for its flow.

- sufficient: with exactly those ACLs the engine copies, creates the remote topic and writes its
  offset syncs through each mechanism;
- minimal: without the ACL of an internal topic, the start-up access check names the topic, the
  missing operations and the `kafka-acls.sh` command that grants them, before anything is copied.

The harness's own PLAINTEXT listener is the only super user; the mirror never uses it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from kmirror.flow.replication_policy import HEARTBEATS_TOPIC, checkpoints_topic
from kmirror.flow.spec import FlowSpec, parse_flow_spec
from kmirror.security.config import client_config
from kmirror.security.security_checks import security_problems
from kmirror_cli.local_kafka import KafkaBroker, Listener
from kmirror_engine.clients.factory import admin_client
from kmirror_engine.clients.security_check import check_connection
from kmirror_engine.copying.ranges import CopyRange
from kmirror_engine.copying.task_copy import copy_task_ranges
from kmirror_engine.planning.discovery import MirroredTopic
from kmirror_engine.planning.internal_names import control_topic
from kmirror_engine.planning.internal_topics import InternalTopicAccess, mirror_acls, needed_access
from kmirror_engine.planning.target_topics import TargetTopics
from tests.brokers import IS_TANSU, KAFKA_LINE
from tests.kafka_helpers import create_topic, keyed_topic, produce
from tests.security.tls_support import Issued, TestCa, broker_tls

pytestmark = [pytest.mark.security, pytest.mark.real_kafka, pytest.mark.e2e]
SCRAM_PASSWORD = "scram-pass-4Rt8-never-printed"
TLS_SUBJECT = "CN=mirror-tls"


@dataclass
class SecureCluster:
    broker: KafkaBroker
    ca: TestCa

    @property
    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.broker.bootstrap_servers})


def _listeners(ca: TestCa, server: Issued, directory: Path) -> tuple[Listener, Listener, Listener]:
    tls = broker_tls(ca, server, directory / f"{server.cert.stem}-keystore.pem")
    mtls = Listener("MTLS", "SSL", settings={**tls, "ssl.client.auth": "required"})
    scram = Listener(
        "SCRAM",
        "SASL_SSL",
        settings={
            **tls,
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "scram-sha-512.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        },
    )
    # SCRAM without TLS (SASL_PLAINTEXT): SCRAM never sends the password; the batch path's own
    # connections must do the SASL exchange without a TLS layer under it
    plain = Listener(
        "SCRAMPLAIN",
        "SASL_PLAINTEXT",
        settings={
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "scram-sha-512.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        },
    )
    return mtls, scram, plain


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SecureCluster, SecureCluster, Path]]:
    """Two single-node clusters with MTLS (SSL, client certificate required), SCRAM (SASL_SSL,
    SCRAM-SHA-512, user `mirror`) and SCRAMPLAIN (the same over SASL_PLAINTEXT) listeners; the
    authorizer is on."""
    if IS_TANSU:
        pytest.skip("tansu has no TLS, SASL or authorizer")  # deselected there anyway (real_kafka)
    directory = tmp_path_factory.mktemp("real-broker-security")
    ca = TestCa(directory)
    server = ca.issue("broker", server=True)
    client = ca.issue("mirror-tls", server=False)
    clusters = []
    for name in ("sec-west", "sec-east"):
        broker = KafkaBroker(
            name,
            line=KAFKA_LINE,
            extra_listeners=_listeners(ca, server, directory),
            scram_users={"mirror": SCRAM_PASSWORD},
        )
        clusters.append(SecureCluster(broker.start(), ca))
    (directory / "scram-password").write_text(SCRAM_PASSWORD)
    (directory / "client.crt").write_bytes(client.cert.read_bytes())
    (directory / "client.key").write_bytes(client.key.read_bytes())
    try:
        yield clusters[0], clusters[1], directory
    finally:
        for cluster in clusters:
            cluster.broker.remove()


def mechanism_security(mechanism: str, directory: Path, ca: TestCa) -> dict[str, Any]:
    tls: dict[str, Any] = {"ca": {"file": str(ca.cert_path)}}
    if mechanism == "mtls":
        tls.update({"cert": {"file": str(directory / "client.crt")}, "key": {"file": str(directory / "client.key")}})
        security: dict[str, Any] = {"protocol": "SSL", "tls": tls}
    else:  # "scram" (SASL_SSL) or "scram-plaintext" (SASL_PLAINTEXT)
        password = {"file": str(directory / "scram-password")}
        security = {
            "protocol": "SASL_SSL",
            "tls": tls,
            "scram": {"mechanism": "SCRAM-SHA-512", "username": "mirror", "password": password},
        }
        if mechanism == "scram-plaintext":
            security = {"protocol": "SASL_PLAINTEXT", "scram": security["scram"]}
    assert security_problems(security, "clusters.test.security") == []
    return security


def flow(
    west: SecureCluster, east: SecureCluster, directory: Path, mechanism: str, topic: str, side_topics: bool = False
) -> FlowSpec:
    listener = {"mtls": "MTLS", "scram": "SCRAM", "scram-plaintext": "SCRAMPLAIN"}[mechanism]
    security = mechanism_security(mechanism, directory, west.ca)
    return parse_flow_spec(
        {
            "id": f"west-{mechanism}->east",
            "checkpoint_location": str(directory / f"cp-{mechanism}"),
            "source": {
                "alias": "west",
                "bootstrap_servers": west.broker.listener_address(listener),
                "config": client_config(security),
            },
            "target": {
                "alias": "east",
                "bootstrap_servers": east.broker.listener_address(listener),
                "config": client_config(security),
            },
            "topics": [topic],
            "topics_exclude": [],
            "replication_policy": {"type": "default"},
            "emit_checkpoints": side_topics,
            "emit_heartbeats": side_topics,
        }
    )


def principal(mechanism: str) -> str:
    return f"User:{TLS_SUBJECT}" if mechanism == "mtls" else "User:mirror"


def grant(
    spec: FlowSpec,
    west: SecureCluster,
    east: SecureCluster,
    who: str,
    source_topics: list[str],
    leave_out: str | None = None,
) -> list[Any]:
    """Create exactly the ACLs `mirror_acls` lists (but the grants on `leave_out`); returns them."""
    granted = []
    for acl in mirror_acls(spec, source_topics):
        if acl.name == leave_out:
            continue
        admin = west.admin if acl.side == "source" else east.admin  # kept alive until the answers came
        bindings = [
            AclBinding(
                ResourceType[acl.resource_type],
                acl.name,
                ResourcePatternType[acl.pattern],
                who,
                "*",
                AclOperation[_enum_name(op)],
                AclPermissionType.ALLOW,
            )
            for op in acl.operations
        ]
        for future in admin.create_acls(bindings).values():
            future.result(timeout=30)
        granted.append(acl)
    return granted


def _enum_name(operation: str) -> str:
    """Kafka's ACL operation name as confluent-kafka's enum spells it: DescribeConfigs -> DESCRIBE_CONFIGS."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation).upper()


def revoke_all(cluster: SecureCluster, who: str) -> None:
    any_acl = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        who,
        None,  # type: ignore[arg-type]
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    admin = cluster.admin  # kept alive until the answer came
    admin.delete_acls([any_acl])[any_acl].result(timeout=30)


@pytest.mark.parametrize("mechanism", ["mtls", "scram"])
def test_the_listed_acls_are_enough_to_mirror_through_the_brokers_own_listeners(
    secure: tuple[SecureCluster, SecureCluster, Path], mechanism: str, unique: str
) -> None:
    west, east, directory = secure
    topic = f"sec-{mechanism}-{unique}"
    keyed_topic(west.broker.bootstrap_servers, topic, 200)
    spec = flow(west, east, directory, mechanism, topic)
    who = principal(mechanism)
    try:
        # before any grant the brokers authenticate the mirror but authorize nothing
        check_connection(spec.source, timeout_s=20)
        with pytest.raises(Exception, match=r"(?i)authoriz"):
            copy_task_ranges(spec, [CopyRange(topic, 0, 0, 100, f"west.{topic}")], 0)
        grant(spec, west, east, who, [topic])
        assert InternalTopicAccess.for_flow(spec).check(AdminClient(_admin_config(spec))) == []
        # as the driver does: the remote topic created with the source's partitions and configs
        TargetTopics(admin_client(spec.source), admin_client(spec.target), spec.target).ensure(
            {topic: MirroredTopic(topic, 2, f"west.{topic}")}
        )
        progress = copy_task_ranges(spec, [CopyRange(topic, p, 0, 100, f"west.{topic}") for p in (0, 1)], 0)
        assert sorted(p.records for p in progress) == [100, 100]
        assert _count(east.broker.bootstrap_servers, f"west.{topic}", 2) == 200
    finally:
        revoke_all(west, who)
        revoke_all(east, who)


def _admin_config(spec: FlowSpec) -> dict[str, Any]:
    from kmirror.security.config import resolve_references

    return {"bootstrap.servers": spec.target.bootstrap_servers, **resolve_references(dict(spec.target.config))}


def _count(bootstrap: str, topic: str, partitions: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "sec-reader"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions))
    finally:
        consumer.close()


def test_without_any_one_internal_topic_acl_the_start_up_check_names_it_and_the_grant(
    secure: tuple[SecureCluster, SecureCluster, Path], unique: str
) -> None:
    """Minimal: leave out the grant of one internal topic at a time (offset syncs, their
    snapshots, the created-topics registry): the check names it with every operation it needs
    (Kafka hides whether it exists) and the command that grants them."""
    west, east, directory = secure
    topic = f"sec-min-{unique}"
    create_topic(west.broker.bootstrap_servers, topic, 1)
    spec = flow(west, east, directory, "scram", topic)
    internal = internal_topics(spec, topic)
    assert len(internal) == 3, internal
    for left_out in internal:
        assert_check_names_the_missing_grant(spec, west, east, topic, left_out)


@pytest.mark.parametrize("side_topic", ["heartbeats", "checkpoints"])
def test_without_a_side_topic_acl_the_start_up_check_names_it_and_the_grant(
    secure: tuple[SecureCluster, SecureCluster, Path], unique: str, side_topic: str
) -> None:
    """Minimal, with checkpoints and heartbeats on: leave out the grant of one of them. The
    checkpoints topic `west.checkpoints.internal` also matches the remote-topic prefix grant
    `west.` (Create, Write, Describe): without its own grant it does not exist yet and may be
    created, but not read, and the check asks the broker for Read and names just that."""
    west, east, directory = secure
    topic = f"sec-side-{side_topic}-{unique}"
    create_topic(west.broker.bootstrap_servers, topic, 1)
    spec = flow(west, east, directory, "scram", topic, side_topics=True)
    internal = internal_topics(spec, topic)
    assert len(internal) == 5, internal  # offset syncs, snapshots, registry, checkpoints, heartbeats
    left_out = HEARTBEATS_TOPIC if side_topic == "heartbeats" else checkpoints_topic("west")
    assert left_out in internal
    missing = ("Read",) if side_topic == "checkpoints" else None
    assert_check_names_the_missing_grant(spec, west, east, topic, left_out, missing)


def internal_topics(spec: FlowSpec, topic: str) -> list[str]:
    """The internal topics `mirror_acls` grants one by one (literally, on the target) that the mirror
    needs to start. Not the pause/resume control topic: without its grant the mirror runs and
    cannot be paused (kmirror_engine/planning/flow_control.py), so the start-up check never asks."""
    return [
        acl.name
        for acl in mirror_acls(spec, [topic])
        if acl.side == "target"
        and acl.resource_type == "TOPIC"
        and acl.pattern == "LITERAL"
        and acl.name != control_topic()
    ]


def assert_check_names_the_missing_grant(
    spec: FlowSpec,
    west: SecureCluster,
    east: SecureCluster,
    topic: str,
    left_out: str,
    missing: tuple[str, ...] | None = None,
) -> None:
    """`missing`: the operations the check must name (default: all the topic's grant has)."""
    try:
        grant(spec, west, east, "User:mirror", [topic], leave_out=left_out)
        problems = InternalTopicAccess.for_flow(spec).check(AdminClient(_admin_config(spec)))
        # without Describe the broker does not tell whether the topic exists
        missing = missing or ("Create", "Describe", *needed_access(spec)[left_out][1])
        assert [(p.topic, p.missing) for p in problems] == [(left_out, missing)], problems
        operations = " ".join(f"--operation {op}" for op in missing)
        assert problems[0].grant == (
            f"kafka-acls.sh --bootstrap-server {spec.target.bootstrap_servers} --add "
            f"--allow-principal User:mirror {operations} --topic {left_out}"
        )
    finally:
        revoke_all(west, "User:mirror")
        revoke_all(east, "User:mirror")


@pytest.mark.parametrize("mechanism", ["mtls", "scram"])
def test_the_listed_acls_are_enough_for_heartbeats_the_created_topics_registry_and_config_sync(
    secure: tuple[SecureCluster, SecureCluster, Path], mechanism: str, unique: str
) -> None:
    """Sufficient for the side work too: with checkpoints and heartbeats on and exactly the
    listed ACLs, the mirror writes a heartbeat, records the remote topic it created in the
    registry and reads it back, and config sync copies a dynamic topic config it then changes."""
    from kmirror_engine.clients.factory import new_producer, producer_config
    from kmirror_engine.observability.heartbeats import HeartbeatEmitter, ensure_heartbeats_topic
    from kmirror_engine.planning.created_topics import CreatedTopics
    from kmirror_engine.topic_sync.configs import ConfigSync

    west, east, directory = secure
    topic = f"sec-side-work-{mechanism}-{unique}"
    remote = f"west.{topic}"
    create_topic(west.broker.bootstrap_servers, topic, 1, config={"retention.ms": "3600000"})
    spec = flow(west, east, directory, mechanism, topic, side_topics=True)
    who = principal(mechanism)
    try:
        grant(spec, west, east, who, [topic])
        assert InternalTopicAccess.for_flow(spec).check(AdminClient(_admin_config(spec))) == []
        TargetTopics(admin_client(spec.source), admin_client(spec.target), spec.target).ensure(
            {topic: MirroredTopic(topic, 1, remote)}
        )
        registry = CreatedTopics(spec.target, "west", spec.id)
        registry.record([(remote, topic)])
        assert remote in registry.load()
        emitter = HeartbeatEmitter.for_flow(
            spec.route,
            spec.heartbeats,
            new_producer(producer_config(spec.target, spec.copy, spec.id), role="heartbeats-producer"),
        )
        ensure_heartbeats_topic(emitter)
        assert emitter.maybe_emit(1_700_000_000_000)
        emitter.flush(30)
        assert _count(east.broker.bootstrap_servers, "heartbeats", 1) >= 1
        _alter_topic_config(west, topic, "retention.ms", "7200000")
        ConfigSync.for_flow(spec.route, spec.topic_sync).run()
        assert _topic_config(east, remote)["retention.ms"] == "7200000"
    finally:
        revoke_all(west, who)
        revoke_all(east, who)


def _alter_topic_config(cluster: SecureCluster, topic: str, name: str, value: str) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    admin = cluster.admin  # kept alive until the answer came
    resource = ConfigResource("TOPIC", topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def _topic_config(cluster: SecureCluster, topic: str) -> dict[str, str]:
    from confluent_kafka.admin import ConfigResource

    admin = cluster.admin  # kept alive until the answer came
    [future] = admin.describe_configs([ConfigResource("TOPIC", topic)]).values()
    return {name: entry.value for name, entry in future.result(timeout=30).items()}


def apply_rendered(commands: list[str], west: SecureCluster, east: SecureCluster) -> int:
    """Apply `kafka-acls.sh --add` commands as the tool would (read back from their words, not
    from the grants they were rendered from); returns how many bindings were created."""
    import shlex

    created = 0
    for command in commands:
        words = shlex.split(command)
        bootstrap = words[words.index("--bootstrap-server") + 1]
        cluster = west if bootstrap == west.broker.listener_address("SCRAM") else east
        who = words[words.index("--allow-principal") + 1]
        operations = [words[i + 1] for i, w in enumerate(words) if w == "--operation"]
        pattern = ResourcePatternType.PREFIXED if "prefixed" in words else ResourcePatternType.LITERAL
        if "--cluster" in words:
            resource, name = ResourceType.BROKER, "kafka-cluster"
        else:
            option = next(w for w in words if w in ("--topic", "--group", "--transactional-id"))
            resource = {
                "--topic": ResourceType.TOPIC,
                "--group": ResourceType.GROUP,
                "--transactional-id": ResourceType.TRANSACTIONAL_ID,
            }[option]
            name = words[words.index(option) + 1]
        bindings = [
            AclBinding(resource, name, pattern, who, "*", AclOperation[_enum_name(op)], AclPermissionType.ALLOW)
            for op in operations
        ]
        admin = cluster.admin  # kept alive until the answers came
        for future in admin.create_acls(bindings).values():
            future.result(timeout=30)
        created += len(bindings)
    return created


def test_the_rendered_kafka_acls_commands_alone_let_the_engine_run(
    secure: tuple[SecureCluster, SecureCluster, Path], unique: str
) -> None:
    """Issue 26: the commands `mirror_acl_commands` renders from `mirror_acls` (one per grant),
    applied as written, with checkpoints and heartbeats on: the start-up check finds nothing
    missing (the checkpoints topic is readable: its literal grant, not only the `west.` prefix),
    and the mirror creates the remote topic, copies, and reads back its created-topics registry."""
    from kmirror.security.acls import AclSide, mirror_acl_commands
    from kmirror_engine.planning.created_topics import CreatedTopics

    west, east, directory = secure
    topic = f"sec-rendered-{unique}"
    create_topic(west.broker.bootstrap_servers, topic, 1)
    produce(west.broker.bootstrap_servers, topic, [{"key": b"k", "value": f"v{i}".encode()} for i in range(50)])
    spec = flow(west, east, directory, "scram", topic, side_topics=True)
    grants = mirror_acls(spec, [topic])
    commands = mirror_acl_commands(
        "User:mirror", AclSide(spec.source.bootstrap_servers), AclSide(spec.target.bootstrap_servers), grants
    )
    assert len(commands) == len(grants)
    try:
        assert apply_rendered(commands, west, east) == sum(len(g.operations) for g in grants)
        assert InternalTopicAccess.for_flow(spec).check(AdminClient(_admin_config(spec))) == []
        TargetTopics(admin_client(spec.source), admin_client(spec.target), spec.target).ensure(
            {topic: MirroredTopic(topic, 1, f"west.{topic}")}
        )
        [progress] = copy_task_ranges(spec, [CopyRange(topic, 0, 0, 50, f"west.{topic}")], 0)
        assert progress.records == 50 and _count(east.broker.bootstrap_servers, f"west.{topic}", 1) == 50
        registry = CreatedTopics(spec.target, "west", spec.id)
        registry.record([(f"west.{topic}", topic)])
        assert f"west.{topic}" in registry.load()
    finally:
        revoke_all(west, "User:mirror")
        revoke_all(east, "User:mirror")


def _set_scram_password(cluster: SecureCluster, password: str) -> None:
    """Rotate user `mirror`'s SCRAM-SHA-512 credential (as an operator would, kafka-configs.sh)."""
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    upsert = UserScramCredentialUpsertion(
        "mirror", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password.encode()
    )
    admin = cluster.admin  # kept alive until the answer came
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)


def test_offset_syncs_are_still_written_after_the_scram_password_is_rotated(
    secure: tuple[SecureCluster, SecureCluster, Path], unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 24 item 5: the password is rotated on the target and in the `${file:...}` the flow
    references; once the offset-sync producer's connections close (idle here, a broker restart
    in real life) a producer still holding the old password is refused and the syncs go
    unconfirmed (before: OffsetSyncError, '1 unconfirmed'). The renewing producer re-reads the
    file (here at every use: RECHECK_S 0), is rebuilt with the new password and the sync lands."""
    from kmirror.flow.replication_policy import offset_syncs_topic
    from kmirror_engine.clients import cache
    from kmirror_engine.failover.offset_sync_topic import OffsetSyncTopic
    from kmirror_engine.failover.offset_syncs import Sync, SyncStore

    west, east, directory = secure
    topic = f"sec-rotate-{unique}"
    create_topic(west.broker.bootstrap_servers, topic, 1)
    data = flow(west, east, directory, "scram", topic).to_dict()
    # idle connections closed after 1 s: the next write connects, and authenticates, again
    data["target"]["config"]["connections.max.idle.ms"] = 1000
    spec = parse_flow_spec(data)
    monkeypatch.setattr(cache, "RECHECK_S", 0.0)
    rotated = "scram-rotated-7Qw2-never-printed"
    try:
        grant(spec, west, east, "User:mirror", [topic])
        syncs = OffsetSyncTopic(spec.target, offset_syncs_topic("west"))
        syncs.ensure_exists()
        syncs.write(topic, 0, [Sync(0, 0)], 1)
        syncs.flush(20)
        _set_scram_password(east, rotated)
        (directory / "scram-password").write_text(rotated)
        time.sleep(3)  # the old producer's connections go idle and close
        syncs.write(topic, 0, [Sync(10, 10)], 11)
        syncs.flush(20)
        store = SyncStore()
        OffsetSyncTopic(spec.target, offset_syncs_topic("west")).load(store, 30)
        assert [(s.upstream, s.downstream) for s in store.syncs(topic, 0)] == [(0, 0), (10, 10)]
    finally:
        _set_scram_password(east, SCRAM_PASSWORD)
        (directory / "scram-password").write_text(SCRAM_PASSWORD)
        revoke_all(west, "User:mirror")
        revoke_all(east, "User:mirror")
