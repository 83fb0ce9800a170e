"""The topology file: clusters, defaults, replication topologies and per-flow overrides.

`parse_topology` validates the whole file, collecting every problem with its path
(`topologies[1].primary: unknown cluster 'eas-1' (did you mean 'east-1'?)`) and raising them
once as a `ValidationError` (exit code 2). What it returns is consistent: every alias exists,
every flow is resolved (defaults < topology < flow override) and placed. Pure: no pulumi,
pyspark or Kafka client is imported. `docs/topology.md` is the user-facing reference.

The file's parts are parsed in `kmirror.estate.topology_parts`, its flows resolved and checked
in `kmirror.estate.flow_resolution`; this module re-exports `Cluster` and `ResolvedFlow`, so
`kmirror.estate.topology` stays the one import path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kmirror.errors import Problem, Problems, ValidationError
from kmirror.estate.flow_resolution import (
    ResolvedFlow,
    flow_option_problems,
    graph_problems,
    imply_pattern_defaults,
    resolve_flows,
)
from kmirror.estate.patterns import flow_id
from kmirror.estate.reverse_flow import (
    REVERSE_FLOW,
    add_loop_excludes,
    edge_settings,
    reverse_edge,
    reverse_of_problems,
)
from kmirror.estate.topology_parts import (
    CLUSTER_KEYS,
    FLOW_ONLY_KEYS,
    TOP_KEYS,
    TOPOLOGY_BASE_KEYS,
    Cluster,
    graph_buildable,
    parse_clusters,
    parse_declaration,
    parse_defaults,
    parse_overrides,
)
from kmirror.flow.settings import SETTING_KEYS
from kmirror.option_table import unknown_keys

__all__ = [
    "CLUSTER_KEYS",
    "FLOW_ONLY_KEYS",
    "PATTERN_DEFAULTS",
    "TOPOLOGY_BASE_KEYS",
    "TOP_KEYS",
    "Cluster",
    "ResolvedFlow",
    "Topology",
    "load_topology",
    "parse_topology",
]


@dataclass(frozen=True)
class Topology:
    clusters: dict[str, Cluster]
    flows: dict[str, ResolvedFlow]  # by id, sorted
    source: str = ""

    @property
    def datacenters(self) -> list[str]:
        return sorted({c.datacenter for c in self.clusters.values()})


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
    clusters = parse_clusters(raw.get("clusters"), problems)
    before_settings = len(problems.items)
    defaults = parse_defaults(raw.get("defaults"), problems)
    overrides = parse_overrides(raw.get("flows"), problems)
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
        pattern, settings, found = parse_declaration(decl, index, clusters)
        problems.extend(found)
        name = decl.get("name") if isinstance(decl, dict) else None
        if isinstance(name, str) and name in seen_names:
            problems.add(
                f"topologies[{index}].name", f"duplicate topology name {name!r} (also topologies[{seen_names[name]}])"
            )
        elif isinstance(name, str):
            seen_names[name] = index
        if pattern is None or not isinstance(name, str) or not graph_buildable(found, index, pattern):
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
    flows = resolve_flows(edges, clusters, defaults, overrides, problems, complete=not skipped) if settings_ok else {}
    imply_pattern_defaults(flows, implied, edges, defaults, overrides)
    if settings_ok:
        add_loop_excludes(flows)  # before the graph checks, which read the excludes
        problems.extend(reverse_of_problems(flows, edges, overrides))
        problems.extend(graph_problems(flows))
        problems.extend(flow_option_problems(flows, edges))
    problems.raise_if_any()
    return Topology(clusters, flows, source)


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
