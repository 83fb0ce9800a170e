"""`--flow` for the operator commands (lag, translate, failover, failback, acls): a flow spec JSON
file as the app takes it, or a flow id (`west-1->east-1`) planned from the topology (issue 46):
`--topology FILE`, or `--stack NAME` (its `kafka-mirror:topology`, and the flow must run in its
datacenter). The spec is built by the planner the deploy uses (`flow_spec_for`), so it names the
same clusters, selections, options and secret *references* the deployed app resolves.
"""

from __future__ import annotations

import argparse
from typing import Any

from kmirror.errors import Problem, ValidationError, did_you_mean
from kmirror.flow.spec import FlowSpec, load_flow_spec, parse_flow_spec

# Operator commands never run the flow's Spark queries: the checkpoint location is not read.
_NO_CHECKPOINTS = "/kmirror-operator-command-no-checkpoints"


def add_flow_arguments(parser: Any, flow_help: str = "flow spec JSON file", flow_required: bool = True) -> None:
    """`--flow` (a file, or a flow id with `--topology`/`--stack`), `--topology` and `--stack`."""
    parser.add_argument(
        "--flow", required=flow_required, help=f"{flow_help}; or a flow id ('a->b') with --topology or --stack"
    )
    parser.add_argument("--topology", metavar="FILE", help="the topology file: --flow is then a flow id")
    parser.add_argument(
        "--stack",
        metavar="NAME",
        help="stack NAME (stacks/Pulumi.NAME.yaml): its topology (unless --topology), "
        "and the flow must run in its datacenter",
    )


def load_flow(args: argparse.Namespace) -> FlowSpec:
    """The flow spec `--flow` names (see the module doc). Raises ValidationError naming the flag,
    the value and the fix (an unknown flow id lists the known ones; a flow another stack runs
    names that stack's datacenter)."""
    topology_path, stack = getattr(args, "topology", None), getattr(args, "stack", None)
    if topology_path is None and stack is None:
        return load_flow_spec(args.flow)
    from kmirror.estate.planner import flow_spec_for, plan_topology
    from kmirror.estate.topology import load_topology

    datacenter = None
    if stack is not None:
        from kmirror.stack.config import read_stack_config

        config = read_stack_config(stack)
        topology_path, datacenter = topology_path or config.topology, config.datacenter
    assert topology_path is not None  # given, or the stack's (read_stack_config always sets one)
    topology = load_topology(topology_path)
    plan = plan_topology(topology)
    known = [f.id for f in plan.flows]
    if args.flow not in known:
        raise ValidationError(
            [
                Problem(
                    "--flow",
                    f"no flow {args.flow!r} in {topology_path}"
                    f"{did_you_mean(args.flow, known)}; flows: {', '.join(known)}",
                )
            ]
        )
    flow = plan.flow(args.flow)
    if datacenter is not None and flow.run_in != datacenter:
        raise ValidationError(
            [
                Problem(
                    "--flow",
                    f"flow {args.flow!r} runs in datacenter {flow.run_in!r}, not in "
                    f"stack {stack!r}'s {datacenter!r}; use that datacenter's stack or "
                    "--topology alone",
                )
            ]
        )
    return parse_flow_spec(flow_spec_for(topology, flow, _NO_CHECKPOINTS), source=f"{topology_path} flow {flow.id}")


def planned_flows(args: argparse.Namespace) -> list[FlowSpec]:
    """Every flow of `--topology` (all of them) or `--stack` (those that run in its datacenter),
    in plan order, for a command given no `--flow`. Raises ValidationError when neither is given."""
    topology_path, stack = getattr(args, "topology", None), getattr(args, "stack", None)
    if topology_path is None and stack is None:
        raise ValidationError(
            [Problem("--flow", "missing; give --flow FLOW.json, or --topology FILE / --stack NAME (every flow of it)")]
        )
    from kmirror.estate.planner import flow_spec_for, plan_topology
    from kmirror.estate.topology import load_topology

    datacenter = None
    if stack is not None:
        from kmirror.stack.config import read_stack_config

        config = read_stack_config(stack)
        topology_path, datacenter = topology_path or config.topology, config.datacenter
    assert topology_path is not None
    topology = load_topology(topology_path)
    return [
        parse_flow_spec(flow_spec_for(topology, flow, _NO_CHECKPOINTS), source=f"{topology_path} flow {flow.id}")
        for flow in plan_topology(topology).flows
        if datacenter is None or flow.run_in == datacenter
    ]
