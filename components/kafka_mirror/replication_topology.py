"""ReplicationTopology: the topology's flows, planned by the same pure planner as `kmirror plan`
(so a preview never disagrees with the plan), narrowed to one datacenter.

The topology is data in the shape of `stacks/topology.yaml` (an object, or the YAML text), so any
Pulumi language can write it inline or load a file. Only `clusters.<alias>.bootstrap_servers` may
be a Pulumi output (e.g. an MSK cluster's brokers): everything else decides which resources exist
and must be known when the program runs.

Children: one `KafkaCluster` per cluster a local flow touches, named `<name>-<alias>`.
Python attributes (in-process users): `whole_plan` (the Plan of every datacenter), `planned_flows` (PlannedFlows run in
the datacenter), `specs` (flow id -> flow spec, an Output where a bootstrap is one), `clusters`.
(No `from __future__ import annotations`: Pulumi's component analyzer reads these annotations.)
"""

from collections.abc import Mapping
from typing import Any, TypedDict, cast

import pulumi
import yaml
from typing_extensions import NotRequired

from kafka_mirror.input_types import FlowSpark
from kafka_mirror.kafka_cluster import KafkaCluster
from kmirror.errors import Problem, ValidationError
from kmirror.estate.planner import flow_spec_for, plan_topology
from kmirror.estate.topology import Topology, parse_topology
from kmirror.security.secret_refs import aws_secret_local_name, pulumi_config_secret_name

TOKEN = "kafka-mirror:index:ReplicationTopology"
PLACEHOLDER_PORT = 9092


class ReplicationTopologyArgs(TypedDict):
    """Arguments of ReplicationTopology: the topology (one of `topology`, `topology_yaml`) and the datacenter."""

    datacenter: str
    """The datacenter this program deploys: flows whose `run_in` is this datacenter are planned here."""
    checkpoint_root: str
    """Where flows keep Spark checkpoints: `s3a://BUCKET/PREFIX` (EKS), `s3://BUCKET/PREFIX` (EMR) or a PVC mount."""
    topology: NotRequired[dict[str, Any]]
    """The topology as an object with the keys of `stacks/topology.yaml` (clusters, defaults, topologies,
    flows; snake_case as in the file). Only `clusters.<alias>.bootstrap_servers` may be an output."""
    topology_yaml: NotRequired[str]
    """The topology as YAML text (e.g. `fn::readFile: ./topology.yaml` in Pulumi YAML)."""


class ReplicationTopology(pulumi.ComponentResource):
    """The replication estate planned for one datacenter: which flows run here, each flow's spec and Spark
    resources, and a KafkaCluster per cluster those flows touch.

    Raises ValidationError (every problem of the topology, with its path) before registering anything.
    """

    datacenter: pulumi.Output[str]
    """The datacenter planned."""
    flows: pulumi.Output[list[str]]
    """Ids (`source->target`) of the flows that run in this datacenter."""
    all_flows: pulumi.Output[list[str]]
    """Ids of every flow of the topology."""
    plan: pulumi.Output[dict[str, Any]]
    """The datacenter's plan (the JSON contract of `kmirror plan --format json`)."""
    flow_specs: pulumi.Output[dict[str, dict[str, Any]]]
    """Flow id -> the flow spec the app runs (MirrorDeployment's `flow_spec`)."""
    flow_spark: pulumi.Output[dict[str, FlowSpark]]
    """Flow id -> the flow's planned Spark resources (MirrorDeployment's `spark`)."""
    secret_names: pulumi.Output[dict[str, list[str]]]
    """Flow id -> the secrets (directories under /etc/kmirror/secrets) the flow reads (MirrorDeployment's
    `secret_names`)."""

    def __init__(
        self,
        name: str,
        args: ReplicationTopologyArgs,
        opts: pulumi.ResourceOptions | None = None,
        *,
        parsed: Topology | None = None,
    ) -> None:
        """`parsed`: a topology the caller already validated (the stack program); else `args` holds it."""
        outputs: dict[str, Any] = {}
        topology = parsed or _parse(args, outputs, name)
        plan = plan_topology(topology)
        local = plan.for_datacenter(args["datacenter"])  # raises before anything is registered
        super().__init__(TOKEN, name, {}, opts)
        self.whole_plan = plan
        self.planned_flows = list(local.flows)
        root = args["checkpoint_root"]
        self.specs: dict[str, pulumi.Input[dict[str, Any]]] = {
            f.id: _with_outputs(flow_spec_for(topology, f, root), outputs) for f in self.planned_flows
        }
        self.clusters: dict[str, KafkaCluster] = {}
        for alias in sorted({alias for f in self.planned_flows for alias in (f.source, f.target)}):
            c = topology.clusters[alias]
            bootstrap = outputs.get(c.bootstrap_servers, c.bootstrap_servers)
            cluster_args: Any = {"alias": c.alias, "bootstrap_servers": bootstrap, "datacenter": c.datacenter}
            if c.security:
                cluster_args["security"] = c.security
            self.clusters[alias] = KafkaCluster(f"{name}-{alias}", cluster_args, pulumi.ResourceOptions(parent=self))
        self.datacenter = pulumi.Output.from_input(args["datacenter"])
        self.flows = pulumi.Output.from_input([f.id for f in self.planned_flows])
        self.all_flows = pulumi.Output.from_input([f.id for f in plan.flows])
        self.plan = pulumi.Output.from_input(local.to_dict())
        self.flow_specs = pulumi.Output.from_input(self.specs)  # type: ignore[arg-type]
        self.flow_spark = pulumi.Output.from_input({f.id: cast(FlowSpark, dict(f.spark)) for f in self.planned_flows})
        self.secret_names = pulumi.Output.from_input(
            {f.id: self.flow_secret_names(f.source, f.target) for f in self.planned_flows}
        )
        self.register_outputs(
            {
                "datacenter": self.datacenter,
                "flows": self.flows,
                "all_flows": self.all_flows,
                "plan": self.plan,
                "flow_specs": self.flow_specs,
                "flow_spark": self.flow_spark,
                "secret_names": self.secret_names,
            }
        )

    def flow_secret_names(self, source: str, target: str) -> list[str]:
        """The directories under /etc/kmirror/secrets a flow between `source` and `target` reads."""
        names = set()
        for m in (*self.clusters[source].materialisations, *self.clusters[target].materialisations):
            if m.kind == "pulumi_config":
                names.add(pulumi_config_secret_name(m.source))
            elif m.kind == "aws_secret":
                names.add(aws_secret_local_name(m.source))
            else:
                names.add(m.source)
        return sorted(names)


