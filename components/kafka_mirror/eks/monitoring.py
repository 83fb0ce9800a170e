"""Monitoring as code for the EKS apps (no pulumi import): a PodMonitor per driver, the
PrometheusRule alerts and the Grafana dashboard, all over the metric names of
`kmirror_engine/observability/metrics.py` (MM2's, Prometheus-spelled) plus kube-state-metrics' restarts.

Strimzi ships a Grafana dashboard and alerts for MirrorMaker 2; `STRIMZI_MM2_COVERAGE` maps
each of its MM2 panels to ours (tests/pulumi/test_monitoring.py checks every one exists).
"""

from __future__ import annotations

import json
from typing import Any

from kafka_mirror.eks.specs import PART_OF, EksSettings, app_name
from kmirror.stack.platform_rules import RUNBOOK

DASHBOARD_UID = "kafka-mirror"
DASHBOARD_FILE = "kafka-mirror.json"
DRIVER_POD = 'pod=~"mirror-.*-driver"'
# Strimzi's MM2 dashboard panel -> our panel title.
STRIMZI_MM2_COVERAGE = {
    "Number of Connectors": "Flows running",
    "Number of Tasks": "Partitions mirrored",
    "Total record rate": "Records/s per flow",
    "Total byte rate": "Bytes/s per flow",
    "Incoming bytes": "Bytes/s per flow",
    "Outgoing bytes": "Bytes/s per flow",
    "Record age ms max": "Record age (max) per flow",
    "Replication latency ms max": "Replication latency per flow",
    "Checkpoint latency ms max": "Checkpoint latency per flow and group",
    "Pod restarts": "Driver restarts",
}


def pod_monitor(flow_spec: dict[str, Any], settings: EksSettings) -> dict[str, Any]:
    """A kube-prometheus-stack PodMonitor scraping the flow's driver on its `metrics` port."""
    return driver_pod_monitor(app_name(flow_spec["id"]), ["metrics"], settings)


