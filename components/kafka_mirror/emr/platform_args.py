"""EmrSparkPlatform's arguments: their types (what the schema lists; Python programs pass them as
dicts) and what they mean for the steps (`emr_settings`, `encryption_problems`, `primary_nodes`).
(No `from __future__ import annotations`: Pulumi's component analyzer reads these annotations.)
"""

import os
from typing import Any, TypedDict

import pulumi
from typing_extensions import NotRequired

from kafka_mirror.emr.specs import EmrSettings
from kafka_mirror.emr.step_lambda import stop_timeout_problem
from kafka_mirror.input_types import AwsSettings, FlowSpark
from kmirror.errors import KmirrorError, Problem, ValidationError


def primary_nodes(value: Any) -> int:
    """1 or 3 (what EMR allows for a primary instance group); anything else is refused naming it."""
    if value in (1, 3) and not isinstance(value, bool):
        return int(value)
    raise KmirrorError(
        f"primary_node_count: EMR runs 1 or 3 primary nodes, got {value!r}; use 3 (default, survives losing one) or 1"
    )


class EmrEncryptionArgs(TypedDict):
    """Encryption in transit and at rest of a created EMR cluster."""

    certificates_zip: pulumi.Input[str]
    """An s3:// zip of the PEM certificates EMR uses for TLS between nodes; may be an output."""
    kms_key_arn: pulumi.Input[str]
    """The KMS key of local disk and EBS encryption; may be an output (e.g. another program's key)."""


class EmrPrometheusArgs(TypedDict):
    """The Prometheus scrapers allowed to reach the drivers' metrics ports."""

    security_group_id: NotRequired[pulumi.Input[str]]
    """The scrapers' security group; may be an output."""
    cidr_blocks: NotRequired[list[str]]
    """The scrapers' address ranges."""


class EmrSparkPlatformArgs(TypedDict):
    """Arguments of EmrSparkPlatform."""

    bucket: pulumi.Input[str]
    """The S3 bucket of the app, its dependencies, flow specs, logs (and EMR checkpoints); may be an output."""
    region: NotRequired[str]
    """The AWS region of the cluster (default: the program's `aws:region`, then AWS_REGION; required)."""
    create_bucket: NotRequired[bool]
    """Create the bucket (default true); false: it exists."""
    bucket_kms_key_arn: NotRequired[pulumi.Input[str]]
    """The SSE-KMS key of an existing bucket: the nodes and the step function may use it for the bucket."""
    cluster_id: NotRequired[pulumi.Input[str]]
    """An existing EMR cluster to run the steps on (its nodes must run `bootstrap`); default: create one."""
    release_label: NotRequired[str]
    """The EMR release of a created cluster (default `emr-spark-8.0.0`: Spark 4.0.2)."""
    subnet_id: NotRequired[pulumi.Input[str]]
    """The subnet of a created cluster."""
    master_instance_type: NotRequired[str]
    """The primary node's instance type (default `m7g.xlarge`)."""
    core_instance_type: NotRequired[str]
    """The core nodes' instance type (default `m7g.2xlarge`)."""
    core_instance_count: NotRequired[int]
    """The number of core nodes (default 2)."""
    primary_node_count: NotRequired[int]
    """Primary nodes of a created cluster: 3 (default, survives losing one) or 1; a change replaces the cluster."""
    step_concurrency_level: NotRequired[int]
    """Concurrent steps (at least one per flow: mirror steps never finish; default 1)."""
    gssapi: NotRequired[bool]
    """Install a GSSAPI (Kerberos) confluent-kafka build on the nodes (default false)."""
    spark_conf: NotRequired[dict[str, str]]
    """Spark properties every step gets."""
    spark_defaults: NotRequired[FlowSpark]
    """Flow-level Spark resources (executors, executor_memory, ...) a flow does not set itself."""
    aws_secrets: NotRequired[dict[str, str]]
    """Secrets Manager secrets the topology references as `{aws_secret: ARN}`: directory -> ARN."""
    aws: NotRequired[AwsSettings]
    """The stack's AWS settings `{region, profile, assumeRoles}` (the stack program copies its `aws:*` config);
    `region` is the cluster's region when `region` is not given. The steps are managed by the platform's Lambda
    function with its own role, not with these settings."""
    protect: NotRequired[bool]
    """Pulumi `protect` and EMR termination protection on the bucket and cluster (default true)."""
    encryption: NotRequired[EmrEncryptionArgs]
    """Encryption in transit and at rest of a created cluster (a SecurityConfiguration; also IMDSv2)."""
    prometheus: NotRequired[EmrPrometheusArgs]
    """Who may scrape the drivers' metrics ports (a security group rule on every node)."""
    alarms: NotRequired[bool]
    """CloudWatch alarms on the cluster: no mirror running, an application failed, nodes down (default true)."""
    alarm_actions: NotRequired[list[str]]
    """Alarm actions (e.g. SNS topic ARNs) notified when an alarm fires and when it recovers."""
    vpc_id: NotRequired[pulumi.Input[str]]
    """The VPC of `subnet_id` (required with it: tagged for EMR's managed policies; the metrics group's)."""
    secret_recovery_window_days: NotRequired[int]
    """Secrets Manager recovery window of deleted secrets: 0 (at once) or 7-30 (default 7)."""
    secret_name_prefix: NotRequired[str]
    """Prefix of the Secrets Manager names, unique per stack (default `kafka-mirror/<project>/<stack>/`)."""
    log_retention_days: NotRequired[int]
    """Days before EMR logs in the bucket expire (default 30)."""
    noncurrent_version_days: NotRequired[int]
    """Days overwritten or deleted object versions are kept (default 30)."""
    step_stop_timeout_s: NotRequired[int]
    """How long replacing or deleting a step waits for the old one to stop (default 600, at most 840: the wait
    runs inside one Lambda invocation)."""
    step_start_timeout_s: NotRequired[int]
    """How long `up` waits for an added step and its YARN application to be RUNNING (default 300, 1-840)."""


