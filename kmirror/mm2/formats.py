"""MirrorMaker 2's wire formats, encoded and decoded byte for byte (pure, no Kafka client).

MM2 serializes its records with Kafka's protocol `Struct`s (apache/kafka connect/mirror-client
`Checkpoint.java`, `Heartbeat.java`, connect/mirror `OffsetSync.java`): big-endian integers,
STRING = int16 length + UTF-8 bytes (never null), fields in schema order, no framing. Keys
and values are separate structs; Checkpoint and Heartbeat values start with an int16
version header (0), OffsetSync values have none.

- OffsetSync key: topic STRING, partition INT32;
  value: upstreamOffset INT64, offset INT64.
- Checkpoint key: group STRING, topic STRING, partition INT32;
  value: version INT16, upstreamOffset INT64, offset INT64, metadata STRING.
- Heartbeat key: sourceClusterAlias STRING, targetClusterAlias STRING;
  value: version INT16, timestamp INT64.

Decoders raise `FormatError` on truncated or trailing bytes and on unknown versions.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kmirror.errors import KmirrorError

VERSION = 0
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class FormatError(KmirrorError):
    """Bytes that are not a valid MM2 record of the expected kind."""


@dataclass(frozen=True)
class OffsetSync:
    """Upstream record `upstream_offset` of `topic[partition]` was written at `downstream_offset`."""

    topic: str  # the SOURCE topic name
    partition: int
    upstream_offset: int
    downstream_offset: int


@dataclass(frozen=True)
class Checkpoint:
    """Group `group` at upstream offset `upstream_offset` resumes at `downstream_offset` on the target."""

    group: str
    topic: str  # the REMOTE (target) topic name, as MM2's renameTopicPartition gives it
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""


@dataclass(frozen=True)
class Heartbeat:
    source_cluster_alias: str
    target_cluster_alias: str
    timestamp_ms: int


def _string(value: str) -> bytes:
    data = value.encode("utf-8")
    if len(data) > 0x7FFF:
        raise FormatError(
            f"string of {len(data)} bytes does not fit an MM2 STRING field (max 32767): {value[:40]!r}..."
        )
    return _INT16.pack(len(data)) + data


class _Reader:
    """Sequential reader over one struct's bytes; `done()` rejects trailing bytes."""

    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.pos, self.what = data, 0, what

    def _take(self, size: int) -> bytes:
        if self.pos + size > len(self.data):
            raise FormatError(f"truncated {self.what}: needs {self.pos + size} bytes, got {len(self.data)}")
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def int16(self) -> int:
        return int(_INT16.unpack(self._take(2))[0])

    def int32(self) -> int:
        return int(_INT32.unpack(self._take(4))[0])

    def int64(self) -> int:
        return int(_INT64.unpack(self._take(8))[0])

    def string(self) -> str:
        size = self.int16()
        if size < 0:
            raise FormatError(f"{self.what}: null/negative STRING length {size} (MM2 strings are never null)")
        try:
            return self._take(size).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FormatError(f"{self.what}: STRING is not UTF-8: {exc}") from None

    def version(self) -> None:
        version = self.int16()
        if version != VERSION:
            raise FormatError(f"{self.what}: unsupported version {version}; only version {VERSION} exists")

    def done(self) -> None:
        if self.pos != len(self.data):
            raise FormatError(f"{self.what}: {len(self.data) - self.pos} unexpected trailing byte(s)")


def encode_offset_sync(sync: OffsetSync) -> tuple[bytes, bytes]:
    """(key, value) of an OffsetSync record."""
    key = _string(sync.topic) + _INT32.pack(sync.partition)
    return key, _INT64.pack(sync.upstream_offset) + _INT64.pack(sync.downstream_offset)


def decode_offset_sync(key: bytes, value: bytes) -> OffsetSync:
    k, v = _Reader(key, "OffsetSync key"), _Reader(value, "OffsetSync value")
    topic, partition = k.string(), k.int32()
    upstream, downstream = v.int64(), v.int64()
    k.done()
    v.done()
    return OffsetSync(topic, partition, upstream, downstream)


def encode_checkpoint(checkpoint: Checkpoint) -> tuple[bytes, bytes]:
    """(key, value) of a Checkpoint record (value version 0)."""
    c = checkpoint
    key = _string(c.group) + _string(c.topic) + _INT32.pack(c.partition)
    value = (
        _INT16.pack(VERSION) + _INT64.pack(c.upstream_offset) + _INT64.pack(c.downstream_offset) + _string(c.metadata)
    )
    return key, value


def decode_checkpoint(key: bytes, value: bytes) -> Checkpoint:
    k, v = _Reader(key, "Checkpoint key"), _Reader(value, "Checkpoint value")
    group, topic, partition = k.string(), k.string(), k.int32()
    v.version()
    upstream, downstream, metadata = v.int64(), v.int64(), v.string()
    k.done()
    v.done()
    return Checkpoint(group, topic, partition, upstream, downstream, metadata)


def encode_heartbeat(heartbeat: Heartbeat) -> tuple[bytes, bytes]:
    """(key, value) of a Heartbeat record (value version 0)."""
    key = _string(heartbeat.source_cluster_alias) + _string(heartbeat.target_cluster_alias)
    return key, _INT16.pack(VERSION) + _INT64.pack(heartbeat.timestamp_ms)


def decode_heartbeat(key: bytes, value: bytes) -> Heartbeat:
    k, v = _Reader(key, "Heartbeat key"), _Reader(value, "Heartbeat value")
    source, target = k.string(), k.string()
    v.version()
    timestamp = v.int64()
    k.done()
    v.done()
    return Heartbeat(source, target, timestamp)
