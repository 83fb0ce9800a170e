"""Several flows in one application on the standalone cluster, as `spark.apps_per: target` deploys
them: `spark-submit ... kmirror_main.py --flow west.json --flow north.json`, two sources, one
target. One flow's source is frozen (SIGSTOP) while the other keeps mirroring; after it resumes,
the frozen flow copies everything; a SIGTERM to spark-submit's JVM stops both after their batch
(exit 0). The same on the local master: tests/e2e/test_several_flows_e2e.py."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import ClusterApp
from tests.cluster.standalone import StandaloneCluster
from tests.e2e.fault_helpers import (
    Clock,
    expected_values,
    produce_values,
    report,
    target_values,
    wait_mirrored,
    west_and_north,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(1200)]
FIRST_BATCH_TIMEOUT_S = 480.0  # a hang detector, as in test_cluster_faults: minutes of start-up under load


def test_two_flows_in_one_cluster_app_one_source_frozen_the_other_keeps_mirroring_nothing_lost(
    clusters: Any, unique: str, tmp_path: Path, cluster_app: Callable[..., ClusterApp], standalone: StandaloneCluster
) -> None:
    clock = Clock()
    topic, partitions = f"cmulti-{unique}", 2
    with west_and_north(clusters, unique, topic, partitions, tmp_path) as (north, west, north_flow):
        north_path = tmp_path / "north.json"
        north_path.write_text(json.dumps(north_flow))

        west_ends = produce_values(clusters.source, topic, partitions, 200, "w1")
        north_ends = produce_values(north.bootstrap_servers, topic, partitions, 200, "n1")
        app = cluster_app(west).start("--flow", str(north_path))
        wait_mirrored(app, clusters.source, west, topic, west_ends, timeout_s=FIRST_BATCH_TIMEOUT_S)
        wait_mirrored(app, north.bootstrap_servers, north_flow, topic, north_ends, timeout_s=FIRST_BATCH_TIMEOUT_S)
        clock.lap("both flows mirrored")
        north.pause()
        try:
            time.sleep(3)  # the frozen flow's next batches hang on its source
            west_ends = produce_values(clusters.source, topic, partitions, 200, "w2")
            wait_mirrored(app, clusters.source, west, topic, west_ends, timeout_s=180)
            clock.lap("west mirrored while north frozen")
        finally:
            north.resume()
        north_ends = produce_values(north.bootstrap_servers, topic, partitions, 200, "n2")
        wait_mirrored(app, north.bootstrap_servers, north_flow, topic, north_ends, timeout_s=180)
        clock.lap("north recovered")
        assert app.stop() == 0, app.log()[-3000:]
        west_got = target_values(clusters.target, f"west.{topic}", partitions)
        north_got = target_values(clusters.target, f"north.{topic}", partitions)
    log = app.log()
    assert log.count("kmirror progress") >= 4, log[-3000:]  # both flows' batches, through one driver
    west_sent = expected_values(partitions, 200, "w1") + expected_values(partitions, 200, "w2")
    north_sent = expected_values(partitions, 200, "n1") + expected_values(partitions, 200, "n2")
    assert report("cluster: two flows, one app: west", west_sent, west_got, seconds=dict(clock.laps)).missing == 0
    assert report("cluster: two flows, one app: north frozen", north_sent, north_got).missing == 0
