"""A cluster's `security` mapping: validation, translation to librdkafka properties, redaction.

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

from kmirror.errors import KmirrorError, Problem, did_you_mean
from kmirror.option_table import unknown_keys
from kmirror.security.kerberos import KDC_RE, NAME_RE, PRINCIPAL_HINT, PRINCIPAL_RE, write_krb5_conf
from kmirror.security.msk_iam import msk_iam_config, msk_iam_problems
from kmirror.security.override_rules import carries_secret
from kmirror.security.secret_refs import (
    Materialisation,
    is_reference,
    materialisation,
    ref_location,
    ref_problems,
    ref_value,
    resolve_reference,
)

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_SECTIONS = ("kerberos", "scram", "plain", "oauthbearer", "msk_iam")
SECTION_KEYS = {"protocol", "tls", *SASL_SECTIONS}
# field -> (is a secret, must be a file)
TLS_REFS = {
    "ca": (False, False),
    "cert": (False, False),
    "key": (True, False),
    "key_password": (True, False),
    "pkcs12": (True, True),
    "pkcs12_password": (True, False),
}
TLS_KEYS = set(TLS_REFS) | {"verify_hostname"}
KERBEROS_KEYS = {"principal", "keytab", "krb5_conf", "realm", "kdcs", "service_name"}
SCRAM_KEYS = {"mechanism", "username", "password"}
PLAIN_KEYS = {"username", "password"}
OAUTH_REQUIRED = {"token_endpoint", "client_id", "client_secret"}
OAUTH_KEYS = OAUTH_REQUIRED | {"scope", "extensions", "principal"}
_URL_RE = re.compile(r"https?://[^\s,]+")
_EXTENSION_KEY_RE = re.compile(r"[A-Za-z]+")  # RFC 7628: extension keys are letters only
_EXTENSION_VALUE_RE = re.compile(r"[\x21-\x2b\x2d-\x3c\x3e-\x7e ]+")  # printable, no , or = (librdkafka's list)
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


def _mapping(value: Any, path: str) -> list[Problem]:
    return [] if isinstance(value, dict) else [Problem(path, f"must be a mapping, got {type(value).__name__}")]


def _tls_problems(tls: dict[str, Any], path: str) -> list[Problem]:
    problems = unknown_keys(tls, TLS_KEYS, path)
    for name, (secret, needs_file) in TLS_REFS.items():
        if name in tls:
            problems += ref_problems(tls[name], f"{path}.{name}", secret=secret, needs_file=needs_file)
    if ("cert" in tls) != ("key" in tls):
        problems.append(Problem(path, "cert and key go together: give both (a client certificate) or neither"))
    if "pkcs12" in tls and ("cert" in tls or "key" in tls):
        problems.append(Problem(path, "give the client certificate either as cert + key or as pkcs12, not both"))
    if "key_password" in tls and "key" not in tls:
        problems.append(Problem(f"{path}.key_password", "needs tls.key (the encrypted private key it unlocks)"))
    if "pkcs12_password" in tls and "pkcs12" not in tls:
        problems.append(Problem(f"{path}.pkcs12_password", "needs tls.pkcs12 (the keystore it unlocks)"))
    if "verify_hostname" in tls and not isinstance(tls["verify_hostname"], bool):
        problems.append(Problem(f"{path}.verify_hostname", f"must be true or false, got {tls['verify_hostname']!r}"))
    return problems


def _kerberos_problems(krb: dict[str, Any], path: str) -> list[Problem]:
    problems = unknown_keys(krb, KERBEROS_KEYS, path)
    for name in ("principal", "keytab"):
        if name not in krb:
            problems.append(Problem(f"{path}.{name}", "required key is missing"))
    if "principal" in krb and not (isinstance(krb["principal"], str) and PRINCIPAL_RE.fullmatch(krb["principal"])):
        problems.append(
            Problem(
                f"{path}.principal",
                f"must be {PRINCIPAL_HINT}, got {krb['principal']!r}; it reaches kinit's command line on every "
                "executor",
            )
        )
    if "keytab" in krb:
        problems += ref_problems(krb["keytab"], f"{path}.keytab", secret=True, needs_file=True)
    if "krb5_conf" in krb:
        problems += ref_problems(krb["krb5_conf"], f"{path}.krb5_conf", secret=False, needs_file=True)
        if "realm" in krb or "kdcs" in krb:
            problems.append(Problem(path, "give either krb5_conf or realm + kdcs, not both"))
    if ("realm" in krb) != ("kdcs" in krb):
        problems.append(Problem(path, "realm and kdcs go together (kmirror renders krb5.conf from them)"))
    if "realm" in krb and not (isinstance(krb["realm"], str) and NAME_RE.fullmatch(krb["realm"])):
        problems.append(
            Problem(
                f"{path}.realm",
                f"must be a realm name such as EXAMPLE.COM (letters, digits, . _ -), got {krb['realm']!r}",
            )
        )
    kdcs = krb.get("kdcs", ["x"])
    if not isinstance(kdcs, list) or not kdcs or not all(isinstance(k, str) and KDC_RE.fullmatch(k) for k in kdcs):
        problems.append(Problem(f"{path}.kdcs", f"must be a non-empty list of host[:port], got {kdcs!r}"))
    if "service_name" in krb and not (isinstance(krb["service_name"], str) and NAME_RE.fullmatch(krb["service_name"])):
        problems.append(
            Problem(f"{path}.service_name", f"must be the brokers' service name (kafka), got {krb['service_name']!r}")
        )
    return problems


def _scram_problems(scram: dict[str, Any], path: str) -> list[Problem]:
    problems = unknown_keys(scram, SCRAM_KEYS, path)
    problems += [Problem(f"{path}.{k}", "required key is missing") for k in sorted(SCRAM_KEYS - set(scram))]
    if "mechanism" in scram and scram["mechanism"] not in SCRAM_MECHANISMS:
        hint = did_you_mean(str(scram["mechanism"]), SCRAM_MECHANISMS)
        problems.append(
            Problem(
                f"{path}.mechanism", f"must be one of {', '.join(SCRAM_MECHANISMS)}, got {scram['mechanism']!r}{hint}"
            )
        )
    if "username" in scram and (not isinstance(scram["username"], str) or not scram["username"]):
        problems.append(Problem(f"{path}.username", f"must be a non-empty string, got {scram['username']!r}"))
    if "password" in scram:
        problems += ref_problems(scram["password"], f"{path}.password", secret=True)
    return problems


def _plain_problems(plain: dict[str, Any], path: str) -> list[Problem]:
    problems = unknown_keys(plain, PLAIN_KEYS, path)
    problems += [Problem(f"{path}.{k}", "required key is missing") for k in sorted(PLAIN_KEYS - set(plain))]
    if "username" in plain and (not isinstance(plain["username"], str) or not plain["username"]):
        problems.append(Problem(f"{path}.username", f"must be a non-empty string, got {plain['username']!r}"))
    if "password" in plain:
        problems += ref_problems(plain["password"], f"{path}.password", secret=True)
    return problems


def _text_problem(value: Any, path: str, what: str) -> list[Problem]:
    if isinstance(value, str) and value and not any(c in value for c in "\n\r\t"):
        return []
    return [Problem(path, f"must be {what}, got {value!r}")]


def _oauthbearer_problems(oauth: dict[str, Any], path: str) -> list[Problem]:
    problems = unknown_keys(oauth, OAUTH_KEYS, path)
    problems += [Problem(f"{path}.{k}", "required key is missing") for k in sorted(OAUTH_REQUIRED - set(oauth))]
    endpoint = oauth.get("token_endpoint")
    if endpoint is not None and not (isinstance(endpoint, str) and _URL_RE.fullmatch(endpoint)):
        problems.append(
            Problem(f"{path}.token_endpoint", f"must be the OIDC provider's token URL (https://...), got {endpoint!r}")
        )
    if "client_id" in oauth:
        problems += _text_problem(oauth["client_id"], f"{path}.client_id", "the OIDC client id (a non-empty string)")
    if "client_secret" in oauth:
        problems += ref_problems(oauth["client_secret"], f"{path}.client_secret", secret=True)
    if "scope" in oauth:
        problems += _text_problem(oauth["scope"], f"{path}.scope", "the scopes to ask for, space-separated")
    if "principal" in oauth:
        problems += _text_problem(
            oauth["principal"], f"{path}.principal", "the token's subject the brokers see (sub claim)"
        )
    extensions = oauth.get("extensions", {})
    if not isinstance(extensions, dict):
        problems.append(Problem(f"{path}.extensions", f"must be a mapping of name: value, got {extensions!r}"))
        return problems
    for key, value in extensions.items():
        if not (isinstance(key, str) and _EXTENSION_KEY_RE.fullmatch(key)) or key == "auth":
            problems.append(
                Problem(f"{path}.extensions", f"key {key!r} must be letters only and not 'auth' (RFC 7628)")
            )
        if not (isinstance(value, str) and _EXTENSION_VALUE_RE.fullmatch(value)):
            problems.append(
                Problem(
                    f"{path}.extensions.{key}", "must be a non-empty string of printable characters without ',' or '='"
                )
            )
    return problems


def _consistency_problems(raw: dict[str, Any], path: str) -> list[Problem]:
    protocol = raw.get("protocol")
    if protocol not in PROTOCOLS:
        return []
    problems = []
    if "tls" in raw and protocol not in ("SSL", "SASL_SSL"):
        problems.append(Problem(f"{path}.tls", f"needs protocol SSL or SASL_SSL, but protocol is {protocol}"))
    for mech in SASL_SECTIONS:
        if mech in raw and not protocol.startswith("SASL_"):
            problems.append(
                Problem(f"{path}.{mech}", f"needs protocol SASL_PLAINTEXT or SASL_SSL, but protocol is {protocol}")
            )
    given = [mech for mech in SASL_SECTIONS if mech in raw]
    if "msk_iam" in raw and protocol != "SASL_SSL":
        problems.append(Problem(f"{path}.protocol", f"MSK IAM needs SASL_SSL, got {protocol}; set protocol: SASL_SSL"))
    if len(given) > 1:
        problems.append(Problem(path, f"give one SASL mechanism, not {' and '.join(given)}"))
    if protocol.startswith("SASL_") and not given:
        problems.append(Problem(path, f"protocol {protocol} needs one of the sections {', '.join(SASL_SECTIONS)}"))
    return problems


def security_problems(raw: Any, path: str) -> list[Problem]:
    """Every problem of one cluster's `security` mapping (`path` e.g. `clusters.east-1.security`).

    Messages name the field path and the fix; they never contain a secret value (a literal
    secret is reported without echoing it).
    """
    if raw is None:
        return []
    if not isinstance(raw, dict):
        sections = ", ".join(SASL_SECTIONS)
        return [Problem(path, f"must be a mapping with protocol, tls, {sections}; got {type(raw).__name__}")]
    problems = unknown_keys(raw, SECTION_KEYS, path)
    if "protocol" not in raw:
        problems.append(Problem(f"{path}.protocol", f"required key is missing; one of {', '.join(PROTOCOLS)}"))
    elif raw["protocol"] not in PROTOCOLS:
        hint = did_you_mean(str(raw["protocol"]), PROTOCOLS)
        problems.append(
            Problem(f"{path}.protocol", f"must be one of {', '.join(PROTOCOLS)}, got {raw['protocol']!r}{hint}")
        )
    checks = {
        "tls": _tls_problems,
        "kerberos": _kerberos_problems,
        "scram": _scram_problems,
        "plain": _plain_problems,
        "oauthbearer": _oauthbearer_problems,
        "msk_iam": msk_iam_problems,
    }
    for name, check in checks.items():
        if name in raw:
            shape = _mapping(raw[name], f"{path}.{name}")
            problems += shape or check(raw[name], f"{path}.{name}")
    return problems + _consistency_problems(raw, path)


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
