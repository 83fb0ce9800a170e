"""The sink's driver-side commit with fakes: aggregation, listeners built once, loud failures."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from kmirror.errors import KmirrorError
from kmirror.flow.spec import parse_flow_spec
from kmirror_engine.observability.progress import BatchProgress, PartitionProgress
from spark_app import listeners as listeners_module
from spark_app.sink import MirrorCommitMessage, MirrorSink, MirrorStreamWriter, aggregate

SPEC = {
    "id": "west->east",
    "source": {"alias": "west", "bootstrap_servers": "127.0.0.1:1", "config": {}},
    "target": {"alias": "east", "bootstrap_servers": "127.0.0.1:2", "config": {}},
    "topics": ["orders"],
    "topics_exclude": [],
    "replication_policy": {"type": "default", "separator": "."},
    "checkpoint_location": "/tmp/unused",
}


def _progress(topic: str, partition: int, records: int) -> PartitionProgress:
    return PartitionProgress(topic, partition, f"west.{topic}", 0, records, records, records * 10, 1_000)


def _messages() -> list[Any]:
    return [
        MirrorCommitMessage(0, (_progress("orders", 0, 5), _progress("orders", 1, 7)), 1_000, 1_400),
        MirrorCommitMessage(1, (_progress("orders", 2, 3),), 1_100, 1_900),
        MirrorCommitMessage(2, (), None, 1_050),  # a task without ranges
    ]


def test_aggregate_sums_tasks_and_spans_first_read_to_last_delivery() -> None:
    batch, first_read_ms, last_delivery_ms = aggregate(_messages(), 4)
    assert (batch.batch_id, batch.records, batch.bytes, batch.duration_ms) == (4, 15, 150, 900)
    assert [(p.source_topic, p.partition) for p in batch.partitions] == [("orders", 0), ("orders", 1), ("orders", 2)]
    assert (first_read_ms, last_delivery_ms) == (1_000, 1_900)


def test_a_missing_commit_message_fails_the_commit() -> None:
    with pytest.raises(KmirrorError, match=r"batch 3: task 1 returned None, not a MirrorCommitMessage"):
        aggregate([_messages()[0], None], 3)


def test_exactly_once_refuses_a_partition_split_across_tasks() -> None:
    split = [
        MirrorCommitMessage(0, (_progress("orders", 0, 5),), 1, 2),
        MirrorCommitMessage(1, (_progress("orders", 0, 5),), 1, 2),
    ]
    assert aggregate(split, 0)[0].records == 10  # fine at-least-once
    with pytest.raises(KmirrorError, match=r"orders\[0\] was split across tasks 0 and 1"):
        aggregate(split, 0, exactly_once=True)


class RecordingListener:
    def __init__(self) -> None:
        self.batches: list[BatchProgress] = []
        self.idle: list[int] = []
        self.closed: list[bool] = []

    def on_batch(self, batch: BatchProgress) -> None:
        self.batches.append(batch)

    def on_idle(self, now_ms: int) -> None:
        self.idle.append(now_ms)

    def close(self, final: bool) -> None:
        self.closed.append(final)


def test_commit_calls_listeners_built_once_per_flow_and_writes_the_batch_log(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    built: list[RecordingListener] = []

    def build(spec: Any) -> list[Any]:
        built.append(RecordingListener())
        return [built[-1]]

    monkeypatch.setattr(listeners_module, "build_listeners", build)
    monkeypatch.setenv("KMIRROR_BATCH_LOG", str(tmp_path / "batches.jsonl"))
    listeners_module.close_listeners(False)
    writer = MirrorSink({"flow_spec": json.dumps(SPEC)}).streamWriter(None, False)

    writer.commit(_messages(), 0)
    MirrorStreamWriter(json.dumps(SPEC)).commit(_messages()[:1], 1)  # Spark unpickles a new writer per batch

    [listener] = built
    assert [(b.batch_id, b.records) for b in listener.batches] == [(0, 15), (1, 12)]
    assert len(listener.idle) == 2
    lines = [json.loads(line) for line in (tmp_path / "batches.jsonl").read_text().splitlines()]
    assert [(x["batch_id"], x["records"], x["first_read_ms"], x["last_delivery_ms"]) for x in lines] == [
        (0, 15, 1_000, 1_900),
        (1, 12, 1_000, 1_400),
    ]
    listeners_module.close_listeners(True)
    assert listener.closed == [True]


def test_the_sink_needs_the_flow_spec_option() -> None:
    with pytest.raises(KmirrorError, match='needs option "flow_spec"'):
        MirrorSink({}).streamWriter(None, False)


def test_a_task_without_ranges_creates_no_clients_and_reports_nothing() -> None:
    message = MirrorStreamWriter(json.dumps(SPEC)).write(iter([]))
    assert (message.task_id, message.partitions, message.first_read_ms) == (0, (), None)


def test_exactly_once_ids_are_fenced_once_per_query_start_not_at_every_stream_writer_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Spark calls streamWriter() again at every commit (and every batch's planning on 4.0): before,
    each call created and initialised one transactional producer per source partition."""
    import spark_app.sink
    from tests.planner_fakes import spec

    fenced: list[str] = []
    monkeypatch.setattr(spark_app.sink, "fence_for_query", lambda route, copy: fenced.append(route.flow_id))
    eos = json.dumps(spec(exactly_once=True).to_dict())
    for _ in range(3):  # query start, then two commits
        writer = MirrorSink(options={"flow_spec": eos, "query_token": "query-1"}).streamWriter(None, False)
        assert writer.run == "query-1"  # the run the tasks record with their offsets
    assert fenced == ["west->east"]
    MirrorSink(options={"flow_spec": eos, "query_token": "query-2"}).streamWriter(None, False)  # a new query
    MirrorSink(options={"flow_spec": eos}).streamWriter(None, False)  # no token: every call, as before
    assert fenced == ["west->east"] * 3
    at_least_once = json.dumps(spec().to_dict())
    writer = MirrorSink(options={"flow_spec": at_least_once, "query_token": "query-3"}).streamWriter(None, False)
    assert len(fenced) == 3 and writer.run is None


