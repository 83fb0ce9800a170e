"""AWS documents of the EMR platform, pure: the nodes' and the service role's IAM policies, the cluster's
security configuration and the bucket's lifecycle rules (split from `kafka_mirror.emr.specs`, which
re-exports every name). No pulumi import.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# Where a step's wrapper reports its YARN application RUNNING and the step function waits for it.
YARN_MARKERS = "kmirror/yarn-running/"
# A marker is read (then deleted) by the invocation that added its step, within that one Lambda run
# (step_lambda.LAMBDA_TIMEOUT_S, 15 min); a marker left over (the function's delete failed, or the
# application ran only after the function gave up) is never read again. S3 expires objects at the
# first midnight UTC after this many days, so one could never expire under a waiting function; three
# days leave a weekend's failed `up` inspectable.
YARN_MARKER_DAYS = 3


def instance_policy(
    bucket: str,
    secret_arns: Iterable[str],
    kms_key_arn: str | None = None,
    certificates_zip: str | None = None,
    bucket_kms_key_arn: str | None = None,
) -> dict[str, Any]:
    """The whole policy of the EMR nodes' role (no AWS-managed policy: AmazonElasticMapReduceforEC2Role
    grants s3:* on every bucket): read the bundle and specs, write checkpoints and logs in the
    stack's bucket, read exactly the secrets the flows reference, the in-transit certificates
    zip, use the at-rest KMS key, and the bucket's SSE-KMS key through S3 (bucket_key_statement)."""
    statements: list[dict[str, Any]] = [
        {"Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetBucketLocation"], "Resource": f"arn:aws:s3:::{bucket}"},
        {
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
            "Resource": f"arn:aws:s3:::{bucket}/*",
        },
    ]
    arns = sorted(set(secret_arns))
    if arns:
        statements.append({"Effect": "Allow", "Action": ["secretsmanager:GetSecretValue"], "Resource": arns})
    if certificates_zip:
        zip_arn = "arn:aws:s3:::" + certificates_zip.removeprefix("s3://")
        statements.append({"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": zip_arn})
    if kms_key_arn:
        actions = ["kms:Decrypt", "kms:GenerateDataKey", "kms:DescribeKey", "kms:CreateGrant"]
        statements.append({"Effect": "Allow", "Action": actions, "Resource": kms_key_arn})
    if bucket_kms_key_arn:
        statements.append(bucket_key_statement(bucket_kms_key_arn, ["kms:Decrypt", "kms:GenerateDataKey"], bucket))
    return {"Version": "2012-10-17", "Statement": statements}


def bucket_key_statement(key_arn: str, actions: list[str], bucket: str) -> dict[str, Any]:
    """Use of an existing bucket's SSE-KMS key, only as S3 uses it for that bucket: reading an object
    needs kms:Decrypt, writing one kms:GenerateDataKey (and kms:Decrypt for multipart uploads)."""
    return {
        "Sid": "BucketKey",
        "Effect": "Allow",
        "Action": actions,
        "Resource": key_arn,
        "Condition": {
            "StringLike": {"kms:ViaService": "s3.*.amazonaws.com"},
            "ArnLike": {"kms:EncryptionContext:aws:s3:arn": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]},
        },
    }


# What the EMR service role needs on a customer-managed key for EBS encryption (EMR management guide,
# "Enabling EBS encryption by providing additional permissions for KMS keys").
EBS_KEY_ACTIONS = (
    "kms:CreateGrant",
    "kms:Decrypt",
    "kms:DescribeKey",
    "kms:GenerateDataKeyWithoutPlaintext",
    "kms:ReEncryptFrom",
    "kms:ReEncryptTo",
)


