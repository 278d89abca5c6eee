#!/bin/sh
# test_dist_k8s.sh — the Kubernetes controllers of examples/k8s, simulated: two local processes of
# examples/cluster/train.c, each started with exactly the variables its controller gives a pod (no
# cluster: the pods' addresses are 127.0.0.1), and the weights rank 0 saves compared with one process
# at twice the batch (to 1e-6, as the MPI tests compare):
#   Indexed Job + headless Service  JOB_COMPLETION_INDEX, and from the manifest WORLD_SIZE, MASTER_ADDR,
#                                   MASTER_PORT (NCCL on one emulated GPU per pod, the id over TCP)
#   Kubeflow PyTorchJob             MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, PYTHONUNBUFFERED and
#                                   PET_NPROC_PER_NODE, PET_NNODES, as its operator sets them
#   Kubeflow PET_* (TrainJob)       PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR,
#                                   PET_MASTER_PORT
#   MPIJob                          the launcher's mpirun with the operator's hostfile variable
#                                   (OMPI_MCA_orte_default_hostfile): the MPI build, CPU
# Then the manifests themselves are checked (tests/slurm/check_manifests.sh).
# Usage: tests/test_dist_k8s.sh [BUILD_DIR] (default build)
b=${1:-${GPUDL_BUILD:-build}}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
pass=0 fail=0 skipped=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
args="--epochs 2 --samples 64"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
         echo $((20000 + ($$ + $1) % 20000)); }

# one process on each kind of device (the emulated GPU's GEMM rounds otherwise than the CPU's)
"$b/cluster_train" $args --batch 16 --out "$tmp/one.safetensors" >"$tmp/one.log" 2>&1 || bad "one process: $(tail -n 2 "$tmp/one.log")"
GPUDL_EMU_DEVICES=1 GPUDL_EMU_QUIET=1 "$b/emu_cluster_train" $args --batch 16 --out "$tmp/one_gpu.safetensors" \
    >"$tmp/one_gpu.log" 2>&1 || bad "one process on an emulated GPU: $(tail -n 2 "$tmp/one_gpu.log")"

# judge NAME LAUNCHER REFERENCE: rank 0's weights against one process; the launcher rank 0 reported
judge() {
    if r=$("$b/same_weights" "$tmp/$1.safetensors" "$tmp/$3.safetensors" 1e-6) &&
       grep -q "train: 2 processes ($2)" "$tmp/$1.0"; then
        ok "$1: 2 pods x 8 ($2) equal one process x 16: $r"
    else
        bad "$1: ${r:-no weights}"; tail -n 5 "$tmp/$1.0" "$tmp/$1.1"
    fi
}

export GPUDL_EMU_DEVICES=1 GPUDL_EMU_QUIET=1 GPUDL_DIST_TIMEOUT=60
p=$(port 1)
for r in 0 1; do
    env JOB_COMPLETION_INDEX=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p \
        timeout 120 "$b/emu_cluster_train" $args --batch 8 --out "$tmp/indexed-job.safetensors" >"$tmp/indexed-job.$r" 2>&1 &
done
wait
judge indexed-job k8s-indexed-job one_gpu

p=$(port 2)
for r in 0 1; do
    env MASTER_ADDR=127.0.0.1 MASTER_PORT=$p WORLD_SIZE=2 RANK=$r PYTHONUNBUFFERED=1 PET_NPROC_PER_NODE=1 PET_NNODES=2 \
        timeout 120 "$b/emu_cluster_train" $args --batch 8 --out "$tmp/pytorchjob.safetensors" >"$tmp/pytorchjob.$r" 2>&1 &
done
wait
judge pytorchjob pytorchjob one_gpu

p=$(port 3)
for r in 0 1; do
    env PET_NNODES=2 PET_NPROC_PER_NODE=1 PET_NODE_RANK=$r PET_MASTER_ADDR=127.0.0.1 PET_MASTER_PORT=$p \
        timeout 120 "$b/emu_cluster_train" $args --batch 8 --out "$tmp/trainjob.safetensors" >"$tmp/trainjob.$r" 2>&1 &
done
wait
judge trainjob kubeflow-pet one_gpu
unset GPUDL_EMU_DEVICES GPUDL_EMU_QUIET GPUDL_DIST_TIMEOUT

if [ -x "$b/mpi_cluster_train" ] && command -v mpirun >/dev/null 2>&1; then
    root=
    [ "$(id -u)" = 0 ] && root=--allow-run-as-root
    echo "localhost slots=2" >"$tmp/hostfile"
    # the operator's launcher: mpirun with the hostfile it mounts, named by OMPI_MCA_orte_default_hostfile
    OMPI_MCA_orte_default_hostfile="$tmp/hostfile" timeout 120 mpirun $root -np 2 \
        sh -c "exec \"$b/mpi_cluster_train\" $args --batch 8 --out \"$tmp/mpijob.safetensors\" >\"$tmp/mpijob.\$OMPI_COMM_WORLD_RANK\" 2>&1"
    judge mpijob mpirun one
else
    echo "SKIPPED: the MPIJob: no MPI build or mpirun"
    skipped=$((skipped + 1))
fi

if out=$(sh tests/slurm/check_manifests.sh 2>&1); then ok "the manifests of examples/k8s: $(printf '%s\n' "$out" | tail -n 1)"
else bad "the manifests of examples/k8s:"; printf '%s\n' "$out"; fi
echo "$pass passed, $fail failed, $skipped skipped"
[ $fail -eq 0 ]
