"""The standalone Spark cluster of the cluster suite (tests/cluster/standalone.py), once per
session, and the app submitted to it as a killable process.

A failing test prints the tail of the daemons' and executors' logs; every log stays under the
session's base directory (pytest's basetemp, `spark-cluster/`).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.standalone import StandaloneCluster
from tests.e2e.fault_helpers import MirrorApp

ROOT = Path(__file__).resolve().parents[2]
ENTRY = str(ROOT / "scripts" / "kmirror_main.py")  # what the EKS image and the EMR step submit


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def standalone(spark_cluster: StandaloneCluster, request: pytest.FixtureRequest) -> Iterator[StandaloneCluster]:
    """The session's cluster with both workers alive; its logs printed when the test failed."""
    spark_cluster.ensure_workers()
    yield spark_cluster
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(f"===== Spark standalone logs ({spark_cluster.base}) =====\n{spark_cluster.logs_tail()}")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]
    return report


class ClusterApp(MirrorApp):
    """The app on the standalone cluster: `spark-submit --master spark://... scripts/kmirror_main.py`
    (`via="submit"`, as EKS and EMR run it), or `python -m spark_app --master spark://...`
    (`via="python"`: the app builds its session itself, with its local start-up measures)."""

    cluster: StandaloneCluster
    via: str = "submit"

    def start(self, *extra: str) -> ClusterApp:
        self.runs += 1
        env = self.cluster.env()
        if self.via == "submit":
            command = self.cluster.submit_command(ENTRY, "--flow", str(self.flow_path), *extra)
        else:
            submit = self.cluster.submit_command("pyspark-shell")[1:]  # the same confs, for pyspark's launcher
            submit = submit[submit.index("--deploy-mode") :]  # --master comes from the app's own flag
            env["PYSPARK_SUBMIT_ARGS"] = subprocess.list2cmdline(submit)
            command = [
                sys.executable,
                "-m",
                "spark_app",
                "--flow",
                str(self.flow_path),
                "--master",
                self.cluster.url,
                *extra,
            ]
        with self.log_path.open("ab") as log:
            log.write(f"===== run {self.runs} ({self.via}) =====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True
            )
        return self

    def stop(self, timeout_s: float = 90.0) -> int:
        """SIGTERM to the process started (under spark-submit: its JVM, the process a pod deletion or
        a YARN kill signals); returns the exit code of the whole submission. The JVM hands the signal
        to the app's Python driver (`spark_app.jvm_signals`), which stops after its current batch:
        the JVM used to exit 143 at once and kill the driver mid-batch. Asserts the driver said so."""
        assert self.proc is not None
        if self.via != "submit":
            return super().stop(timeout_s)
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout_s)
        finally:
            self.cleanup()
        assert "stopping after the current batch" in self.log(), self.log()[-3000:]
        return code

    def run(self, *extra: str, timeout_s: float = 480.0) -> None:
        """Run to its end (`--once`); fails with its log and the cluster's when it exits non-zero. The
        timeout is a hang detector: under a load of 15-20 on 2 cores a python-loop --once took ~250 s."""
        self.start(*extra)
        code = self.wait(timeout_s)
        assert code == 0, f"the app exited {code}:\n{self.log()[-4000:]}\n{self.cluster.logs_tail()}"


@pytest.fixture
def cluster_app(standalone: StandaloneCluster, tmp_path: Path) -> Iterator[Callable[..., ClusterApp]]:
    apps: list[ClusterApp] = []

    def make(flow: dict[str, Any], via: str = "submit") -> ClusterApp:
        path = tmp_path / f"flow-{len(apps)}.json"
        path.write_text(json.dumps(flow))
        app = ClusterApp(path, tmp_path / f"app-{len(apps)}.log")
        app.cluster, app.via = standalone, via
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.cleanup()
