"""A crash of the query's Python planning process (the kmirror-source's reader, a process of its
own that Spark talks to over a socket) is not a failure of the flow: Spark sees only an
EOFException or a connection reset, and the driver starts the query again from its checkpoint
(`spark_app.query_watch.run_query`).
Here the planning process is killed with SIGKILL while a streaming flow runs on real brokers:
the flow goes on, copies what comes next, and the target holds exactly the source's records."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from kmirror.flow.spec import parse_flow_spec
from tests.e2e.streaming_run import StreamingRun
from tests.kafka_helpers import COPY_ONLY, consume_all, create_topic, flow_raw, produce

pytestmark = [pytest.mark.e2e, pytest.mark.spark40, pytest.mark.real_kafka]
RUNNER_MODULE = "python_streaming_source_runner"


def planning_processes() -> list[int]:
    """Pids of this test process's Python planning processes of streaming sources (Spark starts
    them as `python -m pyspark.sql.streaming.python_streaming_source_runner`)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if RUNNER_MODULE.encode() in cmdline and _descends_from_this_process(int(entry)):
            pids.append(int(entry))
    return pids


def _descends_from_this_process(pid: int) -> bool:
    """Whether `pid` was started (through Spark's JVM) by this test process: another pytest session
    on the machine (`make test` runs legs side by side) has planning processes of its own."""
    while pid > 1:
        if pid == os.getpid():
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state: the parent's pid
    return False


def settled(checkpoint: Path) -> bool:
    """Whether the query's last planned batch is in its commit log (none in flight). A batch
    delivered but not yet committed is copied again after a restart (at least once: counted as
    `kmirror replay`), so the kill waits for this to test the restart, not the replay."""

    def ids(log: str) -> list[int]:
        return [int(p.name) for p in (checkpoint / log).glob("*") if p.name.isdigit()]

    planned = ids("offsets")
    return bool(planned) and max(planned) == max(ids("commits"), default=-1)


def records(prefix: str, count: int) -> list[dict[str, Any]]:
    return [
        {"key": f"{prefix}-{i}".encode(), "value": f"{prefix}-value-{i}".encode(), "partition": i % 2}
        for i in range(count)
    ]


@pytest.mark.parametrize("how", ["idle", "with-a-request-unread"])
def test_a_killed_planning_process_restarts_the_query_and_nothing_is_lost_or_doubled(
    spark: Any, clusters: Any, unique: str, tmp_path: Path, capfd: pytest.CaptureFixture[str], how: str
) -> None:
    """`idle`: killed between calls (Spark reads an EOF). `with-a-request-unread`: stopped first, so
    Spark's next call (the 200 ms trigger's latestOffset) waits unread in its socket, then killed:
    the kernel answers with RST and Spark reads a connection reset, as a CI run at high load saw."""
    topic = f"pk-{unique}"
    create_topic(clusters.source, topic, 2)
    produce(clusters.source, topic, records("a", 200))
    spec = parse_flow_spec(
        flow_raw(
            clusters, f"pw{unique}", f"pe{unique}", [topic], tmp_path / "ckpt", trigger_interval_ms=200, **COPY_ONLY
        )
    )
    remote = f"pw{unique}.{topic}"
    run = StreamingRun(spec, spark)
    runner, stop, failures = run.thread, run.stop, run.failures
    before = set(planning_processes())
    runner.start()
    try:
        assert sum(len(v) for v in consume_all(clusters.target, remote, 2, timeout_s=120, expect=200).values()) == 200
        deadline = time.monotonic() + 60
        while not settled(tmp_path / "ckpt") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert settled(tmp_path / "ckpt"), "the batch that copied the first records was never committed"
        victims = set(planning_processes()) - before
        assert victims, "no planning process of this query was found"
        if how == "with-a-request-unread":
            for pid in victims:
                os.kill(pid, signal.SIGSTOP)
            time.sleep(2)  # ten triggers: Spark has sent its next call and waits for the answer
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        produce(clusters.source, topic, records("b", 200))
        got = consume_all(clusters.target, remote, 2, timeout_s=120, expect=400)
        deadline = time.monotonic() + 60
        while not (set(planning_processes()) - before - victims) and time.monotonic() < deadline:
            time.sleep(0.2)  # the restarted query's planning process
        assert set(planning_processes()) - before - victims, "the query was not started again"
        assert not failures and runner.is_alive()
    finally:
        stop.set()
        runner.join(timeout=120)
    assert not runner.is_alive() and failures == []
    source = consume_all(clusters.source, topic, 2)
    err = capfd.readouterr().err
    assert "kmirror replay" not in err, err[-3000:]  # a replay would double records: the kill came after the commit
    assert {p: [(m.key(), m.value()) for m in v] for p, v in got.items()} == {
        p: [(m.key(), m.value()) for m in v] for p, v in source.items()
    }
    assert "starting the query again from its checkpoint" in err
