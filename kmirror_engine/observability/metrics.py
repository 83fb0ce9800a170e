"""Mirror metrics per flow/topic/partition, named after MM2's (MirrorSourceMetrics,
MirrorCheckpointMetrics) with Prometheus spelling (`record-count` -> `kmirror_record_count`):

- record-count -> kmirror_record_count_total (records mirrored);
- byte-count, byte-rate -> kmirror_byte_count_total, kmirror_byte_rate (per second of the last batch);
- record-age-ms -> kmirror_record_age_ms (now - timestamp of the last mirrored record);
- replication-latency-ms min/max/avg -> kmirror_replication_latency_ms{stat="min|max|avg"}
  (delivery time - record timestamp, over the last batch);
- checkpoint-latency-ms -> kmirror_checkpoint_latency_ms{group} (offsets read -> checkpoints delivered);
- offset lag (MM2 has none) -> kmirror_offset_lag (source end offset - next offset to mirror);
- losses MM2 does not count -> kmirror_skipped_records_total{reason="retention"} (offsets deleted at
  the source before they were mirrored, skipped with fail_on_data_loss=false),
  kmirror_skipped_records_total{reason="skip_offsets"} (records the flow's skip_offsets names, each
  also logged as a `kmirror skipped` line), kmirror_dead_lettered_records_total (records the target
  refuses, sent to the dead-letter topic; docs/reliability.md "Poison records");
- the batch copy path (`copy_loop: batch`; MM2 has none) -> kmirror_batch_fallback_records_total
  (records a record loop copied instead: LogAppendTime, offset gaps, a batch over the target's
  limit or crossing the range, a compacted target's compressed or large batches, client settings
  the path cannot use; the reason is logged once per copier);
- batches (MM2 has none: Connect counts tasks) -> kmirror_batch_duration_seconds{flow} (histogram of a
  committed batch's copy time, first read to last delivery), kmirror_failed_batches_total{flow}
  (batches Spark aborted: the sink's `abort`; Spark retries them), kmirror_checkpoint_age_seconds{flow}
  (seconds since the last committed batch, i.e. since Spark's checkpoint last advanced; before the
  first commit, since the metrics started, so a mirror that never commits still ages);
- bandwidth limits (issue 18; MM2 has none) -> kmirror_rate_limit{flow, unit="bytes_per_second|
  records_per_second"} (the configured limit; only the limits set), kmirror_throttled_seconds_total{flow}
  (time the copy loops waited to stay under them, summed over the loops of a batch: 4 loops waiting
  1 s each count 4 s);
- side work that failed and is retried next round, never failing a delivered batch ->
  kmirror_failover_work_failures_total{flow, work="checkpoints|group_offset_sync|heartbeats|
  offset_sync_snapshot|offset_lag|checkpoints_setup|heartbeats_setup"} (no partition label).

Labels: flow, topic (target topic), partition. Served as Prometheus text on the driver's
`metrics_port` (0 = an ephemeral port, announced as `kmirror metrics {"event":
"metrics_listening", "port": ...}`) and written as a `kmirror metrics {"event":
"mirror_metrics", ...}` JSON line to stderr, next to the progress lines (the sink's commit runs
in a Python worker whose `logging` is not configured, so a logger would drop them). That line
is a snapshot written at most every `SNAPSHOT_INTERVAL_S` (the first batch's always): a streaming
mirror of 4,000 partitions runs a batch every ~0.3 s under load. It has a row per partition of
the batch up to `SNAPSHOT_MAX_ROWS`; past that, totals over the batch and the most lagging
partitions (`bounded_rows`), so a day of lines is a few MB whatever the partition count
(`tests/test_failover_unit.py` measures it at 4,000 partitions). Every batch still updates every
metric, per partition; `batch_failed` lines are always written.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server

from kmirror_engine.observability.progress import BatchProgress

PREFIX = "kmirror metrics "
SNAPSHOT_INTERVAL_S = 60.0  # the mirror_metrics line (module doc)
# Rows of the mirror_metrics line: past this many partitions it carries the totals and the most
# lagging partitions only (~6 KB whatever the flow's size); Prometheus has every partition.
SNAPSHOT_MAX_ROWS = 20
LABELS = ("flow", "topic", "partition")
# Batch copy time buckets (s): a trigger interval is seconds; a batch catching up on a backlog, minutes.
BATCH_DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


METRICS_ADDR_ENV = "KMIRROR_METRICS_ADDR"


def bounded_rows(rows: list[dict[str, Any]], max_rows: int = SNAPSHOT_MAX_ROWS) -> dict[str, Any]:
    """The partition part of a mirror_metrics line: every row of a small batch; for a larger one
    the totals over all partitions and the `max_rows` rows with the most offset lag (then the
    oldest records), so the line's size does not grow with the partition count."""
    if len(rows) <= max_rows:
        return {"partitions": rows}
    ranked = sorted(rows, key=lambda r: (r.get("offset_lag", 0), r.get("record_age_ms", 0)), reverse=True)
    return {
        "partitions": ranked[:max_rows],
        "partitions_total": len(rows),
        "partitions_omitted": len(rows) - max_rows,
        "record_count": sum(r["record_count"] for r in rows),
        "byte_rate": round(sum(r["byte_rate"] for r in rows), 1),
        "offset_lag": sum(r.get("offset_lag", 0) for r in rows),
        "max_record_age_ms": max((r["record_age_ms"] for r in rows if "record_age_ms" in r), default=None),
    }


