"""`kmirror validate [--topology FILE]`: check a topology file; exit 0 when valid, 2 with every
problem (and its path) on stderr when not."""

from __future__ import annotations

import argparse
from typing import Any

from kmirror.stack.config import DEFAULT_TOPOLOGY
from kmirror_cli.commands.plan import add_topology_argument


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("validate", help="Validate a topology file.")
    add_topology_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kmirror.estate.planner import load_topology, plan_topology

    path = args.topology or DEFAULT_TOPOLOGY
    plan = plan_topology(load_topology(path))
    print(f"{path}: valid; {len(plan.flows)} flow(s) in {len(plan.datacenters)} datacenter(s)")
    return 0
