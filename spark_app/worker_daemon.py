"""Spark's Python worker daemon (`pyspark.daemon`), with pyspark imported from its installed package.

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` (and py4j's zip) first on every Python worker's
path. Python never caches compiled code for a zip, so each worker process compiles the pyspark
modules it imports from source: in a py-spy profile of a local `--once` run, about half of the
Python workers' CPU before the first record (several seconds over the ~10 worker processes of a
query). Where pyspark is pip-installed (`SPARK_HOME` is the installed `pyspark` package, as for
local runs and the tests), the zips hold the very same code as the package next to them, whose
compiled files are cached: this module drops those zips from the path and runs `pyspark.daemon`.
Elsewhere (a Spark distribution: the apache/spark images, EMR) it changes nothing.

It also imports, once in the daemon, the modules every reader and writer task imports (`PRELOAD`:
pyspark's worker, the app's sink and source, the copy paths; `ARROW_PRELOAD`: numpy, pyarrow and
pyspark's data source reader for Spark's arrow path): the daemon forks a process per concurrent task
and the forks inherit them, where each imported them anew (~0.1-0.4 s of CPU per process, measured
inside the copy window of a `--once` run; numpy and pyarrow alone ~0.1 s). Forking a process that
runs other threads can leave the fork with locks no thread will release. numpy's BLAS starts a
thread pool and pyarrow's jemalloc a background thread when imported, unless told not to
(`SINGLE_THREADED_ENV`, set here unless the deployment set them, and inherited by the tasks, which
run no BLAS). numpy and pyarrow are preloaded only with those values and where the daemon can count
its threads (Linux): where more than one runs after the preload (a library that starts one anyway)
the preload is undone (the thread itself stays, as in pyspark's own daemon on 4.0, which imports
numpy). Otherwise they are refused, as is pandas everywhere (the tasks never need it:
`spark_app.lazy_pandas`). After a preload it also builds what the copy path would build on each
task's first batches (`warm_up`), and it freezes what it made out of the garbage collector, whose
writes would copy the shared pages into every fork (`prepare`).

`spark_app.session` names it as `spark.python.daemon.module` only where `installed_spark_zips()`
finds such zips in the driver; it must import nothing but the standard library before the zips
are off the path.
"""

from __future__ import annotations

import os
import runpy
import sys

DAEMON = "pyspark.daemon"
PRELOAD = (
    "pyspark.worker",
    "spark_app.sink",
    "spark_app.source",
    "kmirror_engine.copying.batch_copy",
    "kmirror_engine.copying.batch_net",
    "kmirror_engine.copying.native_copy",
)
# Spark's arrow path in the tasks (the reader's rows, the writer's commit message): preloaded only
# where numpy and pyarrow may be (`preload`).
ARROW_PRELOAD = ("numpy", "pyarrow", "pyarrow.ipc", "pyspark.sql.worker.plan_data_source_read")
# What keeps the preload's imports from starting threads (OpenBLAS's pool; the background thread
# of pyarrow's jemalloc, whose settings pyarrow reads from JE_ARROW_MALLOC_CONF).
SINGLE_THREADED_ENV = {"OPENBLAS_NUM_THREADS": "1", "JE_ARROW_MALLOC_CONF": "background_thread:false"}
THREAD_STARTERS = ("pandas",)  # never preloaded
UNCOUNTED_THREAD_STARTERS = ("numpy", "pyarrow")  # preloaded only where threads can be counted
_TASKS = "/proc/self/task"


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
    """A meta path finder that refuses `names` (and their submodules), noting each."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.refused: list[str] = []

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.split(".")[0] in self.names:
            self.refused.append(name)
            raise ImportError(f"{name} is not preloaded in the worker daemon (it may start threads)")


def threads() -> int | None:
    """The threads of this process (None where the platform does not tell: no /proc)."""
    try:
        return len(os.listdir(_TASKS))
    except OSError:
        return None


def preload(modules: tuple[str, ...] = PRELOAD, arrow: tuple[str, ...] = ARROW_PRELOAD) -> bool:
    """Import `modules` (and `arrow` first, where numpy and pyarrow may be imported), with
    `SINGLE_THREADED_ENV` (where not set already) and without any of
    `THREAD_STARTERS` (nor `UNCOUNTED_THREAD_STARTERS` where threads cannot be counted or the
    deployment set other values for those variables). False,
    with every module the attempt imported forgotten again, where a refused module was asked for
    (even if the asker carried on without it), where one fails to import, or where the process
    runs more than one thread afterwards."""
    import importlib

    for name, value in SINGLE_THREADED_ENV.items():
        os.environ.setdefault(name, value)
    # numpy and pyarrow only where they start no thread (the deployment did not ask for BLAS
    # threads) and where the threads are counted after them
    single = all(os.environ[name] == value for name, value in SINGLE_THREADED_ENV.items())
    counted = single and threads() is not None
    refused = THREAD_STARTERS if counted else THREAD_STARTERS + UNCOUNTED_THREAD_STARTERS
    if any(name in sys.modules for name in refused):
        return False  # already loaded: nothing to keep out
    before = set(sys.modules)
    refuse = _Refuse(refused)
    sys.meta_path.insert(0, refuse)
    try:
        for name in (arrow + modules) if counted else modules:
            importlib.import_module(name)
            if refuse.refused:
                break
        loaded = not refuse.refused and (not counted or threads() == 1)
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
    from kmirror_engine.copying import build_crc_tables

    build_crc_tables()


def prepare() -> bool:
    """Everything before `pyspark.daemon` runs: the zips off the path, the preload and its
    warm-up, and every object made so far frozen out of the garbage collector (`gc.freeze`). A
    fork shares the daemon's memory until it writes to it, and the collector writes to every
    object it examines: without the freeze each task process's first full collection copied the
    pages of all the preloaded modules' objects (Spark `--once`, 4 alternating pairs: 0.26-0.30 s
    of writer CPU per 1M records with it, 0.33-0.36 s without). Returns whether the preload stayed."""
    import gc

    drop_installed_zips()
    loaded = preload()
    if loaded:
        warm_up()
    gc.freeze()
    return loaded


def main() -> None:
    prepare()
    runpy.run_module(DAEMON, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
