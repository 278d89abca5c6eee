#!/bin/sh
# compare_seq2seq.sh — examples/seq2seq.c against its PyTorch twin (bench/pytorch/seq2seq.py) on the CPU: the
# same nn.Transformer translator from the same initial weights (seq2seq --save-init) on the same batches
# (seq2seq --dump-batches), dropout 0, REPEATS rounds interleaved (ours, then PyTorch, ...), each on THREADS
# threads (GPUDL_NUM_THREADS; torch.set_num_threads). Prints how many of the STEPS training losses agree to the
# printed digits (%.6f) and the largest |difference|, each side's held-out loss and greedy / beam figures after
# STEPS steps (on the first --eval-pairs held-out pairs), each side's median step time (the median of the
# rounds' medians), the ratio ours/PyTorch and each side's utilisation (our FLOP count for both; FlopCounterMode's
# beside it where it differs), with the CPU model and the load average before and after. The
# twin also trains once in float64: how far PyTorch's own float32 losses stray from those is the rounding noise
# of float32 training, which grows with the steps and the learning rate (1e-5 to 1e-3 by step 100), printed
# beside ours. Exits 1 when a loss differs by more than TOL (default 1e-4) and by more than twice that noise:
# not the same training.
#
# FLOAT64=1 trains both sides in float64 instead (seq2seq built with -DGPUDL_DOUBLE as build/seq2seq_f64, the
# twin with --float64): float32's rounding, which Adam amplifies from step to step, is then far below the printed
# digits, so every one of the STEPS losses must be equal to them (TOL defaults to 0) and the held-out figures the
# same. This is the check that finds a real difference between the two trainings.
#
#   sh bench/compare_seq2seq.sh
#   THREADS=2 REPEATS=3 STEPS=100 TOL=1e-4 TORCH_VENV=build/torch-venv   (the defaults; ARGS="..." adds seq2seq
#   options, after the default ARGS="--eval-pairs 300")
#   FLOAT64=1 REPEATS=1 sh bench/compare_seq2seq.sh
#
# The data: Debian's FreeDict English-German dictionary (`make data-dict`). PyTorch runs with
# OMP_WAIT_POLICY=passive (libgomp otherwise spins).
set -eu
cd "$(dirname "$0")/.."
threads=${THREADS:-2} reps=${REPEATS:-3} steps=${STEPS:-100} f64=${FLOAT64:-0}
if [ "$f64" = 1 ]; then
    tol=${TOL:-0} bin=build/seq2seq_f64 twin=--float64 sides="ours:ours.1 pytorch:torch.1" in=", float64"
    if ! [ -f "$bin" ] || [ -n "$(find gpudl.h examples/seq2seq.c examples/example_args.h -newer "$bin")" ]; then
        z=
        if [ -f /usr/include/zlib.h ]; then z="-DGPUDL_ZLIB -lz"; fi
        # shellcheck disable=SC2086 # z: two words, or none
        "${CC:-cc}" -std=c99 -O2 -march=native -DGPUDL_DOUBLE examples/seq2seq.c -o "$bin" -pthread -lm $z
    fi
else
    tol=${TOL:-1e-4} bin=build/seq2seq twin='' sides="ours:ours.1 pytorch:torch.1 pytorch-f64:f64" in=
    make -s build/seq2seq
