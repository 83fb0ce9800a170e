"""A stack that creates its EKS cluster converges in one `pulumi up` (issue 27): the Prometheus
operator's CRDs are installed before any PodMonitor or PrometheusRule, the apps' IRSA role is
created in the same run trusting the new cluster's OIDC provider (a role made before the run
cannot), and a private-only API endpoint is refused unless the stack says its runner reaches it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kafka_mirror.eks.cluster import checkpoint_access_policy, irsa_trust_policy
from kmirror.errors import ValidationError
from kmirror.stack.config import parse_stack_config
from tests.pulumi.harness import Registered, Run, run_program, stack_config, unwrap

RELEASE = "kubernetes:helm.sh/v3:Release"
RULE, MONITOR = "PrometheusRule", "PodMonitor"
OIDC_ARN = "arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/EX"  # tests/pulumi/harness.py
_runs: dict[str, Run] = {}


def east() -> Run:
    """east with monitoring on (its stack file keeps it off until a Prometheus is declared)."""
    if "east" not in _runs:
        config = stack_config("east")
        spark = json.loads(config["kafka-mirror:spark"])
        spark["monitoring"] = {
            "pod_monitor": True,
            "prometheus_rule": True,
            "prometheus": "monitoring/prometheus",
            "runbook_url": "https://git.example.com/ops/kafka-mirror/blob/main/docs/deploy.md#runbook",
        }
        config["kafka-mirror:spark"] = json.dumps(spark)
        _runs["east"] = run_program("east", config)
    return _runs["east"]


def custom(run: Run, kind: str) -> list[Registered]:
    return [
        r for r in run.resources if r.typ.startswith("kubernetes:monitoring.coreos.com/") and r.typ.endswith(f":{kind}")
    ]


def test_monitoring_objects_wait_for_the_prometheus_crds_of_a_new_cluster() -> None:
    run = east()
    [crds] = [r for r in run.of_type(RELEASE) if unwrap(r.inputs)["chart"] == "prometheus-operator-crds"]
    assert unwrap(crds.inputs)["version"]  # pinned
    rules, monitors = custom(run, RULE), custom(run, MONITOR)
    assert rules and monitors, "east deploys a PrometheusRule and PodMonitors"
    for resource in rules + monitors:
        assert crds.urn in resource.dependencies, f"{resource.name} may be created before its CRD exists"


@pytest.mark.parametrize("stack", ["west", "local"])
def test_an_existing_cluster_gets_no_crds_chart(stack: str) -> None:
    charts = [unwrap(r.inputs)["chart"] for r in run_program(stack).of_type(RELEASE)]
    assert "prometheus-operator-crds" not in charts


def test_the_irsa_role_is_created_with_the_cluster_and_trusts_its_oidc_provider() -> None:
    run = east()
    [role] = [r for r in run.of_type("aws:iam/role:Role") if r.name.endswith("-irsa")]
    trust = json.loads(unwrap(role.inputs)["assumeRolePolicy"])
    [statement] = trust["Statement"]
    assert statement["Principal"] == {"Federated": OIDC_ARN}
    assert statement["Condition"]["StringEquals"] == {
        "oidc.eks.us-east-1.amazonaws.com/id/EX:sub": "system:serviceaccount:kafka-mirror:kafka-mirror",
        "oidc.eks.us-east-1.amazonaws.com/id/EX:aud": "sts.amazonaws.com",
    }
    [account] = run.of_type("kubernetes:core/v1:ServiceAccount")
    annotation = unwrap(account.inputs)["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
    assert annotation == f"arn:aws:iam::123456789012:role/{role.name}-7f3a9c1"  # the mocks' auto-name
    [access] = [r for r in run.of_type("aws:iam/rolePolicy:RolePolicy") if r.name.endswith("-irsa-checkpoints")]
    policy = json.loads(unwrap(access.inputs)["policy"])
    assert policy == checkpoint_access_policy("s3a://acme-kafka-mirror-east/checkpoints")
    assert policy["Statement"][1]["Resource"] == "arn:aws:s3:::acme-kafka-mirror-east/checkpoints/*"


def test_trust_and_access_policies_are_scoped() -> None:
    trust = irsa_trust_policy("arn:p", "https://oidc.example/id/1", "ns", "sa")
    assert trust["Statement"][0]["Condition"]["StringEquals"]["oidc.example/id/1:sub"] == "system:serviceaccount:ns:sa"
    assert checkpoint_access_policy("/var/lib/kmirror/checkpoints") is None
    whole = checkpoint_access_policy("s3://bucket")
    assert whole is not None and "Condition" not in whole["Statement"][0]
    assert whole["Statement"][1]["Resource"] == "arn:aws:s3:::bucket/*"


EKS: dict[str, Any] = {"platform": "eks", "image": f"img:1@sha256:{'0' * 64}", "checkpoint_root": "s3a://b/c"}
CREATE = {"create": True, "vpc_id": "vpc-1", "subnet_ids": ["subnet-1"]}


def problems(spark: dict[str, Any]) -> list[str]:
    try:
        parse_stack_config({"datacenter": "e", "spark": spark})
    except ValidationError as exc:
        return [str(p) for p in exc.problems]
    return []


def test_a_private_endpoint_needs_a_runner_that_reaches_it() -> None:
    [refused] = problems({**EKS, "cluster": CREATE})
    assert refused.startswith("kafka-mirror:spark.cluster.endpoint_public_access: false (private API endpoint)")
    assert "deploy_from_vpc: true" in refused and "public_access_cidrs" in refused
    from_vpc = {**CREATE, "deploy_from_vpc": True, "runner_security_group_id": "sg-1"}
    [unlabelled] = problems({**EKS, "cluster": from_vpc})  # CI's jobs would run on ubuntu-latest, outside the VPC
    assert unlabelled.startswith("kafka-mirror:spark.cluster.runner_labels: required with deploy_from_vpc: true")
    assert problems({**EKS, "cluster": {**from_vpc, "runner_labels": ["self-hosted", "vpc"]}}) == []
    public = {**CREATE, "endpoint_public_access": True, "public_access_cidrs": ["203.0.113.0/24"]}
    assert problems({**EKS, "cluster": public}) == []


def test_a_role_made_before_the_run_is_refused_for_a_created_cluster() -> None:
    cluster = {**CREATE, "deploy_from_vpc": True, "runner_security_group_id": "sg-1", "runner_labels": ["vpc"]}
    [refused] = problems({**EKS, "cluster": cluster, "irsa_role_arn": "arn:aws:iam::1:role/r"})
    assert refused.startswith("kafka-mirror:spark.irsa_role_arn: 'arn:aws:iam::1:role/r' cannot trust the OIDC")
    assert problems({**EKS, "cluster": cluster, "irsa_policy_arns": ["arn:aws:iam::1:policy/p"]}) == []
    kube = {"kubeconfig": {"file": "/k"}, "irsa_policy_arns": ["arn:aws:iam::1:policy/p"]}
    [unused] = problems({**EKS, **kube})
    assert unused.startswith("kafka-mirror:spark.irsa_policy_arns: only used for the IRSA role")


def test_the_operator_crds_are_applied_by_pulumi_and_upgraded_with_the_chart() -> None:
    """Helm installs a chart's crds/ once and never upgrades them: the platform applies the chart
    version's CRDs itself, the release skips them, and apps wait for them."""
    from kafka_mirror.eks.spark_platform import SPARK_OPERATOR_CHART_VERSION, SPARK_OPERATOR_CRDS, operator_crds

    assert SPARK_OPERATOR_CHART_VERSION in SPARK_OPERATOR_CRDS.name
    run = east()
    crds = {
        unwrap(r.inputs)["metadata"]["name"]: r
        for r in run.of_type("kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition")
    }
    assert set(crds) == {
        "sparkapplications.sparkoperator.k8s.io",
        "scheduledsparkapplications.sparkoperator.k8s.io",
        "sparkconnects.sparkoperator.k8s.io",
    }
    for crd in crds.values():
        annotations = unwrap(crd.inputs)["metadata"]["annotations"]
        assert annotations["kafka-mirror/chart-version"] == SPARK_OPERATOR_CHART_VERSION
        assert annotations["pulumi.com/patchForce"] == "true"  # takes over from an earlier Helm install
    [release] = [r for r in run.of_type(RELEASE) if unwrap(r.inputs)["chart"] == "spark-operator"]
    assert unwrap(release.inputs)["skipCrds"] is True
    assert {c.urn for c in crds.values()} <= set(release.dependencies)
    apps = run.of_type("kubernetes:sparkoperator.k8s.io/v1beta2:SparkApplication")
    assert apps and all(crds["sparkapplications.sparkoperator.k8s.io"].urn in a.dependencies for a in apps)
    [app_crd] = [c for c in operator_crds() if c["spec"]["names"]["kind"] == "SparkApplication"]
    assert [v["name"] for v in app_crd["spec"]["versions"]] == ["v1beta2"]
