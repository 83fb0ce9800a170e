"""`kmirror run --flow FLOW.json [--once] [--checkpoint DIR] [--master local[*]]`: run the Spark
mirroring app for one flow in this process (same behaviour and exit codes as `python -m spark_app`)."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("run", help="Mirror one flow (or several of one target cluster) with the Spark app.")
    from spark_app.main import add_arguments

    add_arguments(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from spark_app.main import run_cli

    return run_cli(args)
