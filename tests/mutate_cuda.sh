#!/bin/sh
# mutate_cuda.sh — the GPU suite's mutation check. Plants typical
# kernel bugs into gpudl_cuda.cu one at a time in a scratch copy of the
# repository (the working tree is never touched), builds the suite against
# the CUDA-on-CPU emulator there with the fragment's own rules
# (tests/cuda_emu/emu.mk: only gpudl_cuda.cu's object and the test binary are
# rebuilt per mutant) and runs it with two emulated devices under the
# schedules make test-emu uses (round-robin, warp-at-a-time, reversed
# threads; the ASan+UBSan build is left out for time), then, for a mutant
# those leave, the racecheck build with GPUDL_EMU_RACECHECK and
# GPUDL_EMU_INITCHECK on (a report makes the run exit 66). A mutant is
# caught when the suite fails under any of them. Prints a line per mutant and
# "caught K of N". Not part of make test: it takes minutes.
#
#   tests/mutate_cuda.sh            every mutant
#   tests/mutate_cuda.sh NAME...    the mutants whose names contain a NAME
#   tests/mutate_cuda.sh -l         list the mutants
#   tests/mutate_cuda.sh -c         check each mutant's text occurs once
#   MUTATE_KEEP=1                   keep the scratch copy (its path is printed)
#   MUTATE_REV=HEAD                 test a commit (git archive) instead of the
#                                   working tree, e.g. while others edit it
#   MUTATE_SUITES="-s kernel_paths" the suite's own arguments for every run,
#                                   baseline included: a quicker check of a
#                                   few mutants (one that survives these
#                                   suites may still be caught by the rest)
#   MUTATE_TIMEOUT=300              seconds a run of the suite may take
#
# Each mutant is an exact-text replacement that must match exactly once in
# gpudl_cuda.cu; one that does not (the source changed) is an error, reported
# as such and making the exit status 2, never silently skipped.
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MAKE=${MAKE:-make}
TIMEOUT=${MUTATE_TIMEOUT:-300}

