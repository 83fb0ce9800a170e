"""Whole-topology checks on the planned flow graph: loops and target-topic collisions.

Pure functions over `(source, target, policy, selection)` facts, so the property tests can
drive them with random graphs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kmirror.filters import NameSelection, split_patterns

_REGEX_META = re.compile(r"[.^$*+?{}\[\]\\|()]")


@dataclass(frozen=True)
class FlowFacts:
    """What the graph checks need to know about one flow."""

    id: str
    source: str
    target: str
    identity: bool
    selection: NameSelection


def _paths_back(edges: Mapping[str, set[str]], start: str, goal: str) -> list[str] | None:
    """A shortest path start -> ... -> goal (breadth first, deterministic), or None."""
    frontier: list[list[str]] = [[start]]
    seen = {start}
    while frontier:
        next_frontier = []
        for path in frontier:
            for node in sorted(edges.get(path[-1], ())):
                if node == goal:
                    return [*path, node]
                if node not in seen:
                    seen.add(node)
                    next_frontier.append([*path, node])
        frontier = next_frontier
    return None


def identity_cycles(flows: Iterable[FlowFacts]) -> list[list[str]]:
    """Every loop of flows that contains an identity-policy flow, as `[a, b, ..., a]`.

    The default policy stops loops by name (a topic that came from the target is never sent
    back, MM2's isCycle); a topic that crossed an identity flow keeps no trace of where it came
    from, so any cycle through one mirrors records round and round. Each loop is reported once,
    rotated to start at its smallest alias.
    """
    flows = list(flows)
    edges: dict[str, set[str]] = {}
    for f in flows:
        edges.setdefault(f.source, set()).add(f.target)
    found: dict[tuple[str, ...], list[str]] = {}
    for f in sorted(flows, key=lambda f: f.id):
        if not f.identity:
            continue
        back = _paths_back(edges, f.target, f.source)
        if back is None:
            continue
        loop = [f.source, *back]  # source, target, ..., source
        nodes = loop[:-1]
        pivot = nodes.index(min(nodes))
        rotated = nodes[pivot:] + nodes[:pivot]
        found.setdefault(tuple(rotated), [*rotated, rotated[0]])
    return [found[key] for key in sorted(found)]


def _literals(selection: NameSelection) -> list[str] | None:
    """The exact names a selection can match when every include pattern is a plain name."""
    parts = split_patterns(selection.include)
    if any(_REGEX_META.search(p.replace("\\.", "")) for p in parts):
        return None
    return [p.replace("\\.", ".") for p in parts]


def selections_may_overlap(a: NameSelection, b: NameSelection) -> bool:
    """Can one topic name be selected by both? Exact for plain names; otherwise conservatively
    True (two regexes' intersection is not decided here), so a collision is never missed."""
    names_a, names_b = _literals(a), _literals(b)
    if names_a is not None:
        return any(b.matches(n) and a.matches(n) for n in names_a)
    if names_b is not None:
        return any(a.matches(n) and b.matches(n) for n in names_b)
    return True


def identity_collisions(flows: Sequence[FlowFacts]) -> list[tuple[str, str, str]]:
    """Pairs of identity flows into one target whose selections may share a topic name:
    both would write that topic on the target, interleaving two clusters' records.
    Returns `(target, flow id, flow id)` triples."""
    by_target: dict[str, list[FlowFacts]] = {}
    for f in flows:
        if f.identity:
            by_target.setdefault(f.target, []).append(f)
    out = []
    for target, group in sorted(by_target.items()):
        group.sort(key=lambda f: f.id)
        for i, first in enumerate(group):
            for second in group[i + 1 :]:
                if selections_may_overlap(first.selection, second.selection):
                    out.append((target, first.id, second.id))
    return out
