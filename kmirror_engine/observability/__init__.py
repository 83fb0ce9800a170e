"""Metrics, progress lines, heartbeats.

The public surface for the Spark glue and the CLI: `__all__`, loaded lazily (kmirror_engine/lazy_exports.py).
"""

from typing import TYPE_CHECKING

from kmirror_engine.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from kmirror_engine.observability.heartbeats import HeartbeatTicker
    from kmirror_engine.observability.progress import (
        BatchListener,
        BatchProgress,
        PartitionProgress,
    )
    from kmirror_engine.observability.progress_log import ProgressLogListener

__all__ = [
    "BatchListener",
    "BatchProgress",
    "HeartbeatTicker",
    "PartitionProgress",
    "ProgressLogListener",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "heartbeats": ("HeartbeatTicker",),
        "progress": (
            "BatchListener",
            "BatchProgress",
            "PartitionProgress",
        ),
        "progress_log": ("ProgressLogListener",),
    },
)
