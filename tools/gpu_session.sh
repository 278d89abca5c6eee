#!/bin/sh
# tools/gpu_session.sh — the checks that need a real NVIDIA GPU, planned for a
# lent machine: 15 minutes of device time in all, the machine's start (a minute
# or two) included, at most 10 minutes a command, so it runs as steps, the most
# valuable first. docs/gpu.md says what each step proves.
#
#   sh tools/gpu_session.sh [STEP ...]       (no STEP: every step, in order)
#
#   probe     what the machine has: the GPU and its compute capability, nvcc's
#             version, libnccl, compute-sanitizer, python3 with torch (CUDA);
#             later steps adapt to it (no libnccl: built with GPUDL_NO_NCCL)
#             and say what they skip
#   build     the backend, the GPU suite, the examples and the benchmarks, for
#             the GPU's own architecture (make, B=build/gpu_session)
#   suite     the GPU suite (tests/test_cuda.c) on the device
#   sanitize  compute-sanitizer on the kernel suites: memcheck, racecheck,
#             initcheck, synccheck
#   bench     ours against PyTorch on the same GPU (bench/compare.sh), each
#             net's FLOPs, GFLOP/s and fraction of the GPU's datasheet peak
#             (printed first), and the dynamic int8 MLP against f32
#             (bench/quant.c's mlp mode)
#   examples  the examples, Fashion-MNIST to 92 % end to end, ours and
#             PyTorch's (bench/fmnist92.c; needs the data in ./data, carried),
#             the character GPT's step time (examples/char_gpt.c), and its
#             tokens/s in bf16 against its PyTorch twin (F.scaled_dot_product_attention,
#             the same weights and batches; the char_gpt GPU figure; needs
#             the fortunes in ./data/fortunes, carried: `make data-text` puts
#             them there where the Debian packages cannot be installed)
#   nccl      NCCL's collectives and DDP of CUDA tensors, one rank per GPU
#
# The planned calls (every step has a time limit of its own below, so a hang
# costs that step only; the limits of a call add up to less than its timeout):
#   1. sh tools/gpu_session.sh probe build suite sanitize
#                                      limits 30+180+120+200 = 530 s; timeout_s 570
#   2. at once, while the machine is warm, and only if at least 5 minutes of
#      device time are left: sh tools/gpu_session.sh bench examples nccl
#                                      limits 100+150+40 = 290 s; timeout_s 320
# The first call holds what no CPU can show (the suite's results on hardware,
# the sanitizers); the second, the figures. A later call finds the earlier
# builds while the machine is kept warm (ignored build outputs stay); a step
# whose builds are missing builds them first. Give the machine back after the
# second call.
#
# Logs: $OUT (default ./gpu_out): summary.txt (one line per step, appended
# across calls while $OUT is kept) and one STEP.log per step: at most 8 files,
# as the device tool brings back. The exit status is the number of failed steps.
#
# GPU_SESSION_DRY=1 runs the same script on the CUDA emulator (tests/cuda_emu,
# built with g++), with smaller runs where the emulator is slow; make test
# runs it, so that the script itself is tested before a GPU is lent.
set -u
cd "$(dirname "$0")/.." || exit 1
. bench/stats.sh # util_env: our utilisation line's count and peak for the PyTorch twins
OUT=${OUT:-gpu_out}
mkdir -p "$OUT" || exit 1
S="$OUT/summary.txt"
dry=${GPU_SESSION_DRY:-0}
G=build/gpu_session
[ "$dry" = 1 ] && G=build/gpu_session_dry
mkdir -p "$G" || exit 1
fails=0
NVCC=${NVCC:-$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)}
SANITIZER=$(command -v compute-sanitizer 2>/dev/null || echo "$(dirname "$NVCC")/compute-sanitizer")
# the suites that run kernels: what the sanitizers take (the whole suite under
# them would not fit in one command)
KERNEL_SUITES="-s ops -s kernel_paths"
# each sanitizer tool's own limit inside the sanitize step, most telling first:
# a slow tool then costs its own run, not the ones after it
SAN_TOOL_LIMIT=${SAN_TOOL_LIMIT:-45}

note() { echo "$*" | tee -a "$S"; }

# step NAME LIMIT FUNCTION: runs it with a time limit, logs to $OUT/NAME.log,
# and writes one line to the summary
step() {
    name=$1 limit=$2
    shift 2
    # the emulator is many times slower than a GPU, and CI's machine is shared
    [ "$dry" = 1 ] && limit=$((limit * 4))
    t0=$(date +%s)
    # a step is this script again, so that timeout can end it and its children
    timeout -k 10 "$limit" sh "$0" --step "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    case $rc in
    0) r=ok ;;
    124|137) r="FAILED: over its ${limit}-second limit"; fails=$((fails + 1)) ;;
    *) r="FAILED (exit $rc)"; fails=$((fails + 1)) ;;
    esac
    note "$name: $r in $(($(date +%s) - t0)) s; last line: $(tail -n 1 "$OUT/$name.log")"
}

