"""`one-stack-per-flow`: the same flow deployed by two stacks (two writers on one target).

The engine runs the pack once per stack and shows it only that stack's resources, so the rule
rebuilds the estate the way the program does: every stack config (`stacks/Pulumi.<stack>.yaml`,
read by `kmirror.stack.config`) names its datacenter and topology file, and the planner
(`kmirror.estate.planner.plan_topology`, the one `kmirror plan` and the program use) says which flows
each datacenter runs. Each app of this stack (SparkApplication or EMR step, `rules.app_flow_ids`)
must run a flow the plan gives this stack's datacenter, and no other stack may be planned to run
it (two stacks naming one datacenter, or two topology files placing a flow twice).

Why the planner and not only flow annotations: annotations show what *this* stack deploys; what
the other stacks deploy is only known from their config and the topology, and a preview must
catch the second writer before it exists, not after both stacks are up.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from .rules import Resource, app_flow_ids

STACK_PROJECT_DIR_ENV = "KMIRROR_PROJECT_DIR"
# Where the pack looks by default, first match with a `stacks/` directory wins: the working directory
# (a Python language host runs the pack in the program's directory, the project: found by the real
# engine, issue 40), then its parent (an engine that runs the pack in its own `policy/` directory).
DEFAULT_PROJECT_DIRS = (".", "..")


@dataclass(frozen=True)
class Estate:
    """What every stack of the project deploys, per the planner."""

    stack_datacenters: Mapping[str, str]  # stack -> datacenter
    stack_flows: Mapping[str, tuple[str, ...]]  # stack -> flow ids its plan deploys
    app_flows: Mapping[str, str] = field(default_factory=dict)  # app name -> flow id (EMR steps are named so)
    stack_config: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # stack -> `kafka-mirror:spark`

    def stacks_running(self, flow_id: str) -> list[str]:
        return sorted(s for s, flows in self.stack_flows.items() if flow_id in flows)


def stack_of_urn(urn: str) -> str:
    """`urn:pulumi:west::kafka-mirror::type::name` -> `west`; raises ValueError for anything else."""
    parts = urn.split("::")
    if len(parts) < 4 or not parts[0].startswith("urn:pulumi:"):
        raise ValueError(f"not a Pulumi URN: {urn!r}")
    return parts[0][len("urn:pulumi:") :]


def estate_violations(stack: str, resources: Iterable[Resource], estate: Estate) -> list[str]:
    """Apps of `stack` whose flow another stack is planned to run too, or that its own plan does not run."""
    if stack not in estate.stack_flows:
        known = ", ".join(sorted(estate.stack_flows)) or "none"
        return [
            f"stack {stack}: no stacks/Pulumi.{stack}.yaml in the project (stacks: {known}); the estate "
            "cannot be checked for flows deployed twice"
        ]
    datacenter = estate.stack_datacenters[stack]
    out = []
    for app, found in app_flow_ids(resources):
        flow_id = estate.app_flows.get(found, found)
        running = estate.stacks_running(flow_id)
        others = [s for s in running if s != stack]
        if stack not in running:
            where = f"stack {', '.join(others)} deploys it" if others else "no stack's plan deploys it"
            out.append(
                f"{app} runs flow {flow_id}, which the topology does not place in datacenter {datacenter} "
                f"(stack {stack}); {where}: deploy only the flows `kmirror plan --stack {stack}` lists"
            )
        elif others:
            dcs = ", ".join(f"{s} ({estate.stack_datacenters[s]})" for s in others)
            out.append(
                f"{app} runs flow {flow_id}, which stack {dcs} also deploys: two writers on one target; "
                "give each datacenter exactly one stack and each flow one run_in"
            )
    return out


def public_endpoint_allowed(stack: str, estate: Estate) -> bool:
    """`kafka-mirror:spark.cluster.endpoint_public_access: true` in the stack's config file."""
    cluster = (estate.stack_config.get(stack) or {}).get("cluster") or {}
    return isinstance(cluster, Mapping) and cluster.get("endpoint_public_access") is True


def project_dir(config: Mapping[str, Any], environ: Mapping[str, str]) -> Path:
    """The project holding `stacks/`: policy config `project_dir`, else $KMIRROR_PROJECT_DIR, else
    the first of DEFAULT_PROJECT_DIRS holding `stacks/` (relative to the working directory)."""
    chosen = config.get("project_dir") or environ.get(STACK_PROJECT_DIR_ENV)
    if chosen:
        return Path(str(chosen))
    found = [Path(d) for d in DEFAULT_PROJECT_DIRS if (Path(d) / "stacks").is_dir()]
    return found[0] if found else Path(DEFAULT_PROJECT_DIRS[-1])


@lru_cache(maxsize=4)
def load_estate(project: Path) -> Estate:
    """Plan every stack of `project/stacks` with the program's planner; raises kmirror errors
    (ValidationError naming the file and key) for a bad stack config or topology."""
    from kafka_mirror.eks.specs import app_name
    from kmirror.estate.planner import load_topology, plan_topology
    from kmirror.stack.config import NAMESPACE, available_stacks, read_stack_config

    stacks_dir = project.resolve() / "stacks"
    datacenters: dict[str, str] = {}
    flows: dict[str, tuple[str, ...]] = {}
    configs: dict[str, Mapping[str, Any]] = {}
    plans: dict[str, Any] = {}
    for stack in available_stacks(stacks_dir):
        config = read_stack_config(stack, stacks_dir)
        if config.topology not in plans:
            plans[config.topology] = plan_topology(load_topology(config.topology))
        datacenters[stack] = config.datacenter
        flows[stack] = tuple(f.id for f in plans[config.topology].flows_in(config.datacenter))
        spark = config.config.get(f"{NAMESPACE}:spark")
        configs[stack] = spark if isinstance(spark, Mapping) else {}
    apps = {app_name(flow_id): flow_id for ids in flows.values() for flow_id in ids}
    return Estate(datacenters, flows, apps, configs)
