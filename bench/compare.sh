#!/bin/sh
# compare.sh — ours and PyTorch on the same machine, same nets, same run:
# prints both tables and the ratio of time per step (ours/PyTorch, below 1
# means gpudl is faster). Run from the repository root on the GPU machine
# after `make cuda` (or on the CPU with the CPU build):
#   sh bench/compare.sh [net ...]
# Nets: mlp cnn fc10 fc50 wide air, and the modes NET-amp (bf16 autocast;
# PyTorch's with channels_last), NET-graph (whole step as a CUDA graph) and
# NET-amp-graph (both): see bench/train.c and bench/pytorch/train.py. A net
# or mode one side lacks shows "-" in its column; the other is still taken.
# Each side prints a utilisation line under each net (FLOPs of a step, GFLOP/s,
# the fraction of the GPU's datasheet peak for the net's dtype: ours for both).
set -e
nets=${*:-"mlp cnn fc10 fc50 wide mlp-graph cnn-graph cnn-amp cnn-amp-graph air air-amp air-amp-graph"}
ours=${BENCH_TRAIN:-build/cuda_bench_train}
[ -x "$ours" ] || ours=build/bench_train
py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for n in $nets; do
    # one net per run, so that a net ours lacks does not stop the others
    "$ours" "$n" >"$tmp/one" 2>&1 || echo "ours: $(grep -m 1 'bench_train:' "$tmp/one")" >>"$tmp/missing"
    cat "$tmp/one"
    awk -v n="$n" '$1 == n' "$tmp/one" >>"$tmp/ours"
    cat "$tmp/one" >>"$tmp/all"
done
# our device's peaks (gdl_flops_line's "(P GFLOP/s, f32 dense" / "bf16 dense"; on the CPU the measured one,
# for both) for the twin's utilisation lines, which count a step with FlopCounterMode
peak() { sed -n "s/.* of peak (\([0-9.]*\) GFLOP\/s, \($1 dense\|[0-9]* thread\).*/\1/p" "$tmp/all" | head -n 1; }
# shellcheck disable=SC2086
BENCH_PEAK_GFLOPS=$(peak f32) BENCH_PEAK_GFLOPS_BF16=$(peak bf16) "$py" bench/pytorch/train.py $nets | tee "$tmp/torch"
echo
[ -f "$tmp/missing" ] && cat "$tmp/missing"
echo "net            ours ms/step  pytorch ms/step  ours/pytorch"
for n in $nets; do
    a=$(awk -v n="$n" '$1 == n {print $3}' "$tmp/ours")
    b=$(awk -v n="$n" '$1 == n && $2 != "skipped:" {print $3}' "$tmp/torch")
    awk -v n="$n" -v a="$a" -v b="$b" 'BEGIN {
        printf "%-14s %13s %16s %13s\n", n, a == "" ? "-" : sprintf("%.3f", a), b == "" ? "-" : sprintf("%.3f", b),
               (a == "" || b == "") ? "-" : sprintf("%.2f", a / b) }'
done
