"""Many groups at once for `kmirror failover|failback` (issue 46).

`--group` may repeat and take shell-style patterns (`app-*`, `orders-?`); `--all-groups` takes
every group the flow selects (its `groups` / `groups_exclude`, never the mirror's own consumer
group). The candidates are the groups on the cluster the groups leave: the source for a
failover (the target's checkpoints when the source does not answer, or with
`--from-checkpoints`), the target for a failback. A name without pattern characters is taken as
given. Each group is moved or refused on its own, by the single-group command's rules (one
refusal never stops the others), and one report says what happened to each:

JSON (`--format json`, stdout):
`{"flow": ID, "command": "failover"|"failback", "dry_run": bool, "moved": N, "refused": N,
  "groups": [{"group": G, "result": "moved"|"planned"|"refused", "checkpoint_age_ms": int|null,
  "records_at_risk": int|null, "detail": TEXT}]}` (groups sorted; age and risk from the target's
newest checkpoints of the group: the oldest partition's age, the sum of the partitions' risks,
null when unknown). Text: the same as a table.

Exit codes: 0 every group moved (or planned, `--dry-run`), 1 at least one refused, 2 bad input
(both or neither of `--group`/`--all-groups`, or nothing matches).
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import io
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from kmirror.errors import KmirrorError, Problem, ValidationError

PATTERN_CHARS = "*?["


@dataclass(frozen=True)
class GroupResult:
    group: str
    result: str  # moved | planned | refused
    checkpoint_age_ms: int | None
    records_at_risk: int | None
    detail: str


def add_group_arguments(parser: Any) -> None:
    parser.add_argument(
        "--group",
        action="append",
        metavar="GROUP",
        help="consumer group id (same id on both clusters); repeat it, or give a pattern "
        "('app-*') to move many groups, each on its own",
    )
    parser.add_argument("--all-groups", action="store_true", help="every group the flow selects")
    parser.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="json: one report of every group (always per group, even for one)",
    )


def single_group(args: argparse.Namespace) -> str | None:
    """The group when the call is the classic one-group form (`--group G`, text), else None.
    Raises ValidationError for both or neither of --group / --all-groups."""
    given = args.group or []
    if args.all_groups and given:
        raise ValidationError(
            [
                Problem(
                    "--all-groups",
                    f"cannot be combined with --group {given[0]!r}; give the groups or --all-groups, not both",
                )
            ]
        )
    if not args.all_groups and not given:
        raise ValidationError([Problem("--group", "required: a group id or pattern ('app-*'), or pass --all-groups")])
    if len(given) == 1 and not any(c in given[0] for c in PATTERN_CHARS) and args.format == "text":
        return str(given[0])
    return None


def chosen_groups(patterns: Sequence[str], all_groups: bool, candidates: Sequence[str], cluster: str) -> list[str]:
    """The groups the arguments name (pure): exact names as given, patterns matched against
    `candidates` (already the flow's groups on `cluster`). Raises ValidationError when a pattern
    matches nothing."""
    chosen = set(candidates) if all_groups else set()
    for pattern in patterns:
        if not any(c in pattern for c in PATTERN_CHARS):
            chosen.add(pattern)
            continue
        matched = [g for g in candidates if fnmatch.fnmatchcase(g, pattern)]
        if not matched:
            found = ", ".join(candidates[:10]) or "none"
            why = (
                f"pattern {pattern!r} matches no group of the flow on {cluster} (groups there: {found}); "
                "check the pattern or the flow's `groups`"
            )
            raise ValidationError([Problem("--group", why)])
        chosen.update(matched)
    if not chosen:
        raise ValidationError(
            [
                Problem(
                    "--all-groups",
                    f"the flow selects no consumer group on {cluster}; check the flow's `groups` selection",
                )
            ]
        )
    return sorted(chosen)


def flow_groups(spec: Any, names: Sequence[str]) -> list[str]:
    """`names` the flow's group selection takes, without the mirror's own consumer group."""
    return sorted(g for g in set(names) if spec.group_selection.matches(g) and g != spec.consumer_group)


def checkpoint_summary(spec: Any, groups: Sequence[str]) -> tuple[dict[str, tuple[int | None, int | None]], list[str]]:
    """group -> (oldest checkpoint age ms, records at risk summed) from one read of the target's
    checkpoints, and every group those checkpoints name. Unknown (None) where nothing is known."""
    import time

    from kmirror.flow.replication_policy import checkpoints_topic
    from kmirror_engine.failover import (
        SyncLog,
        SyncStore,
        latest_checkpoints,
        positions_from_checkpoints,
        read_checkpoints_with_time,
    )

    try:
        store = SyncStore()
        sync_log = SyncLog(spec.target, spec.source.alias)
        sync_log.load(store)
        stamped = read_checkpoints_with_time(spec.target, checkpoints_topic(spec.source.alias))
    except Exception:  # no checkpoints topic yet, or the target does not answer: unknown, per group
        return {g: (None, None) for g in groups}, []
    now = int(time.time() * 1000)
    out: dict[str, tuple[int | None, int | None]] = {}
    for group in groups:
        positions = positions_from_checkpoints(
            spec.route, latest_checkpoints(stamped, group), store, now, sync_log.syncs.source_ends
        )
        ages = [p.age_ms for p in positions if p.age_ms is not None]
        risks = [p.records_at_risk for p in positions if p.records_at_risk is not None]
        complete = len(positions) > 0 and len(ages) == len(risks) == len(positions)
        out[group] = (max(ages), sum(risks)) if complete else (max(ages) if ages else None, None)
    return out, sorted({c.group for c, _ in stamped})


def run_each(
    run_one: Callable[[argparse.Namespace], int],
    args: argparse.Namespace,
    groups: Sequence[str],
    known: dict[str, tuple[int | None, int | None]],
    **overrides: Any,
) -> list[GroupResult]:
    """Run the single-group command for each group, its output and error captured as the detail."""
    results = []
    for group in groups:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                code = int(run_one(argparse.Namespace(**{**vars(args), **overrides, "group": group})) or 0)
            except KmirrorError as exc:
                print(f"error: {exc}")
                code = exc.exit_code
        result = "refused" if code != 0 else ("planned" if args.dry_run else "moved")
        age, risk = known.get(group, (None, None))
        results.append(GroupResult(group, result, age, risk, out.getvalue().strip()))
    return results


def report(command: str, spec: Any, dry_run: bool, results: Sequence[GroupResult], fmt: str) -> int:
    refused = sum(r.result == "refused" for r in results)
    if fmt == "json":
        print(
            json.dumps(
                {
                    "flow": spec.id,
                    "command": command,
                    "dry_run": dry_run,
                    "moved": len(results) - refused,
                    "refused": refused,
                    "groups": [asdict(r) for r in results],
                }
            )
        )
        return 1 if refused else 0
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    verb = "dry run" if dry_run else command
    table = Table(title=f"{verb} of {len(results)} group(s) along {spec.id}", show_lines=True)
    for column in ("Group", "Result", "Checkpoint age", "Records at risk", "Detail"):
        table.add_column(column, no_wrap=column != "Detail")
    for r in results:
        age = "unknown" if r.checkpoint_age_ms is None else f"{r.checkpoint_age_ms / 1000:.1f} s"
        risk = "unknown" if r.records_at_risk is None else str(r.records_at_risk)
        table.add_row(Text(r.group), r.result, age, risk, Text(r.detail))
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    print(f"{len(results) - refused} group(s) {'planned' if dry_run else 'moved'}, {refused} refused")
    return 1 if refused else 0
