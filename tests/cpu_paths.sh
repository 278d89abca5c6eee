#!/bin/sh
# cpu_paths.sh — runs the CPU suite of each CPU code path (tests/cpu_paths.mk
# builds them) and compares the paths' training traces.
#
#   sh tests/cpu_paths.sh x86 BUILD        AVX-512, AVX2 and portable C builds
#   sh tests/cpu_paths.sh aarch64 BUILD    the AArch64 build under qemu
#   sh tests/cpu_paths.sh unpack DIR       Fashion-MNIST as plain IDX into DIR
#
# The programs come from the Makefile (CPUP_PROGS: SUITE's cpup attribute),
# which make test-cpu-paths and make test-aarch64 pass in; each runs under
# the harness's verbose output, test_train with the Fashion-MNIST folder its
# build reads, and train_trace's traces are compared (below).
#
# A path the CPU cannot run is reported as a SKIP line and counted as
# skipped. Each program runs in its own scratch directory (test_train writes
# build/test_train_* relative to it), so these runs never share files with
# test-unit's or with each other, also under make -j. Every program goes through tests/run.sh, whose last line sums
# them all ("N passed, N failed, N skipped").
#
# Training traces (tests/train_trace.c): the AVX-512, AVX2 and NEON GEMM
# kernels compute each element of a product as the same chain of fused
# multiply-adds in the same order (gpudl.h, src/cpu/gemm.h) and the rest of the
# library does not depend on the target, so those paths must agree bit for
# bit. The portable kernel rounds each product before adding (no FMA in
# x86-64's baseline); measured, it stays within 2e-7 relative of the others
# over the trace's 55 steps, and the check allows 1e-5.
set -u
mode=${1:-}
CPUP_PROGS=${CPUP_PROGS:-}
B=${2:-build}
PORTABLE_TOL=1e-5
mkdir -p "$B" && B=$(cd "$B" && pwd) || exit 1

# find_data: the first folder holding Fashion-MNIST (.gz or plain), as gpudl
# searches: $GPUDL_DATA, ./data, Debian's dataset-fashion-mnist.
find_data() {
    for d in ${GPUDL_DATA:-} data /usr/share/datasets/fashion-mnist; do
        if [ -f "$d/train-images-idx3-ubyte.gz" ] || [ -f "$d/train-images-idx3-ubyte" ]; then
            (cd "$d" && pwd)
            return 0
        fi
    done
    return 1
}

# unpack DIR: plain IDX copies of Fashion-MNIST for the builds without zlib
# (nothing when the data set is not installed: those tests then skip, saying so)
unpack() {
    dir=$1
    mkdir -p "$dir"
    if [ -f "$dir/t10k-labels-idx1-ubyte" ]; then return 0; fi
    if ! src=$(find_data); then
        echo "cpu_paths: Fashion-MNIST not found (make data): the no-zlib builds will skip their Fashion-MNIST test"
        return 0
    fi
    for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
        if [ -f "$src/$f" ]; then cp "$src/$f" "$dir/$f.$$"; else gzip -dc "$src/$f.gz" > "$dir/$f.$$"; fi || exit 1
        mv "$dir/$f.$$" "$dir/$f"
    done
    echo "cpu_paths: Fashion-MNIST from $src unpacked into $dir"
}

# wrap NAME COMMAND...: an executable script that runs COMMAND "$@" in its
# own scratch directory $W/NAME.d, so that tests/run.sh (which takes one path
# per program) can run it. wrap_h does the same for a harness program: run
# verbose, it names every skipped test with its reason; the PASS lines are
# dropped.
wrap() {
    name=$1
    shift
    mkdir -p "$W/$name.d/build"
    {
        echo '#!/bin/sh'
        printf "cd '%s' || exit 1\n" "$W/$name.d"
        printf 'exec'
        for a in "$@"; do printf " '%s'" "$a"; done
        echo ' "$@"'
    } > "$W/$name"
    chmod +x "$W/$name"
}
wrap_h() {
    name=$1
    shift
    mkdir -p "$W/$name.d/build"
    {
        echo '#!/bin/sh'
        printf "cd '%s' || exit 1\n" "$W/$name.d"
        printf 'out=$('
        for a in "$@"; do printf "'%s' " "$a"; done
        echo '-v "$@" 2>&1)'
        echo 'rc=$?'
        echo "printf '%s\\n' \"\$out\" | grep -v '^  PASS '"
        echo 'exit $rc'
    } > "$W/$name"
    chmod +x "$W/$name"
}

# skip NAME REASON: a program that reports one skipped test
skip() {
    printf '#!/bin/sh\necho "SKIP %s: %s"\necho "0 passed, 0 failed, 1 skipped"\n' "$1" "$2" > "$W/$1"
    chmod +x "$W/$1"
}

