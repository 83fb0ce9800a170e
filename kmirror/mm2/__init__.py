"""MirrorMaker 2: its wire formats (offset syncs, checkpoints, heartbeats) and config import."""
