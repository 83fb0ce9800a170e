"""A class-data-sharing archive for the driver JVM that PySpark launches (issue 16, start-up).

The JVM PySpark starts for a local run spends most of its first seconds loading and verifying
Spark's classes. JDK 13+ can dump the classes a run loaded into a dynamic CDS archive
(`-XX:ArchiveClassesAtExit`) and map it at the next start (`-XX:SharedArchiveFile`); Spark 4
needs JDK 17+, so every supported JVM can. Measured on a 2-core machine: SparkSession 4.0-4.8 s
-> 2.3 s, the first job 1.95 s -> 1.0 s (docs/performance.md).

Contract:
- `archive_options()` is called before the JVM starts: with a usable archive for this JVM and
  these Spark jars it returns the options that map it; without one, the options that make this
  run's JVM dump one into a private pending file; with `KMIRROR_JVM_CLASS_ARCHIVE=off`, none.
- `finish()` is called once the session was stopped (the run is over): it ends the JVM, waits
  for it to exit (it dumps on exit) and only then, when it exited cleanly, renames the pending
  file into place. A JVM that was killed or failed leaves no archive behind: a truncated
  archive could crash the next JVM that maps it, so it is never adopted.
- Archives live in `KMIRROR_JVM_CLASS_ARCHIVE` (a directory) or `~/.cache/kmirror/jvm-classes`
  (created 0700: the JVM loads classes from it), one per (java binary, Spark jars) key; a JVM
  that finds an archive it cannot use (a different classpath) ignores it and starts normally.
- Archives do not pile up (each is ~150 MB; every new venv, Spark or Java makes a new key): the
  archive a run maps is touched (its mtime is its last use), and at every start archives of
  other keys unused for `KEEP_DAYS` days, or beyond the `KEEP_ARCHIVES` most recently used,
  are removed. A JVM that has one mapped keeps its mapping (Linux keeps an unlinked file's
  pages until the last mapping ends).
- CDS logging never reaches stdout (the JVM otherwise prints one warning per skipped class
  there): a run that maps an archive logs none; a run that dumps one writes CDS warnings to a
  private file beside its pending dump (`<pending>.log`, ~80 kB), read by `finish()` when the JVM
  declined or failed to dump (a full disk, a base archive it could not map) to log why, then
  removed. `finish()` returns what happened, so callers and tests can say why there is no archive.

Only runs whose JVM PySpark launches use this (`kmirror run`, `python -m spark_app` with a
local master, the benchmarks); on EMR and Kubernetes spark-submit starts the driver JVM.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("kmirror.jvm_classes")
ENV = "KMIRROR_JVM_CLASS_ARCHIVE"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
# classes the dump skips: one line each, expected, not a reason the dump failed
_ROUTINE = ("Skipping ", "Pre JDK 6 class", "Preload Warning", "Loader Constraint")
EXIT_TIMEOUT_S = 60.0
CHILDREN_TIMEOUT_S = 15.0
KEEP_DAYS = 14
KEEP_ARCHIVES = 3


@dataclass(frozen=True)
class ArchivePlan:
    """What this run's JVM does with the archive: map `archive`, or dump into `pending`."""

    archive: Path
    pending: Path | None  # set: this run makes the archive

    @property
    def dump_log(self) -> Path | None:
        return None if self.pending is None else self.pending.with_name(self.pending.name + ".log")

    def java_options(self) -> str:
        if self.pending is None:
            return f"-XX:SharedArchiveFile={self.archive} {QUIET}"
        to_file = f"-Xlog:cds=warning,cds+dynamic=warning:file={self.dump_log}::filecount=0"
        return f"-XX:ArchiveClassesAtExit={self.pending} {QUIET} {to_file}"


_plan: ArchivePlan | None = None


def archive_directory() -> Path | None:
    """Where archives live (None: switched off)."""
    setting = os.environ.get(ENV, "")
    if setting.lower() == "off":
        return None
    return Path(setting) if setting else Path.home() / ".cache" / "kmirror" / "jvm-classes"


def _java_binary() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else (Path(p) if (p := shutil.which("java")) else None)
    return found.resolve() if found is not None and found.exists() else None


def archive_key() -> str | None:
    """A digest of what an archive is valid for: the java binary and the Spark jars (None when
    either cannot be found)."""
    java = _java_binary()
    try:
        import pyspark

        jars = Path(pyspark.__file__).resolve().parent / "jars"
        listing = sorted((p.name, p.stat().st_size) for p in jars.glob("*.jar"))
    except (ImportError, OSError):
        return None
    if java is None or not listing:
        return None
    stat = java.stat()
    text = repr((str(java), stat.st_size, stat.st_mtime_ns, str(jars), listing))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def archive_options() -> str:
    """JVM options for this run (see module doc); remembers the plan for `finish()`."""
    global _plan
    _plan = None
    directory = archive_directory()
    key = archive_key() if directory is not None else None
    if directory is None or key is None:
        return ""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if directory.stat().st_uid != os.getuid() or directory.stat().st_mode & 0o022:
            log.warning("JVM class archive directory %s is not private to this user; not used", directory)
            return ""
    except OSError as exc:
        log.info("JVM class archive directory %s unusable (%s); start-up without one", directory, exc)
        return ""
    _remove_abandoned(directory)
    archive = directory / f"spark-{key}.jsa"
    if archive.exists():
        with contextlib.suppress(OSError):
            os.utime(archive)  # its last use, for pruning
        _plan = ArchivePlan(archive, None)
    else:
        _plan = ArchivePlan(archive, directory / f"spark-{key}.{os.getpid()}.pending")
    prune(directory, keep=archive)
    return _plan.java_options()


