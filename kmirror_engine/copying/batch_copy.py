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
import struct
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kmirror_engine.copying.batch_buffers import BufferPool
from kmirror_engine.copying.batch_net import BrokerLink
from kmirror_engine.copying.batch_produce import (
    PRODUCE_BUFFERS,
    PRODUCE_MAX_BYTES,
    RETRIABLE,
    BatchProducing,
    error_name,
)
from kmirror_engine.copying.batch_queue import fetch_request, queue_fetched
from kmirror_engine.copying.batch_state import RangeInFlight, RecordSpan
from kmirror_engine.copying.batch_wire import BatchFormatError
from kmirror_engine.copying.ranges import DEFAULT_STALL_TIMEOUT_S, CopyError, CopyRange, copy_in_rounds
from kmirror_engine.copying.record_limits import TargetRules
from kmirror_engine.observability.progress import PartitionProgress

log = logging.getLogger("kmirror.batch_copy")
# A partition is not fetched while this many bytes of it wait to be produced. It bounds memory, and
# every fetch buffer a copier ever holds at once is fresh memory, zero-filled and page-faulted in
# once per copier (each `--once` run, each new Spark worker): 2 MiB (two partition fetches) took
# half the page faults of 8 MiB and ~12% less CPU per record at the same rate; 8 MiB had measured
# 30% fewer faults than 32 MiB (docs/performance.md).
MAX_PENDING_BYTES = 2 * 1024 * 1024
# A kept copier takes a new producer id (and forgets old topics) past this many target partitions
# or after this long (`BatchRangeCopier._renew_if_due`).
RENEW_AFTER_PARTITIONS = 10_000
RENEW_AFTER_S = 24 * 3600.0
# How long a source topic may be missing from metadata answers before the copy fails on it (a
# topic deleted during the copy; a metadata view that lags behind a new topic catches up well within it).
UNKNOWN_TOPIC_GRACE_S = 15.0
OFFSET_OUT_OF_RANGE = 1


class BatchRangeCopier(BatchProducing):
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
                f"{error_name(part.error_code)}"
            )
        queue_fetched(s, part, self._log_once)

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


def new_batch_copier(
    consumer_config: Mapping[str, Any],
    producer_config: Mapping[str, Any],
    stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
) -> BatchRangeCopier:
    """A copier on new links to the source (the consumer's config) and the target (the producer's),
    with a Python record loop on the same configs for the batches that need per-record work.

    Raises KmirrorError when the configs cannot be translated (`batch_settings.link_config`: the
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
