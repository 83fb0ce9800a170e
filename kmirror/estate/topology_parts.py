"""The parts of a topology file, parsed one by one: clusters, topology declarations (a pattern
and its aliases), the `defaults` and the per-flow overrides, each collecting its problems with
their paths. Part of the topology file (`kmirror.estate.topology`, which re-exports `Cluster`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kmirror.errors import Problem, Problems, did_you_mean
from kmirror.estate.patterns import PATTERNS, Pattern, flow_id, parse_flow_id
from kmirror.flow.internal_sizing import InternalTopicSizing, sizing_problems
from kmirror.flow.settings import SETTING_KEYS, normalise, setting_problems
from kmirror.option_table import unknown_keys
from kmirror.security.security_checks import security_problems

TOP_KEYS = ("clusters", "defaults", "topologies", "flows")
CLUSTER_KEYS = ("bootstrap_servers", "datacenter", "security", "internal_topics", "production")
TOPOLOGY_BASE_KEYS = frozenset({"name", "pattern"})
FLOW_ONLY_KEYS = frozenset({"run_in"})
_ALIAS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_BOOTSTRAP_RE = re.compile(r"^[^\s,]+:\d{1,5}(,[^\s,]+:\d{1,5})*$")


@dataclass(frozen=True)
class Cluster:
    alias: str
    bootstrap_servers: str
    datacenter: str
    security: dict[str, Any] | None = None
    internal_topics: InternalTopicSizing = field(default_factory=InternalTopicSizing)
    production: bool = False  # `validate` refuses internal topics with replication factor 1 here


def parse_clusters(raw: Any, problems: Problems) -> dict[str, Cluster]:
    if not isinstance(raw, dict) or not raw:
        problems.add(
            "clusters", f"must be a non-empty mapping of alias -> {{bootstrap_servers, datacenter}}, got {raw!r}"
        )
        return {}
    clusters = {}
    for alias, spec in raw.items():
        path = f"clusters.{alias}"
        if not isinstance(alias, str) or not _ALIAS_RE.fullmatch(alias):
            problems.add(path, f"bad cluster alias {alias!r}: use letters, digits, '.', '_' and '-'")
            continue
        if not isinstance(spec, dict):
            problems.add(path, f"must be a mapping with bootstrap_servers and datacenter, got {spec!r}")
            continue
        problems.extend(unknown_keys(spec, CLUSTER_KEYS, path, list_allowed=True))
        bootstrap, datacenter = spec.get("bootstrap_servers"), spec.get("datacenter")
        if not isinstance(bootstrap, str) or not _BOOTSTRAP_RE.fullmatch(bootstrap.replace(" ", "")):
            problems.add(f"{path}.bootstrap_servers", f"required 'host:port[,host:port...]', got {bootstrap!r}")
        if not isinstance(datacenter, str) or not _NAME_RE.fullmatch(datacenter):
            problems.add(
                f"{path}.datacenter", f"required datacenter name (letters, digits, '.', '_', '-'), got {datacenter!r}"
            )
        security = spec.get("security")
        if security is not None:
            problems.extend(security_problems(security, f"{path}.security"))
        production = spec.get("production", False)
        if not isinstance(production, bool):
            problems.add(f"{path}.production", f"must be true or false, got {production!r}")
        sizing = spec.get("internal_topics", {})
        found = sizing_problems(sizing, f"{path}.internal_topics", production=production is True)
        problems.extend(found)
        clusters[alias] = Cluster(
            alias,
            str(bootstrap).replace(" ", ""),
            str(datacenter),
            security,
            InternalTopicSizing() if found else InternalTopicSizing.read(sizing),
            production is True,
        )
    return clusters


def _alias_problems(value: Any, path: str, clusters: Mapping[str, Cluster]) -> list[Problem]:
    if not isinstance(value, str):
        return [Problem(path, f"must be a cluster alias, got {value!r}")]
    if value not in clusters:
        return [Problem(path, f"unknown cluster {value!r}{did_you_mean(value, clusters)}; declare it under clusters")]
    return []


def _pattern_field_problems(
    decl: Mapping[str, Any], pattern: Pattern, path: str, clusters: Mapping[str, Cluster]
) -> list[Problem]:
    problems: list[Problem] = []
    for key in pattern.aliases:
        problems += (
            [Problem(f"{path}.{key}", "required key is missing")]
            if key not in decl
            else _alias_problems(decl[key], f"{path}.{key}", clusters)
        )
    for key in pattern.alias_lists:
        value = decl.get(key)
        if key not in decl:
            problems.append(Problem(f"{path}.{key}", "required key is missing"))
        elif not isinstance(value, list) or len(value) < pattern.min_list_length:
            problems.append(
                Problem(
                    f"{path}.{key}",
                    f"must be a list of at least {pattern.min_list_length} cluster aliases, got {value!r}",
                )
            )
        else:
            for i, alias in enumerate(value):
                problems += _alias_problems(alias, f"{path}.{key}[{i}]", clusters)
            problems += [
                Problem(f"{path}.{key}", f"cluster {a!r} is listed twice")
                for a in sorted({a for a in value if isinstance(a, str) and value.count(a) > 1})
            ]
    for flag in pattern.optional:  # bidirectional, reverse_flow
        if flag in decl and not isinstance(decl[flag], bool):
            problems.append(Problem(f"{path}.{flag}", f"must be true or false, got {decl[flag]!r}"))
    if pattern.name == "custom":
        problems += _custom_flow_problems(decl.get("flows"), f"{path}.flows", clusters)
    return problems


def _custom_flow_problems(value: Any, path: str, clusters: Mapping[str, Cluster]) -> list[Problem]:
    if not isinstance(value, list) or not value:
        return [Problem(path, f"required non-empty list of flows such as 'a->b', got {value!r}")]
    problems = []
    for i, text in enumerate(value):
        edge = parse_flow_id(text) if isinstance(text, str) else None
        if edge is None:
            problems.append(Problem(f"{path}[{i}]", f"must look like 'source->target', got {text!r}"))
            continue
        for alias in edge:
            problems += _alias_problems(alias, f"{path}[{i}]", clusters)
    return problems


def _pattern_fields(pattern: Pattern) -> set[str]:
    fields = TOPOLOGY_BASE_KEYS | set(pattern.aliases) | set(pattern.alias_lists) | set(pattern.optional)
    return set(fields) | ({"flows"} if pattern.name == "custom" else set())


def parse_declaration(
    decl: Any, index: int, clusters: Mapping[str, Cluster]
) -> tuple[Pattern | None, dict[str, Any], list[Problem]]:
    """A topology declaration's pattern, its (normalised) settings and its problems."""
    path = f"topologies[{index}]"
    if not isinstance(decl, dict):
        return None, {}, [Problem(path, f"must be a mapping with name and pattern, got {decl!r}")]
    problems = []
    name = decl.get("name")
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        problems.append(
            Problem(f"{path}.name", f"required topology name (letters, digits, '.', '_', '-'), got {name!r}")
        )
    pattern = PATTERNS.get(str(decl.get("pattern")))
    if pattern is None:
        found = decl.get("pattern")
        problems.append(
            Problem(
                f"{path}.pattern",
                f"unknown pattern {found!r}{did_you_mean(str(found), PATTERNS)}; use one of: {', '.join(PATTERNS)}",
            )
        )
        return None, {}, problems
    fields = _pattern_fields(pattern)
    settings, alias_problems = normalise({k: v for k, v in decl.items() if k not in fields}, path)
    problems += alias_problems
    problems += setting_problems(settings, path, extra_keys=FLOW_ONLY_KEYS)
    problems += _pattern_field_problems(decl, pattern, path, clusters)
    return pattern, settings, problems


