"""`kmirror stack-info STACK region|platform|datacenter`: one setting of a stack config file, for
CI (each stack's AWS region and whether its image is set), read without the Pulumi CLI."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kmirror.errors import Problem, ValidationError
from kmirror.stack.config import NAMESPACE, read_stack_config

FIELDS = ("region", "platform", "datacenter")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("stack-info", help="Print one setting of a stack (for CI).", description=__doc__)
    parser.add_argument("stack")
    parser.add_argument("field", choices=FIELDS)
    parser.add_argument("--stacks-dir", default="stacks")
    parser.set_defaults(func=run)


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


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(stack_field(args.stack, args.field, args.stacks_dir) + "\n")
    return 0
