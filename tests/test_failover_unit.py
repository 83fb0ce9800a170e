"""Failover pieces with injected fakes: group sync refuses live groups and never moves a
partition back, checkpoint emission rules, heartbeat loop guard, metrics text."""

from __future__ import annotations

import re
import threading
from concurrent.futures import Future
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from kmirror.errors import KmirrorError
from kmirror.flow.spec import ClusterEndpoint, FlowSpec, parse_flow_spec
from kmirror.flow.views import HeartbeatSettings
from kmirror.mm2.formats import Checkpoint, decode_heartbeat
from kmirror_cli.cli import main
from kmirror_engine.failover.checkpoints import is_more_recent, translate_offsets
from kmirror_engine.failover.group_sync import ActiveGroupError, sync_group
from kmirror_engine.failover.offset_syncs import SyncStore
from kmirror_engine.observability.heartbeats import HeartbeatEmitter, HeartbeatError
from kmirror_engine.observability.metrics import FlowMetrics
from kmirror_engine.observability.progress import BatchProgress, PartitionProgress
from tests.kafka_fakes import done
from tests.planner_fakes import raw_spec
from tests.sync_log_fakes import emitter_of


@pytest.fixture(autouse=True)
def source_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake flows' source (west:9092) is taken as reachable unless a test says otherwise."""
    import kmirror_engine.failover.target_only

    monkeypatch.setattr(kmirror_engine.failover.target_only, "source_reachable", lambda endpoint: None)


EAST = ClusterEndpoint("east", "east:9092")


def spec(**options: Any) -> FlowSpec:
    return parse_flow_spec(raw_spec(topics=["orders.*"], **{"groups": ["app.*"], **options}))


class FakeAdmin:
    def __init__(self, state: str = "EMPTY", members: int = 0, offsets: dict[tuple[str, int], int] | None = None):
        self.state, self.members, self.offsets = state, members, dict(offsets or {})
        self.altered: list[dict[tuple[str, int], int]] = []

    def describe_consumer_groups(self, groups: list[str], **_: Any) -> dict[str, Future[Any]]:
        members = [SimpleNamespace(client_id=f"c{i}", host="/10.0.0.1", assignment=None) for i in range(self.members)]
        return {g: done(SimpleNamespace(state=SimpleNamespace(name=self.state), members=members)) for g in groups}

    def list_consumer_group_offsets(self, requests: list[Any], **_: Any) -> dict[str, Future[Any]]:
        tps = [TopicPartition(t, p, o) for (t, p), o in self.offsets.items()]
        return {r.group_id: done(SimpleNamespace(topic_partitions=tps)) for r in requests}

    def alter_consumer_group_offsets(self, requests: list[Any], **_: Any) -> dict[str, Future[Any]]:
        (request,) = requests
        self.altered.append({(tp.topic, tp.partition): tp.offset for tp in request.topic_partitions})
        self.offsets.update(self.altered[-1])
        return {request.group_id: done(SimpleNamespace(topic_partitions=request.topic_partitions))}

    def list_consumer_groups(self, **_: Any) -> Future[Any]:
        names = ["app-1", "app-2", "batch", "kmirror-west-to-east"]
        return done(SimpleNamespace(valid=[SimpleNamespace(group_id=n) for n in names]))


def test_group_sync_refuses_a_group_with_active_members() -> None:
    admin = FakeAdmin(state="STABLE", members=2)
    with pytest.raises(ActiveGroupError, match=r"group 'app' on east is STABLE with active members \(c0@/10.0.0.1, c1"):
        sync_group(admin, "app", {("west.orders", 0): 7}, "east")
    assert admin.altered == []


def test_group_sync_moves_forward_only() -> None:
    admin = FakeAdmin(offsets={("west.orders", 0): 10, ("west.orders", 1): 2})
    result = sync_group(admin, "app", {("west.orders", 0): 7, ("west.orders", 1): 5, ("west.orders", 2): 1}, "east")
    assert admin.altered == [{("west.orders", 1): 5, ("west.orders", 2): 1}]
    assert result.kept == {("west.orders", 0): (10, 7)}


def test_failover_cli_refuses_live_source_group(monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: Any) -> None:
    import json

    import kmirror_engine.clients.factory

    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps(spec().to_dict()))
    monkeypatch.setattr(
        kmirror_engine.clients.factory, "admin_client", lambda endpoint: FakeAdmin(state="STABLE", members=1)
    )
    assert main(["failover", "--flow", str(flow), "--group", "app-1"]) == 1
    assert capsys.readouterr().err == (
        "kmirror failover: group 'app-1' is STABLE on west with active members (c0@/10.0.0.1); "
        "stop its consumers before failing over\n"
    )


class FakeProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []

    def produce(self, topic: str, value: bytes, key: bytes, on_delivery: Any = None, **_: Any) -> None:
        self.sent.append((topic, key, value))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0


def test_checkpoints_translate_selected_groups_on_mirrored_topics_only() -> None:
    store = SyncStore()
    store.add_segment("orders", 0, 0, 10, [(0, 3), (9, 12)])
    admin = FakeAdmin(offsets={("orders", 0): 4, ("payments", 0): 1})
    emitter = emitter_of(spec(), store, admin, FakeProducer())
    assert emitter.groups() == ["app-1", "app-2"]  # not "batch" (groups), not the mirror's own group
    emitted, _ = emitter.emit(["app-1"])
    assert emitted == [Checkpoint("app-1", "west.orders", 0, 4, 7, "")]
    assert emitter.emit(["app-1"])[0] == []  # repeated checkpoint is not emitted again
    assert [
        t.source_topic for t in translate_offsets(spec().route, store, {("orders", 0): (4, ""), ("pay", 0): (1, "")})
    ] == ["orders"]


def test_a_second_checkpoint_writer_only_checkpoints_inside_the_history_it_read() -> None:
    store = SyncStore()
    store.add_segment("orders", 0, 0, 10, [(0, 3), (9, 12)])  # mirrored [0, 10): the driver read this much
    admin = FakeAdmin(offsets={("orders", 0): 10})
    driver = emitter_of(spec(), store, admin, FakeProducer(), within_known_history=True)
    assert driver.emit(["app-1"])[0] == [Checkpoint("app-1", "west.orders", 0, 10, 13, "")]  # at the known end
    admin.offsets[("orders", 0)] = 14  # the group is past the syncs this writer has read
    assert driver.emit(["app-1"])[0] == []  # the sink's listener, with newer syncs, checkpoints it
    assert emitter_of(spec(), store, admin, FakeProducer()).emit(["app-1"])[0] == [
        Checkpoint("app-1", "west.orders", 0, 14, 13, "")
    ]  # a lone writer: MM2's +1 rule


def test_idle_checkpoint_rounds_count_failures_and_go_on() -> None:
    from kmirror_engine.failover.failover_listener import IdleCheckpoints

    class FakeListener:
        def __init__(self) -> None:
            self.rounds, self.closed = 0, False

        def checkpoint_now(self) -> int:
            self.rounds += 1
            if self.rounds == 1:
                raise KmirrorError("listing groups on west failed: timed out")
            return 2

        def close(self, final: bool) -> None:
            self.closed = not final

    listener = FakeListener()
    idle = IdleCheckpoints(
        "west->east", spec(checkpoint_interval_ms=100).checkpoints, listener_factory=lambda: listener
    )
    assert [idle.round(), idle.round()] == [0, 2] and idle.failures == 1
    idle.start().stop()
    assert listener.closed


def test_checkpoint_rules_follow_mm2() -> None:
    last = Checkpoint("g", "t", 0, 10, 20)
    assert is_more_recent(Checkpoint("g", "t", 0, 12, 22), last)
    assert is_more_recent(Checkpoint("g", "t", 0, 5, 15), last)  # the group was rewound upstream
    assert not is_more_recent(Checkpoint("g", "t", 0, 11, 19), last)  # would move downstream back
    assert not is_more_recent(Checkpoint("g", "t", 0, 10, 20), last)


def test_heartbeats_at_interval_to_the_target_heartbeats_topic() -> None:
    producer = FakeProducer()
    beats = HeartbeatEmitter("west", EAST, HeartbeatSettings(emit=True, interval_ms=1000), producer)
    assert [beats.maybe_emit(t) for t in (5000, 5500, 6000)] == [True, False, True]
    topic, key, value = producer.sent[0]
    assert topic == "heartbeats"
    assert decode_heartbeat(key, value) == decode_heartbeat(
        b"\x00\x04west\x00\x04east", b"\x00\x00" + (5000).to_bytes(8, "big")
    )


