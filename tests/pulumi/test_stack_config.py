"""Stack config validation, secret wiring and the app bundle: pure, no engine."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from kafka_mirror.bundle import build_bundle
from kafka_mirror.secret_wiring import flow_secrets
from kafka_mirror.stack_config import parse_stack_config
from kmirror.errors import ValidationError
from kmirror.secret_refs import Materialisation

ROOT = Path(__file__).resolve().parents[2]
EKS = {"platform": "eks", "image": "img:1", "checkpoint_root": "s3a://b/c"}


def _stack_file(stack: str) -> dict:
    raw = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]
    return {k.removeprefix("kafka-mirror:"): v for k, v in raw.items() if k.startswith("kafka-mirror:")}


@pytest.mark.parametrize("stack", ["west", "east", "central", "local"])
def test_example_stacks_parse(stack: str) -> None:
    config = parse_stack_config(_stack_file(stack), stack)
    assert config.datacenter == stack
    assert config.platform == ("emr" if stack == "central" else "eks")


def test_every_problem_is_reported_once_with_its_key() -> None:
    raw = {
        "spark": {"platform": "eks", "executor": 2, "executors": 0, "cluster": {"create": True}},
        "secrets": {"east-tls": {"type": "tls", "ca_pem": "x", "key_pem": "inline-key"}},
    }
    with pytest.raises(ValidationError) as info:
        parse_stack_config(raw, "east")
    assert [str(p) for p in info.value.problems] == [
        "kafka-mirror:datacenter: required: the datacenter this stack deploys, got None",
        "kafka-mirror:secrets.east-tls.key_pem: must be {config: KEY} naming a secret config value "
        "(pulumi config set --secret KEY ...), never inline",
        "kafka-mirror:spark.checkpoint_root: required (e.g. s3a://BUCKET/checkpoints) unless checkpoint_pvc is set",
        "kafka-mirror:spark.cluster.subnet_ids: required when cluster.create is true",
        "kafka-mirror:spark.executor: unknown key (did you mean 'executors'?); allowed: "
        + ", ".join(
            sorted(
                [
                    "checkpoint_pvc",
                    "checkpoint_root",
                    "cluster",
                    "driver_cores",
                    "driver_memory",
                    "executor_cores",
                    "executor_memory",
                    "executors",
                    "image",
                    "image_pull_policy",
                    "irsa_role_arn",
                    "metrics_port",
                    "namespace",
                    "operator",
                    "platform",
                    "service_account",
                    "spark_conf",
                    "spark_version",
                ]
            )
        ),
        "kafka-mirror:spark.executors: must be an integer >= 1, got 0",
        "kafka-mirror:spark.image: required: the app image built from the Dockerfile",
    ]
    assert "inline-key" not in str(info.value)


def test_emr_needs_a_bucket_and_a_release_or_cluster() -> None:
    with pytest.raises(ValidationError) as info:
        parse_stack_config({"datacenter": "c", "spark": {"platform": "emr"}})
    assert {p.path for p in info.value.problems} == {"kafka-mirror:spark.bucket", "kafka-mirror:spark.release_label"}
    config = parse_stack_config({"datacenter": "c", "spark": {"platform": "emr", "bucket": "b", "cluster_id": "j-1"}})
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
    assert "spark_app/main.py" in names and "kmirror/flowspec.py" in names
    assert not any("__pycache__" in n or n.startswith(("components/", "kafka_mirror/")) for n in names)
    # spark-submit --py-files puts the zip on sys.path: the entry script must import from it alone
    # (-I: no site-packages, no cwd; the imports below need only the standard library).
    code = (
        f"import sys; sys.path.insert(0, {str(first)!r}); import spark_app.main, kmirror.flowspec; "
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
    pvc = {**EKS, "checkpoint_root": "/var/lib/kmirror/checkpoints/east", "checkpoint_pvc": {"name": "c"}}
    assert parse_stack_config({"datacenter": "e", "spark": pvc}).get("checkpoint_root").endswith("/east")
