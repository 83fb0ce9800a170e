"""`kmirror translate --flow FLOW.json --group G [--format json|text]`: where a source consumer
group would resume on the target, per partition, from the flow's persisted offset syncs.

JSON (stdout): `[{"topic": remote_topic, "partition": p, "upstream_offset": u, "downstream_offset": d}]`,
sorted by topic and partition. Partitions that cannot be translated (the group is before every
mirrored record) are left out and named on stderr. Exit 1 when the group has no committed
offset on any mirrored topic.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kmirror.errors import KmirrorError
from kmirror.flowspec import load_flow_spec


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("translate", help="Translate a source consumer group's offsets to the target.")
    parser.add_argument("--flow", required=True, help="flow spec JSON file")
    parser.add_argument("--group", required=True, help="consumer group id on the source cluster")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kmirror_engine.failover.checkpoints import translate_group

    spec = load_flow_spec(args.flow)
    translations = translate_group(spec, args.group)
    if not translations:
        raise KmirrorError(
            f"group {args.group!r} has no committed offsets on topics flow {spec.id} mirrors; "
            f"check the group id on cluster {spec.source.alias!r} and the flow's topics"
        )
    done = [t for t in translations if t.downstream_offset is not None]
    for t in translations:
        if t.downstream_offset is None:
            print(f"untranslatable: {t.source_topic}[{t.partition}]@{t.upstream_offset} is before every "
                  "mirrored record of that partition", file=sys.stderr)  # fmt: skip
    if args.format == "json":
        rows = [{"topic": t.target_topic, "partition": t.partition, "upstream_offset": t.upstream_offset,
                 "downstream_offset": t.downstream_offset} for t in done]  # fmt: skip
        print(json.dumps(rows))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{args.group}: {spec.source.alias} -> {spec.target.alias}")
    for column in ("Topic", "Partition", "Upstream offset", "Downstream offset"):
        table.add_column(column, justify="left" if column == "Topic" else "right")
    for t in done:
        table.add_row(t.target_topic, str(t.partition), str(t.upstream_offset), str(t.downstream_offset))
    Console().print(table)
    return 0
