"""The copy loop: mirror planned offset ranges from the source to the target with one
consumer and one producer, records never leaving confluent-kafka/Python (no Spark, no JVM).

Contract of `RangeCopier.copy(ranges)`:
- every range (source topic, partition, start, end-exclusive, target topic) is read with
  `assign()` at its start offset and is finished when the consumer position (or the
  partition-EOF offset) reaches its end; offsets are never assumed contiguous (transaction
  markers, aborted records and compaction leave holes, a range may hold only markers);
- each record keeps its source partition, key, value, headers and timestamp;
- it returns only after every delivery report arrived; any delivery error raises
  `CopyError` naming source topic/partition/offset and target, so the Spark task fails and
  the batch is retried (at-least-once). Records the target rejects as too large go to the
  dead-letter topic when one is configured (counted), otherwise they fail the copy too.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kmirror.errors import KmirrorError
from kmirror_engine.clients.factory import refresh_metadata
from kmirror_engine.copying.rate_limit import Pacer
from kmirror_engine.copying.record_limits import BATCH_OVERHEAD_BYTES, RECORD_OVERHEAD_BYTES, over_limit, record_bytes
from kmirror_engine.observability.progress import PartitionProgress

log = logging.getLogger("kmirror.copy")
TOO_LARGE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})
# Messages per consume() call: 1,000 used ~25% less CPU per record than 10,000 here (the
# batch of Message objects stays in cache); both keep the prefetch queue full.
CONSUME_BATCH = 1_000
# The consumer position must move at least once per this many seconds, or the copy fails
# (a range planned past what the broker serves would otherwise hang the task forever).
DEFAULT_STALL_TIMEOUT_S = 300.0

# Throughput defaults layered *under* the configured clients (user/clients.py values win):
# large fetches and batches: fewer, bigger requests (linger.ms 100 rather than 20: ~5% more
# records/s measured) save client and broker CPU on a machine the copy shares with the brokers.
CONSUMER_TUNING: dict[str, Any] = {
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 8 * 1024 * 1024,
    # bounds the prefetch (memory) per copy loop; 64 MiB is ~0.5 s of records at full speed
    "queued.max.messages.kbytes": 64 * 1024,
    "fetch.wait.max.ms": 50,
}
# Layered *over* the configured consumer: the end of a range whose last offsets are
# transaction markers is only seen through the partition-EOF event.
# auto.offset.reset=error: a start offset deleted by retention after planning must fail the
# copy, never silently jump to the log end (librdkafka's default) and skip records.
CONSUMER_REQUIRED: dict[str, Any] = {"enable.partition.eof": True, "auto.offset.reset": "error"}
# Consumer events that only mean "a broker is unreachable for now": librdkafka reconnects by
# itself, so they are logged and the copy waits (bounded by the stall timeout).
TRANSIENT = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT,
                       KafkaError.REQUEST_TIMED_OUT, KafkaError.NOT_LEADER_FOR_PARTITION,
                       KafkaError.LEADER_NOT_AVAILABLE, KafkaError._RESOLVE})  # fmt: skip
PRODUCER_TUNING: dict[str, Any] = {
    "linger.ms": 100,
    "batch.size": 1024 * 1024,
    "batch.num.messages": 100_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 128 * 1024,  # bounds memory per copy loop
}


class CopyError(KmirrorError):
    """A record could not be mirrored; the batch must be retried (nothing was committed)."""


@dataclass(frozen=True)
class CopyRange:
    """One planned offset range: [start_offset, end_offset) of a source partition."""

    source_topic: str
    partition: int
    start_offset: int
    end_offset: int
    target_topic: str
    skipped_before: int = 0  # offsets retention deleted before start_offset (fail_on_data_loss=false)
    rate_share: float | None = None  # of the flow's rate limits (`rate_limit.range_shares`); None: not planned


class _RangeState:
    """Counters of one range in flight; `on_delivery` is its one bound delivery callback."""

    def __init__(
        self, rng: CopyRange, failures: list[str], dead_letters: list[Any] | None, limit: int | None = None,
        transactional: bool = False,
    ) -> None:  # fmt: skip
        self.rng = rng
        self.limit = limit  # the target topic's max.message.bytes (None: unknown)
        # key+value bytes above which the record's full size is checked against the limit
        self.check_above = limit - BATCH_OVERHEAD_BYTES - RECORD_OVERHEAD_BYTES if limit is not None else 2**62
        self.transactional = transactional
        self.cut: int | None = None  # next offset when the copy stopped early (byte budget)
        # hot-loop copies of the range's fields (one attribute lookup each per record)
        self.end, self.target, self.partition = rng.end_offset, rng.target_topic, rng.partition
        self.pending: deque[int] = deque()  # upstream offsets produced, in delivery order
        self.push = self.pending.append
        self.failures = failures
        self.dead_letters = dead_letters  # None: too-large records fail like any other error
        self.records = self.bytes = self.dead_lettered = 0
        self.last_timestamp_ms: int | None = None
        self.done = rng.start_offset >= rng.end_offset
        self.drift: int | None = None
        self.syncs: list[tuple[int, int]] = []
        self.last_upstream = -1  # upstream offset of the last delivered record (drift is constant since)
        self.lat_min, self.lat_max = 2**62, -(2**62)
        self.lat_sum = self.lat_count = 0

    # Wall clock (ms) stamped by the copier before every poll/flush, when delivery callbacks run;
    # one clock read per poll instead of one per record. A class attribute: it is just "now".
    now_ms = 0

    def on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        upstream = self.pending.popleft()
        if err is not None:
            self._failed(upstream, err, msg)
            return
        downstream = msg.offset()
        if downstream - upstream != self.drift:
            self.syncs.append((upstream, downstream))
            self.drift = downstream - upstream
        self.last_upstream = upstream
        latency = self.now_ms - msg.timestamp()[1]
        self.lat_sum += latency
        self.lat_count += 1
        if latency > self.lat_max:
            self.lat_max = latency
        if latency < self.lat_min:
            self.lat_min = latency

    def _failed(self, upstream: int, err: KafkaError, msg: Any) -> None:
        if err.code() in TOO_LARGE:
            self._rejected_as_too_large(upstream, err, msg)
            return
        self.failures.append(
            f"delivery to {self.rng.target_topic}[{self.rng.partition}] failed for source record "
            f"{self.rng.source_topic}[{self.rng.partition}]@{upstream}: {err.str()}"
        )

    def _rejected_as_too_large(self, upstream: int, err: KafkaError, msg: Any) -> None:
        """The broker refused the record's batch as too large. Dead-lettered only when the record
        alone is over the limit (or the limit is unknown and no check was possible); a fitting
        record fails the copy; in a transaction any rejection fails it (the transaction is then
        abortable: the task aborts it, the batch fails and nothing of it becomes visible)."""
        where = f"source record {self.rng.source_topic}[{self.rng.partition}]@{upstream}"
        full = record_bytes(msg.key(), msg.value(), msg.headers())
        if self.transactional:
            self.failures.append(
                f"{where} ({full} bytes) was rejected by {self.rng.target_topic}[{self.rng.partition}] as too large "
                f"({err.str()}); in exactly-once mode that makes the transaction abortable: it is aborted, nothing of "
                "it is visible to read_committed readers, and the batch fails"
            )
            return
        if self.dead_letters is not None and (self.limit is None or over_limit(full, self.limit)):
            size = len(msg.value() or b"") + len(msg.key() or b"")
            self.dead_letters.append((self.rng, upstream, msg.key(), msg.headers(), size, err))
            self.records -= 1  # counted when produced; it went to the dead-letter topic instead
            self.bytes -= size
            self.dead_lettered += 1
            return
        if self.limit is not None and not over_limit(full, self.limit):
            self.failures.append(
                f"{where} ({full} bytes) fits {self.rng.target_topic}'s limit of {self.limit} bytes but its batch was "
                f"rejected as too large ({err.str()}); it is not dead-lettered; the producer's batch.size and "
                "message.max.bytes must not exceed the topic's max.message.bytes"
            )
            return
        self.failures.append(
            f"delivery to {self.rng.target_topic}[{self.rng.partition}] failed for {where}: {err.str()}"
        )

    def progress(self) -> PartitionProgress:
        syncs = list(self.syncs)
        if self.drift is not None and syncs[-1][0] != self.last_upstream:
            syncs.append((self.last_upstream, self.last_upstream + self.drift))
        counted = self.lat_count > 0
        r = self.rng
        return PartitionProgress(
            source_topic=r.source_topic, partition=r.partition, target_topic=r.target_topic,
            start_offset=r.start_offset, next_offset=r.end_offset if self.cut is None else self.cut,
            records=self.records, bytes=self.bytes,
            last_timestamp_ms=self.last_timestamp_ms, offset_syncs=tuple(syncs),
            latency_min_ms=self.lat_min if counted else None, latency_max_ms=self.lat_max if counted else None,
            latency_sum_ms=self.lat_sum,
            latency_count=self.lat_count, dead_lettered=self.dead_lettered, skipped_records=r.skipped_before,
        )  # fmt: skip


class RangeCopier:
    """Copies ranges with an injected consumer (read_committed, assign-only, configured with
    `CONSUMER_REQUIRED`) and producer.

    `dead_letter_topic`: where records rejected as too large go (a pointer record: the source
    key and headers naming origin topic/partition/offset/size and the error; the value is
    not carried since it is what was too large). None means such records fail the copy.
    `limits`: each target topic's `max.message.bytes` (`kmirror_engine.copying.record_limits`): a record
    over it is dead-lettered (or fails the copy) before it is produced; one that fits is never
    dead-lettered, even when the broker rejects its batch. Without a limit for a topic the
    broker's verdict is taken per record (safe only when batches cannot exceed the limit).
    `transactional`: a broker-side rejection fails the copy (the transaction is abortable).
    `max_bytes`: stop once this many bytes were copied (the ranges in flight end at the
    consumer position, later rounds are not started; `next_offset` says where each stopped).
    `max_seconds`: the same stop once a copy() ran this long (a paced transaction must end
    well inside transaction.timeout.ms).
    `pacer`: paces the loop at its share of the flow's rate limits (`kmirror_engine.copying.rate_limit`):
    after each consumed batch the loop waits while it is over its rate, serving delivery reports.
    """

    def __init__(
        self,
        consumer: Any,
        producer: Any,
        dead_letter_topic: str | None = None,
        stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
        poll_timeout_s: float = 0.1,
        limits: Mapping[str, int | None] | None = None,
        transactional: bool = False,
        max_bytes: int | None = None,
        pacer: Pacer | None = None,
        max_seconds: float | None = None,
    ) -> None:
        self.consumer = consumer
        self.producer = producer
        self.dead_letter_topic = dead_letter_topic
        self.limits = dict(limits or {})
        self.transactional = transactional
        self.max_bytes = max_bytes
        self.pacer = pacer
        self.max_seconds = max_seconds
        self._deadline = float("inf")  # of the copy() in flight (max_seconds)
        # how long a partition the producer does not know yet (a target topic just grown) is retried
        self.unknown_partition_timeout_s = 30.0
        self.stall_timeout_s = stall_timeout_s
        self.poll_timeout_s = poll_timeout_s
        self._failures: list[str] = []
        self._states: list[_RangeState] = []  # of the round in flight
        self._copied_bytes = 0  # by the rounds of this copy() that finished

    def copy(self, ranges: Iterable[CopyRange]) -> list[PartitionProgress]:
        """Copy every range (several partitions in flight) and return their progress, in input order.

        Ranges of the same source partition are copied in successive rounds, one per round.
        """
        ordered = list(ranges)
        results: dict[int, PartitionProgress] = {}
        self._copied_bytes = 0
        if self.max_seconds is not None:
            self._deadline = time.monotonic() + self.max_seconds
        for round_ in _rounds(ordered):
            if self._spent(self._copied_bytes):  # budget spent: not started
                for index in round_:  # nothing copied: next_offset is the range's start
                    rng = ordered[index]
                    results[index] = _RangeState(
                        dataclasses.replace(rng, end_offset=rng.start_offset), [], None
                    ).progress()
                continue
            for index, progress in zip(round_, self._copy_round([ordered[i] for i in round_]), strict=True):
                results[index] = progress
        return [results[i] for i in range(len(ordered))]

    def _copy_round(self, ranges: Sequence[CopyRange]) -> list[PartitionProgress]:
        failures = self._failures = []
        dead_letters: list[Any] | None = [] if self.dead_letter_topic else None
        states = {(r.source_topic, r.partition): _RangeState(r, failures, dead_letters, self.limits.get(r.target_topic),
                                                             self.transactional) for r in ranges}  # fmt: skip
        active = {key: s for key, s in states.items() if not s.done}
        self._states = list(states.values())
        if active:
            self.consumer.assign([TopicPartition(t, p, s.rng.start_offset) for (t, p), s in active.items()])
            try:
                self._pump(active, failures, dead_letters)
            finally:
                # librdkafka keeps a partition's pause flag across assignments: clear it
                self.consumer.resume([TopicPartition(t, p) for t, p in states])
                self.consumer.unassign()
        self._drain(failures, dead_letters)
        self._copied_bytes += sum(s.bytes for s in states.values())
        return [s.progress() for s in states.values()]

    def _pump(self, active: dict[tuple[str, int], _RangeState], failures: list[str], dead: list[Any] | None) -> None:
        consume, produce, poll = self.consumer.consume, self.producer.produce, self.producer.poll
        last_move = time.monotonic()
        pacer, paid = self.pacer, (0, 0)  # paid: records and bytes of this round charged to the pacer
        while active:
            msgs = consume(CONSUME_BATCH if pacer is None else pacer.batch_size(CONSUME_BATCH),
                           timeout=self.poll_timeout_s)  # fmt: skip
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    self._on_consumer_event(msg, err, active)
                    continue
                state = active.get((msg.topic(), msg.partition()))
                if state is None:
                    continue  # prefetched past a finished range
                offset = msg.offset()
                if offset >= state.end:
                    self._finish(active, state)
                    continue
                value, key, ts = msg.value(), msg.key(), msg.timestamp()[1]
                size = (len(value) if value else 0) + (len(key) if key else 0)
                if size > state.check_above and self._over_limit(state, msg):
                    continue  # dead-lettered before it was produced
                state.push(offset)
                try:
                    produce(state.target, value, key, state.partition, on_delivery=state.on_delivery,
                            timestamp=ts if ts > 0 else 0, headers=msg.headers())  # fmt: skip
                except (BufferError, KafkaException) as exc:
                    if not self._produce_slow(state, msg, exc):
                        continue
                state.records += 1
                state.bytes += size
                state.last_timestamp_ms = ts
            _RangeState.now_ms = int(time.time() * 1000)
            poll(0)
            if failures:
                raise CopyError(f"{len(failures)} record(s) failed; first: {failures[0]}")
            if self._finish_by_position(active) or msgs:
                last_move = time.monotonic()
            elif time.monotonic() - last_move > self.stall_timeout_s:
                stuck = ", ".join(f"{t}[{p}] end {s.rng.end_offset}" for (t, p), s in active.items())
                raise CopyError(f"no progress for {self.stall_timeout_s:.0f} s before the planned end: {stuck}")
            if dead:
                self._send_dead_letters(dead)
            if pacer is not None:
                paid = self._pace(pacer, paid)
            budgeted = self.max_bytes is not None or self.max_seconds is not None
            if budgeted and self._spent(self._copied_bytes + sum(s.bytes for s in self._states)):
                self._cut(active)  # the budget is spent: what was consumed is produced, the rest waits

    def _spent(self, copied_bytes: int) -> bool:
        """Whether the copy() in flight reached `max_bytes` or `max_seconds`."""
        return (self.max_bytes is not None and copied_bytes >= self.max_bytes) or time.monotonic() >= self._deadline

    def _pace(self, pacer: Pacer, paid: tuple[int, int]) -> tuple[int, int]:
        """Charge what the round produced since the last call; wait while over the rate."""
        records, size = sum(s.records for s in self._states), sum(s.bytes for s in self._states)
        owed = pacer.charge(max(0, records - paid[0]), max(0, size - paid[1]))  # dead letters give none back
        if owed > 0:
            pacer.wait(owed, self._serve)
        return records, size

    def _serve(self) -> None:
        _RangeState.now_ms = int(time.time() * 1000)
        self.producer.poll(0)

    def _cut(self, active: dict[tuple[str, int], _RangeState]) -> None:
        """Stop every range in flight at the consumer position (what was consumed is produced)."""
        for tp in self.consumer.position([TopicPartition(t, p) for t, p in active]):
            state = active.get((tp.topic, tp.partition))
            if state is not None:
                state.cut = min(max(tp.offset, state.rng.start_offset), state.rng.end_offset)
                self._finish(active, state)

    def _over_limit(self, state: _RangeState, msg: Any) -> bool:
        """True when the record cannot fit the target topic even alone: dead-lettered (counted)
        without being produced; raises CopyError for it without a dead-letter topic."""
        rng, offset, key, value, headers = state.rng, msg.offset(), msg.key(), msg.value(), msg.headers()
        full = record_bytes(key, value, headers)
        if not over_limit(full, state.limit):
            return False
        if not self.dead_letter_topic:
            raise CopyError(
                f"cannot produce source record {rng.source_topic}[{rng.partition}]@{offset} ({full} bytes) to "
                f"{rng.target_topic}[{rng.partition}]: over the topic's max.message.bytes ({state.limit}); "
                "raise it on the target or set dead_letter_topic"
            )
        error = KafkaError(
            KafkaError.MSG_SIZE_TOO_LARGE, f"record of {full} bytes over max.message.bytes {state.limit}"
        )
        self._dead_letter(rng, offset, key, headers, len(value or b"") + len(key or b""), error)
        state.dead_lettered += 1
        return True

    def _produce_slow(self, state: _RangeState, msg: Any, exc: Exception) -> bool:
        """Retry a produce the local queue refused; True once produced, False when dead-lettered.

        Raises CopyError for any other produce error (too large without a dead-letter topic).
        """
        rng, offset = state.rng, msg.offset()
        value, key, ts = msg.value(), msg.key(), msg.timestamp()[1]
        deadline = time.monotonic() + self.unknown_partition_timeout_s
        while isinstance(exc, BufferError) or (
            _code(exc) == KafkaError._UNKNOWN_PARTITION and time.monotonic() < deadline
        ):
            _RangeState.now_ms = int(time.time() * 1000)
            if isinstance(exc, BufferError):
                self.producer.poll(0.05)  # local queue full: serve delivery reports, then retry
            else:  # the target topic grew (TargetTopics) after this producer cached its metadata
                refresh_metadata(self.producer, rng.target_topic)
            try:
                self.producer.produce(rng.target_topic, value, key, rng.partition, on_delivery=state.on_delivery,
                                      timestamp=ts if ts > 0 else 0, headers=msg.headers())  # fmt: skip
                return True
            except (BufferError, KafkaException) as again:
                exc = again
        state.pending.pop()
        error = exc.args[0]
        if error.code() in TOO_LARGE and self.dead_letter_topic:
            self._dead_letter(rng, offset, key, msg.headers(), len(value or b"") + len(key or b""), error)
            state.dead_lettered += 1
            return False
        raise CopyError(
            f"cannot produce source record {rng.source_topic}[{rng.partition}]@{offset} "
            f"({len(value or b'')} bytes) to {rng.target_topic}[{rng.partition}]: {error.str()}"
        ) from exc

    def _on_consumer_event(self, msg: Any, err: KafkaError, active: dict[tuple[str, int], _RangeState]) -> None:
        if err.code() in TRANSIENT and not err.fatal():
            log.warning("source consumer: %s (retrying; the copy fails after %.0f s without progress)",
                        err.str(), self.stall_timeout_s)  # fmt: skip
            return
        if err.code() != KafkaError._PARTITION_EOF:
            raise CopyError(f"consuming {msg.topic()}[{msg.partition()}] failed: {err.str()}")
        state = active.get((msg.topic(), msg.partition()))
        if state is not None and msg.offset() >= state.rng.end_offset:
            self._finish(active, state)

    def _finish_by_position(self, active: dict[tuple[str, int], _RangeState]) -> bool:
        """Finish ranges whose consumer position reached their end (e.g. only markers left)."""
        if not active:
            return False
        finished = False
        for tp in self.consumer.position([TopicPartition(t, p) for t, p in active]):
            state = active.get((tp.topic, tp.partition))
            if state is not None and tp.offset >= 0 and tp.offset >= state.rng.end_offset:
                self._finish(active, state)
                finished = True
        return finished

    def _finish(self, active: dict[tuple[str, int], _RangeState], state: _RangeState) -> None:
        key = (state.rng.source_topic, state.rng.partition)
        if active.pop(key, None) is not None:
            state.done = True
            self.consumer.pause([TopicPartition(*key)])

    def _drain(self, failures: list[str], dead: list[Any] | None) -> None:
        """Wait for every delivery report (including dead letters); raise on any failure."""
        while True:
            _RangeState.now_ms = int(time.time() * 1000)
            remaining = self.producer.flush(0.1)
            if failures:
                raise CopyError(f"{len(failures)} record(s) failed; first: {failures[0]}")
            if dead:
                self._send_dead_letters(dead)
                continue
            if remaining == 0:
                return

    def _send_dead_letters(self, dead: list[Any]) -> None:
        while dead:
            rng, offset, key, headers, size, error = dead.pop()
            self._dead_letter(rng, offset, key, headers, size, error)

    def _dead_letter(self, rng: CopyRange, offset: int, key: Any, headers: Any, size: int, error: KafkaError) -> None:
        """Route a too-large record to the dead-letter topic; its own delivery failure fails the copy."""
        origin = [
            ("kmirror.origin.topic", rng.source_topic.encode()),
            ("kmirror.origin.partition", str(rng.partition).encode()),
            ("kmirror.origin.offset", str(offset).encode()),
            ("kmirror.origin.bytes", str(size).encode()),
            ("kmirror.error", error.str().encode()),
        ]
        self.producer.produce(self.dead_letter_topic, None, key, headers=list(headers or []) + origin,
                              on_delivery=self._dead_letter_delivered)  # fmt: skip

    def _dead_letter_delivered(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._failures.append(f"dead-letter delivery to {msg.topic()} failed: {err.str()}")


def _code(exc: BaseException) -> Any:
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return error.code() if isinstance(error, KafkaError) else None


def _rounds(ranges: Sequence[CopyRange]) -> list[list[int]]:
    """Group range indexes so that each round holds at most one range per source partition."""
    rounds: list[list[int]] = []
    seen: list[set[tuple[str, int]]] = []
    for index, rng in enumerate(ranges):
        key = (rng.source_topic, rng.partition)
        for round_, keys in zip(rounds, seen, strict=True):
            if key not in keys:
                round_.append(index)
                keys.add(key)
                break
        else:
            rounds.append([index])
            seen.append({key})
    return rounds
