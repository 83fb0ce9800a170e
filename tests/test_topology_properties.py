"""Property tests over random topologies: no flow to self, identity cycles always caught,
placement always the target's datacenter (unless overridden)."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kmirror.errors import ValidationError
from kmirror.estate.planner import parse_topology, plan_topology

ALIASES = ["a", "b", "c", "d", "e"]
DATACENTERS = ["dc1", "dc2", "dc3"]
POLICIES = [{"type": "default"}, {"type": "identity"}]


@st.composite
def topologies(draw: Any) -> dict[str, Any]:
    aliases = draw(st.lists(st.sampled_from(ALIASES), min_size=2, max_size=5, unique=True))
    clusters = {
        a: {"bootstrap_servers": f"{a}:9092", "datacenter": draw(st.sampled_from(DATACENTERS))} for a in aliases
    }
    decls = []
    for index in range(draw(st.integers(1, 4))):
        pattern = draw(
            st.sampled_from(["active-passive", "active-active", "hub-and-spoke", "fan-out", "chain", "custom"])
        )
        decl: dict[str, Any] = {"name": f"t{index}", "pattern": pattern}
        some = st.lists(st.sampled_from(aliases), min_size=2, max_size=len(aliases), unique=True)
        if pattern == "active-passive":
            decl.update(primary=draw(st.sampled_from(aliases)), standby=draw(st.sampled_from(aliases)))
        elif pattern in ("active-active", "chain"):
            decl["clusters"] = draw(some)
        elif pattern == "hub-and-spoke":
            decl.update(
                hub=draw(st.sampled_from(aliases)),
                spokes=draw(some)[:-1] or [aliases[0]],
                bidirectional=draw(st.booleans()),
            )
        elif pattern == "fan-out":
            decl.update(source=draw(st.sampled_from(aliases)), targets=draw(some))
        else:
            pairs = st.tuples(st.sampled_from(aliases), st.sampled_from(aliases))
            decl["flows"] = [f"{s}->{t}" for s, t in draw(st.lists(pairs, min_size=1, max_size=4))]
        decl["replication_policy"] = draw(st.sampled_from(POLICIES))
        decl["topics"] = [draw(st.sampled_from(["orders", "pay.*", ".*"]))]
        decls.append(decl)
    return {"clusters": clusters, "topologies": decls}


def _edges_with_policy(raw: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Independent expansion used as the oracle (no code shared with kmirror.estate.patterns)."""
    out = []
    for d in raw["topologies"]:
        p, pol = d["pattern"], d["replication_policy"]["type"]
        if p == "active-passive":
            pairs = [(d["primary"], d["standby"])]
        elif p == "active-active":
            pairs = [(x, y) for x in d["clusters"] for y in d["clusters"] if x != y]
        elif p == "chain":
            pairs = [(d["clusters"][i], d["clusters"][i + 1]) for i in range(len(d["clusters"]) - 1)]
        elif p == "hub-and-spoke":
            pairs = [(s, d["hub"]) for s in d["spokes"]] + (
                [(d["hub"], s) for s in d["spokes"]] if d["bidirectional"] else []
            )
        elif p == "fan-out":
            pairs = [(d["source"], t) for t in d["targets"]]
        else:
            pairs = [tuple(f.split("->")) for f in d["flows"]]  # type: ignore[misc]
        out += [(s, t, pol) for s, t in pairs]
    return out


def _has_identity_cycle(edges: list[tuple[str, str, str]]) -> bool:
    """Brute force: an identity edge u->v plus any path v ~> u."""
    graph: dict[str, set[str]] = {}
    for s, t, _ in edges:
        graph.setdefault(s, set()).add(t)

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            node = todo.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                todo += list(graph.get(node, ()))
        return False

    return any(pol == "identity" and s != t and reaches(t, s) for s, t, pol in edges)


@settings(max_examples=300, deadline=None)
@given(topologies())
def test_random_topologies(raw: dict[str, Any]) -> None:
    edges = _edges_with_policy(raw)
    try:
        plan = plan_topology(parse_topology(raw))
    except ValidationError as exc:
        messages = [p.message for p in exc.problems]
        # every rejection has a reason a reviewer can check
        assert messages
        if _has_identity_cycle(edges) and not any("itself" in m or "also produced" in m for m in messages):
            assert any("identity replication cycle" in m for m in messages)
        return
    assert not _has_identity_cycle(edges), "an identity cycle was planned"
    assert not any(s == t for s, t, _ in edges), "a self-flow was accepted"
    for flow in plan.flows:
        assert flow.source != flow.target
        assert flow.run_in == raw["clusters"][flow.target]["datacenter"]
        assert flow.id in plan.datacenters[flow.run_in]
    assert {f.id for f in plan.flows} == {f"{s}->{t}" for s, t, _ in edges}


@st.composite
def flow_graphs(draw: Any) -> dict[str, Any]:
    """Distinct directed edges between distinct clusters, each its own custom topology with a
    topic of its own, so an identity cycle is the only possible problem."""
    pairs = [(s, t) for s in ALIASES for t in ALIASES if s != t]
    chosen = draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=8, unique=True))
    clusters = {a: {"bootstrap_servers": f"{a}:9092", "datacenter": "dc1"} for a in ALIASES}
    decls = [
        {
            "name": f"t{i}",
            "pattern": "custom",
            "flows": [f"{s}->{t}"],
            "topics": [f"topic{i}"],
            "replication_policy": draw(st.sampled_from(POLICIES)),
        }
        for i, (s, t) in enumerate(chosen)
    ]
    return {"clusters": clusters, "topologies": decls}


@settings(max_examples=300, deadline=None)
@given(flow_graphs())
def test_identity_cycles_are_always_caught_and_only_they(raw: dict[str, Any]) -> None:
    cyclic = _has_identity_cycle(_edges_with_policy(raw))
    try:
        parse_topology(raw)
    except ValidationError as exc:
        assert cyclic, f"rejected without an identity cycle: {exc}"
        assert all("identity replication cycle" in p.message for p in exc.problems)
        for problem in exc.problems:  # each reported loop is a real cycle: consecutive flows exist
            loop = problem.message.split("cycle ", 1)[1].split(":", 1)[0].split(" -> ")
            planned = {tuple(d["flows"][0].split("->")) for d in raw["topologies"]}
            assert loop[0] == loop[-1] and all((a, b) in planned for a, b in itertools.pairwise(loop))
        return
    assert not cyclic
