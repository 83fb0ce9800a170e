"""Keep pandas out of the app's Python workers until something really uses it.

Spark's arrow path in every reader and writer task hands Python lists to `pyarrow.array()`
(the reader's rows, the writer's commit message). For each, pyarrow asks its pandas shim whether
the object is a pandas array, and the shim's first answer imports pandas, although nothing in a
mirror task ever holds a pandas object: in a py-spy profile of a `--once` run's worker processes,
770 of 1,666 samples were that import (~0.2 s of CPU), paid again by every new worker process.
pyarrow only retries the import where it needs pandas (`to_pandas()`, `Table.from_pandas()`,
...); its "is this pandas?" questions keep the first answer.

`defer_pandas_import()` makes those first answers "no pandas here" without importing it (the
shim's, and the list converter's own look, once per process), and watches for pandas: the moment
anything imports it (Spark's pandas UDFs, which the app has none of, user code, pyarrow's own
retry), pyarrow's pandas integration is restored: Series, Index, categoricals and DataFrames
convert as without this module. One difference stays (tested): the list converter does not look
again, so pandas scalars inside plain Python lists (`pd.NaT`, `pd.Timestamp`) are converted as
their Python base types, or refused. It does nothing where pandas is already imported, and costs
one flag test after its first call. The readers and the sink call it at the start of every task
(the process is a worker; by then pyarrow is imported).
`KMIRROR_DEFER_PANDAS=0` turns it off (the benchmark's comparisons).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
from typing import Any

_lock = threading.Lock()
_deferred = False


def defer_pandas_import() -> bool:
    """Tell pyarrow there is no pandas in this process until something imports it (module doc).
    True where this call deferred it (the first in a process where nobody imported pandas)."""
    global _deferred
    if _deferred or os.environ.get("KMIRROR_DEFER_PANDAS") == "0":  # "0": off, for comparisons
        return False
    with _lock:
        if _deferred or "pandas" in sys.modules:
            _deferred = True
            return False
        _deferred = True
        try:
            import pyarrow.lib as palib
        except ImportError:  # pragma: no cover - pyspark's arrow path needs pyarrow
            return False
        refuse = _Refuse()  # the shim's import fails: its first answer is "no pandas"
        sys.meta_path.insert(0, refuse)
        try:
            palib._pandas_api.have_pandas  # noqa: B018 - the property's side effect is the answer
            palib.array([b""])  # the list converter's own look for pandas, once per process (measured)
        except Exception:  # pragma: no cover - only an optimisation; the finder below undoes what was done
            pass
        finally:
            sys.meta_path.remove(refuse)
        sys.meta_path.insert(0, _RestoreOnImport())
        return True


class _Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas":
            raise ModuleNotFoundError("pandas is deferred", name=name)


def _restore_pyarrow_pandas() -> None:
    """pyarrow retries the import where it needs pandas; asking for `pd` is such a place."""
    import pyarrow.lib as palib

    palib._pandas_api.pd  # noqa: B018 - the property's side effect restores the integration


class _RestoreOnImport(importlib.abc.MetaPathFinder):
    """On the first import of pandas: find it as Python would (this finder stepping aside), and
    restore pyarrow's integration once the module has run."""

    def __init__(self) -> None:
        self.done = False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "pandas" or self.done:
            return None
        self.done = True
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        execute = loader.exec_module

        def exec_module(module: Any) -> None:
            execute(module)
            _restore_pyarrow_pandas()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
