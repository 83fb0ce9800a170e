"""Pure deployment specs (no engine): stable names, valid Kubernetes objects, SparkApplication
fields, EMR step args, content-addressed keys, metrics ports, IAM and the secrets list."""

from __future__ import annotations

import json

import jsonschema
import pytest

from kafka_mirror.eks.specs import (
    EksSettings,
    SecretMount,
    app_name,
    driver_disruption_budget,
    driver_role_binding_manifest,
    driver_role_manifest,
    flow_config_map,
    metrics_endpoint,
    metrics_service,
    namespace_manifest,
    operator_values,
    service_account_manifest,
    spark_application_manifest,
    with_metrics_port,
)
from kafka_mirror.emr.specs import (
    EMR_PYTHON_VERSION,
    HADOOP_PORTS,
    EmrSettings,
    bootstrap_args,
    emr_metrics_port,
    emr_step_args,
    flow_object_key,
    instance_architecture,
    instance_policy,
    metrics_port_problems,
    secrets_manifest,
    wheel_platforms,
    wheelhouse_tag,
)
from tests.pulumi.sparkapp_schema import validate_k8s, validate_spark_application

FLOW = {"id": "west-1->east-1", "metrics_port": 9404, "checkpoint_location": "s3a://b/checkpoints/west-1-to-east-1"}
SPARK = {
    "executors": 3,
    "executor_memory": "2g",
    "driver_memory": "1g",
    "executor_cores": 2,
    "options": {"spark.sql.shuffle.partitions": 4},
}
SETTINGS = EksSettings(namespace="mirror", image="img:1", spark_defaults={"executors": 1, "driver_cores": 2})
MOUNTS = (SecretMount("east-1-tls"), SecretMount("kmirror-cfg-east1scrampassword"))


def test_app_name_is_derived_from_flow_id_only() -> None:
    assert app_name("west-1->east-1") == "mirror-west-1-to-east-1"
    assert app_name("Dc_Old->aws.1") == "mirror-dc-old-to-aws-1"
    with pytest.raises(ValueError, match="not a DNS-1123 label"):
        app_name("x" * 70 + "->y")


def test_config_map_validates_and_holds_flow_spec() -> None:
    cm = flow_config_map(FLOW, "mirror")
    validate_k8s(cm)
    assert json.loads(cm["data"]["flow.json"]) == FLOW
    assert cm["metadata"]["name"] == "mirror-west-1-to-east-1-flow"
    assert cm["metadata"]["annotations"] == {"kafka-mirror/flow": "west-1->east-1"}


def test_spark_application_fields() -> None:
    app = spark_application_manifest(FLOW, SPARK, SETTINGS, MOUNTS)
    validate_spark_application(app)
    spec = app["spec"]
    assert spec["mainApplicationFile"] == "local:///opt/kmirror/kmirror_main.py"
    assert spec["arguments"] == ["--flow", "/etc/kmirror/flow/flow.json"]
    assert spec["restartPolicy"] == {
        "type": "Always",
        "onFailureRetryInterval": 10,
        "onSubmissionFailureRetryInterval": 10,
    }
    # the flow's own spark settings win over the platform defaults; defaults fill the rest
    assert spec["executor"]["instances"] == 3 and spec["executor"]["memory"] == "2g"
    assert spec["driver"]["cores"] == 2 and spec["executor"]["cores"] == 2
    # the flow's options over the hardened defaults (RPC auth and encryption, fixed RPC ports)
    assert spec["sparkConf"] == {
        "spark.authenticate": "true",
        "spark.blockManager.port": "7079",
        "spark.driver.blockManager.port": "7079",
        "spark.driver.port": "7078",
        "spark.network.crypto.enabled": "true",
        "spark.sql.shuffle.partitions": "4",
    }
    assert spec["driver"]["ports"] == [{"name": "metrics", "containerPort": 9404, "protocol": "TCP"}]
    for role in ("driver", "executor"):
        paths = {m["mountPath"] for m in spec[role]["volumeMounts"]}
        assert paths == {
            "/etc/kmirror/flow",
            "/etc/kmirror/secrets/east-1-tls",
            "/etc/kmirror/secrets/kmirror-cfg-east1scrampassword",
            "/tmp",  # writable emptyDirs under the read-only root
            "/opt/spark/work-dir",
        }
        assert spec[role]["serviceAccount"] == "kafka-mirror"
    secret_volume = {"name": "secret-east-1-tls", "secret": {"secretName": "east-1-tls", "defaultMode": 0o440}}
    assert secret_volume in spec["volumes"]


