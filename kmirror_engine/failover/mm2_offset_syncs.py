"""The offset syncs a real MirrorMaker 2 wrote for the same source and target, read for translation.

A user replacing MM2 runs `kmirror translate` / `kmirror failover` over an estate MM2 mirrored:
kafka-mirror's own history (`mm2-offset-syncs.<source>.internal` on the TARGET) is empty there,
and MM2 kept its syncs where it keeps them by default (`offset-syncs.topic.location = source`):
`mm2-offset-syncs.<target>.internal` on the SOURCE. What kafka-mirror's own syncs cannot translate
(partitions it never mirrored; groups before its first sync, i.e. records MM2 copied before a
takeover) is translated from those, with MM2's own rules (`kmirror.mm2.sync_store`), so a consumer
moved by kafka-mirror lands where MM2's checkpoint task (and `RemoteClusterUtils`) would put it.
"""

from __future__ import annotations

from kmirror.flow.replication_policy import offset_syncs_topic
from kmirror.flow.views import FlowRoute
from kmirror.mm2.formats import FormatError, decode_offset_sync
from kmirror.mm2.sync_store import Mm2SyncStore
from kmirror_engine.failover.offset_sync_topic import read_partition0
from kmirror_engine.failover.offset_syncs import OffsetSyncError


def mm2_syncs_topic(route: FlowRoute) -> str:
    """MM2's syncs topic of this flow's source and target, on the source (named after the target)."""
    return offset_syncs_topic(route.target.alias)


def load_mm2_syncs(route: FlowRoute, timeout_s: float = 60.0) -> Mm2SyncStore:
    """MM2's translation state for this flow, replayed from its syncs topic on the source (empty
    when the topic does not exist). Raises OffsetSyncError when the topic cannot be read or holds a
    record that is not an OffsetSync (MM2's checkpoint task would stop on it too)."""
    topic, store = mm2_syncs_topic(route), Mm2SyncStore()
    for msg in read_partition0(route.source, topic, timeout_s):
        try:
            store.add(decode_offset_sync(msg.key() or b"", msg.value() or b""))
        except FormatError as exc:
            raise OffsetSyncError(
                f"{topic} on {route.source.alias}, offset {msg.offset()}: not an MM2 offset sync ({exc}); "
                f"only MirrorMaker 2 should write that topic: check what else produces to it"
            ) from None
    return store
