"""Rendering a `PlanDiff`: markdown (a PR comment), plain text and JSON.

Markdown starts with the hidden marker `<!-- kmirror-diff -->` (the CI workflow finds and
updates its one comment by it), then a summary line, a table per datacenter, warnings, and
a mermaid graph of the topology (union of both plans) where added flows are green, removed
flows red and dashed, changed or moved flows orange. Values are rendered YAML-flow-like
(`[orders.*, payments\\..*]`); secrets were already redacted by `kmirror.estate.diff`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from kmirror.estate.diff import DatacenterDiff, Edge, PlanDiff

MARKER = "<!-- kmirror-diff -->"
EDGE_STYLES = {
    "added": "stroke:#2da44e,stroke-width:3px",
    "removed": "stroke:#cf222e,stroke-width:2px,stroke-dasharray:5 5",
    "changed": "stroke:#fb8500,stroke-width:3px",
    "moved": "stroke:#fb8500,stroke-width:3px",
}
NODE_CLASSES = {
    "added": "fill:#dafbe1,stroke:#2da44e",
    "removed": "fill:#ffebe9,stroke:#cf222e,stroke-dasharray:5 5",
}


def format_value(value: Any) -> str:
    """YAML-flow-like: `(none)` when absent, strings unquoted (regexes stay readable),
    `[a, b]` for lists and `{key: value}` for mappings."""
    if value is None:
        return "(none)"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {format_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def summary(diff: PlanDiff) -> str:
    """One line: how many datacenters and flows change, and how many warnings there are."""
    if not diff.changed:
        return "no flow changes."
    dcs = diff.datacenters.values()
    counts = [
        f"{_plural(sum(len(d.added) for d in dcs), 'flow')} added",
        f"{sum(len(d.removed) for d in dcs)} removed",
        f"{sum(len(d.moved) for d in dcs)} moved",
        f"{sum(len(d.changed) for d in dcs)} changed",
    ]
    line = f"{_plural(len(diff.datacenters), 'datacenter')} affected: {', '.join(counts)}"
    if diff.warnings:
        line += f"; {_plural(len(diff.warnings), 'warning')}"
    return line + "."


def render_json(diff: PlanDiff) -> str:
    return json.dumps(diff.to_dict(), indent=2) + "\n"


# ---------------------------------------------------------------------------- text


def _text_datacenter(name: str, dc: DatacenterDiff) -> list[str]:
    lines = [f"{name}:"]
    lines += [f"  + {i}  added" for i in dc.added]
    lines += [f"  - {i}  removed" for i in dc.removed]
    lines += [f"  > {m.id}  moved {m.from_dc} -> {m.to_dc}" for m in dc.moved]
    for flow_id, changes in dc.changed.items():
        lines.append(f"  ~ {flow_id}  changed")
        lines += [f"      {c.field}: {format_value(c.old)} -> {format_value(c.new)}" for c in changes]
    for t in dc.topics:
        lines.append(f"  topics of {t.id}: start {', '.join(t.start) or '-'}; stop {', '.join(t.stop) or '-'}")
    return lines


def render_text(diff: PlanDiff) -> str:
    lines = [f"kmirror diff: {summary(diff)}"]
    for name, dc in diff.datacenters.items():
        lines += _text_datacenter(name, dc)
    lines += [f"warning: {w}" for w in diff.warnings]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- markdown


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(value: Any) -> str:
    return f"`{_cell(format_value(value))}`"


def _table(dc: DatacenterDiff) -> list[str]:
    rows = ["| flow | change | details |", "|---|---|---|"]
    rows += [f"| `{i}` | added | |" for i in dc.added]
    rows += [f"| `{i}` | removed | |" for i in dc.removed]
    rows += [f"| `{m.id}` | moved | from `{m.from_dc}` to `{m.to_dc}` |" for m in dc.moved]
    for flow_id, changes in dc.changed.items():
        details = "<br>".join(f"`{_cell(c.field)}`: {_code(c.old)} → {_code(c.new)}" for c in changes)
        rows.append(f"| `{flow_id}` | changed | {details} |")
    for t in dc.topics:
        start = ", ".join(f"`{x}`" for x in t.start) or "—"
        stop = ", ".join(f"`{x}`" for x in t.stop) or "—"
        rows.append(f"| `{t.id}` | topics | starts replicating: {start}<br>stops replicating: {stop} |")
    return rows


def _node_ids(aliases: list[str]) -> dict[str, str]:
    ids: dict[str, str] = {}
    for alias in aliases:
        base = re.sub(r"[^A-Za-z0-9]", "_", alias)
        node, n = base, 1
        while node in ids.values():
            n += 1
            node = f"{base}_{n}"
        ids[alias] = node
    return ids


def _node_status(alias: str, edges: list[Edge]) -> str | None:
    statuses = {e.status for e in edges if alias in (e.source, e.target)}
    return statuses.pop() if statuses in ({"added"}, {"removed"}) else None


def render_mermaid(diff: PlanDiff, cluster_datacenters: Mapping[str, str] | None = None) -> list[str]:
    """A `graph LR` of every flow of both plans; clusters grouped by datacenter when known."""
    dcs = dict(cluster_datacenters or {})
    aliases = sorted({a for e in diff.edges for a in (e.source, e.target)})
    ids = _node_ids(aliases)
    lines = ["graph LR"]
    for dc in sorted({dcs[a] for a in aliases if a in dcs}):
        lines.append(f'  subgraph dc_{re.sub(r"[^A-Za-z0-9]", "_", dc)} ["{dc}"]')
        lines += [f'    {ids[a]}["{a}"]' for a in aliases if dcs.get(a) == dc]
        lines.append("  end")
    lines += [f'  {ids[a]}["{a}"]' for a in aliases if a not in dcs]
    styles = []
    for index, edge in enumerate(diff.edges):
        arrow = "-.->" if edge.status == "removed" else "-->"
        label = "" if edge.status == "unchanged" else f"|{edge.status}|"
        lines.append(f"  {ids[edge.source]} {arrow}{label} {ids[edge.target]}")
        if edge.status in EDGE_STYLES:
            styles.append(f"  linkStyle {index} {EDGE_STYLES[edge.status]}")
    lines += styles
    lines += [f"  classDef {name} {style}" for name, style in NODE_CLASSES.items()]
    for alias in aliases:
        status = _node_status(alias, diff.edges)
        if status:
            lines.append(f"  class {ids[alias]} {status}")
    return lines


def render_markdown(diff: PlanDiff, cluster_datacenters: Mapping[str, str] | None = None) -> str:
    """The PR comment: marker, summary, per-datacenter tables, warnings, topology graph."""
    text = summary(diff)
    lines = [MARKER, "### kmirror diff", "", f"**{text[0].upper()}{text[1:]}**", ""]
    for name, dc in diff.datacenters.items():
        lines += [f"#### {name}", "", *_table(dc), ""]
    if diff.warnings:
        lines += ["#### Warnings", "", *[f"- :warning: {_cell(w)}" for w in diff.warnings], ""]
    if diff.edges:
        lines += ["#### Topology", "", "```mermaid", *render_mermaid(diff, cluster_datacenters), "```", ""]
    return "\n".join(lines)
