// ----------------------------------------------------------------------------
// reductions over the middle dim of [outer, n, inner]; softmax

// one thread per output (o, i): reads are coalesced across i when inner is
// large. MAX follows the CPU's scan: first maximum, first NaN wins.
__global__ void gdl__k_reduce_thread(int op, int64_t outer, int64_t n, int64_t inner, const float *x, float *y,
                                     int32_t *idx, int accumulate) {
    GDL_CU_LOOP(t, outer * inner) {
        int64_t o = t / inner, i = t - o * inner;
        const float *p = x + o * n * inner + i;
        float r;
        if (op == GDL_RED_MAX || op == GDL_RED_MIN) { // min: the max of -x (-NaN is NaN: NaN still wins)
            const float sg = op == GDL_RED_MIN ? -1.0f : 1.0f;
            int64_t best = 0;
            float bv = n ? sg * p[0] : 0.0f;
            for (int64_t k = 1; k < n; k++) {
                float v = sg * p[k * inner];
                if (v > bv || (v != v && bv == bv)) {
                    best = k;
                    bv = v;
                }
            }
            r = n ? sg * bv : -GDL__CU_INF * sg;
            if (idx) idx[t] = (int32_t)best;
        } else {
            float s = 0;
            for (int64_t k = 0; k < n; k++) s += p[k * inner];
            r = op == GDL_RED_MEAN ? s / (float)n : s;
        }
        y[t] = accumulate ? y[t] + r : r;
    }
}

// one block per output, for long reductions over few outputs (n > 0)
__global__ void gdl__k_reduce_block(int op, int64_t outer, int64_t n, int64_t inner, const float *x, float *y,
                                    int32_t *idx, int accumulate) {
    GDL_CU_ROWS(t, outer * inner) {
        int64_t o = t / inner, i = t - o * inner;
        const float *p = x + o * n * inner + i;
        float r;
        if (op == GDL_RED_MAX || op == GDL_RED_MIN) {
            const float sg = op == GDL_RED_MIN ? -1.0f : 1.0f;
            float bv = 0;
            long long bk = -1;
            for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
                float v = sg * p[k * inner];
                if (gdl__max_better(v, k, bv, bk)) {
                    bv = v;
                    bk = k;
                }
            }
            gdl__block_argmax(bv, bk);
            r = sg * bv;
            if (idx && threadIdx.x == 0) idx[t] = (int32_t)bk;
        } else {
            float s = 0;
            for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s += p[k * inner];
            s = gdl__block_sum(s);
            r = op == GDL_RED_MEAN ? s / (float)n : s;
        }
        if (threadIdx.x == 0) y[t] = accumulate ? y[t] + r : r;
    }
}

