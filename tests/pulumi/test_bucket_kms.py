"""An existing EMR bucket encrypted with SSE-KMS (issue 43): with `bucket_kms_key_arn` the nodes may
use the key to read and write the bucket and the step function to read its YARN RUNNING markers, only
through S3 and only for that bucket; the key is a checked prerequisite, and a key the stack cannot use
(a created bucket has none, an alias grants nothing) is refused naming the field, value and fix."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import yaml

from kmirror.errors import ValidationError
from kmirror.stack.config import parse_stack_config
from tests.pulumi.harness import ROOT, Mocks, Run, run_program, stack_config, unwrap
from tests.pulumi.test_program import prebuilt_artifacts

KEY = "arn:aws:kms:eu-central-1:123456789012:key/0f1e2d3c-4b5a-4697-8877-665544332211"
FIELD = "kafka-mirror:spark.bucket_kms_key_arn"


def central_spark(**changes: object) -> dict[str, object]:
    raw = yaml.safe_load((ROOT / "stacks" / "Pulumi.central.yaml").read_text())["config"]
    return {**raw["kafka-mirror:spark"], **changes}


def config_problems(spark: dict[str, object]) -> list[str]:
    raw = {"datacenter": "central", "spark": spark}
    with pytest.raises(ValidationError) as raised:
        parse_stack_config(raw)
    return [str(p) for p in raised.value.problems]


def test_a_bucket_key_on_a_bucket_the_stack_creates_is_refused() -> None:
    [problem] = config_problems(central_spark(bucket_kms_key_arn=KEY))
    assert problem.startswith(f"{FIELD}: {KEY!r} is the SSE-KMS key of an existing bucket")
    assert "remove it, or set create_bucket: false" in problem


@pytest.mark.parametrize("key", ["alias/kafka-mirror", "0f1e2d3c-4b5a-4697-8877-665544332211"])
def test_a_bucket_key_not_named_by_its_arn_is_refused(key: str) -> None:
    [problem] = config_problems(central_spark(create_bucket=False, bucket_kms_key_arn=key))
    assert problem.startswith(f"{FIELD}: must be the key ARN arn:aws:kms:REGION:ACCOUNT:key/KEY_ID")
    assert f"got {key!r}" in problem and f"aws kms describe-key --key-id {key}" in problem


def config(**changes: object) -> dict[str, str]:
    values = stack_config("central")
    values["kafka-mirror:spark"] = json.dumps(central_spark(**changes))
    return values


@pytest.fixture(scope="module")
def byo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """central with an existing bucket on SSE-KMS, under mocks."""
    with prebuilt_artifacts(tmp_path_factory):
        yield run_program("central", config(create_bucket=False, bucket_kms_key_arn=KEY))


def key_statements(policy: str) -> list[dict[str, object]]:
    return [s for s in json.loads(policy)["Statement"] if s.get("Resource") == KEY]


def test_the_nodes_and_the_step_function_may_use_the_buckets_key_only_through_s3_for_it(byo: Run) -> None:
    bucket = central_spark()["bucket"]
    scope = {
        "StringLike": {"kms:ViaService": "s3.*.amazonaws.com"},
        "ArnLike": {"kms:EncryptionContext:aws:s3:arn": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]},
    }
    [nodes] = key_statements(unwrap(byo.named("central-emr-node-app-policy").inputs)["policy"])
    assert sorted(nodes["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey"]  # type: ignore[arg-type]
    assert nodes["Condition"] == scope
    [steps] = key_statements(unwrap(byo.named("central-emr-steps-policy").inputs)["policy"])
    assert steps["Action"] == ["kms:Decrypt"] and steps["Condition"] == scope  # it reads markers, never writes
    # ... and an existing cluster's role gets the same node policy (the platform's output)
    [platform] = [v for urn, v in byo.outputs.items() if urn.endswith("EmrSparkPlatform::central-emr")]
    assert key_statements(platform["node_policy"]) == [nodes]
    assert not byo.of_type("aws:s3/bucket:Bucket")  # the bucket exists: nothing creates it


def test_without_a_bucket_key_nobody_gets_one() -> None:
    spark = central_spark(create_bucket=False)
    stack = parse_stack_config({"datacenter": "central", "spark": spark})
    assert stack.model.bucket_kms_key_arn is None
    from kafka_mirror.emr.specs import instance_policy
    from kafka_mirror.emr.step_function import step_function_policy

    assert "BucketKey" not in json.dumps(instance_policy("b", [], None, None, None))
    assert "BucketKey" not in json.dumps(step_function_policy("eu-central-1", "j-1", "arn:logs", "b", ""))


def test_the_bucket_key_is_a_checked_prerequisite(byo: Run) -> None:
    mocks = Mocks(absent=frozenset({KEY}))
    with pytest.raises(ValidationError) as raised:
        run_program("central", config(create_bucket=False, bucket_kms_key_arn=KEY), mocks=mocks)
    [problem] = [str(p) for p in raised.value.problems]
    assert problem.startswith(f"{FIELD}: kms_key {KEY!r} cannot be read")
    assert "the bucket's default-encryption key" in problem
