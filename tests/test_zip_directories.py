"""spark_app.zip_directories: importlib.invalidate_caches() no longer re-reads unchanged zips,
and still re-reads a zip that changed since the importer's directory was read."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import zipfile
import zipimport
from pathlib import Path

import pytest

import spark_app  # noqa: F401  (importing the package installs the wrapper)
from spark_app import zip_directories


def _write_zip(path: Path, modules: dict[str, str]) -> None:
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w") as archive:
        for name, source in modules.items():
            archive.writestr(f"{name}.py", source)
    os.replace(tmp, path)  # a new inode, as a re-shipped file would have


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The archives whose directory zipimport reads from now on."""
    seen: list[str] = []
    original = zipimport._read_directory  # type: ignore[attr-defined]

    def counting(archive: str) -> object:
        seen.append(archive)
        return original(archive)

    monkeypatch.setattr(zipimport, "_read_directory", counting)
    return seen


def test_an_unchanged_zip_is_not_read_again(tmp_path: Path, reads: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "shipped.zip"
    _write_zip(archive, {"kzd_first": "VALUE = 1\n"})
    monkeypatch.syspath_prepend(str(archive))
    assert importlib.import_module("kzd_first").VALUE == 1
    assert zip_directories.keep()
    reads.clear()
    for _ in range(5):
        importlib.invalidate_caches()
    assert str(archive) not in reads


def test_a_changed_zip_is_read_again_and_its_new_modules_import(
    tmp_path: Path, reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "reshipped.zip"
    _write_zip(archive, {"kzd_old": "VALUE = 1\n"})
    monkeypatch.syspath_prepend(str(archive))
    assert importlib.import_module("kzd_old").VALUE == 1
    _write_zip(archive, {"kzd_old": "VALUE = 1\n", "kzd_new": "VALUE = 2\n"})
    reads.clear()
    importlib.invalidate_caches()
    assert reads.count(str(archive)) == 1
    assert importlib.import_module("kzd_new").VALUE == 2
    reads.clear()
    importlib.invalidate_caches()
    assert str(archive) not in reads


def test_a_spark_planner_worker_stops_rereading_pysparks_zip() -> None:
    """The case measured: a process that imported pyspark from Spark's zip (as a planner worker
    does) and then the mirror's package; pyspark's worker setup calls invalidate_caches() at
    every call."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = sorted(str(p) for p in lib.glob("*.zip"))
    # the tests' pyspark is pip-installed (both legs' venvs), with its zips beside the package
    assert any(z.endswith("pyspark.zip") for z in zips), f"no pyspark.zip in {lib}"
    script = """
import importlib, sys, zipimport
import pyspark.sql.worker.write_into_data_source
assert ".zip" in pyspark.__file__, pyspark.__file__
importers = sum(isinstance(f, zipimport.zipimporter) for f in sys.path_importer_cache.values())
reads = []
original = zipimport._read_directory
zipimport._read_directory = lambda a: reads.append(a) or original(a)
importlib.invalidate_caches()
before = len(reads)
import spark_app.sink
reads.clear()
importlib.invalidate_caches()  # importers made before spark_app: adopted, the zips being older than the parent
first = len(reads)
reads.clear()
for _ in range(3):
    importlib.invalidate_caches()
print(importers, before, first, len(reads))
"""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*zips, str(root)])}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    importers, before, first, after = map(int, out.stdout.split())
    assert importers > 2 and before >= importers  # without the wrapper: every importer reads its zip
    assert first == 0  # read before spark_app was imported, but the zips are older than this test run
    assert after == 0


def test_a_directory_read_before_keep_of_a_zip_newer_than_the_parent_is_read_once_more(tmp_path: Path) -> None:
    """keep() adopts the directories a process read before it only for archives unchanged since
    the parent process started; a zip written after (here: after pytest started) is read once more."""
    archive = tmp_path / "fresh.zip"
    _write_zip(archive, {"kzd_fresh": "VALUE = 3\n"})
    script = f"""
import importlib, sys, zipimport
sys.path.insert(0, {str(archive)!r})
import kzd_fresh
reads = []
original = zipimport._read_directory
zipimport._read_directory = lambda a: reads.append(a) or original(a)
from spark_app import zip_directories
zip_directories.keep()
for _ in range(3):
    importlib.invalidate_caches()
print(reads.count({str(archive)!r}))
"""
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"
