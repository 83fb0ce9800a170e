"""One structured, quiet progress line per non-empty batch: records, bytes, duration, lag.

Written to stderr as `kmirror progress {json}` (the sink's commit runs in a Python worker whose
logging is not configured, and stderr reaches the driver's console and the Spark driver log).
Lag is the source's end offsets minus the batch's next offsets, over the batch's partitions.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from kmirror.errors import KmirrorError
from kmirror.flowspec import FlowSpec
from kmirror_engine.failover.group_commit import next_offsets
from kmirror_engine.observability.progress import BatchProgress

PREFIX = "kmirror progress "


def progress_record(
    spec: FlowSpec, batch: BatchProgress, end_offsets: dict[tuple[str, int], int] | None
) -> dict[str, Any]:
    """The fields of one progress line (lag is null when the end offsets are unknown)."""
    resume = next_offsets(batch)
    lag = None if end_offsets is None else sum(max(0, end_offsets.get(tp, off) - off) for tp, off in resume.items())
    rate = round(batch.records * 1000 / batch.duration_ms) if batch.duration_ms > 0 else None
    return {
        "flow": spec.id,
        "batch": batch.batch_id,
        "records": batch.records,
        "bytes": batch.bytes,
        "duration_ms": batch.duration_ms,
        "records_per_s": rate,
        "partitions": len(resume),
        "lag": lag,
        "skipped": sum(p.skipped_records for p in batch.partitions),
        "dead_lettered": sum(p.dead_lettered for p in batch.partitions),  # too large for the target: in the DLQ
        **_throttling(spec, batch),
    }


def _throttling(spec: FlowSpec, batch: BatchProgress) -> dict[str, Any]:
    """A rate-limited flow's line also shows its limits, its rate over the batch and the time its
    copy loops waited for the limits (summed over the loops)."""
    limits = {name: spec.option(name) for name in ("max_bytes_per_second", "max_records_per_second")}
    if not any(limits.values()):
        return {}
    seconds = batch.duration_ms / 1000
    return {
        "bytes_per_s": round(batch.bytes / seconds) if seconds > 0 else None,
        **{name: limit for name, limit in limits.items() if limit},
        "throttled_s": round(batch.throttled_ms / 1000, 1),
    }


class ProgressLogListener:
    def __init__(self, spec: FlowSpec, out: TextIO | None = None, admin: Any = None) -> None:
        self.spec, self.out, self._admin = spec, out, admin

    def _end_offsets(self, batch: BatchProgress) -> dict[tuple[str, int], int] | None:
        from kmirror_engine.planning.offset_queries import query_offsets

        if self._admin is None:
            from kmirror_engine.clients.factory import admin_client

            self._admin = admin_client(self.spec.source)
        read_committed = self.spec.option("consumer").get("isolation.level", "read_committed") == "read_committed"
        try:
            return query_offsets(self._admin, self.spec.source, next_offsets(batch), "latest", read_committed, 5.0)
        except KmirrorError:
            return None  # reported as "lag": null; the next batch tries again

    def on_batch(self, batch: BatchProgress) -> None:
        if batch.records == 0 and not batch.partitions:
            return
        line = PREFIX + json.dumps(progress_record(self.spec, batch, self._end_offsets(batch)))
        print(line, file=self.out or sys.stderr, flush=True)

    def on_idle(self, now_ms: int) -> None:
        """Nothing periodic."""

    def close(self, final: bool) -> None:
        """Nothing to release (the admin client has no close)."""
