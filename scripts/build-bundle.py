#!/usr/bin/env python3
"""Build the app bundle (`spark_app` + `kmirror`) as a deterministic zip and print its sha256.

    .venv/bin/python scripts/build-bundle.py [OUT_DIR]     # default: build/

The Pulumi program builds the same zip on EMR stacks (components.bundle); use this to inspect
it or to ship it by other means (`spark-submit --py-files build/kmirror-bundle.zip`).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from components.bundle import build_bundle  # noqa: E402  (needs the project root on sys.path)

if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build"
    path, sha = build_bundle(ROOT, out)
    print(f"{path} sha256={sha}")
