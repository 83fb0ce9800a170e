"""Renderings of a plan: a readable table, JSON (the contract), mermaid and Graphviz dot.

Pure functions of a `Plan` and the cluster -> datacenter map; secret values never appear
because a plan only holds secret references (and the table shows none of them).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping

from kmirror.estate.planner import Plan, PlannedFlow


def render_json(plan: Plan) -> str:
    return json.dumps(plan.to_dict(), indent=2) + "\n"


def _policy(flow: PlannedFlow) -> str:
    policy = flow.replication_policy
    return "identity" if policy["type"] == "identity" else f"default({policy['separator']})"


def _topics(flow: PlannedFlow) -> str:
    text = ", ".join(flow.topics)
    return text + (f" minus {', '.join(flow.topics_exclude)}" if flow.topics_exclude else "")


def _flow_name(flow: PlannedFlow) -> str:
    """The flow id, and for a reverse flow (`reverse_flow: true`) the flow it fails back."""
    forward = flow.options.get("reverse_of")
    return f"{flow.id} (reverse of {forward}->{flow.source})" if forward else flow.id


def render_text(plan: Plan) -> str:
    """A table per datacenter (rich), as wide as it needs to be, no colours."""
    from rich.console import Console
    from rich.table import Table

    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None, force_terminal=False)
    for datacenter, ids in plan.datacenters.items():
        if not ids:
            console.print(f"datacenter {datacenter}: no flows run here\n")
            continue
        table = Table(title=f"datacenter {datacenter}: {len(ids)} flow(s)", title_justify="left")
        for column in ("flow", "topology", "topics", "policy", "security"):
            table.add_column(column)
        for flow in (plan.flow(i) for i in ids):
            secured = [
                side for side, sec in (("source", flow.source_security), ("target", flow.target_security)) if sec
            ]
            security = ", ".join(f"{s}: {getattr(flow, s + '_security')['protocol']}" for s in secured) or "-"
            table.add_row(_flow_name(flow), flow.topology, _topics(flow), _policy(flow), security)
        console.print(table)
    console.print(f"{len(plan.flows)} flow(s) in {len(plan.datacenters)} datacenter(s)")
    return out.getvalue()


def node_id(alias: str) -> str:
    """A mermaid/dot-safe node id for a cluster alias."""
    return "c_" + re.sub(r"[^A-Za-z0-9_]", "_", alias)


def _grouped(plan: Plan, cluster_datacenters: Mapping[str, str]) -> dict[str, list[str]]:
    aliases = sorted({a for f in plan.flows for a in (f.source, f.target)})
    groups: dict[str, list[str]] = {}
    for alias in aliases:
        groups.setdefault(cluster_datacenters.get(alias, "?"), []).append(alias)
    return dict(sorted(groups.items()))


def _label(flow: PlannedFlow) -> str:
    topics = ", ".join(flow.topics)
    text = f"{flow.topology}: {topics}" + (" (identity)" if flow.replication_policy["type"] == "identity" else "")
    text += " (reverse)" if flow.options.get("reverse_of") else ""
    return text.replace('"', "'")


def render_mermaid(plan: Plan, cluster_datacenters: Mapping[str, str]) -> str:
    lines = ["flowchart LR"]
    for datacenter, aliases in _grouped(plan, cluster_datacenters).items():
        lines.append(f'  subgraph dc_{node_id(datacenter)[2:]}["datacenter {datacenter}"]')
        lines += [f'    {node_id(a)}["{a}"]' for a in aliases]
        lines.append("  end")
    lines += [f'  {node_id(f.source)} -->|"{_label(f)}"| {node_id(f.target)}' for f in plan.flows]
    return "\n".join(lines) + "\n"


def render_dot(plan: Plan, cluster_datacenters: Mapping[str, str]) -> str:
    lines = ["digraph kafka_mirror {", "  rankdir=LR;", "  node [shape=box];"]
    for datacenter, aliases in _grouped(plan, cluster_datacenters).items():
        lines.append(f"  subgraph cluster_{node_id(datacenter)[2:]} {{")
        lines.append(f'    label="datacenter {datacenter}";')
        lines += [f'    {node_id(a)} [label="{a}"];' for a in aliases]
        lines.append("  }")
    lines += [f'  {node_id(f.source)} -> {node_id(f.target)} [label="{_label(f)}"];' for f in plan.flows]
    lines.append("}")
    return "\n".join(lines) + "\n"
