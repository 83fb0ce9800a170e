"""Two flows in one application (spark_app.several_flows) against real brokers, in-process on
the session's local SparkSession: different sources, one target. One flow's source is frozen
(SIGSTOP) while the other keeps mirroring new records; after it resumes, the frozen flow copies
everything; nothing is lost on either flow."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kmirror.flow.spec import parse_flow_spec
from spark_app.main import run_flow
from spark_app.several_flows import run_flows
from tests.e2e.fault_helpers import (
    APP_START_TIMEOUT_S,
    Clock,
    committed,
    expected_values,
    group_of,
    produce_values,
    report,
    target_values,
    wait_until,
    west_and_north,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_two_flows_one_target_one_source_frozen_the_other_keeps_mirroring_nothing_lost(
    spark: Any, clusters: Any, unique: str, tmp_path: Path
) -> None:
    clock = Clock()
    topic, partitions = f"multi-{unique}", 2
    with west_and_north(clusters, unique, topic, partitions, tmp_path) as (north, west_flow, north_flow):
        specs = [parse_flow_spec(west_flow, "west.json"), parse_flow_spec(north_flow, "north.json")]
        stop = threading.Event()
        codes: list[int] = []
        app = threading.Thread(
            target=lambda: codes.append(run_flows(specs, run_flow, spark=spark, stop=stop, first_s=1.0))
        )

        def mirrored(source: str, flow: dict[str, Any], ends: dict[int, int], timeout_s: float) -> float:
            def reached() -> bool:
                assert app.is_alive(), "the application ended"
                now = committed(source, group_of(flow), topic, partitions)
                return all(now.get(p, -1) >= end for p, end in ends.items())

            return wait_until(f"{flow['id']} mirrored up to {ends}", reached, timeout_s)

        west_ends = produce_values(clusters.source, topic, partitions, 200, "w1")
        north_ends = produce_values(north.bootstrap_servers, topic, partitions, 200, "n1")
        app.start()
        try:
            mirrored(clusters.source, west_flow, west_ends, APP_START_TIMEOUT_S)
            mirrored(north.bootstrap_servers, north_flow, north_ends, APP_START_TIMEOUT_S)
            clock.lap("both flows mirrored")
            north.pause()
            try:
                time.sleep(3)  # the frozen flow's next batches hang on its source
                west_ends = produce_values(clusters.source, topic, partitions, 200, "w2")
                clock.lap("west produced, north frozen")
                mirrored(clusters.source, west_flow, west_ends, 120)
                clock.lap("west mirrored while north frozen")
            finally:
                north.resume()
            north_ends = produce_values(north.bootstrap_servers, topic, partitions, 200, "n2")
            mirrored(north.bootstrap_servers, north_flow, north_ends, 120)
            clock.lap("north recovered")
        finally:
            stop.set()
            app.join(60)
        assert codes == [0]
        west_got = target_values(clusters.target, f"west.{topic}", partitions)
        north_got = target_values(clusters.target, f"north.{topic}", partitions)
    west_sent = expected_values(partitions, 200, "w1") + expected_values(partitions, 200, "w2")
    north_sent = expected_values(partitions, 200, "n1") + expected_values(partitions, 200, "n2")
    assert report("two flows, one app: west", west_sent, west_got, seconds=dict(clock.laps)).missing == 0
    assert report("two flows, one app: north frozen", north_sent, north_got).missing == 0
