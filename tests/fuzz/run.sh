#!/bin/sh
# tests/fuzz/run.sh — runs each libFuzzer harness for a bounded time and sums
# the results. Usage: run.sh SECONDS JOBS BUILD_DIR NAME...
# Each harness first replays its seeds and regression inputs
# (tests/fuzz/corpus/NAME), then mutates for SECONDS. A crash, leak, timeout
# or out-of-memory fails that harness; its input is kept as
# BUILD_DIR/crash-NAME-*. Prints executions and coverage per harness, then
# "N passed, N failed, 0 skipped".
set -u
secs=$1 jobs=$2 dir=$3
shift 3
pass=0 fail=0
for name in "$@"; do
    bin="$dir/fuzz_$name" work="$dir/corpus-$name" log="$dir/fuzz-$name.log"
    mkdir -p "$work"
    if [ ! -d "tests/fuzz/corpus/$name" ]; then
        fail=$((fail + 1)); echo "fuzz $name: FAILED: its seed corpus tests/fuzz/corpus/$name is missing"; continue
    fi
    # -rss_limit_mb: the parsers accept data up to 2 GiB, so allow what that needs plus ASan's overhead
    if [ "$jobs" -gt 1 ]; then
        "$bin" -max_total_time="$secs" -jobs="$jobs" -workers="$jobs" -print_final_stats=1 -rss_limit_mb=6144 \
            -timeout=20 -artifact_prefix="$dir/crash-$name-" "$work" "tests/fuzz/corpus/$name" >"$log" 2>&1
        rc=$?
        cat "$dir"/fuzz-*.log >/dev/null 2>&1
    else
        "$bin" -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=6144 -timeout=20 \
            -artifact_prefix="$dir/crash-$name-" "$work" "tests/fuzz/corpus/$name" >"$log" 2>&1
        rc=$?
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | awk '{ s += $1 } END { print s + 0 }')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | sed 's/cov: //')
    if [ $rc -eq 0 ]; then
        pass=$((pass + 1))
        echo "fuzz $name: ok, $execs executions in ${secs}s, coverage ${cov:-?} edges"
    else
        fail=$((fail + 1))
        echo "fuzz $name: FAILED (exit $rc) after $execs executions; the input is $dir/crash-$name-*; log $log:"
        grep -A 30 -m 1 'ERROR\|==ERROR\|deadly signal\|Test unit written' "$log" | head -n 40
    fi
done
echo "$pass passed, $fail failed, 0 skipped"
[ $fail -eq 0 ]
