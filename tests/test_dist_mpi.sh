#!/bin/sh
# test_dist_mpi.sh — runs build/test_dist_mpi as two MPI ranks (mpirun -np 2)
# and sums both ranks' closing lines into one, for tests/run.sh. A hang
# ends at the timeout as a failure.
# Usage: tests/test_dist_mpi.sh [BUILD_DIR] (default build)
b=${1:-${GPUDL_BUILD:-build}}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
root=
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
# shellcheck disable=SC2086
timeout 300 mpirun --oversubscribe $root -np 2 sh -c "\"$b/test_dist_mpi\" >\"$tmp/rank.\$OMPI_COMM_WORLD_RANK\" 2>&1"
rc=$?
passed=0 failed=0 skipped=0
for r in 0 1; do
    echo "-- rank $r"
    if [ ! -f "$tmp/rank.$r" ]; then
        echo "!! rank $r wrote nothing"
        failed=$((failed + 1))
        continue
    fi
    tail -n 20 "$tmp/rank.$r"
    last=$(tail -n 1 "$tmp/rank.$r")
    p=$(printf '%s\n' "$last" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\1/p')
    if [ -z "$p" ]; then
        echo "!! rank $r did not finish with a summary line"
        failed=$((failed + 1))
        continue
    fi
    passed=$((passed + p))
    failed=$((failed + $(printf '%s\n' "$last" | sed 's/^[0-9]* passed, \([0-9]*\) failed.*/\1/')))
    skipped=$((skipped + $(printf '%s\n' "$last" | sed 's/.* failed, \([0-9]*\) skipped$/\1/')))
done
[ $rc -ne 0 ] && [ $failed -eq 0 ] && { echo "!! mpirun exited $rc"; failed=1; }
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
