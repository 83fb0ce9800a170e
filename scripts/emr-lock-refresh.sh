#!/usr/bin/env bash
# Resolves the EMR nodes' wheelhouse locks once: scripts/app-requirements.txt plus the nodes' extras
# (boto3, pip), for CPython 3.11 on Amazon Linux 2023, per architecture, every pin with the sha256
# PyPI published for it, into scripts/emr-wheelhouse-cp311-{aarch64,x86_64}.lock (shipped in the
# package as kafka_mirror/deploy/). A maintainer runs it after changing app-requirements.txt and
# commits the result; a deploy (`pulumi up`, CI) never resolves: it downloads exactly these pins
# with --require-hashes and refuses a lock resolved from other requirements
# (kafka_mirror.emr.wheelhouse.committed_lock).
#
#   scripts/emr-lock-refresh.sh            # PYTHON=... to use another Python 3.11 than .venv's
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
"$python" - "$root" <<'PY'
import sys
from pathlib import Path

root = Path(sys.argv[1])
sys.path[:0] = [str(root), str(root / "components")]
from kafka_mirror.emr.specs import ARCHITECTURES
from kafka_mirror.emr.wheelhouse import WheelhouseError, committed_lock_path, resolve_lock

requirements = root / "scripts" / "app-requirements.txt"
for arch in ARCHITECTURES:
    try:
        text = resolve_lock(requirements, arch)
    except WheelhouseError as error:
        sys.exit(f"emr-lock-refresh.sh: {error}")
    path = committed_lock_path(requirements, arch)
    path.write_text(text)
    pins = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    print(f"emr-lock-refresh.sh: {path.relative_to(root)}: {pins} pins")
PY
