"""SCRAM against tansu. tansu 0.6.0 cannot be given a first SCRAM user that a client could log in
with (see docs/security.md), so this proves the rendered config, the real SASL exchanges up to the
broker's refusal, and that the refusal is reported quickly, naming the cluster, without the password.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kmirror.errors import ConnectionFailure
from kmirror.flowspec import ClusterEndpoint
from kmirror.local_brokers import LocalBroker, free_port, tansu_binary, wait_for_port
from kmirror.security import client_config, security_problems
from spark_app.security_check import check_connection

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
    cmd = [tansu_binary(), "broker", "--cluster-id", "kmirror-scram", "--authentication",
           "--listener-url", listener, "--advertised-listener-url", listener]  # fmt: skip
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for_port(port)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_rendered_scram_config_references_the_password(password_file: Path) -> None:
    assert client_config(_security(password_file, "SCRAM-SHA-512")) == {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "mirrormaker", "sasl.password": f"${{file:{password_file}}}"}  # fmt: skip


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
    assert message.endswith("check the SASL credentials (scram username/password reference, kerberos principal/keytab)")
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
