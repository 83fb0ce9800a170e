"""Metrics, progress lines, heartbeats."""

from typing import TYPE_CHECKING

from kmirror_engine.lazy_exports import lazy_exports

if TYPE_CHECKING:  # the public surface for the Spark glue and the CLI (`as`: re-exported), loaded lazily below
    from kmirror_engine.observability.heartbeats import HeartbeatTicker as HeartbeatTicker
    from kmirror_engine.observability.progress import BatchListener as BatchListener
    from kmirror_engine.observability.progress import BatchProgress as BatchProgress
    from kmirror_engine.observability.progress import PartitionProgress as PartitionProgress
    from kmirror_engine.observability.progress_log import ProgressLogListener as ProgressLogListener

__getattr__, __all__ = lazy_exports(
    __name__,
    {
        "heartbeats": ("HeartbeatTicker",),
        "progress": ("BatchListener", "BatchProgress", "PartitionProgress"),
        "progress_log": ("ProgressLogListener",),
    },
)
