"""Transforms in Spark SQL (issue 18) against two tansu brokers and the shared local Spark: the
three documented uses (drop by key/header, mask a JSON field, route a subset), exact offsets when
records are dropped, and refusal of a bad query before any record is written. Runs on both
legs of `make test` (pyspark 4.3 admission control, pyspark 4.0 position tracking)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from kmirror.errors import ValidationError
from kmirror.flow.replication_policy import offset_syncs_topic
from kmirror.flow.spec import FlowSpec, parse_flow_spec
from kmirror_engine.failover.offset_sync_topic import OffsetSyncTopic
from kmirror_engine.failover.offset_syncs import SyncStore
from spark_app import listeners as listeners_module
from spark_app.main import run_flow
from tests.e2e.test_mirror_e2e import mirrored
from tests.kafka_helpers import BASE_TIMESTAMP_MS, SYNC_FENCE, TANSU_FENCES, add_fences, create_topic, produce

pytestmark = [pytest.mark.e2e, pytest.mark.spark40]


def transform_flow(clusters: Any, unique: str, topic: str, sql: str, checkpoint: Path, **options: Any) -> FlowSpec:
    return parse_flow_spec(
        {
            "id": f"w{unique}->e{unique}",
            "checkpoint_location": str(checkpoint),
            "source": {"alias": f"w{unique}", "bootstrap_servers": clusters.source},
            "target": {"alias": f"e{unique}", "bootstrap_servers": clusters.target},
            "topics": [topic],
            "topics_exclude": [],
            "replication_policy": {"type": "default"},
            "emit_heartbeats": False,
            "emit_checkpoints": False,
            "offset_lag_max": 1,
            "transform": {"sql": sql},
            **options,
        }
    )


def source_records(count: int, first: int = 0) -> list[dict[str, Any]]:
    """Every 3rd record has a `drop-` key, every 5th a `pii` header; timestamps are distinct."""
    out = []
    for i in range(first, first + count):
        headers = [("pii", b"1")] if i % 5 == 4 else [("trace", f"t{i}".encode())]
        key = f"drop-{i}" if i % 3 == 2 else f"k{i}"
        out.append(
            {
                "key": key.encode(),
                "value": f"v{i}".encode(),
                "partition": i % 2,
                "headers": headers,
                "timestamp": BASE_TIMESTAMP_MS + i,
            }
        )
    return out


def kept(i: int) -> bool:
    return i % 3 != 2 and i % 5 != 4


def load_syncs(spec: FlowSpec) -> SyncStore:
    topic = offset_syncs_topic(spec.source.alias)
    produce(spec.target.bootstrap_servers, topic, [{"key": SYNC_FENCE[0], "value": SYNC_FENCE[1]}])
    store = SyncStore()
    OffsetSyncTopic(spec.target, topic).load(store)
    return store


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return [tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 30)]
    finally:
        consumer.close()


def test_drop_by_key_and_header_keeps_order_metadata_and_maps_dropped_offsets_forward(
    clusters: Any, spark: Any, unique: str, tmp_path: Path
) -> None:
    topic = f"orders-{unique}"
    create_topic(clusters.source, topic, 2)
    produce(clusters.source, topic, source_records(60))
    add_fences(clusters.source, topic, 2)  # tansu hides the newest batch; the fence passes the filter
    sql = (
        "SELECT * FROM records WHERE CAST(key AS STRING) NOT LIKE 'drop-%' AND NOT exists(headers, h -> h.key = 'pii')"
    )
    spec = transform_flow(clusters, unique, topic, sql, tmp_path / "cp")
    run_flow(spec, spark=spark, once=True)
    # its listeners ran in this driver (foreachBatch); their clients and threads end with the run
    assert spec.id not in listeners_module._cache
    produce(clusters.source, topic, source_records(20, first=60))  # a second run copies only these
    add_fences(clusters.source, topic, 2)
    run_flow(spec, spark=spark, once=True)

    remote = f"w{unique}.{topic}"
    got = mirrored(clusters.target, remote, 2)
    for p in (0, 1):
        want = [i for i in range(80) if i % 2 == p and kept(i)]
        assert [m.value() for m in got[p]] == [f"v{i}".encode() for i in want]
        assert [m.key() for m in got[p]] == [f"k{i}".encode() for i in want]
        assert [m.headers() for m in got[p]] == [[("trace", f"t{i}".encode())] for i in want]
        assert [m.timestamp()[1] for m in got[p]] == [BASE_TIMESTAMP_MS + i for i in want]
    # the source group is past every planned offset, dropped records included (tansu may still hide the last fence)
    assert all(offset >= 40 + TANSU_FENCES for offset in committed(clusters.source, spec.consumer_group, topic, 2))
    # every source offset, dropped or not, translates to where the next kept record landed
    store = load_syncs(spec)
    for p in (0, 1):
        # what source offset n of partition p holds: a record index, or None for tansu's fence (kept)
        layout = [i for i in range(60) if i % 2 == p] + [None] * TANSU_FENCES + [i for i in range(60, 80) if i % 2 == p]
        downstream = {n: d for d, n in enumerate(n for n, i in enumerate(layout) if i is None or kept(i))}
        for n in range(len(layout)):
            following = min(m for m in [*downstream, len(layout)] if m >= n)
            expected = downstream.get(following, len(downstream))
            assert store.translate(topic, p, n) == expected, (p, n)


def test_mask_a_json_field_with_from_json_and_to_json(clusters: Any, spark: Any, unique: str, tmp_path: Path) -> None:
    topic = f"users-{unique}"
    create_topic(clusters.source, topic, 1)
    rows = [
        {"key": f"u{i}".encode(), "value": json.dumps({"name": f"n{i}", "card": f"4111-{i:04d}"}).encode()}
        for i in range(10)
    ]
    produce(clusters.source, topic, rows)
    add_fences(clusters.source, topic, 1)
    sql = (
        "SELECT topic, partition, offset, key, CAST(to_json(named_struct('name', v.name, 'card', "
        "concat('****-', substr(v.card, -4)))) AS BINARY) AS value, headers, timestamp "
        "FROM (SELECT *, from_json(CAST(value AS STRING), 'name STRING, card STRING') AS v FROM records)"
    )
    spec = transform_flow(clusters, unique, topic, sql, tmp_path / "cp")
    run_flow(spec, spark=spark, once=True)
    got = mirrored(clusters.target, f"w{unique}.{topic}", 1)[0]
    assert [json.loads(m.value()) for m in got] == [{"name": f"n{i}", "card": f"****-{i:04d}"} for i in range(10)]
    assert [m.key() for m in got] == [f"u{i}".encode() for i in range(10)]


def test_route_a_subset_to_another_topic(clusters: Any, spark: Any, unique: str, tmp_path: Path) -> None:
    topic = f"pay-{unique}"
    create_topic(clusters.source, topic, 2)
    produce(
        clusters.source,
        topic,
        [
            {"key": f"{'eu' if i % 2 else 'us'}-{i}".encode(), "value": f"v{i}".encode(), "partition": (i // 10) % 2}
            for i in range(20)
        ],
    )
    add_fences(clusters.source, topic, 2)  # kept in the main topic (its key is not eu-)
    sql = (
        "SELECT CASE WHEN CAST(key AS STRING) LIKE 'eu-%' THEN concat(topic, '-eu') ELSE topic END AS topic, "
        "partition, offset, key, value, headers, timestamp FROM records"
    )
    spec = transform_flow(clusters, unique, topic, sql, tmp_path / "cp")
    run_flow(spec, spark=spark, once=True)
    main = mirrored(clusters.target, f"w{unique}.{topic}", 2)
    routed = mirrored(clusters.target, f"w{unique}.{topic}-eu", 2)
    for p in (0, 1):
        records = [i for i in range(20) if (i // 10) % 2 == p]
        assert [m.value() for m in main[p]] == [f"v{i}".encode() for i in records if i % 2 == 0]
        assert [m.value() for m in routed[p]] == [f"v{i}".encode() for i in records if i % 2 == 1]
    assert all(offset >= 10 for offset in committed(clusters.source, spec.consumer_group, topic, 2))
    # routed records left the main topic: their offsets map forward to the next record kept there
    store = load_syncs(spec)
    assert [store.translate(topic, p, n) for p in (0, 1) for n in range(10)] == [0, 1, 1, 2, 2, 3, 3, 4, 4, 5] * 2


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        # Unparsable SQL and reordering constructs (ORDER BY, joins, ...) are refused earlier, when the
        # flow spec is parsed (tests/test_transform_sql.py); these are what only Spark's analysis sees.
        (
            "SELECT topic, partition, offset, key, value, headers FROM records",
            "transform.sql: the result has no column `timestamp` (timestamp); it must have exactly the columns of "
            "records",
        ),
        (
            "SELECT topic, partition, offset, key, to_json(named_struct('a', 1)) AS value, headers, timestamp "
            "FROM records",
            "transform.sql: column `value` is string, must be binary; wrap it in CAST(... AS BINARY)",
        ),
        ("SELECT * FROM records WHERE nokey = 1", "transform.sql: Spark refused the query: [UNRESOLVED_COLUMN"),
        (
            "SELECT topic, partition, offset + 1 AS offset, key, value, headers, timestamp FROM records",
            "transform.sql: column `offset` must be records.offset unchanged",
        ),
    ],
)
def test_a_bad_query_is_refused_before_any_record_is_written(
    clusters: Any, spark: Any, unique: str, tmp_path: Path, sql: str, expected: str
) -> None:
    topic = f"bad-{unique}"
    create_topic(clusters.source, topic, 1)
    produce(clusters.source, topic, [{"value": b"v"}] * 3)
    spec = transform_flow(clusters, unique, topic, sql, tmp_path / "cp")
    with pytest.raises(ValidationError) as caught:
        run_flow(spec, spark=spark, once=True)
    assert caught.value.exit_code == 2
    message = str(caught.value)
    assert message.startswith(f"1 problem(s) in flow w{unique}->e{unique}:\n  - {expected}"), message
    from confluent_kafka.admin import AdminClient

    # refused before the first batch: no remote topic, so no record on the target
    target = AdminClient({"bootstrap.servers": clusters.target})
    assert f"w{unique}.{topic}" not in target.list_topics(timeout=10).topics
