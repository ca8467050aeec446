#!/usr/bin/env bash
# Runs each test binary given as an argument (each a cmocka group) and prints
# closing lines: the programs passed and failed, and the cases they ran,
# passed, skipped (e.g. GPU cases on a machine without one) and failed, as
# the cmocka summaries of the programs count them.
set -u
passed=0; failed=0; failed_names=""
cases=0; cases_passed=0; cases_skipped=0; cases_failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The number in the first cmocka summary line of $log that starts with $1.
count() { sed -n "s/^\[ *$1 *\] \([0-9][0-9]*\) test(s).*/\1/p" "$log" | head -1; }
for t in "$@"; do
    echo "== $t"
    "$t" 2>&1 | tee "$log"
    if [ "${PIPESTATUS[0]}" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); failed_names="$failed_names $(basename "$t")"; fi
    cases=$((cases + $(count "=*" | grep . || echo 0)))
    cases_passed=$((cases_passed + $(count PASSED | grep . || echo 0)))
    cases_skipped=$((cases_skipped + $(count SKIPPED | grep . || echo 0)))
    cases_failed=$((cases_failed + $(count FAILED | grep . || echo 0)))
done
[ -n "$failed_names" ] && echo "failed:$failed_names"
echo "test cases: $cases run, $cases_passed passed, $cases_skipped skipped, $cases_failed failed"
echo "tests: $passed programs passed, $failed failed"
[ "$failed" -eq 0 ]