def test_pods_are_hardened_and_secret_files_readable_by_the_spark_group_only() -> None:
    app = spark_application_manifest(FLOW, SPARK, SETTINGS, MOUNTS)
    validate_spark_application(app)
    spec = app["spec"]
    secret_modes = {v["secret"]["defaultMode"] for v in spec["volumes"] if "secret" in v}
    assert secret_modes == {0o440} and 0o440 & 0o004 == 0  # no "other" bit: only root and the spark group
    for role in ("driver", "executor"):
        pod = spec[role]
        assert pod["podSecurityContext"] == {
            "runAsNonRoot": True,
            "runAsUser": 185,
            "runAsGroup": 185,
            "fsGroup": 185,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        assert pod["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
    assert {"name": "tmp", "emptyDir": {}} in spec["volumes"]
    writable = EksSettings(namespace="mirror", image="img:1", read_only_root_filesystem=False)
    relaxed = spark_application_manifest(FLOW, {}, writable)["spec"]
    assert relaxed["driver"]["securityContext"]["readOnlyRootFilesystem"] is False
    assert not [v for v in relaxed["volumes"] if "emptyDir" in v]


def test_drivers_survive_node_churn_and_pods_take_scheduling_options() -> None:
    tolerations = [{"key": "dedicated", "operator": "Equal", "value": "streaming", "effect": "NoSchedule"}]
    settings = EksSettings(
        namespace="mirror",
        image="img:1",
        priority_class_name="critical",
        node_selector={"workload": "streaming"},
        tolerations=tolerations,
    )
    app = spark_application_manifest(FLOW, {}, settings)
    validate_spark_application(app)
    driver, executor = app["spec"]["driver"], app["spec"]["executor"]
    assert driver["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    assert "karpenter.sh/do-not-disrupt" not in executor["annotations"]  # executors may move; the driver not
    for pod in (driver, executor):
        assert pod["priorityClassName"] == "critical" and pod["nodeSelector"] == {"workload": "streaming"}
        assert pod["tolerations"] == tolerations
    pdb = driver_disruption_budget(FLOW, settings)
    validate_k8s(pdb)
    assert pdb["spec"] == {
        "maxUnavailable": 1,  # a drain may always evict it: the operator restarts the driver
        "selector": {
            "matchLabels": {"sparkoperator.k8s.io/app-name": "mirror-west-1-to-east-1", "spark-role": "driver"}
        },
    }


def test_a_new_image_digest_rolls_the_app() -> None:
    """The operator resubmits a running app whose spec changed: a new digest changes image and pod template."""
    old = EksSettings(namespace="mirror", image=f"repo/kafka-mirror@sha256:{'a' * 64}")
    new = EksSettings(namespace="mirror", image=f"repo/kafka-mirror@sha256:{'b' * 64}")
    before, after = (spark_application_manifest(FLOW, {}, s)["spec"] for s in (old, new))
    assert before["image"] != after["image"] and after["image"].endswith("b" * 64)
    for role in ("driver", "executor"):
        assert (
            after[role]["annotations"]["kafka-mirror/image"]
            == new.image
            != before[role]["annotations"]["kafka-mirror/image"]
        )


def test_the_operator_runs_highly_available_with_a_fail_closed_webhook() -> None:
    values = operator_values("mirror", 2)
    assert values["controller"]["replicas"] == values["webhook"]["replicas"] == 2
    assert values["webhook"]["failurePolicy"] == "Fail"  # unmutated pods would lack secrets and hardening
    assert values["webhook"]["podDisruptionBudget"] == {"enable": True, "minAvailable": 1}
    assert values["controller"]["podDisruptionBudget"]["enable"] and values["controller"]["leaderElection"]["enable"]
    assert operator_values("mirror", 1)["webhook"]["podDisruptionBudget"]["enable"] is False


def test_a_changed_flow_spec_changes_the_pod_template() -> None:
    """The operator resubmits an app only when its spec changes; the ConfigMap alone would not."""
    before = spark_application_manifest(FLOW, SPARK, SETTINGS)
    after = spark_application_manifest({**FLOW, "topics": ["orders.*"]}, SPARK, SETTINGS)
    assert before["spec"]["driver"]["annotations"] != after["spec"]["driver"]["annotations"]
    assert before["metadata"] == after["metadata"]


def test_checkpoint_claim_is_mounted_on_driver_and_executors() -> None:
    settings = EksSettings(namespace="mirror", image="img:1", checkpoint_claim="kmirror-checkpoints")
    app = spark_application_manifest(FLOW, {}, settings)
    validate_spark_application(app)
    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "kmirror-checkpoints"}} in app["spec"][
        "volumes"
    ]
    for role in ("driver", "executor"):
        assert {"name": "checkpoints", "mountPath": "/var/lib/kmirror/checkpoints"} in app["spec"][role]["volumeMounts"]
        assert app["spec"][role]["podSecurityContext"]["fsGroup"] == 185


def test_spark_application_schema_rejects_a_misspelt_field() -> None:
    app = spark_application_manifest(FLOW, SPARK, SETTINGS)
    app["spec"]["driver"]["volumeMount"] = app["spec"]["driver"].pop("volumeMounts")
    with pytest.raises(jsonschema.ValidationError, match="volumeMount"):
        validate_spark_application(app)


def test_metrics_service_selects_the_driver_and_validates() -> None:
    spec = with_metrics_port({"id": "a->b"}, 9404)
    svc = metrics_service(spec, SETTINGS)
    validate_k8s(svc)
    assert svc["spec"]["selector"] == {"sparkoperator.k8s.io/app-name": "mirror-a-to-b", "spark-role": "driver"}
    assert metrics_endpoint(spec, SETTINGS) == "http://mirror-a-to-b-metrics.mirror.svc.cluster.local:9404/metrics"
    assert with_metrics_port({"id": "a->b", "metrics_port": 9500}, 9404)["metrics_port"] == 9500


def test_platform_objects_validate() -> None:
    for manifest in (
        namespace_manifest("mirror"),
        service_account_manifest(SETTINGS, "arn:aws:iam::1:role/r"),
        driver_role_manifest(SETTINGS),
        driver_role_binding_manifest(SETTINGS),
    ):
        validate_k8s(manifest)
    account = service_account_manifest(SETTINGS, "arn:aws:iam::1:role/r")
    assert account["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/r"}
    assert "annotations" not in service_account_manifest(SETTINGS, None)["metadata"]


EMR = EmrSettings(bucket="acme", region="eu-central-1", spark_defaults={"executors": 2})


def test_flow_object_key_is_content_addressed() -> None:
    key = flow_object_key(FLOW)
    assert key.startswith("flows/mirror-west-1-to-east-1/") and key.endswith("/flow.json")
    assert flow_object_key(dict(reversed(list(FLOW.items())))) == key
    assert flow_object_key({**FLOW, "topics": ["x"]}) != key


def test_emr_step_args_run_one_flow_in_cluster_mode() -> None:
    args = emr_step_args(
        "west-1->east-1",
        "s3://acme/flows/f/abc/flow.json",
        "s3://acme/app/b.zip",
        "s3://acme/app/kmirror_main.py",
        {"executors": 3, "options": {"spark.x": "1"}},
        EMR,
    )
    assert args[args.index("--") - 4 : args.index("--")] == [
        "--tag",
        "kmirror-west-1-to-east-1",
        "--kill-timeout-s",
        "300",
    ]
    assert args[args.index("--") + 1 : args.index("--") + 8] == [
        "spark-submit",
        "--deploy-mode",
        "cluster",
        "--master",
        "yarn",
        "--name",
        "mirror-west-1-to-east-1",
    ]
    confs = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--conf")
    assert confs["spark.executor.instances"] == "3" and confs["spark.x"] == "1"
    assert confs["spark.pyspark.python"] == "/opt/kmirror/venv/bin/python"
    assert args[-5:] == [
        "--files",
        "s3://acme/flows/f/abc/flow.json#flow.json",
        "s3://acme/app/kmirror_main.py",
        "--flow",
        "flow.json",
    ]
    assert args[args.index("--py-files") + 1] == "s3://acme/app/b.zip"


def test_emr_metrics_port_is_stable_and_collisions_are_reported() -> None:
    port = emr_metrics_port("west-1->east-1", EMR)
    assert 19500 <= port < 19800 and port == emr_metrics_port("west-1->east-1", EMR)
    every = range(EMR.metrics_port_base, EMR.metrics_port_base + EMR.metrics_port_span)
    assert not set(every) & set(HADOOP_PORTS)  # 9864-9871: DataNode/NameNode
    specs = [{"id": "a->b"}, {"id": "c->d", "metrics_port": emr_metrics_port("a->b", EMR)}]
    [problem] = metrics_port_problems(specs, EMR)
    assert str(problem) == (
        f"flows.c->d.metrics_port: port {emr_metrics_port('a->b', EMR)} is also used by a->b; "
        "set a distinct metrics_port for one of them in the topology's flows section"
    )


def test_instance_policy_reads_only_the_referenced_secrets() -> None:
    policy = instance_policy("acme", ["arn:b", "arn:a", "arn:a"])
    [secrets] = [s for s in policy["Statement"] if s["Action"] == ["secretsmanager:GetSecretValue"]]
    assert secrets["Resource"] == ["arn:a", "arn:b"]
    assert all("secretsmanager" not in str(s["Action"]) for s in instance_policy("acme", [])["Statement"])


def test_secrets_manifest_and_bootstrap_args() -> None:
    assert secrets_manifest([("arn:2", "b"), ("arn:1", "a"), ("arn:1", "a")]) == "arn:1\ta\narn:2\tb\n"
    args = bootstrap_args(EMR, gssapi=True)
    assert args == [
        "--wheelhouse",
        "s3://acme/bootstrap/wheelhouse",
        "--secrets",
        "s3://acme/bootstrap/secrets.tsv",
        "--sync",
        "s3://acme/bootstrap/kmirror-sync-secrets.py",
        "--region",
        "eu-central-1",
        "--gssapi",
    ]
    assert bootstrap_args(EMR, gssapi=False) == args[:-1]
    assert not [a for a in args if "app/" in a or "bundle" in a]  # nothing that changes with a release


@pytest.mark.parametrize(
    ("instance_type", "arch"),
    [
        ("m7g.xlarge", "aarch64"),
        ("m7g.2xlarge", "aarch64"),
        ("c7gn.large", "aarch64"),
        ("r6gd.4xlarge", "aarch64"),
        ("x2gd.xlarge", "aarch64"),
        ("im4gn.large", "aarch64"),
        ("is4gen.xlarge", "aarch64"),
        ("m5.xlarge", "x86_64"),
        ("m7i-flex.large", "x86_64"),
        ("c6a.2xlarge", "x86_64"),
        ("g5.xlarge", "x86_64"),
        ("g5g.xlarge", "aarch64"),
    ],
)
def test_instance_architecture(instance_type: str, arch: str) -> None:
    assert instance_architecture(instance_type) == arch


def test_instance_architecture_rejects_a_malformed_type() -> None:
    with pytest.raises(ValueError, match=r"instance type 'm7g' is not of the form <family><generation>"):
        instance_architecture("m7g")


def test_wheel_platforms_cover_al2023_glibc_for_the_nodes_python() -> None:
    platforms = wheel_platforms("aarch64")
    assert platforms[0] == "manylinux_2_34_aarch64" and platforms[-2:] == [
        "manylinux_2_17_aarch64",
        "manylinux2014_aarch64",
    ]
    assert "manylinux_2_28_aarch64" in platforms and len(platforms) == 19
    assert wheelhouse_tag("x86_64") == "cp311-x86_64" and EMR_PYTHON_VERSION == "3.11"
    with pytest.raises(ValueError, match=r"architecture 'arm64' is not one of aarch64, x86_64"):
        wheel_platforms("arm64")


def test_the_renderers_settings_default_as_the_stack_model_does() -> None:
    """Issue 29: `EksSettings` (what the manifest renderer takes) and the stack model
    (`EksSparkConfig`, the one declaration of a stack input) share field names; where the model
    has a default, the renderer's is the same, so a stack that leaves a setting out and a
    component used directly render alike."""
    import dataclasses

    from pydantic_core import PydanticUndefined

    from kafka_mirror.eks.specs import EksSettings
    from kmirror.stack.models import EksSparkConfig

    renderer = {f.name: f for f in dataclasses.fields(EksSettings)}
    shared = [
        name
        for name, f in EksSparkConfig.model_fields.items()
        if name in renderer and f.default is not PydanticUndefined
    ]
    assert len(shared) >= 7, shared
    for name in shared:
        field = renderer[name]
        default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
        assert default == EksSparkConfig.model_fields[name].get_default(call_default_factory=True), name


def test_manifests_are_validated_against_the_kubernetes_a_created_cluster_runs() -> None:
    """Issue 27: the default EKS version was out of standard support (1.33); the rendered objects
    are checked against the schemas of the version a created cluster gets."""
    from kmirror.stack.models import EKS_VERSION, EksClusterConfig
    from tests.pulumi.sparkapp_schema import K8S_VERSION

    assert K8S_VERSION.rsplit(".", 1)[0] == EKS_VERSION == EksClusterConfig().version
    assert tuple(int(p) for p in EKS_VERSION.split(".")) >= (1, 35)
