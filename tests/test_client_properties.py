"""Issue 25: librdkafka client properties are refused by `kmirror validate` (and plan, diff, the
Pulumi program) the way librdkafka would refuse them when the app starts: names (did you mean),
aliases, the client a property belongs to, types, enumerations and ranges, producer safety."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from kmirror.errors import EXIT_INVALID_INPUT, ValidationError
from kmirror.flow.spec import parse_flow_spec
from kmirror.security import client_properties
from kmirror.security.client_properties import JAVA_EQUIVALENTS, client_property_problems
from kmirror.security.librdkafka_properties import LIBRDKAFKA_VERSION, PROPERTIES
from kmirror.security.override_rules import client_override_problems
from kmirror_cli.cli import main

ROOT = Path(__file__).resolve().parents[1]
BASE: dict[str, Any] = {
    "clusters": {
        "west-1": {"bootstrap_servers": "w:9092", "datacenter": "west"},
        "east-1": {"bootstrap_servers": "e:9092", "datacenter": "east"},
    },
    "topologies": [{"name": "dr", "pattern": "active-passive", "primary": "west-1", "standby": "east-1"}],
}
# (where, overrides, the problem line `kmirror validate` must print)
REFUSED = [
    (
        "producer",
        {"linger.mss": 5},
        "topologies[0].producer.linger.mss: unknown librdkafka producer property 'linger.mss'; "
        "did you mean 'linger.ms'?",
    ),
    (
        "producer",
        {"compression.type": "zstdx"},
        "topologies[0].producer.compression.type: invalid value 'zstdx' for librdkafka's 'compression.type': "
        "must be one of none, gzip, snappy, lz4, zstd",
    ),
    (
        "consumer",
        {"fetch.max.bytes": "lots"},
        "topologies[0].consumer.fetch.max.bytes: invalid value 'lots' for librdkafka's 'fetch.max.bytes': "
        "must be an integer in 0..2147483135",
    ),
    (
        "producer",
        {"linger.ms": 1_000_000},
        "topologies[0].producer.linger.ms: invalid value 1000000 for librdkafka's 'linger.ms': must be a number in "
        "0..900000",
    ),
    (
        "producer",
        {"enable.idempotence": "yes"},
        "topologies[0].producer.enable.idempotence: invalid value 'yes' for librdkafka's 'enable.idempotence': "
        "must be true or false",
    ),
    (
        "producer",
        {"acks": "all", "request.required.acks": -1},
        "topologies[0].producer.request.required.acks: 'acks' and 'request.required.acks' both set librdkafka's "
        "'request.required.acks' (one would silently win); keep only one",
    ),
    (
        "producer",
        {"linger.ms": 5, "queue.buffering.max.ms": 10},
        "topologies[0].producer.queue.buffering.max.ms: 'linger.ms' and 'queue.buffering.max.ms' both set "
        "librdkafka's 'queue.buffering.max.ms' (one would silently win); keep only one",
    ),
    (
        "producer",
        {"request.required.acks": 1},
        "topologies[0].producer.request.required.acks: must stay 'all' (records could be lost), got 1; "
        "remove the override",
    ),
    (
        "producer",
        {"acks": 1},
        "topologies[0].producer.acks: must stay 'all' (records could be lost), got 1; remove the override",
    ),
    (
        "producer",
        {"max.in.flight": 10},
        "topologies[0].producer.max.in.flight: must be 1..5 (ordering with idempotence), got 10",
    ),
    ("producer", {"delivery.timeout.ms": 0}, "topologies[0].producer.delivery.timeout.ms: must be a finite time in ms"),
    (
        "consumer",
        {"linger.ms": 5},
        "topologies[0].consumer.linger.ms: 'linger.ms' is a librdkafka producer property: a consumer ignores it; "
        "move it to `producer`",
    ),
    (
        "producer",
        {"auto.offset.reset": "earliest"},
        "topologies[0].producer.auto.offset.reset: 'auto.offset.reset' is a librdkafka consumer property: "
        "a producer ignores it; move it to `consumer`",
    ),
    (
        "producer",
        {"max.request.size": 2_000_000},
        "topologies[0].producer.max.request.size: unknown librdkafka producer property 'max.request.size'; it is a "
        "Java-client (MirrorMaker 2) name: librdkafka's is 'message.max.bytes'",
    ),
    (
        "producer",
        {"dr_msg_cb": "x"},
        "topologies[0].producer.dr_msg_cb: cannot be overridden: it makes every client run or load code",
    ),
]
IDS = [f"{where}-{'+'.join(overrides)}" for where, overrides, _ in REFUSED]


def topology_with(where: str, overrides: dict[str, Any]) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    raw["topologies"][0][where] = overrides
    return raw


def validate(tmp_path: Path, raw: dict[str, Any], capsys: Any) -> tuple[int, str]:
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(raw))
    code = main(["validate", "--topology", str(path)])
    return code, capsys.readouterr().err


@pytest.fixture(params=["librdkafka", "table only"])
def librdkafka(request: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of checking: asking librdkafka too, or the table alone (no confluent-kafka, as a
    Pulumi program may run)."""
    if request.param == "table only":
        monkeypatch.setattr(client_properties, "_confluent_kafka", lambda: None)
    return str(request.param)


