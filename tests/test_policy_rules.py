"""The policy pack's rules, run on the manifests the components render (no Pulumi engine)."""

from __future__ import annotations

import copy
import json
from typing import Any

from kafka_mirror.eks.specs import EksSettings, flow_config_map, spark_application_manifest
from policy.kafka_mirror_policy import rules
from policy.kafka_mirror_policy.pack import build_policies
from tests.test_policy_estate_hygiene import ESTATE_AND_HYGIENE_POLICIES

SA = rules.SPARK_APPLICATION
CM = rules.CONFIG_MAP


def flow_spec(source: str = "west-1", target: str = "east-1", policy: str = "default", **config: str) -> dict[str, Any]:
    return {
        "id": f"{source}->{target}",
        "source": {"alias": source, "bootstrap_servers": f"{source}:9092", "config": {}},
        "target": {"alias": target, "bootstrap_servers": f"{target}:9092", "config": dict(config)},
        "topics": ["orders.*"],
        "topics_exclude": [],
        "replication_policy": {"type": policy},
        "checkpoint_location": "/tmp/ckpt",
    }


def app(spec: dict[str, Any], **spark_options: str) -> dict[str, Any]:
    return spark_application_manifest(spec, {"options": spark_options}, EksSettings())


def stack(*specs: dict[str, Any]) -> list[rules.Resource]:
    out: list[rules.Resource] = []
    for spec in specs:
        out += [(CM, flow_config_map(spec, "kafka-mirror")), (SA, app(spec))]
    return out


def test_rendered_spark_application_passes_every_resource_rule() -> None:
    manifest = app(flow_spec(), **{"spark.ssl.keyPassword": "${file:/etc/kmirror/secrets/east/pw}"})
    assert rules.restart_policy_violations(SA, manifest) == []
    assert rules.plaintext_secret_violations(SA, manifest) == []


def test_restart_policy_other_than_always_is_rejected() -> None:
    manifest = app(flow_spec())
    manifest["spec"]["restartPolicy"] = {"type": "OnFailure"}
    assert rules.restart_policy_violations(SA, manifest) == [
        "SparkApplication mirror-west-1-to-east-1: spec.restartPolicy.type is 'OnFailure'; set it to 'Always' "
        "so the operator restarts a failed mirror instead of leaving the flow stopped"
    ]
    del manifest["spec"]["restartPolicy"]
    assert "spec.restartPolicy.type is None" in rules.restart_policy_violations(SA, manifest)[0]
    assert rules.restart_policy_violations(CM, {"spec": {}}) == []


def test_plaintext_secret_in_spark_conf_is_rejected_without_echoing_it() -> None:
    manifest = app(flow_spec(), **{"spark.kafka.sasl.password": "hunter2", "spark.executor.memory": "4g"})
    violations = rules.plaintext_secret_violations(SA, manifest)
    assert violations == [
        "SparkApplication mirror-west-1-to-east-1 sparkConf: spark.kafka.sasl.password holds a plaintext secret; "
        "use a reference such as ${file:/etc/kmirror/secrets/NAME/KEY} or ${env:VAR} "
        "(topology: {k8s_secret: NAME, key: KEY})"
    ]
    assert "hunter2" not in "".join(violations)


def test_plaintext_secret_in_flow_spec_config_map_is_rejected() -> None:
    leaky = flow_config_map(flow_spec(**{"sasl.password": "hunter2", "ssl.key.pem": "-----BEGIN"}), "kafka-mirror")
    violations = rules.plaintext_secret_violations(CM, leaky)
    assert [v.split(" holds")[0] for v in violations] == [
        "ConfigMap mirror-west-1-to-east-1-flow flow.json: target.config.sasl.password",
        "ConfigMap mirror-west-1-to-east-1-flow flow.json: target.config.ssl.key.pem",
    ]
    safe = flow_config_map(flow_spec(**{"sasl.password": "${env:EAST_PW}"}), "kafka-mirror")
    assert rules.plaintext_secret_violations(CM, safe) == []


def test_one_app_per_flow() -> None:
    resources = stack(flow_spec(), flow_spec("east-1", "west-1"))
    assert rules.duplicate_flow_violations(resources) == []
    twin = copy.deepcopy(resources[1][1])
    twin["metadata"]["name"] = "mirror-west-1-to-east-1-copy"
    assert rules.duplicate_flow_violations([*resources, (SA, twin)]) == [
        "flow west-1->east-1 is run by 2 apps (mirror-west-1-to-east-1, mirror-west-1-to-east-1-copy); "
        "deploy exactly one application per flow"
    ]


def test_flow_id_comes_from_annotation_then_config_map_then_name() -> None:
    labelled = app(flow_spec())
    labelled["metadata"]["annotations"] = {rules.FLOW_ANNOTATION: "a->b"}
    unmounted = app(flow_spec("x", "y"))
    unmounted["spec"]["volumes"] = []
    unmounted["metadata"].pop("annotations", None)
    resources = [*stack(flow_spec("c", "d")), (SA, labelled), (SA, unmounted)]
    assert rules.app_flow_ids(resources) == [
        ("mirror-c-to-d", "c->d"),
        ("mirror-west-1-to-east-1", "a->b"),
        ("mirror-x-to-y", "mirror-x-to-y"),
    ]


def test_flow_spec_of_ignores_other_config_maps() -> None:
    assert rules.flow_spec_of(CM, {"data": {"krb5.conf": "[libdefaults]"}}) is None
    assert rules.flow_spec_of(CM, {"data": {"flow.json": "not json"}}) is None
    assert rules.flow_spec_of(CM, {"data": {"flow.json": json.dumps(flow_spec())}}) == flow_spec()


def test_policies_report_through_the_pulumi_policy_api() -> None:
    class Args:
        def __init__(self, resource_type: str, props: dict[str, Any]) -> None:
            self.resource_type, self.props = resource_type, props

    bad = app(flow_spec(), **{"spark.kafka.sasl.password": "hunter2"})
    bad["spec"]["restartPolicy"]["type"] = "Never"
    reported: dict[str, list[str]] = {}
    for policy in build_policies():
        messages = reported.setdefault(policy.name, [])
        if policy.name in ("restart-policy-always", "no-plaintext-secrets"):
            policy.validate(Args(SA, bad), lambda message, urn, sink=messages: sink.append(message))
    assert {name: len(found) for name, found in reported.items() if found} == {
        "restart-policy-always": 1,
        "no-plaintext-secrets": 1,
    }
    assert [p.name for p in build_policies()] == [
        "restart-policy-always",
        "no-plaintext-secrets",
        "one-app-per-flow",
        "no-identity-cycles",
        "production-emr-pages",
        *ESTATE_AND_HYGIENE_POLICIES,
    ]


def test_identity_cycle_among_the_stacks_flows_is_rejected_by_the_planner() -> None:
    cycle = stack(flow_spec("a", "b", "identity"), flow_spec("b", "a", "identity"))
    violations = rules.identity_cycle_violations(cycle)
    assert violations and all("cycle" in v.lower() for v in violations)
    assert rules.identity_cycle_violations(stack(flow_spec("a", "b"), flow_spec("b", "a"))) == []
    assert rules.identity_cycle_violations(stack(flow_spec("a", "b", "identity"))) == []
