"""The Pulumi program: one stack = one datacenter.

`main()` reads `kafka-mirror:*` config (components.stack_config), plans the topology file with
the same planner as `kmirror plan`, builds the platform (EKS or EMR) and one MirrorDeployment
per flow whose `run_in` is this datacenter; flows planned elsewhere get nothing here.
Stack outputs: `flows` (ids deployed here), `apps` (flow id -> app name), `metrics`
(app name -> where Prometheus scrapes it). Nothing happens at import time.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pulumi

from components.bundle import build_bundle
from components.eks_cluster import EksClusterSettings
from components.eks_spark_platform import CheckpointPvc, EksSparkPlatform, EksSparkPlatformArgs, OperatorSettings
from components.emr_spark_platform import AppFiles, EmrSparkPlatform, EmrSparkPlatformArgs
from components.emr_specs import EmrSettings, metrics_port_problems
from components.mirror_deployment import MirrorDeployment, MirrorDeploymentArgs
from components.replication_topology import ReplicationTopology, ReplicationTopologyArgs
from components.secret_wiring import FlowSecrets, flow_secrets
from components.specs import CHECKPOINT_MOUNT, DEFAULT_METRICS_PORT, EksSettings, app_name
from components.stack_config import NS, SecretConfig, StackConfig, parse_stack_config
from components.stack_secrets import resolve_fields, stack_secret_name
from kmirror.errors import Problems
from kmirror.planner import load_topology

PROJECT_ROOT = Path(__file__).resolve().parents[1]
FLOW_SPARK_KEYS = ("executors", "driver_memory", "executor_memory", "driver_cores", "executor_cores")
Platform = EksSparkPlatform | EmrSparkPlatform
SCRIPT_FILES = ("kmirror_main.py", "emr-bootstrap.sh", "app-requirements.txt", "kmirror-sync-secrets.py")


def read_config(config: pulumi.Config) -> dict[str, Any]:
    """The raw `kafka-mirror:*` values (objects decoded from YAML/JSON)."""
    raw: dict[str, Any] = {}
    for key in ("datacenter", "topology"):
        if (value := config.get(key)) is not None:
            raw[key] = value
    for key in ("spark", "secrets"):
        if (obj := config.get_object(key)) is not None:
            raw[key] = obj
    return raw


def checkpoint_root(stack: StackConfig) -> str:
    if root := stack.get("checkpoint_root"):
        return str(root)
    if stack.platform == "emr":
        return f"s3://{stack.get('bucket')}/checkpoints"
    return CHECKPOINT_MOUNT  # a checkpoint_pvc is configured (stack_config checks it)


def _spark_defaults(stack: StackConfig) -> dict[str, Any]:
    return {k: stack.get(k) for k in FLOW_SPARK_KEYS if stack.get(k) is not None}


def _eks(
    stack: StackConfig, secrets: list[tuple[SecretConfig, Mapping[str, Any]]], config_values: Mapping[str, Any]
) -> EksSparkPlatform:
    pvc = stack.get("checkpoint_pvc")
    settings = EksSettings(
        namespace=stack.get("namespace", "kafka-mirror"),
        image=stack.get("image"),
        image_pull_policy=stack.get("image_pull_policy", "IfNotPresent"),
        service_account=stack.get("service_account", "kafka-mirror"),
        spark_version=str(stack.get("spark_version", "4.0.2")),
        metrics_port=int(stack.get("metrics_port", DEFAULT_METRICS_PORT)),
        spark_conf={str(k): str(v) for k, v in (stack.get("spark_conf") or {}).items()},
        spark_defaults=_spark_defaults(stack),
        checkpoint_claim=CheckpointPvc(**pvc).name if pvc else None,
    )
    cluster = dict(stack.get("cluster") or {})
    cluster_settings = None
    if cluster.pop("create", False):
        cluster_settings = EksClusterSettings(**cluster)
    args = EksSparkPlatformArgs(
        settings,
        irsa_role_arn=stack.get("irsa_role_arn"),
        operator=OperatorSettings(**(stack.get("operator") or {})),
        cluster=cluster_settings,
        checkpoint_pvc=CheckpointPvc(**pvc) if pvc else None,
        secrets=secrets,
        config_secrets=config_values,
    )
    return EksSparkPlatform(f"{stack.datacenter}-eks", args)


def app_bundle() -> tuple[Path, str]:
    """The zip EMR nodes run: `$KMIRROR_BUNDLE` (e.g. the one CI built and tested) or one built
    now from this checkout into `$KMIRROR_BUILD_DIR` (default `build/`)."""
    if prebuilt := os.environ.get("KMIRROR_BUNDLE"):
        path = Path(prebuilt)
        return path, hashlib.sha256(path.read_bytes()).hexdigest()
    return build_bundle(PROJECT_ROOT, Path(os.environ.get("KMIRROR_BUILD_DIR") or PROJECT_ROOT / "build"))


def _emr(
    stack: StackConfig,
    secrets: list[tuple[SecretConfig, Mapping[str, Any]]],
    config_values: Mapping[str, Any],
    needs: list[FlowSecrets],
    flow_count: int,
) -> EmrSparkPlatform:
    region = stack.get("region") or pulumi.Config("aws").get("region") or "us-east-1"
    settings = EmrSettings(
        bucket=stack.get("bucket"),
        region=region,
        spark_defaults=_spark_defaults(stack),
        spark_conf={str(k): str(v) for k, v in (stack.get("spark_conf") or {}).items()},
    )
    bundle, sha = app_bundle()
    scripts = PROJECT_ROOT / "scripts"
    files = AppFiles(str(bundle), sha, *(str(scripts / f) for f in SCRIPT_FILES))
    args = EmrSparkPlatformArgs(
        settings,
        files,
        create_bucket=bool(stack.get("create_bucket", True)),
        cluster_id=stack.get("cluster_id"),
        release_label=stack.get("release_label", "emr-spark-8.0.0"),
        subnet_id=stack.get("subnet_id"),
        master_instance_type=stack.get("master_instance_type", "m7g.xlarge"),
        core_instance_type=stack.get("core_instance_type", "m7g.2xlarge"),
        core_instance_count=int(stack.get("core_instance_count", 2)),
        step_concurrency_level=int(stack.get("step_concurrency_level") or max(1, flow_count)),
        gssapi=bool(stack.get("gssapi", False)),
        secrets=secrets,
        config_secrets=config_values,
        aws_secret_entries=sorted({e for n in needs for e in n.aws_entries}),
    )
    return EmrSparkPlatform(f"{stack.datacenter}-emr", args)


def deploy(stack: StackConfig, config: pulumi.Config) -> dict[str, Any]:
    """Every resource of the stack; returns the stack outputs."""
    path = Path(stack.topology)
    topology = load_topology(str(path if path.is_absolute() else PROJECT_ROOT / path))
    root = checkpoint_root(stack)
    replication = ReplicationTopology(
        f"{stack.datacenter}-topology", ReplicationTopologyArgs(topology, stack.datacenter, root)
    )
    problems = Problems(f"stack {pulumi.get_stack()}")
    stack_names = {stack_secret_name(s) for s in stack.secrets}
    needs: dict[str, FlowSecrets] = {}
    for flow in replication.flows:
        clusters = (replication.clusters[flow.source], replication.clusters[flow.target])
        needs[flow.id], found = flow_secrets(
            flow.id, [m for c in clusters for m in c.materialisations], stack.platform, stack_names
        )
        problems.extend(found)
    if stack.platform == "emr":
        bucket = str(stack.get("bucket"))
        problems.extend(metrics_port_problems(replication.flow_specs.values(), EmrSettings(bucket=bucket)))
    problems.raise_if_any()
    config_keys = sorted({k for n in needs.values() for k in n.config_keys})
    config_values = {key: config.require_secret(key) for key in config_keys}
    secrets: list[tuple[SecretConfig, Mapping[str, Any]]] = [
        (s, resolve_fields(s, config.require_secret)) for s in stack.secrets
    ]
    platform: Platform
    if stack.platform == "eks":
        platform = _eks(stack, secrets, config_values)
    else:
        platform = _emr(stack, secrets, config_values, list(needs.values()), len(replication.flows))
    deployments = []
    for flow in replication.flows:
        used = [platform.secrets[n].resource for n in needs[flow.id].secret_names if n in platform.secrets]
        args = MirrorDeploymentArgs(
            replication.flow_specs[flow.id], dict(flow.spark), platform, needs[flow.id].secret_names, used
        )
        deployments.append(MirrorDeployment(app_name(flow.id), args))
    return {
        "datacenter": stack.datacenter,
        "platform": stack.platform,
        "flows": [d.flow_id for d in deployments],
        "apps": {d.flow_id: d.app_name for d in deployments},
        "metrics": {d.app_name: d.metrics_endpoint for d in deployments},
    }


def main() -> None:
    """Entry point of `__main__.py`; raises kmirror.errors.ValidationError for bad config/topology."""
    config = pulumi.Config(NS)
    stack = parse_stack_config(read_config(config), pulumi.get_stack())
    for key, value in deploy(stack, config).items():
        pulumi.export(key, value)
