"""`kmirror lag`, `translate` and `failover` are operator tools: they must work on a laptop during
an incident, where no Spark is installed. This test builds a virtual environment with only what
those commands need (confluent-kafka, pyyaml, rich, pydantic; no pyspark, no pyarrow) and runs
them there against real brokers, after a mirror pass (the engine's copy loop and failover
listener, run in the test's own venv) left offset syncs, checkpoints and a committed group.

The static side of the same rule is tests/test_layers.py (import-linter)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kmirror.flow.replication_policy import offset_syncs_topic
from kmirror_engine.failover.failover_listener import FailoverListener
from tests.e2e.test_failover_e2e import FOREIGN, GROUP_AT, commit, fence, mirror_pass, shifted_flow, shifted_names
from tests.kafka_helpers import SYNC_FENCE, TANSU_FENCES

ROOT = Path(__file__).resolve().parents[2]
# the project's main dependencies an operator's venv gets (pyproject.toml), pyspark and its stack left out
OPERATOR_DEPS = ["confluent-kafka", "pyyaml", "rich", "pydantic", "typing-extensions", "sqlglot"]


@pytest.fixture(scope="module")
def no_spark_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("venv-no-spark")
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt"), *OPERATOR_DEPS],
        check=True,
        capture_output=True,
    )
    probe = "import importlib.util as u; print([m for m in ('pyspark', 'pyarrow', 'pandas') if u.find_spec(m)])"
    assert (
        subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True, cwd=venv).stdout.strip()
        == "[]"
    )
    return python


def kmirror(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from kmirror_cli.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [str(python), "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT.parent,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


@pytest.mark.e2e
def test_lag_translate_and_failover_run_in_a_venv_without_pyspark(
    clusters: Any, unique: str, tmp_path: Path, no_spark_python: Path
) -> None:
    src_alias, dst_alias, topic, remote = shifted_names(unique)
    group, other = f"app-{unique}", f"other-{unique}"
    flow, spec = shifted_flow(clusters, unique, tmp_path, [group], sync_group_offsets=False)
    end = 10 + TANSU_FENCES
    commit(clusters.source, group, topic, GROUP_AT)
    commit(clusters.source, other, topic, 5)
    listener = FailoverListener.for_flow(spec)
    try:
        mirror_pass(spec, topic, remote, end, 0, listener)
    finally:
        listener.close(final=True)
    fence(clusters.target, offset_syncs_topic(src_alias), SYNC_FENCE)

    translated = kmirror(no_spark_python, "translate", "--flow", str(flow), "--group", group, "--format", "json")
    assert translated.returncode == 0, translated.stderr
    assert json.loads(translated.stdout) == [
        {"topic": remote, "partition": 0, "upstream_offset": GROUP_AT, "downstream_offset": GROUP_AT + FOREIGN}
    ]
    lag = kmirror(no_spark_python, "lag", "--flow", str(flow), "--format", "json")
    assert lag.returncode == 0, lag.stderr
    (row,) = json.loads(lag.stdout)
    assert (row["topic"], row["partition"], row["offset"], row["lag"], row["target_topic"]) == (
        topic,
        0,
        end,
        0,
        remote,
    )
    dry = kmirror(no_spark_python, "failover", "--flow", str(flow), "--group", other, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout == f"dry run: would move group '{other}' to {dst_alias}:\n  {remote}[0] -> {5 + FOREIGN}\n"
    moved = kmirror(no_spark_python, "failover", "--flow", str(flow), "--group", other)
    assert moved.returncode == 0, moved.stderr
    assert f"wrote {remote}[0] = {5 + FOREIGN}" in moved.stdout, moved.stdout
