"""`kmirror stack-info STACK region|platform|datacenter`: one setting of a stack config file, for
CI (each stack's AWS region and whether its image is set), read without the Pulumi CLI.

`kmirror stack-info --matrix STACK...`: the GitHub Actions matrix of the per-stack jobs (preview,
drift), each stack with the `runs-on` labels of its runner, as one line of JSON:
`{"include": [{"stack": "east", "runs_on": ["self-hosted", "kmirror-east"]}, ...]}`.
`kmirror stack-info --up-runner ORDER`: the `runs-on` labels (JSON list) of the one job that deploys
ORDER (`kmirror diff --format stack-order`); exit 2 naming the stacks when they need two VPC runners.
A stack with `spark.cluster.deploy_from_vpc: true` runs on its `runner_labels`, others on ubuntu-latest
(kmirror.stack.runners)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kmirror.errors import Problem, ValidationError
from kmirror.stack.config import NAMESPACE, read_stack_config

FIELDS = ("region", "platform", "datacenter")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("stack-info", help="Print one setting of a stack (for CI).", description=__doc__)
    parser.add_argument("stack", nargs="?")
    parser.add_argument("field", nargs="?", choices=FIELDS)
    parser.add_argument("--stacks-dir", default="stacks")
    ci = parser.add_mutually_exclusive_group()
    ci.add_argument("--matrix", nargs="+", metavar="STACK", help="the per-stack jobs' matrix with each runs_on (JSON)")
    ci.add_argument("--up-runner", metavar="ORDER", help="runs-on (JSON list) of the job deploying ORDER (JSON list)")
    parser.set_defaults(func=run, parser=parser)


def stack_field(stack: str, field: str, stacks_dir: str = "stacks") -> str:
    """The stack's `aws:region`, `kafka-mirror:spark.platform` or datacenter; raises ValidationError when unset."""
    config = read_stack_config(stack, stacks_dir)
    if field == "datacenter":
        return config.datacenter
    spark = config.config.get(f"{NAMESPACE}:spark") or {}
    value = config.config.get("aws:region") if field == "region" else spark.get("platform")
    if not isinstance(value, str) or not value:
        key = "aws:region" if field == "region" else f"{NAMESPACE}:spark.platform"
        raise ValidationError([Problem(f"config.{key}", "required (CI reads it per stack)")], f"stack {stack}")
    return value


def _order(text: str) -> list[str]:
    try:
        order = json.loads(text)
    except json.JSONDecodeError:
        order = None
    if not isinstance(order, list) or not all(isinstance(s, str) for s in order):
        raise ValidationError(
            [
                Problem(
                    "--up-runner", f"expected a JSON list of stacks (kmirror diff --format stack-order), got {text!r}"
                )
            ]
        )
    return order


def run(args: argparse.Namespace) -> int:
    from kmirror.stack import runners

    if args.matrix is not None or args.up_runner is not None:
        if args.stack is not None:
            args.parser.error("--matrix and --up-runner take no STACK FIELD")
        if args.matrix is not None:
            found: Any = runners.matrix(args.matrix, args.stacks_dir)
        else:
            found = runners.up_runner(_order(args.up_runner), args.stacks_dir)
        sys.stdout.write(json.dumps(found, separators=(",", ":")) + "\n")
        return 0
    if args.stack is None or args.field is None:
        args.parser.error(f"give STACK FIELD ({'|'.join(FIELDS)}), --matrix STACK... or --up-runner ORDER")
    sys.stdout.write(stack_field(args.stack, args.field, args.stacks_dir) + "\n")
    return 0
