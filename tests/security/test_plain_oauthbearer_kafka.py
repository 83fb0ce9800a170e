"""SASL/PLAIN and SASL/OAUTHBEARER (OIDC) against Apache Kafka itself, with the StandardAuthorizer
on (issue 45). Two single-node clusters, each with
- PLAIN: SASL_SSL, users from the broker's JAAS config (`user_mirror="..."`), as Confluent Cloud
  API keys or Event Hubs connection strings are checked;
- OAUTH: SASL_SSL, OAUTHBEARER checked by Kafka's JWT validator
  (OAuthBearerValidatorCallbackHandler) against the JWKS of an OIDC provider served on loopback by
  the test (`oidc_support`), expected audience `kafka`; the brokers ask clients to re-authenticate
  every few seconds (`connections.max.reauth.ms`), so a refreshed token is really used.

The mirror's principal holds only the grants `mirror_acls` lists. The harness's own PLAINTEXT
listener is the only super user. The batch copy path speaks PLAIN (kafka-python's SASL layer);
OAUTHBEARER flows copy with the record loop (`batch_settings` names the reason; see the last test).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kmirror.errors import ConnectionFailure
from kmirror.flow.spec import FlowSpec, parse_flow_spec
from kmirror.security.acls import kafka_principal
from kmirror.security.config import client_config
from kmirror.security.security_checks import security_problems
from kmirror_cli.local_brokers import free_port
from kmirror_cli.local_kafka import KafkaBroker, Listener
from kmirror_engine.clients.factory import admin_client
from kmirror_engine.clients.security_check import check_client_support, check_connection
from kmirror_engine.copying.ranges import CopyRange
from kmirror_engine.copying.task_copy import copy_task_ranges
from kmirror_engine.planning.discovery import MirroredTopic
from kmirror_engine.planning.target_topics import TargetTopics
from tests.brokers import IS_TANSU, KAFKA_LINE
from tests.kafka_helpers import consume_all, create_topic, keyed_topic
from tests.security.oidc_support import OidcProvider
from tests.security.test_real_broker_security import SecureCluster, grant, revoke_all
from tests.security.tls_support import TestCa, broker_tls

pytestmark = [pytest.mark.security, pytest.mark.real_kafka, pytest.mark.e2e]
PLAIN_PASSWORD = "plain-pass-8Kd2-never-printed"
CLIENT_SECRET = "oidc-secret-5Hn1-never-printed"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
REAUTH_MS = 3000


@dataclass
class Clusters:
    west: SecureCluster
    east: SecureCluster
    oidc: OidcProvider
    directory: Path


def _ports(count: int, taken: set[int]) -> list[int]:
    """Distinct free ports (free_port alone may hand out the same port twice before anything binds)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in taken:
            taken.add(port)
            ports.append(port)
    return ports


