#!/bin/sh
# test_dist_nccl.sh — build/emu_test_dist_nccl (NCCL on the CUDA emulator):
# once alone, then as two ranks started torchrun-style (RANK, WORLD_SIZE,
# LOCAL_RANK, MASTER_ADDR, MASTER_PORT; no MPI), then, where it was built,
# build/emu_test_dist_nccl_mpi under mpirun -np 2. Every rank has two
# emulated devices and takes cuda:(local rank). Sums the closing lines of
# every run into one, for tests/run.sh; a hang ends at the timeout as a failure.
# On a real GPU: GPUDL_NCCL_TEST=build/test_dist_nccl_cuda, and
# GPUDL_NCCL_RANKS=1 where the machine has one GPU (no two-rank run).
# Usage: tests/test_dist_nccl.sh [BUILD_DIR] (default build)
b=${1:-${GPUDL_BUILD:-build}}
prog=${GPUDL_NCCL_TEST:-$b/emu_test_dist_nccl}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
export GPUDL_EMU_DEVICES=2 GPUDL_EMU_QUIET=1
passed=0 failed=0 skipped=0

# sums the summary line of file $1 (a run named $2) into the totals
tally() {
    echo "-- $2"
    if [ ! -f "$1" ]; then
        echo "!! $2 wrote nothing"
        failed=$((failed + 1))
        return
    fi
    tail -n 12 "$1"
    last=$(tail -n 1 "$1")
    p=$(printf '%s\n' "$last" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\1/p')
    if [ -z "$p" ]; then
        echo "!! $2 did not finish with a summary line"
        failed=$((failed + 1))
        return
    fi
    passed=$((passed + p))
    failed=$((failed + $(printf '%s\n' "$last" | sed 's/^[0-9]* passed, \([0-9]*\) failed.*/\1/')))
    skipped=$((skipped + $(printf '%s\n' "$last" | sed 's/.* failed, \([0-9]*\) skipped$/\1/')))
}

# one process
timeout 120 "$prog" >"$tmp/alone" 2>&1
tally "$tmp/alone" "one process"

# two ranks, torchrun-style: a port the kernel picks per run, a token of the run's own
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
       echo $((20000 + $$ % 20000)))
if [ "${GPUDL_NCCL_RANKS:-2}" -ge 2 ]; then
    for r in 0 1; do
        RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port GPUDL_DIST_TIMEOUT=30 \
            GPUDL_DIST_TOKEN="test-$$-$port" \
            timeout 120 "$prog" >"$tmp/rank.$r" 2>&1 &
    done
    wait
    for r in 0 1; do tally "$tmp/rank.$r" "torchrun-style rank $r"; done
fi

# two ranks under mpirun
if [ -z "${GPUDL_NCCL_TEST:-}" ] && [ -x "$b/emu_test_dist_nccl_mpi" ] && command -v mpirun >/dev/null 2>&1; then
    root=
    [ "$(id -u)" = 0 ] && root=--allow-run-as-root
    # shellcheck disable=SC2086
    timeout 180 mpirun --oversubscribe $root -np 2 -x GPUDL_EMU_DEVICES -x GPUDL_EMU_QUIET \
        sh -c "\"$b/emu_test_dist_nccl_mpi\" >\"$tmp/mpi.\$OMPI_COMM_WORLD_RANK\" 2>&1"
    for r in 0 1; do tally "$tmp/mpi.$r" "mpirun rank $r"; done
    # rank 0 cannot make NCCL's id: every rank's gdl_dist_init fails, none hangs
    # shellcheck disable=SC2086
    timeout 60 mpirun --oversubscribe $root -np 2 -x GPUDL_EMU_DEVICES -x GPUDL_EMU_QUIET -x GPUDL_DIST_TIMEOUT=5 \
        -x GPUDL_TEST_INIT_FAILS=1 sh -c "[ \$OMPI_COMM_WORLD_RANK = 0 ] && export GPUDL_EMU_NCCL_FAIL_ID=1;
        \"$b/emu_test_dist_nccl_mpi\" >\"$tmp/idfail.\$OMPI_COMM_WORLD_RANK\" 2>&1" 2>/dev/null
    for r in 0 1; do tally "$tmp/idfail.$r" "mpirun, rank 0 without NCCL's id: rank $r"; done
elif [ -z "${GPUDL_NCCL_TEST:-}" ]; then
    echo "SKIPPED: the MPI build or mpirun is missing: NCCL's id over MPI was not tested"
    skipped=$((skipped + 1))
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
