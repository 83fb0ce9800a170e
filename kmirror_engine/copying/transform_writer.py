"""The transform path's producing (the Spark glue's `spark_app/records_writer.py` feeds it a task's
rows): each row goes to `policy.format_remote_topic(source alias, row.topic)`, partition
`row.partition`, with its key, value, headers and timestamp (null: the producer's clock).

- A remote topic that does not exist (a row routed to a new topic) is created as every other path
  creates target topics (`planning.target_topics.TargetTopics`: the flow's replication factor, the
  source topic's configs when it has one and the flow syncs configs, recorded in the created-topics
  registry), with as many partitions as the largest remote topic of the batch. A topic that exists
  is used as it is. A null topic or partition fails the task naming the row.
- Offset syncs: a row is *attributed* to source partition (row.topic, row.partition) when that
  partition was planned in the batch, `row.offset` lies in its range and is above the last
  attributed offset (rows of one partition arrive in offset order); its delivery offset then gives
  the (upstream, downstream) sync, recorded where the drift changes (as the copy path does).
  Dropped and routed records leave no sync, so their source offsets map forward to the next
  written record. Unattributed rows (routed elsewhere) are counted apart.
- Any delivery error raises CopyError (failing the task and so the micro-batch: at-least-once).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kmirror.errors import KmirrorError
from kmirror.flow.spec import ClusterEndpoint
from kmirror.flow.views import CopySettings, FlowRoute, TopicSyncSettings
from kmirror_engine.clients.factory import admin_client, new_producer, producer_config
from kmirror_engine.copying.ranges import PRODUCER_TUNING, CopyError
from kmirror_engine.planning.created_topics import CreatedTopics
from kmirror_engine.planning.discovery import MirroredTopic, list_topic_partitions
from kmirror_engine.planning.target_topics import TargetTopics

ADMIN_TIMEOUT_S = 30.0
_PRODUCERS: dict[str, Any] = {}  # per worker process and config, reused by later tasks
_PRODUCERS_LOCK = threading.Lock()


def take_producer(route: FlowRoute, copy: CopySettings) -> tuple[str, Any]:
    """A producer for the flow's target (`route.target`, with the `producer` overrides of `copy`: a
    cached one that drained cleanly, else a new one) and its cache key for `keep_producer`."""
    config = {**PRODUCER_TUNING, **producer_config(route.target, copy, route.flow_id)}
    key = json.dumps(config, sort_keys=True, default=str)
    with _PRODUCERS_LOCK:
        producer = _PRODUCERS.pop(key, None)
    return key, producer if producer is not None else new_producer(config, role="records-producer")


def keep_producer(key: str, producer: Any) -> None:
    """Keep a producer that drained cleanly for the next task of this process."""
    with _PRODUCERS_LOCK:
        _PRODUCERS[key] = producer


class SourcePartitionWrites:
    """What was written of one planned source partition: counts, syncs, latency."""

    def __init__(self) -> None:
        self.records = self.bytes = 0
        self.drift: int | None = None
        self.syncs: list[list[int]] = []
        self.last_upstream = -1
        self.last_ts: int | None = None
        self.lat = [2**62, -(2**62), 0, 0]  # min, max, sum, count (ms)

    def delivered(self, upstream: int, downstream: int, ts_ms: int | None, now_ms: int) -> None:
        if downstream - upstream != self.drift:
            self.syncs.append([upstream, downstream])
            self.drift = downstream - upstream
        self.last_upstream = upstream
        if ts_ms is not None:
            latency = now_ms - ts_ms
            self.lat = [min(self.lat[0], latency), max(self.lat[1], latency), self.lat[2] + latency, self.lat[3] + 1]

    def summary(self) -> dict[str, Any]:
        syncs = list(self.syncs)
        if self.drift is not None and syncs[-1][0] != self.last_upstream:
            syncs.append([self.last_upstream, self.last_upstream + self.drift])
        return {
            "records": self.records,
            "bytes": self.bytes,
            "syncs": syncs,
            "last_ts": self.last_ts,
            "lat": self.lat if self.lat[3] else None,
        }


class TransformWrites:
    """One writer task's state: the producer, the planned ranges (`[source_topic, partition, start,
    end, target_topic]`), per-partition bookkeeping. `route` names the topics and the clusters,
    `topic_sync` how a new remote topic is created. `admin_factory` and `created` (the
    created-topics registry) are the real ones unless a test gives fakes."""

    def __init__(
        self,
        route: FlowRoute,
        topic_sync: TopicSyncSettings,
        producer: Any,
        ranges: Sequence[Sequence[Any]],
        admin_factory: Callable[[ClusterEndpoint], Any] = admin_client,
        created: Any = None,
    ) -> None:
        self.route, self.topic_sync = route, topic_sync
        self.producer, self.admin_factory = producer, admin_factory
        self.created = (
            created if created is not None else CreatedTopics(route.target, route.source.alias, route.flow_id)
        )
        self.planned: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for topic, partition, start, end, _target in ranges:
            self.planned.setdefault((topic, int(partition)), []).append((int(start), int(end)))
        self.range_targets = {str(r[4]) for r in ranges}
        self.parts: dict[tuple[str, int], SourcePartitionWrites] = {}
        self.last_attributed: dict[tuple[str, int], int] = {}
        self.unattributed = [0, 0]  # records, bytes
        self.remote: dict[str, str] = {}
        self.known_targets: set[str] = set()
        self.failures: list[str] = []
        self.pending: dict[tuple[str, int], deque[tuple[tuple[str, int] | None, int, int | None]]] = {}
        self.callbacks: dict[tuple[str, int], Any] = {}
        self.now_ms = 0

    def attribute(self, topic: str, partition: int, offset: int) -> tuple[str, int] | None:
        key = (topic, partition)
        spans = self.planned.get(key)
        if spans is None or offset <= self.last_attributed.get(key, -1):
            return None
        if not any(start <= offset < end for start, end in spans):
            return None
        self.last_attributed[key] = offset
        return key

    def target(self, topic: str) -> str:
        remote = self.remote.get(topic)
        if remote is None:
            remote = self.remote[topic] = self.route.policy.format_remote_topic(self.route.source.alias, topic)
        if remote not in self.known_targets:
            self._ensure_target(remote, topic)
        return remote

    def _ensure_target(self, remote: str, topic: str) -> None:
        """Create `remote` (the remote name of source-side `topic`) unless it exists (module doc)."""
        target_admin = self.admin_factory(self.route.target)
        listing = list_topic_partitions(target_admin, self.route.target, ADMIN_TIMEOUT_S)
        self.known_targets.update(listing)
        if remote in listing:
            return
        partitions = max((listing.get(t, 1) for t in self.range_targets), default=1)
        source_admin = self.admin_factory(self.route.source)
        # a routed name may exist only in the transform: then there are no source configs to copy
        sync_configs = self.topic_sync.configs and (
            any(t == topic for t, _ in self.planned)
            or topic in list_topic_partitions(source_admin, self.route.source, ADMIN_TIMEOUT_S)
        )
        TargetTopics(
            source_admin,
            target_admin,
            self.route.target,
            self.topic_sync.replication_factor,
            sync_configs,
            ADMIN_TIMEOUT_S,
            created=self.created,
        ).ensure({topic: MirroredTopic(topic, partitions, remote)})
        self.known_targets.add(remote)

    def on_delivery_for(self, tp: tuple[str, int]) -> Any:
        queue = self.pending.setdefault(tp, deque())
        callback = self.callbacks.get(tp)
        if callback is not None:
            return queue, callback

        def delivered(err: Any, msg: Any) -> None:
            source, upstream, ts_ms = queue.popleft()
            if err is not None:
                self.failures.append(
                    f"delivery to {tp[0]}[{tp[1]}] failed for a transform row of source offset {upstream}: {err.str()}"
                )
            elif source is not None:
                self.parts[source].delivered(upstream, msg.offset(), ts_ms, self.now_ms)

        self.callbacks[tp] = delivered
        return queue, delivered

    def write(self, col: Mapping[str, Sequence[Any]]) -> None:
        """Produce one batch of rows: `col` is column name -> values (`timestamp` in microseconds)."""
        timestamps = col["timestamp"]
        produce = self.producer.produce
        for i, (topic, partition, offset) in enumerate(zip(col["topic"], col["partition"], col["offset"], strict=True)):
            if topic is None or partition is None:
                raise KmirrorError(
                    f"flow {self.route.flow_id}: the transform returned a row with a null "
                    f"{'topic' if topic is None else 'partition'} (source offset {offset})"
                )
            key, value = col["key"][i], col["value"][i]
            ts_ms = timestamps[i] // 1000 if timestamps[i] is not None else None
            headers = [(h["key"], h["value"]) for h in col["headers"][i] or []]
            target = self.target(topic)
            queue, callback = self.on_delivery_for((target, partition))
            source = self.attribute(topic, partition, offset) if offset is not None else None
            size = len(key or b"") + len(value or b"")
            queue.append((source, offset, ts_ms))
            while True:
                try:
                    produce(target, value, key, partition, on_delivery=callback, timestamp=ts_ms or 0, headers=headers)
                    break
                except BufferError:
                    self.poll(0.05)  # local queue full: serve delivery reports, then retry
            if source is not None:
                part = self.parts.setdefault(source, SourcePartitionWrites())
                part.records, part.bytes, part.last_ts = part.records + 1, part.bytes + size, ts_ms
            else:
                self.unattributed[0] += 1
                self.unattributed[1] += size
        self.poll(0)

    def poll(self, timeout_s: float) -> None:
        self.now_ms = int(time.time() * 1000)
        self.producer.poll(timeout_s)
        self._raise_failures()

    def drain(self) -> None:
        while True:
            self.now_ms = int(time.time() * 1000)
            remaining = self.producer.flush(0.1)
            self._raise_failures()
            if remaining == 0:
                return

    def _raise_failures(self) -> None:
        if self.failures:
            raise CopyError(f"{len(self.failures)} record(s) failed; first: {self.failures[0]}")

    def summary(self, first_ms: int) -> dict[str, Any]:
        parts = [[t, p, part.summary()] for (t, p), part in sorted(self.parts.items())]
        return {
            "parts": parts,
            "unattributed": self.unattributed,
            "first_ms": first_ms,
            "last_ms": int(time.time() * 1000),
        }
