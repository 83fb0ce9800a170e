"""A flow's side work (kmirror_engine/side_work.py): which driver tickers its views start, in
which mode, the final checkpoint round of a --once run, and stopping (no clusters: fake parts)."""

from __future__ import annotations

from typing import Any

from kmirror.flow.views import CheckpointSettings, HeartbeatSettings, TopicSyncSettings
from kmirror_engine.side_work import FlowSideWork, SideWorkParts
from tests.planner_fakes import spec


class FakeTicker:
    def __init__(self, name: str, events: list[str]) -> None:
        self.name, self.events = name, events
        events.append(f"start {name}")

    def stop(self) -> None:
        self.events.append(f"stop {self.name}")


def side_work(
    events: list[str], once: bool, heartbeats: bool = True, checkpoints: bool = True, sync: bool = True
) -> Any:
    parts = SideWorkParts(
        heartbeats=lambda: FakeTicker("heartbeats", events),
        idle_checkpoints=lambda: FakeTicker("idle checkpoints", events),
        topic_sync=lambda once: FakeTicker(f"topic sync once={once}", events),
        final_checkpoint=lambda: events.append("final checkpoint round"),
        batch_listeners=lambda: [],
    )
    return FlowSideWork(
        "west->east",
        once,
        HeartbeatSettings(emit=heartbeats, interval_ms=1000),
        CheckpointSettings(
            emit=checkpoints, interval_ms=1000, sync_group_offsets=False, offset_lag_max=100, metrics_port=None
        ),
        TopicSyncSettings(
            configs=sync,
            configs_interval_ms=1000,
            configs_of_existing_topics=False,
            acls=False,
            acls_interval_ms=1000,
            replication_factor=None,
        ),
        parts,
    )


def test_streaming_starts_heartbeats_idle_checkpoints_and_topic_sync_and_stops_them_once() -> None:
    events: list[str] = []
    work = side_work(events, once=False).start()
    assert events == ["start heartbeats", "start idle checkpoints", "start topic sync once=False"]
    work.stop()
    work.stop()  # idempotent: each ticker stopped once
    assert events[3:] == ["stop heartbeats", "stop idle checkpoints", "stop topic sync once=False"]


def test_a_once_run_has_no_idle_checkpoints_and_ends_with_one_checkpoint_round() -> None:
    events: list[str] = []
    work = side_work(events, once=True).start()
    work.finish()
    work.stop()
    assert events == [
        "start heartbeats",
        "start topic sync once=True",
        "final checkpoint round",
        "stop heartbeats",
        "stop topic sync once=True",
    ]


def test_what_the_views_turn_off_is_neither_started_nor_run() -> None:
    events: list[str] = []
    work = side_work(events, once=True, heartbeats=False, checkpoints=False, sync=False).start()
    work.finish()
    work.stop()
    assert events == []
    side_work(events, once=False, heartbeats=False, sync=False).start().stop()
    assert events == ["start idle checkpoints", "stop idle checkpoints"]


def test_a_flows_side_work_is_chosen_by_its_views() -> None:
    flow = spec(emit_heartbeats=False, emit_checkpoints=True, sync_topic_acls=True)
    work = FlowSideWork.for_flow(flow, once=True)
    assert (work.flow_id, work.once) == ("west->east", True)
    assert (work.heartbeats, work.checkpoints, work.topic_sync) == (flow.heartbeats, flow.checkpoints, flow.topic_sync)
    assert not work.heartbeats.emit and work.checkpoints.emit and work.topic_sync.acls
    assert work.tickers == []  # nothing built or started before start()


def test_a_ticker_that_fails_to_start_stops_the_ones_started_before_it() -> None:
    events: list[str] = []
    work = side_work(events, once=False)

    def broken(once: bool) -> Any:
        raise RuntimeError("topic sync cannot reach the target")

    work.parts = SideWorkParts(
        heartbeats=work.parts.heartbeats,
        idle_checkpoints=work.parts.idle_checkpoints,
        topic_sync=broken,
        final_checkpoint=work.parts.final_checkpoint,
        batch_listeners=work.parts.batch_listeners,
    )
    try:
        work.start()
    except RuntimeError as exc:
        assert "cannot reach" in str(exc)
    else:
        raise AssertionError("start() swallowed the ticker's failure")
    assert events == ["start heartbeats", "start idle checkpoints", "stop idle checkpoints", "stop heartbeats"]
    assert work.tickers == []
