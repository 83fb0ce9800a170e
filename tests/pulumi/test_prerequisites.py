"""What a platform team creates by hand before a stack's first `up` (docs/deploy.md, "First deploy")
is checked by the program before it creates anything: under the SDK's mocks, the AWS account's data
sources answer as the example stacks' account (tests/pulumi/harness.py), minus what a test removes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from kafka_mirror.prerequisites import KINDS, Prerequisite, check_prerequisites
from kmirror.errors import ValidationError
from tests.pulumi.harness import ROOT, Mocks, run_program, stack_config
from tests.pulumi.test_program import prebuilt_artifacts


@pytest.fixture(scope="module", autouse=True)
def prebuilt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with prebuilt_artifacts(tmp_path_factory):
        yield


def refused(stack: str, *absent: str) -> tuple[list[str], Mocks]:
    mocks = Mocks(absent=frozenset(absent))
    with pytest.raises(ValidationError) as raised:
        run_program(stack, mocks=mocks)
    return [str(p) for p in raised.value.problems], mocks


@pytest.mark.parametrize(
    ("stack", "absent", "path"),
    [
        ("east", "acme-kafka-mirror-east", "kafka-mirror:spark.checkpoint_root"),
        ("east", "subnet-0a1b2c3d4e5f60002", "kafka-mirror:spark.cluster.subnet_ids[1]"),
        ("east", "sg-0a1b2c3d4e5f60077", "kafka-mirror:spark.cluster.runner_security_group_id"),
        ("west", "acme-kafka-mirror-west", "kafka-mirror:spark.checkpoint_root"),
        ("west", "kafka-mirror-west", "kafka-mirror:spark.irsa_role_arn"),
        ("central", "vpc-0c1d2e3f4a5b60001", "kafka-mirror:spark.vpc_id"),
        ("central", "emr-tls.zip", "kafka-mirror:spark.encryption.certificates_zip"),
        (
            "central",
            "arn:aws:kms:eu-central-1:123456789012:key/1b2c3d4e-5f60-4718-293a-4b5c6d7e8f90",
            "kafka-mirror:spark.encryption.kms_key_arn",
        ),
        ("central", "kafka-mirror-oncall", "kafka-mirror:spark.alarm_actions[0]"),
    ],
)
def test_a_missing_prerequisite_is_refused_before_anything_is_created(stack: str, absent: str, path: str) -> None:
    problems, _ = refused(stack, absent)
    [problem] = problems
    assert problem.startswith(f"{path}: ") and "cannot be read" in problem and "not found" in problem
    assert "created by hand before the first `up`" in problem


def test_nothing_is_registered_when_a_prerequisite_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.pulumi import harness

    seen: list[str] = []
    real = harness.RecordingMonitor.RegisterResource
    monkeypatch.setattr(
        harness.RecordingMonitor,
        "RegisterResource",
        lambda self, request: (seen.append(request.type), real(self, request))[1],
    )
    mocks = Mocks(absent=frozenset({"acme-kafka-mirror-west"}))
    with pytest.raises(ValidationError):
        run_program("west", mocks=mocks)
    assert mocks.invokes and seen == ["pulumi:pulumi:Stack"]  # checked, and nothing but the stack itself


def test_a_subnet_of_another_vpc_and_an_aws_managed_key_are_refused() -> None:
    items = [
        Prerequisite("k:spark.subnet_id", "subnet", "subnet-1", "fix it", {"vpc_id": "vpc-1"}),
        Prerequisite("k:spark.kms", "kms_key", "arn:key", "a customer key"),
    ]
    answers = {"subnet-1": {"vpc_id": "vpc-2"}, "arn:key": {"key_state": "Enabled", "key_manager": "AWS"}}
    problems = check_prerequisites(items, lambda kind, ident: answers[ident])
    assert [str(p) for p in problems] == [
        "k:spark.subnet_id: subnet 'subnet-1' has vpc_id 'vpc-2', expected 'vpc-1'; fix it",
        "k:spark.kms: kms_key 'arn:key' is Enabled and AWS-managed; it must be an Enabled customer-managed key; "
        "a customer key",
    ]


def test_the_local_stack_needs_nothing_from_aws() -> None:
    mocks = Mocks()
    run_program("local", mocks=mocks)
    assert mocks.invokes == []


def test_the_first_deploy_runbook_lists_every_kind_the_program_checks() -> None:
    text = (ROOT / "docs" / "deploy.md").read_text()
    runbook = text[text.index("## First deploy") :]
    for kind in KINDS:
        assert re.search(rf"`{kind}`", runbook), f"docs/deploy.md's first-deploy runbook does not list {kind}"


def test_a_test_bed_without_aws_may_skip_the_checks() -> None:
    config = stack_config("west")
    spark = json.loads(config["kafka-mirror:spark"])
    spark["check_prerequisites"] = False
    config["kafka-mirror:spark"] = json.dumps(spark)
    mocks = Mocks(absent=frozenset({"acme-kafka-mirror-west"}))
    run_program("west", config, mocks=mocks)
    assert mocks.invokes == []
