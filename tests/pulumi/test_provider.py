"""The component provider as the engine sees it: its schema over gRPC (compared with the checked-in
components/schema.json) and every component constructed through `ComponentProvider.construct`
(the code path the provider's Construct RPC runs) under the SDK's mocks."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pulumi
import pytest
from pulumi.provider.experimental.component import ComponentProvider
from pulumi.runtime import settings
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

from kafka_mirror import COMPONENTS, PACKAGE
from kafka_mirror.bundle import build_bundle
from kafka_mirror.typed_provider import KafkaMirrorProvider
from tests.pulumi.harness import TWO_CLUSTER_TOPOLOGY, Mocks, RecordingMonitor, Run
from tests.pulumi.test_program import fake_wheelhouse

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "components" / "schema.json"
NAMES = [
    "KafkaCluster",
    "ReplicationTopology",
    "MirrorDeployment",
    "EksSparkPlatform",
    "EmrSparkPlatform",
    "KerberosSecret",
    "TlsSecret",
    "ScramSecret",
]
TOPOLOGY = TWO_CLUSTER_TOPOLOGY


def served_schema() -> dict[str, Any]:
    """Start the plugin as the engine does (`python <plugin dir> <engine address>`), read the port
    it prints, and ask for its schema over gRPC."""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "components"), "127.0.0.1:1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT / "components",
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        err = proc.stderr.read() if proc.stderr and not line.strip() else ""
        assert line.strip().isdigit(), f"the provider printed no port: {line!r} {err}"
        with grpc.insecure_channel(f"127.0.0.1:{int(line)}") as channel:
            stub = provider_pb2_grpc.ResourceProviderStub(channel)
            reply = stub.GetSchema(provider_pb2.GetSchemaRequest(version=0), timeout=60)
        return dict(json.loads(reply.schema))
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_provider_serves_the_checked_in_schema_over_grpc() -> None:
    schema = served_schema()
    assert schema == json.loads(SCHEMA.read_text()), (
        "the public surface changed: regenerate components/schema.json "
        "(.venv/bin/python -m tests.pulumi.test_provider > components/schema.json) and review its diff"
    )
    assert schema["name"] == "kafka-mirror" and sorted(schema["resources"]) == sorted(
        f"kafka-mirror:index:{n}" for n in NAMES
    )
    for token, resource in schema["resources"].items():
        assert resource["isComponent"] and resource["description"], token
        for prop in [*resource["inputProperties"].values(), *resource["properties"].values()]:
            assert prop.get("description"), f"{token}: a property without a docstring"


@pytest.fixture
def provider_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Run]:
    bundle, _ = build_bundle(ROOT, tmp_path / "bundle")
    monkeypatch.setenv("KMIRROR_BUNDLE", str(bundle))
    monkeypatch.setenv("KMIRROR_WHEELHOUSE", str(fake_wheelhouse(tmp_path / "wheelhouse")))
    run = Run()
    mocks = Mocks()
    settings.ROOT.set(None)
    pulumi.runtime.set_mocks(mocks, project="p", stack="s", preview=False, monitor=RecordingMonitor(mocks, run))
    yield run


def test_every_component_constructs_through_the_provider(provider_run: Run) -> None:
    """Schema-named (camelCase) inputs in, mapped Python args to the component, schema-named state out."""
    provider = KafkaMirrorProvider(list(COMPONENTS), PACKAGE, version="0.0.0")
    states: dict[str, dict[str, Any]] = {}

    def construct(name: str, typ: str, inputs: dict[str, Any]) -> None:
        states[typ] = provider.construct(name, f"kafka-mirror:index:{typ}", inputs).state

    @pulumi.runtime.test
    def program() -> Any:
        construct(
            "east-1",
            "KafkaCluster",
            {"alias": "east-1", "datacenter": "east", "bootstrapServers": pulumi.Output.from_input("b-1.msk:9098")},
        )
        construct(
            "east",
            "ReplicationTopology",
            {"datacenter": "east", "checkpointRoot": "s3a://b/ck", "topologyYaml": TOPOLOGY},
        )
        image = f"repo/kafka-mirror@sha256:{'a' * 64}"  # required: no default app image
        eks_args = {"namespace": "mirror", "image": image, "operator": {"install": False}}
        construct("east-eks", "EksSparkPlatform", eks_args)
        construct(
            "east-emr",
            "EmrSparkPlatform",
            {"bucket": pulumi.Output.from_input("acme-mirror"), "clusterId": "j-EXISTING", "region": "eu-west-1"},
        )
        spec = states["ReplicationTopology"]["flowSpecs"].apply(lambda s: s["west-1->east-1"])
        target = states["EksSparkPlatform"]["deploymentTarget"]
        construct("mirror", "MirrorDeployment", {"flowSpec": spec, "eks": target})
        construct("scram", "ScramSecret", {"username": "mm", "password": pulumi.Output.secret("pw")})
        construct("tls", "TlsSecret", {"caPem": "CA", "store": {"target": "aws", "secretName": "east-tls"}})
        construct("krb", "KerberosSecret", {"principal": "mm@R", "keytabB64": "AAAA", "realm": "R", "kdcs": ["kdc"]})
        return pulumi.Output.all(
            states["MirrorDeployment"]["appName"],
            states["ReplicationTopology"]["flows"],
            states["EmrSparkPlatform"]["entryUri"],
            states["KafkaCluster"]["clientConfig"],
        )

    program()
    assert sorted(states) == sorted(NAMES)
    types = {r.typ for r in provider_run.resources}
    assert {f"kafka-mirror:index:{n}" for n in NAMES} <= types
    assert "kubernetes:sparkoperator.k8s.io/v1beta2:SparkApplication" in types
    [app] = provider_run.of_type("kubernetes:sparkoperator.k8s.io/v1beta2:SparkApplication")
    assert app.name == "mirror-app" and app.inputs["metadata"]["namespace"] == "mirror"
    [flow] = provider_run.of_type("kubernetes:core/v1:ConfigMap")
    assert json.loads(flow.inputs["data"]["flow.json"])["source"]["bootstrap_servers"] == "b1.west-1.example.com:9092"
    [tls] = [r for r in provider_run.of_type("aws:secretsmanager/secret:Secret") if r.name == "tls-secret"]
    assert tls.inputs["name"] == "kafka-mirror/p/s/east-tls"  # stack-unique: kafka-mirror/<project>/<stack>/<name>
    assert tls.inputs["recoveryWindowInDays"] == 7
    assert set(states["TlsSecret"]) == {"secretName", "mountPath", "keys", "secretArn"}
    assert set(states["ScramSecret"]) == {"secretName", "mountPath", "passwordKey"}  # never the password
    [scram] = provider_run.of_type("kafka-mirror:index:ScramSecret")
    assert "pw" not in json.dumps(provider_run.outputs[scram.urn], default=str)


def test_a_missing_required_input_is_reported_with_its_path(provider_run: Run) -> None:
    provider = KafkaMirrorProvider(list(COMPONENTS), PACKAGE, version="0.0.0")
    with pytest.raises(pulumi.InputPropertyError) as info:
        provider.construct("x", "kafka-mirror:index:ScramSecret", {"username": "mm"})
    assert info.value.reason == "Missing required input 'password' on 'ScramSecret'"


if __name__ == "__main__":  # regenerate components/schema.json from the running provider
    print(json.dumps(served_schema(), indent=2, sort_keys=True))


def test_secret_inputs_are_marked_secret_in_the_served_schema() -> None:
    """Passwords, private keys, keytabs and kubeconfigs are `secret` in the schema the plugin
    serves, so every generated SDK (TypeScript, YAML, Go...) sends them as secrets and the engine
    keeps them encrypted in state; nothing else is marked."""
    schema = served_schema()
    marked = {
        (token.rsplit(":", 1)[1], name)
        for token, resource in schema["resources"].items()
        for name, prop in resource["inputProperties"].items()
        if prop.get("secret")
    }
    assert marked == {
        ("ScramSecret", "password"),
        ("TlsSecret", "keyPem"),
        ("TlsSecret", "keyPassword"),
        ("TlsSecret", "pkcs12B64"),
        ("TlsSecret", "pkcs12Password"),
        ("KerberosSecret", "keytabB64"),
        ("EksSparkPlatform", "kubeconfig"),
        ("MirrorDeployment", "kubeconfig"),
    }


def test_the_plugin_venv_reports_the_project_version_not_0_0_0(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin's venv installs components/requirements.txt, not the project: the version the
    provider (and the generated SDKs) report comes from the checkout's pyproject.toml."""
    from importlib.metadata import PackageNotFoundError

    from kafka_mirror import provider

    def not_installed(name: str) -> str:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(provider, "version", not_installed)
    expected = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert expected is not None and provider.package_version() == expected.group(1) != "0.0.0"


