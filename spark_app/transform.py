"""Transforms in Spark SQL: a flow with `transform: {"sql": ...}` takes the records-through-Spark path.

The stream is the same as the copy path's (the kmirror-source plans offset ranges; Spark's
checkpoint holds exact offsets, on every streaming API of `spark_app.stream_readers`), but each
micro-batch runs in `foreachBatch` (`TransformBatch`) on the driver:
1. the batch's planned ranges are collected (one small row per source partition range) and
   grouped into read tasks (`plan_tasks`: a source partition is read by one task, in order);
2. "kmirror-records" (`spark_app.records_source`) reads their records on executors as Arrow
   rows, registered as the temporary view `records` of the batch's session;
3. the flow's SQL runs over it (`spark.sql`), and `RecordsWriter` (`mapInArrow`) produces the
   result rows to the target and reports, per task, what it wrote with the offset syncs;
4. the batch's progress has one entry per planned range, ending at the range's end whatever the
   query dropped, and goes to the same listeners as the copy path's (source group commit,
   progress line, offset syncs and checkpoints, metrics).

`validate_transform` refuses a query before any record is written (ValidationError, exit 2,
naming the flow and Spark's error): invalid SQL, a missing or extra column, a wrong type, a
plan that would reorder records across partitions (sort, aggregate, join, window, union, limit,
repartition, distinct), and an `offset` column that is not `records.offset` itself.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from kmirror.errors import Problem, ValidationError
from kmirror.flow.spec import FlowSpec
from kmirror.flow.views import CopySettings, PlanningSettings
from kmirror_engine.observability import BatchListener, BatchProgress, PartitionProgress
from kmirror_engine.planning import OffsetRange, plan_tasks
from spark_app.records_source import RECORDS_SCHEMA, RecordsSource

log = logging.getLogger("kmirror.transform")
VIEW = "records"
COLUMN_TYPES = {
    "topic": "string",
    "partition": "int",
    "offset": "bigint",
    "key": "binary",
    "value": "binary",
    "headers": "array<struct<key:string,value:binary>>",
    "timestamp": "timestamp",
}
# Logical plan nodes that keep each input partition's rows in place and in order (analyzed plan).
PER_RECORD_NODES = frozenset(
    {
        "Project",
        "Filter",
        "SubqueryAlias",
        "View",
        "Generate",
        "WithCTE",
        "CTERelationDef",
        "CTERelationRef",
        "LocalRelation",
        "LogicalRDD",
        "ResolvedHint",
        "RelationV2",
        "DataSourceV2Relation",
    }
)
_NODE = re.compile(r"^[\s:|+\-]*(\w+)")
_VIEW_LOCK = threading.Lock()  # createOrReplaceTempView + sql as one step per process


@dataclass(frozen=True)
class Transform:
    sql: str
    exact_origin: bool  # topic and partition are records' own columns: every kept row is attributed


def _refused(flow_id: str, message: str) -> ValidationError:
    return ValidationError([Problem("transform.sql", message)], source=f"flow {flow_id}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _output_ids(df: Any) -> dict[str, int]:
    output = df._jdf.queryExecution().analyzed().output()
    return {output.apply(i).name(): output.apply(i).exprId().id() for i in range(output.size())}


def validate_transform(spark: Any, flow_id: str, copy: CopySettings) -> Transform:
    """Flow `flow_id`'s transform (its `copy` view's `transform_sql`), checked over an empty
    `records` view (module doc); raises ValidationError."""
    from pyspark.errors import PySparkException

    sql = copy.transform_sql
    if sql is None:
        raise ValueError(f"flow {flow_id} has no transform")  # callers check copy.transform_sql first
    session = spark.newSession()  # its own temporary views: a user's `records` view stays untouched
    empty = session.createDataFrame([], RECORDS_SCHEMA)
    empty.createOrReplaceTempView(VIEW)
    try:
        result = session.sql(sql)
        fields = {f.name: f.dataType.simpleString() for f in result.schema.fields}
        plan = result._jdf.queryExecution().analyzed().toString()
    except PySparkException as exc:
        raise _refused(flow_id, f"Spark refused the query: {_first_line(exc)}") from None
    problems = [
        f"the result has no column `{name}` ({wanted}); it must have exactly the columns of records"
        for name, wanted in COLUMN_TYPES.items()
        if name not in fields
    ]
    problems += [
        f"the result has a column `{name}` that records does not have; only records' columns are written"
        for name in fields
        if name not in COLUMN_TYPES
    ]
    problems += [
        _type_problem(name, got, COLUMN_TYPES[name])
        for name, got in fields.items()
        if name in COLUMN_TYPES and got != COLUMN_TYPES[name]
    ]
    nodes = sorted({m.group(1) for line in plan.splitlines() if (m := _NODE.match(line))} - PER_RECORD_NODES)
    if nodes:
        problems.append(
            f"the query uses {', '.join(nodes)}, which would reorder records or mix partitions; a "
            "transform works record by record (SELECT ... FROM records WHERE ..., functions, explode)"
        )
    if problems:
        raise ValidationError([Problem("transform.sql", p) for p in problems], source=f"flow {flow_id}")
    source_ids, result_ids = _output_ids(empty), _output_ids(result)
    if result_ids["offset"] != source_ids["offset"]:
        raise _refused(
            flow_id,
            "column `offset` must be records.offset unchanged (the mirror maps source offsets "
            "to target offsets with it)",
        )
    exact = all(result_ids[c] == source_ids[c] for c in ("topic", "partition"))
    return Transform(sql, exact_origin=exact)


def _type_problem(name: str, got: str, wanted: str) -> str:
    hint = f"; wrap it in CAST(... AS {wanted.upper()})" if wanted == "binary" and got == "string" else ""
    return f"column `{name}` is {got}, must be {wanted}{hint}"


class TransformBatch:
    """The `foreachBatch` function of a transform flow (module doc)."""

    def __init__(
        self,
        flow_id: str,
        spec_json: str,
        planning: PlanningSettings,
        transform: Transform,
        task_count: int,
        listeners: Callable[[], list[BatchListener]],
    ) -> None:
        """The batches of flow `flow_id` (its spec as JSON, for the records' reader and writer
        tasks; its `planning` view: the records per task), through `transform` over `task_count`
        tasks; `listeners()`: the flow's listeners (`listeners_for`), called after each batch."""
        self.flow_id, self.spec_json, self.planning = flow_id, spec_json, planning
        self.transform, self.task_count, self.listeners = transform, task_count, listeners

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        from spark_app.listeners import run_side_work
        from spark_app.records_writer import SUMMARY_SCHEMA, RecordsWriter

        rows = batch_df.collect()  # the planned ranges: one small row per source partition range
        ranges = [
            OffsetRange(r.source_topic, r.partition, r.start_offset, r.end_offset, r.target_topic)
            for r in rows
            if r.end_offset > r.start_offset
        ]
        skipped = {(r.source_topic, r.partition): r.skipped_before or 0 for r in rows}
        started = int(time.time() * 1000)
        summaries: list[dict[str, Any]] = []
        if ranges:
            session = batch_df.sparkSession
            tasks = plan_tasks(ranges, self.task_count, self.planning.max_records_per_task)
            session.dataSource.register(RecordsSource)
            task_json = json.dumps([[list(r.as_row()[:4]) for r in task] for task in tasks])
            records = (
                session.read.format(RecordsSource.name())
                .option("flow_spec", self.spec_json)
                .option("tasks", task_json)
                .load()
            )
            with _VIEW_LOCK:
                records.createOrReplaceTempView(VIEW)
                result = session.sql(self.transform.sql)
            writer = RecordsWriter(self.spec_json, [r.as_row() for r in ranges])
            summaries = [json.loads(row.summary) for row in result.mapInArrow(writer, SUMMARY_SCHEMA).collect()]
        batch = batch_progress(batch_id, ranges, skipped, summaries, started)
        _batch_log(batch, summaries)
        # the batch is delivered: side work failing is logged and retried with the next batch, as
        # in the copy path's sink commit (failing the batch would copy it again at every retry)
        run_side_work(self.flow_id, lambda listener: listener.on_batch(batch), self.listeners)
        now = int(time.time() * 1000)
        run_side_work(self.flow_id, lambda listener: listener.on_idle(now), self.listeners)


