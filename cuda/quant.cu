// ----------------------------------------------------------------------------
// INT8 (the quantized layers of src/api/quant.h): the int8 GEMM, quantize,
// dequantize, min / max, the u8 columns of a convolution, the epilogue. The
// arithmetic of quantize and the epilogue is gpudl.h's gdl_q_* (the CPU's).
//
// The GEMM, C [M, N] (int32) = A [M, K] (u8) x W [N, K]^T (s8), exact. cuBLAS's
// int8 GEMM is s8 x s8 (cublasGemmEx: CUDA_R_8I operands, CUDA_R_32I C,
// CUBLAS_COMPUTE_32I), so A is shifted to s8 (a - 128) and 128 * colsum[n]
// (W's row sums) added back, exact in int32 (K <= GDL_GEMM_INT8_MAX_K). The
// rules cuBLAS documents for that path: alpha and beta 0 or 1, A and B
// 32-bit aligned, lda and ldb multiples of 4; gpudl also keeps m, n, k and ldc
// multiples of 4 (the shapes of the integer tensor-core kernels; others may be
// refused). W is kept with K padded by zeros to KP (a multiple of 4), so the
// GEMM runs over KP and a row's bytes past K (any value) meet zeros. Any
// other shape, and any call cuBLAS refuses with CUBLAS_STATUS_NOT_SUPPORTED,
// runs the fallback: a tiled int32 kernel, exact for any shape.

struct gdl__cu_qweight {
    int N, K, KP;
    int8_t *w;       // [N, KP], the padding 0
    int32_t *colsum; // [N]
};

static void gdl__cu_qweight_free(void *p) {
    gdl__cu_qweight *q = (gdl__cu_qweight *)p;
    if (!q) return;
    gdl__cu_free(q->w);
    gdl__cu_free(q->colsum);
    free(q);
}

static void *gdl__cu_qweight_new(int N, int K, const int8_t *w, const int32_t *colsum) {
    gdl__cu_qweight *q = (gdl__cu_qweight *)calloc(1, sizeof *q);
    int KP = (K + 3) / 4 * 4;
    size_t bytes = (size_t)N * KP;
    std::vector<int8_t> pad(bytes ? bytes : 1, 0);
    if (!q) {
        gdl__set_error("%s: out of memory", gdl__backend_op());
        return NULL;
    }
    q->N = N;
    q->K = K;
    q->KP = KP;
    for (int n = 0; n < N; n++)
        if (K) memcpy(&pad[(size_t)n * KP], w + (size_t)n * K, (size_t)K);
    q->w = (int8_t *)gdl__cu_alloc(bytes ? bytes : 1);
    q->colsum = (int32_t *)gdl__cu_alloc(sizeof(int32_t) * (size_t)(N ? N : 1));
    if (!q->w || !q->colsum || gdl__cu_copy(q->w, pad.data(), bytes, 0) < 0 ||
        gdl__cu_copy(q->colsum, colsum, sizeof(int32_t) * (size_t)N, 0) < 0) {
        gdl__cu_qweight_free(q);
        return NULL;
    }
    return q;
}

#define GDL__QT 16 // the fallback's tile: 16 x 16 outputs, K in steps of 16

// C = A x W^T over any shape, one output per thread; tile rows loop over
// gridDim.y (capped) so any M runs.
__global__ void gdl__k_qgemm_tiled(int M, int N, int K, const uint8_t *A, int lda, const int8_t *W, int ldw,
                                   int32_t *C, int ldc) {
    __shared__ int32_t sa[GDL__QT][GDL__QT + 1], sw[GDL__QT][GDL__QT + 1];
    const int tx = threadIdx.x % GDL__QT, ty = threadIdx.x / GDL__QT;
    const int n = blockIdx.x * GDL__QT + tx;
    for (int64_t r0 = (int64_t)blockIdx.y * GDL__QT; r0 < M; r0 += (int64_t)gridDim.y * GDL__QT) {
        const int64_t m = r0 + ty;
        int32_t acc = 0;
        for (int k0 = 0; k0 < K; k0 += GDL__QT) {
            const int64_t wn = (int64_t)blockIdx.x * GDL__QT + ty; // the W row this thread loads
            sa[ty][tx] = m < M && k0 + tx < K ? (int32_t)A[m * lda + k0 + tx] : 0;
            sw[ty][tx] = wn < N && k0 + tx < K ? (int32_t)W[wn * ldw + k0 + tx] : 0;
            __syncthreads();
            for (int k = 0; k < GDL__QT; k++) acc += sa[ty][k] * sw[tx][k];
            __syncthreads();
        }
        if (m < M && n < N) C[m * ldc + n] = acc;
    }
}

// s8 copy of A's rows: a - 128, KP bytes a row (lda apart in A)
__global__ void gdl__k_q_shift(int64_t M, int KP, const uint8_t *A, int lda, int8_t *S) {
    GDL_CU_LOOP(t, M * KP) S[t] = (int8_t)((int)A[(t / KP) * lda + t % KP] - 128);
}