def _region(args: EmrSparkPlatformArgs, aws_settings: dict[str, Any]) -> str:
    """The cluster's region: `region`, `aws.region`, the program's `aws:region`, then AWS_REGION /
    AWS_DEFAULT_REGION; never a silent us-east-1 (every step call would go to another region)."""
    found = (
        args.get("region")
        or aws_settings.get("region")
        or pulumi.Config("aws").get("region")
        or os.environ.get("AWS_REGION")
        or os.environ.get("AWS_DEFAULT_REGION")
    )
    if not found:
        raise ValidationError(
            [
                Problem(
                    "region",
                    "required: the AWS region of the EMR cluster (set the "
                    "component's region, or aws:region in the stack)",
                )
            ]
        )
    return str(found)


def encryption_problems(args: EmrSparkPlatformArgs) -> list[Problem]:
    """A cluster the platform creates with `protect` (the default: production) must have its SecurityConfiguration
    (encryption in transit and at rest): the stack config requires it, and so does the component for plugin users."""
    encryption: dict[str, Any] = dict(args.get("encryption") or {})
    if args.get("cluster_id") or not args.get("protect", True):
        return []
    if encryption.get("certificates_zip") and encryption.get("kms_key_arn"):
        return []
    fix = (
        "required for a protected (production) cluster the platform creates: {certificates_zip: s3://BUCKET/KEY.zip "
        "(the PEM certificates of TLS between nodes), kms_key_arn: ARN (local disks and EBS)}; only a throwaway "
        "cluster may go without, with protect: false"
    )
    return [Problem("encryption", f"{fix}, got {args.get('encryption')!r}")]


def emr_settings(args: EmrSparkPlatformArgs) -> EmrSettings:
    """The steps' settings from the platform's arguments (an output bucket is filled in by `_on_bucket`)."""
    bucket = args["bucket"]
    aws_settings = dict(args.get("aws") or {})
    stop_timeout_s = args.get("step_stop_timeout_s", EmrSettings.step_stop_timeout_s)
    if problem := stop_timeout_problem(stop_timeout_s):
        raise ValidationError([Problem("step_stop_timeout_s", problem)])
    start_timeout_s = args.get("step_start_timeout_s")
    if start_timeout_s is not None and (problem := stop_timeout_problem(start_timeout_s)):
        raise ValidationError([Problem("step_start_timeout_s", problem)])
    return EmrSettings(
        bucket=bucket if isinstance(bucket, str) else "",
        region=_region(args, aws_settings),
        spark_defaults=dict(args.get("spark_defaults") or {}),
        spark_conf={str(k): str(v) for k, v in (args.get("spark_conf") or {}).items()},
        aws=aws_settings,
        step_stop_timeout_s=int(stop_timeout_s),
        step_start_timeout_s=None if start_timeout_s is None else int(start_timeout_s),
    )
