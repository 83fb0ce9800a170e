"""`kmirror lag --flow FLOW.json [--watch] [--format text|json]`: the offset checker of
MirrorMaker's documentation for the mirror's own source group (`consumer_group` of the flow).

Per partition: Group, Topic, Pid, Offset (committed by the mirror on the source), logSize
(the source log end offset as the broker reports it), Lag (logSize - Offset, never below 0),
Owner (member owning the partition; "none" for the mirror's assign()-based consumers), and
Delay: now - timestamp of the last mirrored record on the target (the mirror's end-to-end
delay; null when the target partition holds nothing yet).
JSON rows: {"group", "topic", "partition", "offset", "log_size", "lag", "owner", "target_topic", "delay_ms"}.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from kmirror.errors import KmirrorError
from kmirror.flow.views import FlowRoute
from kmirror_cli.flow_args import add_flow_arguments, load_flow

WATCH_INTERVAL_S = 2.0
TIMEOUT_S = 30.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("lag", help="Per-partition lag and end-to-end delay of a flow's mirror.")
    add_flow_arguments(parser)
    parser.add_argument("--watch", action="store_true", help=f"refresh every {WATCH_INTERVAL_S:g} s until Ctrl-C")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.set_defaults(func=run)


def lag_rows(route: FlowRoute, group: str) -> list[dict[str, Any]]:
    """One row per partition the mirror (its source group `group`) has committed on `route`'s
    source, sorted by topic and partition."""
    from confluent_kafka import TopicPartition

    from kmirror_engine.clients import admin_client, new_consumer
    from kmirror_engine.failover import committed_offsets, describe_group

    admin = admin_client(route.source)
    offsets = committed_offsets(admin, group, route.source.alias)
    owners = describe_group(admin, group, route.source.alias).owners
    source = new_consumer(route.source, role="lag-source-reader", group_id=group, **{"enable.auto.commit": False})
    target = new_consumer(
        route.target,
        role="lag-target-reader",
        group_id=f"{group}-lag",
        **{"enable.auto.commit": False, "enable.partition.eof": True},
    )
    rows = []
    try:
        for (topic, partition), (offset, _metadata) in sorted(offsets.items()):
            _low, log_size = source.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S)
            remote = route.policy.format_remote_topic(route.source.alias, topic)
            last_ms = _last_timestamp_ms(target, remote, partition)
            delay_ms = None if last_ms is None else max(int(time.time() * 1000) - last_ms, 0)
            rows.append(
                {
                    "group": group,
                    "topic": topic,
                    "partition": partition,
                    "offset": offset,
                    "log_size": log_size,
                    "lag": max(log_size - offset, 0),
                    "owner": owners.get((topic, partition), "none"),
                    "target_topic": remote,
                    "delay_ms": delay_ms,
                }
            )
    finally:
        source.close()
        target.close()
    return rows


def _last_timestamp_ms(consumer: Any, topic: str, partition: int) -> int | None:
    """Timestamp of the newest readable record of topic[partition] (None when empty)."""
    from confluent_kafka import KafkaError, TopicPartition

    low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S)
    if high <= low:
        return None
    consumer.assign([TopicPartition(topic, partition, max(low, high - 1))])
    last: int | None = None
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                break
            raise KmirrorError(f"reading {topic}[{partition}] on the target failed: {msg.error().str()}")
        last = msg.timestamp()[1]
    consumer.unassign()
    return last


def render(rows: list[dict[str, Any]], flow_id: str) -> Any:
    from rich.table import Table

    table = Table(title=f"kmirror lag: {flow_id}")
    for column in ("Group", "Topic", "Pid", "Offset", "logSize", "Lag", "Owner", "Delay (ms)"):
        table.add_column(column, justify="left" if column in ("Group", "Topic", "Owner") else "right")
    for r in rows:
        delay = "-" if r["delay_ms"] is None else str(r["delay_ms"])
        table.add_row(
            r["group"],
            r["topic"],
            str(r["partition"]),
            str(r["offset"]),
            str(r["log_size"]),
            str(r["lag"]),
            r["owner"],
            delay,
        )
    return table


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    spec = load_flow(args)
    console = Console()
    while True:
        rows = lag_rows(spec.route, spec.consumer_group)
        if not rows and not args.watch:
            raise KmirrorError(
                f"group {spec.consumer_group!r} has no committed offsets on {spec.source.alias!r}; "
                f"has flow {spec.id} run?"
            )
        if args.format == "json":
            print(json.dumps(rows), flush=True)
        else:
            console.print(render(rows, spec.id))
        if not args.watch:
            return 0
        time.sleep(WATCH_INTERVAL_S)
