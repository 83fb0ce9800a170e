"""Resolving a topology's flows (defaults < topology < flow override, one flow per id) and the
checks on the resolved graph: self-flows, conflicting duplicates, separators, identity loops and
collisions, and the option combinations the app refuses. Part of the topology file
(`kmirror.estate.topology`, which re-exports `ResolvedFlow`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kmirror.errors import Problem, Problems, did_you_mean
from kmirror.estate.graph_checks import (
    FlowFacts,
    flows_without_provenance,
    identity_collisions,
    identity_cycles,
    identity_prefix_collisions,
    separator_loops,
)
from kmirror.estate.patterns import flow_id
from kmirror.estate.topology_parts import Cluster
from kmirror.flow.filters import NameSelection
from kmirror.flow.settings import MM2_DEFAULTS, merge
from kmirror.flow.spec import option_conflict_problems


@dataclass(frozen=True)
class ResolvedFlow:
    """One flow with its settings resolved (defaults < topology < flow override)."""

    id: str
    source: str
    target: str
    topology: str
    run_in: str
    settings: dict[str, Any] = field(default_factory=dict)


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


def resolve_flows(
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


def graph_problems(flows: Mapping[str, ResolvedFlow]) -> list[Problem]:
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


def flow_option_problems(flows: Mapping[str, ResolvedFlow], edges: list[Any]) -> list[Problem]:
    """The option combinations the app refuses at start, on each flow's resolved settings
    (defaults < topology < override), named by the declaration that produced the flow."""
    path_of = {flow_id(*edge): path for _, edge, _, path in edges}
    problems = []
    for fid, flow in flows.items():
        where = path_of.get(fid, f"flows.{fid}")
        for problem in option_conflict_problems(flow.settings):
            problems.append(Problem(f"{where}.{problem.path}", f"(flow {fid}) {problem.message}"))
    return problems


def imply_pattern_defaults(
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
