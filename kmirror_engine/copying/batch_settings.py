"""Client settings of the batch copy path (`kmirror_engine.copying.batch_net`): the flow's client
configs are librdkafka properties, translated here into kafka-python connection settings. What
cannot be translated (GSSAPI, OAUTHBEARER, PKCS#12 keystores, PEM strings) is a reason to copy
with the record loops instead (`link_config` returns it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

# librdkafka property -> kafka-python connection setting (values copied as they are)
_SAME_VALUE = {
    "bootstrap.servers": "bootstrap_servers",
    "client.id": "client_id",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
}
_SASL_MECHANISMS = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"})
# Security properties with nothing to translate to: the flow copies with the record loops.
_UNTRANSLATED_PREFIXES = (
    "ssl.keystore.",
    "ssl.truststore.",
    "ssl.certificate.pem",
    "ssl.key.pem",
    "ssl.ca.pem",
    "sasl.kerberos.",
    "sasl.oauthbearer.",
    "sasl.jaas.",
)
# Fetch answers carry whole batches: one over the fetch limit still comes whole (KIP-74), so the
# frame limit leaves room for topics with a large max.message.bytes.
RECEIVE_MAX_BYTES = 80 * 1024 * 1024


def link_config(config: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """kafka-python connection settings for librdkafka `config`, and the reasons it cannot
    be translated (empty: the batch path can connect as the record loops would)."""
    out: dict[str, Any] = {"receive_message_max_bytes": RECEIVE_MAX_BYTES, "max_in_flight_requests_per_connection": 5}
    reasons: list[str] = []
    for name, value in config.items():
        if callable(value):
            reasons.append(f"client property {name} is a Python callable")
        elif name in _SAME_VALUE:
            out[_SAME_VALUE[name]] = value
        elif name.startswith(_UNTRANSLATED_PREFIXES) and name != "sasl.kerberos.service.name":
            reasons.append(f"client property {name} has no equivalent on the batch path")
    protocol = str(config.get("security.protocol", "plaintext")).upper()
    out["security_protocol"] = protocol
    if protocol.startswith("SASL"):
        mechanism = str(config.get("sasl.mechanisms", config.get("sasl.mechanism", "GSSAPI"))).upper()
        if mechanism not in _SASL_MECHANISMS:
            reasons.append(f"SASL mechanism {mechanism} is not supported on the batch path (PLAIN and SCRAM are)")
        out["sasl_mechanism"] = mechanism
    if str(config.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        out["ssl_check_hostname"] = False
    reasons += _tls_reasons(config)
    return out, reasons


def _tls_reasons(config: Mapping[str, Any]) -> list[str]:
    """TLS settings kafka-python's connections do not apply as librdkafka does (each failed every
    task of a batch-path flow with a misleading "cannot reach"): the record loops copy such a flow."""
    reasons = []
    if config.get("ssl.crl.location"):
        reasons.append("client property ssl.crl.location (CRL checks) is not applied on the batch path")
    if str(config.get("enable.ssl.certificate.verification", "true")).lower() in ("false", "0"):
        reasons.append("client property enable.ssl.certificate.verification=false is not applied on the batch path")
    ca = config.get("ssl.ca.location")
    if isinstance(ca, str) and ca and (ca == "probe" or os.path.isdir(ca)):
        reasons.append(
            f"client property ssl.ca.location {ca!r} is a directory or 'probe' (the batch path takes one CA file)"
        )
    return reasons