@pytest.mark.parametrize(("where", "overrides", "line"), REFUSED, ids=IDS)
def test_validate_refuses_what_librdkafka_would(
    tmp_path: Path, capsys: Any, librdkafka: str, where: str, overrides: dict[str, Any], line: str
) -> None:
    code, err = validate(tmp_path, topology_with(where, overrides), capsys)
    assert code == EXIT_INVALID_INPUT
    assert f"  - {line}" in err, err


def test_every_problem_of_every_layer_is_listed_at_once(tmp_path: Path, capsys: Any) -> None:
    raw = topology_with("producer", {"linger.mss": 5, "compression.type": "zstdx"})
    raw["defaults"] = {"consumer": {"fetch.max.bytes": "lots"}}
    raw["flows"] = {"west-1->east-1": {"producer": {"request.required.acks": "1"}}}
    code, err = validate(tmp_path, raw, capsys)
    assert code == EXIT_INVALID_INPUT
    paths = [
        "topologies[0].producer.linger.mss",
        "topologies[0].producer.compression.type",
        "defaults.consumer.fetch.max.bytes",
        "flows.west-1->east-1.producer.request.required.acks",
    ]
    for path in paths:
        assert f"  - {path}: " in err, err


VALID = {
    "producer": {
        "acks": "all",
        "linger.ms": "5",
        "compression.type": "ZSTD",
        "enable.idempotence": "t",
        "max.in.flight": 5,
        "debug": "broker,topic",
        "batch.size": 1_000_000,
        "message.timeout.ms": 120_000,
        "sasl.oauthbearer.client.secret": "${env:SECRET}",
    },
    "consumer": {
        "fetch.max.bytes": 52428800,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "max.partition.fetch.bytes": "1048576",
        "check.crcs": True,
        "client.id": "mirror",
    },
}


def test_valid_overrides_pass_either_way(tmp_path: Path, capsys: Any, librdkafka: str) -> None:
    raw = topology_with("producer", VALID["producer"])
    raw["topologies"][0]["consumer"] = VALID["consumer"]
    code, err = validate(tmp_path, raw, capsys)
    assert (code, err) == (0, "")


@pytest.mark.parametrize("topology", ["stacks/topology.yaml", "examples/yaml/topology.yaml"])
def test_the_shipped_topologies_stay_valid(capsys: Any, topology: str) -> None:
    assert main(["validate", "--topology", str(ROOT / topology)]) == 0, capsys.readouterr().err


def test_a_flow_specs_cluster_config_is_checked_too() -> None:
    raw = {
        "id": "a->b",
        "source": {"alias": "a", "bootstrap_servers": "a:9092", "config": {"socket.timeout.mss": "1"}},
        "target": {"alias": "b", "bootstrap_servers": "b:9092", "config": {"request.required.acks": "x"}},
        "checkpoint_location": "/tmp/ckpt",
    }
    with pytest.raises(ValidationError) as caught:
        parse_flow_spec(raw)
    problems = {p.path: p.message for p in caught.value.problems}
    assert problems["source.config.socket.timeout.mss"] == (
        "unknown librdkafka property 'socket.timeout.mss'; did you mean 'socket.timeout.ms'?"
    )
    assert problems["target.config.request.required.acks"] == (
        "invalid value 'x' for librdkafka's 'request.required.acks': must be an integer in -1..1000 or 'all'"
    )


