"""How the batch copy path (`kmirror_engine.copying.batch_copy`) writes: its idempotent producer
id, one sequence per target partition, Produce requests to the target leaders (at most
`MAX_IN_FLIGHT` each) and their answers booked against the batches they carried.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kafka.protocol.producer.transaction import InitProducerIdRequest

from kmirror_engine.clients.coordinator import COORDINATOR_NOT_YET
from kmirror_engine.copying.batch_buffers import BufferPool
from kmirror_engine.copying.batch_frames import ProduceCall, ProducedBatch
from kmirror_engine.copying.batch_net import BrokerLink
from kmirror_engine.copying.batch_state import RangeInFlight, SentBatch
from kmirror_engine.copying.ranges import CopyError

log = logging.getLogger("kmirror.batch_copy")
INIT_PRODUCER_ID_VERSION = 3  # Fetch v12 and Produce v9 (batch_frames): the newest that name topics
PRODUCE_TIMEOUT_MS = 30_000
# In-flight produce requests per target broker: the idempotent producer's limit per partition (5).
MAX_IN_FLIGHT = 5
# Batch bytes per produce request (more go in the next one; a larger batch goes alone), and the
# reused request buffers (`batch_buffers.BufferPool`): 5 in flight to each of a few brokers.
PRODUCE_MAX_BYTES = 4 * 1024 * 1024
PRODUCE_BUFFERS = 16
MAX_SEQUENCE = 2**31 - 1
# Errors after which the same batches are resent once metadata is fresh (Kafka's retriable ones).
RETRIABLE = frozenset({3, 5, 6, 7, 13, 19, 20, 56, 74, 75})  # UNKNOWN_TOPIC_OR_PARTITION .. UNKNOWN_LEADER_EPOCH
OUT_OF_ORDER_SEQUENCE = 45
DUPLICATE_SEQUENCE = 46
# InitProducerId answers that only mean "not yet" (COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE,
# NOT_COORDINATOR, REQUEST_TIMED_OUT, CONCURRENT_TRANSACTIONS): asked again for this long.
COORDINATOR_BUSY = COORDINATOR_NOT_YET | {7, 51}
INIT_PRODUCER_ID_TIMEOUT_S = 30.0


class BatchProducing:
    """`BatchRangeCopier`'s target side (a mixin: the copier's target link, producer id, sequences,
    target leaders and requests in flight, kept across its `copy()` calls)."""

    target: BrokerLink
    _producer: tuple[int, int] | None
    _sequences: dict[tuple[str, int], int]
    _in_flight: int
    _target_leaders: dict[tuple[str, int], int]
    _requests: dict[int, int]
    _buffers: BufferPool
    _errors: list[BaseException]
    _refused: int

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
                    f"{error_name(answer.error_code)}); check the mirror's IdempotentWrite ACL"
                )
            self._producer = (answer.producer_id, answer.producer_epoch)
        return self._producer

    def _guarded(self, handler: Callable[..., None], *args: Any) -> Callable[[Any], None]:
        """`handler(answer, *args)` as a Future callback whose exception reaches `_pump`."""

        def run(answer: Any) -> None:
            try:
                handler(answer, *args)
            except BaseException as exc:
                self._errors.append(exc)

        return run

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
                f"{error_name(error)}"
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


def error_name(code: int) -> str:
    """Kafka's name for an error code (e.g. NOT_LEADER_OR_FOLLOWER), with the number."""
    import kafka.errors as errors

    return f"{errors.for_code(code).__name__} ({code})"
