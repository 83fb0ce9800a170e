#!/usr/bin/env bash
# The kafka-mirror wheel the policy pack's venv (policy/requirements.txt) and the Python example
# (examples/python/requirements.txt) install, and its pin: kafka-mirror is not on PyPI, so it is
# never installed by name from an index (a squatted package would run in the deploy job).
#
#   scripts/ci-kafka-mirror-wheel.sh [OUT_DIR]     (default: dist)
#
# Builds OUT_DIR/kafka_mirror-<version>-py3-none-any.whl from the checkout's files (tracked and
# untracked-not-ignored; nothing from an earlier build/ leaks in) with a build backend pinned by
# sha256 (no build isolation: nothing unpinned is fetched), timestamps from the last commit
# (SOURCE_DATE_EPOCH), so one commit always builds the same bytes. Then writes
# OUT_DIR/kafka-mirror-wheel.txt, the one requirement line the requirement files include
# (`-r .../dist/kafka-mirror-wheel.txt`):
#   kafka-mirror @ file:///abs/OUT_DIR/kafka_mirror-0.1.0-py3-none-any.whl --hash=sha256:<its sha256>
# and prints it. It never resolves or rewrites a lock (the hashed pins of everything else are
# committed; docs/deploy.md says how to refresh them).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(realpath -m "${1:-dist}")"
python="${PYTHON:-$root/.venv/bin/python}"
[ -x "$python" ] || python="$(command -v python3)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# the build backend, pinned by hash (pyproject.toml's build-system: setuptools>=68)
"$python" -m venv "$work/build-venv"
printf '%s\n' \
  'setuptools==84.2.1 --hash=sha256:ca140b45d5325a9478f880e351484f62fef15f336462e449ca0c03c873d589c2' \
  > "$work/build-requirements.txt"
"$work/build-venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --require-hashes \
  -r "$work/build-requirements.txt"

# a clean copy of the source: what git would commit, no build/ or *.egg-info of earlier builds
mkdir "$work/src"
(cd "$root" && git ls-files -z --cached --others --exclude-standard \
  | tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$work/src"

epoch="$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 315532800)"
mkdir -p "$out"
rm -f "$out"/kafka_mirror-*.whl
(cd "$work/src" && SOURCE_DATE_EPOCH="$epoch" "$work/build-venv/bin/python" -m pip wheel -q \
  --disable-pip-version-check --no-deps --no-build-isolation --no-index -w "$out" .)

wheels=("$out"/kafka_mirror-*.whl)
if [ "${#wheels[@]}" -ne 1 ] || [ ! -f "${wheels[0]}" ]; then
  echo "ci-kafka-mirror-wheel.sh: expected one kafka_mirror-*.whl in $out, found: ${wheels[*]}" >&2
  exit 1
fi
sha="$(sha256sum "${wheels[0]}" | cut -d' ' -f1)"
echo "kafka-mirror @ file://${wheels[0]} --hash=sha256:$sha" | tee "$out/kafka-mirror-wheel.txt"