def test_an_emr_platform_without_a_region_is_refused_not_sent_to_us_east_1(monkeypatch: pytest.MonkeyPatch) -> None:
    from kafka_mirror.emr.platform_args import emr_settings
    from kmirror.errors import ValidationError

    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(pulumi.Config, "get", lambda self, key, *a, **k: None)
    with pytest.raises(ValidationError, match="region") as raised:
        emr_settings({"bucket": "b"})  # type: ignore[typeddict-item]
    assert "us-east-1" not in str(raised.value)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert emr_settings({"bucket": "b"}).region == "eu-west-1"  # type: ignore[typeddict-item]
    assert emr_settings({"bucket": "b", "region": "ap-south-1"}).region == "ap-south-1"


def test_another_programs_vpc_kms_and_certificates_can_be_passed_as_outputs(provider_run: Run) -> None:
    """VPC ids, KMS keys, the certificates zip and the scrapers' group are inputs, not plain values:
    a platform team's outputs (another resource's, or a StackReference's) reach the cluster as they are."""
    import pulumi_aws as aws

    provider = KafkaMirrorProvider(list(COMPONENTS), PACKAGE, version="0.0.0")
    schema = json.loads(SCHEMA.read_text())["types"]
    for typ, field in (
        ("EmrEncryptionArgs", "kmsKeyArn"),
        ("EmrEncryptionArgs", "certificatesZip"),
        ("EmrPrometheusArgs", "securityGroupId"),
        ("EksClusterArgs", "kmsKeyArn"),
    ):
        assert "plain" not in schema[f"kafka-mirror:index:{typ}"]["properties"][field], (typ, field)
    assert (
        "plain"
        not in json.loads(SCHEMA.read_text())["resources"]["kafka-mirror:index:EmrSparkPlatform"]["inputProperties"][
            "vpcId"
        ]
    )

    @pulumi.runtime.test
    def program() -> Any:
        key = aws.kms.Key("platform-key")
        inputs = {
            "bucket": "acme-mirror",
            "region": "eu-west-1",
            "releaseLabel": "emr-spark-8.0.0",
            "subnetId": pulumi.Output.from_input("subnet-1"),
            "vpcId": pulumi.Output.from_input("vpc-1"),
            "encryption": {"kmsKeyArn": key.arn, "certificatesZip": pulumi.Output.from_input("s3://pki/certs.zip")},
            "prometheus": {"securityGroupId": pulumi.Output.from_input("sg-prom")},
        }
        return provider.construct("east-emr", "kafka-mirror:index:EmrSparkPlatform", inputs).urn

    program()
    [security] = provider_run.of_type("aws:emr/securityConfiguration:SecurityConfiguration")
    configuration = json.loads(security.inputs["configuration"])
    assert "arn:aws:kms:us-east-1:123456789012:key/platform-key" in json.dumps(configuration)
    assert "s3://pki/certs.zip" in json.dumps(configuration)
    [group] = provider_run.of_type("aws:ec2/securityGroup:SecurityGroup")
    assert group.inputs["vpcId"] == "vpc-1"
    [rule] = [r for r in provider_run.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")] or [
        r for r in provider_run.of_type("aws:ec2/securityGroupRule:SecurityGroupRule")
    ]
    assert "sg-prom" in json.dumps(rule.inputs)


