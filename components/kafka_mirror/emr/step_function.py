"""The Lambda function that manages a platform's mirror steps, and its least-privilege role.

One function per EmrSparkPlatform (children `<name>-steps*`): code is `step_lambda.py` alone
(boto3 comes with the Lambda runtime), its role may add, describe, list and cancel steps on the
platform's cluster only and write to its own log group. MirrorDeployment invokes it per flow
(`aws.lambda_.Invocation`, CRUD lifecycle), so EMR flows need no Pulumi dynamic provider and work
from any language's program through the component provider.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws as aws

from kafka_mirror.emr.specs import YARN_MARKERS, bucket_key_statement
from kafka_mirror.emr.step_lambda import LAMBDA_TIMEOUT_S

HANDLER_FILE = "step_lambda.py"
READER_FILE = "step_reader.py"
READER_TIMEOUT_S = 60
RUNTIME = "python3.12"
STEP_ACTIONS = (
    "elasticmapreduce:AddJobFlowSteps",
    "elasticmapreduce:CancelSteps",
    "elasticmapreduce:DescribeStep",
    "elasticmapreduce:ListSteps",
)
LOG_RETENTION_DAYS = 90
TAGS = {"part-of": "kafka-mirror"}


def emr_cluster_arn(region: str, cluster_id: str) -> str:
    """The cluster's ARN in any account of the partition: the id is what scopes it (the caller's
    account would need a lookup the component cannot do in a preview)."""
    return f"arn:aws:elasticmapreduce:{region}:*:cluster/{cluster_id}"


def step_function_policy(
    region: str, cluster_id: str, log_group_arn: str, bucket: str = "", bucket_kms_key_arn: str = ""
) -> dict[str, Any]:
    """The function role's only permissions: the four step calls on this cluster, writing to its own
    log group (the group exists: no CreateLogGroup) and, with `bucket`, reading and then deleting the
    steps' YARN RUNNING markers (ListBucket too: without it a marker not yet written reads as
    AccessDenied); with `bucket_kms_key_arn` (an existing bucket's SSE-KMS key), decrypting them."""
    markers = (
        [
            {
                "Sid": "YarnRunningMarkers",
                "Effect": "Allow",
                "Action": ["s3:DeleteObject", "s3:DeleteObjectVersion", "s3:GetObject"],
                "Resource": f"arn:aws:s3:::{bucket}/{YARN_MARKERS}*",
            },
            {
                "Sid": "YarnRunningMarkersList",
                "Effect": "Allow",
                "Action": ["s3:ListBucket"],
                "Resource": f"arn:aws:s3:::{bucket}",
            },
        ]
        if bucket
        else []
    )
    if bucket and bucket_kms_key_arn:
        markers.append(bucket_key_statement(bucket_kms_key_arn, ["kms:Decrypt"], bucket))
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "FlowSteps",
                "Effect": "Allow",
                "Action": list(STEP_ACTIONS),
                "Resource": emr_cluster_arn(region, cluster_id),
            },
            {
                "Sid": "OwnLogs",
                "Effect": "Allow",
                "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                "Resource": f"{log_group_arn}:*",
            },
            *markers,
        ],
    }


def reader_policy(region: str, cluster_id: str, log_group_arn: str) -> dict[str, Any]:
    """The step reader's only permissions: listing this cluster's steps and writing its own logs. A
    preview role that may invoke it can learn the steps' states, never add or cancel one."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ListFlowSteps",
                "Effect": "Allow",
                "Action": ["elasticmapreduce:ListSteps"],
                "Resource": emr_cluster_arn(region, cluster_id),
            },
            {
                "Sid": "OwnLogs",
                "Effect": "Allow",
                "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                "Resource": f"{log_group_arn}:*",
            },
        ],
    }


def handler_code(file: str = HANDLER_FILE) -> pulumi.AssetArchive:
    """A function's zip: its handler module under its own name (content-addressed by Pulumi)."""
    source = (Path(__file__).parent / file).read_text()
    return pulumi.AssetArchive({file: pulumi.StringAsset(source)})


def _role(name: str, child: pulumi.ResourceOptions) -> aws.iam.Role:
    assume = {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
    return aws.iam.Role(
        name, assume_role_policy=json.dumps({"Version": "2012-10-17", "Statement": [assume]}), tags=TAGS, opts=child
    )


def create_step_reader(
    parent: pulumi.Resource, name: str, region: str, cluster_id: pulumi.Input[str]
) -> aws.lambda_.Function:
    """The read-only function the flows' drift check invokes (`step_reader.py`; children `<name>-steps-read*`)."""
    child = pulumi.ResourceOptions(parent=parent)
    logs = aws.cloudwatch.LogGroup(
        f"{name}-steps-read-logs", retention_in_days=LOG_RETENTION_DAYS, tags=TAGS, opts=child
    )
    role = _role(f"{name}-steps-read-role", child)
    policy = aws.iam.RolePolicy(
        f"{name}-steps-read-policy",
        role=role.id,
        policy=pulumi.Output.all(cluster_id, logs.arn).apply(
            lambda v: json.dumps(reader_policy(region, str(v[0]), str(v[1])), sort_keys=True)
        ),
        opts=child,
    )
    return aws.lambda_.Function(
        f"{name}-steps-read",
        runtime=RUNTIME,
        handler=f"{READER_FILE.removesuffix('.py')}.handler",
        code=handler_code(READER_FILE),
        role=role.arn,
        timeout=READER_TIMEOUT_S,
        memory_size=128,
        logging_config={"log_format": "Text", "log_group": logs.name},
        tags=TAGS,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[policy, logs]),
    )


def create_step_function(
    parent: pulumi.Resource,
    name: str,
    region: str,
    cluster_id: pulumi.Input[str],
    bucket: pulumi.Input[str] = "",
    bucket_kms_key_arn: pulumi.Input[str] | None = None,
) -> aws.lambda_.Function:
    """The log group, role, role policy and function (children `<name>-steps*`)."""
    child = pulumi.ResourceOptions(parent=parent)
    logs = aws.cloudwatch.LogGroup(f"{name}-steps-logs", retention_in_days=LOG_RETENTION_DAYS, tags=TAGS, opts=child)
    role = _role(f"{name}-steps-role", child)
    policy = aws.iam.RolePolicy(
        f"{name}-steps-policy",
        role=role.id,
        policy=pulumi.Output.all(cluster_id, logs.arn, bucket, bucket_kms_key_arn or "").apply(
            lambda v: json.dumps(step_function_policy(region, *(str(x) for x in v)), sort_keys=True)
        ),
        opts=child,
    )
    return aws.lambda_.Function(
        f"{name}-steps",
        runtime=RUNTIME,
        handler=f"{HANDLER_FILE.removesuffix('.py')}.handler",
        code=handler_code(),
        role=role.arn,
        timeout=LAMBDA_TIMEOUT_S,  # the stop wait runs inside one invocation (stop_timeout_s <= 840)
        memory_size=256,
        logging_config={"log_format": "Text", "log_group": logs.name},
        tags=TAGS,
        # The policy outlives every invocation: deleted only after the function (and its invocations).
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[policy, logs]),
    )
