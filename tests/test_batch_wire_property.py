"""Issue 41: a property of the batch path's wire codec, end to end through `BatchRangeCopier`
against a broker-like target (`tests.test_batch_loss.BrokerLog`): for any partition log (record
batches of magic 2 with any codec id, transactional batches committed or aborted with their
markers, compacted offsets, old-format v0/v1 message sets), every committed record reaches the
target once and in order, byte-identical (or is handed to the record loop, whose spans cover it
once); and for any mutation of the fetched bytes the copy either does that or fails with a
CopyError naming the partition and an offset, never a bare IndexError/struct.error.

Only gzip is installed here: the other codec ids (snappy 2, lz4 3, zstd 4) are set on gzip
bytes with the CRC fixed: the batch path never decompresses, so it must keep them as they are."""

from __future__ import annotations

import os
import re
import struct
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from kmirror_engine.copying.batch_copy import BatchRangeCopier
from kmirror_engine.copying.batch_crc import crc32c
from kmirror_engine.copying.batch_wire import control_type, split_batches
from kmirror_engine.copying.ranges import CopyError, CopyRange
from tests.test_batch_copy import marker
from tests.test_batch_loss import BrokerLog, RecordLoop, Source, Target, _legacy_message_set

TS = 1_700_000_000_000
EXAMPLES = int(os.environ.get("KMIRROR_PROPERTY_EXAMPLES", "60"))  # per property (~6 s each here)


def _v2(base: int, deltas: list[int], codec: int, producer_id: int = -1, transactional: bool = False) -> bytes:
    gzip = DefaultRecordBatchBuilder.CODEC_GZIP
    epoch = 0 if producer_id >= 0 else -1
    builder = DefaultRecordBatchBuilder(2, gzip if codec else 0, transactional, producer_id, epoch, epoch, 1 << 20)
    for delta in deltas:
        builder.append(delta, TS + delta, f"k{base + delta}".encode(), f"v{base + delta}".encode(), [("h", b"x")])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base)
    attributes = struct.unpack_from(">h", data, 21)[0]
    if codec and attributes & 0x07:  # the codec id as another producer would have written it (gzip bytes)
        struct.pack_into(">h", data, 21, (attributes & ~0x07) | codec)
        struct.pack_into(">I", data, 17, crc32c(memoryview(data)[21:]))
    return bytes(data)


# one part of a partition log: (kind, records, codec)
PART = st.tuples(
    st.sampled_from(["plain", "compacted", "committed", "aborted", "v0", "v1"]),
    st.integers(1, 6),
    st.sampled_from([0, 1, 2, 3, 4]),
)


def _log(parts: list[tuple[str, int, int]]) -> tuple[bytes, list[int]]:
    """The log's bytes and the offsets of the records a read_committed consumer gets."""
    out, wanted, at, pid = b"", [], 0, 100
    for kind, n, codec in parts:
        if kind in ("v0", "v1"):
            out += _legacy_message_set(at, n, 0 if kind == "v0" else 1)
            wanted += range(at, at + n)
            at += n
        elif kind == "compacted":  # every other offset left
            deltas = list(range(0, 2 * n, 2))
            out += _v2(at, deltas, codec)
            wanted += [at + d for d in deltas]
            at += 2 * n - 1
        elif kind in ("committed", "aborted"):
            pid += 1
            out += _v2(at, list(range(n)), codec, producer_id=pid, transactional=True)
            if kind == "committed":
                wanted += range(at, at + n)
            out += marker(at + n, pid, 1 if kind == "committed" else 0)
            at += n + 1
        else:
            out += _v2(at, list(range(n)), codec)
            wanted += range(at, at + n)
            at += n
    return out, wanted


class AbortingSource(Source):
    """`Source`, with the fetch answer's aborted transactions (those whose marker is an abort)."""

    def __init__(self, records: bytes, broker: BrokerLog, aborted: list[tuple[int, int]]) -> None:
        super().__init__(records, broker)
        self.aborted = aborted

    def fetched(self, request: Any) -> Any:
        answer = super().fetched(request)
        answer.responses[0].partitions[0].aborted_transactions = [
            type("A", (), {"producer_id": p, "first_offset": o})() for p, o in self.aborted
        ]
        return answer


def _aborted(records: bytes) -> list[tuple[int, int]]:
    """(producer id, first offset) of each aborted transaction, as the broker lists them."""
    batches = split_batches(records)
    out = []
    for i, b in enumerate(batches):
        if b.is_control and control_type(b) == 0:  # an abort marker
            out.append((b.producer_id, batches[i - 1].base_offset))
    return out


