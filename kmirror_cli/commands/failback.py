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
from kmirror.flow.spec import load_flow_spec


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "failback", help="Move a stopped consumer group from the target back home to the source."
    )
    parser.add_argument("--flow", required=True, help="the flow spec JSON file the group failed over along")
    parser.add_argument("--group", required=True, help="consumer group id (same id on both clusters)")
    parser.add_argument("--dry-run", action="store_true", help="print what would be written, write nothing")
    parser.add_argument(
        "--allow-partial",
        action="store_true",
        help="move the group even when some partitions have no translated offset; those start at the "
        "source's earliest offset (consumers re-read, never skip)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kmirror_cli.commands.failover import earliest_offsets
    from kmirror_engine.clients.factory import admin_client
    from kmirror_engine.failover.failback import plan_failback
    from kmirror_engine.failover.group_sync import describe_group, is_active, sync_group

    spec = load_flow_spec(args.flow)
    group, home, away = args.group, spec.source.alias, spec.target.alias
    state = describe_group(admin_client(spec.target), group, away)
    if is_active(state):
        raise KmirrorError(
            f"group {group!r} is {state.state} on {away} with active members "
            f"({', '.join(state.members) or 'none listed'}); stop its consumers before failing back"
        )
    moves = plan_failback(spec, group)
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
    earliest = earliest_offsets(source_admin, [(m.source_topic, m.partition) for m in missing], home)
    for m in missing:
        planned[(m.source_topic, m.partition)] = earliest[(m.source_topic, m.partition)]
        print(f"partial: {m.remote_topic}[{m.partition}]@{m.downstream_offset} has no translated offset; "
              f"{m.source_topic}[{m.partition}] starts at {home}'s earliest offset "
              f"{planned[(m.source_topic, m.partition)]} (re-read)")  # fmt: skip
    if args.dry_run:
        active = " (group is ACTIVE there: a real run would refuse)" if is_active(
            describe_group(source_admin, group, home)) else ""  # fmt: skip
        print(f"dry run: would move group {group!r} home to {home}{active}:")
        for m in moves:
            print(f"  {m.remote_topic}[{m.partition}]@{m.downstream_offset} -> "
                  f"{m.source_topic}[{m.partition}] {planned[(m.source_topic, m.partition)]}")  # fmt: skip
        return 0
    result = sync_group(source_admin, group, planned, home)
    print(f"moved group {group!r} home to {home}: {len(result.written)} partition(s) written, "
          f"{len(result.kept)} kept")  # fmt: skip
    for (topic, partition), offset in sorted(result.written.items()):
        print(f"  wrote {topic}[{partition}] = {offset}")
    for (topic, partition), (current, translated) in sorted(result.kept.items()):
        print(f"  kept  {topic}[{partition}] = {current} (translated {translated} would move it backwards)")
    return 0