def batch_progress(
    batch_id: int,
    ranges: list[OffsetRange],
    skipped: dict[tuple[str, int], int],
    summaries: list[dict[str, Any]],
    started_ms: int,
) -> BatchProgress:
    """One PartitionProgress per planned range: next offset = the range's end (dropped records
    included), records/bytes/syncs from the writer tasks' summaries. Unattributed rows (routed
    elsewhere) are counted on the batch's first range so the batch's totals stay right."""
    parts: dict[tuple[str, int], dict[str, Any]] = {}
    unattributed = [0, 0]
    for summary in summaries:
        for topic, partition, part in summary["parts"]:
            parts[(topic, partition)] = part
        unattributed = [unattributed[0] + summary["unattributed"][0], unattributed[1] + summary["unattributed"][1]]
    progress, counted = [], set()
    for index, r in enumerate(ranges):
        tp = (r.source_topic, r.partition)
        part = parts.get(tp, {}) if tp not in counted else {}  # a partition's counts go on its first range
        counted.add(tp)
        syncs = [(int(u), int(d)) for u, d in parts.get(tp, {}).get("syncs", []) if r.start_offset <= u < r.end_offset]
        lat = part.get("lat")
        extra = unattributed if index == 0 else [0, 0]
        progress.append(
            PartitionProgress(
                source_topic=r.source_topic,
                partition=r.partition,
                target_topic=r.target_topic,
                start_offset=r.start_offset,
                next_offset=r.end_offset,
                records=part.get("records", 0) + extra[0],
                bytes=part.get("bytes", 0) + extra[1],
                last_timestamp_ms=part.get("last_ts"),
                offset_syncs=tuple(syncs),
                latency_min_ms=lat[0] if lat else None,
                latency_max_ms=lat[1] if lat else None,
                latency_sum_ms=lat[2] if lat else 0,
                latency_count=lat[3] if lat else 0,
                skipped_records=skipped.get(tp, 0),
            )
        )
    firsts = [s["first_ms"] for s in summaries]
    last = max((s["last_ms"] for s in summaries), default=started_ms)
    return BatchProgress(batch_id, tuple(progress), last - min(firsts, default=started_ms))


