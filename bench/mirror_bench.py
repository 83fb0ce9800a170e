"""Mirror benchmark (issues 8, 16): limit / raw / raw_parallel / spark on the same two local
brokers and data.

    python bench/mirror_bench.py [--records 2000000] [--size 200] [--partitions 8] [--repeat 1]
                                 [--latency-rate 20000] [--latency-seconds 15] [--topics N]

Both clusters are Apache Kafka 4.1 by default (`--broker kafka-3.9` or `tansu` for the others).

1. limit: producers writing the same records straight into the target (no consuming);
2. raw: a single-process confluent-kafka consume->produce loop (acks=all, idempotence);
3. raw_parallel: that loop as one process per core over disjoint partitions (MM1's num.streams);
4. spark: `python -m spark_app --once` with local[*], first record read -> last delivery, and
   the CPU (all threads) of its Python workers over that window per record copied.
Each contender mirrors the same source topic into its own target topic; its output is counted
per partition by consuming and must equal the source's before its figure counts. Then the app
runs in streaming mode under a fixed-rate producer for latency p50/p99; with `--topics N` the
same records are mirrored once as N topics x 2 partitions and once as 4 x 2 (whole wall times
compared). The last line is `RESULT spark_vs_raw=<x> spark_vs_raw_parallel=<x>
spark_vs_limit=<x> p99_ms=<n> startup=<s>s cpu_us_per_record=<x> spark=<n>/s raw=<n>/s
raw_parallel=<n>/s limit=<n>/s`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console
from rich.table import Table

from bench.many_topics import run_many
from bench.measure import add_fences, count_until_fence, create_topics, produce_parallel
from bench.raw_loop import raw_mirror, raw_parallel
from bench.spark_runs import flow_spec, run_latency, run_spark_once
from kmirror_cli.local_brokers import LocalBroker
from kmirror_engine.copying.native_copy import native_module


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--size", type=int, default=200, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--latency-rate", type=int, default=20_000, help="records/s in the latency run")
    parser.add_argument("--latency-seconds", type=float, default=15.0)
    parser.add_argument("--producer-procs", type=int, default=2, help="processes filling the source / the limit run")
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds of limit/raw/spark; figures and RESULT use the medians"
    )
    parser.add_argument(
        "--trigger-interval-ms", type=int, default=None, help="flow option of the latency run (default: the app's)"
    )
    parser.add_argument("--topics", type=int, default=0, help="also the many-topics run: N topics x 2 partitions")
    parser.add_argument("--topics-records", type=int, default=40_000, help="records of the many-topics run")
    parser.add_argument("--skip-latency", action="store_true", help="no streaming latency run (p99_ms=-1)")
    parser.add_argument("--copy-loop", choices=("native", "python"), default=None,
                        help="the app's copy loop (default: native where built, else python)")  # fmt: skip
    parser.add_argument("--broker", choices=("kafka-4.1", "kafka-3.9", "tansu"), default="kafka-4.1",
                        help="the two local clusters: Apache Kafka (kmirror_cli/local_kafka.py) or tansu")  # fmt: skip
    return parser.parse_args(argv)


def local_broker(kind: str, name: str) -> Any:
    """A stopped local cluster of `kind` (a context manager): Apache Kafka by default, as users run."""
    if kind == "tansu":
        return LocalBroker(name)
    from kmirror_cli.local_kafka import KafkaBroker

    return KafkaBroker(name, line=kind.removeprefix("kafka-"), heap_mb=1024, authorizer=False)


def verify(bootstrap: str, topic: str, nparts: int, expected: dict[int, int], name: str) -> None:
    """Raise unless every partition of `topic` holds exactly the source's record count."""
    add_fences(bootstrap, topic, nparts)
    counted = count_until_fence(bootstrap, topic, nparts)
    if counted != expected:
        raise SystemExit(f"{name}: output does not match the source: expected {expected}, counted {counted}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(stderr=True)
    if args.copy_loop is None:  # named explicitly, so the app cannot fall back without failing
        args.copy_loop = "native" if native_module() is not None else "python"
    console.log(f"the app's copy loop: {args.copy_loop}")
    run, nparts, workdir = uuid.uuid4().hex[:6], args.partitions, Path(tempfile.mkdtemp(prefix="kmirror-bench-"))
    src = f"bench-src-{run}"
    rates: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    loads: dict[str, list[str]] = {**{name: [] for name in CONTENDERS}, "latency": [], "many": []}
    sparks: list[dict[str, Any]] = []
    console.log(f"brokers: {args.broker}")
    with local_broker(args.broker, "bench-source") as source_broker, local_broker(args.broker, "bench-target") as \
            target_broker:  # fmt: skip
        source, target = source_broker.bootstrap_servers, target_broker.bootstrap_servers
        create_topics(source, [src], nparts)
        console.log(f"filling {src}: {args.records:,} x {args.size} B, {nparts} partitions")
        filled = produce_parallel(source, src, args.records, args.size, nparts, args.producer_procs)
        expected = filled["counts"]
        add_fences(source, src, nparts)  # end markers (tansu's watermark also hides each partition's newest batch)
        for round_ in range(args.repeat):
            sparks.append(run_round(args, console, source, target, src, f"{run}-{round_}", round_, expected, workdir,
                                    rates, loads))  # fmt: skip
        latency: dict[str, Any] = {"p99_ms": -1}
        if not args.skip_latency:
            console.log(f"latency: streaming mode at {args.latency_rate:,} records/s for {args.latency_seconds:.0f} s")
            options: dict[str, Any] = {"copy_loop": args.copy_loop}
            if args.trigger_interval_ms is not None:
                options["trigger_interval_ms"] = args.trigger_interval_ms
            latency = run_latency(
                source, target, nparts, args.latency_rate, args.latency_seconds, args.size, run, **options
            )
            loads["latency"].append(load_averages())
        many = None
        if args.topics:
            console.log(f"many topics: {args.topics_records:,} records as {args.topics} x 2 and as 4 x 2 partitions")
            many = run_many(source, target, run, args.topics, args.topics_records, args.size, workdir,
                            copy_loop=args.copy_loop)  # fmt: skip
            loads["many"].append(load_averages())
    rate = {name: statistics.median(values) for name, values in rates.items()}
    spark = sorted(sparks, key=lambda s: s["rate"])[len(sparks) // 2]  # the median spark run
    cpu_us = statistics.median(s["cpu_s"]["workers"] / args.records * 1e6 for s in sparks)
    print_report(console, args, rates, spark, latency, loads, cpu_us, many)
    console.print(
        "start-up of every spark run, in order: "
        + " ".join(f"{s['startup_s']:.1f} s" for s in sparks)
        + " (a run without a JVM class archive yet also writes one at exit: spark_app/jvm_classes.py)"
    )
    print(
        f"RESULT spark_vs_raw={rate['spark'] / rate['raw']:.2f} "
        f"spark_vs_raw_parallel={rate['spark'] / rate['raw_parallel']:.2f} "
        f"spark_vs_limit={rate['spark'] / rate['limit']:.2f} p99_ms={latency['p99_ms']} "
        f"startup={statistics.median(s['startup_s'] for s in sparks):.1f}s cpu_us_per_record={cpu_us:.2f} "
        f"spark={rate['spark']:.0f}/s raw={rate['raw']:.0f}/s raw_parallel={rate['raw_parallel']:.0f}/s "
        f"limit={rate['limit']:.0f}/s"
    )
    return 0


CONTENDERS = ("limit", "raw", "raw_parallel", "spark")


def run_round(args: argparse.Namespace, console: Console, source: str, target: str, src: str, tag: str, round_: int,
              expected: dict[int, int], workdir: Path, rates: dict[str, list[float]],
              loads: dict[str, list[str]]) -> dict[str, Any]:  # fmt: skip
    """One run of each contender into its own, new target topic; appends rates and loads,
    returns the spark run's details. Raises SystemExit when an output does not match."""
    nparts, alias = args.partitions, "west" if round_ == 0 else f"west{round_}"
    targets = {"limit": f"bench-limit-{tag}", "raw": f"bench-raw-{tag}", "raw_parallel": f"bench-rawpar-{tag}",
               "spark": f"{alias}.{src}"}  # fmt: skip
    create_topics(target, list(targets.values()), nparts)
    console.log(f"round {round_ + 1}/{args.repeat}, limit: producing straight into the target")
    limit = produce_parallel(target, targets["limit"], args.records, args.size, nparts, args.producer_procs)
    verify(target, targets["limit"], nparts, expected, "limit")
    rates["limit"].append(args.records / (limit["end"] - limit["start"]))
    loads["limit"].append(load_averages())

    console.log(f"round {round_ + 1}/{args.repeat}, raw: single-process consume->produce loop")
    raw = raw_mirror(source, target, src, targets["raw"], expected)
    verify(target, targets["raw"], nparts, expected, "raw")
    rates["raw"].append(args.records / (raw["end"] - raw["start"]))
    loads["raw"].append(load_averages())

    procs = os.cpu_count() or 1
    console.log(f"round {round_ + 1}/{args.repeat}, raw_parallel: {procs} consume->produce processes")
    par = raw_parallel(source, target, src, targets["raw_parallel"], expected, procs)
    verify(target, targets["raw_parallel"], nparts, expected, "raw_parallel")
    rates["raw_parallel"].append(args.records / (par["end"] - par["start"]))
    loads["raw_parallel"].append(load_averages())

    console.log(f"round {round_ + 1}/{args.repeat}, spark: python -m spark_app --once --master local[*]")
    spark = run_spark_once(flow_spec(source, target, src, workdir, alias=alias, copy_loop=args.copy_loop), workdir)
    verify(target, targets["spark"], nparts, expected, "spark")
    spark["rate"] = args.records / (spark["end"] - spark["start"])
    rates["spark"].append(spark["rate"])
    loads["spark"].append(load_averages())
    return spark


def load_averages() -> str:
    """The 1/5/15-minute load averages now (the machine is shared: figures depend on them)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def print_report(console: Console, args: argparse.Namespace, rates: dict[str, list[float]], spark: dict[str, Any],
                 latency: dict[str, Any], loads: dict[str, list[str]], cpu_us: float,
                 many: dict[str, Any] | None) -> None:  # fmt: skip
    rate = {name: statistics.median(values) for name, values in rates.items()}
    rounds = f", median of {args.repeat} rounds" if args.repeat > 1 else ""
    table = Table(
        title=f"{args.records:,} records x {args.size} B, {args.partitions} partitions, tansu -> tansu{rounds}"
    )
    for column in ("contender", "records/s", "vs raw", "vs limit", "verified", "every run", "load avg after (1/5/15)"):
        table.add_column(column, justify="right" if column != "contender" else "left")
    for name in CONTENDERS:
        vs_raw, vs_limit = rate[name] / rate["raw"], rate[name] / rate["limit"]
        every = " ".join(f"{r / 1000:.0f}k" for r in rates[name])
        table.add_row(
            name, f"{rate[name]:,.0f}", f"{vs_raw:.2f}", f"{vs_limit:.2f}", "yes", every, "; ".join(loads[name])
        )
    out = Console(width=180)
    out.print(table)
    out.print(
        f"spark --once (median run): start-up (process start -> first record read) {spark['startup_s']:.1f} s, "
        f"{spark['batches']} batches, {spark['between_batches_s']:.1f} s between batches, wall {spark['wall_s']:.1f} s"
    )
    for label, peaks in (("peak", spark["rss"]), ("1st half of the copy", spark["first_half"]),
                         ("2nd half of the copy", spark["second_half"])):  # fmt: skip
        out.print(f"  memory, {label}: {_memory(peaks)}")
    largest, count = spark["rss_largest"], spark["processes"]
    out.print(
        f"  largest single process RSS: JVM {largest['jvm']:.0f} MiB, Python worker {largest['workers']:.0f} MiB "
        f"(up to {count['workers']} worker processes), driver Python {largest['driver_python']:.0f} MiB"
    )
    cpu = spark["cpu_s"]
    out.print(
        f"  CPU over the copy window (median run): Python workers {cpu['workers']:.1f} s (all threads; "
        f"{cpu['workers'] / args.records * 1e6:.2f} us/record), JVM {cpu['jvm']:.1f} s, driver Python "
        f"{cpu['driver_python']:.1f} s; median over runs {cpu_us:.2f} us/record in the copying workers"
    )
    if many is not None:
        few, lots = many["few"], many["many"]
        out.print(
            f"many topics ({args.topics_records:,} records): {lots['topics']} x 2 partitions {lots['wall_s']:.1f} s "
            f"(start-up {lots['startup_s']:.1f} s, copy {lots['copy_s']:.1f} s; filling the source took "
            f"{lots['fill_s']:.1f} s) vs {few['topics']} x 2 {few['wall_s']:.1f} s (start-up {few['startup_s']:.1f} s, "
            f"copy {few['copy_s']:.1f} s; fill {few['fill_s']:.1f} s): {many['ratio']:.2f}x; "
            f"load avg after {loads['many'][0]}"
        )
    if args.skip_latency:
        console.log(f"finished at {time.strftime('%H:%M:%S')}")
        return
    interval = args.trigger_interval_ms if args.trigger_interval_ms is not None else "default"
    out.print(
        f"latency, streaming at {args.latency_rate:,} records/s, trigger_interval_ms {interval} "
        f"({latency['sent']:,} records after a 10 s warm-up at the same rate): p50 {latency['p50_ms']} ms, "
        f"p99 {latency['p99_ms']} ms, max {latency['max_ms']} ms; {latency['batches']} batches, median batch "
        f"cycle {latency['cycle_ms']} ms, median task {latency['task_ms']} ms, median sink commit (listeners) "
        f"{latency['listeners_ms']} ms; memory peak {_memory(latency['rss'])}; "
        f"load avg after {loads['latency'][0]}"
    )
    console.log(f"finished at {time.strftime('%H:%M:%S')}")


def _memory(peaks: dict[str, float]) -> str:
    return (
        f"JVM {peaks['jvm']:.0f} MiB, Python workers {peaks['workers']:.0f} MiB, "
        f"driver Python {peaks['driver_python']:.0f} MiB (PSS sums)"
    )


if __name__ == "__main__":
    sys.exit(main())
