"""The reverse flow of an active-passive topology (`reverse_flow: true`): standby->primary for failback.

After a failover primary->standby, producers write to the standby's own topics and consumers read
the remote topics there (`A.orders` on B). The reverse flow B->A carries what was produced on B
during the outage home to A, and its checkpoint rounds translate groups committed on `A.orders`
back to `orders` on A (flow-spec option `reverse_of`, docs/failover.md#failback). Planned like
any flow, with three differences:

- it runs in the primary's datacenter (where its target lives), whatever `run_in` the
  declaration sets for its forward flow (a `flows.<id>.run_in` override still wins);
- it never mirrors the primary's remote topics back: `<primary><separator>.*` is added to its
  `topics_exclude` after every layer is merged (MM2's cycle check stops them too; the exclude
  says so in the plan and survives a `{replace: [...]}`);
- it needs the default replication policy, or the identity policy with `provenance_headers`
  (issue 46): with identity, `orders` mirrored from A keeps its name on B, so without provenance
  headers the reverse flow would copy it back into A (a loop) and could not tell A's records on B
  from B's own; with them it skips every record whose origin is A.

Pure: the planner (`kmirror.estate.topology`) calls these on the declarations and resolved flows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from kmirror.errors import Problem
from kmirror.estate.patterns import Edge, flow_id

REVERSE_FLOW = "reverse_flow"  # the declaration key (active-passive)
REVERSE_OF = "reverse_of"  # the flow-spec option the planner sets on the reverse flow


class _Flow(Protocol):
    """A resolved flow (`kmirror.estate.topology.ResolvedFlow`), as far as these checks read it."""

    @property
    def target(self) -> str: ...

    @property
    def settings(self) -> dict[str, Any]: ...


def reverse_edge(decl: Mapping[str, Any]) -> Edge | None:
    """standby->primary when an active-passive declaration asks for its reverse flow, else None."""
    if decl.get("pattern") != "active-passive" or decl.get(REVERSE_FLOW) is not True:
        return None
    return decl["standby"], decl["primary"]


def edge_settings(decl: Mapping[str, Any], edge: Edge, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a declaration gives one of its flows: its own settings, except that the reverse
    flow drops the declaration's `run_in` (it runs where its target lives) and names its forward
    flow's source in `reverse_of`."""
    if edge != reverse_edge(decl):
        return dict(settings)
    own = {key: value for key, value in settings.items() if key != "run_in"}
    return {**own, REVERSE_OF: edge[1]}


_REGEX_META = re.compile(r"([.^$*+?{}\[\]\\|()])")


def loop_exclude(forward_source: str, separator: str) -> str:
    """The exclude keeping the forward flow's remote topics (`west-1.orders`) out of the reverse
    flow: `west-1\\..*` (only regex metacharacters escaped, so it reads as written)."""
    return _REGEX_META.sub(r"\\\1", forward_source + separator) + ".*"


def add_loop_excludes(flows: Mapping[str, _Flow]) -> None:
    """Add `loop_exclude` to the resolved `topics_exclude` of every default-policy flow with
    `reverse_of` (in place, once: an exclude already listed is not repeated)."""
    for flow in flows.values():
        forward, policy = flow.settings.get(REVERSE_OF), flow.settings["replication_policy"]
        if not isinstance(forward, str) or policy.get("type", "default") != "default":
            continue
        exclude = loop_exclude(forward, policy.get("separator", "."))
        if exclude not in flow.settings["topics_exclude"]:
            flow.settings["topics_exclude"] = [*flow.settings["topics_exclude"], exclude]


def reverse_of_problems(
    flows: Mapping[str, _Flow],
    edges: Sequence[tuple[str, Edge, Mapping[str, Any], str]],
    overrides: Mapping[str, Mapping[str, Any]],
) -> list[Problem]:
    """Flows with `reverse_of` that cannot translate back: it must name the flow's target, and the
    flow must use the default policy. Each problem is at the key that set it (`topologies[i].reverse_flow`,
    `topologies[i].reverse_of` or `flows.<id>.reverse_of`)."""
    problems = []
    for fid, flow in flows.items():
        forward = flow.settings.get(REVERSE_OF)
        if forward is None:
            continue
        path = _path_of(fid, edges, overrides)
        if forward != flow.target:
            problems.append(
                Problem(
                    path,
                    f"(flow {fid}) reverse_of must name the flow's target {flow.target!r} "
                    f"(the forward flow's source), got {forward!r}",
                )
            )
        identity = flow.settings["replication_policy"].get("type") == "identity"
        if identity and flow.settings.get("provenance_headers") is not True:
            problems.append(Problem(path, _identity_message(fid, flow.target)))
    return problems


def _identity_message(fid: str, primary: str) -> str:
    standby = fid.split("->")[0]
    return (
        f"(flow {fid}) the reverse flow needs the default replication policy: with identity, {primary}'s topics "
        f"keep their names on {standby}, so it would mirror them back into {primary} (a loop) and could not tell "
        f"them from {standby}'s own; use the default policy (remote topics named {primary}.<topic>), set "
        f"provenance_headers: true (records carry their origin cluster; docs/active-active.md) or remove {REVERSE_FLOW}"
    )


def _path_of(
    fid: str, edges: Sequence[tuple[str, Edge, Mapping[str, Any], str]], overrides: Mapping[str, Mapping[str, Any]]
) -> str:
    if REVERSE_OF in overrides.get(fid, {}):
        return f"flows.{fid}.{REVERSE_OF}"
    for _, edge, _, path in edges:
        if flow_id(*edge) == fid:
            return path if path.endswith(f".{REVERSE_FLOW}") else f"{path}.{REVERSE_OF}"
    return f"flows.{fid}.{REVERSE_OF}"