// C[m][n] += 128 * colsum[n]: the shift taken back
__global__ void gdl__k_q_unshift(int64_t M, int N, const int32_t *colsum, int32_t *C, int ldc) {
    GDL_CU_LOOP(t, M * N) C[(t / N) * ldc + t % N] += 128 * colsum[t % N];
}

// the fallback over the whole of C
static int gdl__cu_qgemm_tiled(int M, const uint8_t *A, int lda, const gdl__cu_qweight *q, int32_t *C, int ldc) {
    dim3 grid((unsigned)((q->N + GDL__QT - 1) / GDL__QT), (unsigned)gdl__cu_cap(std::min(65535, (M + GDL__QT - 1) / GDL__QT)));
    GDL_CU_LAUNCH(gdl__k_qgemm_tiled, grid, GDL__QT * GDL__QT, 0, gdl__cu_stream())(M, q->N, q->K, A, lda, q->w, q->KP,
                                                                                    C, ldc);
    GDL_CU_LAUNCHED();
    return 0;
}

// cuBLAS on the shifted A: 1 done, 0 refused (NOT_SUPPORTED: the fallback runs), -1 error
static int gdl__cu_qgemm_blas(int M, const uint8_t *A, int lda, const gdl__cu_qweight *q, int32_t *C, int ldc) {
    cublasHandle_t h = gdl__cu_blas();
    if (!h) return -1;
    int8_t *S = (int8_t *)gdl__cu_alloc((size_t)M * q->KP);
    if (!S) return -1;
    GDL_CU_LAUNCH(gdl__k_q_shift, gdl__cu_grid((int64_t)M * q->KP, GDL__CU_THREADS), GDL__CU_THREADS, 0,
                  gdl__cu_stream())((int64_t)M, q->KP, A, lda, S);
    cudaError_t le = cudaGetLastError();
    const int32_t one = 1, zero = 0;
    cublasStatus_t st = CUBLAS_STATUS_EXECUTION_FAILED;
    if (le == cudaSuccess) { // row-major C = A W^T is column-major C^T = W^T(op T) A (see cuda/gemm.cu)
        gdl__cu_launches.fetch_add(1, std::memory_order_relaxed);
        st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, q->N, M, q->KP, &one, q->w, CUDA_R_8I, q->KP, S, CUDA_R_8I,
                          q->KP, &zero, C, CUDA_R_32I, ldc, CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT);
    }
    gdl__cu_free(S); // stream order: the GEMM is queued before any reuse
    GDL_CU_TRY(le, -1);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) return 0;
    GDL_CUBLAS_TRY(st, -1);
    GDL_CU_LAUNCH(gdl__k_q_unshift, gdl__cu_grid((int64_t)M * q->N, GDL__CU_THREADS), GDL__CU_THREADS, 0,
                  gdl__cu_stream())((int64_t)M, q->N, q->colsum, C, ldc);
    GDL_CU_LAUNCHED();
    return 1;
}

static int gdl__cu_qgemm(int M, const uint8_t *A, int lda, const void *qw, int32_t *C, int ldc) {
    const gdl__cu_qweight *q = (const gdl__cu_qweight *)qw;
    if (M < 0 || lda < q->KP || ldc < q->N) {
        gdl__set_error("%s: the int8 GEMM cannot take M=%d (>= 0), lda=%d (>= %d: K=%d rounded up to 4), "
                       "ldc=%d (>= N=%d)", gdl__backend_op(), M, lda, q->KP, q->K, ldc, q->N);
        return -1;
    }
    if (M == 0 || q->N == 0) return 0;
    bool blas = q->K > 0 && M % 4 == 0 && q->N % 4 == 0 && lda % 4 == 0 && ldc % 4 == 0 &&
                (uintptr_t)A % 4 == 0 && (uintptr_t)C % 4 == 0;
    if (blas) {
        int r = gdl__cu_qgemm_blas(M, A, lda, q, C, ldc);
        if (r != 0) return r < 0 ? -1 : 0;
    }
    return gdl__cu_qgemm_tiled(M, A, lda, q, C, ldc);
}

#define GDL__Q_BIG 12582912.0f // 1.5 * 2^23: gdl_q_round's constant (nvcc keeps x + big - big without fast-math)

__global__ void gdl__k_quantize(int64_t rows, int64_t k, const float *x, float inv, float z, float qmin, float qmax,
                                int sgn, uint8_t *q, int64_t ldq) {
    GDL_CU_LOOP(t, rows * ldq) {
        const int64_t i = t / ldq, j = t % ldq;
        const float r = j < k ? gdl_q_quantize1(x[i * k + j], inv, z, qmin, qmax, GDL__Q_BIG) : 0.0f;
        q[t] = sgn ? (uint8_t)(int8_t)r : (uint8_t)r;
    }
}

