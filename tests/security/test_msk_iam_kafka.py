"""AWS MSK IAM against Apache Kafka itself, with the StandardAuthorizer on (issue 45): the nearest
real thing this machine has to an MSK cluster. One broker whose SASL_SSL listener takes OAUTHBEARER
tokens in MSK IAM's format and checks them with `java/MskIamTestValidator.java` (action
kafka-cluster:Connect, region, service, expiry and the SigV4 signature recomputed with the test's
fake secret key; the principal is the access key id). The app signs its tokens with
aws-msk-iam-sasl-signer-python from the default credential chain (here: the fake key in the
environment). Kafka ACLs stand in for the IAM policy: the mirror holds only the grants
`mirror_acls` lists, the same list `kmirror acls` renders as IAM statements (tests/security/
test_msk_iam_unit.py checks the statements against the API calls). Source and target are the
same broker (two aliases), so one broker start (~15-25 s) serves the module.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kmirror.errors import ConnectionFailure
from kmirror.flow.spec import FlowSpec, parse_flow_spec
from kmirror.security.config import client_config
from kmirror.security.security_checks import security_problems
from kmirror_cli.local_kafka import KafkaBroker, Listener, cache_dir, kafka_jars
from kmirror_engine.clients.factory import admin_client
from kmirror_engine.clients.security_check import check_client_support, check_connection
from kmirror_engine.copying.ranges import CopyRange
from kmirror_engine.copying.task_copy import copy_task_ranges
from kmirror_engine.planning.discovery import MirroredTopic
from kmirror_engine.planning.target_topics import TargetTopics
from tests.brokers import IS_TANSU, KAFKA_LINE
from tests.kafka_helpers import consume_all, keyed_topic
from tests.security.test_plain_oauthbearer_kafka import _ports
from tests.security.test_real_broker_security import SecureCluster, grant, revoke_all
from tests.security.tls_support import TestCa

pytestmark = [pytest.mark.security, pytest.mark.real_kafka, pytest.mark.e2e]
ACCESS_KEY, SECRET_KEY = "AKIAMSKIAMBROKER0001", "msk-iam/broker+test/secret-never-printed"
REGION = "eu-west-1"
SOURCE = Path(__file__).parent / "java" / "MskIamTestValidator.java"
VALIDATOR = "kmirror.test.MskIamTestValidator"


@dataclass
class Iam:
    cluster: SecureCluster
    directory: Path


def validator_classes() -> Path:
    """The validator compiled once per source version under ~/.cache/kmirror (javac, against the
    broker's own jars)."""
    if shutil.which("javac") is None:
        pytest.skip("javac is not installed (the MSK IAM broker test compiles its token validator)")
    digest = hashlib.sha256(SOURCE.read_bytes() + KAFKA_LINE.encode()).hexdigest()[:16]
    out = cache_dir() / f"msk-iam-validator-{digest}"
    if not out.is_dir():
        work = Path(tempfile.mkdtemp(dir=cache_dir(), prefix=".msk-iam-validator-"))
        subprocess.run(
            ["javac", "-d", str(work), "-cp", f"{kafka_jars(KAFKA_LINE)}/*", str(SOURCE)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        try:
            work.rename(out)  # atomic: a concurrent compile of the same source loses the race harmlessly
        except OSError:
            shutil.rmtree(work, ignore_errors=True)
    return out


@pytest.fixture(scope="module")
def iam(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Iam]:
    if IS_TANSU:
        pytest.skip("tansu has no OAUTHBEARER or authorizer")
    classes = validator_classes()
    directory = tmp_path_factory.mktemp("msk-iam")
    ca = TestCa(directory)
    server = ca.issue("broker", server=True)
    keystore = directory / "broker-keystore.pem"
    keystore.write_text(server.key.read_text() + server.cert.read_text())
    # the broker's own login (unsecured sub claim) plus the validator's options
    jaas = (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'unsecuredLoginStringClaim_sub="broker" '
        f'accessKey="{ACCESS_KEY}" secretKey="{SECRET_KEY}" region="{REGION}";'
    )
    ports = _ports(3, set())
    listener = Listener(
        "IAM",
        "SASL_SSL",
        ports[2],
        settings={
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(ca.cert_path),
            "sasl.enabled.mechanisms": "OAUTHBEARER",
            "oauthbearer.sasl.jaas.config": jaas,
            "oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
        },
    )
    broker = KafkaBroker(
        "msk-iam",
        line=KAFKA_LINE,
        port=ports[0],
        controller_port=ports[1],
        extra_listeners=(listener,),
        classpath=(str(classes),),
    )
    try:
        broker.start()
        yield Iam(SecureCluster(broker, ca), directory)
    finally:
        broker.remove()


@pytest.fixture()
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default credential chain finds the fake key in the environment (as IRSA's or the
    instance profile's would be found on EKS/EMR)."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def flow(c: Iam, topic: str) -> FlowSpec:
    security = {
        "protocol": "SASL_SSL",
        "tls": {"ca": {"file": str(c.cluster.ca.cert_path)}},
        "msk_iam": {"region": REGION},
    }
    assert security_problems(security, "clusters.test.security") == []
    config = client_config(security)
    address = c.cluster.broker.listener_address("IAM")
    return parse_flow_spec(
        {
            "id": "west-iam->east",
            "checkpoint_location": str(c.directory / "cp"),
            "source": {"alias": "west", "bootstrap_servers": address, "config": config},
            "target": {"alias": "east", "bootstrap_servers": address, "config": config},
            "topics": [topic],
            "topics_exclude": [],
            "replication_policy": {"type": "default"},
        }
    )


def test_the_listed_grants_are_enough_to_mirror_with_msk_iam_tokens(iam: Iam, aws_env: None, unique: str) -> None:
    c, who = iam, f"User:{ACCESS_KEY}"
    topic = f"iam-{unique}"
    keyed_topic(c.cluster.broker.bootstrap_servers, topic, 100)
    spec = flow(c, topic)
    try:
        for endpoint in (spec.source, spec.target):
            check_client_support(endpoint.alias, endpoint.client_config())
            check_connection(endpoint, timeout_s=30)  # the signed token is accepted; nothing authorized yet
        with pytest.raises(Exception, match=r"(?i)authoriz"):
            copy_task_ranges(spec, [CopyRange(topic, 0, 0, 50, f"west.{topic}")], 0)
        grant(spec, c.cluster, c.cluster, who, [topic])
        TargetTopics(admin_client(spec.source), admin_client(spec.target), spec.target).ensure(
            {topic: MirroredTopic(topic, 2, f"west.{topic}")}
        )
        progress = copy_task_ranges(spec, [CopyRange(topic, p, 0, 50, f"west.{topic}") for p in (0, 1)], 0)
        assert sorted(p.records for p in progress) == [50, 50]
        copied = consume_all(c.cluster.broker.bootstrap_servers, f"west.{topic}", 2)
        values = sorted(r.value() for records in copied.values() for r in records)
        assert values == sorted(f"v{i}".encode() for i in range(100))
    finally:
        revoke_all(c.cluster, who)


def test_a_token_signed_with_another_key_is_refused_fast_without_printing_it(
    iam: Iam, aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "another-secret-never-printed")
    spec = flow(iam, "any")
    started = time.monotonic()
    with pytest.raises(ConnectionFailure) as failure:
        check_connection(spec.source, timeout_s=30)
    assert time.monotonic() - started < 10, "an authentication failure must stop the wait at once"
    message = str(failure.value)
    assert message.startswith(f"cluster 'west' ({spec.source.bootstrap_servers}): cannot connect with ")
    assert "another-secret-never-printed" not in message and SECRET_KEY not in message


def test_a_token_for_another_region_is_refused(iam: Iam, aws_env: None) -> None:
    data: dict[str, Any] = flow(iam, "any").to_dict()
    data["source"]["config"]["kmirror.msk_iam.region"] = "us-east-1"
    spec = parse_flow_spec(data)
    with pytest.raises(ConnectionFailure):
        check_connection(spec.source, timeout_s=30)
