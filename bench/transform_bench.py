"""The transform path (records through Spark, issue 18) next to the copy path, in one run: the
same N records of SIZE bytes in P partitions on a local tansu broker, mirrored to another by
`python -m spark_app --once --master local[*]` twice, once as is (copy path) and once with a
transform that keeps every record (`SELECT * FROM records WHERE value IS NOT NULL`: the rows
still cross Python -> JVM -> Python as Arrow), each verified by consuming the target.

    python bench/transform_bench.py [--records 300000] [--size 200] [--partitions 4]

Prints one JSON line: records/s in each path's copy window (first read -> last delivery, from
the batch log), whole-process seconds, and the transform/copy ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import add_fences, count_until_fence, create_topics, produce_parallel
from bench.spark_runs import flow_spec, run_spark_once
from kmirror_cli.local_brokers import LocalBroker

KEEP_ALL = "SELECT * FROM records WHERE value IS NOT NULL"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=200, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="kmirror-transform-bench-"))
    src = f"bench-src-{uuid.uuid4().hex[:6]}"
    out: dict[str, object] = {"records": args.records, "size": args.size, "partitions": args.partitions}
    with LocalBroker("transform-bench-source") as source, LocalBroker("transform-bench-target") as target:
        create_topics(source.bootstrap_servers, [src], args.partitions)
        filled = produce_parallel(source.bootstrap_servers, src, args.records, args.size, args.partitions, 2)
        add_fences(source.bootstrap_servers, src, args.partitions)  # tansu hides each partition's newest batch
        paths = {"copy": ("west", {}), "transform": ("wtx", {"transform": {"sql": KEEP_ALL}})}
        for name, (alias, options) in paths.items():
            flow = flow_spec(
                source.bootstrap_servers,
                target.bootstrap_servers,
                src,
                workdir,
                alias=alias,
                emit_checkpoints=False,
                **options,
            )
            load = os.getloadavg()[0]
            run = run_spark_once(flow, workdir)
            add_fences(target.bootstrap_servers, f"{alias}.{src}", args.partitions)
            counted = count_until_fence(target.bootstrap_servers, f"{alias}.{src}", args.partitions)
            # the source's fences are mirrored too (one per partition)
            expected = {p: n + 1 for p, n in filled["counts"].items()}
            if counted != expected and counted != filled["counts"]:
                raise SystemExit(f"{name}: target does not match the source: expected {expected}, counted {counted}")
            window_s = run["end"] - run["start"]
            out[name] = {
                "records_per_s": round(args.records / window_s),
                "copy_window_s": round(window_s, 1),
                "load_avg_1m_before": round(load, 1),
            }
    copy, transform = out["copy"], out["transform"]
    assert isinstance(copy, dict) and isinstance(transform, dict)
    out["transform_to_copy_ratio"] = round(transform["records_per_s"] / copy["records_per_s"], 3)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
