"""One periodic-task runner for the driver's own work (heartbeats, idle checkpoint rounds, topic
config/ACL sync), as MirrorMaker runs its periodic work on one `Scheduler`.

A `PeriodicTask` has a name (also its thread's name), an interval, an action and an error
policy: a failure of one of the task's `errors` is counted (`failures`) and handed to
`on_failure(task, exc)` (which logs it; a default line otherwise) and the task runs again at
the next interval. Nothing a task raises ever stops the mirror: an unexpected exception in
the thread is logged and counted too, and the thread goes on.

- `run_once()`: one run under the error policy (tests, `--once` paths, a first run at start);
  returns the action's result, or None after a failure.
- `start(run_now=False)`: optionally one run at once, then one per interval from a daemon thread
  (the first after one interval).
- `stop()`: no run starts after it; waits for the thread (at most `join_timeout_s` if set).
- `run_until_stopped()`: the thread's loop, callable directly with an injected stop event.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger("kmirror.scheduler")


class StopEvent(Protocol):
    def wait(self, timeout: float | None = None) -> bool: ...

    def set(self) -> None: ...


class PeriodicTask:
    def __init__(
        self,
        name: str,
        interval_s: float,
        action: Callable[[], Any],
        *,
        errors: tuple[type[BaseException], ...] = (Exception,),
        on_failure: Callable[[PeriodicTask, BaseException], None] | None = None,
        stop_event: StopEvent | None = None,
        join_timeout_s: float | None = None,
    ) -> None:
        self.name, self.interval_s, self.action = name, interval_s, action
        self.errors = errors
        self.on_failure = on_failure or _log_failure
        self.join_timeout_s = join_timeout_s
        self.failures = 0
        self.runs = 0
        self._stop: StopEvent = stop_event if stop_event is not None else threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> Any:
        """One run of the action; a failure of `errors` is counted and reported, never raised."""
        self.runs += 1
        try:
            return self.action()
        except self.errors as exc:
            self.failures += 1
            self.on_failure(self, exc)
            return None

    def start(self, run_now: bool = False) -> PeriodicTask:
        if run_now:
            self.run_once()
        self._thread = threading.Thread(target=self.run_until_stopped, name=self.name, daemon=True)
        self._thread.start()
        return self

    def run_until_stopped(self) -> None:
        """Wait one interval, run, repeat until stopped; never raises."""
        while not self._stop.wait(self.interval_s):
            try:
                self.run_once()
            except Exception:  # outside the task's error policy: logged, counted, the loop goes on
                self.failures += 1
                log.exception(
                    "%s: unexpected failure (%d failures so far), retried next interval", self.name, self.failures
                )

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.join_timeout_s)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


def _log_failure(task: PeriodicTask, exc: BaseException) -> None:
    log.warning("%s failed (%d failures so far, retried in %.0f s): %s", task.name, task.failures, task.interval_s, exc)
