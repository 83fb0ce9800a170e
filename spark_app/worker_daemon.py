"""Spark's Python worker daemon (`pyspark.daemon`), with pyspark imported from its installed package.

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` (and py4j's zip) first on every Python worker's
path. Python never caches compiled code for a zip, so each worker process compiles the pyspark
modules it imports from source: in a py-spy profile of a local `--once` run, about half of the
Python workers' CPU before the first record (several seconds over the ~10 worker processes of a
query). Where pyspark is pip-installed (`SPARK_HOME` is the installed `pyspark` package, as for
local runs and the tests), the zips hold the very same code as the package next to them, whose
compiled files are cached: this module drops those zips from the path and runs `pyspark.daemon`.
Elsewhere (a Spark distribution: the apache/spark images, EMR) it changes nothing.

It also imports, once in the daemon, the modules every reader and writer task imports
(`PRELOAD`: pyspark's worker, the app's sink and source, the copy paths): the daemon forks a
process per concurrent task and the forks inherit them, where each imported them anew (~0.1-0.4
s of CPU per process, measured inside the copy window of a `--once` run). Forking a process that
runs other threads can leave the fork with locks no thread will release, so the preload refuses
the modules known to start threads when imported (numpy's BLAS, and pandas and pyarrow that import
it): where importing `PRELOAD` asks for one (pyspark 4.0 imports numpy with pyspark itself), the
preload is undone and the daemon runs as before. After a preload it also builds what the copy
path would build on each task's first batches (`warm_up`).

`spark_app.session` names it as `spark.python.daemon.module` only where `installed_spark_zips()`
finds such zips in the driver; it must import nothing but the standard library before the zips
are off the path.
"""

from __future__ import annotations

import os
import runpy
import sys

DAEMON = "pyspark.daemon"
PRELOAD = ("pyspark.worker", "spark_app.sink", "spark_app.source", "kmirror_engine.copying.batch_copy",
           "kmirror_engine.copying.batch_net", "kmirror_engine.copying.native_copy")  # fmt: skip
THREAD_STARTERS = ("numpy", "pandas", "pyarrow")


def installed_spark_zips(path: list[str]) -> list[str]:
    """The entries of `path` that are the zips of a pip-installed pyspark (<pkg>/python/lib/*.zip
    inside a `pyspark` package directory, next to an installed `py4j` for py4j's zip)."""
    found = []
    for entry in path:
        lib = os.path.dirname(entry)
        home = os.path.dirname(os.path.dirname(lib))
        name = os.path.basename(entry)
        if not (entry.endswith(".zip") and os.path.basename(home) == "pyspark" and os.path.basename(lib) == "lib"):
            continue
        if not os.path.isfile(os.path.join(home, "__init__.py")):
            continue  # no installed package around the zip: a Spark distribution's
        py4j_installed = os.path.isdir(os.path.join(os.path.dirname(home), "py4j"))
        if name == "pyspark.zip" or (name.startswith("py4j-") and py4j_installed):
            found.append(entry)
    return found


def drop_installed_zips() -> None:
    """Take the pip-installed pyspark's zips off this process's path, and their importers (made
    while Python looked for this module) with them: pyspark's setup of every task would have
    each read its zip's directory again (`spark_app.zip_directories`)."""
    drop = set(installed_spark_zips(sys.path))
    sys.path[:] = [entry for entry in sys.path if entry not in drop]
    for entry in drop:
        sys.path_importer_cache.pop(entry, None)


class _Refuse:
    """A meta path finder that refuses `THREAD_STARTERS` (and their submodules), noting each."""

    def __init__(self) -> None:
        self.refused: list[str] = []

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.split(".")[0] in THREAD_STARTERS:
            self.refused.append(name)
            raise ImportError(f"{name} is not preloaded in the worker daemon (it may start threads)")


def preload(modules: tuple[str, ...] = PRELOAD) -> bool:
    """Import `modules` without any of `THREAD_STARTERS`. False, with every module the attempt
    imported forgotten again, where one of them was asked for (even if the asker carried on
    without it: pyspark 4.0's statcounter falls back to `math`, which the forks must not inherit),
    or where one fails to import."""
    import importlib

    if any(name in sys.modules for name in THREAD_STARTERS):
        return False  # already loaded: nothing to keep out
    before = set(sys.modules)
    refuse = _Refuse()
    sys.meta_path.insert(0, refuse)
    try:
        for name in modules:
            importlib.import_module(name)
            if refuse.refused:
                break
        loaded = not refuse.refused
    except Exception:  # anything: the daemon must start regardless
        loaded = False
    finally:
        sys.meta_path.remove(refuse)
    if not loaded:
        for name in set(sys.modules) - before:
            module = sys.modules.pop(name)
            parent, _, child = name.rpartition(".")
            if parent in before and getattr(sys.modules.get(parent), child, None) is module:
                delattr(sys.modules[parent], child)  # `from parent import child` must not find it
    return loaded


def warm_up() -> None:
    """Build, once in the daemon, what the preloaded copy path otherwise builds in every task
    process on its first batches: the CRC shift tables of the batch path (~3 ms of CPU per
    process, inside the copy window of a `--once` run)."""
    from kmirror_engine.copying.batch_wire import build_crc_tables

    build_crc_tables()


def main() -> None:
    drop_installed_zips()
    if preload():
        warm_up()
    runpy.run_module(DAEMON, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
