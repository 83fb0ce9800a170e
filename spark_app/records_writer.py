"""The writer of the transform path: a `mapInArrow` function that produces a transform's result
rows to the target with confluent-kafka and returns one summary row per task.

Contract of `RecordsWriter(spec_json, ranges)(batches)` (runs on executors):
- each row goes to `policy.format_remote_topic(source alias, row.topic)`, partition `row.partition`,
  with its key, value, headers and timestamp (null: the producer's clock); a remote topic that
  does not exist (a row routed to a new topic) is created with as many partitions as the largest
  remote topic of the batch; a null topic or partition fails the task naming the row;
- offset syncs: a row is *attributed* to source partition (row.topic, row.partition) when that
  partition was planned in the batch, `row.offset` lies in its range and is above the last
  attributed offset (rows of one partition arrive in offset order); its delivery offset then
  gives the (upstream, downstream) sync, recorded where the drift changes (as the copy path
  does). Dropped and routed records leave no sync, so their source offsets map forward to the
  next written record. Unattributed rows (routed elsewhere) are counted apart;
- it yields its summary (JSON in column `summary`) only after every delivery was acknowledged;
  any delivery error raises CopyError, failing the task and so the micro-batch (at-least-once).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from kmirror.errors import KmirrorError

SUMMARY_SCHEMA = "summary STRING"
_PRODUCERS: dict[str, Any] = {}  # per worker process and config, reused by later tasks
_PRODUCERS_LOCK = threading.Lock()


class _SourcePartition:
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


class _Task:
    """One writer task's state: the producer, the planned ranges, per-partition bookkeeping."""

    def __init__(self, spec: Any, producer: Any, ranges: Sequence[Sequence[Any]]) -> None:
        self.spec, self.producer = spec, producer
        self.planned: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for topic, partition, start, end, _target in ranges:
            self.planned.setdefault((topic, int(partition)), []).append((int(start), int(end)))
        self.range_targets = {str(r[4]) for r in ranges}
        self.parts: dict[tuple[str, int], _SourcePartition] = {}
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
            remote = self.remote[topic] = self.spec.policy.format_remote_topic(self.spec.source.alias, topic)
        if remote not in self.known_targets:
            self._ensure_target(remote)
        return remote

    def _ensure_target(self, remote: str) -> None:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import NewTopic

        from kmirror_engine.clients import admin_client

        admin = admin_client(self.spec.target)
        listing = {n: len(t.partitions) for n, t in admin.list_topics(timeout=30).topics.items() if t.error is None}
        self.known_targets.update(listing)
        if remote in listing:
            return
        partitions = max((listing.get(t, 1) for t in self.range_targets), default=1)
        try:
            admin.create_topics([NewTopic(remote, partitions, -1)])[remote].result(timeout=30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise KmirrorError(
                    f"cannot create target topic {remote!r} (a transform routed records to it) on "
                    f"{self.spec.target.alias!r}: {exc.args[0].str()}; create it by hand"
                ) from None
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

    def write(self, batch: Any) -> None:
        names = batch.schema.names
        col = {name: batch.column(names.index(name)).to_pylist() for name in names}
        timestamps = batch.column(names.index("timestamp")).cast("int64").to_pylist()
        produce = self.producer.produce
        for i, (topic, partition, offset) in enumerate(zip(col["topic"], col["partition"], col["offset"], strict=True)):
            if topic is None or partition is None:
                raise KmirrorError(
                    f"flow {self.spec.id}: the transform returned a row with a null "
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
                part = self.parts.setdefault(source, _SourcePartition())
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
            from kmirror_engine.copying import CopyError

            raise CopyError(f"{len(self.failures)} record(s) failed; first: {self.failures[0]}")

    def summary(self, first_ms: int) -> dict[str, Any]:
        parts = [[t, p, part.summary()] for (t, p), part in sorted(self.parts.items())]
        return {
            "parts": parts,
            "unattributed": self.unattributed,
            "first_ms": first_ms,
            "last_ms": int(time.time() * 1000),
        }


def _producer(spec: Any) -> tuple[str, Any]:
    from kmirror_engine.clients import new_producer, producer_config
    from kmirror_engine.copying import PRODUCER_TUNING

    config = {**PRODUCER_TUNING, **producer_config(spec)}
    key = json.dumps(config, sort_keys=True, default=str)
    with _PRODUCERS_LOCK:
        producer = _PRODUCERS.pop(key, None)
    return key, producer if producer is not None else new_producer(config, role="records-producer")


class RecordsWriter:
    """Picklable `mapInArrow` function (module doc); `ranges`: the batch's planned ranges as
    `[source_topic, partition, start, end, target_topic]`."""

    def __init__(self, spec_json: str, ranges: Sequence[Sequence[Any]]) -> None:
        self.spec_json, self.ranges = spec_json, [list(r) for r in ranges]

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from kmirror.flow.spec import parse_flow_spec
        from spark_app.lazy_pandas import defer_pandas_import

        defer_pandas_import()  # a task's process: pyarrow would import pandas for nothing
        spec = parse_flow_spec(json.loads(self.spec_json))
        key, producer = _producer(spec)
        task = _Task(spec, producer, self.ranges)
        first_ms = int(time.time() * 1000)
        for batch in batches:
            if batch.num_rows:
                task.write(batch)
        task.drain()
        with _PRODUCERS_LOCK:  # only a producer that drained cleanly is kept for the next task
            _PRODUCERS[key] = producer
        yield pa.RecordBatch.from_pylist([{"summary": json.dumps(task.summary(first_ms))}])
