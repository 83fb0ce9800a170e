"""The planner: a validated topology -> the flows each datacenter runs, and their flow specs.

One planner for every consumer: `kmirror plan`/`diff`, the Pulumi program and the demo all
call `plan_topology` and `flow_spec_for`, so a preview never disagrees with a deploy.

`Plan.to_dict()` is the stable JSON contract of `kmirror plan --format json`
(docs/topology.md): `{"flows": [...sorted by id], "datacenters": {dc: [flow ids]}}`. A flow
entry holds the flow spec's keys (docs/spark-app.md) with cluster aliases for `source` and
`target`, plus `source_security`/`target_security` (secret *references* only: the topology
cannot hold secret values); `flow_spec_for` adds the connection details.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kmirror.errors import Problem, ValidationError, did_you_mean
from kmirror.estate.topology import Cluster, ResolvedFlow, Topology, load_topology, parse_topology
from kmirror.flow.settings import SELECTION_KEYS
from kmirror.security.config import client_config
from kmirror.security.secret_refs import dns_label

__all__ = ["Plan", "PlannedFlow", "flow_spec_for", "load_topology", "parse_topology", "plan_topology"]

# Keys every flow entry has, in this order; optional flow-spec settings follow, sorted.
CORE_KEYS = ("id", "source", "target", "topology", "run_in", *SELECTION_KEYS, "replication_policy")
MAPPING_KEYS = ("producer", "consumer", "spark")


@dataclass(frozen=True)
class PlannedFlow:
    """One directed flow, placed and with every setting resolved."""

    id: str
    source: str
    target: str
    topology: str
    run_in: str
    topics: tuple[str, ...]
    topics_exclude: tuple[str, ...]
    groups: tuple[str, ...]
    groups_exclude: tuple[str, ...]
    replication_policy: dict[str, Any]
    producer: dict[str, Any] = field(default_factory=dict)
    consumer: dict[str, Any] = field(default_factory=dict)
    spark: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)  # flow-spec options set in the topology
    source_security: dict[str, Any] | None = None
    target_security: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "source": self.source,
            "target": self.target,
            "topology": self.topology,
            "run_in": self.run_in,
            "topics": list(self.topics),
            "topics_exclude": list(self.topics_exclude),
            "groups": list(self.groups),
            "groups_exclude": list(self.groups_exclude),
            "replication_policy": dict(self.replication_policy),
            "producer": dict(self.producer),
            "consumer": dict(self.consumer),
            "spark": dict(self.spark),
        }
        out.update({k: self.options[k] for k in sorted(self.options)})
        if self.source_security:
            out["source_security"] = self.source_security
        if self.target_security:
            out["target_security"] = self.target_security
        return out


@dataclass(frozen=True)
class Plan:
    flows: tuple[PlannedFlow, ...]
    datacenters: dict[str, list[str]]

    def flows_in(self, datacenter: str) -> list[PlannedFlow]:
        """The flows a stack deployed in `datacenter` runs (those whose `run_in` it is)."""
        return [f for f in self.flows if f.run_in == datacenter]

    def flow(self, flow_id: str) -> PlannedFlow:
        for f in self.flows:
            if f.id == flow_id:
                return f
        ids = [f.id for f in self.flows]
        raise ValidationError([Problem("flow", f"no flow {flow_id!r} in the plan{did_you_mean(flow_id, ids)}")])

    def for_datacenter(self, datacenter: str) -> Plan:
        """The plan a single stack sees; raises ValidationError for an unknown datacenter."""
        if datacenter not in self.datacenters:
            known = ", ".join(self.datacenters)
            message = f"unknown datacenter {datacenter!r}{did_you_mean(datacenter, self.datacenters)}; known: {known}"
            raise ValidationError([Problem("--datacenter", message)])
        flows = tuple(self.flows_in(datacenter))
        return Plan(flows, {datacenter: [f.id for f in flows]})

    def to_dict(self) -> dict[str, Any]:
        return {
            "flows": [f.to_dict() for f in self.flows],
            "datacenters": {k: list(v) for k, v in self.datacenters.items()},
        }


def _planned(flow: ResolvedFlow, clusters: Mapping[str, Cluster]) -> PlannedFlow:
    settings = dict(flow.settings)
    picked = {k: settings.pop(k) for k in (*SELECTION_KEYS, "replication_policy", *MAPPING_KEYS)}
    return PlannedFlow(
        id=flow.id,
        source=flow.source,
        target=flow.target,
        topology=flow.topology,
        run_in=flow.run_in,
        topics=tuple(picked["topics"]),
        topics_exclude=tuple(picked["topics_exclude"]),
        groups=tuple(picked["groups"]),
        groups_exclude=tuple(picked["groups_exclude"]),
        replication_policy=_policy_dict(picked["replication_policy"]),
        producer=dict(picked["producer"]),
        consumer=dict(picked["consumer"]),
        spark=dict(picked["spark"]),
        options=settings,
        source_security=clusters[flow.source].security,
        target_security=clusters[flow.target].security,
    )


def _policy_dict(config: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical form: `{type: default, separator}` or `{type: identity}`."""
    if config.get("type", "default") == "identity":
        return {"type": "identity"}
    return {"type": "default", "separator": config.get("separator", ".")}


def plan_topology(topology: Topology) -> Plan:
    """Every flow of a validated topology, sorted by id, and the flows each datacenter runs.

    Every datacenter that holds a cluster is listed, with `[]` when it runs no flow, so a
    stack can tell "nothing to deploy here" from a typo in its datacenter name.
    """
    flows = tuple(_planned(topology.flows[fid], topology.clusters) for fid in sorted(topology.flows))
    datacenters: dict[str, list[str]] = {dc: [] for dc in topology.datacenters}
    for f in flows:
        datacenters.setdefault(f.run_in, []).append(f.id)
    return Plan(flows, {dc: datacenters[dc] for dc in sorted(datacenters)})


def _endpoint(cluster: Cluster) -> dict[str, Any]:
    out = {
        "alias": cluster.alias,
        "bootstrap_servers": cluster.bootstrap_servers,
        "config": client_config(cluster.security),
    }
    sizing = cluster.internal_topics.to_dict()  # the app creates the cluster's internal topics so
    return {**out, "internal_topics": sizing} if sizing else out


def checkpoint_dir_name(flow_id: str) -> str:
    """`west-1->east-1` -> `west-1-to-east-1`: one checkpoint directory per flow."""
    return dns_label(flow_id.replace("->", "-to-"))


def flow_spec_for(topology: Topology, flow: PlannedFlow, checkpoint_root: str) -> dict[str, Any]:
    """The flow spec the Spark app runs (kmirror/flow/spec.py): the plan entry with cluster
    connection details (librdkafka config with secret *references*, never values) and a
    checkpoint location under `checkpoint_root`."""
    entry = flow.to_dict()
    entry.pop("source_security", None)
    entry.pop("target_security", None)
    entry["source"] = _endpoint(topology.clusters[flow.source])
    entry["target"] = _endpoint(topology.clusters[flow.target])
    entry["checkpoint_location"] = f"{checkpoint_root.rstrip('/')}/{checkpoint_dir_name(flow.id)}"
    return entry
