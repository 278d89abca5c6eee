// ----------------------------------------------------------------------------
// native bf16/f16 elementwise kernels (the backend's *_lp entries): each
// element is loaded to f32, computed with the f32 kernel's formula and
// rounded once on store. The dtype is uniform across the grid, so its
// switch costs nothing next to the memory traffic (as gdl__k_cast's).

// element i of p, of dtype t (f32, f16 or bf16), as f32
__device__ __forceinline__ float gdl__lp_ld(int t, const void *p, int64_t i) {
    if (t == GDL_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == GDL_F16 ? gdl__f16_to_f32(h) : gdl__bf16_to_f32(h);
}
// element i of p, of dtype t, set to v rounded once
__device__ __forceinline__ void gdl__lp_st(int t, void *p, int64_t i, float v) {
    if (t == GDL_F32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = t == GDL_F16 ? gdl__f32_to_f16(v) : gdl__f32_to_bf16(v);
}

// ---- a GEMM whose batches all sum into one C (sC == 0: the weight
// gradient of a convolution, a broadcast operand's gradient)
// One call per sample would be `batch` launches (1024 per conv layer at
// batch 1024), and one strided-batched call would race on C. Instead a
// chunk of the products goes into an f32 workspace with one batched call
// (beta 0), and one kernel folds them into C in batch order with the
// per-sample calls' recurrence c = P_b + beta*c, in f32: two launches a
// chunk, and a low-precision C is rounded once a chunk instead of once a
// sample. The workspace is kept per device (a capture must not allocate;
// the eager step before it grows it). A graph recorded before it grew
// still writes into the smaller one, so that one is kept too, until
// gdl_cuda_release_cache gives them all back.
#define GDL__CU_FOLD_BYTES ((size_t)64 << 20)

__global__ void gdl__k_gemm_fold(void *C, int ct, int M, int N, int ldc, const float *W, int nb, float beta) {
    int64_t mn = (int64_t)M * N;
    GDL_CU_LOOP(t, mn) {
        int64_t i = (t / N) * ldc + t % N;
        float acc = beta == 0 ? 0.0f : gdl__lp_ld(ct, C, i);
        for (int b = 0; b < nb; b++) acc = beta == 0 ? W[b * mn + t] : W[b * mn + t] + beta * acc;
        gdl__lp_st(ct, C, i, acc);
    }
}

struct gdl__cu_fold {
    void *ws;
    size_t bytes;
    std::vector<void *> retired; /* smaller ones it replaced, which recorded graphs may still use */
};
static gdl__cu_fold gdl__cu_folds[GDL__CU_MAX_DEVICES];

static void gdl__cu_fold_release(void) {
    for (int d = 0; d < GDL__CU_MAX_DEVICES; d++) {
        gdl__cu_fold &F = gdl__cu_folds[d];
        for (void *p : F.retired) gdl__cu_free(p); /* stream order: the folds queued before run first */
        F.retired.clear();
        gdl__cu_free(F.ws);
        F.ws = NULL;
        F.bytes = 0;
    }
}

static int gdl__cu_gemm_sum(gdl_dtype dt, int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda,
                            int64_t sA, const void *B, int ldb, int64_t sB, float beta, void *C, int ldc, int batch) {
    int64_t mn = (int64_t)M * N, chunk = (int64_t)(GDL__CU_FOLD_BYTES / (sizeof(float) * (size_t)mn));
    size_t es = dt == GDL_F32 ? sizeof(float) : 2, need;
    float zero = 0;
    int dev;
    if (chunk > batch) chunk = batch;
    if (chunk < 2) return 0; /* one product fills the budget: a call per sample, no workspace */
    if (gdl__cu_current(&dev) < 0) return -1;
    need = sizeof(float) * (size_t)(chunk * mn);
    if (gdl__cu_folds[dev].bytes < need) {
        gdl__cu_fold &F = gdl__cu_folds[dev];
        void *p = gdl__cu_alloc(need); /* refused inside a capture, naming the op */
        if (!p) return -1;
        if (F.ws) {
            try {
                F.retired.push_back(F.ws);
            } catch (...) {
                gdl__cu_free(p);
                gdl__set_error("gdl_cuda: out of host memory for the GEMM's workspaces");
                return -1;
            }
        }
        F.ws = p;
        F.bytes = need;
    }
    cublasHandle_t h = gdl__cu_blas();
    if (!h) return -1;
    float *W = (float *)gdl__cu_folds[dev].ws;
    cublasOperation_t opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* swapped operands: see gdl__cu_gemm */
    cublasOperation_t opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cudaDataType t = dt == GDL_F16 ? CUDA_R_16F : CUDA_R_16BF;
    for (int64_t b0 = 0; b0 < batch; b0 += chunk) {
        int nb = (int)(batch - b0 < chunk ? batch - b0 : chunk);
        const char *a = (const char *)A + b0 * sA * (int64_t)es, *b = (const char *)B + b0 * sB * (int64_t)es;
        gdl__cu_launches.fetch_add(1, std::memory_order_relaxed);
        if (dt == GDL_F32)
            GDL_CUBLAS_TRY(cublasSgemmStridedBatched(h, opB, opA, N, M, K, &alpha, (const float *)b, ldb, (long long)sB,
                                                     (const float *)a, lda, (long long)sA, &zero, W, N, (long long)mn, nb),
                           -1);
        else
            GDL_CUBLAS_TRY(cublasGemmStridedBatchedEx(h, opB, opA, N, M, K, &alpha, b, t, ldb, (long long)sB, a, t, lda,
                                                      (long long)sA, &zero, W, CUDA_R_32F, N, (long long)mn, nb,
                                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                           -1);
        GDL_CU_LAUNCH(gdl__k_gemm_fold, gdl__cu_grid(mn, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
            C, (int)dt, M, N, ldc, W, nb, beta);
        GDL_CU_LAUNCHED();
    }
    return 1;
}

static int gdl__cu_lp_check(const char *what, gdl_dtype dt) {
    if (dt == GDL_F16 || dt == GDL_BF16) return 0;
    gdl__set_error("gdl_cuda: %s takes f16 or bf16, not %s", what, gdl_dtype_name(dt));
    return -1;
}
static int gdl__cu_lp_check_any(const char *what, gdl_dtype dt) {
    return dt == GDL_F32 ? 0 : gdl__cu_lp_check(what, dt);
}

__global__ void gdl__k_unary_lp(int dt, int op, int64_t n, const void *x, void *y, float alpha) {
    GDL_CU_LOOP(i, n) gdl__lp_st(dt, y, i, gdl__unary1(op, gdl__lp_ld(dt, x, i), alpha));
}

// the f32 kernel's formulas (ReLU selects, see gdl__k_unary_backward); the
// accumulator is loaded, the term added in f32, the sum rounded once
__global__ void gdl__k_unary_backward_lp(int dt, int op, int64_t n, const void *x, const void *y, const void *gy,
                                         void *gx, float alpha) {
    GDL_CU_LOOP(i, n) {
        float xv = gdl__lp_ld(dt, x, i), g = gdl__lp_ld(dt, gy, i), d;
        if (op == GDL_UN_RELU) d = xv > 0 ? g : 0.0f;
        else d = g * gdl__unary_grad1(op, xv, gdl__lp_ld(dt, y, i), alpha);
        gdl__lp_st(dt, gx, i, gdl__lp_ld(dt, gx, i) + d);
    }
}

static int gdl__cu_unary_lp(gdl_dtype dt, int op, int64_t n, const void *x, void *y, float alpha) {
    if (gdl__cu_lp_check("unary_lp", dt) < 0) return -1;
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_unary_lp, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())((int)dt, op, n, x, y, alpha);
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_unary_backward_lp(gdl_dtype dt, int op, int64_t n, const void *x, const void *y, const void *gy,
                                     void *gx, float alpha) {
    if (gdl__cu_lp_check("unary_backward_lp", dt) < 0) return -1;
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_unary_backward_lp, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())((int)dt, op, n, x, y, gy,
                                                                                                   gx, alpha);
    GDL_CU_LAUNCHED();
    return 0;
}

template <int ND>
__global__ void gdl__k_binary_lp(int op, gdl__cu_bshape g, int64_t n, int at, const void *a, int bt, const void *b,
                                 int ot, void *out) {
    GDL_CU_LOOP(i, n) {
        int64_t rem = i, oa = 0, ob = 0;
#pragma unroll
        for (int d = ND - 1; d >= 0; d--) {
            int64_t id = d ? rem % g.shape[d] : rem;
            rem = d ? rem / g.shape[d] : 0;
            oa += id * g.as[d];
            ob += id * g.bs[d];
        }
        gdl__lp_st(ot, out, i, gdl__bin1(op, gdl__lp_ld(at, a, oa), gdl__lp_ld(bt, b, ob)));
    }
}

static int gdl__cu_binary_lp(int op, int ndim, const int64_t *shape, gdl_dtype at, const void *a, const int64_t *astr,
                             gdl_dtype bt, const void *b, const int64_t *bstr, gdl_dtype ot, void *out) {
    int64_t n = 1;
    gdl__cu_bshape g;
    if (gdl__cu_lp_check_any("binary_lp", at) < 0 || gdl__cu_lp_check_any("binary_lp", bt) < 0 ||
        gdl__cu_lp_check_any("binary_lp", ot) < 0)
        return -1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    if (n <= 0) return 0;
    gdl__cu_coalesce(ndim, shape, astr, bstr, &g);
    unsigned grid = gdl__cu_grid(n, GDL__CU_THREADS);
    int ia = (int)at, ib = (int)bt, io = (int)ot;
    switch (g.nd) {
    case 0: GDL_CU_LAUNCH(gdl__k_binary_lp<0>, grid, GDL__CU_THREADS, 0, gdl__cu_stream())(op, g, n, ia, a, ib, b, io, out); break;
    case 1: GDL_CU_LAUNCH(gdl__k_binary_lp<1>, grid, GDL__CU_THREADS, 0, gdl__cu_stream())(op, g, n, ia, a, ib, b, io, out); break;
    case 2: GDL_CU_LAUNCH(gdl__k_binary_lp<2>, grid, GDL__CU_THREADS, 0, gdl__cu_stream())(op, g, n, ia, a, ib, b, io, out); break;
    case 3: GDL_CU_LAUNCH(gdl__k_binary_lp<3>, grid, GDL__CU_THREADS, 0, gdl__cu_stream())(op, g, n, ia, a, ib, b, io, out); break;
    case 4: GDL_CU_LAUNCH(gdl__k_binary_lp<4>, grid, GDL__CU_THREADS, 0, gdl__cu_stream())(op, g, n, ia, a, ib, b, io, out); break;
    case 5: GDL_CU_LAUNCH(gdl__k_binary_lp<5>, grid, GDL__CU_THREADS, 0, gdl__cu_stream())(op, g, n, ia, a, ib, b, io, out); break;
    default: GDL_CU_LAUNCH(gdl__k_binary_lp<GDL_MAX_DIMS>, grid, GDL__CU_THREADS, 0, gdl__cu_stream())(op, g, n, ia, a, ib, b, io, out); break;
    }
    GDL_CU_LAUNCHED();
    return 0;
}

// sum_to_lp: as gdl__k_sum_to_thread / _block, but each destination's
// sources are summed from 0 in f32 (the f32 path's zeroed gradient of an f32
// copy), then added to the destination and rounded once (that copy's cast)
__global__ void gdl__k_sum_to_thread_lp(gdl__cu_sumto g, int64_t nout, int64_t nred, int st, const void *src, int dt,
                                        void *dst, float alpha) {
    GDL_CU_LOOP(t, nout) {
        int64_t od, so, idx[GDL_MAX_DIMS] = {};
        gdl__sumto_base(g, t, &od, &so);
        float acc = 0.0f;
        for (int64_t j = 0; j < nred; j++) {
            acc += alpha * gdl__lp_ld(st, src, so);
            for (int d = g.nr - 1; d >= 0; d--) {
                so += g.rsrc[d];
                if (++idx[d] < g.rshape[d]) break;
                so -= g.rsrc[d] * g.rshape[d];
                idx[d] = 0;
            }
        }
        gdl__lp_st(dt, dst, od, gdl__lp_ld(dt, dst, od) + acc);
    }
}

__global__ void gdl__k_sum_to_block_lp(gdl__cu_sumto g, int64_t nout, int64_t nred, int st, const void *src, int dt,
                                       void *dst, float alpha) {
    GDL_CU_ROWS(t, nout) {
        int64_t od, os;
        gdl__sumto_base(g, t, &od, &os);
        float s = 0;
        for (int64_t j = threadIdx.x; j < nred; j += blockDim.x) {
            int64_t rem = j, so = os;
            for (int d = g.nr - 1; d >= 0; d--) {
                int64_t id = rem % g.rshape[d];
                rem /= g.rshape[d];
                so += id * g.rsrc[d];
            }
            s += gdl__lp_ld(st, src, so);
        }
        s = gdl__block_sum(s);
        if (threadIdx.x == 0) gdl__lp_st(dt, dst, od, gdl__lp_ld(dt, dst, od) + alpha * s);
    }
}

static int gdl__cu_sum_to_lp(int ndim, const int64_t *shape, gdl_dtype st, const void *src, gdl_dtype dt, void *dst,
                             const int64_t *dstr, float alpha) {
    gdl__cu_sumto g;
    int64_t nout, nred;
    int block;
    if (gdl__cu_lp_check_any("sum_to_lp", st) < 0 || gdl__cu_lp_check_any("sum_to_lp", dt) < 0) return -1;
    if (!gdl__cu_sumto_plan(ndim, shape, dstr, &g, &nout, &nred, &block)) return 0;
    if (block) {
        int threads = gdl__cu_row_threads(nred > 256 ? 256 : nred);
        GDL_CU_LAUNCH(gdl__k_sum_to_block_lp, gdl__cu_row_grid(nout), threads, 0, gdl__cu_stream())(g, nout, nred, (int)st, src,
                                                                                                (int)dt, dst, alpha);
    } else {
        GDL_CU_LAUNCH(gdl__k_sum_to_thread_lp, gdl__cu_grid(nout, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
            g, nout, nred, (int)st, src, (int)dt, dst, alpha);
    }
    GDL_CU_LAUNCHED();
    return 0;
}

