"""The kmirror-source's stream readers, one per Python streaming API; `reader_class()` picks one.

The app supports Spark 4.0.x (what EMR 8 and the apache/spark 4.0 images run) through 4.3.x,
and their Python streaming APIs differ. What decides is a feature, never a version string:

- **Admission control** (`pyspark.sql.streaming.datasource` importable; 4.3 has it, 4.0 and
  4.1 do not): Spark hands each batch's start to `latestOffset(start, limit)`, applies
  `getDefaultReadLimit()` (`max_records_per_trigger`) and calls `prepareForTriggerAvailableNow()`
  for `--once`. `AdmissionControlReader` uses it.
- **Without it** Spark calls `latestOffset()` with no start, and wraps Trigger.AvailableNow
  around a single call of it (one batch per query). `PositionTrackingReader` keeps the
  position itself: on a restart Spark tells it the newest offset-log entry (as
  `partitions(end, end)`, Spark's "latest seen offset"), before any `latestOffset()`; on a
  first start it begins at `initialOffset()`, computed once and remembered, because Spark
  asks for it after the first `latestOffset()`. Each `latestOffset()` admits at most
  `max_records_per_trigger` past the position and moves the position there: Spark runs the
  next batch up to exactly that offset. `--once` is driven by `spark_app.main` as a loop of
  AvailableNow queries, one bounded batch each, up to the end offsets it froze at start
  (option "until_offsets"), until a query has nothing left to do.

Both readers plan the same ranges with `kmirror_engine.planning.range_planner.RangePlanner`; rows and tasks are the
same (`RangeTask`), so the sink never knows which one ran.
"""

from __future__ import annotations

import faulthandler
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from kmirror.errors import KmirrorError
from kmirror.flow.spec import parse_flow_spec
from kmirror_engine.failover import write_takeover_syncs
from kmirror_engine.planning import RANGE_SCHEMA, Offsets, RangePlanner, offsets_from_json, offsets_to_json
from spark_app.lazy_pandas import defer_pandas_import

try:  # Spark >= 4.3 (see module doc); a missing module means the older API
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    HAS_ADMISSION_CONTROL = True
except ImportError:  # pragma: no cover - exercised by the Spark 4.0 leg of `make test`
    HAS_ADMISSION_CONTROL = False

READER_APIS = ("auto", "admission-control", "position-tracking")


# The reader's rows: the range contract plus the offsets retention deleted right before each
# range (fail_on_data_loss=false), so the copy tasks' progress carries the count to the batch
# listeners (progress line "skipped", metric kmirror_skipped_records_total), and each range's
# share of the flow's rate limits (`kmirror_engine.planning.rate_shares.split_rate_limits`).
# `source_end`: the source partition's end offset when the batch was planned (None after a restart
# replanned it): the batch listeners' lag and records at risk, without a ListOffsets per batch.
READER_SCHEMA = RANGE_SCHEMA + ", skipped_before BIGINT, rate_share DOUBLE, source_end BIGINT"


@dataclass(frozen=True)
class RangeTask(InputPartition):
    """One writer task: its ranges as plain rows (`READER_SCHEMA`)."""

    index: int
    ranges: tuple[tuple[str, int, int, int, str, int, float, int | None], ...]


