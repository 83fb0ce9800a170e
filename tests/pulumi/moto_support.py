"""moto in server mode on 127.0.0.1, in this process (so tests can also drive EMR step states).

moto 5.2.1 does not implement EMR CancelSteps (HTTP 500). `with_cancel_steps` adds it to the
server's EMR handler with AWS's semantics for what the provider relies on: PENDING/RUNNING steps
of the cluster become CANCELLED, the answer lists each step as SUBMITTED. moto also leaves every
step but a cluster's first PENDING forever; as on EMR, an added step runs at once while fewer than
the cluster's StepConcurrencyLevel steps are RUNNING (`_add_steps`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from moto.core.responses import ActionResult
from moto.emr.models import Cluster, Step, emr_backends
from moto.emr.responses import ElasticMapReduceResponse
from moto.server import ThreadedMotoServer


def _cancel_steps(self: ElasticMapReduceResponse) -> ActionResult:
    cluster = self.backend.clusters[self._get_param("ClusterId")]
    wanted = set(self._get_param("StepIds", []))
    infos = []
    for step in cluster.steps:
        if step.id in wanted and step.state in ("PENDING", "RUNNING"):
            step.state = "CANCELLED"
            infos.append({"StepId": step.id, "Status": "SUBMITTED", "Reason": ""})
    return ActionResult({"CancelStepsInfoList": infos})


def _add_steps(self: Cluster, steps: list[dict[str, Any]]) -> list[Step]:
    added = []
    for step in steps:
        running = sum(1 for s in self.steps if s.state == "RUNNING")
        made = Step(state="RUNNING" if running < self.step_concurrency_level else "PENDING", **step)
        self.steps.append(made)
        added.append(made)
    self.state = "RUNNING"
    return added


@contextmanager
def moto_server() -> Iterator[str]:
    """A moto server on 127.0.0.1 (free port) with CancelSteps; yields its endpoint URL."""
    had = hasattr(ElasticMapReduceResponse, "cancel_steps")
    ElasticMapReduceResponse.cancel_steps = _cancel_steps  # type: ignore[attr-defined]
    real_add_steps, Cluster.add_steps = Cluster.add_steps, _add_steps  # type: ignore[method-assign]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        Cluster.add_steps = real_add_steps  # type: ignore[method-assign]
        if not had:
            del ElasticMapReduceResponse.cancel_steps  # type: ignore[attr-defined]


def set_step_state(cluster_id: str, step_id: str, state: str) -> None:
    """What EMR does when a streaming step fails or an operator cancels it outside Pulumi.
    (moto's server files EMR calls to 127.0.0.1 under us-east-1 whatever the client's region.)"""
    clusters = [
        backend.clusters[cluster_id]
        for backends in emr_backends.values()
        for backend in backends.values()
        if cluster_id in backend.clusters
    ]
    steps: list[Any] = [s for c in clusters for s in c.steps if s.id == step_id]
    [step] = steps
    step.state = state
