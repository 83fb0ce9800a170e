"""The EMR stack's steps under Pulumi mocks: real pulumi-aws resources any language's program
gets through the component provider (a Lambda function per platform, an Invocation per flow with
the CRUD lifecycle), no Python dynamic resource; and the function's least privilege."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from kafka_mirror.eks.specs import app_name
from kafka_mirror.emr.specs import YARN_MARKER_DAYS, YARN_MARKERS, yarn_tag
from kafka_mirror.emr.step_function import STEP_ACTIONS, reader_policy, step_function_policy
from kafka_mirror.emr.step_lambda import LAMBDA_TIMEOUT_S
from tests.pulumi.harness import ROOT, Run, run_program, unwrap
from tests.pulumi.test_program import EXPECTED, prebuilt_artifacts

INVOCATION = "aws:lambda/invocation:Invocation"
FUNCTION = "aws:lambda/function:Function"


@pytest.fixture(scope="module")
def central(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """`pulumi up -s central` (EMR) under mocks, with a built bundle and a placeholder wheelhouse."""
    with prebuilt_artifacts(tmp_path_factory):
        yield run_program("central")


def test_each_flow_is_a_crud_invocation_of_the_platforms_step_function(central: Run) -> None:
    function = central.named("central-emr-steps")
    invocations = {r.name: r for r in central.of_type(INVOCATION)}
    assert sorted(invocations) == sorted(f"{app_name(f)}-step" for f in EXPECTED["central"])
    for flow_id in EXPECTED["central"]:
        invocation = invocations[f"{app_name(flow_id)}-step"]
        inputs = unwrap(invocation.inputs)
        assert inputs["lifecycleScope"] == "CRUD" and inputs["functionName"] == "central-emr-steps-5e1d2c0"
        step = json.loads(inputs["input"])
        assert sorted(step) == ["args", "cluster_id", "name", "region", "stop_timeout_s", "yarn_marker_prefix"]
        assert step["cluster_id"] == "j-MOCKCLUSTER" and step["name"] == app_name(flow_id)
        assert step["region"] == "eu-central-1" and step["stop_timeout_s"] == 600
        args = step["args"]
        assert args[args.index("--tag") + 1] == yarn_tag(flow_id) and "spark-submit" in args
        assert function.urn in invocation.dependencies  # the function exists before any step is added
        deployment = central.by_urn(invocation.parent)
        assert central.outputs[deployment.urn]["step_id"] == f"s-{invocation.name.upper()[:10]}"


def test_no_python_dynamic_resource_is_registered_any_more(central: Run) -> None:
    assert not [r.name for r in central.resources if r.typ.startswith("pulumi-python:dynamic")]


def test_the_step_function_runs_the_handler_with_a_role_scoped_to_the_cluster(central: Run) -> None:
    function = central.named("central-emr-steps")
    inputs = unwrap(function.inputs)
    assert inputs["runtime"] == "python3.12" and inputs["handler"] == "step_lambda.handler"
    assert inputs["timeout"] == 900
    assert inputs["role"] == "arn:aws:iam::123456789012:role/central-emr-steps-role-7f3a9c1"
    policy = json.loads(unwrap(central.named("central-emr-steps-policy").inputs)["policy"])
    logs = "arn:aws:logs:eu-central-1:123456789012:log-group:central-emr-steps-logs-0c4b7e9"
    [markers] = [s for s in policy["Statement"] if s["Sid"] == "YarnRunningMarkers"]
    bucket = markers["Resource"].removeprefix("arn:aws:s3:::").split("/", 1)[0]
    assert policy == step_function_policy("eu-central-1", "j-MOCKCLUSTER", logs, bucket)
    # it may read exactly where the steps' wrappers report their YARN application RUNNING
    invocations = central.of_type("aws:lambda/invocation:Invocation")
    assert invocations
    for invocation in invocations:
        prefix = json.loads(unwrap(invocation.inputs)["input"])["yarn_marker_prefix"]
        assert markers["Resource"] == f"arn:aws:s3:::{prefix.removeprefix('s3://')}*"
    # and delete them once read, the version too (no delete marker left in the versioned bucket)
    assert sorted(markers["Action"]) == ["s3:DeleteObject", "s3:DeleteObjectVersion", "s3:GetObject"]
    [steps] = [s for s in policy["Statement"] if s["Sid"] == "FlowSteps"]
    assert steps["Resource"] == "arn:aws:elasticmapreduce:eu-central-1:*:cluster/j-MOCKCLUSTER"
    assert sorted(steps["Action"]) == sorted(STEP_ACTIONS) and len(STEP_ACTIONS) == 4
    assert all("*" not in a for s in policy["Statement"] for a in s["Action"])
    [own_logs] = [s for s in policy["Statement"] if s["Sid"] == "OwnLogs"]
    assert own_logs["Resource"] == f"{logs}:*"
    assume = json.loads(unwrap(central.named("central-emr-steps-role").inputs)["assumeRolePolicy"])
    assert [s["Principal"] for s in assume["Statement"]] == [{"Service": "lambda.amazonaws.com"}]
    assert central.named("central-emr-steps-policy").urn in function.dependencies


def test_the_platform_exports_its_step_function(central: Run) -> None:
    [platform] = [v for urn, v in central.outputs.items() if urn.endswith("EmrSparkPlatform::central-emr")]
    assert platform["step_function"] == "central-emr-steps-5e1d2c0"
    assert platform["deployment_target"]["step_function"] == "central-emr-steps-5e1d2c0"


def test_the_created_bucket_expires_the_yarn_markers_long_after_any_function_could_read_them(central: Run) -> None:
    [lifecycle] = central.of_type("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")
    rules = {r["id"]: r for r in unwrap(lifecycle.inputs)["rules"]}
    [prefix] = {json.loads(unwrap(i.inputs)["input"])["yarn_marker_prefix"] for i in central.of_type(INVOCATION)}
    expire, delete_markers = rules["expire-yarn-running-markers"], rules["remove-yarn-running-delete-markers"]
    # the rules cover exactly where the steps' wrappers write (s3://BUCKET/<prefix>)
    assert prefix.split("/", 3)[3] == YARN_MARKERS == expire["filter"]["prefix"] == delete_markers["filter"]["prefix"]
    assert expire["status"] == delete_markers["status"] == "Enabled"
    assert expire["expiration"] == {"days": YARN_MARKER_DAYS}
    assert expire["noncurrentVersionExpiration"] == {"noncurrentDays": 1}
    assert delete_markers["expiration"] == {"expiredObjectDeleteMarker": True}
    # a marker is only read within the Lambda run that added its step: S3's shortest expiry (1 day,
    # rounded up to midnight UTC) already outlives it, YARN_MARKER_DAYS by far
    assert YARN_MARKER_DAYS * 86400 > 10 * LAMBDA_TIMEOUT_S
    # the other rules are untouched: checkpoints (everything else) never expire while current
    assert {r["filter"].get("prefix") for r in rules.values() if "days" in r.get("expiration", {})} == {
        "logs/",
        YARN_MARKERS,
    }


def test_the_documented_import_file_names_what_the_program_registers_for_the_bucket(central: Run) -> None:
    """docs/deploy.md "Brownfield": adopting an existing EMR bucket with `pulumi import --file`."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    section = text[text.index("### Brownfield") :]
    block = section[section.index("```json") + len("```json") : section.index("```", section.index("```json") + 7)]
    resources = json.loads(block)["resources"]
    [component] = [r for r in resources if r.get("component")]
    [platform] = [r for r in central.resources if r.name == component["name"]]
    assert component["type"] == platform.typ == "kafka-mirror:index:EmrSparkPlatform"
    bucket = json.loads(unwrap(central.named("central-emr-steps-policy").inputs)["policy"])  # the platform's bucket
    [markers] = [s for s in bucket["Statement"] if s["Sid"] == "YarnRunningMarkersList"]
    name = markers["Resource"].removeprefix("arn:aws:s3:::")
    # exactly the resources the program makes for a bucket it creates, under that component, by bucket name
    made = {
        (r.typ, r.name)
        for r in central.resources
        if r.parent == platform.urn and r.name.startswith(f"{platform.name}-bucket")
    }
    imported = [r for r in resources if not r.get("component")]
    assert {(r["type"], r["name"]) for r in imported} == made and len(made) == 6
    assert all(r["parent"] == component["name"] and r["id"] == name for r in imported)
    assert all(central.named(r["name"]).provider == "" for r in imported)  # the default provider: none to name


