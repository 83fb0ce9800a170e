"""Kerberos helpers: krb5.conf from realm + KDCs, the JAAS `KafkaClient` section and JVM flags
for JVM-side users (Kafka CLI tools, MirrorMaker), and keytab creation on an MIT KDC.

The Python app itself needs no JAAS: librdkafka reads `sasl.kerberos.*` and runs `kinit`.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from kmirror.errors import KmirrorError, Problem
from kmirror.security.secret_refs import PATH_HINT, PATH_RE

DEFAULT_KDC_PORT = 88
# primary[/instance][@REALM]: librdkafka puts the principal unquoted on kinit's command line
# (on every executor), kadmin -q and JAAS files take it too, so only plain name characters pass.
PRINCIPAL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?(@[A-Za-z0-9][A-Za-z0-9._-]*)?$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # realms, service names
KDC_RE = re.compile(r"^[A-Za-z0-9.-]+(:\d{1,5})?$")
PRINCIPAL_HINT = (
    "a principal such as mirrormaker/host.example.com@EXAMPLE.COM (letters, digits, . _ -, one / and one @)"
)
# librdkafka properties that reach kinit's command line, and what each must look like.
KINIT_PROPERTIES = {
    "sasl.kerberos.principal": (PRINCIPAL_RE, PRINCIPAL_HINT),
    "sasl.kerberos.keytab": (PATH_RE, PATH_HINT),
    "sasl.kerberos.service.name": (NAME_RE, "a service name such as kafka (letters, digits, . _ -)"),
}


def kinit_property_problems(config: Mapping[str, object], path: str) -> list[Problem]:
    """Problems of the `sasl.kerberos.*` values in a librdkafka config map at `path`."""
    problems = []
    for name, (pattern, hint) in KINIT_PROPERTIES.items():
        value = config.get(name)
        if name in config and not (isinstance(value, str) and pattern.fullmatch(value)):
            message = f"must be {hint}, got {value!r}; it reaches kinit's command line"
            problems.append(Problem(f"{path}.{name}", message))
    return problems


def _check(what: str, value: str, pattern: re.Pattern[str], hint: str) -> None:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise KmirrorError(f"{what} {value!r} is not allowed: use {hint}")


_private_dir: Path | None = None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def sweep_stale_dirs(kind: str, root: Path | None = None) -> list[Path]:
    """Remove this user's `kmirror-<kind>-<pid>-*` directories (under `root`, default the temp
    dir) whose process is gone; returns them. Spark's Python workers leave through `os._exit`, so
    their atexit clean-up never runs: the next process of the same kind removes what they left."""
    removed = []
    for path in (root or Path(tempfile.gettempdir())).glob(f"kmirror-{kind}-*-*"):
        pid = path.name.removeprefix(f"kmirror-{kind}-").split("-", 1)[0]
        if not pid.isdigit() or path.is_symlink() or not path.is_dir() or path.stat().st_uid != os.getuid():
            continue
        if not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def process_dir(kind: str) -> Path:
    """A new directory of this process, `kmirror-<kind>-<pid>-<random>` in the temp dir: made with
    mkdtemp (mode 0700, unpredictable name), so no other user can plant or link a file there;
    removed at exit, or by the next process of the same kind when this one leaves without exit
    handlers (`sweep_stale_dirs`)."""
    sweep_stale_dirs(kind)
    path = Path(tempfile.mkdtemp(prefix=f"kmirror-{kind}-{os.getpid()}-"))
    atexit.register(shutil.rmtree, path, True)
    return path


def private_dir() -> Path:
    """This process's own directory for files it writes (krb5.conf, the log4j config): a
    `process_dir("files")`."""
    global _private_dir
    if _private_dir is None or not _private_dir.is_dir():
        _private_dir = process_dir("files")
    return _private_dir


def _kdc_address(kdc: str) -> str:
    return kdc if ":" in kdc else f"{kdc}:{DEFAULT_KDC_PORT}"


def render_krb5_conf(realm: str, kdcs: Sequence[str], *, admin_server: str | None = None) -> str:
    """krb5.conf text for one realm served by `kdcs` (host or host:port; port 88 by default).

    `dns_lookup_*` are off so only the listed KDCs are used; `rdns = false` keeps service
    principals as written (`kafka/broker1.example.com`), as Kafka's docs advise.
    """
    if not realm or not kdcs:
        raise KmirrorError(f"krb5.conf needs a realm and at least one KDC, got realm={realm!r} kdcs={list(kdcs)!r}")
    _check("realm", realm, NAME_RE, "a realm name such as EXAMPLE.COM (letters, digits, . _ -)")
    for kdc in kdcs:
        _check("KDC", kdc, KDC_RE, "host[:port], e.g. kdc1.example.com:88")
    if admin_server is not None:
        _check("admin server", admin_server, KDC_RE, "host[:port], e.g. kdc1.example.com:749")
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


def write_krb5_conf(realm: str, kdcs: Sequence[str], *, directory: str | os.PathLike[str] | None = None) -> Path:
    """Write the rendered krb5.conf to `directory/kmirror-krb5-<hash>.conf` (idempotent) and return its path.

    `directory` defaults to this process's `private_dir()`; never pass a shared directory such as
    /tmp, where another user could plant the predictable name first or link it elsewhere.
    """
    text = render_krb5_conf(realm, kdcs)
    path = Path(directory or private_dir()) / f"kmirror-krb5-{hashlib.sha256(text.encode()).hexdigest()[:12]}.conf"
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return path


def jaas_kafka_client(principal: str, keytab_path: str, *, service_name: str = "kafka") -> str:
    """The JAAS `KafkaClient` section a JVM Kafka client (or MirrorMaker) uses for this principal.
    Raises KmirrorError for a principal, path or service name that could break out of its quotes."""
    _check("principal", principal, PRINCIPAL_RE, PRINCIPAL_HINT)
    _check("keytab path", keytab_path, PATH_RE, PATH_HINT)
    _check("service name", service_name, NAME_RE, "a service name such as kafka")
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
    return f"security.protocol={protocol}\nsasl.mechanism=GSSAPI\nsasl.kerberos.service.name={service_name}\n"


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
    _check("principal", principal, PRINCIPAL_RE, PRINCIPAL_HINT)
    _check("keytab path", str(keytab.absolute()), PATH_RE, PATH_HINT)
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
    """`python -m kmirror.security.kerberos keytab PRINCIPAL PATH [--kadmin CMD]` creates the mirror's keytab;
    `python -m kmirror.security.kerberos krb5-conf --realm R --kdc HOST[:PORT]... [--output FILE]` renders krb5.conf;
    `python -m kmirror.security.kerberos jaas PRINCIPAL KEYTAB_PATH [--service-name kafka]` prints the JAAS section.
    Exit 0, or 1 with one line naming the problem (never a key)."""
    import argparse
    import shlex
    import sys

    parser = argparse.ArgumentParser(
        prog="python -m kmirror.security.kerberos", description="Kerberos set-up for kmirror."
    )
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
        print(f"kmirror.security.kerberos {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
