"""Add compiled code to Spark's `pyspark.zip` (and py4j's zip), so Python workers stop compiling pyspark.

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` first on the path of every Python process it
starts: the daemon's workers and the planner processes it starts on its own (data-source
planning, the streaming source runner). Python never writes compiled code for a zip, so each of
those processes compiles every pyspark module it imports from source: ~0.6 s of CPU per process
(`pyspark.sql.worker.plan_data_source_read` + the streaming runner: 1.03 s from the zip, 0.45 s
from a zip with `.pyc` entries, 0.37 s from the installed package, measured on this repository's
machine), and a query starts about ten of them.

zipimport does load `name.pyc` entries that sit beside `name.py` in the archive. This writes them,
as unchecked hash-based pycs (PEP 552: no timestamp to match, the `.py` stays for tracebacks), for
the interpreter that runs this script, and replaces the zip atomically. A pyc of another Python
version is ignored by zipimport (wrong magic: it compiles the source as before), so a worker of
another version is never broken, only not helped. Running it again is a no-op.

    python scripts/precompile-pyspark-zip.py ZIP [ZIP ...]   # e.g. /opt/spark/python/lib/*.zip (the image)
    python scripts/precompile-pyspark-zip.py --installed     # the pip-installed pyspark's zips (local venvs)

Exit 0 done (or nothing to do), 2 a path that is not a zip.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import warnings
import zipfile
from importlib._bootstrap_external import _code_to_hash_pyc  # type: ignore[attr-defined]
from pathlib import Path

MARKER_PREFIX = "kmirror-precompiled-"  # one entry naming the magic number the pycs were made for


def marker() -> str:
    return MARKER_PREFIX + importlib.util.MAGIC_NUMBER.hex()


def installed_zips() -> list[Path]:
    """The zips inside a pip-installed pyspark (<pyspark>/python/lib/*.zip); none for a Spark distribution."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return []
    lib = Path(next(iter(spec.submodule_search_locations))) / "python" / "lib"
    return sorted(lib.glob("*.zip"))


def precompile(path: Path) -> int:
    """Rewrite `path` with a `.pyc` beside each `.py` for this interpreter; returns the number of
    modules compiled (0: already done for this Python). A symlink's target is rewritten (the
    image's py4j-src.zip points at the versioned zip Spark puts on the path)."""
    path = path.resolve()
    with zipfile.ZipFile(path) as zin:
        names = set(zin.namelist())
        if marker() in names:
            return 0
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
        os.close(fd)
        compiled = 0
        try:
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
                for info in zin.infolist():
                    if info.filename.endswith(".pyc") or info.filename.startswith(MARKER_PREFIX):
                        continue  # an older run's (another Python's) compiled code
                    data = zin.read(info)
                    zout.writestr(info, data)
                    if not info.filename.endswith(".py"):
                        continue
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # pyspark's own tests carry SyntaxWarnings
                        try:
                            code = compile(data, info.filename, "exec", dont_inherit=True)
                        except SyntaxError:
                            continue  # left to compile (and fail) at import, as without this script
                    pyc = _code_to_hash_pyc(code, importlib.util.source_hash(data), checked=False)
                    entry = zipfile.ZipInfo(info.filename[:-3] + ".pyc", date_time=info.date_time)
                    entry.compress_type = zipfile.ZIP_DEFLATED
                    zout.writestr(entry, bytes(pyc))
                    compiled += 1
                zout.writestr(marker(), f"{sys.version}\n")
            os.chmod(tmp, os.stat(path).st_mode & 0o777)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return compiled


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("zips", nargs="*", type=Path)
    parser.add_argument("--installed", action="store_true", help="the pip-installed pyspark's zips")
    args = parser.parse_args(argv)
    paths = list(args.zips) + (installed_zips() if args.installed else [])
    for path in paths:
        if not zipfile.is_zipfile(path):
            print(
                f"precompile-pyspark-zip: {path}: not a zip file; pass $SPARK_HOME/python/lib/pyspark.zip",
                file=sys.stderr,
            )
            return 2
    for path in paths:
        print(
            f"precompile-pyspark-zip: {path}: {precompile(path)} modules compiled for Python "
            f"{sys.version_info.major}.{sys.version_info.minor}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
