"""Start-up checks of a flow's security: can this confluent-kafka build speak the configured
protocol and SASL mechanism, and does each cluster accept our TLS/SASL credentials?

The app's main calls `check_flow_security(spec.source, spec.target)` once before starting the
query, so a wrong build, CA, certificate or password fails in seconds with a message naming the
cluster and the fix, instead of as an endless retry loop inside Spark tasks.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import socket
import ssl
import time
from collections.abc import Mapping
from typing import Any

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException

from kmirror.errors import ConnectionFailure, KmirrorError
from kmirror.flow.spec import ClusterEndpoint
from kmirror.security.msk_iam import is_msk_iam, msk_iam_config_problems
from kmirror_engine.clients.factory import endpoint_config, new_admin, probe_client

GSSAPI_HOWTO = (
    "the PyPI wheel of confluent-kafka bundles a librdkafka without GSSAPI; install one built against "
    "a system librdkafka with Cyrus SASL: apt-get install librdkafka-dev libsasl2-modules-gssapi-mit krb5-user && "
    "pip install --no-binary confluent-kafka confluent-kafka==2.0.2 (match the version to `dpkg -s librdkafka-dev`; "
    "scripts/build-gssapi-client.sh does this; the EKS image (Dockerfile) ships such a build, and on EMR set "
    "kafka-mirror:spark.gssapi: true in the stack so the bootstrap builds one)"
)
SSL_HOWTO = "install a confluent-kafka built with OpenSSL (the PyPI wheel has it: pip install confluent-kafka)"
# an OIDC probe client needs these set; nothing is fetched from the placeholder (the client is dropped at once)
_OIDC_PLACEHOLDERS = {
    "sasl.oauthbearer.client.id": "probe",
    "sasl.oauthbearer.client.secret": "probe",
    "sasl.oauthbearer.token.endpoint.url": "http://127.0.0.1:9/probe",
}
_VERIFY_FAILED = "certificate verify failed"
_BROKER_URL = re.compile(r"\b(?:plaintext|ssl|sasl_plaintext|sasl_ssl)://\S*", re.IGNORECASE)


def sasl_mechanism(config: Mapping[str, Any]) -> str:
    """The SASL mechanism librdkafka will use: `sasl.mechanisms` or its alias `sasl.mechanism`
    (as Java clients and MirrorMaker 2 spell it); "" when neither is set (librdkafka then means GSSAPI)."""
    return str(config.get("sasl.mechanisms", config.get("sasl.mechanism", ""))).strip().upper()


def _probe_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Only the protocol, mechanism (and OAUTHBEARER's method): enough for librdkafka to check its
    providers, no secrets."""
    probe: dict[str, Any] = {"log_level": 0}  # the throwaway client must not print connection warnings
    if "security.protocol" in config:
        probe["security.protocol"] = config["security.protocol"]
    mechanism = sasl_mechanism(config)
    if mechanism:
        probe["sasl.mechanisms"] = mechanism
    if mechanism == "GSSAPI":
        probe["sasl.kerberos.kinit.cmd"] = "true"  # librdkafka runs kinit on creation; keytabs are not needed here
    elif mechanism == "OAUTHBEARER":
        method = str(config.get("sasl.oauthbearer.method", "default")).lower()
        probe["sasl.oauthbearer.method"] = method
        if method == "oidc":
            probe.update(_OIDC_PLACEHOLDERS)
    elif mechanism:
        probe.update({"sasl.username": "probe", "sasl.password": "probe"})  # placeholders: creation requires them
    return probe


def _build() -> str:
    """`confluent-kafka X (librdkafka Y)`; version() is a tuple in old releases, a string in new ones."""
    raw: list[Any] = [confluent_kafka.version(), confluent_kafka.libversion()]
    version, libversion = (v[0] if isinstance(v, tuple) else v for v in raw)
    return f"confluent-kafka {version} (librdkafka {libversion})"