def _listeners(ca: TestCa, directory: Path, ports: list[int]) -> tuple[Listener, Listener]:
    server = ca.issue("broker", server=True)
    tls = broker_tls(ca, server, directory / "broker-keystore.pem")
    jaas = (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        f'password="broker-pass" user_broker="broker-pass" user_mirror="{PLAIN_PASSWORD}";'
    )
    plain = Listener(
        "PLAIN",
        "SASL_SSL",
        ports[0],
        settings={**tls, "sasl.enabled.mechanisms": "PLAIN", "plain.sasl.jaas.config": jaas},
    )
    oauth = Listener(
        "OAUTH",
        "SASL_SSL",
        ports[1],
        settings={
            **tls,
            "sasl.enabled.mechanisms": "OAUTHBEARER",
            "oauthbearer.sasl.jaas.config": (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
            ),
            "oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
            "oauthbearer.connections.max.reauth.ms": str(REAUTH_MS),
        },
    )
    return plain, oauth


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    if IS_TANSU:
        pytest.skip("tansu has no SASL/PLAIN, OAUTHBEARER or authorizer")  # deselected there anyway (real_kafka)
    directory = tmp_path_factory.mktemp("plain-oauth")
    ca = TestCa(directory)
    (directory / "plain-password").write_text(PLAIN_PASSWORD)
    (directory / "client-secret").write_text(CLIENT_SECRET + "\n")
    with OidcProvider({"mirror": CLIENT_SECRET}) as oidc:
        brokers: list[KafkaBroker] = []
        taken: set[int] = set()
        try:
            for name in ("po-west", "po-east"):
                ports = _ports(4, taken)
                broker = KafkaBroker(
                    name,
                    line=KAFKA_LINE,
                    port=ports[0],
                    controller_port=ports[1],
                    extra_listeners=_listeners(ca, directory, ports[2:]),
                    settings={
                        "sasl.oauthbearer.jwks.endpoint.url": oidc.jwks_url,
                        "sasl.oauthbearer.expected.audience": "kafka",
                        "sasl.oauthbearer.jwks.endpoint.refresh.ms": "60000",
                    },
                    # Kafka 4 fetches only from allow-listed URLs
                    jvm_options=(f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={oidc.jwks_url}",),
                )
                brokers.append(broker)
                broker.start()
            yield Clusters(SecureCluster(brokers[0], ca), SecureCluster(brokers[1], ca), oidc, directory)
        finally:
            for broker in brokers:
                broker.remove()


def security(mechanism: str, c: Clusters, **over: Any) -> dict[str, Any]:
    if mechanism == "plain":
        result: dict[str, Any] = {
            "protocol": "SASL_SSL",
            "tls": {"ca": {"file": str(c.west.ca.cert_path)}},
            "plain": {"username": "mirror", "password": {"file": str(c.directory / "plain-password")}},
        }
    else:
        result = {
            "protocol": "SASL_SSL",
            "tls": {"ca": {"file": str(c.west.ca.cert_path)}},
            "oauthbearer": {
                "token_endpoint": c.oidc.token_url,
                "client_id": "mirror",
                "scope": "kafka.mirror",
                "client_secret": {"file": str(c.directory / "client-secret")},
                **over,
            },
        }
    assert security_problems(result, "clusters.test.security") == []
    return result


def flow(c: Clusters, mechanism: str, topic: str, **extra: Any) -> FlowSpec:
    listener = {"plain": "PLAIN", "oauthbearer": "OAUTH"}[mechanism]
    config = client_config(security(mechanism, c))
    return parse_flow_spec(
        {
            "id": f"west-{mechanism}->east",
            "checkpoint_location": str(c.directory / f"cp-{mechanism}"),
            "source": {
                "alias": "west",
                "bootstrap_servers": c.west.broker.listener_address(listener),
                "config": config,
            },
            "target": {
                "alias": "east",
                "bootstrap_servers": c.east.broker.listener_address(listener),
                "config": config,
            },
            "topics": [topic],
            "topics_exclude": [],
            "replication_policy": {"type": "default"},
            **extra,
        }
    )


@pytest.mark.parametrize(
    ("mechanism", "copy_loop"),
    [("plain", "python"), ("plain", "batch"), ("oauthbearer", "python"), ("oauthbearer", "batch")],
)
def test_the_listed_acls_are_enough_to_mirror_with_plain_and_oauthbearer(
    clusters: Clusters, mechanism: str, copy_loop: str, unique: str
) -> None:
    c = clusters
    topic = f"po-{mechanism}-{copy_loop}-{unique}"
    keyed_topic(c.west.broker.bootstrap_servers, topic, 100)
    spec = parse_flow_spec({**flow(c, mechanism, topic).to_dict(), "copy_loop": copy_loop})
    who = kafka_principal(security(mechanism, c))
    assert who == "User:mirror"
    try:
        for endpoint in (spec.source, spec.target):
            check_client_support(endpoint.alias, endpoint.client_config())
            check_connection(endpoint, timeout_s=30)  # authenticated, nothing authorized yet
        # denied before the grant, fast: a record loop reusing the previous case's consumer (the batch
        # path's OAUTHBEARER fallback) used to wait out its 300 s stall timeout (copying/access_probe.py)
        started = time.monotonic()
        with pytest.raises(Exception, match=r"(?i)authoriz") as denied:
            copy_task_ranges(spec, [CopyRange(topic, 0, 0, 50, f"west.{topic}")], 0)
        assert time.monotonic() - started < 60, f"the denial took {time.monotonic() - started:.0f} s: {denied.value}"
        grant(spec, c.west, c.east, who, [topic])
        TargetTopics(admin_client(spec.source), admin_client(spec.target), spec.target).ensure(
            {topic: MirroredTopic(topic, 2, f"west.{topic}")}
        )
        progress = copy_task_ranges(spec, [CopyRange(topic, p, 0, 50, f"west.{topic}") for p in (0, 1)], 0)
        assert sorted(p.records for p in progress) == [50, 50]
        # the batch path speaks PLAIN; OAUTHBEARER falls back to the record loop (counted as such)
        fell_back = copy_loop == "batch" and mechanism == "oauthbearer"
        assert [p.fallback_records for p in progress] == ([50, 50] if fell_back else [0, 0])
        copied = consume_all(c.east.broker.bootstrap_servers, f"west.{topic}", 2)
        values = sorted(r.value() for records in copied.values() for r in records)
        assert values == sorted(f"v{i}".encode() for i in range(100))
    finally:
        revoke_all(c.west, who)
        revoke_all(c.east, who)
    if mechanism == "oauthbearer":
        assert c.oidc.requests and {(r.client_id, r.scope) for r in c.oidc.requests} == {("mirror", "kafka.mirror")}


def _refused(c: Clusters, spec: FlowSpec, started: float) -> str:
    with pytest.raises(ConnectionFailure) as failure:
        check_connection(spec.source, timeout_s=30)
    assert time.monotonic() - started < 10, "an authentication failure must stop the wait at once"
    message = str(failure.value)
    assert message.startswith(f"cluster 'west' ({spec.source.bootstrap_servers}): cannot connect with ")
    for secret in (PLAIN_PASSWORD, CLIENT_SECRET, "wrong-pass-never-printed"):
        assert secret not in message
    return message


def test_a_wrong_plain_password_is_refused_fast_without_printing_it(clusters: Clusters, unique: str) -> None:
    c = clusters
    (c.directory / "wrong-password").write_text("wrong-pass-never-printed")
    data = flow(c, "plain", f"po-wrong-{unique}").to_dict()
    data["source"]["config"]["sasl.password"] = f"${{file:{c.directory / 'wrong-password'}}}"
    message = _refused(c, parse_flow_spec(data), time.monotonic())
    assert "Authentication failed" in message and "check the SASL credentials" in message


def test_a_token_for_another_audience_is_refused_by_the_broker(clusters: Clusters, unique: str) -> None:
    c = clusters
    c.oidc.audience = "not-kafka"
    try:
        message = _refused(c, flow(c, "oauthbearer", f"po-aud-{unique}"), time.monotonic())
    finally:
        c.oidc.audience = "kafka"
    assert "SASL_SSL" in message and "check the SASL credentials" in message


def test_an_expired_token_is_refused(clusters: Clusters, unique: str) -> None:
    """The provider hands out a token that expired a minute ago (a clock-skewed or stale IdP)."""
    c = clusters
    c.oidc.lifetime_s = -60
    try:
        message = _refused(c, flow(c, "oauthbearer", f"po-exp-{unique}"), time.monotonic())
    finally:
        c.oidc.lifetime_s = 3600
    assert "check the SASL credentials" in message or "token" in message.lower()


def test_tokens_are_refreshed_before_expiry_and_the_broker_reauthenticates(clusters: Clusters, unique: str) -> None:
    """12 s tokens, brokers re-authenticating every 3 s: a producer living 3 lifetimes keeps
    writing, librdkafka fetches new tokens (at 80 % of the lifetime) and the brokers accept them.

    Why 12 s: a broker grants a session until min(connections.max.reauth.ms, token expiry) and
    refuses a re-authentication begun within 1 s of the previous one (KafkaChannel's
    MIN_REAUTH_INTERVAL, answered ILLEGAL_SASL_STATE). librdkafka re-authenticates at 90 % of the
    session, so a token used with ~1 s left (6 s tokens refresh with 1.2 s left) gets a session
    too short to renew under load: a test artefact, not what hour-long tokens see."""
    from confluent_kafka import Producer

    from kmirror.security.config import resolve_references

    c = clusters
    topic = f"po-refresh-{unique}"
    create_topic(c.west.broker.bootstrap_servers, topic, 1)
    spec = flow(c, "oauthbearer", topic)
    who = "User:mirror"
    c.oidc.lifetime_s = 12
    before = len(c.oidc.requests)
    errors: list[Any] = []
    try:
        grant(spec, c.west, c.east, who, [topic])
        from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

        write = AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            who,
            "*",
            AclOperation.WRITE,
            AclPermissionType.ALLOW,
        )
        admin = c.west.admin
        for future in admin.create_acls([write]).values():
            future.result(timeout=30)
        producer = Producer(
            {
                "bootstrap.servers": spec.source.bootstrap_servers,
                "error_cb": errors.append,
                **resolve_references(dict(spec.source.config)),
            }
        )
        delivered: list[Any] = []
        started = time.monotonic()
        sent = 0
        while time.monotonic() - started < 34:
            producer.produce(topic, f"r{sent}".encode(), on_delivery=lambda err, msg: delivered.append(err))
            sent += 1
            producer.flush(10)
            time.sleep(1)
        assert producer.flush(30) == 0
        assert delivered == [None] * sent, delivered
    finally:
        c.oidc.lifetime_s = 3600
        revoke_all(c.west, who)
        revoke_all(c.east, who)
    assert len(c.oidc.requests) - before >= 4, c.oidc.requests[before:]
    assert not [e for e in errors if "auth" in e.str().lower()], errors
    assert len(consume_all(c.west.broker.bootstrap_servers, topic, 1)[0]) == sent


def test_the_batch_path_falls_back_to_the_record_loop_for_oauthbearer_by_rule(clusters: Clusters) -> None:
    """kafka-python's OAUTHBEARER needs a token provider object: the batch path does not translate
    `sasl.oauthbearer.*`, names it, and the flow copies with the record loop instead."""
    from kmirror_engine.copying.task_copy import batch_path_blockers

    reasons = batch_path_blockers(dict(flow(clusters, "oauthbearer", "t").source.config))
    assert "SASL mechanism OAUTHBEARER is not supported on the batch path (PLAIN and SCRAM are)" in reasons
    assert batch_path_blockers(dict(flow(clusters, "plain", "t").source.config)) == []
