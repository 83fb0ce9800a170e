"""Stack config validation, secret wiring and the app bundle: pure, no engine."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from kafka_mirror.bundle import build_bundle
from kafka_mirror.secrets.wiring import flow_secrets
from kmirror.errors import ValidationError
from kmirror.security.secret_refs import Materialisation
from kmirror.stack.config import parse_stack_config, read_stack_config
from kmirror.stack.models import EksSparkConfig, EmrSparkConfig

ROOT = Path(__file__).resolve().parents[2]
EKS = {
    "platform": "eks",
    "image": f"img:1@sha256:{'0' * 64}",
    "checkpoint_root": "s3a://b/c",
    "kubeconfig": {"config": "k"},
}


def _stack_file(stack: str) -> dict:
    raw = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]
    return {k.removeprefix("kafka-mirror:"): v for k, v in raw.items() if k.startswith("kafka-mirror:")}


@pytest.mark.parametrize("stack", ["west", "east", "central", "local"])
def test_example_stacks_parse(stack: str) -> None:
    config = parse_stack_config(_stack_file(stack), stack)
    assert config.datacenter == stack
    assert config.platform == ("emr" if stack == "central" else "eks")


@pytest.mark.parametrize("stack", ["west", "central"])
def test_the_cli_reads_a_stack_file_with_the_programs_reader(stack: str) -> None:
    program = parse_stack_config(_stack_file(stack), stack)
    cli = read_stack_config(stack, ROOT / "stacks", plan_only=False)
    assert (cli.datacenter, cli.platform, cli.spark, cli.secrets) == (
        program.datacenter,
        program.platform,
        program.spark,
        program.secrets,
    )
    assert cli.topology == str(ROOT / program.topology)
    assert read_stack_config(stack, ROOT / "stacks").model is None  # planning reads datacenter and topology only


def test_a_stack_file_problem_names_the_file_key_value_and_fix(tmp_path: Path) -> None:
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "Pulumi.x.yaml").write_text("config:\n  kafka-mirror:topology: 3\n")
    with pytest.raises(ValidationError) as info:
        read_stack_config("x", tmp_path / "stacks")
    assert info.value.source == str(tmp_path / "stacks" / "Pulumi.x.yaml")
    assert [str(p) for p in info.value.problems] == [
        "config.kafka-mirror:datacenter: required: the datacenter this stack deploys, got None; "
        "run: pulumi config set kafka-mirror:datacenter DC",
        "config.kafka-mirror:topology: must be a file path, got 3",
    ]


def test_every_problem_is_reported_once_with_its_key() -> None:
    raw = {
        "spark": {"platform": "eks", "executor": 2, "executors": 0, "cluster": {"create": True, "nodes": "3"}},
        "secrets": {"east-tls": {"type": "tls", "ca_pem": "x", "key_pem": "inline-key"}},
    }
    with pytest.raises(ValidationError) as info:
        parse_stack_config(raw, "east")
    allowed = ", ".join(sorted(EksSparkConfig.model_fields))
    assert [str(p) for p in info.value.problems] == [
        "kafka-mirror:datacenter: required: the datacenter this stack deploys, got None",
        "kafka-mirror:secrets.east-tls.key_pem: must be {config: KEY} naming a secret config value "
        "(pulumi config set --secret KEY ...), never inline",
        "kafka-mirror:spark.checkpoint_root: required (e.g. s3a://BUCKET/checkpoints) unless checkpoint_pvc is set",
        "kafka-mirror:spark.cluster.endpoint_public_access: false (private API endpoint) but nothing says the "
        "deploying runner can reach it: set cluster.deploy_from_vpc: true when `pulumi up` runs inside the VPC "
        "(self-hosted runner, VPN), or endpoint_public_access: true with public_access_cidrs: [the runners' egress "
        "CIDRs]",
        "kafka-mirror:spark.cluster.nodes: must be an integer, got '3'",  # never coerced into a node count
        "kafka-mirror:spark.cluster.subnet_ids: required when cluster.create is true",
        "kafka-mirror:spark.cluster.vpc_id: required when cluster.create is true",
        f"kafka-mirror:spark.executor: unknown key (did you mean 'executors'?); allowed: {allowed}",
        "kafka-mirror:spark.executors: must be an integer >= 1, got 0",
        "kafka-mirror:spark.image: required: the app image built from the Dockerfile, by digest (repo@sha256:...)",
    ]
    assert "inline-key" not in str(info.value)


def _problems(spark: dict) -> list[str]:
    with pytest.raises(ValidationError) as info:
        parse_stack_config({"datacenter": "e", "spark": spark})
    return [str(p) for p in info.value.problems]


def test_nested_keys_are_checked_by_the_platform_model_with_their_path() -> None:
    spark = {
        **EKS,
        "operator": {"instal": False},
        "monitoring": {"pod_monitor": "yes"},
        "tolerations": [{"efect": "x"}],
    }
    assert _problems(spark) == [
        "kafka-mirror:spark.monitoring.pod_monitor: must be true or false, got 'yes'",
        "kafka-mirror:spark.operator.instal: unknown key (did you mean 'install'?); allowed: image_digest, "
        "install, namespace, replicas, repository",
        "kafka-mirror:spark.tolerations.0.efect: unknown key (did you mean 'effect'?); allowed: effect, key, "
        "operator, value",
    ]
    emr = {
        "platform": "emr",
        "bucket": "b",
        "cluster_id": "j-1",
        "core_instance_count": "2",
        "namespace": "x",
        "protect": False,
    }
    assert _problems(emr) == [
        "kafka-mirror:spark.core_instance_count: must be an integer, got '2'",
        "kafka-mirror:spark.namespace: unknown key; allowed: " + ", ".join(sorted(EmrSparkConfig.model_fields)),
    ]


def test_a_read_write_once_checkpoint_claim_is_refused_saying_why() -> None:
    pvc = {**EKS, "checkpoint_root": None, "checkpoint_pvc": {"access_mode": "ReadWriteOnce"}}
    del pvc["checkpoint_root"]
    problems = _problems(pvc)
    assert problems[0].startswith("kafka-mirror:spark.checkpoint_pvc.access_mode: 'ReadWriteOnce' refused: the driver")
    assert "Multi-Attach" in problems[0] and "ReadWriteMany" in problems[0]
    assert problems[1] == (
        "kafka-mirror:spark.checkpoint_pvc.storage_class: required: a ReadWriteMany storage class "
        "(the cluster's default class is usually ReadWriteOnce EBS)"
    )
    ok = {k: v for k, v in pvc.items()} | {"checkpoint_pvc": {"storage_class": "efs-sc"}}
    assert parse_stack_config({"datacenter": "e", "spark": ok}).model.checkpoint_pvc.access_mode == "ReadWriteMany"


def test_images_are_pinned_by_digest_and_existing_clusters_need_an_explicit_kubeconfig() -> None:
    spark = {"platform": "eks", "image": "repo/kafka-mirror:0.1.0", "checkpoint_root": "s3a://b/c"}
    assert _problems(spark) == [
        "kafka-mirror:spark.image: 'repo/kafka-mirror:0.1.0' is not pinned by digest; use REPO[:TAG]@sha256:<digest> "
        "(CI feeds the pushed image's digest; image_pull_policy: Never for local images)",
        "kafka-mirror:spark.kubeconfig: required for an existing cluster: {config: SECRET_KEY} (pulumi config set "
        '--secret SECRET_KEY "$(cat kubeconfig)") or {file: PATH, context: NAME}; '
        "the ambient kubeconfig is never used",
    ]
    pinned = {**spark, "image": f"repo/kafka-mirror:0.1.0@sha256:{'a' * 64}", "kubeconfig": {"config": "kc"}}
    assert parse_stack_config({"datacenter": "e", "spark": pinned}).get("kubeconfig") == {"config": "kc"}


def test_a_created_emr_cluster_needs_encryption_and_secret_windows_are_bounded() -> None:
    emr = {
        "platform": "emr",
        "bucket": "b",
        "release_label": "emr-spark-8.0.0",
        "secret_recovery_window_days": 3,
        "prometheus": {},
        "alarm_actions": ["arn:aws:sns:eu-central-1:123456789012:oncall"],
    }
    assert _problems(emr) == [
        "kafka-mirror:spark.encryption: required for a created cluster: {certificates_zip: s3://BUCKET/KEY.zip, "
        "kms_key_arn: ARN} (encryption in transit and at rest)",
        "kafka-mirror:spark.prometheus: give security_group_id or cidr_blocks of the Prometheus scrapers",
        "kafka-mirror:spark.secret_recovery_window_days: must be 0 (delete at once) or 7-30, got 3",
        "kafka-mirror:spark.vpc_id: required with prometheus: the metrics security group's VPC",
    ]


def test_emr_needs_a_bucket_and_a_release_or_cluster() -> None:
    with pytest.raises(ValidationError) as info:
        parse_stack_config({"datacenter": "c", "spark": {"platform": "emr"}})
    assert {p.path for p in info.value.problems} == {
        "kafka-mirror:spark.bucket",
        "kafka-mirror:spark.release_label",
        "kafka-mirror:spark.encryption",
        "kafka-mirror:spark.alarm_actions",  # production (protect: true by default) pages someone
    }
    existing = {"platform": "emr", "bucket": "b", "cluster_id": "j-1", "protect": False}
    config = parse_stack_config({"datacenter": "c", "spark": existing})
    assert config.get("cluster_id") == "j-1"


def test_generic_secret_keys_must_be_references_or_plain_values() -> None:
    raw = {
        "datacenter": "e",
        "spark": EKS,
        "secrets": {
            "k": {
                "type": "generic",
                "keys": {
                    "a.keytab": {"config": "K", "base64": True},
                    "krb5.conf": {"value": "[libdefaults]"},
                    "bad": "inline",
                },
            }
        },
    }
    with pytest.raises(ValidationError) as info:
        parse_stack_config(raw)
    [problem] = info.value.problems
    assert problem.path == "kafka-mirror:secrets.k.keys.bad"


K8S = Materialisation("k8s_secret", "east-1-tls", "ca.crt", "/etc/kmirror/secrets/east-1-tls/ca.crt")
CFG = Materialisation("pulumi_config", "east1Pw", "value", "/etc/kmirror/secrets/kmirror-cfg-east1pw/value")
ARN = "arn:aws:secretsmanager:eu-west-1:1:secret:prod/kafka-AbCdEf"
AWS = Materialisation("aws_secret", ARN, "password", "/etc/kmirror/secrets/prod-kafka-abcdef/password")


def test_flow_secrets_on_eks() -> None:
    needs, problems = flow_secrets("a->b", [K8S, CFG, K8S], "eks", set())
    assert problems == []
    assert needs.secret_names == ("east-1-tls", "kmirror-cfg-east1pw") and needs.config_keys == ("east1Pw",)
    _, problems = flow_secrets("a->b", [AWS], "eks", set())
    assert [p.message for p in problems] == [
        f"{{aws_secret: {ARN}}} cannot be mounted by Kubernetes; use "
        "{k8s_secret: NAME, key: ...} (e.g. a kafka-mirror:secrets entry) or "
        "{pulumi_config: KEY}"
    ]


def test_flow_secrets_on_emr() -> None:
    needs, problems = flow_secrets("a->b", [K8S, AWS], "emr", {"east-1-tls"})
    assert problems == [] and needs.aws_entries == ((ARN, "prod-kafka-abcdef"),)
    assert needs.secret_names == ("east-1-tls", "prod-kafka-abcdef")
    _, problems = flow_secrets("a->b", [K8S], "emr", set())
    assert [p.path for p in problems] == ["flows.a->b"] and "not created by this stack" in problems[0].message


def test_bundle_is_deterministic_and_self_contained(tmp_path: Path) -> None:
    first, sha = build_bundle(ROOT, tmp_path / "a")
    second, sha2 = build_bundle(ROOT, tmp_path / "b")
    assert sha == sha2 and first.read_bytes() == second.read_bytes()
    names = zipfile.ZipFile(first).namelist()
    assert "spark_app/main.py" in names and "kmirror/flow/spec.py" in names
    assert not any("__pycache__" in n or n.startswith(("components/", "kafka_mirror/")) for n in names)
    # spark-submit --py-files puts the zip on sys.path: the entry script must import from it alone
    # (-I: no site-packages, no cwd; the imports below need only the standard library).
    code = (
        f"import sys; sys.path.insert(0, {str(first)!r}); import spark_app.main, kmirror.flow.spec; "
        "print(spark_app.main.__file__)"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("kmirror-bundle.zip/spark_app/main.py")


def test_a_pod_local_checkpoint_is_rejected_on_kubernetes() -> None:
    with pytest.raises(ValidationError) as info:
        parse_stack_config({"datacenter": "e", "spark": {**EKS, "checkpoint_root": "/tmp/checkpoints"}})
    assert [str(p) for p in info.value.problems] == [
        "kafka-mirror:spark.checkpoint_root: '/tmp/checkpoints' is not durable on Kubernetes; use "
        "s3a://BUCKET/PREFIX or checkpoint_pvc (mounted at /var/lib/kmirror/checkpoints)"
    ]
    pvc = {
        **EKS,
        "checkpoint_root": "/var/lib/kmirror/checkpoints/east",
        "checkpoint_pvc": {"name": "c", "storage_class": "efs-sc"},
    }
    assert parse_stack_config({"datacenter": "e", "spark": pvc}).get("checkpoint_root").endswith("/east")
