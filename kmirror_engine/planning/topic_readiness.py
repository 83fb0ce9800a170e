"""Waiting for target partitions the planner just created (or added) to take writes.

A broker answers CreateTopics/CreatePartitions once the creation is in the metadata log, but it
takes a while to host the new partitions: until then its metadata lacks them or names no leader,
and a produce (or a ListOffsets) to them fails with UNKNOWN_TOPIC_OR_PARTITION or
NOT_LEADER_OR_FOLLOWER (Apache Kafka's broker publishes a creation to its metadata cache before
it makes the logs). A copy started meanwhile fails those produces retriably, refreshes its own
metadata of every target topic it writes and resends: in a 2,000-topic `--once` run that
refresh loop (kafka-python decoding the metadata of 2,000 topics each time) was 85% of the copy
tasks' time (py-spy, docs/performance.md, issue 47). One cheap probe here instead: the target's
metadata (librdkafka, every topic in one request), then ListOffsets of the new partitions, which
only the hosting leader answers without error, every `POLL_S` until all answer or `TIMEOUT_S`
passed. Waiting is an optimisation, never a condition: on timeout or a failing probe the plan
goes on and the copy's own retries (unchanged) cover what is still not ready.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

log = logging.getLogger("kmirror.target_topics")

POLL_S = 0.2
TIMEOUT_S = 30.0
PROBE_TIMEOUT_S = 5.0
# ListOffsets errors of a partition that is not hosted yet; any other (an ACL that denies it...)
# ends the wait: the probe cannot tell, and the copy judges the partition itself
NOT_YET = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
    }
)


def unled(admin: Any, wanted: Mapping[str, int], timeout_s: float = PROBE_TIMEOUT_S) -> list[tuple[str, int]]:
    """The partitions of `wanted` (topic -> partition count) the target's metadata does not show
    with a leader (all of them when the metadata request fails)."""
    every = [(t, p) for t, n in wanted.items() for p in range(n)]
    try:
        topics = admin.list_topics(timeout=timeout_s).topics
    except KafkaException:
        return every
    out = []
    for topic, partition in every:
        meta = topics.get(topic)
        parts = {} if meta is None or meta.error is not None else meta.partitions
        if partition not in parts or getattr(parts[partition], "leader", 0) < 0:
            out.append((topic, partition))
    return out


def unhosted(
    admin: Any, partitions: list[tuple[str, int]], timeout_s: float = PROBE_TIMEOUT_S
) -> list[tuple[str, int]]:
    """The `partitions` whose leader answers a ListOffsets (latest) with a not-hosted-yet error
    (`NOT_YET`) or not at all yet."""
    if not partitions:
        return []
    try:
        futures = admin.list_offsets(
            {TopicPartition(t, p): OffsetSpec.latest() for t, p in partitions}, request_timeout=timeout_s
        )
    except KafkaException:
        return list(partitions)
    out = []
    for tp, future in futures.items():
        try:
            future.result(timeout=timeout_s)
        except FutureTimeout:
            out.append((tp.topic, tp.partition))
        except KafkaException as exc:
            if exc.args[0].code() in NOT_YET:
                out.append((tp.topic, tp.partition))
    return out


def await_writable(
    admin: Any,
    wanted: Mapping[str, int],
    timeout_s: float = TIMEOUT_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Poll until every partition of `wanted` (topic -> partition count) has a leader that hosts
    it (module doc); True when they all do, False after `timeout_s` (logged, never raised)."""
    if not wanted:
        return True
    started = clock()
    while True:
        waiting = unled(admin, wanted)
        if not waiting:
            waiting = unhosted(admin, [(t, p) for t, n in wanted.items() for p in range(n)])
        if not waiting:
            log.info("%d new target partitions writable after %.1f s", sum(wanted.values()), clock() - started)
            return True
        if clock() - started >= timeout_s:
            log.info(
                "%d of %d new target partitions not writable after %.0f s (first %s[%d]); the copy retries them",
                len(waiting),
                sum(wanted.values()),
                timeout_s,
                *waiting[0],
            )
            return False
        sleep(POLL_S)
