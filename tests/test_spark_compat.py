"""The app on every Spark it supports (4.0.x through 4.3.x) and Python 3.10 to 3.13.

Runs in both legs of `make test`: pyspark 4.3.0 / Python 3.11 (admission control) and
pyspark 4.0.2 / Python 3.10 (no admission control: the position-tracking reader). The
position-tracking reader also runs on 4.3 here (forced), so both readers are proven on the
newest Spark, and the one Spark 4.0 uses is proven on 4.0 itself.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import pkgutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import kmirror
import kmirror_cli
import kmirror_engine
import spark_app
from kmirror.errors import KmirrorError
from kmirror_engine.planning.ranges import offsets_from_json
from spark_app.stream_readers import HAS_ADMISSION_CONTROL, PositionTrackingReader, reader_class
from tests.planner_fakes import FakeAdmin, planner

pytestmark = pytest.mark.spark40  # also in leg 2 (pyspark 4.0.2 / Python 3.10)

ROOT = Path(__file__).resolve().parents[1]
SPARK_HAS_ADMISSION_CONTROL = importlib.util.find_spec("pyspark.sql.streaming.datasource") is not None


# Deploy-time modules: the stack-config models need pydantic, which the app's runtime (the image,
# EMR nodes, scripts/app-requirements.txt) does not install; the CLI commands that read stack
# files come with them. import-linter keeps spark_app and kmirror_engine off pydantic
# (pyproject.toml), so the app never reaches them. The whole `kmirror.stack` package counts: the
# contract forbids it to spark_app and kmirror_engine, so a new stack module needs no entry here.
DEPLOY_TIME = ("kmirror.stack", "kmirror_cli")
HAS_PYDANTIC = importlib.util.find_spec("pydantic") is not None


def test_every_app_and_core_module_imports_on_this_python_and_pyspark() -> None:
    names = [
        m.name
        for package in (spark_app, kmirror_engine, kmirror_cli, kmirror)
        for m in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}.")
    ]
    assert len(names) > 70
    for name in names:
        if not HAS_PYDANTIC and name.startswith(DEPLOY_TIME):
            continue  # the app's venv: deploy-time modules are not part of the app
        importlib.import_module(name)  # raises on a missing module or newer-Python syntax


def test_the_reader_api_follows_the_installed_pyspark_not_its_version_string() -> None:
    assert HAS_ADMISSION_CONTROL == SPARK_HAS_ADMISSION_CONTROL
    expected = "admission-control" if SPARK_HAS_ADMISSION_CONTROL else "position-tracking"
    assert reader_class("auto").api == expected
    assert reader_class("position-tracking") is PositionTrackingReader
    with pytest.raises(KmirrorError, match='option "reader_api" must be one of'):
        reader_class("newest")


def test_self_check_starts_the_app_on_this_pyspark() -> None:
    import pyspark

    done = subprocess.run(
        [sys.executable, "-m", "spark_app", "--self-check"], capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    assert lines["pyspark"] == pyspark.__version__ and lines["spark"] == pyspark.__version__
    assert lines["reader api"] == ("admission-control" if SPARK_HAS_ADMISSION_CONTROL else "position-tracking")
    assert lines["data sources"] == "kmirror-source, kmirror-sink registered and resolved"
    assert lines["writer"] == "MirrorStreamWriter"
    assert lines["client gssapi"] in ("yes", "no") and lines["client tls"] == "yes"
    assert done.stdout.splitlines()[-1] == "self-check: ok"


def _reader(source: FakeAdmin, **options: Any) -> PositionTrackingReader:
    reader = PositionTrackingReader("{}", once=False, task_count=2)
    reader._planner = planner(source, **options)
    return reader


def test_position_tracking_first_start_bounds_batches_and_agrees_with_spark_on_the_initial_offsets() -> None:
    source = FakeAdmin({"orders": [(0, 250)]})
    reader = _reader(source, max_records_per_trigger=100, starting_offsets="latest")
    first_end = reader.latestOffset()  # Spark 4.0 asks for the end before the initial offset
    source.logs["orders"] = [(0, 400)]  # more records arrive in between
    assert reader.initialOffset() == {"orders": {"0": 250}}  # the start it bounded from, not today's end
    assert first_end == {"orders": {"0": 250}}
    assert [reader.latestOffset(), reader.latestOffset(), reader.latestOffset()] == [
        {"orders": {"0": 350}},
        {"orders": {"0": 400}},
        {"orders": {"0": 400}},  # caught up: Spark runs no batch
    ]


def test_position_tracking_restart_resumes_from_the_offset_spark_reports_first() -> None:
    source = FakeAdmin({"orders": [(0, 1000)]})
    reader = _reader(source, max_records_per_trigger=300)
    # a restart: Spark names the newest offset-log entry as partitions(end, end), plans nothing ...
    assert reader.partitions({"orders": {"0": 600}}, {"orders": {"0": 600}}) == []
    # ... re-runs an uncommitted batch, which must not move the position back ...
    [task] = reader.partitions({"orders": {"0": 400}}, {"orders": {"0": 600}})
    assert [r[:4] for r in task.ranges] == [("orders", 0, 400, 600)]  # type: ignore[attr-defined]
    # ... and the next batch starts where the offset log ends, at most 300 records long
    assert reader.latestOffset() == {"orders": {"0": 900}}
    assert reader.latestOffset() == {"orders": {"0": 1000}}


def test_position_tracking_once_never_passes_the_frozen_end() -> None:
    source = FakeAdmin({"orders": [(0, 500)]})
    reader = PositionTrackingReader("{}", once=True, task_count=2, until_json=json.dumps({"orders": {"0": 300}}))
    reader._planner = planner(source, max_records_per_trigger=200)
    reader._planner.frozen_end = offsets_from_json({"orders": {"0": 300}})
    assert [reader.latestOffset(), reader.latestOffset()] == [{"orders": {"0": 200}}, {"orders": {"0": 300}}]


@pytest.mark.e2e
@pytest.mark.parametrize("reader_api", ["auto", "position-tracking"])
def test_once_mirrors_everything_in_bounded_batches_and_exits(
    reader_api: str, clusters: Any, spark: Any, unique: str, tmp_path: Path
) -> None:
    from spark_app.main import run_flow
    from tests.e2e.test_mirror_e2e import flow, mirrored
    from tests.kafka_helpers import add_fences, create_topic, produce

    topic = f"compat-{unique}"
    create_topic(clusters.source, topic, partitions=2)
    produce(
        clusters.source, topic, [{"key": f"k{i}".encode(), "value": b"v" * 50, "partition": i % 2} for i in range(1000)]
    )
    add_fences(clusters.source, topic, 2)  # makes the records visible to offset queries on tansu
    checkpoint = tmp_path / "checkpoint"
    spec = flow(
        "west",
        clusters.source,
        "east",
        clusters.target,
        [f"compat-{unique}"],
        checkpoint,
        max_records_per_trigger=150,
        heartbeats_replication_enabled=False,
    )  # this topic alone
    started = time.monotonic()
    run_flow(spec, spark=spark, once=True, reader_api=reader_api)
    elapsed = time.monotonic() - started
    target = mirrored(clusters.target, f"west.{topic}", 2)
    keys = sorted(r.key() for records in target.values() for r in records)
    assert keys == sorted(f"k{i}".encode() for i in range(1000)), (len(keys), elapsed)
    ends = _batch_ends(checkpoint)
    sizes = [sum(b.values()) - sum(a.values()) for a, b in zip([{}, *ends], ends, strict=False)]
    assert len(sizes) >= 6 and max(sizes) <= 150, sizes  # every batch bounded by max_records_per_trigger


def _batch_ends(checkpoint: Path) -> list[dict[str, int]]:
    """Each committed batch's end offsets, from Spark's offset log (`offsets/<batch>`)."""
    committed = {int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()}
    ends = []
    for batch in sorted(committed):
        source_offset = json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[2])
        ends.append({f"{t}:{p}": o for t, parts in source_offset.items() for p, o in parts.items()})
    return ends
