// ----------------------------------------------------------------------------
// the batch-summing GEMM (f32 and the low-precision GEMM's)

// A GEMM whose batches all sum into one C (sC == 0: the weight
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

template <typename T> __global__ void gdl__k_gemm_fold(T *C, int M, int N, int ldc, const float *W, int nb, float beta) {
    int64_t mn = (int64_t)M * N;
    GDL_CU_LOOP(t, mn) {
        int64_t i = (t / N) * ldc + t % N;
        float acc = beta == 0 ? 0.0f : gdl__ld(C[i]);
        for (int b = 0; b < nb; b++) acc = beta == 0 ? W[b * mn + t] : W[b * mn + t] + beta * acc;
        C[i] = gdl__st<T>(acc);
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
        if (gdl__cu_dispatch("GEMM", dt, 1, [&](auto t) {
                typedef typename decltype(t)::type T;
                GDL_CU_LAUNCH(gdl__k_gemm_fold<T>, gdl__cu_grid(mn, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
                    (T *)C, M, N, ldc, W, nb, beta);
                GDL_CU_LAUNCHED();
                return 0;
            }) < 0)
            return -1;
    }
    return 1;
}
