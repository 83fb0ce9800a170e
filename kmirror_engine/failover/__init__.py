"""Offsets and failover: offset syncs, sync snapshots, checkpoints, consumer-group sync and commit.

The public surface for the Spark glue and the CLI: `__all__`, loaded lazily (kmirror_engine/lazy_exports.py).
"""

from typing import TYPE_CHECKING

from kmirror_engine.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from kmirror_engine.failover.checkpoints import translate_group
    from kmirror_engine.failover.failback import plan_failback
    from kmirror_engine.failover.failover_listener import (
        FailoverListener,
        IdleCheckpoints,
        final_checkpoint,
    )
    from kmirror_engine.failover.group_commit import GroupCommitListener
    from kmirror_engine.failover.group_sync import (
        committed_offsets,
        describe_group,
        is_active,
        list_groups,
        sync_group,
    )
    from kmirror_engine.failover.offset_sync_snapshots import SyncLog
    from kmirror_engine.failover.offset_sync_topic import read_partition0
    from kmirror_engine.failover.offset_syncs import SyncStore
    from kmirror_engine.failover.takeover_syncs import write_takeover_syncs
    from kmirror_engine.failover.target_only import (
        SOURCE_PROBE_S,
        describe_position,
        group_from_checkpoints,
        latest_checkpoints,
        positions_from_checkpoints,
        read_checkpoints_with_time,
        source_reachable,
        target_partition_counts,
        unlisted_partitions,
    )

__all__ = [
    "SOURCE_PROBE_S",
    "FailoverListener",
    "GroupCommitListener",
    "IdleCheckpoints",
    "SyncLog",
    "SyncStore",
    "committed_offsets",
    "describe_group",
    "describe_position",
    "final_checkpoint",
    "group_from_checkpoints",
    "is_active",
    "latest_checkpoints",
    "list_groups",
    "plan_failback",
    "positions_from_checkpoints",
    "read_checkpoints_with_time",
    "read_partition0",
    "source_reachable",
    "sync_group",
    "target_partition_counts",
    "translate_group",
    "unlisted_partitions",
    "write_takeover_syncs",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "checkpoints": ("translate_group",),
        "failback": ("plan_failback",),
        "failover_listener": (
            "FailoverListener",
            "IdleCheckpoints",
            "final_checkpoint",
        ),
        "group_commit": ("GroupCommitListener",),
        "group_sync": (
            "committed_offsets",
            "describe_group",
            "is_active",
            "list_groups",
            "sync_group",
        ),
        "offset_sync_snapshots": ("SyncLog",),
        "offset_sync_topic": ("read_partition0",),
        "offset_syncs": ("SyncStore",),
        "takeover_syncs": ("write_takeover_syncs",),
        "target_only": (
            "SOURCE_PROBE_S",
            "describe_position",
            "group_from_checkpoints",
            "latest_checkpoints",
            "positions_from_checkpoints",
            "read_checkpoints_with_time",
            "source_reachable",
            "target_partition_counts",
            "unlisted_partitions",
        ),
    },
)
