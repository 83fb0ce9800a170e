"""Benchmark building blocks: the records, producers, counting consumers, RSS sampling.

Records are deterministic: record i goes to partition i % partitions, key `key-<i>`, one
header, a value of `size` bytes; the same generator feeds the source and the limit run.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kmirror_engine.copying.ranges import CONSUMER_REQUIRED, CONSUMER_TUNING, PRODUCER_TUNING

SAFE_PRODUCER = {"acks": "all", "enable.idempotence": True, "max.in.flight.requests.per.connection": 5}
FENCE_KEY = b"__bench_fence__"
HEADERS: list[tuple[str, str | bytes | None]] = [("bench-origin", b"mirror_bench")]


def copy_configs(source: str, target: str, group: str, **consumer: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The consumer and producer configs of one copy loop from `source` to `target` as the engine
    sets them up: read_committed with the loop's tuning and required settings, an idempotent
    producer (acks=all) with the loop's tuning; `consumer` adds consumer settings."""
    consumer_config = {
        "bootstrap.servers": source,
        "group.id": group,
        **consumer,
        "isolation.level": "read_committed",
        **CONSUMER_TUNING,
        **CONSUMER_REQUIRED,
    }
    return consumer_config, {"bootstrap.servers": target, **PRODUCER_TUNING, **SAFE_PRODUCER}


