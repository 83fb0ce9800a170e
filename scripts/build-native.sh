#!/usr/bin/env bash
# Build the native copy loop (native/kmirror_copy.c -> kmirror_engine/copying/_kmirror_copy<EXT_SUFFIX>.so) for
# one Python, against the system's librdkafka (Debian/Ubuntu: librdkafka-dev; the image: the
# librdkafka it builds; needs librdkafka >= 1.0 headers, checked with 2.0.2 and 2.16).
#
#   PYTHON=.venv/bin/python bash scripts/build-native.sh [--require]
#
# Missing headers are installed when running as root with apt-get (librdkafka-dev; set
# KMIRROR_NO_APT=1 to never install). Without --require a missing compiler or librdkafka header
# is not an error: nothing is built and the app uses its Python copy loop (`copy_loop` auto).
# With --require (make system-deps, the image) it is. On success it writes
# <venv>/.kmirror-native: the tests then require the extension in that venv (fail, not skip).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
require=0
[ "${1:-}" = "--require" ] && require=1
out_dir="${OUT_DIR:-kmirror_engine/copying}"

give_up() {
  if [ "$require" = 1 ]; then echo "build-native.sh: $1" >&2; exit 1; fi
  echo "build-native.sh: $1; the Python copy loop will be used" >&2
  exit 0
}

CC="${CC:-cc}"
command -v "$CC" >/dev/null || give_up "no C compiler ($CC)"
read -r include suffix venv < <("$PYTHON" -c 'import sys, sysconfig
print(sysconfig.get_paths()["include"], sysconfig.get_config_var("EXT_SUFFIX"), sys.prefix if sys.prefix != sys.base_prefix else "-")')
[ -f "$include/Python.h" ] || give_up "no Python.h in $include (install the python3-dev package)"
cflags=() libs=(-lrdkafka)
if pkg-config --exists rdkafka 2>/dev/null; then
  read -r -a cflags < <(pkg-config --cflags rdkafka)
  read -r -a libs < <(pkg-config --libs rdkafka)
fi
# Link the librdkafka confluent-kafka itself loads when its wheel bundles one (PyPI wheels:
# confluent_kafka.libs/librdkafka-<hash>.so.1): one librdkafka per process, the same version
# both loops use. (Debian's 2.0.2 cannot even talk to tansu: TEST-ENV.md.) The headers only
# need to be a subset of it (librdkafka keeps its C API and ABI backwards compatible).
bundled="$("$PYTHON" -c 'import glob, os, confluent_kafka as c
libs = sorted(glob.glob(os.path.join(os.path.dirname(os.path.dirname(c.__file__)), "confluent_kafka.libs", "librdkafka*.so*")))
print(libs[0] if libs else "")' 2>/dev/null || true)"
if [ -n "$bundled" ]; then
  libs=(-L"$(dirname "$bundled")" -l:"$(basename "$bundled")" -Wl,-rpath,"$(dirname "$bundled")")
fi
have_headers() { echo '#include <librdkafka/rdkafka.h>' | "$CC" "${cflags[@]}" -E -x c - >/dev/null 2>&1; }
# A fresh Debian/Ubuntu machine, as root (what `make setup` runs on in CI): the headers are one
# registry package away. Without root or apt-get, nothing is installed (the Python loop is used).
if ! have_headers && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && [ "${KMIRROR_NO_APT:-}" != 1 ]; then
  echo "build-native.sh: installing librdkafka-dev (headers only; the module links confluent-kafka's librdkafka)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends librdkafka-dev >/dev/null 2>&1 \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
         apt-get install -y -qq --no-install-recommends librdkafka-dev >/dev/null; } || true
fi
have_headers || give_up "no librdkafka headers (apt-get install librdkafka-dev)"

target="$out_dir/_kmirror_copy$suffix"
tmp="$target.tmp.$$"
"$CC" -O2 -g -fPIC -shared -std=gnu11 -Wall -Wextra -Werror -Wno-missing-field-initializers \
  -I"$include" "${cflags[@]}" native/kmirror_copy.c -o "$tmp" "${libs[@]}" \
  || { rm -f "$tmp"; give_up "compiling native/kmirror_copy.c failed"; }
mv "$tmp" "$target"
# the module must load in this Python (and find librdkafka at run time)
PYTHONPATH="$out_dir/.." "$PYTHON" -c 'import importlib, sys
m = importlib.import_module(sys.argv[1] + "._kmirror_copy"); print("native copy loop:", m.__file__, "librdkafka", m.librdkafka_version()[0])' \
  "$(basename "$out_dir")" || { rm -f "$target"; give_up "the built module does not load"; }
if [ "$out_dir" = kmirror_engine/copying ] && [ "$venv" != - ]; then touch "$venv/.kmirror-native"; fi
exit 0
