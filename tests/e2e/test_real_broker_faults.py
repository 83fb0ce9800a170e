"""What only Apache Kafka can show: a broker killed with -9 and restarted from its log while the
mirror copies, an exactly-once run killed with a transaction open (its records aborted, never
visible to read_committed readers), and a source topic that grows partitions mid-stream.

Each test starts its own broker pair (tests/brokers.py) so it can kill them; the app runs as a
process (tests/e2e/fault_helpers.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.brokers import new_broker
from tests.e2e import fault_helpers as faults
from tests.e2e.fault_helpers import app_factory
from tests.kafka_helpers import create_topic

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.real_kafka]
__all__ = ["app_factory"]  # a fixture, used by name


@pytest.mark.parametrize("killed", ["target", "source"])
def test_a_broker_killed_with_9_and_restarted_mid_copy_loses_nothing(
    unique: str, tmp_path: Path, app_factory: Callable[..., faults.MirrorApp], killed: str
) -> None:
    """kill -9 of the target (or source) broker while batches are in flight; it restarts from
    its log on the same ports. The app (streaming) rides it out: every record reaches the target,
    the app never exits, and the duplicates are counted (at-least-once)."""
    topic, remote, partitions = f"kill-{unique}", f"west.kill-{unique}", 2
    clock = faults.Clock()
    with new_broker(f"kill-src-{unique}") as src, new_broker(f"kill-dst-{unique}") as dst:
        create_topic(src.bootstrap_servers, topic, partitions)
        ends = faults.produce_values(src.bootstrap_servers, topic, partitions, 3000, "a")
        flow = faults.flow_spec(
            unique, src.bootstrap_servers, dst.bootstrap_servers, [topic], tmp_path, max_records_per_trigger=400
        )
        app = app_factory(flow).start()
        faults.wait_until(
            "a first mirrored batch",
            lambda: any(
                o > 0
                for o in faults.committed(src.bootstrap_servers, faults.group_of(flow), topic, partitions).values()
            ),
            faults.APP_START_TIMEOUT_S,
            app,
        )
        clock.lap("first batch")
        broker = dst if killed == "target" else src
        broker.kill()
        time.sleep(3)  # the app sees the broker gone
        broker.start()
        clock.lap(f"{killed} killed and restarted")
        faults.wait_mirrored(app, src.bootstrap_servers, flow, topic, ends, timeout_s=180)
        clock.lap("caught up")
        more = faults.produce_values(src.bootstrap_servers, topic, partitions, 200, "b")
        faults.wait_mirrored(app, src.bootstrap_servers, flow, topic, more, timeout_s=120)
        sent = faults.expected_values(partitions, 3000, "a") + faults.expected_values(partitions, 200, "b")
        got = faults.target_values(dst.bootstrap_servers, remote, partitions)
        figures = faults.report(f"{killed} broker kill -9 mid-copy", sent, got, seconds=clock.laps)
        assert app.alive, app.log()[-3000:]
        assert app.stop() == 0, app.log()[-3000:]
    assert figures.missing == 0
    assert app.log().count("===== run") == 1


def watermarks(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kmirror-wm", "isolation.level": isolation})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    finally:
        consumer.close()


def test_exactly_once_killed_with_a_transaction_open_leaves_no_visible_duplicate(
    clusters: Any, unique: str, tmp_path: Path, app_factory: Callable[..., faults.MirrorApp]
) -> None:
    """A paced exactly-once run keeps each transaction open for seconds; kill -9 while one is open
    (the target's high watermark ahead of its last stable offset). After the restart the open
    transaction is aborted: a read_committed reader sees every record exactly once, while a
    read_uncommitted reader sees the aborted copies too (proof the kill hit an open transaction)."""
    topic, remote, partitions = f"eos-kill-{unique}", f"west.eos-kill-{unique}", 1
    create_topic(clusters.source, topic, partitions)
    ends = faults.produce_values(clusters.source, topic, partitions, 4000, "a")
    paced = {"exactly_once": True, "max_records_per_trigger": 2000, "max_records_per_second": 400}
    flow = faults.flow_spec(unique, clusters.source, clusters.target, [topic], tmp_path, **paced)
    app = app_factory(flow).start()
    clock = faults.Clock()

    def transaction_open() -> bool:
        try:
            high = watermarks(clusters.target, remote, partitions, "read_uncommitted")
            stable = watermarks(clusters.target, remote, partitions, "read_committed")
        except Exception:  # the remote topic is not created yet
            return False
        return any(h > s for h, s in zip(high, stable, strict=True))

    faults.wait_until("an open transaction on the target", transaction_open, faults.APP_START_TIMEOUT_S, app)
    app.kill9()
    clock.lap("killed with a transaction open")
    at_kill = watermarks(clusters.target, remote, partitions, "read_uncommitted")
    app.start()
    faults.wait_mirrored(app, clusters.source, flow, topic, ends, timeout_s=180)
    assert app.stop() == 0, app.log()[-3000:]
    clock.lap("caught up after restart")
    sent = faults.expected_values(partitions, 4000, "a")
    committed_view = faults.target_values(clusters.target, remote, partitions, read_committed=True)
    uncommitted_view = faults.target_values(clusters.target, remote, partitions, read_committed=False)
    figures = faults.report(
        "exactly-once kill -9 with a transaction open",
        sent,
        committed_view,
        high_watermark_at_kill=at_kill,
        read_uncommitted=len(uncommitted_view),
        seconds=clock.laps,
    )
    assert (figures.missing, figures.duplicates) == (0, 0)
    assert len(uncommitted_view) > len(committed_view), "the kill did not hit an open transaction"


def test_partitions_added_at_the_source_are_mirrored_from_their_start(
    clusters: Any, unique: str, tmp_path: Path, app_factory: Callable[..., faults.MirrorApp]
) -> None:
    """CreatePartitions on a mirrored topic mid-stream: the remote topic grows to the same count
    and the new partitions are copied from offset 0 (records keep their partition)."""
    topic, remote = f"grow-{unique}", f"west.grow-{unique}"
    create_topic(clusters.source, topic, 2)
    ends = faults.produce_values(clusters.source, topic, 2, 200, "a")
    flow = faults.flow_spec(unique, clusters.source, clusters.target, [topic], tmp_path)
    app = app_factory(flow).start()
    faults.wait_mirrored(app, clusters.source, flow, topic, ends, timeout_s=faults.APP_START_TIMEOUT_S)
    admin = AdminClient({"bootstrap.servers": clusters.source})
    for future in admin.create_partitions([NewPartitions(topic, 4)]).values():
        future.result(timeout=30)
    grown = faults.produce_values(clusters.source, topic, 4, 100, "b")
    faults.wait_mirrored(app, clusters.source, flow, topic, grown, timeout_s=120)
    assert app.stop() == 0, app.log()[-3000:]
    target = AdminClient({"bootstrap.servers": clusters.target})
    assert len(target.list_topics(timeout=10).topics[remote].partitions) == 4
    got = faults.target_values(clusters.target, remote, 4)
    figures = faults.report(
        "partitions added at the source", faults.expected_values(2, 200, "a") + faults.expected_values(4, 100, "b"), got
    )
    assert figures.missing == 0
    reader = Consumer({"bootstrap.servers": clusters.target, "group.id": "kmirror-grow-reader"})
    try:
        # the new partitions start at offset 0 with the source's first record of that partition
        for partition in (2, 3):
            reader.assign([TopicPartition(remote, partition, 0)])
            first = reader.poll(10)
            assert first is not None and first.error() is None and first.offset() == 0
            assert first.value() == f"b-{partition}-0".encode()
    finally:
        reader.close()
