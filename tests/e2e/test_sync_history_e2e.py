"""Offset-sync history stays cheap to load however long the flow runs (issue 15, item 5).

Real brokers: the flow's `FailoverListener` (the sink's commit path for offset syncs) persists
1000 batches of a compacted source (4 partitions, 50 records per range, the drift changing at
every record: the worst case, one copy-loop sync per record). After 10, 100 and 1000 batches a
fresh process loads the history (`SyncLog.load`, what a restarted mirror, `--once`, `kmirror
translate` and `kmirror failover` do) and `kmirror translate` runs; both must read O(partitions
+ tail) records and take about the same time, while the MM2 syncs topic itself keeps growing.
Set KMIRROR_SYNC_FIGURES=path to append the measured figures as JSON lines.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from kmirror.flow.replication_policy import offset_syncs_topic
from kmirror.flow.spec import parse_flow_spec
from kmirror_cli.cli import main
from kmirror_engine.failover.failover_listener import FailoverClients, FailoverListener
from kmirror_engine.failover.offset_sync_snapshots import SyncLog
from kmirror_engine.failover.offset_sync_topic import OffsetSyncTopic
from kmirror_engine.failover.offset_syncs import SyncStore
from kmirror_engine.observability.progress import BatchProgress, PartitionProgress
from kmirror_engine.planning.internal_names import snapshot_topic
from tests.kafka_helpers import SYNC_FENCE, create_topic, flow_raw, produce

pytestmark = pytest.mark.spark40  # also in leg 2 (pyspark 4.0.2 / Python 3.10)

PARTITIONS, RECORDS = 4, 50
SNAPSHOT_AFTER_SYNCS = 400  # the default is 10,000; smaller here so 1000 batches show several snapshots


def compacted_batch(topic: str, remote: str, batch: int) -> BatchProgress:
    """Every other upstream offset compacted away: the copy loop reports every record as a sync."""
    parts = []
    for p in range(PARTITIONS):
        start = batch * 2 * RECORDS
        pairs = tuple((start + 2 * i, batch * RECORDS + i) for i in range(RECORDS))
        parts.append(
            PartitionProgress(
                topic, p, remote, start, start + 2 * RECORDS, RECORDS, RECORDS * 10, None, offset_syncs=pairs
            )
        )
    return BatchProgress(batch, tuple(parts), 10, {(topic, p): (batch + 1) * 2 * RECORDS for p in range(PARTITIONS)})


def commit_group(bootstrap: str, group: str, topic: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, offset) for p in range(PARTITIONS)], asynchronous=False)
    finally:
        consumer.close()


@pytest.mark.e2e
def test_restart_and_translate_time_stay_flat_as_batches_accumulate(
    clusters: Any, unique: str, tmp_path: Path, capsys: Any
) -> None:
    src, dst = f"s{unique}", f"t{unique}"
    topic, group, remote = f"hist-{unique}", f"app-{unique}", f"s{unique}.hist-{unique}"
    flow = flow_raw(
        clusters, src, dst, [topic], tmp_path, emit_heartbeats=False, emit_checkpoints=False, groups=[group]
    )
    spec = parse_flow_spec(flow)
    (tmp_path / "flow.json").write_text(json.dumps(flow))
    create_topic(clusters.source, topic, PARTITIONS)
    clients = FailoverClients.connect(spec)
    clients.sync_log = SyncLog(spec.target, src, snapshot_after_syncs=SNAPSHOT_AFTER_SYNCS)
    writer = FailoverListener.for_flow(spec, serve_metrics=False, heartbeats=False, clients=clients)
    figures: list[dict[str, Any]] = []
    batch = 0
    for batches in (10, 100, 1000):
        while batch < batches:
            writer.on_batch(compacted_batch(topic, remote, batch))
            batch += 1
        writer.syncs.wait_for_snapshot()  # written off the commit path, by a background thread
        # tansu hides the newest batch from offset queries: a valid MM2 record after ours
        produce(
            clusters.target,
            offset_syncs_topic(src),
            [{"key": SYNC_FENCE[0], "value": SYNC_FENCE[1], "partition": 0}],
        )
        group_at = (batches - 1) * 2 * RECORDS + 20  # mid-way through the newest batch
        commit_group(clusters.source, group, topic, group_at)

        started = time.monotonic()
        store, sync_log = SyncStore(), SyncLog(spec.target, src)
        sync_log.load(store)
        load_s = time.monotonic() - started
        for p in range(PARTITIONS):  # the reloaded history translates as the writer's own
            for u in (0, group_at, (batches - 1) * 2 * RECORDS - 2, batches * 2 * RECORDS - 2):
                assert store.translate(topic, p, u) == writer.store.translate(topic, p, u), (p, u)
            assert store.translate(topic, p, batches * 2 * RECORDS - 2) == batches * RECORDS - 1  # the head: exact

        capsys.readouterr()
        started = time.monotonic()
        assert main(["translate", "--flow", str(tmp_path / "flow.json"), "--group", group, "--format", "json"]) == 0
        translate_s = time.monotonic() - started
        rows = json.loads(capsys.readouterr().out)
        expected = [writer.store.translate(topic, p, group_at) for p in range(PARTITIONS)]
        assert [r["downstream_offset"] for r in rows] == expected  # as the writer translates
        newest = (batches - 1) * RECORDS + 10  # the record the group is at (the drift changes at each record)
        assert all(newest - 100 < e <= newest for e in expected)  # re-reads fewer than offset_lag_max

        started = time.monotonic()
        history = OffsetSyncTopic(spec.target, offset_syncs_topic(src)).load(SyncStore())  # every sync, from 0
        full_s = time.monotonic() - started
        figures.append(
            {
                "batches": batches,
                "load_s": round(load_s, 3),
                "translate_s": round(translate_s, 3),
                **sync_log.last_load,
                "history_syncs": history,
                "full_replay_s": round(full_s, 3),
                "copy_loop_syncs": batches * PARTITIONS * RECORDS,
            }
        )
    writer.close(final=False)
    print("sync history figures:", json.dumps(figures))
    if os.environ.get("KMIRROR_SYNC_FIGURES"):
        with open(os.environ["KMIRROR_SYNC_FIGURES"], "a") as out:
            out.writelines(json.dumps(f) + "\n" for f in figures)

    first, last = figures[0], figures[-1]
    assert last["history_syncs"] >= 1000 * PARTITIONS  # the MM2 topic keeps the whole (thinned) history ...
    assert last["history_syncs"] <= 2 * 1000 * PARTITIONS + 10  # ... about one per offset.lag.max, not every record
    for f in figures:  # ... but a load reads O(partitions + tail): the newest snapshot and a short tail
        assert f["snapshot_records"] <= 64 + 2 * (PARTITIONS + 2)
        assert f["tail_records"] <= SNAPSHOT_AFTER_SYNCS + 2 * PARTITIONS + 3
    assert last["partitions"] >= PARTITIONS
    assert last["load_s"] < 3 * first["load_s"] + 1.0
    assert last["translate_s"] < 3 * first["translate_s"] + 1.0


@pytest.mark.e2e
def test_restart_stays_bounded_when_snapshots_keep_failing(
    clusters: Any, unique: str, tmp_path: Path, capsys: Any
) -> None:
    """Snapshots never written (a refused or broken snapshot topic): the tail grows with the
    history, but a load reads at most `max_tail_syncs` of it, says so, and still translates
    safely (never past what the writer's full history gives)."""
    src, dst = f"s{unique}", f"t{unique}"
    topic, remote = f"hist-{unique}", f"s{unique}.hist-{unique}"
    flow = flow_raw(clusters, src, dst, [topic], tmp_path, emit_heartbeats=False, emit_checkpoints=False)
    spec = parse_flow_spec(flow)
    create_topic(clusters.source, topic, PARTITIONS)
    clients = FailoverClients.connect(spec)
    clients.sync_log = SyncLog(spec.target, src, snapshot_after_syncs=10**9, snapshot_interval_s=10**9)
    writer = FailoverListener.for_flow(spec, serve_metrics=False, heartbeats=False, clients=clients)
    loads, batch = [], 0
    for batches in (50, 500):
        while batch < batches:
            writer.on_batch(compacted_batch(topic, remote, batch))
            batch += 1
        if batches == 500:  # and a snapshot topic holding a record this version cannot read
            produce(clusters.target, snapshot_topic(src), [{"key": b"\x07junk", "value": b"?", "partition": 0}])
        capsys.readouterr()
        store, sync_log = SyncStore(), SyncLog(spec.target, src, max_tail_syncs=1000)
        started = time.monotonic()
        sync_log.load(store)
        loads.append((time.monotonic() - started, dict(sync_log.last_load)))
        err = capsys.readouterr().err
        for p in range(PARTITIONS):
            for u in range(0, batches * 2 * RECORDS, 37):
                got, full = store.translate(topic, p, u), writer.store.translate(topic, p, u)
                assert got is None or full is None or got <= full, (p, u, got, full)
            assert store.translate(topic, p, batches * 2 * RECORDS - 2) == batches * RECORDS - 1  # the head: exact
    writer.close(final=False)
    (small_s, small), (big_s, big) = loads
    assert small["tail_skipped"] == 0 and big["tail_records"] == 1000
    assert big["tail_skipped"] > 0 and "read the newest 1000 only" in err
    assert "snapshots unreadable" in err and "kmirror offset_sync_load" in err
    assert big_s < 3 * small_s + 1.0
