"""examples/yaml/ run against the component provider as `pulumi up` would run it, without the CLI:
the program evaluated (config, `fn::readFile`, `${...}` interpolations, dependency order;
tests/pulumi/yaml_program.py), each resource constructed by the plugin started as the engine
starts it, over gRPC, under the SDK's mocks (tests/pulumi/plugin_engine.py), earlier resources'
outputs fed into later ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf import json_format

from tests.pulumi.harness import is_secret, unwrap
from tests.pulumi.plugin_engine import OUTPUT_VALUE, PluginEngine
from tests.pulumi.yaml_program import SIG, Constructed, Program, Value, YamlProgramError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "yaml" / "Pulumi.yaml"
SCHEMA = json.loads((ROOT / "components" / "schema.json").read_text())
PASSWORD = "yaml-example-pw-7Q2x"
KUBECONFIG = "apiVersion: v1\nkind: Config\nclusters: []  # east, from the stack's secret config\n"
NAMES = {
    "estate": "ReplicationTopology",
    "east1Scram": "ScramSecret",
    "eastEks": "EksSparkPlatform",
    "west1ToEast1": "MirrorDeployment",
}


@pytest.fixture(scope="module")
def example() -> tuple[PluginEngine, dict[str, Value]]:
    program = Program(EXAMPLE, SCHEMA)
    config = {"eastScramPassword": PASSWORD, "eastKubeconfig": KUBECONFIG}
    secret_keys = {"eastScramPassword", "eastKubeconfig"}
    with PluginEngine(program.name, "dev", config, secret_keys) as engine:
        outputs = program.run(config, secret_keys, engine.construct)
    return engine, outputs


def test_every_kubernetes_object_goes_through_the_stacks_kubeconfig_not_the_ambient_one(
    example: tuple[PluginEngine, Any],
) -> None:
    """The ambient kubeconfig's current context may be another cluster: the example names its own."""
    engine, _ = example
    run = engine.run
    providers = {r.urn: r for r in run.of_type("pulumi:providers:kubernetes")}
    assert providers and all(unwrap(p.inputs)["kubeconfig"] == KUBECONFIG for p in providers.values())
    assert all(isinstance(p.inputs["kubeconfig"], dict) for p in providers.values())  # a secret, wrapped
    objects = [r for r in run.resources if r.typ.startswith("kubernetes:") and not r.typ.startswith("pulumi:")]
    assert {"kubernetes:core/v1:Secret", "kubernetes:sparkoperator.k8s.io/v1beta2:SparkApplication"} <= {
        r.typ for r in objects
    }
    for made in objects:
        assert made.provider.rsplit("::", 1)[0] in providers, (made.typ, made.name, made.provider)


def test_the_example_constructs_every_resource_through_the_plugin(example: tuple[PluginEngine, Any]) -> None:
    engine, _ = example
    run = engine.run
    components = [r for r in run.resources if r.parent == engine.stack_urn]  # what the program declared
    assert {(r.name, r.typ) for r in components} == {(n, f"kafka-mirror:index:{t}") for n, t in NAMES.items()}
    clusters = {r.name for r in run.of_type("kafka-mirror:index:KafkaCluster")}
    assert clusters == {"estate-west-1", "estate-east-1"}  # the topology's children, from topology.yaml
    order = [r.name for r in components]
    assert order.index("estate") < order.index("west1ToEast1") and order.index("eastEks") < order.index("west1ToEast1")
    [mirror] = [r for r in components if r.name == "west1ToEast1"]
    [scram] = [r for r in components if r.name == "east1Scram"]
    assert scram.urn in mirror.dependencies  # options.dependsOn reached the component
    [app] = run.of_type("kubernetes:sparkoperator.k8s.io/v1beta2:SparkApplication")
    assert app.name == "west1ToEast1-app" and app.inputs["metadata"]["namespace"] == "kafka-mirror"
    assert app.parent == mirror.urn
    [flow] = run.of_type("kubernetes:core/v1:ConfigMap")
    spec = json.loads(unwrap(flow.inputs)["data"]["flow.json"])  # estate's flowSpecs fed into the deployment
    assert spec["source"]["bootstrap_servers"] == "b1.west-1.example.com:9092"
    assert spec["target"]["bootstrap_servers"] == "b-1.east-1.kafka.us-east-1.amazonaws.com:9096"
    assert "orders.*" in json.dumps(spec["topics"])  # from topology.yaml, read by fn::readFile
    executor = unwrap(app.inputs)["spec"]["executor"]  # the typed sparkDefaults (FlowSpark) reached the app
    assert (executor["instances"], executor["memory"]) == (2, "2g")