def _check_msk_iam(alias: str, config: Mapping[str, Any]) -> None:
    """MSK IAM: the settings agree (region, SASL_SSL, OAUTHBEARER) and the token signer is installed."""
    problems = msk_iam_config_problems(config, f"clusters.{alias}.config")
    if problems:
        raise KmirrorError(f"cluster {alias!r}: " + "; ".join(f"{p.path}: {p.message}" for p in problems))
    if importlib.util.find_spec("aws_msk_iam_sasl_signer") is None:
        raise KmirrorError(
            f"cluster {alias!r} uses MSK IAM, but aws-msk-iam-sasl-signer-python is not installed; "
            "pip install 'kafka-mirror[app]' (the app's image has it)"
        )


def check_client_support(alias: str, config: Mapping[str, Any]) -> None:
    """Raise KmirrorError unless the installed librdkafka supports `config`'s protocol and mechanism.

    Creates (and drops) a client with only `security.protocol` / `sasl.mechanisms`; librdkafka
    refuses creation with "No provider for SASL mechanism GSSAPI" when it was built without it.
    """
    protocol = str(config.get("security.protocol", "PLAINTEXT")).upper()
    mechanism = sasl_mechanism(config)
    if is_msk_iam(config):
        _check_msk_iam(alias, config)
    if protocol.startswith("SASL_") and not mechanism:
        mechanism = "GSSAPI"  # librdkafka's default: say so, rather than blame the protocol
    try:
        probe_client(_probe_config({**config, "sasl.mechanisms": mechanism} if mechanism else config)).flush(0)
    except KafkaException as exc:
        wanted = f"sasl.mechanisms={mechanism}" if mechanism else f"security.protocol={protocol}"
        if mechanism == "GSSAPI" and not sasl_mechanism(config):
            wanted += (
                " (no sasl.mechanisms is set, and librdkafka then uses GSSAPI; set it to PLAIN, SCRAM-SHA-256, "
                "SCRAM-SHA-512 or OAUTHBEARER, or give the cluster a security section)"
            )
        howto = GSSAPI_HOWTO if mechanism == "GSSAPI" else SSL_HOWTO if "SSL" in protocol else "upgrade confluent-kafka"
        raise KmirrorError(
            f"cluster {alias!r} needs {wanted}, which this {_build()} does not support ({exc.args[0].str()}); {howto}"
        ) from None
    if mechanism == "GSSAPI" and shutil.which("kinit") is None:
        raise KmirrorError(
            f"cluster {alias!r} uses Kerberos, but `kinit` is not on PATH (librdkafka runs it to get tickets "
            "from the keytab); install krb5-user (Debian) / krb5-workstation (Amazon Linux)"
        )


def _without_broker_urls(error: str) -> str:
    """librdkafka prefixes errors with the broker's URL (`sasl_ssl://host:9093/bootstrap: ...`); the
    protocol name in it must not make a refused connection look like a TLS or SASL failure."""
    return _BROKER_URL.sub("", error).lower()


def _hint(error: str) -> str:
    text = _without_broker_urls(error)
    if _VERIFY_FAILED in text or "could not be verified" in text:
        return "the brokers' certificate is not signed by the CA in security.tls.ca; point it at the issuing CA"
    if "certificate required" in text or "peer did not return a certificate" in text:
        return "the brokers require a client certificate (mutual TLS); set security.tls.cert + key or pkcs12"
    if "unsupported sasl mechanism" in text:
        return "the brokers do not offer this SASL mechanism on this listener; check security.protocol and the listener"
    if "authentication" in text or "sasl" in text:
        return (
            "check the SASL credentials (scram or plain username/password reference, oauthbearer client id/"
            "secret, token audience and scope, kerberos principal/keytab)"
        )
    if "ssl" in text or "tls" in text:
        return "check security.protocol and security.tls (does this listener speak TLS?)"
    return "check bootstrap_servers and that the brokers are reachable from here"


