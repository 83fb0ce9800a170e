"""Validation of a cluster's `security` mapping (the contract is in `kmirror.security.config`):
every problem, each naming the field path and the fix, never a secret value.
"""

from __future__ import annotations

import re
from typing import Any

from kmirror.errors import Problem, did_you_mean
from kmirror.option_table import unknown_keys
from kmirror.security.config import PROTOCOLS, SASL_SECTIONS, SCRAM_MECHANISMS
from kmirror.security.kerberos import KDC_RE, NAME_RE, PRINCIPAL_HINT, PRINCIPAL_RE
from kmirror.security.msk_iam import msk_iam_problems
from kmirror.security.secret_refs import ref_problems

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
