"""Monitoring as code: every PromQL metric exists in kmirror_engine/observability/metrics.py (or kube-state-metrics /
Prometheus itself), the dashboard covers Strimzi's MM2 panels, and the alerts cover the issue's list."""

from __future__ import annotations

import json
import re

import pytest

from kafka_mirror.eks.monitoring import (
    PANELS,
    STRIMZI_MM2_COVERAGE,
    alert_rules,
    dashboard_config_map,
    grafana_dashboard,
    pod_monitor,
    prometheus_rule,
)
from kafka_mirror.eks.specs import EksSettings
from kmirror.stack.platform_rules import runbook_url_problem
from kmirror_engine.observability.metrics import FlowMetrics
from tests.pulumi.sparkapp_schema import validate_k8s

SETTINGS = EksSettings(namespace="mirror", image="img:1", pod_monitor=True, monitoring_labels={"release": "kps"})
RUNBOOK_URL = (
    "https://git.example.com/ops/kafka-mirror/blob/main/docs/deploy.md#runbook-a-failed-deploy-or-a-stuck-flow"
)
EXTERNAL = {"up", "kube_pod_container_status_restarts_total", "kube_deployment_status_replicas_available"}


def _app_metric_names() -> set[str]:
    metrics = FlowMetrics("a->b")
    names = set()
    for family in metrics.registry.collect():
        names |= {family.name} | ({f"{family.name}_total"} if family.type == "counter" else set())
        names |= {f"{family.name}_{s}" for s in ("bucket", "sum", "count")} if family.type == "histogram" else set()
    metrics.close()
    return names


def _metrics_in(expr: str) -> set[str]:
    return {m for m in re.findall(r"\b([a-z_]+)(?=\{|\[|\))", expr) if m.startswith("kmirror_")} | {
        m for m in EXTERNAL if m in expr
    }


def test_every_expression_uses_metrics_the_app_exports() -> None:
    known = _app_metric_names() | EXTERNAL
    exprs = [t["expr"] for p in grafana_dashboard()["panels"] for t in p["targets"]]
    exprs += [r["expr"] for r in alert_rules("mirror", "spark-operator")]
    used = set().union(*(_metrics_in(e) for e in exprs))
    assert used and used <= known, used - known
    assert {
        "kmirror_record_count_total",
        "kmirror_offset_lag",
        "kmirror_checkpoint_latency_ms",
        "kmirror_batch_duration_seconds_bucket",
        "kmirror_failed_batches_total",
        "kmirror_checkpoint_age_seconds",
    } <= used


def test_batch_duration_failed_batches_and_checkpoint_age_use_the_apps_metrics() -> None:
    panels = {p["title"]: [t["expr"] for t in p["targets"]] for p in grafana_dashboard()["panels"]}
    assert all("kmirror_batch_duration_seconds_bucket" in e for e in panels["Batch duration per flow"])
    assert panels["Failed batches"] == ['sum by (flow) (increase(kmirror_failed_batches_total{flow=~"$flow"}[1h]))']
    assert panels["Checkpoint age (last committed batch)"] == [
        'max by (flow) (kmirror_checkpoint_age_seconds{flow=~"$flow"})'
    ]
    alerts = {r["alert"]: r["expr"] for r in alert_rules("mirror")}
    assert alerts["KafkaMirrorBatchesFailing"] == "sum by (flow) (increase(kmirror_failed_batches_total[15m])) > 0"
    assert alerts["KafkaMirrorCheckpointStale"] == "max by (flow) (kmirror_checkpoint_age_seconds) > 900"


def test_the_dashboard_covers_strimzis_mm2_panels_and_the_issues_list() -> None:
    titles = {p["title"] for p in grafana_dashboard()["panels"]}
    assert set(STRIMZI_MM2_COVERAGE.values()) <= titles
    for wanted in (
        "Records/s",
        "Bytes/s",
        "Offset lag per partition",
        "Replication latency",
        "Failed batches",
        "Checkpoint age",
    ):
        assert any(wanted in t for t in titles), wanted
    assert len(titles) == len(PANELS)
    board = dashboard_config_map(SETTINGS)
    validate_k8s(board)
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    # Grafana's sidecar loads dashboards from Grafana's (the monitoring) namespace, not the apps'
    assert board["metadata"]["namespace"] == SETTINGS.monitoring_namespace != SETTINGS.namespace
    assert json.loads(board["data"]["kafka-mirror.json"])["uid"] == "kafka-mirror"


