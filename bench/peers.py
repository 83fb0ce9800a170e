"""One round of issue 47's peers in the mirror benchmark: `mm2_tuned` (MirrorMaker 2 with
published throughput tuning, bench/mm2_tuning.py), `limit_java` (Kafka's ProducerPerformance
into the target, bench/limit_java.py) and `limit_bytes` (raw batches copied with nothing else
done, bench/limit_bytes.py). Each writes its own new target topic and is verified like the
other contenders before its figure counts."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rich.console import Console

from bench.limit_bytes import copy_bytes
from bench.limit_java import run_limit_java
from bench.measure import add_fences, count_until_fence
from bench.mm2_run import POLL_S, Mm2Flow, run_mm2
from bench.mm2_tuning import tuned_properties, tuned_tasks

PEERS = ("mm2_tuned", "limit_java", "limit_bytes")


def peer_targets(round_: int, tag: str, src: str) -> dict[str, str]:
    """Each peer's target topic in round `round_` (mm2_tuned's is MM2's own naming)."""
    return {
        "mm2_tuned": f"mmt{round_}.{src}",
        "limit_java": f"bench-limitjava-{tag}",
        "limit_bytes": f"bench-limitbytes-{tag}",
    }


def run_peers(
    args: argparse.Namespace,
    console: Console,
    bed: Any,
    round_: int,
    targets: dict[str, str],
    record: Callable[[str, dict[str, Any]], None],
    check: Callable[[Any, str, str, int], None],
) -> None:
    """Run the peers of `bed.contenders` once each; `record(name, result)` books a verified run."""
    nparts, step = args.partitions, f"round {round_ + 1}/{args.repeat}"
    if "limit_java" in bed.contenders:
        console.log(f"{step}, limit_java: Kafka's ProducerPerformance into the target (acks=all, idempotence)")
        log = bed.workdir / f"limit-java-{round_}.log"
        java = run_limit_java(
            bed.target, targets["limit_java"], args.records, args.size, args.compression, bed.mm2_version, log
        )
        _verify_total(bed.target, targets["limit_java"], nparts, args.records)
        record("limit_java", java)
    if "limit_bytes" in bed.contenders:
        console.log(f"{step}, limit_bytes: raw batches fetched and produced, nothing else")
        raw = copy_bytes(bed.source, bed.target, bed.src, targets["limit_bytes"], bed.expected)
        check(bed, targets["limit_bytes"], "limit_bytes", nparts)
        record("limit_bytes", raw)
    if "mm2_tuned" in bed.contenders and bed.mm2_jars is not None:
        tasks = tuned_tasks(nparts)
        alias = targets["mm2_tuned"].split(".", 1)[0]
        flow = Mm2Flow(
            alias,
            "east",
            bed.source,
            bed.target,
            bed.src,
            tasks,
            tuple(tuned_properties(alias, "east", args.compression).items()),
        )
        console.log(f"{step}, mm2_tuned: MirrorMaker 2 {bed.mm2_version} with throughput tuning, tasks.max={tasks}")
        mm2 = run_mm2(flow, bed.mm2_jars, bed.workdir, nparts)
        check(bed, flow.target_topic, "mm2_tuned", nparts)
        mm2.update(version=bed.mm2_version, tasks=tasks, poll_ms=POLL_S * 1000)
        record("mm2_tuned", mm2)


def _verify_total(bootstrap: str, topic: str, nparts: int, records: int) -> None:
    """ProducerPerformance spreads records over the partitions itself: only the total must match."""
    add_fences(bootstrap, topic, nparts)
    counted = sum(count_until_fence(bootstrap, topic, nparts).values())
    if counted != records:
        raise SystemExit(f"limit_java: {counted} records in {topic}, expected {records}")
