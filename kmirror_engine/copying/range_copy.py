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
  the batch is retried (at-least-once);
- poison records (docs/reliability.md "Poison records"): a record the target topic's configs
  refuse (`record_limits.TargetRules`: too large, timestamp outside its window, no key for a
  compacted topic) is found before it is produced, since the broker would refuse its whole
  batch: it goes to the dead-letter topic when one is configured (the record itself plus
  provenance headers, counted), otherwise the copy fails naming it and the ways out. Source
  offsets the flow's `skip_offsets` names are not copied: each is logged (`kmirror skipped
  {json}` on stderr) and counted; a skipped record only changes the drift (offset syncs).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kmirror.errors import KmirrorError
from kmirror.flow.views import OffsetSkip
from kmirror_engine.clients.factory import refresh_metadata
from kmirror_engine.copying.access_probe import AccessProbe, denied_message
from kmirror_engine.copying.provenance import Provenance
from kmirror_engine.copying.rate_limit import Pacer
from kmirror_engine.copying.record_limits import (
    BATCH_OVERHEAD_BYTES,
    RECORD_OVERHEAD_BYTES,
    TargetRules,
    over_limit,
    record_bytes,
)
from kmirror_engine.observability.progress import PartitionProgress

log = logging.getLogger("kmirror.copy")
TOO_LARGE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})
# What the target answers for a batch holding a record it will never accept, whatever the retries
# (INVALID_MSG is Kafka's CORRUPT_MESSAGE; _INVALID_DIFFERENT_RECORD: another record of the batch).
REFUSED = frozenset(
    getattr(KafkaError, name)  # _INVALID_DIFFERENT_RECORD is newer than some system librdkafkas (GSSAPI builds)
    for name in ("INVALID_TIMESTAMP", "INVALID_RECORD", "INVALID_MSG", "_INVALID_DIFFERENT_RECORD")
    if hasattr(KafkaError, name)
)
# Consumer errors for a source batch that cannot be read (corrupt at the source).
UNREADABLE = frozenset(
    getattr(KafkaError, name) for name in ("_BAD_MSG", "_BAD_COMPRESSION", "INVALID_MSG") if hasattr(KafkaError, name)
)
SKIPPED_PREFIX = "kmirror skipped "
# How long a copy round may run for the timestamp gate of the hot loop to stay exact: records
# within this much of the topic's `message.timestamp.before.max.ms` edge get the full check.
TIMESTAMP_GATE_MARGIN_MS = 600_000
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
TRANSIENT = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError._RESOLVE,
    }
)
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
    source_end: int | None = None  # the source partition's end offset when planned (None: unknown)


class _RangeState:
    """Counters of one range in flight; `on_delivery` is its one bound delivery callback."""

    def __init__(
        self,
        rng: CopyRange,
        failures: list[str],
        rules: TargetRules | None = None,
        limit: int | None = None,
        transactional: bool = False,
        skips: Sequence[OffsetSkip] = (),
    ) -> None:
        self.rng = rng
        self.limit = limit  # the target topic's max.message.bytes (None: unknown)
        # what the target topic refuses record by record (`limit` is its max.message.bytes)
        self.rules = dataclasses.replace(rules or TargetRules(), max_message_bytes=limit)
        # hot-loop gates: a record passing all three cannot be refused, so it skips the full check
        # key+value bytes above which the record's full size is checked against the limit
        self.check_above = limit - BATCH_OVERHEAD_BYTES - RECORD_OVERHEAD_BYTES if limit is not None else 2**62
        self.oldest_ms, self.newest_ms = _timestamp_gate(self.rules, int(time.time() * 1000))
        self.needs_key = bool(self.rules.compacted)
        self.skips = tuple(s for s in skips if s.topic == rng.source_topic and s.partition == rng.partition)
        self.skipped = 0  # records `skip_offsets` named, not copied
        self.returned_home = 0  # records whose provenance names the target as origin, not copied
        self.transactional = transactional
        self.cut: int | None = None  # next offset when the copy stopped early (byte budget)
        # hot-loop copies of the range's fields (one attribute lookup each per record)
        self.end, self.target, self.partition = rng.end_offset, rng.target_topic, rng.partition
        self.pending: deque[int] = deque()  # upstream offsets produced, in delivery order
        self.push = self.pending.append
        self.failures = failures
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
        if err.code() in REFUSED:
            self.failures.append(self._refused_with_its_batch(upstream, err))
            return
        self.failures.append(
            f"delivery to {self.rng.target_topic}[{self.rng.partition}] failed for source record "
            f"{self.rng.source_topic}[{self.rng.partition}]@{upstream}: {err.str()}"
        )

    def _refused_with_its_batch(self, upstream: int, err: KafkaError) -> str:
        """The failure for a record the broker refused that `TargetRules` did not foresee (a topic
        config that could not be read, a clock at the edge of the timestamp window). The broker
        refuses a whole batch for one record, so this record may be a bystander: never
        dead-lettered (that would move a good record out of the mirror), the copy fails."""
        r = self.rng
        return (
            f"source record {r.source_topic}[{r.partition}]@{upstream} was refused by {r.target_topic}[{r.partition}] "
            f"with its whole batch ({err.str()}): the record at fault is this one or a later one of the batch. "
            f"Ways out (docs/reliability.md#poison-records): let the mirror read the target topic's configs "
            f"(DescribeConfigs) so it finds such records before producing them and, with dead_letter_topic set, "
            f"dead-letters them; or find the record and skip it with skip_offsets: "
            f'["{r.source_topic}:{r.partition}:<offset>"]'
        )

    def _rejected_as_too_large(self, upstream: int, err: KafkaError, msg: Any) -> None:
        """The broker (or librdkafka) refused the record's batch as too large. Never dead-lettered
        here: a record over a known limit never reaches the producer (`RangeCopier._refused`), so
        the record fits, or the limit is unknown and nothing says it does not (issue 25: a record
        is never dead-lettered on a guess). In a transaction the rejection makes the transaction
        abortable: the task aborts it, the batch fails and nothing of it becomes visible."""
        where = f"source record {self.rng.source_topic}[{self.rng.partition}]@{upstream}"
        full = record_bytes(msg.key(), msg.value(), msg.headers())
        if self.transactional:
            self.failures.append(
                f"{where} ({full} bytes) was rejected by {self.rng.target_topic}[{self.rng.partition}] as too large "
                f"({err.str()}); in exactly-once mode that makes the transaction abortable: it is aborted, nothing of "
                "it is visible to read_committed readers, and the batch fails"
            )
            return
        if self.limit is None:
            self.failures.append(
                f"{where} ({full} bytes) was rejected by {self.rng.target_topic}[{self.rng.partition}] as too large "
                f"({err.str()}) and the topic's max.message.bytes could not be read, so it is not dead-lettered; "
                "ways out (docs/reliability.md#poison-records): let the mirror read the topic's configs "
                "(DescribeConfigs), raise max.message.bytes on the target, or skip it with skip_offsets: "
                f'["{self.rng.source_topic}:{self.rng.partition}:{upstream}"]'
            )
            return
        if not over_limit(full, self.limit):
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
        syncs = closed_syncs(self.syncs, self.drift, self.last_upstream)
        return PartitionProgress.for_range(
            self.rng,
            next_offset=self.rng.end_offset if self.cut is None else self.cut,
            records=self.records,
            size=self.bytes,
            last_timestamp_ms=self.last_timestamp_ms,
            offset_syncs=syncs,
            latency=(self.lat_min, self.lat_max, self.lat_sum, self.lat_count),
            dead_lettered=self.dead_lettered,
            skipped_by_option=self.skipped,
            returned_home=self.returned_home,
        )


class RangeCopier:
    """Copies ranges with an injected consumer (read_committed, assign-only, configured with
    `CONSUMER_REQUIRED`) and producer.

    `dead_letter_topic`: where records the target refuses go (`rules`, `limits`): the record
    itself (key, value, headers, timestamp) plus `kmirror.origin.*` headers naming source
    cluster, topic, partition, offset, timestamp and size, and `kmirror.error`. A dead letter
    the dead-letter topic refuses in turn fails the copy. None: such records fail the copy.
    `limits`: each target topic's `max.message.bytes` (`kmirror_engine.copying.record_limits`): a record
    over it is dead-lettered (or fails the copy) before it is produced; one that fits is never
    dead-lettered, even when the broker rejects its batch. Without a limit for a topic the
    broker's verdict fails the copy (never a dead letter on a guess).
    `rules`: each target topic's other per-record refusals (`TargetRules`: timestamp window,
    compaction), checked the same way before producing; a topic without rules refuses nothing.
    `skip_offsets`: source offsets never copied (the flow option): logged and counted.
    `source_cluster`: the source's alias, for the dead letters' provenance.
    `provenance`: the flow's provenance stamping (`kmirror_engine.copying.provenance`, option
    `provenance_headers`): each copied record carries its origin cluster; a record whose origin
    is the target is not copied (counted as `returned_home`). None: headers copied as they are.
    `transactional`: a broker-side rejection fails the copy (the transaction is abortable).
    `max_bytes`: stop once this many bytes were copied (the ranges in flight end at the
    consumer position, later rounds are not started; `next_offset` says where each stopped).
    `max_seconds`: the same stop once a copy() ran this long (a paced transaction must end
    well inside transaction.timeout.ms); a pacing wait that would end past it stops the copy
    instead of starting (the debt stays with the pacer, `Pacer.pay`).
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
        rules: Mapping[str, TargetRules] | None = None,
        skip_offsets: Sequence[OffsetSkip] = (),
        source_cluster: str = "",
        provenance: Provenance | None = None,
    ) -> None:
        self.consumer = consumer
        self.producer = producer
        self.dead_letter_topic = dead_letter_topic
        self.rules = dict(rules or {})
        self.skip_offsets = tuple(skip_offsets)
        self.source_cluster = source_cluster
        self.provenance = provenance
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
            self._deadline = self._now() + self.max_seconds
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
        states = {
            (r.source_topic, r.partition): _RangeState(
                r,
                failures,
                self.rules.get(r.target_topic),
                self.limits.get(r.target_topic),
                self.transactional,
                self.skip_offsets,
            )
            for r in ranges
        }
        active = {key: s for key, s in states.items() if not s.done}
        self._states = list(states.values())
        if active:
            self.consumer.assign([TopicPartition(t, p, s.rng.start_offset) for (t, p), s in active.items()])
            try:
                self._pump(active, failures)
            finally:
                # librdkafka keeps a partition's pause flag across assignments: clear it
                self.consumer.resume([TopicPartition(t, p) for t, p in states])
                self.consumer.unassign()
        self._drain(failures)
        self._copied_bytes += sum(s.bytes for s in states.values())
        return [s.progress() for s in states.values()]

    def _pump(self, active: dict[tuple[str, int], _RangeState], failures: list[str]) -> None:
        consume, produce, poll = self.consumer.consume, self.producer.produce, self.producer.poll
        last_move, probe = time.monotonic(), AccessProbe()
        pacer, paid = self.pacer, (0, 0)  # paid: records and bytes of this round charged to the pacer
        stamp = self.provenance.stamp if self.provenance is not None else None
        while active:
            msgs = consume(
                CONSUME_BATCH if pacer is None else pacer.batch_size(CONSUME_BATCH), timeout=self.poll_timeout_s
            )
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
                if state.skips and self._skip_named(state, msg):
                    continue  # the flow's skip_offsets names it: logged and counted, not copied
                headers = msg.headers()
                if stamp is not None:
                    headers = stamp(headers)
                    if headers is None:
                        state.returned_home += 1  # its origin is the target: never copied back (a loop)
                        continue
                value, key, ts = msg.value(), msg.key(), msg.timestamp()[1]
                size = (len(value) if value else 0) + (len(key) if key else 0)
                if (
                    size > state.check_above
                    or not state.oldest_ms <= ts <= state.newest_ms
                    or (key is None and state.needs_key)
                ) and self._refused(state, msg):
                    continue  # dead-lettered before it was produced
                state.push(offset)
                try:
                    produce(
                        state.target,
                        value,
                        key,
                        state.partition,
                        on_delivery=state.on_delivery,
                        timestamp=ts if ts > 0 else 0,
                        headers=headers,
                    )
                except (BufferError, KafkaException) as exc:
                    if not self._produce_slow(state, msg, exc, headers):
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
            elif topic := probe.denied(self.consumer, (t for t, _ in active), time.monotonic() - last_move):
                raise CopyError(denied_message(topic))
            over_time = False
            if pacer is not None:
                paid, over_time = self._pace(pacer, paid)
            budgeted = self.max_bytes is not None or self.max_seconds is not None
            if over_time or (budgeted and self._spent(self._copied_bytes + sum(s.bytes for s in self._states))):
                self._cut(active)  # the budget is spent: what was consumed is produced, the rest waits

    def _spent(self, copied_bytes: int) -> bool:
        """Whether the copy() in flight reached `max_bytes` or `max_seconds`."""
        return (self.max_bytes is not None and copied_bytes >= self.max_bytes) or self._now() >= self._deadline

    def _now(self) -> float:
        """The clock of `max_seconds`: the pacer's when paced (its waits are what spend the time)."""
        return self.pacer.clock() if self.pacer is not None else time.monotonic()

    def _pace(self, pacer: Pacer, paid: tuple[int, int]) -> tuple[tuple[int, int], bool]:
        """Charge what the round produced since the last call; wait while over the rate. Returns
        the new tally and whether the copy must stop instead: a wait that would end past the
        `max_seconds` deadline is not started (a paced transaction commits first; its copier pays
        the debt before the next one begins)."""
        records, size = sum(s.records for s in self._states), sum(s.bytes for s in self._states)
        owed = pacer.charge(max(0, records - paid[0]), max(0, size - paid[1]))  # dead letters give none back
        if owed > 0 and self._now() + owed > self._deadline:
            return (records, size), True
        if owed > 0:
            pacer.wait(owed, self._serve)
        return (records, size), False

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

    def _refused(self, state: _RangeState, msg: Any) -> bool:
        """True when the target topic refuses the record (`TargetRules.refusal`): dead-lettered
        (counted) without being produced, so its batch stays clean; raises CopyError naming the
        record, the reason and the ways out without a dead-letter topic."""
        rng, offset = state.rng, msg.offset()
        reason = state.rules.refusal(msg.key(), msg.value(), msg.headers(), msg.timestamp()[1], int(time.time() * 1000))
        if reason is None:
            return False
        if not self.dead_letter_topic:
            raise CopyError(
                f"cannot produce source record {rng.source_topic}[{rng.partition}]@{offset} to "
                f"{rng.target_topic}[{rng.partition}]: the target refuses it: {reason}. Ways out "
                "(docs/reliability.md#poison-records): set dead_letter_topic (the record goes there with its "
                "origin in headers), skip it with skip_offsets: "
                f'["{rng.source_topic}:{rng.partition}:{offset}"], or change that config of the target topic'
            )
        self._dead_letter(rng, msg, reason)
        state.dead_lettered += 1
        return True

    def _skip_named(self, state: _RangeState, msg: Any) -> bool:
        """True (logged, counted) when the flow's `skip_offsets` names this record."""
        offset = msg.offset()
        if not any(s.first <= offset <= s.last for s in state.skips):
            return False
        _log_skipped(state.rng, offset, "skip_offsets", msg.timestamp()[1])
        state.skipped += 1
        return True

    def _produce_slow(self, state: _RangeState, msg: Any, exc: Exception, headers: Any) -> bool:
        """Retry a produce the local queue refused; True once produced.

        Raises CopyError for any other produce error (too large for the producer: never a dead letter).
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
                self.producer.produce(
                    rng.target_topic,
                    value,
                    key,
                    rng.partition,
                    on_delivery=state.on_delivery,
                    timestamp=ts if ts > 0 else 0,
                    headers=headers,
                )
                return True
            except (BufferError, KafkaException) as again:
                exc = again
        state.pending.pop()
        error = exc.args[0]
        # too large for the producer's own message.max.bytes (a `producer` override below the
        # topic's limit, or a limit not read): not the target's refusal, so never a dead letter
        hint = (
            "; the producer's message.max.bytes is below the record: raise it in the flow's producer "
            "overrides, or skip it with skip_offsets (docs/reliability.md#poison-records)"
            if error.code() in TOO_LARGE
            else ""
        )
        raise CopyError(
            f"cannot produce source record {rng.source_topic}[{rng.partition}]@{offset} "
            f"({len(value or b'')} bytes) to {rng.target_topic}[{rng.partition}]: {error.str()}{hint}"
        ) from exc

    def _on_consumer_event(self, msg: Any, err: KafkaError, active: dict[tuple[str, int], _RangeState]) -> None:
        if err.code() in TRANSIENT and not err.fatal():
            log.warning(
                "source consumer: %s (retrying; the copy fails after %.0f s without progress)",
                err.str(),
                self.stall_timeout_s,
            )
            return
        if err.code() in UNREADABLE:
            self._unreadable(msg, err, active)
            return
        if err.code() != KafkaError._PARTITION_EOF:
            raise CopyError(f"consuming {msg.topic()}[{msg.partition()}] failed: {err.str()}")
        state = active.get((msg.topic(), msg.partition()))
        if state is not None and msg.offset() >= state.rng.end_offset:
            self._finish(active, state)

    def _unreadable(self, msg: Any, err: KafkaError, active: dict[tuple[str, int], _RangeState]) -> None:
        """A source batch the consumer cannot read (corrupt): seek past it when `skip_offsets`
        names its offset (logged, counted), else fail naming partition, offset and the way out."""
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        state = active.get((topic, partition))
        if state is not None and offset >= 0 and any(s.first <= offset <= s.last for s in state.skips):
            _log_skipped(state.rng, offset, "skip_offsets", None)
            state.skipped += 1
            self.consumer.seek(TopicPartition(topic, partition, offset + 1))
            return
        raise CopyError(
            f"consuming {topic}[{partition}] failed at offset {offset}: {err.str()}; the source holds a record "
            "that cannot be read (a corrupt batch). Way out (docs/reliability.md#poison-records): skip it with "
            f'skip_offsets: ["{topic}:{partition}:{offset}"] (a range "{topic}:{partition}:{offset}-<last>" when '
            "the next offsets fail too)"
        )

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

    def _drain(self, failures: list[str]) -> None:
        """Wait for every delivery report (including dead letters); raise on any failure."""
        while True:
            _RangeState.now_ms = int(time.time() * 1000)
            remaining = self.producer.flush(0.1)
            if failures:
                raise CopyError(f"{len(failures)} record(s) failed; first: {failures[0]}")
            if remaining == 0:
                return

    def _dead_letter(self, rng: CopyRange, msg: Any, reason: str) -> None:
        """Send the refused record itself (key, value, headers, timestamp) to the dead-letter topic
        with its provenance; a dead letter the producer or the dead-letter topic refuses (too
        large even there, a timestamp it refuses too) fails the copy naming the source record."""
        key, value, ts, offset = msg.key(), msg.value(), msg.timestamp()[1], msg.offset()
        where = f"source record {rng.source_topic}[{rng.partition}]@{offset}"
        headers = [
            *(msg.headers() or []),
            ("kmirror.origin.cluster", self.source_cluster.encode()),
            ("kmirror.origin.topic", rng.source_topic.encode()),
            ("kmirror.origin.partition", str(rng.partition).encode()),
            ("kmirror.origin.offset", str(offset).encode()),
            ("kmirror.origin.timestamp", str(ts).encode()),
            ("kmirror.origin.bytes", str(len(value or b"") + len(key or b"")).encode()),
            ("kmirror.error", f"refused by {rng.target_topic}: {reason}".encode()),
        ]

        def delivered(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                self._failures.append(
                    f"{where} was refused by {rng.target_topic} ({reason}) and then by the "
                    f"dead-letter topic {self.dead_letter_topic}: {err.str()}"
                )

        while True:
            try:
                self.producer.produce(
                    self.dead_letter_topic,
                    value,
                    key,
                    headers=headers,
                    on_delivery=delivered,
                    timestamp=ts if ts > 0 else 0,
                )
                return
            except BufferError:
                self.producer.poll(0.05)  # local queue full: serve delivery reports, then retry
            except KafkaException as exc:
                raise CopyError(
                    f"{where} was refused by {rng.target_topic} ({reason}) and cannot be dead-lettered "
                    f"to {self.dead_letter_topic} either: {exc.args[0].str()}"
                ) from exc


def _timestamp_gate(rules: TargetRules, now_ms: int) -> tuple[float, float]:
    """Timestamps the hot loop passes without the full check for a round starting at `now_ms`:
    only records within `TIMESTAMP_GATE_MARGIN_MS` of the topic's window (or outside it) are
    checked exactly, so a round running that long still finds every refused one."""
    if not rules.create_time:
        return -math.inf, math.inf
    oldest = -math.inf if rules.before_max_ms is None else now_ms - rules.before_max_ms + TIMESTAMP_GATE_MARGIN_MS
    newest = math.inf if rules.after_max_ms is None else now_ms + rules.after_max_ms
    return oldest, newest


def _log_skipped(rng: CopyRange, offset: int, reason: str, timestamp_ms: int | None) -> None:
    """The audit line of a record not copied: `kmirror skipped {json}` on stderr, where the
    progress lines go (a Spark worker's logging is not configured)."""
    line = {
        "event": "skipped",
        "reason": reason,
        "source_topic": rng.source_topic,
        "partition": rng.partition,
        "offset": offset,
        "target_topic": rng.target_topic,
        "timestamp_ms": timestamp_ms,
    }
    print(SKIPPED_PREFIX + json.dumps(line, sort_keys=True), file=sys.stderr, flush=True)


def _code(exc: BaseException) -> Any:
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return error.code() if isinstance(error, KafkaError) else None


def closed_syncs(
    syncs: Sequence[tuple[int, int]], drift: int | None, last_upstream: int
) -> tuple[tuple[int, int], ...]:
    """A range's offset syncs for its progress: the first record and every drift change as
    recorded, plus the last record when it is not already the last sync (every copy loop's rule)."""
    closed = list(syncs)
    if drift is not None and closed[-1][0] != last_upstream:
        closed.append((last_upstream, last_upstream + drift))
    return tuple(closed)


def copy_in_rounds(
    ranges: Iterable[CopyRange], copy_round: Callable[[Sequence[CopyRange]], list[PartitionProgress]]
) -> list[PartitionProgress]:
    """Every range copied by `copy_round`, one range per source partition per round (`_rounds`);
    their progress in input order (the native and batch loops' `copy`)."""
    ordered = list(ranges)
    results: dict[int, PartitionProgress] = {}
    for round_ in _rounds(ordered):
        for index, progress in zip(round_, copy_round([ordered[i] for i in round_]), strict=True):
            results[index] = progress
    return [results[i] for i in range(len(ordered))]


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
