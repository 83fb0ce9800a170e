"""The writer half alone in real Spark: a one-batch stream reader emits fixed offset ranges
(the reader's row schema) into the "kmirror-sink" data source, on two local brokers.

Measures the copy path (Spark tasks -> RangeCopier) without the planner, and verifies the
output count per partition:

    python bench/sink_harness.py [--records 2000000] [--partitions 8] [--tasks 2] [--master local[*]]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from bench.measure import add_fences, count_until_fence, create_topics, produce_parallel
from kmirror_cli.local_brokers import LocalBroker
from spark_app.sink import BATCH_LOG_ENV, MirrorSink

RANGE_SCHEMA = "source_topic STRING, partition INT, start_offset BIGINT, end_offset BIGINT, target_topic STRING"


class FixedRanges(DataSource):
    """Option "ranges": JSON list of range rows; "tasks": how many InputPartitions share them."""

    @classmethod
    def name(cls) -> str:
        return "kmirror-fixed-ranges"

    def schema(self) -> str:
        return RANGE_SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _OneBatch(json.loads(self.options["ranges"]), int(self.options["tasks"]))


class _OneBatch(DataSourceStreamReader):
    def __init__(self, ranges: list[list[Any]], tasks: int) -> None:
        self.ranges, self.tasks = ranges, tasks

    def initialOffset(self) -> dict[str, int]:
        return {"batch": 0}

    def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, int]:
        return {"batch": 1}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        if start["batch"] >= end["batch"]:
            return []
        return [InputPartition(self.ranges[k :: self.tasks]) for k in range(self.tasks)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        for row in partition.value:
            yield tuple(row)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to commit: the batch is fixed."""


def sink_query(spark: SparkSession, ranges: list[list[Any]], tasks: int, spec: dict[str, Any], checkpoint: Path) -> Any:
    """The started availableNow query that copies `ranges` ([topic, partition, start, end, target
    topic]) through the kmirror-sink data source of flow `spec`, its writer tasks spread over `tasks`."""
    spark.dataSource.register(FixedRanges)
    spark.dataSource.register(MirrorSink)
    return (
        spark.readStream.format("kmirror-fixed-ranges")
        .option("ranges", json.dumps(ranges))
        .option("tasks", tasks)
        .load()
        .writeStream.format("kmirror-sink")
        .option("flow_spec", json.dumps(spec))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--master", default="local[*]")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="kmirror-sink-harness-"))
    os.environ[BATCH_LOG_ENV] = str(workdir / "batches.jsonl")  # before the JVM starts: workers inherit it
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    nparts = args.partitions
    with LocalBroker("harness-source") as source, LocalBroker("harness-target") as target:
        src, dst = source.bootstrap_servers, target.bootstrap_servers
        create_topics(src, ["src"], nparts)
        create_topics(dst, ["west.src"], nparts)
        counts = produce_parallel(src, "src", args.records, args.size, nparts, 2)["counts"]
        add_fences(src, "src", nparts)
        spec = {
            "id": "west->east",
            "source": {"alias": "west", "bootstrap_servers": src, "config": {}},
            "target": {"alias": "east", "bootstrap_servers": dst, "config": {}},
            "topics": ["src"],
            "topics_exclude": [],
            "replication_policy": {"type": "default"},
            "checkpoint_location": str(workdir / "unused"),
        }
        ranges = [["src", p, 0, counts[p], "west.src"] for p in range(nparts)]
        spark = SparkSession.builder.master(args.master).config("spark.ui.enabled", "false").getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        query = sink_query(spark, ranges, args.tasks, spec, workdir / "checkpoint")
        query.awaitTermination()
        spark.stop()
        add_fences(dst, "west.src", nparts)
        counted = count_until_fence(dst, "west.src", nparts)
        if counted != counts:
            raise SystemExit(f"output does not match the source: expected {counts}, counted {counted}")
    batch = json.loads((workdir / "batches.jsonl").read_text().splitlines()[-1])
    rate = batch["records"] / (batch["last_delivery_ms"] - batch["first_read_ms"]) * 1000
    print(f"verified; {batch['records']:,} records with {args.tasks} tasks on {args.master}: {rate:,.0f} records/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