static int gdl__cu_reduce(int op, int64_t outer, int64_t n, int64_t inner, const float *x, float *y, int32_t *idx,
                          int accumulate) {
    int64_t nout = outer * inner;
    if (nout <= 0) return 0;
    if (n >= 64 && (inner == 1 || nout < 1024)) {
        GDL_CU_LAUNCH(gdl__k_reduce_block, gdl__cu_row_grid(nout), gdl__cu_row_threads(n), 0, gdl__cu_stream())(op, outer, n, inner, x, y, idx,
                                                                               accumulate);
    } else {
        GDL_CU_LAUNCH(gdl__k_reduce_thread, gdl__cu_grid(nout, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(op, outer, n, inner, x, y,
                                                                                       idx, accumulate);
    }
    GDL_CU_LAUNCHED();
    return 0;
}

// SUM/MEAN: one thread per input element, each owning its gx; MAX, MIN: one
// thread per output, each writing the one element its index names
__global__ void gdl__k_reduce_backward_spread(int op, int64_t outer, int64_t n, int64_t inner, const float *gy,
                                              float *gx) {
    GDL_CU_LOOP(t, outer * n * inner) {
        int64_t o = t / (n * inner), i = t % inner;
        float g = gy[o * inner + i];
        if (op == GDL_RED_MEAN) g = g / (float)n;
        gx[t] += g;
    }
}

__global__ void gdl__k_reduce_backward_max(int64_t outer, int64_t n, int64_t inner, const float *gy,
                                           const int32_t *idx, float *gx) {
    GDL_CU_LOOP(t, outer * inner) {
        int64_t o = t / inner, i = t - o * inner;
        gx[(o * n + idx[t]) * inner + i] += gy[t];
    }
}

static int gdl__cu_reduce_backward(int op, int64_t outer, int64_t n, int64_t inner, const float *gy,
                                   const int32_t *idx, float *gx) {
    if (outer * n * inner <= 0) return 0;
    if (op == GDL_RED_MAX || op == GDL_RED_MIN)
        GDL_CU_LAUNCH(gdl__k_reduce_backward_max, gdl__cu_grid(outer * inner, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(outer, n, inner,
                                                                                                    gy, idx, gx);
    else
        GDL_CU_LAUNCH(gdl__k_reduce_backward_spread, gdl__cu_grid(outer * n * inner, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
            op, outer, n, inner, gy, gx);
    GDL_CU_LAUNCHED();
    return 0;
}

// the largest power of two (up to 256) dividing a pointer: cuBLASLt's heuristic
// assumes 256-byte operands unless told
static uint32_t gdl__cu_align(const void *p) {
    uint32_t a = 256;
    while (a > 4 && (uintptr_t)p % a) a /= 2;
    return a;
}

// One cublasLtMatmul computing y = act(x w^T + bias) (see gdl__cu_linear_act):
// 0 done, -1 error, 1 cuBLASLt has no algorithm for it (nothing ran).
static int gdl__cu_lt_matmul(int act, int M, int N, int K, const float *x, const float *w, const float *bias,
                             float *y, float *pre) {
    gdl__cu_state &S = gdl__cu();
    int dev;
    if (!gdl__cu_blas() || gdl__cu_current(&dev) < 0) return -1; /* the workspace is cuBLAS's */
    cudaStream_t st = gdl__cu_stream();
    size_t wsb = gdl__cu_blas_ws_bytes(dev);
    cublasLtHandle_t lt;
    void *ws;
    {
        std::lock_guard<std::mutex> lock(S.mu);
        if (!S.lt[dev]) GDL_CUBLAS_TRY(cublasLtCreate(&S.lt[dev]), -1);
        lt = S.lt[dev];
        ws = S.blas_ws[dev];
    }
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t heur;
    cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    cublasLtEpilogue_t epi;
    if (act == GDL_UN_RELU) epi = bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    else if (act == GDL_UN_GELU_TANH)
        epi = pre ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                  : (bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU);
    else epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    int64_t auxld = N;
    uint64_t wsmax = wsb;
    uint32_t al[4] = {gdl__cu_align(w), gdl__cu_align(x), gdl__cu_align(y), gdl__cu_align(y)};
    float alpha = 1.0f, beta = 0.0f;
    int found = 0, rc = -1;
    memset(&heur, 0, sizeof heur);
    cublasStatus_t e = cublasLtMatmulDescCreate(&desc, S.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                                CUDA_R_32F);
    if (e == CUBLAS_STATUS_SUCCESS) e = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT);
    if (e == CUBLAS_STATUS_SUCCESS) e = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN);
    if (e == CUBLAS_STATUS_SUCCESS) e = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    if (e == CUBLAS_STATUS_SUCCESS && bias)
        e = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (e == CUBLAS_STATUS_SUCCESS && pre)
        e = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre, sizeof pre);
    if (e == CUBLAS_STATUS_SUCCESS && pre)
        e = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &auxld, sizeof auxld);
    if (e == CUBLAS_STATUS_SUCCESS) e = cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, (uint64_t)K, (uint64_t)N, K);
    if (e == CUBLAS_STATUS_SUCCESS) e = cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, (uint64_t)K, (uint64_t)M, K);
    if (e == CUBLAS_STATUS_SUCCESS) e = cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, (uint64_t)N, (uint64_t)M, N);
    if (e == CUBLAS_STATUS_SUCCESS) e = cublasLtMatmulPreferenceCreate(&pref);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsmax, sizeof wsmax);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], sizeof al[3]);
    if (e == CUBLAS_STATUS_SUCCESS) {
        cublasStatus_t h = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, &heur, &found);
        if (h != CUBLAS_STATUS_SUCCESS || found < 1 || heur.state != CUBLAS_STATUS_SUCCESS) {
            rc = 1; /* not this shape or alignment: the caller's GEMM + bias_act */
        } else {
            gdl__cu_launches.fetch_add(1, std::memory_order_relaxed); /* one kernel, epilogue included */
            e = cublasLtMatmul(lt, desc, &alpha, w, la, x, lb, &beta, y, ld, y, ld, &heur.algo, ws, wsb, st);
            if (e == CUBLAS_STATUS_SUCCESS) rc = 0;
        }
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (rc < 0) GDL_CUBLAS_TRY(e, -1);
    return rc;
}

