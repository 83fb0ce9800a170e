"""Kafka record batches (magic 2) as bytes: split a fetched partition's records, read each
batch's header, filter what a read_committed consumer must not see, and rewrite the header
fields the target's producer owns. Pure functions, no I/O (`kmirror_engine.copying.batch_copy`
sends and receives the bytes).

A batch on the wire (Kafka's DefaultRecordBatch):

    @0 baseOffset int64        @8 batchLength int32 (bytes after this field)
    @12 partitionLeaderEpoch int32   @16 magic int8   @17 crc uint32 (CRC32C of bytes 21..end)
    @21 attributes int16       @23 lastOffsetDelta int32   @27 baseTimestamp int64
    @35 maxTimestamp int64     @43 producerId int64   @51 producerEpoch int16
    @53 baseSequence int32     @57 recordCount int32  @61 records

Only the header changes on the way to the target: keys, values, headers, timestamps and the
compressed record bytes stay byte-identical, which is what makes the copy cheap. Small
uncompressed batches may go merged (`batch_merge.merge`): then each record's length and deltas
are written again, its attributes, key, value and headers kept as they are.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from kmirror_engine.copying.batch_crc import crc32c, crc_update

HEADER_BYTES = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes batchLength does not count
CRC_AT, ATTRIBUTES_AT, PRODUCER_AT = 17, 21, 43
MAGIC_V2 = 2
TIMESTAMP_TYPE_BIT = 0x08  # 1: LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
COMPRESSION_MASK = 0x07  # attributes: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd
NO_PRODUCER_ID = -1
ABORT_MARKER = 0  # control record key type: 0 abort, 1 commit
HEADER = struct.Struct(">qiibIhiqqqhii")
_PRODUCER_FIELDS = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence
_HEAD = struct.Struct(">qi")  # baseOffset, batchLength
CRC_FIELD = struct.Struct(">I")
_ATTRIBUTES = struct.Struct(">h")
_BASE_AND_EPOCH = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_PATCHED_END = PRODUCER_AT + _PRODUCER_FIELDS.size  # the CRC'd bytes the copy rewrites: 21..56


class BatchFormatError(ValueError):
    """Bytes that are not a well-formed record batch (the caller names partition and offset)."""


@dataclass(frozen=True, slots=True)
class Batch:
    """One record batch of a fetch response: its bytes and the header fields the copy reads."""

    data: memoryview
    base_offset: int
    magic: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    record_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)

    @property
    def contiguous(self) -> bool:
        """Whether its records hold every offset base..last (false after compaction removed some)."""
        return self.last_offset_delta + 1 == self.record_count


def split_batches(records: bytes | memoryview) -> list[Batch]:
    """The complete batches in a partition's fetched `records`, in offset order. A truncated last
    batch (the fetch's size limit cut it) is left out: the next fetch starts at its offset.

    Raises BatchFormatError for a magic other than 2 only in the batch's own field: older
    formats come back as a `Batch` with that `magic` (the caller copies them record by record)."""
    view = memoryview(records)
    out: list[Batch] = []
    at, end = 0, len(view)
    while end - at >= LOG_OVERHEAD:
        base_offset, length = _HEAD.unpack_from(view, at)
        size = LOG_OVERHEAD + length
        if length < 0:
            raise BatchFormatError(f"batch at offset {base_offset} has a negative length {length}")
        if at + size > end:
            break  # truncated by the fetch's byte limit
        magic = view[at + 16] if size > 16 else None
        if magic is None or (magic == MAGIC_V2 and size < HEADER_BYTES):
            raise BatchFormatError(f"batch at offset {base_offset} is {size} bytes, shorter than a batch header")
        if magic != MAGIC_V2:
            out.append(Batch(view[at : at + size], base_offset, magic, 0, 0, -1, -1, NO_PRODUCER_ID, 1))
        else:
            (_, _, _, _, _, attributes, last_delta, base_ts, max_ts, producer_id, _, _, count) = HEADER.unpack_from(
                view, at
            )
            out.append(
                Batch(
                    view[at : at + size],
                    base_offset,
                    magic,
                    attributes,
                    last_delta,
                    base_ts,
                    max_ts,
                    producer_id,
                    count,
                )
            )
        at += size
    return out


def rewrite(batch: Batch, producer_id: int, producer_epoch: int, base_sequence: int) -> bytearray:
    """A copy of the batch as the target's idempotent producer sends it (`patch_header`); the
    produce path writes batches straight into its request instead (`batch_frames.ProduceCall`)."""
    out = bytearray(batch.data)
    patch_header(out, 0, len(out), batch.attributes, producer_id, producer_epoch, base_sequence)
    return out


def patch_header(
    out: bytearray | memoryview,
    at: int,
    end: int,
    attributes: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
) -> None:
    """Rewrite in place the header of the batch at out[at:end]: baseOffset 0, partitionLeaderEpoch
    -1, this producer's id, epoch and sequence, the transactional bit cleared (`attributes` as
    fetched), and the CRC32C updated for the changed bytes (`crc_update`). Everything else
    (records, timestamps, compression) unchanged.

    The stored CRC is updated, not recomputed: the copy reads no record byte, and a batch whose
    bytes no longer match the CRC the source stored (corrupted on the way or on the source's
    disk) still does not match, so the target refuses it (CORRUPT_MESSAGE) instead of storing
    it with a fresh CRC. Patching again with the same fields changes nothing (a resend)."""
    _BASE_AND_EPOCH.pack_into(out, at, 0)
    _EPOCH.pack_into(out, at + 12, -1)
    head, tail = at + ATTRIBUTES_AT, at + _PATCHED_END
    before = bytes(out[head:tail])
    _ATTRIBUTES.pack_into(out, head, attributes & ~TRANSACTIONAL_BIT)
    _PRODUCER_FIELDS.pack_into(out, at + PRODUCER_AT, producer_id, producer_epoch, base_sequence)
    stored = CRC_FIELD.unpack_from(out, at + CRC_AT)[0]
    CRC_FIELD.pack_into(out, at + CRC_AT, crc_update(stored, before, bytes(out[head:tail]), end - head))


def crc_ok(data: bytes | bytearray | memoryview) -> bool:
    """Whether a batch's stored CRC32C matches its bytes 21..end."""
    view = memoryview(data)
    return int(CRC_FIELD.unpack_from(view, CRC_AT)[0]) == crc32c(view[ATTRIBUTES_AT:])


