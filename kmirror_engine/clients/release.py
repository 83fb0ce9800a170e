"""Kafka clients are destroyed on Python's threads, never on librdkafka's own.

A client's last reference can drop anywhere Python code runs, and some Python code runs on
librdkafka's threads: an admin client completes its futures on its background thread (`rdk:bg`),
whose done-callbacks and allocations may free objects or start a garbage collection there. A
collection frees whatever cycles it finds, Kafka clients inside them included (seen in the test
process: admin clients and producers of a flow's planner destroyed on another admin client's
`rdk:bg`, tests/test_client_release.py). Destroying a client there is what confluent-kafka
does not survive (its issue #1761, segfaults "on GC runs in multithreaded context"; on the
client's own thread librdkafka aborts: "rd_kafka_destroy() called from librdkafka owned thread"),
and a fault on a librdkafka thread leaves no Python stack: those threads block every signal, so
the process dies before any fault handler runs.

So the factory's clients (`kmirror_engine.clients.factory`) call `keep_if_on_librdkafka_thread`
from their `__del__`: on a librdkafka thread the client is kept alive (resurrected) and handed to
one reaper thread, which drops it and collects, so it is destroyed there. Elsewhere nothing changes.
"""

from __future__ import annotations

import gc
import logging
import os
import queue
import threading
from typing import Any

log = logging.getLogger("kmirror.clients")

_graveyard: queue.SimpleQueue[Any] = queue.SimpleQueue()
_reaper: threading.Thread | None = None
_lock = threading.Lock()
released_off_thread = 0  # clients the reaper destroyed for a librdkafka thread (tests, logs)


def on_librdkafka_thread() -> bool:
    """True on a thread librdkafka started (its name begins with `rdk:`). Threads Python did not
    start are the fallback where /proc is missing."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "rb") as comm:
            return comm.read().startswith(b"rdk:")
    except OSError:
        return isinstance(threading.current_thread(), threading._DummyThread)  # no public test for it


def start_reaper() -> None:
    """The reaper thread, started once per process (from a client's constructor, on a Python thread)."""
    global _reaper
    if _reaper is not None:
        return
    with _lock:
        if _reaper is None:
            _reaper = threading.Thread(target=_reap, name="kmirror-client-reaper", daemon=True)
            _reaper.start()


def keep_if_on_librdkafka_thread(client: Any) -> bool:
    """From a client's `__del__`: on a librdkafka thread, keep `client` alive for the reaper and
    return True; elsewhere return False (the client is destroyed as usual)."""
    try:
        if not on_librdkafka_thread():
            return False
        _graveyard.put(client)  # a new reference: the object (and any cycle it is in) lives on
    except Exception:  # at interpreter exit (builtins and modules torn down): destroyed as usual
        return False
    return True


def _reap() -> None:
    global released_off_thread
    while True:
        clients = [_graveyard.get()]
        while True:  # a collection on rdk:bg may hand over several: one full collection for all
            try:
                clients.append(_graveyard.get_nowait())
            except queue.Empty:
                break
        kinds = sorted({type(client).__name__ for client in clients})
        count = len(clients)
        # `__del__` runs once per object: dropping them now destroys them here (when they sat in a
        # cycle, the collection below frees the cycle here too)
        clients.clear()
        gc.collect()
        released_off_thread += count
        log.debug(
            "%d Kafka client(s) (%s) released on a librdkafka thread destroyed on the reaper thread",
            count,
            ", ".join(kinds),
        )


_inherited: list[Any] = []  # a parent's queue in a forked child: never emptied there


def _after_fork_in_child() -> None:
    """A forked child (Spark's Python worker daemon forks its workers) has no reaper thread. What
    the parent's reaper had not destroyed yet stays referenced: a client destroyed in a child
    would wait for threads only its parent has."""
    global _reaper, _graveyard, _lock
    _inherited.append(_graveyard)
    _reaper, _graveyard, _lock = None, queue.SimpleQueue(), threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
