"""Spark's Python worker daemon (`pyspark.daemon`), with pyspark imported from its installed package.

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` (and py4j's zip) first on every Python worker's
path. Python never caches compiled code for a zip, so each worker process compiles the pyspark
modules it imports from source: in a py-spy profile of a local `--once` run, about half of the
Python workers' CPU before the first record (several seconds over the ~10 worker processes of a
query). Where pyspark is pip-installed (`SPARK_HOME` is the installed `pyspark` package, as for
local runs and the tests), the zips hold the very same code as the package next to them, whose
compiled files are cached: this module drops those zips from the path and runs `pyspark.daemon`.
Elsewhere (a Spark distribution: the apache/spark images, EMR) it changes nothing.

`spark_app.session` names it as `spark.python.daemon.module` only where `installed_spark_zips()`
finds such zips in the driver; it must import nothing but the standard library before it runs
the daemon.
"""

from __future__ import annotations

import os
import runpy
import sys

DAEMON = "pyspark.daemon"


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


def main() -> None:
    drop_installed_zips()
    runpy.run_module(DAEMON, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
