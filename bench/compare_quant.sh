#!/bin/sh
# compare_quant.sh — the dynamic-quantized MLP's inference, gpudl against PyTorch's quantize_dynamic
# (the target: ours <= 1.0x PyTorch's time on the same thread count), side by side: REPEATS rounds,
# each running bench/quant.c's `mlp` mode and then bench/pytorch/quant_mlp.py on the same batch sizes
# (interleaved, so both see the same load); prints each round's figures and, per batch size, the median
# of our int8 time over PyTorch's int8 time, and of f32 over f32 for reference.
#   THREADS=2 REPEATS=3 BATCHES="1 64 256" TORCH_VENV=build/torch-venv   (the defaults)
set -eu
cd "$(dirname "$0")/.."
threads=${THREADS:-2} reps=${REPEATS:-3} batches=${BATCHES:-"1 64 256"}
mkdir -p build
runs="$reps repeats, batches $batches"
. bench/torch_venv.sh
cc -std=c99 -O3 -march=native bench/quant.c -lm -pthread -o build/bench_quant
out=build/compare_quant.txt
: >"$out"
r=1
while [ "$r" -le "$reps" ]; do
    GPUDL_NUM_THREADS=$threads build/bench_quant mlp $batches >build/compare_quant.ours
    [ "$r" -gt 1 ] || grep '^#' build/compare_quant.ours
    grep -v '^#' build/compare_quant.ours | sed 's/^/ours /' | tee -a "$out"
    GPUDL_NUM_THREADS=$threads OMP_WAIT_POLICY=passive "$py" bench/pytorch/quant_mlp.py $batches |
        sed 's/^/torch /' | tee -a "$out"
    r=$((r + 1))
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "batch  ours int8/torch int8 (median of $reps)  ours f32/torch f32"
for b in $batches; do
    awk -v b="$b" '$3 == b { if ($1 == "ours") { of[++no] = $4; oq[no] = $5 } else { tf[++nt] = $4; tq[nt] = $5 } }
        function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
        END { for (i = 1; i <= no; i++) { rq[i] = oq[i] / tq[i]; rf[i] = of[i] / tf[i] }
              printf "%5d  %.2f  %.2f\n", b, med(rq, no), med(rf, no) }' "$out"
done
