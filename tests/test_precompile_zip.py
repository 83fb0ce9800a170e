"""scripts/precompile-pyspark-zip.py: compiled code in Spark's zips, used by zipimport, never breaking an import."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("precompile_zip", ROOT / "scripts" / "precompile-pyspark-zip.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _import_in_zip(archive: Path, code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(archive), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    path = tmp_path / "lib.zip"
    with zipfile.ZipFile(path, "w") as zout:
        zout.writestr("pkg/__init__.py", "")
        zout.writestr("pkg/mod.py", "def boom():\n    raise ValueError('from the source line')\n")
        zout.writestr("pkg/broken.py", "def (:\n")  # fails at import with or without the script
        zout.writestr("pkg/data.txt", "kept")
    return path


def test_modules_load_from_the_compiled_entries_and_tracebacks_still_show_the_source(archive: Path) -> None:
    assert _script().precompile(archive) == 2  # broken.py is left as it was
    code = (
        "import traceback, pkg.mod\nprint(pkg.mod.__file__)\ntry:\n    pkg.mod.boom()\nexcept ValueError:\n"
        "    print(traceback.format_exc().splitlines()[-2].strip())"
    )
    out = _import_in_zip(archive, code)
    assert out.splitlines() == [f"{archive}/pkg/mod.pyc", "raise ValueError('from the source line')"]
    with zipfile.ZipFile(archive) as zin:
        assert zin.read("pkg/data.txt") == b"kept" and "pkg/broken.pyc" not in zin.namelist()


def test_a_second_run_changes_nothing(archive: Path) -> None:
    script = _script()
    script.precompile(archive)
    before = archive.read_bytes()
    assert script.precompile(archive) == 0
    assert archive.read_bytes() == before


def test_compiled_code_of_another_python_is_ignored_at_import_and_replaced_by_a_new_run(archive: Path) -> None:
    script = _script()
    with zipfile.ZipFile(archive, "a") as zout:  # as if compiled by another Python: wrong magic, other marker
        zout.writestr("pkg/mod.pyc", b"\x00\x00\r\n" + b"\x00" * 12 + b"garbage")
        zout.writestr(script.MARKER_PREFIX + "00000d0a", "other\n")
    assert _import_in_zip(archive, "import pkg.mod; print(pkg.mod.__file__)") == f"{archive}/pkg/mod.py"
    assert script.precompile(archive) == 2
    with zipfile.ZipFile(archive) as zin:
        names = zin.namelist()
    assert names.count("pkg/mod.pyc") == 1 and [n for n in names if n.startswith(script.MARKER_PREFIX)] == [
        script.marker()
    ]
    assert _import_in_zip(archive, "import pkg.mod; print(pkg.mod.__file__)") == f"{archive}/pkg/mod.pyc"


def test_a_symlink_rewrites_its_target_and_stays_a_link(archive: Path) -> None:
    link = archive.with_name("py4j-src.zip")
    link.symlink_to(archive.name)
    assert _script().precompile(link) == 2
    assert link.is_symlink() and "pkg/mod.pyc" in zipfile.ZipFile(archive).namelist()


def test_a_path_that_is_not_a_zip_is_refused_by_name(tmp_path: Path) -> None:
    bad = tmp_path / "pyspark.zip"
    bad.write_text("not a zip")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "precompile-pyspark-zip.py"), str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and f"{bad}: not a zip file" in done.stderr


def test_the_set_up_precompiled_this_venvs_pyspark_zip_and_spark_workers_load_it() -> None:
    script = _script()
    zips = [z for z in script.installed_zips() if z.name == "pyspark.zip"]
    assert zips, "no pip-installed pyspark.zip found"
    fix = "run `make setup` (scripts/precompile-pyspark-zip.py --installed)"
    assert script.marker() in zipfile.ZipFile(zips[0]).namelist(), fix
    out = _import_in_zip(zips[0], "import pyspark.sql.worker.plan_data_source_read as m; print(m.__file__)")
    assert out == f"{zips[0]}/pyspark/sql/worker/plan_data_source_read.pyc"
