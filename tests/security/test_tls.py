"""TLS end to end: tansu brokers behind stunnel4 (server TLS for the source, mutual TLS for the
target), clients configured only through the topology's `security` mapping -> client_config ->
resolve_references, exactly as the app does it.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from kmirror.errors import ConnectionFailure, KmirrorError
from kmirror.flow.spec import ClusterEndpoint, FlowSpec, parse_flow_spec
from kmirror.security.config import client_config, redact, resolve_references
from kmirror.security.security_checks import security_problems
from kmirror_cli.local_brokers import LocalBroker, free_port
from kmirror_engine.clients.factory import producer_config
from kmirror_engine.clients.security_check import check_connection, check_flow_security
from kmirror_engine.copying.ranges import CopyRange
from kmirror_engine.copying.task_copy import copy_task_ranges
from tests.security.tls_support import Issued, Stunnel, TestCa

pytestmark = pytest.mark.security
KEY_PASSWORD = "tls-key-pass-7Qx9-never-printed"
FAIL_FAST_S = 5.0


@dataclass
class TlsClusters:
    directory: Path
    ca: TestCa
    wrong_ca: TestCa
    client: Issued
    password_file: Path
    source_bootstrap: str  # server TLS only
    target_bootstrap: str  # mutual TLS (client certificate required)
    target_stunnel: Stunnel
    server: Issued  # the brokers' certificate (stunnel's)
    source_plain_port: int  # the source tansu's own plaintext listener

    def source_security(self, ca: Path | None = None) -> dict[str, Any]:
        return {"protocol": "SSL", "tls": {"ca": {"file": str(ca or self.ca.cert_path)}}}

    def target_security(self, with_client_cert: bool = True) -> dict[str, Any]:
        tls: dict[str, Any] = {"ca": {"file": str(self.ca.cert_path)}}
        if with_client_cert:
            tls.update(
                {
                    "cert": {"file": str(self.client.cert)},
                    "key": {"file": str(self.client.key)},
                    "key_password": {"file": str(self.password_file)},
                }
            )
        return {"protocol": "SSL", "tls": tls}


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsClusters]:
    directory = tmp_path_factory.mktemp("tls")
    ca, wrong_ca = TestCa(directory), TestCa(directory, "wrong-ca")
    server = ca.issue("broker", server=True)
    client = ca.issue("mirrormaker", server=False, key_password=KEY_PASSWORD.encode())
    password_file = directory / "client-key-password"
    password_file.write_text(KEY_PASSWORD + "\n")
    source_port, target_port = free_port(), free_port()
    with (
        LocalBroker("tls-source", advertised_port=source_port) as source,
        LocalBroker("tls-target", advertised_port=target_port) as target,
        Stunnel(directory, "source", source_port, source.port, server),
        Stunnel(directory, "target", target_port, target.port, server, client_ca=ca.cert_path) as target_stunnel,
    ):
        yield TlsClusters(
            directory,
            ca,
            wrong_ca,
            client,
            password_file,
            f"127.0.0.1:{source_port}",
            f"127.0.0.1:{target_port}",
            target_stunnel,
            server,
            source.port,
        )


def _config(bootstrap: str, security: dict[str, Any]) -> dict[str, Any]:
    assert security_problems(security, "clusters.test.security") == []
    return {"bootstrap.servers": bootstrap, **resolve_references(client_config(security))}


def _flow(tls: TlsClusters, unique: str) -> FlowSpec:
    """The flow spec the planner would emit: security as references only (client_config output)."""
    return parse_flow_spec(
        {
            "id": "east-1->west-1",
            "topics": [".*"],
            "topics_exclude": [],
            "checkpoint_location": f"/tmp/kmirror-{unique}",
            "replication_policy": {"type": "default", "separator": "."},
            "source": {
                "alias": "east-1",
                "bootstrap_servers": tls.source_bootstrap,
                "config": client_config(tls.source_security()),
            },
            "target": {
                "alias": "west-1",
                "bootstrap_servers": tls.target_bootstrap,
                "config": client_config(tls.target_security()),
            },
        }
    )


def _mirror(tls: TlsClusters, unique: str, count: int) -> tuple[FlowSpec, list[tuple[bytes | None, bytes | None]]]:
    """Produce `count` records on the TLS source, copy them with the app's copy task, read the target."""
    spec = _flow(tls, unique)
    topic, remote = f"tls-orders-{unique}", f"east-1.tls-orders-{unique}"
    source = _config(tls.source_bootstrap, tls.source_security())
    target = _config(tls.target_bootstrap, tls.target_security())
    for config, name in ((source, topic), (target, remote)):
        admin = AdminClient(config)  # kept referenced until the future resolves
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=30)
    producer = Producer({**source, "acks": "all"})
    for i in range(count):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
    assert producer.flush(30) == 0
    producer.produce(topic, key=b"fence", value=b"")  # tansu hides the newest batch from offset queries
    assert producer.flush(30) == 0
    copy_task_ranges(spec, [CopyRange(topic, 0, 0, count, remote)], task_id=0)  # the app's Spark task body
    fence = Producer({**target, "acks": "all"})
    fence.produce(remote, key=b"fence", value=b"")
    assert fence.flush(30) == 0
    return spec, _read(target, remote, count)


