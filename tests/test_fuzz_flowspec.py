"""Bad input: fuzzing the flow spec (hypothesis).

Every invalid spec must fail validation with a `ValidationError` (exit code 2) whose problems
name the offending field; no other exception may escape (it would be a traceback). The
in-process properties go through `kmirror.flow.spec` for speed; a few subprocess cases check
the real command lines (`python -m spark_app`, `kmirror run`) end to end.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kmirror.errors import EXIT_INVALID_INPUT, ValidationError
from kmirror.flow.spec import ALLOWED, OPTION_BY_NAME, REQUIRED, load_flow_spec, parse_flow_spec
from tests import fuzz_helpers
from tests.planner_fakes import raw_spec

BASE: dict[str, Any] = {
    "id": "west->east",
    "source": {"alias": "west", "bootstrap_servers": "127.0.0.1:19092", "config": {}},
    "target": {"alias": "east", "bootstrap_servers": "127.0.0.1:19093", "config": {}},
    "topics": ["orders", "pay.*"],
    "topics_exclude": [".*[-.]internal", "__.*"],
    "replication_policy": {"type": "default", "separator": "."},
    "checkpoint_location": "/tmp/kmirror/west-east",
}

json_values = fuzz_helpers.json_values(12)  # any JSON value (what a flow file can hold)
not_a_string = json_values.filter(lambda v: not isinstance(v, str))
not_a_bool = json_values.filter(lambda v: not isinstance(v, bool))
not_a_list = json_values.filter(lambda v: not isinstance(v, list))
bad_regexes = st.sampled_from(["(", "[a-", "*x", "(?<=a+)b", "(?P<n>a)(?P<n>b)", "\\", "a)"])


def bad_int(minimum: int, nullable: bool) -> st.SearchStrategy[Any]:
    """Values an `int >= minimum` option must refuse (None too unless the option is nullable)."""
    wrong_type = json_values.filter(
        lambda v: not (isinstance(v, int) and not isinstance(v, bool)) and not (nullable and v is None)
    )
    return wrong_type | st.integers(max_value=minimum - 1) | st.booleans()


def bad_option_value(name: str) -> st.SearchStrategy[Any]:
    default = OPTION_BY_NAME[name].default
    if name in ("producer", "consumer"):
        return not_a_string.filter(lambda v: not isinstance(v, dict))
    if name == "starting_offsets":
        return (
            json_values.filter(lambda v: v not in ("earliest", "latest") and not isinstance(v, dict))
            | st.fixed_dictionaries({"timestamp_ms": st.integers(max_value=-1) | st.text(max_size=4)})
            | st.just({"timestamp_ms": 1, "extra": 2})
        )
    if isinstance(default, bool):
        return not_a_bool
    if name == "copy_loop":
        return json_values.filter(lambda v: v not in ("auto", "native", "python", "batch"))
    if name == "skip_offsets":  # not a list, or a list with an entry not of the topic:partition:offset form
        return not_a_list | st.lists(not_a_string | st.text(max_size=8).filter(lambda t: t.count(":") != 2), min_size=1)
    if name in ("consumer_group", "dead_letter_topic"):
        return not_a_string.filter(lambda v: v is not None)
    minimum = 0 if name.endswith("_ms") or name == "metrics_port" else 1
    return bad_int(minimum, nullable=default is None)


def with_change(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    return fuzz_helpers.changed(BASE, path, value)


def without(path: tuple[str, ...]) -> dict[str, Any]:
    return fuzz_helpers.removed(BASE, path)


def mutations() -> st.SearchStrategy[tuple[dict[str, Any], str]]:
    """One invalid change of the valid BASE spec, with the field the error must name."""
    options = sorted(OPTION_BY_NAME)
    endpoint_field = st.sampled_from(["source", "target"])
    unknown_key = st.text(min_size=1, max_size=16).filter(lambda k: k not in ALLOWED)
    return st.one_of(
        st.sampled_from(REQUIRED).map(lambda k: (without((k,)), k)),
        unknown_key.map(lambda k: (with_change((k,), 1), k)),
        st.sampled_from(options).flatmap(
            lambda name: bad_option_value(name).map(lambda v, n=name: (with_change((n,), v), n))
        ),
        st.text(max_size=20)
        .filter(lambda s: "->" not in s.strip("\n") or "\n" in s or " " in s)
        .map(lambda s: (with_change(("id",), s), "id")),
        not_a_string.map(lambda v: (with_change(("id",), v), "id")),
        st.tuples(endpoint_field, st.sampled_from(["alias", "bootstrap_servers"]), not_a_string | st.just("")).map(
            lambda t: (with_change((t[0], t[1]), t[2]), f"{t[0]}.{t[1]}")
        ),
        st.tuples(endpoint_field, st.sampled_from(["alias", "bootstrap_servers"])).map(
            lambda t: (without(t), f"{t[0]}.{t[1]}")
        ),
        st.tuples(endpoint_field, unknown_key.filter(lambda k: k not in ("alias", "bootstrap_servers", "config"))).map(
            lambda t: (with_change(t, "x"), f"{t[0]}.{t[1]}")
        ),
        st.tuples(endpoint_field, not_a_string.filter(lambda v: not isinstance(v, dict))).map(
            lambda t: (with_change((t[0], "config"), t[1]), f"{t[0]}.config")
        ),
        st.tuples(endpoint_field, not_a_string.filter(lambda v: not isinstance(v, dict))).map(
            lambda t: (with_change((t[0],), t[1]), t[0])
        ),
        st.tuples(st.sampled_from(["topics", "topics_exclude", "groups", "groups_exclude"]), not_a_list).map(
            lambda t: (with_change((t[0],), t[1]), t[0])
        ),
        st.tuples(st.sampled_from(["topics", "topics_exclude", "groups", "groups_exclude"]), bad_regexes).map(
            lambda t: (with_change((t[0],), ["ok", t[1]]), f"{t[0]}[1]")
        ),
        st.tuples(st.sampled_from(["topics", "topics_exclude"]), not_a_string).map(
            lambda t: (with_change((t[0],), [t[1]]), f"{t[0]}[0]")
        ),
        json_values.filter(lambda v: v not in ("default", "identity")).map(
            lambda v: (with_change(("replication_policy", "type"), v), "replication_policy.type")
        ),
        (not_a_string | st.text(max_size=12).filter(lambda s: not _valid_separator(s))).map(
            lambda v: (with_change(("replication_policy", "separator"), v), "replication_policy.separator")
        ),
        not_a_string.filter(lambda v: not isinstance(v, dict)).map(
            lambda v: (with_change(("replication_policy",), v), "replication_policy")
        ),
        (not_a_string | st.just("")).map(lambda v: (with_change(("checkpoint_location",), v), "checkpoint_location")),
    )


def _valid_separator(text: str) -> bool:
    allowed = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
    return 1 <= len(text) <= 8 and set(text) <= allowed


def test_the_base_spec_is_valid() -> None:
    spec = parse_flow_spec(copy.deepcopy(BASE))
    assert spec.id == "west->east" and parse_flow_spec(spec.to_dict()) == spec


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
@example((with_change(("id",), "west->east\n"), "id"))
@example((with_change(("replication_policy", "separator"), ".\n"), "replication_policy.separator"))
@example((with_change(("replication_policy", "type"), ["default"]), "replication_policy.type"))
@example((with_change(("replication_policy", "type"), {"a": 1}), "replication_policy.type"))
@example((with_change(("starting_offsets",), {"timestamp_ms": True}), "starting_offsets"))
def test_every_invalid_spec_is_a_validation_error_naming_the_field(case: tuple[dict[str, Any], str]) -> None:
    raw, field = case
    with pytest.raises(ValidationError) as caught:
        parse_flow_spec(raw)
    paths = [p.path for p in caught.value.problems]
    assert any(p == field or p.startswith((f"{field}.", f"{field}[")) for p in paths), (field, paths)
    assert caught.value.exit_code == EXIT_INVALID_INPUT
    assert f"{field}" in str(caught.value)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(ALLOWED)) | st.text(max_size=10), json_values, max_size=12))
def test_any_json_object_is_either_a_spec_or_a_validation_error(raw: dict[str, Any]) -> None:
    """No input crashes the validator with anything but ValidationError (no traceback)."""
    merged = {**copy.deepcopy(BASE), **raw}
    try:
        spec = parse_flow_spec(merged)
    except ValidationError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert any(problem.path == k or problem.path.startswith((f"{k}.", f"{k}[")) for k in merged), problem
        return
    assert parse_flow_spec(spec.to_dict()) == spec  # a valid spec round-trips


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_a_spec_that_is_not_an_object_is_refused(raw: Any) -> None:
    if isinstance(raw, dict):
        raw = [raw]
    with pytest.raises(ValidationError, match="a flow spec must be a JSON object"):
        parse_flow_spec(raw)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=64))
def test_any_file_content_is_a_spec_or_a_validation_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "flow.json"
    path.write_bytes(content)
    with pytest.raises(ValidationError) as caught:
        load_flow_spec(path)
    assert any(p.path in ("--flow", "") for p in caught.value.problems)


def test_unreadable_flow_files_are_validation_errors(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"--flow: .*is a directory"):
        load_flow_spec(tmp_path)
    binary = tmp_path / "flow.bin"
    binary.write_bytes(b"\xff\xfe\x00{")
    with pytest.raises(ValidationError, match=r"--flow: .*not valid"):
        load_flow_spec(binary)


# ---- the real command lines (a few cases: each is a Python process) ----

CLI_CASES = [
    (with_change(("max_records_per_trigger",), 0), "max_records_per_trigger: must be an integer >= 1, got 0"),
    (with_change(("topics",), ["ok", "("]), "topics[1]: invalid regular expression '('"),
    (with_change(("replication_policy", "type"), "mirror"), "replication_policy.type: unknown policy 'mirror'"),
    (without(("target", "bootstrap_servers")), "target.bootstrap_servers: required non-empty string"),
    (with_change(("source", "config"), {"no.such.property": "1"}), "source.config.no.such.property"),
    (with_change(("target", "config"), {"acks": {"nested": 1}}), "target.config.acks"),
    (with_change(("producer",), {"acks": "1"}), "producer.acks: must stay 'all'"),
]


def run_cli(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("raw", "message"), CLI_CASES, ids=[m.split(":")[0] for _, m in CLI_CASES])
def test_the_command_line_exits_2_naming_the_field(tmp_path: Path, raw: dict[str, Any], message: str) -> None:
    path = tmp_path / "flow.json"
    path.write_text(json.dumps(raw))
    result = run_cli("spark_app", "--flow", str(path), "--once")
    assert result.returncode == EXIT_INVALID_INPUT, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_kmirror_run_exits_2_for_a_file_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "flow.json"
    path.write_bytes(b"\xff{not json")
    result = run_cli("kmirror_cli.cli", "run", "--flow", str(path), "--once")
    assert result.returncode == EXIT_INVALID_INPUT and "--flow:" in result.stderr
    assert "Traceback" not in result.stderr


def test_properties_valid_only_together_are_not_reported_alone() -> None:
    """Each librdkafka property is checked alone; rules across properties (a keystore needs its
    password, SASL_SSL needs a mechanism this build has) are left to client creation."""
    from kmirror_engine.clients.factory import client_config_problems

    source = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "u",
        "ssl.keystore.location": "/ks.p12",
        "ssl.keystore.password": "${env:KS_PASSWORD}",
    }
    raw = with_change(("source", "config"), source)
    raw["target"]["config"] = {"linger.ms": "soon", "security.protocol": "SASL_PLAINTEXT"}
    # an invalid value alone is refused by the flow spec's own validation (issue 25), before the app
    with pytest.raises(ValidationError) as caught:
        parse_flow_spec(raw)
    assert [p.path for p in caught.value.problems] == ["target.config.linger.ms"]
    raw["target"]["config"]["linger.ms"] = "5"
    flow = parse_flow_spec(raw)
    assert client_config_problems(flow.route, flow.copy) == []


def test_exactly_once_defaults_to_smaller_batches_unless_set() -> None:
    base = raw_spec("a", "b", topics=[".*"])
    assert parse_flow_spec(base).option("max_records_per_trigger") == 5_000_000
    assert parse_flow_spec({**base, "exactly_once": True}).option("max_records_per_trigger") == 500_000
    explicit = {**base, "exactly_once": True, "max_records_per_trigger": 7}
    assert parse_flow_spec(explicit).option("max_records_per_trigger") == 7