def _tls_handshake(host: str, port: int, context: ssl.SSLContext, timeout_s: float) -> str | None:
    """The certificate verification error of one handshake, or None when verification passed
    (other failures, such as a broker that then wants a client certificate, are not ours to judge)."""
    try:
        with (
            socket.create_connection((host, port), timeout=timeout_s) as raw,
            context.wrap_socket(raw, server_hostname=host if context.check_hostname else None),
        ):
            return None
    except ssl.SSLCertVerificationError as exc:
        return str(exc.verify_message)
    except OSError:
        return None


def _tls_verify_hint(config: Mapping[str, Any], bootstrap_servers: str, timeout_s: float = 5.0) -> str | None:
    """Why the brokers' certificate was rejected, found with Python's ssl module (librdkafka says only
    "certificate verify failed" for both): a CA that did not sign it, or a certificate that does not
    name the bootstrap host. None when it cannot tell."""
    host, _, port = bootstrap_servers.split(",")[0].strip().rpartition(":")
    location, cadata = config.get("ssl.ca.location"), config.get("ssl.ca.pem")
    if location == "probe":  # librdkafka's "find the system CAs": Python's default context does the same
        location = None
    capath = location if location and os.path.isdir(location) else None
    try:
        context = ssl.create_default_context(cafile=None if capath else location, capath=capath, cadata=cadata)
    except (OSError, ssl.SSLError, ValueError) as exc:
        return f"security.tls.ca cannot be loaded ({exc}); point it at the issuing CA's PEM file"
    context.check_hostname = False
    if _tls_handshake(host, int(port), context, timeout_s) is not None:
        return None  # a CA problem: the generic hint says so
    if config.get("ssl.endpoint.identification.algorithm", "https") != "https":
        return None
    context.check_hostname = True
    mismatch = _tls_handshake(host, int(port), context, timeout_s)
    if mismatch is None:
        return None
    return (
        f"the brokers' certificate is signed by the CA in security.tls.ca but is not valid for {host!r} ({mismatch}); "
        "use a bootstrap address the certificate names, or set security.tls.verify_hostname: false"
    )


def _is_fatal(error: KafkaError) -> bool:
    """TLS/SASL failures never heal by retrying; plain connection refusals might (brokers starting)."""
    if error.code() in (KafkaError._SSL, KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
        return True
    text = _without_broker_urls(error.str())
    return any(word in text for word in ("ssl", "sasl", "certificate", "handshake"))


def check_connection(endpoint: ClusterEndpoint, timeout_s: float = 15.0) -> None:
    """Fetch metadata from `endpoint` within `timeout_s`; raise ConnectionFailure naming the cluster.

    A TLS or SASL error stops the wait at once (typically well under two seconds); other errors
    are retried until the deadline. Messages carry librdkafka's reason and the fix, never a secret.
    """
    errors: list[KafkaError] = []
    config = {**endpoint_config(endpoint), "error_cb": errors.append, "log_level": 0}
    admin = new_admin(config, role="connection-check")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin.list_topics(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            return
        except KafkaException as exc:
            admin.poll(0)
            fatal = next((e for e in errors if _is_fatal(e)), None)
            last = fatal or (errors[-1] if errors else exc.args[0])
            if fatal is not None or time.monotonic() >= deadline:
                reason = last.str() if isinstance(last, KafkaError) else str(last)
                protocol = endpoint.config.get("security.protocol", "PLAINTEXT")
                tls_hint = _tls_verify_hint(config, endpoint.bootstrap_servers) if _VERIFY_FAILED in reason else None
                raise ConnectionFailure(
                    f"cluster {endpoint.alias!r} ({endpoint.bootstrap_servers}): cannot connect with "
                    f"security.protocol={protocol}: {reason}; {tls_hint or _hint(reason)}"
                ) from None


def check_flow_security(source: ClusterEndpoint, target: ClusterEndpoint, timeout_s: float = 15.0) -> None:
    """The app's start-up check: build support, then a connection to the source and the target."""
    for endpoint in (source, target):
        check_client_support(endpoint.alias, endpoint.client_config())
    for endpoint in (source, target):
        check_connection(endpoint, timeout_s)
