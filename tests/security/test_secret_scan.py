"""Scan: every output of `kmirror validate`, `kmirror plan` (all formats), `kmirror diff` (all
formats) and the flow specs `flow_spec_for` hands the app, for a topology with TLS, SCRAM and
Kerberos references pointing at files / environment variables that hold known secrets, shows
the references and never a secret value."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kmirror.estate.planner import flow_spec_for, load_topology, plan_topology
from kmirror.flow.spec import parse_flow_spec
from kmirror.security.config import redact

pytestmark = pytest.mark.security
SCRAM_SECRET = "scram-scan-secret-Q1w2E3r4"
SCRAM_ENV_SECRET = "scram-env-scan-secret-T5y6"
KEY_PASSWORD_SECRET = "key-password-scan-secret-Z9x8"
KEY_PEM_SECRET = "MIGHAgEAMBMGByqGSM49-scan-secret-key-body"
KEYTAB_SECRET = "keytab-scan-secret-P0o9"
SECRETS = (SCRAM_SECRET, SCRAM_ENV_SECRET, KEY_PASSWORD_SECRET, KEY_PEM_SECRET, KEYTAB_SECRET)
SCRAM_ENV = "KMIRROR_SCAN_SCRAM_PASSWORD"
PRINCIPAL = "mirrormaker/mm1.dc.example.com@DC.EXAMPLE.COM"


def _write_secrets(directory: Path) -> dict[str, Path]:
    files = {
        "scram": directory / "scram-password",
        "key_password": directory / "key-password",
        "key": directory / "mm.key",
        "keytab": directory / "mm.keytab",
        "ca": directory / "ca.pem",
        "cert": directory / "mm.crt",
    }
    files["scram"].write_text(SCRAM_SECRET + "\n")
    files["key_password"].write_text(KEY_PASSWORD_SECRET + "\n")
    pem = ("-----BEGIN ENCRYPTED PRIVATE KEY-----", KEY_PEM_SECRET, "-----END ENCRYPTED PRIVATE KEY-----")
    files["key"].write_text("\n".join(pem) + "\n")
    files["keytab"].write_bytes(b"\x05\x02" + KEYTAB_SECRET.encode())
    files["ca"].write_text("-----BEGIN CERTIFICATE-----\npublic\n-----END CERTIFICATE-----\n")
    files["cert"].write_text("-----BEGIN CERTIFICATE-----\npublic\n-----END CERTIFICATE-----\n")
    return files


def _topology(directory: Path, scram_password: object, *, head: bool = False) -> Path:
    """west-1: SCRAM over TLS; east-1: mutual TLS with an encrypted key; dc-old: Kerberos.
    `head` changes every kind of reference (file -> env, file -> k8s_secret, realm -> krb5_conf)."""
    f = {name: str(path) for name, path in _write_secrets(directory).items()}
    keytab: dict[str, Any] = {"k8s_secret": "dc-old-kerberos", "key": "keytab"} if head else {"file": f["keytab"]}
    kerberos: dict[str, Any] = {"principal": PRINCIPAL, "keytab": keytab, "service_name": "kafka"}
    if head:
        kerberos["krb5_conf"] = {"k8s_secret": "dc-old-kerberos", "key": "krb5.conf"}
    else:
        kerberos.update({"realm": "DC.EXAMPLE.COM", "kdcs": ["kdc1.dc.example.com", "kdc2.dc.example.com:88"]})
    topology = {
        "clusters": {
            "west-1": {
                "bootstrap_servers": "b1-west:9093",
                "datacenter": "west",
                "security": {
                    "protocol": "SASL_SSL",
                    "tls": {"ca": {"file": f["ca"]}},
                    "scram": {"mechanism": "SCRAM-SHA-512", "username": "mirrormaker", "password": scram_password},
                },
            },
            "east-1": {
                "bootstrap_servers": "b1-east:9093",
                "datacenter": "east",
                "security": {
                    "protocol": "SSL",
                    "tls": {
                        "ca": {"file": f["ca"]},
                        "cert": {"file": f["cert"]},
                        "key": {"file": f["key"]},
                        "key_password": {"file": f["key_password"]},
                    },
                },
            },
            "dc-old": {
                "bootstrap_servers": "kafka1.dc.example.com:9092",
                "datacenter": "dc",
                "security": {"protocol": "SASL_PLAINTEXT", "kerberos": kerberos},
            },
        },
        "topologies": [
            {"name": "dr", "pattern": "active-passive", "primary": "west-1", "standby": "east-1"},
            {"name": "migrate", "pattern": "custom", "flows": ["dc-old->west-1"]},
        ],
    }
    path = directory / ("head.yaml" if head else "topology.yaml")
    path.write_text(yaml.safe_dump(topology))
    return path


def _kmirror(*args: str) -> subprocess.CompletedProcess[str]:
    # The environment holds a secret too: a reference to it must never be resolved by plan/diff.
    env = {**os.environ, SCRAM_ENV: SCRAM_ENV_SECRET}
    return subprocess.run(
        [sys.executable, "-m", "kmirror_cli.cli", *args], capture_output=True, text=True, timeout=120, env=env
    )


def _assert_no_secret(*outputs: str) -> None:
    for output in outputs:
        for secret in SECRETS:
            assert secret not in output


@pytest.fixture
def topologies(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "head").mkdir()
    base = _topology(tmp_path, {"file": str(tmp_path / "scram-password")})
    head = _topology(tmp_path / "head", {"env": SCRAM_ENV}, head=True)
    return base, head


def test_validate_and_plan_in_every_format_show_references_never_secrets(
    topologies: tuple[Path, Path], tmp_path: Path
) -> None:
    base, _ = topologies
    validate = _kmirror("validate", "--topology", str(base))
    assert validate.returncode == 0, validate.stderr
    _assert_no_secret(validate.stdout, validate.stderr)
    for fmt in ("text", "json", "mermaid", "dot"):
        plan = _kmirror("plan", "--topology", str(base), "--all", "--format", fmt)
        assert plan.returncode == 0, plan.stderr
        _assert_no_secret(plan.stdout, plan.stderr)
    plan = json.loads(_kmirror("plan", "--topology", str(base), "--all", "--format", "json").stdout)
    flows = {flow["id"]: flow for flow in plan["flows"]}
    assert sorted(flows) == ["dc-old->west-1", "west-1->east-1"]
    dr, migrate = flows["west-1->east-1"], flows["dc-old->west-1"]
    assert dr["source_security"]["scram"]["password"] == {"file": str(tmp_path / "scram-password")}
    assert dr["target_security"]["tls"]["key_password"] == {"file": str(tmp_path / "key-password")}
    assert migrate["source_security"]["kerberos"]["keytab"] == {"file": str(tmp_path / "mm.keytab")}


def test_diff_in_every_format_shows_changed_references_never_secrets(topologies: tuple[Path, Path]) -> None:
    base, head = topologies
    outputs = {}
    for fmt in ("text", "markdown", "json"):
        diff = _kmirror("diff", str(base), str(head), "--format", fmt)
        assert diff.returncode == 0, diff.stderr
        _assert_no_secret(diff.stdout, diff.stderr)
        outputs[fmt] = diff.stdout
    assert (
        f"source_security.scram.password: {{file: {base.parent / 'scram-password'}}} -> {{env: {SCRAM_ENV}}}"
    ) in outputs["text"]
    changes = {
        (flow["id"], change["field"]): (change["old"], change["new"])
        for dc in json.loads(outputs["json"])["datacenters"].values()
        for flow in dc["changed"]
        for change in flow["changes"]
    }
    assert changes[("west-1->east-1", "source_security.scram.password")] == (
        {"file": str(base.parent / "scram-password")},
        {"env": SCRAM_ENV},
    )
    assert changes[("dc-old->west-1", "source_security.kerberos.keytab")] == (
        {"file": str(base.parent / "mm.keytab")},
        {"k8s_secret": "dc-old-kerberos", "key": "keytab"},
    )
    assert changes[("dc-old->west-1", "source_security.kerberos.realm")] == ("DC.EXAMPLE.COM", None)


def test_flow_specs_for_the_app_carry_references_never_secrets(
    topologies: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(SCRAM_ENV, SCRAM_ENV_SECRET)
    base, head = topologies
    specs = {}
    for path in (base, head):
        topology = load_topology(str(path))
        for flow in plan_topology(topology).flows:
            spec = flow_spec_for(topology, flow, "s3://bucket/checkpoints")
            parsed = parse_flow_spec(json.loads(json.dumps(spec)))  # what the app loads
            _assert_no_secret(json.dumps(spec), repr(parsed), repr(redact(parsed.source.client_config())))
            specs[(path.name, flow.id)] = spec
    west = specs[("topology.yaml", "west-1->east-1")]
    assert west["source"]["config"]["sasl.password"] == f"${{file:{tmp_path / 'scram-password'}}}"
    assert west["target"]["config"]["ssl.key.password"] == f"${{file:{tmp_path / 'key-password'}}}"
    assert west["target"]["config"]["ssl.key.location"] == str(tmp_path / "mm.key")
    assert specs[("head.yaml", "west-1->east-1")]["source"]["config"]["sasl.password"] == f"${{env:{SCRAM_ENV}}}"
    old = specs[("topology.yaml", "dc-old->west-1")]["source"]["config"]
    assert {k: old[k] for k in ("sasl.mechanisms", "sasl.kerberos.keytab", "kmirror.krb5.realm")} == {
        "sasl.mechanisms": "GSSAPI",
        "sasl.kerberos.keytab": str(tmp_path / "mm.keytab"),
        "kmirror.krb5.realm": "DC.EXAMPLE.COM",
    }
    new = specs[("head.yaml", "dc-old->west-1")]["source"]["config"]
    assert new["sasl.kerberos.keytab"] == "/etc/kmirror/secrets/dc-old-kerberos/keytab"
    assert new["kmirror.krb5.conf"] == "/etc/kmirror/secrets/dc-old-kerberos/krb5.conf"


def test_a_literal_secret_is_refused_without_being_echoed(tmp_path: Path) -> None:
    topology = _topology(tmp_path, SCRAM_SECRET)
    for args in (("validate",), ("plan", "--all", "--format", "json")):
        done = _kmirror(*args, "--topology", str(topology))
        assert done.returncode == 2
        assert (
            "clusters.west-1.security.scram.password: a literal secret is not allowed in the topology file; "
            "use {env: VAR}, {file: PATH}, {k8s_secret: NAME, key: KEY} or {pulumi_config: KEY}"
        ) in done.stderr
        _assert_no_secret(done.stdout, done.stderr)
    (tmp_path / "base").mkdir()
    base = _topology(tmp_path / "base", {"file": str(tmp_path / "scram-password")})
    diff = _kmirror("diff", str(base), str(topology), "--format", "markdown")
    assert diff.returncode == 2
    assert "clusters.west-1.security.scram.password: a literal secret is not allowed" in diff.stderr
    _assert_no_secret(diff.stdout, diff.stderr)