def test_librdkafka_is_asked_where_the_table_says_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """With confluent-kafka importable, librdkafka's own verdict counts: a table entry without
    its type still refuses what librdkafka refuses; without confluent-kafka it cannot."""
    monkeypatch.setitem(PROPERTIES, "fetch.max.bytes", {"role": "C", "type": "string"})
    [problem] = client_override_problems({"fetch.max.bytes": "lots"}, "consumer")
    assert str(problem) == (
        f"consumer.fetch.max.bytes: refused by librdkafka {LIBRDKAFKA_VERSION}: Invalid value for configuration "
        "property \"fetch.max.bytes\" (value 'lots')"
    )
    monkeypatch.setattr(client_properties, "_confluent_kafka", lambda: None)
    assert client_override_problems({"fetch.max.bytes": "lots"}, "consumer") == []


def test_the_table_is_the_shipped_librdkafkas() -> None:
    import confluent_kafka

    assert confluent_kafka.libversion()[0] == LIBRDKAFKA_VERSION
    # the Java names hinted at are not librdkafka's; their equivalents are
    assert not set(JAVA_EQUIVALENTS) & set(PROPERTIES)
    assert {v for v in JAVA_EQUIVALENTS.values() if v} <= set(PROPERTIES)


def test_no_secret_and_no_unknown_names_value_is_printed() -> None:
    problems = client_property_problems(
        {"sasl.pasword": "hunter2", "ssl.key.password": "x" * 3, "sasl.username": 5},
        "producer",
        "producer",
        hidden=lambda name: "password" in name,
    )
    assert [p.path for p in problems] == ["producer.sasl.pasword"]
    assert "hunter2" not in str(problems) and "did you mean 'sasl.password'?" in problems[0].message


def test_the_factory_holds_aliases_to_the_safety_rules() -> None:
    from kmirror_engine.clients.factory import producer_safety_problems, safe_producer_config

    assert [p.path for p in producer_safety_problems({"request.required.acks": "1"})] == [
        "producer.request.required.acks"
    ]
    assert producer_safety_problems({"request.required.acks": "ALL", "enable.idempotence": "t"}) == []
    # an unsafe alias in a cluster's config is replaced, not left to win over the safe name
    config = safe_producer_config({"request.required.acks": 1, "linger.ms": 7}, {}, source="test")
    assert "request.required.acks" not in config and config["acks"] == "all" and config["linger.ms"] == 7
    with pytest.raises(ValidationError, match=r"producer\.retries: must stay unbounded"):
        safe_producer_config({}, {"retries": 3}, source="test")


PREVIEW_CASES = [REFUSED[0], REFUSED[1], REFUSED[2], REFUSED[5], REFUSED[7]]


@pytest.mark.parametrize(
    ("where", "overrides", "line"), PREVIEW_CASES, ids=[IDS[REFUSED.index(c)] for c in PREVIEW_CASES]
)
def test_a_pulumi_preview_refuses_them_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, overrides: dict[str, Any], line: str
) -> None:
    """The program, under the SDK's mocks and without confluent-kafka (the table alone), fails
    before anything is created, naming the path and the reason."""
    from tests.pulumi.harness import run_program, stack_config

    monkeypatch.setattr(client_properties, "_confluent_kafka", lambda: None)
    raw = yaml.safe_load((ROOT / "stacks" / "topology.yaml").read_text())
    raw["topologies"][0][where] = overrides
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(Exception) as caught:
        run_program("west", stack_config("west", topology=str(path)))
    assert type(caught.value).__name__ == "ValidationError"
    assert line in str(caught.value)


def test_a_layers_alias_replaces_the_lower_layers_name(tmp_path: Path, capsys: Any) -> None:
    """`defaults: linger.ms` then a topology's `queue.buffering.max.ms`: the flow gets the topology's
    value under one name (two names would be refused by the app's flow-spec check)."""
    from kmirror.estate.planner import parse_topology, plan_topology

    raw = topology_with("producer", {"queue.buffering.max.ms": 7})
    raw["defaults"] = {"producer": {"linger.ms": 5, "acks": "all"}}
    [flow] = plan_topology(parse_topology(raw)).flows
    assert flow.producer == {"acks": "all", "queue.buffering.max.ms": 7}
