"""Driver-side planning of the stream reader with fake admin clients: initial offsets,
admission control, Trigger.AvailableNow, new partitions, data-loss detection."""

from __future__ import annotations

import pytest

from kmirror.errors import DataLossError
from tests.planner_fakes import FakeAdmin, planner


def test_initial_offsets_create_target_topics_and_admission_control_caps_batches() -> None:
    source = FakeAdmin({"orders": [(10, 1010), (0, 100)], "other": [(0, 5)]})
    p = planner(source, max_records_per_trigger=500, max_records_per_task=250)
    start = p.initial_offsets()
    assert start == {("orders", 0): 10, ("orders", 1): 0}
    assert set(p.target_topics.target_admin.logs) == {"west.orders"}
    end = p.next_end(start, 500)
    assert end == {("orders", 0): 465, ("orders", 1): 45}
    tasks = p.plan(start, end)
    assert sorted(
        (r.source_topic, r.partition, r.start_offset, r.end_offset, r.target_topic) for t in tasks for r in t
    ) == [
        ("orders", 0, 10, 465, "west.orders"),  # never split: see ranges.plan_tasks
        ("orders", 1, 0, 45, "west.orders"),
    ]


def test_latest_starting_offsets_and_new_partitions_start_at_their_log_start() -> None:
    source = FakeAdmin({"orders": [(0, 100)]})
    p = planner(source, starting_offsets="latest")
    start = p.initial_offsets()
    assert start == {("orders", 0): 100}
    assert p.next_end(start, None) == start  # nothing new: no batch
    source.logs["new"] = [(7, 9), (0, 0)]
    end = p.next_end(start, None)
    assert end == {("orders", 0): 100, ("new", 0): 9}  # the empty new partition waits for records
    [[rng]] = p.plan(start, end)
    assert (rng.source_topic, rng.start_offset, rng.end_offset) == ("new", 7, 9)


def test_available_now_never_passes_the_end_seen_at_start() -> None:
    source = FakeAdmin({"orders": [(0, 100)]})
    p = planner(source)
    p.freeze()
    source.logs["orders"] = [(0, 500)]
    source.logs["new"] = [(0, 50)]
    assert p.next_end({("orders", 0): 0}, None) == {("orders", 0): 100}


def test_data_loss_fails_naming_topic_partition_and_lost_range() -> None:
    source = FakeAdmin({"orders": [(120, 200)]})
    with pytest.raises(DataLossError, match=r"data loss on orders\[0\]: offsets 100..119 were deleted from 'west'"):
        planner(source).plan({("orders", 0): 100}, {("orders", 0): 200})


def test_data_loss_tolerated_skips_forward_and_counts() -> None:
    source = FakeAdmin({"orders": [(120, 200)]})
    p = planner(source, fail_on_data_loss=False)
    [[rng]] = p.plan({("orders", 0): 100}, {("orders", 0): 200})
    assert (rng.start_offset, rng.end_offset, p.skipped_records) == (120, 200, 20)
