"""Pure deployment specs: stable names, valid Kubernetes objects, SparkApplication fields."""

from __future__ import annotations

import json

import jsonschema
import kubernetes_validate
import pytest

from components.specs import (
    EksSettings,
    SecretMount,
    app_name,
    emr_step_args,
    flow_config_map,
    spark_application_manifest,
)

FLOW = {"id": "west-1->east-1", "metrics_port": 9404, "checkpoint_location": "/tmp/x"}
SPARK = {
    "executors": 3,
    "executor_memory": "2g",
    "driver_memory": "1g",
    "executor_cores": 2,
    "options": {"spark.sql.shuffle.partitions": 4},
}
SETTINGS = EksSettings(namespace="mirror", image="img:1", secrets=(SecretMount("kerberos-east-1"),))

# The v1beta2 fields this project uses, types as in kubeflow/spark-operator's CRD.
POD = {
    "type": "object",
    "properties": {
        "cores": {"type": "integer", "minimum": 1},
        "memory": {"type": "string"},
        "instances": {"type": "integer", "minimum": 1},
        "serviceAccount": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "volumeMounts": {"type": "array", "items": {"type": "object", "required": ["name", "mountPath"]}},
        "ports": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["containerPort"],
                "properties": {"containerPort": {"type": "integer"}},
            },
        },
    },
    "additionalProperties": False,
}
SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "sparkoperator.k8s.io/v1beta2"},
        "kind": {"const": "SparkApplication"},
        "spec": {
            "type": "object",
            "required": ["type", "mode", "sparkVersion", "driver", "executor"],
            "additionalProperties": False,
            "properties": {
                "type": {"enum": ["Java", "Python", "Scala", "R"]},
                "pythonVersion": {"enum": ["2", "3"]},
                "mode": {"enum": ["cluster", "client", "in-cluster-client"]},
                "image": {"type": "string"},
                "sparkVersion": {"type": "string"},
                "mainApplicationFile": {"type": "string"},
                "arguments": {"type": "array", "items": {"type": "string"}},
                "sparkConf": {"type": "object", "additionalProperties": {"type": "string"}},
                "restartPolicy": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "type": {"enum": ["Never", "Always", "OnFailure"]},
                        "onFailureRetryInterval": {"type": "integer"},
                        "onSubmissionFailureRetryInterval": {"type": "integer"},
                    },
                },
                "volumes": {"type": "array", "items": {"type": "object", "required": ["name"]}},
                "driver": POD,
                "executor": POD,
            },
        },
    },
}


def test_app_name_is_derived_from_flow_id_only() -> None:
    assert app_name("west-1->east-1") == "mirror-west-1-to-east-1"
    with pytest.raises(ValueError, match="not a DNS-1123 label"):
        app_name("x" * 70 + "->y")


def test_config_map_validates_and_holds_flow_spec() -> None:
    cm = flow_config_map(FLOW, "mirror")
    kubernetes_validate.validate(cm, "1.30", strict=True)
    assert json.loads(cm["data"]["flow.json"]) == FLOW
    assert cm["metadata"]["name"] == "mirror-west-1-to-east-1-flow"


def test_spark_application_fields() -> None:
    app = spark_application_manifest(FLOW, SPARK, SETTINGS)
    jsonschema.validate(app, SCHEMA)
    spec = app["spec"]
    assert spec["arguments"][:2] == ["--flow", "/etc/kmirror/flow/flow.json"]
    assert spec["restartPolicy"]["type"] == "Always"
    assert spec["executor"]["instances"] == 3 and spec["executor"]["memory"] == "2g"
    assert spec["driver"]["ports"] == [{"name": "metrics", "containerPort": 9404, "protocol": "TCP"}]
    for role in ("driver", "executor"):
        paths = {m["mountPath"] for m in spec[role]["volumeMounts"]}
        assert paths == {"/etc/kmirror/flow", "/etc/kmirror/secrets/kerberos-east-1"}
    assert {"name": "secret-kerberos-east-1", "secret": {"secretName": "kerberos-east-1"}} in spec["volumes"]


def test_emr_step_args_run_flow() -> None:
    args = emr_step_args("s3://b/flows/f.json", "s3://b/app/bundle.zip", "s3://b/checkpoints/f")
    assert args[0] == "spark-submit" and args[-2:] == ["--checkpoint", "s3://b/checkpoints/f"]
    assert "s3://b/app/__main__.py" in args
