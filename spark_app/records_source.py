"""The "kmirror-records" Python data source (batch): the records of planned offset ranges as rows,
for flows with a `transform` (`spark_app.transform`). The copy path never uses it.

Contract:
- schema `RECORDS_SCHEMA` (the `records` view of docs/spark-app.md): `topic` STRING, `partition`
  INT, `offset` BIGINT, `key` BINARY, `value` BINARY, `headers` ARRAY<STRUCT<key: STRING, value:
  BINARY>>, `timestamp` TIMESTAMP (the record's CreateTime; null when the record has none).
- option "tasks": JSON list of tasks, each a list of `[topic, partition, start, end]` ranges (end
  exclusive); one Spark input partition per task, so one source partition is read by one task,
  in offset order (the driver groups them, `kmirror_engine.planning.ranges.plan_tasks`).
- `read()` runs on executors: one confluent-kafka consumer per task, `assign()` at each range's
  start (never subscribe), read_committed, up to each range's end; offsets are never assumed
  contiguous (markers, compaction). Rows leave as Arrow record batches of at most
  `ARROW_BATCH_ROWS` rows. Any consumer error other than a transient one raises `CopyError`
  naming the partition, so the Spark task (and the micro-batch) fails and is retried.
Option "flow_spec": `FlowSpec.to_dict()` as JSON (source cluster, consumer overrides).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from kmirror.errors import KmirrorError
from spark_app.lazy_pandas import defer_pandas_import

RECORDS_SOURCE_NAME = "kmirror-records"
RECORDS_SCHEMA = (
    "topic STRING, partition INT, offset BIGINT, key BINARY, value BINARY, "
    "headers ARRAY<STRUCT<key: STRING, value: BINARY>>, timestamp TIMESTAMP"
)
# Rows per Arrow batch handed to Spark: large enough to amortise the per-batch cost, small enough
# that a worker holds a few MiB of records at a time.
ARROW_BATCH_ROWS = 10_000
STALL_TIMEOUT_S = 300.0

Range = tuple[str, int, int, int]  # topic, partition, start offset, end offset (exclusive)


@dataclass(frozen=True)
class RecordsTask(InputPartition):
    index: int
    ranges: tuple[Range, ...]


def arrow_schema() -> Any:
    import pyarrow as pa

    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    return pa.schema(
        [
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("headers", pa.list_(header)),
            ("timestamp", pa.timestamp("us", tz="UTC")),
        ]
    )


class _Columns:
    """Column lists of one Arrow batch being filled."""

    def __init__(self) -> None:
        self.topic: list[str] = []
        self.partition: list[int] = []
        self.offset: list[int] = []
        self.key: list[bytes | None] = []
        self.value: list[bytes | None] = []
        self.headers: list[list[tuple[str, bytes | None]] | None] = []
        self.timestamp: list[int | None] = []

    def add(self, msg: Any) -> None:
        self.topic.append(msg.topic())
        self.partition.append(msg.partition())
        self.offset.append(msg.offset())
        self.key.append(msg.key())
        self.value.append(msg.value())
        self.headers.append(msg.headers() or [])
        kind, ts = msg.timestamp()
        self.timestamp.append(ts * 1000 if kind != 0 and ts >= 0 else None)  # 0: TIMESTAMP_NOT_AVAILABLE

    def __len__(self) -> int:
        return len(self.offset)

    def batch(self, schema: Any) -> Any:
        import pyarrow as pa

        headers = [None if h is None else [{"key": k, "value": v} for k, v in h] for h in self.headers]
        arrays = [self.topic, self.partition, self.offset, self.key, self.value, headers, self.timestamp]
        return pa.RecordBatch.from_arrays(
            [pa.array(a, type=f.type) for a, f in zip(arrays, schema, strict=True)], schema=schema
        )


def read_ranges(consumer: Any, ranges: tuple[Range, ...], stall_timeout_s: float = STALL_TIMEOUT_S) -> Iterator[Any]:
    """Messages of `ranges` (one round per source partition's successive ranges), in offset order
    per partition; raises CopyError on a consumer error or no progress for `stall_timeout_s`."""
    from confluent_kafka import TopicPartition

    pending = [r for r in ranges if r[3] > r[2]]
    while pending:
        round_: dict[tuple[str, int], Range] = {}
        later: list[Range] = []
        for rng in pending:
            if (rng[0], rng[1]) in round_:
                later.append(rng)
            else:
                round_[(rng[0], rng[1])] = rng
        consumer.assign([TopicPartition(t, p, s) for t, p, s, _ in round_.values()])
        try:
            yield from _read_round(consumer, {tp: r[3] for tp, r in round_.items()}, stall_timeout_s)
        finally:
            # librdkafka keeps a partition's pause flag across assignments: clear it
            consumer.resume([TopicPartition(t, p) for t, p in round_])
            consumer.unassign()
        pending = later


def _read_round(consumer: Any, active: dict[tuple[str, int], int], stall_timeout_s: float) -> Iterator[Any]:
    from confluent_kafka import KafkaError, TopicPartition

    from kmirror_engine.copying import TRANSIENT, CopyError

    def finish(tp: tuple[str, int]) -> None:
        if active.pop(tp, None) is not None:
            consumer.pause([TopicPartition(*tp)])

    last_move = time.monotonic()
    while active:
        msgs = consumer.consume(1000, timeout=0.1)
        for msg in msgs:
            tp, err = (msg.topic(), msg.partition()), msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if tp in active and msg.offset() >= active[tp]:
                        finish(tp)
                    continue
                if err.code() in TRANSIENT and not err.fatal():
                    continue  # librdkafka reconnects; bounded by the stall timeout
                raise CopyError(f"consuming {tp[0]}[{tp[1]}] failed: {err.str()}")
            end = active.get(tp)
            if end is None:
                continue  # prefetched past a finished range
            if msg.offset() >= end:
                finish(tp)
                continue
            yield msg
        moved = bool(msgs)
        if active:  # ranges whose last offsets are markers end by position, not by a record
            for position in consumer.position([TopicPartition(t, p) for t, p in active]):
                tp = (position.topic, position.partition)
                if tp in active and position.offset >= active[tp]:
                    finish(tp)
                    moved = True
        if moved:
            last_move = time.monotonic()
        elif time.monotonic() - last_move > stall_timeout_s:
            stuck = ", ".join(f"{t}[{p}] end {e}" for (t, p), e in active.items())
            raise CopyError(f"no progress for {stall_timeout_s:.0f} s before the planned end: {stuck}")


class RecordsReader(DataSourceReader):
    def __init__(self, spec_json: str, tasks: list[list[Range]]) -> None:
        self.spec_json, self.tasks = spec_json, tasks

    def partitions(self) -> list[InputPartition]:
        return [RecordsTask(i, tuple(tuple(r) for r in task)) for i, task in enumerate(self.tasks)]  # type: ignore[misc]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from kmirror.flow.spec import parse_flow_spec
        from kmirror_engine.clients import consumer_config, new_consumer
        from kmirror_engine.copying import CONSUMER_REQUIRED, CONSUMER_TUNING

        assert isinstance(partition, RecordsTask)
        defer_pandas_import()  # a task's process: pyarrow would import pandas for nothing
        spec = parse_flow_spec(json.loads(self.spec_json))
        schema = arrow_schema()
        config = {
            **CONSUMER_TUNING,
            **consumer_config(spec.source, spec.copy, spec.consumer_group),
            **CONSUMER_REQUIRED,
        }
        consumer = new_consumer(config, role="records-reader")
        try:
            columns = _Columns()
            for msg in read_ranges(consumer, partition.ranges):
                columns.add(msg)
                if len(columns) >= ARROW_BATCH_ROWS:
                    yield columns.batch(schema)
                    columns = _Columns()
            if len(columns):
                yield columns.batch(schema)
        finally:
            consumer.close()


class RecordsSource(DataSource):
    """`spark.read.format("kmirror-records").option("flow_spec", ...).option("tasks", ...)`."""

    @classmethod
    def name(cls) -> str:
        return RECORDS_SOURCE_NAME

    def schema(self) -> str:
        return RECORDS_SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        spec_json, tasks = self.options.get("flow_spec"), self.options.get("tasks")
        if not spec_json or tasks is None:
            raise KmirrorError(f'the {RECORDS_SOURCE_NAME} data source needs options "flow_spec" and "tasks"')
        return RecordsReader(spec_json, json.loads(tasks))
