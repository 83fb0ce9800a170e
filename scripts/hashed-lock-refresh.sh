#!/usr/bin/env bash
# Resolves the hash-pinned locks of the interpreters that are not the deploying machine's, once, into
# scripts/ (kafka_mirror.hashed_lock): the app image's Python deps for CPython 3.10 (Ubuntu 22.04, the
# apache/spark 4.0 images) per architecture, scripts/image-cp310-{x86_64,aarch64}.lock, from
# scripts/app-requirements.txt (confluent-kafka pinned by its source archive's sha256: the Dockerfile
# builds it against its own librdkafka). A maintainer runs it after changing app-requirements.txt and
# commits the result; a build never resolves (`pip install --require-hashes --no-deps`), and
# tests/test_image.py refuses a lock resolved from other requirements. Needs PyPI.
#
#   scripts/hashed-lock-refresh.sh    # PYTHON310=... a CPython 3.10 with pip >= 23 (default: pyenv's)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
python310="${PYTHON310:-$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.10.*/bin/python 2>/dev/null | tail -1)}"
"$python" - "$root" "$python310" <<'PY'
import sys
from pathlib import Path

root, python310 = Path(sys.argv[1]), sys.argv[2]
sys.path[:0] = [str(root), str(root / "components")]
from kafka_mirror.hashed_lock import IMAGE_ARCHITECTURES, LockError, image_target, resolve_lock

if not python310:
    sys.exit("hashed-lock-refresh.sh: no CPython 3.10 found: set PYTHON310")
requirements = root / "scripts" / "app-requirements.txt"
for arch in IMAGE_ARCHITECTURES:
    target = image_target(arch)
    try:
        text = resolve_lock(requirements, target, python310)
    except LockError as error:
        sys.exit(f"hashed-lock-refresh.sh: {error}")
    path = root / "scripts" / target.name
    path.write_text(text)
    pins = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    print(f"hashed-lock-refresh.sh: {path.relative_to(root)}: {pins} pins")
PY
