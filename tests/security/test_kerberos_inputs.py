"""Issue 15, items 13-14: Kerberos names and file paths reach kinit's command line (librdkafka
runs `kinit ... -k %{sasl.kerberos.principal}` through a shell on every executor), kadmin, JAAS
and krb5.conf, so they are checked with strict patterns; files the app writes (krb5.conf, the
log4j2 config) go to a private mkdtemp directory, never a predictable /tmp name."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from kmirror.errors import KmirrorError, ValidationError
from kmirror.estate.planner import parse_topology
from kmirror.flow.spec import parse_flow_spec
from kmirror.security.config import KINIT_CMD, resolve_references
from kmirror.security.kerberos import create_keytab, jaas_kafka_client, render_krb5_conf

PRINCIPAL = (
    "must be a principal such as mirrormaker/host.example.com@EXAMPLE.COM (letters, digits, . _ -, one / and one @)"
)
PATH = "must be an absolute path of letters, digits and . _ + @ = , - (e.g. /etc/kmirror/east.keytab)"


def kerberized(**kerberos: Any) -> dict[str, Any]:
    security = {
        "protocol": "SASL_PLAINTEXT",
        "kerberos": {
            "principal": "mirrormaker/host@EXAMPLE.COM",
            "keytab": {"file": "/etc/k.keytab"},
            "realm": "EXAMPLE.COM",
            "kdcs": ["kdc1:88"],
            **kerberos,
        },
    }
    return {
        "clusters": {
            "west": {"bootstrap_servers": "w:9092", "datacenter": "w", "security": security},
            "east": {"bootstrap_servers": "e:9092", "datacenter": "e"},
        },
        "topologies": [{"name": "dr", "pattern": "active-passive", "primary": "west", "standby": "east"}],
    }


def problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as info:
        parse_topology(raw)
    return [str(p) for p in info.value.problems]


@pytest.mark.parametrize(
    "principal", ["mm/$(touch /tmp/pwned)@EXAMPLE.COM", "mm@EXAMPLE.COM; rm -rf ~", "mm\n@R", "mm`id`", "a/b/c@R", ""]
)
def test_a_principal_that_could_run_a_command_is_refused(principal: str) -> None:
    """Before: any non-empty string passed and reached kinit's command line on every executor."""
    assert problems(kerberized(principal=principal)) == [
        f"clusters.west.security.kerberos.principal: {PRINCIPAL}, got {principal!r}; it reaches kinit's command "
        "line on every executor"
    ]


def test_plain_principals_pass() -> None:
    for principal in ("mirrormaker@EXAMPLE.COM", "mirrormaker/host-1.example.com@EXAMPLE.COM", "svc_mm", "mm/host"):
        parse_topology(kerberized(principal=principal))


def test_paths_realms_and_service_names_are_checked_too() -> None:
    raw = kerberized(
        keytab={"file": '/etc/x".keytab'}, realm="EX\nAMPLE", service_name="kafka;id", kdcs=["kdc1:88\n[realms]"]
    )
    assert problems(raw) == [
        "clusters.west.security.kerberos.kdcs: must be a non-empty list of host[:port], got ['kdc1:88\\n[realms]']",
        f"clusters.west.security.kerberos.keytab.file: {PATH}, got '/etc/x\".keytab'",
        "clusters.west.security.kerberos.realm: must be a realm name such as EXAMPLE.COM (letters, digits, . _ -), "
        "got 'EX\\nAMPLE'",
        "clusters.west.security.kerberos.service_name: must be the brokers' service name (kafka), got 'kafka;id'",
    ]


def spec_raw(config: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "id": "west->east",
        "checkpoint_location": "/ck",
        "topics": [".*"],
        "topics_exclude": [],
        "replication_policy": {"type": "default"},
        "source": {"alias": "west", "bootstrap_servers": "w:9092", "config": config},
        "target": {"alias": "east", "bootstrap_servers": "e:9092"},
        **extra,
    }


def test_flow_specs_and_overrides_check_what_reaches_kinit() -> None:
    good = {
        "sasl.kerberos.principal": "mm/host@R",
        "sasl.kerberos.keytab": "/etc/k.keytab",
        "sasl.kerberos.kinit.cmd": KINIT_CMD,
        "sasl.kerberos.service.name": "kafka",
    }
    parse_flow_spec(spec_raw(good))
    bad = {**good, "sasl.kerberos.principal": "mm/$(id)@R", "sasl.kerberos.keytab": "/etc/k.keytab; id"}
    with pytest.raises(ValidationError) as info:
        parse_flow_spec(spec_raw(bad, consumer={"sasl.kerberos.principal": "x;id"}))
    assert [str(p) for p in info.value.problems] == [
        f"consumer.sasl.kerberos.principal: {PRINCIPAL}, got 'x;id'; it reaches kinit's command line",
        f"source.config.sasl.kerberos.keytab: {PATH}, got '/etc/k.keytab; id'; it reaches kinit's command line",
        f"source.config.sasl.kerberos.principal: {PRINCIPAL}, got 'mm/$(id)@R'; it reaches kinit's command line",
    ]


