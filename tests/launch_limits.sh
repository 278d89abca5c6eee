#!/bin/sh
# launch_limits.sh — holds the real build's kernels against the launches the
# GPU suite makes (issue 25). ptxas's resource report of gpudl_cuda.cu for
# each architecture (registers, spill stores, static shared memory, stack)
# and the emulator's launch log (GPUDL_EMU_LAUNCH_LOG: each kernel's largest
# block, dynamic shared memory and grid over a run of the suite) are joined
# by kernel name; a launch that a GPU of that architecture would refuse fails:
#   - more than 1024 threads per block;
#   - registers x threads over the 65536 a block may use (registers are
#     allocated per warp in units of 256: per thread rounded up to 8);
#   - static + dynamic shared memory over 48 KiB (no kernel of gpudl opts in
#     with cudaFuncAttributeMaxDynamicSharedMemorySize);
#   - grid y or z over 65535, x over 2^31 - 1;
#   - a kernel that spills, unless a comment within the 3 lines above its
#     __global__ line says "spills:" and why.
# A launched kernel missing from the report (renamed?) fails too.
#
#   tests/launch_limits.sh REPORT LAUNCH_LOG [SOURCE]
#       REPORT: nvcc --resource-usage output (any number of architectures)
#   tests/launch_limits.sh --self-test
#       a planted kernel with too many registers for its launch, and one
#       that spills without a comment, must be refused; a fitting one passes
set -eu

check() {
    report=$1 log=$2 src=${3:-gpudl_cuda.cu}
    # "arch mangled regs spill_stores smem stack" per kernel and architecture
    tab=$(mktemp "${TMPDIR:-/tmp}/gdl_ll.XXXXXX")
    awk '
        /Compiling entry function/ { split($0, q, "\047"); cur = q[2]; arch[cur] = q[4]; next }
        /Function properties for/ { g = $NF; next }
        /bytes stack frame/ { if (g == cur) { st[cur] = $1; sp[cur] = $5 } next }
        /Used [0-9]+ registers/ && cur != "" {
            r = $0; sub(/.*Used /, "", r); sub(/ registers.*/, "", r);
            s = 0; if (match($0, /[0-9]+ bytes smem/)) { s = substr($0, RSTART); sub(/ .*/, "", s) }
            print arch[cur], cur, r, (sp[cur] == "" ? 0 : sp[cur]), s, (st[cur] == "" ? 0 : st[cur]); cur = "" }
    ' "$report" > "$tab.raw"
    # demangled base names: "void gdl__k_x<float>(int, ...)" -> gdl__k_x
    cut -d' ' -f2 "$tab.raw" | c++filt | sed -e 's/^void //' -e 's/[<(].*//' > "$tab.names"
    paste -d' ' "$tab.raw" "$tab.names" > "$tab"
    if [ ! -s "$tab" ]; then
        echo "launch_limits: no kernel in the resource report $report"; rm -f "$tab" "$tab.raw" "$tab.names"; return 1
    fi
    bad=0
    while read -r name threads shmem gx gy gz; do
        lines=$(awk -v n="$name" '$7 == n' "$tab")
        if [ -z "$lines" ]; then
            # launched through a pointer: "void (*ALIAS)(...) = KERNEL<...>;" in the source
            real=$(tr '\n' ' ' < "$src" | grep -o "(\*$name)([^)]*) *= *[A-Za-z_][A-Za-z0-9_]*" | head -1 | sed 's/.*= *//')
            [ -z "$real" ] || lines=$(awk -v n="$real" '$7 == n' "$tab")
        fi
        if [ -z "$lines" ] && grep -q "K $name)" "$src" 2>/dev/null; then
            echo "note launch_limits: $name is a kernel passed as a parameter: its callers' kernels are checked where launched by name"
            continue
        fi
        if [ -z "$lines" ]; then
            echo "FAIL launch_limits: kernel $name is launched but not in the resource report"; bad=1; continue
        fi
        # shellcheck disable=SC2034
        echo "$lines" | while read -r arch mangled regs spills ssmem stack base; do
            why=""
            warps=$(( (threads + 31) / 32 ))
            r8=$(( (regs + 7) / 8 * 8 ))
            [ "$threads" -le 1024 ] || why="$why; $threads threads per block (at most 1024)"
            [ $((r8 * warps * 32)) -le 65536 ] ||
                why="$why; $regs registers x $threads threads = $((r8 * warps * 32)) (at most 65536 per block)"
            [ $((ssmem + shmem)) -le 49152 ] ||
                why="$why; $ssmem + $shmem bytes of shared memory (at most 49152 without the opt-in)"
            [ "$gy" -le 65535 ] && [ "$gz" -le 65535 ] && [ "$gx" -le 2147483647 ] || why="$why; grid ($gx,$gy,$gz)"
            if [ "$spills" -gt 0 ] && ! grep -B3 "__global__ void $name(" "$src" 2>/dev/null | grep -q 'spills:'; then
                why="$why; $spills bytes of spill stores (no 'spills:' comment at the kernel)"
            fi
            if [ -n "$why" ]; then
                echo "FAIL launch_limits: $name on $arch: ${why#; }"
                echo x >> "$tab.fail"
            fi
        done
    done < "$log"
    [ ! -s "$tab.fail" ] || bad=1
    n=$(wc -l < "$log")
    nk=$(cut -d' ' -f7 "$tab" | sort -u | wc -l)
    na=$(cut -d' ' -f1 "$tab" | sort -u | tr '\n' ' ')
    rm -f "$tab" "$tab.raw" "$tab.names" "$tab.fail"
    if [ "$bad" = 0 ]; then
        echo "launch_limits: $n launched kernels within the limits on ${na% } ($nk kernels in the report)"
    fi
    return $bad
}

