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
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kmirror.flow.views import OffsetSkip
from kmirror_engine.clients.factory import refresh_metadata
from kmirror_engine.copying.access_probe import AccessProbe, denied_message
from kmirror_engine.copying.poison_records import UNREADABLE, PoisonRecords
from kmirror_engine.copying.provenance import Provenance
from kmirror_engine.copying.range_state import TOO_LARGE, RangeState
from kmirror_engine.copying.ranges import (
    CONSUME_BATCH,
    DEFAULT_STALL_TIMEOUT_S,
    TRANSIENT,
    CopyError,
    CopyRange,
    rounds_of,
)
from kmirror_engine.copying.rate_limit import Pacer
from kmirror_engine.copying.record_limits import TargetRules
from kmirror_engine.observability.progress import PartitionProgress

log = logging.getLogger("kmirror.copy")


class RangeCopier(PoisonRecords):
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
        self._states: list[RangeState] = []  # of the round in flight
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
        for round_ in rounds_of(ordered):
            if self._spent(self._copied_bytes):  # budget spent: not started
                for index in round_:  # nothing copied: next_offset is the range's start
                    rng = ordered[index]
                    results[index] = RangeState(
                        dataclasses.replace(rng, end_offset=rng.start_offset), [], None
                    ).progress()
                continue
            for index, progress in zip(round_, self._copy_round([ordered[i] for i in round_]), strict=True):
                results[index] = progress
        return [results[i] for i in range(len(ordered))]

    def _copy_round(self, ranges: Sequence[CopyRange]) -> list[PartitionProgress]:
        failures = self._failures = []
        states = {
            (r.source_topic, r.partition): RangeState(
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

    def _pump(self, active: dict[tuple[str, int], RangeState], failures: list[str]) -> None:
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
            RangeState.now_ms = int(time.time() * 1000)
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
        RangeState.now_ms = int(time.time() * 1000)
        self.producer.poll(0)

    def _cut(self, active: dict[tuple[str, int], RangeState]) -> None:
        """Stop every range in flight at the consumer position (what was consumed is produced)."""
        for tp in self.consumer.position([TopicPartition(t, p) for t, p in active]):
            state = active.get((tp.topic, tp.partition))
            if state is not None:
                state.cut = min(max(tp.offset, state.rng.start_offset), state.rng.end_offset)
                self._finish(active, state)

    def _produce_slow(self, state: RangeState, msg: Any, exc: Exception, headers: Any) -> bool:
        """Retry a produce the local queue refused; True once produced.

        Raises CopyError for any other produce error (too large for the producer: never a dead letter).
        """
        rng, offset = state.rng, msg.offset()
        value, key, ts = msg.value(), msg.key(), msg.timestamp()[1]
        deadline = time.monotonic() + self.unknown_partition_timeout_s
        while isinstance(exc, BufferError) or (
            _code(exc) == KafkaError._UNKNOWN_PARTITION and time.monotonic() < deadline
        ):
            RangeState.now_ms = int(time.time() * 1000)
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

    def _on_consumer_event(self, msg: Any, err: KafkaError, active: dict[tuple[str, int], RangeState]) -> None:
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

    def _finish_by_position(self, active: dict[tuple[str, int], RangeState]) -> bool:
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

    def _finish(self, active: dict[tuple[str, int], RangeState], state: RangeState) -> None:
        key = (state.rng.source_topic, state.rng.partition)
        if active.pop(key, None) is not None:
            state.done = True
            self.consumer.pause([TopicPartition(*key)])

    def _drain(self, failures: list[str]) -> None:
        """Wait for every delivery report (including dead letters); raise on any failure."""
        while True:
            RangeState.now_ms = int(time.time() * 1000)
            remaining = self.producer.flush(0.1)
            if failures:
                raise CopyError(f"{len(failures)} record(s) failed; first: {failures[0]}")
            if remaining == 0:
                return


def _code(exc: BaseException) -> Any:
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return error.code() if isinstance(error, KafkaError) else None
