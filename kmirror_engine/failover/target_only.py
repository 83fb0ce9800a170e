"""Failover with the source gone: everything `kmirror translate/failover` need from the target.

`source_reachable` decides within `SOURCE_PROBE_S` whether the source answers (one admin
metadata request, librdkafka's own log lines silenced, so a dead cluster costs one line on the
terminal, not a screen of connection errors). When it does not, a group's position comes from
the newest checkpoint of each of its partitions in `<source>.checkpoints.internal` on the
target (`latest_checkpoints`), which the mirror wrote while the source was alive.

Per partition the report carries the checkpoint's age (now - the checkpoint record's
timestamp: how stale the group's position may be) and the records at risk: records the source
held that the target had not, i.e. the partition's newest known source end offset minus the
newest upstream offset known mirrored (`SyncStore.mirrored_until`), with the end offset the
mirror saw last (persisted with the offset syncs, `SOURCE_END_HEADER`): the last known lag. It
is a lower bound (the source may have taken writes after that batch) and None ("unknown") when
no sync carried an end offset.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kmirror.flow.endpoint import ClusterEndpoint
from kmirror.flow.replication_policy import checkpoints_topic
from kmirror.flow.views import FlowRoute
from kmirror.mm2.formats import Checkpoint, decode_checkpoint
from kmirror_engine.failover.checkpoints import Translation
from kmirror_engine.failover.offset_syncs import SyncStore

SOURCE_PROBE_S = 5.0

# librdkafka logs through this logger during the probe; it goes nowhere (the verdict is one line).
_quiet = logging.getLogger("kmirror.source-probe.librdkafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


@dataclass(frozen=True)
class CheckpointedPosition:
    """A group's partition as the target last heard of it."""

    translation: Translation
    age_ms: int | None  # now - the checkpoint record's timestamp (None: the broker gave none)
    records_at_risk: int | None  # source end known last - mirrored_until (None: unknown)


def source_reachable(endpoint: ClusterEndpoint, timeout_s: float = SOURCE_PROBE_S) -> str | None:
    """None when `endpoint` answers a metadata request within `timeout_s`, else why not (one line)."""
    from confluent_kafka import KafkaException

    from kmirror_engine.clients.factory import new_admin

    timeout_ms = str(int(timeout_s * 1000))
    limits = {"socket.connection.setup.timeout.ms": timeout_ms, "socket.timeout.ms": timeout_ms}
    admin = new_admin(endpoint, role="source-probe", logger=_quiet, **limits)
    try:
        admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else exc
        return str(getattr(error, "str", lambda: error)())
    return None


Stamped = tuple[Checkpoint, int | None]  # a checkpoint and its record's timestamp (ms)


def latest_checkpoints(checkpoints: Iterable[Stamped], group: str) -> dict[tuple[str, int], Stamped]:
    """(remote topic, partition) -> the newest (checkpoint, timestamp ms) of `group`, by log order
    (the emitter only ever appends a more recent checkpoint, see `is_more_recent`)."""
    out: dict[tuple[str, int], Stamped] = {}
    for checkpoint, timestamp_ms in checkpoints:
        if checkpoint.group == group:
            out[(checkpoint.topic, checkpoint.partition)] = (checkpoint, timestamp_ms)
    return out


def positions_from_checkpoints(
    route: FlowRoute,
    latest: Mapping[tuple[str, int], Stamped],
    store: SyncStore,
    now_ms: int,
    source_ends: Mapping[tuple[str, int], int] | None = None,
) -> list[CheckpointedPosition]:
    """The group's positions on the target, sorted; pure. Remote topics this flow's policy does
    not map back to a source topic of this flow are left out."""
    out = []
    for (remote, partition), (checkpoint, timestamp_ms) in sorted(latest.items()):
        source_topic = route.policy.upstream_topic(remote) or remote  # identity policy: same name
        if route.policy.format_remote_topic(route.source.alias, source_topic) != remote:
            continue
        translation = Translation(
            source_topic,
            partition,
            remote,
            checkpoint.upstream_offset,
            checkpoint.downstream_offset,
            checkpoint.metadata,
        )
        age = None if timestamp_ms is None or timestamp_ms <= 0 else max(now_ms - timestamp_ms, 0)
        end = (source_ends or {}).get((source_topic, partition))
        mirrored = store.mirrored_until(source_topic, partition)
        at_risk = None if end is None or mirrored is None else max(end - mirrored, 0)
        out.append(CheckpointedPosition(translation, age, at_risk))
    return out


def unlisted_partitions(
    positions: Iterable[CheckpointedPosition], partition_counts: Mapping[str, int]
) -> list[tuple[str, int]]:
    """(remote topic, partition) of the topics the group has a checkpoint on, that have none
    (the group never committed there, or its checkpoint could not be read); sorted, pure."""
    have = {(p.translation.target_topic, p.translation.partition) for p in positions}
    topics = sorted({topic for topic, _ in have})
    return [(t, n) for t in topics for n in range(partition_counts.get(t, 0)) if (t, n) not in have]


def target_partition_counts(
    endpoint: ClusterEndpoint, topics: Iterable[str], timeout_s: float = 10.0
) -> dict[str, int]:
    """Partitions of each of `topics` on the target (a topic the metadata does not list: left out).
    Raises KafkaException when the target does not answer."""
    from kmirror_engine.clients.factory import admin_client

    listed = admin_client(endpoint).list_topics(timeout=timeout_s).topics
    return {t: len(listed[t].partitions) for t in topics if t in listed and listed[t].error is None}


def read_checkpoints_with_time(target: ClusterEndpoint, topic: str, timeout_s: float = 30.0) -> list[Stamped]:
    """Every checkpoint of `topic` with its record timestamp (ms), in log order."""
    from kmirror_engine.failover.offset_sync_topic import read_partition0

    out = []
    for m in read_partition0(target, topic, timeout_s):
        _kind, timestamp_ms = m.timestamp()
        out.append((decode_checkpoint(m.key() or b"", m.value() or b""), timestamp_ms))
    return out


def group_from_checkpoints(route: FlowRoute, group: str) -> list[CheckpointedPosition]:
    """`group`'s positions on the target from its newest checkpoints (reads the target only)."""
    from kmirror_engine.failover.offset_sync_snapshots import SyncLog

    store = SyncStore()
    sync_log = SyncLog(route.target, route.source.alias)
    sync_log.load(store)
    checkpoints = read_checkpoints_with_time(route.target, checkpoints_topic(route.source.alias))
    latest = latest_checkpoints(checkpoints, group)
    return positions_from_checkpoints(route, latest, store, int(time.time() * 1000), sync_log.syncs.source_ends)


def describe_position(p: CheckpointedPosition) -> str:
    """One report line: `orders[0]: checkpoint 12.3 s old, records at risk: unknown`."""
    age = "unknown age" if p.age_ms is None else f"{p.age_ms / 1000:.1f} s old"
    risk = "unknown" if p.records_at_risk is None else str(p.records_at_risk)
    t = p.translation
    return (
        f"{t.target_topic}[{t.partition}]: upstream {t.upstream_offset} -> {t.downstream_offset}, "
        f"checkpoint {age}, records at risk: {risk}"
    )
