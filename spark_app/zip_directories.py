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

`keep()` wraps `zipimporter.invalidate_caches` so that it reads an archive's directory again
only when the archive's size, modification time or inode differ from what they were when the
directory that importer holds was read (a zip shipped anew with `--py-files` or `addPyFile` is
read again). Directories read before `keep()` (Python's own lookups at start-up, or a forking
parent's: a Spark worker inherits its daemon's) are adopted as they are when their archive has
not changed (modification and inode change times) since the parent process started, before
which no directory this process holds was read; the others read once more at their first call.
Standard library only (it runs in `spark_app.worker_daemon` before the daemon forks).
"""

from __future__ import annotations

import os
import sys
import zipimport
from typing import Any

_ORIGINAL_INVALIDATE = zipimport.zipimporter.invalidate_caches
_ORIGINAL_READ = zipimport._read_directory  # type: ignore[attr-defined]
# id of a directory (the dict `_read_directory` returned) -> that dict and its archive's state
# just before it was read; the dict is kept, so its id is never reused for another
_READ: dict[int, tuple[Any, tuple[int, int, int] | None]] = {}


def _state(archive: str) -> tuple[int, int, int] | None:
    try:
        return _state_of(os.stat(archive))
    except OSError:
        return None


def _state_of(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def _read_directory(archive: str) -> Any:
    state = _state(archive)
    files = _ORIGINAL_READ(archive)
    _READ[id(files)] = (files, state)
    return files


def _invalidate_caches(self: Any) -> None:
    files = getattr(self, "_files", None)
    read = _READ.get(id(files))
    if read is not None and read[0] is files and read[1] is not None and read[1] == _state(self.archive):
        return  # the archive is as it was when this importer's directory was read
    _ORIGINAL_INVALIDATE(self)


def _parent_started() -> float | None:
    """Wall clock start of this process's parent (Linux /proc; None elsewhere)."""
    try:
        with open(f"/proc/{os.getppid()}/stat") as stat:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as system:
            boot = next(int(line.split()[1]) for line in system if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _adopt_read_before(since: float | None) -> None:
    """Record the directories already read (cached, or held by the path's importers) whose
    archives have not changed since `since`."""
    if since is None:
        return
    held = [
        (importer.archive, getattr(importer, "_files", None))
        for importer in list(sys.path_importer_cache.values())
        if isinstance(importer, zipimport.zipimporter)
    ]
    for archive, files in [*getattr(zipimport, "_zip_directory_cache", {}).items(), *held]:
        if files is None or id(files) in _READ:
            continue
        try:
            st = os.stat(archive)
        except OSError:
            continue
        if max(st.st_mtime, st.st_ctime) < since - 1.0:
            _READ[id(files)] = (files, _state_of(st))


def keep() -> bool:
    """Install the wrappers (once per process); False where Python has no
    `zipimporter.invalidate_caches` to wrap."""
    if getattr(zipimport.zipimporter, "invalidate_caches", None) is _invalidate_caches:
        return True
    if not hasattr(zipimport.zipimporter, "invalidate_caches") or not hasattr(zipimport, "_read_directory"):
        return False
    zipimport._read_directory = _read_directory
    _adopt_read_before(_parent_started())
    zipimport.zipimporter.invalidate_caches = _invalidate_caches  # type: ignore[method-assign]
    return True
