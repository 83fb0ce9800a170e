#!/usr/bin/env bash
# After a test process died of a signal (exit status > 128): which test ran, the crashing thread's
# Python stack (tests/conftest.py, KMIRROR_FAULT_LOG) and, where the kernel left a core file in this
# directory and gdb is installed, its C stack. Short: the CI's excerpt of a failed run is its tail.
# usage: crash-report.sh STATUS FAULT_LOG PYTHON
status="$1" fault_log="$2" python="$3"
[ "$status" -gt 128 ] || exit 0
echo "== crash report: the test process died of signal $((status - 128))"
[ -s "$fault_log.current" ] && echo "running: $(cat "$fault_log.current")"
if [ -s "$fault_log" ]; then
  # the header and the thread that crashed (faulthandler prints it first), then the other threads' tops
  grep -v '^\s*$' "$fault_log" | head -n 10
else
  # librdkafka's threads block every signal: a fault on one (librdkafka itself, or Python code it
  # runs, e.g. an admin client's future callbacks) kills the process before any handler can run
  echo "no Python fault dump in $fault_log: the fault hit a thread that blocks signals (librdkafka's)"
fi
core="$(ls -t core core.* 2>/dev/null | head -n 1)"
if [ -n "$core" ] && command -v gdb >/dev/null; then
  echo "C stack of the crashing thread ($core):"
  # the frames below faulthandler's re-raise (`<signal handler called>`), when it ran
  gdb -q -batch -ex "bt 24" "$python" "$core" 2>/dev/null | grep '^#' | uniq \
    | awk '/<signal handler called>/ {n = 0; next} {lines[n++] = $0} END {for (i = 0; i < n && i < 9; i++) print lines[i]}' \
    | cut -c1-160
  rm -f "$core"
else
  echo "no core file here (ulimit -c, /proc/sys/kernel/core_pattern: $(cat /proc/sys/kernel/core_pattern 2>/dev/null))"
fi
