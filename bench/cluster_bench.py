"""Cluster contender (issue 42): the app `--once` on a Spark standalone cluster, one worker vs two.

    python bench/cluster_bench.py [--records 300000] [--size 200] [--partitions 8]
                                  [--copy-loop batch] [--broker kafka-4.1]

The same produced source topic is mirrored twice by `spark-submit --master spark://...
--deploy-mode client scripts/kmirror_main.py --once` (as EKS and EMR submit it), on the
loopback cluster of tests/cluster/standalone.py (master and workers from the installed pyspark,
the deployments' executor confs: executors of one core, no dynamic allocation, authenticated and
encrypted RPC): first with ONE worker (one executor of one core), then with a second worker
added (two executors of one core each; every worker offers one core). Both runs plan the same
tasks (`spark.default.parallelism` = 2) and the driver waits until every executor of the run
has registered before its first batch (`spark.scheduler.minRegisteredResourcesRatio` = 1), so
the second run really has two executors to spread its tasks over.

Figures of each run:
- records/s: records / (first record read -> last delivery acknowledged), from the sink's batch
  log (KMIRROR_BATCH_LOG, written by the driver-side commit), as bench/spark_runs.py times `spark`;
- CPU microseconds per record: user + system CPU (all threads) over that same window of the
  driver's process tree (spark-submit's JVM, the Python driver, the Python workers that JVM
  forks) and of every executor's tree (the executor JVM, its Python daemon and workers), read
  from /proc/<pid>/stat every 100 ms (`ClusterCpuSampler`); the master and worker daemons'
  own CPU is shown apart and not counted in the per-record figure;
- the scale-out ratio: records/s with two workers / with one (and the CPU per record ratio).
Each output topic is checked (counts per partition and a record-by-record sample,
bench/verify.py) before its figure counts. One run each: no timed assertion anywhere.

On a machine with fewer cores than the two executors plus the driver and the brokers need (the
2-core test machines), two workers cannot truly run in parallel: the ratio measured there is a
floor of what two hosts give, and the output says so with the core count and the load averages.
The last line is `RESULT cluster_one=<n>/s cluster_two=<n>/s scale_out=<x>
cpu_us_per_record_one=<x> cpu_us_per_record_two=<x> cores=<n> load=<1-min load at the end>`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import _cmdline, _descendants, add_fences, create_topics, process_cpu_s, produce_parallel
from bench.spark_runs import flow_spec
from bench.verify import verify_counts, verify_sample
from tests.cluster.standalone import StandaloneCluster, has_java

ROOT = Path(__file__).resolve().parent.parent
ENTRY = str(ROOT / "scripts" / "kmirror_main.py")  # what the EKS image and the EMR step submit
APP_KINDS = ("driver_jvm", "driver_python", "executor_jvm", "executor_python")
TASKS = 2  # tasks per batch in both runs (spark.default.parallelism)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=200, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--producer-procs", type=int, default=2, help="processes filling the source")
    parser.add_argument("--copy-loop", choices=("native", "python", "batch"), default="batch")
    parser.add_argument(
        "--broker", choices=("kafka-4.1", "kafka-3.9", "tansu"), default="kafka-4.1", help="the two local clusters"
    )
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds one --once run may take (hang guard)")
    args = parser.parse_args(argv)
    if args.records < args.partitions:
        parser.error(f"--records {args.records}: give at least one record per partition ({args.partitions})")
    return args


def cluster_kind(pid: int, cmdline: str, daemons: set[int]) -> str | None:
    """Which part of the cluster app a process is, by its program (None: not final yet, the
    launcher scripts exec java and the JVM spawns Python through jspawnhelper): the master and
    worker daemons themselves, an executor JVM, the Python under an executor, or the driver's."""
    if pid in daemons:
        return "daemon"
    program = os.path.basename(cmdline.split(" ", 1)[0])
    if program == "java":
        return "executor_jvm" if "CoarseGrainedExecutorBackend" in cmdline else "driver_jvm"
    if program.startswith("python"):
        return "python"  # the sampler names it executor_python or driver_python by its tree
    return None


