"""SCRAM against tansu. tansu 0.6.0 cannot be given a first SCRAM user that a client could log in
with (see docs/security.md: with --authentication it refuses the unauthenticated
AlterUserScramCredentials that creates one; without it, users live in memory only, are not written
to S3 storage either, and SASL is off), so this proves the rendered config, the real SASL exchanges
(plain and inside TLS) up to the broker's refusal of the unknown user, that the app reports that
refusal quickly, naming the cluster, without the password, and that a refused TCP connection is
retried rather than taken for an authentication failure.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kmirror.errors import ConnectionFailure
from kmirror.flow.spec import ClusterEndpoint
from kmirror.security.config import client_config
from kmirror.security.security_checks import security_problems
from kmirror_cli.local_brokers import LocalBroker, free_port, tansu_binary, wait_for_port
from kmirror_engine.clients.security_check import check_connection
from tests.security.app_run import run_once
from tests.security.tls_support import Stunnel, TestCa

pytestmark = pytest.mark.security
PASSWORD = "scram-pass-Zr8-never-printed"
FAIL_FAST_S = 5.0


@pytest.fixture
def password_file(tmp_path: Path) -> Path:
    path = tmp_path / "scram-password"
    path.write_text(PASSWORD + "\n")
    return path


def _security(password_file: Path, mechanism: str = "SCRAM-SHA-256") -> dict[str, Any]:
    scram = {"mechanism": mechanism, "username": "mirrormaker", "password": {"file": str(password_file)}}
    security: dict[str, Any] = {"protocol": "SASL_PLAINTEXT", "scram": scram}
    assert security_problems(security, "clusters.west-1.security") == []
    return security


@pytest.fixture(scope="module")
def authenticating_broker() -> Iterator[str]:
    """tansu with --authentication (SCRAM on, no users: tansu cannot create the first one)."""
    port = free_port()
    listener = f"tcp://127.0.0.1:{port}"
    cmd = [
        tansu_binary(),
        "broker",
        "--cluster-id",
        "kmirror-scram",
        "--authentication",
        "--listener-url",
        listener,
        "--advertised-listener-url",
        listener,
    ]
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for_port(port)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_tansu_refuses_to_create_the_first_scram_user_when_authentication_is_on(authenticating_broker: str) -> None:
    """The reason no SCRAM login can succeed here (if this starts passing, write the real login test)."""
    done = subprocess.run(
        [
            tansu_binary(),
            "user",
            "create",
            "--broker",
            f"tcp://{authenticating_broker}",
            "--mechanism",
            "scram256",
            "mirrormaker",
            PASSWORD,
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0
    assert "early eof" in done.stdout + done.stderr


def test_rendered_scram_config_references_the_password(password_file: Path) -> None:
    assert client_config(_security(password_file, "SCRAM-SHA-512")) == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "mirrormaker",
        "sasl.password": f"${{file:{password_file}}}",
    }


def test_scram_login_refused_by_the_broker_fails_fast(authenticating_broker: str, password_file: Path) -> None:
    endpoint = ClusterEndpoint("west-1", authenticating_broker, client_config(_security(password_file)))
    started = time.monotonic()
    with pytest.raises(ConnectionFailure) as failure:
        check_connection(endpoint, timeout_s=30)
    assert time.monotonic() - started < FAIL_FAST_S
    message = str(failure.value)
    assert message.startswith(
        f"cluster 'west-1' ({authenticating_broker}): cannot connect with security.protocol=SASL_PLAINTEXT"
    )
    assert "SASL SCRAM authentication failed: broker responded with unknown-user" in message
    assert message.endswith(
        "check the SASL credentials (scram or plain username/password reference, oauthbearer "
        "client id/secret, token audience and scope, kerberos principal/keytab)"
    )
    assert PASSWORD not in message


def test_broker_without_sasl_fails_the_handshake_fast(password_file: Path) -> None:
    with LocalBroker("scram-plain") as broker:
        endpoint = ClusterEndpoint("east-1", broker.bootstrap_servers, client_config(_security(password_file)))
        started = time.monotonic()
        with pytest.raises(ConnectionFailure) as failure:
            check_connection(endpoint, timeout_s=30)
    assert time.monotonic() - started < FAIL_FAST_S
    assert "cluster 'east-1'" in str(failure.value)
    assert "Unsupported SASL mechanism" in str(failure.value)
    assert PASSWORD not in str(failure.value)


def test_scram_over_tls_verifies_the_broker_then_reaches_the_scram_exchange(
    authenticating_broker: str, password_file: Path, tmp_path: Path
) -> None:
    """SASL_SSL: stunnel4 (TLS, our CA) in front of the authenticating tansu."""
    ca = TestCa(tmp_path)
    port = free_port()
    security = {**_security(password_file), "protocol": "SASL_SSL", "tls": {"ca": {"file": str(ca.cert_path)}}}
    assert security_problems(security, "clusters.west-1.security") == []
    endpoint = ClusterEndpoint("west-1", f"127.0.0.1:{port}", client_config(security))
    backend = int(authenticating_broker.rsplit(":", 1)[1])
    with (
        Stunnel(tmp_path, "scram", port, backend, ca.issue("broker", server=True)),
        pytest.raises(ConnectionFailure) as failure,
    ):
        check_connection(endpoint, timeout_s=30)
    message = str(failure.value)
    assert message.startswith(f"cluster 'west-1' (127.0.0.1:{port}): cannot connect with security.protocol=SASL_SSL")
    assert "SASL SCRAM authentication failed: broker responded with unknown-user" in message  # TLS was accepted
    assert PASSWORD not in message


def test_a_refused_sasl_connection_is_retried_not_mistaken_for_an_authentication_failure(password_file: Path) -> None:
    """librdkafka names the broker `sasl_plaintext://host:port`; that alone must not make an error fatal."""
    endpoint = ClusterEndpoint("west-1", f"127.0.0.1:{free_port()}", client_config(_security(password_file)))
    started = time.monotonic()
    with pytest.raises(ConnectionFailure) as failure:
        check_connection(endpoint, timeout_s=3)
    assert time.monotonic() - started >= 2.9
    assert "Connection refused" in str(failure.value)
    assert str(failure.value).endswith("; check bootstrap_servers and that the brokers are reachable from here")


def test_the_app_reports_the_refused_scram_login_and_exits(
    authenticating_broker: str, password_file: Path, tmp_path: Path
) -> None:
    """`python -m spark_app --once` with a SCRAM source: one line naming the cluster, exit 1, no password."""
    config = client_config(_security(password_file, "SCRAM-SHA-512"))
    done, took_s = run_once(tmp_path, ("west-1", authenticating_broker), config, ("east-1", authenticating_broker))
    assert done.returncode == 1, done.stderr
    assert took_s < 20
    assert done.stderr.startswith(
        f"kmirror run: cluster 'west-1' ({authenticating_broker}): cannot connect with "
        "security.protocol=SASL_PLAINTEXT: "
    )
    assert "SASL SCRAM authentication failed: broker responded with unknown-user" in done.stderr
    assert PASSWORD not in done.stdout + done.stderr and "Traceback" not in done.stderr