def metrics_bind_address(environ: Mapping[str, str] | None = None) -> str:
    """Where /metrics listens: `KMIRROR_METRICS_ADDR` if set, else the pod IP (`POD_IP`, from the
    Kubernetes downward API), else 127.0.0.1. Never every interface by default: the endpoint has
    no authentication, so exposing it is a decision (set KMIRROR_METRICS_ADDR=0.0.0.0)."""
    env = os.environ if environ is None else environ
    return env.get(METRICS_ADDR_ENV) or env.get("POD_IP") or "127.0.0.1"


class FlowMetrics:
    """One flow's metrics in their own registry (several flows can share a process)."""

    def __init__(self, flow_id: str, out: TextIO | None = None, clock: Callable[[], float] = time.time) -> None:
        self.flow_id = flow_id
        self.out = out  # None: sys.stderr at write time
        self.clock = clock  # seconds (wall clock); tests inject one
        self._last_snapshot: float | None = None  # self.clock() of the last mirror_metrics line
        self.registry = CollectorRegistry()
        r = self.registry
        self.batch_duration = Histogram(
            "kmirror_batch_duration_seconds",
            "Copy time of a committed batch, first read to last delivery.",
            ("flow",),
            buckets=BATCH_DURATION_BUCKETS,
            registry=r,
        )
        self.failed_batches = Counter(
            "kmirror_failed_batches",
            "Batches Spark aborted (a task failed; Spark retries the batch).",
            ("flow",),
            registry=r,
        )
        self.failed_batches.labels(flow_id)  # exported as 0 from the start: increase() needs a first sample
        self.last_commit_s = clock()
        self.checkpoint_age = Gauge(
            "kmirror_checkpoint_age_seconds",
            "Seconds since the last committed batch (Spark's checkpoint last "
            "advanced); since the metrics started before the first commit.",
            ("flow",),
            registry=r,
        )
        self.checkpoint_age.labels(flow_id).set_function(lambda: max(self.clock() - self.last_commit_s, 0.0))
        self.record_count = Counter("kmirror_record_count", "Records mirrored (MM2 record-count).", LABELS, registry=r)
        self.byte_count = Counter("kmirror_byte_count", "Bytes mirrored (MM2 byte-count).", LABELS, registry=r)
        self.skipped = Counter(
            "kmirror_skipped_records",
            "Source records not mirrored: reason=retention, offsets deleted at the "
            "source first (fail_on_data_loss=false); reason=skip_offsets, named by the flow's skip_offsets "
            "(MM2 has none); reason=provenance, records whose provenance header names the target as their "
            "origin (provenance_headers: never copied back).",
            (*LABELS, "reason"),
            registry=r,
        )
        self.dead_lettered = Counter(
            "kmirror_dead_lettered_records",
            "Records the target refuses (too large, timestamp outside its window, "
            "no key for a compacted topic), sent to the dead-letter topic.",
            LABELS,
            registry=r,
        )
        self.fallback = Counter(
            "kmirror_batch_fallback_records",
            "copy_loop batch: records a record loop copied instead of the batch path (the reason is in the log).",
            LABELS,
            registry=r,
        )
        self.byte_rate = Gauge(
            "kmirror_byte_rate", "Bytes per second over the last batch (MM2 byte-rate).", LABELS, registry=r
        )
        self.record_age = Gauge(
            "kmirror_record_age_ms",
            "Now minus the timestamp of the last mirrored record (MM2 record-age-ms).",
            LABELS,
            registry=r,
        )
        self.latency = Gauge(
            "kmirror_replication_latency_ms",
            "Delivery time minus record timestamp over the last batch (MM2 replication-latency-ms).",
            (*LABELS, "stat"),
            registry=r,
        )
        self.offset_lag = Gauge(
            "kmirror_offset_lag", "Source end offset minus next offset to mirror.", LABELS, registry=r
        )
        self.checkpoint_latency = Gauge(
            "kmirror_checkpoint_latency_ms",
            "Offsets read to checkpoints delivered (MM2 checkpoint-latency-ms).",
            ("flow", "group"),
            registry=r,
        )
        self.work_failures = Counter(
            "kmirror_failover_work_failures",
            "Failed rounds of side work (checkpoints, group offset sync, "
            "heartbeats, offset-sync snapshots); logged and retried, never failing a delivered batch.",
            ("flow", "work"),
            registry=r,
        )
        self.rate_limit = Gauge(
            "kmirror_rate_limit",
            "Configured bandwidth limit of the flow's copy (max_bytes_per_second, "
            "max_records_per_second), over all copy tasks of a batch.",
            ("flow", "unit"),
            registry=r,
        )
        self.throttled = Counter(
            "kmirror_throttled_seconds",
            "Seconds the copy loops waited to stay under the flow's rate limits, summed over the loops of each batch.",
            ("flow",),
            registry=r,
        )
        self._failures: dict[str, int] = {}
        self._server: Any = None
        self.port: int | None = None

    def set_rate_limits(self, bytes_per_second: int | None, records_per_second: int | None) -> None:
        """Export the flow's configured limits; a flow with limits counts throttled time from 0."""
        limits = {"bytes_per_second": bytes_per_second, "records_per_second": records_per_second}
        for unit, limit in limits.items():
            if limit:
                self.rate_limit.labels(self.flow_id, unit).set(limit)
        if any(limits.values()):
            self.throttled.labels(self.flow_id)  # exported as 0 from the start

    def observe_batch(self, batch: BatchProgress, now_ms: int) -> dict[str, Any]:
        """Update every metric from a committed batch; returns (and logs) its JSON progress record."""
        seconds = max(batch.duration_ms, 1) / 1000.0
        self.batch_duration.labels(self.flow_id).observe(batch.duration_ms / 1000.0)
        if batch.throttled_ms:
            self.throttled.labels(self.flow_id).inc(batch.throttled_ms / 1000.0)
        self.last_commit_s = self.clock()
        rows = []
        for p in batch.partitions:
            labels = (self.flow_id, p.target_topic, str(p.partition))
            self.record_count.labels(*labels).inc(p.records)
            self.byte_count.labels(*labels).inc(p.bytes)
            self.byte_rate.labels(*labels).set(p.bytes / seconds)
            self.skipped.labels(*labels, "retention").inc(p.skipped_records)
            if p.skipped_by_option:
                self.skipped.labels(*labels, "skip_offsets").inc(p.skipped_by_option)
            if p.returned_home:
                self.skipped.labels(*labels, "provenance").inc(p.returned_home)
            self.dead_lettered.labels(*labels).inc(p.dead_lettered)
            if p.fallback_records:
                self.fallback.labels(*labels).inc(p.fallback_records)
            row: dict[str, Any] = {
                "topic": p.target_topic,
                "partition": p.partition,
                "record_count": p.records,
                "byte_rate": round(p.bytes / seconds, 1),
            }
            if p.last_timestamp_ms is not None:
                row["record_age_ms"] = now_ms - p.last_timestamp_ms
                self.record_age.labels(*labels).set(row["record_age_ms"])
            if p.latency_count:
                stats = {"min": p.latency_min_ms, "max": p.latency_max_ms, "avg": p.latency_sum_ms / p.latency_count}
                for stat, value in stats.items():
                    self.latency.labels(*labels, stat).set(float(value or 0))
                row["replication_latency_ms"] = {k: round(float(v or 0), 1) for k, v in stats.items()}
            end = batch.source_end_offsets.get((p.source_topic, p.partition))
            if end is not None:
                row["offset_lag"] = max(end - p.next_offset, 0)
                self.offset_lag.labels(*labels).set(row["offset_lag"])
            rows.append(row)
        record = {"event": "mirror_metrics", "flow": self.flow_id, "batch_id": batch.batch_id, **bounded_rows(rows)}
        if batch.throttled_ms:
            record["throttled_s"] = round(batch.throttled_ms / 1000.0, 3)
        if self._last_snapshot is None or self.last_commit_s - self._last_snapshot >= SNAPSHOT_INTERVAL_S:
            self._last_snapshot = self.last_commit_s
            self._write(record)
        return record

    def _write(self, record: dict[str, Any]) -> None:
        print(PREFIX + json.dumps(record, sort_keys=True), file=self.out or sys.stderr, flush=True)

    def observe_batch_failure(self, batch_id: int) -> None:
        """Count a batch Spark aborted and log it (`kmirror metrics {"event": "batch_failed", ...}`)."""
        self.failed_batches.labels(self.flow_id).inc()
        self._write({"event": "batch_failed", "flow": self.flow_id, "batch_id": batch_id})

    def observe_checkpoints(self, group: str, latency_ms: int) -> None:
        self.checkpoint_latency.labels(self.flow_id, group).set(latency_ms)

    def observe_work_failure(self, work: str) -> int:
        """Count one failed round of side work; returns the count so far for `work`."""
        self.work_failures.labels(self.flow_id, work).inc()
        self._failures[work] = self._failures.get(work, 0) + 1
        return self._failures[work]

    def text(self) -> str:
        """The Prometheus exposition text of this flow's metrics."""
        return generate_latest(self.registry).decode()

    def serve(self, port: int, addr: str | None = None) -> int:
        """Serve /metrics on `port` (0: ephemeral) at `addr` (default: `metrics_bind_address()`)
        and return the bound port (logged with the address)."""
        addr = addr or metrics_bind_address()
        self._server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        self.port = int(self._server.server_port)
        self._write({"event": "metrics_listening", "flow": self.flow_id, "addr": addr, "port": self.port})
        return self.port

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
