#!/bin/sh
# compare_cpu.sh — gpudl against PyTorch on the CPU, side by side on this
# machine: builds build/bench_train (CPU), puts torch (CPU) and numpy into a
# virtual environment if they are missing, then runs our bench/train.c and
# bench/pytorch/train.py on the same nets (MLP 784-128-10 and the CNN of
# examples/cnn.c, batch 64, Adam), interleaved (ours, PyTorch, ours, ...),
# with the same thread count, REPEATS times. Prints the CPU model and the
# flags that choose the kernels, the kernels each side used (ours: the GEMM
# micro-kernel; PyTorch: its CPU capability, oneDNN's ISA and, from
# ONEDNN_VERBOSE=1, the implementations of one short CNN run), each run's
# ms/step and peak RSS, the medians and the ratio ours/PyTorch (below 1:
# gpudl is faster), and the load average before and after.
#
#   sh bench/compare_cpu.sh [net ...]        (default: mlp cnn)
#   THREADS=2 REPEATS=5 TORCH_VENV=build/torch-venv   (the defaults)
#   OURS=build/PROGRAM TWIN=bench/pytorch/SCRIPT.py: another pair of the same output (bench/compare_rnn.sh's)
#   BASE=PROGRAM: also an earlier build of ours (a copy of it), interleaved with the two, for before / after
#   ISA=avx2: both sides held to AVX2 on an AVX-512 machine (a stand-in for
#   an AVX2-only CPU such as AMD Zen 2/3): ours built with -mno-avx512f
#   (build/bench_train_avx2: the AVX2 micro-kernel), PyTorch with
#   ONEDNN_MAX_CPU_ISA=AVX2 and ATEN_CPU_CAPABILITY=avx2.
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
isa=${ISA:-native}
twin=${TWIN:-bench/pytorch/train.py}
case $isa in
native)
    ours=${OURS:-build/bench_train}
    make -s "$ours" ;;
avx2)
    if [ -n "${OURS:-}" ]; then echo "compare_cpu.sh: ISA=avx2 builds bench/train.c only, not OURS=$OURS" >&2; exit 2; fi
    ours=build/bench_train_avx2
    make -s build/bench_train # (the same build, then its AVX2 twin)
    ${CC:-cc} -std=c99 -O3 -march=native -mno-avx512f bench/train.c -o "$ours" -pthread -lm
    export ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 ;;
*)
    echo "compare_cpu.sh: ISA=$isa: native or avx2" >&2
    exit 2 ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
runs="$reps interleaved runs per net, ISA $isa"
. bench/torch_venv.sh
. bench/stats.sh
echo "cpu flags: $(for f in avx2 fma avx512f avx512bw avx512_vnni avx512_bf16 amx_tile; do grep -qw "$f" /proc/cpuinfo && printf '%s ' "$f"; done)"
echo "ours: $(GPUDL_NUM_THREADS=1 "$ours" __none__ 2>/dev/null | sed -n 's/^cpu: .*, GEMM micro-kernel /GEMM micro-kernel /p')" \
     "(convolutions: on x86 the direct kernel of that width where the shape suits it, else the implicit GEMM on it, im2col where the shape asks)"
"$py" -c 'import torch
print("pytorch: cpu capability", torch.backends.cpu.get_cpu_capability(), "| mkldnn (oneDNN)",
      torch.backends.mkldnn.is_available(), "| openmp", torch.backends.openmp.is_available(),
      "| mkl", torch.backends.mkl.is_available())'
# oneDNN's verbose lines of one short CNN run: which implementation each primitive ran
# (onednn_verbose,<time>,primitive,exec,cpu,<kind>,<impl>,<prop>,...; the field numbers vary by version)
[ "$twin" != bench/pytorch/train.py ] || ONEDNN_VERBOSE=1 OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=passive "$py" bench/pytorch/train.py cnn 2>/dev/null |
    awk -F, '/^onednn_verbose/ && /,exec,/ { for (i = 1; i < NF; i++) if ($i == "exec") { print "  onednn: " $(i + 2) " " $(i + 3) " " $(i + 4); break } }' |
    sort | uniq -c | sort -rn | head -12
# a command's peak RSS (GNU time, where there is one) into $tmp/rss; rss prints it in MiB ("?" without)
timed() {
    if [ -x /usr/bin/time ]; then /usr/bin/time -f 'peak_kib %M' -o "$tmp/rss" "$@"; else : > "$tmp/rss"; "$@"; fi
}
rss() { awk 'BEGIN {v = "?"} /^peak_kib/ {v = sprintf("%.0f", $2 / 1024)} END {print v}' "$tmp/rss"; }
for r in $(seq "$reps"); do
    for n in $nets; do
        if [ -n "${BASE:-}" ]; then
            GPUDL_NUM_THREADS="$threads" "$BASE" "$n" > "$tmp/out"
            awk -v n="$n" '$1 == n {print $3}' "$tmp/out" >> "$tmp/base.$n"
            echo "run $r $n: before (BASE) $(tail -1 "$tmp/base.$n") ms/step (load $(cut -d' ' -f1 /proc/loadavg))"
        fi
        timed env GPUDL_NUM_THREADS="$threads" "$ours" "$n" > "$tmp/out"
        ra=$(rss)
        awk -v n="$n" '$1 == n {print $3}' "$tmp/out" >> "$tmp/ours.$n"
        util "$tmp/out" > "$tmp/ours_util.$n"
        # shellcheck disable=SC2046 # util_env: VAR=value words, split on purpose (the C side's peak for the twin)
        timed env $(util_env "$tmp/out") OMP_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads" OMP_WAIT_POLICY=passive \
            "$py" "$twin" "$n" > "$tmp/out"
        rb=$(rss)
        awk -v n="$n" '$1 == n {print $3}' "$tmp/out" >> "$tmp/torch.$n"
        util "$tmp/out" > "$tmp/torch_util.$n"
        a=$(tail -1 "$tmp/ours.$n")
        b=$(tail -1 "$tmp/torch.$n")
        awk -v a="$a" -v b="$b" 'BEGIN { print a / b }' >> "$tmp/ratio.$n"
        echo "run $r $n: ours $a ms/step ($ra MiB peak RSS), pytorch $b ms/step ($rb MiB), ratio $(tail -1 "$tmp/ratio.$n")" \
             "(load $(cut -d' ' -f1 /proc/loadavg))"
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "net     ours ms/step  pytorch ms/step  ours/pytorch  median of the runs' ratios   (medians of $reps runs)"
for n in $nets; do
    awk -v n="$n" -v a="$(median "$tmp/ours.$n")" -v b="$(median "$tmp/torch.$n")" -v r="$(median "$tmp/ratio.$n")" \
        'BEGIN { printf "%-6s %13.3f %16.3f %13.2f %27.2f\n", n, a, b, a / b, r }'
done
echo "(a run's ratio compares two programs run one after the other: on a busy machine it is the steadier figure)"
if [ -n "${BASE:-}" ]; then
    for n in $nets; do echo "$n before (BASE): $(median "$tmp/base.$n") ms/step, after $(median "$tmp/ours.$n") (medians)"; done
fi
echo
echo "utilisation, the last run (FLOPs of a step as gdl_flops_count and FlopCounterMode count them; peak: ours, measured)"
for n in $nets; do
    printf "%-6s ours %-28s pytorch %s\n" "$n" "$(cat "$tmp/ours_util.$n")" "$(cat "$tmp/torch_util.$n")"
done