def test_heartbeat_ticker_beats_while_idle_counts_failures_and_beats_last_at_stop() -> None:
    from kmirror_engine.observability.heartbeats import HeartbeatTicker

    class FlakyProducer(FakeProducer):
        def __init__(self) -> None:
            super().__init__()
            self.refuse = False

        def produce(self, topic: str, value: bytes, key: bytes, on_delivery: Any = None, **kw: Any) -> None:
            if self.refuse:
                raise BufferError("Local: Queue full")
            super().produce(topic, value, key, on_delivery, **kw)

    producer, now, created = FlakyProducer(), [10_000], []

    def ensure(emitter: Any) -> None:
        created.append(emitter)
        if len(created) == 1:
            raise HeartbeatError("cannot create heartbeats on east: timed out")

    emitter = HeartbeatEmitter("west", EAST, HeartbeatSettings(emit=True, interval_ms=60_000), producer)
    ticker = HeartbeatTicker("west->east", emitter, clock_ms=lambda: now[0], ensure_topic=ensure)
    ticker.start()  # the target refuses the topic at first: counted, retried, the mirror goes on
    assert (len(created), ticker.failures, producer.sent) == (1, 1, [])
    ticker.tick()  # no batch ever runs: the driver's clock alone makes it beat
    assert len(created) == 2 and len(producer.sent) == 1
    ticker.tick()
    assert len(producer.sent) == 1  # within the interval
    now[0] += 60_000
    producer.refuse = True
    ticker.tick()  # a failed beat is counted and retried, never raised into the mirror
    assert ticker.failures == 2 and len(producer.sent) == 1
    producer.refuse = False
    ticker.tick()
    now[0] += 1
    ticker.stop()  # one last beat whatever the interval
    assert [decode_heartbeat(k, v).timestamp_ms for _, k, v in producer.sent] == [10_000, 70_000, 70_001]


def test_heartbeats_refuse_a_policy_that_would_loop() -> None:
    flow = spec()
    looping = SimpleNamespace(format_remote_topic=lambda alias, topic: topic, to_dict=lambda: {"type": "identity"})
    route = replace(flow.route, policy=looping)
    loops = re.escape("policy {'type': 'identity'} maps 'heartbeats' to itself; heartbeats would loop")
    with pytest.raises(HeartbeatError, match=loops):
        HeartbeatEmitter.for_flow(route, flow.heartbeats, FakeProducer())


def test_metrics_per_partition_in_prometheus_text_and_progress_log() -> None:
    metrics = FlowMetrics("west->east")
    part = PartitionProgress(
        "orders",
        1,
        "west.orders",
        100,
        150,
        50,
        5000,
        1_000,
        latency_min_ms=3,
        latency_max_ms=9,
        latency_sum_ms=300,
        latency_count=50,
    )
    record = metrics.observe_batch(BatchProgress(7, (part,), 500, {("orders", 1): 160}), now_ms=1_250)
    assert record == {
        "event": "mirror_metrics",
        "flow": "west->east",
        "batch_id": 7,
        "partitions": [
            {
                "topic": "west.orders",
                "partition": 1,
                "record_count": 50,
                "byte_rate": 10000.0,
                "record_age_ms": 250,
                "replication_latency_ms": {"min": 3.0, "max": 9.0, "avg": 6.0},
                "offset_lag": 10,
            }
        ],
    }
    text = metrics.text()
    labels = 'flow="west->east",partition="1",topic="west.orders"'
    avg = 'kmirror_replication_latency_ms{flow="west->east",partition="1",stat="avg",topic="west.orders"} 6.0'
    for line in (
        f"kmirror_record_count_total{{{labels}}} 50.0",
        f"kmirror_offset_lag{{{labels}}} 10.0",
        avg,
        f"kmirror_record_age_ms{{{labels}}} 250.0",
        f"kmirror_byte_rate{{{labels}}} 10000.0",
    ):
        assert line in text


def test_the_mirror_metrics_line_is_a_snapshot_at_most_every_interval_while_metrics_see_every_batch() -> None:
    """A row per partition per batch: at a batch every ~0.3 s over thousands of partitions a line
    per batch would flood the log for weeks."""
    import io
    import json

    import kmirror_engine.observability.metrics as metrics_module

    clock = [1000.0]
    out = io.StringIO()
    metrics = FlowMetrics("west->east", out=out, clock=lambda: clock[0])
    for batch_id in range(5):  # 0.3 s apart
        part = PartitionProgress("orders", 0, "west.orders", batch_id * 10, batch_id * 10 + 10, 10, 100, 1_000)
        metrics.observe_batch(BatchProgress(batch_id, (part,), 100), now_ms=1_250)
        clock[0] += 0.3
    clock[0] += metrics_module.SNAPSHOT_INTERVAL_S
    metrics.observe_batch(BatchProgress(5, (part,), 100), now_ms=1_250)
    metrics.observe_batch_failure(6)
    lines = [json.loads(line.removeprefix(metrics_module.PREFIX)) for line in out.getvalue().splitlines()]
    assert [(line["event"], line["batch_id"]) for line in lines] == [
        ("mirror_metrics", 0),
        ("mirror_metrics", 5),
        ("batch_failed", 6),
    ]
    assert 'kmirror_record_count_total{flow="west->east",partition="0",topic="west.orders"} 60.0' in metrics.text()


