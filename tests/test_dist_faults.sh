#!/bin/sh
# test_dist_faults.sh — build/dist_faults's scenarios under mpirun (see
# tests/dist_faults.c): a rank that stalls makes the others fail with a
# timeout error, not hang; a rank killed mid-run ends the job; a job
# checkpointed on 2 ranks resumes on 1 (the sampler re-shards) and ends
# where one process trained from the start ends. Every mpirun runs under
# `timeout`, so a hang fails the test instead of the CI job.
# Usage: tests/test_dist_faults.sh [BUILD_DIR] (default build)
b=${1:-${GPUDL_BUILD:-build}}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
root=
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
# run NAME BOUND NP ARGS...: mpirun under timeout BOUND; sets $rc, $secs, $out
run() {
    name=$1 bound=$2 np=$3
    shift 3
    t0=$(date +%s)
    # shellcheck disable=SC2086
    out=$(timeout -k 5 "$bound" mpirun --oversubscribe $root -np "$np" "$b/dist_faults" "$@" 2>&1)
    rc=$?
    secs=$(($(date +%s) - t0))
    printf '%s\n' "$out" | grep -E '^(ok|FAIL|rank 0.s error)' | sed "s/^/   [$name] /"
    # mpirun's own status is 137 when a rank died of SIGKILL: a hang is told by the time
    if [ "$rc" -eq 124 ] || [ "$secs" -ge "$bound" ]; then bad "$name: still running after $bound s: it hung"; rc=124; return 1; fi
    n=$(printf '%s\n' "$out" | grep -c '^FAIL')
    if [ "$n" -ne 0 ]; then bad "$name: $n check(s) failed"; return 1; fi
    return 0
}
# stall: rank 0 reports the timeout (2 s) and exits non-zero; the job ends
if GPUDL_DIST_TIMEOUT=2 run stall 40 2 stall; then
    c=$(printf '%s\n' "$out" | grep -c '^ok: rank 0')
    if [ "$rc" -ne 0 ] && [ "$c" -eq 4 ] && [ "$secs" -lt 30 ]; then ok "stall: rank 0 timed out with the error; the job ended in $secs s, exit $rc"
    else bad "stall: exit $rc after $secs s, $c of rank 0's 4 checks passed"; printf '%s\n' "$out" | tail -n 20; fi
fi
if GPUDL_DIST_TIMEOUT=1 run stall3 40 3 stall3; then
    c=$(printf '%s\n' "$out" | grep -c '^ok: rank [01]')
    if [ "$rc" -ne 0 ] && [ "$c" -eq 5 ] && [ "$secs" -lt 30 ]; then ok "stall3: ranks 0 and 1 timed out, rank 2 named; ended in $secs s"
    else bad "stall3: exit $rc after $secs s, $c of 5 checks passed"; printf '%s\n' "$out" | tail -n 20; fi
fi
# elastic restart at an epoch's end: 2 ranks x 8 for epoch 1, then 1 rank x 16
if run train 60 2 train "$tmp/end" && [ "$rc" -eq 0 ] && [ -f "$tmp/end/gdl_fit.safetensors" ]; then
    ok "train: epoch 1 on 2 ranks, checkpoint saved"
    if run resume-end 60 1 resume "$tmp/end" "epoch 1, batch 6 of 6, 2 ranks x batch 8" && [ "$rc" -eq 0 ]; then ok "resume-end: 1 rank resumed epoch 2 and equals one process"
    else bad "resume-end: exit $rc"; printf '%s\n' "$out" | tail -n 20; fi
else
    bad "train: exit $rc"; printf '%s\n' "$out" | tail -n 20
fi
# a rank killed mid-run ends the job; then elastic restart mid-epoch from its last checkpoint
GPUDL_DIST_TIMEOUT=5 run kill 40 2 kill "$tmp/mid"
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$secs" -lt 30 ] && [ -f "$tmp/mid/gdl_fit.safetensors" ]; then
    ok "kill: rank 1 killed; the job ended in $secs s (exit $rc), the last checkpoint stays"
    if run resume-mid 60 1 resume "$tmp/mid" "epoch 2, batch 2 of 6, 2 ranks x batch 8" && [ "$rc" -eq 0 ]; then ok "resume-mid: 1 rank resumed mid-epoch 2 and equals one process"
    else bad "resume-mid: exit $rc"; printf '%s\n' "$out" | tail -n 20; fi
else
    bad "kill: exit $rc after $secs s"; printf '%s\n' "$out" | tail -n 20
fi
echo "$pass passed, $fail failed, 0 skipped"
[ $fail -eq 0 ]