def _batch_log(batch: BatchProgress, summaries: list[dict[str, Any]]) -> None:
    """KMIRROR_BATCH_LOG (the benchmark's per-batch line, as the copy path's sink writes it)."""
    from spark_app.sink import BATCH_LOG_ENV

    path = os.environ.get(BATCH_LOG_ENV)
    if not path:
        return
    first = min((s["first_ms"] for s in summaries), default=None)
    last = max((s["last_ms"] for s in summaries), default=int(time.time() * 1000))
    line = {
        "batch_id": batch.batch_id,
        "records": batch.records,
        "bytes": batch.bytes,
        "tasks_ms": batch.duration_ms,
        "first_read_ms": first,
        "last_delivery_ms": last,
        "committed_ms": int(time.time() * 1000),
        "path": "transform",
    }
    with open(path, "a") as out:
        out.write(json.dumps(line) + "\n")


def transform_writer(spark: Any, ranges: Any, spec: FlowSpec, task_count: int) -> Any:
    """The DataStreamWriter of a transform flow; validates the query first (ValidationError)."""
    transform = validate_transform(spark, spec.id, spec.copy)
    if not transform.exact_origin:
        log.warning(
            "%s: the transform changes topic or partition; offset syncs stay exact unless it routes "
            "records into a partition the flow mirrors itself (docs/spark-app.md)",
            spec.id,
        )
    from spark_app.listeners import listeners_for

    batches = TransformBatch(
        spec.id, json.dumps(spec.to_dict()), spec.planning, transform, task_count, partial(listeners_for, spec)
    )
    return ranges.writeStream.foreachBatch(batches)
