"""One flow's offset-syncs topic on the target (`OffsetSyncTopic`): the history a `SyncStore`
(`offset_syncs.py`) holds, persisted in MM2's OffsetSync format to
`mm2-offset-syncs.<source>.internal` (partition 0, as MM2's `offset-syncs.topic.location=target`),
with kafka-mirror's own headers, and loaded back; and `read_partition0`, how every internal topic
of the mirror (syncs, snapshots, checkpoints, MM2's own syncs) is read to its end.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

from kmirror.flow.endpoint import ClusterEndpoint
from kmirror.mm2.formats import OffsetSync, decode_offset_sync, encode_offset_sync
from kmirror_engine.clients.topic_admin import ensure_topic
from kmirror_engine.failover.offset_syncs import OffsetSyncError, Sync, SyncStore
from kmirror_engine.planning.internal_names import layout, reader_group

CONTINUOUS_HEADER = "kmirror.continuous"
NEXT_OFFSET_HEADER = "kmirror.next_offset"
# the source partition's end offset when the batch was mirrored: with next_offset, the mirror's
# last known lag, which a failover with the source gone reports as records at risk
SOURCE_END_HEADER = "kmirror.source_end"
# on a range's last written sync: the store's clean tail after it (see SyncStore.translate), so a
# store loaded back translates exactly like the writer's own
CLEAN_UNTIL_HEADER = "kmirror.clean_until"
SYNCS_TOPIC_CONFIG = layout("offset_syncs")


class OffsetSyncTopic:
    """Reads and writes one flow's offset-syncs topic on the target (partition 0, as MM2)."""

    def __init__(self, target: ClusterEndpoint, topic: str) -> None:
        self.target = target
        self.topic = topic
        self._producer: Any = None  # DeliveryConfirmingProducer
        self.read_until = 0  # next offset `load` reads from (loads are incremental)
        self.written_until = 0  # offset after the newest sync this process wrote (acknowledged)
        self.source_ends: dict[tuple[str, int], int] = {}  # newest SOURCE_END_HEADER loaded per partition
        self.queued = 0  # syncs this process queued (`write`), delivered or not

    def ensure_exists(self) -> None:
        """Create the topic (1 partition, time-based retention so history is not compacted away)."""
        ensure_topic(self.target, self.topic, SYNCS_TOPIC_CONFIG)

    def write(
        self,
        source_topic: str,
        partition: int,
        syncs: list[Sync],
        next_offset: int,
        source_end: int | None = None,
        clean_until: int | None = None,
    ) -> None:
        """Queue syncs (MM2 OffsetSync records plus kmirror headers; `source_end`: the source end
        offset the batch saw, None when unknown; `clean_until`: the store's clean tail after the
        last of them); `flush` confirms them."""
        if self._producer is None:  # rebuilt inside when the target's credentials rotate
            from kmirror_engine.clients.factory import renewing_delivery_producer

            self._producer = renewing_delivery_producer(
                self.target,
                role="offset-syncs-producer",
                what="offset sync",
                error=OffsetSyncError,
                on_delivered=self._delivered,
            )
        for i, sync in enumerate(syncs):
            key, value = encode_offset_sync(OffsetSync(source_topic, partition, sync.upstream, sync.downstream))
            headers = [
                (CONTINUOUS_HEADER, b"1" if sync.continuous else b"0"),
                (NEXT_OFFSET_HEADER, str(next_offset).encode()),
            ]
            if source_end is not None:
                headers.append((SOURCE_END_HEADER, str(source_end).encode()))
            if clean_until is not None and i == len(syncs) - 1:
                headers.append((CLEAN_UNTIL_HEADER, str(clean_until).encode()))
            self._producer.produce(self.topic, value, key, partition=0, headers=headers)
        self.queued += len(syncs)

    def bounds(self, timeout_s: float = 30.0) -> tuple[int, int]:
        """The topic's (low, high) watermarks; (0, 0) when it does not exist."""
        from confluent_kafka import TopicPartition

        from kmirror_engine.clients.factory import new_consumer

        consumer = new_consumer(
            self.target,
            role="internal-topic-reader",
            group_id=reader_group(self.topic),
            **{"enable.auto.commit": False},
        )
        try:
            metadata = consumer.list_topics(self.topic, timeout=timeout_s).topics.get(self.topic)
            if metadata is None or metadata.error is not None or 0 not in metadata.partitions:
                return 0, 0
            low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=timeout_s)
            return int(low), int(high)
        finally:
            consumer.close()

    def _delivered(self, msg: Any) -> None:
        if msg.offset() is not None and msg.offset() >= 0:
            self.written_until = max(self.written_until, msg.offset() + 1)

    def flush(self, timeout_s: float = 60.0) -> None:
        """Wait for every queued sync; raises OffsetSyncError on any failure or timeout."""
        if self._producer is None:
            return
        self._producer.confirm(timeout_s)

    def load(
        self,
        store: SyncStore,
        timeout_s: float = 60.0,
        skip_below: Mapping[tuple[str, int], int] | None = None,
        after_gap: bool = False,
    ) -> int:
        """Replay the topic into `store`, from `read_until` (where the previous load stopped, or
        where a snapshot ends) up to the high watermark seen at the start; returns the number of
        records read. `skip_below`: per partition, the offset its snapshot already covers. A
        missing topic is an empty history. Where retention deleted records before `read_until`,
        the first sync of each partition is loaded as not continuous (its predecessor is lost).
        `after_gap`: records before `read_until` were skipped on purpose (same as deleted).
        Only for stores that do not also get this process's own writes."""
        count, skip, start = 0, skip_below or {}, self.read_until
        gap = after_gap
        seen: set[tuple[str, int]] = set()
        for msg in read_partition0(self.target, self.topic, timeout_s, start):
            gap = gap or (count == 0 and msg.offset() > start)
            self.read_until = msg.offset() + 1
            count += 1
            decoded = decode_offset_sync(msg.key() or b"", msg.value() or b"")
            key = (decoded.topic, decoded.partition)
            if msg.offset() < skip.get(key, 0):
                continue
            headers = dict(msg.headers() or [])
            raw_next = headers.get(NEXT_OFFSET_HEADER)
            if headers.get(SOURCE_END_HEADER):
                self.source_ends[key] = int(headers[SOURCE_END_HEADER])
            continuous = headers.get(CONTINUOUS_HEADER) == b"1" and (not gap or key in seen)
            seen.add(key)
            sync = Sync(decoded.upstream_offset, decoded.downstream_offset, continuous)
            raw_clean = headers.get(CLEAN_UNTIL_HEADER)
            store.add_loaded(
                decoded.topic,
                decoded.partition,
                sync,
                int(raw_next) if raw_next else None,
                int(raw_clean) if raw_clean else None,
            )
        return count

    def close(self) -> None:
        if self._producer is not None:
            self.flush()
            self._producer = None


