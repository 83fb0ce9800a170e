"""KerberosSecret / TlsSecret / ScramSecret / TestCertificateAuthority under Pulumi mocks: the
values reach only the Secret resources, as pulumi secrets; component outputs are names and paths.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pulumi
import pytest

pytestmark = pytest.mark.security
PASSWORD = "scram-pw-0xDEADBEEF"
KEY_PEM = "-----BEGIN PRIVATE KEY-----\nnot-a-real-key-4242\n-----END PRIVATE KEY-----\n"
KEYTAB_B64 = "BQIAAABHAAIAC0tNSVJST1IuVEVTVA=="


class RecordingMocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.resources: list[tuple[str, str, dict[str, Any]]] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        self.resources.append((args.typ, args.name, dict(args.inputs)))
        outputs = dict(args.inputs)
        if args.typ == "aws:secretsmanager/secret:Secret":
            outputs["arn"] = f"arn:aws:secretsmanager:eu-west-1:123456789012:secret:{args.inputs['name']}-AbCdEf"
        if args.typ == "tls:index/privateKey:PrivateKey":
            outputs["privateKeyPem"] = KEY_PEM
        if args.typ in ("tls:index/selfSignedCert:SelfSignedCert", "tls:index/locallySignedCert:LocallySignedCert"):
            outputs["certPem"] = f"CERT({args.name})"
        if args.typ == "tls:index/certRequest:CertRequest":
            outputs["certRequestPem"] = f"CSR({args.name})"
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None

    def of_type(self, typ: str) -> list[tuple[str, dict[str, Any]]]:
        return [(name, inputs) for t, name, inputs in self.resources if t == typ]


@pytest.fixture
def mocks() -> Iterator[RecordingMocks]:
    recording = RecordingMocks()
    pulumi.runtime.set_mocks(recording, project="kafka-mirror", stack="test", preview=False)
    yield recording


def _secret(value: Any) -> Any:
    """The payload of a value the SDK sent to the engine as a secret; fails when it was sent in clear."""
    from pulumi.runtime import rpc

    assert isinstance(value, dict) and value.get(rpc._special_sig_key) == rpc._special_secret_sig, value
    return value["value"]


def _resolve(output: pulumi.Output[Any]) -> tuple[Any, bool]:
    """(value, is_secret) of an Output, inside the mocked engine's event loop."""
    import asyncio

    async def both() -> tuple[Any, bool]:
        return await output.future(), bool(await output.is_secret())

    return asyncio.get_event_loop().run_until_complete(both())


@pulumi.runtime.test
def test_scram_secret_on_kubernetes_keeps_the_password_secret(mocks: RecordingMocks) -> Any:
    from kafka_mirror.secrets.scram import ScramSecret, ScramSecretArgs

    scram = ScramSecret("east-scram", ScramSecretArgs(username="mirrormaker", password=pulumi.Output.secret(PASSWORD)))

    def check(values: list[Any]) -> None:
        secret_name, mount_path, key = values
        assert (secret_name, mount_path, key) == (
            "kmirror-east-scram",
            "/etc/kmirror/secrets/kmirror-east-scram/",
            "password",
        )
        [(name, inputs)] = mocks.of_type("kubernetes:core/v1:Secret")
        assert name == "east-scram-secret"
        assert inputs["metadata"]["name"] == "kmirror-east-scram" and inputs["metadata"]["namespace"] == "kafka-mirror"
        assert _secret(inputs["stringData"]) == {"username": "mirrormaker", "password": PASSWORD}
        for typ, _, other in mocks.resources:
            if typ != "kubernetes:core/v1:Secret":
                assert PASSWORD not in json.dumps(other, default=str)

    done = pulumi.Output.all(scram.secret_name, scram.mount_path, scram.password_key, scram.secret_resource.id)
    return done.apply(lambda values: check(values[:3]))


