"""How the batch copy path (`kmirror_engine.copying.batch_copy`) reads: the Fetch request of one
source leader, and a partition's fetch answer turned into its queue: whole batches to produce
(small neighbours merged into one, `batch_merge.merge`), committed ones only, and spans of records
for the record loop (`batch_state.fallback_reason`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

from kmirror_engine.copying.batch_frames import FetchCall
from kmirror_engine.copying.batch_merge import AppendRecords, merge, mergeable
from kmirror_engine.copying.batch_state import RangeInFlight, RecordSpan, SentBatch, fallback_reason
from kmirror_engine.copying.batch_wire import AbortedTransaction, Batch, BatchFormatError, committed, split_batches
from kmirror_engine.copying.native_copy import native_module
from kmirror_engine.copying.ranges import CopyError

# Bytes per fetch: 4 MiB (1 MiB per partition) used ~35% less CPU per record than 64/8 MiB here
# (docs/performance.md): every response is a few fresh buffers in kafka-python, and buffers over
# glibc's mmap threshold (at most 32 MiB) pay page faults each time. A batch over the partition
# limit is still fetched whole (`RangeInFlight.wide`). Over a WAN one fetch per leader in flight
# moves at most 4 MiB per round trip.
FETCH_MAX_BYTES = 4 * 1024 * 1024
PARTITION_FETCH_BYTES = 1024 * 1024
FETCH_MAX_WAIT_MS = 50
READ_COMMITTED = 1
# Source batches under this many records are merged with their neighbours (`batch_merge.merge`) into
# batches of at most MERGE_MAX_BYTES (and the target's max.message.bytes): a Produce request carries
# one batch per partition, so unmerged they cost a request each (docs/performance.md, stop 35).
MERGE_BELOW_RECORDS = int(os.environ.get("KMIRROR_MERGE_BELOW", "256"))  # 0: never (bench comparisons)
MERGE_MAX_BYTES = 512 * 1024
# The merge's per-record part runs in the native module when it is built (~100x cheaper than in
# Python); KMIRROR_NATIVE_MERGE=0 keeps it in Python (bench comparisons).
NATIVE_MERGE = os.environ.get("KMIRROR_NATIVE_MERGE", "1") != "0"


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


def queue_fetched(s: RangeInFlight, part: Any, log_once: Callable[[str, RangeInFlight], None]) -> None:
    """Queue what a partition's error-free fetch answer `part` holds: batches to produce, spans for
    the record loop (each reason told to `log_once`); the fetch position moves past what came."""
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
                queue_run(s, run)
                run, run_bytes = [], 0
            run.append(batch)
            run_bytes += len(batch.data)
            continue
        if run:
            queue_run(s, run)
            run, run_bytes = [], 0
        if reason is None:
            s.pending.append(SentBatch(batch))
            s.pending_bytes += len(batch.data)
            continue
        log_once(reason, s)
        start, end = max(start, s.position), min(batch.next_offset, s.rng.end_offset)
        tail = s.pending[-1] if s.pending else None
        if isinstance(tail, RecordSpan) and tail.end == start:
            s.pending[-1] = RecordSpan(tail.start, end)
        else:
            s.pending.append(RecordSpan(start, end))
    if run:
        queue_run(s, run)
    s.position = min(max(s.position, batches[-1].next_offset), s.rng.end_offset)


def queue_run(s: RangeInFlight, run: list[Batch]) -> None:
    """Queue consecutive small batches as one (`batch_merge.merge`: one request slot for all).
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


def legacy_start(batch: Batch, covered: int) -> int:
    """The first source offset `batch` may hold. A magic 2 batch names it (its base offset); an
    old-format (v0/v1) message stands at its own offset, but a compressed one is a wrapper at the
    offset of its last inner record, its inner records at the offsets after `covered` (where the
    previous batch ended): the record loop copies all of them, not only the last."""
    return batch.base_offset if batch.magic == 2 else min(covered, batch.base_offset)


def _native_append_records() -> AppendRecords | None:
    """The native module's `append_records` (None: not built, or NATIVE_MERGE off)."""
    module = native_module() if NATIVE_MERGE else None
    return cast("AppendRecords | None", getattr(module, "append_records", None))
