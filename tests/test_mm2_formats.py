"""MM2 wire formats, byte for byte: fixtures written by hand from the Java schemas
(Checkpoint.java, OffsetSync.java, Heartbeat.java): big-endian, STRING = int16 length + UTF-8."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kmirror.mm2.formats import (
    Checkpoint,
    FormatError,
    Heartbeat,
    OffsetSync,
    decode_checkpoint,
    decode_heartbeat,
    decode_offset_sync,
    encode_checkpoint,
    encode_heartbeat,
    encode_offset_sync,
)

CHECKPOINT = Checkpoint("g1", "src.t", 3, 42, 45, "m")
CHECKPOINT_KEY = b"\x00\x02g1" + b"\x00\x05src.t" + b"\x00\x00\x00\x03"
CHECKPOINT_VALUE = (
    b"\x00\x00"  # version 0 header
    + b"\x00\x00\x00\x00\x00\x00\x00\x2a"  # upstreamOffset 42
    + b"\x00\x00\x00\x00\x00\x00\x00\x2d"  # offset 45
    + b"\x00\x01m"  # metadata "m"
)
SYNC = OffsetSync("t", 0, 258, 1)
SYNC_KEY = b"\x00\x01t\x00\x00\x00\x00"
SYNC_VALUE = b"\x00\x00\x00\x00\x00\x00\x01\x02" + b"\x00\x00\x00\x00\x00\x00\x00\x01"  # no version header
HEARTBEAT = Heartbeat("east", "west", 1_700_000_000_000)
HEARTBEAT_KEY = b"\x00\x04east\x00\x04west"
HEARTBEAT_VALUE = b"\x00\x00" + (1_700_000_000_000).to_bytes(8, "big")


def test_checkpoint_bytes_match_the_java_schema() -> None:
    assert encode_checkpoint(CHECKPOINT) == (CHECKPOINT_KEY, CHECKPOINT_VALUE)
    assert decode_checkpoint(CHECKPOINT_KEY, CHECKPOINT_VALUE) == CHECKPOINT


def test_offset_sync_bytes_have_no_version_header() -> None:
    assert encode_offset_sync(SYNC) == (SYNC_KEY, SYNC_VALUE)
    assert decode_offset_sync(SYNC_KEY, SYNC_VALUE) == SYNC


def test_heartbeat_bytes_match_the_java_schema() -> None:
    assert encode_heartbeat(HEARTBEAT) == (HEARTBEAT_KEY, HEARTBEAT_VALUE)
    assert decode_heartbeat(HEARTBEAT_KEY, HEARTBEAT_VALUE) == HEARTBEAT


def test_empty_metadata_and_utf8_strings() -> None:
    key, value = encode_checkpoint(Checkpoint("grüppe", "t", 0, 0, 0, ""))
    assert key == b"\x00\x07gr\xc3\xbcppe\x00\x01t\x00\x00\x00\x00"
    assert value.endswith(b"\x00\x00") and len(value) == 2 + 8 + 8 + 2


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (CHECKPOINT_KEY, CHECKPOINT_VALUE[:-1], "truncated Checkpoint value: needs 21 bytes, got 20"),
        (CHECKPOINT_KEY, b"\x00\x01" + CHECKPOINT_VALUE[2:], "Checkpoint value: unsupported version 1"),
        (CHECKPOINT_KEY + b"\x00", CHECKPOINT_VALUE, "Checkpoint key: 1 unexpected trailing byte(s)"),
        (b"\xff\xff", CHECKPOINT_VALUE, "Checkpoint key: null/negative STRING length -1"),
    ],
)
def test_malformed_checkpoints_are_rejected(key: bytes, value: bytes, message: str) -> None:
    with pytest.raises(FormatError, match=message.replace("(", r"\(").replace(")", r"\)")):
        decode_checkpoint(key, value)


names = st.text(min_size=0, max_size=50)
offsets = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@given(names, names, st.integers(0, 2**31 - 1), offsets, offsets, names)
def test_checkpoint_round_trip(group: str, topic: str, partition: int, up: int, down: int, meta: str) -> None:
    c = Checkpoint(group, topic, partition, up, down, meta)
    assert decode_checkpoint(*encode_checkpoint(c)) == c


@given(names, st.integers(0, 2**31 - 1), offsets, offsets)
def test_offset_sync_round_trip(topic: str, partition: int, up: int, down: int) -> None:
    s = OffsetSync(topic, partition, up, down)
    assert decode_offset_sync(*encode_offset_sync(s)) == s


@given(names, names, offsets)
def test_heartbeat_round_trip(source: str, target: str, ts: int) -> None:
    h = Heartbeat(source, target, ts)
    assert decode_heartbeat(*encode_heartbeat(h)) == h