def graph_buildable(found: list[Problem], index: int, pattern: Pattern) -> bool:
    """True when a declaration's only problems are keys the graph never reads (unknown keys, a
    MirrorMaker 1 alias given beside its MM2 name): its edges still join the loop and collision
    checks, so a typo elsewhere in it does not hide a cycle (every problem at once)."""
    known = SETTING_KEYS | FLOW_ONLY_KEYS | _pattern_fields(pattern) | {"name", "pattern"}
    prefix = f"topologies[{index}]."
    for problem in found:
        if not problem.path.startswith(prefix):
            return False
        key = problem.path[len(prefix) :].split(".", 1)[0].split("[", 1)[0]
        if key in known:
            return False
    return True


def parse_overrides(raw: Any, problems: Problems) -> dict[str, dict[str, Any]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.add("flows", f"must be a mapping of flow id ('a->b') -> settings, got {raw!r}")
        return {}
    out = {}
    for key, value in raw.items():
        path = f"flows.{key}"
        if not isinstance(key, str) or parse_flow_id(key) is None:
            problems.add(path, f"flow ids look like 'source->target', got {key!r}")
            continue
        if not isinstance(value, dict):
            problems.add(path, f"must be a mapping of settings, got {value!r}")
            continue
        settings, alias_problems = normalise(value, path)
        problems.extend(alias_problems)
        problems.extend(setting_problems(settings, path, extra_keys=FLOW_ONLY_KEYS))
        out[flow_id(*parse_flow_id(key))] = settings  # type: ignore[misc]
    return out


def parse_defaults(raw: Any, problems: Problems) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.add("defaults", f"must be a mapping of settings (topics, replication_policy, ...), got {raw!r}")
        return {}
    defaults, alias_problems = normalise(raw, "defaults")
    problems.extend(alias_problems)
    problems.extend(setting_problems(defaults, "defaults"))
    return defaults
