"""`kmirror translate --flow FLOW.json --group G [--format json|text] [--from-checkpoints]`: where a
source consumer group would resume on the target, per partition, from the flow's persisted offset syncs.
Over an estate a real MirrorMaker 2 mirrored (partitions kafka-mirror never mirrored, groups before
its first sync), MM2's own offset syncs on the source translate them, by MM2's rules: the answer
is the checkpoint MM2 emits for the group's current offsets, i.e. what
`RemoteClusterUtils.translateOffsets` returns once MM2 checkpointed them (a user replacing MM2
gets MM2's answer, live from the source).

When the source does not answer within a few seconds (or with `--from-checkpoints`, which skips
the wait) the group's newest checkpoints on the target are used instead (one line on stderr says
so) and each row also carries `checkpoint_age_ms` and `records_at_risk` (null: unknown).

JSON (stdout): `[{"topic": remote_topic, "partition": p, "upstream_offset": u, "downstream_offset": d}]`,
sorted by topic and partition. Partitions that cannot be translated (the group is before every
mirrored record; from checkpoints: a partition of a topic the group has checkpoints on that has
none itself) are left out and named on stderr, one `untranslatable:` line each. Exit 1 when the group has no committed
offset on any mirrored topic.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kmirror.errors import KmirrorError
from kmirror_cli.flow_args import add_flow_arguments, load_flow


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("translate", help="Translate a source consumer group's offsets to the target.")
    add_flow_arguments(parser)
    parser.add_argument("--group", required=True, help="consumer group id on the source cluster")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument(
        "--from-checkpoints",
        action="store_true",
        help="read only the target's checkpoints (do not try the source first)",
    )
    parser.set_defaults(func=run)


def group_position(
    spec: Any, group: str, from_checkpoints: bool, probed: str | bool | None = False
) -> tuple[list[Any], list[Any] | None]:
    """(translations, checkpointed positions or None): live from the source when it answers and
    `from_checkpoints` is off, else from the target's checkpoints (saying why on stderr).
    `probed`: a probe's verdict the caller already has (None: reachable; False: not probed)."""
    from kmirror_engine.failover import SOURCE_PROBE_S, group_from_checkpoints, source_reachable, translate_group

    if not from_checkpoints:
        why = source_reachable(spec.source) if probed is False else probed
        if why is None:
            return translate_group(spec.route, group), None
        print(
            f"source {spec.source.alias} unreachable after {SOURCE_PROBE_S:g} s ({why}); "
            f"using the checkpoints on {spec.target.alias}",
            file=sys.stderr,
        )
    positions = group_from_checkpoints(spec.route, group)
    return [p.translation for p in positions], positions


def name_unlisted(spec: Any, group: str, positions: list[Any]) -> None:
    """One stderr line per partition of the group's checkpointed topics that has no checkpoint."""
    from confluent_kafka import KafkaException

    from kmirror_engine.failover import target_partition_counts, unlisted_partitions

    topics = sorted({p.translation.target_topic for p in positions})
    try:
        counts = target_partition_counts(spec.target, topics)
    except KafkaException as exc:
        print(
            f"cannot list the partitions of {', '.join(topics)} on {spec.target.alias} ({exc}); partitions "
            "without a checkpoint are not named",
            file=sys.stderr,
        )
        return
    for topic, partition in unlisted_partitions(positions, counts):
        print(
            f"untranslatable: {topic}[{partition}] has no checkpoint of group {group} on {spec.target.alias} "
            "(the group never committed there, or its checkpoint could not be read); it is left out",
            file=sys.stderr,
        )


def run(args: argparse.Namespace) -> int:
    spec = load_flow(args)
    translations, positions = group_position(spec, args.group, args.from_checkpoints)
    if not translations:
        if positions is None:
            raise KmirrorError(
                f"group {args.group!r} has no committed offsets on topics flow {spec.id} mirrors; "
                f"check the group id on cluster {spec.source.alias!r} and the flow's topics"
            )
        raise KmirrorError(
            f"group {args.group!r} has no checkpoint on {spec.target.alias} for topics flow {spec.id} mirrors; "
            "check the group id, the flow's topics and its `groups` selection"
        )
    if positions is not None:
        name_unlisted(spec, args.group, positions)
    extra = {(p.translation.target_topic, p.translation.partition): p for p in positions or []}
    done = [t for t in translations if t.downstream_offset is not None]
    for t in translations:
        if t.downstream_offset is None:
            print(
                f"untranslatable: {t.source_topic}[{t.partition}]@{t.upstream_offset} is before every "
                "mirrored record of that partition",
                file=sys.stderr,
            )
    if args.format == "json":
        rows = [
            {
                "topic": t.target_topic,
                "partition": t.partition,
                "upstream_offset": t.upstream_offset,
                "downstream_offset": t.downstream_offset,
            }
            for t in done
        ]
        for row in rows if positions is not None else []:
            p = extra[(row["topic"], row["partition"])]
            row.update(checkpoint_age_ms=p.age_ms, records_at_risk=p.records_at_risk)
        print(json.dumps(rows))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{args.group}: {spec.source.alias} -> {spec.target.alias}")
    columns = ["Topic", "Partition", "Upstream offset", "Downstream offset"]
    columns += ["Checkpoint age", "Records at risk"] if positions is not None else []
    for column in columns:
        table.add_column(column, justify="left" if column == "Topic" else "right")
    for t in done:
        cells = [t.target_topic, str(t.partition), str(t.upstream_offset), str(t.downstream_offset)]
        if positions is not None:
            p = extra[(t.target_topic, t.partition)]
            cells += [
                "unknown" if p.age_ms is None else f"{p.age_ms / 1000:.1f} s",
                "unknown" if p.records_at_risk is None else str(p.records_at_risk),
            ]
        table.add_row(*cells)
    Console().print(table)
    return 0
