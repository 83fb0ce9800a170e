"""A dedicated-mode MirrorMaker 2 for the MM2 fixtures (issue 23): started with its own log4j
config so its INFO log lands in a file next to the test's, and waits that name that log when they
time out."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from bench.mm2_run import LOG4J

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
    log4j.write_text(LOG4J + "".join(f"log4j.logger.org.apache.kafka.connect.mirror.{name}=DEBUG\n"
                                     for name in ("MirrorCheckpointTask", "OffsetSyncStore")))
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["java", "-Xmx512m", f"-Dlog4j.configuration=file:{log4j}", "-cp", f"{jars}/*",
             "org.apache.kafka.connect.mirror.MirrorMaker", str(properties)],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    return process, log


def wait_for(what: str, condition: Callable[[], bool], timeout_s: float, log: Path) -> None:
    """Poll `condition` every second; past `timeout_s` fail naming `what` and MM2's log."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout_s:.0f} s; MM2 log: {log}"
        time.sleep(1)


def wait_for_stores(log: Path, timeout_s: float = 120) -> None:
    """Until MM2's log says its checkpoint task started its offset sync store (`STORES_STARTED`)."""
    wait_for("MM2's checkpoint task started its offset sync store", lambda: STORES_STARTED in log.read_text(),
             timeout_s, log)  # fmt: skip
