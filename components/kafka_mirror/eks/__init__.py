"""Spark on EKS: the cluster, the Spark operator platform, monitoring (PodMonitor, alerts,
dashboard) and their pure specs."""
