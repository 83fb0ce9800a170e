"""Pulumi ComponentResources of kafka-mirror; each builds resources from planned specs."""
