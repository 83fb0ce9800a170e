"""The one periodic-task runner (kmirror_engine.scheduler): interval, error policy, start/stop."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from kmirror.errors import KmirrorError
from kmirror_engine.scheduler import PeriodicTask


class ScriptedEvent:
    """A stop event whose wait returns at once: not set for `ticks` waits, then set."""

    def __init__(self, ticks: int) -> None:
        self.ticks, self.waits, self.is_set = ticks, [], False

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        if len(self.waits) > self.ticks:
            self.is_set = True
        return self.is_set

    def set(self) -> None:
        self.is_set = True


def test_runs_once_per_interval_until_stopped() -> None:
    runs: list[int] = []
    event = ScriptedEvent(ticks=3)
    task = PeriodicTask("t", 2.5, lambda: runs.append(len(runs)), stop_event=event)
    task.run_until_stopped()
    assert runs == [0, 1, 2]  # the first run after one interval, none after the stop
    assert event.waits == [2.5, 2.5, 2.5, 2.5]
    assert task.runs == 3 and task.failures == 0


def test_failures_are_counted_reported_and_never_raised() -> None:
    outcomes: list[Any] = [KmirrorError("timed out"), 7, KmirrorError("again")]
    reported: list[tuple[int, str]] = []

    def action() -> Any:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    task = PeriodicTask(
        "t", 1.0, action, errors=(KmirrorError,), on_failure=lambda t, exc: reported.append((t.failures, str(exc)))
    )
    assert [task.run_once(), task.run_once(), task.run_once()] == [None, 7, None]
    assert task.failures == 2 and reported == [(1, "timed out"), (2, "again")]


def test_errors_outside_the_policy_raise_from_run_once_but_never_stop_the_loop(caplog: Any) -> None:
    calls: list[int] = []

    def action() -> None:
        calls.append(1)
        raise ValueError("a bug")

    task = PeriodicTask("t", 1.0, action, errors=(KmirrorError,), stop_event=ScriptedEvent(ticks=2))
    with pytest.raises(ValueError):
        task.run_once()
    task.run_until_stopped()  # the loop logs and goes on
    assert len(calls) == 3 and task.failures == 2
    assert "t: unexpected failure (2 failures so far)" in caplog.text


def test_default_policy_logs_name_count_and_interval(caplog: Any) -> None:
    task = PeriodicTask("kmirror-sync f", 30.0, lambda: 1 / 0)
    assert task.run_once() is None
    assert "kmirror-sync f failed (1 failures so far, retried in 30 s): division by zero" in caplog.text


def test_start_runs_now_when_asked_then_on_the_thread_and_stop_joins() -> None:
    ran = threading.Event()
    runs: list[str] = []

    def action() -> None:
        runs.append(threading.current_thread().name)
        if len(runs) >= 2:
            ran.set()

    task = PeriodicTask("kmirror-test flow", 0.001, action).start(run_now=True)
    assert runs[0] == threading.current_thread().name  # the first run on the caller's thread
    assert ran.wait(5.0)
    task.stop()
    assert not task.running
    stopped_at = len(runs)
    time.sleep(0.01)
    assert len(runs) == stopped_at  # nothing runs after stop
    assert "kmirror-test flow" in runs[1:]


def test_stop_before_start_and_a_bounded_join() -> None:
    PeriodicTask("t", 1.0, lambda: None).stop()  # nothing to join
    release = threading.Event()
    task = PeriodicTask("t", 0.001, lambda: release.wait(5.0), join_timeout_s=0.01).start()
    time.sleep(0.01)
    started = time.monotonic()
    task.stop()  # returns after the timeout although the action is still running
    assert time.monotonic() - started < 1.0
    release.set()
