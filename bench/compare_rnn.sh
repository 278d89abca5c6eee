#!/bin/sh
# compare_rnn.sh — gpudl's LSTM and GRU training step against PyTorch's on the CPU at the shapes of
# examples/text_classify.c (bench/rnn_train.c and its twin bench/pytorch/rnn_train.py), interleaved
# (ours, PyTorch, ours, ...) on THREADS threads, REPEATS times; prints each run, the medians, the ratio
# ours/PyTorch (below 1: gpudl is faster), the utilisation lines and the load average before and after.
#   sh bench/compare_rnn.sh [lstm] [gru]     THREADS=1 REPEATS=3 TORCH_VENV=build/torch-venv (the defaults)
#   BASE=PROGRAM: also an earlier build of bench/rnn_train.c (a copy of build/bench_rnn_train), interleaved
#   with the two, for before / after on one busy machine
set -e
cd "$(dirname "$0")/.."
nets=${*:-"lstm gru"}
threads=${THREADS:-1}
reps=${REPEATS:-3}
ours=build/bench_rnn_train
make -s "$ours"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
runs="$reps interleaved runs per net"
. bench/torch_venv.sh
. bench/stats.sh
for r in $(seq "$reps"); do
    for n in $nets; do
        if [ -n "${BASE:-}" ]; then
            GPUDL_NUM_THREADS="$threads" "$BASE" "$n" > "$tmp/out"
            awk -v n="$n" '$1 == n {print $3}' "$tmp/out" >> "$tmp/base.$n"
            echo "run $r $n: before (BASE) $(tail -1 "$tmp/base.$n") ms/step (load $(cut -d' ' -f1 /proc/loadavg))"
        fi
        GPUDL_NUM_THREADS="$threads" "$ours" "$n" > "$tmp/out"
        awk -v n="$n" '$1 == n {print $3}' "$tmp/out" >> "$tmp/ours.$n"
        util "$tmp/out" > "$tmp/ours_util.$n"
        # shellcheck disable=SC2046 # util_env: VAR=value words, split on purpose (the C side's count for the twin)
        env $(util_env "$tmp/out") OMP_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads" OMP_WAIT_POLICY=passive \
            "$py" bench/pytorch/rnn_train.py "$n" > "$tmp/out"
        awk -v n="$n" '$1 == n {print $3}' "$tmp/out" >> "$tmp/torch.$n"
        util "$tmp/out" > "$tmp/torch_util.$n"
        a=$(tail -1 "$tmp/ours.$n")
        b=$(tail -1 "$tmp/torch.$n")
        awk -v a="$a" -v b="$b" 'BEGIN { print a / b }' >> "$tmp/ratio.$n"
        echo "run $r $n: ours $a ms/step, pytorch $b ms/step, ratio $(tail -1 "$tmp/ratio.$n") (load $(cut -d' ' -f1 /proc/loadavg))"
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "net     ours ms/step  pytorch ms/step  ours/pytorch  median of the runs' ratios   (medians of $reps runs, $threads threads)"
for n in $nets; do
    awk -v n="$n" -v a="$(median "$tmp/ours.$n")" -v b="$(median "$tmp/torch.$n")" -v r="$(median "$tmp/ratio.$n")" \
        'BEGIN { printf "%-6s %13.3f %16.3f %13.2f %27.2f\n", n, a, b, a / b, r }'
done
if [ -n "${BASE:-}" ]; then
    for n in $nets; do
        echo "$n before (BASE): $(median "$tmp/base.$n") ms/step, after $(median "$tmp/ours.$n") (medians)"
    done
fi
echo
echo "utilisation, the last run (FLOPs of a step: gdl_flops_count's, for both sides)"
for n in $nets; do
    printf "%-6s ours %-28s pytorch %s\n" "$n" "$(cat "$tmp/ours_util.$n")" "$(cat "$tmp/torch_util.$n")"
done