# ---- the mutants: name, the bug it stands for, old text, new text ----
PY=$(mktemp "${TMPDIR:-/tmp}/gpudl_mutants.XXXXXX")
cat > "$PY" <<'PYEOF'
import sys
M = [
("block_reduce_no_barrier_after_store", "missing __syncthreads: warps read the partial sums (or maxima) before all are written",
 "    if (lane == 0) sh[wid] = v;\n    __syncthreads();\n    v = lane < nw ? sh[lane] : none;",
 "    if (lane == 0) sh[wid] = v;\n    v = lane < nw ? sh[lane] : none;"),
("block_reduce_no_leading_barrier", "missing __syncthreads: a second call overwrites sh[] while a slow warp still reads the first",
 "    v = WARP(v);\n    __syncthreads();\n    if (lane == 0) sh[wid] = v;",
 "    v = WARP(v);\n    if (lane == 0) sh[wid] = v;"),
("warp_sum_offset_8", "wrong shuffle offset: the butterfly starts at 8, lanes 16..31 never meet 0..15",
 "for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);",
 "for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);"),
("warp_max_skips_offset_1", "off-by-one loop bound in a shuffle reduction (offset 1 skipped)",
 "for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));",
 "for (int o = 16; o > 1; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));"),
("block_reduce_half_the_warps", "wrong block-reduction size: counts warps as blockDim/64",
 "    __shared__ T sh[32];\n    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;",
 "    __shared__ T sh[32];\n    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 6;"),
("argmax_tie_last", "tie rule inverted in the block argmax: the last maximum wins",
 "    return v > bv || (v == bv && k < bk);",
 "    return v > bv || (v == bv && k > bk);"),
("reduce_thread_max_drops_nan", "NaN not propagated by the per-thread max",
 "            for (int64_t k = 1; k < n; k++) {\n                float v = sg * p[k * inner];\n                if (v > bv || (v != v && bv == bv)) {\n                    best = k;\n                    bv = v;\n                }\n            }\n            r = n ? sg * bv : -GDL__CU_INF * sg;",
 "            for (int64_t k = 1; k < n; k++) {\n                float v = sg * p[k * inner];\n                if (v > bv) {\n                    best = k;\n                    bv = v;\n                }\n            }\n            r = n ? sg * bv : -GDL__CU_INF * sg;"),
("reduce_thread_skips_tail", "skipped tail element in the per-thread sum",
 "            for (int64_t k = 0; k < n; k++) s += p[k * inner];",
 "            for (int64_t k = 0; k < n - 1; k++) s += p[k * inner];"),
("softmax_rows_off_by_one", "off-by-one bound: the row loop writes one element past the row",
 "        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) q[k] = log_ ? p[k] - lse : expf(p[k] - lse);",
 "        for (int64_t k = threadIdx.x; k <= n; k += blockDim.x) q[k] = log_ ? p[k] - lse : expf(p[k] - lse);"),
("layernorm_skips_tail", "skipped tail element in a block-stride loop (the mean of a layernorm row)",
 "        for (int64_t k = threadIdx.x; k < D; k += blockDim.x) s += p[k];",
 "        for (int64_t k = threadIdx.x; k < D - 1; k += blockDim.x) s += p[k];"),
("unary_backward_assigns", "= for += in a backward (the unary ops)",
 "        gx[i] = gdl__st<T>((acc ? gdl__ld(gx[i]) : 0.0f) + (sizeof(T) == 2 ? gdl__mul_rn(g, d) : g * d));",
 "        gx[i] = gdl__st<T>(sizeof(T) == 2 ? gdl__mul_rn(g, d) : g * d);"),
("relu_backward_assigns", "= for += in the ReLU backward",
 "            gx[i] = gdl__st<T>((acc ? gdl__ld(gx[i]) : 0.0f) + (pass ? gdl__ld(gy[i]) : 0.0f));",
 "            gx[i] = gdl__st<T>(pass ? gdl__ld(gy[i]) : 0.0f);"),
("sum_to_block_assigns", "= for += in the block sum_to (bias gradients over long batches)",
 "        if (threadIdx.x == 0) dst[od] = gdl__st<TD>(gdl__ld(dst[od]) + alpha * s);",
 "        if (threadIdx.x == 0) dst[od] = gdl__st<TD>(alpha * s);"),
("softmax_backward_rows_assigns", "= for += in the row-wise softmax backward",
 "            gx[j] += log_ ? gy[j] - expf(y[j]) * s : y[j] * (gy[j] - s);\n        }\n    }\n}\n\n__global__ void gdl__k_softmax_backward_strided",
 "            gx[j] = log_ ? gy[j] - expf(y[j]) * s : y[j] * (gy[j] - s);\n        }\n    }\n}\n\n__global__ void gdl__k_softmax_backward_strided"),
("ln_params_no_barrier", "missing __syncthreads before the row-group partials are summed",
 "        sb[threadIdx.y][threadIdx.x] = pb;\n        __syncthreads();",
 "        sb[threadIdx.y][threadIdx.x] = pb;"),
("gemm_swapped_leading_dims", "wrong leading dimension: lda and ldb swapped in the cuBLAS call",
 "B + b * sB, ldb, A + b * sA, lda, &beta,",
 "B + b * sB, lda, A + b * sA, ldb, &beta,"),
("batched_gemm_wrong_stride", "wrong stride: the batched GEMM steps A by B's batch stride",
 "A, lda,\n                                                 (long long)sA,",
 "A, lda,\n                                                 (long long)sB,"),
("copy2d_wrong_source_ld", "wrong stride: copy2d indexes the source with the destination's width",
 "        T v = src[r * sld + c];",
 "        T v = src[r * cols + c];"),
("embedding_lost_atomic", "a lost atomic: atomicAdd replaced by a plain +=",
 "        if (row >= 0 && row < V) atomicAdd(&gW[(int64_t)row * D + k], gy[t]);",
 "        if (row >= 0 && row < V) gW[(int64_t)row * D + k] += gy[t];"),
("col2im_bound_off_by_one", "off-by-one bound: col2im accepts oh == OH",
 "            int oh = h / g.SH;\n            if (oh >= g.OH) continue;\n            for (int kw = 0; kw < g.KW; kw++) {",
 "            int oh = h / g.SH;\n            if (oh > g.OH) continue;\n            for (int kw = 0; kw < g.KW; kw++) {"),
("maxpool_tie_last", "tie rule: max pooling keeps the last maximum",
 "                if (bi < 0 || v > best || (v != v && best == best)) {",
 "                if (bi < 0 || v >= best || (v != v && best == best)) {"),
("bn_running_var_biased", "batchnorm's running variance with the biased estimate",
 "momentum * (M > 1 ? sq / (double)(M - 1) : var));",
 "momentum * (M > 1 ? sq / (double)M : var));"),
("xent_count_ignores_nothing", "the mean over rows counts ignored rows",
 "        n += tgt[b] != ignore_index;",
 "        n += 1;"),
("adam_bias_correction_swapped", "Adam's first moment corrected with beta2's factor",
 "(mi / bc1) / (sqrt(vi / bc2) + eps)",
 "(mi / bc2) / (sqrt(vi / bc2) + eps)"),
("sgd_nesterov_wrong", "Nesterov's lookahead built from the buffer instead of the gradient",
 "                d = nesterov ? d + momentum * b : b;",
 "                d = nesterov ? b + momentum * b : b;"),
("partials_skip_tail", "skipped tail element in the second pass of the host-visible reductions",
 "    for (int i = threadIdx.x; i < nb; i += blockDim.x) s += part[i];",
 "    for (int i = threadIdx.x; i < nb - 1; i += blockDim.x) s += part[i];"),
("cast_i32_nan", "float -> i32 without the NaN case",
 "    return v != v ? 0 : v >= 2147483648.0f ? INT32_MAX",
 "    return v >= 2147483648.0f ? INT32_MAX"),
("overlapping_copy_unchecked", "overlapping device-to-device copy sent straight to cudaMemcpy",
 "        if (d < s + bytes && s < d + bytes) {",
 "        if (false && d < s + bytes && s < d + bytes) {"),
("dropout_backward_mask_shift", "backward regenerates the dropout mask at the wrong index",
 "        bool keep = gdl_dropout_keep(seed, (uint64_t)i, p);",
 "        bool keep = gdl_dropout_keep(seed, (uint64_t)i + 1, p);"),
("sum_to_thread_odometer", "off-by-one in the per-thread sum_to's index odometer",
 "                if (++idx[d] < g.rshape[d]) break;",
 "                if (++idx[d] <= g.rshape[d]) break;"),
("binary_wrong_b_stride", "wrong stride: the second operand indexed with the first one's strides",
 "            ob += id * g.bs[d];\n        }\n        out[i] = gdl__st<TO>(",
 "            ob += id * g.as[d];\n        }\n        out[i] = gdl__st<TO>("),
("im2col_bound_off_by_one", "off-by-one bound: im2col reads the column one past the row",
 "        col[t] = (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W) ? x[(nc * g.H + ih) * g.W + iw] : gdl__st<T>(0.0f);",
 "        col[t] = (ih >= 0 && ih < g.H && iw >= 0 && iw <= g.W) ? x[(nc * g.H + ih) * g.W + iw] : gdl__st<T>(0.0f);"),
("avgpool_divisor", "average pooling divides by the window's height only",
 "        y[t] = gdl__st<T>(s / (float)(g.KH * g.KW));",
 "        y[t] = gdl__st<T>(s / (float)(g.KH));"),
("scale2d_beta0_reads_c", "beta = 0 implemented as beta * C (fresh memory is NaN: 0 * NaN = NaN)",
 "        float v = gdl__ld(*c);\n        for (int k = 0; k < reps; k++) v = beta == 0 ? 0.0f : beta * v;",
 "        float v = gdl__ld(*c);\n        for (int k = 0; k < reps; k++) v = beta * v;"),
("bn_backward_partial_sum", "a block reduction left out: each thread uses its own partial sum",
 "        sgx = gdl__block_sum(sgx);",
 "        (void)0;"),
("ln_backward_mean_not_divided", "a missing / D in the layernorm backward",
 "        s2 = gdl__block_sum(s2) / (float)D;",
 "        s2 = gdl__block_sum(s2);"),
("xent_smoothing_swapped", "label smoothing's on/off targets swapped in the backward",
 "            float target = c == t ? on : off;",
 "            float target = c == t ? off : on;"),
("sgd_momentum_first_step", "the momentum buffer read before it is initialised on the first step",
 "                double b = first_step ? d : momentum * buf[i] + (1 - dampening) * d;",
 "                double b = momentum * buf[i] + (1 - dampening) * d;"),
("optim_multi_chunk_lookup", "a multi-tensor step's chunk given to the tensor before its own",
 "        if (tab[mid].first_chunk <= c) lo = mid;",
 "        if (tab[mid].first_chunk < c) lo = mid;"),
("optim_multi_last_chunk", "a multi-tensor step's last chunk of each tensor cut short",
 "hi = lo + GDL__CU_OPT_CHUNK < e->n ? lo + GDL__CU_OPT_CHUNK : e->n;\n        int low = e->low;\n        for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {\n            double d",
 "hi = lo + GDL__CU_OPT_CHUNK < e->n ? lo + GDL__CU_OPT_CHUNK : e->n - 1;\n        int low = e->low;\n        for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {\n            double d"),("optim_step_count_skips_first", "the multi-tensor kernel's step counts not advanced for the first tensor",
 "            if (tab[k].step && *tab[k].step < 2147483647) *tab[k].step += 1;",
 "            if (k > 0 && tab[k].step && *tab[k].step < 2147483647) *tab[k].step += 1;"),
("amp_skip_ignored", "an optimizer step run although the GradScaler found inf/NaN",
 "    if (skip && *skip != 0) return; // every block",
 "    if (0 && skip && *skip != 0) return; // every block"),
("amp_unscale_nan_missed", "the GradScaler's check catching infinities but not NaN",
 "        found |= !(v - v == 0.0f);",
 "        found |= v == INFINITY || v == -INFINITY;"),
("amp_update_growth_early", "the scale grown one clean step early",
 "    } else if (*tracker + 1 >= interval) {",
 "    } else if (*tracker + 2 >= interval) {"),
("fused_bias_wrong_channel", "the fused bias indexed by the element, not its channel",
 "        if (bias) v = v + bias[(i / inner) % C];",
 "        if (bias) v = v + bias[i % C];"),
("fused_act_reduce_block_partial", "the fused bias gradient's block reduction left out",
 "        s = gdl__block_sum(s);\n        if (threadIdx.x == 0) sum[t] = accumulate ? sum[t] + s : s;",
 "        if (threadIdx.x == 0) sum[t] = accumulate ? sum[t] + s : s;"),
("fused_act_reduce_thread_assigns", "the fused bias gradient assigned instead of accumulated (fan-out lost)",
 "        sum[t] = accumulate ? sum[t] + s : s;\n    }\n}\n\n__global__ void gdl__k_act_reduce_block",
 "        sum[t] = s;\n    }\n}\n\n__global__ void gdl__k_act_reduce_block"),
("fused_relu_grad_from_gy", "ReLU's fused backward tests the gradient instead of the activation",
 "act == GDL_UN_RELU ? (pre > 0 ? gy : 0.0f)",
 "act == GDL_UN_RELU ? (gy > 0 ? gy : 0.0f)"),
("lt_gelu_without_aux", "cuBLASLt's GELU epilogue asked without its aux output: GELU's backward reads stale memory",
 "        epi = pre ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)",
 "        epi = pre ? (bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)"),
("lt_relu_without_bias", "cuBLASLt's ReLU epilogue without the bias",
 "    if (act == GDL_UN_RELU) epi = bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;",
 "    if (act == GDL_UN_RELU) epi = CUBLASLT_EPILOGUE_RELU;"),
# bugs for the emulator's racecheck and initcheck (the "checks" run)
("argmax_no_barrier_before_reuse", "missing __syncthreads before the block argmax refills its shared buffers (a second call overwrites them while a slow warp still reads; needs a block that loops over rows: GPUDL_CUDA_MAX_GRID)",
 "    }\n    __syncthreads();\n    if (lane == 0) { sv[wid] = v; sk[wid] = k; }",
 "    }\n    if (lane == 0) { sv[wid] = v; sk[wid] = k; }"),
("argmax_tile_read_before_written", "the block argmax reads the shared partials before every warp wrote its own",
 "    if (lane == 0) { sv[wid] = v; sk[wid] = k; }\n    __syncthreads();",
 "    if (lane == 0) { sv[wid] = v; sk[wid] = k; }"),
("argmax_blocks_share_outputs", "the block index left out of a grid-stride loop: every block computes (and writes) every output",
 "__global__ void gdl__k_argmax(int64_t outer, int64_t n, int64_t inner, const float *x, int32_t *out) {\n    GDL_CU_LOOP(t, outer * inner) {",
 "__global__ void gdl__k_argmax(int64_t outer, int64_t n, int64_t inner, const float *x, int32_t *out) {\n    for (int64_t t = threadIdx.x; t < outer * inner; t += blockDim.x) {"),
("softmax_strided_reads_one_past", "the max of a strided softmax reads one element past its row (lse does not depend on it, the read is still wrong; past the tensor, into bytes the caching allocator's earlier tenant wrote)",
 "        for (int64_t k = 0; k < n; k++) mx = fmaxf(mx, p[k * inner]);",
 "        for (int64_t k = 0; k <= n; k++) mx = fmaxf(mx, p[k * inner]);"),
# the libraries' workspaces under graph capture
("blas_stream_after_workspace", "cublasSetStream after cublasSetWorkspace: it resets the handle to cuBLAS's default workspace pool, which allocates inside a graph capture",
 "            if (st2 == CUBLAS_STATUS_SUCCESS) st2 = cublasSetStream(h, st);\n            if (st2 == CUBLAS_STATUS_SUCCESS) st2 = cublasSetWorkspace(h, ws, wsb);",
 "            if (st2 == CUBLAS_STATUS_SUCCESS) st2 = cublasSetWorkspace(h, ws, wsb);\n            if (st2 == CUBLAS_STATUS_SUCCESS) st2 = cublasSetStream(h, st);"),
("lt_matmul_without_workspace", "cublasLtMatmul given no workspace while the heuristic was allowed one (cuBLASLt never allocates: its algorithm cannot run)",
 "e = cublasLtMatmul(lt, desc, &alpha, w, la, x, lb, &beta, y, ld, y, ld, &heur.algo, ws, wsb, st);",
 "e = cublasLtMatmul(lt, desc, &alpha, w, la, x, lb, &beta, y, ld, y, ld, &heur.algo, NULL, 0, st);"),
]

