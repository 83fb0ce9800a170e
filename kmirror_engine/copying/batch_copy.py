"""The batch copy path (issue 28, flow option `copy_loop: batch`): Kafka record batches are
fetched from the source leaders and produced to the target leaders as they are, rewriting only
what the target's producer owns (`kmirror_engine.copying.batch_wire.rewrite`). Keys, values,
headers, timestamps and compression stay byte-identical, and no record is ever decoded.

`BatchRangeCopier.copy(ranges)` keeps `RangeCopier.copy`'s contract for at-least-once flows:
the same rounds (one range per source partition per round), offsets never assumed contiguous
(the fetch position moves past control batches and aborted transactions, filtered at batch
level as a read_committed consumer does), the same `PartitionProgress` with exact offset syncs
(a batch of n contiguous records from source base S landing at target base T maps S+i to T+i),
the same stall timeout, and CopyError naming the partition and offset for anything that is not
retriable. Retriable produce errors (a leader moved) refresh metadata and resend the same
batches with the same sequences (the idempotent producer makes the resend exactly-once).

What needs per-record work goes to a record loop (`fallback`, a `RangeCopier`), batch by batch:
batches with LogAppendTime, offset gaps (compacted sources), an old message format, a size over
the target's max.message.bytes, timestamps the target's window may refuse, a batch straddling
the range's start or end, and a compacted target's batches whose keys are not checked in place
(compressed, or over `batch_state.COMPACTED_KEY_CHECK_MAX_RECORDS` records: the record loop checks them).
Each is counted in `PartitionProgress.fallback_records` and logged once per reason and copier.
Progress differs from the record loops in two approximations: `bytes` counts batch bytes, and
latency is taken per batch (from its base and max timestamps).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import struct
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

from kafka.protocol.producer.transaction import InitProducerIdRequest

from kmirror_engine.clients.coordinator import COORDINATOR_NOT_YET
from kmirror_engine.copying.batch_frames import BufferPool, FetchCall, ProduceCall, ProducedBatch
from kmirror_engine.copying.batch_net import BrokerLink
from kmirror_engine.copying.batch_state import RangeInFlight, RecordSpan, SentBatch, fallback_reason
from kmirror_engine.copying.batch_wire import (
    AbortedTransaction,
    AppendRecords,
    Batch,
    BatchFormatError,
    committed,
    merge,
    mergeable,
    split_batches,
)
from kmirror_engine.copying.native_copy import native_module
from kmirror_engine.copying.ranges import DEFAULT_STALL_TIMEOUT_S, CopyError, CopyRange, copy_in_rounds
from kmirror_engine.copying.record_limits import TargetRules
from kmirror_engine.observability.progress import PartitionProgress

log = logging.getLogger("kmirror.batch_copy")
INIT_PRODUCER_ID_VERSION = 3  # Fetch v12 and Produce v9 (batch_frames): the newest that name topics
# Bytes per fetch: 4 MiB (1 MiB per partition) used ~35% less CPU per record than 64/8 MiB here
# (docs/performance.md): every response is a few fresh buffers in kafka-python, and buffers over
# glibc's mmap threshold (at most 32 MiB) pay page faults each time. A batch over the partition
# limit is still fetched whole (`RangeInFlight.wide`). Over a WAN one fetch per leader in flight
# moves at most 4 MiB per round trip.
FETCH_MAX_BYTES = 4 * 1024 * 1024
PARTITION_FETCH_BYTES = 1024 * 1024
FETCH_MAX_WAIT_MS = 50
READ_COMMITTED = 1
PRODUCE_TIMEOUT_MS = 30_000
# In-flight produce requests per target broker: the idempotent producer's limit per partition (5).
MAX_IN_FLIGHT = 5
# Source batches under this many records are merged with their neighbours (`batch_wire.merge`) into
# batches of at most MERGE_MAX_BYTES (and the target's max.message.bytes): a Produce request carries
# one batch per partition, so unmerged they cost a request each (docs/performance.md, stop 35).
MERGE_BELOW_RECORDS = int(os.environ.get("KMIRROR_MERGE_BELOW", "256"))  # 0: never (bench comparisons)
MERGE_MAX_BYTES = 512 * 1024
# The merge's per-record part runs in the native module when it is built (~100x cheaper than in
# Python); KMIRROR_NATIVE_MERGE=0 keeps it in Python (bench comparisons).
NATIVE_MERGE = os.environ.get("KMIRROR_NATIVE_MERGE", "1") != "0"
# Batch bytes per produce request (more go in the next one; a larger batch goes alone), and the
# reused request buffers (`batch_frames.BufferPool`): 5 in flight to each of a few brokers.
PRODUCE_MAX_BYTES = 4 * 1024 * 1024
PRODUCE_BUFFERS = 16
# A partition is not fetched while this many bytes of it wait to be produced. It bounds memory, and
# every fetch buffer a copier ever holds at once is fresh memory, zero-filled and page-faulted in
# once per copier (each `--once` run, each new Spark worker): 2 MiB (two partition fetches) took
# half the page faults of 8 MiB and ~12% less CPU per record at the same rate; 8 MiB had measured
# 30% fewer faults than 32 MiB (docs/performance.md).
MAX_PENDING_BYTES = 2 * 1024 * 1024
MAX_SEQUENCE = 2**31 - 1
# A kept copier takes a new producer id (and forgets old topics) past this many target partitions
# or after this long (`BatchRangeCopier._renew_if_due`).
RENEW_AFTER_PARTITIONS = 10_000
RENEW_AFTER_S = 24 * 3600.0
# How long a source topic may be missing from metadata answers before the copy fails on it (a
# topic deleted during the copy; a metadata view that lags behind a new topic catches up well within it).
UNKNOWN_TOPIC_GRACE_S = 15.0
# Errors after which the same batches are resent once metadata is fresh (Kafka's retriable ones).
RETRIABLE = frozenset({3, 5, 6, 7, 13, 19, 20, 56, 74, 75})  # UNKNOWN_TOPIC_OR_PARTITION .. UNKNOWN_LEADER_EPOCH
OUT_OF_ORDER_SEQUENCE = 45
DUPLICATE_SEQUENCE = 46
OFFSET_OUT_OF_RANGE = 1
# InitProducerId answers that only mean "not yet" (COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE,
# NOT_COORDINATOR, REQUEST_TIMED_OUT, CONCURRENT_TRANSACTIONS): asked again for this long.
COORDINATOR_BUSY = COORDINATOR_NOT_YET | {7, 51}
INIT_PRODUCER_ID_TIMEOUT_S = 30.0


def fetch_request(positions: Sequence[tuple[str, int, int]], wide: Iterable[tuple[str, int]] = ()) -> FetchCall:
    """A read_committed Fetch (no session) of (topic, partition, offset) `positions` of one leader.
    `wide` partitions come first with the whole request's byte limit: a batch larger than the
    per-partition limit is only served whole to the first partition (KIP-74), never cut."""
    wide = set(wide)
    ordered = sorted(positions, key=lambda p: (p[0], p[1]) not in wide)
    return FetchCall(
        [
            (topic, partition, offset, FETCH_MAX_BYTES if (topic, partition) in wide else PARTITION_FETCH_BYTES)
            for topic, partition, offset in ordered
        ],
        FETCH_MAX_WAIT_MS,
        FETCH_MAX_BYTES,
        READ_COMMITTED,
    )


class BatchRangeCopier:
    """Copies ranges batch by batch (module doc) over `source` and `target` links.

    `fallback`: makes the record loop for batches that need per-record work (called at most once).
    `limits`/`rules`: each target topic's max.message.bytes and other refusals (`TargetRules`).
    The producer id, the sequences and the connections are kept across `copy()` calls;
    `close()` ends the connections and the fallback loop's clients."""

    def __init__(
        self,
        source: BrokerLink,
        target: BrokerLink,
        fallback: Callable[[], Any],
        limits: Mapping[str, int | None] | None = None,
        rules: Mapping[str, TargetRules] | None = None,
        stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
        poll_timeout_s: float = 0.1,
    ) -> None:
        self.source, self.target = source, target
        self.make_fallback = fallback
        self.limits = dict(limits or {})
        self.rules = dict(rules or {})
        self.stall_timeout_s = stall_timeout_s
        self._unknown_since: dict[str, float] = {}  # source topic -> when metadata first did not know it
        self.poll_timeout_ms = max(1.0, poll_timeout_s * 1000)
        self._fallback: Any = None
        self._producer: tuple[int, int] | None = None
        self._producer_since = time.monotonic()
        self._sequences: dict[tuple[str, int], int] = {}
        self._logged: set[str] = set()
        self._in_flight = 0
        self._source_leaders: dict[tuple[str, int], int] = {}
        self._target_leaders: dict[tuple[str, int], int] = {}
        self._requests: dict[int, int] = {}  # target node -> produce requests in flight
        self._buffers = BufferPool(PRODUCE_MAX_BYTES + 64 * 1024, PRODUCE_BUFFERS)  # produce requests' bytes
        # raised by answer handlers; kafka-python's Futures log and drop a callback's exception
        self._errors: list[BaseException] = []
        self._refused = 0  # produce requests failed during this `_produce` turn

    def use_rules(self, limits: Mapping[str, int | None], rules: Mapping[str, TargetRules]) -> None:
        """The target topics' limits and rules for the next `copy()` (a kept copier serves many tasks)."""
        self.limits, self.rules = dict(limits), dict(rules)
        if self._fallback is not None:
            self._fallback.limits, self._fallback.rules = self.limits, self.rules

    def __len__(self) -> int:
        """Produce requests not yet answered (0 after a successful copy: the lease keeps the copier)."""
        return self._in_flight

    def close(self) -> None:
        """End the connections of both links and the fallback loop's clients."""
        self.target.close()
        self.source.close()  # last: the target link polls through its selector
        if self._fallback is not None:
            self._fallback.consumer.close()
            self._fallback.producer.flush(10)

    def copy(self, ranges: Iterable[CopyRange]) -> list[PartitionProgress]:
        """Copy every range and return their progress in input order (`RangeCopier.copy`)."""
        return copy_in_rounds(ranges, self._copy_round)

    def _copy_round(self, ranges: Sequence[CopyRange]) -> list[PartitionProgress]:
        states = [
            RangeInFlight(
                r, self.rules.get(r.target_topic) or TargetRules(), self.limits.get(r.target_topic), r.start_offset
            )
            for r in ranges
        ]
        active = [s for s in states if not s.done]
        self._errors = []
        if active:
            self._renew_if_due(active)
            self._producer_id()
            self._source_leaders = self.source.leaders({s.rng.source_topic for s in active})
            self._target_leaders = self.target.leaders({s.rng.target_topic for s in active})
            self._pump(active)
        return [s.progress() for s in states]

    def _renew_if_due(self, active: list[RangeInFlight]) -> None:
        """Weeks of running: a kept copier remembers a sequence per target partition it ever wrote
        and asks metadata for every topic it ever copied, deleted ones included. Past
        `RENEW_AFTER_PARTITIONS` partitions or `RENEW_AFTER_S`, between rounds (nothing in
        flight), it takes a new producer id (sequences start again at 0, as the broker expects
        of a new id) and narrows both links' metadata to this round's topics."""
        now = time.monotonic()
        if self._producer is None:
            self._producer_since = now
            return
        if len(self._sequences) <= RENEW_AFTER_PARTITIONS and now - self._producer_since < RENEW_AFTER_S:
            return
        if self._in_flight:
            return
        log.info(
            "batch copy: a new producer id after %d target partitions and %.0f h",
            len(self._sequences),
            (now - self._producer_since) / 3600,
        )
        self._producer, self._sequences, self._producer_since = None, {}, now
        self.source.forget({s.rng.source_topic for s in active})
        self.target.forget({s.rng.target_topic for s in active})

    def _producer_id(self) -> tuple[int, int]:
        """This copier's idempotent producer id and epoch (InitProducerId without transactional id, once)."""
        if self._producer is None:
            request = InitProducerIdRequest[INIT_PRODUCER_ID_VERSION](
                transactional_id=None, transaction_timeout_ms=-1, producer_id=-1, producer_epoch=-1
            )
            deadline = time.monotonic() + INIT_PRODUCER_ID_TIMEOUT_S
            while True:
                node = self.target.manager.least_loaded_node()
                answer = self.target.wait(self.target.send(request, node), INIT_PRODUCER_ID_TIMEOUT_S, "InitProducerId")
                if answer.error_code not in COORDINATOR_BUSY or time.monotonic() > deadline:
                    break
                self.target.poll(200)  # a starting broker loads its transaction state first: ask again
            if answer.error_code != 0:
                raise CopyError(
                    f"the target refused an idempotent producer id (InitProducerId error "
                    f"{_error_name(answer.error_code)}); check the mirror's IdempotentWrite ACL"
                )
            self._producer = (answer.producer_id, answer.producer_epoch)
        return self._producer

    def _pump(self, active: list[RangeInFlight]) -> None:
        last_move = time.monotonic()
        while True:
            live = [s for s in active if not s.done]
            if not live:
                return
            moved = self._run_fallbacks(live)
            self._fetch(live)
            self._produce(live)
            marks = [(s.position, s.records) for s in live]
            self.source.poll(self.poll_timeout_ms)
            if self._errors:
                raise self._errors[0]
            if moved or marks != [(s.position, s.records) for s in live]:
                last_move = time.monotonic()
            elif time.monotonic() - last_move > self.stall_timeout_s:
                stuck = ", ".join(
                    f"{s.rng.source_topic}[{s.rng.partition}] at {s.position} end {s.rng.end_offset}"
                    for s in live
                    if not s.done
                )
                raise CopyError(f"no progress for {self.stall_timeout_s:.0f} s before the planned end: {stuck}")

    # -- fetching ---------------------------------------------------------------------------

    def _fetch(self, live: list[RangeInFlight]) -> None:
        """One fetch per source leader, for its partitions with room in their pending queue."""
        by_node: dict[int, list[RangeInFlight]] = {}
        busy = {self._source_leaders.get(s.key) for s in live if s.fetching}
        # a broker throttling this link (a fetch quota) would refuse the fetch at once: asked after its pause
        busy |= {node for node in set(self._source_leaders.values()) if self.source.throttled(node)}
        refreshed = False
        for s in live:
            if s.fetched_all or s.fetching or s.pending_bytes >= MAX_PENDING_BYTES:
                continue
            node = self._source_leaders.get(s.key)
            if node is None:
                if not refreshed:  # one metadata round trip per pass, whatever the partitions without a leader
                    refreshed = True
                    self._source_leaders = self.source.leaders({s.rng.source_topic for s in live})
                    self._check_unknown(self.source.unknown & {s.rng.source_topic for s in live})
                continue
            if node not in busy:
                by_node.setdefault(node, []).append(s)
        for node, states in by_node.items():
            for s in states:
                s.fetching = True
            request = fetch_request(
                [(s.rng.source_topic, s.rng.partition, s.position) for s in states], [s.key for s in states if s.wide]
            )
            wanted = {s.key: s for s in states}
            self.source.send(request, node).add_both(self._guarded(self._fetched, wanted))

    def _check_unknown(self, unknown: set[str]) -> None:
        """CopyError once a source topic has been unknown to the source's metadata for
        `UNKNOWN_TOPIC_GRACE_S` (deleted during the copy: `copying.deleted_sources` confirms it and
        handles it as the flow's fail_on_data_loss says); until then its partitions wait for a leader."""
        now = time.monotonic()
        self._unknown_since = {t: self._unknown_since.get(t, now) for t in unknown}
        late = sorted(t for t, since in self._unknown_since.items() if now - since >= UNKNOWN_TOPIC_GRACE_S)
        if late:
            raise CopyError(
                f"source topic {late[0]} has been unknown to the source cluster's metadata for "
                f"{UNKNOWN_TOPIC_GRACE_S:.0f} s while its planned range was being copied (deleted?)"
            )

    def _guarded(self, handler: Callable[..., None], *args: Any) -> Callable[[Any], None]:
        """`handler(answer, *args)` as a Future callback whose exception reaches `_pump`."""

        def run(answer: Any) -> None:
            try:
                handler(answer, *args)
            except BaseException as exc:
                self._errors.append(exc)

        return run

    def _fetched(self, answer: Any, wanted: dict[tuple[str, int], RangeInFlight]) -> None:
        for s in wanted.values():
            s.fetching = False
        if isinstance(answer, BaseException):  # the request failed (connection lost, timed out)
            nodes = {self._source_leaders.get(key) for key in wanted}
            if any(node is not None and self.source.throttled(node) for node in nodes):
                return  # a quota's pause refused it at once: the leaders are right, asked again after it
            log.warning("fetch from the source failed: %s (refreshing metadata, retrying)", answer)
            self._source_leaders = {}
            return
        for topic in answer.responses:
            for part in topic.partitions:
                state = wanted.get((topic.topic, part.partition_index))
                if state is not None:
                    self._take_checked(state, part)

    def _take_checked(self, s: RangeInFlight, part: Any) -> None:
        """`_take`, with malformed record bytes reported as a CopyError naming partition and offset
        (the codec's own errors, IndexError or struct.error included, name neither)."""
        try:
            self._take(s, part)
        except CopyError:
            raise
        except (BatchFormatError, IndexError, ValueError, struct.error) as exc:
            raise CopyError(
                f"fetching {s.rng.source_topic}[{s.rng.partition}] at offset {s.position}: the "
                f"fetched record batches are malformed ({type(exc).__name__}: {exc or 'truncated'})"
            ) from exc

    def _take(self, s: RangeInFlight, part: Any) -> None:
        """Queue what a partition's fetch answer holds: batches to produce, spans for the record loop."""
        if part.error_code == OFFSET_OUT_OF_RANGE:
            raise CopyError(
                f"fetching {s.rng.source_topic}[{s.rng.partition}] at offset {s.position}: the offset is "
                "out of range (deleted by retention after planning?); the batch is retried"
            )
        if part.error_code in RETRIABLE:
            self._source_leaders.pop(s.key, None)
            return
        if part.error_code != 0:
            raise CopyError(
                f"fetching {s.rng.source_topic}[{s.rng.partition}] at offset {s.position} failed: "
                f"{_error_name(part.error_code)}"
            )
        batches = [b for b in split_batches(part.records or b"") if b.next_offset > s.position]
        s.wide = bool(part.records) and not batches  # only a cut batch came: fetch it whole next time
        if not batches:
            return
        aborted = [AbortedTransaction(a.producer_id, a.first_offset) for a in part.aborted_transactions or ()]
        run: list[Batch] = []  # consecutive small batches, merged into one request's batch
        run_bytes = 0
        cap = min(MERGE_MAX_BYTES, s.limit or MERGE_MAX_BYTES)
        covered = s.position  # where the batches queued from this answer end
        for batch in committed(batches, aborted):
            if batch.base_offset >= s.rng.end_offset:
                break
            # an old-format (v0/v1) compressed message set is one wrapper at its *last* inner
            # offset: its inner records start after what came before it (`legacy_start`)
            start = legacy_start(batch, covered)
            covered = batch.next_offset
            reason = fallback_reason(s, batch, int(time.time() * 1000))
            if reason is None and batch.record_count < MERGE_BELOW_RECORDS and mergeable(batch):
                if run and (run[-1].next_offset != batch.base_offset or run_bytes + len(batch.data) > cap):
                    self._queue(s, run)
                    run, run_bytes = [], 0
                run.append(batch)
                run_bytes += len(batch.data)
                continue
            if run:
                self._queue(s, run)
                run, run_bytes = [], 0
            if reason is None:
                s.pending.append(SentBatch(batch))
                s.pending_bytes += len(batch.data)
                continue
            self._log_once(reason, s)
            start, end = max(start, s.position), min(batch.next_offset, s.rng.end_offset)
            tail = s.pending[-1] if s.pending else None
            if isinstance(tail, RecordSpan) and tail.end == start:
                s.pending[-1] = RecordSpan(tail.start, end)
            else:
                s.pending.append(RecordSpan(start, end))
        if run:
            self._queue(s, run)
        s.position = min(max(s.position, batches[-1].next_offset), s.rng.end_offset)

    def _queue(self, s: RangeInFlight, run: list[Batch]) -> None:
        """Queue consecutive small batches as one (`batch_wire.merge`: one request slot for all).
        Rewritten deltas can make a merged batch larger than its parts: one over the target's
        max.message.bytes would be refused, so its parts go as they came (each fits)."""
        try:
            merged = merge(run, _native_append_records())
        except BatchFormatError as exc:
            raise CopyError(
                f"copying {s.rng.source_topic}[{s.rng.partition}] from offset {run[0].base_offset}: "
                f"{exc}; nothing of it was produced"
            ) from exc
        for batch in run if s.limit is not None and len(merged.data) > s.limit else [merged]:
            s.pending.append(SentBatch(batch))
            s.pending_bytes += len(batch.data)

    def _log_once(self, reason: str, s: RangeInFlight) -> None:
        if reason not in self._logged:
            self._logged.add(reason)
            log.warning(
                "batch copy: the record loop copies %s (first at %s[%d]@%d)",
                reason,
                s.rng.source_topic,
                s.rng.partition,
                s.position,
            )

    # -- producing --------------------------------------------------------------------------

    def _produce(self, live: list[RangeInFlight]) -> None:
        """Requests to the target leaders while they have room (`MAX_IN_FLIGHT`) and batches wait;
        a request the client refused at once (a paused connection) ends this turn: resent after a poll."""
        self._refused = 0
        while self._produce_once(live) and not self._refused:
            pass

    def _produce_once(self, live: list[RangeInFlight]) -> bool:
        """One request per target leader with room: the next batch of each of its partitions.
        Returns whether anything was sent."""
        producer_id, epoch = self._producer_id()
        by_node: dict[int, list[tuple[RangeInFlight, SentBatch]]] = {}
        sizes: dict[int, int] = {}
        # one metadata refresh for every range whose batches failed retriably (a refresh per range
        # decoded the whole target's metadata once per partition: 40-75 s of a 2,000-topic copy
        # whose new target partitions were not ready at the first produce)
        resend = [s for s in live if s.retry and not s.in_flight]
        if resend:
            self._target_leaders = self.target.leaders({s.rng.target_topic for s in resend})
            for s in resend:
                s.pending.extendleft(reversed(s.retry))
                s.retry = []
        for s in live:
            if s.retry or not s.pending or not isinstance(s.pending[0], SentBatch):
                continue
            node = self._target_leaders.get(s.target)
            if node is None or self._requests.get(node, 0) >= MAX_IN_FLIGHT:
                continue
            if s.in_flight and s.in_flight[-1].node != node:
                continue  # the leader moved: the old leader answers its batches first (or they fail)
            size = len(s.pending[0].batch.data)
            if node in by_node and sizes[node] + size > PRODUCE_MAX_BYTES:
                continue  # the next request takes it
            sizes[node] = sizes.get(node, 0) + size
            item = s.pending.popleft()
            assert isinstance(item, SentBatch)
            if item.sequence is None:  # first send: this producer's sequence (a resend keeps it)
                item.sequence = self._sequences.get(s.target, 0)
                self._sequences[s.target] = (item.sequence + item.count) % (MAX_SEQUENCE + 1)
            item.node = node
            s.in_flight.append(item)
            by_node.setdefault(node, []).append((s, item))
        for node, items in by_node.items():
            request = ProduceCall(
                [
                    ProducedBatch(s.rng.target_topic, s.rng.partition, item.batch, producer_id, epoch, item.sequence)
                    for s, item in items
                    if item.sequence is not None
                ],
                PRODUCE_TIMEOUT_MS,
                self._buffers,
            )
            self._requests[node] = self._requests.get(node, 0) + 1
            self._in_flight += 1
            sent = {s.target: (s, item) for s, item in items}
            self.target.send(request, node).add_both(self._guarded(self._acked, node, sent))
        return bool(by_node)

    def _acked(self, answer: Any, node: int, sent: dict[tuple[str, int], tuple[RangeInFlight, SentBatch]]) -> None:
        """A produce request's answer, or its failure (a lost connection, or a request the client
        refused at once: then this runs inside `send`). Each partition's answer is booked against
        the batch that request carried, never against whatever is oldest in flight."""
        self._requests[node] -= 1
        self._in_flight -= 1
        if isinstance(answer, BaseException):
            log.warning("produce to the target failed: %s (refreshing metadata, resending)", answer)
            self._refused += 1
            for s, item in sent.values():
                s.failed(item)
            return
        for topic in answer.responses:
            for part in topic.partition_responses:
                entry = sent.get((topic.name, part.index))
                if entry is not None:
                    self._landed(entry[0], entry[1], part.error_code, part.base_offset)

    def _landed(self, s: RangeInFlight, item: SentBatch, error: int, base_offset: int) -> None:
        """Account `item`'s answer. One already moved to the resend queue (an earlier batch failed)
        is judged by its resend: the broker deduplicates it if it landed."""
        first = bool(s.in_flight) and s.in_flight[0] is item
        if error in RETRIABLE or (error == OUT_OF_ORDER_SEQUENCE and (s.retry or not first)):
            s.failed(item)  # out of order behind a batch that failed or is unanswered: resent after it
            return
        if not s.answered(item):
            return
        if error not in (0, DUPLICATE_SEQUENCE):
            raise CopyError(
                f"producing source records {s.rng.source_topic}[{s.rng.partition}]@{item.source_base}.."
                f"{item.source_base + item.count - 1} to {s.rng.target_topic}[{s.rng.partition}] failed: "
                f"{_error_name(error)}"
            )
        if error == 0:
            s.mapped(item.source_base, base_offset)
            s.mapped(item.source_base + item.count - 1, base_offset + item.count - 1)
        s.records += item.count
        s.bytes += item.size
        s.pending_bytes -= item.size
        base_ts, max_ts = item.batch.base_timestamp, item.batch.max_timestamp
        s.last_timestamp_ms = max_ts
        now_ms = int(time.time() * 1000)
        s.lat_min = min(s.lat_min, now_ms - max_ts)
        s.lat_max = max(s.lat_max, now_ms - base_ts)
        s.lat_sum += item.count * (now_ms - (base_ts + max_ts) // 2)
        s.lat_count += item.count

    # -- the record loop ---------------------------------------------------------------------

    def _run_fallbacks(self, live: list[RangeInFlight]) -> bool:
        """Copy the spans at the head of each partition's queue with the record loop, once
        everything produced before them is acknowledged (order on the target is kept)."""
        moved = False
        for s in live:
            while s.pending and isinstance(s.pending[0], RecordSpan) and not s.in_flight and not s.retry:
                span = s.pending.popleft()
                assert isinstance(span, RecordSpan)
                self._copy_records(s, span)
                moved = True
        return moved

    def _copy_records(self, s: RangeInFlight, span: RecordSpan) -> None:
        if self._fallback is None:
            self._fallback = self.make_fallback()
        rng = dataclasses.replace(s.rng, start_offset=span.start, end_offset=span.end, skipped_before=0)
        [done] = self._fallback.copy([rng])
        for upstream, downstream in done.offset_syncs:
            s.mapped(upstream, downstream)
        s.records += done.records
        s.fallback_records += done.records
        s.bytes += done.bytes
        if done.last_timestamp_ms is not None:
            s.last_timestamp_ms = done.last_timestamp_ms
        if done.latency_count:
            s.lat_min = min(s.lat_min, done.latency_min_ms or 0)
            s.lat_max = max(s.lat_max, done.latency_max_ms or 0)
            s.lat_sum += done.latency_sum_ms
            s.lat_count += done.latency_count


def legacy_start(batch: Batch, covered: int) -> int:
    """The first source offset `batch` may hold. A magic 2 batch names it (its base offset); an
    old-format (v0/v1) message stands at its own offset, but a compressed one is a wrapper at the
    offset of its last inner record, its inner records at the offsets after `covered` (where the
    previous batch ended): the record loop copies all of them, not only the last."""
    return batch.base_offset if batch.magic == 2 else min(covered, batch.base_offset)


def _error_name(code: int) -> str:
    """Kafka's name for an error code (e.g. NOT_LEADER_OR_FOLLOWER), with the number."""
    import kafka.errors as errors

    return f"{errors.for_code(code).__name__} ({code})"


def new_batch_copier(
    consumer_config: Mapping[str, Any],
    producer_config: Mapping[str, Any],
    stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
) -> BatchRangeCopier:
    """A copier on new links to the source (the consumer's config) and the target (the producer's),
    with a Python record loop on the same configs for the batches that need per-record work.

    Raises KmirrorError when the configs cannot be translated (`batch_net.link_config`: the
    caller checks first) and LinkError when a cluster cannot be reached."""
    from kmirror_engine.clients.factory import new_consumer, new_producer
    from kmirror_engine.copying.range_copy import RangeCopier

    source = BrokerLink(consumer_config, "batch-copy-source")
    try:
        target = BrokerLink(producer_config, "batch-copy-target", net=source.net)
    except BaseException:
        source.close()
        raise
    copier: BatchRangeCopier

    def record_loop() -> Any:
        consumer = new_consumer(dict(consumer_config), role="batch-fallback-consumer")
        producer = new_producer(dict(producer_config), role="batch-fallback-producer")
        return RangeCopier(
            consumer, producer, limits=copier.limits, rules=copier.rules, stall_timeout_s=stall_timeout_s
        )

    copier = BatchRangeCopier(source, target, record_loop, stall_timeout_s=stall_timeout_s)
    return copier


def _native_append_records() -> AppendRecords | None:
    """The native module's `append_records` (None: not built, or NATIVE_MERGE off)."""
    module = native_module() if NATIVE_MERGE else None
    return cast("AppendRecords | None", getattr(module, "append_records", None))
