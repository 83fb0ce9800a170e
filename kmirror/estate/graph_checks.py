"""Whole-topology checks on the planned flow graph: loops and target-topic collisions.

- `identity_cycles`: loops through an identity flow (names keep no trace of their origin);
  `flows_without_provenance`: the flows that must stamp provenance headers for such a loop to
  be safe (every flow among the loop's clusters).
- `separator_loops`: loops whose default-policy flows use different separators; a flow cannot
  read another separator's prefix, so MM2's name-based cycle check never fires
  (`orders -> a_orders -> b.a_orders -> a_b.a_orders ...`).
- `identity_collisions` / `identity_prefix_collisions`: two flows writing one topic name on a
  target (two identity flows; or an identity flow copying `b.orders` where a prefix flow from
  `b` writes `b.orders`).

Pure functions over `(source, target, policy, selection)` facts, so the property tests can
drive them with random graphs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kmirror.flow.filters import NameSelection, split_patterns
from kmirror.flow.replication_policy import DefaultReplicationPolicy, is_cycle

_REGEX_META = re.compile(r"[.^$*+?{}\[\]\\|()]")


@dataclass(frozen=True)
class FlowFacts:
    """What the graph checks need to know about one flow."""

    id: str
    source: str
    target: str
    identity: bool
    selection: NameSelection
    separator: str = "."  # the default policy's separator (ignored for identity flows)
    provenance: bool = False  # provenance_headers: records carry their origin and never go back to it


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


def _reachable(edges: Mapping[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for node in edges.get(todo.pop(), ()):
            if node not in seen:
                seen.add(node)
                todo.append(node)
    return seen


def flows_without_provenance(flows: Iterable[FlowFacts], loop: Sequence[str]) -> list[str]:
    """The ids of flows that make `loop` (from `identity_cycles`) circulate records: every flow
    between two clusters of the loop's strongly connected component that does not stamp
    provenance headers. Records follow walks, not only the loop itself, so one flow of the
    component without them is enough to bring a record home under a name it had (a flow that
    copies without stamping lets a record arrive with no origin, and the next hop stamps the
    wrong one). Empty: every record carries its origin and is never copied back into it."""
    flows = list(flows)
    edges: dict[str, set[str]] = {}
    back: dict[str, set[str]] = {}
    for f in flows:
        edges.setdefault(f.source, set()).add(f.target)
        back.setdefault(f.target, set()).add(f.source)
    component = _reachable(edges, loop[0]) & _reachable(back, loop[0])
    return sorted(f.id for f in flows if f.source in component and f.target in component and not f.provenance)


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


# A topic name standing for "any topic": no separator, so only the flows' prefixes shape it.
SAMPLE_TOPIC = "orders"


@dataclass(frozen=True)
class SeparatorLoop:
    """A loop of default-policy flows with two separators, and a topic's names as it goes round."""

    first: FlowFacts  # consecutive flows of the loop whose separators differ
    second: FlowFacts
    clusters: list[str]  # [a, b, ..., a]
    names: list[str]  # SAMPLE_TOPIC's names hop by hop, once round the loop and one hop further


def _journey(loop: list[FlowFacts], hops: int) -> list[str] | None:
    """SAMPLE_TOPIC's names along `hops` hops round `loop`, or None when MM2's cycle check
    (each flow reading names with its own separator) stops it on the way."""
    names = [SAMPLE_TOPIC]
    for hop in range(hops):
        flow = loop[hop % len(loop)]
        policy = DefaultReplicationPolicy(flow.separator)
        if is_cycle(policy, names[-1], flow.target):
            return None
        names.append(policy.format_remote_topic(flow.source, names[-1]))
    return names


def separator_loops(flows: Iterable[FlowFacts]) -> list[SeparatorLoop]:
    """Loops of default-policy flows in which two consecutive flows use different separators and
    a topic really comes back (simulated with MM2's cycle check); one per loop, sorted.

    For consecutive flows `f: x->y`, `g: y->z` with different separators, the loop is `f`, `g`
    and a shortest way from `z` back to `x` that avoids `y` (so the loop is simple).
    """
    prefixed = [f for f in flows if not f.identity]
    by_source: dict[str, list[FlowFacts]] = {}
    for f in sorted(prefixed, key=lambda f: f.id):
        by_source.setdefault(f.source, []).append(f)
    found: dict[tuple[str, ...], SeparatorLoop] = {}
    for f in sorted(prefixed, key=lambda f: f.id):
        for g in by_source.get(f.target, []):
            if g.separator == f.separator:
                continue
            back = _flows_back(by_source, g.target, f.source, avoid=f.target)
            if back is None:
                continue
            loop = [f, g, *back]
            names = _journey(loop, len(loop) + 1)
            if names is None:
                continue
            clusters = [x.source for x in loop] + [f.source]
            key = tuple(sorted(x.id for x in loop))
            found.setdefault(key, SeparatorLoop(f, g, clusters, names))
    return [found[key] for key in sorted(found)]


def _flows_back(by_source: Mapping[str, list[FlowFacts]], start: str, goal: str, avoid: str) -> list[FlowFacts] | None:
    """The flows of a shortest path start -> ... -> goal not passing through `avoid` ([] when start is goal)."""
    frontier: list[tuple[str, list[FlowFacts]]] = [(start, [])]
    seen = {start, avoid}
    while frontier:
        next_frontier = []
        for node, path in frontier:
            if node == goal:
                return path
            for flow in by_source.get(node, []):
                if flow.target not in seen:
                    seen.add(flow.target)
                    next_frontier.append((flow.target, [*path, flow]))
        frontier = next_frontier
    return None


def _prefixed_names_overlap(identity: NameSelection, prefix: str, prefixed: NameSelection) -> bool:
    """Can the identity flow select a name `prefix + T` with T selected by the prefix flow?
    Exact when either side lists plain names; otherwise True unless the identity flow's
    selection refuses every probe under the prefix (typically `topics_exclude: ['b\\..*']`)."""
    names, topics = _literals(identity), _literals(prefixed)
    if names is not None:
        return any(n.startswith(prefix) and identity.matches(n) and prefixed.matches(n[len(prefix) :]) for n in names)
    if topics is not None:
        return any(prefixed.matches(t) and identity.matches(prefix + t) for t in topics)
    return any(identity.matches(prefix + probe) for probe in (SAMPLE_TOPIC, "x", "a.b", "a_b", "a-b"))


def identity_prefix_collisions(flows: Sequence[FlowFacts]) -> list[tuple[str, str, str, str]]:
    """Pairs of an identity flow and a default-policy flow into one target where the identity
    flow may copy a topic named like the prefix flow's output (`b.orders` on both).
    Returns `(target, identity flow id, prefix flow id, prefix)` tuples, sorted."""
    out = []
    for i in sorted((f for f in flows if f.identity), key=lambda f: f.id):
        for d in sorted((f for f in flows if not f.identity), key=lambda f: f.id):
            prefix = f"{d.source}{d.separator}"
            if d.target == i.target and _prefixed_names_overlap(i.selection, prefix, d.selection):
                out.append((i.target, i.id, d.id, prefix))
    return out
