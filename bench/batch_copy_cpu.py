"""CPU per record of the batch copy path (issue 28) next to the Python record loop, same data.

    python bench/batch_copy_cpu.py [--records 1000000] [--size 200] [--partitions 8]
                                   [--codecs none,lz4] [--loops batch,python,native,...]
                                   [--batch-records N] [--source HOST:PORT --target HOST:PORT]

Starts two local Apache Kafka 4.1 brokers (or uses the ones named), fills one source topic per
codec with `--records` records of `--size` bytes (bench/measure.py's records; an lz4 topic is
compressed by the broker, `compression.type=lz4`), then copies it in this process, one loop
at a time: `BatchRangeCopier` (kmirror_engine.copying.batch_copy), `RangeCopier`
(kmirror_engine.copying.range_copy) and the native loop (`NativeRangeCopier`, where built), each
into its own target topic. `--batch-records N` fills the source with batches of at most N
records (a producer at a low rate with a short linger writes such batches; the batch path's cost
is per batch, the record loops' per record). The figures are the wall
time of `copy()` and the CPU of this whole process (every thread: librdkafka's included) over
it, from getrusage. Each target's per-partition counts must equal the source's
(bench/verify.py), and a sample of records must match, before a figure is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.measure import copy_configs, produce_parallel
from bench.verify import verify_counts, verify_sample
from kmirror_engine.copying import batch_queue
from kmirror_engine.copying.batch_copy import new_batch_copier
from kmirror_engine.copying.native_copy import NativeRangeCopier, new_loop
from kmirror_engine.copying.range_copy import RangeCopier
from kmirror_engine.copying.ranges import CopyRange

LOOPS = ("batch", "batch-pymerge", "batch-nomerge", "python", "native")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--codecs", default="none,lz4", help="comma-separated: none, lz4, zstd, gzip, snappy")
    parser.add_argument("--producers", type=int, default=2, help="processes filling the source")
    parser.add_argument(
        "--loops",
        default="batch,python",
        help="comma-separated: batch, python, native; batch-pymerge (small batches merged "
        "in Python, not in the native module), batch-nomerge (not merged)",
    )
    parser.add_argument(
        "--batch-records",
        type=int,
        default=0,
        help="at most this many records per source batch (0: the fill's tuning, ~thousands)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="copies of the same data per loop (median printed)")
    parser.add_argument("--source", help="bootstrap of a running source cluster (default: start one)")
    parser.add_argument("--target", help="bootstrap of a running target cluster (default: start one)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.loops.split(",")) - set(LOOPS))
    if unknown:
        parser.error(f"--loops {args.loops}: unknown {', '.join(unknown)}; choose from {', '.join(LOOPS)}")
    return args


@contextlib.contextmanager
def brokers(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    if args.source and args.target:
        yield args.source, args.target
        return
    from kmirror_cli.local_kafka import KafkaBroker

    with (
        KafkaBroker("bench-batch-src", heap_mb=1024, authorizer=False) as src,
        KafkaBroker("bench-batch-dst", heap_mb=1024, authorizer=False) as dst,
    ):
        yield src.bootstrap_servers, dst.bootstrap_servers


def create(bootstrap: str, topic: str, partitions: int, codec: str) -> None:
    config = {} if codec == "none" else {"compression.type": codec}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1, config=config)]).values():
        future.result(timeout=30)


def cpu_s() -> tuple[float, float]:
    """(user, system) CPU of this process so far, every thread."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


SYSTEM_SHARE: list[float] = []  # per copy: the kernel's share of its CPU (sockets, page faults)
FAULTS: list[int] = []  # per copy: minor page faults (fresh memory touched)


def measure(copier: Any, ranges: list[CopyRange]) -> tuple[float, float, list[Any]]:
    """(wall s, CPU s, progress) of one `copier.copy(ranges)`."""
    wall, (user, system), faults = time.monotonic(), cpu_s(), minor_faults()
    progress = list(copier.copy(ranges))
    user_after, system_after = cpu_s()
    FAULTS.append(minor_faults() - faults)
    cpu = user_after - user + system_after - system
    SYSTEM_SHARE.append((system_after - system) / cpu if cpu else 0.0)
    return time.monotonic() - wall, cpu, progress