Sample = tuple[float, dict[int, tuple[str, float]]]


def cpu_in_window(series: Iterable[Sample], start: float, end: float) -> dict[str, float]:
    """CPU seconds per kind used in [start, end]: each process's cumulative CPU at its last
    sample before `end` minus at its last sample before `start` (0 when first seen after
    `start`: it was started inside the window). Same rule as bench.measure.RssSampler."""
    before: dict[int, float] = {}
    at_end: dict[int, tuple[str, float]] = {}
    for t, cpus in series:
        if t <= start:
            before.update((pid, cpu) for pid, (_, cpu) in cpus.items())
        if t <= end:
            at_end.update(cpus)
    out = dict.fromkeys((*APP_KINDS, "daemon"), 0.0)
    for pid, (kind, cpu) in at_end.items():
        out[kind] += cpu - before.get(pid, 0.0)
    return out


@dataclass
class ClusterCpuSampler:
    """Cumulative CPU of every process under the driver (spark-submit) and the Spark daemons,
    sampled every `interval_s`, each process with its kind (`cluster_kind`)."""

    driver: int
    daemons: set[int]
    interval_s: float = 0.1
    series: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _sample(self, kinds: dict[int, str]) -> dict[int, tuple[str, float]]:
        cpus: dict[int, tuple[str, float]] = {}
        for root in (self.driver, *sorted(self.daemons)):
            side = "driver" if root == self.driver else "executor"
            for pid in _descendants(root):
                if pid not in kinds:
                    try:
                        kind = cluster_kind(pid, _cmdline(pid), self.daemons)
                    except OSError:
                        continue
                    if kind is None:
                        continue
                    kinds[pid] = f"{side}_python" if kind == "python" else kind
                cpu = process_cpu_s(pid)
                if cpu is not None:
                    cpus[pid] = (kinds[pid], cpu)
        return cpus

    def _run(self) -> None:
        kinds: dict[int, str] = {}
        while not self._stop.wait(self.interval_s):
            self.series.append((time.time(), self._sample(kinds)))

    def start(self) -> ClusterCpuSampler:
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()


def read_batches(batch_log: Path) -> tuple[float, float, int, int]:
    """(first record read, last delivery acknowledged, batches, records copied: the data and the
    verification's end markers) of a --once run's batch log."""
    batches = [json.loads(line) for line in batch_log.read_text().splitlines()] if batch_log.exists() else []
    reads = [b["first_read_ms"] for b in batches if b["first_read_ms"] is not None]
    if not reads:
        raise RuntimeError(f"the app copied nothing (no batch with records in {batch_log})")
    copied = sum(b["records"] for b in batches)
    return min(reads) / 1000, max(b["last_delivery_ms"] for b in batches) / 1000, len(batches), copied


def executors_seen(series: Iterable[Sample]) -> int:
    """How many executor JVMs the run had (distinct pids sampled)."""
    return len({pid for _, cpus in series for pid, (kind, _) in cpus.items() if kind == "executor_jvm"})


def finished_tasks(stderr_text: str) -> int:
    """Tasks an executor's stderr shows finished ("Finished task 0.0 in stage 3.0 (TID 7)")."""
    return len(re.findall(r"Finished task \S+ in stage \S+ \(TID \d+\)", stderr_text))


def tasks_per_executor(stderr_paths: Iterable[Path]) -> list[int]:
    """Finished tasks of each executor of a run (its executors' stderr files), largest first."""
    return sorted((finished_tasks(p.read_text(errors="replace")) for p in stderr_paths), reverse=True)


