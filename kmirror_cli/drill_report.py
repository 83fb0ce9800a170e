"""What `kmirror drill` reports (kmirror_cli/commands/drill.py): its steps, RPO and RTO, as a table
or JSON, and how a step's reads and a `translate` row are described."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Step:
    """One step of the drill: `passed` None means not applicable (never fails the drill)."""

    step: str
    seconds: float
    passed: bool | None
    detail: str


@dataclass
class DrillReport:
    dry: bool
    broker: str | None
    rpo_records: int | None
    rto_s: float | None
    steps: list[Step] = field(default_factory=list)
    plan_s: float | None = None  # dry drill: the three plans, end to end

    @property
    def passed(self) -> bool:
        return all(s.passed is not False for s in self.steps)


def resume_detail(cluster: str, got: dict[int, list[Any]], expected: dict[int, list[Any]]) -> str:
    """`p0: 10 v p0-10 ... as expected` per partition, or what was read instead."""
    lines = []
    for p, want in expected.items():
        seen = got.get(p, [])
        head = f"offset {seen[0][0]} {seen[0][1].decode(errors='replace')}" if seen else "nothing"
        verdict = "as expected"
        if seen != want:
            verdict = f"WRONG: expected offset {want[0][0]} {want[0][1].decode()} and {len(want)} in a row"
        lines.append(f"{cluster}[{p}]: first {head}, {len(seen)} record(s), {verdict}")
    return "\n".join(lines)


def describe_row(row: dict[str, Any]) -> str:
    """`orders[0]: 4 -> 7, checkpoint 6.2 s old, records at risk: 5` (a `translate` JSON row)."""
    age = "unknown age" if row["checkpoint_age_ms"] is None else f"{row['checkpoint_age_ms'] / 1000:.1f} s old"
    risk = "unknown" if row["records_at_risk"] is None else row["records_at_risk"]
    return (
        f"{row['topic']}[{row['partition']}]: {row['upstream_offset']} -> {row['downstream_offset']}, "
        f"checkpoint {age}, records at risk: {risk}"
    )


def print_report(report: DrillReport) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(width=None if sys.stdout.isatty() else 140)
    title = "kmirror dry drill: nothing was stopped" if report.dry else f"kmirror drill on local {report.broker}"
    table = Table(title=title, show_lines=True)
    for column in ("Step", "Time", "Result", "Detail"):
        table.add_column(column, justify="right" if column == "Time" else "left", no_wrap=column != "Detail")
    for s in report.steps:
        result = {True: "[green]ok[/]", False: "[red]FAILED[/]", None: "n/a"}[s.passed]
        table.add_row(Text(s.step), f"{s.seconds:.2f} s", result, Text(s.detail))
    console.print(table)
    rpo = "unknown" if report.rpo_records is None else str(report.rpo_records)
    if report.dry:
        line = (
            f"dry drill: RPO {rpo} record(s) at risk as the target knows it, plan {report.plan_s:.1f} s "
            "(translate, failover --dry-run, failback --dry-run); nothing was stopped"
        )
        console.print(line, markup=False)
    else:
        rto = "unknown" if report.rto_s is None else f"{report.rto_s:.1f}"
        console.print(f"drill: RPO {rpo} record(s) at risk, RTO {rto} s", markup=False)
    if not report.passed:
        console.print("[red]drill FAILED[/]: " + ", ".join(s.step for s in report.steps if s.passed is False))