def run_codec(args: argparse.Namespace, source: str, target: str, codec: str) -> list[str]:
    run = uuid.uuid4().hex[:6]
    src = f"bcpu-{run}-{codec}"
    create(source, src, args.partitions, codec)
    small = {"batch.num.messages": args.batch_records, "linger.ms": 0} if args.batch_records else None
    filled = produce_parallel(source, src, args.records, args.size, args.partitions, args.producers, small)
    counts: dict[int, int] = filled["counts"]
    ranges = [CopyRange(src, p, 0, n, src) for p, n in sorted(counts.items())]
    # the producer's max.in.flight=5 (SAFE_PRODUCER) is what librdkafka sets for an idempotent one anyway
    consumer_config, producer_config = copy_configs(source, target, f"bench-{run}", **{"enable.auto.commit": False})
    lines = []
    for loop in args.loops.split(","):
        runs = [
            copy_once(args, source, target, src, codec, loop, counts, ranges, consumer_config, producer_config, k)
            for k in range(args.repeat)
        ]
        records, fallback, wall, cpu, compared = sorted(runs, key=lambda r: r[3])[len(runs) // 2]
        each = " ".join(f"{r[3] / r[0] * 1e6:.3f}" for r in runs)
        lines.append(
            f"loop={loop} codec={codec} batch_records={args.batch_records or 'fill'} records={records} "
            f"records_per_s={records / wall:,.0f} "
            f"wall_s={wall:.2f} cpu_s={cpu:.2f} cpu_us_per_record={cpu / records * 1e6:.3f} "
            f"fallback_records={fallback} verified_sample={compared} "
            f"system_share={sorted(SYSTEM_SHARE[-len(runs) :])[len(runs) // 2]:.2f} "
            f"page_faults={sorted(FAULTS[-len(runs) :])[len(runs) // 2]}"
            + (f" median_of={len(runs)} each=[{each}]" if len(runs) > 1 else "")
        )
        print(lines[-1], flush=True)
    return lines


def copy_once(
    args: argparse.Namespace,
    source: str,
    target: str,
    src: str,
    codec: str,
    loop: str,
    counts: dict[int, int],
    ranges: list[CopyRange],
    consumer_config: dict[str, Any],
    producer_config: dict[str, Any],
    k: int,
) -> tuple[int, int, float, float, int]:
    """(records, fallback records, wall s, CPU s, records compared) of one copy into a new target topic."""
    dst = f"{src}-{loop}-{k}"
    create(target, dst, args.partitions, codec)
    targeted = [CopyRange(r.source_topic, r.partition, 0, r.end_offset, dst) for r in ranges]
    merging = (batch_queue.MERGE_BELOW_RECORDS, batch_queue.NATIVE_MERGE)
    if loop.startswith("batch"):
        # batch-pymerge: small batches merged in Python; batch-nomerge: not merged (comparisons)
        batch_queue.NATIVE_MERGE = merging[1] and loop != "batch-pymerge"
        batch_queue.MERGE_BELOW_RECORDS = 0 if loop == "batch-nomerge" else merging[0]
        copier: Any = new_batch_copier(consumer_config, producer_config)
        close = copier.close
    elif loop == "native":
        copier = NativeRangeCopier(new_loop(consumer_config, producer_config))
        close = copier.loop.close
    else:
        copier = RangeCopier(Consumer(consumer_config), Producer(producer_config))
        close = copier.consumer.close
    try:
        wall, cpu, progress = measure(copier, targeted)
    finally:
        close()
        batch_queue.MERGE_BELOW_RECORDS, batch_queue.NATIVE_MERGE = merging
    records, fallback = sum(p.records for p in progress), sum(p.fallback_records for p in progress)
    verify_counts(target, dst, args.partitions, counts, f"{loop}/{codec}")
    compared = verify_sample(source, target, src, dst, counts, f"{loop}/{codec}")
    return records, fallback, wall, cpu, compared


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with brokers(args) as (source, target):
        print(
            f"source {source} target {target}: {args.records} records x {args.size} B, {args.partitions} partitions",
            flush=True,
        )
        lines = [line for codec in args.codecs.split(",") for line in run_codec(args, source, target, codec)]
    print("SUMMARY " + " | ".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
