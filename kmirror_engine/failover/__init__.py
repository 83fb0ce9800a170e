"""Offsets and failover: offset syncs, sync snapshots, checkpoints, consumer-group sync and commit."""