static int gdl__cu_quantize(int64_t rows, int64_t k, const float *x, float s, int32_t z, int qmin, int qmax, void *q,
                            int64_t ldq) {
    int64_t n = rows * ldq;
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_quantize, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        rows, k, x, 1.0f / s, (float)z, (float)qmin, (float)qmax, qmin < 0, (uint8_t *)q, ldq);
    GDL_CU_LAUNCHED();
    return 0;
}

__global__ void gdl__k_dequantize(int64_t n, const uint8_t *q, int sgn, float s, int32_t z, float *y) {
    GDL_CU_LOOP(i, n) {
        const int32_t v = sgn ? (int32_t)(int8_t)q[i] : (int32_t)q[i];
        y[i] = GDL_Q_MUL((float)(v - z), s);
    }
}

static int gdl__cu_dequantize(int64_t n, const void *q, int is_signed, float s, int32_t z, float *y) {
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_dequantize, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        n, (const uint8_t *)q, is_signed, s, z, y);
    GDL_CU_LAUNCHED();
    return 0;
}

#define GDL__QMM_BLOCKS 64 // min / max: partial results per block, combined on the host

// part[3b..3b+2] = block b's min, max (NaN left out) and NaN count
__global__ void gdl__k_qminmax(int64_t n, const float *x, float *part) {
    float lo = GDL__CU_INF, hi = -GDL__CU_INF;
    int bad = 0;
    GDL_CU_LOOP(i, n) {
        const float v = x[i];
        if (v != v) bad = 1;
        else {
            lo = fminf(lo, v);
            hi = fmaxf(hi, v);
        }
    }
    lo = -gdl__block_max(-lo);
    hi = gdl__block_max(hi);
    bad = gdl__block_sum(bad);
    if (threadIdx.x == 0) {
        part[3 * blockIdx.x] = lo;
        part[3 * blockIdx.x + 1] = hi;
        part[3 * blockIdx.x + 2] = (float)bad;
    }
}

static int gdl__cu_qminmax(int64_t n, const float *x, float *out) {
    float part[3 * GDL__QMM_BLOCKS];
    unsigned g = std::min(gdl__cu_grid(n, GDL__CU_THREADS), (unsigned)GDL__QMM_BLOCKS);
    out[0] = out[1] = out[2] = 0;
    if (n <= 0) return 0; // as the CPU: 0, 0 for nothing
    float *d = (float *)gdl__cu_alloc(sizeof part);
    if (!d) return -1;
    GDL_CU_LAUNCH(gdl__k_qminmax, g, GDL__CU_THREADS, 0, gdl__cu_stream())(n, x, d);
    cudaError_t le = cudaGetLastError();
    int rc = le == cudaSuccess ? gdl__cu_copy(part, d, sizeof(float) * 3 * g, 1) : -1;
    gdl__cu_free(d);
    GDL_CU_TRY(le, -1);
    if (rc < 0) return -1;
    out[0] = part[0];
    out[1] = part[1];
    for (unsigned b = 0; b < g; b++) {
        out[0] = std::min(out[0], part[3 * b]);
        out[1] = std::max(out[1], part[3 * b + 1]);
        out[2] += part[3 * b + 2];
    }
    return 0;
}

// one sample's u8 columns: row p (output position) of KP bytes, taps outside the image za
__global__ void gdl__k_qim2col(gdl_conv_geom g, const uint8_t *x, uint8_t za, uint8_t *cols, int64_t KP) {
    const int64_t taps = (int64_t)g.C * g.KH * g.KW;
    GDL_CU_LOOP(t, (int64_t)g.OH * g.OW * KP) {
        const int64_t p = t / KP, col = t % KP;
        uint8_t v = 0;
        if (col < taps) {
            const int c = (int)(col / (g.KH * g.KW)), i = (int)(col / g.KW % g.KH), j = (int)(col % g.KW);
            const int64_t y = p / g.OW * g.SH - g.PH + i * g.DH, xx = p % g.OW * g.SW - g.PW + j * g.DW;
            v = (y < 0 || y >= g.H || xx < 0 || xx >= g.W) ? za : x[((int64_t)c * g.H + y) * g.W + xx];
        }
        cols[t] = v;
    }
}

static int gdl__cu_qim2col(const gdl_conv_geom *g, const uint8_t *x, int32_t za, uint8_t *cols, int64_t KP) {
    int64_t n = (int64_t)g->OH * g->OW * KP;
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_qim2col, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        *g, x, (uint8_t)za, cols, KP);
    GDL_CU_LAUNCHED();
    return 0;
}

__global__ void gdl__k_qepilogue(gdl_qepi e, int64_t rows, const int32_t *acc, float *y) {
    GDL_CU_LOOP(t, rows * e.N) {
        const int64_t i = t / e.N, n = t % e.N;
        y[e.pos ? n * e.pos + i : t] = gdl_q_epilogue1(&e, acc[t], n, GDL__Q_BIG);
    }
}

static int gdl__cu_qepilogue(const gdl_qepi *e, int64_t rows, const int32_t *acc, float *y) {
    int64_t n = rows * e->N;
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_qepilogue, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        *e, rows, acc, y);
    GDL_CU_LAUNCHED();
    return 0;
}
