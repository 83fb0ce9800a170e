"""`kmirror failback --flow FLOW.json --group G [--dry-run] [--allow-partial]`: after a failover
along FLOW (A->B), move a stopped consumer group home: its committed offsets on B's remote
topics (`A.orders`) are translated back through the inverse of the flow's offset syncs and
written to the same group on A (`orders`).

Same safety rules as `kmirror failover`, mirrored: refuses (exit 1) when the group has active
members on B (it is still consuming there) or on A, when nothing translates, and when some
partition has no translated offset (the group read no mirrored record of it) unless
`--allow-partial`, which starts those at A's earliest offset (re-read, never skip). Offsets on A
only move forward. `--dry-run` prints the plan and writes nothing.
"""

from __future__ import annotations

import argparse
from typing import Any

from kmirror.errors import KmirrorError
from kmirror_cli.flow_args import load_flow


def register(subparsers: Any) -> None:
    from kmirror_cli.commands.failover import add_group_move_arguments

    parser = subparsers.add_parser(
        "failback", help="Move a stopped consumer group from the target back home to the source."
    )
    add_group_move_arguments(
        parser, flow_help="the flow spec JSON file the group failed over along", partial_start="source's"
    )
    parser.set_defaults(func=dispatch)


def dispatch(args: argparse.Namespace) -> int:
    """One group (`--group G`): `run`. Patterns, several groups, `--all-groups` or `--format json`:
    the flow's groups on the target, each on its own, one report (kmirror_cli.group_batch)."""
    from kmirror_cli import group_batch as batch
    from kmirror_engine.clients import admin_client
    from kmirror_engine.failover import list_groups

    one = batch.single_group(args)
    if one is not None:
        return run(argparse.Namespace(**{**vars(args), "group": one}))
    spec = load_flow(args)
    names = batch.flow_groups(spec, list_groups(admin_client(spec.target), spec.target.alias))
    groups = batch.chosen_groups(args.group or [], args.all_groups, names, spec.target.alias)
    known, _ = batch.checkpoint_summary(spec, groups)
    return batch.report("failback", spec, args.dry_run, batch.run_each(run, args, groups, known), args.format)


def run(args: argparse.Namespace) -> int:
    from kmirror_cli.commands.failover import move_group, refuse_active_group, start_at_earliest
    from kmirror_engine.clients import admin_client
    from kmirror_engine.failover import plan_failback

    spec = load_flow(args)
    group, home, away = args.group, spec.source.alias, spec.target.alias
    refuse_active_group(admin_client(spec.target), group, away, "failing back")
    moves = plan_failback(spec.route, group)
    if not moves:
        raise KmirrorError(
            f"nothing to fail back: group {group!r} has no committed offset on {away} on topics flow {spec.id} "
            "mirrors; check the group id and the flow"
        )
    missing = [m for m in moves if m.upstream_offset is None]
    listed = ", ".join(f"{m.remote_topic}[{m.partition}]@{m.downstream_offset}" for m in missing)
    if missing and not args.allow_partial:
        raise KmirrorError(
            f"group {group!r}: {len(missing)} of {len(moves)} partition(s) have no offset on {home} ({listed}: the "
            f"group read no mirrored record of them on {away}); pass --allow-partial to start them at {home}'s "
            "earliest offset (re-read, not skip)"
        )
    source_admin = admin_client(spec.source)
    planned = {(m.source_topic, m.partition): m.upstream_offset for m in moves if m.upstream_offset is not None}
    labelled = [
        (f"{m.remote_topic}[{m.partition}]@{m.downstream_offset}", (m.source_topic, m.partition)) for m in missing
    ]
    start_at_earliest(source_admin, home, labelled, f"{home}'s", planned)
    lines = [
        f"{m.remote_topic}[{m.partition}]@{m.downstream_offset} -> {m.source_topic}[{m.partition}] "
        f"{planned[(m.source_topic, m.partition)]}"
        for m in moves
    ]
    return move_group(
        source_admin,
        group,
        home,
        planned,
        to=f"home to {home}",
        dry_run=args.dry_run,
        active_note="group is ACTIVE there: a real run would refuse",
        plan_lines=lines,
    )