def write_flow(tmp_path: Any) -> str:
    import json

    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps(spec().to_dict()))
    return str(flow)


def test_translate_json_leaves_out_untranslatable_partitions(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: Any
) -> None:
    import kmirror_engine.failover.checkpoints
    from kmirror_engine.failover.checkpoints import Translation

    rows = [Translation("orders", 0, "west.orders", 4, 7), Translation("orders", 1, "west.orders", 2, None)]
    monkeypatch.setattr(kmirror_engine.failover.checkpoints, "translate_group", lambda s, g: rows)
    assert main(["translate", "--flow", write_flow(tmp_path), "--group", "app-1", "--format", "json"]) == 0
    out = capsys.readouterr()
    assert out.out == '[{"topic": "west.orders", "partition": 0, "upstream_offset": 4, "downstream_offset": 7}]\n'
    assert out.err == "untranslatable: orders[1]@2 is before every mirrored record of that partition\n"
    monkeypatch.setattr(kmirror_engine.failover.checkpoints, "translate_group", lambda s, g: [])
    assert main(["translate", "--flow", write_flow(tmp_path), "--group", "nobody"]) == 1
    assert capsys.readouterr().err.startswith("kmirror translate: group 'nobody' has no committed offsets on topics")


def test_lag_watch_refreshes_the_table_until_interrupted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: Any
) -> None:
    import kmirror_cli.commands.lag as lag

    row = {
        "group": "kmirror-west-to-east",
        "topic": "orders",
        "partition": 0,
        "offset": 90,
        "log_size": 100,
        "lag": 10,
        "owner": "none",
        "target_topic": "west.orders",
        "delay_ms": 1234,
    }
    sleeps: list[float] = []
    real_sleep = lag.time.sleep

    def sleep(seconds: float) -> None:
        # time.sleep is patched process-wide: background threads other tests left running (tickers,
        # client closers) must keep their real sleep, or they use up the two sleeps of the loop
        if threading.current_thread() is not threading.main_thread():
            real_sleep(seconds)
            return
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(lag, "lag_rows", lambda route, group: [row])
    monkeypatch.setattr(lag.time, "sleep", sleep)
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["lag", "--flow", write_flow(tmp_path), "--watch"]) == 130
    out = capsys.readouterr().out
    assert out.count("kmirror lag: west->east") == 2 and sleeps == [2.0, 2.0]
    header = next(line for line in out.splitlines() if "Group" in line)
    assert [c.strip() for c in header.strip("┃ ").split("┃")] == [
        "Group",
        "Topic",
        "Pid",
        "Offset",
        "logSize",
        "Lag",
        "Owner",
        "Delay (ms)",
    ]
    assert "│ kmirror-west-to-east │ orders │   0 │     90 │     100 │  10 │ none  │       1234 │" in out


def test_heartbeats_travel_one_hop_per_flow_and_never_loop() -> None:
    from kmirror.flow.filters import NameSelection, should_replicate_topic
    from kmirror.flow.replication_policy import DefaultReplicationPolicy

    policy, only_orders = DefaultReplicationPolicy(), NameSelection(("orders",))
    # west->east: west's own heartbeats go downstream even though `topics` selects only orders
    assert should_replicate_topic(only_orders, policy, "heartbeats", "east")
    assert policy.format_remote_topic("west", "heartbeats") == "west.heartbeats"
    # east->west must not send east's copy of west's heartbeats back: that is a cycle
    assert not should_replicate_topic(only_orders, policy, "west.heartbeats", "west")
    # but a third cluster's hop chain continues: north.heartbeats on west -> west.north.heartbeats on east
    assert should_replicate_topic(only_orders, policy, "north.heartbeats", "east")


class OffsetsAdmin(FakeAdmin):
    """A target admin that also answers ListOffsets(earliest)."""

    def __init__(self, earliest: dict[tuple[str, int], int], **kw: Any) -> None:
        super().__init__(**kw)
        self.earliest = earliest
        self.asked: list[tuple[str, int]] = []

    def list_offsets(self, requests: dict[Any, Any], **_: Any) -> dict[Any, Future[Any]]:
        self.asked += [(tp.topic, tp.partition) for tp in requests]
        return {tp: done(SimpleNamespace(offset=self.earliest[(tp.topic, tp.partition)])) for tp in requests}