def find(name):
    for m in M:
        if m[0] == name:
            return m
    sys.exit("no mutant named " + name)

cmd = sys.argv[1]
if cmd == "list":
    for m in M:
        print(m[0] + "\t" + m[1])
elif cmd == "names":
    for m in M:
        print(m[0])
elif cmd == "why":
    print(find(sys.argv[2])[1])
elif cmd == "check":  # every pattern exactly once in the given file
    s = open(sys.argv[2]).read()
    bad = [(m[0], s.count(m[2])) for m in M if s.count(m[2]) != 1]
    for name, n in bad:
        print("mutant %s: its text occurs %d times in gpudl_cuda.cu (must be once)" % (name, n))
    sys.exit(1 if bad else 0)
elif cmd == "apply":
    name, path = sys.argv[2], sys.argv[3]
    m = find(name)
    s = open(path).read()
    n = s.count(m[2])
    if n != 1:
        sys.exit("mutant %s: its text occurs %d times in %s (must be once)" % (name, n, path))
    open(path, "w").write(s.replace(m[2], m[3]))
PYEOF

mut() { python3 "$PY" "$@"; }

if [ "${1:-}" = "-l" ]; then
    mut list
    rm -f "$PY"
    exit 0
fi
# -c: only check that every mutant's text is still in gpudl_cuda.cu, once
# (seconds; make test-amalgamation runs it, so a kernel edit that strands a
# mutant fails at once rather than at the next mutation run)
if [ "${1:-}" = "-c" ]; then
    st=0; mut check "$ROOT/gpudl_cuda.cu" || st=1
    rm -f "$PY"
    exit $st
