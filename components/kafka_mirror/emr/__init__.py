"""Spark on Amazon EMR: the cluster, the platform, the step that runs a mirror, the
wheelhouse, pure specs."""
