"""The mirror benchmark's report: the table, the spark details and the RESULT line.

CPU per record is measured over each contender's copy window and divided by the records copied:
for spark and spark_batch the Python workers' CPU (they do the copying; the Spark JVM and the
driver are shown beside it), for mm2 the whole java process (its tasks, clients, GC and JIT).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from rich.console import Console
from rich.table import Table

NOT_AVAILABLE = "n/a"
CPU_OF = {
    "spark": "Python workers",
    "spark_batch": "Python workers",
    "mm2": "java process",
    "mm2_tuned": "java process",
}


def _ratio(rate: dict[str, float], ours: str, theirs: str) -> str:
    return f"{rate[ours] / rate[theirs]:.2f}" if ours in rate and theirs in rate else NOT_AVAILABLE


def _per_s(rate: dict[str, float], name: str) -> str:
    return f"{rate[name]:.0f}/s" if name in rate else NOT_AVAILABLE


def _us(cpu_us: dict[str, float], name: str) -> str:
    return f"{cpu_us[name]:.2f}" if name in cpu_us else NOT_AVAILABLE


def result_line(
    rate: dict[str, float],
    cpu_us: dict[str, float],
    p99_ms: Any,
    startup_s: float,
    broker: str,
    pss_app_mib: float | None = None,
) -> str:
    """The RESULT line: every field of issues 8/16 first (unchanged), then the mm2, broker and
    spark_batch fields of issue 23, then issue 47's peers, the whole app's CPU per record of
    spark_batch (driver + JVM + workers) and its peak PSS (all processes at once, median run);
    a contender that did not run shows `n/a`."""
    pss = f"{pss_app_mib:.0f}" if pss_app_mib is not None else NOT_AVAILABLE
    return (
        f"RESULT spark_vs_raw={_ratio(rate, 'spark', 'raw')} "
        f"spark_vs_raw_parallel={_ratio(rate, 'spark', 'raw_parallel')} "
        f"spark_vs_limit={_ratio(rate, 'spark', 'limit')} p99_ms={p99_ms} "
        f"startup={startup_s:.1f}s cpu_us_per_record={_us(cpu_us, 'spark')} "
        f"spark={_per_s(rate, 'spark')} raw={_per_s(rate, 'raw')} raw_parallel={_per_s(rate, 'raw_parallel')} "
        f"limit={_per_s(rate, 'limit')} spark_vs_mm2={_ratio(rate, 'spark', 'mm2')} mm2={_per_s(rate, 'mm2')} "
        f"broker={broker} mm2_cpu_us_per_record={_us(cpu_us, 'mm2')} "
        f"cpu_us_per_record_batch={_us(cpu_us, 'spark_batch')} spark_batch={_per_s(rate, 'spark_batch')} "
        f"spark_batch_vs_mm2_tuned={_ratio(rate, 'spark_batch', 'mm2_tuned')} "
        f"spark_batch_vs_limit_java={_ratio(rate, 'spark_batch', 'limit_java')} "
        f"spark_batch_vs_limit_bytes={_ratio(rate, 'spark_batch', 'limit_bytes')} "
        f"cpu_us_per_record_app={_us(cpu_us, 'spark_batch_app')} pss_mib_app={pss} "
        f"mm2_tuned={_per_s(rate, 'mm2_tuned')} limit_java={_per_s(rate, 'limit_java')} "
        f"limit_bytes={_per_s(rate, 'limit_bytes')}"
    )


def print_report(
    console: Console,
    args: argparse.Namespace,
    rates: dict[str, list[float]],
    runs: dict[str, Any],
    latency: dict[str, Any],
    loads: dict[str, list[str]],
    cpu_us: dict[str, float],
    cpu_rounds: dict[str, list[float]],
    many: dict[str, Any] | None,
    broker: str,
) -> None:
    """The table of contenders (medians over rounds; with more than one round, the CPU column
    also shows each round's figure in order), then the median spark run's details, mm2's, the
    many-topics and the latency runs."""
    rate = {name: statistics.median(values) for name, values in rates.items()}
    rounds = f", median of {args.repeat} rounds" if args.repeat > 1 else ""
    table = Table(
        title=f"{args.records:,} records x {args.size} B, {args.partitions} partitions, {broker} -> {broker}{rounds}"
    )
    columns = (
        "contender",
        "records/s",
        "vs raw",
        "vs limit",
        "verified",
        "CPU us/record",
        "every run",
        "load avg after (1/5/15)",
    )
    for column in columns:
        table.add_column(column, justify="right" if column != "contender" else "left")
    for name, values in rates.items():
        verified = {"limit": "count", "limit_java": "total count"}.get(name, "count, sample")
        cpu = f"{cpu_us[name]:.2f} ({CPU_OF[name]})" if name in cpu_us else "-"
        each = cpu_rounds.get(name, [])
        if len(each) > 1:
            cpu += "; " + " ".join(f"{x:.2f}" for x in each)
        table.add_row(
            name,
            f"{rate[name]:,.0f}",
            _ratio(rate, name, "raw"),
            _ratio(rate, name, "limit"),
            verified,
            cpu,
            " ".join(f"{r / 1000:.0f}k" for r in values),
            "; ".join(loads[name]),
        )
    out = Console(width=200)
    out.print(table)
    out.print(
        "verified: count = records per partition equal the source's; sample = the first, middle and last "
        "200 records of every partition equal the source's (offset, key, value, headers, timestamp)"
    )
    _print_spark(out, args, runs["spark"], cpu_us, "spark")
    if runs.get("spark_batch"):
        _print_spark(out, args, runs["spark_batch"], cpu_us, "spark_batch")
    for name in ("mm2", "mm2_tuned"):
        if runs.get(name):
            _print_mm2(out, args, runs[name], cpu_us, name)
    if many is not None:
        _print_many(out, args, many, loads)
    if not args.skip_latency:
        _print_latency(out, args, latency, loads)
    console.log(f"finished at {time.strftime('%H:%M:%S')}")


def _print_spark(
    out: Console, args: argparse.Namespace, spark: dict[str, Any], cpu_us: dict[str, float], name: str
) -> None:
    out.print(
        f"{name} --once (median run): start-up (process start -> first record read) {spark['startup_s']:.1f} s, "
        f"{spark['batches']} batches, {spark['between_batches_s']:.1f} s between batches, wall {spark['wall_s']:.1f} s"
    )
    for label, peaks in (
        ("peak", spark["rss"]),
        ("1st half of the copy", spark["first_half"]),
        ("2nd half of the copy", spark["second_half"]),
    ):
        out.print(f"  memory, {label}: {_memory(peaks)}")
    out.print(f"  memory, whole app (all processes at once, PSS): peak {spark['pss_app_mib']:.0f} MiB")
    largest, count = spark["rss_largest"], spark["processes"]
    out.print(
        f"  largest single process RSS: JVM {largest['jvm']:.0f} MiB, Python worker {largest['workers']:.0f} MiB "
        f"(up to {count['workers']} worker processes), driver Python {largest['driver_python']:.0f} MiB"
    )
    cpu = spark["cpu_s"]
    total = sum(cpu.values())
    out.print(
        f"  CPU over the copy window (median run): Python workers {cpu['workers']:.1f} s (all threads; "
        f"{cpu['workers'] / args.records * 1e6:.2f} us/record), JVM {cpu['jvm']:.1f} s, driver Python "
        f"{cpu['driver_python']:.1f} s (all three: {total / args.records * 1e6:.2f} us/record); median over runs "
        f"{cpu_us[name]:.2f} us/record in the copying workers"
    )


def _print_mm2(
    out: Console, args: argparse.Namespace, mm2: dict[str, Any], cpu_us: dict[str, float], name: str = "mm2"
) -> None:
    out.print(
        f"{name} (median run): MirrorMaker 2 {mm2['version']} dedicated mode, tasks.max={mm2['tasks']}; start-up "
        f"(java start -> first record in the target) {mm2['startup_s']:.1f} s, copy {mm2['end'] - mm2['start']:.1f} s "
        f"(first -> last record seen in the target's end offsets, polled every {mm2['poll_ms']:.0f} ms), "
        f"java process CPU {mm2['cpu_s']:.1f} s over the copy ({mm2['cpu_s'] / args.records * 1e6:.2f} us/record; "
        f"median over runs {cpu_us[name]:.2f}), peak RSS {mm2['rss_mib']:.0f} MiB, stopped by {mm2['stopped']} in "
        f"{mm2['stop_s']:.1f} s; log {mm2['log']}"
    )


def _print_many(out: Console, args: argparse.Namespace, many: dict[str, Any], loads: dict[str, list[str]]) -> None:
    few, lots = many["few"], many["many"]
    out.print(
        f"many topics ({args.topics_records:,} records): {lots['topics']} x 2 partitions {lots['wall_s']:.1f} s "
        f"(start-up {lots['startup_s']:.1f} s, copy {lots['copy_s']:.1f} s; filling the source took "
        f"{lots['fill_s']:.1f} s) vs {few['topics']} x 2 {few['wall_s']:.1f} s (start-up {few['startup_s']:.1f} s, "
        f"copy {few['copy_s']:.1f} s; fill {few['fill_s']:.1f} s): {many['ratio']:.2f}x; "
        f"load avg after {loads['many'][0]}"
    )


def _print_latency(
    out: Console, args: argparse.Namespace, latency: dict[str, Any], loads: dict[str, list[str]]
) -> None:
    interval = args.trigger_interval_ms if args.trigger_interval_ms is not None else "default"
    out.print(
        f"latency, streaming at {args.latency_rate:,} records/s, trigger_interval_ms {interval} "
        f"({latency['sent']:,} records after a 10 s warm-up at the same rate): p50 {latency['p50_ms']} ms, "
        f"p99 {latency['p99_ms']} ms, max {latency['max_ms']} ms; {latency['batches']} batches, median batch "
        f"cycle {latency['cycle_ms']} ms, median task {latency['task_ms']} ms, median sink commit (listeners) "
        f"{latency['listeners_ms']} ms; memory peak {_memory(latency['rss'])}; "
        f"load avg after {loads['latency'][0]}"
    )


def _memory(peaks: dict[str, float]) -> str:
    return (
        f"JVM {peaks['jvm']:.0f} MiB, Python workers {peaks['workers']:.0f} MiB, "
        f"driver Python {peaks['driver_python']:.0f} MiB (PSS sums)"
    )
