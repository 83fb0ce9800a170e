"""One writer task's copy, without Spark: which loop copies its ranges and with which clients.

At-least-once: `COPY_THREADS_PER_TASK` copy loops on disjoint source partitions
(`kmirror_engine.copying.task_threads`), each with clients this worker process kept from its
previous task of the same flow (`kmirror_engine.clients.cache`). `copy_loop: auto` takes the first
loop of `AUTO_ORDER` that serves the flow (`COPY_LOOP_CANNOT_SERVE`): the batch path
(`kmirror_engine.copying.batch_copy`, `BATCH_COPIERS_PER_TASK` copiers), else the native loop
(`kmirror_engine.copying.native_copy`), else the Python loop. Exactly-once: one transactional loop
with fresh clients (`kmirror_engine.copying.exactly_once`). The Spark sink (`spark_app.sink`)
calls `copy_task_ranges` from its writer tasks and `fence_for_query` before a query's first batch.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kmirror.errors import KmirrorError
from kmirror.flow.spec import ClusterEndpoint, FlowSpec, unserved_options
from kmirror.flow.views import CopySettings, FlowRoute
from kmirror_engine.clients.cache import CLIENTS, CopyClients, config_key
from kmirror_engine.copying.deleted_sources import tolerating_deleted_sources
from kmirror_engine.copying.native_copy import NativeRangeCopier, new_loop, use_native_loop
from kmirror_engine.copying.provenance import provenance_for
from kmirror_engine.copying.range_copy import RangeCopier
from kmirror_engine.copying.ranges import CONSUMER_REQUIRED, CONSUMER_TUNING, PRODUCER_TUNING, CopyRange
from kmirror_engine.copying.rate_limit import Throttled, paced_consumer_config, pacer_for, range_shares
from kmirror_engine.copying.record_limits import TargetRules, capped_producer_config, topic_rules
from kmirror_engine.copying.task_threads import copy_in_threads
from kmirror_engine.observability.progress import PartitionProgress

log = logging.getLogger("kmirror.copy")

CopyGroup = Callable[[list[CopyRange]], list[PartitionProgress]]
Guard = Callable[[CopyGroup], CopyGroup]  # wraps each loop's copy of a partition group

# Copy loops per writer task (at-least-once mode): one loop mostly waits on the brokers, two in
# one worker moved ~1.7x the records on this 2-core machine (docs/performance.md).
COPY_THREADS_PER_TASK = 2
# Batch copiers per writer task: one. A batch copier already keeps every partition's fetches and
# produce requests in flight on one thread, so a second one only adds its own connections,
# producer id and metadata, and hands the GIL back and forth: Spark `--once`, 1M records, 5
# alternating pairs: 0.41-0.55 us of worker CPU per record with one, 0.45-0.73 with two, lower in
# every pair at about the same rate (docs/performance.md, stop 40).
BATCH_COPIERS_PER_TASK = 1
# Exactly-once with a rate limit: a paced transaction commits after at most this long (its
# timeout, transaction.timeout.ms, is 60 s), whatever its size.
PACED_TRANSACTION_S = 20.0
# `copy_loop: auto` flows that the batch path can serve (`COPY_LOOP_CANNOT_SERVE`: no exactly-once,
# dead letters, skipped offsets, provenance headers or rate limits; client settings it can connect
# with) take it unless the driver's environment sets this to "record": then the record loops copy
# every auto flow (native where built, else Python), a way back without editing a deployment's
# specs, and the suites' record-loop sweep (`make test-record-sweep`).
AUTO_COPY_LOOP_ENV = "KMIRROR_AUTO_COPY_LOOP"
AUTO_COPY_LOOPS = ("batch", "record")  # its values; unset or empty: batch


def copy_natively(
    consumer_conf: dict[str, Any],
    producer_conf: dict[str, Any],
    ranges: Sequence[CopyRange],
    limits: dict[str, int | None],
    guard: Guard = lambda copy_group: copy_group,
) -> list[PartitionProgress]:
    """The native loop (`kmirror_engine.copying.native_copy`): `COPY_THREADS_PER_TASK` loops on disjoint source
    partitions, each on a native consumer/producer pair kept across tasks like the Python ones."""
    key = config_key(consumer_conf, producer_conf, {"copy_loop": "native"})

    def make() -> CopyClients:
        loop = new_loop(consumer_conf, producer_conf)
        return CopyClients(loop, loop)  # one object: close() ends both, len() is the producer queue

    def copy_group(group: list[CopyRange]) -> list[PartitionProgress]:
        with CLIENTS.lease(key, make) as clients:
            return NativeRangeCopier(clients.consumer, limits=limits).copy(group)

    return copy_in_threads(ranges, guard(copy_group), COPY_THREADS_PER_TASK)


def copy_in_batches(
    consumer_conf: dict[str, Any],
    producer_conf: dict[str, Any],
    ranges: Sequence[CopyRange],
    limits: dict[str, int | None],
    rules: dict[str, TargetRules],
    guard: Guard = lambda copy_group: copy_group,
) -> list[PartitionProgress]:
    """The batch path (`kmirror_engine.copying.batch_copy`): `BATCH_COPIERS_PER_TASK` copiers on disjoint
    source partitions, each (links, producer id, sequences) kept across tasks like the other loops."""
    from kmirror_engine.copying.batch_copy import new_batch_copier

    key = config_key(consumer_conf, producer_conf, {"copy_loop": "batch"})

    def make() -> CopyClients:
        copier = new_batch_copier(consumer_conf, producer_conf)
        return CopyClients(copier, copier)  # one object: close() ends both links, len() is what is in flight

    def copy_group(group: list[CopyRange]) -> list[PartitionProgress]:
        with CLIENTS.lease(key, make) as clients:
            clients.consumer.use_rules(limits, rules)
            return list(clients.consumer.copy(group))

    return copy_in_threads(ranges, guard(copy_group), BATCH_COPIERS_PER_TASK)


def batch_path_blockers(*configs: dict[str, Any]) -> list[str]:
    """Why the batch path cannot connect with these client configs (GSSAPI, keystores...): a record
    loop then copies the flow (for `copy_loop: batch` its records count as `fallback_records`).
    Imported here: kafka-python is needed by flows on the batch path only (the GSSAPI test venv has none)."""
    try:
        from kmirror_engine.copying import batch_net  # noqa: F401  (the connections, through kafka-python)
    except ImportError as exc:
        return [f"kafka-python, which the batch path speaks through, cannot be imported ({exc})"]
    from kmirror_engine.copying.batch_settings import link_config

    return [reason for config in configs for reason in link_config(config)[1]]


_BLOCKERS_LOGGED: set[str] = set()


def auto_copy_loop() -> str:
    """`AUTO_COPY_LOOP_ENV` of this process ("batch" when unset). The driver reads it and hands it to
    its writer tasks (`copy_task_ranges(auto_loop=...)`): on a cluster the executors do not inherit
    the driver's environment, so a task reading its own would ignore the setting."""
    value = os.environ.get(AUTO_COPY_LOOP_ENV, "").strip() or "batch"
    if value not in AUTO_COPY_LOOPS:
        raise KmirrorError(
            f"{AUTO_COPY_LOOP_ENV} is {value!r}; set it to one of {', '.join(AUTO_COPY_LOOPS)} "
            "(record: copy_loop auto flows use the record loops) or unset it (batch)"
        )
    return value


