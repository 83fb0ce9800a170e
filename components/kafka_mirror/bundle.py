"""The app bundle: a deterministic zip of the `spark_app`, `kmirror_engine` and `kmirror` packages (no pulumi).

The app imports `kmirror.flow.spec`, `kmirror.security.config`, ..., so both packages travel together.
Entries have fixed timestamps and order, so an unchanged source tree gives a byte-identical zip
and the same content hash: the bundle's S3 key (and the EMR steps) change only with the code.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

PACKAGES = ("spark_app", "kmirror_engine", "kmirror")
FIXED_TIME = (2020, 1, 1, 0, 0, 0)


def bundle_files(root: Path) -> list[Path]:
    """The `.py` files of PACKAGES under `root`, sorted, without caches."""
    files = [p for pkg in PACKAGES for p in (root / pkg).rglob("*.py") if "__pycache__" not in p.parts]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def build_bundle(root: Path, out_dir: Path) -> tuple[Path, str]:
    """Write `out_dir/kmirror-bundle.zip`; returns its path and sha256. Raises FileNotFoundError
    when a package is missing under `root` (a wrong project root must not ship an empty app)."""
    for pkg in PACKAGES:
        if not (root / pkg / "__init__.py").is_file():
            raise FileNotFoundError(f"package {pkg!r} not found under {root}; run from the project root")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "kmirror-bundle.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for file in bundle_files(root):
            info = zipfile.ZipInfo(file.relative_to(root).as_posix(), date_time=FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, file.read_bytes())
    return path, hashlib.sha256(path.read_bytes()).hexdigest()
