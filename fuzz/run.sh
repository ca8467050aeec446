#!/usr/bin/env bash
# Runs each libFuzzer target for SECONDS on a scratch copy of its seed corpus
# (fuzz/corpus/<target>; new inputs go to build-fuzz/corpus/<target>, not
# into the repository) and prints the executions of each and in total.
# Usage: fuzz/run.sh SECONDS TARGET...   (make fuzz calls it)
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=$1; shift
total=0; failed=""
for t in "$@"; do
    work=build-fuzz/corpus/$t
    mkdir -p "$work" build-fuzz/artifacts
    cp -n fuzz/corpus/"$t"/* "$work"/ 2>/dev/null
    log=build-fuzz/$t.log
    build-fuzz/fuzz/"$t" -max_total_time="$seconds" -max_len=65536 -timeout=20 -rss_limit_mb=2048 \
        -artifact_prefix=build-fuzz/artifacts/"$t"- -print_final_stats=1 "$work" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    execs=${execs:-0}
    total=$((total + execs))
    if [ $rc -ne 0 ]; then
        failed="$failed $t"
        echo "fuzz: $t FAILED after $execs executions (log $log):"
        grep -E "ERROR|runtime error|SUMMARY|Test unit written" "$log" | head -20
    else
        echo "fuzz: $t: $execs executions in ${seconds} s, no crash"
    fi
done
echo "fuzz: total executions: $total"
[ -z "$failed" ] || { echo "fuzz: crashes in:$failed"; exit 1; }
