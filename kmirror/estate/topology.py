"""The topology file: clusters, defaults, replication topologies and per-flow overrides.

`parse_topology` validates the whole file, collecting every problem with its path
(`topologies[1].primary: unknown cluster 'eas-1' (did you mean 'east-1'?)`) and raising them
once as a `ValidationError` (exit code 2). What it returns is consistent: every alias exists,
every flow is resolved (defaults < topology < flow override) and placed. Pure: no pulumi,
pyspark or Kafka client is imported. `docs/topology.md` is the user-facing reference.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kmirror.errors import Problem, Problems, ValidationError, did_you_mean
from kmirror.estate.graph_checks import (
    FlowFacts,
    flows_without_provenance,
    identity_collisions,
    identity_cycles,
    identity_prefix_collisions,
    separator_loops,
)
from kmirror.estate.patterns import PATTERNS, Pattern, flow_id, parse_flow_id
from kmirror.estate.reverse_flow import (
    REVERSE_FLOW,
    add_loop_excludes,
    edge_settings,
    reverse_edge,
    reverse_of_problems,
)
from kmirror.flow.filters import NameSelection
from kmirror.flow.internal_sizing import InternalTopicSizing, sizing_problems
from kmirror.flow.settings import MM2_DEFAULTS, SETTING_KEYS, merge, normalise, setting_problems
from kmirror.flow.spec import option_conflict_problems
from kmirror.option_table import unknown_keys
from kmirror.security.config import security_problems

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


@dataclass(frozen=True)
class ResolvedFlow:
    """One flow with its settings resolved (defaults < topology < flow override)."""

    id: str
    source: str
    target: str
    topology: str
    run_in: str
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Topology:
    clusters: dict[str, Cluster]
    flows: dict[str, ResolvedFlow]  # by id, sorted
    source: str = ""

    @property
    def datacenters(self) -> list[str]:
        return sorted({c.datacenter for c in self.clusters.values()})


def _parse_clusters(raw: Any, problems: Problems) -> dict[str, Cluster]:
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


def _parse_declaration(
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


def _graph_buildable(found: list[Problem], index: int, pattern: Pattern) -> bool:
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


def _parse_overrides(raw: Any, problems: Problems) -> dict[str, dict[str, Any]]:
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


def _separator_problems(flow: ResolvedFlow, path: str) -> list[Problem]:
    """An alias containing the default policy's separator would be misread as a topic prefix
    (`dc.old.orders` reads back as source `dc`), which breaks loop detection."""
    policy = flow.settings["replication_policy"]
    if policy.get("type", "default") != "default":
        return []
    separator = policy.get("separator", ".")
    return [
        Problem(
            f"{path}.replication_policy.separator",
            f"cluster alias {alias!r} contains the separator {separator!r}; "
            "remote topic names could not be traced back to their source: choose another separator or alias",
        )
        for alias in (flow.source, flow.target)
        if separator in alias
    ]


def _resolve(
    edges: list[tuple[str, tuple[str, str], dict[str, Any], str]],
    clusters: Mapping[str, Cluster],
    defaults: Mapping[str, Any],
    overrides: Mapping[str, dict[str, Any]],
    problems: Problems,
    complete: bool = True,
) -> dict[str, ResolvedFlow]:
    """Resolve every (topology name, edge, topology settings, path) into one flow per id.
    `complete` is False when a declaration with problems contributed no edges: an override
    of a flow no topology produces is then not reported (that declaration may produce it)."""
    flows: dict[str, ResolvedFlow] = {}
    first_path: dict[str, str] = {}
    datacenters = sorted({c.datacenter for c in clusters.values()})
    for topology, (source, target), settings, path in edges:
        fid = flow_id(source, target)
        if source == target:
            problems.add(path, f"flow {fid!r} goes from a cluster to itself; a mirror needs two clusters")
            continue
        merged = merge(MM2_DEFAULTS, defaults, settings, overrides.get(fid, {}))
        run_in = merged.pop("run_in", clusters[target].datacenter)
        if run_in not in datacenters:
            where = f"flows.{fid}.run_in" if "run_in" in overrides.get(fid, {}) else f"{path}.run_in"
            problems.add(
                where,
                f"unknown datacenter {run_in!r}{did_you_mean(str(run_in), datacenters)}; "
                f"known: {', '.join(datacenters)}",
            )
        flow = ResolvedFlow(fid, source, target, topology, str(run_in), merged)
        if fid in flows:
            problems.extend(_conflict(flows[fid], flow, first_path[fid], path))
            continue
        problems.extend(_separator_problems(flow, path))
        flows[fid], first_path[fid] = flow, path
    for fid in sorted(set(overrides) - set(flows)) if complete else []:
        problems.add(
            f"flows.{fid}",
            f"no topology produces flow {fid!r}{_flow_hint(fid, flows)}; "
            "add it to a topology (e.g. a custom one) or remove the override",
        )
    return {fid: flows[fid] for fid in sorted(flows)}


def _flow_hint(fid: str, flows: Mapping[str, ResolvedFlow]) -> str:
    source, target = fid.split("->")
    reverse = flow_id(target, source)
    return f" (did you mean {reverse!r}?)" if reverse in flows else did_you_mean(fid, flows)


def _conflict(first: ResolvedFlow, second: ResolvedFlow, first_path: str, path: str) -> list[Problem]:
    a = {**first.settings, "run_in": first.run_in}
    b = {**second.settings, "run_in": second.run_in}
    differing = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    if not differing:
        return []
    return [
        Problem(
            path,
            f"flow {first.id!r} is also produced by {first_path} (topology {first.topology!r}) with "
            f"different {', '.join(differing)}; make them agree or set them once under flows.{first.id}",
        )
    ]


def _graph_problems(flows: Mapping[str, ResolvedFlow]) -> list[Problem]:
    facts = [
        FlowFacts(
            f.id,
            f.source,
            f.target,
            f.settings["replication_policy"].get("type") == "identity",
            NameSelection(tuple(f.settings["topics"]), tuple(f.settings["topics_exclude"])),
            f.settings["replication_policy"].get("separator", "."),
            f.settings.get("provenance_headers") is True,
        )
        for f in flows.values()
    ]
    problems = [
        Problem(
            "topologies",
            f"identity replication cycle {' -> '.join(loop)}: with the identity policy a mirrored topic "
            f"keeps its name, so its records would circle forever; flows {', '.join(map(repr, missing))} copy "
            "without provenance_headers (a header naming each record's origin cluster, so that no record is "
            "copied back into it): set provenance_headers: true on them, use the default policy on one of "
            "these flows, or remove one",
        )
        for loop in identity_cycles(facts)
        if (missing := flows_without_provenance(facts, loop))
    ]
    problems += [
        Problem(
            f"flows.{second}",
            f"flows {first!r} and {second!r} both write the same topic names into {target!r} "
            "(identity policy); use the default policy on one, or give them disjoint topics",
        )
        for target, first, second in identity_collisions(facts)
    ]
    problems += [
        Problem(
            f"flows.{loop.second.id}.replication_policy.separator",
            f"flows {loop.first.id!r} (separator {loop.first.separator!r}) and {loop.second.id!r} (separator "
            f"{loop.second.separator!r}) are on the replication loop {' -> '.join(loop.clusters)}; a flow cannot "
            f"read another separator's prefix, so its loop check never stops a topic: {' -> '.join(loop.names)} "
            "... circles forever; use one separator on every flow of the loop",
        )
        for loop in separator_loops(facts)
    ]
    problems += [
        Problem(
            f"flows.{identity}",
            f"flows {identity!r} (identity policy) and {prefixed!r} (prefix {prefix!r}) may both write topics "
            f"named {prefix}<topic> into {target!r}: the identity flow copies such a topic from its source under "
            f"the same name; use the default policy on {identity!r}, or exclude those topics from it "
            f"(topics_exclude: ['{re.escape(prefix)}.*'])",
        )
        for target, identity, prefixed, prefix in identity_prefix_collisions(facts)
    ]
    return problems


# Settings a pattern implies, below the topology file's `defaults` (so those, the topology and a
# flow override can switch them off): an active/passive standby keeps the groups' offsets synced,
# so consumers started there without `kmirror failover` resume where they were (docs/failover.md).
PATTERN_DEFAULTS: dict[str, dict[str, Any]] = {"active-passive": {"sync_group_offsets": True}}


def parse_topology(raw: Any, source: str = "topology") -> Topology:
    """Validate a topology mapping and resolve its flows.

    Raises ValidationError listing every problem (unknown keys and aliases, bad regexes or
    separators, self-flows, conflicting duplicate flows, identity loops, loops mixing separators,
    identity fan-in collisions, identity and prefix flows writing one name, missing bootstrap
    servers or datacenters), each with its path.
    """
    problems = Problems(source)
    if not isinstance(raw, dict):
        problems.add("", f"a topology file must be a mapping with {', '.join(TOP_KEYS)}; got {type(raw).__name__}")
        problems.raise_if_any()
    problems.extend(unknown_keys(raw, TOP_KEYS, "", list_allowed=True))
    clusters = _parse_clusters(raw.get("clusters"), problems)
    before_settings = len(problems.items)
    defaults = _parse_defaults(raw.get("defaults"), problems)
    overrides = _parse_overrides(raw.get("flows"), problems)
    # The graph checks read the defaults' and overrides' settings (patterns, policies), so they
    # need those valid; unknown top-level keys, bad clusters or bad declarations (skipped) do not.
    settings_ok = len(problems.items) == before_settings
    decls = raw.get("topologies")
    if not isinstance(decls, list) or not decls:
        problems.add("topologies", f"must be a non-empty list of topologies (name, pattern, ...), got {decls!r}")
        decls = []
    edges = []
    skipped = False
    implied: list[tuple[str, dict[str, Any]]] = []
    seen_names: dict[str, int] = {}
    for index, decl in enumerate(decls):
        pattern, settings, found = _parse_declaration(decl, index, clusters)
        problems.extend(found)
        name = decl.get("name") if isinstance(decl, dict) else None
        if isinstance(name, str) and name in seen_names:
            problems.add(
                f"topologies[{index}].name", f"duplicate topology name {name!r} (also topologies[{seen_names[name]}])"
            )
        elif isinstance(name, str):
            seen_names[name] = index
        if pattern is None or not isinstance(name, str) or not _graph_buildable(found, index, pattern):
            skipped = True
            continue
        settings = {k: v for k, v in settings.items() if k in SETTING_KEYS or k in FLOW_ONLY_KEYS}
        edges += [
            (
                name,
                edge,
                edge_settings(decl, edge, settings),
                f"topologies[{index}]" + (f".{REVERSE_FLOW}" if edge == reverse_edge(decl) else ""),
            )
            for edge in pattern.expand(decl)
        ]
        implied += [(flow_id(*edge), PATTERN_DEFAULTS.get(pattern.name, {})) for edge in pattern.expand(decl)]
    # Every problem at once: a declaration with problems contributes no edges, but the graph of
    # the others is still built and checked (an unknown key elsewhere does not hide a loop).
    # Fewer edges can only hide graph problems, never invent them.
    flows = _resolve(edges, clusters, defaults, overrides, problems, complete=not skipped) if settings_ok else {}
    _imply(flows, implied, edges, defaults, overrides)
    if settings_ok:
        add_loop_excludes(flows)  # before the graph checks, which read the excludes
        problems.extend(reverse_of_problems(flows, edges, overrides))
        problems.extend(_graph_problems(flows))
        problems.extend(_flow_option_problems(flows, edges))
    problems.raise_if_any()
    return Topology(clusters, flows, source)


def _flow_option_problems(flows: Mapping[str, ResolvedFlow], edges: list[Any]) -> list[Problem]:
    """The option combinations the app refuses at start, on each flow's resolved settings
    (defaults < topology < override), named by the declaration that produced the flow."""
    path_of = {flow_id(*edge): path for _, edge, _, path in edges}
    problems = []
    for fid, flow in flows.items():
        where = path_of.get(fid, f"flows.{fid}")
        for problem in option_conflict_problems(flow.settings):
            problems.append(Problem(f"{where}.{problem.path}", f"(flow {fid}) {problem.message}"))
    return problems


def _imply(
    flows: Mapping[str, ResolvedFlow],
    implied: list[tuple[str, dict[str, Any]]],
    edges: list[tuple[str, tuple[str, str], dict[str, Any], str]],
    defaults: Mapping[str, Any],
    overrides: Mapping[str, dict[str, Any]],
) -> None:
    """Add PATTERN_DEFAULTS to the flows their patterns produce, unless the file sets the key for
    that flow (defaults, a topology producing it, its override): an explicit value always wins,
    and a flow two topologies produce is not a conflict over a setting neither of them wrote."""
    for fid, settings in implied:
        explicit = [defaults, overrides.get(fid, {}), *(s for _, edge, s, _ in edges if flow_id(*edge) == fid)]
        for key, value in settings.items():
            if fid in flows and not any(key in e for e in explicit):
                flows[fid].settings.setdefault(key, value)


def _parse_defaults(raw: Any, problems: Problems) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.add("defaults", f"must be a mapping of settings (topics, replication_policy, ...), got {raw!r}")
        return {}
    defaults, alias_problems = normalise(raw, "defaults")
    problems.extend(alias_problems)
    problems.extend(setting_problems(defaults, "defaults"))
    return defaults


def load_topology(path: str | Path) -> Topology:
    """Read and validate a topology YAML file; a missing file or bad YAML is a ValidationError."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValidationError([Problem("--topology", f"file not found: {str(path)!r}")]) from None
    except yaml.YAMLError as exc:
        raise ValidationError([Problem("", f"not valid YAML: {exc}")], str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError([Problem("--topology", f"cannot read {str(path)!r}: {exc}")]) from None
    return parse_topology(raw, str(path))
