#!/bin/sh
# compare_speedrun.sh — the Fashion-MNIST speedrun, gpudl against PyTorch on the CPU, side by side on
# this machine: builds build/speedrun, puts torch and numpy into a virtual environment if they are
# missing (as compare_cpu.sh), then for each seed runs examples/speedrun.c and
# bench/pytorch/speedrun.py (the same net and recipe), interleaved (ours, PyTorch, ours, ...), with the
# same thread count. Prints each run's test accuracy and end-to-end time with the load average, then
# per side the mean and spread (sample standard deviation; min and max) and the ratio of the mean
# times (ours / PyTorch's), with the CPU model and the load average before and after.
#
#   sh bench/compare_speedrun.sh
#   SEEDS="0 1 2 3 4" THREADS=2 TORCH_VENV=build/torch-venv   (the defaults)
#   ARGS="--epochs 1 --train-subset 2000 --test-subset 1000"    (passed to both: a quick check)
#   LOGDIR=DIR   keep each run's whole output as DIR/SIDE-seedS.log
#
# PyTorch runs with OMP_WAIT_POLICY=passive (libgomp otherwise spins).
set -e
cd "$(dirname "$0")/.."
seeds=${SEEDS:-"0 1 2 3 4"}
threads=${THREADS:-2}
args=${ARGS:-}
ours=build/speedrun

make -s "$ours"
runs="seeds $seeds${args:+, args: $args}"
. bench/torch_venv.sh

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# one run's "seed S:" line: accuracy and seconds into $tmp/SIDE
record() {
    side=$1 log=$2
    if ! grep -q '^seed [0-9]*: test accuracy' "$log"; then echo "$side failed:"; tail -n 5 "$log"; exit 1; fi
    awk '$1 == "seed" && $3 == "test" { print $5, $8 }' "$log" >> "$tmp/$side"
}
for s in $seeds; do
    # (exit status 1: the target was not reached; the seed's line says so)
    GPUDL_NUM_THREADS=$threads "$ours" --seed "$s" --seeds 1 $args > "$tmp/log" 2>&1 || true
    [ -z "${LOGDIR:-}" ] || { mkdir -p "$LOGDIR" && cp "$tmp/log" "$LOGDIR/ours-seed$s.log"; }
    record ours "$tmp/log"
    OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads OMP_WAIT_POLICY=passive \
        "$py" bench/pytorch/speedrun.py --seed "$s" --seeds 1 $args > "$tmp/log" 2>&1 || true
    [ -z "${LOGDIR:-}" ] || cp "$tmp/log" "$LOGDIR/torch-seed$s.log"
    record torch "$tmp/log"
    echo "seed $s: ours $(tail -1 "$tmp/ours" | awk '{print $1 " % in " $2 " s"}')," \
         "pytorch $(tail -1 "$tmp/torch" | awk '{print $1 " % in " $2 " s"}') (load $(cut -d' ' -f1 /proc/loadavg))"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
# mean, sample standard deviation, min and max of column c
stats() {
    awk -v c="$2" '{ v = $c + 0; s += v; q += v * v; if (!k || v < lo) lo = v; if (!k || v > hi) hi = v; k++ }
        END { sd = k > 1 ? sqrt((q - s * s / k) / (k - 1)) : 0; if (sd != sd) sd = 0
              printf "%7.2f +- %5.2f [%.2f, %.2f]", s / k, sd, lo, hi }' "$1"
}
echo
echo "side     test accuracy % (mean +- sd [min, max])   end-to-end s (mean +- sd [min, max])"
for side in ours torch; do
    printf "%-7s %s   %s\n" "$side" "$(stats "$tmp/$side" 1)" "$(stats "$tmp/$side" 2)"
done
awk 'NR == FNR { a += $2; n++; next } { b += $2; m++ } END { printf "time ratio ours / pytorch: %.2f\n", (a / n) / (b / m) }' \
    "$tmp/ours" "$tmp/torch"