def test_typed_core_inputs_reach_the_components_with_their_python_names(provider_run: Run) -> None:
    """`security` (ClusterSecurity), `sparkDefaults` (FlowSpark) and `aws` (AwsSettings) are object types in the
    schema; camelCase in (as every generated SDK sends them), the snake_case the components always read out.
    Another resource's outputs (a platform's `deploymentTarget`, a topology's `flowSpark[<id>]`) pass as they are."""
    provider = KafkaMirrorProvider(list(COMPONENTS), PACKAGE, version="0.0.0")
    security = {
        "protocol": "SASL_SSL",
        "tls": {"ca": {"k8sSecret": "east-tls", "key": "ca.pem"}},
        "scram": {"mechanism": "SCRAM-SHA-512", "username": "mm", "password": {"pulumiConfig": "eastScramPassword"}},
    }
    seen: dict[str, Any] = {}

    @pulumi.runtime.test
    def program() -> Any:
        cluster = provider.construct(
            "east-1",
            "kafka-mirror:index:KafkaCluster",
            {"alias": "east-1", "datacenter": "east", "bootstrapServers": "b:9096", "security": security},
        )
        estate = {"datacenter": "east", "checkpointRoot": "s3a://b/ck", "topologyYaml": TOPOLOGY}
        topology = provider.construct("east", "kafka-mirror:index:ReplicationTopology", estate)
        eks = provider.construct(
            "east-eks",
            "kafka-mirror:index:EksSparkPlatform",
            {
                "image": f"repo/kafka-mirror@sha256:{'a' * 64}",
                "operator": {"install": False},
                "sparkDefaults": {"executors": 3, "executorMemory": "3g", "options": {"spark.ui.enabled": "false"}},
            },
        )
        aws = {"region": "eu-west-2", "assumeRoles": [{"roleArn": "arn:aws:iam::1:role/d"}]}
        emr = provider.construct(
            "east-emr",
            "kafka-mirror:index:EmrSparkPlatform",
            {"bucket": "acme-mirror", "clusterId": "j-EXISTING", "aws": aws},
        )
        seen["spark"] = topology.state["flowSpark"]
        seen["target"] = eks.state["deploymentTarget"]
        provider.construct(
            "mirror",
            "kafka-mirror:index:MirrorDeployment",
            {
                "flowSpec": topology.state["flowSpecs"].apply(lambda s: s["west-1->east-1"]),
                "spark": topology.state["flowSpark"].apply(lambda s: s["west-1->east-1"]),
                "eks": eks.state["deploymentTarget"],
            },
        )
        return pulumi.Output.all(cluster.state["clientConfig"], seen["target"], emr.state["deploymentTarget"]).apply(
            lambda v: seen.update(config=v[0], target=v[1], emr_target=v[2])
        )

    program()
    assert seen["config"]["sasl.mechanisms"] == "SCRAM-SHA-512" and seen["config"]["sasl.username"] == "mm"
    assert seen["config"]["ssl.ca.location"].endswith("/ca.pem")
    assert set(seen["target"]) == {"platform", "settings"}  # the target's schema names
    assert seen["target"]["settings"]["spark_defaults"] == {
        "executors": 3,
        "executor_memory": "3g",
        "options": {"spark.ui.enabled": "false"},
    }
    assert {"clusterId", "bundleUri", "entryUri", "stepFunction"} <= set(seen["emr_target"])
    assert seen["emr_target"]["settings"]["region"] == "eu-west-2"
    assert seen["emr_target"]["settings"]["aws"]["assume_roles"] == [{"role_arn": "arn:aws:iam::1:role/d"}]
    [app] = provider_run.of_type("kubernetes:sparkoperator.k8s.io/v1beta2:SparkApplication")
    executor = app.inputs["spec"]["executor"]
    assert (executor["instances"], executor["memory"]) == (3, "3g")
    assert app.inputs["spec"]["sparkConf"]["spark.ui.enabled"] == "false"


