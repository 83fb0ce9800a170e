"""Source offset queries on the driver (one ListOffsets request per call, all partitions at once)
and the retry policy of the planning side.

`query_offsets` returns, per (topic, partition): the log start ("earliest"), the end visible to
the configured isolation level ("latest": the last stable offset under read_committed), or the
first offset at/after a timestamp (the end when no record is that recent).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from kmirror.errors import ConnectionFailure
from kmirror.flow.spec import ClusterEndpoint

log = logging.getLogger("kmirror.offsets")
T = TypeVar("T")
ONCE_DEADLINE_S = 30.0
MAX_BACKOFF_S = 30.0


def _spec(which: str | int) -> Any:
    if which == "earliest":
        return OffsetSpec.earliest()
    if which == "latest":
        return OffsetSpec.latest()
    if isinstance(which, int):
        return OffsetSpec.for_timestamp(which)
    raise ValueError(f"unknown offset spec {which!r}: use 'earliest', 'latest' or an epoch-ms timestamp")


def query_offsets(
    admin: Any,
    endpoint: ClusterEndpoint,
    partitions: Iterable[tuple[str, int]],
    which: str | int,
    read_committed: bool = True,
    timeout_s: float = 10.0,
) -> dict[tuple[str, int], int]:
    """Offsets of `partitions` (see module doc); raises ConnectionFailure naming the cluster."""
    wanted = sorted(set(partitions))
    if not wanted:
        return {}
    isolation = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
    request = {TopicPartition(t, p): _spec(which) for t, p in wanted}
    out: dict[tuple[str, int], int] = {}
    try:
        futures = admin.list_offsets(request, isolation_level=isolation, request_timeout=timeout_s)
        for tp, future in futures.items():
            out[(tp.topic, tp.partition)] = future.result(timeout=timeout_s).offset
    except KafkaException as exc:
        raise ConnectionFailure(
            f"cluster {endpoint.alias!r} ({endpoint.bootstrap_servers}): listing {which} offsets failed: {exc.args[0]}"
        ) from None
    except FutureTimeout:  # a frozen or partitioned broker: no answer at all
        raise ConnectionFailure(
            f"cluster {endpoint.alias!r} ({endpoint.bootstrap_servers}): listing {which} offsets got no answer "
            f"within {timeout_s:.0f} s"
        ) from None
    if isinstance(which, int):  # no record at/after the timestamp: start at the end
        missing = [tp for tp, off in out.items() if off < 0]
        if missing:
            out.update(query_offsets(admin, endpoint, missing, "latest", read_committed, timeout_s))
        return out
    unknown = sorted(tp for tp, off in out.items() if off < 0)
    if unknown:  # librdkafka's invalid offset (-1001) from a broker that could not answer: never a truncation
        (topic, partition), offset = unknown[0], out[unknown[0]]
        raise ConnectionFailure(
            f"cluster {endpoint.alias!r} ({endpoint.bootstrap_servers}): listing {which} offsets gave no valid "
            f"offset for {len(unknown)} partition(s), first {topic}[{partition}] ({offset}); asked again"
        )
    return out


def with_retries(
    call: Callable[[], T],
    what: str,
    bounded: bool,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Run `call`, retrying ConnectionFailure with exponential backoff (1 s doubling to 30 s).

    `bounded` (the `--once` mode): give up after ONCE_DEADLINE_S and re-raise the last failure,
    so a driver never hangs on an unreachable cluster. Unbounded (streaming): retry until it
    works, logging every failure, so an outage is survived and reported.
    """
    deadline = clock() + ONCE_DEADLINE_S
    backoff = 1.0
    while True:
        try:
            return call()
        except ConnectionFailure as exc:
            if bounded and clock() + backoff > deadline:
                raise
            log.warning("%s failed, retrying in %.0f s: %s", what, backoff, exc)
            sleep(backoff)
            backoff = min(MAX_BACKOFF_S, backoff * 2)
