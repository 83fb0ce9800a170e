"""`kmirror resume ...`: see `kmirror_cli.commands.pause`."""

from __future__ import annotations

from typing import Any

from kmirror_cli.commands import pause


def register(subparsers: Any) -> None:
    pause.register(subparsers, "resume")
