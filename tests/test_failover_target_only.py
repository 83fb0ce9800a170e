"""Failover with the source gone, with injected fakes: the source probe is bounded and quiet,
the newest checkpoint per partition wins, ages and records at risk are reported, and
`kmirror translate`/`failover` never ask the source once it is known gone."""

from __future__ import annotations

import json
import socket
import time
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest

from kmirror.flow.spec import FlowSpec, parse_flow_spec
from kmirror.mm2.formats import Checkpoint
from kmirror_cli.cli import main
from kmirror_engine.failover import target_only
from kmirror_engine.failover.checkpoints import Translation
from kmirror_engine.failover.offset_syncs import SyncStore
from kmirror_engine.failover.target_only import (
    CheckpointedPosition,
    latest_checkpoints,
    positions_from_checkpoints,
    source_reachable,
)
from tests.kafka_fakes import done
from tests.sync_log_fakes import FakeSyncLog, SyncWrite


def spec(source_bootstrap: str = "w:9092") -> FlowSpec:
    return parse_flow_spec(
        {
            "id": "west->east",
            "checkpoint_location": "/tmp/x",
            "topics": ["orders.*"],
            "topics_exclude": [],
            "source": {"alias": "west", "bootstrap_servers": source_bootstrap},
            "target": {"alias": "east", "bootstrap_servers": "e:9092"},
            "replication_policy": {"type": "default"},
            "groups": ["app.*"],
        }
    )


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_source_probe_gives_up_within_its_bound_and_prints_nothing(capfd: Any) -> None:
    endpoint = spec(f"127.0.0.1:{unused_port()}").source
    started = time.monotonic()
    why = source_reachable(endpoint, timeout_s=1.5)
    elapsed = time.monotonic() - started
    assert why is not None and why != ""
    assert elapsed < 4.0, f"probe took {elapsed:.1f} s"
    out = capfd.readouterr()
    assert out.out == "" and out.err == "", "librdkafka log lines leaked to the terminal"


def test_newest_checkpoint_of_each_partition_wins_and_other_groups_are_ignored() -> None:
    old = Checkpoint("app-1", "west.orders", 0, 10, 12)
    new = Checkpoint("app-1", "west.orders", 0, 20, 25)
    other = Checkpoint("app-2", "west.orders", 0, 99, 99)
    p1 = Checkpoint("app-1", "west.orders", 1, 5, 5)
    latest = latest_checkpoints([(old, 1000), (other, 1500), (new, 2000), (p1, 1200)], "app-1")
    assert latest == {("west.orders", 0): (new, 2000), ("west.orders", 1): (p1, 1200)}


def test_positions_report_checkpoint_age_and_records_at_risk() -> None:
    store = SyncStore()
    store.add_segment("orders", 0, 0, 30, [(0, 0), (29, 29)])  # source offsets 0..29 mirrored
    latest = {
        ("west.orders", 0): (Checkpoint("app-1", "west.orders", 0, 20, 20), 4_000),
        ("west.orders", 1): (Checkpoint("app-1", "west.orders", 1, 3, 3), None),
        ("north.orders", 0): (Checkpoint("app-1", "north.orders", 0, 1, 1), 4_000),  # another flow's topic
    }
    positions = positions_from_checkpoints(spec().route, latest, store, now_ms=10_000, source_ends={("orders", 0): 42})
    assert positions == [
        CheckpointedPosition(Translation("orders", 0, "west.orders", 20, 20), age_ms=6_000, records_at_risk=12),
        CheckpointedPosition(Translation("orders", 1, "west.orders", 3, 3), age_ms=None, records_at_risk=None),
    ]
    assert target_only.describe_position(positions[0]) == (
        "west.orders[0]: upstream 20 -> 20, checkpoint 6.0 s old, records at risk: 12"
    )
    assert target_only.describe_position(positions[1]).endswith("checkpoint unknown age, records at risk: unknown")


