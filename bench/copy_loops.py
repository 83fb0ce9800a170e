"""How copy loops scale inside one process (no Spark): fill a source topic, then copy it with
1..N `RangeCopier` loops in threads of this process, each with its own consumer and producer on
disjoint partitions (what a writer task does, `kmirror_engine.copying.task_threads`). Prints records/s,
the process's CPU and CPU per record for each N; every copy is verified.

    python bench/copy_loops.py [--records 800000] [--partitions 8] [--loops 1,2,3,4]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, Producer

from bench.measure import add_fences, copy_configs, count_until_fence, create_topics, produce_parallel
from kmirror_cli.local_brokers import LocalBroker
from kmirror_engine.copying.range_copy import RangeCopier
from kmirror_engine.copying.ranges import CopyRange
from kmirror_engine.observability.progress import PartitionProgress


def copy_with_loops(source: str, target: str, dst: str, counts: dict[int, int], loops: int) -> tuple[float, float]:
    """Copy every partition of "src" into `dst` with `loops` threads; returns (wall s, CPU s)."""
    copiers = []
    for _ in range(loops):
        consumer_config, producer_config = copy_configs(source, target, "copy-loops")
        consumer, producer = Consumer(consumer_config), Producer(producer_config)
        producer.list_topics(dst, 10)  # connected and metadata known before the clock starts
        copiers.append(RangeCopier(consumer, producer))
    results: list[list[PartitionProgress]] = []

    def run(k: int) -> None:
        results.append(copiers[k].copy([CopyRange("src", p, 0, counts[p], dst) for p in sorted(counts)[k::loops]]))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(loops)]
    started, cpu = time.perf_counter(), time.process_time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    for copier in copiers:
        copier.consumer.close()
    if sum(p.records for r in results for p in r) != sum(counts.values()):
        raise SystemExit(f"{loops} loops: a copy loop failed (see the errors above)")
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=800_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--loops", default="1,2,3,4", help="comma-separated loop counts to measure")
    args = parser.parse_args()
    nparts = args.partitions
    with LocalBroker("loops-source") as source, LocalBroker("loops-target") as target:
        src, dst = source.bootstrap_servers, target.bootstrap_servers
        create_topics(src, ["src"], nparts)
        counts = produce_parallel(src, "src", args.records, args.size, nparts, 2)["counts"]
        add_fences(src, "src", nparts)
        for loops in (int(n) for n in args.loops.split(",")):
            topic = f"west.src-{loops}"
            create_topics(dst, [topic], nparts)
            wall, cpu = copy_with_loops(src, dst, topic, counts, loops)
            add_fences(dst, topic, nparts)
            if count_until_fence(dst, topic, nparts) != counts:
                raise SystemExit(f"{loops} loops: output does not match the source")
            print(
                f"{loops} loop(s): {args.records / wall:,.0f} records/s, process CPU {cpu / wall:.0%} of a core, "
                f"{cpu / args.records * 1e6:.2f} us CPU/record (verified)",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
