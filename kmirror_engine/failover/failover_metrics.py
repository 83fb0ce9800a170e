"""The metrics part of a flow's failover work (used by `FailoverListener` and its parts).

- `observe_batch`: batch metrics, with the source end offsets queried when the sink did not
  know them (the offset lag metric; unset, and the failure reported, when unreachable).
- `side_work(work, action)` / `report_failure(work, exc)`: the error policy of side work: a
  failure is printed as a `kmirror failover {json}` line, logged, counted in
  `kmirror_failover_work_failures_total{work}` and never raised (retried at the next round).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kmirror.flow.spec import ClusterEndpoint, FlowSpec
from kmirror.flow.views import CopySettings
from kmirror_engine.observability.metrics import FlowMetrics
from kmirror_engine.observability.progress import BatchProgress
from kmirror_engine.planning.offset_queries import query_offsets

log = logging.getLogger("kmirror.failover")
PREFIX = "kmirror failover "


def now_ms() -> int:
    return int(time.time() * 1000)


class FailoverMetrics:
    def __init__(self, flow_id: str, copy: CopySettings, source: ClusterEndpoint) -> None:
        """The failover metrics of flow `flow_id` (its `copy` view's rate limits and isolation;
        `source`: where `with_source_ends` reads end offsets); no I/O here."""
        self.flow_id, self.copy, self.source = flow_id, copy, source
        self.flow = FlowMetrics(flow_id)
        self.flow.set_rate_limits(copy.max_bytes_per_second, copy.max_records_per_second)

    @classmethod
    def for_flow(cls, spec: FlowSpec) -> FailoverMetrics:
        return cls(spec.id, spec.copy, spec.source)

    def side_work(self, work: str, action: Callable[[], Any]) -> Any:
        """Run `action`; a failure is reported and counted, never raised (see module docstring)."""
        try:
            return action()
        except Exception as exc:  # any failure: the batch's records are delivered, failing it cannot help
            self.report_failure(work, exc)
            return None

    def report_failure(self, work: str, exc: BaseException | str) -> None:
        count = self.flow.observe_work_failure(work)
        error = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        record = {
            "event": "failover_work_failed",
            "flow": self.flow_id,
            "work": work,
            "failures": count,
            "error": error,
            "retry": "next round",
        }
        if "AUTHORIZATION" in error.upper():
            record["hint"] = "grant the mirror's principal the ACLs named in the start-up warnings (kafka-acls.sh)"
        log.warning("flow %s: %s failed (%d so far, retried next round): %s", self.flow_id, work, count, error)
        print(PREFIX + json.dumps(record, sort_keys=True), file=sys.stderr, flush=True)

    def with_source_ends(self, batch: BatchProgress, source_admin: Any) -> BatchProgress:
        """`batch` with its source end offsets (asked of the source when the sink did not know them):
        the offset lag metric and the last known lag persisted with the syncs need them."""
        if batch.source_end_offsets:
            return batch
        return replace(batch, source_end_offsets=self._end_offsets(batch, source_admin))

    def observe_batch(self, batch: BatchProgress, source_admin: Any = None) -> None:
        """Batch metrics; `source_admin`: ask the source for missing end offsets (None: already done)."""
        if source_admin is not None:
            batch = self.with_source_ends(batch, source_admin)
        self.flow.observe_batch(batch, now_ms())

    def _end_offsets(self, batch: BatchProgress, source_admin: Any) -> dict[tuple[str, int], int]:
        """Source end offsets of the batch's partitions; {} (logged, lag left unset) when unreachable."""
        read_committed = self.copy.read_committed
        partitions = {(p.source_topic, p.partition) for p in batch.partitions}
        try:
            return query_offsets(source_admin, self.source, partitions, "latest", read_committed, 5.0)
        except Exception as exc:  # side work: the lag metric stays unset for this batch
            self.report_failure("offset_lag", exc)
            return {}
