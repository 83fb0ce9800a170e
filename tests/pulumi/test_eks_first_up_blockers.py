"""The first production `up` of the EKS stacks (east creates its cluster, west uses an existing one),
walked resource by resource under the SDK's mocks: what must exist, wait or be kept for that `up`
to mean "mirroring" (issue 43's blockers 2, 5, 6, 7, 9)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kafka_mirror.bundle import build_bundle
from kafka_mirror.eks.specs import APP_RUNNING_CONDITION
from kmirror.errors import ValidationError
from tests.pulumi.harness import ROOT, Run, run_program, stack_config, unwrap

SPARK_APP = "kubernetes:sparkoperator.k8s.io/v1beta2:SparkApplication"
CRD = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
RELEASE = "kubernetes:helm.sh/v3:Release"
_runs: dict[str, Run] = {}


@pytest.fixture(scope="module", autouse=True)
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    path, _ = build_bundle(ROOT, tmp_path_factory.mktemp("bundle"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KMIRROR_BUNDLE", str(path))
        yield


def stack(name: str) -> Run:
    if name not in _runs:
        _runs[name] = run_program(name)
    return _runs[name]


def edited(name: str, **cluster: Any) -> dict[str, str]:
    config = stack_config(name)
    spark = json.loads(config["kafka-mirror:spark"])
    spark["cluster"].update(cluster)
    config["kafka-mirror:spark"] = json.dumps(spark)
    return config


def spark_edited(name: str, edit: Callable[[dict[str, Any]], object]) -> dict[str, str]:
    """Stack `name`'s config with `edit` applied to its `kafka-mirror:spark`."""
    config = stack_config(name)
    spark = json.loads(config["kafka-mirror:spark"])
    edit(spark)
    config["kafka-mirror:spark"] = json.dumps(spark)
    return config


@pytest.mark.parametrize("name", ["east", "west"])
def test_up_waits_for_every_app_to_run_and_says_how_long(name: str) -> None:
    apps = stack(name).of_type(SPARK_APP)
    assert apps
    for app in apps:
        annotations = unwrap(app.inputs)["metadata"]["annotations"]
        assert annotations["pulumi.com/waitFor"] == APP_RUNNING_CONDITION
        assert annotations["pulumi.com/timeoutSeconds"] == "600"


def test_the_operator_chart_waits_for_the_nodes_with_a_bounded_atomic_install() -> None:
    run = stack("east")
    [nodes] = run.of_type("aws:eks/nodeGroup:NodeGroup")
    assert nodes.options["custom_timeouts"] == {"create": "30m", "update": "60m", "delete": "30m"}
    releases = {r.name: r for r in run.of_type(RELEASE)}
    operator = releases["east-eks-spark-operator"]
    assert nodes.urn in operator.dependencies
    for release in releases.values():
        inputs = unwrap(release.inputs)
        assert (inputs["timeout"], inputs["atomic"], inputs["cleanupOnFail"]) == (600, True, True), release.name


def test_the_spark_crds_outlive_the_stack_and_the_cluster_is_protected() -> None:
    run = stack("east")
    crds = run.of_type(CRD)
    assert "east-eks-crd-sparkapplications" in {c.name for c in crds}
    assert all(c.options["retain_on_delete"] for c in crds)
    assert all(c.options["retain_on_delete"] for c in stack("west").of_type(CRD))
    [cluster] = run.of_type("eks:index:Cluster")
    assert cluster.options["protect"] and unwrap(cluster.inputs)["deletionProtection"] is True


def test_wests_priority_class_is_created_before_its_apps() -> None:
    run = stack("west")
    [priority] = run.of_type("kubernetes:scheduling.k8s.io/v1:PriorityClass")
    assert unwrap(priority.inputs)["metadata"]["name"] == "kafka-mirror-critical"
    assert unwrap(priority.inputs)["value"] == 1_000_000
    for app in run.of_type(SPARK_APP):
        assert unwrap(app.inputs)["spec"]["driver"]["priorityClassName"] == "kafka-mirror-critical"