def figures(records: int, start: float, end: float, cpu_s: dict[str, float]) -> dict[str, Any]:
    """One run's records/s and CPU microseconds per record (the app's kinds, daemons apart)."""
    if end <= start:
        raise ValueError(f"copy window {start}..{end}: the last delivery is not after the first read")
    app_cpu = sum(cpu_s.get(kind, 0.0) for kind in APP_KINDS)
    return {
        "rate": records / (end - start),
        "copy_s": end - start,
        "cpu_s": cpu_s,
        "cpu_us_per_record": app_cpu / records * 1e6,
        "cores_used": app_cpu / (end - start),  # the app's average share of the machine over the window
        "daemon_cpu_s": cpu_s.get("daemon", 0.0),
    }


def scale_out(one: dict[str, Any], two: dict[str, Any]) -> dict[str, float]:
    """Two workers against one: the records/s ratio (the contract) and the CPU-per-record ratio."""
    return {"rate": two["rate"] / one["rate"], "cpu": two["cpu_us_per_record"] / one["cpu_us_per_record"]}


def result_line(one: dict[str, Any], two: dict[str, Any], cores: int, load: float) -> str:
    ratio = scale_out(one, two)
    return (
        f"RESULT cluster_one={one['rate']:.0f}/s cluster_two={two['rate']:.0f}/s scale_out={ratio['rate']:.2f}"
        f" cpu_us_per_record_one={one['cpu_us_per_record']:.2f} cpu_us_per_record_two={two['cpu_us_per_record']:.2f}"
        f" cores={cores} load={load:.2f}"
    )


def submit_confs() -> dict[str, str]:
    """The run's confs on top of the deployments' (StandaloneCluster.submit_command): the same
    tasks in both runs, and every executor registered before the first batch."""
    return {
        "spark.default.parallelism": str(TASKS),
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "300s",
    }


def run_once(cluster: StandaloneCluster, flow: Path, workdir: Path, records: int, timeout_s: float) -> dict[str, Any]:
    """spark-submit the app --once on the cluster as it is now; its figures (`figures`)."""
    tag = f"{cluster.workers}w"
    batch_log, log = workdir / f"batches-{tag}.jsonl", workdir / f"app-{tag}.log"
    env = {**cluster.env(), "KMIRROR_BATCH_LOG": str(batch_log)}
    command = cluster.submit_command(ENTRY, "--flow", str(flow), "--once", confs=submit_confs())
    daemons = {d.proc.pid for d in [cluster.master, *cluster.worker_daemons] if d is not None and d.alive}
    logs_before = set(cluster.base.glob("work/*/app-*/*/stderr"))
    started, load_before = time.time(), os.getloadavg()[0]
    with log.open("wb") as out:
        app = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True)
    sampler = ClusterCpuSampler(app.pid, daemons).start()
    try:
        code = app.wait(timeout_s)
    finally:
        sampler.stop()
        if app.poll() is None:
            app.kill()
    if code != 0:
        raise RuntimeError(f"the app exited {code} on {tag}; see {log}:\n{log.read_text()[-3000:]}")
    start, end, batches, copied = read_batches(batch_log)
    if copied < records:
        raise RuntimeError(f"the app copied {copied} records of {records} on {tag}; see {batch_log}")
    result = figures(copied, start, end, cpu_in_window(sampler.series, start, end))
    result.update(
        workers=cluster.workers,
        executors=executors_seen(sampler.series),
        tasks_per_executor=tasks_per_executor(set(cluster.base.glob("work/*/app-*/*/stderr")) - logs_before),
        batches=batches,
        startup_s=start - started,
        wall_s=time.time() - started,
        load=(load_before, os.getloadavg()[0]),
        log=str(log),
    )
    return result


def _cpu_of(kind: str) -> Any:
    return lambda r: f"{r['cpu_s'][kind]:.2f}"


