"""MirrorMaker 2's jars for the interop tests and the benchmark's `mm2` contender (issue 23).

MM2 runs in dedicated mode from Maven Central's `connect-mirror`, `connect-mirror-client` and
`connect-runtime` of the same Apache Kafka version as the local brokers (`local_kafka.py`), so
both sides of a comparison speak the same protocol. `scripts/kafka/fetch-mm2.sh` (its pom in
`scripts/kafka/mm2/`) resolves them once into `.cache/kafka/mm2-<version>/`; this module is the
one Python entry to it, importable by the tests and by `bench/` alike.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from kmirror.errors import KmirrorError
from kmirror_cli.local_kafka import DEFAULT_LINE, resolve_line

FETCH_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "kafka" / "fetch-mm2.sh"
FETCH_TIMEOUT_S = 600
MM2_MAIN_CLASS = "org.apache.kafka.connect.mirror.MirrorMaker"


def fetch_mm2(version: str | None = None) -> Path:
    """The directory holding every jar of MirrorMaker 2 `version` (default: the default broker
    line's version), fetched with Maven on first use and cached for later runs.

    Raises KmirrorError naming the version and Maven's last lines when the fetch fails (no `mvn`,
    no network, or a version Maven Central does not have)."""
    version = version or resolve_line(DEFAULT_LINE)
    try:
        done = subprocess.run([str(FETCH_SCRIPT), version], capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KmirrorError(f"fetching MirrorMaker 2 {version} with {FETCH_SCRIPT} failed: {exc}") from exc
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.splitlines()[-15:])
        raise KmirrorError(
            f"fetching MirrorMaker 2 {version} from Maven Central failed (exit {done.returncode}); it needs "
            f"Maven (apt-get install maven) and a Kafka version Maven Central has:\n{tail}"
        )
    jars = Path(lines[-1])
    if not (jars / f"connect-mirror-{version}.jar").is_file():
        raise KmirrorError(
            f"MirrorMaker 2 {version}: {jars} holds no connect-mirror-{version}.jar; delete it and retry"
        )
    return jars