def service_kms_policy(key_arn: str) -> dict[str, Any]:
    """The EMR service role's permissions on the EBS key: EMR asks KMS for the volumes' data keys and
    grants them to EC2 (`kms:CreateGrant` only for AWS resources). Effective only when the key policy
    lets IAM policies grant access (AWS's default key policy does; docs/deploy.md)."""
    use = {"Sid": "EmrEbsKeyUse", "Effect": "Allow", "Action": list(EBS_KEY_ACTIONS[1:]), "Resource": key_arn}
    grant = {
        "Sid": "EmrEbsKeyGrant",
        "Effect": "Allow",
        "Action": "kms:CreateGrant",
        "Resource": key_arn,
        "Condition": {"Bool": {"kms:GrantIsForAWSResource": "true"}},
    }
    return {"Version": "2012-10-17", "Statement": [use, grant]}


def service_pass_role_policy(node_role_arn: str) -> dict[str, Any]:
    """What AmazonEMRServicePolicy_v2 leaves out: passing the nodes' role (it only allows the
    default EMR_EC2_DefaultRole)."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": "iam:PassRole",
                "Resource": node_role_arn,
                "Condition": {"StringLike": {"iam:PassedToService": "ec2.amazonaws.com*"}},
            }
        ],
    }


def security_configuration(certificates_zip: str, kms_key_arn: str) -> dict[str, Any]:
    """The EMR SecurityConfiguration of a created cluster: TLS between nodes (PEM certificates from
    S3), S3 writes encrypted (SSE-S3), local disks and EBS volumes encrypted with the KMS key, and
    IMDSv2 only (a token for every metadata request, one hop: containers cannot reach it)."""
    return {
        "EncryptionConfiguration": {
            "EnableInTransitEncryption": True,
            "EnableAtRestEncryption": True,
            "InTransitEncryptionConfiguration": {
                "TLSCertificateConfiguration": {"CertificateProviderType": "PEM", "S3Object": certificates_zip}
            },
            "AtRestEncryptionConfiguration": {
                "S3EncryptionConfiguration": {"EncryptionMode": "SSE-S3"},
                "LocalDiskEncryptionConfiguration": {
                    "EncryptionKeyProviderType": "AwsKms",
                    "AwsKmsKey": kms_key_arn,
                    "EnableEbsEncryption": True,
                },
            },
        },
        "InstanceMetadataServiceConfiguration": {
            "MinimumInstanceMetadataServiceVersion": 2,
            "HttpPutResponseHopLimit": 1,
        },
    }


def bucket_lifecycle_rules(log_retention_days: int, noncurrent_version_days: int) -> list[dict[str, Any]]:
    """Lifecycle of the stack's (versioned) bucket: logs expire, overwritten or deleted versions
    (old checkpoint files, replaced bundles) expire after a grace period, the steps' YARN RUNNING
    markers after YARN_MARKER_DAYS, and incomplete uploads are aborted. Checkpoints themselves never
    expire: a mirror may be stopped for a long time."""
    return [
        {
            "id": "expire-logs",
            "status": "Enabled",
            "filter": {"prefix": "logs/"},
            "expiration": {"days": log_retention_days},
        },
        {
            "id": "expire-noncurrent-versions",
            "status": "Enabled",
            "filter": {},
            "noncurrent_version_expiration": {"noncurrent_days": noncurrent_version_days},
        },
        {
            "id": "expire-yarn-running-markers",
            "status": "Enabled",
            "filter": {"prefix": YARN_MARKERS},
            "expiration": {"days": YARN_MARKER_DAYS},
            "noncurrent_version_expiration": {"noncurrent_days": 1},
        },
        {
            # what the expiration leaves in the versioned bucket: a delete marker per marker, once alone
            "id": "remove-yarn-running-delete-markers",
            "status": "Enabled",
            "filter": {"prefix": YARN_MARKERS},
            "expiration": {"expired_object_delete_marker": True},
        },
        {
            "id": "abort-incomplete-uploads",
            "status": "Enabled",
            "filter": {},
            "abort_incomplete_multipart_upload": {"days_after_initiation": 7},
        },
    ]
