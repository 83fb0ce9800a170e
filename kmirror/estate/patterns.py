"""Replication patterns: how a topology declaration becomes directed `source->target` flows.

Each pattern is a pure function from the declaration's fields to an ordered list of
`(source, target)` pairs, plus the fields it needs; `kmirror.estate.topology` validates the fields
(aliases exist, types are right) before expanding.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import pairwise, permutations
from typing import Any

Edge = tuple[str, str]


def flow_id(source: str, target: str) -> str:
    """`a->b`: the identity of a flow, as MirrorMaker 2's SourceAndTarget prints it."""
    return f"{source}->{target}"


def parse_flow_id(text: str) -> Edge | None:
    """`"a->b"` -> `("a", "b")`; None when `text` is not of that shape."""
    source, sep, target = text.partition("->")
    if not sep or not source.strip() or not target.strip() or "->" in target:
        return None
    return source.strip(), target.strip()


def _active_passive(decl: Mapping[str, Any]) -> list[Edge]:
    edges = [(decl["primary"], decl["standby"])]
    if decl.get("reverse_flow", False):  # failback: kmirror.estate.reverse_flow plans it
        edges.append((decl["standby"], decl["primary"]))
    return edges


def _active_active(decl: Mapping[str, Any]) -> list[Edge]:
    return list(permutations(decl["clusters"], 2))


def _hub_and_spoke(decl: Mapping[str, Any]) -> list[Edge]:
    hub = decl["hub"]
    edges = [(spoke, hub) for spoke in decl["spokes"]]
    if decl.get("bidirectional", False):
        edges += [(hub, spoke) for spoke in decl["spokes"]]
    return edges


def _fan_out(decl: Mapping[str, Any]) -> list[Edge]:
    return [(decl["source"], target) for target in decl["targets"]]


def _chain(decl: Mapping[str, Any]) -> list[Edge]:
    clusters = decl["clusters"]
    return list(pairwise(clusters))


def _custom(decl: Mapping[str, Any]) -> list[Edge]:
    edges = [parse_flow_id(text) for text in decl["flows"]]
    return [edge for edge in edges if edge is not None]


@dataclass(frozen=True)
class Pattern:
    """A pattern's fields: `aliases` name one cluster, `alias_lists` a list of clusters."""

    name: str
    aliases: tuple[str, ...]
    alias_lists: tuple[str, ...]
    expand: Callable[[Mapping[str, Any]], list[Edge]]
    min_list_length: int = 1
    optional: tuple[str, ...] = ()
    doc: str = ""


PATTERNS: dict[str, Pattern] = {
    p.name: p
    for p in (
        Pattern(
            "active-passive",
            ("primary", "standby"),
            (),
            _active_passive,
            optional=("reverse_flow",),
            doc="primary->standby (and standby->primary for failback when reverse_flow)",
        ),
        Pattern("active-active", (), ("clusters",), _active_active, 2, doc="every ordered pair of clusters"),
        Pattern(
            "hub-and-spoke",
            ("hub",),
            ("spokes",),
            _hub_and_spoke,
            optional=("bidirectional",),
            doc="spoke->hub (and hub->spoke when bidirectional)",
        ),
        Pattern("fan-out", ("source",), ("targets",), _fan_out, doc="source->each target"),
        Pattern("chain", (), ("clusters",), _chain, 2, doc="consecutive pairs of clusters"),
        Pattern("custom", (), (), _custom, doc="the flows listed, as 'a->b'"),
    )
}
