#!/bin/sh
# busy_cpu.sh — gpudl's CPU training with and without one other busy process
# on the machine (`yes > /dev/null`), interleaved (quiet, busy, quiet, ...),
# REPEATS times: prints each run's ms/step, the medians and the ratio
# busy/quiet, the CPU model and the load average. A thread pool that spins
# for long (libgomp's default) makes the busy run many times slower.
#
#   sh bench/busy_cpu.sh [net ...]            (default: mlp cnn)
#   THREADS=2 REPEATS=5 BENCH_TRAIN=build/bench_train   (the defaults; give
#   BENCH_TRAIN another build, e.g. an older commit's, to compare)
#
# Each figure is one run of bench/train.c: its median time per step (5
# timed stretches of ~0.5 s of steps on one random batch, after warm-up).
set -e
cd "$(dirname "$0")/.."
nets=${*:-"mlp cnn"}
threads=${THREADS:-2}
reps=${REPEATS:-5}
ours=${BENCH_TRAIN:-build/bench_train}
[ -n "$BENCH_TRAIN" ] || make -s "$ours"

tmp=$(mktemp -d)
busy=
trap 'rm -rf "$tmp"; [ -z "$busy" ] || kill "$busy" 2>/dev/null' EXIT
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs online; $ours, $threads threads, $reps runs each"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$reps"); do
    for n in $nets; do
        GPUDL_NUM_THREADS=$threads OMP_NUM_THREADS=$threads "$ours" "$n" | awk -v n="$n" '$1 == n {print $3}' >> "$tmp/quiet.$n"
        yes > /dev/null &
        busy=$!
        GPUDL_NUM_THREADS=$threads OMP_NUM_THREADS=$threads "$ours" "$n" | awk -v n="$n" '$1 == n {print $3}' >> "$tmp/busy.$n"
        kill "$busy"
        wait "$busy" 2>/dev/null || true
        busy=
        echo "run $r $n: quiet $(tail -1 "$tmp/quiet.$n") ms/step, busy $(tail -1 "$tmp/busy.$n") ms/step (load $(cut -d' ' -f1 /proc/loadavg))"
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
. bench/stats.sh
echo
echo "net     quiet ms/step  busy ms/step  busy/quiet   (medians of $reps runs)"
for n in $nets; do
    awk -v n="$n" -v a="$(median "$tmp/quiet.$n")" -v b="$(median "$tmp/busy.$n")" \
        'BEGIN { printf "%-6s %14.3f %13.3f %11.2f\n", n, a, b, b / a }'
done
