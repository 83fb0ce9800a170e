"""EKS hardening (issue 27), checked on what every EKS example stack registers under mocks: no
driver budget blocks a drain, the apps' namespace enforces Pod Security `restricted` and its pods
meet it, a NetworkPolicy denies ingress but Spark RPC and Prometheus, Spark RPC is authenticated
and encrypted, the operator image can be pinned by digest, and the app image is required."""

from __future__ import annotations

from typing import Any

import pytest

from kafka_mirror.eks.platform_args import check_runbook_url
from kafka_mirror.eks.spark_platform import SPARK_OPERATOR_CHART_VERSION, _operator_release_values, required_image
from kafka_mirror.eks.specs import SPARK_PORT_CONF, EksSettings, operator_image_values, spark_application_manifest
from kmirror.errors import ValidationError
from tests.pulumi.harness import Registered, Run, run_program, unwrap
from tests.pulumi.sparkapp_schema import validate_k8s

EKS_STACKS = ("east", "west", "local")
SPARK_APP = "kubernetes:sparkoperator.k8s.io/v1beta2:SparkApplication"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
NAMESPACE = "kubernetes:core/v1:Namespace"
DIGEST = "sha256:" + "0123456789abcdef" * 4
_runs: dict[str, Run] = {}


def stack_run(stack: str) -> Run:
    if stack not in _runs:
        _runs[stack] = run_program(stack)
    return _runs[stack]


def body(resource: Registered) -> dict[str, Any]:
    return {k: v for k, v in unwrap(resource.inputs).items() if k not in ("apiVersion", "kind")}


def apps(run: Run) -> list[dict[str, Any]]:
    found = [body(r) for r in run.of_type(SPARK_APP)]
    assert found, "the stack deploys no SparkApplication"
    return found


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("stack", EKS_STACKS)
def test_no_disruption_budget_blocks_a_drain(stack: str) -> None:
    budgets = [body(r)["spec"] for r in stack_run(stack).of_type(PDB)]
    assert budgets
    for spec in budgets:
        # one driver per app: maxUnavailable 0 or minAvailable >= 1 would refuse every eviction
        assert spec.get("maxUnavailable", 1) != 0, spec
        assert "minAvailable" not in spec, spec
    for app in apps(stack_run(stack)):  # what brings an evicted driver back
        policy = app["spec"]["restartPolicy"]
        assert policy["type"] == "Always" and policy["onFailureRetryInterval"] > 0, policy


RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def restricted_violations(app: dict[str, Any]) -> list[str]:
    """What Pod Security `restricted` (v1.35) refuses in the app's driver and executor pods."""
    spec = app["spec"]
    problems = [f"volume {v['name']}" for v in spec["volumes"] if not set(v) - {"name"} <= RESTRICTED_VOLUMES]
    for role in ("driver", "executor"):
        pod, container = spec[role].get("podSecurityContext", {}), spec[role].get("securityContext", {})
        if not (pod.get("runAsNonRoot") or container.get("runAsNonRoot")):
            problems.append(f"{role}: runAsNonRoot")
        if 0 in (pod.get("runAsUser"), container.get("runAsUser")):
            problems.append(f"{role}: runAsUser 0")
        seccomp = (container.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{role}: seccompProfile {seccomp}")
        if container.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{role}: allowPrivilegeEscalation")
        caps = container.get("capabilities") or {}
        if "ALL" not in caps.get("drop", []) or set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append(f"{role}: capabilities {caps}")
        if container.get("privileged"):
            problems.append(f"{role}: privileged")
    return problems


@pytest.mark.parametrize("stack", EKS_STACKS)
def test_the_namespace_enforces_restricted_and_the_pods_meet_it(stack: str) -> None:
    run = stack_run(stack)
    [namespace] = [body(r) for r in run.of_type(NAMESPACE)]
    validate_k8s({"apiVersion": "v1", "kind": "Namespace", **namespace})
    labels = namespace["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
        assert labels[f"pod-security.kubernetes.io/{mode}-version"] == "latest"
    for app in apps(run):
        assert app["metadata"]["namespace"] == namespace["metadata"]["name"]
        assert restricted_violations(app) == []


def test_the_restricted_check_sees_a_pod_that_would_be_refused() -> None:
    app = spark_application_manifest({"id": "a->b"}, {}, EksSettings(image="img:1"))
    app["spec"]["executor"]["securityContext"]["allowPrivilegeEscalation"] = True
    app["spec"]["driver"]["securityContext"]["capabilities"] = {"drop": []}
    assert restricted_violations(app) == ["driver: capabilities {'drop': []}", "executor: allowPrivilegeEscalation"]


@pytest.mark.parametrize("stack", EKS_STACKS)
def test_a_network_policy_denies_ingress_but_spark_rpc_and_prometheus(stack: str) -> None:
    run = stack_run(stack)
    [namespace] = [body(r)["metadata"]["name"] for r in run.of_type(NAMESPACE)]
    [policy] = [body(r) for r in run.of_type(NETWORK_POLICY)]
    validate_k8s({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", **policy})
    spec = policy["spec"]
    assert policy["metadata"]["namespace"] == namespace
    assert spec["policyTypes"] == ["Ingress"]  # egress open: brokers are outside, by DNS name
    peers, scrape = spec["ingress"]
    selector = spec["podSelector"]["matchLabels"]
    assert peers["from"] == [{"podSelector": {"matchLabels": selector}}]
    assert scrape["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    assert scrape["ports"] == [{"protocol": "TCP", "port": "metrics"}, {"protocol": "TCP", "port": 9404}]
    opened = {p["port"] for p in peers["ports"]}
    for app in apps(run):
        conf = app["spec"]["sparkConf"]
        # the policy covers every driver and executor and opens exactly the ports they use
        assert all(matches(selector, app["spec"][role]["labels"]) for role in ("driver", "executor"))
        used = {int(conf[k]) for k in SPARK_PORT_CONF}
        assert used == opened == {7078, 7079}
        assert {"name": "metrics", "containerPort": 9404, "protocol": "TCP"} in app["spec"]["driver"]["ports"]


@pytest.mark.parametrize("stack", EKS_STACKS)
def test_spark_rpc_is_authenticated_and_encrypted(stack: str) -> None:
    for app in apps(stack_run(stack)):
        conf = app["spec"]["sparkConf"]
        assert conf["spark.authenticate"] == "true" and conf["spark.network.crypto.enabled"] == "true"
        assert "spark.authenticate.secret" not in conf  # Spark generates one per app on Kubernetes


def test_platform_spark_conf_can_loosen_rpc_security() -> None:
    settings = EksSettings(image="img:1", spark_conf={"spark.network.crypto.enabled": "false"})
    conf = spark_application_manifest({"id": "a->b"}, {}, settings)["spec"]["sparkConf"]
    assert conf["spark.network.crypto.enabled"] == "false" and conf["spark.authenticate"] == "true"


def test_a_flow_cannot_move_the_rpc_ports_the_policy_opens() -> None:
    spark = {"options": {"spark.driver.port": 7100}}
    with pytest.raises(ValueError) as info:
        spark_application_manifest({"id": "a->b"}, spark, EksSettings(image="img:1"))
    assert str(info.value) == (
        "flow a->b: spark option spark.driver.port='7100' differs from the platform's '7078', which the "
        "NetworkPolicy opens; drop it from the flow or set it in the platform's spark_conf"
    )


def test_the_operator_image_is_pinned_by_a_valid_digest() -> None:
    values = _operator_release_values("east-eks", "kafka-mirror", {"image_digest": DIGEST})
    assert values["image"] == {"tag": f"{SPARK_OPERATOR_CHART_VERSION}@{DIGEST}"}
    assert values["webhook"]["failurePolicy"] == "Fail"  # the rest of the values unchanged
    assert operator_image_values(SPARK_OPERATOR_CHART_VERSION, None) == {}
    for bad in ("2.5.2", "sha256:abc", "sha256:" + "A" * 64, "sha512:" + "0" * 64):
        with pytest.raises(ValueError, match=r"is not a digest; use sha256:<64 hex digits>.*crane digest"):
            operator_image_values(SPARK_OPERATOR_CHART_VERSION, bad)


@pytest.mark.parametrize("args", [{}, {"image": ""}, {"image": "  "}])
def test_the_app_image_is_required(args: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as info:
        required_image("east-eks", args)  # type: ignore[arg-type]
    assert "EksSparkPlatform east-eks: image: required, got" in str(info.value)
    assert "REPO@sha256:" in str(info.value)
    assert required_image("east-eks", {"image": "repo@" + DIGEST}) == "repo@" + DIGEST


def test_the_component_refuses_alerts_without_an_absolute_runbook_url() -> None:
    """Plugin users (no stack config) get the same refusal as the stack program, before anything is made."""
    for monitoring in ({"prometheus_rule": True}, {"prometheus_rule": True, "runbook_url": "docs/deploy.md#runbook"}):
        with pytest.raises(ValidationError, match=r"monitoring\.runbook_url: is .*absolute http\(s\) URL"):
            check_runbook_url("east-eks", {"image": "x", "monitoring": monitoring})  # type: ignore[typeddict-item]
    check_runbook_url("east-eks", {"image": "x", "monitoring": {"prometheus_rule": False}})
    check_runbook_url("east-eks", {"image": "x", "monitoring": {"prometheus_rule": True, "runbook_url": "https://g/r"}})
