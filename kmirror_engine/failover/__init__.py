"""Offsets and failover: offset syncs, sync snapshots, checkpoints, consumer-group sync and commit."""

from typing import TYPE_CHECKING

from kmirror_engine.lazy_exports import lazy_exports

if TYPE_CHECKING:  # the public surface for the Spark glue and the CLI (`as`: re-exported), loaded lazily below
    from kmirror_engine.failover.checkpoints import translate_group as translate_group
    from kmirror_engine.failover.failback import plan_failback as plan_failback
    from kmirror_engine.failover.failover_listener import FailoverListener as FailoverListener
    from kmirror_engine.failover.failover_listener import IdleCheckpoints as IdleCheckpoints
    from kmirror_engine.failover.failover_listener import final_checkpoint as final_checkpoint
    from kmirror_engine.failover.group_commit import GroupCommitListener as GroupCommitListener
    from kmirror_engine.failover.group_sync import committed_offsets as committed_offsets
    from kmirror_engine.failover.group_sync import describe_group as describe_group
    from kmirror_engine.failover.group_sync import is_active as is_active
    from kmirror_engine.failover.group_sync import list_groups as list_groups
    from kmirror_engine.failover.group_sync import sync_group as sync_group
    from kmirror_engine.failover.offset_sync_snapshots import SyncLog as SyncLog
    from kmirror_engine.failover.offset_sync_topic import read_partition0 as read_partition0
    from kmirror_engine.failover.offset_syncs import SyncStore as SyncStore
    from kmirror_engine.failover.takeover_syncs import write_takeover_syncs as write_takeover_syncs
    from kmirror_engine.failover.target_only import SOURCE_PROBE_S as SOURCE_PROBE_S
    from kmirror_engine.failover.target_only import describe_position as describe_position
    from kmirror_engine.failover.target_only import group_from_checkpoints as group_from_checkpoints
    from kmirror_engine.failover.target_only import latest_checkpoints as latest_checkpoints
    from kmirror_engine.failover.target_only import positions_from_checkpoints as positions_from_checkpoints
    from kmirror_engine.failover.target_only import read_checkpoints_with_time as read_checkpoints_with_time
    from kmirror_engine.failover.target_only import source_reachable as source_reachable
    from kmirror_engine.failover.target_only import target_partition_counts as target_partition_counts
    from kmirror_engine.failover.target_only import unlisted_partitions as unlisted_partitions

__getattr__, __all__ = lazy_exports(
    __name__,
    {
        "checkpoints": ("translate_group",),
        "failback": ("plan_failback",),
        "failover_listener": ("FailoverListener", "IdleCheckpoints", "final_checkpoint"),
        "group_commit": ("GroupCommitListener",),
        "group_sync": ("committed_offsets", "describe_group", "is_active", "list_groups", "sync_group"),
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