class FailingListener(RecordingListener):
    def on_batch(self, batch: BatchProgress) -> None:
        raise RuntimeError("TopicAuthorizationFailed: mm2-offset-syncs.east.internal")


def test_a_side_work_failure_after_delivery_never_fails_the_delivered_batch(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: the listener's exception failed commit(), so Spark retried the delivered batch (one batch
    of duplicates per retry and restart) for as long as the cause (e.g. no Write ACL) lasted."""
    after = RecordingListener()
    monkeypatch.setattr(listeners_module, "build_listeners", lambda spec: [FailingListener(), after])
    listeners_module.close_listeners(False)
    MirrorStreamWriter(json.dumps(SPEC)).commit(_messages(), 7)  # does not raise
    assert [b.batch_id for b in after.batches] == [7]  # the next listener still ran
    assert len(after.idle) == 1
    [line] = [x for x in capsys.readouterr().err.splitlines() if x.startswith("kmirror side_work_failed ")]
    assert json.loads(line.removeprefix("kmirror side_work_failed ")) == {
        "flow": "west->east",
        "work": "FailingListener",
        "error": "RuntimeError: TopicAuthorizationFailed: mm2-offset-syncs.east.internal",
    }
    listeners_module.close_listeners(False)


def test_listeners_that_cannot_be_built_never_fail_the_delivered_batch(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def build(spec: Any) -> list[Any]:
        raise RuntimeError("cannot reach the target cluster")

    monkeypatch.setattr(listeners_module, "build_listeners", build)
    listeners_module.close_listeners(False)
    MirrorStreamWriter(json.dumps(SPEC)).commit(_messages(), 8)  # does not raise
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("kmirror side_work_failed ")]
    assert [json.loads(x.split(" ", 2)[2])["work"] for x in lines] == ["build_listeners", "build_listeners"]
    listeners_module.close_listeners(False)


def test_the_planners_source_end_offsets_travel_with_the_batch_so_listeners_need_no_list_offsets() -> None:
    """Issue 24 cleanup: the end offsets the planner saw ride on each range's row to the batch,
    so the failover listener's lag and records at risk need no ListOffsets per batch."""
    from dataclasses import replace

    from spark_app.stream_readers import _source_end

    assert _source_end({("orders", 0): 120}, "orders", 0, 100) == 120
    assert _source_end({("orders", 0): 90}, "orders", 0, 100) is None  # a replanned batch: unknown
    assert _source_end({}, "orders", 1, 100) is None
    messages = [
        MirrorCommitMessage(
            0,
            (replace(_progress("orders", 0, 5), source_end=120), replace(_progress("orders", 1, 7), source_end=None)),
            1_000,
            1_400,
        ),
    ]
    batch, _, _ = aggregate(messages, batch_id=3)
    assert batch.source_end_offsets == {("orders", 0): 120}


class _NoRows:
    """A foreachBatch DataFrame of a batch that planned nothing (no Spark needed)."""

    def collect(self) -> list[Any]:
        return []


def test_a_transform_flows_side_work_failure_never_fails_its_delivered_batch(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The transform path calls the same listeners from its foreachBatch; before, their first
    exception failed the batch there (Spark ran it again: duplicates at every retry)."""
    from spark_app.transform import Transform, TransformBatch

    after = RecordingListener()
    monkeypatch.setattr(listeners_module, "build_listeners", lambda spec: [FailingListener(), after])
    listeners_module.close_listeners(False)
    spec = parse_flow_spec(SPEC)
    transform = Transform("SELECT * FROM records", exact_origin=True)
    listeners = partial(listeners_module.listeners_for, spec)
    batches = TransformBatch(spec.id, json.dumps(spec.to_dict()), spec.planning, transform, 1, listeners)
    batches(_NoRows(), 3)  # does not raise
    assert [b.batch_id for b in after.batches] == [3] and len(after.idle) == 1
    [line] = [x for x in capsys.readouterr().err.splitlines() if x.startswith("kmirror side_work_failed ")]
    assert json.loads(line.split(" ", 2)[2])["work"] == "FailingListener"
    listeners_module.close_listeners(False)


def test_closing_one_flows_listeners_leaves_the_other_flows_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    """A transform flow's driver closes its own listeners (clients, threads) when its query ends."""
    built: dict[str, RecordingListener] = {}

    def build(spec: Any) -> list[Any]:
        built[spec.id] = RecordingListener()
        return [built[spec.id]]

    monkeypatch.setattr(listeners_module, "build_listeners", build)
    listeners_module.close_listeners(False)
    west, north = parse_flow_spec(SPEC), parse_flow_spec({**SPEC, "id": "north->east"})
    listeners_module.listeners_for(west), listeners_module.listeners_for(north)
    listeners_module.close_listeners(False, "west->east")
    listeners_module.close_listeners(False, "west->east")  # idempotent
    assert built["west->east"].closed == [False] and built["north->east"].closed == []
    assert listeners_module.listeners_for(north) == [built["north->east"]]  # still cached, not rebuilt
    listeners_module.close_listeners(True)
    assert built["north->east"].closed == [True]
