"""Profile the copy loop alone (no Spark): fill a source topic, copy it with one RangeCopier
(all partitions in flight) under pyinstrument, print the rate and the profile.

    python bench/profile_copy.py [--records 500000] [--partitions 8] [--size 200]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, Producer
from pyinstrument import Profiler

from bench.measure import SAFE_PRODUCER, add_fences, count_until_fence, create_topics, produce_parallel
from kmirror.local_brokers import LocalBroker
from spark_app.copy import CONSUMER_REQUIRED, CONSUMER_TUNING, PRODUCER_TUNING, CopyRange, RangeCopier


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--no-profile", action="store_true", help="measure the rate without the profiler")
    args = parser.parse_args()
    nparts = args.partitions
    with LocalBroker("profile-source") as source, LocalBroker("profile-target") as target:
        create_topics(source.bootstrap_servers, ["src"], nparts)
        create_topics(target.bootstrap_servers, ["west.src"], nparts)
        counts = produce_parallel(source.bootstrap_servers, "src", args.records, args.size, nparts, 2)["counts"]
        add_fences(source.bootstrap_servers, "src", nparts)
        consumer = Consumer({"bootstrap.servers": source.bootstrap_servers, "group.id": "profile",
                             "isolation.level": "read_committed", **CONSUMER_TUNING, **CONSUMER_REQUIRED})  # fmt: skip
        producer = Producer({"bootstrap.servers": target.bootstrap_servers, **PRODUCER_TUNING, **SAFE_PRODUCER})
        ranges = [CopyRange("src", p, 0, counts[p], "west.src") for p in range(nparts)]
        profiler = Profiler(interval=0.001)
        started, cpu, main_cpu = time.perf_counter(), time.process_time(), time.thread_time()
        if not args.no_profile:
            profiler.start()
        progress = RangeCopier(consumer, producer).copy(ranges)
        if not args.no_profile:
            profiler.stop()
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        main_cpu = time.thread_time() - main_cpu
        consumer.close()
        add_fences(target.bootstrap_servers, "west.src", nparts)
        assert count_until_fence(target.bootstrap_servers, "west.src", nparts) == counts
        copied = sum(p.records for p in progress)
        if not args.no_profile:
            print(profiler.output_text(unicode=False, color=False, show_all=False))
        print(f"copied {copied:,} records in {wall:.2f} s: {copied / wall:,.0f} records/s, "
              f"{cpu / copied * 1e6:.2f} us CPU/record in all threads, "
              f"{main_cpu / copied * 1e6:.2f} us in the Python thread")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
