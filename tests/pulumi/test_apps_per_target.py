"""`kafka-mirror:spark.apps_per: target`: the program deploys one Spark application per target
cluster (EKS SparkApplication, EMR step) running every flow of that cluster; `flow` (the default)
keeps one app per flow, resources unchanged. Under the SDK's mocks (tests/pulumi/harness.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from kafka_mirror.app_sets import app_spark, with_set_metrics_ports
from kafka_mirror.emr.step_lambda import parse_step
from kmirror.errors import ValidationError
from kmirror.flow.spec import parse_flow_spec
from kmirror.stack.config import parse_stack_config
from tests.pulumi.harness import ROOT, Run, run_program, stack_config, unwrap
from tests.pulumi.sparkapp_schema import validate_k8s, validate_spark_application
from tests.pulumi.test_program import CONFIG_MAP, EXPECTED, SPARK_APP, STEP, bundle, manifest, stack_run, step_input

__all__ = ["bundle"]  # the module fixture: one app bundle and wheelhouse for every run
TARGET_APP = "kafka-mirror:index:TargetMirrorDeployment"
FLOW_APP = "kafka-mirror:index:MirrorDeployment"
_runs: dict[tuple[str, str], Run] = {}


def config(stack: str, apps_per: str, topology: str | None = None) -> dict[str, str]:
    values = stack_config(stack, topology)
    spark = json.loads(values["kafka-mirror:spark"])
    values["kafka-mirror:spark"] = json.dumps({**spark, "apps_per": apps_per})
    return values


def run(stack: str, apps_per: str) -> Run:
    if (stack, apps_per) not in _runs:
        _runs[stack, apps_per] = run_program(stack, config(stack, apps_per))
    return _runs[stack, apps_per]


def comparable(value: Any) -> Any:
    """Inputs as the engine diffs them: assets by content (their objects compare by identity)."""
    if isinstance(value, pulumi.FileAsset):
        return {"file_sha256": hashlib.sha256(Path(value.path).read_bytes()).hexdigest()}
    if isinstance(value, pulumi.StringAsset):
        return {"text": value.text}
    if isinstance(value, pulumi.AssetArchive):
        return {"archive": comparable(dict(value.assets))}
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()}
    return [comparable(v) for v in value] if isinstance(value, list) else value


def inputs_of(r: Run, prefix: str = "") -> dict[tuple[str, str], Any]:
    """(type, urn) -> inputs of the run's resources named `prefix...`."""
    return {
        (x.typ, x.urn): comparable(unwrap({k: v for k, v in x.inputs.items() if k != "__provider"}))
        for x in r.resources
        if x.name.startswith(prefix)
    }


def app_spec(run: Run, name: str) -> dict[str, Any]:
    return dict(unwrap(run.named(f"{name}-app").inputs)["spec"])