def _parse(args: ReplicationTopologyArgs, outputs: dict[str, Any], name: str) -> Topology:
    """The validated topology of `args`; fills `outputs` (placeholder -> output) for output bootstraps."""
    given = [k for k in ("topology", "topology_yaml") if args.get(k) is not None]
    if len(given) != 1:
        found = " and ".join(given) or "neither"
        raise ValidationError([Problem("args", f"give exactly one of topology, topology_yaml; got {found}")], name)
    if "topology_yaml" in given:
        try:
            raw = yaml.safe_load(str(args["topology_yaml"]))
        except yaml.YAMLError as exc:
            raise ValidationError([Problem("topology_yaml", f"not valid YAML: {exc}")], name) from None
    else:
        raw = args["topology"]
    return parse_topology(_placeholders(raw, outputs, name), source=name)


def _placeholders(raw: Any, outputs: dict[str, Any], name: str) -> Any:
    """`raw` with each output bootstrap replaced by a unique placeholder (recorded in `outputs`).

    Raises ValidationError naming every other place that holds an output."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("clusters"), Mapping):
        return raw  # parse_topology reports the shape
    clusters = {}
    for alias, spec in raw["clusters"].items():
        if isinstance(spec, Mapping) and _is_output(spec.get("bootstrap_servers")):
            placeholder = f"{alias}.output.kafka-mirror.invalid:{PLACEHOLDER_PORT}"
            outputs[placeholder] = spec["bootstrap_servers"]
            spec = {**spec, "bootstrap_servers": placeholder}
        clusters[alias] = spec
    result = {**raw, "clusters": clusters}
    if found := _output_paths(result, ""):
        reason = "is a Pulumi output; only clusters.<alias>.bootstrap_servers may be one (the rest decides what exists)"
        raise ValidationError([Problem(path, reason) for path in found], name)
    return result


def _is_output(value: Any) -> bool:
    return isinstance(value, pulumi.Output) or hasattr(value, "__await__")


def _output_paths(value: Any, path: str) -> list[str]:
    if _is_output(value):
        return [path]
    if isinstance(value, Mapping):
        return [p for k, v in value.items() for p in _output_paths(v, f"{path}.{k}" if path else str(k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _output_paths(v, f"{path}[{i}]")]
    return []


def _with_outputs(spec: dict[str, Any], outputs: Mapping[str, Any]) -> pulumi.Input[dict[str, Any]]:
    """The spec with placeholder bootstraps replaced by their outputs (the spec itself when there are none)."""
    ends = [e for e in ("source", "target") if spec[e]["bootstrap_servers"] in outputs]
    if not ends:
        return spec
    values = [outputs[spec[e]["bootstrap_servers"]] for e in ends]

    def fill(resolved: list[Any]) -> dict[str, Any]:
        return {**spec, **{e: {**spec[e], "bootstrap_servers": v} for e, v in zip(ends, resolved, strict=True)}}

    return pulumi.Output.all(*values).apply(fill)
