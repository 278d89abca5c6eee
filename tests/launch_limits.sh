#!/bin/sh
# launch_limits.sh — holds the real build's kernels against the launches the
# GPU suite makes. ptxas's resource report of gpudl_cuda.cu (nvcc
# --resource-usage, written by make's own compiles of gpudl_cuda.o: sm_80 and
# sm_90 in $(B), sm_87 in the Jetson build) gives each kernel's registers,
# spill stores, static shared memory and stack; the emulator's launch log
# (GPUDL_EMU_LAUNCH_LOG: each kernel's largest block, dynamic shared memory
# and grid over test-emu's checks run) gives its launches. Joined by kernel
# name, a launch that a GPU of that architecture would refuse, or run badly,
# fails:
#   - more than 1024 threads per block;
#   - registers x threads over the 65536 registers of a block (and of an SM):
#     allocated per warp in units of 256, i.e. per thread rounded up to 8;
#   - static + dynamic shared memory over 48 KiB, unless the source opts the
#     kernel in (cudaFuncSetAttribute(kernel,
#     cudaFuncAttributeMaxDynamicSharedMemorySize, ...)): then over the
#     architecture's opt-in limit (163 KiB sm_80/sm_87, 227 KiB sm_90);
#   - grid y or z over 65535, x over 2^31 - 1;
#   - spill stores, in the kernel or in a device function ptxas kept apart,
#     unless a comment within the 3 lines above its definition says
#     "spills:" and why;
#   - a stack over 1 KiB a thread (the default cudaLimitStackSize: above it
#     the driver grows every resident thread's local memory, e.g. 4 KiB x
#     2048 threads x 132 SMs = 1.1 GB on an H100), unless a "stack:" comment
#     says why. (Recursion, a stack ptxas cannot size, is reported only by
#     the linker and the driver: not seen here.)
# A launched kernel missing from the report (renamed?) fails too, and so
# does a required architecture missing from the reports.
#
#   tests/launch_limits.sh [--archs "sm_80 sm_87 sm_90"] LAUNCH_LOG SOURCE REPORT...
#   tests/launch_limits.sh --compile REPORT NVCC ARGS...
#       runs the compile with --resource-usage's report kept in REPORT, not
#       on the terminal (its warnings and errors still are)
#   tests/launch_limits.sh --planted NVCC DIR
#       compiles tests/launch_planted.cu for sm_80 into DIR: its
#       over-register, spilling, deep-stack and over-shared kernels must be
#       refused, the fitting and the commented spilling ones let through
#   tests/launch_limits.sh --self-test
#       the same on a written report (no nvcc), plus grids, the opt-in,
#       spilling device functions and launches through pointers
set -eu

# the largest dynamic + static shared memory a block may opt in to
optin_smem() {
    case $1 in
    sm_80 | sm_87) echo 166912 ;;
    sm_90) echo 232448 ;;
    *) echo 49152 ;; # unknown: no more than without the opt-in
    esac
}

# REPORT... -> "$t.ent": "arch mangled regs spills ssmem stack" per kernel and
# architecture; "$t.fn": "mangled spills stack" per device function kept apart
parse_reports() {
    t=$1
    shift
    awk -v fn="$t.fn" '
        /Compiling entry function/ { split($0, q, "\047"); cur = q[2]; arch = q[4]; next }
        /Function properties for/ { g = $NF; next }
        /bytes stack frame/ {
            if (g == cur) { st = $1; sp = $5 } else if (g != "") print g, $5, $1 > fn
            g = ""; next }
        /Used [0-9]+ registers/ && cur != "" {
            r = $0; sub(/.*Used /, "", r); sub(/ registers.*/, "", r)
            s = 0; if (match($0, /[0-9]+ bytes smem/)) { s = substr($0, RSTART); sub(/ .*/, "", s) }
            if (match($0, /[0-9]+ bytes cumulative stack/)) { st = substr($0, RSTART); sub(/ .*/, "", st) }
            print arch, cur, r, sp + 0, s, st + 0; cur = ""; st = 0; sp = 0 }
    ' "$@" > "$t.ent"
    touch "$t.fn"
}

# demangled base names, one a line: "void gdl__k_x<float>(int, ...)" -> gdl__k_x
base_names() { c++filt | sed -e 's/[<(].*//' -e 's/.* //' -e 's/.*:://'; }