def test_access_entries_come_from_the_stack_config() -> None:
    [cluster] = stack("east").of_type("eks:index:Cluster")
    entries = unwrap(cluster.inputs)["accessEntries"]
    preview = entries["preview-0"]
    assert preview["principalArn"] == "arn:aws:iam::123456789012:role/kafka-mirror-preview"
    assert preview["accessPolicies"]["preview"] == {
        "policyArn": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy",
        # the apps' namespace, and monitoring: east's dashboard ConfigMap, which `preview --refresh` reads
        "accessScope": {"type": "namespace", "namespaces": ["kafka-mirror", "monitoring"]},
    }
    assert entries["deploy-0"]["accessPolicies"]["deploy"]["policyArn"].endswith("/AmazonEKSClusterAdminPolicy")
    assert entries["view-0"]["accessPolicies"]["view"]["accessScope"] == {"type": "cluster"}
    # The nightly drift job's refresh reads east's Secrets (the stack's and Helm's release storage), the Spark
    # CRDs and SparkApplications: only its own role, read-only cluster-wide with Secrets; not the PR preview role.
    assert entries["drift-0"] == {
        "principalArn": "arn:aws:iam::123456789012:role/kafka-mirror-drift",
        "accessPolicies": {
            "drift": {
                "policyArn": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSAdminViewPolicy",
                "accessScope": {"type": "cluster"},
            }
        },
    }
    assert {e["principalArn"] for k, e in entries.items() if k.startswith("preview")}.isdisjoint(
        {entries["drift-0"]["principalArn"]}
    )
    assert all("AdminView" not in str(e) for k, e in entries.items() if not k.startswith("drift"))


def test_the_pr_preview_role_is_never_a_drift_role_that_reads_secrets() -> None:
    preview = "arn:aws:iam::123456789012:role/kafka-mirror-preview"
    config = spark_edited("east", lambda spark: spark["cluster"]["access"].update(drift_roles=[preview]))
    refused = r"cluster\.access\.drift_roles: \['[^']*kafka-mirror-preview'\] is also in preview_roles: a drift role"
    with pytest.raises(ValidationError, match=refused + " reads every Secret"):
        run_program("east", config)


def test_runner_labels_stay_out_of_the_component_and_a_private_endpoint_requires_them() -> None:
    [cluster] = stack("east").of_type("eks:index:Cluster")  # east sets runner_labels: the program ran
    assert "runnerLabels" not in unwrap(cluster.inputs)
    config = spark_edited("east", lambda spark: spark["cluster"].pop("runner_labels"))
    with pytest.raises(ValidationError, match=r"cluster\.runner_labels: required with deploy_from_vpc: true"):
        run_program("east", config)


def test_the_runner_is_admitted_to_the_private_endpoint_before_the_provider_uses_it() -> None:
    run = stack("east")
    [rule] = run.of_type("aws:ec2/securityGroupRule:SecurityGroupRule")
    inputs = unwrap(rule.inputs)
    assert (inputs["type"], inputs["fromPort"], inputs["toPort"]) == ("ingress", 443, 443)
    assert inputs["sourceSecurityGroupId"] == "sg-0a1b2c3d4e5f60077"
    provider = run.named("east-eks-k8s")
    assert rule.urn in provider.dependencies


def test_a_private_endpoint_without_an_admitted_runner_is_refused() -> None:
    config = edited("east", runner_security_group_id=None)
    spark = json.loads(config["kafka-mirror:spark"])
    del spark["cluster"]["runner_security_group_id"]
    config["kafka-mirror:spark"] = json.dumps(spark)
    with pytest.raises(ValidationError, match=r"cluster\.deploy_from_vpc: true but the runner is not admitted"):
        run_program("east", config)


def test_monitoring_without_a_declared_prometheus_is_refused() -> None:
    config = stack_config("west")
    spark = json.loads(config["kafka-mirror:spark"])
    del spark["monitoring"]["prometheus"]
    config["kafka-mirror:spark"] = json.dumps(spark)
    with pytest.raises(
        ValidationError,
        match=r"spark\.monitoring\.prometheus: required with pod_monitor and "
        r"prometheus_rule: the NAMESPACE/NAME of the Prometheus",
    ):
        run_program("west", config)


def test_alerts_without_an_absolute_runbook_url_are_refused_before_anything_is_made() -> None:
    config = stack_config("west")
    spark = json.loads(config["kafka-mirror:spark"])
    spark["monitoring"]["runbook_url"] = "docs/deploy.md#runbook-a-failed-deploy-or-a-stuck-flow"
    config["kafka-mirror:spark"] = json.dumps(spark)
    with pytest.raises(
        ValidationError,
        match=r"spark\.monitoring\.runbook_url: is 'docs/deploy.md#runbook-a-failed-deploy-or-a-stuck-flow': "
        r"required with prometheus_rule, an absolute http\(s\) URL",
    ):
        run_program("west", config)


def test_the_wait_for_running_is_set_per_stack() -> None:
    config = stack_config("local")
    spark = json.loads(config["kafka-mirror:spark"])
    spark["app_start_timeout_s"] = 45
    config["kafka-mirror:spark"] = json.dumps(spark)
    [app] = run_program("local", config).of_type(SPARK_APP)
    assert unwrap(app.inputs)["metadata"]["annotations"]["pulumi.com/timeoutSeconds"] == "45"
