#!/bin/sh
# run.sh — runs test programs and sums their closing lines.
#
# Usage: tests/run.sh PROGRAM [PROGRAM ...]
# Each program ends its output with "N passed, N failed, N skipped"; this
# script runs them all (even after a failure), then prints the totals as its
# own last line and exits 1 if any program failed or crashed.
passed=0 failed=0 skipped=0 status=0
for prog in "$@"; do
    echo "== $prog"
    out=$("$prog" 2>&1)
    rc=$?
    printf '%s\n' "$out" | tail -n 40
    last=$(printf '%s\n' "$out" | tail -n 1)
    p=$(printf '%s\n' "$last" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\1/p')
    if [ -z "$p" ]; then
        echo "!! $prog did not finish with a summary line (exit $rc)"
        failed=$((failed + 1))
        status=1
        continue
    fi
    f=$(printf '%s\n' "$last" | sed 's/^[0-9]* passed, \([0-9]*\) failed.*/\1/')
    s=$(printf '%s\n' "$last" | sed 's/.* failed, \([0-9]*\) skipped$/\1/')
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
    if [ "$rc" -ne 0 ]; then status=1; fi
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then failed=$((failed + 1)); fi
done
echo "$passed passed, $failed failed, $skipped skipped"
exit $status