def prune(directory: Path, keep: Path, now: float | None = None) -> list[Path]:
    """Remove archives other than `keep` unused for KEEP_DAYS days or beyond the KEEP_ARCHIVES
    most recently used (module doc); returns what was removed."""
    now = time.time() if now is None else now
    used: list[tuple[float, Path]] = []
    for path in directory.glob("spark-*.jsa"):
        if path != keep:
            with contextlib.suppress(OSError):
                used.append((path.stat().st_mtime, path))
    used.sort(reverse=True)  # most recently used first; `keep` (mapped or about to be made) takes a slot
    removed = []
    for index, (mtime, path) in enumerate(used):
        if index >= KEEP_ARCHIVES - 1 or now - mtime > KEEP_DAYS * 86400:
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
    if removed:
        log.info("JVM class archives unused for long removed: %s", ", ".join(p.name for p in removed))
    return removed


def _remove_abandoned(directory: Path) -> None:
    """Pending dumps (and their logs) of runs that ended without `finish()` (killed, crashed):
    never adopted."""
    for pending in [*directory.glob("spark-*.*.pending"), *directory.glob("spark-*.*.pending.log")]:
        pid = pending.name.removesuffix(".log").split(".")[-2]
        if pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(OSError):
                pending.unlink()


def finish(timeout_s: float = EXIT_TIMEOUT_S) -> str:
    """After the session stopped: end the JVM and adopt the archive it dumped (module doc).
    Returns what happened: "mapped" (this run used an archive), "off" (none planned),
    "adopted", or "not adopted: <why>" (also logged)."""
    global _plan
    plan, _plan = _plan, None
    if plan is None:
        return "off"
    if plan.pending is None:
        return "mapped"
    outcome = f"not adopted: no driver JVM was ended here, or it did not exit within {timeout_s:.0f} s"
    try:
        code = _end_jvm(timeout_s)
        size = plan.pending.stat().st_size if plan.pending.exists() else None
        if code == 0 and size:
            os.replace(plan.pending, plan.archive)
            log.info("JVM class archive written: %s (later runs start faster)", plan.archive)
            outcome = "adopted"
        elif code is not None:
            dumped = "no dump" if size is None else f"a dump of {size} bytes"
            outcome = f"not adopted: the JVM exited with {code} leaving {dumped}"
            if reasons := _dump_problems(plan.dump_log):
                outcome += "; it said: " + " | ".join(reasons)
        if outcome != "adopted":
            log.warning("JVM class archive %s", outcome)
    finally:
        for leftover in (plan.pending, plan.dump_log):
            if leftover is not None:
                with contextlib.suppress(FileNotFoundError):
                    leftover.unlink()
    return outcome


def _dump_problems(dump_log: Path | None, most: int = 5) -> list[str]:
    """The last CDS messages of a dump run that are not about single skipped classes."""
    try:
        lines = dump_log.read_text(errors="replace").splitlines() if dump_log is not None else []
    except OSError:
        return []
    found = [line.split("] ")[-1].strip() for line in lines if not any(r in line for r in _ROUTINE)]
    return [line for line in found if line][-most:]


def _end_jvm(timeout_s: float) -> int | None:
    """Close PySpark's gateway (the JVM exits on end of its stdin) and wait for the JVM's exit
    code; None when there was no gateway or it did not exit in time."""
    if "pyspark" not in sys.modules:
        return None
    from pyspark import SparkContext

    gateway: Any = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if gateway is None or proc is None:
        return None
    # Spark's Python processes (the streaming source runner, workers) may still be ending after
    # stop(): ending the JVM under them makes them print a broken-pipe traceback
    _wait_for_children(proc.pid, CHILDREN_TIMEOUT_S)
    with contextlib.suppress(Exception):
        gateway.close()
    SparkContext._gateway = None  # a later session in this process launches a new JVM
    SparkContext._jvm = None
    with contextlib.suppress(OSError):
        proc.stdin.close()
    try:
        return int(proc.wait(timeout=timeout_s))
    except Exception:  # a JVM that does not end in time is left alone; its dump is not trusted
        log.info("the driver JVM did not exit within %.0f s; no class archive adopted", timeout_s)
        return None


def _children(pid: int) -> list[int]:
    """Live child processes of `pid`."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError, IndexError):
            continue
        if ppid == str(pid) and state != "Z":  # an exited, unreaped child (the launcher's shell) is gone
            out.append(int(entry.name))
    return out


def _wait_for_children(pid: int, timeout_s: float) -> None:
    """Until the process `pid` has no child processes left (bounded; Linux /proc)."""
    deadline = time.monotonic() + timeout_s
    while _children(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
