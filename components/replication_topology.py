"""ReplicationTopology: the topology file's flows, planned by the same pure planner as
`kmirror plan` (so a preview never disagrees with the plan), narrowed to one datacenter.

Children: one `KafkaCluster` per cluster a local flow touches, named `<name>-<alias>`.
Attributes: `plan` (the whole plan), `flows` (PlannedFlows run in the datacenter),
`flow_specs` (flow id -> the flow spec the app runs), `clusters` (alias -> KafkaCluster).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from components.kafka_cluster import KafkaCluster, KafkaClusterArgs
from kmirror.planner import PlannedFlow, flow_spec_for, plan_topology
from kmirror.topology import Topology

TOKEN = "kafka-mirror:index:ReplicationTopology"


@dataclass
class ReplicationTopologyArgs:
    topology: Topology  # `kmirror.planner.load_topology(path)`: validated
    datacenter: str  # the stack's datacenter; an unknown one raises ValidationError
    checkpoint_root: str


class ReplicationTopology(pulumi.ComponentResource):
    """Outputs: `datacenter`, `flows` (ids run here), `all_flows` (every planned id), `plan` (JSON contract)."""

    def __init__(self, name: str, args: ReplicationTopologyArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        plan = plan_topology(args.topology)
        local = plan.for_datacenter(args.datacenter)  # raises before anything is registered
        super().__init__(TOKEN, name, {}, opts)
        self.plan = plan
        self.flows: list[PlannedFlow] = list(local.flows)
        self.flow_specs: dict[str, dict[str, Any]] = {
            f.id: flow_spec_for(args.topology, f, args.checkpoint_root) for f in self.flows
        }
        aliases = sorted({alias for f in self.flows for alias in (f.source, f.target)})
        self.clusters: dict[str, KafkaCluster] = {}
        for alias in aliases:
            c = args.topology.clusters[alias]
            self.clusters[alias] = KafkaCluster(
                f"{name}-{alias}",
                KafkaClusterArgs(c.alias, c.bootstrap_servers, c.datacenter, c.security),
                pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs(
            {
                "datacenter": args.datacenter,
                "flows": [f.id for f in self.flows],
                "all_flows": [f.id for f in plan.flows],
                "plan": local.to_dict(),
            }
        )
