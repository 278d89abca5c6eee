#!/bin/sh
# compare_char_gpt.sh — examples/char_gpt.c against its PyTorch twin (bench/pytorch/char_gpt.py) on the
# CPU: the same nanoGPT-style model from the same initial weights (char_gpt --save-init) on the same
# batches (char_gpt --dump-batches), REPEATS rounds interleaved (ours, then PyTorch, ...), each on THREADS
# threads (GPUDL_NUM_THREADS; torch.set_num_threads). Prints the largest |difference| of the first 50
# training losses (f32: expect ~1e-5 or less), each side's validation loss after STEPS steps, each side's
# median step time (the median of the rounds' medians) and the ratio ours/PyTorch, with the CPU model and
# the load average before and after. Exits 1 when a loss differs by more than 1e-3 (not the same training).
#
#   sh bench/compare_char_gpt.sh
#   THREADS=2 REPEATS=3 STEPS=200 TORCH_VENV=build/torch-venv   (the defaults; ARGS="..." adds char_gpt options)
#
# The data: Debian's English fortunes (`make data-text`). PyTorch runs with OMP_WAIT_POLICY=passive (libgomp
# otherwise spins).
set -eu
cd "$(dirname "$0")/.."
threads=${THREADS:-2} reps=${REPEATS:-3} steps=${STEPS:-200}
make -s build/char_gpt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
runs="$steps steps, $reps interleaved rounds"
. bench/torch_venv.sh
. bench/stats.sh
for r in $(seq "$reps"); do
    # shellcheck disable=SC2086 # ARGS: options, split on purpose
    GPUDL_NUM_THREADS=$threads build/char_gpt --device cpu --steps "$steps" --log-interval 1 --eval-interval "$steps" \
        --sample-len 0 --save-init "$tmp/init.safetensors" --dump-batches "$tmp/batches.safetensors" ${ARGS:-} >"$tmp/ours.$r"
    # shellcheck disable=SC2046 # util_env: VAR=value words (our count and peak for the twin's line)
    env $(util_env "$tmp/ours.$r") OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads OMP_WAIT_POLICY=passive \
        "$py" bench/pytorch/char_gpt.py --threads "$threads" "$tmp/init.safetensors" "$tmp/batches.safetensors" >"$tmp/torch.$r"
    for s in ours torch; do sed -n 's/^median step time \([0-9.]*\) ms.*/\1/p' "$tmp/$s.$r" >>"$tmp/$s.times"; done
    echo "round $r: ours $(tail -1 "$tmp/ours.times") ms/step, pytorch $(tail -1 "$tmp/torch.times") ms/step (load $(cut -d' ' -f1 /proc/loadavg))"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
# the losses of the first round (every round trains the same: the same seed)
losses() { sed -n 's/^step \([0-9]*\): loss \([0-9.naif-]*\)$/\1 \2/p' "$1" | head -n 50; }
losses "$tmp/ours.1" >"$tmp/ours.loss"
losses "$tmp/torch.1" >"$tmp/torch.loss"
val() { sed -n "s/^eval $steps: .* val \([0-9.]*\) .*/\1/p" "$1"; }
echo
status=0
paste -d' ' "$tmp/ours.loss" "$tmp/torch.loss" | awk '
    $1 == $3 { d = $2 - $4; if (d < 0) d = -d; if (m == 0 || d > max) { max = d; at = $1 } m++ }
    END { if (m < 50) { printf "only %d of the first 50 losses on both sides\n", m; exit 1 }
          printf "first 50 losses: largest |ours - pytorch| %.2e (step %d)\n", max, at; exit !(max <= 1e-3) }' || status=1
echo "validation loss after $steps steps: ours $(val "$tmp/ours.1"), pytorch $(val "$tmp/torch.1")"
a=$(median "$tmp/ours.times") b=$(median "$tmp/torch.times")
awk -v a="$a" -v b="$b" -v n="$reps" 'BEGIN { printf "median step time: ours %.2f ms, pytorch %.2f ms, ours/pytorch %.2f (median of %d rounds)\n", a, b, a / b, n }'
echo "utilisation, the last round (our FLOP count and peak for both; FlopCounterMode's count beside it where it differs):"
echo "  ours    $(sed -n 's/^utilisation: //p' "$tmp/ours.$reps")"
echo "  pytorch $(sed -n 's/^utilisation: //p' "$tmp/torch.$reps")"
exit $status
