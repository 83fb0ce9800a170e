"""Several copy loops per task: whole partitions per loop, progress in input order, failures raised."""

from __future__ import annotations

import threading

import pytest

from kmirror_engine.copying.ranges import CopyRange
from kmirror_engine.copying.task_threads import copy_in_threads, partition_groups


def rng(partition: int, start: int, end: int) -> CopyRange:
    return CopyRange("src", partition, start, end, "west.src")


def test_partition_groups_keep_partitions_whole_and_balance_them() -> None:
    ranges = [rng(0, 0, 100), rng(1, 0, 60), rng(0, 100, 150), rng(2, 0, 50), rng(3, 0, 10)]
    groups = partition_groups(ranges, 2)
    assert sorted(groups) == [[0, 2], [1, 3, 4]]  # p0: 150 offsets; p1 + p2 + p3: 120
    assert partition_groups(ranges, 8) == [[0, 2], [1], [3], [4]]  # at most one group per partition
    assert partition_groups([rng(0, 0, 5)], 2) == [[0]]


def test_copy_in_threads_returns_progress_in_input_order_from_several_threads() -> None:
    ranges = [rng(p, 0, 10 * (p + 1)) for p in range(4)]
    seen_threads: set[str] = set()

    def copy_group(group: list[CopyRange]) -> list[tuple[int, int]]:
        seen_threads.add(threading.current_thread().name)
        return [(r.partition, r.end_offset) for r in group]

    assert copy_in_threads(ranges, copy_group, 2) == [(0, 10), (1, 20), (2, 30), (3, 40)]
    assert len(seen_threads) == 2


def test_a_failing_loop_fails_the_task_after_the_others_ended() -> None:
    finished: list[int] = []

    def copy_group(group: list[CopyRange]) -> list[int]:
        if any(r.partition == 1 for r in group):
            raise RuntimeError("delivery to west.src[1] failed")
        finished.extend(r.partition for r in group)
        return [r.partition for r in group]

    with pytest.raises(RuntimeError, match=r"west.src\[1\]"):
        copy_in_threads([rng(0, 0, 10), rng(1, 0, 10)], copy_group, 2)
    assert finished == [0]
