#!/usr/bin/env bash
# Runs each test binary given as an argument and prints one closing line:
# "tests: N passed, M failed" (counting binaries, each a cmocka group).
set -u
passed=0; failed=0; failed_names=""
for t in "$@"; do
    echo "== $t"
    if "$t"; then passed=$((passed + 1)); else failed=$((failed + 1)); failed_names="$failed_names $(basename "$t")"; fi
done
[ -n "$failed_names" ] && echo "failed:$failed_names"
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
