"""`production-emr-pages`: a production EMR stack (a cluster with termination protection) pages
someone on day one. Pure, over the stack's (resource type, props):

- every CloudWatch alarm on EMR metrics (namespace `AWS/ElasticMapReduce`) has alarm actions;
- an EventBridge rule matches the cluster's steps ending FAILED or CANCELLED (EMR's "EMR Step Status
  Change" events): a flow that stops mirroring is an event at once, not a metric 5 minutes later.
The stack config refuses the same (`spark.alarm_actions` with `protect: true`); this rule also holds
component users to it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

EMR_CLUSTER = "aws:emr/cluster:Cluster"
METRIC_ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
EVENT_RULE = "aws:cloudwatch/eventRule:EventRule"
EMR_NAMESPACE = "AWS/ElasticMapReduce"
PAGED_STATES = {"FAILED", "CANCELLED"}


def _pages_step_failures(pattern: Any) -> bool:
    """True for a pattern matching EMR step FAILED and CANCELLED events; an unknown pattern (a preview:
    it names the cluster id, an output) counts as matching."""
    if not isinstance(pattern, str):
        return True
    try:
        found = json.loads(pattern)
    except ValueError:
        return False
    states = set((found.get("detail") or {}).get("state") or [])
    return (
        "aws.emr" in (found.get("source") or [])
        and "EMR Step Status Change" in (found.get("detail-type") or [])
        and states >= PAGED_STATES
    )


def production_emr_paging_violations(resources: Iterable[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """Violation messages (none when the stack has no protected EMR cluster, or pages as above)."""
    found = list(resources)
    if not any(t == EMR_CLUSTER and p.get("terminationProtection") for t, p in found):
        return []
    messages = [
        f"CloudWatch alarm {p.get('name') or p.get('metricName')!r} on {EMR_NAMESPACE} notifies nobody: set "
        "kafka-mirror:spark.alarm_actions (the on-call SNS topic) for a production EMR stack"
        for t, p in found
        if t == METRIC_ALARM and p.get("namespace") == EMR_NAMESPACE and not p.get("alarmActions")
    ]
    if not any(t == EVENT_RULE and _pages_step_failures(p.get("eventPattern")) for t, p in found):
        messages.append(
            "no EventBridge rule pages on the EMR cluster's steps FAILED or CANCELLED: a flow that stops "
            "mirroring goes unnoticed (EmrSparkPlatform creates one with alarms: true)"
        )
    return messages
