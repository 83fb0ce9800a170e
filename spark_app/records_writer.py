"""The writer of the transform path: a `mapInArrow` function that hands a transform's result rows
to the engine's producing (`kmirror_engine.copying.TransformWrites`: where rows go, how a new
remote topic is created, how offset syncs are attributed) and returns one summary row per task.

Contract of `RecordsWriter(spec_json, ranges)(batches)` (runs on executors): every row of every
Arrow batch is produced; the task's summary (JSON in column `summary`) is yielded only after every
delivery was acknowledged; any delivery error raises CopyError, failing the task and so the
micro-batch (at-least-once). The producer of a task that drained cleanly is kept for the next task.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

SUMMARY_SCHEMA = "summary STRING"


def _columns(batch: Any) -> dict[str, list[Any]]:
    """An Arrow batch as column name -> Python values, `timestamp` as microseconds."""
    names = batch.schema.names
    col = {name: batch.column(names.index(name)).to_pylist() for name in names if name != "timestamp"}
    col["timestamp"] = batch.column(names.index("timestamp")).cast("int64").to_pylist()
    return col


class RecordsWriter:
    """Picklable `mapInArrow` function (module doc); `ranges`: the batch's planned ranges as
    `[source_topic, partition, start, end, target_topic]`."""

    def __init__(self, spec_json: str, ranges: Sequence[Sequence[Any]]) -> None:
        self.spec_json, self.ranges = spec_json, [list(r) for r in ranges]

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from kmirror.flow.spec import parse_flow_spec
        from kmirror_engine.copying import TransformWrites, keep_producer, take_producer
        from spark_app.lazy_pandas import defer_pandas_import

        defer_pandas_import()  # a task's process: pyarrow would import pandas for nothing
        spec = parse_flow_spec(json.loads(self.spec_json))
        key, producer = take_producer(spec.route, spec.copy)
        task = TransformWrites(spec.route, spec.topic_sync, producer, self.ranges)
        first_ms = int(time.time() * 1000)
        for batch in batches:
            if batch.num_rows:
                task.write(_columns(batch))
        task.drain()
        keep_producer(key, producer)  # only a producer that drained cleanly is kept for the next task
        yield pa.RecordBatch.from_pylist([{"summary": json.dumps(task.summary(first_ms))}])
