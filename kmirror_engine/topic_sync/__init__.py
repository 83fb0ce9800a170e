"""Topic sync: what MM2 keeps in step besides records (topic configs and ACLs), on a ticker.

The public surface for the Spark glue and the CLI: `__all__`, loaded lazily (kmirror_engine/lazy_exports.py).
"""

from typing import TYPE_CHECKING

from kmirror_engine.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from kmirror_engine.topic_sync.ticker import SyncTicker

__all__ = [
    "SyncTicker",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "ticker": ("SyncTicker",),
    },
)
