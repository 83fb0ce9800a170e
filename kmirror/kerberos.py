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
    rotate: bool = False,
) -> Path:
    """Create `principal` with a random key (if missing) and export its keys to `keytab_path`.

    An existing principal keeps its keys (`ktadd -norandkey`), so keytabs exported earlier (another
    datacenter's mirror, a previous run) stay valid; `rotate=True` draws new keys instead, which
    invalidates every older keytab of the principal. Runs `kadmin` (`kadmin.local` on the KDC host,
    or e.g. `kadmin -p admin/admin -k -t admin.keytab`, which needs the extract-keys privilege
    without `rotate`) with `env` (KRB5_CONFIG / KRB5_KDC_PROFILE). Raises KmirrorError with
    kadmin's output on failure.
    """
    keytab = Path(keytab_path)
    for what, text in (("principal", principal), ("keytab path", str(keytab))):
        if not text or any(c.isspace() for c in text) or '"' in text:
            raise KmirrorError(
                f"{what} {text!r} is empty or contains whitespace or quotes, which kadmin -q cannot take; "
                "use e.g. mirrormaker/host.example.com@REALM and a plain path"
            )
    full_env = {**os.environ, **(env or {})}
    existed = "Principal:" in _kadmin(kadmin, f"getprinc {principal}", full_env, timeout_s).stdout
    if not existed:
        _kadmin(kadmin, f"addprinc -randkey {principal}", full_env, timeout_s, expect="created")
    keep = "-norandkey " if existed and not rotate else ""
    _kadmin(kadmin, f"ktadd -k {keytab} {keep}{principal}", full_env, timeout_s, expect="added to keytab")
    keytab.chmod(0o600)
    return keytab


def _kadmin(
    kadmin: Sequence[str], query: str, env: Mapping[str, str], timeout_s: float, *, expect: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run one kadmin query. kadmin -q exits 0 even when the query fails, so success is `expect`
    appearing in its output; otherwise raise KmirrorError with kadmin's complaint (one line)."""
    command = f"{' '.join(kadmin)} -q {query!r}"
    try:
        done = subprocess.run([*kadmin, "-q", query], env=dict(env), capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise KmirrorError(
            f"{kadmin[0]} not found; install the MIT Kerberos tools (apt-get install krb5-admin-server krb5-user)"
        ) from None
    except subprocess.TimeoutExpired:
        raise KmirrorError(f"{command} did not finish within {timeout_s:.0f} s") from None
    if done.returncode != 0 or (expect is not None and expect not in done.stdout + done.stderr):
        complaint = " ".join(line.strip() for line in done.stderr.strip().splitlines()[:2]) or "no output"
        raise KmirrorError(f"{command} failed (exit {done.returncode}): {complaint}")
    return done


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m kmirror.kerberos keytab PRINCIPAL PATH [--kadmin CMD]` creates the mirror's keytab;
    `python -m kmirror.kerberos krb5-conf --realm R --kdc HOST[:PORT]... [--output FILE]` renders krb5.conf;
    `python -m kmirror.kerberos jaas PRINCIPAL KEYTAB_PATH [--service-name kafka]` prints the JAAS section.
    Exit 0, or 1 with one line naming the problem (never a key)."""
    import argparse
    import shlex
    import sys

    parser = argparse.ArgumentParser(prog="python -m kmirror.kerberos", description="Kerberos set-up for kmirror.")
    commands = parser.add_subparsers(dest="command", required=True)
    keytab = commands.add_parser("keytab", help="create PRINCIPAL (random key) on an MIT KDC and export its keytab")
    keytab.add_argument("principal")
    keytab.add_argument("path")
    keytab.add_argument("--kadmin", default="kadmin.local", help="kadmin command (default: kadmin.local)")
    keytab.add_argument(
        "--rotate", action="store_true", help="new keys for an existing principal (its older keytabs stop working)"
    )
    conf = commands.add_parser("krb5-conf", help="render krb5.conf for one realm")
    conf.add_argument("--realm", required=True)
    conf.add_argument("--kdc", action="append", required=True, help="host[:port]; repeat for several KDCs")
    conf.add_argument("--output", help="write here instead of stdout")
    jaas = commands.add_parser("jaas", help="print the JAAS KafkaClient section for JVM clients")
    jaas.add_argument("principal")
    jaas.add_argument("keytab_path")
    jaas.add_argument("--service-name", default="kafka")
    args = parser.parse_args(argv)
    try:
        if args.command == "keytab":
            path = create_keytab(args.principal, args.path, kadmin=shlex.split(args.kadmin), rotate=args.rotate)
            print(f"{path}: keytab for {args.principal}")
        elif args.command == "krb5-conf":
            text = render_krb5_conf(args.realm, args.kdc)
            if args.output:
                Path(args.output).write_text(text)
            else:
                sys.stdout.write(text)
        else:
            sys.stdout.write(jaas_kafka_client(args.principal, args.keytab_path, service_name=args.service_name))
    except KmirrorError as exc:
        print(f"kmirror.kerberos {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
