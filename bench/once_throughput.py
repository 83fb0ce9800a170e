"""`--once` throughput of the whole app (issue 3's figure): N records of SIZE bytes in P
partitions on one local tansu broker, mirrored to another by `python -m spark_app --once
--master local[*]` with the default flow options, verified by consuming the target.

    python bench/once_throughput.py [--records 1000000] [--size 200] [--partitions 8]

Prints one JSON line: copy window (first record read -> last delivery, from the sink's batch
log), records/s in it, whole-process wall time, start-up, batches, peak RSS, load averages.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import add_fences, count_until_fence, create_topics, produce_parallel
from bench.spark_runs import flow_spec, run_spark_once
from kmirror_cli.local_brokers import LocalBroker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=8)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="kmirror-once-bench-"))
    src = f"bench-src-{uuid.uuid4().hex[:6]}"
    with LocalBroker("once-bench-source") as source, LocalBroker("once-bench-target") as target:
        create_topics(source.bootstrap_servers, [src], args.partitions)
        filled = produce_parallel(source.bootstrap_servers, src, args.records, args.size, args.partitions, 2)
        add_fences(source.bootstrap_servers, src, args.partitions)  # tansu hides each partition's newest batch
        load_before = os.getloadavg()
        run = run_spark_once(flow_spec(source.bootstrap_servers, target.bootstrap_servers, src, workdir), workdir)
        load_after = os.getloadavg()
        add_fences(target.bootstrap_servers, f"west.{src}", args.partitions)
        counted = count_until_fence(target.bootstrap_servers, f"west.{src}", args.partitions)
    if counted != filled["counts"]:
        raise SystemExit(f"target does not match the source: expected {filled['counts']}, counted {counted}")
    copy_s = run["end"] - run["start"]
    print(
        json.dumps(
            {
                "records": args.records,
                "size": args.size,
                "partitions": args.partitions,
                "verified": True,
                "copy_s": round(copy_s, 2),
                "records_per_s": round(args.records / copy_s),
                "wall_s": round(run["wall_s"], 1),
                "startup_s": round(run["startup_s"], 1),
                "batches": run["batches"],
                "rss_mib": {k: round(v) for k, v in run["rss"].items()},
                "load_before": [round(x, 1) for x in load_before],
                "load_after": [round(x, 1) for x in load_after],
                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