def takes_batch_path(copy: CopySettings, auto_loop: str | None = None) -> bool:
    """Whether a flow with these `copy` settings copies with the batch path: `copy_loop: batch`, or
    `auto` with nothing in the flow that needs a record loop (`COPY_LOOP_CANNOT_SERVE`) unless
    `auto_loop` (None or empty: this process's `AUTO_COPY_LOOP_ENV`) is "record". (Client settings
    the batch path cannot connect with send an auto flow to the record loops too: `batch_path_blockers`.)"""
    if copy.copy_loop == "batch":
        return True
    if copy.copy_loop != "auto" or (auto_loop or auto_copy_loop()) != "batch":
        return False
    return not unserved_options("batch", copy.loop_options)


def _fell_back(progress: list[PartitionProgress]) -> list[PartitionProgress]:
    return [dataclasses.replace(p, fallback_records=p.records) for p in progress]


def copy_task_ranges(
    spec: FlowSpec,
    ranges: Sequence[CopyRange],
    task_id: int,
    throttled: Throttled | None = None,
    auto_loop: str | None = None,
    run: str | None = None,
) -> list[PartitionProgress]:
    """Copy one task's ranges. At-least-once: `COPY_THREADS_PER_TASK` copy loops on disjoint
    source partitions (`kmirror_engine.copying.task_threads`), each with clients this worker process kept
    from its previous task of the same flow, if any (`kmirror_engine.clients.cache`; dropped after a
    failure); the native loop when the flow's `copy_loop` picks it (`kmirror_engine.copying.native_copy`).
    Exactly-once: one Python loop with fresh clients, one partition after another, each under its
    partition's transactional id; `run`: the driver's `internal_names.run_token` recorded with the offsets.
    A rate-limited flow paces each loop at its ranges' share of the limits
    (`kmirror_engine.copying.rate_limit`); the time they waited is added to `throttled`.
    `auto_loop`: the driver's `AUTO_COPY_LOOP_ENV` (`takes_batch_path`; None: this process's)."""
    from kmirror_engine.clients.factory import (
        admin_client,
        consumer_config,
        new_consumer,
        new_producer,
        producer_config,
    )

    copy, route, fail_on_data_loss = spec.copy, spec.route, spec.planning.fail_on_data_loss
    consumer_conf = {**CONSUMER_TUNING, **consumer_config(spec.source, copy, spec.consumer_group), **CONSUMER_REQUIRED}
    consumer_conf = paced_consumer_config(copy, consumer_conf)
    ranges = with_rate_shares(ranges) if copy.rate_limited else ranges
    throttled = throttled if throttled is not None else Throttled()
    dead_letter_topic = copy.dead_letter_topic
    limits = target_limits(spec.target, limited_topics(copy, ranges))
    # what the target refuses record by record, the skips and the provenance of dead letters (poison records)
    # and the provenance headers the record loop stamps and filters (provenance_headers)
    provenance = provenance_for(copy.loop_options, spec.source.alias, spec.target.alias)
    rules = cached_rules(spec.target, limits)
    poison: dict[str, Any] = {
        "rules": rules,
        "skip_offsets": copy.skip_offsets,
        "source_cluster": spec.source.alias,
        "provenance": provenance,
    }
    if not spec.exactly_once:

        def guard(copy_group: CopyGroup) -> CopyGroup:  # a source topic deleted under the copy
            return tolerating_deleted_sources(route, fail_on_data_loss, copy_group)

        producer_conf = capped_producer_config(
            {**PRODUCER_TUNING, **producer_config(spec.target, copy, spec.id)}, limits.values()
        )
        batch = takes_batch_path(copy, auto_loop)
        blockers = batch_path_blockers(consumer_conf, producer_conf) if batch else []
        if batch and not blockers:
            return copy_in_batches(consumer_conf, producer_conf, ranges, limits, rules, guard)
        fell_back = bool(blockers) and copy.copy_loop == "batch"  # auto: a record loop by rule, not a fallback
        for reason in set(blockers) - _BLOCKERS_LOGGED:
            _BLOCKERS_LOGGED.add(reason)
            log.log(
                logging.WARNING if fell_back else logging.INFO,
                "flow %s: copy_loop is %s but %s: a record loop copies it",
                spec.id,
                copy.copy_loop,
                reason,
            )
        if use_native_loop(spec.id, copy, consumer_conf, producer_conf):
            return copy_natively(consumer_conf, producer_conf, ranges, limits, guard)
        key = config_key(consumer_conf, producer_conf)

        def make() -> CopyClients:
            # the producer first: its id request then overlaps the consumer's first fetch
            producer = new_producer(producer_conf, role="copy-producer")
            return CopyClients(new_consumer(consumer_conf, role="copy-consumer"), producer)

        def copy_group(group: list[CopyRange]) -> list[PartitionProgress]:
            pacer = pacer_for(copy, sum(r.rate_share or 0.0 for r in group))
            try:
                with CLIENTS.lease(key, make) as clients:
                    copier = RangeCopier(
                        clients.consumer,
                        clients.producer,
                        dead_letter_topic=dead_letter_topic,
                        limits=limits,
                        pacer=pacer,
                        **poison,
                    )
                    copied = copier.copy(group)
                    return _fell_back(copied) if fell_back else copied
            finally:
                throttled.add(pacer.throttled_s if pacer is not None else 0.0)

        return copy_in_threads(ranges, guard(copy_group), COPY_THREADS_PER_TASK)
    consumer = new_consumer(consumer_conf, role="copy-consumer")
    try:
        from kmirror_engine.copying.exactly_once import TransactionalCopier
        from kmirror_engine.planning.internal_names import offsets_group, partition_transactional_id

        offsets = new_consumer(
            spec.target,
            role="exactly-once-offsets-consumer",
            group_id=offsets_group(spec.id),
            **{"enable.auto.commit": False},
        )
        pacer = pacer_for(copy, sum(r.rate_share or 0.0 for r in ranges))
        # a paced transaction is cut by time too, well inside transaction.timeout.ms
        paced: dict[str, Any] = {} if pacer is None else {"pacer": pacer, "max_seconds": PACED_TRANSACTION_S}
        out: dict[int, PartitionProgress] = {}
        try:
            # one partition at a time, each in its own transactions under its own transactional id
            for target, indexed in _by_target_partition(ranges).items():
                txn_id = partition_transactional_id(spec.id, *target)
                producer_conf = {**PRODUCER_TUNING, **producer_config(spec.target, copy, spec.id, txn_id)}
                producer = new_producer(
                    capped_producer_config(producer_conf, limits.values()), role="transactional-producer"
                )
                copier = TransactionalCopier(
                    consumer,
                    producer,
                    offsets,
                    source_admin=admin_client(spec.source),
                    group=offsets_group(spec.id),
                    run=run,
                    transactional_id=txn_id,
                    dead_letter_topic=dead_letter_topic,
                    limits=limits,
                    **paced,
                    **poison,
                )
                # one source partition per target partition: a deleted source drops the whole group (no re-copy)
                progress = tolerating_deleted_sources(route, fail_on_data_loss, copier.copy)([r for _, r in indexed])
                out.update((i, p) for (i, _), p in zip(indexed, progress, strict=True))
            return [out[i] for i in range(len(ranges))]
        finally:
            throttled.add(pacer.throttled_s if pacer is not None else 0.0)
            offsets.close()
    finally:
        consumer.close()


