"""Kerberos against a real MIT KDC on loopback. No broker here speaks GSSAPI (tansu has no
Kerberos), so the chain is proven up to the broker: keytab creation, rendered krb5.conf,
`kinit -kt`, and a GSSAPI-enabled librdkafka accepting the rendered config (creating a client
runs kinit with our keytab against the KDC). The PyPI wheel's refusal is checked too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kmirror.errors import KmirrorError
from kmirror.kerberos import create_keytab
from kmirror.security import client_config, security_problems
from spark_app.security_check import check_client_support
from tests.security.kdc_support import REALM, LocalKdc

pytestmark = pytest.mark.security
ROOT = Path(__file__).resolve().parents[2]
GSSAPI_VENV = ROOT / ".venv-gssapi"
PRINCIPAL = f"mirrormaker/localhost@{REALM}"


@pytest.fixture(scope="module")
def kdc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKdc]:
    with LocalKdc(tmp_path_factory.mktemp("kdc")) as running:
        yield running


@pytest.fixture(scope="module")
def keytab(kdc: LocalKdc) -> Path:
    return create_keytab(PRINCIPAL, kdc.directory / "mirrormaker.keytab", env=kdc.env)


@pytest.fixture(scope="module")
def gssapi_python() -> Path:
    """The GSSAPI-capable venv (built once by scripts/build-gssapi-client.sh, cached in .venv-gssapi)."""
    subprocess.run(["bash", str(ROOT / "scripts/build-gssapi-client.sh"), str(GSSAPI_VENV)], check=True, timeout=600)
    return GSSAPI_VENV / "bin/python"


def _security(kdc: LocalKdc, keytab: Path, principal: str = PRINCIPAL) -> dict[str, Any]:
    security = {"protocol": "SASL_PLAINTEXT",
                "kerberos": {"principal": principal, "keytab": {"file": str(keytab)}, "realm": kdc.realm,
                             "kdcs": kdc.kdcs, "service_name": "kafka"}}  # fmt: skip
    assert security_problems(security, "clusters.dc-old.security") == []
    return security


def _klist(cache: Path, env: dict[str, str]) -> str:
    return subprocess.run(["klist", "-c", f"FILE:{cache}"], env=env, capture_output=True, text=True, timeout=30).stdout


def test_project_keytab_and_rendered_krb5_conf_let_kinit_get_a_ticket(
    kdc: LocalKdc, keytab: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "ccache"
    env = {**os.environ, "KRB5_CONFIG": str(kdc.krb5_conf), "KRB5CCNAME": f"FILE:{cache}"}
    done = subprocess.run(["kinit", "-kt", str(keytab), PRINCIPAL], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    listing = _klist(cache, env)
    assert f"Default principal: {PRINCIPAL}" in listing
    assert f"krbtgt/{REALM}@{REALM}" in listing
    assert "AS_REQ" in kdc.log() and f"{PRINCIPAL} for krbtgt/{REALM}@{REALM}" in kdc.log()


def test_kinit_with_an_unknown_principal_fails(kdc: LocalKdc, keytab: Path, tmp_path: Path) -> None:
    env = {**os.environ, "KRB5_CONFIG": str(kdc.krb5_conf), "KRB5CCNAME": f"FILE:{tmp_path / 'cc'}"}
    done = subprocess.run(
        ["kinit", "-kt", str(keytab), f"nobody@{REALM}"], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode != 0


GSSAPI_CLIENT = """
import json, sys
import confluent_kafka
from kmirror.security import client_config, resolve_references
from spark_app.security_check import check_client_support
security, bootstrap = json.loads(sys.argv[1]), sys.argv[2]
config = client_config(security)
check_client_support("dc-old", config)
resolved = resolve_references(config)  # renders krb5.conf from realm + kdcs and exports KRB5_CONFIG
producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, **resolved})  # librdkafka runs kinit -t keytab
for _ in range(4):
    producer.poll(0.5)  # the first ticket refresh runs on librdkafka's main thread right after creation
print(json.dumps({"created": True, "config": config}))
"""


def _gssapi_client(python: Path, security: dict[str, Any], cache: Path) -> tuple[dict[str, Any], str]:
    """Run GSSAPI_CLIENT in the GSSAPI venv; returns its JSON result and librdkafka's log (stderr)."""
    env = {k: v for k, v in os.environ.items() if k != "KRB5_CONFIG"}
    env.update({"PYTHONPATH": str(ROOT), "KRB5CCNAME": f"FILE:{cache}"})
    done = subprocess.run([str(python), "-c", GSSAPI_CLIENT, json.dumps(security), "127.0.0.1:9"], env=env,
                          capture_output=True, text=True, timeout=120, cwd=str(cache.parent))  # fmt: skip
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1])), done.stderr


def test_gssapi_confluent_kafka_accepts_the_rendered_config(
    kdc: LocalKdc, keytab: Path, gssapi_python: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "librdkafka-ccache"
    result, log = _gssapi_client(gssapi_python, _security(kdc, keytab), cache)
    assert "Kerberos ticket refresh failed" not in log
    assert result == {"created": True, "config": {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "GSSAPI", "sasl.kerberos.service.name": "kafka",
        "sasl.kerberos.principal": PRINCIPAL, "sasl.kerberos.keytab": str(keytab),
        "sasl.kerberos.kinit.cmd": client_config(_security(kdc, keytab))["sasl.kerberos.kinit.cmd"],
        "kmirror.krb5.realm": REALM, "kmirror.krb5.kdcs": kdc.kdcs[0]}}  # fmt: skip
    # librdkafka's kinit put a TGT for our principal into the cache, fetched from our KDC.
    listing = _klist(cache, {**os.environ, "KRB5_CONFIG": str(kdc.krb5_conf)})
    assert f"Default principal: {PRINCIPAL}" in listing


def test_gssapi_client_reports_a_principal_missing_from_the_keytab(
    kdc: LocalKdc, keytab: Path, gssapi_python: Path, tmp_path: Path
) -> None:
    intruder = f"intruder/localhost@{REALM}"
    _, log = _gssapi_client(gssapi_python, _security(kdc, keytab, principal=intruder), tmp_path / "cc")
    assert f"Keytab contains no suitable keys for {intruder}" in log
    assert "Kerberos ticket refresh failed" in log
    assert not (tmp_path / "cc").exists()


def test_pypi_wheel_reports_missing_gssapi_with_the_fix(kdc: LocalKdc, keytab: Path) -> None:
    with pytest.raises(KmirrorError) as failure:
        check_client_support("dc-old", client_config(_security(kdc, keytab)))
    message = str(failure.value)
    assert message.startswith("cluster 'dc-old' needs sasl.mechanisms=GSSAPI, which this confluent-kafka ")
    assert "No provider for SASL mechanism GSSAPI" in message
    assert "pip install --no-binary confluent-kafka confluent-kafka==2.0.2" in message
    assert "apt-get install librdkafka-dev libsasl2-modules-gssapi-mit" in message
    assert sys.executable  # the check ran in this (PyPI wheel) interpreter
