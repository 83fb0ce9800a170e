"""The `limit_bytes` contender (issue 47): the ceiling for copying existing record batches.

Fetch the source partitions' raw record batches and produce the same bytes to the target, with
nothing else done: no Spark, no offset syncs, no progress, no merging of small batches, no
fallbacks, no per-batch checks beyond splitting the fetch answer into batches. It reuses the
batch path's wire code (`kmirror_engine.copying`: `BrokerLink`, `FetchCall`, `ProduceCall`,
`split_batches`) with the same fetch and produce sizes, an idempotent producer id (acks=all,
5 requests in flight per broker, like the app's batch path and the other contenders), one
thread, one process. Timing: first fetch answer holding records -> last produce answer.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.producer.transaction import InitProducerIdRequest

from kmirror_engine.copying.batch_buffers import BufferPool
from kmirror_engine.copying.batch_copy import MAX_PENDING_BYTES
from kmirror_engine.copying.batch_frames import FetchCall, ProduceCall, ProducedBatch
from kmirror_engine.copying.batch_net import BrokerLink
from kmirror_engine.copying.batch_produce import (
    INIT_PRODUCER_ID_VERSION,
    MAX_IN_FLIGHT,
    PRODUCE_BUFFERS,
    PRODUCE_MAX_BYTES,
    PRODUCE_TIMEOUT_MS,
)
from kmirror_engine.copying.batch_queue import FETCH_MAX_BYTES, FETCH_MAX_WAIT_MS, PARTITION_FETCH_BYTES, READ_COMMITTED
from kmirror_engine.copying.batch_wire import Batch, split_batches


@dataclass
class Part:
    """One partition's copy: fetch position, batches waiting, records acknowledged."""

    partition: int
    end: int  # copy offsets [0, end)
    position: int = 0
    fetching: bool = False
    queue: deque[Batch] = field(default_factory=deque)
    queued_bytes: int = 0
    sequence: int = 0
    acked: int = 0

    @property
    def done(self) -> bool:
        return self.acked >= self.end


def take(part: Part, records: bytes | memoryview | None) -> int:
    """Queue the batches of a fetch answer that lie in [position, end); returns records queued."""
    queued = 0
    for batch in split_batches(records or b""):
        if batch.next_offset <= part.position or batch.base_offset >= part.end:
            continue
        part.queue.append(batch)
        part.queued_bytes += len(batch.data)
        part.position = batch.next_offset
        queued += batch.record_count
    return queued


def next_request(parts: list[Part], max_bytes: int = PRODUCE_MAX_BYTES) -> list[tuple[Part, Batch]]:
    """The next produce request of one target broker: the oldest waiting batch of each of its
    partitions, while the request stays within `max_bytes` (a larger batch goes alone)."""
    out: list[tuple[Part, Batch]] = []
    size = 0
    for part in parts:
        if not part.queue:
            continue
        batch_size = len(part.queue[0].data)
        if out and size + batch_size > max_bytes:
            continue
        out.append((part, part.queue.popleft()))
        part.queued_bytes -= batch_size
        size += batch_size
    return out


def _producer_id(target: BrokerLink) -> tuple[int, int]:
    request = InitProducerIdRequest[INIT_PRODUCER_ID_VERSION](
        transactional_id=None, transaction_timeout_ms=-1, producer_id=-1, producer_epoch=-1
    )
    answer = target.wait(target.send(request, target.manager.least_loaded_node()), 30, "InitProducerId")
    if answer.error_code != 0:
        raise RuntimeError(f"limit_bytes: InitProducerId failed with error {answer.error_code}")
    return answer.producer_id, answer.producer_epoch


def copy_bytes(
    source: str, target: str, src_topic: str, dst_topic: str, expected: dict[int, int], timeout_s: float = 1800
) -> dict[str, Any]:
    """Copy offsets [0, expected[p]) of every partition as raw batches; returns the copy window
    (`start`, `end`, wall clock s). Raises RuntimeError on any fetch or produce error."""
    src = BrokerLink({"bootstrap.servers": source}, "bench-bytes-source")
    dst = BrokerLink({"bootstrap.servers": target}, "bench-bytes-target", net=src.net)
    errors: list[BaseException] = []
    first: list[float] = []
    last = [0.0]
    try:
        src_leaders, dst_leaders = src.leaders([src_topic]), dst.leaders([dst_topic])
        producer_id, epoch = _producer_id(dst)
        parts = [Part(p, n) for p, n in sorted(expected.items()) if n]
        in_flight: dict[int, int] = {}
        pool = BufferPool(PRODUCE_MAX_BYTES + 64 * 1024, PRODUCE_BUFFERS)

        def fetched(answer: Any, wanted: dict[int, Part]) -> None:
            for part in wanted.values():
                part.fetching = False
            if isinstance(answer, BaseException):
                errors.append(answer)
                return
            for topic in answer.responses:
                for data in topic.partitions:
                    if data.error_code:
                        errors.append(RuntimeError(f"limit_bytes: fetch error {data.error_code}"))
                    elif take(wanted[data.partition_index], data.records) and not first:
                        first.append(time.time())

        def acked(answer: Any, node: int, sent: dict[int, tuple[Part, Batch]]) -> None:
            in_flight[node] -= 1
            if isinstance(answer, BaseException):
                errors.append(answer)
                return
            for topic in answer.responses:
                for data in topic.partition_responses:
                    if data.error_code:
                        errors.append(RuntimeError(f"limit_bytes: produce error {data.error_code}"))
                    part, batch = sent[data.index]
                    part.acked += batch.record_count
            last[0] = time.time()

        deadline = time.monotonic() + timeout_s
        while not all(part.done for part in parts):
            if errors:
                raise RuntimeError(f"limit_bytes failed: {errors[0]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"limit_bytes: not done in {timeout_s:.0f} s")
            by_leader: dict[int, list[Part]] = {}
            for part in parts:
                if part.position < part.end and not part.fetching and part.queued_bytes < MAX_PENDING_BYTES:
                    by_leader.setdefault(src_leaders[(src_topic, part.partition)], []).append(part)
            for node, wanted in by_leader.items():
                if any(p.fetching for p in parts if src_leaders[(src_topic, p.partition)] == node):
                    continue  # one fetch in flight per source broker
                for part in wanted:
                    part.fetching = True
                call = FetchCall(
                    [(src_topic, p.partition, p.position, PARTITION_FETCH_BYTES) for p in wanted],
                    FETCH_MAX_WAIT_MS,
                    FETCH_MAX_BYTES,
                    READ_COMMITTED,
                )
                src.send(call, node).add_both(lambda a, w={p.partition: p for p in wanted}: fetched(a, w))
            for node in set(dst_leaders.values()):
                mine = [p for p in parts if dst_leaders[(dst_topic, p.partition)] == node]
                while in_flight.get(node, 0) < MAX_IN_FLIGHT and (items := next_request(mine)):
                    batches = []
                    for part, batch in items:
                        batches.append(
                            ProducedBatch(dst_topic, part.partition, batch, producer_id, epoch, part.sequence)
                        )
                        part.sequence += batch.record_count
                    in_flight[node] = in_flight.get(node, 0) + 1
                    sent = {part.partition: (part, batch) for part, batch in items}
                    dst.send(ProduceCall(batches, PRODUCE_TIMEOUT_MS, pool), node).add_both(
                        lambda a, n=node, s=sent: acked(a, n, s)
                    )
            src.poll(FETCH_MAX_WAIT_MS)
    finally:
        dst.close()
        src.close()
    return {"start": first[0] if first else last[0], "end": last[0]}
