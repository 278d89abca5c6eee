#!/bin/sh
# test_slurm.sh — gpudl under a real Slurm: starts the one-node cluster of tests/slurm/cluster.sh once
# (and stops it on every exit: no daemon is left behind), then
#   1. gdl_hostlist_host against `scontrol show hostnames` on good lists (the same hosts, in order) and
#      bad ones (both refuse);
#   2. examples/cluster/train_mpi.sbatch (2 MPI ranks, mpirun inside the allocation) with sbatch --wait:
#      the weights equal one process's at twice the batch (to 1e-6, as the MPI tests compare);
#   2b. the MPI build started by `srun --mpi=pmix -n 2` (no mpirun): the same;
#   3. examples/cluster/train_nccl.sbatch (2 tasks by srun, NCCL on the emulated GPUs, the id over TCP
#      to the first host of the node list): the same;
#   4. preemption: train_nccl.sbatch again with a checkpoint directory; once training runs, `scancel
#      --signal=USR1` reaches both tasks; they save a checkpoint and exit 75, the script requeues the
#      job, the requeued job resumes and finishes: its weights equal run 3's bit for bit; then the same
#      with train_mpi.sbatch (`scancel --batch --signal=USR1`: the script hands it to mpirun, which
#      hands it to the ranks), against run 2's.
# Where the cluster cannot start for want of root or of Slurm's programs: one loud SKIPPED line.
# Usage: tests/slurm/test_slurm.sh [BUILD_DIR] (default build): needs BUILD_DIR/cluster_train,
# mpi_cluster_train, emu_cluster_train, same_weights, hostnames
b=${1:-${GPUDL_BUILD:-build}}
case "$b" in /*) ;; *) b=$PWD/$b ;; esac
here=$(cd "$(dirname "$0")" && pwd)
ex=$(cd "$here/../../examples/cluster" && pwd)
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
PATH=$PATH:/usr/sbin:/sbin

if ! why=$(sh "$here/cluster.sh" check); then
    echo "SKIPPED: the Slurm cluster tests did not run: $why"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
tmp=$(mktemp -d /tmp/gpudl-slurm.XXXXXX) || exit 1
chmod 755 "$tmp"
trap 'sh "$here/cluster.sh" stop "$tmp/cluster" || echo "FAIL: processes of the cluster were left running"; rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM HUP
t0=$(date +%s)
if ! sh "$here/cluster.sh" start "$tmp/cluster"; then
    echo "FAIL: the Slurm cluster did not start (as root, with Slurm installed)"
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
fi
echo "   (the cluster started in $(($(date +%s) - t0)) s)"
export SLURM_CONF="$tmp/cluster/slurm.conf"

# 1. host lists
# (several bracket groups in one name, 'a[1-2]b[7,9]c': Debian's scontrol 22.05 calls them an invalid
# host list; gpudl expands them, the last group fastest, which tests/test_dist.c checks)
for l in 'node[01-04,07],gpu-a[1-2]' 'n[098-101]' 'x,y[3],z' 'n[8-11]' 'rack1-n[1-3,10]'; do
    want=$(scontrol show hostnames "$l" 2>&1)
    got=$("$b/hostnames" "$l" 2>&1)
    if [ "$want" = "$got" ]; then ok "host list '$l': the hosts scontrol shows"
    else bad "host list '$l': scontrol shows '$(echo $want)', gpudl '$(echo $got)'"; fi
done
# (scontrol exits 0 on a bad list: its "Invalid" message says it refused)
for l in 'node[3-1]' 'node[1,,2]' 'node[01-04'; do
    sc=$(scontrol show hostnames "$l" 2>&1)
    if "$b/hostnames" "$l" >/dev/null 2>&1; then bad "host list '$l': gpudl took it"
    elif printf '%s\n' "$sc" | grep -q Invalid; then ok "host list '$l': refused, as scontrol refuses it"
    else echo "   (host list '$l': gpudl refuses it; scontrol 22.05 shows '$(echo $sc)')"; fi
done

# the one process the jobs are checked against: batch 16 = 2 ranks x 8
args="--epochs 3 --samples 96"
# examples/cluster's sbatch files ask for what a real cluster has (nodes, GPUs, cores, a time limit); this
# one-node cluster without GPU gres overrides those lines on sbatch's command line, and mpirun's flags for
# a root container through the environment train_mpi.sbatch reads
nccl_here="--nodes=1 --ntasks-per-node=2 --gpus-per-task=0 --cpus-per-task=1 --time=10"
mpi_here="--nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --time=10"
GPUDL_MPIRUN_FLAGS="--oversubscribe"
[ "$(id -u)" = 0 ] && GPUDL_MPIRUN_FLAGS="$GPUDL_MPIRUN_FLAGS --allow-run-as-root"
export GPUDL_MPIRUN_FLAGS
"$b/cluster_train" $args --batch-size 16 --out "$tmp/one.safetensors" >"$tmp/one.log" 2>&1 ||
    { bad "one process: $(tail -n 3 "$tmp/one.log")"; }
# and on an emulated GPU, for the NCCL jobs (its GEMM rounds otherwise than the CPU's)
GPUDL_EMU_DEVICES=1 GPUDL_EMU_QUIET=1 "$b/emu_cluster_train" $args --batch-size 16 --out "$tmp/one_gpu.safetensors" \
    >"$tmp/one_gpu.log" 2>&1 || { bad "one process on an emulated GPU: $(tail -n 3 "$tmp/one_gpu.log")"; }

# job_wait ID LIMIT: until the job has ended (requeues included); prints its state
job_wait() {
    i=0 requeued_at=
    while [ $i -lt $(($2 * 4)) ]; do
        st=$(scontrol -o show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
        case "$st" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED)
            echo "$st"; return 0 ;;
        PENDING)
            # a requeued job waits for its begin time (Slurm holds it back a while): the test's queue is
            # empty, so let it start sooner, but not within the second its last run was killed in: slurmd
            # revokes the job's credential then, and refuses a new one issued in the same second ("Killing
            # non-startable batch JobId: Job credential revoked" ends the job FAILED). Two seconds after
            # the requeue is first seen, the new credential is newer than the revocation.
            if scontrol -o show job "$1" 2>/dev/null | grep -q 'Restarts=[1-9]'; then
                now=$(date +%s)
                [ -n "$requeued_at" ] || requeued_at=$now
                [ "$now" -ge $((requeued_at + 2)) ] && scontrol update JobId="$1" StartTime=now >/dev/null 2>&1
            fi ;;
        esac
        sleep 0.25
        i=$((i + 1))
    done
    echo "STILL-${st:-UNKNOWN}"
}

# 2. MPI through mpirun inside the allocation
if [ -x "$b/mpi_cluster_train" ]; then
    mkdir -p "$tmp/mpi"
    t0=$(date +%s)
    # shellcheck disable=SC2086 # mpi_here, args: options, split on purpose
    (cd "$tmp/mpi" && timeout 180 sbatch --wait $mpi_here -o "$tmp/mpi/job.out" "$ex/train_mpi.sbatch" "$b/mpi_cluster_train" \
        $args --batch-size 8 --out "$tmp/mpi/w.safetensors" >/dev/null 2>"$tmp/mpi/sbatch.err")
    rc=$?
    if [ $rc -eq 0 ] && r=$("$b/same_weights" "$tmp/mpi/w.safetensors" "$tmp/one.safetensors" 1e-6); then
        ok "train_mpi.sbatch (2 MPI ranks x 8, sbatch --wait, $(($(date +%s) - t0)) s) equals one process x 16: $r"
    else
        bad "train_mpi.sbatch: sbatch exit $rc; ${r:-}"; tail -n 15 "$tmp/mpi/job.out" "$tmp/mpi/sbatch.err"
    fi
else
    echo "SKIPPED: train_mpi.sbatch: no MPI build (mpicc)"
fi

# 2b. the same MPI build started by srun itself through PMIx (docs/clusters.md says why it works with
# Debian's Slurm and OpenMPI, and why pmi2 does not): the ranks are a job step of their own
if [ -x "$b/mpi_cluster_train" ] && srun --mpi=list 2>&1 | grep -q pmix; then
    mkdir -p "$tmp/pmix"
    t0=$(date +%s)
    (cd "$tmp/pmix" && timeout 120 srun --mpi=pmix -n 2 "$b/mpi_cluster_train" $args --batch-size 8 \
        --out "$tmp/pmix/w.safetensors" >"$tmp/pmix/out.log" 2>&1)
    rc=$?
    if [ $rc -eq 0 ] && r=$("$b/same_weights" "$tmp/pmix/w.safetensors" "$tmp/one.safetensors" 1e-6); then
        ok "srun --mpi=pmix -n 2 (MPI build, $(($(date +%s) - t0)) s) equals one process x 16: $r"
    else
        bad "srun --mpi=pmix -n 2: exit $rc; ${r:-}"; tail -n 15 "$tmp/pmix/out.log"
    fi
elif [ -x "$b/mpi_cluster_train" ]; then
    echo "SKIPPED: srun --mpi=pmix: this Slurm offers no pmix plugin ($(srun --mpi=list 2>&1 | tr '\n' ' '))"
fi

# 3. NCCL on the emulated GPUs, one task per GPU by srun
export GPUDL_EMU_DEVICES=2 GPUDL_EMU_QUIET=1 GPUDL_DIST_TIMEOUT=60
mkdir -p "$tmp/nccl"
t0=$(date +%s)
# shellcheck disable=SC2086 # nccl_here, args: options, split on purpose
(cd "$tmp/nccl" && GPUDL_LOG_DIR="$tmp/nccl" timeout 180 sbatch --wait $nccl_here -o "$tmp/nccl/job.out" "$ex/train_nccl.sbatch" \
    "$b/emu_cluster_train" $args --batch-size 8 --out "$tmp/nccl/w.safetensors" >/dev/null 2>"$tmp/nccl/sbatch.err")
rc=$?
if [ $rc -eq 0 ] && r=$("$b/same_weights" "$tmp/nccl/w.safetensors" "$tmp/one_gpu.safetensors" 1e-6); then
    ok "train_nccl.sbatch (2 srun tasks x 8 on emulated GPUs, NCCL, $(($(date +%s) - t0)) s) equals one process x 16: $r"
    grep -h 'train: 2 processes' "$tmp/nccl/rank-0.log" | sed 's/^/   /'
else
    bad "train_nccl.sbatch: sbatch exit $rc; ${r:-}"; tail -n 8 "$tmp/nccl/job.out" "$tmp/nccl/sbatch.err" "$tmp/nccl"/rank-*.log
fi

# 4. signal -> checkpoint -> requeue -> resume, bit for bit: preempt NAME SCRIPT PROGRAM LOG REFERENCE
# SBATCH_OPTIONS SCANCEL_OPTION... (LOG: where rank 0 prints; SBATCH_OPTIONS: this cluster's overrides)
preempt() {
    name=$1 script=$2 prog=$3 logf=$4 ref=$5 here_opts=$6
    shift 6
    mkdir -p "$tmp/$name"
    t0=$(date +%s)
    # shellcheck disable=SC2086 # here_opts, args: options, split on purpose
    id=$(cd "$tmp/$name" && GPUDL_LOG_DIR="$tmp/$name" sbatch --parsable $here_opts -o "$tmp/$name/job.out" "$ex/$script" \
        "$prog" $args --batch-size 8 --ckpt "$tmp/$name/ckpt" --pause-ms 150 --out "$tmp/$name/w.safetensors")
    i=0
    while [ $i -lt 240 ] && ! grep -q '^train: training' "$tmp/$name/$logf" 2>/dev/null; do sleep 0.25; i=$((i + 1)); done
    sleep 1
    scancel "$@" --signal=USR1 "$id"
    st=$(job_wait "$id" 180)
    log=$(cat "$tmp/$name/$logf" 2>/dev/null)
    r=
    if [ "$st" = COMPLETED ] && printf '%s\n' "$log" | grep -q 'preempted by signal 10 at step' &&
       printf '%s\n' "$log" | grep -q '^resuming from' && grep -q 'exited 75' "$tmp/$name/job.out" &&
       r=$("$b/same_weights" "$tmp/$name/w.safetensors" "$ref"); then
        ok "$script, scancel $* --signal=USR1: checkpoint, exit 75, scontrol requeue, resumed ($(printf '%s\n' "$log" | grep -o 'at step [0-9]*' | head -n 1)); $(($(date +%s) - t0)) s; the final weights equal the uninterrupted run's: $r"
    else
        bad "$script, preemption: job $id ended $st; ${r:-}"
        cat "$tmp/$name/job.out"; tail -n 12 "$tmp/$name"/rank-*.log 2>/dev/null
        echo "-- scontrol show job $id"; scontrol -o show job "$id" 2>&1
        echo "-- slurmctld.log, job $id"; grep -E "JobId=$id([^0-9]|\$)|job $id([^0-9]|\$)" "$tmp/cluster/slurmctld.log" | tail -n 25
    fi
}
# the tasks of srun's step get the signal themselves
preempt pre-nccl train_nccl.sbatch "$b/emu_cluster_train" rank-0.log "$tmp/nccl/w.safetensors" "$nccl_here"
unset GPUDL_EMU_DEVICES GPUDL_EMU_QUIET GPUDL_DIST_TIMEOUT
# mpirun's ranks are no step of their own: the batch script gets it (--batch) and hands it to mpirun
if [ -x "$b/mpi_cluster_train" ]; then
    preempt pre-mpi train_mpi.sbatch "$b/mpi_cluster_train" job.out "$tmp/mpi/w.safetensors" "$mpi_here" --batch
fi

t0=$(date +%s)
if out=$(sh "$here/cluster.sh" stop "$tmp/cluster"); then ok "the cluster stopped in $(($(date +%s) - t0)) s, no process of it left"
else bad "stopping the cluster: $out"; fi

echo "$pass passed, $fail failed, 0 skipped"
[ $fail -eq 0 ]
