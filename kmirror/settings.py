"""Flow settings: the keys a topology file may set in `defaults`, on a topology, or per flow.

One place per setting (name, doc, check). Settings resolve `defaults` < topology < per-flow
override; every flow-spec option of the Spark app (`kmirror.flowspec.OPTIONS`) is a setting
too, so the topology file can set anything the app understands.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kmirror.errors import Problem, did_you_mean
from kmirror.filters import pattern_problems
from kmirror.flowspec import OPTION_BY_NAME
from kmirror.override_rules import client_override_problems, spark_option_problems
from kmirror.replication_policy import policy_problems

# MirrorMaker 2's defaults (MirrorSourceConfig / DefaultTopicFilter / DefaultGroupFilter).
MM2_DEFAULTS: dict[str, Any] = {
    "topics": [".*"],
    "topics_exclude": [".*[-.]internal", ".*\\.replica", "__.*"],
    "groups": [".*"],
    "groups_exclude": ["console-consumer-.*", "connect-.*", "__.*"],
    "replication_policy": {"type": "default", "separator": "."},
    "producer": {},
    "consumer": {},
    "spark": {},
}
SELECTION_KEYS = ("topics", "topics_exclude", "groups", "groups_exclude")
# MirrorMaker 1's names, accepted as aliases.
ALIASES = {"whitelist": "topics", "blacklist": "topics_exclude"}
SPARK_KEYS = {
    "executors": "number of executors",
    "driver_cores": "driver cores",
    "driver_memory": "driver memory, e.g. 1g",
    "executor_cores": "cores per executor",
    "executor_memory": "executor memory, e.g. 2g",
    "options": "extra Spark confs (string -> string)",
}
# Flow-spec options set through `producer`/`consumer`/`spark` above or by the planner itself.
_PLANNER_OWNED = {"producer", "consumer"}
OPTION_SETTINGS = tuple(name for name in OPTION_BY_NAME if name not in _PLANNER_OWNED)
SETTING_KEYS = frozenset(MM2_DEFAULTS) | frozenset(OPTION_SETTINGS)


def normalise(raw: Mapping[str, Any], path: str) -> tuple[dict[str, Any], list[Problem]]:
    """Rename MM1 aliases to their MM2 names and wrap a single pattern string into a list.

    Returns the normalised settings and the problems found (both a name and its alias given).
    """
    out: dict[str, Any] = {}
    problems: list[Problem] = []
    for key, value in raw.items():
        name = ALIASES.get(key, key)
        if name in out:
            problems.append(Problem(f"{path}.{key}", f"'{key}' and '{name}' mean the same; keep only '{name}'"))
            continue
        if name in SELECTION_KEYS and isinstance(value, str):
            value = [value]
        out[name] = value
    return out, problems


def _spark_problems(value: Any, path: str) -> list[Problem]:
    if not isinstance(value, dict):
        return [Problem(path, f"must be a mapping of {', '.join(SPARK_KEYS)}, got {value!r}")]
    problems = [
        Problem(f"{path}.{k}", f"unknown key{did_you_mean(str(k), SPARK_KEYS)}; allowed: {', '.join(SPARK_KEYS)}")
        for k in sorted(set(value) - set(SPARK_KEYS), key=str)
    ]
    for key in ("executors", "driver_cores", "executor_cores"):
        if key in value and (isinstance(value[key], bool) or not isinstance(value[key], int) or value[key] < 1):
            problems.append(Problem(f"{path}.{key}", f"must be an integer >= 1, got {value[key]!r}"))
    for key in ("driver_memory", "executor_memory"):
        if key in value and not (
            isinstance(value[key], str) and value[key][:-1].isdigit() and value[key][-1] in "kmgt"
        ):
            problems.append(Problem(f"{path}.{key}", f"must be a size such as '2g' or '512m', got {value[key]!r}"))
    if "options" in value and not isinstance(value["options"], dict):
        problems.append(Problem(f"{path}.options", "must be a mapping of Spark conf names to values"))
    elif "options" in value:
        problems += spark_option_problems(value["options"], f"{path}.options")
    return problems


def _client_problems(value: Any, path: str) -> list[Problem]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        return [Problem(path, "must be a mapping of librdkafka property names to values")]
    return [
        Problem(f"{path}.{k}", f"must be a string, number or boolean, got {type(v).__name__}")
        for k, v in value.items()
        if not isinstance(v, str | int | float | bool)
    ] + client_override_problems(value, path)


def setting_problems(
    settings: Mapping[str, Any], path: str, *, extra_keys: frozenset[str] = frozenset()
) -> list[Problem]:
    """Every problem with a (normalised) settings mapping at `path`; unknown keys are errors."""
    allowed = SETTING_KEYS | extra_keys
    problems = [
        Problem(f"{path}.{k}", f"unknown key{did_you_mean(str(k), allowed | set(ALIASES))}")
        for k in sorted(set(settings) - allowed, key=str)
    ]
    for key in SELECTION_KEYS:
        if key in settings:
            problems += pattern_problems(settings[key], f"{path}.{key}")
    if "replication_policy" in settings:
        problems += policy_problems(settings["replication_policy"], f"{path}.replication_policy")
    for key in ("producer", "consumer"):
        if key in settings:
            problems += _client_problems(settings[key], f"{path}.{key}")
    if "spark" in settings:
        problems += _spark_problems(settings["spark"], f"{path}.spark")
    for name in OPTION_SETTINGS:
        if name in settings and (message := OPTION_BY_NAME[name].check(settings[name])):
            problems.append(Problem(f"{path}.{name}", message))
    return problems


def merge(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Later layers win; `producer`, `consumer` and `spark` merge per key (a flow can set one
    producer property without repeating the topology's others); everything else is replaced."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if key in ("producer", "consumer", "spark") and isinstance(value, dict):
                merged = dict(out.get(key, {}))
                if key == "spark" and "options" in value and isinstance(merged.get("options"), dict):
                    value = {**value, "options": {**merged["options"], **value["options"]}}
                merged.update(value)
                out[key] = merged
            else:
                out[key] = value
    return out
