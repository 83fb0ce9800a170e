"""kafka-mirror's first offset syncs at a takeover from MirrorMaker 2 (`starting_offsets: {from_mm2}`).

At the takeover each resumed partition gets one sync before anything is copied: source offset
`resume_offset` (MM2's last copied offset + 1) is written at `target_offset` (its remote
partition's end: MM2 is stopped, so kafka-mirror's first copy lands there). Why before copying:
a partition that gets no new record for a while still translates a group that read everything
MM2 copied (exactly to `target_offset`), and the copy's own first sync (the same pair) joins it,
so translation is exact from the takeover point on. Groups at earlier offsets translate from
MM2's checkpoints (or MM2's syncs, when it kept them in this same topic).

The planner calls `write_takeover_syncs` (with its flow's route) through `RangePlanner(on_takeover=...)`: planning
never imports failover (failover builds on planning).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kmirror.flow.views import FlowRoute
from kmirror.mm2.takeover import TakeoverPoint
from kmirror_engine.failover.offset_sync_snapshots import SyncLog
from kmirror_engine.failover.offset_syncs import Sync

log = logging.getLogger("kmirror.failover")


def write_takeover_syncs(route: FlowRoute, points: Sequence[TakeoverPoint]) -> int:
    """Persist one sync per point in the flow's offset-syncs topic on the target (MM2's
    OffsetSync format); returns how many. Raises OffsetSyncError when they cannot be confirmed:
    the copy must not start with the takeover point unknown."""
    if not points:
        return 0
    sync_log = SyncLog(route.target, route.source.alias)
    try:
        sync_log.ensure_exists()
        for point in points:
            # next_offset = resume_offset: nothing past the takeover point is mirrored yet
            sync_log.write(
                point.topic, point.partition, [Sync(point.resume_offset, point.target_offset)], point.resume_offset
            )
        sync_log.flush()
    finally:
        sync_log.close()
    log.info("flow %s: wrote %d takeover offset sync(s) to %s", route.flow_id, len(points), sync_log.syncs.topic)
    return len(points)
