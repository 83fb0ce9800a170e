"""Mirror benchmark (issues 8, 16, 23): limit / raw / raw_parallel / spark / spark_batch / mm2 on
the same two local brokers and data.

    python bench/mirror_bench.py [--records 2000000] [--size 200] [--partitions 8] [--repeat 1]
                                 [--latency-rate 20000] [--latency-seconds 15] [--topics N]
                                 [--without mm2] [--without spark_batch]

Both clusters are Apache Kafka 4.1 by default (`--broker kafka-3.9` or `tansu` for the others).

1. limit: producers writing the same records straight into the target (no consuming);
2. raw: a single-process confluent-kafka consume->produce loop (acks=all, idempotence);
3. raw_parallel: that loop as one process per core over disjoint partitions (MM1's num.streams);
4. spark: `python -m spark_app --once` with local[*], first record read -> last delivery, and
   the CPU (all threads) of its Python workers over that window per record copied;
5. spark_batch: the same with the flow option `copy_loop: "batch"`, when
   `kmirror_engine.copying.batch_copy` imports (otherwise its RESULT fields are n/a, and why is logged);
6. mm2: a real MirrorMaker 2 of the brokers' Kafka version in dedicated mode, tasks.max = cores,
   first -> last record seen in its target topic, and the java process's CPU over that window
   (bench/mm2_run.py says how).
Each contender mirrors the same source topic into its own target topic; its output is counted
per partition by consuming and must equal the source's, and (mirrors only) a sample of every
partition must equal the source's record by record (bench/verify.py) before its figure counts.
Then the app runs in streaming mode under a fixed-rate producer for latency p50/p99; with
`--topics N` the same records are mirrored once as N topics x 2 partitions and once as 4 x 2
(whole wall times compared). The last line is `RESULT spark_vs_raw=<x> spark_vs_raw_parallel=<x>
spark_vs_limit=<x> p99_ms=<n> startup=<s>s cpu_us_per_record=<x> spark=<n>/s raw=<n>/s
raw_parallel=<n>/s limit=<n>/s spark_vs_mm2=<x> mm2=<n>/s broker=<name-version>
mm2_cpu_us_per_record=<x> cpu_us_per_record_batch=<x> spark_batch=<n>/s`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console

from bench.bench_report import print_report, result_line
from bench.many_topics import run_many
from bench.measure import add_fences, create_topics, produce_parallel
from bench.mm2_run import POLL_S, Mm2Flow, run_mm2
from bench.peers import PEERS, peer_targets, run_peers
from bench.raw_loop import raw_mirror, raw_parallel
from bench.spark_runs import flow_spec, run_latency, run_spark_once
from bench.verify import verify_counts, verify_sample
from kmirror_cli.local_brokers import LocalBroker
from kmirror_cli.local_kafka import DEFAULT_LINE, resolve_line
from kmirror_cli.local_mm2 import fetch_mm2
from kmirror_engine.copying.native_copy import native_module


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--size", type=int, default=200, help="value bytes per record")
    parser.add_argument(
        "--compression",
        choices=("none", "lz4", "zstd"),
        default="none",
        help="compression.type of the source and target topics (the brokers compress)",
    )
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
    parser.add_argument(
        "--copy-loop",
        choices=("native", "python", "batch"),
        default=None,
        help="the app's copy loop (default: native where built, else python)",
    )
    parser.add_argument(
        "--broker",
        choices=("kafka-4.1", "kafka-3.9", "tansu"),
        default="kafka-4.1",
        help="the two local clusters: Apache Kafka (kmirror_cli/local_kafka.py) or tansu",
    )
    parser.add_argument(
        "--without",
        action="append",
        choices=OPTIONAL,
        default=[],
        help="leave out a contender (repeatable); its RESULT fields show n/a",
    )
    return parser.parse_args(argv)


def local_broker(kind: str, name: str) -> Any:
    """A stopped local cluster of `kind` (a context manager): Apache Kafka by default, as users run."""
    if kind == "tansu":
        return LocalBroker(name)
    from kmirror_cli.local_kafka import KafkaBroker

    return KafkaBroker(name, line=kind.removeprefix("kafka-"), heap_mb=1024, authorizer=False)


def broker_name(kind: str) -> str:
    """The brokers as the RESULT line names them: `apache-kafka-<version>` or `tansu`."""
    if kind == "tansu":
        return "tansu"
    return f"apache-kafka-{resolve_line(kind.removeprefix('kafka-'))}"


def spark_batch_missing() -> str | None:
    """Why the spark_batch contender cannot run (None: it can): the app accepts
    `copy_loop: "batch"` only once `kmirror_engine.copying.batch_copy` exists."""
    try:
        importlib.import_module("kmirror_engine.copying.batch_copy")
    except ImportError as exc:
        return f"kmirror_engine.copying.batch_copy does not import ({exc}), so the app refuses copy_loop 'batch'"
    return None


def active_contenders(args: argparse.Namespace, console: Console) -> tuple[str, ...]:
    """Every contender but those `--without` names and spark_batch when its copy loop is missing."""
    missing = spark_batch_missing() if "spark_batch" not in args.without else None
    if missing is not None:
        console.log(f"spark_batch: not run: {missing} (RESULT shows cpu_us_per_record_batch=n/a)")
    skipped = set(args.without) | ({"spark_batch"} if missing else set())
    return tuple(name for name in CONTENDERS if name not in skipped)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(stderr=True)
    if args.copy_loop is None:  # named explicitly, so the app cannot fall back without failing
        args.copy_loop = "native" if native_module() is not None else "python"
    console.log(f"the app's copy loop: {args.copy_loop}")
    contenders = active_contenders(args, console)
    run, nparts, workdir = uuid.uuid4().hex[:6], args.partitions, Path(tempfile.mkdtemp(prefix="kmirror-bench-"))
    src = f"bench-src-{run}"
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    loads: dict[str, list[str]] = {**{name: [] for name in contenders}, "latency": [], "many": []}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in contenders}
    broker = broker_name(args.broker)
    console.log(f"brokers: {broker}")
    with (
        local_broker(args.broker, "bench-source") as source_broker,
        local_broker(args.broker, "bench-target") as target_broker,
    ):
        source, target = source_broker.bootstrap_servers, target_broker.bootstrap_servers
        mm2_version = getattr(source_broker, "version", None) or resolve_line(DEFAULT_LINE)
        jars = fetch_mm2(mm2_version) if {"mm2", "mm2_tuned"} & set(contenders) else None
        create_topics(source, [src], nparts, topic_config(args))
        console.log(
            f"filling {src}: {args.records:,} x {args.size} B, {nparts} partitions, compression.type {args.compression}"
        )
        filled = produce_parallel(source, src, args.records, args.size, nparts, args.producer_procs)
        expected = filled["counts"]
        add_fences(source, src, nparts)  # end markers (tansu's watermark also hides each partition's newest batch)
        bed = Bed(source, target, src, expected, workdir, contenders, jars, mm2_version)
        for round_ in range(args.repeat):
            run_round(args, console, bed, f"{run}-{round_}", round_, rates, loads, runs)
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
            many = run_many(
                source, target, run, args.topics, args.topics_records, args.size, workdir, copy_loop=args.copy_loop
            )
            loads["many"].append(load_averages())
    rate = {name: statistics.median(values) for name, values in rates.items()}
    cpu_rounds = cpu_each_round(runs, args.records)
    cpu_us = cpu_per_record(cpu_rounds)
    median_runs = {name: sorted(done, key=lambda r: r["rate"])[len(done) // 2] for name, done in runs.items() if done}
    print_report(console, args, rates, median_runs, latency, loads, cpu_us, cpu_rounds, many, broker)
    sparks = runs["spark"]
    console.print(
        "start-up of every spark run, in order: "
        + " ".join(f"{s['startup_s']:.1f} s" for s in sparks)
        + " (a run without a JVM class archive yet also writes one at exit: spark_app/jvm_classes.py)"
    )
    pss = statistics.median(r["pss_app_mib"] for r in runs["spark_batch"]) if runs.get("spark_batch") else None
    print(result_line(rate, cpu_us, latency["p99_ms"], statistics.median(s["startup_s"] for s in sparks), broker, pss))
    return 0


CONTENDERS = ("limit", "raw", "raw_parallel", "spark", "spark_batch", "mm2", *PEERS)
OPTIONAL = ("spark_batch", "mm2", *PEERS)


def cpu_per_record(cpu_rounds: dict[str, list[float]]) -> dict[str, float]:
    """Median CPU microseconds per record over the rounds (`cpu_each_round`'s figures)."""
    return {name: statistics.median(values) for name, values in cpu_rounds.items()}


def cpu_each_round(runs: dict[str, list[dict[str, Any]]], records: int) -> dict[str, list[float]]:
    """CPU microseconds per record of every round, in order: the Python workers' for spark and
    spark_batch, the java process's for mm2 and mm2_tuned (bench/bench_report.py says why), and
    the whole app's (driver + JVM + workers) of spark_batch as `spark_batch_app`."""
    cpu_us: dict[str, list[float]] = {}
    for name in ("spark", "spark_batch"):
        if runs.get(name):
            cpu_us[name] = [r["cpu_s"]["workers"] / records * 1e6 for r in runs[name]]
    if runs.get("spark_batch"):
        cpu_us["spark_batch_app"] = [sum(r["cpu_s"].values()) / records * 1e6 for r in runs["spark_batch"]]
    for name in ("mm2", "mm2_tuned"):
        if runs.get(name):
            cpu_us[name] = [r["cpu_s"] / records * 1e6 for r in runs[name]]
    return cpu_us


@dataclass(frozen=True)
class Bed:
    """What every round mirrors: the two clusters, the filled source topic and its counts."""

    source: str
    target: str
    src: str
    expected: dict[int, int]
    workdir: Path
    contenders: tuple[str, ...]
    mm2_jars: Path | None
    mm2_version: str


def check(bed: Bed, dst: str, name: str, nparts: int) -> None:
    """Count per partition, then compare a sample record by record (bench/verify.py)."""
    verify_counts(bed.target, dst, nparts, bed.expected, name)
    verify_sample(bed.source, bed.target, bed.src, dst, bed.expected, name)


def topic_config(args: argparse.Namespace) -> dict[str, str]:
    """The bench topics' configs: `--compression` other than none as their compression.type."""
    return {} if args.compression == "none" else {"compression.type": args.compression}


def run_round(
    args: argparse.Namespace,
    console: Console,
    bed: Bed,
    tag: str,
    round_: int,
    rates: dict[str, list[float]],
    loads: dict[str, list[str]],
    runs: dict[str, list[dict[str, Any]]],
) -> None:
    """One run of each contender into its own, new target topic; appends rates, loads and the
    runs' details. Raises SystemExit when an output does not match the source."""
    nparts, step = args.partitions, f"round {round_ + 1}/{args.repeat}"
    alias = "west" if round_ == 0 else f"west{round_}"
    targets = {
        "limit": f"bench-limit-{tag}",
        "raw": f"bench-raw-{tag}",
        "raw_parallel": f"bench-rawpar-{tag}",
        "spark": f"{alias}.{bed.src}",
        "spark_batch": f"batch{round_}.{bed.src}",
        "mm2": f"mm{round_}.{bed.src}",
        **peer_targets(round_, tag, bed.src),
    }
    create_topics(bed.target, [targets[name] for name in bed.contenders], nparts, topic_config(args))

    def record(name: str, result: dict[str, Any]) -> None:
        result["rate"] = args.records / (result["end"] - result["start"])
        rates[name].append(result["rate"])
        runs[name].append(result)
        loads[name].append(load_averages())

    console.log(f"{step}, limit: producing straight into the target")
    limit = produce_parallel(bed.target, targets["limit"], args.records, args.size, nparts, args.producer_procs)
    verify_counts(bed.target, targets["limit"], nparts, bed.expected, "limit")
    record("limit", limit)

    console.log(f"{step}, raw: single-process consume->produce loop")
    raw = raw_mirror(bed.source, bed.target, bed.src, targets["raw"], bed.expected)
    check(bed, targets["raw"], "raw", nparts)
    record("raw", raw)

    procs = os.cpu_count() or 1
    console.log(f"{step}, raw_parallel: {procs} consume->produce processes")
    par = raw_parallel(bed.source, bed.target, bed.src, targets["raw_parallel"], bed.expected, procs)
    check(bed, targets["raw_parallel"], "raw_parallel", nparts)
    record("raw_parallel", par)

    console.log(f"{step}, spark: python -m spark_app --once --master local[*]")
    spark = run_spark_once(
        flow_spec(bed.source, bed.target, bed.src, bed.workdir, alias=alias, copy_loop=args.copy_loop), bed.workdir
    )
    check(bed, targets["spark"], "spark", nparts)
    record("spark", spark)

    if "spark_batch" in bed.contenders:
        console.log(f"{step}, spark_batch: python -m spark_app --once with copy_loop 'batch'")
        batch = run_spark_once(
            flow_spec(bed.source, bed.target, bed.src, bed.workdir, alias=f"batch{round_}", copy_loop="batch"),
            bed.workdir,
        )
        check(bed, targets["spark_batch"], "spark_batch", nparts)
        record("spark_batch", batch)

    if "mm2" in bed.contenders and bed.mm2_jars is not None:
        flow = Mm2Flow(f"mm{round_}", "east", bed.source, bed.target, bed.src, procs)
        console.log(f"{step}, mm2: MirrorMaker 2 {bed.mm2_version} dedicated mode, tasks.max={procs}")
        mm2 = run_mm2(flow, bed.mm2_jars, bed.workdir, nparts)
        check(bed, flow.target_topic, "mm2", nparts)
        mm2.update(version=bed.mm2_version, tasks=procs, poll_ms=POLL_S * 1000)
        record("mm2", mm2)

    run_peers(args, console, bed, round_, targets, record, check)


def load_averages() -> str:
    """The 1/5/15-minute load averages now (the machine is shared: figures depend on them)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