def create_topics(bootstrap: str, names: list[str], partitions: int, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive its futures
    for future in admin.create_topics([NewTopic(n, partitions, 1, config=config or {}) for n in names]).values():
        future.result(timeout=30)


def _values(size: int) -> list[bytes]:
    return [bytes((i * 7 + j) % 251 for j in range(size)) for i in range(256)]


def produce_share(
    bootstrap: str,
    topic: str,
    partitions: list[int],
    total: int,
    size: int,
    nparts: int,
    producer_config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Produce this share's records (those whose partition is in `partitions`) as fast as possible
    (`producer_config` overrides the tuning, e.g. `batch.num.messages` for small batches).

    Returns per-partition counts (from delivery reports) and wall clock start/end in seconds.
    Raises on any delivery error.
    """
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_TUNING, **SAFE_PRODUCER, **(producer_config or {})})
    values = _values(size)
    counts = dict.fromkeys(partitions, 0)
    errors: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            counts[msg.partition()] += 1

    started = time.time()
    produce, poll = producer.produce, producer.poll
    for p in partitions:
        for i in range(p, total, nparts):
            while True:
                try:
                    produce(topic, values[i & 255], b"key-%010d" % i, p, on_delivery=delivered, headers=HEADERS)
                    break
                except BufferError:
                    poll(0.05)
            if i % 4096 == p:
                poll(0)
    if producer.flush(120) or errors:
        raise RuntimeError(f"producing {topic} failed: {errors[:3]}")
    return {"counts": counts, "start": started, "end": time.time()}


def produce_parallel(
    bootstrap: str,
    topic: str,
    total: int,
    size: int,
    nparts: int,
    procs: int,
    producer_config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Produce all records with `procs` processes (partitions split between them)."""
    shares = [list(range(nparts))[k::procs] for k in range(procs)]
    with multiprocessing.get_context("spawn").Pool(procs) as pool:
        results = pool.starmap(
            produce_share, [(bootstrap, topic, s, total, size, nparts, producer_config) for s in shares]
        )
    counts: dict[int, int] = {}
    for result in results:
        counts.update(result["counts"])
    return {"counts": counts, "start": min(r["start"] for r in results), "end": max(r["end"] for r in results)}


def add_fences(bootstrap: str, topic: str, nparts: int) -> None:
    """One fence per partition in its own batch, so tansu's watermark exposes all data before it."""
    producer = Producer({"bootstrap.servers": bootstrap, **SAFE_PRODUCER})
    for p in range(nparts):
        producer.produce(topic, b"", FENCE_KEY, p)
    if producer.flush(30):
        raise RuntimeError(f"fences on {topic} not delivered")


def count_until_fence(bootstrap: str, topic: str, nparts: int, timeout_s: float = 300) -> dict[int, int]:
    """Records per partition before the fence (fence and fence-keyed records not counted)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-counter",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            **CONSUMER_TUNING,
            "enable.partition.eof": False,
        }
    )
    counts, done = count_fenced(consumer, [(topic, p) for p in range(nparts)], timeout_s)
    if len(done) < nparts:
        seen = sorted(p for _, p in done)
        raise RuntimeError(f"{topic}: fences seen on {seen} of {nparts} partitions within {timeout_s} s")
    return {p: n for (_, p), n in counts.items()}


def count_fenced(
    consumer: Consumer, partitions: Iterable[tuple[str, int]], timeout_s: float
) -> tuple[dict[tuple[str, int], int], set[tuple[str, int]]]:
    """Records per topic partition before its fence, read by `consumer` (closed after) from offset 0
    (fence-keyed records not counted), and the partitions whose fence it saw within `timeout_s`."""
    counts = dict.fromkeys(partitions, 0)
    consumer.assign([TopicPartition(t, p, 0) for t, p in counts])
    done: set[tuple[str, int]] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(done) < len(counts) and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, timeout=0.5):
                if msg.error():
                    raise KafkaException(msg.error())
                tp = (str(msg.topic()), cast(int, msg.partition()))
                if msg.key() == FENCE_KEY:
                    done.add(tp)
                elif tp not in done:
                    counts[tp] += 1
    finally:
        consumer.close()
    return counts, done


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue  # the process ended while we looked
            tree.setdefault(ppid, []).append(int(entry))
    return tree


def _descendants(root: int) -> Iterator[int]:
    """`root` and every process below it now (from one look at /proc)."""
    tree, todo = _children(), [root]
    while todo:
        pid = todo.pop()
        todo.extend(tree.get(pid, []))
        yield pid


def _cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode(errors="replace")


def _memory_kib(pid: int) -> tuple[str, int, int]:
    """(cmdline, RSS, PSS) of a process in KiB. PSS shares pages between the processes mapping
    them (the pyspark daemon forks its workers, so their RSS counts the same pages many times):
    sums use PSS, single processes RSS."""
    cmdline = _cmdline(pid)
    with open(f"/proc/{pid}/status") as f:
        rss = next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            pss = pss_kib(f.read(), rss)
    except OSError:
        pss = rss
    return cmdline, rss, pss


def pss_kib(smaps_rollup: str, default: int = 0) -> int:
    """The `Pss:` figure (KiB) of a /proc/<pid>/smaps_rollup text (`default` when it has none)."""
    for line in smaps_rollup.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return default


def peak_total(series: list[tuple[float, dict[str, float]]]) -> float:
    """The largest sum over all kinds of one sample's PSS (MiB): the whole app's peak memory, all
    processes at the same moment (not the sum of each kind's own peak)."""
    return max((sum(sums.values()) for _, sums in series), default=0.0)


KINDS = ("jvm", "workers", "driver_python")
_TICK = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process, all its threads (None: it ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _kind(cmdline: str) -> str | None:
    """A process's kind by the program it runs, None while that is not final: the Spark JVM starts
    as pyspark's `spark-submit` shell script (its path names pyspark) and the JVM spawns every
    Python process through `jspawnhelper` (its path names java); both exec the real program in
    the same pid, so a kind read before the exec counted the JVM's CPU as the Python workers' and
    the source runner's as the JVM's."""
    program = os.path.basename(cmdline.split(" ", 1)[0])
    if program == "java":
        return "jvm"
    if not program.startswith("python"):
        return None
    return "workers" if "pyspark" in cmdline else "driver_python"


@dataclass
class RssSampler:
    """Samples the memory of a process tree by kind (JVM, Python workers, driver Python), in MiB:
    `peaks` (sum of PSS over the kind's processes), `largest` (largest single-process RSS) and
    `series` (time, summed PSS of all kinds) to show whether memory stays flat."""

    root_pid: int
    interval_s: float = 0.25
    # CPU is read on its own, every 25 ms (/proc/<pid>/stat only): a copy window is ~1 s, and a
    # 250 ms baseline counted up to 250 ms before the window (the start-up of processes forked
    # just before the first record) as copying CPU
    cpu_interval_s: float = 0.025
    peaks: dict[str, float] = field(default_factory=lambda: dict.fromkeys(KINDS, 0.0))
    largest: dict[str, float] = field(default_factory=lambda: dict.fromkeys(KINDS, 0.0))
    processes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    series: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    cpu_series: list[tuple[float, dict[int, tuple[str, float]]]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def cpu_between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds (all threads) per kind used in [start, end]: each process's cumulative CPU at
        its last sample before `end` minus at its last sample before `start` (0 if it was not seen
        before `start`). A process that ended before `start` adds nothing (it had been counted
        whole: the Spark launcher's JVM went into the JVM's window CPU)."""
        before: dict[int, float] = {}
        at_end: dict[int, tuple[str, float]] = {}
        for t, cpus in self.cpu_series:
            if t <= start:
                before.update((pid, cpu) for pid, (_, cpu) in cpus.items())
            if t <= end:
                at_end.update(cpus)
        out = dict.fromkeys(KINDS, 0.0)
        for pid, (kind, cpu) in at_end.items():
            out[kind] += cpu - before.get(pid, 0.0)
        return out

    def _run_cpu(self) -> None:
        kinds: dict[int, str] = {}
        while not self._stop.wait(self.cpu_interval_s):
            cpus: dict[int, tuple[str, float]] = {}
            for pid in _descendants(self.root_pid):
                if pid not in kinds:
                    try:
                        kind = _kind(_cmdline(pid))
                    except OSError:
                        continue
                    if kind is None:
                        continue  # read again at the next sample; CPU is cumulative over the exec
                    kinds[pid] = kind
                cpu = process_cpu_s(pid)
                if cpu is not None:
                    cpus[pid] = (kinds[pid], cpu)
            self.cpu_series.append((time.time(), cpus))

    def start(self) -> RssSampler:
        threading.Thread(target=self._run, daemon=True).start()
        threading.Thread(target=self._run_cpu, daemon=True).start()
        return self

    def stop(self) -> dict[str, float]:
        self._stop.set()
        return self.peaks

    def between(self, start: float, end: float) -> dict[str, float]:
        """Peak summed PSS per kind over samples taken in [start, end] (wall clock seconds)."""
        out = dict.fromkeys(KINDS, 0.0)
        for t, sums in self.series:
            if start <= t <= end:
                out = {k: max(out[k], sums[k]) for k in KINDS}
        return out

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            sums, counts = dict.fromkeys(KINDS, 0.0), dict.fromkeys(KINDS, 0)
            for pid in _descendants(self.root_pid):
                try:
                    cmdline, rss, pss = _memory_kib(pid)
                except OSError:
                    continue
                kind = _kind(cmdline)
                if kind is None:
                    continue
                sums[kind] += pss / 1024
                counts[kind] += 1
                self.largest[kind] = max(self.largest[kind], rss / 1024)
            self.series.append((time.time(), sums))
            for kind in KINDS:
                self.peaks[kind] = max(self.peaks[kind], sums[kind])
                self.processes[kind] = max(self.processes[kind], counts[kind])
