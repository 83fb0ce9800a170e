"""MM2's jars fetched by scripts/kafka/fetch-mm2.sh (cached under .cache/kafka/mm2-<version>/) and
the Java RemoteClusterUtils caller the interop tests use compile (issue 23). Needs Maven + a JDK."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


def fetch_mm2(version: str = "4.1.1") -> Path:
    out = subprocess.run(
        [str(ROOT / "scripts/kafka/fetch-mm2.sh"), version], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return Path(out.stdout.strip().splitlines()[-1])


def test_translate_offsets_caller_compiles(tmp_path):
    jars = fetch_mm2()
    assert (jars / "connect-mirror-4.1.1.jar").is_file() and (jars / "connect-mirror-client-4.1.1.jar").is_file()
    out = subprocess.run(
        ["javac", "-d", str(tmp_path), "-cp", f"{jars}/*", str(ROOT / "tests/mm2/TranslateOffsets.java")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "TranslateOffsets.class").is_file()
