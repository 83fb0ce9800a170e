"""SASL/PLAIN and SASL/OAUTHBEARER (OIDC client credentials) in a cluster's `security` mapping
(issue 45): validation naming the field and the fix without echoing a secret, the librdkafka
properties rendered, the principal the ACLs name, and the start-up support check that no longer
probes a SASL protocol with librdkafka's default GSSAPI. No broker."""

from __future__ import annotations

from typing import Any

import pytest

from kmirror.errors import KmirrorError
from kmirror.security.acls import kafka_principal
from kmirror.security.config import client_config, security_materialisations
from kmirror.security.security_checks import security_problems
from kmirror_engine.clients.security_check import check_client_support
from tests.planner_fakes import raw_spec

pytestmark = pytest.mark.security
PATH = "clusters.cloud.security"
SECRET = "cc-api-secret-Jq7-never-printed"


def plain(**over: Any) -> dict[str, Any]:
    return {"protocol": "SASL_SSL", "plain": {"username": "APIKEY1", "password": {"env": "CC_SECRET"}, **over}}


def oauth(**over: Any) -> dict[str, Any]:
    section = {
        "token_endpoint": "https://idp.example.com/oauth2/token",
        "client_id": "mirror",
        "client_secret": {"k8s_secret": "mirror-oidc", "key": "secret"},
        **over,
    }
    return {"protocol": "SASL_SSL", "oauthbearer": section}


def messages(security: dict[str, Any]) -> list[str]:
    return [str(p) for p in security_problems(security, PATH)]


def test_plain_renders_username_and_a_password_reference() -> None:
    assert messages(plain()) == []
    assert client_config(plain()) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "APIKEY1",
        "sasl.password": "${env:CC_SECRET}",
    }


def test_plain_refuses_a_literal_password_without_echoing_it_and_names_missing_keys() -> None:
    found = messages(plain(password=SECRET))
    assert len(found) == 1 and "plain.password" in found[0] and "literal secret" in found[0]
    assert SECRET not in " ".join(found)
    found = messages({"protocol": "SASL_SSL", "plain": {"password": {"env": "X"}}})
    assert any(f"{PATH}.plain.username" in m and "required key is missing" in m for m in found), found


def test_oauthbearer_renders_librdkafkas_oidc_client_credentials() -> None:
    security = oauth(scope="kafka.read kafka.write", extensions={"logicalCluster": "lkc-1", "identityPoolId": "p-2"})
    assert messages(security) == []
    assert client_config(security) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example.com/oauth2/token",
        "sasl.oauthbearer.client.id": "mirror",
        "sasl.oauthbearer.client.secret": "${file:/etc/kmirror/secrets/mirror-oidc/secret}",
        "sasl.oauthbearer.scope": "kafka.read kafka.write",
        "sasl.oauthbearer.extensions": "logicalCluster=lkc-1,identityPoolId=p-2",
    }
    [mounted] = security_materialisations(security)
    assert "mirror-oidc" in repr(mounted)


@pytest.mark.parametrize(
    ("over", "field", "words"),
    [
        ({"client_secret": SECRET}, "oauthbearer.client_secret", "literal secret"),
        ({"token_endpoint": "idp.example.com/token"}, "oauthbearer.token_endpoint", "token URL"),
        ({"extensions": {"logical-cluster": "x"}}, "oauthbearer.extensions", "letters only"),
        ({"extensions": {"pool": "a,b=c"}}, "oauthbearer.extensions.pool", "without ',' or '='"),
        ({"scope": ""}, "oauthbearer.scope", "space-separated"),
        ({"audience": "kafka"}, "oauthbearer.audience", ""),
    ],
)
def test_oauthbearer_problems_name_the_field_and_never_the_secret(over: dict[str, Any], field: str, words: str) -> None:
    found = messages(oauth(**over))
    assert any(f"{PATH}.{field}" in m and words in m for m in found), found
    assert SECRET not in " ".join(found)


def test_oauthbearer_missing_keys_and_mechanism_consistency() -> None:
    found = messages({"protocol": "SASL_SSL", "oauthbearer": {"client_id": "m"}})
    for key in ("token_endpoint", "client_secret"):
        assert any(f"{PATH}.oauthbearer.{key}" in m and "required key is missing" in m for m in found), found
    both = {**plain(), "oauthbearer": oauth()["oauthbearer"]}
    assert any("give one SASL mechanism, not plain and oauthbearer" in m for m in messages(both))
    assert any("needs protocol SASL_PLAINTEXT or SASL_SSL" in m for m in messages({**plain(), "protocol": "SSL"}))
    assert any(
        "needs one of the sections kerberos, scram, plain, oauthbearer" in m for m in messages({"protocol": "SASL_SSL"})
    )


def test_acl_principal_of_plain_and_oauthbearer() -> None:
    assert kafka_principal(plain()) == "User:APIKEY1"
    assert kafka_principal(oauth()) == "User:mirror"  # the client id is the token's subject by default
    assert kafka_principal(oauth(principal="sa-mirror-42")) == "User:sa-mirror-42"


@pytest.mark.parametrize("key", ["sasl.mechanism", "sasl.mechanisms"])
def test_start_up_check_probes_the_configured_mechanism_not_gssapi(key: str) -> None:
    """Issue 45: OAUTHBEARER written straight into a flow's cluster config (as a Java client spells
    it, `sasl.mechanism`) was probed with the default GSSAPI and refused as 'SASL_PLAINTEXT'."""
    check_client_support(
        "cloud", {"security.protocol": "SASL_PLAINTEXT", key: "OAUTHBEARER", "sasl.oauthbearer.method": "oidc"}
    )
    check_client_support("cloud", {"security.protocol": "SASL_SSL", key: "PLAIN"})
    check_client_support("cloud", client_config(oauth()))


def test_a_sasl_protocol_without_a_mechanism_is_explained_as_gssapi() -> None:
    with pytest.raises(KmirrorError) as refused:
        check_client_support("cloud", {"security.protocol": "SASL_PLAINTEXT"})
    message = str(refused.value)
    assert message.startswith("cluster 'cloud' needs sasl.mechanisms=GSSAPI (no sasl.mechanisms is set")
    assert "set it to PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER" in message


def test_kmirror_acls_names_the_oauthbearer_client_and_the_plain_user(tmp_path: Any, capsys: Any) -> None:
    import json

    from kmirror_cli.cli import main

    for security, who in ((oauth(), "User:mirror"), (plain(), "User:APIKEY1")):
        config = client_config(security)
        flow = tmp_path / "flow.json"
        flow.write_text(json.dumps(raw_spec(config=config)))
        assert main(["acls", "--flow", str(flow), "--topic", "orders"]) == 0
        printed = capsys.readouterr().out.splitlines()
        assert printed and all(f"--allow-principal {who} " in line for line in printed), printed
        assert "CC_SECRET" not in "\n".join(printed) and "mirror-oidc" not in "\n".join(printed)
