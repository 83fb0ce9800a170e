"""Bad input: fuzzing the topology file (hypothesis).

Every invalid topology must fail with a `ValidationError` (exit code 2) naming the offending
field; nothing else may escape (a traceback). In process through `kmirror.estate.planner` for speed,
plus the real commands: `kmirror validate`, `kmirror plan --format json`, and `kmirror plan
--output FILE`, which must never leave a partial (or any) plan file behind on invalid input.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kmirror.errors import EXIT_INVALID_INPUT, ValidationError
from kmirror.estate.planner import load_topology, parse_topology, plan_topology
from tests import fuzz_helpers

BASE: dict[str, Any] = {
    "clusters": {
        "west": {"bootstrap_servers": "w1:9092,w2:9092", "datacenter": "dc-w"},
        "east": {"bootstrap_servers": "e1:9092", "datacenter": "dc-e"},
        "hub": {"bootstrap_servers": "h1:9092", "datacenter": "dc-h"},
    },
    "defaults": {"topics": [".*"], "replication_policy": {"type": "default", "separator": "."}},
    "topologies": [
        {"name": "dr", "pattern": "active-passive", "primary": "west", "standby": "east", "topics": ["orders.*"]},
        {"name": "star", "pattern": "hub-and-spoke", "hub": "hub", "spokes": ["west", "east"]},
        {"name": "extra", "pattern": "custom", "flows": ["east->west"], "max_records_per_trigger": 1000},
    ],
    "flows": {"west->east": {"topics_exclude": ["tmp.*"], "producer": {"compression.type": "zstd"}}},
}

json_scalars = fuzz_helpers.json_scalars(10)
json_values = fuzz_helpers.json_values(10)
not_a_string = json_values.filter(lambda v: not isinstance(v, str))
# strings that are not a cluster alias of BASE
not_an_alias = st.text(max_size=10).filter(lambda s: s not in BASE["clusters"])


def changed(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    return fuzz_helpers.changed(BASE, path, value)


def removed(path: tuple[Any, ...]) -> dict[str, Any]:
    return fuzz_helpers.removed(BASE, path)


def dotted(path: tuple[Any, ...]) -> str:
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out


ALIAS_FIELDS = [("topologies", 0, "primary"), ("topologies", 0, "standby"), ("topologies", 1, "hub")]
SETTING_SITES = [("defaults",), ("topologies", 0), ("flows", "west->east")]


def mutations() -> st.SearchStrategy[tuple[dict[str, Any], str]]:
    """One invalid change of BASE and the field path the error must name."""
    unknown_key = st.text(min_size=1, max_size=12).filter(lambda k: k.isidentifier() and k not in _KNOWN_KEYS)
    return st.one_of(
        st.sampled_from(ALIAS_FIELDS).flatmap(
            lambda p: (not_an_alias | not_a_string).map(lambda v, p=p: (changed(p, v), dotted(p)))
        ),
        st.sampled_from(ALIAS_FIELDS).map(lambda p: (removed(p), dotted(p))),
        not_an_alias.map(lambda v: (changed(("topologies", 1, "spokes"), ["west", v]), "topologies[1].spokes[1]")),
        st.sampled_from(["west", "east"]).flatmap(
            lambda c: (not_a_string | st.sampled_from(["", "nohost", "h:port", "h:123456", "a:1,,b:2"])).map(
                lambda v, c=c: (changed(("clusters", c, "bootstrap_servers"), v), f"clusters.{c}.bootstrap_servers")
            )
        ),
        (not_a_string | st.sampled_from(["", "a b", "-x"])).map(
            lambda v: (changed(("clusters", "west", "datacenter"), v), "clusters.west.datacenter")
        ),
        st.tuples(st.sampled_from(SETTING_SITES), unknown_key).map(
            lambda t: (changed((*t[0], t[1]), 1), f"{dotted(t[0])}.{t[1]}")
        ),
        unknown_key.map(lambda k: (changed(("clusters", "east", k), 1), f"clusters.east.{k}")),
        unknown_key.map(lambda k: (changed((k,), 1), k)),
        st.tuples(st.sampled_from(SETTING_SITES), st.sampled_from(["(", "[a-", "*x", "a)", "(?<=a+)b"])).map(
            lambda t: (changed((*t[0], "topics"), ["ok", t[1]]), f"{dotted(t[0])}.topics[1]")
        ),
        st.tuples(st.sampled_from(SETTING_SITES), json_values.filter(lambda v: v not in ("default", "identity"))).map(
            lambda t: (
                changed((*t[0], "replication_policy"), {"type": t[1]}),
                f"{dotted(t[0])}.replication_policy.type",
            )
        ),
        st.tuples(st.sampled_from(SETTING_SITES), st.integers(max_value=0) | st.text(max_size=4) | st.booleans()).map(
            lambda t: (changed((*t[0], "max_records_per_trigger"), t[1]), f"{dotted(t[0])}.max_records_per_trigger")
        ),
        st.tuples(st.sampled_from(SETTING_SITES), json_values.filter(lambda v: not isinstance(v, bool))).map(
            lambda t: (changed((*t[0], "exactly_once"), t[1]), f"{dotted(t[0])}.exactly_once")
        ),
        (json_values.filter(lambda v: v not in _PATTERN_NAMES)).map(
            lambda v: (changed(("topologies", 0, "pattern"), v), "topologies[0].pattern")
        ),
        (not_a_string | st.sampled_from(["", "a b", "dr"])).map(
            lambda v: (changed(("topologies", 2, "name"), v), "topologies[2].name")
        ),
        st.text(max_size=12)
        .filter(lambda s: "->" not in s)
        .map(lambda s: (changed(("topologies", 2, "flows"), [s]), "topologies[2].flows[0]")),
        not_an_alias.filter(lambda s: s.strip() and "->" not in s).map(
            lambda s: (changed(("topologies", 2, "flows"), [f"east->{s}"]), "topologies[2].flows[0]")
        ),
        st.sampled_from(["hub->west", "hub->east"]).map(
            lambda f: ({**changed(("flows", f), {"topics": ["x"]})}, f"flows.{f}")
        ),
        (not_a_string.filter(lambda v: not isinstance(v, dict))).map(
            lambda v: (changed(("flows", "west->east", "producer"), v), "flows.west->east.producer")
        ),
        st.sampled_from([[1], {"a": 1}, None]).map(
            lambda v: (
                changed(("flows", "west->east", "producer"), {"linger.ms": v}),
                "flows.west->east.producer.linger.ms",
            )
        ),
        st.sampled_from(["nowhere", "dc-x", 7]).map(
            lambda v: (changed(("flows", "west->east", "run_in"), v), "flows.west->east.run_in")
        ),
    )


_PATTERN_NAMES = ("active-passive", "active-active", "hub-and-spoke", "fan-out", "chain", "custom")
_KNOWN_KEYS = {
    "clusters",
    "defaults",
    "topologies",
    "flows",
    "bootstrap_servers",
    "datacenter",
    "security",
    "whitelist",
    "blacklist",
    "run_in",
    "name",
    "pattern",
    "primary",
    "standby",
    "hub",
    "spokes",
    "bidirectional",
    "source",
    "targets",
}


def test_the_base_topology_is_valid() -> None:
    plan = plan_topology(parse_topology(copy.deepcopy(BASE)))
    assert {f.id for f in plan.flows} >= {"west->east", "west->hub", "east->hub", "east->west"}


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
def test_every_invalid_topology_is_a_validation_error_naming_the_field(case: tuple[dict[str, Any], str]) -> None:
    raw, field = case
    with pytest.raises(ValidationError) as caught:
        plan_topology(parse_topology(raw))
    paths = [p.path for p in caught.value.problems]
    assert any(p == field or p.startswith((f"{field}.", f"{field}[")) for p in paths), (field, paths)
    assert caught.value.exit_code == EXIT_INVALID_INPUT


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("topologies", 0, "name"), "dr\n"),
        (("clusters", "west", "bootstrap_servers"), "w1:9092\n"),
        (("clusters", "west", "datacenter"), "dc-w\n"),
    ],
)
def test_a_trailing_newline_is_not_a_valid_name(path: tuple[Any, ...], value: str) -> None:
    with pytest.raises(ValidationError, match=dotted(path).replace("[", r"\[").replace("]", r"\]")):
        plan_topology(parse_topology(changed(path, value)))


yaml_keys = st.sampled_from(["clusters", "defaults", "topologies", "flows", "pattern", "name"]) | st.text(max_size=6)
yaml_trees = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(yaml_keys, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(["clusters", "defaults", "topologies", "flows"]), yaml_trees, max_size=4))
def test_any_replacement_of_a_section_is_a_topology_or_a_validation_error(sections: dict[str, Any]) -> None:
    raw = {**copy.deepcopy(BASE), **sections}
    try:
        plan_topology(parse_topology(raw))
    except ValidationError as exc:
        assert exc.problems and all(isinstance(p.path, str) for p in exc.problems)


@settings(max_examples=300, deadline=None)
@given(yaml_trees)
def test_any_declaration_is_a_topology_or_a_validation_error(decl: Any) -> None:
    raw = copy.deepcopy(BASE)
    raw["topologies"].append(decl)
    with pytest.raises(ValidationError) as caught:  # never valid: no name/pattern of the right shape
        plan_topology(parse_topology(raw))
    assert any(p.path.startswith("topologies[3]") for p in caught.value.problems), caught.value.problems


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=80) | st.text(max_size=80).map(str.encode))
def test_any_file_content_is_a_topology_or_a_validation_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "topology.yaml"
    path.write_bytes(content)
    with pytest.raises(ValidationError):
        plan_topology(load_topology(path))


# ---- the real commands ----


def kmirror(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kmirror_cli.cli", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


CLI_CASES = [
    (
        changed(("topologies", 0, "standby"), "eats"),
        "topologies[0].standby: unknown cluster 'eats' (did you mean 'east'?)",
    ),
    (changed(("defaults", "topics"), ["("]), "defaults.topics[0]: invalid regular expression '('"),
    (changed(("flows", "west->east", "max_records_per_trigger"), 0), "flows.west->east.max_records_per_trigger"),
    (removed(("clusters", "hub", "datacenter")), "clusters.hub.datacenter"),
]


@pytest.mark.parametrize(("raw", "message"), CLI_CASES, ids=[m.split(":")[0] for _, m in CLI_CASES])
def test_validate_and_plan_exit_2_naming_the_field_and_write_no_plan_file(
    tmp_path: Path, raw: dict[str, Any], message: str
) -> None:
    topology = tmp_path / "topology.yaml"
    topology.write_text(yaml.safe_dump(raw))
    plan_file = tmp_path / "plan.json"
    for args in (
        ("validate", "--topology", str(topology)),
        ("plan", "--topology", str(topology), "--format", "json"),
        ("plan", "--topology", str(topology), "--format", "json", "--output", str(plan_file)),
    ):
        result = kmirror(*args)
        assert result.returncode == EXIT_INVALID_INPUT, (args, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr, result.stderr
        assert result.stdout == ""
    assert list(tmp_path.iterdir()) == [topology]  # no plan file, no temporary file left behind


def test_a_failed_plan_never_replaces_the_previous_plan_file(tmp_path: Path) -> None:
    topology, plan_file = tmp_path / "topology.yaml", tmp_path / "plan.json"
    topology.write_text(yaml.safe_dump(BASE))
    ok = kmirror("plan", "--topology", str(topology), "--format", "json", "--output", str(plan_file))
    assert ok.returncode == 0, ok.stderr
    good = plan_file.read_text()
    assert json.loads(good)  # complete JSON
    topology.write_text(yaml.safe_dump(changed(("topologies", 0, "pattern"), "active-pasive")))
    bad = kmirror("plan", "--topology", str(topology), "--format", "json", "--output", str(plan_file))
    assert bad.returncode == EXIT_INVALID_INPUT and "did you mean 'active-passive'" in bad.stderr
    assert plan_file.read_text() == good and sorted(p.name for p in tmp_path.iterdir()) == [
        "plan.json",
        "topology.yaml",
    ]
    unwritable = kmirror("plan", "--topology", str(topology), "--output", str(tmp_path / "missing-dir" / "plan.json"))
    assert unwritable.returncode == EXIT_INVALID_INPUT and "Traceback" not in unwritable.stderr