def read_partition0(
    endpoint: ClusterEndpoint, topic: str, timeout_s: float = 60.0, from_offset: int = 0, until: int | None = None
) -> Iterator[Any]:
    """Every record of `topic` partition 0 from `from_offset` up to the high watermark seen at
    the start (or `until`, if lower), in log order; nothing when the topic does not exist.
    Raises OffsetSyncError on errors or timeout."""
    from confluent_kafka import TopicPartition

    from kmirror_engine.clients.factory import new_consumer

    consumer = new_consumer(
        endpoint, role="internal-topic-reader", group_id=reader_group(topic), **{"enable.auto.commit": False}
    )
    try:
        metadata = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if metadata is None or metadata.error is not None or 0 not in metadata.partitions:
            return
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        low, high = max(low, from_offset), high if until is None else min(high, until)
        consumer.assign([TopicPartition(topic, 0, low)])
        position, deadline = low - 1, time.monotonic() + timeout_s
        while position + 1 < high:
            if time.monotonic() > deadline:
                raise OffsetSyncError(
                    f"reading {topic} on {endpoint.alias} timed out at offset {position + 1} of {high}"
                )
            # ask for no more than remain: consume() waits its whole timeout for a fuller batch
            for msg in consumer.consume(min(1000, high - position - 1), timeout=0.5):
                error, offset = msg.error(), msg.offset()
                if error is not None:
                    raise OffsetSyncError(f"reading {topic} on {endpoint.alias} failed: {error.str()}")
                if offset is None:
                    continue
                if offset >= high:  # past the end (compaction left no record at high - 1)
                    return
                position = offset
                yield msg
    finally:
        consumer.close()
