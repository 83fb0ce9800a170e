"""Security settings of MirrorMaker 2 / MirrorMaker 1 / Strimzi clusters mapped onto a topology
cluster's `security` section (issue 45).

`java_security(alias, props, bootstrap)` reads a cluster's Java client properties
(`security.protocol`, `sasl.mechanism`, `sasl.jaas.config`, `ssl.*`, `sasl.kerberos.service.name`,
`sasl.oauthbearer.token.endpoint.url`); `strimzi_security(alias, tls, authentication)` reads a
Strimzi cluster's `tls` and `authentication` fields. Both return the section (None: plaintext,
nothing to write) and every setting they could not carry, as `NotCarried` (lossy: refused unless
`--allow-lossy`). Secrets never reach the output: a Strimzi `passwordSecret`/`clientSecret` becomes
a `k8s_secret` reference to the same Secret; a password written in a JAAS line becomes an `env`
reference (`<ALIAS>_SASL_PASSWORD`, listed, not lossy: set that variable), `${env:VAR}` stays the
variable; a key or truststore file becomes a `file` reference. Pure: no Kafka client.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# a setting not carried: (name, shown value, reason, lossy), as config_import.NotCarried takes them
NotCarried = tuple[str, str, str, bool]

_JAAS_RE = re.compile(r"^\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\s*(.*?);?\s*$", re.DOTALL)
_OPTION_RE = re.compile(r'(\w+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;]+)')
_MSK_REGION_RE = re.compile(r"\.kafka(?:-serverless)?\.([a-z]{2}(?:-[a-z]+)+-\d{1,2})\.amazonaws\.com")
_ENV_REF_RE = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")
_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": "PLAIN",
    "org.apache.kafka.common.security.scram.ScramLoginModule": "SCRAM",
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule": "OAUTHBEARER",
    "com.sun.security.auth.module.Krb5LoginModule": "GSSAPI",
    "software.amazon.msk.auth.iam.IAMLoginModule": "AWS_MSK_IAM",
}
_MSK_HANDLERS = ("software.amazon.msk.auth.iam.IAMClientCallbackHandler", "IAMOAuthBearerLoginCallbackHandler")
# the client properties this module reads (the rest of security.*/ssl.*/sasl.* is refused by name)
_READ = {
    "security.protocol",
    "sasl.mechanism",
    "sasl.jaas.config",
    "sasl.kerberos.service.name",
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.client.callback.handler.class",
    "sasl.login.callback.handler.class",
    "ssl.truststore.location",
    "ssl.truststore.type",
    "ssl.truststore.password",
    "ssl.keystore.location",
    "ssl.keystore.type",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
}


def is_security_key(key: str) -> bool:
    return key.startswith(("security.", "ssl.", "sasl."))


def _jaas(text: str) -> tuple[str, dict[str, str]]:
    """(login module, options) of a JAAS line; ("", {}) when it is not one."""
    match = _JAAS_RE.match(text or "")
    if match is None:
        return "", {}
    options = {k: v[1:-1] if v.startswith('"') else v for k, v in _OPTION_RE.findall(match.group(3))}
    return match.group(1), options


def _secret(alias: str, value: str, what: str, where: str, notes: list[NotCarried]) -> dict[str, str]:
    """A reference for a secret written in a config: `${env:VAR}` as it is, else an env variable to set."""
    if (found := _ENV_REF_RE.fullmatch(value.strip())) is not None:
        return {"env": found.group(1)}
    var = re.sub(r"[^A-Z0-9]+", "_", f"{alias}_{what}".upper())
    notes.append((where, "<redacted>", f"not written: set the environment variable {var} to it", False))
    return {"env": var}


def java_security(
    alias: str, props: Mapping[str, str], bootstrap: str = "", where: str = ""
) -> tuple[dict[str, Any] | None, list[NotCarried]]:
    """Cluster `alias`'s security section from its Java client properties (module doc); `where`
    prefixes the names in the notes (`<alias>.` for mm2.properties)."""
    notes: list[NotCarried] = []

    def lossy(key: str, reason: str, value: str = "") -> None:
        shown = "<redacted>" if "password" in key or "jaas" in key else value
        notes.append((f"{where}{key}", shown, reason, True))

    for key in sorted(set(props) - _READ):
        lossy(key, "no kafka-mirror security equivalent", props[key])
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        lossy("security.protocol", f"unknown protocol {protocol!r}", protocol)
        return None, notes
    section: dict[str, Any] = {"protocol": protocol}
    tls: dict[str, Any] = {}
    store = props.get("ssl.truststore.location")
    if store:
        if props.get("ssl.truststore.type", "JKS").upper() == "PEM":
            tls["ca"] = {"file": store}
        else:
            lossy("ssl.truststore.location", "a JKS/PKCS12 truststore: librdkafka reads PEM; give tls.ca", store)
    keystore = props.get("ssl.keystore.location")
    if keystore:
        if props.get("ssl.keystore.type", "JKS").upper() == "PKCS12":
            tls["pkcs12"] = {"file": keystore}
            if props.get("ssl.keystore.password"):
                tls["pkcs12_password"] = _secret(
                    alias, props["ssl.keystore.password"], "keystore_password", f"{where}ssl.keystore.password", notes
                )
        else:
            lossy("ssl.keystore.location", "a JKS/PEM keystore: give tls.cert/tls.key (PEM) or a PKCS12 file", keystore)
    if props.get("ssl.key.password") and "pkcs12" not in tls:
        lossy("ssl.key.password", "belongs to a keystore kafka-mirror cannot read")
    if props.get("ssl.endpoint.identification.algorithm", "https").strip() == "":
        tls["verify_hostname"] = False
    if tls and protocol in ("SSL", "SASL_SSL"):
        section["tls"] = tls
    elif tls:
        lossy("ssl.*", f"TLS settings with security.protocol={protocol}")
    if props.get("ssl.truststore.password"):
        pem = props.get("ssl.truststore.type", "JKS").upper() == "PEM" or not store
        why = "a PEM CA needs no password" if pem and store else "belongs to a truststore kafka-mirror cannot read"
        notes.append((f"{where}ssl.truststore.password", "<redacted>", why, not (pem and store)))
    sasl_keys = sorted(k for k in props if k.startswith("sasl.") and k in _READ)
    if sasl_keys and not protocol.startswith("SASL_"):
        for key in sasl_keys:
            lossy(key, f"a SASL setting with security.protocol={protocol}", props[key])
    if protocol.startswith("SASL_"):
        _sasl(alias, props, bootstrap, where, section, notes, lossy)
    if protocol.startswith("SASL_") and not set(section) & {"plain", "scram", "oauthbearer", "kerberos", "msk_iam"}:
        # the mechanism was refused above: without it, written only with --allow-lossy, minus SASL
        section["protocol"] = protocol.removeprefix("SASL_")
    return (None if section["protocol"] == "PLAINTEXT" and len(section) == 1 else section), notes


def _sasl(
    alias: str,
    props: Mapping[str, str],
    bootstrap: str,
    where: str,
    section: dict[str, Any],
    notes: list[NotCarried],
    lossy: Any,
) -> None:
    mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper()
    module, options = _jaas(props.get("sasl.jaas.config", ""))
    handler = props.get("sasl.client.callback.handler.class", "") + props.get("sasl.login.callback.handler.class", "")
    jaas_key = f"{where}sasl.jaas.config"
    if mechanism == "AWS_MSK_IAM" or module.endswith("IAMLoginModule") or any(h in handler for h in _MSK_HANDLERS):
        region = _MSK_REGION_RE.search(bootstrap)
        if region is None:
            lossy(
                "sasl.mechanism", "MSK IAM: no region in the bootstrap servers; set security.msk_iam.region", mechanism
            )
            return
        msk: dict[str, Any] = {"region": region.group(1)}
        if options.get("awsRoleArn"):
            msk["role_arn"] = options["awsRoleArn"]
        if options.get("awsProfileName"):
            msk["profile"] = options["awsProfileName"]
        for option in sorted(set(options) - {"awsRoleArn", "awsProfileName", "awsDebugCreds"}):
            lossy(f"sasl.jaas.config:{option}", "an IAMLoginModule option kafka-mirror has no equivalent for")
        section["msk_iam"] = msk
        return
    expected = {"PLAIN": "PLAIN", "SCRAM-SHA-256": "SCRAM", "SCRAM-SHA-512": "SCRAM", "OAUTHBEARER": "OAUTHBEARER"}
    expected["GSSAPI"] = "GSSAPI"
    if mechanism not in expected:
        lossy("sasl.mechanism", "no kafka-mirror equivalent", mechanism)
        return
    if _MODULES.get(module) != expected[mechanism]:
        lossy("sasl.jaas.config", f"expected the {expected[mechanism]} login module for sasl.mechanism={mechanism}")
        return
    if mechanism == "GSSAPI":
        kerberos: dict[str, Any] = {"principal": options.get("principal", "")}
        if options.get("keyTab"):
            kerberos["keytab"] = {"file": options["keyTab"]}
        if props.get("sasl.kerberos.service.name"):
            kerberos["service_name"] = props["sasl.kerberos.service.name"]
        section["kerberos"] = kerberos
        return
    if mechanism == "OAUTHBEARER":
        url = props.get("sasl.oauthbearer.token.endpoint.url")
        if not url or not options.get("clientId"):
            lossy("sasl.jaas.config", "OAUTHBEARER without a token endpoint and clientId (unsecured or custom login)")
            return
        oauth: dict[str, Any] = {"token_endpoint": url, "client_id": options["clientId"]}
        oauth["client_secret"] = _secret(alias, options.get("clientSecret", ""), "client_secret", jaas_key, notes)
        if options.get("scope"):
            oauth["scope"] = options["scope"]
        section["oauthbearer"] = oauth
        return
    user = {"username": options.get("username", "")}
    user["password"] = _secret(alias, options.get("password", ""), "sasl_password", jaas_key, notes)  # type: ignore[assignment]
    section["plain" if mechanism == "PLAIN" else "scram"] = {
        **({"mechanism": mechanism} if mechanism != "PLAIN" else {}),
        **user,
    }


def _k8s(ref: Any, key_field: str) -> dict[str, str] | None:
    if isinstance(ref, Mapping) and ref.get("secretName") and ref.get(key_field):
        return {"k8s_secret": str(ref["secretName"]), "key": str(ref[key_field])}
    return None


def strimzi_security(
    alias: str, tls: Any, authentication: Any, path: str
) -> tuple[dict[str, Any] | None, list[NotCarried]]:
    """Cluster `alias`'s security section from a Strimzi cluster's `tls` and `authentication`."""
    notes: list[NotCarried] = []
    section: dict[str, Any] = {}
    tls_section: dict[str, Any] = {}
    if isinstance(tls, Mapping):
        certs = list(tls.get("trustedCertificates") or [])
        for i, cert in enumerate(certs):
            ref = _k8s(cert, "certificate")
            if i == 0 and ref is not None:
                tls_section["ca"] = ref
            else:
                notes.append(
                    (f"{path}.tls.trustedCertificates[{i}]", str(cert), "kafka-mirror takes one CA (tls.ca)", True)
                )
        for field in sorted(set(tls) - {"trustedCertificates"}):
            notes.append((f"{path}.tls.{field}", str(tls[field]), "no kafka-mirror equivalent", True))
    auth = dict(authentication) if isinstance(authentication, Mapping) else {}
    kind = str(auth.pop("type", "")) if auth else ""
    used: set[str] = set()
    if kind == "tls":
        pair = auth.get("certificateAndKey") or {}
        cert, key = _k8s(pair, "certificate"), _k8s(pair, "key")
        if cert and key:
            tls_section.update(cert=cert, key=key)
            used.add("certificateAndKey")
    elif kind in ("scram-sha-256", "scram-sha-512", "plain"):
        password = _k8s(auth.get("passwordSecret"), "password")
        if auth.get("username") and password:
            user = {"username": str(auth["username"]), "password": password}
            section["plain" if kind == "plain" else "scram"] = (
                user if kind == "plain" else {"mechanism": kind.upper(), **user}
            )
            used |= {"username", "passwordSecret"}
    elif kind == "oauth":
        secret = _k8s(auth.get("clientSecret"), "key")
        if auth.get("tokenEndpointUri") and auth.get("clientId") and secret:
            oauth: dict[str, Any] = {
                "token_endpoint": str(auth["tokenEndpointUri"]),
                "client_id": str(auth["clientId"]),
            }
            oauth["client_secret"] = secret
            if auth.get("scope"):
                oauth["scope"] = str(auth["scope"])
            section["oauthbearer"] = oauth
            used |= {"tokenEndpointUri", "clientId", "clientSecret", "scope"}
    if kind and not used:
        notes.append(
            (
                f"{path}.authentication",
                kind,
                f"authentication type {kind!r} as given has no kafka-mirror equivalent",
                True,
            )
        )
    for field in sorted(set(auth) - used):
        shown = "<redacted>" if "ecret" in field or "oken" in field else str(auth[field])
        notes.append((f"{path}.authentication.{field}", shown, "no kafka-mirror equivalent", True))
    sasl = any(s in section for s in ("plain", "scram", "oauthbearer"))
    if tls is None and not sasl and not tls_section:
        return None, notes
    section = {"protocol": ("SASL_SSL" if sasl else "SSL") if tls is not None else "SASL_PLAINTEXT", **section}
    if tls_section:
        section["tls"] = tls_section
    return section, notes