def test_kerberos_tooling_refuses_names_that_break_out_of_quotes(tmp_path: Path) -> None:
    with pytest.raises(KmirrorError, match=r"^realm 'R\\n\[x\]' is not allowed: use a realm name"):
        render_krb5_conf("R\n[x]", ["kdc1"])
    with pytest.raises(KmirrorError, match=r"^KDC 'kdc1 kdc2' is not allowed: use host\[:port\]"):
        render_krb5_conf("R", ["kdc1 kdc2"])
    with pytest.raises(KmirrorError, match=r"^principal 'mm\"; x=\"@R' is not allowed"):
        jaas_kafka_client('mm"; x="@R', "/etc/k.keytab")
    with pytest.raises(KmirrorError, match=r"^keytab path '/etc/\$\(id\)' is not allowed"):
        jaas_kafka_client("mm@R", "/etc/$(id)")
    with pytest.raises(KmirrorError, match=r"^principal 'mm;id@R' is not allowed"):
        create_keytab("mm;id@R", tmp_path / "k.keytab", kadmin=("false",))
    assert not (tmp_path / "k.keytab").exists()


def test_rendered_krb5_conf_goes_to_a_private_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: /tmp/kmirror-krb5-<hash of realm+kdcs>.conf, a name any local user can compute and
    plant (or symlink) before the app starts, redirecting Kerberos to their KDC."""
    monkeypatch.delenv("KRB5_CONFIG", raising=False)
    planted = Path(tempfile.gettempdir())
    before = set(planted.glob("kmirror-krb5-*.conf"))
    resolve_references({"kmirror.krb5.realm": "EXAMPLE.COM", "kmirror.krb5.kdcs": "kdc1:88"})
    conf = Path(os.environ["KRB5_CONFIG"])
    assert conf.read_text() == render_krb5_conf("EXAMPLE.COM", ["kdc1:88"])
    directory = conf.parent
    assert directory.parent == planted and directory.name.startswith("kmirror-") and directory.name != "kmirror-"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700 and directory.stat().st_uid == os.getuid()
    assert set(planted.glob("kmirror-krb5-*.conf")) == before  # nothing written at a predictable name


def python_prints(code: str, env: dict[str, str] | None = None) -> str:
    """The stdout of `python -c code` in a new process (from the repository root), which must succeed."""
    root = Path(__file__).resolve().parents[2]
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd=root
    ).stdout


def test_log4j_config_goes_to_a_private_directory_removed_at_exit() -> None:
    """Before: /tmp/kmirror-log4j2.properties, read by the driver JVM and writable by whoever made it first."""
    code = (
        "import os, stat; from spark_app.session import _log4j_file, LOG4J2; from pathlib import Path; "
        "p = Path(_log4j_file()); assert p.read_text() == LOG4J2; "
        "print(p, oct(stat.S_IMODE(p.parent.stat().st_mode)))"
    )
    path, mode = python_prints(code).split()
    assert mode == "0o700"
    assert Path(path).parent.parent == Path(tempfile.gettempdir()) and Path(path).parent.name.startswith("kmirror-")
    assert Path(path).name == "log4j2.properties"
    assert not Path(path).parent.exists()  # removed when the process exited


def test_what_a_worker_leaving_through_os_exit_left_is_removed_by_the_next_one(tmp_path: Path) -> None:
    """Issue 26: Spark's Python workers exit through os._exit, so atexit never removes their ticket
    caches and rendered files; weeks of worker restarts filled /tmp. The next process of the same
    kind removes directories whose process is gone, never a live process's or another kind's."""
    code = (
        "import os; from kmirror_engine.clients.factory import ticket_cache; from kmirror.security.kerberos "
        "import private_dir; print(ticket_cache('mm@R').split('::')[1].rsplit('/', 1)[0], private_dir(), flush=True); "
        "os._exit(0)"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    tickets, files = (Path(p) for p in python_prints(code, env).split())
    assert tickets.parent == tmp_path and tickets.name.startswith("kmirror-krb5cc-") and tickets.is_dir()
    assert files.parent == tmp_path and files.name.startswith("kmirror-files-") and files.is_dir()  # left behind
    mine = tmp_path / f"kmirror-krb5cc-{os.getpid()}-live"
    mine.mkdir()
    other = tmp_path / "kmirror-other-1-x"
    other.mkdir()
    python_prints(code, env)
    assert not tickets.exists() and not files.exists()  # swept by the second worker
    assert mine.is_dir() and other.is_dir()  # a live process's, and not ours to judge
    assert len(list(tmp_path.glob("kmirror-krb5cc-*"))) == 2  # the second worker's (it too left via os._exit) + mine