@pulumi.runtime.test
def test_component_outputs_are_names_never_values(mocks: RecordingMocks) -> Any:
    from kafka_mirror.secrets.kerberos import KerberosSecret, KerberosSecretArgs
    from kafka_mirror.secrets.tls import TlsSecret, TlsSecretArgs

    krb = KerberosSecret(
        "dc-old-kerberos",
        KerberosSecretArgs(
            principal="mirrormaker/mm.example.com@EXAMPLE.COM",
            keytab_b64=pulumi.Output.secret(KEYTAB_B64),
            realm="EXAMPLE.COM",
            kdcs=["kdc1.example.com", "kdc2.example.com:8888"],
        ),
    )
    tls = TlsSecret(
        "east-tls",
        TlsSecretArgs(
            ca_pem="CA",
            cert_pem="CERT",
            key_pem=pulumi.Output.secret(KEY_PEM),
            key_password=pulumi.Output.secret(PASSWORD),
        ),
    )
    outputs = [
        krb.secret_name,
        krb.mount_path,
        krb.principal,
        krb.keytab_path,
        krb.krb5_conf_path,
        tls.secret_name,
        tls.mount_path,
        tls.keys,
        krb.secret_resource.id,
        tls.secret_resource.id,
    ]

    def check(values: list[Any]) -> None:
        text = json.dumps(values)
        for secret in (KEYTAB_B64, KEY_PEM, PASSWORD):
            assert secret not in text
        assert values[3] == "/etc/kmirror/secrets/kmirror-dc-old-kerberos/keytab"
        assert values[7] == ["ca.pem", "cert.pem", "key-password", "key.pem"]
        secrets = dict(mocks.of_type("kubernetes:core/v1:Secret"))
        assert _secret(secrets["dc-old-kerberos-secret"]["data"]) == {"keytab": KEYTAB_B64}
        assert "kdc = kdc2.example.com:8888" in _secret(secrets["dc-old-kerberos-secret"]["stringData"])["krb5.conf"]
        assert _secret(secrets["east-tls-secret"]["stringData"])["key.pem"] == KEY_PEM

    return pulumi.Output.all(*outputs).apply(check)


@pulumi.runtime.test
def test_scram_secret_on_aws_goes_to_secrets_manager_as_a_secret(mocks: RecordingMocks) -> Any:
    from kafka_mirror.secrets.scram import ScramSecret, ScramSecretArgs
    from kafka_mirror.secrets.store import SecretStoreArgs

    scram = ScramSecret(
        "west-scram",
        ScramSecretArgs(username="mm", password=pulumi.Output.secret(PASSWORD), store=SecretStoreArgs(target="aws")),
    )
    assert scram.secret_arn is not None

    def check(values: list[Any]) -> None:
        arn, secret_name = values
        # stack-unique: kafka-mirror/<project>/<stack>/<name>
        assert arn == (
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:"
            "kafka-mirror/kafka-mirror/test/kmirror-west-scram-AbCdEf"
        )
        assert secret_name == "kmirror-west-scram"
        [(_, version)] = mocks.of_type("aws:secretsmanager/secretVersion:SecretVersion")
        assert json.loads(_secret(version["secretString"])) == {"password": PASSWORD, "username": "mm"}
        assert not mocks.of_type("kubernetes:core/v1:Secret")

    return pulumi.Output.all(scram.secret_arn, scram.secret_name, scram.secret_resource.id).apply(
        lambda v: check(v[:2])
    )


def test_secret_values_stay_marked_secret(mocks: RecordingMocks) -> None:
    from kafka_mirror.secrets.certificate_authority import TestCertificateAuthority, TestCertificateAuthorityArgs

    ca = TestCertificateAuthority("demo-ca", TestCertificateAuthorityArgs())
    key, key_secret = _resolve(ca.client_key_pem)
    cert, cert_secret = _resolve(ca.client_cert_pem)
    assert (key, key_secret) == (KEY_PEM, True)
    assert (cert, cert_secret) == ("CERT(demo-ca-client-cert)", False)
    assert _resolve(ca.server_key_pem) == (KEY_PEM, True)
    assert _resolve(ca.server_cert_pem) == ("CERT(demo-ca-server-cert)", False)
    assert _resolve(ca.ca_cert_pem) == ("CERT(demo-ca-ca-cert)", False)
    # the engine registers resources concurrently: their order is not part of the contract
    assert sorted(n for n, _ in mocks.of_type("tls:index/locallySignedCert:LocallySignedCert")) == [
        "demo-ca-client-cert",
        "demo-ca-server-cert",
    ]
