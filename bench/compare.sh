#!/bin/sh
# compare.sh — ours and PyTorch's eager mode on the same machine, same nets,
# same run: prints both tables and the ratio of time per step (ours/PyTorch,
# below 1 means gpudl is faster). Run from the repository root on the GPU
# machine after `make cuda` (or on the CPU with the CPU build):
#   sh bench/compare.sh [net ...]
set -e
nets=${*:-"mlp cnn fc10 fc50 wide"}
ours=${BENCH_TRAIN:-build/cuda_bench_train}
[ -x "$ours" ] || ours=build/bench_train
tmp=$(mktemp -d)
# shellcheck disable=SC2086
"$ours" $nets | tee "$tmp/ours"
# shellcheck disable=SC2086
python3 bench/pytorch/train.py $nets | tee "$tmp/torch"
echo
echo "net     ours ms/step  pytorch ms/step  ours/pytorch"
for n in $nets; do
    a=$(awk -v n="$n" '$1 == n {print $3}' "$tmp/ours")
    b=$(awk -v n="$n" '$1 == n {print $3}' "$tmp/torch")
    awk -v n="$n" -v a="$a" -v b="$b" 'BEGIN { printf "%-6s %13.3f %16.3f %13.2f\n", n, a, b, a / b }'
done
rm -rf "$tmp"