def _by_target_partition(ranges: Sequence[CopyRange]) -> dict[tuple[str, int], list[tuple[int, CopyRange]]]:
    """The ranges (with their index) of each target partition, in offset order."""
    out: dict[tuple[str, int], list[tuple[int, CopyRange]]] = {}
    for i, r in sorted(enumerate(ranges), key=lambda ir: (ir[1].target_topic, ir[1].partition, ir[1].start_offset)):
        out.setdefault((r.target_topic, r.partition), []).append((i, r))
    return out


def with_rate_shares(ranges: Sequence[CopyRange]) -> Sequence[CopyRange]:
    """`ranges` as planned (every range has its share), or, for rows without the reader's
    `rate_share` column, shares over this task alone (as if it were the batch's only task)."""
    if all(r.rate_share is not None for r in ranges):
        return ranges
    [shares] = range_shares([[r.end_offset - r.start_offset for r in ranges]])
    return [dataclasses.replace(r, rate_share=share) for r, share in zip(ranges, shares, strict=True)]


# Target topic limits (`max.message.bytes`) per (target cluster, topic), re-read after this long.
LIMITS_TTL_S = 60.0
_LIMITS: dict[tuple[str, str], tuple[float, TargetRules]] = {}


def limited_topics(copy: CopySettings, ranges: Sequence[CopyRange]) -> set[str]:
    """The target topics whose `max.message.bytes` bound the task's producer (`capped_producer_config`):
    the ranges' and the dead-letter topic of `copy` (a record too large for its target topic goes
    there whole, so the producer must take what the dead-letter topic takes, not only the largest
    target's limit)."""
    topics = {r.target_topic for r in ranges}
    if copy.dead_letter_topic:
        topics.add(copy.dead_letter_topic)
    return topics


