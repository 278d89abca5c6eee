#!/bin/sh
# compare_recipes.sh — the training recipes, gpudl against PyTorch on the CPU (or
# a GPU), side by side on this machine: builds build/recipes, puts torch and
# numpy into a virtual environment if they are missing (as compare_cpu.sh),
# then for each net runs bench/recipes.c and bench/pytorch/recipes.py, the same
# net and recipe, for each seed, interleaved (ours, PyTorch, ours, ...), with
# the same thread count. Prints each run's final test accuracy and time to the
# target, then per net and side the mean and spread (sample standard deviation;
# min and max) of the final accuracy and of the time to the target over the
# runs that reached it, with the CPU model and the load average before and after.
#
#   sh bench/compare_recipes.sh [net ...]       (default: mlp cnn resnet; resnet10 when named)
#   SEEDS="0 1 2" THREADS=2 TORCH_VENV=build/torch-venv DEVICE=cpu   (the defaults)
#   ARGS="--epochs 1 --train-subset 2000 --test-subset 1000"  (passed to both: a quick check)
#   LOGDIR=DIR   keep each run's whole output (its per-epoch lines) as DIR/SIDE-NET-seedS.log
#
# Full runs are long on a CPU: 30 epochs each, 3 seeds, both sides (see
# bench/RESULTS.md, "Recipes"). DEVICE=cuda builds and runs
# build/cuda_recipes and PyTorch on the GPU (a CUDA build of torch needed).
# PyTorch runs with OMP_WAIT_POLICY=passive (libgomp otherwise spins).
set -e
cd "$(dirname "$0")/.."
nets=${*:-"mlp cnn resnet"}
seeds=${SEEDS:-"0 1 2"}
threads=${THREADS:-2}
device=${DEVICE:-cpu}
args=${ARGS:-}
ours=build/recipes
[ "$device" = cpu ] || ours=build/cuda_recipes

make -s "$ours"
runs="seeds $seeds, device $device${args:+, args: $args}"
. bench/torch_venv.sh
. bench/stats.sh

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# one run: its "result:" line's final accuracy and time to the target (nan: not reached) into $tmp/SIDE.NET
record() {
    side=$1 net=$2 log=$3
    awk '$1 == "result:" { print $5, $9 }' "$log" >> "$tmp/$side.$net"
    if ! grep -q '^result:' "$log"; then echo "$side $net failed:"; tail -n 5 "$log"; exit 1; fi
}
for s in $seeds; do
    for n in $nets; do
        # (exit status 1: the target was not reached; the result line says so)
        GPUDL_NUM_THREADS=$threads "$ours" --net "$n" --seed "$s" --device "$device" $args > "$tmp/log" 2>&1 || true
        [ -z "${LOGDIR:-}" ] || { mkdir -p "$LOGDIR" && cp "$tmp/log" "$LOGDIR/ours-$n-seed$s.log"; }
        record ours "$n" "$tmp/log"
        util "$tmp/log" > "$tmp/ours_util.$n"
        # shellcheck disable=SC2046 # util_env: VAR=value words (our peak for the twin's line)
        env $(util_env "$tmp/log") OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads OMP_WAIT_POLICY=passive \
            "$py" bench/pytorch/recipes.py --net "$n" --seed "$s" --device "$device" $args > "$tmp/log" 2>&1 || true
        [ -z "${LOGDIR:-}" ] || cp "$tmp/log" "$LOGDIR/torch-$n-seed$s.log"
        record torch "$n" "$tmp/log"
        util "$tmp/log" > "$tmp/torch_util.$n"
        echo "seed $s $n: ours $(tail -1 "$tmp/ours.$n" | awk '{print $1 " %, target at " $2 " s"}')," \
             "pytorch $(tail -1 "$tmp/torch.$n" | awk '{print $1 " %, target at " $2 " s"}') (load $(cut -d' ' -f1 /proc/loadavg))"
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
# mean, sample standard deviation, min and max of column c over the rows that are numbers; "n/a" if none
stats() {
    awk -v c="$2" '$c != "nan" { v = $c + 0; s += v; q += v * v; if (!k || v < lo) lo = v; if (!k || v > hi) hi = v; k++ }
        END { if (!k) { printf "%27s", "n/a"; exit }
              sd = k > 1 ? sqrt((q - s * s / k) / (k - 1)) : 0; if (sd != sd) sd = 0
              printf "%8.2f +- %5.2f [%.2f, %.2f]", s / k, sd, lo, hi }' "$1"
}
echo
echo "net     side     final accuracy % (mean +- sd [min, max])   time to target s (runs that reached it)"
for n in $nets; do
    for side in ours torch; do
        reached=$(awk '$2 != "nan"' "$tmp/$side.$n" | wc -l)
        printf "%-7s %-7s %s   %s  (%d of %d reached)\n" "$n" "$side" "$(stats "$tmp/$side.$n" 1)" \
            "$(stats "$tmp/$side.$n" 2)" "$reached" "$(wc -l < "$tmp/$side.$n")"
    done
done
echo
echo "utilisation, each net's last run (a step's FLOPs counted on each side; peak: ours, measured)"
for n in $nets; do
    printf "%-7s ours %-28s pytorch %s\n" "$n" "$(cat "$tmp/ours_util.$n")" "$(cat "$tmp/torch_util.$n")"
done