# --- probe: what this machine has ---------------------------------------
probe() {
    {
        echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
        echo "commit: $(git log --oneline -1 2>/dev/null || echo unknown)"
        echo "cpu: $(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p')"
        if [ "$dry" = 1 ]; then
            echo "gpu: none (GPU_SESSION_DRY=1: the CUDA emulator, tests/cuda_emu)"
            arch=emu
        elif command -v nvidia-smi >/dev/null 2>&1; then
            nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
            cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' .')
            arch=${cc:-90}
            echo "gpus: $(nvidia-smi -L | wc -l)"
        else
            echo "gpu: nvidia-smi not found"
            arch=90
        fi
        if [ -x "$NVCC" ]; then echo "nvcc: $("$NVCC" --version | tail -n 1)"; else echo "nvcc: not found"; fi
        nccl=no
        if [ "$dry" = 1 ]; then nccl=emulated
        elif ldconfig -p 2>/dev/null | grep -q 'libnccl\.so' ||
             ls "$(dirname "$NVCC")"/../lib64/libnccl.so* "$(dirname "$NVCC")"/../lib/libnccl.so* >/dev/null 2>&1; then nccl=yes
        fi
        echo "libnccl: $nccl"
        if [ -x "$SANITIZER" ]; then san=yes; else san=no; fi
        echo "compute-sanitizer: $san"
        torch=no
        if [ "$dry" = 1 ]; then python3 -c 'import torch' >/dev/null 2>&1 && torch=cpu
        else python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1 && torch=yes
        fi
        echo "python3 torch: $torch"
        echo "fashion-mnist: $( [ -f data/t10k-labels-idx1-ubyte.gz ] || [ -f /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz ] && echo yes || echo no)"
        echo "fortunes: $(fortunes_dir || echo no)"
    } >"$G/probe.txt" 2>&1
    # what later steps read, one variable a line
    printf 'arch=%s\nnccl=%s\nsan=%s\ntorch=%s\ngpus=%s\n' "$arch" "$nccl" "$san" "$torch" \
        "$(sed -n 's/^gpus: //p' "$G/probe.txt")" >"$G/probe.env"
    cat "$G/probe.txt"
}
# where the English fortunes are (char_gpt's own search order), or a failure
fortunes_dir() {
    for d in ${GPUDL_DATA:+"$GPUDL_DATA/fortunes"} data/fortunes /usr/share/games/fortunes; do
        [ -f "$d/fortunes" ] && { echo "$d"; return 0; }
    done
    return 1
}
need_probe() { [ -f "$G/probe.env" ] || probe >/dev/null; . "./$G/probe.env"; }

# --- build ----------------------------------------------------------------
# Real GPU: the Makefile's own nvcc rules, for this GPU's architecture, in a
# build directory of their own. The emulator: the Makefile's emulator builds.
targets() {
    if [ "$dry" = 1 ]; then
        # (make test's test-gpu-session-dry names the same list)
        echo "build/emu_test_cuda build/emu_device_query build/emu_gpu_monitor build/emu_mnist_mlp" \
             "build/emu_bench_train build/emu_test_dist_nccl build/libfake_nvml.so build/emu_char_gpt build/emu_bench_quant"
    else
        t="$G/test_cuda_build $G/cuda_device_query $G/cuda_gpu_monitor $G/cuda_mnist_mlp $G/cuda_cpu_vs_gpu $G/cuda_bench_train $G/cuda_fmnist92 $G/cuda_char_gpt $G/cuda_bench_quant"
        [ "$nccl" = yes ] && t="$t $G/test_dist_nccl_cuda $G/cuda_ddp"
        echo "$t"
    fi
}
build() {
    need_probe
    if [ "$dry" = 1 ]; then
        # shellcheck disable=SC2046
        make --no-print-directory $(targets)
    else
        nccl_vars=""
        [ "$nccl" = yes ] || nccl_vars="NCCL_LIBS= CUDA_DEFS=-DGPUDL_NO_NCCL"
        # shellcheck disable=SC2046,SC2086
        make --no-print-directory -j "$(nproc)" B="$G" NVCC="$NVCC" \
            CUDA_ARCH="-gencode arch=compute_$arch,code=sm_$arch" $nccl_vars $(targets)
    fi
}
built() { # every target of this configuration is there
    need_probe
    for t in $(targets); do [ -e "$t" ] || return 1; done
}
need_build() { built || build; }
bin() { # NAME -> the program of this configuration
    if [ "$dry" = 1 ]; then echo "build/emu_$1"
    elif [ "$1" = test_cuda ]; then echo "$G/test_cuda_build"
    else echo "$G/cuda_$1"
    fi
}

