"""`kmirror status --metrics URL`: the error counters of one flow from its driver's Prometheus
endpoint (the flow's `metrics_port`; on EKS the stack's `metrics` output names the URL,
docs/deploy.md). Summed over topics and partitions, for the flow's `flow` label:

- failed_batches: kmirror_failed_batches_total (batches Spark aborted and retried);
- failover_work_failures: kmirror_failover_work_failures_total by `work` (checkpoints, heartbeats, ...);
- dead_lettered_records: kmirror_dead_lettered_records_total;
- skipped_records: kmirror_skipped_records_total by `reason` (retention, skip_offsets, provenance);
- checkpoint_age_s: kmirror_checkpoint_age_seconds (since the last committed batch).

An unreachable endpoint gives `{"error": "..."}` (the status itself still comes from the clusters).
"""

from __future__ import annotations

from typing import Any

_SCALARS = {
    "kmirror_failed_batches_total": "failed_batches",
    "kmirror_dead_lettered_records_total": "dead_lettered_records",
}
_BY_LABEL = {
    "kmirror_failover_work_failures_total": ("failover_work_failures", "work"),
    "kmirror_skipped_records_total": ("skipped_records", "reason"),
}


def summarize_metrics(text: str, flow_id: str) -> dict[str, Any]:
    """The error counters of `flow_id` in Prometheus exposition `text` (pure; module doc)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, Any] = {
        "failed_batches": 0,
        "failover_work_failures": {},
        "dead_lettered_records": 0,
        "skipped_records": {},
        "checkpoint_age_s": None,
    }
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("flow") != flow_id:
                continue
            if sample.name in _SCALARS:
                out[_SCALARS[sample.name]] += int(sample.value)
            elif sample.name in _BY_LABEL:
                key, label = _BY_LABEL[sample.name]
                by = out[key]
                by[sample.labels.get(label, "")] = by.get(sample.labels.get(label, ""), 0) + int(sample.value)
            elif sample.name == "kmirror_checkpoint_age_seconds":
                out["checkpoint_age_s"] = round(sample.value, 1)
    return out


def read_metrics(url: str, flow_id: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """Scrape `url` and summarize it; `{"error": ...}` when it cannot be read or parsed."""
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            text = response.read().decode("utf-8", errors="replace")
        return summarize_metrics(text, flow_id)
    except (OSError, ValueError) as exc:
        return {"error": f"cannot read the metrics at {url}: {exc}; check the URL (the driver's metrics_port)"}
