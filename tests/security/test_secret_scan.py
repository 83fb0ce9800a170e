"""Scan: `kmirror validate` / `kmirror plan --format json` on a topology whose TLS and SCRAM
references point at files holding known secrets never print those secrets (only references)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.security
SCRAM_SECRET = "scram-scan-secret-Q1w2E3r4"
KEY_PASSWORD_SECRET = "key-password-scan-secret-Z9x8"


def _topology(tmp_path: Path, scram_password: object) -> Path:
    (tmp_path / "scram-password").write_text(SCRAM_SECRET + "\n")
    (tmp_path / "key-password").write_text(KEY_PASSWORD_SECRET + "\n")
    topology = {
        "clusters": {
            "west-1": {"bootstrap_servers": "b1-west:9093", "datacenter": "west",
                       "security": {"protocol": "SASL_SSL", "tls": {"ca": {"file": str(tmp_path / "ca.pem")}},
                                    "scram": {"mechanism": "SCRAM-SHA-512", "username": "mirrormaker",
                                              "password": scram_password}}},
            "east-1": {"bootstrap_servers": "b1-east:9093", "datacenter": "east",
                       "security": {"protocol": "SSL", "tls": {
                           "ca": {"file": str(tmp_path / "ca.pem")}, "cert": {"file": str(tmp_path / "mm.crt")},
                           "key": {"file": str(tmp_path / "mm.key")},
                           "key_password": {"file": str(tmp_path / "key-password")}}}},
        },
        "topologies": [{"name": "dr", "pattern": "active-passive", "primary": "west-1", "standby": "east-1"}],
    }  # fmt: skip
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(topology))
    return path


def _kmirror(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kmirror.cli", *args], capture_output=True, text=True, timeout=120)


def test_plan_and_validate_show_references_never_secrets(tmp_path: Path) -> None:
    topology = _topology(tmp_path, {"file": str(tmp_path / "scram-password")})
    validate = _kmirror("validate", "--topology", str(topology))
    plan = _kmirror("plan", "--topology", str(topology), "--all", "--format", "json")
    assert validate.returncode == 0, validate.stderr
    assert plan.returncode == 0, plan.stderr
    for output in (validate.stdout, validate.stderr, plan.stdout, plan.stderr):
        assert SCRAM_SECRET not in output
        assert KEY_PASSWORD_SECRET not in output
    [flow] = json.loads(plan.stdout)["flows"]
    assert flow["id"] == "west-1->east-1"
    assert str(tmp_path / "scram-password") in json.dumps(flow["source_security"])  # the reference, not the value
    assert str(tmp_path / "key-password") in json.dumps(flow["target_security"])


def test_a_literal_secret_is_refused_without_being_echoed(tmp_path: Path) -> None:
    topology = _topology(tmp_path, SCRAM_SECRET)
    for args in (("validate",), ("plan", "--all", "--format", "json")):
        done = _kmirror(*args, "--topology", str(topology))
        assert done.returncode == 2
        assert (
            "clusters.west-1.security.scram.password: a literal secret is not allowed in the topology file; "
            "use {env: VAR}, {file: PATH}, {k8s_secret: NAME, key: KEY} or {pulumi_config: KEY}"
        ) in done.stderr
        assert SCRAM_SECRET not in done.stdout + done.stderr
