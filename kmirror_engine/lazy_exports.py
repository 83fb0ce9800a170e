"""The engine's facades load lazily (PEP 562): `from kmirror_engine.clients import new_admin` imports
`kmirror_engine.clients.factory` only then, so a facade keeps the Spark glue's deliberately late
imports late (start-up time, no confluent-kafka on the operator commands' import chain, the Python
workers' preload).

Each facade imports its exports under TYPE_CHECKING as `name as name` (so mypy sees their types and
that they are re-exported) and names them once more, by module, in
`__getattr__, __all__ = lazy_exports(__name__, {module: names})`. Nothing is cached in the facade:
every lookup reads the module's current attribute (so a test that patches
`kmirror_engine.clients.factory.new_admin` is seen through `kmirror_engine.clients`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_exports(package: str, table: Mapping[str, tuple[str, ...]]) -> tuple[Callable[[str], object], list[str]]:
    """The `__getattr__` and `__all__` of facade `package`: each name of `table[module]` read from
    `package.module`; `__all__` is every name of `table`, sorted."""
    home = {name: f"{package}.{module}" for module, names in table.items() for name in names}
    if len(home) != sum(map(len, table.values())):
        raise ValueError(f"{package}: a name is exported from two modules: {dict(table)}")

    def __getattr__(name: str) -> object:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__, sorted(home)
