"""The mirror on a Spark standalone cluster (tests/cluster/standalone.py): executors in JVMs of
their own on two workers, the driver submitted in client mode, Apache Kafka brokers.

What a local master cannot show: the reader and writer pickled and shipped to other processes,
driver-side state absent from the executors, executors dying and their tasks rescheduled.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from kmirror.flow.replication_policy import offset_syncs_topic
from kmirror.flow.spec import parse_flow_spec
from kmirror.mm2.formats import decode_offset_sync
from kmirror_engine.failover.offset_sync_topic import read_partition0
from tests.cluster.conftest import ClusterApp
from tests.conftest import require_copy_loop
from tests.e2e.fault_helpers import flow_spec
from tests.e2e.test_mirror_e2e import mirrored, records, wait_for_checkpoint
from tests.kafka_helpers import add_fences, create_topic, produce

# pytest-timeout's 600 s counts the session's cluster start (~1 min in CI, 5 min under a load of ~30)
pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.spark40, pytest.mark.timeout(1200)]


@pytest.mark.parametrize(
    ("loop", "via"),
    [("python", "submit"), ("native", "python"), ("batch", "submit")],
    ids=["python-spark-submit", "native-python-m-spark_app", "batch-spark-submit"],
)
def test_once_copies_every_record_offset_syncs_and_checkpoints_on_the_cluster(
    clusters: Any, unique: str, tmp_path: Path, cluster_app: Callable[..., ClusterApp], loop: str, via: str
) -> None:
    """`--once` on two executors: every record with its key, headers, timestamp and partition;
    offset syncs and a translated checkpoint of a source group. `via="python"` is the app building
    its own session for the cluster master (its local start-up measures: the worker daemon, the
    class archive, zip directories)."""
    require_copy_loop("native" if loop == "native" else "python")
    topic, group, partitions = f"cl-{unique}.orders", f"grp-{unique}", 4
    create_topic(clusters.source, topic, partitions)
    produce(clusters.source, topic, [r for p in range(partitions) for r in records("a", p, 300)])
    add_fences(clusters.source, topic, partitions)
    consumer = Consumer({"bootstrap.servers": clusters.source, "group.id": group})
    consumer.commit(offsets=[TopicPartition(topic, 0, 120)], asynchronous=False)
    consumer.close()
    options = {"copy_loop": loop, "max_records_per_trigger": 500, "emit_checkpoints": True, "groups": [group]}
    flow = flow_spec(unique, clusters.source, clusters.target, [f"cl-{unique}\\..*"], tmp_path, **options)

    cluster_app(flow, via=via).run("--once")

    got = mirrored(clusters.target, f"west.{topic}", partitions)
    for p in range(partitions):
        expected = records("a", p, 300)
        assert [(m.key(), m.value()) for m in got[p]] == [(r["key"], r["value"]) for r in expected]
        assert [m.timestamp()[1] for m in got[p]] == [r["timestamp"] for r in expected]
        assert [m.headers() for m in got[p]] == [r["headers"] for r in expected]
    spec = parse_flow_spec(flow)
    syncs = [decode_offset_sync(m.key(), m.value()) for m in read_partition0(spec.target, offset_syncs_topic("west"))]
    assert {s.partition for s in syncs if s.topic == topic} == set(range(partitions))
    assert all(s.upstream_offset == s.downstream_offset for s in syncs if s.topic == topic)  # a fresh target
    checkpoint = wait_for_checkpoint(spec, group, [])
    assert (checkpoint.topic, checkpoint.partition) == (f"west.{topic}", 0)
    assert checkpoint.upstream_offset == 120 and checkpoint.downstream_offset <= 120


def test_transform_on_the_cluster_drops_and_keeps_metadata(
    clusters: Any, unique: str, tmp_path: Path, cluster_app: Callable[..., ClusterApp]
) -> None:
    """A Spark SQL transform: records through the executors' JVMs (records source and writer),
    the flow's listeners in the driver (foreachBatch)."""
    from tests.e2e.test_transform_e2e import kept, source_records

    topic = f"tr-{unique}"
    create_topic(clusters.source, topic, 2)
    produce(clusters.source, topic, source_records(60))
    add_fences(clusters.source, topic, 2)
    sql = (
        "SELECT * FROM records WHERE CAST(key AS STRING) NOT LIKE 'drop-%' AND NOT exists(headers, h -> h.key = 'pii')"
    )
    flow = flow_spec(unique, clusters.source, clusters.target, [topic], tmp_path, transform={"sql": sql})

    cluster_app(flow).run("--once")

    got = mirrored(clusters.target, f"west.{topic}", 2)
    for p in (0, 1):
        want = [i for i in range(60) if i % 2 == p and kept(i)]
        assert [m.value() for m in got[p]] == [f"v{i}".encode() for i in want]
        assert [m.headers() for m in got[p]] == [[("trace", f"t{i}".encode())] for i in want]
