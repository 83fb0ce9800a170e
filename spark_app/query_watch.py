"""How the driver waits for a streaming query and explains how it ended (`spark_app.main`):
`run_query` starts a query and waits for it (`await_query`: on `stop`, the current batch finishes
first), starting it again from its checkpoint when Spark lost its Python planning process;
a failure that crossed the JVM becomes one KmirrorError line (`explain`).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from kmirror import errors
from kmirror.errors import KmirrorError

log = logging.getLogger("kmirror.main")
# "kmirror.errors.DataLossError: message" lines inside a Python traceback carried by a JVM error
_PY_ERROR = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Failure|Exception)): (.+)$", re.MULTILINE)


def explain(exc: BaseException) -> KmirrorError:
    """A one-line KmirrorError from a failure that crossed the JVM (keeps DataLossError etc.)."""
    text = str(exc)
    found = [m for m in _PY_ERROR.finditer(text) if not m.group(1).startswith(("Py4J", "Streaming", "Python"))]
    if not found:
        first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
        return KmirrorError(f"the mirroring query failed: {first}")
    name, message = found[-1].group(1), found[-1].group(2).strip()
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, KmirrorError) and cls is not errors.ValidationError:
        return cls(message)
    return KmirrorError(f"{name}: {message}")


class PlanningProcessLost(KmirrorError):
    """The query's Python planning process (the kmirror-source's reader) ended without an answer."""


# Restarts of a query whose planning process was lost (a crash of that process, not of the flow:
# the checkpoint replays the planned batch); a query that ran PLANNER_RESTART_RESET_S resets it.
PLANNER_RESTARTS = 3
PLANNER_RESTART_RESET_S = 600.0


# How Spark reports a planning process it lost: it died (EOF read from it, or a connection reset:
# a process killed with bytes unread in its socket makes the kernel answer with RST, as a CI run
# saw), or it did not connect back within Spark's 10 s at its start (seen once in a CI run on a
# loaded 2-core machine).
_PLANNER_LOST = (
    "java.io.EOFException",
    "java.net.SocketException: Connection reset",
    "java.net.SocketException: Broken pipe",
    "Python worker failed to connect back",
    "Timed out while waiting for the Python worker to connect back",
)


def planning_process_lost(exc: BaseException) -> bool:
    """Whether a query failure is Spark losing the Python planning process (`_PLANNER_LOST`)
    in `PythonStreamingSourceRunner`, anywhere in the JVM cause chain."""
    throwable = getattr(exc, "_origin", None)
    seen = 0
    while throwable is not None and seen < 20:
        seen += 1
        try:
            text = f"{throwable.getClass().getName()}: {throwable.getMessage()}"
            trace = " ".join(str(frame) for frame in throwable.getStackTrace())
        except Exception:  # not a JVM throwable (a test double, a closed gateway)
            break
        if _names_lost_planner(text, trace):
            return True
        throwable = throwable.getCause()
    return _names_lost_planner(str(exc), str(exc))


def _names_lost_planner(error: str, trace: str) -> bool:
    return "PythonStreamingSourceRunner" in trace and any(sign in error for sign in _PLANNER_LOST)


def run_query(start: Callable[[], Any], stop: threading.Event, clock: Callable[[], float] = time.monotonic) -> Any:
    """`start()` a query and wait for it (`await_query`); a query whose planning process was lost
    is started again from its checkpoint, at most `PLANNER_RESTARTS` times in a row. Returns
    the query that ended."""
    restarts = 0
    while True:
        started = clock()
        query = start()
        try:
            await_query(query, stop)
            return query
        except PlanningProcessLost as exc:
            restarts = 1 if clock() - started >= PLANNER_RESTART_RESET_S else restarts + 1
            if restarts > PLANNER_RESTARTS or stop.is_set():
                raise
            log.warning("%s; starting the query again from its checkpoint (%d of %d)", exc, restarts, PLANNER_RESTARTS)
            print(f"kmirror: {exc}; starting the query again from its checkpoint", file=sys.stderr, flush=True)


def await_query(query: Any, stop: threading.Event, poll_s: float = 0.5) -> None:
    """Wait for the query to end; on `stop`, let the current batch finish, then stop it."""
    from pyspark.errors import StreamingQueryException

    try:
        while not query.awaitTermination(poll_s):
            if stop.is_set():
                while query.status.get("isTriggerActive") and query.isActive:
                    time.sleep(0.1)
                query.stop()
                break
    except StreamingQueryException as exc:
        raise _failure(exc) from None
    failure = query.exception()
    if failure is not None:
        raise _failure(failure) from None


def _failure(exc: BaseException) -> KmirrorError:
    if planning_process_lost(exc):
        return PlanningProcessLost(
            "the query's Python planning process ended without an answer (a crash prints its Python "
            "stacks to the driver's log above)"
        )
    return explain(exc)