# the functions of SOURCE that a comment within the 3 lines above their
# definition lets off: "spills NAME" / "stack NAME"; and the kernels opted
# in to more shared memory: "optin NAME"
source_allowances() {
    awk '
        /spills:/ { sp = NR } /stack:/ { st = NR }
        /__global__|__device__/ {
            l = $0; gsub(/__launch_bounds__ *\([^)]*\)/, "", l)
            if (match(l, /[A-Za-z_][A-Za-z0-9_]* *\(/)) {
                n = substr(l, RSTART, RLENGTH); sub(/ *\($/, "", n)
                if (sp && NR - sp <= 3) print "spills", n
                if (st && NR - st <= 3) print "stack", n
            }
        }' "$1"
    tr '\n' ' ' < "$1" | grep -o 'cudaFuncSetAttribute *( *&\{0,1\}[A-Za-z_][A-Za-z0-9_]*[^;]*cudaFuncAttributeMaxDynamicSharedMemorySize' |
        sed -e 's/cudaFuncSetAttribute *( *&\{0,1\}//' -e 's/[^A-Za-z0-9_].*//' -e 's/^/optin /' || true
}

# the kernels a launch-log name stands for: itself; the kernel a pointer of
# that name is set to ("void (*ALIAS)(...) = KERNEL<...>;"); or, for a
# kernel passed as a parameter ("..., K NAME)"), every kernel of the report
# named in the calls of the function that takes it
resolve() {
    name=$1 src=$2 names=$3
    if grep -qx "$name" "$names"; then echo "$name"; return; fi
    real=$(tr '\n' ' ' < "$src" | grep -o "(\*$name)([^)]*) *= *[A-Za-z_][A-Za-z0-9_]*" | head -1 | sed 's/.*= *//')
    if [ -n "$real" ]; then echo "$real"; return; fi
    fn=$(tr '\n' ' ' < "$src" | grep -o "[A-Za-z_][A-Za-z0-9_]*([^()]*K $name)" | head -1 | sed 's/(.*//')
    if [ -n "$fn" ]; then
        grep "$fn *(" "$src" | grep -v "K $name)" | grep -o '[A-Za-z_][A-Za-z0-9_]*' | grep -xF -f "$names" | sort -u
        return
    fi
    # a kernel passed as a function-pointer parameter ("FN(void (*NAME)(...), ...)"): the kernels
    # named in FN's calls
    fn=$(tr '\n' ' ' < "$src" | grep -o "[A-Za-z_][A-Za-z0-9_]*(void (\*$name)" | head -1 | sed 's/(.*//')
    [ -n "$fn" ] || return 0
    grep "$fn[<>A-Za-z0-9_]* *(" "$src" | grep -v "(\*$name)" | grep -o '[A-Za-z_][A-Za-z0-9_]*' | grep -xF -f "$names" | sort -u
}

check() {
    archs=$1 log=$2 src=$3
    shift 3
    t=$(mktemp "${TMPDIR:-/tmp}/gdl_ll.XXXXXX")
    parse_reports "$t" "$@"
    if [ ! -s "$t.ent" ]; then
        echo "FAIL launch_limits: no kernel in the resource report(s) $*"; rm -f "$t" "$t".*; return 1
    fi
    cut -d' ' -f2 "$t.ent" | base_names > "$t.b"
    paste -d' ' "$t.ent" "$t.b" > "$t.tab"              # arch mangled regs spills ssmem stack base
    cut -d' ' -f1 "$t.fn" | base_names | paste -d' ' "$t.fn" - > "$t.fns" # mangled spills stack base
    sort -u "$t.b" > "$t.names"
    source_allowances "$src" > "$t.allow"
    # the log's names resolved to the report's kernels: "base threads shmem gx gy gz logname"
    : > "$t.launch"
    while read -r name threads shmem gx gy gz; do
        ks=$(resolve "$name" "$src" "$t.names")
        if [ -z "$ks" ]; then
            echo "FAIL launch_limits: kernel $name is launched but not in the resource report"
            echo x >> "$t.fail"
            continue
        fi
        for k in $ks; do echo "$k $threads $shmem $gx $gy $gz $name" >> "$t.launch"; done
    done < "$log"
    awk -v archs="$archs" -v o80="$(optin_smem sm_80)" -v o90="$(optin_smem sm_90)" '
        FILENAME ~ /\.allow$/ { allow[$1, $2] = 1; next }
        FILENAME ~ /\.tab$/ { n = ++nk[$7]; K[$7, n] = $0; seen[$1] = 1; next }
        FILENAME ~ /\.fns$/ {
            if ($2 > 0 && !allow["spills", $4] && !fnbad[$1]++) {
                print "FAIL launch_limits: device function " $4 " (" $1 ") spills " $2 " bytes (no \"spills:\" comment at it)"; bad = 1 }
            next }
        {   base = $1; threads = $2; shmem = $3; gx = $4; gy = $5; gz = $6; launched[base] = 1
            for (i = 1; i <= nk[base]; i++) {
                split(K[base, i], f, " "); arch = f[1]; regs = f[3]; spills = f[4]; ssmem = f[5]; stack = f[6]
                why = ""; warps = int((threads + 31) / 32); r8 = int((regs + 7) / 8) * 8; rf = r8 * warps * 32
                lim = allow["optin", base] ? (arch == "sm_90" ? o90 : (arch == "sm_80" || arch == "sm_87") ? o80 : 49152) : 49152
                if (threads > 1024) why = why "; " threads " threads per block (at most 1024)"
                if (rf > 65536) why = why "; " regs " registers x " threads " threads = " rf " (at most 65536 per block)"
                if (ssmem > 49152) why = why "; " ssmem " bytes of static shared memory (at most 49152)"
                if (ssmem + shmem > lim)
                    why = why "; " ssmem " + " shmem " bytes of shared memory (at most " lim (lim == 49152 ? " without the opt-in" : "") ")"
                if (gy > 65535 || gz > 65535 || gx > 2147483647) why = why "; grid (" gx "," gy "," gz ")"
                if (spills > 0 && !allow["spills", base]) why = why "; " spills " bytes of spill stores (no \"spills:\" comment at the kernel)"
                if (stack > 1024 && !allow["stack", base])
                    why = why "; a " stack "-byte stack (over the default 1024 of cudaLimitStackSize; no \"stack:\" comment at the kernel)"
                if (why != "") { key = base SUBSEP arch SUBSEP why
                    if (!told[key]++) print "FAIL launch_limits: " base " (" f[2] ") on " arch ": " substr(why, 3); bad = 1 }
                checked++
                if (rf > maxrf) { maxrf = rf; maxrfk = base " on " arch " (" regs " registers x " threads " threads)" }
                if (ssmem + shmem > maxsm) { maxsm = ssmem + shmem; maxsmk = base " on " arch }
                if (stack > maxst) { maxst = stack; maxstk = base " on " arch }
            }
        }
        END {
            na = split(archs, A, " ")
            for (i = 1; i <= na; i++) if (!seen[A[i]]) { print "FAIL launch_limits: no " A[i] " in the resource reports"; bad = 1 }
            for (b in nk) if (!launched[b]) nl = nl " " b
            if (nl != "") print "note launch_limits: in the report, not launched in the logged run (unchecked):" nl
            printf "launch_limits: %d kernel x architecture configurations checked; largest register file %d of 65536 (%s), shared memory %d bytes (%s), stack %d bytes (%s)\n",
                checked, maxrf, maxrfk, maxsm, (maxsm ? maxsmk : "none"), maxst, (maxst ? maxstk : "none")
            exit bad
        }' "$t.allow" "$t.tab" "$t.fns" "$t.launch" || echo x >> "$t.fail"
    bad=0
    [ ! -s "$t.fail" ] || bad=1
    if [ "$bad" = 0 ]; then
        echo "launch_limits: $(wc -l < "$log") launched kernels ($(cut -d' ' -f1 "$t.launch" | sort -u | wc -l) of the report's $(wc -l < "$t.names")) within the limits on $(cut -d' ' -f1 "$t.tab" | sort -u | tr '\n' ' ' | sed 's/ $//')"
    fi
    rm -f "$t" "$t".*
    return $bad
}

# --compile REPORT CMD...: the report kept, the rest of the output shown
compile() {
    report=$1
    shift
    rc=0
    "$@" --resource-usage > "$report.tmp" 2>&1 || rc=$?
    grep -v -e '^ptxas info' -e '^ *[0-9]* bytes stack frame' "$report.tmp" || true
    if [ "$rc" != 0 ]; then rm -f "$report.tmp"; return "$rc"; fi
    mv "$report.tmp" "$report"
    touch "$report" # newer than the object: make's rule for the report sees it made
}

# expect OUT PATTERN WHAT: OUT must have a FAIL line matching PATTERN
expect_fail() {
    sed -n 's/^FAIL launch_limits: //p' "$1" | grep -e "$2" | sed 's/^/    caught: /' > "$1.hit" || true
    [ -s "$1.hit" ] || { cat "$1"; echo "FAIL: $3 was not refused"; exit 1; }
    cat "$1.hit"
}

planted() {
    nvcc=$1 d=$2
    here=$(dirname "$0")
    mkdir -p "$d"
    compile "$d/planted.resources" "$nvcc" -cubin -arch=sm_80 "$here/launch_planted.cu" -o "$d/planted.cubin"
    printf '%s\n' 'll_fits 256 0 64 1 1' 'll_regs_hog 1024 0 1 1 1' 'll_spiller 256 0 1 1 1' \
        'll_spill_said 256 0 1 1 1' 'll_stack 64 0 1 1 1' 'll_smem 256 20480 1 1 1' > "$d/bad.log"
    if check sm_80 "$d/bad.log" "$here/launch_planted.cu" "$d/planted.resources" > "$d/out"; then
        cat "$d/out"; echo "FAIL: the planted kernels passed"; exit 1
    fi
    echo "launch_limits planted (nvcc, sm_80, $here/launch_planted.cu):"
    expect_fail "$d/out" "^ll_regs_hog .*registers x 1024 threads" "ll_regs_hog at 1024 threads"
    expect_fail "$d/out" "^ll_spiller .*spill stores" "ll_spiller's spills"
    expect_fail "$d/out" "^ll_stack .*-byte stack" "ll_stack's stack"
    expect_fail "$d/out" "^ll_smem .*bytes of shared memory" "ll_smem's 32 + 20 KiB"
    if grep 'FAIL launch_limits' "$d/out" | grep -q -e '^FAIL launch_limits: ll_fits' -e 'll_spill_said'; then
        cat "$d/out"; echo "FAIL: a fitting or commented kernel was refused"; exit 1
    fi
    # the register check is the launch's: the same kernel at 512 threads fits
    printf '%s\n' 'll_fits 256 0 64 1 1' 'll_regs_hog 512 0 1 1 1' 'll_spill_said 256 0 1 1 1' > "$d/ok.log"
    check sm_80 "$d/ok.log" "$here/launch_planted.cu" "$d/planted.resources" > "$d/out" ||
        { cat "$d/out"; echo "FAIL: ll_regs_hog at 512 threads (or a fitting kernel) refused"; exit 1; }
    echo "    passed: ll_fits, ll_spill_said (commented), ll_regs_hog at 512 threads"
}

self_test() {
    d=$(mktemp -d "${TMPDIR:-/tmp}/gdl_ll_self.XXXXXX")
    trap 'rm -rf "$d"' EXIT
    # ptxas's lines as CUDA 13 writes them: a fitting kernel, one using 128
    # registers, one that spills; in report2 one calling a device function
    # that spills, with a deep stack
    cat > "$d/report" <<'EOF'
ptxas info    : Compiling entry function '_Z8k_fitterPf' for 'sm_80'
ptxas info    : Function properties for _Z8k_fitterPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 128 bytes smem, 360 bytes cmem[0]
ptxas info    : Compiling entry function '_Z11k_regs_hogsPf' for 'sm_80'
ptxas info    : Function properties for _Z11k_regs_hogsPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 128 registers, used 0 barriers, 360 bytes cmem[0]
ptxas info    : Compiling entry function '_Z9k_spillerPf' for 'sm_90'
ptxas info    : Function properties for _Z9k_spillerPf
    8 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 255 registers, used 0 barriers, 8 bytes cumulative stack size, 360 bytes cmem[0]
EOF
    cat > "$d/report2" <<'EOF'
ptxas info    : Compiling entry function '_Z8k_callerPf' for 'sm_90'
ptxas info    : Function properties for _Z8k_callerPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers, 1600 bytes cumulative stack size, 360 bytes cmem[0]
ptxas info    : Function properties for _Z6helperi
    1600 bytes stack frame, 20 bytes spill stores, 20 bytes spill loads
EOF
    # k_alias: launched through a pointer; part: a parameter of run_part, whose call passes k_fitter
    printf '%s\n' '__global__ void k_fitter(float *x) {}' 'void (*k_alias)(float *) = k_fitter;' \
        'template <typename K> static int run_part(int n, K part) { return 0; }' 'int u = run_part(3, k_fitter);' \
        '// stack: planted, allowed' '__global__ void k_caller(float *x) {}' > "$d/src.cu"
    printf 'k_fitter 1024 1024 2147483647 65535 1\nk_alias 64 0 1 1 1\npart 64 0 1 1 1\n' > "$d/ok.log"
    check sm_80 "$d/ok.log" "$d/src.cu" "$d/report" > "$d/out" || { cat "$d/out"; echo "FAIL: a fitting launch refused"; exit 1; }
    for spec in "regs:k_regs_hogs 1024 0 1 1 1:registers x 1024" "spill:k_spiller 32 0 1 1 1:spill stores" \
        "smem:k_fitter 256 49152 1 1 1:shared memory" "grid:k_fitter 256 0 1 65536 1:grid (1,65536,1)" \
        "missing:k_renamed 32 0 1 1 1:not in the resource report" "helper:k_caller 32 0 1 1 1:device function helper" \
        "arch:k_fitter 32 0 1 1 1:no sm_87 in the resource reports"; do
        cname=${spec%%:*} rest=${spec#*:}
        printf '%s\n' "${rest%%:*}" > "$d/$cname.log"
        archs=sm_80 reports=$d/report
        [ "$cname" != arch ] || archs="sm_80 sm_87"
        [ "$cname" != helper ] || reports="$d/report $d/report2"
        # shellcheck disable=SC2086
        if check "$archs" "$d/$cname.log" "$d/src.cu" $reports > "$d/out"; then
            echo "FAIL: the planted $cname case passed"; exit 1
        fi
        grep 'FAIL launch_limits' "$d/out" | grep -qF "${rest#*:}" || { cat "$d/out"; echo "FAIL: no report for $cname"; exit 1; }
    done
    # a comment lets spills (and the stack) through; the opt-in raises the shared-memory limit
    printf '%s\n' '// spills: planted, allowed' '__global__ void k_spiller(float *x) {}' '// spills: helper too' \
        '__device__ int helper(int) { return 0; }' '__global__ void k_fitter(float *x) {}' \
        'cudaFuncSetAttribute(k_fitter, cudaFuncAttributeMaxDynamicSharedMemorySize, 100000);' > "$d/src.cu"
    printf 'k_spiller 32 0 1 1 1\nk_fitter 256 100000 1 1 1\nk_caller 32 0 1 1 1\n' > "$d/said.log"
    check sm_80 "$d/said.log" "$d/src.cu" "$d/report" "$d/report2" > "$d/out" || true
    grep 'FAIL launch_limits' "$d/out" | grep -v 'k_caller' && { echo "FAIL: a commented spill or an opted-in kernel refused"; exit 1; }
    grep -q 'k_caller.*1600-byte stack' "$d/out" || { cat "$d/out"; echo "FAIL: k_caller's stack without its comment passed"; exit 1; }
    echo "launch_limits self-test: the planted over-register, spilling, over-shared, deep-stack, over-grid, unknown-kernel and missing-architecture launches are refused"
}

case "${1:-}" in
--self-test) self_test; exit 0 ;;
--compile) shift; compile "$@"; exit $? ;;
--planted) shift; planted "$@"; exit 0 ;;
--archs) archs=$2; shift 2 ;;
*) archs="" ;;
esac
[ $# -ge 3 ] || { echo "usage: $0 [--archs \"sm_80 ...\"] LAUNCH_LOG SOURCE REPORT... | --compile REPORT NVCC ARGS... | --planted NVCC DIR | --self-test" >&2; exit 2; }
check "$archs" "$@"
