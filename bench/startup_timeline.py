"""Where a `--once` run's start-up goes (issue 47): a timeline of every process of the app, from
the driver's start to the first record a writer task reads.

Two local Apache Kafka brokers, one small source layout (4 topics x 2 partitions, 4,000 records),
then `python -m spark_app --once --master local[*]` per round into new target topics, each under
`strace -f --seccomp-bpf` tracing only process starts, execs, connects and exits (a few hundred
events: the run's own timing barely moves; the start-up of an untraced round is printed beside it).
Printed per round: each process (the driver Python, the JVM, every Python process the JVM starts or
its daemon forks) with when it started, what it runs, when it first connected to a broker of the
source or target, and when it ended, all in seconds from the driver's start; then the first record
read (the sink's batch log) and the run's end.

    .venv/bin/python -m bench.startup_timeline --rounds 2 --copy-loop batch
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from bench.many_topics import _create, _fill
from bench.mirror_bench import load_averages, local_broker
from bench.spark_runs import flow_spec, run_spark_once

_LINE = re.compile(r"^(\d+)\s+(\d+):(\d+):(\d+\.\d+)\s+(.*)$")
_CLONE = re.compile(r"^(clone3?|fork|vfork)\((.*)\)\s+=\s+(\d+)")
_EXEC = re.compile(r'^execve\("([^"]+)", \[(.*?)\](?:, 0x[0-9a-f]+ /\* \d+ vars \*/)?\)\s+=\s+0')
_CONNECT = re.compile(r"^connect\(\d+, \{sa_family=AF_INET6?, sin6?_port=htons\((\d+)\)")
_RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>(.*)$")
_EXIT = re.compile(r"^\+\+\+ exited with (\d+) \+\+\+")


@dataclass
class Process:
    pid: int
    parent: int | None
    started: float
    program: str = ""
    execs: list[tuple[float, str]] = field(default_factory=list)
    first_connect: dict[str, float] = field(default_factory=dict)
    ended: float | None = None


def _seconds(h: str, m: str, s: str) -> float:
    return int(h) * 3600 + int(m) * 60 + float(s)


def _describe(path: str, argv: str) -> str:
    """A short name of what an exec runs: `java <main class>`, `python -m <module>`, or the program."""
    args = re.findall(r'"((?:[^"\\]|\\.)*)"', argv)
    name = Path(path).name
    if name == "java":
        main = next((a for a in args if a.startswith("org.apache.") and not a.startswith("-")), "")
        return f"java {main}".strip()
    if name.startswith("python"):
        if "-m" in args:
            return f"python -m {args[args.index('-m') + 1]}"
        return "python " + " ".join(args[1:3])
    return name + (" " + " ".join(args[1:3]) if len(args) > 1 else "")


def parse_trace(text: str, ports: dict[int, str]) -> dict[int, Process]:
    """The processes of an `strace -f -tt` trace (threads folded into their process)."""
    procs: dict[int, Process] = {}
    owner: dict[int, int] = {}  # thread id -> its process
    unfinished: dict[int, str] = {}  # thread id -> the start of a call another thread's line interrupted
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        tid, at, call = int(m[1]), _seconds(m[2], m[3], m[4]), m[5]
        if call.endswith("<unfinished ...>"):
            unfinished[tid] = call.removesuffix("<unfinished ...>").rstrip()
            continue
        if (r := _RESUMED.match(call)) is not None:
            call = unfinished.pop(tid, r[1] + "(") + r[2]
        pid = owner.get(tid, tid)
        if pid not in procs:
            procs[pid] = Process(pid, None, at)
        proc = procs[pid]
        if (c := _CLONE.match(call)) is not None:
            child = int(c[3])
            if "CLONE_THREAD" in c[2]:
                owner[child] = pid
            elif child not in procs:
                procs[child] = Process(child, pid, at, program=proc.program and f"fork of {proc.program}")
        elif (e := _EXEC.match(call)) is not None:
            proc.program = _describe(e[1], e[2])
            proc.execs.append((at, proc.program))
        elif (k := _CONNECT.match(call)) is not None and int(k[1]) in ports:
            proc.first_connect.setdefault(ports[int(k[1])], at)
        elif _EXIT.match(call) and tid == pid:
            proc.ended = at
    return procs


def _ports(bootstrap: str) -> list[int]:
    return [int(server.rsplit(":", 1)[1]) for server in bootstrap.split(",")]


def timeline(procs: dict[int, Process], t0: float, first_read: float | None) -> list[tuple[float, str]]:
    """Events in time order, seconds from `t0`."""
    events: list[tuple[float, str]] = []
    for p in procs.values():
        what = p.program or "(no exec)"
        events.append((p.started - t0, f"pid {p.pid} starts (parent {p.parent}): {what}"))
        for at, program in p.execs:
            events.append((at - t0, f"pid {p.pid} execs {program}"))
        for role, at in p.first_connect.items():
            events.append((at - t0, f"pid {p.pid} ({what}) first connects to the {role}"))
        if p.ended is not None:
            events.append((p.ended - t0, f"pid {p.pid} ({what}) ends"))
    if first_read is not None:
        events.append((first_read, "first record read by a writer task (batch log)"))
    return sorted(events)


def _run_traced(flow: Path, workdir: Path, trace: Path) -> dict[str, Any]:
    """`run_spark_once` with the app under strace."""
    import bench.spark_runs as runs

    popen = subprocess.Popen
    strace = shutil.which("strace")
    if strace is None:
        raise SystemExit("bench.startup_timeline needs strace (apt-get install strace)")

    def traced(cmd: list[str], **kw: Any) -> Any:
        wrapped = [strace, "-f", "--seccomp-bpf", "-tt", "-qq", "-o", str(trace)]
        wrapped += ["-e", "trace=execve,clone,clone3,fork,vfork,connect,exit_group", *cmd]
        return popen(wrapped, **kw)

    setattr(runs.subprocess, "Popen", traced)  # noqa: B010  # the module run_spark_once starts the app with
    try:
        return run_spark_once(flow, workdir)
    finally:
        setattr(runs.subprocess, "Popen", popen)  # noqa: B010


def _compare(
    confs: list[str], source: str, target: str, topics: str, workdir: Path, round_: int, loop: str, loads: str
) -> None:
    """One untraced run as is, one with `confs` (through PYSPARK_SUBMIT_ARGS, which the app's session
    launch reads): start-up, whole run, peak PSS of all the app's processes and its Python processes."""
    submit = " ".join(f"--conf {conf}" for conf in confs)
    caller = os.environ.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell")  # a caller's own stays, as is and after
    for label, env in (("as is", {}), (submit, {"PYSPARK_SUBMIT_ARGS": f"{submit} {caller}"})):
        with mock.patch.dict(os.environ, env):
            alias = f"c{round_}{'x' if env else 'o'}"
            spark = run_spark_once(flow_spec(source, target, topics, workdir, alias=alias, copy_loop=loop), workdir)
        print(
            f"round {round_ + 1} {label}: start-up {spark['startup_s']:.1f} s, whole {spark['wall_s']:.1f} s, "
            f"peak PSS {spark['pss_app_mib']:.0f} MiB, "
            f"Python worker processes at once (most) {spark['processes']['workers']}; "
            f"load average {loads}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="traced runs (the first may write the JVM class archive)")
    parser.add_argument("--copy-loop", default="batch")
    parser.add_argument("--records", type=int, default=4000)
    parser.add_argument("--broker", default="kafka-4.1")
    parser.add_argument(
        "--compare-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="instead of tracing: per round, an untraced run as is and one with these Spark confs (start-up, peak PSS)",
    )
    args = parser.parse_args(argv)
    run, workdir = uuid.uuid4().hex[:6], Path(tempfile.mkdtemp(prefix="kmirror-startup-"))
    with local_broker(args.broker, "startup-source") as src, local_broker(args.broker, "startup-target") as dst:
        source, target = src.bootstrap_servers, dst.bootstrap_servers
        ports = {**dict.fromkeys(_ports(source), "source"), **dict.fromkeys(_ports(target), "target")}
        names = [f"st-{run}-{i}" for i in range(4)]
        _create(source, names)
        _fill(source, names, args.records, 200)
        for round_ in range(args.rounds):
            loads = load_averages()
            if args.compare_conf:
                _compare(args.compare_conf, source, target, f"st-{run}-.*", workdir, round_, args.copy_loop, loads)
                continue
            flow = flow_spec(source, target, f"st-{run}-.*", workdir, alias=f"s{round_}", copy_loop=args.copy_loop)
            untraced = run_spark_once(flow, workdir)["startup_s"]
            flow = flow_spec(source, target, f"st-{run}-.*", workdir, alias=f"t{round_}", copy_loop=args.copy_loop)
            trace = workdir / f"trace-{round_}.txt"
            started = time.time()
            spark = _run_traced(flow, workdir, trace)
            procs = parse_trace(trace.read_text(), ports)
            t0 = min(p.started for p in procs.values())
            # strace's clock is the wall clock of the day; the batch log's is epoch seconds
            day = started - (started % 86400)
            first_read = spark["start"] - day - t0
            print(
                f"\nround {round_ + 1}: start-up untraced {untraced:.1f} s, traced {spark['startup_s']:.1f} s, "
                f"whole {spark['wall_s']:.1f} s; load average {loads}"
            )
            for at, what in timeline(procs, t0, first_read):
                print(f"{at:7.2f}  {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
