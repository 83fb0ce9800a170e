"""central's first `pulumi preview` and `up` (EMR, `gssapi: true`) the way CI and a platform team run
them: without a prebuilt `$KMIRROR_WHEELHOUSE`, from the Pulumi project directory, where
scripts/build-emr-gssapi-wheel.sh writes the Kerberos wheel (`build/gssapi-wheels`). pip is faked
(what it downloads is checked by tests/pulumi/test_wheelhouse.py); everything else is the program."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafka_mirror.bundle import build_bundle
from kafka_mirror.emr import wheelhouse
from kafka_mirror.emr.wheelhouse import WheelhouseError
from kmirror.errors import ValidationError
from tests.pulumi.harness import ROOT, Run, run_program, stack_config, unwrap

OBJECT = "aws:s3/bucketObjectv2:BucketObjectv2"
GSSAPI_WHEEL = "confluent_kafka-2.16.1-1gssapi-cp311-cp311-manylinux_2_34_aarch64.whl"


def fake_download(args: list[str]) -> None:
    """`pip download -r LOCK --dest DIR`: one placeholder wheel per pinned line."""
    dest = Path(args[args.index("--dest") + 1])
    for line in Path(args[-1]).read_text().splitlines():
        name, version = line.split(" ")[0].split("==")
        (dest / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(b"wheel")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A Pulumi project directory (the working directory of `pulumi up`) with nothing prebuilt."""
    bundle, _ = build_bundle(ROOT, tmp_path / "bundle")
    monkeypatch.setenv("KMIRROR_BUNDLE", str(bundle))
    for name in ("KMIRROR_WHEELHOUSE", "KMIRROR_BUILD_DIR", "KMIRROR_GSSAPI_WHEELS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(wheelhouse, "_run_pip", fake_download)
    monkeypatch.chdir(tmp_path)
    yield tmp_path


def central(preview: bool = False) -> Run:
    return run_program("central", stack_config("central", str(ROOT / "stacks" / "topology.yaml")), preview=preview)


def wheel_keys(run: Run) -> list[str]:
    return sorted(unwrap(o.inputs)["key"] for o in run.of_type(OBJECT) if "-wheel-" in o.name)


def test_up_takes_the_kerberos_wheel_where_the_build_script_writes_it(project: Path) -> None:
    wheels = project / "build" / "gssapi-wheels"  # scripts/build-emr-gssapi-wheel.sh's default --out
    wheels.mkdir(parents=True)
    (wheels / GSSAPI_WHEEL).write_bytes(b"kerberos wheel")
    keys = wheel_keys(central())
    assert f"bootstrap/wheelhouse/cp311-aarch64/{GSSAPI_WHEEL}" in keys
    assert not [k for k in keys if "confluent_kafka-2.16.1-py3" in k]  # never PyPI's wheel
    assert (project / "build" / "wheelhouse" / "cp311-aarch64" / GSSAPI_WHEEL).is_file()


def test_a_preview_without_the_kerberos_wheel_plans_the_rest(project: Path) -> None:
    keys = wheel_keys(central(preview=True))
    assert "bootstrap/wheelhouse/cp311-aarch64/requirements.lock" in keys
    assert "bootstrap/wheelhouse/cp311-aarch64/pyyaml-6.0.3-py3-none-any.whl" in keys
    assert not [k for k in keys if "confluent" in k]


def test_an_up_without_the_kerberos_wheel_refuses_naming_the_build_script(project: Path) -> None:
    with pytest.raises(WheelhouseError) as raised:
        central()
    message = str(raised.value)
    assert f"in {project / 'build' / 'gssapi-wheels'} (found 0)" in message
    assert "scripts/build-emr-gssapi-wheel.sh" in message


@pytest.fixture
def built(project: Path) -> Run:
    """central's `up` with the Kerberos wheel built where the script puts it."""
    wheels = project / "build" / "gssapi-wheels"
    wheels.mkdir(parents=True)
    (wheels / GSSAPI_WHEEL).write_bytes(b"kerberos wheel")
    return central()


def test_emr_may_create_its_security_groups_in_the_tagged_vpc(built: Run) -> None:
    tags = {unwrap(t.inputs)["resourceId"]: unwrap(t.inputs) for t in built.of_type("aws:ec2/tag:Tag")}
    for resource in ("vpc-0c1d2e3f4a5b60001", "subnet-0c1d2e3f4a5b60001"):
        assert (tags[resource]["key"], tags[resource]["value"]) == ("for-use-with-amazon-emr-managed-policies", "true")
    [cluster] = built.of_type("aws:emr/cluster:Cluster")
    assert {t.urn for t in built.of_type("aws:ec2/tag:Tag")} <= set(cluster.dependencies)


def test_a_subnet_without_its_vpc_is_refused(project: Path) -> None:
    config = stack_config("central", str(ROOT / "stacks" / "topology.yaml"))
    spark = json.loads(config["kafka-mirror:spark"])
    del spark["vpc_id"], spark["prometheus"]
    config["kafka-mirror:spark"] = json.dumps(spark)
    wheels = project / "build" / "gssapi-wheels"
    wheels.mkdir(parents=True)
    (wheels / GSSAPI_WHEEL).write_bytes(b"kerberos wheel")
    with pytest.raises(ValidationError, match=r"vpc_id: required with subnet_id: AmazonEMRServicePolicy_v2 creates"):
        run_program("central", config)


def test_the_emr_service_role_may_use_the_ebs_key(built: Run) -> None:
    key = "arn:aws:kms:eu-central-1:123456789012:key/1b2c3d4e-5f60-4718-293a-4b5c6d7e8f90"
    policy = json.loads(unwrap(built.named("central-emr-service-ebs-key").inputs)["policy"])
    use, grant = policy["Statement"]
    assert sorted(use["Action"]) == [
        "kms:Decrypt",
        "kms:DescribeKey",
        "kms:GenerateDataKeyWithoutPlaintext",
        "kms:ReEncryptFrom",
        "kms:ReEncryptTo",
    ]
    assert use["Resource"] == grant["Resource"] == key and grant["Action"] == "kms:CreateGrant"
    assert grant["Condition"] == {"Bool": {"kms:GrantIsForAWSResource": "true"}}
    role = built.named("central-emr-service-role")
    assert unwrap(built.named("central-emr-service-ebs-key").inputs)["role"] == f"{role.name}-id"
    [cluster] = built.of_type("aws:emr/cluster:Cluster")
    assert built.named("central-emr-service-ebs-key").urn in cluster.dependencies


def test_a_failed_or_cancelled_step_pages_the_alarm_actions(built: Run) -> None:
    [rule] = built.of_type("aws:cloudwatch/eventRule:EventRule")
    assert json.loads(unwrap(rule.inputs)["eventPattern"]) == {
        "source": ["aws.emr"],
        "detail-type": ["EMR Step Status Change"],
        "detail": {"clusterId": ["j-MOCKCLUSTER"], "state": ["FAILED", "CANCELLED"]},
    }
    [target] = built.of_type("aws:cloudwatch/eventTarget:EventTarget")
    assert unwrap(target.inputs)["arn"] == "arn:aws:sns:eu-central-1:123456789012:kafka-mirror-oncall"
    for alarm in built.of_type("aws:cloudwatch/metricAlarm:MetricAlarm"):
        assert unwrap(alarm.inputs)["alarmActions"] == ["arn:aws:sns:eu-central-1:123456789012:kafka-mirror-oncall"]


def test_a_production_emr_stack_without_alarm_actions_is_refused(project: Path) -> None:
    config = stack_config("central", str(ROOT / "stacks" / "topology.yaml"))
    spark = json.loads(config["kafka-mirror:spark"])
    del spark["alarm_actions"]
    config["kafka-mirror:spark"] = json.dumps(spark)
    with pytest.raises(ValidationError, match=r"spark\.alarm_actions: required for a production stack"):
        run_program("central", config)


def test_the_policy_pack_holds_production_emr_stacks_to_paging(built: Run) -> None:
    from policy.kafka_mirror_policy.paging import production_emr_paging_violations

    resources = [(r.typ, unwrap(r.inputs)) for r in built.resources]
    assert production_emr_paging_violations(resources) == []
    silent = [(t, {**p, "alarmActions": []} if t.endswith(":MetricAlarm") else p) for t, p in resources]
    silent = [(t, p) for t, p in silent if not t.endswith(":EventRule")]
    problems = production_emr_paging_violations(silent)
    assert len(problems) == 5 and problems[-1].startswith("no EventBridge rule pages on the EMR cluster's steps")
    assert "notifies nobody: set kafka-mirror:spark.alarm_actions" in problems[0]
    unprotected = [(t, {**p, "terminationProtection": False} if t.endswith(":Cluster") else p) for t, p in silent]
    assert production_emr_paging_violations(unprotected) == []
