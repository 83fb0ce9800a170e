"""`kmirror failover --flow FLOW.json --group G [--dry-run] [--allow-partial]`: move a stopped
consumer group to the target cluster at its translated offsets and say what was done.

Refuses (exit 1) when the group has active members on the source (it is still consuming
there) or on the target (a live group's offsets are never changed), when no partition can be
translated, and when some partition of the group has no translated offset (the group stands
before every mirrored record of it): moving the group would leave that partition to the
consumer's `auto.offset.reset`, which with `latest` skips records. `--allow-partial` moves
the group anyway and starts such partitions at the target's earliest offset, so consumers
re-read rather than skip. Offsets only move forward: a target partition already committed at
or past the planned offset is kept and reported. `--dry-run` prints the plan, writes nothing.

When the source does not answer within a few seconds (or with `--from-checkpoints`) the group's
newest checkpoints on the target give the offsets, each partition reported with the
checkpoint's age and the records at risk; only active members on the target block the move then.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from kmirror.errors import KmirrorError
from kmirror_cli.flow_args import add_flow_arguments, load_flow

ADMIN_TIMEOUT_S = 30.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "failover", help="Move a stopped consumer group to the target at translated offsets."
    )
    add_group_move_arguments(parser, flow_help="flow spec JSON file", partial_start="target's")
    parser.add_argument(
        "--from-checkpoints",
        action="store_true",
        help="the source is gone: use the target's checkpoints without trying the source",
    )
    parser.set_defaults(func=dispatch)


def dispatch(args: argparse.Namespace) -> int:
    """One group (`--group G`): `run`, its classic output. Patterns, several groups, `--all-groups`
    or `--format json`: each group on its own, one report (kmirror_cli.group_batch)."""
    from kmirror_cli import group_batch as batch
    from kmirror_engine.clients import admin_client
    from kmirror_engine.failover import list_groups, source_reachable

    one = batch.single_group(args)
    if one is not None:
        return run(argparse.Namespace(**{**vars(args), "group": one}))
    spec = load_flow(args)
    why = None if args.from_checkpoints else source_reachable(spec.source)
    gone = args.from_checkpoints or why is not None
    if gone and not args.from_checkpoints:
        print(
            f"source {spec.source.alias} unreachable ({why}); every group from the checkpoints on {spec.target.alias}",
            file=sys.stderr,
        )
    names = batch.checkpoint_summary(spec, [])[1] if gone else list_groups(admin_client(spec.source), spec.source.alias)
    where = f"{spec.target.alias}'s checkpoints" if gone else spec.source.alias
    groups = batch.chosen_groups(args.group or [], args.all_groups, batch.flow_groups(spec, names), where)
    known, _ = batch.checkpoint_summary(spec, groups)
    results = batch.run_each(run, args, groups, known, from_checkpoints=gone)
    return batch.report("failover", spec, args.dry_run, results, args.format)


# ---- shared with `kmirror failback` (the same move, the other way) ----


def add_group_move_arguments(parser: Any, *, flow_help: str, partial_start: str) -> None:
    """`--flow`, `--group`, `--dry-run` and `--allow-partial` (whose partitions start at the
    `partial_start` earliest offset, e.g. "target's")."""
    add_flow_arguments(parser, flow_help)
    from kmirror_cli.group_batch import add_group_arguments

    add_group_arguments(parser)
    parser.add_argument("--dry-run", action="store_true", help="print what would be written, write nothing")
    parser.add_argument(
        "--allow-partial",
        action="store_true",
        help="move the group even when some partitions have no translated offset; those start at the "
        f"{partial_start} earliest offset (consumers re-read, never skip)",
    )


def refuse_active_group(admin: Any, group: str, cluster: str, doing: str) -> None:
    """Raise KmirrorError when `group` has active members on `cluster`: its consumers still read
    there, and `doing` (e.g. "failing over") would move offsets under them."""
    from kmirror_engine.failover import describe_group, is_active

    state = describe_group(admin, group, cluster)
    if is_active(state):
        raise KmirrorError(
            f"group {group!r} is {state.state} on {cluster} with active members "
            f"({', '.join(state.members) or 'none listed'}); stop its consumers before {doing}"
        )


def start_at_earliest(
    admin: Any,
    cluster: str,
    missing: Sequence[tuple[str, tuple[str, int]]],
    where: str,
    planned: dict[tuple[str, int], int],
) -> None:
    """`--allow-partial`: plan each untranslated partition (`label`, its (topic, partition) on
    `cluster`) at `cluster`'s earliest offset, so its consumers re-read rather than skip; says so
    per partition (`where`: whose offset, e.g. "the target's")."""
    earliest = earliest_offsets(admin, [key for _, key in missing], cluster)
    for label, (topic, partition) in missing:
        planned[(topic, partition)] = earliest[(topic, partition)]
        print(
            f"partial: {label} has no translated offset; {topic}[{partition}] starts at {where} earliest "
            f"offset {planned[(topic, partition)]} (re-read)"
        )


def move_group(
    admin: Any,
    group: str,
    cluster: str,
    planned: dict[tuple[str, int], int],
    *,
    to: str,
    dry_run: bool,
    active_note: str,
    plan_lines: Sequence[str],
) -> int:
    """Write `planned` into `group` on `cluster` (forward only, refused while the group is active
    there: `sync_group`) and report each partition; `--dry-run` prints `plan_lines` instead,
    with `active_note` when a real run would be refused. `to`: "to east", "home to west"."""
    from kmirror_engine.failover import describe_group, is_active, sync_group

    if dry_run:
        active = f" ({active_note})" if is_active(describe_group(admin, group, cluster)) else ""
        print(f"dry run: would move group {group!r} {to}{active}:")
        for line in plan_lines:
            print(f"  {line}")
        return 0
    result = sync_group(admin, group, planned, cluster)
    print(f"moved group {group!r} {to}: {len(result.written)} partition(s) written, {len(result.kept)} kept")
    for (topic, partition), offset in sorted(result.written.items()):
        print(f"  wrote {topic}[{partition}] = {offset}")
    for (topic, partition), (current, translated) in sorted(result.kept.items()):
        print(f"  kept  {topic}[{partition}] = {current} (translated {translated} would move it backwards)")
    return 0


def earliest_offsets(admin: Any, partitions: Sequence[tuple[str, int]], cluster: str) -> dict[tuple[str, int], int]:
    """(topic, partition) -> earliest offset (log start) on `cluster`; raises KmirrorError naming
    the partition when the broker cannot answer for it."""
    from concurrent.futures import TimeoutError as FutureTimeout  # not the builtin before Python 3.11

    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    if not partitions:
        return {}
    futures = admin.list_offsets(
        {TopicPartition(t, p): OffsetSpec.earliest() for t, p in partitions}, request_timeout=ADMIN_TIMEOUT_S
    )
    out = {}
    for tp, future in futures.items():
        try:
            info = future.result(timeout=ADMIN_TIMEOUT_S)
        except (KafkaException, FutureTimeout) as exc:
            raise KmirrorError(
                f"cannot read the earliest offset of {tp.topic}[{tp.partition}] on {cluster}: {exc}; "
                "check that the mirror created the target topic, then retry"
            ) from None
        out[(tp.topic, tp.partition)] = int(info.offset)
    return out


def _partition_list(translations: Sequence[Any]) -> str:
    return ", ".join(f"{t.source_topic}[{t.partition}]@{t.upstream_offset}" for t in translations)


def run(args: argparse.Namespace) -> int:
    from kmirror_cli.commands.translate import group_position, name_unlisted
    from kmirror_engine.clients import admin_client
    from kmirror_engine.failover import describe_position, source_reachable

    spec = load_flow(args)
    group, target = args.group, spec.target.alias
    why = None if args.from_checkpoints else source_reachable(spec.source)
    if not args.from_checkpoints and why is None:
        refuse_active_group(admin_client(spec.source), group, spec.source.alias, "failing over")
    translations, positions = group_position(spec, group, args.from_checkpoints, probed=why)
    for p in positions or []:
        print(f"checkpoint: {describe_position(p)}")
    if positions:
        name_unlisted(spec, group, positions)
    if not translations:
        raise KmirrorError(f"nothing to fail over: no offset of group {group!r} translates onto {target}")
    planned = {
        (t.target_topic, t.partition): t.downstream_offset for t in translations if t.downstream_offset is not None
    }
    missing = [t for t in translations if t.downstream_offset is None]
    if missing and not args.allow_partial:
        raise KmirrorError(
            f"group {group!r}: {len(missing)} of {len(translations)} partition(s) have no translated offset on "
            f"{target} ({_partition_list(missing)}: the group is before every mirrored record of them), "
            "so its consumers would start there at auto.offset.reset and could skip records; let the mirror copy "
            "them first, or pass --allow-partial to start them at the target's earliest offset (re-read, not skip)"
        )
    target_admin = admin_client(spec.target)
    labelled = [
        (f"{t.source_topic}[{t.partition}]@{t.upstream_offset}", (t.target_topic, t.partition)) for t in missing
    ]
    start_at_earliest(target_admin, target, labelled, "the target's", planned)
    lines = [f"{topic}[{partition}] -> {offset}" for (topic, partition), offset in sorted(planned.items())]
    return move_group(
        target_admin,
        group,
        target,
        planned,
        to=f"to {target}",
        dry_run=args.dry_run,
        active_note="target group is ACTIVE: a real run would refuse",
        plan_lines=lines,
    )
