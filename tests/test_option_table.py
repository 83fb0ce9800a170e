"""kmirror.option_table: the one validator of option tables and unknown keys (issue 17)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from kmirror.errors import Problem
from kmirror.flow.settings import SETTINGS, SPARK_OPTIONS, setting_problems
from kmirror.flow.spec import OPTIONS, flow_spec_problems
from kmirror.option_table import (
    Option,
    OptionTable,
    bound_message,
    int_at_least,
    non_negative_int,
    one_of,
    optional,
    positive_int,
    unknown_key_message,
    unknown_keys,
)

KMIRROR = Path(__file__).resolve().parents[1] / "kmirror"


def test_unknown_keys_names_the_path_suggests_and_sorts() -> None:
    assert unknown_keys({"topcs": 1, "zzz": 2, "topics": 3}, ["topics", "groups"], "defaults") == [
        Problem("defaults.topcs", "unknown key (did you mean 'topics'?)"),
        Problem("defaults.zzz", "unknown key"),
    ]


def test_unknown_keys_at_the_top_level_has_no_leading_dot() -> None:
    [problem] = unknown_keys({"extra": 1}, ("clusters", "flows"), "")
    assert problem.path == "extra"


def test_unknown_keys_lists_the_allowed_keys_sorted_and_adds_the_hint() -> None:
    [problem] = unknown_keys({"typ": 1}, ("type", "separator"), "p", list_allowed=True, hint="see docs/x.md")
    assert problem.message == "unknown key (did you mean 'type'?); allowed: separator, type; see docs/x.md"


def test_unknown_keys_suggests_aliases_it_does_not_list() -> None:
    [problem] = unknown_keys({"whitelst": 1}, ["topics"], "d", also_suggest=["whitelist"])
    assert problem.message == "unknown key (did you mean 'whitelist'?)"


def test_unknown_keys_copes_with_non_string_keys_from_yaml() -> None:
    problems = unknown_keys({1: "a", "b": 2, None: 3}, ["b"], "p")
    assert [p.path for p in problems] == ["p.1", "p.None"]


def test_unknown_key_message_custom_noun() -> None:
    assert unknown_key_message("x", ["file"], what="key for a file reference") == "unknown key for a file reference"


@pytest.mark.parametrize("value", [0, -1, True, False, 1.0, "1", None])
def test_positive_int_refuses(value: Any) -> None:
    assert positive_int(value) == f"must be an integer >= 1, got {value!r}"


@pytest.mark.parametrize("value", [1, 2, 10**12])
def test_positive_int_accepts(value: int) -> None:
    assert positive_int(value) is None


def test_int_at_least_and_optional() -> None:
    assert non_negative_int(0) is None and non_negative_int(-1) == "must be an integer >= 0, got -1"
    assert int_at_least(30)(29) == bound_message(">= 30", 29) == "must be an integer >= 30, got 29"
    assert optional(positive_int)(None) is None and optional(positive_int)(0) is not None
    assert one_of("a", "b")("c") == "must be one of a, b, got 'c'"


def _table() -> OptionTable:
    def nested(value: Any, path: str) -> list[Problem]:
        return [Problem(f"{path}.{k}", "nested problem") for k in value if k.startswith("bad")]

    return OptionTable(
        Option("count", 1, "a count", positive_int),
        Option("conf", {}, "a mapping", lambda v: None if isinstance(v, dict) else "must be a mapping", nested),
        Option("free", None, "anything goes"),
    )


def test_table_reports_unknown_keys_bad_values_and_nested_problems() -> None:
    raw = {"cuont": 2, "count": 0, "conf": {"bad.x": 1, "ok": 2}, "free": object(), "extra": 1}
    assert _table().problems(raw, "t", extra_keys=["extra"]) == [
        Problem("t.cuont", "unknown key (did you mean 'count'?)"),
        Problem("t.count", "must be an integer >= 1, got 0"),
        Problem("t.conf.bad.x", "nested problem"),
    ]


def test_nested_check_runs_only_when_the_value_passed_its_check() -> None:
    assert _table().value_problems({"conf": ["bad"]}, "t") == [Problem("t.conf", "must be a mapping")]


def test_a_valid_mapping_has_no_problems_and_the_table_is_a_mapping() -> None:
    table = _table()
    assert table.problems({"count": 3, "conf": {"ok": 1}}, "") == []
    assert list(table) == ["count", "conf", "free"] and table["count"].default == 1 and len(table) == 3


def test_an_option_is_declared_once() -> None:
    with pytest.raises(ValueError, match="'count' declared twice"):
        OptionTable(Option("count", 1, "", positive_int), Option("count", 2, "", positive_int))


def test_the_project_tables_share_the_flow_spec_options() -> None:
    # Every flow-spec option but the planner-owned producer/consumer is a topology setting, the same Option.
    assert all(SETTINGS[name] is OPTIONS[name] for name in OPTIONS if name not in ("producer", "consumer"))
    assert set(SPARK_OPTIONS) == {
        "executors",
        "driver_cores",
        "driver_memory",
        "executor_cores",
        "executor_memory",
        "options",
    }


def test_sites_word_their_problems_through_the_table() -> None:
    assert setting_problems({"spark": {"executor": 2, "executors": 0}}, "defaults") == [
        Problem(
            "defaults.spark.executor",
            "unknown key (did you mean 'executors'?); allowed: driver_cores, driver_memory, executor_cores, "
            "executor_memory, executors, options",
        ),
        Problem("defaults.spark.executors", "must be an integer >= 1, got 0"),
    ]
    problems = flow_spec_problems({"max_records_per_triger": 1, "producer": {"sasl.kerberos.kinit.cmd": "x"}})
    assert (
        Problem(
            "max_records_per_triger", "unknown key (did you mean 'max_records_per_trigger'?); see docs/spark-app.md"
        )
        in problems
    )
    assert any(p.path == "producer.sasl.kerberos.kinit.cmd" for p in problems)  # the nested override check ran


def _hand_written_unknown_key_messages(source: str) -> list[int]:
    """Lines of string literals (or f-string parts) that word an unknown-key message themselves."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("unknown key")
    ]


def test_the_static_check_finds_a_hand_written_unknown_key_message() -> None:
    source = 'problems = [Problem(f"{p}.{k}", f"unknown key{hint}") for k in set(raw) - ALLOWED]\n'
    assert _hand_written_unknown_key_messages(source) == [1]
    assert _hand_written_unknown_key_messages('m = f"unknown cluster {x!r}"\n') == []


def test_no_other_core_module_words_an_unknown_key_message() -> None:
    offenders = {
        str(path.relative_to(KMIRROR)): lines
        for path in sorted(KMIRROR.rglob("*.py"))
        if path.name != "option_table.py"
        and (lines := _hand_written_unknown_key_messages(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}, f"use kmirror.option_table.unknown_keys / unknown_key_message instead: {offenders}"