def _read(config: dict[str, Any], topic: str, count: int, partitions: tuple[int, ...] = (0,)) -> list[tuple[Any, Any]]:
    """The (key, value) of `count` records (or those 30 s bring) of `partitions` of `topic`, fences left out."""
    consumer = Consumer({**config, "group.id": "kmirror-tls-test", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    out: list[tuple[Any, Any]] = []
    deadline = time.monotonic() + 30
    while len(out) < count and time.monotonic() < deadline:
        for msg in consumer.consume(500, timeout=0.5):
            assert msg.error() is None, msg.error()
            if msg.key() != b"fence":
                out.append((msg.key(), msg.value()))
    consumer.close()
    return out


def test_mirror_through_tls_and_mutual_tls_keeps_every_record(
    tls: TlsClusters, unique: str, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    spec, mirrored = _mirror(tls, unique, 200)
    assert mirrored == [(f"k{i}".encode(), f"v{i}".encode()) for i in range(200)]
    assert "Certificate accepted at depth=0: CN=mirrormaker" in tls.target_stunnel.log()
    assert spec.target.config["ssl.key.password"] == f"${{file:{tls.password_file}}}"
    out, err = capfd.readouterr()
    for text in (out, err, caplog.text, repr(spec), repr(redact(producer_config(spec.target, spec.copy, spec.id)))):
        assert KEY_PASSWORD not in text


def test_wrong_ca_fails_fast_naming_the_cluster(tls: TlsClusters) -> None:
    config = client_config(tls.source_security(ca=tls.wrong_ca.cert_path))
    started = time.monotonic()
    with pytest.raises(ConnectionFailure) as failure:
        check_connection(ClusterEndpoint("east-1", tls.source_bootstrap, config), timeout_s=30)
    assert time.monotonic() - started < FAIL_FAST_S
    message = str(failure.value)
    assert message.startswith(f"cluster 'east-1' ({tls.source_bootstrap}): cannot connect with security.protocol=SSL: ")
    assert "certificate verify failed" in message
    assert message.endswith(
        "the brokers' certificate is not signed by the CA in security.tls.ca; point it at the issuing CA"
    )


def test_mutual_tls_needs_the_client_certificate(tls: TlsClusters) -> None:
    with_cert = client_config(tls.target_security(with_client_cert=True))
    check_connection(ClusterEndpoint("west-1", tls.target_bootstrap, with_cert), timeout_s=10)
    without = client_config(tls.target_security(with_client_cert=False))
    started = time.monotonic()
    with pytest.raises(ConnectionFailure) as failure:
        check_connection(ClusterEndpoint("west-1", tls.target_bootstrap, without), timeout_s=30)
    assert time.monotonic() - started < FAIL_FAST_S
    assert "cluster 'west-1'" in str(failure.value)
    assert "certificate required" in str(failure.value)
    assert "client certificate (mutual TLS); set security.tls.cert + key or pkcs12" in str(failure.value)


def test_wrong_key_password_reference_is_reported_without_the_value(tls: TlsClusters, tmp_path: Path) -> None:
    security = tls.target_security()
    security["tls"]["key_password"] = {"env": "KMIRROR_TEST_UNSET_KEY_PASSWORD"}
    with pytest.raises(KmirrorError) as failure:
        check_connection(ClusterEndpoint("west-1", tls.target_bootstrap, client_config(security)), timeout_s=5)
    assert str(failure.value) == (
        "ssl.key.password: reference ${env:KMIRROR_TEST_UNSET_KEY_PASSWORD} cannot be resolved: environment variable "
        "KMIRROR_TEST_UNSET_KEY_PASSWORD is not set; set it in the app's environment (or use a {file: PATH} reference)"
    )


def test_a_refused_tls_connection_is_retried_not_mistaken_for_a_tls_failure(tls: TlsClusters) -> None:
    """librdkafka names the broker `ssl://host:port`; that alone must not make an error fatal."""
    address = f"127.0.0.1:{free_port()}"  # nothing listens here
    started = time.monotonic()
    with pytest.raises(ConnectionFailure) as failure:
        check_connection(ClusterEndpoint("east-1", address, client_config(tls.source_security())), timeout_s=3)
    assert time.monotonic() - started >= 2.9
    assert "Connection refused" in str(failure.value)
    assert str(failure.value).endswith("; check bootstrap_servers and that the brokers are reachable from here")


def test_the_check_waits_for_a_tls_listener_that_comes_up(tls: TlsClusters) -> None:
    port = free_port()
    endpoint = ClusterEndpoint("east-1", f"127.0.0.1:{port}", client_config(tls.source_security()))
    late = Stunnel(tls.directory, "late", port, tls.source_plain_port, tls.server)
    starter = threading.Timer(1.5, late.__enter__)
    starter.start()
    try:
        check_connection(endpoint, timeout_s=15)  # returns once the TLS listener answers
    finally:
        starter.join()
        late.__exit__()


def test_a_certificate_for_another_host_fails_fast_unless_hostname_verification_is_off(
    tls: TlsClusters, tmp_path: Path
) -> None:
    """verify_hostname maps to ssl.endpoint.identification.algorithm; librdkafka reports a name
    mismatch as "certificate verify failed", so the hint must not blame the (right) CA."""
    port = free_port()
    elsewhere = tls.ca.issue("elsewhere", server=True, dns_names=("elsewhere.example.com",), ip_addresses=())
    security = tls.source_security()
    with Stunnel(tmp_path, "elsewhere", port, tls.source_plain_port, elsewhere):
        started = time.monotonic()
        with pytest.raises(ConnectionFailure) as failure:
            check_connection(ClusterEndpoint("east-1", f"127.0.0.1:{port}", client_config(security)), timeout_s=30)
        assert time.monotonic() - started < FAIL_FAST_S
        security["tls"]["verify_hostname"] = False
        check_connection(ClusterEndpoint("east-1", f"127.0.0.1:{port}", client_config(security)), timeout_s=10)
    assert "certificate verify failed" in str(failure.value)
    assert str(failure.value).endswith(
        "; the brokers' certificate is signed by the CA in security.tls.ca but is not valid for '127.0.0.1' "
        "(IP address mismatch, certificate is not valid for '127.0.0.1'.); use a bootstrap address the certificate "
        "names, or set security.tls.verify_hostname: false"
    )


def test_mutual_tls_with_a_pkcs12_keystore(tls: TlsClusters, tmp_path: Path) -> None:
    keystore, password_file = tmp_path / "mirrormaker.p12", tmp_path / "keystore-password"
    password_file.write_text("p12-pass-never-printed\n")
    key = serialization.load_pem_private_key(tls.client.key.read_bytes(), KEY_PASSWORD.encode())
    cert = x509.load_pem_x509_certificate(tls.client.cert.read_bytes())
    keystore.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"mirrormaker", key, cert, None, serialization.BestAvailableEncryption(b"p12-pass-never-printed")
        )
    )
    security = {
        "protocol": "SSL",
        "tls": {
            "ca": {"file": str(tls.ca.cert_path)},
            "pkcs12": {"file": str(keystore)},
            "pkcs12_password": {"file": str(password_file)},
        },
    }
    assert security_problems(security, "clusters.west-1.security") == []
    assert client_config(security)["ssl.keystore.password"] == f"${{file:{password_file}}}"
    accepted = "Certificate accepted at depth=0: CN=mirrormaker"
    before = tls.target_stunnel.log().count(accepted)
    check_connection(ClusterEndpoint("west-1", tls.target_bootstrap, client_config(security)), timeout_s=10)
    assert tls.target_stunnel.log().count(accepted) > before  # the keystore's certificate was presented


def test_flow_start_up_check_passes_for_both_tls_clusters(tls: TlsClusters, unique: str) -> None:
    flow = _flow(tls, unique)
    check_flow_security(flow.source, flow.target, timeout_s=10)


def test_the_app_mirrors_through_mutual_tls_without_printing_the_key_password(
    tls: TlsClusters, unique: str, tmp_path: Path
) -> None:
    """`python -m spark_app --once` (real Spark, every client the app creates: source reader,
    copy tasks, target topics, offset syncs, heartbeats, checkpoints) against the TLS clusters."""
    topic, remote, count = f"tls-app-{unique}", f"east-1.tls-app-{unique}", 300
    source = _config(tls.source_bootstrap, tls.source_security())
    target = _config(tls.target_bootstrap, tls.target_security())
    admin = AdminClient(source)
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=30)
    producer = Producer({**source, "acks": "all"})
    for i in range(count):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    for partition in (0, 1):  # tansu hides the newest batch of each partition from offset queries
        producer.produce(topic, key=b"fence", value=b"", partition=partition)
        assert producer.flush(30) == 0
    raw = _flow(tls, unique).to_dict()
    raw.update({"topics": [f"tls-app-{unique}"], "checkpoint_location": str(tmp_path / "checkpoint")})
    flow_file = tmp_path / "flow.json"
    flow_file.write_text(json.dumps(raw))
    assert KEY_PASSWORD not in flow_file.read_text()  # the spec carries the reference only

    done = subprocess.run(
        [sys.executable, "-m", "spark_app", "--flow", str(flow_file), "--once", "--master", "local[1]"],
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    assert KEY_PASSWORD not in done.stdout + done.stderr
    fence = Producer({**target, "acks": "all"})
    for partition in (0, 1):
        fence.produce(remote, key=b"fence", value=b"", partition=partition)
        assert fence.flush(30) == 0
    mirrored = sorted(_read(target, remote, count, (0, 1)))
    assert mirrored == sorted((f"k{i}".encode(), f"v{i}".encode()) for i in range(count))
