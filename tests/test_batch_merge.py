"""Merging consecutive small record batches into one (`batch_merge.merge`, the batch path's answer
to topics written in small batches: a Produce request carries one batch per partition). The merged
batch is read back with kafka-python's own record reader: every record's offset, timestamp, key,
value and headers as before."""

from __future__ import annotations

import dataclasses
import struct
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from kmirror_engine.copying import native_copy
from kmirror_engine.copying.batch_crc import crc32c
from kmirror_engine.copying.batch_merge import AppendRecords, _append_records, merge, mergeable
from kmirror_engine.copying.batch_wire import HEADER_BYTES, BatchFormatError, crc_ok, split_batches

NONE, GZIP = DefaultRecordBatchBuilder.CODEC_NONE, DefaultRecordBatchBuilder.CODEC_GZIP


def _batch(
    base: int, records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]], codec: int = NONE
) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, False, 77, 0, 0, 1 << 24)
    for delta, (ts, key, value, headers) in enumerate(records):
        builder.append(delta, ts, key, value, headers)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base)
    return bytes(data)


def _read(data: bytes | memoryview) -> list[tuple[Any, ...]]:
    out = []
    for b in split_batches(data):
        for r in DefaultRecordBatch(bytes(b.data)):
            out.append((r.offset, r.timestamp, r.key, r.value, list(r.headers)))
    return out


record = st.tuples(
    st.integers(min_value=0, max_value=2**41),
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=300)),
    st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=10)), max_size=3),
)


def _native() -> AppendRecords | None:
    """The native module's append_records; required where scripts/build-native.sh built it."""
    module = native_copy.native_module()
    if module is None:
        assert not native_copy.built_for_this_python(), "the native module was built for this venv but does not load"
        return None
    return cast(AppendRecords, module.append_records)


NATIVE = _native()
NOT_BUILT = pytest.mark.skipif(NATIVE is None, reason="native module not built here")
APPENDERS = [pytest.param(None, id="python"), pytest.param(NATIVE, id="native", marks=NOT_BUILT)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(record, min_size=1, max_size=12), min_size=1, max_size=8), st.integers(0, 2**40))
@pytest.mark.parametrize("append", APPENDERS)
def test_merged_batches_read_back_as_the_same_records(
    append: AppendRecords | None, groups: list[list[Any]], base: int
) -> None:
    raw, at = b"", base
    for group in groups:
        raw += _batch(at, group)
        at += len(group)
    batches = split_batches(raw)
    merged = merge(batches, append)
    if len(batches) > 1:
        assert bytes(merged.data) == bytes(merge(batches).data)  # the same bytes from C and Python
    assert crc_ok(merged.data)
    assert _read(merged.data) == _read(raw)
    assert (merged.base_offset, merged.record_count, merged.last_offset) == (base, at - base, at - 1)
    assert merged.base_timestamp == batches[0].base_timestamp
    assert merged.max_timestamp == max(b.max_timestamp for b in batches)
    assert len(split_batches(merged.data)) == 1 and mergeable(merged)


def test_only_consecutive_uncompressed_contiguous_batches_merge() -> None:
    one = [(1_700_000_000_000, b"k", b"v" * 1000, [])]  # compressible: kafka-python keeps it compressed
    plain, compressed = split_batches(_batch(0, one) + _batch(1, one, GZIP))
    assert mergeable(plain) and not mergeable(compressed)
    with pytest.raises(BatchFormatError, match="cannot be merged"):
        merge([plain, compressed])
    first, later = split_batches(_batch(0, one) + _batch(5, one))  # a gap: offsets 1-4 are not records
    with pytest.raises(BatchFormatError, match="batch at offset 5 cannot be merged after offset 0"):
        merge([first, later])


@pytest.mark.parametrize("append", APPENDERS)
def test_a_record_running_past_its_batch_is_refused_and_nothing_half_written(append: AppendRecords | None) -> None:
    one: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]] = [
        (1_700_000_000_000, b"k", b"v", [("h", b"1")])
    ] * 3
    first, second = split_batches(_batch(0, one) + _batch(3, one))
    cut = dataclasses.replace(second, data=second.data[:-4])  # the last record's tail is gone
    with pytest.raises(BatchFormatError, match=r"batch at offset 3 does not match its CRC32C"):
        merge([first, cut], append)  # its CRC is checked first (issue 41)
    recrc = bytearray(cut.data)  # the same cut under a CRC that matches it: the record walk refuses it
    struct.pack_into(">I", recrc, 17, crc32c(memoryview(recrc)[21:]))
    cut = dataclasses.replace(cut, data=memoryview(recrc))
    with pytest.raises(BatchFormatError, match=r"batch 3: record 2 of the batch is malformed or runs past its batch"):
        merge([first, cut], append)
    out = bytearray(b"kept")
    with pytest.raises(ValueError, match="record 2"):
        (append or _append_records)(out, cut.data, HEADER_BYTES, cut.record_count, 0, 0)
    assert out == b"kept"


@pytest.mark.parametrize("append", APPENDERS)
def test_far_apart_timestamps_grow_the_records_and_still_read_back(append: AppendRecords | None) -> None:
    """Deltas that needed one byte each become 9-10-byte varints once shifted (the native module
    reserves room for the worst case)."""
    tiny = [(ts, None, b"", []) for ts in (2**60, 2**60 + 1)]
    far = [(ts, None, b"", []) for ts in (0, 1, 2)]
    raw = _batch(0, tiny) + _batch(2, far) + _batch(5, tiny)
    merged = merge(split_batches(raw), append)
    assert len(merged.data) > len(raw) - 2 * 61  # grew beyond its parts' records
    assert _read(merged.data) == _read(raw) and crc_ok(merged.data)