def driver_pod_monitor(name: str, port_names: list[str], settings: EksSettings) -> dict[str, Any]:
    """A PodMonitor scraping app `name`'s driver on each of its named metrics ports (one per flow it runs)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {
            "name": name,
            "namespace": settings.namespace,
            "labels": {**PART_OF, **settings.monitoring_labels},
        },
        "spec": {
            "selector": {"matchLabels": {"sparkoperator.k8s.io/app-name": name, "spark-role": "driver"}},
            "podMetricsEndpoints": [{"port": port, "path": "/metrics", "interval": "30s"} for port in port_names],
        },
    }


# Each alert links the runbook by the absolute URL the stack names (`monitoring.runbook_url`,
# `runbook_url_problem`); RUNBOOK is its place in this repository, the placeholder until then.
def _alert(name: str, expr: str, for_: str, severity: str, summary: str) -> dict[str, Any]:
    annotations = {"summary": summary, "runbook_url": RUNBOOK}  # the absolute link: `alert_rules`
    return {"alert": name, "expr": expr, "for": for_, "labels": {"severity": severity}, "annotations": annotations}


def operator_alerts(operator_namespace: str) -> list[dict[str, Any]]:
    """The Spark operator's own health (kube-state-metrics): its controller restarts dead drivers,
    and its webhook is fail-closed (failurePolicy Fail), so without a webhook replica no pod of a
    SparkApplication can be created: a driver that dies stays dead. The chart names its
    deployments `<release>-controller` and `<release>-webhook` (release `spark-operator`)."""

    def available(deployment: str) -> str:
        return (
            f'sum(kube_deployment_status_replicas_available{{namespace="{operator_namespace}", '
            f'deployment="spark-operator-{deployment}"}}) < 1'
        )

    return [
        _alert(
            "KafkaMirrorOperatorDown",
            available("controller"),
            "5m",
            "critical",
            "the Spark operator's controller has no available replica: mirrors that stop are not restarted",
        ),
        _alert(
            "KafkaMirrorOperatorWebhookDown",
            available("webhook"),
            "5m",
            "critical",
            "the Spark operator's webhook (fail-closed) has no available replica: no driver or executor "
            "pod can be created, so a mirror whose driver dies stays down",
        ),
    ]


def alert_rules(namespace: str, operator_namespace: str | None = None) -> list[dict[str, Any]]:
    """The mirror's alerts: lag growing, no progress, driver down (no heartbeat), failed
    batches (aborted batches, restarts, dead letters, data loss, side work), Spark checkpoint
    not advancing, MM2 checkpoints late, latency high, batches slow; with `operator_namespace`
    (the stack installs the operator), the operator's controller and webhook too."""
    extra = operator_alerts(operator_namespace) if operator_namespace else []
    ns = f'namespace="{namespace}"'
    return [
        _alert(
            "KafkaMirrorLagGrowing",
            "sum by (flow) (deriv(kmirror_offset_lag[15m])) > 0 and sum by (flow) (kmirror_offset_lag) > 10000",
            "15m",
            "warning",
            "{{ $labels.flow }}: the offset lag keeps growing",
        ),
        _alert(
            "KafkaMirrorStalled",
            "sum by (flow) (rate(kmirror_record_count_total[10m])) == 0 and sum by (flow) (kmirror_offset_lag) > 0",
            "10m",
            "critical",
            "{{ $labels.flow }}: records wait at the source and nothing is mirrored",
        ),
        _alert(
            "KafkaMirrorDriverDown",
            f"sum by (pod) (up{{{ns}, {DRIVER_POD}}}) == 0",
            "5m",
            "critical",
            "{{ $labels.pod }}: the driver's metrics endpoint does not answer (no heartbeat)",
        ),
        # A driver pod that is gone has no `up` series at all, so the rule above goes silent: these
        # two fire on absence (a flow seen in the last day and not now; no driver scraped at all).
        _alert(
            "KafkaMirrorFlowGone",
            f"group by (flow) (max_over_time(kmirror_batch_duration_seconds_count{{{ns}}}[1d])) "
            f"unless group by (flow) (kmirror_batch_duration_seconds_count{{{ns}}})",
            "5m",
            "critical",
            "{{ $labels.flow }}: no driver has reported this flow for 5 minutes (its driver is gone)",
        ),
        _alert(
            "KafkaMirrorNoDriver",
            f"absent(up{{{ns}, {DRIVER_POD}}})",
            "10m",
            "critical",
            "no mirror driver is scraped in the namespace (gone, or the PodMonitor selects nothing)",
        ),
        _alert(
            "KafkaMirrorHeartbeatsFailing",
            'sum by (flow) (increase(kmirror_failover_work_failures_total{work=~"heartbeats.*"}[15m])) > 0',
            "15m",
            "warning",
            "{{ $labels.flow }}: heartbeats are not written (failover tooling is blind)",
        ),
        _alert(
            "KafkaMirrorDriverRestarting",
            f"sum by (pod) (increase(kube_pod_container_status_restarts_total{{{ns}, {DRIVER_POD}}}[30m])) > 2",
            "0m",
            "critical",
            "{{ $labels.pod }}: batches fail and the driver restarts",
        ),
        _alert(
            "KafkaMirrorDeadLetters",
            "sum by (flow, topic) (increase(kmirror_dead_lettered_records_total[10m])) > 0",
            "0m",
            "warning",
            "{{ $labels.flow }}: records of {{ $labels.topic }} were dead-lettered",
        ),
        _alert(
            "KafkaMirrorDataLoss",
            "sum by (flow, topic) (increase(kmirror_skipped_records_total[10m])) > 0",
            "0m",
            "critical",
            "{{ $labels.flow }}: offsets of {{ $labels.topic }} were deleted before mirroring",
        ),
        _alert(
            "KafkaMirrorSideWorkFailing",
            "sum by (flow, work) (increase(kmirror_failover_work_failures_total[15m])) > 3",
            "15m",
            "warning",
            "{{ $labels.flow }}: {{ $labels.work }} keeps failing",
        ),
        _alert(
            "KafkaMirrorBatchesFailing",
            "sum by (flow) (increase(kmirror_failed_batches_total[15m])) > 0",
            "0m",
            "warning",
            "{{ $labels.flow }}: Spark aborted batches (retried); see the driver's log",
        ),
        _alert(
            "KafkaMirrorCheckpointStale",
            "max by (flow) (kmirror_checkpoint_age_seconds) > 900",
            "5m",
            "critical",
            "{{ $labels.flow }}: no batch committed for 15 min (Spark's checkpoint does not advance)",
        ),
        _alert(
            "KafkaMirrorBatchesSlow",
            "histogram_quantile(0.9, sum by (flow, le) (rate(kmirror_batch_duration_seconds_bucket[15m]))) > 120",
            "15m",
            "warning",
            "{{ $labels.flow }}: 90% of batches take over 2 min to copy",
        ),
        _alert(
            "KafkaMirrorCheckpointsLate",
            "max by (flow, group) (kmirror_checkpoint_latency_ms) > 300000",
            "10m",
            "warning",
            "{{ $labels.flow }}: group {{ $labels.group }}'s checkpoints are over 5 min old",
        ),
        _alert(
            "KafkaMirrorReplicationLatencyHigh",
            'max by (flow) (kmirror_replication_latency_ms{stat="max"}) > 60000',
            "10m",
            "warning",
            "{{ $labels.flow }}: records arrive more than a minute after they were written",
        ),
        *extra,
    ]


def prometheus_rule(settings: EksSettings, runbook_url: str, operator_namespace: str | None = None) -> dict[str, Any]:
    """The PrometheusRule of the apps' namespace; each alert links `runbook_url` (`runbook_url_problem`)."""
    rules = [
        {**rule, "annotations": {**rule["annotations"], "runbook_url": runbook_url}}
        for rule in alert_rules(settings.namespace, operator_namespace)
    ]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "kafka-mirror",
            "namespace": settings.namespace,
            "labels": {**PART_OF, **settings.monitoring_labels},
        },
        "spec": {"groups": [{"name": "kafka-mirror", "rules": rules}]},
    }


