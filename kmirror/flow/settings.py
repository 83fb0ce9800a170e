"""Flow settings: the keys a topology file may set in `defaults`, on a topology, or per flow.

One place per setting (name, doc, check). Settings resolve `defaults` < topology < per-flow
override; every flow-spec option of the Spark app (`kmirror.flow.spec.OPTIONS`) is a setting
too, so the topology file can set anything the app understands.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kmirror.errors import Problem
from kmirror.flow.filters import pattern_problems
from kmirror.flow.replication_policy import policy_problems
from kmirror.flow.spec import OPTIONS
from kmirror.option_table import Option, OptionTable, positive_int
from kmirror.security.client_properties import same_property
from kmirror.security.override_rules import client_override_problems, spark_option_problems

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
# Excludes add up over the layers (MM2's defaults < defaults < topology < flow): a flow that
# excludes `tmp.*` keeps MM2's `.*[-.]internal`, `__.*`, ... unless it says `{replace: [...]}`.
EXCLUDE_KEYS = ("topics_exclude", "groups_exclude")
REPLACE = "replace"
# MirrorMaker 1's names, accepted as aliases.
ALIASES = {"whitelist": "topics", "blacklist": "topics_exclude"}
# Flow-spec options set through `producer`/`consumer`/`spark` above or by the planner itself.
_PLANNER_OWNED = {"producer", "consumer"}
OPTION_SETTINGS = tuple(name for name in OPTIONS if name not in _PLANNER_OWNED)


def normalise(raw: Mapping[str, Any], path: str) -> tuple[dict[str, Any], list[Problem]]:
    """Rename MM1 aliases to their MM2 names and wrap a single pattern string into a list.

    Returns the normalised settings and the problems found (both a name and its alias given).
    """
    out: dict[str, Any] = {}
    given_as: dict[str, str] = {}  # MM2 name -> the key the file used for it
    problems: list[Problem] = []
    for key, value in raw.items():
        name = ALIASES.get(key, key)
        if name in out:
            alias = key if key != name else given_as[name]
            problems.append(
                Problem(
                    f"{path}.{alias}",
                    f"'{alias}' is MirrorMaker 1's name for '{name}', which is also given; "
                    f"keep only '{name}' (merge the two lists into it)",
                )
            )
            continue
        given_as[name] = key
        if name in SELECTION_KEYS and isinstance(value, str):
            value = [value]
        if name in EXCLUDE_KEYS and isinstance(value, dict) and isinstance(value.get(REPLACE), str):
            value = {**value, REPLACE: [value[REPLACE]]}
        out[name] = value
    return out, problems


def _spark_size(value: Any) -> str | None:
    if isinstance(value, str) and value[:-1].isdigit() and value[-1] in "kmgt":
        return None
    return f"must be a size such as '2g' or '512m', got {value!r}"


def _spark_conf_map(value: Any) -> str | None:
    return None if isinstance(value, dict) else "must be a mapping of Spark conf names to values"


# The `spark` setting: a flow's Spark resources (keys of the stack's kafka-mirror:spark set defaults).
SPARK_OPTIONS = OptionTable(
    Option("executors", None, "number of executors", positive_int),
    Option("driver_cores", None, "driver cores", positive_int),
    Option("driver_memory", None, "driver memory, e.g. 1g", _spark_size),
    Option("executor_cores", None, "cores per executor", positive_int),
    Option("executor_memory", None, "executor memory, e.g. 2g", _spark_size),
    Option("options", {}, "extra Spark confs (string -> string)", _spark_conf_map, spark_option_problems),
)


def _spark_problems(value: Any, path: str) -> list[Problem]:
    if not isinstance(value, dict):
        return [Problem(path, f"must be a mapping of {', '.join(SPARK_OPTIONS)}, got {value!r}")]
    return SPARK_OPTIONS.problems(value, path, list_allowed=True)


def _client_problems(value: Any, path: str) -> list[Problem]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        return [Problem(path, "must be a mapping of librdkafka property names to values")]
    return [
        Problem(f"{path}.{k}", f"must be a string, number or boolean, got {type(v).__name__}")
        for k, v in value.items()
        if not isinstance(v, str | int | float | bool)
    ] + client_override_problems(value, path)


def _exclude_problems(value: Any, path: str) -> list[Problem]:
    """An exclude list (added to the layers below) or `{replace: [...]}` (replacing them)."""
    if isinstance(value, dict):
        if set(value) != {REPLACE}:
            return [
                Problem(
                    path,
                    f"must be a list of regular expressions (added to the default excludes) or "
                    f"{{replace: [...]}} (instead of them), got {value!r}",
                )
            ]
        return pattern_problems(value[REPLACE], f"{path}.{REPLACE}")
    return pattern_problems(value, path)


# Every key of `defaults`, a topology or a flow override: MirrorMaker's selection, policy and
# client settings, Spark resources, and the flow-spec options the app understands.
SETTINGS = OptionTable(
    *(
        Option(key, MM2_DEFAULTS[key], "regexes of the names selected", nested=pattern_problems)
        for key in SELECTION_KEYS
        if key not in EXCLUDE_KEYS
    ),
    *(
        Option(
            key,
            MM2_DEFAULTS[key],
            "regexes of the names left out, added to the defaults' ({replace: [...]}: instead of them)",
            nested=_exclude_problems,
        )
        for key in EXCLUDE_KEYS
    ),
    Option("replication_policy", MM2_DEFAULTS["replication_policy"], "remote topic naming", nested=policy_problems),
    Option("producer", {}, "librdkafka producer overrides of the target", nested=_client_problems),
    Option("consumer", {}, "librdkafka consumer overrides of the source", nested=_client_problems),
    Option("spark", {}, f"Spark resources: {', '.join(SPARK_OPTIONS)}", nested=_spark_problems),
    *(OPTIONS[name] for name in OPTION_SETTINGS),
)
SETTING_KEYS = frozenset(SETTINGS)


def setting_problems(
    settings: Mapping[str, Any], path: str, *, extra_keys: frozenset[str] = frozenset()
) -> list[Problem]:
    """Every problem with a (normalised) settings mapping at `path`; unknown keys are errors
    (`extra_keys` are allowed too, checked by the caller)."""
    return SETTINGS.problems(settings, path, extra_keys=extra_keys, also_suggest=ALIASES)


def merge(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Later layers win; `producer`, `consumer` and `spark` merge per key (a flow can set one
    producer property without repeating the topology's others); excludes add up (`{replace:
    [...]}` replaces what the layers below excluded); everything else is replaced."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if key in EXCLUDE_KEYS:
                if isinstance(value, dict) and isinstance(value.get(REPLACE), list):
                    out[key] = list(value[REPLACE])
                elif isinstance(value, list):
                    below = out.get(key)
                    out[key] = list(dict.fromkeys([*(below if isinstance(below, list) else []), *value]))
                else:
                    out[key] = value  # invalid: reported by setting_problems
            elif key in ("producer", "consumer", "spark") and isinstance(value, dict):
                merged = dict(out.get(key, {}))
                if key != "spark":  # a layer's `linger.ms` replaces a lower layer's `queue.buffering.max.ms`
                    merged = {k: v for k, v in merged.items() if not any(same_property(k, n) for n in value)}
                if key == "spark" and "options" in value and isinstance(merged.get("options"), dict):
                    value = {**value, "options": {**merged["options"], **value["options"]}}
                merged.update(value)
                out[key] = merged
            else:
                out[key] = value
    return out