class TargetAdmin:
    """Target admin: a group with `members` active members; records offset alterations."""

    def __init__(self, members: int = 0) -> None:
        self.members = members
        self.altered: list[dict[tuple[str, int], int]] = []
        self.partitions = {"west.orders": 2}

    def list_topics(self, timeout: float = -1) -> Any:
        listed = {
            t: SimpleNamespace(partitions={i: SimpleNamespace(leader=0, error=None) for i in range(n)}, error=None)
            for t, n in self.partitions.items()
        }
        return SimpleNamespace(topics=listed)

    def describe_consumer_groups(self, groups: list[str], **_: Any) -> dict[str, Future[Any]]:
        state = "STABLE" if self.members else "EMPTY"
        members = [SimpleNamespace(client_id=f"c{i}", host="/10.0.0.2", assignment=None) for i in range(self.members)]
        return {g: done(SimpleNamespace(state=SimpleNamespace(name=state), members=members)) for g in groups}

    def list_consumer_group_offsets(self, requests: list[Any], **_: Any) -> dict[str, Future[Any]]:
        return {r.group_id: done(SimpleNamespace(topic_partitions=[])) for r in requests}

    def alter_consumer_group_offsets(self, requests: list[Any], **_: Any) -> dict[str, Future[Any]]:
        (request,) = requests
        self.altered.append({(tp.topic, tp.partition): tp.offset for tp in request.topic_partitions})
        return {request.group_id: done(SimpleNamespace(topic_partitions=request.topic_partitions))}


POSITIONS = [
    CheckpointedPosition(Translation("orders", 0, "west.orders", 20, 21), age_ms=6_000, records_at_risk=None),
    CheckpointedPosition(Translation("orders", 1, "west.orders", 3, 3), age_ms=1_500, records_at_risk=4),
]


@pytest.fixture
def source_gone(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> dict[str, Any]:
    """The source does not answer; the target holds POSITIONS. Asking the source fails the test."""
    import kmirror_engine.clients.factory
    import kmirror_engine.failover.checkpoints

    target = TargetAdmin()
    probes: list[str] = []

    def no_source(endpoint: Any) -> Any:
        assert endpoint.alias == "east", f"asked {endpoint.alias} although the source is gone"
        return target

    def probe(endpoint: Any) -> str:
        probes.append(endpoint.alias)
        return "Local: Broker transport failure"

    def live_translation(*_: Any) -> Any:
        raise AssertionError("translated live although the source is gone")

    monkeypatch.setattr(target_only, "source_reachable", probe)
    monkeypatch.setattr(target_only, "group_from_checkpoints", lambda s, g: POSITIONS if g == "app-1" else [])
    monkeypatch.setattr(kmirror_engine.clients.factory, "admin_client", no_source)
    monkeypatch.setattr(kmirror_engine.failover.checkpoints, "translate_group", live_translation)
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps(spec().to_dict()))
    return {"flow": str(flow), "target": target, "probes": probes}


def test_translate_falls_back_to_checkpoints_with_one_line(source_gone: dict[str, Any], capsys: Any) -> None:
    assert main(["translate", "--flow", source_gone["flow"], "--group", "app-1", "--format", "json"]) == 0
    out = capsys.readouterr()
    assert out.err == (
        "source west unreachable after 5 s (Local: Broker transport failure); using the checkpoints on east\n"
    )
    assert json.loads(out.out) == [
        {
            "topic": "west.orders",
            "partition": 0,
            "upstream_offset": 20,
            "downstream_offset": 21,
            "checkpoint_age_ms": 6000,
            "records_at_risk": None,
        },
        {
            "topic": "west.orders",
            "partition": 1,
            "upstream_offset": 3,
            "downstream_offset": 3,
            "checkpoint_age_ms": 1500,
            "records_at_risk": 4,
        },
    ]


def test_translate_names_each_partition_without_a_checkpoint_instead_of_leaving_it_out_silently(
    source_gone: dict[str, Any], capsys: Any
) -> None:
    """The group has checkpoints on partitions 0 and 1 of a 4-partition topic: 2 and 3 cannot be
    translated from the target. Before: left out of the answer with nothing said (on tansu the
    newest checkpoint batch is invisible to the reader, so a group showed only partition 0)."""
    source_gone["target"].partitions = {"west.orders": 4, "west.other": 3}
    flow = source_gone["flow"]
    assert main(["translate", "--flow", flow, "--group", "app-1", "--from-checkpoints", "--format", "json"]) == 0
    out = capsys.readouterr()
    assert [(row["topic"], row["partition"]) for row in json.loads(out.out)] == [("west.orders", 0), ("west.orders", 1)]
    assert out.err == "".join(
        f"untranslatable: west.orders[{p}] has no checkpoint of group app-1 on east (the group never committed "
        "there, or its checkpoint could not be read); it is left out\n"
        for p in (2, 3)
    )  # west.other: the group has no checkpoint on that topic at all, it does not read it
    assert main(["failover", "--flow", flow, "--group", "app-1", "--from-checkpoints", "--dry-run"]) == 0
    assert capsys.readouterr().err == out.err  # failover names them too, before moving the others


