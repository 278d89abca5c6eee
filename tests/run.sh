#!/bin/sh
# run.sh — runs test programs and sums their closing lines.
#
# Usage: [RUN_JOBS=N] tests/run.sh PROGRAM [PROGRAM ...]
# Each program ends its output with "N passed, N failed, N skipped"; this
# script runs them all (even after a failure), then prints the totals as its
# own last line and exits 1 if any program failed or crashed.
# RUN_JOBS (default 1) runs up to N programs at once; their outputs are still
# printed in the order given. The emulator's suite runs take it: each is
# single-threaded for long stretches, so two at a time keep both cores busy.
# Each program gets a scratch directory of its own (HARNESS_TMPDIR, which
# tests/harness.h's harness_tmp reads), removed at the end.
jobs=${RUN_JOBS:-1}
case $jobs in ''|*[!0-9]*|0) echo "run.sh: RUN_JOBS must be a positive integer, not '$jobs'" >&2; exit 2 ;; esac
tmp=$(mktemp -d "${TMPDIR:-/tmp}/run.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

# report I PROG: the output of run I, its last 40 lines, and its counts
passed=0 failed=0 skipped=0 status=0
report() {
    echo "== $2"
    rc=$(cat "$tmp/$1.rc")
    tail -n 40 "$tmp/$1.out"
    last=$(tail -n 1 "$tmp/$1.out")
    p=$(printf '%s\n' "$last" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\1/p')
    if [ -z "$p" ]; then
        echo "!! $2 did not finish with a summary line (exit $rc)"
        failed=$((failed + 1))
        status=1
        return
    fi
    f=$(printf '%s\n' "$last" | sed 's/^[0-9]* passed, \([0-9]*\) failed.*/\1/')
    s=$(printf '%s\n' "$last" | sed 's/.* failed, \([0-9]*\) skipped$/\1/')
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
    if [ "$rc" -ne 0 ]; then status=1; fi
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then failed=$((failed + 1)); fi
}

# Run I is started when run I-JOBS has finished (waiting for the oldest is
# simple, and the lists are short); a run's output is printed as soon as it
# and every run before it have finished.
i=0 shown=0
for prog in "$@"; do
    i=$((i + 1))
    if [ $((i - shown)) -gt "$jobs" ]; then
        shown=$((shown + 1))
        wait "$(cat "$tmp/$shown.pid")"
        report "$shown" "$(cat "$tmp/$shown.prog")"
    fi
    printf '%s\n' "$prog" >"$tmp/$i.prog"
    mkdir "$tmp/$i.d" || exit 1
    ( HARNESS_TMPDIR="$tmp/$i.d" "$prog" >"$tmp/$i.out" 2>&1; echo $? >"$tmp/$i.rc" ) &
    echo $! >"$tmp/$i.pid"
done
while [ "$shown" -lt "$i" ]; do
    shown=$((shown + 1))
    wait "$(cat "$tmp/$shown.pid")"
    report "$shown" "$(cat "$tmp/$shown.prog")"
done
echo "$passed passed, $failed failed, $skipped skipped"
exit $status
