"""One structured, quiet progress line per non-empty batch: records, bytes, duration, lag.

Written to stderr as `kmirror progress {json}` (the sink's commit runs in a Python worker whose
logging is not configured, and stderr reaches the driver's console and the Spark driver log).
Lag is the source's end offsets minus the batch's next offsets, over the batch's partitions.

At most one line per `LINE_INTERVAL_S` while the mirror is behind: a streaming mirror runs a
batch every ~0.2-0.3 s under load (trigger_interval_ms 200), and weeks of that would be
millions of lines. A batch that comes sooner after the last line and leaves lag behind (so
another batch follows) is held and summed into the next line (`"batches"` counts them); a
batch that catches up (lag 0, or lag unknown) is always printed at once, so a burst's last
line is never held; whatever is still held at close is printed then.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from typing import Any, TextIO

from kmirror.errors import KmirrorError
from kmirror.flow.endpoint import ClusterEndpoint
from kmirror.flow.views import CopySettings
from kmirror_engine.observability.progress import BatchProgress, next_offsets

PREFIX = "kmirror progress "
LINE_INTERVAL_S = 1.0


def progress_record(
    flow_id: str, copy: CopySettings, batch: BatchProgress, end_offsets: dict[tuple[str, int], int] | None
) -> dict[str, Any]:
    """The fields of one progress line of flow `flow_id` (lag is null when the end offsets are
    unknown; a rate-limited `copy` adds its throttling)."""
    resume = next_offsets(batch)
    lag = None if end_offsets is None else sum(max(0, end_offsets.get(tp, off) - off) for tp, off in resume.items())
    rate = round(batch.records * 1000 / batch.duration_ms) if batch.duration_ms > 0 else None
    return {
        "flow": flow_id,
        "batch": batch.batch_id,
        "records": batch.records,
        "bytes": batch.bytes,
        "duration_ms": batch.duration_ms,
        "records_per_s": rate,
        "partitions": len(resume),
        "lag": lag,
        "skipped": sum(p.skipped_records for p in batch.partitions),
        "dead_lettered": sum(p.dead_lettered for p in batch.partitions),  # too large for the target: in the DLQ
        **_throttling(copy, batch),
        **_fallback(batch),
        **_returned_home(batch),
    }


def _returned_home(batch: BatchProgress) -> dict[str, Any]:
    """Records not copied because their provenance names the target as origin (provenance_headers;
    only when there are some): what an active/active pair with identical names filters."""
    home = sum(p.returned_home for p in batch.partitions)
    return {"returned_home": home} if home else {}


def _fallback(batch: BatchProgress) -> dict[str, Any]:
    """The batch copy path's records the record loop copied instead (only when there are some)."""
    fallback = sum(p.fallback_records for p in batch.partitions)
    return {"fallback_records": fallback} if fallback else {}


def _throttling(copy: CopySettings, batch: BatchProgress) -> dict[str, Any]:
    """A rate-limited flow's line also shows its limits, its rate over the batch and the time its
    copy loops waited for the limits (summed over the loops)."""
    limits = {"max_bytes_per_second": copy.max_bytes_per_second, "max_records_per_second": copy.max_records_per_second}
    if not any(limits.values()):
        return {}
    seconds = batch.duration_ms / 1000
    return {
        "bytes_per_s": round(batch.bytes / seconds) if seconds > 0 else None,
        **{name: limit for name, limit in limits.items() if limit},
        "throttled_s": round(batch.throttled_ms / 1000, 1),
    }


def merge(held: BatchProgress, batch: BatchProgress) -> BatchProgress:
    """`batch` with a held earlier batch summed in (for one line over both)."""
    return replace(
        batch,
        partitions=held.partitions + batch.partitions,
        duration_ms=held.duration_ms + batch.duration_ms,
        source_end_offsets={**held.source_end_offsets, **batch.source_end_offsets},
        throttled_ms=held.throttled_ms + batch.throttled_ms,
    )


class ProgressLogListener:
    interval_s = LINE_INTERVAL_S  # at most one line per interval while behind (tests shorten it)

    def __init__(self, flow_id: str, source: ClusterEndpoint, copy: CopySettings, out: TextIO | None = None) -> None:
        """Progress lines of flow `flow_id` (its `copy` view: isolation, rate limits) to `out`
        (default stderr), with the lag read from `source` (an `admin_client` made at the first batch)."""
        self.flow_id, self.source, self.copy, self.out = flow_id, source, copy, out
        self._admin: Any = None
        self._held: BatchProgress | None = None
        self._held_batches = 0
        self._last_line = float("-inf")  # time.monotonic() of the last line

    def _end_offsets(self, batch: BatchProgress) -> dict[tuple[str, int], int] | None:
        from kmirror_engine.planning.offset_queries import query_offsets

        if self._admin is None:
            from kmirror_engine.clients.factory import admin_client

            self._admin = admin_client(self.source)
        read_committed = self.copy.read_committed
        try:
            return query_offsets(self._admin, self.source, next_offsets(batch), "latest", read_committed, 5.0)
        except KmirrorError:
            return None  # reported as "lag": null; the next batch tries again

    def on_batch(self, batch: BatchProgress) -> None:
        if batch.records == 0 and not batch.partitions:
            return
        if self._held is not None:
            batch = merge(self._held, batch)
        batches = self._held_batches + 1
        end_offsets = self._end_offsets(batch)
        record = progress_record(self.flow_id, self.copy, batch, end_offsets)
        if record["lag"] and time.monotonic() - self._last_line < self.interval_s:
            self._held, self._held_batches = batch, batches  # behind: the next batch comes soon
            return
        self._print(record, batches)

    def _print(self, record: dict[str, Any], batches: int) -> None:
        self._held, self._held_batches = None, 0
        self._last_line = time.monotonic()
        line = PREFIX + json.dumps({**record, "batches": batches})
        print(line, file=self.out or sys.stderr, flush=True)

    def on_idle(self, now_ms: int) -> None:
        """Nothing periodic."""

    def close(self, final: bool) -> None:
        """Print a held line (the admin client has no close)."""
        if self._held is not None:
            self._print(
                progress_record(self.flow_id, self.copy, self._held, self._end_offsets(self._held)),
                self._held_batches,
            )