# --- the checks -----------------------------------------------------------
suite() {
    need_build || return 1
    if [ "$dry" = 1 ]; then
        # the emulator runs the whole suite in make test-emu: here one suite shows the step works
        GPUDL_EMU_DEVICES=2 "$(bin test_cuda)" -s kernel_paths
    else
        "$(bin test_cuda)"
    fi
}
sanitize() {
    need_build || return 1
    if [ "$san" != yes ]; then echo "SKIPPED: compute-sanitizer not found"; return 0; fi
    rc=0
    lim=$SAN_TOOL_LIMIT
    [ "$dry" = 1 ] && lim=$((lim * 4))
    for tool in memcheck racecheck initcheck synccheck; do
        extra=""
        [ "$tool" = memcheck ] && extra="--leak-check full"
        echo "== compute-sanitizer --tool $tool (limit $lim s)"
        # shellcheck disable=SC2086
        timeout -k 5 "$lim" "$SANITIZER" --tool "$tool" $extra --error-exitcode 1 "$(bin test_cuda)" $KERNEL_SUITES
        t=$?
        case $t in
        0) echo "== $tool: clean" ;;
        124|137) echo "== $tool: over its $lim-second limit (not a finding: run it alone with more time)"; rc=1 ;;
        *) echo "== $tool: FAILED (exit $t)"; rc=1 ;;
        esac
    done
    return $rc
}
bench() {
    need_build || return 1
    # the dynamic int8 MLP against its f32 model (the aim: not slower at batch 1024); "mlp BATCH f32_us int8_us"
    echo "== bench_quant: the 784-256-128-10 MLP's inference, f32 and dynamic int8"
    if [ "$dry" = 1 ]; then "$(bin bench_quant)" mlp --device cuda 64 || return 1
    else "$(bin bench_quant)" mlp --device cuda 256 1024 4096 || return 1
    fi
    # the GPU's datasheet peaks, the denominators of the utilisation lines below (gdl_gpu_peak_gflops)
    "$(bin device_query)" | grep ' peak' || echo "peak: device_query printed none"
    if [ "$torch" = yes ]; then
        # the nets the issues' targets name, each mode once: the whole list would not fit the budget
        BENCH_TRAIN="$(bin bench_train)" sh bench/compare.sh mlp cnn mlp-graph cnn-graph cnn-amp cnn-amp-graph
    elif [ "$dry" = 1 ]; then
        echo "SKIPPED: PyTorch's side (no torch: the emulator's times mean nothing anyway); ours alone, one net:"
        "$(bin bench_train)" mlp
    else
        echo "SKIPPED: PyTorch's side (python3 cannot import torch with CUDA); ours alone:"
        "$(bin bench_train)"
    fi
}
examples() {
    need_build || return 1
    "$(bin device_query)" || return 1
    if [ "$dry" = 1 ]; then
        GPUDL_NVML_LIB="$(pwd)/build/libfake_nvml.so" "$(bin gpu_monitor)" --count 1 --interval 0.05 || return 1
        # an epoch of large batches: the emulator is slow
        "$(bin mnist_mlp)" --device cuda --epochs 1 --batch-size 1024 || return 1
        echo "SKIPPED (dry run): cpu_vs_gpu and Fashion-MNIST to 92 % (minutes on the emulator)"
        char_gpt --layers 2 --heads 2 --width 32 --context 16 --batch-size 4 --steps 6 --eval-interval 6 --sample-len 0
        gpt_vs_torch --layers 2 --heads 2 --width 32 --context 16 --batch-size 4 --steps 6 --eval-interval 6
        return
    fi
    "$(bin gpu_monitor)" --count 3 || return 1
    "$(bin mnist_mlp)" --device cuda --epochs 1 || return 1
    "$(bin cpu_vs_gpu)" || return 1
    # once each: the device budget holds one run per side (a median of three waits for a longer loan)
    echo "== fmnist92"
    "$(bin fmnist92)" --amp bf16 > "$G/fmnist92_bf16.txt"
    rc=$?
    cat "$G/fmnist92_bf16.txt"
    [ "$rc" = 0 ] || return 1
    "$(bin fmnist92)" || return 1
    if [ "$torch" = yes ]; then
        # shellcheck disable=SC2046 # util_env: VAR=value words (our peak for the twin's utilisation line)
        env $(util_env "$G/fmnist92_bf16.txt") python3 bench/pytorch/fmnist92.py --amp || return 1
    fi
    [ "$torch" = yes ] || echo "SKIPPED: PyTorch's fmnist92 (python3 cannot import torch with CUDA)"
    # the example's own model (its defaults), long enough for a steady median step time
    char_gpt --steps 500 --eval-interval 250 --sample-len 200
    gpt_vs_torch --steps 300 --eval-interval 300
}
char_gpt() { # OPTIONS: the character GPT on the GPU, when the fortunes are here
    if ! d=$(fortunes_dir); then echo "SKIPPED: char_gpt (no English fortunes: carry data/fortunes)"; return 0; fi
    echo "== char_gpt"
    "$(bin char_gpt)" --device cuda --data "$d" "$@"
}
# gpt_vs_torch OPTIONS: the char_gpt GPU figure: the character GPT in bf16 (autocast), ours and PyTorch's twin
# (F.scaled_dot_product_attention) from the same initial weights on the same batches; the ratio of the
# median step times is that of the tokens/s (the same batch and context). The dry run's twin runs on the
# CPU where python3 has torch, so that the script is tested too.
gpt_vs_torch() {
    need_probe
    fortunes_dir >/dev/null || return 0 # char_gpt said SKIPPED
    init="$G/char_gpt_init.safetensors" batches="$G/char_gpt_batches.safetensors"
    char_gpt --amp bf16 --sample-len 0 --save-init "$init" --dump-batches "$batches" "$@" | tee "$G/char_gpt_bf16.txt" ||
        return 1
    case $torch in
    yes) tdev=cuda ;;
    cpu) tdev=cpu ;;
    *) echo "SKIPPED: PyTorch's char_gpt (python3 cannot import torch)"; return 0 ;;
    esac
    echo "== PyTorch's char_gpt ($tdev, bf16)"
    # shellcheck disable=SC2046 # util_env: VAR=value words (our FLOP count and peak for the twin's utilisation line)
    env $(util_env "$G/char_gpt_bf16.txt") python3 bench/pytorch/char_gpt.py --device "$tdev" --amp bf16 "$init" "$batches" | tee "$G/char_gpt_torch.txt" ||
        return 1
    ours=$(sed -n 's/^median step time \([0-9.]*\) ms.*/\1/p' "$G/char_gpt_bf16.txt")
    theirs=$(sed -n 's/^median step time \([0-9.]*\) ms.*/\1/p' "$G/char_gpt_torch.txt")
    echo "char_gpt bf16 median step: ours $ours ms, PyTorch $theirs ms; tokens/s ours/PyTorch" \
        "$(awk -v a="$ours" -v b="$theirs" 'BEGIN { if (a > 0) printf "%.2f", b / a; else print "?" }') (goal >= 1.0)"
}
nccl_step() {
    need_build || return 1
    if [ "$nccl" = no ]; then echo "SKIPPED: no libnccl on this machine (the other steps were built with GPUDL_NO_NCCL)"; return 0; fi
    if [ "$dry" = 1 ]; then
        GPUDL_NCCL_TEST=build/emu_test_dist_nccl GPUDL_NCCL_RANKS=1 sh tests/test_dist_nccl.sh
    else
        GPUDL_NCCL_TEST="$G/test_dist_nccl_cuda" GPUDL_NCCL_RANKS="${gpus:-1}" sh tests/test_dist_nccl.sh &&
            "$(bin ddp)" --epochs 1
    fi
}

if [ "${1:-}" = --step ]; then # one step's work, under step()'s time limit (or by hand: --step FUNCTION ARGS)
    fn=$2
    shift 2
    "$fn" "$@"
    exit
fi
steps=${*:-"probe build suite sanitize bench nccl examples"}
for s in $steps; do
    case $s in probe|build|suite|sanitize|bench|examples|nccl) ;;
    *) echo "gpu_session: no step '$s' (probe build suite sanitize bench nccl examples)" >&2; exit 2 ;; esac
done
[ "$dry" = 1 ] && note "== dry run on the CUDA emulator (GPU_SESSION_DRY=1)"
for s in $steps; do
    case $s in
    probe)    step probe 30 probe; cat "$G/probe.txt" >>"$S" ;;
    build)    step build 180 build ;;
    suite)    step suite 120 suite ;;
    sanitize) step sanitize 200 sanitize ;;
    bench)    step bench 100 bench ;;
    nccl)     step nccl 40 nccl_step ;;
    examples) step examples 150 examples ;;
    esac
done
note "failed steps: $fails"
exit "$fails"
