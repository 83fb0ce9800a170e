"""Kafka clients are never destroyed on librdkafka's threads (kmirror_engine/clients/release.py).

An admin client completes its futures on its background thread (`rdk:bg`): a client whose last
reference is a future's done-callback is released there (a future that succeeds: a failed one
keeps its callbacks in a cycle with its exception's traceback until some later collection)."""

from __future__ import annotations

import gc
import threading
import time
import uuid
import weakref
from typing import Any

from confluent_kafka.admin import NewTopic

from kmirror_engine.clients import factory, release

UNREACHABLE = {"bootstrap.servers": "127.0.0.1:9", "log_level": 0, "socket.connection.setup.timeout.ms": 1000}


def _thread_name() -> str:
    """`rdk:bg` for librdkafka's background thread; Python's name for the threads it started."""
    with open(f"/proc/self/task/{threading.get_native_id()}/comm") as comm:
        name = comm.read().strip()
    return name if name.startswith("rdk:") else threading.current_thread().name


def _released_by_a_future(bootstrap: str, payload: Any) -> tuple[str, weakref.finalize]:
    """Hand `payload` to a done-callback of an admin client's future only, drop every other
    reference, and return the thread that destroyed it."""
    destroyed: list[str] = []
    done = threading.Event()

    def where() -> None:
        destroyed.append(_thread_name())
        done.set()

    finalizer = weakref.finalize(payload, where)
    admin = factory.AdminClient({"bootstrap.servers": bootstrap})
    topic = f"release-{uuid.uuid4().hex[:8]}"
    futures = admin.create_topics([NewTopic(topic, 1, 1)])
    futures[topic].add_done_callback(lambda _future, held=payload: held)
    del payload, futures
    assert done.wait(60), "the future never completed"
    return destroyed[0], finalizer


def test_a_reference_dropped_by_a_future_is_dropped_on_librdkafkas_thread(clusters: Any) -> None:
    """The hazard itself, shown with a harmless object: it is destroyed on `rdk:bg`."""

    class Payload:
        pass

    thread, _ = _released_by_a_future(clusters.source, Payload())
    assert thread == "rdk:bg"


def test_a_producer_released_on_librdkafkas_thread_is_destroyed_on_the_reaper_thread(clusters: Any) -> None:
    before = release.released_off_thread
    thread, _ = _released_by_a_future(clusters.source, factory.Producer(UNREACHABLE))
    assert thread == "kmirror-client-reaper"
    deadline = time.monotonic() + 10  # counted once the reaper's collection after it is done
    while release.released_off_thread == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert release.released_off_thread == before + 1


def test_a_consumer_in_a_cycle_collected_on_librdkafkas_thread_is_destroyed_on_the_reaper_thread(
    clusters: Any,
) -> None:
    """A collection that runs on `rdk:bg` (here: started by a done-callback) finds a cycle holding
    a consumer: the consumer is kept, with its cycle, for the reaper, whose collection frees it."""

    class Holder:
        pass

    holder = Holder()
    holder.consumer = factory.Consumer({**UNREACHABLE, "group.id": "g"})  # type: ignore[attr-defined]
    holder.self = holder  # type: ignore[attr-defined]
    del holder  # garbage now, in a cycle: freed by the next collection, wherever it runs
    before = release.released_off_thread
    collected_on: list[str] = []
    admin = factory.AdminClient({"bootstrap.servers": clusters.source})
    topic = f"release-{uuid.uuid4().hex[:8]}"
    futures = admin.create_topics([NewTopic(topic, 1, 1)])
    futures[topic].add_done_callback(lambda _future: collected_on.append(_thread_name()) or gc.collect())
    futures[topic].result(60)
    deadline = time.monotonic() + 10
    while release.released_off_thread == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert collected_on == ["rdk:bg"]
    assert release.released_off_thread == before + 1


def test_elsewhere_a_client_is_destroyed_at_once_where_its_last_reference_drops() -> None:
    destroyed: list[str] = []
    producer = factory.Producer(UNREACHABLE)
    weakref.finalize(producer, lambda: destroyed.append(_thread_name()))
    worker = threading.Thread(target=lambda: None, name="some-python-thread")
    worker.start()
    worker.join()
    del producer
    assert destroyed == [threading.current_thread().name]
    assert not release.keep_if_on_librdkafka_thread(object())


def test_a_forked_child_has_no_reaper_and_keeps_what_its_parent_had_not_destroyed() -> None:
    """Spark's Python daemon forks its workers: a child starts its own reaper, and never destroys
    the parent's clients (their librdkafka threads are not in the child)."""
    import os
    import queue

    release.start_reaper()
    parents = release._graveyard
    pid = os.fork()
    if pid == 0:  # the child: only flags, then out without running any cleanup
        ok = release._reaper is None and release._graveyard is not parents and release._inherited[-1] is parents
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert release._reaper is not None and release._graveyard is parents  # the parent's are untouched
    assert isinstance(parents, queue.SimpleQueue)