def target_limits(target: ClusterEndpoint, topics: set[str]) -> dict[str, int | None]:
    """`max.message.bytes` of each topic of `target` (None: not reported); reads and caches (per
    worker process) all of each topic's `TargetRules`, which `cached_rules` then returns."""
    now = time.monotonic()
    cluster = target.bootstrap_servers
    stale = sorted(t for t in topics if (cluster, t) not in _LIMITS or now - _LIMITS[(cluster, t)][0] >= LIMITS_TTL_S)
    if stale:
        from kmirror_engine.clients.factory import admin_client

        for topic, rules in topic_rules(admin_client(target), stale).items():
            _LIMITS[(cluster, topic)] = (now, rules)
    return {t: _LIMITS[(cluster, t)][1].max_message_bytes for t in topics}


def cached_rules(target: ClusterEndpoint, topics: Iterable[str]) -> dict[str, TargetRules]:
    """The rules `target_limits` read for these topics of `target` (a topic not read: nothing
    known, nothing refused)."""
    cluster = target.bootstrap_servers
    return {t: _LIMITS[(cluster, t)][1] if (cluster, t) in _LIMITS else TargetRules() for t in topics}


def fence_for_query(route: FlowRoute, copy: CopySettings) -> list[str]:
    """Exactly-once: before the query's first batch, fence every transactional id a previous run of
    the flow `route` could have used (a batch has at most one task per partition: ids
    0..partitions-1), with producers of its target (`producer` overrides of `copy`)."""
    from kmirror_engine.clients.factory import admin_client, new_producer, producer_config
    from kmirror_engine.copying.exactly_once import fence_previous_generation
    from kmirror_engine.planning.discovery import TopicDiscovery

    discovery = TopicDiscovery(
        admin_client(route.source), route.source, route.topics, route.policy, route.target.alias, 0
    )
    topics = discovery.topics().values()
    partitions = [(t.target_topic, p) for t in topics for p in range(t.partitions)]
    return fence_previous_generation(
        route.flow_id,
        len(partitions),
        lambda txn_id: new_producer(producer_config(route.target, copy, route.flow_id, txn_id), role="fencer"),
        partitions,
    )
