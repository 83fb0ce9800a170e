"""Kerberos against a real MIT KDC on loopback. No broker here speaks GSSAPI (tansu has no
Kerberos, and Debian's librdkafka 2.0.2, the only GSSAPI-capable one, fails ApiVersions against
tansu), so the chain is proven up to the broker: keytab creation with the project's CLI, rendered
krb5.conf, `kinit -kt`, a JVM login with the rendered JAAS section, a GSSAPI-enabled librdkafka
accepting the rendered config (creating a client runs kinit with our keytab against the KDC), and
its SASL/GSSAPI token, sent to a stub of a broker's SASL listener, accepted by the JDK's GSS-API
acceptor with the broker's keytab. The PyPI wheel's refusal, and the app refusing to start with
it, are checked too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kmirror.errors import KmirrorError
from kmirror.security.config import client_config
from kmirror.security.kerberos import jaas_kafka_client, jvm_options, render_krb5_conf
from kmirror.security.security_checks import security_problems
from kmirror_cli.local_brokers import free_port
from kmirror_engine.clients.security_check import check_client_support
from tests.security.app_run import run_once
from tests.security.kdc_support import REALM, LocalKdc
from tests.security.sasl_stub import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE, SaslGssapiStub

pytestmark = pytest.mark.security
ROOT = Path(__file__).resolve().parents[2]
GSSAPI_VENV = Path(os.environ.get("KMIRROR_GSSAPI_VENV", ROOT / ".venv-gssapi"))
PRINCIPAL = f"mirrormaker/localhost@{REALM}"


def _keytab_cli(kdc: LocalKdc, principal: str, path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """The project's tooling: `python -m kmirror.security.kerberos keytab PRINCIPAL PATH` on the KDC host."""
    return subprocess.run(
        [sys.executable, "-m", "kmirror.security.kerberos", "keytab", principal, str(path), *extra],
        env=kdc.env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def kdc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKdc]:
    with LocalKdc(tmp_path_factory.mktemp("kdc")) as running:
        yield running


