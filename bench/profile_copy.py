"""Profile the copy loop alone (no Spark): fill a source topic, copy it with one loop (all
partitions in flight), print the rate, the CPU per record and where it went.

    python bench/profile_copy.py [--records 500000] [--partitions 8] [--size 200]
                                 [--loop python|native] [--no-profile]

`--loop python` (default): one `RangeCopier` under pyinstrument (`--no-profile`: undisturbed).
`--loop native`: one `NativeRangeCopier` (kmirror_engine/copying/native_copy.py); its profile is the loop's
own clock per part (consume, produce, delivery reports, positions) plus the CPU of every
thread of this process by name (/proc/self/task: the caller's thread and librdkafka's).
CPU per record counts all threads of the process (`time.process_time()`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, Producer

from bench.measure import add_fences, copy_configs, count_until_fence, create_topics, produce_parallel
from kmirror_cli.local_brokers import LocalBroker
from kmirror_engine.copying.native_copy import NativeRangeCopier, new_loop
from kmirror_engine.copying.range_copy import RangeCopier
from kmirror_engine.copying.ranges import CopyRange


def thread_cpu() -> dict[str, float]:
    """CPU seconds per thread name of this process (threads of the same name summed)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--loop", choices=("python", "native"), default="python")
    parser.add_argument("--no-profile", action="store_true", help="measure the rate without the profiler")
    args = parser.parse_args()
    nparts = args.partitions
    with LocalBroker("profile-source") as source, LocalBroker("profile-target") as target:
        create_topics(source.bootstrap_servers, ["src"], nparts)
        create_topics(target.bootstrap_servers, ["west.src"], nparts)
        counts = produce_parallel(source.bootstrap_servers, "src", args.records, args.size, nparts, 2)["counts"]
        add_fences(source.bootstrap_servers, "src", nparts)
        consumer_config, producer_config = copy_configs(source.bootstrap_servers, target.bootstrap_servers, "profile")
        ranges = [CopyRange("src", p, 0, counts[p], "west.src") for p in range(nparts)]
        profiler: Any = None
        if args.loop == "native":
            loop = new_loop(consumer_config, producer_config)
            copier: Any = NativeRangeCopier(loop)
        else:
            consumer = Consumer(consumer_config)
            copier = RangeCopier(consumer, Producer(producer_config))
            if not args.no_profile:
                from pyinstrument import Profiler

                profiler = Profiler(interval=0.001)
        threads_before = thread_cpu()
        started, cpu, main_cpu = time.perf_counter(), time.process_time(), time.thread_time()
        if profiler is not None:
            profiler.start()
        progress = copier.copy(ranges)
        if profiler is not None:
            profiler.stop()
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        main_cpu = time.thread_time() - main_cpu
        threads = {name: s - threads_before.get(name, 0.0) for name, s in thread_cpu().items()}
        (loop if args.loop == "native" else consumer).close()
        add_fences(target.bootstrap_servers, "west.src", nparts)
        assert count_until_fence(target.bootstrap_servers, "west.src", nparts) == counts
        copied = sum(p.records for p in progress)
        if profiler is not None:
            print(profiler.output_text(unicode=False, color=False, show_all=False))
        if args.loop == "native" and not args.no_profile:
            timings = loop.timings()
            for part in ("consume", "produce", "poll", "position"):
                print(
                    f"  {part:>8}: {timings[part + '_ns'] / 1e9:6.2f} s wall in the loop thread "
                    f"({timings[part + '_ns'] / copied:,.0f} ns/record)"
                )
        busy = sorted(((s, n) for n, s in threads.items() if s > 0.005), reverse=True)
        print("  CPU by thread: " + ", ".join(f"{n} {s:.2f} s ({s / copied * 1e6:.2f} us/record)" for s, n in busy))
        print(
            f"{args.loop} loop: copied {copied:,} records in {wall:.2f} s: {copied / wall:,.0f} records/s, "
            f"{cpu / copied * 1e6:.2f} us CPU/record in all threads, "
            f"{main_cpu / copied * 1e6:.2f} us in the calling thread (verified)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
