"""Pure parts of the security model: validation messages, translation, references, redaction,
krb5.conf/JAAS rendering and ACL commands."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kmirror.errors import KmirrorError
from kmirror.security.acls import AclGrant, AclSide, kafka_principal, mirror_acl_commands
from kmirror.security.config import client_config, redact, resolve_references
from kmirror.security.kerberos import jaas_kafka_client, jvm_options, render_krb5_conf
from kmirror.security.secret_refs import materialisation
from kmirror.security.security_checks import security_problems

PATH = "clusters.east-1.security"


def _messages(raw: object) -> list[str]:
    return sorted(str(p) for p in security_problems(raw, PATH))


def test_literal_secret_is_rejected_without_echoing_it() -> None:
    raw = {"protocol": "SASL_SSL", "scram": {"mechanism": "SCRAM-SHA-512", "username": "mm", "password": "hunter2"}}
    assert _messages(raw) == [
        "clusters.east-1.security.scram.password: a literal secret is not allowed in the topology file; "
        "use {env: VAR}, {file: PATH}, {k8s_secret: NAME, key: KEY} or {pulumi_config: KEY}"
    ]


def test_every_problem_is_reported_with_its_path() -> None:
    raw = {
        "protocl": "SSL",
        "tls": {"ca": {"file": "/ca.pem"}, "cert": {"file": "/c.pem"}, "verify_hostnme": True},
        "kerberos": {"keytab": {"env": "KT"}},
    }
    assert _messages(raw) == [
        "clusters.east-1.security.kerberos.keytab: this field must be a file; "
        "use {file: PATH}, {k8s_secret: ...} or {aws_secret: ...}",
        "clusters.east-1.security.kerberos.principal: required key is missing",
        "clusters.east-1.security.protocl: unknown key (did you mean 'protocol'?)",
        "clusters.east-1.security.protocol: required key is missing; one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL",
        "clusters.east-1.security.tls.verify_hostnme: unknown key (did you mean 'verify_hostname'?)",
        "clusters.east-1.security.tls: cert and key go together: give both (a client certificate) or neither",
    ]


def test_protocol_and_mechanism_must_agree() -> None:
    raw = {
        "protocol": "PLAINTEXT",
        "tls": {"ca": {"file": "/ca.pem"}},
        "scram": {"mechanism": "SCRAM-SHA-1", "username": "mm", "password": {"env": "PW"}},
    }
    assert _messages(raw) == [
        "clusters.east-1.security.scram.mechanism: must be one of SCRAM-SHA-256, SCRAM-SHA-512, got 'SCRAM-SHA-1' "
        "(did you mean 'SCRAM-SHA-512'?)",
        "clusters.east-1.security.scram: needs protocol SASL_PLAINTEXT or SASL_SSL, but protocol is PLAINTEXT",
        "clusters.east-1.security.tls: needs protocol SSL or SASL_SSL, but protocol is PLAINTEXT",
    ]
    assert _messages({"protocol": "SASL_SSL"}) == [
        "clusters.east-1.security: protocol SASL_SSL needs one of the sections "
        "kerberos, scram, plain, oauthbearer, msk_iam"
    ]


def test_malformed_references() -> None:
    raw = {
        "protocol": "SSL",
        "tls": {"ca": {"file": "ca.pem"}, "cert": {"k8s_secret": "East_TLS"}, "key": {"file": "/k", "env": "K"}},
    }
    assert _messages(raw) == [
        "clusters.east-1.security.tls.ca.file: must be an absolute path, got 'ca.pem'",
        "clusters.east-1.security.tls.cert.key: required key is missing",
        "clusters.east-1.security.tls.key: must have exactly one of file, env, k8s_secret, aws_secret, pulumi_config; "
        "got keys ['env', 'file']",
    ]


def test_client_config_for_every_reference_kind() -> None:
    arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kafka/west-AbCdEf"
    security = {
        "protocol": "SASL_SSL",
        "tls": {
            "ca": {"aws_secret": arn, "key": "ca.pem"},
            "cert": {"env": "CERT_PEM"},
            "key": {"k8s_secret": "east-tls", "key": "key.pem"},
            "key_password": {"pulumi_config": "eastKeyPw"},
            "verify_hostname": False,
        },
        "scram": {"mechanism": "SCRAM-SHA-512", "username": "mm", "password": {"env": "SCRAM_PW"}},
    }
    assert security_problems(security, PATH) == []
    assert client_config(security) == {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": "/etc/kmirror/secrets/kafka-west-abcdef/ca.pem",
        "ssl.certificate.pem": "${env:CERT_PEM}",
        "ssl.key.location": "/etc/kmirror/secrets/east-tls/key.pem",
        "ssl.key.password": "${file:/etc/kmirror/secrets/kmirror-cfg-eastkeypw/value}",
        "ssl.endpoint.identification.algorithm": "none",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "mm",
        "sasl.password": "${env:SCRAM_PW}",
    }
    assert materialisation({"pulumi_config": "eastKeyPw"}) is not None
    assert materialisation({"file": "/x"}) is None


def test_resolve_references_reads_files_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pw").write_text("from-file\n")
    monkeypatch.setenv("KMIRROR_TEST_PW", "from-env")
    config = {
        "sasl.password": f"${{file:{tmp_path / 'pw'}}}",
        "ssl.key.password": "${env:KMIRROR_TEST_PW}",
        "acks": "all",
    }
    assert resolve_references(config) == {"sasl.password": "from-file", "ssl.key.password": "from-env", "acks": "all"}


def test_missing_reference_names_property_and_reference(tmp_path: Path) -> None:
    with pytest.raises(KmirrorError) as failure:
        resolve_references({"sasl.password": f"${{file:{tmp_path}/absent}}"})
    assert str(failure.value) == (
        f"sasl.password: reference ${{file:{tmp_path}/absent}} cannot be resolved: No such file or directory; "
        "create the file (mount the Secret / run the EMR bootstrap) or fix the reference"
    )


def test_realm_and_kdcs_render_krb5_conf_and_export_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KRB5_CONFIG", "placeholder")  # so that monkeypatch restores the original state,
    monkeypatch.delenv("KRB5_CONFIG")  # which resolve_references changes below
    monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmp_path))
    # this process's private directory is made under tmp_path here: not kept for the tests after this one
    monkeypatch.setattr("kmirror.security.kerberos._private_dir", None)
    config = {"sasl.mechanisms": "GSSAPI", "kmirror.krb5.realm": "EX.COM", "kmirror.krb5.kdcs": "kdc1,kdc2:750"}
    assert resolve_references(config) == {"sasl.mechanisms": "GSSAPI"}
    assert Path(os.environ["KRB5_CONFIG"]).read_text() == render_krb5_conf("EX.COM", ["kdc1", "kdc2:750"])
    assert "    kdc = kdc1:88\n    kdc = kdc2:750\n" in render_krb5_conf("EX.COM", ["kdc1", "kdc2:750"])
    with pytest.raises(KmirrorError) as conflict:  # one process, one krb5.conf
        resolve_references({"kmirror.krb5.realm": "OTHER.COM", "kmirror.krb5.kdcs": "kdc9"})
    assert str(conflict.value).startswith("kmirror.krb5.conf: ")
    assert str(conflict.value).endswith(
        "already used by this process; list every realm in one krb5.conf and reference it from both clusters"
    )


def test_redact_hides_sensitive_values_recursively() -> None:
    obj = {
        "sasl.password": "a",
        "nested": [{"ssl.key.password": "b", "ssl.key.pem": "c"}, ("x", {"clientSecret": "d"})],
        "scram": {"password": {"file": "/pw"}},
        "sasl.username": "mm",
        "sasl.jaas.config": 'ScramLoginModule required username="mm" password="e";',
    }
    assert redact(obj) == {
        "sasl.password": "<redacted>",
        "sasl.jaas.config": "<redacted>",
        "nested": [
            {"ssl.key.password": "<redacted>", "ssl.key.pem": "<redacted>"},
            ("x", {"clientSecret": "<redacted>"}),
        ],
        "scram": {"password": "<redacted>"},
        "sasl.username": "mm",
    }


@given(
    st.dictionaries(
        st.sampled_from(["sasl.password", "ssl.keystore.password", "db_secret", "acks"]),
        st.text(min_size=8, alphabet="abcdefgh"),
        min_size=1,
    )
)
def test_redacted_output_never_contains_a_sensitive_value(config: dict[str, str]) -> None:
    shown = repr(redact({"outer": config}))
    for key, value in config.items():
        if key != "acks" and value != config.get("acks"):
            assert value not in shown


def test_jaas_and_jvm_options_for_jvm_users() -> None:
    jaas = jaas_kafka_client("mirrormaker/mm1@EX.COM", "/etc/kmirror/secrets/k/keytab")
    assert "com.sun.security.auth.module.Krb5LoginModule required" in jaas
    assert "useKeyTab=true\n  storeKey=true" in jaas
    assert 'keyTab="/etc/kmirror/secrets/k/keytab"' in jaas and 'principal="mirrormaker/mm1@EX.COM"' in jaas
    assert jvm_options("/k/krb5.conf", "/k/jaas.conf") == [
        "-Djava.security.krb5.conf=/k/krb5.conf",
        "-Djava.security.auth.login.config=/k/jaas.conf",
    ]


def test_acl_commands_for_the_mirror_principal() -> None:
    security = {"protocol": "SASL_PLAINTEXT", "kerberos": {"principal": "mirrormaker/mm1@EX.COM"}}
    principal = kafka_principal(security)
    assert principal == "User:mirrormaker"
    grants = [
        AclGrant("source", "TOPIC", "orders", "LITERAL", ("Read", "Describe"), "the mirrored topic"),
        AclGrant("target", "TOPIC", "west-1.", "PREFIXED", ("Create", "Write"), "the remote topics"),
        AclGrant("target", "TRANSACTIONAL_ID", "kmirror-w-to-e", "PREFIXED", ("Write",), "transactions"),
        AclGrant("source", "CLUSTER", "kafka-cluster", "LITERAL", ("Describe",), "ACL sync"),
    ]
    commands = mirror_acl_commands(principal, AclSide("src:9092", "/etc/admin.properties"), AclSide("dst:9092"), grants)
    assert commands == [
        "kafka-acls.sh --bootstrap-server src:9092 --command-config /etc/admin.properties --add --allow-principal "
        "User:mirrormaker --operation Read --operation Describe --topic orders",
        "kafka-acls.sh --bootstrap-server dst:9092 --add --allow-principal User:mirrormaker --operation Create "
        "--operation Write --topic west-1. --resource-pattern-type prefixed",
        "kafka-acls.sh --bootstrap-server dst:9092 --add --allow-principal User:mirrormaker --operation Write "
        "--transactional-id kmirror-w-to-e --resource-pattern-type prefixed",
        "kafka-acls.sh --bootstrap-server src:9092 --command-config /etc/admin.properties --add --allow-principal "
        "User:mirrormaker --operation Describe --cluster",
    ]
    stray = AclGrant("middle", "TOPIC", "x", "LITERAL", (), "")
    with pytest.raises(KmirrorError, match="side 'middle' is neither 'source' nor 'target'"):
        mirror_acl_commands(principal, AclSide("s"), AclSide("t"), [stray])
    with pytest.raises(KmirrorError):
        kafka_principal({"protocol": "SSL"})
