#!/bin/sh
# tools/gpu_session.sh — every check that needs a real NVIDIA GPU, as one
# command for a session that is lent one (see README "Testing on a GPU").
# Builds for sm_90 (make test-cuda), then, each step logged:
#   1. the GPU suite (make test-cuda) on the real device
#   2. the same suite under compute-sanitizer memcheck, and racecheck/synccheck
#      on the kernel suites (the whole suite under racecheck takes too long)
#   3. ours against PyTorch eager on the same GPU (bench/compare.sh; PyTorch
#      must be installed there)
#   4. the examples on the GPU: device query, the NVML monitor, the MLP,
#      the CPU-against-GPU table (examples/cpu_vs_gpu.c), and Fashion-MNIST
#      to 92 % end to end, ours (bf16 and f32) and PyTorch's, 3 times each
#      (bench/fmnist92.c; needs Fashion-MNIST: copy it into ./data and carry it)
#   5. NCCL (tests/test_dist_nccl.c built by nvcc, -lnccl): the collectives
#      and DDP of CUDA tensors through NCCL over one rank, the rendezvous's
#      errors; with two GPUs also two ranks started torchrun-style; then
#      examples/ddp.c on one GPU (NCCL over one rank; needs the data)
# Logs go to $OUT (default ./gpu_out): summary.txt plus one log per step,
# at most 8 files. A failing step is reported and the next one still runs;
# the exit status is the number of failed steps.
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
S="$OUT/summary.txt"
: >"$S"
fails=0
step() { # name log command...
    name=$1 log=$2
    shift 2
    t0=$(date +%s)
    if "$@" >"$OUT/$log" 2>&1; then r=ok; else r="FAILED (exit $?)"; fails=$((fails + 1)); fi
    echo "$name: $r in $(($(date +%s) - t0)) s; last line: $(tail -n 1 "$OUT/$log")" | tee -a "$S"
}
{
    date -u
    git log --oneline -1 2>/dev/null
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
    nvcc --version 2>&1 | tail -n 1
    lscpu | grep 'Model name'
} >>"$S"
step "build + make test-cuda" test_cuda.log make test-cuda
if command -v compute-sanitizer >/dev/null 2>&1; then
    step "memcheck (whole suite)" sanitizer.log compute-sanitizer --tool memcheck --leak-check full --error-exitcode 1 build/test_cuda
    step "racecheck (kernel suites)" racecheck.log compute-sanitizer --tool racecheck --error-exitcode 1 build/test_cuda -s ops -s kernel_paths
    step "synccheck (kernel suites)" synccheck.log compute-sanitizer --tool synccheck --error-exitcode 1 build/test_cuda -s ops -s kernel_paths
else
    echo "compute-sanitizer: not found" | tee -a "$S"
    fails=$((fails + 1))
fi
step "bench/compare.sh vs PyTorch" compare.log sh -c 'make cuda && sh bench/compare.sh'
step "examples on the GPU" examples.log sh -c 'build/cuda_device_query && build/cuda_gpu_monitor --count 3 && build/cuda_mnist_mlp --device cuda --epochs 1 && build/cuda_cpu_vs_gpu &&
    for r in 1 2 3; do build/cuda_fmnist92 --amp bf16; build/cuda_fmnist92; python3 bench/pytorch/fmnist92.py --amp;
    python3 bench/pytorch/fmnist92.py; done'
step "NCCL: one rank per GPU" nccl.log sh -c 'make build/test_dist_nccl_cuda build/cuda_ddp &&
    GPUDL_NCCL_TEST=build/test_dist_nccl_cuda GPUDL_NCCL_RANKS=$(nvidia-smi -L | wc -l) sh tests/test_dist_nccl.sh &&
    build/cuda_ddp --epochs 1'
echo "failed steps: $fails" | tee -a "$S"
exit "$fails"