def test_translate_from_checkpoints_skips_the_probe(source_gone: dict[str, Any], capsys: Any) -> None:
    flow = source_gone["flow"]
    assert main(["translate", "--flow", flow, "--group", "app-1", "--from-checkpoints", "--format", "json"]) == 0
    assert source_gone["probes"] == []
    assert capsys.readouterr().err == ""
    assert main(["translate", "--flow", flow, "--group", "nobody", "--from-checkpoints"]) == 1
    assert capsys.readouterr().err == (
        "kmirror translate: group 'nobody' has no checkpoint on east for topics flow west->east mirrors; "
        "check the group id, the flow's topics and its `groups` selection\n"
    )


def test_failover_with_the_source_gone_moves_the_group_from_checkpoints(
    source_gone: dict[str, Any], capsys: Any
) -> None:
    flow = source_gone["flow"]
    assert main(["failover", "--flow", flow, "--group", "app-1", "--dry-run"]) == 0
    assert source_gone["probes"] == ["west"], "probed once, not once per step"
    assert source_gone["target"].altered == []
    out = capsys.readouterr()
    assert out.out == (
        "checkpoint: west.orders[0]: upstream 20 -> 21, checkpoint 6.0 s old, records at risk: unknown\n"
        "checkpoint: west.orders[1]: upstream 3 -> 3, checkpoint 1.5 s old, records at risk: 4\n"
        "dry run: would move group 'app-1' to east:\n  west.orders[0] -> 21\n  west.orders[1] -> 3\n"
    )
    assert main(["failover", "--flow", flow, "--group", "app-1", "--from-checkpoints"]) == 0
    assert source_gone["target"].altered == [{("west.orders", 0): 21, ("west.orders", 1): 3}]
    assert capsys.readouterr().out.endswith(
        "moved group 'app-1' to east: 2 partition(s) written, 0 kept\n"
        "  wrote west.orders[0] = 21\n  wrote west.orders[1] = 3\n"
    )


def test_failover_with_the_source_gone_refuses_active_target_members(source_gone: dict[str, Any], capsys: Any) -> None:
    source_gone["target"].members = 1
    assert main(["failover", "--flow", source_gone["flow"], "--group", "app-1", "--from-checkpoints"]) == 1
    assert source_gone["target"].altered == []
    assert "group 'app-1' on east is STABLE with active members (c0@/10.0.0.2)" in capsys.readouterr().err


class RecordingSyncLog(FakeSyncLog):
    """The SyncLog surface OffsetSyncWriter uses; records what each write carried."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[str, int, int, int | None]] = []

    def record(self, write: SyncWrite) -> None:
        self.writes.append((write.topic, write.partition, write.next_offset, write.source_end))


def test_the_last_known_lag_is_persisted_with_the_offset_syncs() -> None:
    """The source end offset a batch saw goes out with its syncs; a failover with the source gone
    reads it back as records at risk (end - mirrored_until)."""
    from kmirror_engine.failover.offset_sync_writer import OffsetSyncWriter
    from kmirror_engine.observability.progress import BatchProgress, PartitionProgress

    sync_log = RecordingSyncLog()
    writer = OffsetSyncWriter("west->east", spec().checkpoints, sync_log, metrics=None).load()  # type: ignore[arg-type]
    p0 = PartitionProgress("orders", 0, "west.orders", 0, 10, 10, 100, None, ((0, 0), (9, 9)))
    p1 = PartitionProgress("orders", 1, "west.orders", 0, 5, 5, 50, None, ((0, 0), (4, 4)))
    writer.record(BatchProgress(0, (p0, p1), 10, {("orders", 0): 25}))
    assert sync_log.writes == [("orders", 0, 10, 25), ("orders", 1, 5, None)]
    latest = {("west.orders", 0): (Checkpoint("app-1", "west.orders", 0, 7, 7), 1_000)}
    (position,) = positions_from_checkpoints(spec().route, latest, writer.store, 2_000, {("orders", 0): 25})
    assert position.records_at_risk == 15