fi

# the mutants to run
NAMES=$(mut names)
if [ $# -gt 0 ]; then
    SEL=""
    for n in $NAMES; do
        for want in "$@"; do
            case "$n" in *"$want"*) SEL="$SEL $n"; break ;; esac
        done
    done
    NAMES=$SEL
fi
[ -n "$NAMES" ] || { echo "mutate_cuda.sh: no mutant matches: $*" >&2; rm -f "$PY"; exit 2; }

S=$(mktemp -d "${TMPDIR:-/tmp}/gpudl_mutate.XXXXXX")
cleanup() {
    rm -f "$PY"
    if [ "${MUTATE_KEEP:-0}" = 1 ]; then echo "scratch copy kept: $S"; else rm -rf "$S"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# a copy of the working tree (or of MUTATE_REV) without build outputs, data or history
if [ -n "${MUTATE_REV:-}" ]; then
    git -C "$ROOT" archive "$MUTATE_REV" | tar -C "$S" -xf -
else
    tar -C "$ROOT" --exclude=./build --exclude=./.git --exclude=./data -cf - . | tar -C "$S" -xf -
fi
cp "$S/gpudl_cuda.cu" "$S/gpudl_cuda.cu.orig"
mut check "$S/gpudl_cuda.cu.orig" || { echo "mutate_cuda.sh: the mutant list no longer fits gpudl_cuda.cu" >&2; exit 2; }

build() { (cd "$S" && $MAKE -s build/emu_test_cuda) > "$S/build.log" 2>&1; }
# the racecheck build (-fsanitize=thread hooks), for the checks run
build_checks() { (cd "$S" && $MAKE -s build/emu_race_test_cuda) > "$S/build.log" 2>&1; }
# run the suite; $1: extra environment (as "VAR=value ..."), prints the first
# failure; $2: the binary (the plain build by default)
run_suite() {
    rc=0
    (cd "$S" && env GPUDL_EMU_QUIET=1 $1 timeout "$TIMEOUT" ./build/${2:-emu_test_cuda} -f ${MUTATE_SUITES:-}) > "$S/run.log" 2>&1 || rc=$?
    return $rc
}
# the checks run: racecheck (shared and global memory) and initcheck over
# the suite, with GEMMs rounded per call configuration and grids capped so
# that blocks loop over rows (make test's run: EMU_CHECKS_ENV in emu.mk)
CHECKS="GPUDL_EMU_DEVICES=2 GPUDL_EMU_RACECHECK=1 GPUDL_EMU_INITCHECK=1 GPUDL_EMU_GEMM=perturbed GPUDL_CUDA_MAX_GRID=3 GPUDL_EMU_QUIET=0"
checks_failure() {
    f=$(grep -m1 -E 'racecheck: .*hazard on|initcheck: ' "$S/run.log" || true)
    [ -n "$f" ] || f=$(first_failure "$1")
    printf '%s' "$f" | cut -c1-150
}
first_failure() {
    f=$(grep -m1 '^FAIL' "$S/run.log" || true)
    [ -n "$f" ] || f="exit status $1$( [ "$1" = 124 ] && echo ' (timed out)')"
    printf '%s' "$f" | cut -c1-150
}

echo "mutate_cuda.sh: scratch copy $S"
printf 'baseline (no mutant): building ... '
build || { echo "FAILED"; cat "$S/build.log"; exit 2; }
SCHEDS="rr warp revthreads"
for sched in $SCHEDS; do
    if ! run_suite "GPUDL_EMU_DEVICES=2 GPUDL_EMU_SCHED=$sched"; then
        echo "the suite FAILS without a mutant (schedule $sched): $(first_failure $?)"
        exit 2
    fi
done
build_checks || { echo "FAILED (the checks build)"; cat "$S/build.log"; exit 2; }
if ! run_suite "$CHECKS" emu_race_test_cuda; then
    echo "the suite FAILS without a mutant (racecheck + initcheck): $(checks_failure $?)"
    exit 2
fi
echo "the suite passes under: $SCHEDS, and racecheck + initcheck"

N=0; K=0; ERR=0; SURVIVORS=""
t0=$(date +%s)
for name in $NAMES; do
    N=$((N + 1))
    cp "$S/gpudl_cuda.cu.orig" "$S/gpudl_cuda.cu"
    if ! mut apply "$name" "$S/gpudl_cuda.cu"; then
        ERR=$((ERR + 1)); echo "ERROR    $name: could not be planted"; continue
    fi
    if ! build; then
        ERR=$((ERR + 1)); echo "ERROR    $name: does not compile"; sed -n 1,5p "$S/build.log"; continue
    fi
    caught=""
    for sched in $SCHEDS; do
        if ! run_suite "GPUDL_EMU_DEVICES=2 GPUDL_EMU_SCHED=$sched"; then
            caught="[$sched] $(first_failure $?)"
            break
        fi
    done
    # the schedules left it: the racecheck build with the checks on
    if [ -z "$caught" ]; then
        if ! build_checks; then
            ERR=$((ERR + 1)); echo "ERROR    $name: does not compile (checks build)"; continue
        fi
        if ! run_suite "$CHECKS" emu_race_test_cuda; then caught="[checks] $(checks_failure $?)"; fi
    fi
    if [ -n "$caught" ]; then
        K=$((K + 1)); echo "caught   $name $caught"
    else
        SURVIVORS="$SURVIVORS $name"; echo "SURVIVED $name ($(mut why "$name"))"
    fi
done
cp "$S/gpudl_cuda.cu.orig" "$S/gpudl_cuda.cu"
echo "caught $K of $N mutants in $(( $(date +%s) - t0 )) s${SURVIVORS:+; survived:$SURVIVORS}"
[ "$ERR" -eq 0 ] || { echo "$ERR mutant(s) could not be planted or built"; exit 2; }
[ "$K" -eq "$N" ] || exit 1
exit 0