def test_alerts_cover_lag_heartbeat_failed_batches_and_checkpoint_age() -> None:
    names = {r["alert"] for r in alert_rules("mirror")}
    assert {
        "KafkaMirrorLagGrowing",
        "KafkaMirrorDriverDown",
        "KafkaMirrorHeartbeatsFailing",
        "KafkaMirrorDriverRestarting",
        "KafkaMirrorCheckpointsLate",
        "KafkaMirrorDataLoss",
        "KafkaMirrorBatchesFailing",
        "KafkaMirrorCheckpointStale",
        "KafkaMirrorBatchesSlow",
    } <= names
    rule = prometheus_rule(SETTINGS, RUNBOOK_URL)
    assert rule["metadata"]["labels"]["release"] == "kps" and rule["metadata"]["namespace"] == "mirror"
    # every alert links the runbook by the absolute URL a pager can open, not a repository path
    assert {r["annotations"]["runbook_url"] for r in rule["spec"]["groups"][0]["rules"]} == {RUNBOOK_URL}
    assert all(r["labels"]["severity"] in ("warning", "critical") for r in rule["spec"]["groups"][0]["rules"])


def test_the_pod_monitor_scrapes_the_drivers_metrics_port() -> None:
    monitor = pod_monitor({"id": "west-1->east-1"}, SETTINGS)
    assert monitor["spec"] == {
        "selector": {
            "matchLabels": {"sparkoperator.k8s.io/app-name": "mirror-west-1-to-east-1", "spark-role": "driver"}
        },
        "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics", "interval": "30s"}],
    }


def test_a_driver_that_is_gone_still_alerts() -> None:
    """Issue 27: `up == 0` needs an `up` series; a deleted driver pod has none, so it went silent.
    Absence is alerted on: per flow (seen in the last day, not now) and for the whole namespace."""
    rules = {r["alert"]: r for r in alert_rules("mirror")}
    gone = rules["KafkaMirrorFlowGone"]["expr"]
    assert 'max_over_time(kmirror_batch_duration_seconds_count{namespace="mirror"}[1d])' in gone
    assert ' unless group by (flow) (kmirror_batch_duration_seconds_count{namespace="mirror"})' in gone
    assert rules["KafkaMirrorNoDriver"]["expr"].startswith('absent(up{namespace="mirror", ')
    assert {rules[n]["labels"]["severity"] for n in ("KafkaMirrorFlowGone", "KafkaMirrorNoDriver")} == {"critical"}


def test_the_operator_and_its_fail_closed_webhook_alert_when_they_have_no_replica() -> None:
    """Issue 27: with the operator's controller gone, dead drivers are not restarted; with its
    fail-closed webhook gone, no driver pod can be created at all. Both alert (kube-state-metrics)."""
    by_name = {r["alert"]: r for r in alert_rules("mirror", "ops")}
    for alert, deployment in (("KafkaMirrorOperatorDown", "controller"), ("KafkaMirrorOperatorWebhookDown", "webhook")):
        rule = by_name[alert]
        assert rule["labels"]["severity"] == "critical"
        assert rule["expr"] == (
            'sum(kube_deployment_status_replicas_available{namespace="ops", '
            f'deployment="spark-operator-{deployment}"}}) < 1'
        )
    assert not {"KafkaMirrorOperatorDown", "KafkaMirrorOperatorWebhookDown"} & {r["alert"] for r in alert_rules("m")}
    rule = prometheus_rule(SETTINGS, RUNBOOK_URL, "spark-operator")
    assert "KafkaMirrorOperatorWebhookDown" in {r["alert"] for r in rule["spec"]["groups"][0]["rules"]}


@pytest.mark.parametrize(
    "url", [None, "", "docs/deploy.md#runbook-a-failed-deploy-or-a-stuck-flow", "ftp://x/y", "https://"]
)
def test_a_runbook_link_a_pager_cannot_open_is_refused(url: object) -> None:
    problem = runbook_url_problem(url, "monitoring.runbook_url")
    assert problem is not None and problem.path == "monitoring.runbook_url"
    assert repr(url) in problem.message and "https://github.com/ORG/REPO/blob/main/docs/deploy.md" in problem.message


def test_an_absolute_runbook_link_is_taken() -> None:
    assert runbook_url_problem(RUNBOOK_URL, "monitoring.runbook_url") is None