def test_a_misspelt_nested_field_of_a_typed_input_is_refused_with_the_fix(provider_run: Run) -> None:
    provider = ComponentProvider(list(COMPONENTS), PACKAGE, version="0.0.0")  # the SDK's own drops it silently
    ours = KafkaMirrorProvider(list(COMPONENTS), PACKAGE, version="0.0.0")
    password = {"k8sSecret": "s", "key": "pw"}
    scram = {"mechanism": "SCRAM-SHA-512", "username": "mm", "password": password, "usrname": "x"}
    security = {"protocol": "SASL_SSL", "scram": scram}
    inputs = {"alias": "east-1", "datacenter": "east", "bootstrapServers": "b:9096", "security": security}
    mapped = provider.map_inputs(inputs, provider._component_defs["KafkaCluster"])
    assert "usrname" not in json.dumps(mapped)
    with pytest.raises(pulumi.InputPropertyError) as info:
        ours.map_inputs(inputs, ours._component_defs["KafkaCluster"])
    assert info.value.reason == (
        "Unknown input 'security.scram.usrname' on 'KafkaCluster' (did you mean 'username'?); fix the name or remove it"
    )
    tls = {"key_password": {"env": "KP"}, "ca": {"k8s_secret": "t", "key": "ca"}}  # the topology file's own names
    snake = {**inputs, "security": {"protocol": "SSL", "tls": tls}}
    assert ours.map_inputs(snake, ours._component_defs["KafkaCluster"])["security"]["tls"] == tls