def partial_failover(monkeypatch: pytest.MonkeyPatch, target: OffsetsAdmin) -> None:
    import kmirror_engine.clients.factory
    import kmirror_engine.failover.checkpoints
    from kmirror_engine.failover.checkpoints import Translation

    rows = [Translation("orders", 0, "west.orders", 4, 7), Translation("orders", 1, "west.orders", 2, None)]
    monkeypatch.setattr(kmirror_engine.failover.checkpoints, "translate_group", lambda s, g: rows)
    admins = {"west": FakeAdmin(), "east": target}
    monkeypatch.setattr(kmirror_engine.clients.factory, "admin_client", lambda endpoint: admins[endpoint.alias])


def test_failover_refuses_untranslated_partitions_without_allow_partial(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: Any
) -> None:
    """Before: partition 1 was printed as "skip" and the group moved with partition 0 only, leaving
    partition 1 to auto.offset.reset (latest skips everything it had not read)."""
    target = OffsetsAdmin({("west.orders", 1): 3})
    partial_failover(monkeypatch, target)
    assert main(["failover", "--flow", write_flow(tmp_path), "--group", "app-1"]) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == (
        "kmirror failover: group 'app-1': 1 of 2 partition(s) have no translated offset on east (orders[1]@2: "
        "the group is before every mirrored record of them), so its consumers would start there at "
        "auto.offset.reset and could skip records; let the mirror copy them first, or pass --allow-partial "
        "to start them at the target's earliest offset (re-read, not skip)\n"
    )
    assert target.altered == [] and target.asked == []


def test_failover_allow_partial_starts_untranslated_partitions_at_the_earliest_offset(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: Any
) -> None:
    target = OffsetsAdmin({("west.orders", 1): 3})
    partial_failover(monkeypatch, target)
    flow = write_flow(tmp_path)
    assert main(["failover", "--flow", flow, "--group", "app-1", "--allow-partial", "--dry-run"]) == 0
    assert capsys.readouterr().out == (
        "partial: orders[1]@2 has no translated offset; west.orders[1] starts at the target's earliest offset 3 "
        "(re-read)\n"
        "dry run: would move group 'app-1' to east:\n  west.orders[0] -> 7\n  west.orders[1] -> 3\n"
    )
    assert target.altered == []
    assert main(["failover", "--flow", flow, "--group", "app-1", "--allow-partial"]) == 0
    assert target.altered == [{("west.orders", 0): 7, ("west.orders", 1): 3}]
    assert capsys.readouterr().out.endswith(
        "moved group 'app-1' to east: 2 partition(s) written, 0 kept\n"
        "  wrote west.orders[0] = 7\n  wrote west.orders[1] = 3\n"
    )


def test_the_mirror_metrics_line_stays_bounded_at_4000_partitions() -> None:
    """Issue 26: a row per partition made the line ~0.8 MB at 4,000 partitions (~1.1 GB a day at
    one line a minute). Past SNAPSHOT_MAX_ROWS it carries totals and the most lagging partitions;
    Prometheus keeps every partition."""
    import io
    import json

    import kmirror_engine.observability.metrics as metrics_module

    out = io.StringIO()
    metrics = FlowMetrics("west->east", out=out, clock=lambda: 1000.0)
    parts = tuple(
        PartitionProgress(
            f"topic-{i // 2}",
            i % 2,
            f"west.topic-{i // 2}",
            0,
            100,
            100,
            10_000,
            1_000,
            latency_min_ms=3,
            latency_max_ms=9,
            latency_sum_ms=600,
            latency_count=100,
        )
        for i in range(4000)
    )
    ends = {(p.source_topic, p.partition): 100 + (i % 997) for i, p in enumerate(parts)}
    metrics.observe_batch(BatchProgress(1, parts, 1000, ends), now_ms=2_000)
    line = out.getvalue()
    record = json.loads(line.removeprefix(metrics_module.PREFIX))
    assert (record["partitions_total"], record["partitions_omitted"]) == (4000, 4000 - metrics_module.SNAPSHOT_MAX_ROWS)
    assert record["record_count"] == 400_000 and record["offset_lag"] == sum(i % 997 for i in range(4000))
    most_lagging = [lag for lag in (996, 995, 994, 993, 992) for _ in range(4)]  # i % 997, 4 partitions each
    assert [row["offset_lag"] for row in record["partitions"]] == most_lagging
    per_day = len(line.encode()) * 24 * 3600 / metrics_module.SNAPSHOT_INTERVAL_S
    assert per_day < 10e6, per_day  # bytes a day, at one line per SNAPSHOT_INTERVAL_S
    assert 'kmirror_offset_lag{flow="west->east",partition="1",topic="west.topic-1999"}' in metrics.text()
