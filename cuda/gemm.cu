// ----------------------------------------------------------------------------
// GEMM through cuBLAS
//
// cuBLAS is column-major. A row-major matrix read as column-major is its
// transpose, so row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ:
// call cuBLAS with the operands swapped (B first, N and M swapped) and the
// transpose flags kept.

// C = beta*C over M x N (ldc), for K == 0 where cuBLAS would reject lda.
// sC == 0: every batch scales the one C in turn, as the CPU's loop does, so
// one thread owns each element and applies beta `reps` times (no two threads
// may read-modify-write the same element). A 16-bit C is scaled in f32 and
// rounded once.
template <typename T>
__global__ void gdl__k_scale2d(T *C, int M, int N, int ldc, int64_t sC, int64_t nb, int reps, float beta) {
    GDL_CU_LOOP(t, nb * M * N) {
        int64_t b = t / ((int64_t)M * N), r = t % ((int64_t)M * N);
        T *c = C + b * sC + (r / N) * ldc + r % N;
        float v = gdl__ld(*c);
        for (int k = 0; k < reps; k++) v = beta == 0 ? 0.0f : beta * v;
        *c = gdl__st<T>(v);
    }
}

template <typename T>
static int gdl__cu_scale2d_t(T *C, int M, int N, int ldc, int64_t sC, int batch, float beta) {
    int64_t nb = sC == 0 ? 1 : batch, total = nb * M * N;
    GDL_CU_LAUNCH(gdl__k_scale2d<T>, gdl__cu_grid(total, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        C, M, N, ldc, sC, nb, sC == 0 ? batch : 1, beta);
    GDL_CU_LAUNCHED();
    return 0;
}

// a GEMM whose batches all sum into one C (sC == 0), in chunks (below): 1 done, 0 not taken, -1 error
static int gdl__cu_gemm_sum(gdl_dtype dt, int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda,
                            int64_t sA, const void *B, int ldb, int64_t sB, float beta, void *C, int ldc, int batch);

static int gdl__cu_gemm_f32(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, int64_t sA,
                        const float *B, int ldb, int64_t sB, float beta, float *C, int ldc, int64_t sC, int batch) {
    if (M <= 0 || N <= 0 || batch <= 0) return 0;
    if (K <= 0) return gdl__cu_scale2d_t<float>(C, M, N, ldc, sC, batch, beta);
    cublasHandle_t h = gdl__cu_blas();
    if (!h) return -1;
    cublasOperation_t opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLAS's first operand: our B */
    cublasOperation_t opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (sC == 0 && batch > 1) { /* one C for every batch: summed in chunks, not raced on by one batched call */
        int r = gdl__cu_gemm_sum(GDL_F32, ta, tb, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, batch);
        if (r != 0) return r < 0 ? -1 : 0;
    }
    if (batch == 1 || sC == 0) {
        // what gdl__cu_gemm_sum leaves (a product too large to chunk): the
        // batches in order, as the CPU does
        for (int b = 0; b < batch; b++) {
            gdl__cu_launches.fetch_add(1, std::memory_order_relaxed); /* cuBLAS: counted as one kernel */
            GDL_CUBLAS_TRY(cublasSgemm(h, opB, opA, N, M, K, &alpha, B + b * sB, ldb, A + b * sA, lda, &beta,
                                       C + b * sC, ldc),
                           -1);
        }
    } else {
        gdl__cu_launches.fetch_add(1, std::memory_order_relaxed);
        GDL_CUBLAS_TRY(cublasSgemmStridedBatched(h, opB, opA, N, M, K, &alpha, B, ldb, (long long)sB, A, lda,
                                                 (long long)sA, &beta, C, ldc, (long long)sC, batch),
                       -1);
    }
    return 0;
}

// the GEMM entry: f32 runs gdl__cu_gemm_f32; f16 / bf16 operands and C,
// f32 accumulation (CUBLAS_COMPUTE_32F), alpha and beta as floats; C is
// formed in f32 and rounded once. K == 0 scales C by beta in a kernel, as
// gdl__cu_gemm_f32 does.
static int gdl__cu_gemm(gdl_dtype dt, int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda,
                        int64_t sA, const void *B, int ldb, int64_t sB, float beta, void *C, int ldc, int64_t sC,
                        int batch) {
    if (dt == GDL_F32)
        return gdl__cu_gemm_f32(ta, tb, M, N, K, alpha, (const float *)A, lda, sA, (const float *)B, ldb, sB, beta,
                                (float *)C, ldc, sC, batch);
    if (gdl__cu_dtype_check("GEMM", dt, 0) < 0) return -1;
    if (M <= 0 || N <= 0 || batch <= 0) return 0;
    if (K <= 0)
        return gdl__cu_dispatch("GEMM", dt, 0, [&](auto t) {
            typedef typename decltype(t)::type T;
            return gdl__cu_scale2d_t<T>((T *)C, M, N, ldc, sC, batch, beta);
        });
    cublasHandle_t h = gdl__cu_blas();
    if (!h) return -1;
    cudaDataType t = dt == GDL_F16 ? CUDA_R_16F : CUDA_R_16BF;
    size_t es = 2;
    cublasOperation_t opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* swapped operands: see gdl__cu_gemm */
    cublasOperation_t opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (sC == 0 && batch > 1) { /* f32 sums of the chunk's products, C rounded once a chunk */
        int r = gdl__cu_gemm_sum(dt, ta, tb, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, batch);
        if (r != 0) return r < 0 ? -1 : 0;
    }
    if (batch == 1 || sC == 0) {
        for (int b = 0; b < batch; b++) {
            gdl__cu_launches.fetch_add(1, std::memory_order_relaxed);
            GDL_CUBLAS_TRY(cublasGemmEx(h, opB, opA, N, M, K, &alpha, (const char *)B + b * sB * es, t, ldb,
                                        (const char *)A + b * sA * es, t, lda, &beta, (char *)C + b * sC * es, t, ldc,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                           -1);
        }
    } else {
        gdl__cu_launches.fetch_add(1, std::memory_order_relaxed);
        GDL_CUBLAS_TRY(cublasGemmStridedBatchedEx(h, opB, opA, N, M, K, &alpha, B, t, ldb, (long long)sB, A, t, lda,
                                                  (long long)sA, &beta, C, t, ldc, (long long)sC, batch,
                                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                       -1);
    }
    return 0;
}