fi
sh tools/fetch_data.sh dict
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
runs="$steps steps, $reps interleaved rounds$in"
. bench/torch_venv.sh
. bench/stats.sh
for r in $(seq "$reps"); do
    # shellcheck disable=SC2086 # ARGS: options, split on purpose
    GPUDL_NUM_THREADS=$threads "$bin" --device cpu --steps "$steps" --log-interval 1 --eval-interval "$steps" \
        --show 0 --eval-pairs 300 --save-init "$tmp/init.safetensors" --dump-batches "$tmp/batches.safetensors" \
        ${ARGS:-} >"$tmp/ours.$r"
    # shellcheck disable=SC2086,SC2046 # twin: one option, or none; util_env: our count and peak for the twin's line
    env $(util_env "$tmp/ours.$r") OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads OMP_WAIT_POLICY=passive \
        "$py" bench/pytorch/seq2seq.py --threads "$threads" $twin "$tmp/init.safetensors" "$tmp/batches.safetensors" \
        >"$tmp/torch.$r"
    for s in ours torch; do sed -n 's/^median step time \([0-9.]*\) ms.*/\1/p' "$tmp/$s.$r" >>"$tmp/$s.times"; done
    echo "round $r: ours $(tail -1 "$tmp/ours.times") ms/step, pytorch $(tail -1 "$tmp/torch.times") ms/step (load $(cut -d' ' -f1 /proc/loadavg))"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
# float32's noise: the twin once more, in float64 (in FLOAT64 mode the twin's run already is, and there is none)
if [ "$f64" = 1 ]; then cp "$tmp/torch.1" "$tmp/f64"
else
    OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads OMP_WAIT_POLICY=passive \
        "$py" bench/pytorch/seq2seq.py --threads "$threads" --float64 "$tmp/init.safetensors" "$tmp/batches.safetensors" >"$tmp/f64"
fi
# the losses of the first round (every round trains the same: the same seed)
losses() { sed -n 's/^step \([0-9]*\): loss \([0-9.naif-]*\)$/\1 \2/p' "$1"; }
losses "$tmp/ours.1" >"$tmp/ours.loss"
losses "$tmp/torch.1" >"$tmp/torch.loss"
losses "$tmp/f64" >"$tmp/f64.loss"
echo
status=0
noise=$(paste -d' ' "$tmp/torch.loss" "$tmp/f64.loss" | awk '$1 == $3 { d = $2 - $4; if (d < 0) d = -d; if (d > max) max = d }
    END { printf "%.2e", max }')
paste -d' ' "$tmp/ours.loss" "$tmp/torch.loss" | awk -v n="$steps" -v tol="$tol" -v noise="$noise" -v f64="$f64" '
    $1 == $3 { d = $2 - $4; if (d < 0) d = -d; if (m == 0 || d > max) { max = d; at = $1 } m++; same += $2 == $4
               if ($2 == $4 && !differ) upto = $1; else differ = 1 }
    END { if (m < n) { printf "only %d of the %d losses on both sides\n", m, n; exit 1 }
          printf "training losses%s: %d of %d equal to the printed digits (every one through step %d), largest " \
                 "|ours - pytorch| %.2e (step %d)", f64 == 1 ? " (float64)" : "", same, n, upto, max, at
          if (f64 != 1) printf "; the float32 noise, |pytorch float32 - pytorch float64|, up to %.2e", noise
          printf "\n"
          exit !(max <= tol || max <= 2 * noise) }' || status=1
for s in $sides; do
    f=$tmp/${s#*:}
    printf '%-12s %s; %s; %s\n' "${s%%:*}:" "$(sed -n "s/^eval $steps: .*\(held-out [0-9.]*\).*/\1/p" "$f")" \
        "$(grep '^greedy: ' "$f")" "$(grep '^beam [0-9]*: ' "$f")"
done
a=$(median "$tmp/ours.times") b=$(median "$tmp/torch.times")
awk -v a="$a" -v b="$b" -v n="$reps" 'BEGIN { printf "median step time: ours %.2f ms, pytorch %.2f ms, ours/pytorch %.2f (median of %d rounds)\n", a, b, a / b, n }'
echo "utilisation, the last round (our FLOP count and peak for both; FlopCounterMode's count beside it where it differs):"
echo "  ours    $(sed -n 's/^utilisation: //p' "$tmp/ours.$reps")"
echo "  pytorch $(sed -n 's/^utilisation: //p' "$tmp/torch.$reps")"
exit $status
