"""Topic sync: what MM2 keeps in step besides records (topic configs and ACLs), on a ticker."""

from typing import TYPE_CHECKING

from kmirror_engine.lazy_exports import lazy_exports

if TYPE_CHECKING:  # the public surface for the Spark glue and the CLI (`as`: re-exported), loaded lazily below
    from kmirror_engine.topic_sync.ticker import SyncTicker as SyncTicker

__getattr__, __all__ = lazy_exports(
    __name__,
    {
        "ticker": ("SyncTicker",),
    },
)
