"""The copy loops (Python and native), record limits, exactly-once, copy threads.

The public surface for the Spark glue and the CLI: `__all__`, loaded lazily (kmirror_engine/lazy_exports.py).
"""

from typing import TYPE_CHECKING

from kmirror_engine.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from kmirror_engine.copying.batch_crc import build_crc_tables
    from kmirror_engine.copying.range_copy import RangeCopier
    from kmirror_engine.copying.ranges import (
        CONSUMER_REQUIRED,
        CONSUMER_TUNING,
        PRODUCER_TUNING,
        TRANSIENT,
        CopyError,
        CopyRange,
    )
    from kmirror_engine.copying.rate_limit import Throttled
    from kmirror_engine.copying.task_copy import (
        auto_copy_loop,
        copy_task_ranges,
        fence_for_query,
    )
    from kmirror_engine.copying.transform_writer import TransformWrites, keep_producer, take_producer

__all__ = [
    "CONSUMER_REQUIRED",
    "CONSUMER_TUNING",
    "PRODUCER_TUNING",
    "TRANSIENT",
    "CopyError",
    "CopyRange",
    "RangeCopier",
    "Throttled",
    "TransformWrites",
    "auto_copy_loop",
    "build_crc_tables",
    "copy_task_ranges",
    "fence_for_query",
    "keep_producer",
    "take_producer",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "batch_crc": ("build_crc_tables",),
        "range_copy": ("RangeCopier",),
        "ranges": (
            "CONSUMER_REQUIRED",
            "CONSUMER_TUNING",
            "PRODUCER_TUNING",
            "TRANSIENT",
            "CopyError",
            "CopyRange",
        ),
        "rate_limit": ("Throttled",),
        "transform_writer": ("TransformWrites", "keep_producer", "take_producer"),
        "task_copy": (
            "auto_copy_loop",
            "copy_task_ranges",
            "fence_for_query",
        ),
    },
)
