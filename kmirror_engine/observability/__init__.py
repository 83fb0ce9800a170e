"""Metrics, progress lines, heartbeats."""
