#!/usr/bin/env bash
# While `make test` runs its legs side by side (their output is held until each chain ends), one
# line every 5 minutes: the time and the test each leg is running (tests/conftest.py writes it
# beside the leg's fault log). Usage: legs-progress.sh CACHE_DIR; killed by the Makefile.
set -u
cache="$1"
trap 'kill "$nap" 2>/dev/null; exit 0' TERM  # no sleep left holding the job's output open
while true; do
  sleep "${KMIRROR_PROGRESS_EVERY_S:-300}" & nap=$!
  wait "$nap"
  line="== $(date -u +%H:%M:%S) legs running:"
  for leg in 1a 1c 2c 1b 2; do
    current="$cache/pytest-faults-$leg.log.current"
    [ -f "$current" ] && line="$line [$leg] $(head -c 160 "$current" | head -1)"
  done
  echo "$line"
done
