"""Driver-side batch listeners: what runs after each committed micro-batch.

Where they run (measured on pyspark 4.3): a Python sink's `commit(messages, batchId)` runs
in a Python worker process the JVM starts for the sink commit, NOT in the driver's own
Python process, and a fresh `DataSource`/`streamWriter` is unpickled for every batch. That
worker process is reused across batches (one pid for a whole query here), so listeners are
built once per process and flow (`listeners_for`) and keep their state between batches; a
listener must still tolerate being rebuilt (a new worker process) by keeping what it needs
across restarts in Kafka or in the checkpoint. Their `close(final=False)` runs at exit of
that process.

Which listeners a flow has is the engine's (`kmirror_engine.side_work.FlowSideWork`, whose
driver half `spark_app.main.run_flow` starts and stops); this module only keeps them per process.
"""

from __future__ import annotations

import atexit
import json
import sys
import threading
from collections.abc import Callable
from typing import Any, TextIO

from kmirror.flow.spec import FlowSpec
from kmirror_engine.observability import BatchListener
from kmirror_engine.side_work import FlowSideWork

_lock = threading.Lock()
_cache: dict[str, tuple[str, list[BatchListener]]] = {}


def build_listeners(spec: FlowSpec) -> list[BatchListener]:
    """Every listener of a flow, in call order (`FlowSideWork.batch_listeners`)."""
    return FlowSideWork.for_flow(spec).batch_listeners()


def listeners_for(spec: FlowSpec) -> list[BatchListener]:
    """The listeners of `spec.id` in this process, built on first use (rebuilt if the spec changed)."""
    fingerprint = json.dumps(spec.to_dict(), sort_keys=True, default=str)
    with _lock:
        cached = _cache.get(spec.id)
        if cached is not None and cached[0] == fingerprint:
            return cached[1]
        if cached is not None:
            _close(cached[1], final=False)
        listeners = build_listeners(spec)
        _cache[spec.id] = (fingerprint, listeners)
        return listeners


def run_side_work(
    flow_id: str,
    call: Callable[[Any], None],
    listeners: Callable[[], list[BatchListener]],
    out: TextIO | None = None,
) -> int:
    """Call `call(listener)` for every listener of flow `flow_id` (`listeners()`, e.g.
    `lambda: listeners_for(spec)`), after the batch was delivered.

    A failure (building the listeners, or one listener) never fails the delivered batch: failing
    it would make Spark copy the batch again at every retry and restart (one batch of duplicates
    each time) while the cause, e.g. a missing ACL, persists. Each failure is logged as one
    `kmirror side_work_failed {json}` line and the next listener still runs; returns the number
    of failures (0: all ran).
    """
    try:
        built = listeners()
    except Exception as exc:
        _report_side_work_failure(flow_id, "build_listeners", exc, out)
        return 1
    failures = 0
    for listener in built:
        try:
            call(listener)
        except Exception as exc:
            _report_side_work_failure(flow_id, type(listener).__name__, exc, out)
            failures += 1
    return failures


def _report_side_work_failure(flow_id: str, work: str, exc: BaseException, out: TextIO | None) -> None:
    record = {"flow": flow_id, "work": work, "error": f"{type(exc).__name__}: {exc}"}
    print("kmirror side_work_failed " + json.dumps(record, sort_keys=True), file=out or sys.stderr, flush=True)


def batch_failed(listeners: list[BatchListener], batch_id: int) -> None:
    """Tell a flow's listeners (`listeners_for(spec)`) that Spark aborted batch `batch_id` (those
    with `on_batch_failed`)."""
    for listener in listeners:
        on_failed = getattr(listener, "on_batch_failed", None)
        if on_failed is not None:
            on_failed(batch_id)


def close_listeners(final: bool, flow_id: str | None = None) -> None:
    """Close the cached listeners of this process (idempotent): every flow's, or `flow_id`'s only
    (the driver of a transform flow, whose listeners run in the driver, when its query ends)."""
    with _lock:
        ids = list(_cache) if flow_id is None else [flow_id] if flow_id in _cache else []
        cached = [_cache.pop(i) for i in ids]
    for _, listeners in cached:
        _close(listeners, final)


def _close(listeners: list[Any], final: bool) -> None:
    errors: list[BaseException] = []
    for listener in listeners:
        try:
            listener.close(final)
        except Exception as exc:  # close the others, then report the first failure
            errors.append(exc)
    if errors:
        raise errors[0]


atexit.register(close_listeners, False)
