"""A cluster's `security` mapping: its contract, translation to librdkafka properties, redaction.

Contract (docs/security.md has a worked example per mode):

    security:
      protocol: PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
      tls:      {ca: REF, cert: REF, key: REF, key_password: REF,
                 pkcs12: REF, pkcs12_password: REF, verify_hostname: true}
      kerberos: {principal: STR, keytab: REF, krb5_conf: REF | realm: STR + kdcs: [host[:port]],
                 service_name: kafka}
      scram:    {mechanism: SCRAM-SHA-256 | SCRAM-SHA-512, username: STR, password: REF}
      plain:    {username: STR, password: REF}                 # SASL/PLAIN (Confluent Cloud, Event Hubs)
      oauthbearer: {token_endpoint: URL, client_id: STR, client_secret: REF,
                    scope: STR, extensions: {KEY: VALUE}, principal: STR}   # OIDC client credentials
      msk_iam:  {region: STR, role_arn: ARN, profile: STR, cluster_arn: ARN}   # AWS MSK IAM (SASL_SSL only)

Validation is `kmirror.security.security_checks.security_problems`.
REFs are described in `kmirror.security.secret_refs`. `client_config` never returns a secret: secret
values become `${file:PATH}` / `${env:VAR}` reference strings and secret files become paths.
`resolve_references` turns them into the real values inside the app, right before a client
is created. `redact` hides sensitive values in anything printed or logged.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from kmirror.errors import KmirrorError
from kmirror.security.kerberos import write_krb5_conf
from kmirror.security.msk_iam import msk_iam_config
from kmirror.security.override_rules import carries_secret
from kmirror.security.secret_refs import (
    Materialisation,
    is_reference,
    materialisation,
    ref_location,
    ref_value,
    resolve_reference,
)

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_SECTIONS = ("kerberos", "scram", "plain", "oauthbearer", "msk_iam")
KINIT_CMD = (
    'kinit -R -t "%{sasl.kerberos.keytab}" -k %{sasl.kerberos.principal} || '
    'kinit -t "%{sasl.kerberos.keytab}" -k %{sasl.kerberos.principal}'
)
# Properties only kmirror understands; resolve_references consumes them before librdkafka sees the config.
KRB5_CONF_PROPERTY = "kmirror.krb5.conf"
KRB5_REALM_PROPERTY = "kmirror.krb5.realm"
KRB5_KDCS_PROPERTY = "kmirror.krb5.kdcs"
KMIRROR_PROPERTY_PREFIX = "kmirror."
REDACTED = "<redacted>"
# sasl.jaas.config: a JVM client's JAAS line may carry password="..." (PLAIN/SCRAM).
SENSITIVE_KEYS = frozenset(
    {
        "sasl.password",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.key.pem",
        "sasl.oauthbearer.client.secret",
        "ssl.truststore.password",
        "sasl.jaas.config",
    }
)
_SENSITIVE_RE = re.compile(r"password|secret", re.IGNORECASE)


def _tls_config(tls: Mapping[str, Any]) -> dict[str, str]:
    config: dict[str, str] = {}
    for field, prop in (("ca", "ssl.ca"), ("cert", "ssl.certificate"), ("key", "ssl.key")):
        if field in tls:
            ref = tls[field]
            config.update({f"{prop}.pem": ref_value(ref)} if "env" in ref else {f"{prop}.location": ref_location(ref)})
    if "key_password" in tls:
        config["ssl.key.password"] = ref_value(tls["key_password"])
    if "pkcs12" in tls:
        config["ssl.keystore.location"] = ref_location(tls["pkcs12"])
    if "pkcs12_password" in tls:
        config["ssl.keystore.password"] = ref_value(tls["pkcs12_password"])
    config["ssl.endpoint.identification.algorithm"] = "https" if tls.get("verify_hostname", True) else "none"
    return config


def _kerberos_config(krb: Mapping[str, Any]) -> dict[str, str]:
    config = {
        "sasl.mechanisms": "GSSAPI",
        "sasl.kerberos.service.name": krb.get("service_name", "kafka"),
        "sasl.kerberos.principal": krb["principal"],
        "sasl.kerberos.keytab": ref_location(krb["keytab"]),
        "sasl.kerberos.kinit.cmd": KINIT_CMD,
    }
    if "krb5_conf" in krb:
        config[KRB5_CONF_PROPERTY] = ref_location(krb["krb5_conf"])
    if "realm" in krb:
        config[KRB5_REALM_PROPERTY] = krb["realm"]
        config[KRB5_KDCS_PROPERTY] = ",".join(krb["kdcs"])
    return config


def client_config(security: Mapping[str, Any] | None) -> dict[str, str]:
    """librdkafka properties for a (validated) `security` mapping; `{}` for None.

    Secret values appear only as `${file:PATH}` / `${env:VAR}` references, secret files only as
    paths. `kmirror.krb5.*` properties are consumed by `resolve_references`.
    """
    if not security:
        return {}
    config = {"security.protocol": security["protocol"]}
    if "tls" in security:
        config.update(_tls_config(security["tls"]))
    if "kerberos" in security:
        config.update(_kerberos_config(security["kerberos"]))
    if "scram" in security:
        scram = security["scram"]
        config.update(
            {
                "sasl.mechanisms": scram["mechanism"],
                "sasl.username": scram["username"],
                "sasl.password": ref_value(scram["password"]),
            }
        )
    if "plain" in security:
        plain = security["plain"]
        config.update(
            {
                "sasl.mechanisms": "PLAIN",
                "sasl.username": plain["username"],
                "sasl.password": ref_value(plain["password"]),
            }
        )
    if "oauthbearer" in security:
        config.update(oauthbearer_config(security["oauthbearer"]))
    if "msk_iam" in security:
        config.update(msk_iam_config(security["msk_iam"]))
    return config


def oauthbearer_config(oauth: Mapping[str, Any]) -> dict[str, str]:
    """librdkafka's built-in OIDC client-credentials flow (`sasl.oauthbearer.method=oidc`): it fetches
    a token from the endpoint and refreshes it at 80 % of its lifetime, for as long as the client lives."""
    config = {
        "sasl.mechanisms": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": oauth["token_endpoint"],
        "sasl.oauthbearer.client.id": oauth["client_id"],
        "sasl.oauthbearer.client.secret": ref_value(oauth["client_secret"]),
    }
    if "scope" in oauth:
        config["sasl.oauthbearer.scope"] = oauth["scope"]
    if oauth.get("extensions"):
        config["sasl.oauthbearer.extensions"] = ",".join(f"{k}={v}" for k, v in oauth["extensions"].items())
    return config


def security_materialisations(security: Mapping[str, Any] | None) -> list[Materialisation]:
    """The Kubernetes/Secrets Manager/Pulumi-config secrets the deployment must mount for this mapping."""
    refs = []
    for section in ("tls", *SASL_SECTIONS):
        for value in (security or {}).get(section, {}).values():
            if isinstance(value, dict) and (item := materialisation(value)) is not None:
                refs.append(item)
    return refs


def _export_krb5_config(path: str) -> None:
    current = os.environ.get("KRB5_CONFIG")
    if current and current != path:
        raise KmirrorError(
            f"{KRB5_CONF_PROPERTY}: {path!r} conflicts with KRB5_CONFIG={current!r} already used by this process; "
            "list every realm in one krb5.conf and reference it from both clusters"
        )
    # The GSSAPI library and librdkafka's kinit command both read KRB5_CONFIG from the environment.
    os.environ["KRB5_CONFIG"] = path


def _krb5_properties(config: dict[str, Any]) -> None:
    conf = config.pop(KRB5_CONF_PROPERTY, None)
    realm, kdcs = config.pop(KRB5_REALM_PROPERTY, None), config.pop(KRB5_KDCS_PROPERTY, None)
    if realm and kdcs:
        conf = write_krb5_conf(realm, str(kdcs).split(","))  # into this process's private mkdtemp directory
    if conf:
        _export_krb5_config(str(conf))


def resolve_references(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a librdkafka config with every `${file:..}`/`${env:..}` value replaced by the secret.

    Call it right before creating a client and never log its result. Only properties that carry
    secrets (`kmirror.security.override_rules.carries_secret`) are resolved; a reference anywhere else raises.
    `kmirror.krb5.*` keys are removed and applied (KRB5_CONFIG is exported, rendering krb5.conf
    from realm + kdcs). Raises KmirrorError naming the property and the reference (never a value)
    when a file or environment variable is missing.
    """
    resolved = dict(config)
    _krb5_properties(resolved)
    for name, value in resolved.items():
        if not is_reference(value):
            continue
        if not carries_secret(name):
            # `client.id: ${file:/etc/shadow}` would send the file to every broker: refused (flow
            # spec validation says so first; this guards configs built any other way).
            raise KmirrorError(
                f"{name}: the reference {value} is not resolved: references are resolved only in properties "
                "that carry secrets (passwords, secrets, ssl.*.pem); write the value itself"
            )
        resolved[name] = resolve_reference(name, value)
    return resolved


def is_kmirror_property(name: str) -> bool:
    """True for `kmirror.*` keys of a client config: kmirror's own (krb5.conf handling), removed by
    `resolve_references`; a validator that asks librdkafka about single properties must skip them."""
    return name.startswith(KMIRROR_PROPERTY_PREFIX)


def is_sensitive(key: str) -> bool:
    """True for keys whose values must never be shown (sasl.password, ssl.key.pem, *password*, *secret*)."""
    return key in SENSITIVE_KEYS or _SENSITIVE_RE.search(key) is not None


def redact(obj: Any) -> Any:
    """A copy of `obj` (mappings, lists, tuples, scalars) with sensitive values replaced by `<redacted>`."""
    if isinstance(obj, Mapping):
        return {k: (REDACTED if isinstance(k, str) and is_sensitive(k) else redact(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(redact(v) for v in obj)
    return obj