def control_type(batch: Batch) -> int | None:
    """The type of a control batch's marker (0 abort, 1 commit); None when it has no record.
    Control batches are never compressed; the first record's key is (version int16, type int16)."""
    view = batch.data
    if batch.record_count < 1 or len(view) <= HEADER_BYTES:
        return None
    key_length, at, _ = _record_key(view, HEADER_BYTES)
    if key_length < 4:
        return None
    return int(struct.unpack_from(">h", view, at + 2)[0])


def _record_key(view: memoryview, at: int) -> tuple[int, int, int]:
    """Of the uncompressed record at `at`: its key's length (-1: no key), where the key starts, and
    where the next record starts (length, attributes, timestamp and offset deltas read past)."""
    length, body = read_varint(view, at)
    _, pos = read_varint(view, body + 1)  # the timestamp delta, after the record's attributes
    _, pos = read_varint(view, pos)  # the offset delta
    key_length, key_at = read_varint(view, pos)
    return key_length, key_at, body + length


def keys_present(batch: Batch, max_records: int) -> bool | None:
    """Whether every record of `batch` has a key (a compacted topic refuses a whole batch with a
    record without one); None where that is not told without decoding: a compressed batch, one of
    more than `max_records` records (walked here in Python, four varints a record), or bytes that
    do not parse. Only the record's length, attributes, deltas and key length are read."""
    if batch.attributes & COMPRESSION_MASK or batch.record_count > max_records:
        return None
    view, at = batch.data, HEADER_BYTES
    try:
        for _ in range(batch.record_count):
            key_length, _, at = _record_key(view, at)
            if key_length < 0:
                return False
    except (IndexError, ValueError, BatchFormatError):
        return None
    return at == len(view) or None


def min_timestamp(batch: Batch, max_records: int) -> int | None:
    """The lowest record timestamp of `batch` (its header has only the first and the highest:
    a record's delta may be negative); None where that is not told without decoding: compressed,
    over `max_records` records, or bytes that do not parse."""
    if batch.attributes & COMPRESSION_MASK or batch.record_count > max_records or batch.magic != MAGIC_V2:
        return None
    view, at, low = batch.data, HEADER_BYTES, batch.base_timestamp
    try:
        for _ in range(batch.record_count):
            length, body = read_varint(view, at)
            delta, _ = read_varint(view, body + 1)  # after the record's attributes
            low = min(low, batch.base_timestamp + delta)
            at = body + length
    except (IndexError, ValueError, BatchFormatError):
        return None
    return low if at == len(view) else None


def read_varint(view: memoryview, at: int) -> tuple[int, int]:
    """A zigzag varint at `at`: (value, position after it)."""
    raw, at = read_uvarint(view, at, max_bytes=10)
    return (raw >> 1) ^ -(raw & 1), at


def uvarint(value: int) -> bytes:
    """Kafka's unsigned varint (compact lengths, tag counts; `read_uvarint` reads it)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_uvarint(view: memoryview, at: int, max_bytes: int = 5) -> tuple[int, int]:
    """An unsigned varint at `at` of at most `max_bytes` bytes (Kafka's compact lengths and tag
    counts: 5; a record's zigzag fields: 10): (value, position after it)."""
    shift = value = 0
    while True:
        byte = view[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift >= 7 * max_bytes:
            raise BatchFormatError(f"varint longer than {max_bytes} bytes")


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    """An entry of a fetch response's aborted_transactions: a producer's aborted transaction
    starting at `first_offset` (its records up to its abort marker must not be read)."""

    producer_id: int
    first_offset: int


def committed(batches: Sequence[Batch], aborted: Iterable[AbortedTransaction]) -> Iterator[Batch]:
    """The data batches a read_committed consumer delivers, in order: control batches dropped,
    and batches of aborted transactions dropped (the Java consumer's algorithm: a producer
    joins the aborted set when the fetch's aborted list reaches the batch's last offset, and
    leaves it at its abort marker)."""
    pending = sorted(aborted, key=lambda a: a.first_offset)
    aborted_ids: set[int] = set()
    at = 0
    for batch in batches:
        if batch.producer_id != NO_PRODUCER_ID:
            while at < len(pending) and pending[at].first_offset <= batch.last_offset:
                aborted_ids.add(pending[at].producer_id)
                at += 1
            if batch.is_control and control_type(batch) == ABORT_MARKER:
                aborted_ids.discard(batch.producer_id)
            elif batch.is_transactional and batch.producer_id in aborted_ids:
                continue
        if batch.is_control:
            continue
        yield batch
