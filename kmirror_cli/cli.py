"""`kmirror`: the command line. Each subcommand lives in `kmirror_cli/commands/<name>.py` and
exposes `register(subparsers)`, which adds its parser and sets `func(args) -> int`.

Exit codes: 0 success, 1 runtime failure, 2 invalid input (message on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from kmirror.errors import KmirrorError

# Imported lazily so `kmirror plan` never pays for pyspark or confluent-kafka.
COMMAND_MODULES = {
    "validate": "kmirror_cli.commands.validate",
    "plan": "kmirror_cli.commands.plan",
    "diff": "kmirror_cli.commands.diff",
    "run": "kmirror_cli.commands.run",
    "demo": "kmirror_cli.commands.demo",
    "translate": "kmirror_cli.commands.translate",
    "lag": "kmirror_cli.commands.lag",
    "failover": "kmirror_cli.commands.failover",
    "failback": "kmirror_cli.commands.failback",
    "stack-info": "kmirror_cli.commands.stack_info",
    "import": "kmirror_cli.commands.import_mm",
    "acls": "kmirror_cli.commands.acls",
    "drill": "kmirror_cli.commands.drill",
    "status": "kmirror_cli.commands.status",
    "pause": "kmirror_cli.commands.pause",
    "resume": "kmirror_cli.commands.resume",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kmirror", description="Kafka cross-cluster replication as code.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMAND_MODULES.items():
        if only is None or only == name:
            importlib.import_module(module).register(subparsers)
        else:
            subparsers.add_parser(name)  # listed in help; loaded only when chosen
    return parser


def _ask_librdkafka() -> None:
    """Client properties are checked by librdkafka itself where confluent-kafka is installed."""
    try:
        import confluent_kafka
    except ImportError:
        return
    from kmirror.security.client_properties import register_librdkafka

    register_librdkafka(confluent_kafka)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _ask_librdkafka()
    chosen = argv[0] if argv and argv[0] in COMMAND_MODULES else None
    parser = build_parser(chosen)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except KmirrorError as exc:
        print(f"kmirror {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
