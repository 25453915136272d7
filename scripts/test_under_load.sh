#!/usr/bin/env bash
# Run the test suite beside a CPU hog, to show that no test depends on the machine's speed.
#
#   bash scripts/test_under_load.sh [--same-group] [N] [PYTEST ARGS...]
#
# N busy loops (default 14: load ~16 on 2 cores) run until the tests end. By default they
# run in their own session: with the kernel's autogroup scheduling (most desktop and server
# kernels) that session and the tests' each get about half the machine while the load
# average reads N + the tests'. With --same-group the loops share the tests' session and
# compete with every test process one for one (a 2-core machine gives the tests about 1/8
# of what they get alone: run the timing-sensitive tests, e.g. -k "kill or resume or signal
# or server or follow or timeout or scheduler", not the whole suite). Prints the load
# average every minute, then pytest's exit status.
set -uo pipefail
cd "$(dirname "$0")/.."
same=0
if [ "${1:-}" = "--same-group" ]; then same=1; shift; fi
n=14
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then n=$1; shift; fi
mark="ooc-svm-test-under-load-$$"
hog() { for _ in $(seq "$n"); do (exec python3 -c "while True: pass  # $mark") & done; wait; }
if [ "$same" = 1 ]; then hog & else setsid bash -c "$(declare -f hog); n=$n mark=$mark; hog" & fi
(while sleep 60; do echo "load: $(date +%T) $(cut -d' ' -f1-3 /proc/loadavg)"; done) &
ticker=$!
trap 'kill $ticker 2>/dev/null; pkill -f "$mark" 2>/dev/null' EXIT
echo "load: $(date +%T) $(cut -d' ' -f1-3 /proc/loadavg) ($n busy loops started)"
.venv/bin/python -m pytest -m "not slow" -q -p no:cacheprovider "$@"
rc=$?
echo "pytest exit status: $rc"
if [ "$rc" -eq 5 ]; then rc=0; fi  # no test selected is not a failure (as `make test`)
exit $rc
