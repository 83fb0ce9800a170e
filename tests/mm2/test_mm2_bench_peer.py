"""The benchmark's `mm2` contender (bench/mm2_run.py, issue 23 part 4) on real brokers: a real
MirrorMaker 2 copies a small topic, the copy window and its CPU come back, the output passes
the benchmark's own checks (count and record-by-record sample), and MM2 is stopped afterwards."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.measure import add_fences, create_topics, produce_share
from bench.mm2_run import Mm2Flow, run_mm2
from bench.verify import verify_counts, verify_sample
from kmirror_cli.local_kafka import DEFAULT_LINE, resolve_line
from kmirror_cli.local_mm2 import fetch_mm2

pytestmark = [pytest.mark.e2e, pytest.mark.real_kafka, pytest.mark.slow]


def test_mm2_contender_copies_all_records_measures_its_window_and_stops(clusters, unique: str, tmp_path: Path) -> None:
    topic, nparts = f"mm2-peer-{unique}", 2
    create_topics(clusters.source, [topic], nparts)
    expected = produce_share(clusters.source, topic, list(range(nparts)), 3000, 100, nparts)["counts"]
    add_fences(clusters.source, topic, nparts)
    flow = Mm2Flow(f"peer{unique}", "east", clusters.source, clusters.target, topic, tasks=2)
    create_topics(clusters.target, [flow.target_topic], nparts)
    version = getattr(clusters.source_broker, "version", None) or resolve_line(DEFAULT_LINE)

    result = run_mm2(flow, fetch_mm2(version), tmp_path, nparts, timeout_s=240)

    assert result["startup_s"] > 0 and result["start"] <= result["end"]
    assert result["cpu_s"] >= 0 and result["rss_mib"] > 0
    assert result["stopped"].startswith("SIGTERM")
    assert not os.path.exists(f"/proc/{result['pid']}")
    assert "tasks.max = 2" in (tmp_path / f"mm2-{flow.source_alias}.properties").read_text()
    verify_counts(clusters.target, flow.target_topic, nparts, expected, "mm2")
    # 3 windows x 200 records x 2 partitions compared record by record
    assert verify_sample(clusters.source, clusters.target, topic, flow.target_topic, expected, "mm2") == 1200