def test_eks_two_flows_to_one_target_are_one_app_whose_args_name_both() -> None:
    east = run("east", "target")
    assert not east.of_type(FLOW_APP)
    assert sorted(d.name for d in east.of_type(TARGET_APP)) == ["mirror-to-east-1", "mirror-to-east-2"]
    assert sorted(unwrap(a.inputs)["metadata"]["name"] for a in east.of_type(SPARK_APP)) == [
        "mirror-to-east-1",
        "mirror-to-east-2",
    ]
    spec = app_spec(east, "mirror-to-east-2")
    assert spec["arguments"] == [
        "--flow",
        "/etc/kmirror/flow/mirror-central-to-east-2.json",
        "--flow",
        "/etc/kmirror/flow/mirror-west-2-to-east-2.json",
    ]
    # every file the args name is a key of a mounted ConfigMap holding that flow's spec
    [volume] = [v for v in spec["volumes"] if v["name"] == "flow"]
    files = {s["configMap"]["items"][0]["path"]: s["configMap"]["name"] for s in volume["projected"]["sources"]}
    maps = {unwrap(c.inputs)["metadata"]["name"]: unwrap(c.inputs)["data"] for c in east.of_type(CONFIG_MAP)}
    ports = set()
    for path in spec["arguments"][1::2]:
        flow = parse_flow_spec(json.loads(maps[files[path.rsplit("/", 1)[1]]]["flow.json"]))
        assert path.endswith(f"mirror-{flow.id.replace('->', '-to-')}.json")
        ports.add(flow.option("metrics_port"))
    assert ports == {9404, 9405}  # one registry per flow in one driver: distinct ports
    assert [p["containerPort"] for p in spec["driver"]["ports"]] == [9404, 9405]
    assert spec["executor"]["instances"] == 4  # the stack's executors: 2 per flow, summed
    assert spec["executor"]["memory"] == "2g"
    assert unwrap(east.named("mirror-to-east-1-app").inputs)["spec"]["executor"]["instances"] == 2
    validate_spark_application(
        manifest(east.named("mirror-to-east-2-app"), "sparkoperator.k8s.io/v1beta2", "SparkApplication")
    )
    validate_k8s(manifest(east.named("mirror-to-east-2-metrics"), "v1", "Service"))
    policy = manifest(east.named("mirror-to-east-2-metrics-ingress"), "networking.k8s.io/v1", "NetworkPolicy")
    validate_k8s(policy)
    [rule] = policy["spec"]["ingress"]
    assert [p["port"] for p in rule["ports"]] == [9404, 9405]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    assert east.exports["apps"] == {
        "central->east-2": "mirror-to-east-2",
        "west-1->east-1": "mirror-to-east-1",
        "west-2->east-2": "mirror-to-east-2",
    }


def test_emr_two_flows_to_one_target_are_one_step_whose_args_name_both() -> None:
    central = run("central", "target")
    [step] = central.of_type(STEP)
    sent = step_input(step)
    assert sent["name"] == "mirror-to-central"
    args = sent["args"]
    assert args[-4:] == ["--flow", "mirror-east-1-to-central.json", "--flow", "mirror-west-1-to-central.json"]
    objects = {unwrap(o.inputs)["key"] for o in central.of_type("aws:s3/bucketObjectv2:BucketObjectv2")}
    files = args[args.index("--files") + 1].split(",")
    for flow in ("east-1-to-central", "west-1-to-central"):
        [uri] = [f for f in files if f.endswith(f"#mirror-{flow}.json")]
        assert uri.split("#")[0].split("/", 3)[3] in objects  # s3://bucket/<key of the flow's object>
    assert "spark.yarn.tags=kmirror-to-central" in args
    assert parse_step(sent).name == "mirror-to-central"  # what the platform's step function accepts


@pytest.mark.parametrize("stack", ["east", "central"])
def test_apps_per_flow_is_the_default_and_deploys_what_it_did(stack: str) -> None:
    default, explicit = stack_run(stack), run(stack, "flow")
    assert inputs_of(default) == inputs_of(explicit)
    assert not explicit.of_type(TARGET_APP) and explicit.of_type(FLOW_APP)


@pytest.mark.parametrize("stack", ["east", "central"])
def test_the_policy_pack_sees_every_flow_of_a_target_app(stack: str) -> None:
    from policy.kafka_mirror_policy import estate, rules

    resources = [(r.typ, unwrap(r.inputs)) for r in run(stack, "target").resources]
    assert sorted(flow for _, flow in rules.app_flow_ids(resources)) == EXPECTED[stack]
    assert rules.duplicate_flow_violations(resources) == []
    assert estate.estate_violations(stack, resources, estate.load_estate(ROOT)) == []
    for typ, props in resources:
        assert rules.plaintext_secret_violations(typ, props) == []
        assert rules.restart_policy_violations(typ, props) == []


