"""Pure offset-range planning: admission control, splitting, task balancing, offset JSON."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kmirror_engine.planning.ranges import (
    OffsetRange,
    admit,
    group_into_tasks,
    offsets_from_json,
    offsets_to_json,
    plan_tasks,
    split_range,
)


def rng(topic: str, partition: int, start: int, end: int) -> OffsetRange:
    return OffsetRange(topic, partition, start, end, f"src.{topic}")


def test_offsets_json_round_trip_uses_string_partitions() -> None:
    offsets = {("orders", 0): 5, ("orders", 10): 7, ("pay", 1): 0}
    raw = offsets_to_json(offsets)
    assert raw == {"orders": {"0": 5, "10": 7}, "pay": {"1": 0}}
    assert offsets_from_json(raw) == offsets
    assert offsets_from_json(None) == {} and offsets_from_json({}) == {}


def test_admit_everything_under_the_limit() -> None:
    assert admit({("a", 0): 10, ("a", 1): 0}, {("a", 0): 20, ("a", 1): 5}, 100) == {("a", 0): 20, ("a", 1): 5}
    assert admit({("a", 0): 10}, {("a", 0): 20}, None) == {("a", 0): 20}


def test_admit_shares_the_budget_by_backlog_and_keeps_gone_partitions() -> None:
    start = {("a", 0): 0, ("a", 1): 0, ("gone", 0): 42}
    end = admit(start, {("a", 0): 900, ("a", 1): 100}, 100)
    assert end == {("a", 0): 90, ("a", 1): 10, ("gone", 0): 42}


def test_admit_never_moves_backwards_when_the_end_is_behind() -> None:
    # a stale end offset (e.g. a truncated log) must not rewind the stream
    assert admit({("a", 0): 50}, {("a", 0): 40}, 10) == {("a", 0): 50}


@given(
    st.dictionaries(
        st.tuples(st.sampled_from("abc"), st.integers(0, 5)),
        st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)),
        min_size=1,
    ),
    st.integers(1, 10**6),
)
def test_admit_respects_limit_and_bounds(parts: dict[tuple[str, int], tuple[int, int]], limit: int) -> None:
    start = {tp: s for tp, (s, _) in parts.items()}
    available = {tp: s + n for tp, (s, n) in parts.items()}
    end = admit(start, available, limit)
    assert set(end) == set(start)
    assert all(start[tp] <= end[tp] <= available[tp] for tp in start)
    admitted = sum(end[tp] - start[tp] for tp in start)
    assert admitted == min(limit, sum(n for _, n in parts.values()))


def test_split_range_in_order_without_gaps() -> None:
    pieces = split_range(rng("a", 0, 10, 35), 10)
    assert [(p.start_offset, p.end_offset) for p in pieces] == [(10, 20), (20, 30), (30, 35)]
    assert split_range(rng("a", 0, 10, 20), 10) == [rng("a", 0, 10, 20)]


def test_group_into_tasks_balances_by_size_and_drops_empty() -> None:
    ranges = [rng("a", 0, 0, 100), rng("a", 1, 0, 60), rng("a", 2, 0, 50), rng("a", 3, 0, 0)]
    tasks = group_into_tasks(ranges, 2)
    loads = sorted(sum(r.size for r in t) for t in tasks)
    assert loads == [100, 110]
    assert all(r.size > 0 for t in tasks for r in t)
    assert group_into_tasks([rng("a", 0, 0, 5)], 8) == [(rng("a", 0, 0, 5),)]


def test_plan_tasks_never_spreads_a_partition_over_concurrent_tasks() -> None:
    # tasks of a batch run concurrently: two writing one partition would reorder its records
    assert plan_tasks([rng("a", 0, 0, 1000)], task_count=2, max_records_per_task=250) == [(rng("a", 0, 0, 1000),)]
    tasks = plan_tasks(
        [rng("a", 0, 100, 300), rng("a", 0, 0, 100), rng("a", 1, 0, 50)], task_count=2, max_records_per_task=250
    )
    assert sorted(tasks, key=len) == [(rng("a", 1, 0, 50),), (rng("a", 0, 0, 100), rng("a", 0, 100, 300))]


def test_plan_tasks_balances_whole_partitions_and_adds_tasks_for_the_cap() -> None:
    eight = [rng("a", p, 0, 100) for p in range(8)]
    assert sorted(len(t) for t in plan_tasks(eight, task_count=2, max_records_per_task=1000)) == [4, 4]
    assert sorted(len(t) for t in plan_tasks(eight, task_count=2, max_records_per_task=200)) == [2, 2, 2, 2]


def test_plan_tasks_keeps_partitions_whole_for_exactly_once() -> None:
    tasks = plan_tasks(
        [rng("a", 0, 0, 1000), rng("a", 1, 0, 10)], task_count=4, max_records_per_task=100, keep_partitions_whole=True
    )
    assert sorted((r for task in tasks for r in task), key=lambda r: r.partition) == [
        rng("a", 0, 0, 1000),
        rng("a", 1, 0, 10),
    ]
    assert len(tasks) == 2


def test_range_rows_match_the_schema_order() -> None:
    assert rng("a", 3, 1, 2).as_row() == ("a", 3, 1, 2, "src.a")


def test_plan_tasks_keeps_each_small_topic_in_one_task() -> None:
    """400 small topics over 2 tasks: each task writes half the topics, not a partition of each
    (every task pays per topic it writes), and the load stays balanced."""
    ranges = [rng(f"t{i:04d}", p, 0, 10) for i in range(400) for p in range(2)]
    tasks = plan_tasks(ranges, task_count=2, max_records_per_task=1_000_000)
    topics = [{r.source_topic for r in task} for task in tasks]
    assert len(tasks) == 2 and not topics[0] & topics[1]
    assert sorted(sum(r.size for r in task) for task in tasks) == [4_000, 4_000]
    assert sorted((r for task in tasks for r in task), key=lambda r: (r.source_topic, r.partition)) == ranges


def test_plan_tasks_still_spreads_the_partitions_of_a_large_topic() -> None:
    ranges = [rng("big", p, 0, 1000) for p in range(8)] + [rng(f"small{i}", 0, 0, 10) for i in range(3)]
    tasks = plan_tasks(ranges, task_count=2, max_records_per_task=1_000_000)
    assert sorted(sum(1 for r in task if r.source_topic == "big") for task in tasks) == [4, 4]