def test_the_outputs_are_the_flows_the_app_and_its_metrics(example: tuple[PluginEngine, dict[str, Value]]) -> None:
    _, outputs = example
    assert {k: unwrap(v.data) for k, v in outputs.items()} == {
        "flows": ["west-1->east-1"],
        "app": "mirror-west-1-to-east-1",
        "metrics": "http://mirror-west-1-to-east-1-metrics.kafka-mirror.svc.cluster.local:9404/metrics",
    }
    assert not any(v.secret for v in outputs.values())


def test_the_password_travels_as_a_secret_and_never_in_plaintext(example: tuple[PluginEngine, Any]) -> None:
    engine, outputs = example
    sent = engine.requests["east1Scram"]["password"]  # the secret config value, as the engine sends it
    assert sent[SIG] == OUTPUT_VALUE and sent["secret"] is True and sent["value"] == PASSWORD
    assert all(PASSWORD not in json.dumps(v) for k, v in engine.requests.items() if k != "east1Scram")
    secrets = [r for r in engine.run.of_type("kubernetes:core/v1:Secret")]
    [scram] = [r for r in secrets if r.name.startswith("east1Scram")]
    held = [v for v in scram.inputs.values() if PASSWORD in json.dumps(unwrap(v))]
    assert held and all(is_secret(v) or _only_secret_inside(v) for v in held), scram.inputs
    for urn, state in engine.states.items():  # what the plugin answered, as the engine would store it
        assert PASSWORD not in json.dumps(json_format.MessageToDict(state)), urn
    for urn, registered in engine.run.outputs.items():
        assert PASSWORD not in json.dumps(registered, default=str), urn
    assert PASSWORD not in json.dumps({k: v.data for k, v in outputs.items()}, default=str)
    assert PASSWORD not in "\n".join(engine.engine.logs) and PASSWORD not in engine.stderr


def _only_secret_inside(value: Any) -> bool:
    """Every occurrence of the password sits inside a secret wrapper."""
    if is_secret(value):
        return True
    if isinstance(value, dict):
        return all(_only_secret_inside(v) for v in value.values())
    if isinstance(value, list):
        return all(_only_secret_inside(v) for v in value)
    return PASSWORD not in str(value)