def print_side_by_side(one: dict[str, Any], two: dict[str, Any], cores: int) -> None:
    rows = [
        ("records/s", lambda r: f"{r['rate']:,.0f}"),
        ("copy window s", lambda r: f"{r['copy_s']:.2f}"),
        ("CPU us/record (app)", lambda r: f"{r['cpu_us_per_record']:.2f}"),
        *[(f"  CPU s {kind}", _cpu_of(kind)) for kind in APP_KINDS],
        ("  CPU s daemons (not counted)", lambda r: f"{r['daemon_cpu_s']:.2f}"),
        ("cores used (app CPU s / window s)", lambda r: f"{r['cores_used']:.2f}"),
        ("executors", lambda r: str(r["executors"])),
        ("tasks finished per executor", lambda r: "/".join(map(str, r["tasks_per_executor"])) or "-"),
        ("batches", lambda r: str(r["batches"])),
        ("start-up s (submit -> first read)", lambda r: f"{r['startup_s']:.1f}"),
        ("wall s (whole --once)", lambda r: f"{r['wall_s']:.1f}"),
        ("load 1-min before/after", lambda r: "{:.2f}/{:.2f}".format(*r["load"])),
    ]
    print(f"{'':36}{'one worker':>16}{'two workers':>16}")
    for name, show in rows:
        print(f"{name:36}{show(one):>16}{show(two):>16}")
    ratio = scale_out(one, two)
    print(f"scale-out two/one: records/s x{ratio['rate']:.2f}, CPU per record x{ratio['cpu']:.2f}")
    if cores < 2 * 1 + 2:
        print(
            f"note: this machine has {cores} cores for the driver, two executors (1 core each), their Python"
            " workers and both brokers: two workers cannot truly run side by side here, so this ratio is what"
            " was measured on shared cores, not what two hosts give. 'cores used' shows how much CPU the"
            " app got: a run that got less than one core's worth could not show scale-out at all."
        )


def main(argv: list[str] | None = None) -> int:
    from bench.mirror_bench import local_broker  # the same clusters as the main benchmark

    args = parse_args(argv)
    if not has_java():
        raise SystemExit("cluster_bench: no java on PATH and no JAVA_HOME: the Spark standalone cluster needs one")
    run, nparts = uuid.uuid4().hex[:6], args.partitions
    workdir = Path(tempfile.mkdtemp(prefix="kmirror-cluster-bench-"))
    src, cores = f"bench-cl-{run}", os.cpu_count() or 1
    print(f"workdir {workdir} (app and Spark logs), {cores} cores, load {os.getloadavg()}", flush=True)
    with local_broker(args.broker, "bench-source") as source_broker, local_broker(args.broker, "bench-target") as tb:
        source, target = source_broker.bootstrap_servers, tb.bootstrap_servers
        create_topics(source, [src], nparts)
        print(f"filling {src}: {args.records:,} x {args.size} B, {nparts} partitions", flush=True)
        expected = produce_parallel(source, src, args.records, args.size, nparts, args.producer_procs)["counts"]
        add_fences(source, src, nparts)
        cluster = StandaloneCluster(workdir / "spark-cluster", workers=1)
        results: dict[int, dict[str, Any]] = {}
        try:
            cluster.start()
            for workers in (1, 2):
                cluster.workers = workers
                cluster.ensure_workers()
                alias = f"w{workers}"
                create_topics(target, [f"{alias}.{src}"], nparts)
                flow = flow_spec(source, target, src, workdir, alias=alias, copy_loop=args.copy_loop)
                print(f"{workers} worker(s): spark-submit --master {cluster.url} --once", flush=True)
                results[workers] = run_once(cluster, flow, workdir, args.records, args.timeout)
                verify_counts(target, f"{alias}.{src}", nparts, expected, alias)
                verify_sample(source, target, src, f"{alias}.{src}", expected, alias)
        finally:
            cluster.stop()
    print_side_by_side(results[1], results[2], cores)
    print(result_line(results[1], results[2], cores, os.getloadavg()[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
