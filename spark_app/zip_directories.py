"""Keep zip archives' directories while the archives are unchanged (every Spark Python process).

Spark puts `pyspark.zip` and py4j's zip on the path of every Python worker, and pyspark's
worker setup (`setup_spark_files`) calls `importlib.invalidate_caches()` at every task and at
every call of a planner worker (the write of each micro-batch is planned in one, committed in
another). Before Python 3.13 that makes every `zipimport.zipimporter` read its archive's whole
directory again, and a worker that imported pyspark from the zip holds one importer per package
directory inside it (15-17): measured 0.2 s (Python 3.10, pyspark 4.0.2's zip) to 0.4 s
(3.11, 4.3.0's) of CPU per call, several times per micro-batch, though the zips never change
while Spark runs. Spark 4.0's planner workers spent ~80% of their CPU there
(docs/performance.md).

`keep()` wraps `zipimporter.invalidate_caches` so that it re-reads an archive only when the
archive's size, modification time or inode differ from what that importer last read (a zip
shipped anew with `--py-files` or `addPyFile` is read again); the first call per archive after
`keep()` records what is there without reading it. Standard library only (it runs in
`spark_app.worker_daemon` before the daemon forks).
"""

from __future__ import annotations

import os
import zipimport
from typing import Any

_ORIGINAL = zipimport.zipimporter.invalidate_caches
_STATE_ATTR = "_kmirror_archive_state"


def _state(archive: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(archive)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def _invalidate_caches(self: Any) -> None:
    state = _state(self.archive)
    seen = getattr(self, _STATE_ATTR, None)
    if state is not None and seen == state:
        return
    if seen is not None or state is None:
        _ORIGINAL(self)  # changed (or gone) since this importer last read it
    setattr(self, _STATE_ATTR, state)


def keep() -> bool:
    """Install the wrapper (once per process); False where Python has no
    `zipimporter.invalidate_caches` to wrap."""
    if getattr(zipimport.zipimporter, "invalidate_caches", None) is _invalidate_caches:
        return True
    if not hasattr(zipimport.zipimporter, "invalidate_caches"):
        return False
    zipimport.zipimporter.invalidate_caches = _invalidate_caches  # type: ignore[method-assign]
    return True
