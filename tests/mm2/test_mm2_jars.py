"""MM2's jars fetched by `kmirror_cli.local_mm2.fetch_mm2` (scripts/kafka/fetch-mm2.sh, cached under
.cache/kafka/mm2-<version>/) and the Java RemoteClusterUtils caller the interop tests compile
(issue 23). Needs Maven + a JDK."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kmirror_cli.local_kafka import DEFAULT_LINE, resolve_line
from kmirror_cli.local_mm2 import fetch_mm2

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e
__all__ = ["ROOT", "fetch_mm2"]  # the other tests/mm2 modules import both from here


def test_translate_offsets_caller_compiles(tmp_path):
    version = resolve_line(DEFAULT_LINE)  # the test brokers' version, as the interop tests use
    jars = fetch_mm2()
    assert (jars / f"connect-mirror-{version}.jar").is_file()
    assert (jars / f"connect-mirror-client-{version}.jar").is_file()
    out = subprocess.run(
        ["javac", "-d", str(tmp_path), "-cp", f"{jars}/*", str(ROOT / "tests/mm2/TranslateOffsets.java")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "TranslateOffsets.class").is_file()