# suite PREFIX DATA RUNNER...: every program of CPUP_PROGS but train_trace, from
# the build folder the caller's RUNNER ends in, wrapped as PREFIX-NAME and
# added to progs; test_train reads Fashion-MNIST from DATA
suite() {
    prefix=$1 data=$2
    shift 2
    if [ -z "$CPUP_PROGS" ]; then
        echo "cpu_paths: CPUP_PROGS is empty: run it through make test-cpu-paths or make test-aarch64"
        exit 2
    fi
    for t in $CPUP_PROGS; do
        case $t in
        train_trace) continue ;;
        test_train) wrap_h "$prefix-$t" env GPUDL_DATA="$data" "$@$t" ;;
        *) wrap_h "$prefix-$t" "$@$t" ;;
        esac
        progs="$progs $W/$prefix-$t"
    done
}

has_flags() { # has_flags FLAG...: the CPU has every one (Linux /proc/cpuinfo; CPUINFO=FILE to try a CPU's file)
    for f in "$@"; do
        grep -qw "$f" "${CPUINFO:-/proc/cpuinfo}" 2>/dev/null || return 1
    done
    return 0
}

case "$mode" in
unpack)
    unpack "$B"
    exit 0
    ;;
x86)
    W=$B/cpu-paths-run
    rm -rf "$W"
    mkdir -p "$W"
    progs=
    unpack "$B/fmnist-raw"
    raw=$B/fmnist-raw
    gz=$(find_data) || gz=$raw
    sed -n 's/^model name[^:]*: */cpu_paths: CPU: /p' /proc/cpuinfo 2>/dev/null | head -n 1
    # the portable trace is the reference the other x86 paths are compared with
    if ! "$B/cpu-portable/train_trace" > "$B/cpu-portable/trace.txt"; then
        echo "cpu_paths: the portable train_trace failed"
        exit 1
    fi
    ref_fused=
    for p in portable avx2 avx512; do
        d=$B/cpu-$p
        case $p in
        avx512) need="avx2 fma avx512f avx512dq" ;;
        avx2) need="avx2 fma" ;;
        *) need= ;;
        esac
        if [ -n "$need" ] && ! has_flags $need; then
            echo "SKIP: the $p path: this CPU lacks one of: $need (built, not run)"
            skip "$p-suite" "this CPU lacks one of: $need; the $p build was compiled but not run"
            progs="$progs $W/$p-suite"
            continue
        fi
        if [ $p = portable ]; then suite $p "$raw" "$d/"; else suite $p "$gz" "$d/"; fi
        if [ $p = portable ]; then
            continue
        fi
        # fused paths: within tolerance of portable C, and bitwise equal to each other
        wrap "$p-trace-vs-portable" "$d/train_trace" --against "$B/cpu-portable/trace.txt" --tol $PORTABLE_TOL
        progs="$progs $W/$p-trace-vs-portable"
        if [ -n "$ref_fused" ]; then
            wrap "$p-trace-vs-$ref_fused" "$d/train_trace" --against "$B/cpu-$ref_fused/trace.txt"
            progs="$progs $W/$p-trace-vs-$ref_fused"
        else
            "$d/train_trace" > "$d/trace.txt" && ref_fused=$p
        fi
    done
    sh tests/run.sh $progs
    ;;
aarch64)
    W=$B/aarch64-run
    A=$B/aarch64
    rm -rf "$W"
    mkdir -p "$W"
    Q=${AARCH64_QEMU:-qemu-aarch64}
    S=${AARCH64_SYSROOT:-/usr/aarch64-linux-gnu}
    progs=
    echo "cpu_paths: AArch64 under $($Q --version | head -n 1)"
    unpack "$B/fmnist-raw"
    suite aarch64 "$B/fmnist-raw" "$Q" -L "$S" "$A/"
    # NEON must equal AVX2 bit for bit; where the CPU has no AVX2, it is
    # compared with portable C within tolerance (both traces made afresh)
    if has_flags avx2 fma && "$B/cpu-avx2/train_trace" > "$W/trace-avx2.txt"; then
        wrap "aarch64-trace-vs-avx2" "$Q" -L "$S" "$A/train_trace" --against "$W/trace-avx2.txt"
        progs="$progs $W/aarch64-trace-vs-avx2"
    elif "$B/cpu-portable/train_trace" > "$W/trace-portable.txt"; then
        wrap "aarch64-trace-vs-portable" "$Q" -L "$S" "$A/train_trace" --against "$W/trace-portable.txt" --tol $PORTABLE_TOL
        progs="$progs $W/aarch64-trace-vs-portable"
    else
        echo "cpu_paths: no x86 trace to compare the AArch64 one with"
        exit 1
    fi
    sh tests/run.sh $progs
    ;;
*)
    echo "usage: sh tests/cpu_paths.sh x86|aarch64 BUILD  or  sh tests/cpu_paths.sh unpack DIR"
    exit 2
    ;;
esac
