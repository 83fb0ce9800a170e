"""CloudWatch alarms of an EMR platform: EKS gets PrometheusRule alerts (`kafka_mirror.eks.monitoring`);
EMR clusters publish YARN and node metrics to CloudWatch (namespace `AWS/ElasticMapReduce`, every
5 minutes, dimension `JobFlowId`), so the same failures alarm there without a Prometheus:

- no mirror application running at all (every streaming step gone: the EMR form of
  `KafkaMirrorNoDriver`); a missing metric counts as breaching (the cluster itself is gone);
- a YARN application failed (a driver that exhausted its attempts: `KafkaMirrorDriverRestarting`);
- fewer core nodes running than the cluster asks for, or unhealthy nodes (capacity lost: batches
  slow down, lag grows).
- a step of the cluster FAILED or CANCELLED (an EventBridge rule on EMR's "EMR Step Status Change"
  events, delivered to the same actions at once, not 5 minutes later).
Per-flow lag and checkpoint alerts need the drivers' Prometheus metrics (docs/deploy.md).
Pure: `alarm_specs` and `step_failed_pattern` return plain data; `create_alarms` turns them into resources.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_aws as aws

NAMESPACE = "AWS/ElasticMapReduce"
STEP_STATES_PAGED = ("FAILED", "CANCELLED")


def step_failed_pattern(cluster_id: str) -> dict[str, Any]:
    """EventBridge pattern of the cluster's steps ending FAILED or CANCELLED (EMR's step events)."""
    return {
        "source": ["aws.emr"],
        "detail-type": ["EMR Step Status Change"],
        "detail": {"clusterId": [cluster_id], "state": list(STEP_STATES_PAGED)},
    }


def alarm_specs(core_nodes: int | None) -> list[dict[str, Any]]:
    """Alarm definitions (`core_nodes`: what a created cluster asks for; None for an existing one)."""
    specs: list[dict[str, Any]] = [
        {
            "name": "no-mirror-running",
            "metric": "AppsRunning",
            "comparison": "LessThanThreshold",
            "threshold": 1,
            "statistic": "Maximum",
            "periods": 2,
            "missing": "breaching",
            "description": "no YARN application runs on the mirror cluster: every flow's streaming step is gone",
        },
        {
            "name": "apps-failed",
            "metric": "AppsFailed",
            "comparison": "GreaterThanThreshold",
            "threshold": 0,
            "statistic": "Maximum",
            "periods": 1,
            "missing": "notBreaching",
            "description": "a YARN application failed on the mirror cluster: a driver exhausted its attempts",
        },
        {
            "name": "unhealthy-nodes",
            "metric": "MRUnhealthyNodes",
            "comparison": "GreaterThanThreshold",
            "threshold": 0,
            "statistic": "Maximum",
            "periods": 3,
            "missing": "notBreaching",
            "description": "nodes of the mirror cluster are unhealthy: EMR replaces them, mirrors slow down meanwhile",
        },
    ]
    if core_nodes:
        missing = f"fewer than the {core_nodes} core nodes of the mirror cluster are running"
        specs.append(
            {
                "name": "core-nodes-down",
                "metric": "CoreNodesRunning",
                "comparison": "LessThanThreshold",
                "threshold": core_nodes,
                "statistic": "Minimum",
                "periods": 3,
                "missing": "breaching",
                "description": missing,
            }
        )
    return specs


def create_alarms(
    parent: pulumi.Resource,
    name: str,
    cluster_id: pulumi.Input[str],
    core_nodes: int | None,
    actions: Sequence[str],
    opts: pulumi.ResourceOptions,
) -> list[aws.cloudwatch.MetricAlarm]:
    """One MetricAlarm per `alarm_specs` entry on the cluster and the step-failure EventBridge rule;
    `actions`: SNS topics (or other alarm actions) notified on alarm and on recovery; the rule targets
    each SNS topic among them (the topic's policy must let events.amazonaws.com publish: docs/deploy.md)."""
    child = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(parent=parent))
    rule = aws.cloudwatch.EventRule(
        f"{name}-step-failed",
        description="a kafka-mirror EMR step FAILED or was CANCELLED: a flow stopped mirroring",
        event_pattern=pulumi.Output.from_input(cluster_id).apply(lambda c: json.dumps(step_failed_pattern(c))),
        tags={"part-of": "kafka-mirror"},
        opts=child,
    )
    for index, arn in enumerate(a for a in actions if a.startswith("arn:aws:sns:")):
        aws.cloudwatch.EventTarget(f"{name}-step-failed-{index}", rule=rule.name, arn=arn, opts=child)
    return [
        aws.cloudwatch.MetricAlarm(
            f"{name}-{spec['name']}",
            alarm_description=spec["description"],
            namespace=NAMESPACE,
            metric_name=spec["metric"],
            dimensions={"JobFlowId": cluster_id},
            statistic=spec["statistic"],
            period=300,
            evaluation_periods=spec["periods"],
            comparison_operator=spec["comparison"],
            threshold=spec["threshold"],
            treat_missing_data=spec["missing"],
            alarm_actions=list(actions),
            ok_actions=list(actions),
            tags={"part-of": "kafka-mirror"},
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(parent=parent)),
        )
        for spec in alarm_specs(core_nodes)
    ]