class CodecBroker(BrokerLog):
    """`BrokerLog` that checks CRCs as a broker does (CORRUPT_MESSAGE) and reads the codec ids
    this test put on gzip bytes as gzip; it keeps each landed record's key and headers."""

    def __init__(self) -> None:
        super().__init__()
        self.codecs: list[int] = []
        self.records: list[tuple[bytes | None, bytes | None, list[Any]]] = []

    def _append(self, key: tuple[str, int], records: bytes) -> tuple[int, int]:
        from kafka.record.default_records import DefaultRecordBatch

        from kmirror_engine.copying.batch_wire import crc_ok

        if not crc_ok(records):
            return 2, -1  # CORRUPT_MESSAGE
        data = bytearray(records)
        codec = struct.unpack_from(">h", data, 21)[0] & 0x07
        if codec in (2, 3, 4):
            struct.pack_into(">h", data, 21, (struct.unpack_from(">h", data, 21)[0] & ~0x07) | 1)
            struct.pack_into(">I", data, 17, crc32c(memoryview(data)[21:]))
        error, base = super()._append(key, bytes(data))
        if error == 0 and base == len(self.records):
            self.codecs.append(codec)
            self.records += [(r.key, r.value, list(r.headers)) for r in DefaultRecordBatch(bytes(data))]
        return error, base


def _copy(
    records: bytes, end: int, stall_timeout_s: float = 5, aborted: list[tuple[int, int]] | None = None
) -> tuple[CodecBroker, RecordLoop, Any]:
    broker, loop = CodecBroker(), RecordLoop()
    source = AbortingSource(records, broker, _aborted(records) if aborted is None else aborted)
    copier = BatchRangeCopier(
        source,
        Target(broker),
        fallback=lambda: loop,  # type: ignore[arg-type]
        stall_timeout_s=stall_timeout_s,
    )
    [progress] = copier.copy([CopyRange("t", 0, 0, end, "west.t")])
    return broker, loop, progress


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(PART, min_size=1, max_size=8))
def test_every_committed_record_lands_once_in_order_or_goes_to_the_record_loop(parts: list[Any]) -> None:
    records, wanted = _log(parts)
    end = split_batches(records)[-1].next_offset
    aborted = {pid for pid, _ in _aborted(records)}
    committed = [b.producer_id for b in split_batches(records) if b.producer_id >= 0 and b.producer_id not in aborted]
    broker, loop, progress = _copy(records, end)
    landed = [int((value or b"v-1")[1:]) for _, value, _ in broker.records]
    spans = [o for start, stop in loop.spans for o in range(start, stop)]
    assert landed == sorted(landed) and len(set(landed)) == len(landed)  # in order, once
    assert not set(landed) & set(spans) and len(set(spans)) == len(spans)
    assert set(wanted) <= set(landed) | set(spans)  # nothing lost
    assert set(landed) <= set(wanted)  # nothing aborted, nothing invented
    for (key, value, headers), offset in zip(broker.records, landed, strict=True):  # records as they were
        assert (key, value, headers) == (f"k{offset}".encode(), f"v{offset}".encode(), [("h", b"x")])
    sent = {
        b.attributes & 0x07
        for b in split_batches(records)
        if b.magic == 2 and b.contiguous and not b.is_control and b.producer_id in (-1, *committed)
    }
    assert sent - {0} <= set(broker.codecs)  # compressed batches keep their codec id
    assert progress.records == len(landed) + len(spans)  # (the fake record loop counts every offset it is given)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parts=st.lists(PART, min_size=1, max_size=4),
    at=st.integers(0, 10_000),
    byte=st.integers(0, 255),
    cut=st.integers(0, 63),
)
def test_mutated_fetched_bytes_copy_or_fail_naming_partition_and_offset(
    parts: list[Any], at: int, byte: int, cut: int
) -> None:
    """A flipped byte and a cut tail anywhere: the copy completes (the target's CRC check refuses
    a corrupt batch) or fails with a CopyError naming the partition and an offset."""
    records, _ = _log(parts)
    end = split_batches(records)[-1].next_offset
    mutated = bytearray(records)
    mutated[at % len(mutated)] = byte
    del mutated[len(mutated) - cut :]
    try:
        _copy(bytes(mutated), end, stall_timeout_s=0.1, aborted=_aborted(records))  # the broker's list, unmutated
    except CopyError as exc:
        assert re.search(r"t\[0\](@| at (offset )?| from offset )\d+", str(exc)), exc