@pytest.fixture(scope="module")
def keytab(kdc: LocalKdc) -> Path:
    path = kdc.directory / "mirrormaker.keytab"
    done = _keytab_cli(kdc, PRINCIPAL, path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{path}: keytab for {PRINCIPAL}\n"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    return path


@pytest.fixture(scope="module")
def gssapi_python() -> Path:
    """The GSSAPI-capable venv: `make system-deps` builds it; the script is idempotent (~0.3 s when built)."""
    subprocess.run(["bash", str(ROOT / "scripts/build-gssapi-client.sh"), str(GSSAPI_VENV)], check=True, timeout=600)
    return GSSAPI_VENV / "bin/python"


def _security(kdc: LocalKdc, keytab: Path, principal: str = PRINCIPAL, own_krb5_conf: bool = False) -> dict[str, Any]:
    kerberos: dict[str, Any] = {"principal": principal, "keytab": {"file": str(keytab)}, "service_name": "kafka"}
    if own_krb5_conf:
        kerberos["krb5_conf"] = {"file": str(kdc.krb5_conf)}
    else:
        kerberos.update({"realm": kdc.realm, "kdcs": kdc.kdcs})
    security = {"protocol": "SASL_PLAINTEXT", "kerberos": kerberos}
    assert security_problems(security, "clusters.dc-old.security") == []
    return security


def _kinit(keytab: Path, principal: str, krb5_conf: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KRB5_CONFIG": str(krb5_conf), "KRB5CCNAME": f"FILE:{cache}"}
    return subprocess.run(["kinit", "-kt", str(keytab), principal], env=env, capture_output=True, text=True, timeout=30)


def _klist(cache: Path, env: dict[str, str]) -> str:
    return subprocess.run(["klist", "-c", f"FILE:{cache}"], env=env, capture_output=True, text=True, timeout=30).stdout


def test_project_keytab_and_rendered_krb5_conf_let_kinit_get_a_ticket(
    kdc: LocalKdc, keytab: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "ccache"
    done = _kinit(keytab, PRINCIPAL, kdc.krb5_conf, cache)
    assert done.returncode == 0, done.stderr
    listing = _klist(cache, {**os.environ, "KRB5_CONFIG": str(kdc.krb5_conf)})
    assert f"Default principal: {PRINCIPAL}" in listing
    assert f"krbtgt/{REALM}@{REALM}" in listing
    assert "AS_REQ" in kdc.log() and f"{PRINCIPAL} for krbtgt/{REALM}@{REALM}" in kdc.log()


def test_kinit_with_a_principal_missing_from_the_keytab_fails(kdc: LocalKdc, keytab: Path, tmp_path: Path) -> None:
    done = _kinit(keytab, f"nobody@{REALM}", kdc.krb5_conf, tmp_path / "cc")
    assert done.returncode != 0
    assert f"Keytab contains no suitable keys for nobody@{REALM}" in done.stderr


def test_exporting_a_keytab_again_keeps_earlier_keytabs_valid_unless_rotating(kdc: LocalKdc, tmp_path: Path) -> None:
    principal = f"mirrormaker/second-dc@{REALM}"
    first, second, rotated = tmp_path / "first.keytab", tmp_path / "second.keytab", tmp_path / "rotated.keytab"
    for path, extra in ((first, ()), (second, ()), (rotated, ("--rotate",))):
        done = _keytab_cli(kdc, principal, path, *extra)
        assert done.returncode == 0, done.stderr
        if path is second:  # a second datacenter's mirror must not lock out the first one
            assert _kinit(first, principal, kdc.krb5_conf, tmp_path / "cc1").returncode == 0
            assert _kinit(second, principal, kdc.krb5_conf, tmp_path / "cc2").returncode == 0
    assert _kinit(rotated, principal, kdc.krb5_conf, tmp_path / "cc3").returncode == 0
    stale = _kinit(first, principal, kdc.krb5_conf, tmp_path / "cc4")
    assert stale.returncode != 0 and "Password incorrect" in stale.stderr


def test_keytab_cli_reports_kadmin_failures_in_one_line(kdc: LocalKdc, tmp_path: Path) -> None:
    """kadmin.local -q exits 0 even when the query fails: the tooling must notice from its output."""
    principal = f"mirrormaker/unwritable@{REALM}"
    done = _keytab_cli(kdc, principal, tmp_path / "missing-dir" / "x.keytab")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "kmirror.security.kerberos keytab: "
        f"kadmin.local -q 'ktadd -k {tmp_path}/missing-dir/x.keytab {principal}' failed "
        f"(exit 0): kadmin.local: Key table file '{tmp_path}/missing-dir/x.keytab' not found while adding key to "
        "keytab\n"
    )
    spaced = _keytab_cli(kdc, "mirror maker@KMIRROR.TEST", tmp_path / "y.keytab")
    assert spaced.returncode == 1
    assert spaced.stderr == (
        "kmirror.security.kerberos keytab: principal 'mirror maker@KMIRROR.TEST' is not allowed: "
        "use a principal such as "
        "mirrormaker/host.example.com@EXAMPLE.COM (letters, digits, . _ -, one / and one @)\n"
    )
    assert not (tmp_path / "y.keytab").exists()


def test_krb5_conf_cli_renders_the_file_the_app_renders(tmp_path: Path) -> None:
    out = tmp_path / "krb5.conf"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kmirror.security.kerberos",
            "krb5-conf",
            "--realm",
            "DC.EXAMPLE.COM",
            "--kdc",
            "kdc1.dc.example.com",
            "--kdc",
            "kdc2.dc.example.com:750",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_text() == render_krb5_conf("DC.EXAMPLE.COM", ["kdc1.dc.example.com", "kdc2.dc.example.com:750"])
    assert "    kdc = kdc1.dc.example.com:88\n    kdc = kdc2.dc.example.com:750\n" in out.read_text()


JAAS_LOGIN = """
import javax.security.auth.kerberos.KerberosTicket;
import javax.security.auth.login.LoginContext;
public class JaasLogin {
  public static void main(String[] args) throws Exception {
    LoginContext context = new LoginContext("KafkaClient");
    context.login();
    for (KerberosTicket t : context.getSubject().getPrivateCredentials(KerberosTicket.class)) {
      System.out.println("ticket " + t.getClient() + " -> " + t.getServer());
    }
  }
}
"""


def test_a_jvm_client_logs_in_with_the_rendered_jaas_section_and_krb5_conf(
    kdc: LocalKdc, keytab: Path, tmp_path: Path
) -> None:
    """What a JVM MirrorMaker / Kafka CLI tool does with the rendered JAAS section + `jvm_options`."""
    rendered = subprocess.run(
        [sys.executable, "-m", "kmirror.security.kerberos", "jaas", PRINCIPAL, str(keytab)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert rendered == jaas_kafka_client(PRINCIPAL, str(keytab))
    jaas = tmp_path / "kafka_client_jaas.conf"
    jaas.write_text(rendered)
    (tmp_path / "JaasLogin.java").write_text(JAAS_LOGIN)
    done = subprocess.run(
        ["java", *jvm_options(str(kdc.krb5_conf), str(jaas)), "JaasLogin.java"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"ticket {PRINCIPAL} -> krbtgt/{REALM}@{REALM}" in done.stdout


GSSAPI_CLIENT = """
import json, sys
import confluent_kafka
from kmirror.security.config import client_config, resolve_references
from kmirror_engine.clients.security_check import check_client_support
security, bootstrap = json.loads(sys.argv[1]), sys.argv[2]
config = client_config(security)
check_client_support("dc-old", config)
resolved = resolve_references(config)  # exports KRB5_CONFIG (rendering krb5.conf from realm + kdcs)
producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, **resolved})  # librdkafka runs kinit -t keytab
for _ in range(4):
    producer.poll(0.5)  # the first ticket refresh runs on librdkafka's main thread right after creation
print(json.dumps({"created": True, "config": config}))
"""


def _gssapi_client(
    python: Path, security: dict[str, Any], cache: Path, bootstrap: str | None = None
) -> tuple[dict[str, Any], str]:
    """Run GSSAPI_CLIENT in the GSSAPI venv; returns its JSON result and librdkafka's log (stderr)."""
    env = {k: v for k, v in os.environ.items() if k != "KRB5_CONFIG"}
    env.update({"PYTHONPATH": str(ROOT), "KRB5CCNAME": f"FILE:{cache}"})
    bootstrap = bootstrap or f"127.0.0.1:{free_port()}"  # nothing listens: only kinit runs
    done = subprocess.run(
        [str(python), "-c", GSSAPI_CLIENT, json.dumps(security), bootstrap],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(cache.parent),
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1])), done.stderr


@pytest.mark.parametrize("own_krb5_conf", [False, True], ids=["realm+kdcs", "krb5_conf-reference"])
def test_gssapi_confluent_kafka_accepts_the_rendered_config(
    kdc: LocalKdc, keytab: Path, gssapi_python: Path, tmp_path: Path, own_krb5_conf: bool
) -> None:
    cache = tmp_path / "librdkafka-ccache"
    security = _security(kdc, keytab, own_krb5_conf=own_krb5_conf)
    result, log = _gssapi_client(gssapi_python, security, cache)
    assert "Kerberos ticket refresh failed" not in log
    krb5 = (
        {"kmirror.krb5.conf": str(kdc.krb5_conf)}
        if own_krb5_conf
        else {"kmirror.krb5.realm": REALM, "kmirror.krb5.kdcs": kdc.kdcs[0]}
    )
    assert result == {
        "created": True,
        "config": {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "GSSAPI",
            "sasl.kerberos.service.name": "kafka",
            "sasl.kerberos.principal": PRINCIPAL,
            "sasl.kerberos.keytab": str(keytab),
            "sasl.kerberos.kinit.cmd": client_config(security)["sasl.kerberos.kinit.cmd"],
            **krb5,
        },
    }
    # librdkafka's kinit put a TGT for our principal into the cache, fetched from our KDC.
    listing = _klist(cache, {**os.environ, "KRB5_CONFIG": str(kdc.krb5_conf)})
    assert f"Default principal: {PRINCIPAL}" in listing


GSS_ACCEPTOR = """
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.PrivilegedExceptionAction;
import javax.security.auth.Subject;
import javax.security.auth.login.LoginContext;
import org.ietf.jgss.GSSContext;
import org.ietf.jgss.GSSCredential;
import org.ietf.jgss.GSSManager;
public class GssAccept {
  public static void main(String[] args) throws Exception {
    byte[] token = Files.readAllBytes(Path.of(args[0]));
    LoginContext login = new LoginContext("KafkaServer");
    login.login();
    String who = Subject.doAs(login.getSubject(), (PrivilegedExceptionAction<String>) () -> {
      GSSContext context = GSSManager.getInstance().createContext((GSSCredential) null);
      context.acceptSecContext(token, 0, token.length);
      return context.getSrcName() + " -> " + context.getTargName() + " established=" + context.isEstablished();
    });
    System.out.println("accepted " + who);
  }
}
"""


def test_gssapi_client_authenticates_to_a_jvm_acceptor_holding_the_broker_keytab(
    kdc: LocalKdc, keytab: Path, gssapi_python: Path, tmp_path: Path
) -> None:
    """The rendered config drives librdkafka through ApiVersions, SaslHandshake(GSSAPI) and a service
    ticket for `<service_name>/<broker host>` from our KDC; the token it sends is accepted by the
    JDK's GSS-API acceptor (what a Kafka broker runs) with the broker's keytab."""
    broker_principal = f"kafka/localhost@{REALM}"
    broker_keytab = tmp_path / "broker.keytab"
    assert _keytab_cli(kdc, broker_principal, broker_keytab).returncode == 0
    with SaslGssapiStub() as stub:
        _gssapi_client(gssapi_python, _security(kdc, keytab), tmp_path / "cc", f"localhost:{stub.port}")
    assert stub.mechanisms == ["GSSAPI"]
    assert [key for key, _ in stub.requests] == [API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE]
    assert f"{PRINCIPAL} for {broker_principal}" in kdc.log()  # the service ticket
    [token] = stub.tokens
    (tmp_path / "token").write_bytes(token)
    (tmp_path / "server_jaas.conf").write_text(
        "KafkaServer {\n  com.sun.security.auth.module.Krb5LoginModule required\n  useKeyTab=true\n"
        f'  storeKey=true\n  isInitiator=false\n  keyTab="{broker_keytab}"\n  principal="{broker_principal}";\n}};\n'
    )
    (tmp_path / "GssAccept.java").write_text(GSS_ACCEPTOR)
    options = jvm_options(str(kdc.krb5_conf), str(tmp_path / "server_jaas.conf"))
    done = subprocess.run(
        ["java", *options, "GssAccept.java", str(tmp_path / "token")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"accepted {PRINCIPAL} -> {broker_principal} established=true\n"


def test_gssapi_client_reports_a_principal_missing_from_the_keytab(
    kdc: LocalKdc, keytab: Path, gssapi_python: Path, tmp_path: Path
) -> None:
    intruder = f"intruder/localhost@{REALM}"
    _, log = _gssapi_client(gssapi_python, _security(kdc, keytab, principal=intruder), tmp_path / "cc")
    assert f"Keytab contains no suitable keys for {intruder}" in log
    assert "Kerberos ticket refresh failed" in log
    assert not (tmp_path / "cc").exists()


def test_pypi_wheel_reports_missing_gssapi_with_the_fix(kdc: LocalKdc, keytab: Path) -> None:
    with pytest.raises(KmirrorError) as failure:
        check_client_support("dc-old", client_config(_security(kdc, keytab)))
    message = str(failure.value)
    assert message.startswith("cluster 'dc-old' needs sasl.mechanisms=GSSAPI, which this confluent-kafka ")
    assert "No provider for SASL mechanism GSSAPI" in message
    assert "pip install --no-binary confluent-kafka confluent-kafka==2.0.2" in message
    assert "apt-get install librdkafka-dev libsasl2-modules-gssapi-mit" in message


def test_the_app_refuses_to_start_without_gssapi_and_says_how_to_get_it(
    kdc: LocalKdc, keytab: Path, tmp_path: Path
) -> None:
    """`python -m spark_app` in this venv (the PyPI wheel) with a Kerberized source cluster."""
    source, target = ("dc-old", f"127.0.0.1:{free_port()}"), ("west-1", f"127.0.0.1:{free_port()}")
    done, took_s = run_once(tmp_path, source, client_config(_security(kdc, keytab)), target)
    assert done.returncode == 1
    assert took_s < 20  # before any Spark session or connection attempt
    assert done.stderr.startswith("kmirror run: cluster 'dc-old' needs sasl.mechanisms=GSSAPI, which this ")
    assert "scripts/build-gssapi-client.sh" in done.stderr and "Traceback" not in done.stderr


GSSAPI_ROUND_TRIP = """
import json, sys
import confluent_kafka
from kmirror.security.config import client_config, resolve_references
security, bootstrap, topic = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
resolved = resolve_references(client_config(security))
producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", **resolved})
for i in range(50):
    producer.produce(topic, f"v{i}".encode(), f"k{i}".encode())
left = producer.flush(60)
consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "kerberized", **resolved})
consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
values = []
while len(values) < 50:
    msg = consumer.poll(30)
    if msg is None or msg.error():
        break
    values.append(msg.value().decode())
consumer.close()
print(json.dumps({"unflushed": left, "values": values}))
"""


def _gssapi_broker(kdc: LocalKdc, tmp_path: Path, name: str, **options: Any) -> tuple[Any, str]:
    """A stopped Apache Kafka broker `name` with a SASL/GSSAPI listener "GSS" (the JDK acceptor
    with the broker's keytab, our KDC; `options` add to the broker's), and the broker's principal."""
    from kmirror_cli.local_kafka import KafkaBroker, Listener
    from tests.brokers import KAFKA_LINE

    broker_principal = f"kafka/127.0.0.1@{REALM}"  # librdkafka asks for <service>/<advertised host>
    broker_keytab = tmp_path / "broker.keytab"
    assert _keytab_cli(kdc, broker_principal, broker_keytab).returncode == 0
    jaas = (
        "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true "
        f'keyTab="{broker_keytab}" principal="{broker_principal}";'
    )
    listener = Listener(
        "GSS", "SASL_PLAINTEXT", settings={"sasl.enabled.mechanisms": "GSSAPI", "gssapi.sasl.jaas.config": jaas}
    )
    settings = {"sasl.kerberos.service.name": "kafka"}
    jvm = tuple(jvm_options(str(kdc.krb5_conf)))
    broker = KafkaBroker(
        name, line=KAFKA_LINE, extra_listeners=(listener,), settings=settings, jvm_options=jvm, **options
    )
    return broker, broker_principal


@pytest.mark.real_kafka
@pytest.mark.e2e
def test_a_kerberized_produce_and_consume_through_an_apache_kafka_gssapi_listener(
    kdc: LocalKdc, keytab: Path, gssapi_python: Path, tmp_path: Path
) -> None:
    """Apache Kafka's own SASL/GSSAPI listener (the JDK acceptor with the broker's keytab, our
    KDC): the rendered client config produces and consumes through it, as `mirrormaker`."""
    from tests.brokers import IS_TANSU
    from tests.kafka_helpers import create_topic

    if IS_TANSU:
        pytest.skip("tansu has no GSSAPI")  # deselected there anyway (real_kafka)
    broker, broker_principal = _gssapi_broker(
        kdc, tmp_path, "kerberized", super_users=("User:ANONYMOUS", "User:mirrormaker")
    )
    with broker:
        topic = "kerberized-orders"
        create_topic(broker.bootstrap_servers, topic, 1)
        env = {k: v for k, v in os.environ.items() if k != "KRB5_CONFIG"}
        env.update({"PYTHONPATH": str(ROOT), "KRB5CCNAME": f"FILE:{tmp_path / 'cc'}"})
        done = subprocess.run(
            [
                str(gssapi_python),
                "-c",
                GSSAPI_ROUND_TRIP,
                json.dumps(_security(kdc, keytab)),
                broker.listener_address("GSS"),
                topic,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            cwd=str(tmp_path),
        )
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result == {"unflushed": 0, "values": [f"v{i}" for i in range(50)]}, done.stderr[-3000:]
        assert f"{PRINCIPAL} for {broker_principal}" in kdc.log()  # the service ticket came from our KDC
        assert (
            "Successfully authenticated client: authenticationID=mirrormaker/localhost" in broker.log_path.read_text()
        )


GSSAPI_MIRROR = """
import json, sys
from kmirror.flow.spec import parse_flow_spec
from kmirror_engine.clients.factory import admin_client, consumer_config, new_consumer, new_producer, producer_config
from kmirror_engine.copying.ranges import CONSUMER_REQUIRED, CopyRange
from kmirror_engine.copying.range_copy import RangeCopier
from kmirror_engine.planning.discovery import MirroredTopic
from kmirror_engine.planning.target_topics import TargetTopics
spec, topic = parse_flow_spec(json.loads(sys.argv[1])), sys.argv[2]
remote = "west." + topic
TargetTopics(admin_client(spec.source), admin_client(spec.target), spec.target).ensure(
    {topic: MirroredTopic(topic, 1, remote)})
consumer_conf = consumer_config(spec.source, spec.copy, spec.consumer_group)
consumer = new_consumer({**consumer_conf, **CONSUMER_REQUIRED}, role="copy-consumer")
producer = new_producer(producer_config(spec.target, spec.copy, spec.id), role="copy-producer")
progress = RangeCopier(consumer, producer).copy([CopyRange(topic, 0, 0, 100, remote)])
consumer.close()
print(json.dumps({"records": [p.records for p in progress]}))
"""


@pytest.mark.real_kafka
@pytest.mark.e2e
def test_a_mirror_through_a_gssapi_listener_with_only_the_rendered_acls(
    kdc: LocalKdc, keytab: Path, gssapi_python: Path, tmp_path: Path
) -> None:
    """The StandardAuthorizer on and `mirrormaker` no super user: with only the ACLs
    `mirror_acls` lists for its flow (one cluster as both source and target), the GSSAPI client
    build creates the remote topic and copies every record through the Kerberized listener;
    before the grants the same copy is refused by the authorizer."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    from kmirror.flow.spec import parse_flow_spec
    from kmirror.security.config import client_config
    from kmirror_engine.planning.internal_topics import mirror_acls
    from tests.brokers import IS_TANSU
    from tests.kafka_helpers import consume_all, create_topic, produce

    if IS_TANSU:
        pytest.skip("tansu has no GSSAPI")  # deselected there anyway (real_kafka)
    broker, _ = _gssapi_broker(kdc, tmp_path, "kerberized-acl")
    with broker:
        topic = "kerberized-mirrored"
        create_topic(broker.bootstrap_servers, topic, 1)
        produce(
            broker.bootstrap_servers, topic, [{"key": f"k{i}".encode(), "value": f"v{i}".encode()} for i in range(100)]
        )
        cluster = {"bootstrap_servers": broker.listener_address("GSS"), "config": client_config(_security(kdc, keytab))}
        raw = {
            "id": "west->east",
            "checkpoint_location": str(tmp_path / "cp"),
            "source": {"alias": "west", **cluster},
            "target": {"alias": "east", **cluster},
            "topics": [topic],
            "topics_exclude": [],
            "replication_policy": {"type": "default"},
            "emit_checkpoints": False,
            "emit_heartbeats": False,
        }
        env = {k: v for k, v in os.environ.items() if k != "KRB5_CONFIG"}
        env.update({"PYTHONPATH": str(ROOT), "KRB5CCNAME": f"FILE:{tmp_path / 'cc'}"})

        def mirror() -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [str(gssapi_python), "-c", GSSAPI_MIRROR, json.dumps(raw), topic],
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
                cwd=str(tmp_path),
            )

        refused = mirror()
        assert refused.returncode != 0 and "authoriz" in refused.stderr.lower(), refused.stderr[-3000:]
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        bindings = [
            AclBinding(
                ResourceType[acl.resource_type],
                acl.name,
                ResourcePatternType[acl.pattern],
                "User:mirrormaker",
                "*",
                AclOperation[re.sub(r"(?<!^)(?=[A-Z])", "_", op).upper()],
                AclPermissionType.ALLOW,
            )
            for acl in mirror_acls(parse_flow_spec(raw), [topic])
            for op in acl.operations
        ]
        for future in admin.create_acls(bindings).values():
            future.result(timeout=30)
        done = mirror()
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout.strip().splitlines()[-1]) == {"records": [100]}
        copied = consume_all(broker.bootstrap_servers, f"west.{topic}", 1)[0]
        assert sorted(m.value() for m in copied) == sorted(f"v{i}".encode() for i in range(100))
