"""Issue 44: each engine subpackage's `__init__` is the public surface the Spark glue and the CLI
import from (`__all__`), loaded lazily so the glue's late imports stay late. (That nothing above
imports past a facade is an import-linter contract: tests/test_layers.py.)"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FACADES = ["clients", "copying", "failover", "observability", "planning", "topic_sync"]


def _type_checking_imports(package: str) -> dict[str, str]:
    """name -> module, from the facade's `if TYPE_CHECKING:` block (what mypy sees)."""
    tree = ast.parse((ROOT / "kmirror_engine" / package / "__init__.py").read_text())
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module
                out.update({alias.name: imp.module for alias in imp.names})
    return out


@pytest.mark.parametrize("package", FACADES)
def test_every_exported_name_is_the_engine_modules_own(package: str) -> None:
    facade = importlib.import_module(f"kmirror_engine.{package}")
    typed = _type_checking_imports(package)
    assert sorted(facade.__all__) == sorted(typed)  # mypy sees exactly what `__all__` promises
    for name, module in typed.items():
        assert getattr(facade, name) is getattr(importlib.import_module(module), name), name
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        _ = facade.nothing_here


def test_a_facade_reads_the_modules_current_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing is cached in the facade: a test patching the module is seen through it."""
    import kmirror_engine.clients.factory as factory
    from kmirror_engine import clients

    def fake(*_args: object) -> None:
        return None

    monkeypatch.setattr(factory, "admin_client", fake)
    assert clients.admin_client is fake
    from kmirror_engine.clients import admin_client

    assert admin_client is fake


def test_importing_the_facades_loads_none_of_their_modules() -> None:
    code = (
        "import sys\n"
        f"for p in {FACADES!r}: __import__('kmirror_engine.' + p)\n"
        "from kmirror_engine.planning import run_token\n"
        "print(sorted(m for m in sys.modules if m.startswith(('kmirror_engine.', 'confluent_kafka'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    loaded = set(ast.literal_eval(out.stdout))
    facades = {f"kmirror_engine.{p}" for p in FACADES}
    # the facades, their loader and the one module asked for (with what it imports: pure names)
    assert loaded - facades == {"kmirror_engine.lazy_exports", "kmirror_engine.planning.internal_names"}
