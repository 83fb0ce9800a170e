"""`kmirror validate [--topology FILE] [--stack NAME]`: check a topology file; exit 0 when valid, 2
with every problem (and its path) on stderr when not.

With `--stack NAME` the topology is the stack's (`stacks/Pulumi.NAME.yaml`), and a production
stack (`kafka-mirror:spark.protect`, true unless set false: Pulumi protect and deletion
protection) is also refused when a cluster its flows write internal topics to has
`internal_topics.replication_factor: 1` (issue 45). A cluster marked `production: true` in the
topology is refused so by every validate."""

from __future__ import annotations

import argparse
from typing import Any

from kmirror.stack.config import DEFAULT_TOPOLOGY, NAMESPACE
from kmirror_cli.commands.plan import add_topology_argument


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("validate", help="Validate a topology file.")
    add_topology_argument(parser)
    parser.add_argument("--stack", metavar="NAME", help="the topology of stack NAME, with its production rules")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kmirror.errors import ValidationError
    from kmirror.estate.planner import load_topology, plan_topology
    from kmirror.flow.internal_sizing import production_problems
    from kmirror.stack.config import read_stack_config

    stack = read_stack_config(args.stack) if args.stack else None
    path = args.topology or (stack.topology if stack else DEFAULT_TOPOLOGY)
    topology = load_topology(path)
    plan = plan_topology(topology)
    spark = stack.config.get(f"{NAMESPACE}:spark") if stack else None
    if stack and isinstance(spark, dict) and spark.get("protect", True) is not False:
        targets = {f.target for f in plan.flows_in(stack.datacenter)}
        sizings = {alias: topology.clusters[alias].internal_topics for alias in targets}
        problems = production_problems(sizings, f"stack {stack.name}, production (spark.protect: true)")
        if problems:
            raise ValidationError(problems, path)
    print(f"{path}: valid; {len(plan.flows)} flow(s) in {len(plan.datacenters)} datacenter(s)")
    return 0