self_test() {
    d=$(mktemp -d "${TMPDIR:-/tmp}/gdl_ll_self.XXXXXX")
    trap 'rm -rf "$d"' EXIT
    # a fitting kernel and a planted one using 128 registers, launched with 1024 threads
    cat > "$d/report" <<'EOF'
ptxas info    : Compiling entry function '_Z8k_fitterPf' for 'sm_80'
ptxas info    : Function properties for _Z8k_fitterPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, 128 bytes smem, 360 bytes cmem[0]
ptxas info    : Compiling entry function '_Z11k_regs_hogsPf' for 'sm_80'
ptxas info    : Function properties for _Z11k_regs_hogsPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 128 registers, 360 bytes cmem[0]
ptxas info    : Compiling entry function '_Z9k_spillerPf' for 'sm_90'
ptxas info    : Function properties for _Z9k_spillerPf
    8 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 255 registers, 360 bytes cmem[0]
EOF
    printf '__global__ void k_fitter(float *x) {}\n' > "$d/src.cu"
    printf 'k_fitter 1024 1024 4096 1 1\n' > "$d/ok.log"
    printf 'k_regs_hogs 1024 0 1 1 1\n' > "$d/regs.log"
    printf 'k_spiller 32 0 1 1 1\n' > "$d/spill.log"
    printf 'k_fitter 256 49152 1 1 1\n' > "$d/smem.log"
    check "$d/report" "$d/ok.log" "$d/src.cu" > "$d/out" || { cat "$d/out"; echo "FAIL: a fitting launch refused"; exit 1; }
    for t in regs spill smem; do
        if check "$d/report" "$d/$t.log" "$d/src.cu" > "$d/out"; then
            echo "FAIL: the planted $t case passed"; exit 1
        fi
        grep -q 'FAIL launch_limits' "$d/out" || { cat "$d/out"; echo "FAIL: no report for $t"; exit 1; }
    done
    printf '// spills: a planted one, allowed\n__global__ void k_spiller(float *x) {}\n' > "$d/src.cu"
    check "$d/report" "$d/spill.log" "$d/src.cu" > "$d/out" || { cat "$d/out"; echo "FAIL: a commented spill refused"; exit 1; }
    echo "launch_limits self-test: the planted over-register, spilling and over-shared launches are refused"
}

if [ "${1:-}" = "--self-test" ]; then self_test; exit 0; fi
[ $# -ge 2 ] || { echo "usage: $0 REPORT LAUNCH_LOG [SOURCE] | --self-test" >&2; exit 2; }
check "$@"
