"""The Pulumi program: one stack = one datacenter.

`main()` reads `kafka-mirror:*` config (kmirror.stack.config), plans the topology file with
the same planner as `kmirror plan`, builds the platform (EKS or EMR) and one MirrorDeployment
per flow whose `run_in` is this datacenter (with `spark.apps_per: target`, one
TargetMirrorDeployment per target cluster of those flows); flows planned elsewhere get nothing here.
Stack outputs: `flows` (ids deployed here), `apps` (flow id -> app name), `metrics`
(app name -> where Prometheus scrapes it). Nothing happens at import time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import pulumi

from kafka_mirror.app_sets import flows_by_target
from kafka_mirror.aws_session import aws_settings
from kafka_mirror.deploy_files import app_bundle as _packaged_bundle
from kafka_mirror.eks.spark_platform import EksSparkPlatform, EksSparkPlatformArgs
from kafka_mirror.eks.specs import CHECKPOINT_MOUNT, app_name
from kafka_mirror.emr.platform_args import EmrSparkPlatformArgs
from kafka_mirror.emr.spark_platform import EmrSparkPlatform
from kafka_mirror.emr.specs import EmrSettings, metrics_port_problems
from kafka_mirror.handover import PEER_STACKS_KEY, guard, parse_peer_stacks
from kafka_mirror.mirror_deployment import MirrorDeployment, MirrorDeploymentArgs
from kafka_mirror.network import NETWORK_KEY, resolve_network
from kafka_mirror.prerequisites import Lookup, aws_lookup, check_prerequisites, stack_prerequisites
from kafka_mirror.replication_topology import ReplicationTopology
from kafka_mirror.secrets.stack import StackSecrets, resolve_fields, stack_secret_name
from kafka_mirror.secrets.wiring import FlowSecrets, flow_secrets
from kafka_mirror.target_deployment import TargetMirrorDeployment
from kmirror.errors import Problem, Problems, ValidationError
from kmirror.estate.planner import load_topology
from kmirror.stack.config import NS, StackConfig, parse_stack_config
from kmirror.stack.models import EksSparkConfig, EmrSparkConfig

FLOW_SPARK_KEYS = ("executors", "driver_memory", "executor_memory", "driver_cores", "executor_cores")
# The stack model (`kmirror.stack.models`) is the one declaration of a stack input. A platform
# component takes the fields it shares with the model as they are, except those the program
# computes (`*_COMPUTED`); `tests/pulumi/test_program.py` checks every model field is one or the other.
EKS_COMPUTED = frozenset({"spark_version", "metrics_port", "spark_conf", "cluster", "kubeconfig"})
EMR_COMPUTED = frozenset({"bucket", "region", "create_bucket", "step_concurrency_level", "spark_conf"})
# Read by the program for every platform (flow defaults, checkpoints), never a component arg.
PROGRAM_KEYS = frozenset({"platform", "checkpoint_root", "check_prerequisites", "apps_per", *FLOW_SPARK_KEYS})


def passed_as_is(model: Any, args: Any, computed: frozenset[str]) -> tuple[str, ...]:
    """The stack settings `args` (a component's TypedDict) takes unchanged: `model`'s fields it
    shares with them, in the model's order, but those the program computes."""
    keys = args.__required_keys__ | args.__optional_keys__
    return tuple(k for k in model.model_fields if k in keys and k not in computed)


EKS_KEYS = passed_as_is(EksSparkConfig, EksSparkPlatformArgs, EKS_COMPUTED)
EMR_KEYS = passed_as_is(EmrSparkConfig, EmrSparkPlatformArgs, EMR_COMPUTED)


def project_dir() -> Path:
    """Where relative paths of the stack config (the topology file) start: the Pulumi project,
    which is the working directory the CLI runs a program in."""
    return Path.cwd()


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


def _spark_defaults(stack: StackConfig) -> dict[str, Any]:
    return {k: stack.get(k) for k in FLOW_SPARK_KEYS if stack.get(k) is not None}


def kubeconfig(stack: StackConfig, config: pulumi.Config) -> tuple[pulumi.Input[str] | None, str | None]:
    """The existing cluster's kubeconfig (a secret config value, or a file) and context; never
    the ambient kubeconfig (stack_config requires one unless the stack creates the cluster)."""
    ref = stack.get("kubeconfig")
    if not ref:
        return None, None
    if ref.get("config"):
        return config.require_secret(ref["config"]), None
    path = Path(str(ref["file"])).expanduser()
    if not path.is_file():
        raise ValidationError([Problem(f"{NS}:spark.kubeconfig.file", f"no such file: {str(path)!r}")])
    return pulumi.Output.secret(path.read_text(encoding="utf-8")), ref.get("context")


RENDER_DIR_ENV = "KMIRROR_RENDER_DIR"


def render_dir(stack: StackConfig, environ: Mapping[str, str]) -> str | None:
    """`$KMIRROR_RENDER_DIR`: the directory an EKS stack's Kubernetes objects are written to as
    YAML instead of being applied (docs/deploy.md, "See the manifests without a cluster"); one
    subdirectory per stack. Refused for a stack that creates its cluster (nothing to point at yet)."""
    root = environ.get(RENDER_DIR_ENV)
    if not root:
        return None
    if (stack.get("cluster") or {}).get("create"):
        raise ValidationError(
            [
                Problem(
                    f"{NS}:spark.cluster.create",
                    f"${RENDER_DIR_ENV} is set: a stack that creates its cluster "
                    "cannot be rendered; unset it, or render a stack on an existing cluster",
                )
            ]
        )
    return str(Path(root).expanduser().resolve() / stack.datacenter)


@dataclass(frozen=True)
class DeployedPlatform:
    """A created platform and what each MirrorDeployment of the stack gets from it."""

    component: EksSparkPlatform | EmrSparkPlatform
    flow_args: dict[str, Any]  # MirrorDeploymentArgs every flow gets: the platform's target and its options
    providers: Sequence[pulumi.ProviderResource]


class StackPlatform(Protocol):
    """What the program does per platform; one implementation per `kafka-mirror:spark.platform`."""

    def checkpoint_root(self) -> str:
        """The flows' checkpoint directory (the stack's `checkpoint_root`, else the platform's default)."""

    def flow_problems(self, flow_specs: Iterable[Mapping[str, Any]]) -> list[Problem]:
        """What the platform cannot run among the stack's flows (raised before anything is created)."""

    def deploy(self, secrets: StackSecrets, needs: list[FlowSecrets], flow_count: int) -> DeployedPlatform:
        """The platform component, created."""


class EksStack:
    """An EKS stack: its typed settings (`EksSparkConfig`) and the EksSparkPlatform made from them."""

    def __init__(self, stack: StackConfig, config: pulumi.Config) -> None:
        self.stack, self.config = stack, config
        self.settings: EksSparkConfig = stack.model

    def checkpoint_root(self) -> str:
        return self.settings.checkpoint_root or CHECKPOINT_MOUNT  # else a checkpoint_pvc (stack_config checks it)

    def flow_problems(self, flow_specs: Iterable[Mapping[str, Any]]) -> list[Problem]:
        return []  # each app has its own pod: one metrics port fits all

    def deploy(self, secrets: StackSecrets, needs: list[FlowSecrets], flow_count: int) -> DeployedPlatform:
        stack = self.stack
        args: dict[str, Any] = {k: stack.get(k) for k in EKS_KEYS if stack.get(k) is not None}
        rendered = render_dir(stack, os.environ)
        kube, context = kubeconfig(stack, self.config) if rendered is None else (None, None)
        if kube is not None:
            args["kubeconfig"] = kube
            if context:
                args["kubeconfig_context"] = context
        args.update(
            spark_version=self.settings.spark_version,
            metrics_port=self.settings.metrics_port,
            spark_conf={str(k): str(v) for k, v in self.settings.spark_conf.items()},
            spark_defaults=_spark_defaults(stack),
        )
        cluster = dict(stack.get("cluster") or {})
        cluster.pop("runner_labels", None)  # CI's `runs-on` (kmirror stack-info --matrix): nothing to create
        if cluster.pop("create", False):
            args["cluster"] = cluster
            # a new cluster has no Prometheus operator CRDs: install them before the PodMonitors and rules
            monitoring = dict(args.get("monitoring") or {})
            if monitoring.get("install_crds") is None:
                monitoring["install_crds"] = True
            args["monitoring"] = monitoring
        name = f"{stack.datacenter}-eks"
        platform = EksSparkPlatform(name, cast(EksSparkPlatformArgs, args), stack_secrets=secrets, render_dir=rendered)
        flow_args = {"eks": platform.deployment_target, "pod_monitor": self.settings.monitoring.pod_monitor}
        providers = [platform.k8s_provider] if platform.k8s_provider is not None else []
        return DeployedPlatform(platform, flow_args, providers)


def app_bundle() -> tuple[Path, str]:
    """The zip EMR nodes run: `$KMIRROR_BUNDLE` (e.g. the one CI built and tested) or one built
    now from the installed app into `$KMIRROR_BUILD_DIR` (default `build/`)."""
    return _packaged_bundle(os.environ)


def stack_aws_settings(stack: StackConfig) -> dict[str, Any]:
    """What the stack's AWS provider uses (`aws:region`, `aws:profile`, `aws:assumeRoles`), for the
    EMR platform; a `kafka-mirror:spark.region` other than `aws:region` is refused (the cluster
    is created in `aws:region`)."""
    aws = pulumi.Config("aws")
    region = aws.get("region")
    if stack.get("region") and region and stack.get("region") != region:
        raise ValidationError(
            [
                Problem(
                    f"{NS}:spark.region",
                    f"{stack.get('region')!r} differs from aws:region "
                    f"{region!r}; remove it (the stack's AWS provider decides the region)",
                )
            ]
        )
    roles = aws.get_object("assumeRoles") or aws.get_object("assumeRole")
    return aws_settings(region or stack.get("region"), aws.get("profile"), roles)


class EmrStack:
    """An EMR stack: its typed settings (`EmrSparkConfig`) and the EmrSparkPlatform made from them."""

    def __init__(self, stack: StackConfig, config: pulumi.Config) -> None:
        self.stack, self.config = stack, config
        self.settings: EmrSparkConfig = stack.model

    def checkpoint_root(self) -> str:
        return self.settings.checkpoint_root or f"s3://{self.settings.bucket}/checkpoints"

    def flow_problems(self, flow_specs: Iterable[Mapping[str, Any]]) -> list[Problem]:
        return metrics_port_problems(flow_specs, EmrSettings(bucket=self.settings.bucket))  # drivers share nodes

    def deploy(self, secrets: StackSecrets, needs: list[FlowSecrets], flow_count: int) -> DeployedPlatform:
        stack = self.stack
        aws = stack_aws_settings(stack)
        args: dict[str, Any] = {k: stack.get(k) for k in EMR_KEYS if stack.get(k) is not None}
        args.update(
            bucket=self.settings.bucket,
            region=aws["region"],
            aws=aws,
            create_bucket=self.settings.create_bucket,
            step_concurrency_level=int(self.settings.step_concurrency_level or max(1, flow_count)),
            spark_defaults=_spark_defaults(stack),
            spark_conf={str(k): str(v) for k, v in self.settings.spark_conf.items()},
            aws_secrets={directory: arn for n in needs for arn, directory in n.aws_entries},
        )
        name = f"{stack.datacenter}-emr"
        platform = EmrSparkPlatform(name, cast(EmrSparkPlatformArgs, args), stack_secrets=secrets)
        return DeployedPlatform(platform, {"emr": platform.deployment_target}, [])


PLATFORMS: dict[str, Callable[[StackConfig, pulumi.Config], StackPlatform]] = {"eks": EksStack, "emr": EmrStack}


def _constant(value: Any) -> Callable[[Any], Any]:
    return lambda _: value


def deploy(stack: StackConfig, config: pulumi.Config, lookup: Lookup = aws_lookup) -> dict[str, Any]:
    """Every resource of the stack; returns the stack outputs. First of all, the prerequisites the
    platform team creates by hand are checked (`kafka_mirror.prerequisites`, through `lookup`):
    ValidationError listing every missing one, before anything is created."""
    wanted = stack.model.check_prerequisites  # off only on a test bed without AWS (the real-engine tests)
    prerequisites = check_prerequisites(stack_prerequisites(stack.platform, stack.model), lookup) if wanted else []
    if prerequisites:
        raise ValidationError(prerequisites)
    peer_stacks = parse_peer_stacks(config.get_object(PEER_STACKS_KEY), pulumi.get_stack())
    path = Path(stack.topology)
    topology = load_topology(str(path if path.is_absolute() else project_dir() / path))
    platform = PLATFORMS[stack.platform](stack, config)
    root = platform.checkpoint_root()
    replication = ReplicationTopology(
        f"{stack.datacenter}-topology",
        {"datacenter": stack.datacenter, "checkpoint_root": root},
        parsed=topology,
    )
    problems = Problems(f"stack {pulumi.get_stack()}")
    stack_names = {stack_secret_name(s) for s in stack.secrets}
    needs: dict[str, FlowSecrets] = {}
    specs = {flow_id: cast(dict[str, Any], spec) for flow_id, spec in replication.specs.items()}  # a file: plain
    for flow in replication.planned_flows:
        clusters = (replication.clusters[flow.source], replication.clusters[flow.target])
        needs[flow.id], found = flow_secrets(
            flow.id, [m for c in clusters for m in c.materialisations], stack.platform, stack_names
        )
        problems.extend(found)
    problems.extend(platform.flow_problems(specs.values()))
    problems.raise_if_any()
    config_keys = sorted({k for n in needs.values() for k in n.config_keys})
    secrets = StackSecrets(
        secrets=[(s, resolve_fields(s, config.require_secret)) for s in stack.secrets],
        config_values={key: config.require_secret(key) for key in config_keys},
    )
    deployed = platform.deploy(secrets, list(needs.values()), len(replication.planned_flows))
    made = deployed.component
    # a flow another stack still runs gets nothing here until that stack's `up` removed it: every
    # resource of an app is made from its flow spec, which waits for (and fails with) the check
    handover = guard(peer_stacks, [flow.id for flow in replication.planned_flows])
    if stack.model.apps_per == "target":
        return deploy_per_target(stack, replication, specs, needs, deployed, handover)
    apps: dict[str, MirrorDeployment] = {}
    for flow in replication.planned_flows:
        names = needs[flow.id].secret_names
        used = [made.stack_secrets[n].resource for n in names if n in made.stack_secrets]
        spec: Any = specs[flow.id] if handover is None else handover.apply(_constant(specs[flow.id]))
        args = cast(MirrorDeploymentArgs, {"flow_spec": spec, "spark": dict(flow.spark)})
        args["secret_names"] = list(names)
        args.update(cast(MirrorDeploymentArgs, deployed.flow_args))
        opts = pulumi.ResourceOptions(providers=list(deployed.providers), depends_on=[*made.ready, *used])
        apps[flow.id] = MirrorDeployment(app_name(flow.id), args, opts)
    return {
        "datacenter": stack.datacenter,
        "platform": stack.platform,
        "flows": list(apps),
        "apps": {flow_id: app_name(flow_id) for flow_id in apps},
        "metrics": {app_name(flow_id): app.metrics_endpoint for flow_id, app in apps.items()},
    }


def deploy_per_target(
    stack: StackConfig,
    replication: ReplicationTopology,
    specs: dict[str, dict[str, Any]],
    needs: dict[str, FlowSecrets],
    deployed: DeployedPlatform,
    handover: pulumi.Output[Any] | None,
) -> dict[str, Any]:
    """`apps_per: target`: one TargetMirrorDeployment per target cluster of the local flows; stack
    outputs as `deploy`'s, with `apps` mapping each flow to its target's app."""
    made = deployed.component
    flows = {f.id: f for f in replication.planned_flows}
    apps: dict[str, TargetMirrorDeployment] = {}
    for target, ids in flows_by_target((f.id, f.target) for f in flows.values()).items():
        names = sorted({n for i in ids for n in needs[i].secret_names})
        used = [made.stack_secrets[n].resource for n in names if n in made.stack_secrets]
        flow_specs: dict[str, Any] = {
            i: specs[i] if handover is None else handover.apply(_constant(specs[i])) for i in ids
        }
        spark = {i: dict(flows[i].spark) for i in ids}
        opts = pulumi.ResourceOptions(providers=list(deployed.providers), depends_on=[*made.ready, *used])
        apps[target] = TargetMirrorDeployment(target, flow_specs, spark, dict(deployed.flow_args), names, opts)
    return {
        "datacenter": stack.datacenter,
        "platform": stack.platform,
        "flows": list(flows),
        "apps": {i: app.app_name for app in apps.values() for i in app.flow_ids},
        "metrics": {app.app_name: app.metrics_endpoint for app in apps.values()},
    }


def main() -> None:
    """Entry point of `__main__.py`; raises kmirror.errors.ValidationError for bad config/topology."""
    config = pulumi.Config(NS)
    raw = resolve_network(read_config(config), config.get_object(NETWORK_KEY))  # brownfield ids (network.py)
    stack = parse_stack_config(raw, pulumi.get_stack())
    for key, value in deploy(stack, config).items():
        pulumi.export(key, value)
