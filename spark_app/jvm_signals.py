"""SIGTERM under spark-submit: the signal reaches the JVM, and the mirror stops after its batch.

Launched by `spark-submit` (EKS's driver pod, an EMR step, a standalone cluster), this Python driver
is a child of spark-submit's JVM, and that JVM is the process a pod deletion, `kill` or Ctrl-C
signals. Its own handler runs the JVM's shutdown hooks and exits 143 at once: the driver dies in the
middle of a batch, which the next start replays (at least once: its records land twice, after every
deploy). `forward_to(spark, on_signal)` replaces the JVM's TERM and INT handlers with one that calls
back into this process over py4j's callback server, so the JVM stays up while the mirror stops after
its current batch, as `python -m spark_app` does on a signal of its own; spark-submit then exits
with this driver's code (its PythonRunner waits for the Python process).

A driver that launched its JVM itself receives the signals directly: nothing is done then. A stop
that never ends is ended by the platform's own kill after its grace period (Kubernetes:
`terminationGracePeriodSeconds`, 30 s by default), as before.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, ClassVar

log = logging.getLogger("kmirror.signals")

FORWARDED = ("TERM", "INT")


class _Forward:
    """A `sun.misc.SignalHandler` implemented in Python (py4j calls `handle` from the JVM)."""

    def __init__(self, on_signal: Callable[[int], None]) -> None:
        self.on_signal = on_signal

    def handle(self, signal: Any) -> None:
        self.on_signal(int(signal.getNumber()))

    class Java:
        implements: ClassVar[list[str]] = ["sun.misc.SignalHandler"]


def launched_by_spark_submit() -> bool:
    """Whether this driver runs under spark-submit's JVM (it hands the gateway's port down)."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT"))


def forward_to(spark: Any, on_signal: Callable[[int], None]) -> list[str]:
    """Under spark-submit, TERM and INT to the JVM call `on_signal(signum)` here instead of ending
    the JVM (module doc); returns the signals forwarded (none when this process launched its JVM,
    or when the JVM refuses: then logged, and a signal ends the JVM as before)."""
    if not launched_by_spark_submit():
        return []
    from pyspark.java_gateway import ensure_callback_server_started

    gateway = spark.sparkContext._gateway
    forwarded = []
    try:
        ensure_callback_server_started(gateway)
        handler = _Forward(on_signal)
        jvm = spark.sparkContext._jvm
        for name in FORWARDED:
            jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal(name), handler)
            forwarded.append(name)
    except Exception as exc:  # the mirror runs on; only a signal's stop is not graceful
        log.warning("cannot forward the JVM's signals %s to the driver (a signal ends it at once): %s", FORWARDED, exc)
    return forwarded


def stop_on_signal(stop: threading.Event) -> Callable[[int], None]:
    """What a SIGTERM or SIGINT does to the mirror: `stop` is set, the current batch finishes."""

    def request_stop(signum: int) -> None:
        print(f"kmirror: signal {signum}: stopping after the current batch", file=sys.stderr, flush=True)
        stop.set()

    return request_stop


def stop_after_signal_to_jvm(spark: Any, stop: threading.Event) -> list[str]:
    """`forward_to(spark, stop_on_signal(stop))`: under spark-submit, a signal to the JVM stops the
    mirror after its current batch, as one to this process does."""
    return forward_to(spark, stop_on_signal(stop))
