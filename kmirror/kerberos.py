"""Kerberos helpers: krb5.conf from realm + KDCs, the JAAS `KafkaClient` section and JVM flags
for JVM-side users (Kafka CLI tools, MirrorMaker), and keytab creation on an MIT KDC.

The Python app itself needs no JAAS: librdkafka reads `sasl.kerberos.*` and runs `kinit`.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from kmirror.errors import KmirrorError

DEFAULT_KDC_PORT = 88


def _kdc_address(kdc: str) -> str:
    return kdc if ":" in kdc else f"{kdc}:{DEFAULT_KDC_PORT}"


def render_krb5_conf(realm: str, kdcs: Sequence[str], *, admin_server: str | None = None) -> str:
    """krb5.conf text for one realm served by `kdcs` (host or host:port; port 88 by default).

    `dns_lookup_*` are off so only the listed KDCs are used; `rdns = false` keeps service
    principals as written (`kafka/broker1.example.com`), as Kafka's docs advise.
    """
    if not realm or not kdcs:
        raise KmirrorError(f"krb5.conf needs a realm and at least one KDC, got realm={realm!r} kdcs={list(kdcs)!r}")
    kdc_lines = "".join(f"    kdc = {_kdc_address(kdc)}\n" for kdc in kdcs)
    admin = f"    admin_server = {admin_server}\n" if admin_server else ""
    return (
        "[libdefaults]\n"
        f"  default_realm = {realm}\n"
        "  dns_lookup_realm = false\n"
        "  dns_lookup_kdc = false\n"
        "  rdns = false\n"
        "  udp_preference_limit = 1\n"
        "  ticket_lifetime = 24h\n"
        "  renew_lifetime = 7d\n"
        "  forwardable = true\n"
        "\n[realms]\n"
        f"  {realm} = {{\n{kdc_lines}{admin}  }}\n"
    )


def write_krb5_conf(realm: str, kdcs: Sequence[str], *, directory: str | os.PathLike[str]) -> Path:
    """Write the rendered krb5.conf to `directory/kmirror-krb5-<hash>.conf` (idempotent) and return its path."""
    text = render_krb5_conf(realm, kdcs)
    path = Path(directory) / f"kmirror-krb5-{hashlib.sha256(text.encode()).hexdigest()[:12]}.conf"
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return path


def jaas_kafka_client(principal: str, keytab_path: str, *, service_name: str = "kafka") -> str:
    """The JAAS `KafkaClient` section a JVM Kafka client (or MirrorMaker) uses for this principal."""
    return (
        "KafkaClient {\n"
        "  com.sun.security.auth.module.Krb5LoginModule required\n"
        "  useKeyTab=true\n"
        "  storeKey=true\n"
        "  useTicketCache=false\n"
        f'  keyTab="{keytab_path}"\n'
        f'  principal="{principal}"\n'
        f'  serviceName="{service_name}";\n'
        "};\n"
    )


def jvm_options(krb5_conf_path: str, jaas_path: str | None = None) -> list[str]:
    """JVM flags for JVM-side users: `-Djava.security.krb5.conf=...` (+ the JAAS file when given)."""
    options = [f"-Djava.security.krb5.conf={krb5_conf_path}"]
    if jaas_path:
        options.append(f"-Djava.security.auth.login.config={jaas_path}")
    return options


def jvm_client_properties(protocol: str = "SASL_PLAINTEXT", service_name: str = "kafka") -> str:
    """client.properties lines matching the JAAS section (for kafka-console-* and kafka-acls)."""
    return (f"security.protocol={protocol}\nsasl.mechanism=GSSAPI\n"
            f"sasl.kerberos.service.name={service_name}\n")  # fmt: skip


def create_keytab(
    principal: str,
    keytab_path: str | os.PathLike[str],
    *,
    env: Mapping[str, str] | None = None,
    kadmin: Sequence[str] = ("kadmin.local",),
    timeout_s: float = 30.0,
) -> Path:
    """Create `principal` with a random key (if missing) and export its keys to `keytab_path`.

    Runs `kadmin` (`kadmin.local` on the KDC host, or e.g. `kadmin -p admin/admin -k -t admin.keytab`)
    with `env` (KRB5_CONFIG / KRB5_KDC_PROFILE). Raises KmirrorError with kadmin's output on failure.
    """
    keytab = Path(keytab_path)
    full_env = {**os.environ, **(env or {})}
    listing = _kadmin(kadmin, f"getprinc {principal}", full_env, timeout_s, check=False)
    if listing.returncode != 0 or "Principal:" not in listing.stdout:
        _kadmin(kadmin, f"addprinc -randkey {principal}", full_env, timeout_s)
    _kadmin(kadmin, f"ktadd -k {keytab} {principal}", full_env, timeout_s)
    if not keytab.exists():
        raise KmirrorError(f"kadmin reported success but wrote no keytab at {str(keytab)!r}")
    keytab.chmod(0o600)
    return keytab


def _kadmin(
    kadmin: Sequence[str], query: str, env: Mapping[str, str], timeout_s: float, *, check: bool = True
) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run([*kadmin, "-q", query], env=dict(env), capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise KmirrorError(
            f"{kadmin[0]} not found; install the MIT Kerberos tools (apt-get install krb5-admin-server krb5-user)"
        ) from None
    except subprocess.TimeoutExpired:
        raise KmirrorError(f"{' '.join(kadmin)} -q {query!r} did not finish within {timeout_s:.0f} s") from None
    if check and (done.returncode != 0 or "error" in done.stderr.lower()):
        raise KmirrorError(f"{' '.join(kadmin)} -q {query!r} failed (exit {done.returncode}): {done.stderr.strip()}")
    return done
