"""Test-only: a daemon the security tests run beside the brokers (a KDC, a TLS proxy)."""

from __future__ import annotations

import subprocess
from typing import Any

from kmirror_cli.local_brokers import stop_process, wait_for_port


class BackgroundProcess:
    """A context manager whose `__enter__` calls `_start`: the process in its own session, output
    discarded, until it listens on its port (15 s at most); stopped when the block ends."""

    process: subprocess.Popen[bytes] | None = None

    def _start(self, argv: list[str], port: int, **popen: Any) -> None:
        self.process = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, **popen
        )
        wait_for_port(port, timeout_s=15)

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            stop_process(self.process)
            self.process = None