def test_plain_and_oauthbearer_reach_kafka_cluster_with_secrets_as_references_only(provider_run: Run) -> None:
    """Issue 45: `security.plain` and `security.oauthbearer` are typed inputs (camelCase in, as every SDK sends
    them); the extensions' own names are kept as written; the client config carries the secret's mounted path."""
    ours = KafkaMirrorProvider(list(COMPONENTS), PACKAGE, version="0.0.0")
    oauth = {
        "tokenEndpoint": "https://idp.example.com/token",
        "clientId": "mirror",
        "scope": "kafka",
        "clientSecret": {"k8sSecret": "mirror-oidc", "key": "secret"},
        "extensions": {"logicalCluster": "lkc-1", "identityPoolId": "pool-2"},
    }
    plain = {"username": "APIKEY", "password": {"pulumiConfig": "ccApiSecret"}}
    for section, value in (("oauthbearer", oauth), ("plain", plain)):
        inputs = {
            "alias": "cc",
            "datacenter": "east",
            "bootstrapServers": "b:9092",
            "security": {"protocol": "SASL_SSL", section: value},
        }
        mapped = ours.map_inputs(inputs, ours._component_defs["KafkaCluster"])
        seen: dict[str, Any] = {}

        @pulumi.runtime.test
        def program() -> Any:
            from kafka_mirror.kafka_cluster import KafkaCluster

            cluster = KafkaCluster(f"cc-{section}", mapped)  # noqa: B023 (called at once)
            seen["paths"] = cluster.materialisations  # noqa: B023 (called at once)
            return cluster.client_config.apply(lambda c: seen.update(config=c))  # noqa: B023 (called at once)

        program()
        if section == "oauthbearer":
            assert seen["config"]["sasl.oauthbearer.client.secret"] == "${file:/etc/kmirror/secrets/mirror-oidc/secret}"
            assert seen["config"]["sasl.oauthbearer.extensions"] == "logicalCluster=lkc-1,identityPoolId=pool-2"
            assert seen["config"]["sasl.oauthbearer.method"] == "oidc"
        else:
            assert seen["config"]["sasl.mechanisms"] == "PLAIN" and seen["config"]["sasl.username"] == "APIKEY"
            assert seen["config"]["sasl.password"].startswith("${file:/etc/kmirror/secrets/")
        assert len(seen["paths"]) == 1


def test_msk_iam_reaches_kafka_cluster_as_the_app_reads_it(provider_run: Run) -> None:
    """Issue 45: `security.mskIam` is a typed input (camelCase in); the client config carries the
    `kmirror.msk_iam.*` properties the app turns into its token callback; nothing to mount."""
    ours = KafkaMirrorProvider(list(COMPONENTS), PACKAGE, version="0.0.0")
    msk = {"region": "eu-west-1", "roleArn": "arn:aws:iam::123456789012:role/mirror"}
    inputs = {
        "alias": "msk",
        "datacenter": "east",
        "bootstrapServers": "b-1.msk:9098",
        "security": {"protocol": "SASL_SSL", "mskIam": msk},
    }
    mapped = ours.map_inputs(inputs, ours._component_defs["KafkaCluster"])
    seen: dict[str, Any] = {}

    @pulumi.runtime.test
    def program() -> Any:
        from kafka_mirror.kafka_cluster import KafkaCluster

        cluster = KafkaCluster("msk-iam", mapped)
        seen["paths"] = cluster.materialisations
        return cluster.client_config.apply(lambda c: seen.update(config=c))

    program()
    assert seen["config"] == {
        "bootstrap.servers": "b-1.msk:9098",
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "OAUTHBEARER",
        "kmirror.msk_iam.region": "eu-west-1",
        "kmirror.msk_iam.role_arn": "arn:aws:iam::123456789012:role/mirror",
    }
    assert seen["paths"] == []
