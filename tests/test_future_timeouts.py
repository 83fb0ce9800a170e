"""An admin future that gets no answer in time is handled, on every supported Python.

Before Python 3.11, `concurrent.futures.Future.result(timeout=...)` raises
`concurrent.futures.TimeoutError`, which is *not* the builtin `TimeoutError`; an
`except TimeoutError` let it through and a frozen target broker killed the copy task (found by
the fault suite on Python 3.10, the apache/spark 4.0 images' Python). This file runs in both
`make test` legs."""

from __future__ import annotations

import ast
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from kmirror.errors import KmirrorError

pytestmark = pytest.mark.spark40  # also in leg 2 (pyspark 4.0.2 / Python 3.10)

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("spark_app", "kmirror", "kmirror_engine", "kmirror_cli", "components")


class _SilentAdmin:
    """Admin calls whose futures never complete (a SIGSTOPped broker)."""

    def describe_configs(self, resources: list[Any]) -> dict[Any, Future[Any]]:
        return {r: Future() for r in resources}

    def list_offsets(self, request: dict[Any, Any], **_: Any) -> dict[Any, Future[Any]]:
        return {tp: Future() for tp in request}


def test_unanswered_topic_limit_lookup_means_unknown_limit_not_a_crash() -> None:
    from kmirror_engine.copying.record_limits import topic_limits

    assert topic_limits(_SilentAdmin(), ["a", "b"], timeout_s=0.01) == {"a": None, "b": None}


def test_unanswered_earliest_offsets_is_a_kmirror_error_naming_the_partition(monkeypatch: Any) -> None:
    from kmirror_cli.commands import failover

    monkeypatch.setattr(failover, "ADMIN_TIMEOUT_S", 0.01)
    with pytest.raises(KmirrorError, match=r"earliest offset of orders\[3\] on west"):
        failover.earliest_offsets(_SilentAdmin(), [("orders", 3)], "west")


def _caught_names(handler: ast.ExceptHandler) -> list[str]:
    nodes = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return [n.id for n in nodes if isinstance(n, ast.Name)]


def test_no_module_catches_the_builtin_timeout_error_around_future_results() -> None:
    """A module that waits on futures with a timeout must catch concurrent.futures.TimeoutError
    (e.g. imported as FutureTimeout), never the bare builtin name (ruff's UP041 suggests that
    rewrite for py311+ targets; the app supports 3.10)."""
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            source = path.read_text()
            if ".result(timeout=" not in source:
                continue
            handlers = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ExceptHandler) and n.type]
            rel = path.relative_to(ROOT)
            offenders += [f"{rel}:{h.lineno}" for h in handlers if "TimeoutError" in _caught_names(h)]
    assert not offenders, offenders
