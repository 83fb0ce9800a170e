"""`kmirror plan [--topology FILE] [--datacenter DC | --stack NAME | --all] [--format text|json|mermaid|dot]
[--output FILE]`: the flows each datacenter runs.

`--stack NAME` reads `stacks/Pulumi.NAME.yaml` (`kafka-mirror:datacenter`, `kafka-mirror:topology`),
exactly as the Pulumi program does. Invalid input exits 2 with every problem on stderr; with
`--output` the file is written atomically (a failed run never leaves a partial plan behind).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from kmirror.stack.config import DEFAULT_TOPOLOGY, read_stack_config

FORMATS = ("text", "json", "mermaid", "dot")


def add_topology_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topology", metavar="FILE", help=f"topology file (default {DEFAULT_TOPOLOGY})")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("plan", help="Plan the flows of a topology, per datacenter.")
    add_topology_argument(parser)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--datacenter", metavar="DC", help="only the flows that run in datacenter DC")
    where.add_argument("--stack", metavar="NAME", help="only the flows of stack NAME (stacks/Pulumi.NAME.yaml)")
    where.add_argument("--all", action="store_true", help="every datacenter (the default)")
    parser.add_argument("--format", choices=FORMATS, default="text")
    parser.add_argument("--output", metavar="FILE", help="write to FILE (atomically) instead of stdout")
    parser.set_defaults(func=run)


def write_atomically(path: str, text: str) -> None:
    """Write `text` to `path` via a temporary file in the same directory and a rename."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run(args: argparse.Namespace) -> int:
    from kmirror.estate.plan_render import render_dot, render_json, render_mermaid, render_text
    from kmirror.estate.planner import load_topology, plan_topology

    topology_path, datacenter = args.topology, args.datacenter
    if args.stack:
        stack = read_stack_config(args.stack)
        topology_path = topology_path or stack.topology
        datacenter = stack.datacenter
    topology = load_topology(topology_path or DEFAULT_TOPOLOGY)
    plan = plan_topology(topology)
    if datacenter:
        plan = plan.for_datacenter(datacenter)
    datacenters = {alias: c.datacenter for alias, c in topology.clusters.items()}
    renderers = {
        "text": lambda: render_text(plan),
        "json": lambda: render_json(plan),
        "mermaid": lambda: render_mermaid(plan, datacenters),
        "dot": lambda: render_dot(plan, datacenters),
    }
    text = renderers[args.format]()
    if args.output:
        write_atomically(args.output, text)
    else:
        sys.stdout.write(text)
    return 0