def _edited(tmp_path: Path, edit: Any) -> Path:
    doc = yaml.safe_load(EXAMPLE.read_text())
    edit(doc)
    (tmp_path / "topology.yaml").write_text((EXAMPLE.parent / "topology.yaml").read_text())
    path = tmp_path / "Pulumi.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda d: d["resources"]["eastEks"].update(type="kafka-mirror:index:EksPlatform"),
            "resources.eastEks.type: unknown resource type 'kafka-mirror:index:EksPlatform' (did you mean "
            "'kafka-mirror:index:EksSparkPlatform'?); components/schema.json is what the provider serves",
        ),
        (
            lambda d: d["resources"]["eastEks"]["properties"].update(namespce="x"),
            "resources.eastEks.properties.namespce: kafka-mirror:index:EksSparkPlatform has no input 'namespce' "
            "(did you mean 'namespace'?)",
        ),
        (
            lambda d: d["resources"]["east1Scram"]["properties"]["store"].update(secretNam="x"),
            "resources.east1Scram.properties.store.secretNam: kafka-mirror:index:SecretStoreArgs has no input "
            "'secretNam' (did you mean 'secretName'?)",
        ),
        (
            lambda d: d["outputs"].update(app="${west1ToEast1.appNme}"),
            "outputs.app: kafka-mirror:index:MirrorDeployment has no output 'appNme' (did you mean 'appName'?)",
        ),
        (
            lambda d: d["resources"]["west1ToEast1"]["properties"].update(eks="${eastEk.deploymentTarget}"),
            "resources.west1ToEast1.properties.eks: unknown name 'eastEk' (did you mean 'eastEks'?)",
        ),
        (
            lambda d: d["resources"]["east1Scram"]["properties"].pop("password"),
            "resources.east1Scram.properties: kafka-mirror:index:ScramSecret requires password: add them",
        ),
        (
            lambda d: d["resources"]["eastEks"].setdefault("options", {}).update(protect=True),
            "resources.eastEks.options.protect: not supported by this evaluator (only dependsOn)",
        ),
        (
            lambda d: d["resources"]["estate"]["properties"].update(datacenter="${west1ToEast1.appName}"),
            "resources estate, west1ToEast1 reference each other in a cycle",
        ),
        (
            lambda d: d["resources"]["west1ToEast1"]["properties"].update(eks="${eastEks}"),
            "resources.west1ToEast1.properties.eks: '${eastEks}' passes the resource itself, which this evaluator "
            "does not support; pass one of its outputs (${eastEks.<output>})",
        ),
        (
            lambda d: d["resources"]["eastEks"]["properties"]["sparkDefaults"].update(executorMemroy="4g"),
            "resources.eastEks.properties.sparkDefaults.executorMemroy: kafka-mirror:index:FlowSpark has no input "
            "'executorMemroy' (did you mean 'executorMemory'?)",
        ),
    ],
    ids=[
        "type",
        "input",
        "nested",
        "output",
        "name",
        "required",
        "option",
        "cycle",
        "resource-as-value",
        "typed-core-input",
    ],
)
def test_what_the_schema_does_not_have_fails_before_anything_runs(tmp_path: Path, edit: Any, message: str) -> None:
    with pytest.raises(YamlProgramError) as raised:
        Program(_edited(tmp_path, edit), SCHEMA)
    assert str(raised.value) == message


def test_a_missing_secret_config_value_is_named_with_the_fix() -> None:
    with pytest.raises(
        YamlProgramError,
        match=r"config.eastScramPassword: no value; set it: pulumi config set "
        r"--secret eastScramPassword <value>",
    ):
        Program(EXAMPLE, SCHEMA).run({}, set(), lambda *a: Constructed("", {}))


def test_interpolation_keeps_secretness_dependencies_and_escapes(tmp_path: Path) -> None:
    """The evaluator's own semantics, against a recording construct (no plugin)."""
    program_file = tmp_path / "Pulumi.yaml"
    program_file.write_text(
        yaml.safe_dump(
            {
                "name": "p",
                "runtime": "yaml",
                "config": {"pw": {"type": "string", "secret": True}},
                "resources": {
                    "b": {
                        "type": "kafka-mirror:index:ScramSecret",
                        "properties": {"username": "u-${a.secretName}-$${literal}", "password": "${pw}"},
                    },
                    "a": {"type": "kafka-mirror:index:ScramSecret", "properties": {"username": "u", "password": "x"}},
                },
                "outputs": {"key": "${b.passwordKey}"},
            }
        )
    )
    seen: dict[str, dict[str, Value]] = {}

    def construct(name: str, typ: str, inputs: dict[str, Value], depends_on: list[str]) -> Constructed:
        seen[name] = inputs
        return Constructed(f"urn:{name}", {"secretName": f"s-{name}", "passwordKey": "password"})

    outputs = Program(program_file, SCHEMA).run({"pw": "hunter2"}, {"pw"}, construct)
    assert list(seen) == ["a", "b"]  # b references a: a first, whatever the file order
    assert seen["b"]["username"].data == "u-s-a-${literal}" and seen["b"]["username"].deps == {"urn:a"}
    assert seen["b"]["password"].secret and not seen["b"]["username"].secret
    assert outputs["key"].data == "password" and outputs["key"].deps == {"urn:b"}
