"""The SparkApplication (`sparkoperator.k8s.io/v1beta2`) fields this project renders, typed as in
kubeflow/spark-operator's CRD; volumes, mounts and env are checked against Kubernetes'
own published schemas (kubernetes-validate's `_definitions.json`). Unknown fields fail
(`additionalProperties: false`), so a typo such as `volumeMount` cannot pass."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
from referencing import Registry, Resource

K8S_VERSION = "1.35.0"  # kmirror.stack.models.EKS_VERSION (test_eks_specs checks they agree)
DEFS_ID = "https://kubernetes.io/api/_definitions.json"


def _k8s(name: str) -> dict[str, str]:
    return {"$ref": f"{DEFS_ID}#/$defs/io.k8s.api.core.v1.{name}"}


STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
POD = {
    "type": "object",
    "required": ["cores", "memory"],
    "additionalProperties": False,
    "properties": {
        "cores": {"type": "integer", "minimum": 1},
        "memory": {"type": "string", "pattern": "^[0-9]+[kmgt]$"},
        "instances": {"type": "integer", "minimum": 1},
        "serviceAccount": {"type": "string"},
        "labels": STRING_MAP,
        "annotations": STRING_MAP,
        "env": {"type": "array", "items": _k8s("EnvVar")},
        "volumeMounts": {"type": "array", "items": _k8s("VolumeMount")},
        "podSecurityContext": _k8s("PodSecurityContext"),
        "securityContext": _k8s("SecurityContext"),
        "priorityClassName": {"type": "string"},
        "nodeSelector": STRING_MAP,
        "tolerations": {"type": "array", "items": _k8s("Toleration")},
        "ports": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "protocol", "containerPort"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string"},
                    "containerPort": {"type": "integer"},
                    "protocol": {"enum": ["TCP", "UDP", "SCTP"]},
                },
            },
        },
    },
}
SPARK_APPLICATION = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "sparkoperator.k8s.io/v1beta2"},
        "kind": {"const": "SparkApplication"},
        "metadata": {
            "type": "object",
            "required": ["name", "namespace"],
            "properties": {
                "name": {"type": "string", "maxLength": 63},
                "labels": STRING_MAP,
                "annotations": STRING_MAP,
            },
        },
        "spec": {
            "type": "object",
            "required": ["type", "mode", "sparkVersion", "mainApplicationFile", "driver", "executor"],
            "additionalProperties": False,
            "properties": {
                "type": {"enum": ["Java", "Python", "Scala", "R"]},
                "pythonVersion": {"enum": ["2", "3"]},
                "mode": {"enum": ["cluster", "client", "in-cluster-client"]},
                "image": {"type": "string"},
                "imagePullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
                "sparkVersion": {"type": "string"},
                "mainApplicationFile": {"type": "string"},
                "arguments": {"type": "array", "items": {"type": "string"}},
                "sparkConf": STRING_MAP,
                "restartPolicy": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "type": {"enum": ["Never", "Always", "OnFailure"]},
                        "onFailureRetries": {"type": "integer"},
                        "onFailureRetryInterval": {"type": "integer"},
                        "onSubmissionFailureRetries": {"type": "integer"},
                        "onSubmissionFailureRetryInterval": {"type": "integer"},
                    },
                },
                "volumes": {"type": "array", "items": _k8s("Volume")},
                "driver": POD,
                "executor": POD,
            },
        },
    },
}


def _registry() -> Registry:
    base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{K8S_VERSION}-local-strict"
    defs = json.loads((base / "_definitions.json").read_text())
    return Registry().with_resource(DEFS_ID, Resource.from_contents(defs))


VALIDATOR = jsonschema.Draft202012Validator(SPARK_APPLICATION, registry=_registry())


CRD_FILE = Path(__file__).parent / "data" / "sparkapplication-crd-2.5.2.json.gz"
CRD = json.loads(gzip.decompress(CRD_FILE.read_bytes()))
# The operator's own CRD (structural OpenAPI v3: types, enums, int-or-string), as the API server checks it.
CRD_VALIDATOR = jsonschema.Draft4Validator(CRD["schema"])


def validate_spark_application(app: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError naming the first field that does not fit the CRD: the
    operator chart's own v1beta2 schema, then this project's strict subset (unknown fields fail)."""
    CRD_VALIDATOR.validate(app)
    VALIDATOR.validate(app)


def validate_k8s(manifest: dict[str, Any]) -> None:
    """Kubernetes' published schema for the object's kind, strict (unknown fields fail)."""
    kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)
