"""A protected (production) EMR cluster the platform creates always has its SecurityConfiguration, for plugin
users too (issue 43, first review: "SecurityConfiguration optional for plugin users (refuse in production)").
The stack config already required `spark.encryption`; the component now refuses the same, before it registers
anything, naming the field and the fix."""

from __future__ import annotations

import pytest

from kafka_mirror.emr.platform_args import EmrSparkPlatformArgs, encryption_problems
from kafka_mirror.emr.spark_platform import EmrSparkPlatform
from kmirror.errors import ValidationError

BASE: EmrSparkPlatformArgs = {"bucket": "acme", "region": "eu-central-1", "subnet_id": "subnet-1", "vpc_id": "vpc-1"}
ENCRYPTION = {"certificates_zip": "s3://pki/certs.zip", "kms_key_arn": "arn:aws:kms:eu-central-1:1:key/k"}


def test_a_protected_created_cluster_without_encryption_is_refused_before_anything_is_registered() -> None:
    for args in (BASE, {**BASE, "protect": True}, {**BASE, "encryption": {"kms_key_arn": ENCRYPTION["kms_key_arn"]}}):
        with pytest.raises(ValidationError) as raised:
            EmrSparkPlatform("central-emr", args)  # type: ignore[arg-type]
        text = str(raised.value)
        assert "encryption" in text and "certificates_zip" in text and "protect: false" in text


def test_encryption_is_optional_only_for_a_throwaway_or_an_existing_cluster() -> None:
    assert encryption_problems({**BASE, "protect": False}) == []  # type: ignore[typeddict-item]
    assert encryption_problems({**BASE, "cluster_id": "j-EXISTING"}) == []  # its own security configuration
    assert encryption_problems({**BASE, "encryption": ENCRYPTION}) == []  # type: ignore[typeddict-item]
