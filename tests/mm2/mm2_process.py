"""A dedicated-mode MirrorMaker 2 for the MM2 fixtures (issue 23): started with its own log4j
config so its INFO log lands in a file next to the test's, and waits that name that log when they
time out."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from bench.mm2_run import INTERNAL_TOPICS, LOG4J

# Properties lines for one-node clusters: MM2's default replication factor and each of its internal
# topics' (bench/mm2_run.py sets the same).
ONE_REPLICA = "replication.factor = 1\n" + "".join(f"{name}.replication.factor = 1\n" for name in INTERNAL_TOPICS)

# MM2's checkpoint task has read its offset-syncs topic to the end (MirrorCheckpointTask). Syncs read
# during that first read replace each other (its OffsetSyncStore keeps the newest), so records a
# fixture wants checkpointed are produced only after this line: a copy finished before it would
# leave only the last sync, and every committed offset before it untranslatable.
STORES_STARTED = "starting checkpoint and offset sync stores took"


def start_mm2(jars: Path, properties: Path, workdir: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """MirrorMaker 2 (dedicated mode) on `properties`; returns the process and its log. The log4j
    config is written under `workdir`, off the classpath of the Java caller the tests compile."""
    log, log4j = workdir / "mm2.log", workdir / "mm2-log4j.properties"
    # the checkpoint task's translations at DEBUG: what a checkpoint that never came shows
    log4j.write_text(
        LOG4J
        + "".join(
            f"log4j.logger.org.apache.kafka.connect.mirror.{name}=DEBUG\n"
            for name in ("MirrorCheckpointTask", "OffsetSyncStore")
        )
    )
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                "java",
                "-Xmx512m",
                f"-Dlog4j.configuration=file:{log4j}",
                "-cp",
                f"{jars}/*",
                "org.apache.kafka.connect.mirror.MirrorMaker",
                str(properties),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return process, log


def wait_for(what: str, condition: Callable[[], bool], timeout_s: float, log: Path) -> None:
    """Poll `condition` every second; past `timeout_s` fail naming `what` and MM2's log."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout_s:.0f} s; MM2 log: {log}"
        time.sleep(1)


def wait_for_first_syncs(
    source: str, syncs_topic: str, topic: str, partitions: int, log: Path, timeout_s: float = 60
) -> None:
    """Until MM2's offset-syncs topic (on `source`) holds a sync of every partition of `topic`.

    A fixture produces one record per partition, waits here, then produces the rest. MM2's
    OffsetSyncWriter keeps at most 10 syncs in flight; past that it keeps only the newest pending
    sync of each partition, and its checkpoint store answers a group below a partition's first sync
    never (that sync stays in its oldest bucket). In a burst where one partition's syncs took the
    10 places, the other's were all replaced by its last one: the CI of stop 41 saw partition 0's
    first sync at offset 297 of 300 (syncs every 11 records: 297 = 27 x 11; partition 1's newest
    then 176 = 16 x 11), and a group at 120 never checkpointed. Synced first, a partition's offset 0
    is in MM2's store for good."""
    from kmirror.flow.spec import ClusterEndpoint
    from kmirror_engine.planning.mm2_takeover import mm2_synced

    endpoint = ClusterEndpoint("source", source)
    wait_for(
        f"MM2's offset syncs of every partition of {topic!r}",
        lambda: {(topic, p) for p in range(partitions)} <= mm2_synced(endpoint, syncs_topic).keys(),
        timeout_s,
        log,
    )


def wait_for_stores(log: Path, timeout_s: float = 120) -> None:
    """Until MM2's log says its checkpoint task started its offset sync store (`STORES_STARTED`)."""
    wait_for(
        "MM2's checkpoint task started its offset sync store", lambda: STORES_STARTED in log.read_text(), timeout_s, log
    )