def _with_flow_to_east_2(tmp_path: Path) -> str:
    topology = yaml.safe_load((ROOT / "stacks" / "topology.yaml").read_text())
    topology["clusters"]["east-3"] = {"bootstrap_servers": "b1.east-3.example.com:9092", "datacenter": "east"}
    topology["topologies"].append({"name": "new", "pattern": "custom", "flows": ["east-3->east-2"]})
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(topology))
    return str(path)


def test_a_flow_added_changes_only_its_targets_app(tmp_path: Path) -> None:
    before = run("east", "target")
    after = run_program("east", config("east", "target", _with_flow_to_east_2(tmp_path)))
    of = inputs_of
    assert of(before, "mirror-to-east-1") == of(after, "mirror-to-east-1")  # the other target's app: untouched
    old, new = of(before, "mirror-to-east-2"), of(after, "mirror-to-east-2")
    assert set(old) < set(new)  # nothing renamed or removed; the new flow's ConfigMap added
    added = {urn.rsplit("::", 1)[1] for _, urn in set(new) - set(old)}
    assert added == {"mirror-to-east-2-east-3-to-east-2-flow"}
    changed = {
        urn.rsplit("::", 1)[1]: (old[key, urn], new[key, urn]) for key, urn in old if old[key, urn] != new[key, urn]
    }
    # the app (new args), its Service and metrics NetworkPolicy (a port more); west-2->east-2 sorts
    # after the new flow, so its metrics port moves up one (ports follow the flows' order): its spec
    # changes in that alone
    assert set(changed) == {
        "mirror-to-east-2-app",
        "mirror-to-east-2-metrics",
        "mirror-to-east-2-metrics-ingress",
        "mirror-to-east-2-west-2-to-east-2-flow",
    }
    was, now = (json.loads(d["data"]["flow.json"]) for d in changed["mirror-to-east-2-west-2-to-east-2-flow"])
    assert (was.pop("metrics_port"), now.pop("metrics_port")) == (9405, 9406) and was == now
    args = app_spec(after, "mirror-to-east-2")["arguments"][1::2]
    assert [a.rsplit("/", 1)[1] for a in args] == [
        "mirror-central-to-east-2.json",
        "mirror-east-3-to-east-2.json",
        "mirror-west-2-to-east-2.json",
    ]


def test_an_unknown_apps_per_is_refused_naming_field_value_and_choices() -> None:
    stack = yaml.safe_load((ROOT / "stacks" / "Pulumi.west.yaml").read_text())["config"]
    spark = {**stack["kafka-mirror:spark"], "apps_per": "cluster"}
    raw = {"datacenter": "west", "topology": "topology.yaml", "spark": spark}
    with pytest.raises(ValidationError) as caught:
        parse_stack_config(raw, "west")
    assert "kafka-mirror:spark.apps_per: must be one of 'flow' or 'target', got 'cluster'" in str(caught.value)


def test_one_apps_spark_sums_executors_takes_the_largest_shape_and_refuses_clashing_options() -> None:
    sparks = {"a->t": {"executors": 3, "executor_memory": "512m"}, "b->t": {"executor_memory": "1g", "driver_cores": 2}}
    assert app_spark(sparks, {"executors": 2}) == {"executors": 5, "executor_memory": "1g", "driver_cores": 2}
    clash = {"a->t": {"options": {"spark.x": "1"}}, "b->t": {"options": {"spark.x": "2"}}}
    with pytest.raises(ValueError, match=r"spark.options.spark.x: flows a->t \('1'\) and b->t \('2'\).*apps_per: flow"):
        app_spark(clash, {})


def test_a_flows_own_metrics_port_clashing_with_an_assigned_one_is_refused() -> None:
    specs = [{"id": "a->t"}, {"id": "b->t", "metrics_port": 9404}]
    with pytest.raises(ValueError, match=r"flows.b->t.metrics_port: port 9404 is also a->t's"):
        with_set_metrics_ports(specs, 9404)
    assert [s["metrics_port"] for s in with_set_metrics_ports([{"id": "b->t"}, {"id": "a->t"}], 9404)] == [9404, 9405]
