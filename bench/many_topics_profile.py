"""Profile the many-topics `--once` run (issue 47): two local brokers stay up, both layouts (4 x 2
and N x 2 partitions, the same records) are filled once, then every round mirrors each layout
into new target topics with `python -m spark_app --once`, optionally under py-spy (`--py-spy`:
every Python process of the app, the JVM-started workers included, `py-spy record
--subprocesses`, collapsed stacks per layout and round). Prints each run's whole wall time,
start-up (process start -> first record read by a writer task) and copy window, and the ratio.

    nice -n 19 ionice -c3 .venv/bin/python bench/many_topics_profile.py --topics 2000 --rounds 1 --py-spy
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from bench.many_topics import _create, _fill, mirror_checked
from bench.mirror_bench import load_averages, local_broker
from bench.spark_runs import flow_spec, run_latency

_POPEN = subprocess.Popen


def _launch_in(cwd: Path | None, py_spy_out: Path | None) -> None:
    """Make `run_spark_once` start the app in `cwd` (its code first on the path: another tree's
    `spark_app` and engine, same venv), under py-spy when `py_spy_out` is given."""
    import bench.spark_runs as runs

    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")

    def popen(cmd: list[str], **kw: Any) -> Any:
        if py_spy_out is not None:
            cmd = [
                py_spy,
                "record",
                "--subprocesses",
                "--idle",
                "-r",
                "50",
                "-f",
                "raw",
                "-o",
                str(py_spy_out),
                "--",
                *cmd,
            ]
        return _POPEN(cmd, cwd=cwd, **kw)

    setattr(runs.subprocess, "Popen", popen)  # noqa: B010  # the module run_spark_once starts the app with


def latency_pair(args: argparse.Namespace) -> int:
    """`run_latency` (8 partitions, 15 s measured) once per tree, back to back on the same brokers."""
    run = uuid.uuid4().hex[:6]
    with local_broker("kafka-4.1", "lat-source") as sb, local_broker("kafka-4.1", "lat-target") as tb:
        for round_ in range(args.rounds):
            for index, tree in enumerate(args.tree or ["."]):
                # (no --py-spy here: the run ends the app with SIGTERM, which ends py-spy before it writes;
                # attach `py-spy record --pid <planner or worker> --duration 20` while it runs instead)
                _launch_in(Path(tree).resolve(), None)
                got = run_latency(
                    sb.bootstrap_servers,
                    tb.bootstrap_servers,
                    8,
                    args.latency_rate,
                    15.0,
                    args.size,
                    f"{run}-{round_}-{index}",
                    copy_loop=args.copy_loop,
                )
                got.pop("rss", None)
                print(json.dumps({"round": round_, "tree": tree, **got, "load": load_averages()}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=2000)
    parser.add_argument("--records", type=int, default=40_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--py-spy", action="store_true", help="the last round's runs under py-spy")
    parser.add_argument("--only", choices=("few", "many"), default=None)
    parser.add_argument("--copy-loop", default="batch")
    parser.add_argument(
        "--tree", action="append", default=[], help="run the app from this source tree too (repeatable; default: .)"
    )
    parser.add_argument(
        "--latency-rate", type=int, default=0, help="instead: the streaming latency run at this rate, per tree"
    )
    args = parser.parse_args(argv)
    if args.latency_rate:
        return latency_pair(args)
    run, workdir = uuid.uuid4().hex[:6], Path(tempfile.mkdtemp(prefix="kmirror-many-"))
    print(f"workdir {workdir}", flush=True)
    with local_broker("kafka-4.1", "many-source") as sb, local_broker("kafka-4.1", "many-target") as tb:
        source, target = sb.bootstrap_servers, tb.bootstrap_servers
        layouts = {}
        for label, n in (("few", 4), ("many", args.topics)):
            names = [f"bench-{label}-{run}-{i:05d}" for i in range(n)]
            _create(source, names)
            layouts[label] = (names, _fill(source, names, args.records, args.size))
        print(f"filled; load {load_averages()}", flush=True)
        for round_ in range(args.rounds):
            walls = {}
            runs = [(tree, label) for tree in (args.tree or ["."]) for label in layouts if args.only in (None, label)]
            for index, (tree, label) in enumerate(runs):
                counts = layouts[label][1]
                alias = f"m{label}{round_}t{index}"
                flow = flow_spec(
                    source, target, f"bench-{label}-{run}-.*", workdir, alias=alias, copy_loop=args.copy_loop
                )
                spy = workdir / f"py-spy-{alias}.txt" if args.py_spy and round_ == args.rounds - 1 else None
                _launch_in(Path(tree).resolve(), spy)
                spark, wall = mirror_checked(target, flow, workdir, alias, counts, label)
                walls[(tree, label)] = wall
                copy = spark["end"] - spark["start"]
                print(
                    json.dumps(
                        {
                            "round": round_,
                            "layout": label,
                            "tree": tree,
                            "wall_s": round(wall, 2),
                            "startup_s": round(spark["startup_s"], 2),
                            "copy_s": round(copy, 2),
                            "batches": spark["batches"],
                            "log": spark["log"],
                            "load": load_averages(),
                        }
                    ),
                    flush=True,
                )
            for tree in args.tree or ["."]:
                if (tree, "many") in walls and (tree, "few") in walls:
                    ratio = walls[(tree, "many")] / walls[(tree, "few")]
                    print(f"round {round_} {tree}: ratio {ratio:.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
