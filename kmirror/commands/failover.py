"""`kmirror failover --flow FLOW.json --group G [--dry-run]`: move a stopped consumer group to
the target cluster at its translated offsets and say what was done.

Refuses (exit 1) when the group has active members on the source (it is still consuming
there) or on the target (a live group's offsets are never changed), and when no partition
can be translated. Offsets only move forward: a target partition already committed at or
past the translated offset is kept and reported. `--dry-run` prints the plan, writes nothing.
"""

from __future__ import annotations

import argparse
from typing import Any

from kmirror.errors import KmirrorError
from kmirror.flowspec import load_flow_spec


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "failover", help="Move a stopped consumer group to the target at translated offsets."
    )
    parser.add_argument("--flow", required=True, help="flow spec JSON file")
    parser.add_argument("--group", required=True, help="consumer group id (same id on both clusters)")
    parser.add_argument("--dry-run", action="store_true", help="print what would be written, write nothing")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from spark_app.checkpoints import translate_group
    from spark_app.clients import admin_client
    from spark_app.group_sync import describe_group, is_active, sync_group

    spec = load_flow_spec(args.flow)
    group = args.group
    source_state = describe_group(admin_client(spec.source), group, spec.source.alias)
    if is_active(source_state):
        raise KmirrorError(
            f"group {group!r} is {source_state.state} on {spec.source.alias} with active members "
            f"({', '.join(source_state.members) or 'none listed'}); stop its consumers before failing over"
        )
    translations = translate_group(spec, group)
    planned = {
        (t.target_topic, t.partition): t.downstream_offset for t in translations if t.downstream_offset is not None
    }
    for t in translations:
        if t.downstream_offset is None:
            print(f"skip {t.source_topic}[{t.partition}]@{t.upstream_offset}: before every mirrored record")
    if not planned:
        raise KmirrorError(f"nothing to fail over: no offset of group {group!r} translates onto {spec.target.alias}")
    target_admin = admin_client(spec.target)
    if args.dry_run:
        target_state = describe_group(target_admin, group, spec.target.alias)
        active = " (target group is ACTIVE: a real run would refuse)" if is_active(target_state) else ""
        print(f"dry run: would move group {group!r} to {spec.target.alias}{active}:")
        for (topic, partition), offset in sorted(planned.items()):
            print(f"  {topic}[{partition}] -> {offset}")
        return 0
    result = sync_group(target_admin, group, planned, spec.target.alias)
    print(f"moved group {group!r} to {spec.target.alias}: {len(result.written)} partition(s) written, "
          f"{len(result.kept)} kept")  # fmt: skip
    for (topic, partition), offset in sorted(result.written.items()):
        print(f"  wrote {topic}[{partition}] = {offset}")
    for (topic, partition), (current, translated) in sorted(result.kept.items()):
        print(f"  kept  {topic}[{partition}] = {current} (translated {translated} would move it backwards)")
    return 0
