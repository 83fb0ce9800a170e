"""Kafka clients: the one factory per role, the per-process client cache, the security check."""