def test_each_flows_invocation_reads_its_step_through_the_list_only_reader_on_every_run(central: Run) -> None:
    """Drift (issue 43, day two): the Invocation's triggers come from the reader, invoked in previews too."""
    reader = central.named("central-emr-steps-read")
    inputs = unwrap(reader.inputs)
    assert inputs["handler"] == "step_reader.handler" and inputs["timeout"] == 60
    assert inputs["role"] == "arn:aws:iam::123456789012:role/central-emr-steps-read-role-7f3a9c1"
    policy = json.loads(unwrap(central.named("central-emr-steps-read-policy").inputs)["policy"])
    logs = "arn:aws:logs:eu-central-1:123456789012:log-group:central-emr-steps-read-logs-0c4b7e9"
    assert policy == reader_policy("eu-central-1", "j-MOCKCLUSTER", logs)
    [platform] = central.of_type("kafka-mirror:index:EmrSparkPlatform")
    assert central.outputs[platform.urn]["deployment_target"]["step_reader"] == "central-emr-steps-read-5e1d2c0"
    invocations = central.of_type(INVOCATION)
    assert invocations
    for invocation in invocations:
        # only the reader's answer (the harness answers as a live step's reader) gives this value
        assert unwrap(invocation.inputs)["triggers"] == {"step_ended": "none"}
