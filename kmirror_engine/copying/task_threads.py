"""Several copy loops per writer task, each on its own source partitions.

One consume->produce loop waits on the brokers more than it computes (measured here: ~45% of
a core at ~100k records/s; two loops in one process ~170k records/s at ~80%: see
docs/performance.md), so a task runs `threads` loops, each with its own consumer and producer,
on disjoint sets of source partitions. All ranges of a partition go to the same loop, in their
input order, so per-partition order is kept exactly as with one loop.

`copy_in_threads(ranges, copy_group, threads)` returns the progress of every range in input
order; when any loop fails it waits for the others to end (their clients stay consistent),
then raises the first failure, so the task fails and Spark retries the batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from kmirror_engine.copying.ranges import CopyRange

Progress = TypeVar("Progress")


def partition_groups(ranges: Sequence[CopyRange], groups: int) -> list[list[int]]:
    """Indexes of `ranges` split into at most `groups` non-empty groups, whole source
    partitions balanced by offsets spanned (largest first onto the lightest group)."""
    by_partition: dict[tuple[str, int], list[int]] = {}
    for index, rng in enumerate(ranges):
        by_partition.setdefault((rng.source_topic, rng.partition), []).append(index)
    sizes = {
        tp: sum(max(0, ranges[i].end_offset - ranges[i].start_offset) for i in idx) for tp, idx in by_partition.items()
    }
    out: list[list[int]] = [[] for _ in range(max(1, min(groups, len(by_partition))))]
    loads = [0] * len(out)
    for tp in sorted(by_partition, key=lambda t: (-sizes[t], t)):
        lightest = loads.index(min(loads))
        out[lightest].extend(by_partition[tp])
        loads[lightest] += sizes[tp]
    return [sorted(group) for group in out if group]


def copy_in_threads(
    ranges: Sequence[CopyRange], copy_group: Callable[[list[CopyRange]], list[Progress]], threads: int
) -> list[Progress]:
    """Run `copy_group` on each partition group (see module doc); progress in input order."""
    groups = partition_groups(ranges, threads)
    if len(groups) <= 1:
        return copy_group(list(ranges))
    results: dict[int, Progress] = {}
    failures: list[BaseException] = []

    def run(group: list[int]) -> None:
        try:
            for index, progress in zip(group, copy_group([ranges[i] for i in group]), strict=True):
                results[index] = progress
        except BaseException as exc:  # handed to the task's thread, which raises it
            failures.append(exc)

    # daemon: a worker process Spark stops (query stopped, task killed) must not wait for them
    workers = [
        threading.Thread(target=run, args=(g,), name=f"kmirror-copy-{n}", daemon=True) for n, g in enumerate(groups[1:])
    ]
    for worker in workers:
        worker.start()
    run(groups[0])  # the task's own thread copies the first group
    for worker in workers:
        worker.join()
    if failures:
        raise failures[0]
    return [results[i] for i in range(len(ranges))]
