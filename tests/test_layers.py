"""The floors (README "Architecture"), checked statically over every module with import-linter
(the contracts live in pyproject.toml `[tool.importlinter]`; `make lint` runs them too).

Replaces the per-module spot checks ("the planner imports no pyspark", ...): a contract covers
every module of a package, function-level imports included."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
PACKAGES = {
    "kmirror": "kmirror",
    "kmirror_engine": "kmirror_engine",
    "kmirror_cli": "kmirror_cli",
    "spark_app": "spark_app",
    "kafka_mirror": "components/kafka_mirror",
}


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(root / "pyproject.toml")],
        capture_output=True,
        text=True,
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )


def _copy_tree(tmp: Path) -> Path:
    for name, source in PACKAGES.items():
        shutil.copytree(ROOT / source, tmp / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    return tmp


def _import_late(path: Path, module: str) -> None:
    """Append to `path` a function-level `import module` (contracts count those too)."""
    path.write_text(path.read_text() + f"\n\ndef _late() -> None:\n    import {module}  # noqa\n")


def _broken(root: Path) -> str:
    """lint-imports' report over `root`, which must break a contract."""
    result = _lint_imports(root)
    assert result.returncode != 0, result.stdout + result.stderr
    return result.stdout


def test_every_contract_holds_over_every_module(tmp_path: Path) -> None:
    result = _lint_imports(_copy_tree(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "9 kept, 0 broken" in result.stdout, result.stdout


def test_an_arrow_up_a_floor_breaks_the_contract(tmp_path: Path) -> None:
    """The check can fail: the engine importing the Spark glue (even inside a function), the
    lag command importing pyspark and the Spark glue importing an engine module past its facade
    (issue 44) are all reported."""
    root = _copy_tree(tmp_path)
    _import_late(root / "kmirror_engine" / "planning" / "ranges.py", "spark_app.main")
    _import_late(root / "kmirror_cli" / "commands" / "lag.py", "pyspark")
    _import_late(root / "spark_app" / "self_check.py", "kmirror_engine.clients.factory")
    out = _broken(root)
    assert "kmirror_engine.planning.ranges -> spark_app.main" in out, out
    assert "kmirror_cli.commands.lag -> pyspark" in out, out
    assert "spark_app.self_check -> kmirror_engine.clients.factory" in out, out
    assert "5 kept, 4 broken" in out, out  # floors, engine-no-Spark, operator commands, facades


def test_an_import_circle_breaks_the_contract(tmp_path: Path) -> None:
    """Issue 29: no module (or subpackage) of a package imports one that imports it back, even
    through a function-level import: the clients importing the copy loops closes a circle."""
    root = _copy_tree(tmp_path)
    _import_late(root / "kmirror_engine" / "clients" / "factory.py", "kmirror_engine.copying.exactly_once")
    out = _broken(root)
    assert "No cycles are allowed in kmirror_engine." in out, out
    assert "8 kept, 1 broken" in out, out