class RangeReader(DataSourceStreamReader):
    """What both APIs share: the planner, the initial offsets, planning and reading ranges."""

    api = "base"

    def __init__(self, spec_json: str, once: bool, task_count: int, until_json: str | None = None) -> None:
        self.spec_json, self.once, self.task_count, self.until_json = spec_json, once, task_count, until_json
        self._planner: RangePlanner | None = None
        self._initial: Offsets | None = None

    @property
    def planner(self) -> RangePlanner:
        # built lazily in the planning process: Kafka clients cannot be pickled
        if self._planner is None:
            # a crash of this process (a native client's fault or abort) reaches Spark only as an
            # EOFException: print the Python stacks to stderr (the driver's log) first
            if not faulthandler.is_enabled():
                faulthandler.enable()
            self._planner = RangePlanner.for_flow(
                parse_flow_spec(json.loads(self.spec_json)),
                self.once,
                self.task_count,
                on_takeover=lambda flow, points: write_takeover_syncs(flow.route, points),
            )
            if self.until_json:
                self._planner.frozen_end = offsets_from_json(json.loads(self.until_json))
        return self._planner

    def initial_offsets(self) -> Offsets:
        """Computed once: Spark may ask after a `latestOffset()` that already started from it."""
        if self._initial is None:
            self._initial = self.planner.initial_offsets()
        return self._initial

    def initialOffset(self) -> dict:
        return offsets_to_json(self.initial_offsets())

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if start == end:
            return []  # Spark's "latest seen offset" call on a restart, or an empty batch: no Kafka call
        planner = self.planner
        tasks = planner.plan(offsets_from_json(start), offsets_from_json(end))
        skipped = planner.skipped_before
        shares = planner.rate_shares(tasks)  # bytes limit: by estimated bytes (issue 26)
        return [
            RangeTask(
                i,
                tuple(
                    (
                        *r.as_row(),
                        skipped.get((r.source_topic, r.partition), 0),
                        share,
                        _source_end(planner.log_end, r.source_topic, r.partition, r.end_offset),
                    )
                    for r, share in zip(task, task_shares, strict=True)
                ),
            )
            for i, (task, task_shares) in enumerate(zip(tasks, shares, strict=True))
        ]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, RangeTask)
        defer_pandas_import()  # a task's process: Spark's arrow path would import pandas for nothing
        return iter(partition.ranges)

    def commit(self, end: dict) -> None:
        """Progress lives in the checkpoint; the source group commit is a batch listener."""


class PositionTrackingReader(RangeReader):
    """Spark without admission control (4.0, 4.1): see module doc."""

    api = "position-tracking"

    def __init__(self, spec_json: str, once: bool, task_count: int, until_json: str | None = None) -> None:
        super().__init__(spec_json, once, task_count, until_json)
        self._position: Offsets | None = None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if self._position is None:  # a restart: the first call names the newest offset-log entry
            self._position = offsets_from_json(end)
        return super().partitions(start, end)

    def latestOffset(self) -> dict:  # type: ignore[override]  # Spark 4.0's signature (module doc)
        start = self._position if self._position is not None else self.initial_offsets()
        end = self.planner.next_end(start, self.planner.planning.max_records_per_trigger)
        self._position = end
        return offsets_to_json(end)


if HAS_ADMISSION_CONTROL:

    class AdmissionControlReader(RangeReader, SupportsTriggerAvailableNow):
        """Spark with admission control (4.3): Spark passes the start and the read limit."""

        api = "admission-control"

        def getDefaultReadLimit(self) -> ReadLimit:
            return ReadMaxRows(self.planner.planning.max_records_per_trigger)

        def prepareForTriggerAvailableNow(self) -> None:
            if self.planner.frozen_end is None:
                self.planner.freeze()

        def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
            max_records = None if isinstance(limit, ReadAllAvailable) else getattr(limit, "max_rows", None)
            return offsets_to_json(self.planner.next_end(offsets_from_json(start), max_records))


def reader_class(api: str = "auto") -> type[RangeReader]:
    """The reader for `api` ("auto": admission control where this pyspark has it)."""
    if api not in READER_APIS:
        raise KmirrorError(f'option "reader_api" must be one of {", ".join(READER_APIS)}, got {api!r}')
    if api == "position-tracking" or (api == "auto" and not HAS_ADMISSION_CONTROL):
        return PositionTrackingReader
    if not HAS_ADMISSION_CONTROL:
        raise KmirrorError(
            'option "reader_api" is "admission-control", but this pyspark has no pyspark.sql.streaming.datasource '
            '(Spark 4.0 and 4.1 lack it); use "auto"'
        )
    return AdmissionControlReader


def _source_end(log_end: dict[tuple[str, int], int], topic: str, partition: int, end_offset: int) -> int | None:
    """The end offset the planner saw for this partition, when it belongs to this batch (a batch
    replanned after a restart has none newer than its own end: unknown, asked later)."""
    seen = log_end.get((topic, partition))
    return seen if seen is not None and seen >= end_offset else None