def _panel(index: int, title: str, exprs: list[tuple[str, str]], unit: str) -> dict[str, Any]:
    return {
        "id": index + 1,
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"refId": chr(65 + i), "expr": expr, "legendFormat": legend} for i, (expr, legend) in enumerate(exprs)
        ],
    }


PANELS: list[tuple[str, list[tuple[str, str]], str]] = [
    ("Flows running", [('count(count by (flow) (kmirror_record_count_total{flow=~"$flow"}))', "flows")], "none"),
    ("Partitions mirrored", [('count by (flow) (kmirror_offset_lag{flow=~"$flow"})', "{{flow}}")], "none"),
    (
        "Records/s per flow",
        [('sum by (flow) (rate(kmirror_record_count_total{flow=~"$flow"}[5m]))', "{{flow}}")],
        "rps",
    ),
    (
        "Bytes/s per flow",
        [
            ('sum by (flow) (rate(kmirror_byte_count_total{flow=~"$flow"}[5m]))', "{{flow}}"),
            ('sum by (flow) (kmirror_byte_rate{flow=~"$flow"})', "{{flow}} last batch"),
        ],
        "Bps",
    ),
    ("Offset lag per partition", [('kmirror_offset_lag{flow=~"$flow"}', "{{flow}} {{topic}}[{{partition}}]")], "none"),
    (
        "Replication latency per flow",
        [
            (f'max by (flow) (kmirror_replication_latency_ms{{flow=~"$flow", stat="{s}"}})', f"{{{{flow}}}} {s}")
            for s in ("min", "avg", "max")
        ],
        "ms",
    ),
    ("Record age (max) per flow", [('max by (flow) (kmirror_record_age_ms{flow=~"$flow"})', "{{flow}}")], "ms"),
    (
        "Batch duration per flow",
        [
            (
                f"histogram_quantile({q}, sum by (flow, le) "
                f'(rate(kmirror_batch_duration_seconds_bucket{{flow=~"$flow"}}[5m])))',
                f"{{{{flow}}}} p{int(q * 100)}",
            )
            for q in (0.5, 0.99)
        ],
        "s",
    ),
    (
        "Checkpoint age (last committed batch)",
        [('max by (flow) (kmirror_checkpoint_age_seconds{flow=~"$flow"})', "{{flow}}")],
        "s",
    ),
    (
        "Checkpoint latency per flow and group",
        [('max by (flow, group) (kmirror_checkpoint_latency_ms{flow=~"$flow"})', "{{flow}} {{group}}")],
        "ms",
    ),
    (
        "Failed batches",
        [('sum by (flow) (increase(kmirror_failed_batches_total{flow=~"$flow"}[1h]))', "{{flow}} aborted")],
        "none",
    ),
    (
        "Driver restarts",
        [
            (
                f"sum by (pod) (increase(kube_pod_container_status_restarts_total"
                f'{{namespace="$namespace", {DRIVER_POD}}}[1h]))',
                "{{pod}}",
            )
        ],
        "none",
    ),
    (
        "Dead-lettered and skipped records",
        [
            (
                'sum by (flow) (increase(kmirror_dead_lettered_records_total{flow=~"$flow"}[1h]))',
                "{{flow}} dead-lettered",
            ),
            ('sum by (flow) (increase(kmirror_skipped_records_total{flow=~"$flow"}[1h]))', "{{flow}} skipped (lost)"),
        ],
        "none",
    ),
    (
        "Side work failures",
        [
            (
                'sum by (flow, work) (increase(kmirror_failover_work_failures_total{flow=~"$flow"}[1h]))',
                "{{flow}} {{work}}",
            )
        ],
        "none",
    ),
]


def grafana_dashboard() -> dict[str, Any]:
    """The Grafana dashboard (schema 39): one row of panels per concern, flow and namespace variables."""
    variables = [
        {"name": "datasource", "type": "datasource", "query": "prometheus"},
        {
            "name": "namespace",
            "type": "query",
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": "label_values(kmirror_record_count_total, namespace)",
        },
        {
            "name": "flow",
            "type": "query",
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": "label_values(kmirror_record_count_total, flow)",
            "includeAll": True,
            "multi": True,
        },
    ]
    return {
        "uid": DASHBOARD_UID,
        "title": "Kafka mirror",
        "schemaVersion": 39,
        "tags": ["kafka", "mirror"],
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": variables},
        "panels": [_panel(i, title, exprs, unit) for i, (title, exprs, unit) in enumerate(PANELS)],
    }


def dashboard_config_map(settings: EksSettings) -> dict[str, Any]:
    """The dashboard as a ConfigMap that kube-prometheus-stack's Grafana sidecar loads (`grafana_dashboard: "1"`),
    in the monitoring namespace (`monitoring.namespace`): the sidecar watches only Grafana's own namespace
    unless its chart sets `sidecar.dashboards.searchNamespace`, so one in the apps' namespace was never loaded."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "kafka-mirror-dashboard",
            "namespace": settings.monitoring_namespace,
            "labels": {**PART_OF, "grafana_dashboard": "1"},
        },
        "data": {DASHBOARD_FILE: json.dumps(grafana_dashboard(), indent=2, sort_keys=True)},
    }
