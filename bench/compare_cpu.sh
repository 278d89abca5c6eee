#!/bin/sh
# compare_cpu.sh — gpudl against PyTorch on the CPU, side by side on this
# machine: builds build/bench_train (CPU), puts torch (CPU) and numpy into a
# virtual environment if they are missing, then runs our bench/train.c and
# bench/pytorch/train.py on the same nets (MLP 784-128-10 and the CNN of
# examples/cnn.c, batch 64, Adam), interleaved (ours, PyTorch, ours, ...),
# with the same thread count, REPEATS times. Prints each run's ms/step, the
# medians and the ratio ours/PyTorch (below 1: gpudl is faster), the CPU
# model and the load average before and after.
#
#   sh bench/compare_cpu.sh [net ...]        (default: mlp cnn)
#   THREADS=2 REPEATS=5 TORCH_VENV=build/torch-venv   (the defaults)
#
# Each figure is one program run's median time per step (5 timed stretches
# of ~0.5 s of steps on one random batch, after warm-up: see bench/train.c),
# not a full Fashion-MNIST epoch; both programs time the same steps.
# PyTorch runs with OMP_WAIT_POLICY=passive (libgomp otherwise spins).
set -e
cd "$(dirname "$0")/.."
nets=${*:-"mlp cnn"}
threads=${THREADS:-2}
reps=${REPEATS:-5}
ours=build/bench_train

make -s "$ours"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
runs="$reps interleaved runs per net"
. bench/torch_venv.sh
for r in $(seq "$reps"); do
    for n in $nets; do
        GPUDL_NUM_THREADS=$threads "$ours" "$n" | awk -v n="$n" '$1 == n {print $3}' >> "$tmp/ours.$n"
        OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads OMP_WAIT_POLICY=passive \
            "$py" bench/pytorch/train.py "$n" | awk -v n="$n" '$1 == n {print $3}' >> "$tmp/torch.$n"
        a=$(tail -1 "$tmp/ours.$n")
        b=$(tail -1 "$tmp/torch.$n")
        awk -v a="$a" -v b="$b" 'BEGIN { print a / b }' >> "$tmp/ratio.$n"
        echo "run $r $n: ours $a ms/step, pytorch $b ms/step, ratio $(tail -1 "$tmp/ratio.$n") (load $(cut -d' ' -f1 /proc/loadavg))"
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
median() { sort -g "$1" | awk '{v[NR] = $1} END {print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo
echo "net     ours ms/step  pytorch ms/step  ours/pytorch  median of the runs' ratios   (medians of $reps runs)"
for n in $nets; do
    awk -v n="$n" -v a="$(median "$tmp/ours.$n")" -v b="$(median "$tmp/torch.$n")" -v r="$(median "$tmp/ratio.$n")" \
        'BEGIN { printf "%-6s %13.3f %16.3f %13.2f %27.2f\n", n, a, b, a / b, r }'
done
echo "(a run's ratio compares two programs run one after the other: on a busy machine it is the steadier figure)"
