"""Consecutive small record batches merged into one (`merge`), for the batch copy path
(`kmirror_engine.copying.batch_queue`): the records' bytes kept, each record's length and deltas
written again; the per-record part in Python (`_append_records`) or the native module's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kmirror_engine.copying.batch_crc import crc32c
from kmirror_engine.copying.batch_wire import (
    ATTRIBUTES_AT,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_AT,
    CRC_FIELD,
    HEADER,
    HEADER_BYTES,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PRODUCER_ID,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    Batch,
    BatchFormatError,
    crc_ok,
    read_varint,
    uvarint,
)

# -- merging small batches ----------------------------------------------------------------------
# A Produce request (v3+) carries one batch per partition, so a topic written in small batches
# (a producer at a low rate) costs the batch path a request per source batch (docs/performance.md,
# "Issue 28 (stop 35)"). Consecutive small uncompressed batches of a partition are merged into one
# batch: each record's bytes are kept but its length, offset delta and timestamp delta, which are
# relative to its batch, are written again relative to the merged batch.


def mergeable(batch: Batch) -> bool:
    """Whether `batch` may be merged with its neighbours: magic 2, uncompressed, CreateTime, no
    transaction or control marker, no offset gaps (every offset of the merged batch is a record)."""
    return (
        batch.magic == MAGIC_V2
        and not batch.attributes & (COMPRESSION_MASK | TIMESTAMP_TYPE_BIT | TRANSACTIONAL_BIT | CONTROL_BIT)
        and batch.contiguous
        and batch.record_count > 0
    )


# append_records(out, data, start, count, offset_shift, ts_shift): `merge`'s per-record part,
# `_append_records` or the native module's (same contract, ValueError on a malformed record).
AppendRecords = Callable[[bytearray, memoryview, int, int, int, int], None]


def merge(batches: Sequence[Batch], append_records: AppendRecords | None = None) -> Batch:
    """One batch holding the records of `batches` (consecutive offsets, each `mergeable`), in
    order, byte-identical but for each record's length, offset delta and timestamp delta. Its
    base offset and timestamp are the first batch's; its producer fields are -1 (the produce path
    writes the target's, with the CRC, `patch_header`). `append_records` does the per-record
    work (default: in Python; the batch path passes the native module's).

    The merged batch gets a fresh CRC, so each source batch's own CRC is checked first: a batch
    corrupted at the source or on the way raises BatchFormatError (a single batch keeps its
    source CRC: the target refuses it if it is corrupt)."""
    if len(batches) == 1:
        return batches[0]
    for batch in batches:
        if batch.magic == MAGIC_V2 and len(batch.data) >= HEADER_BYTES and not crc_ok(batch.data):
            raise BatchFormatError(
                f"batch at offset {batch.base_offset} does not match its CRC32C (corrupted at the source or on the way)"
            )
    append = append_records or _append_records
    first = batches[0]
    out = bytearray(HEADER_BYTES)
    count = 0
    max_ts = first.max_timestamp
    for batch in batches:
        if not mergeable(batch) or batch.base_offset != first.base_offset + count:
            raise BatchFormatError(
                f"batch at offset {batch.base_offset} cannot be merged after offset {first.base_offset + count - 1}"
            )
        try:
            append(
                out, batch.data, HEADER_BYTES, batch.record_count, count, batch.base_timestamp - first.base_timestamp
            )
        except (ValueError, IndexError) as exc:
            raise BatchFormatError(f"batch {batch.base_offset}: {exc}") from None
        count += batch.record_count
        max_ts = max(max_ts, batch.max_timestamp)
    HEADER.pack_into(
        out,
        0,
        first.base_offset,
        len(out) - LOG_OVERHEAD,
        -1,
        MAGIC_V2,
        0,
        0,
        count - 1,
        first.base_timestamp,
        max_ts,
        NO_PRODUCER_ID,
        -1,
        -1,
        count,
    )
    CRC_FIELD.pack_into(out, CRC_AT, crc32c(memoryview(out)[ATTRIBUTES_AT:]))
    return Batch(
        memoryview(out), first.base_offset, MAGIC_V2, 0, count - 1, first.base_timestamp, max_ts, NO_PRODUCER_ID, count
    )


def _append_records(out: bytearray, view: memoryview, at: int, count: int, offset_shift: int, ts_shift: int) -> None:
    """`merge`'s per-record part in Python (AppendRecords; `out` is left as it was on an error)."""
    end, start_len = len(view), len(out)
    try:
        for index in range(count):
            length, at = read_varint(view, at)
            body_end = at + length
            if length < 1 or body_end > end:
                raise ValueError(f"record {index} of the batch is malformed or runs past its batch")
            attributes = view[at]
            ts_delta, pos = read_varint(view, at + 1)
            offset_delta, pos = read_varint(view, pos)
            if pos > body_end:
                raise ValueError(f"record {index} of the batch is malformed or runs past its batch")
            head = bytes((attributes,)) + _zigzag(ts_delta + ts_shift) + _zigzag(offset_delta + offset_shift)
            out += _zigzag(len(head) + body_end - pos)
            out += head
            out += view[pos:body_end]
            at = body_end
    except (ValueError, IndexError):
        del out[start_len:]
        raise


def _zigzag(value: int) -> bytes:
    """`value` as a zigzag varint (a record's fields; `read_varint` reads them)."""
    return uvarint((value << 1) ^ (value >> 63))
