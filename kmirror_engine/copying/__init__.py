"""The copy loops (Python and native), record limits, exactly-once, copy threads."""

from typing import TYPE_CHECKING

from kmirror_engine.lazy_exports import lazy_exports

if TYPE_CHECKING:  # the public surface for the Spark glue and the CLI (`as`: re-exported), loaded lazily below
    from kmirror_engine.copying.batch_crc import build_crc_tables as build_crc_tables
    from kmirror_engine.copying.range_copy import RangeCopier as RangeCopier
    from kmirror_engine.copying.ranges import CONSUMER_REQUIRED as CONSUMER_REQUIRED
    from kmirror_engine.copying.ranges import CONSUMER_TUNING as CONSUMER_TUNING
    from kmirror_engine.copying.ranges import PRODUCER_TUNING as PRODUCER_TUNING
    from kmirror_engine.copying.ranges import TRANSIENT as TRANSIENT
    from kmirror_engine.copying.ranges import CopyError as CopyError
    from kmirror_engine.copying.ranges import CopyRange as CopyRange
    from kmirror_engine.copying.rate_limit import Throttled as Throttled
    from kmirror_engine.copying.task_copy import auto_copy_loop as auto_copy_loop
    from kmirror_engine.copying.task_copy import copy_task_ranges as copy_task_ranges
    from kmirror_engine.copying.task_copy import fence_for_query as fence_for_query
    from kmirror_engine.copying.transform_writer import TransformWrites as TransformWrites
    from kmirror_engine.copying.transform_writer import keep_producer as keep_producer
    from kmirror_engine.copying.transform_writer import take_producer as take_producer

__getattr__, __all__ = lazy_exports(
    __name__,
    {
        "batch_crc": ("build_crc_tables",),
        "range_copy": ("RangeCopier",),
        "ranges": ("CONSUMER_REQUIRED", "CONSUMER_TUNING", "PRODUCER_TUNING", "TRANSIENT", "CopyError", "CopyRange"),
        "rate_limit": ("Throttled",),
        "transform_writer": ("TransformWrites", "keep_producer", "take_producer"),
        "task_copy": ("auto_copy_loop", "copy_task_ranges", "fence_for_query"),
    },
)
