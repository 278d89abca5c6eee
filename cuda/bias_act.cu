// ----------------------------------------------------------------------------
// fused bias + activation (gdl_linear_act, gdl_conv2d_act): the arithmetic of
// the unfused kernels (the binary add, gdl_unary1_float, unary_backward adding to a
// zeroed gradient, reduce's summation order), so fused and unfused agree bit
// for bit wherever the GEMMs do

__device__ __forceinline__ float gdl__act1(int act, float v) {
    return act < 0 ? v : act == GDL_UN_RELU ? (v > 0 ? v : 0.0f) : gdl_unary1_float((enum gdl_unary_op)act, v, 0.0f);
}

// ReLU selects (as unary_backward does); pre may be ReLU's output
__device__ __forceinline__ float gdl__act_grad(int act, float pre, float gy) {
    return 0.0f + (act < 0 ? gy
                   : act == GDL_UN_RELU ? (pre > 0 ? gy : 0.0f)
                   : gy * gdl_unary_grad1_float((enum gdl_unary_op)act, pre, 0.0f, 0.0f));
}

__global__ void gdl__k_bias_act(int act, int64_t n, int64_t C, int64_t inner, const float *bias, float *y, float *pre) {
    GDL_CU_LOOP(i, n) {
        float v = y[i];
        if (bias) v = v + bias[(i / inner) % C];
        if (pre) pre[i] = v;
        y[i] = gdl__act1(act, v);
    }
}

static int gdl__cu_bias_act(int act, int64_t outer, int64_t C, int64_t inner, const float *bias, float *y, float *pre) {
    int64_t n = outer * C * inner;
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_bias_act, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        act, n, C, inner ? inner : 1, bias, y, pre);
    GDL_CU_LAUNCHED();
    return 0;
}

__global__ void gdl__k_act_backward(int act, int64_t n, const float *pre, const float *gy, float *gpre) {
    GDL_CU_LOOP(i, n) gpre[i] = gdl__act_grad(act, pre[i], gy[i]);
}

// gdl__k_reduce_thread / _block with act' applied to each element read (and written to gpre)
__global__ void gdl__k_act_reduce_thread(int act, int64_t outer, int64_t n, int64_t inner, const float *pre,
                                         const float *gy, float *gpre, float *sum, int accumulate) {
    GDL_CU_LOOP(t, outer * inner) {
        int64_t o = t / inner, i = t - o * inner, base = o * n * inner + i;
        float s = 0;
        for (int64_t k = 0; k < n; k++) {
            float g = gdl__act_grad(act, pre[base + k * inner], gy[base + k * inner]);
            gpre[base + k * inner] = g;
            s += g;
        }
        sum[t] = accumulate ? sum[t] + s : s;
    }
}

__global__ void gdl__k_act_reduce_block(int act, int64_t outer, int64_t n, int64_t inner, const float *pre,
                                        const float *gy, float *gpre, float *sum, int accumulate) {
    GDL_CU_ROWS(t, outer * inner) {
        int64_t o = t / inner, i = t - o * inner, base = o * n * inner + i;
        float s = 0;
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
            float g = gdl__act_grad(act, pre[base + k * inner], gy[base + k * inner]);
            gpre[base + k * inner] = g;
            s += g;
        }
        s = gdl__block_sum(s);
        if (threadIdx.x == 0) sum[t] = accumulate ? sum[t] + s : s;
    }
}

static int gdl__cu_act_backward_reduce(int act, int64_t outer, int64_t n, int64_t inner, const float *pre,
                                       const float *gy, float *gpre, float *sum, int accumulate) {
    int64_t nout = outer * inner;
    if (nout <= 0 || n < 0) return 0;
    if (!sum) {
        if (nout * n > 0)
            GDL_CU_LAUNCH(gdl__k_act_backward, gdl__cu_grid(nout * n, GDL__CU_THREADS), GDL__CU_THREADS, 0,
                          gdl__cu_stream())(act, nout * n, pre, gy, gpre);
    } else if (n >= 64 && (inner == 1 || nout < 1024)) { /* gdl__cu_reduce's choice */
        GDL_CU_LAUNCH(gdl__k_act_reduce_block, gdl__cu_row_grid(nout), gdl__cu_row_threads(n), 0, gdl__cu_stream())(
            act, outer, n, inner, pre, gy, gpre, sum, accumulate);
    } else {
        GDL_CU_LAUNCH(gdl__k_act_reduce_thread, gdl__cu_grid(nout, GDL__CU_THREADS), GDL__CU_THREADS, 0,
                      gdl__cu_stream())(act, outer, n, inner, pre, gy, gpre, sum, accumulate);
    }
    GDL_CU_LAUNCHED();
    return 0;
}

// y[M,N] = act(x[M,K]·w[N,K]^T + bias) as one cublasLtMatmul with a bias /
// activation epilogue (llm.c's matmul_cublaslt). cuBLASLt is column-major:
// our row-major y is its N x M matrix D = op(A)·B with A = w (K x N, ld K,
// transposed) and B = x (K x M, ld K); the bias runs along D's rows, as
// cuBLASLt's bias vector does. GELU keeps its input in the aux buffer (ld N,
// which cuBLASLt wants divisible by 8). Where cuBLASLt cannot (erf GELU, K 0,
// misaligned bias or aux, no algorithm): the GEMM, then one bias_act pass.
// With GPUDL_VERBOSE=1 the first such fallback in a process says why on
// stderr (a notice once, not a log: a model falls back on every step).
static void gdl__cu_lt_fallback_notice(const char *why, int M, int N, int K) {
    static std::atomic<int> told(0);
    const char *v = getenv("GPUDL_VERBOSE"); // 0 or 1: anything else warns (once) and counts as 0
    if (!v || !v[0] || strcmp(v, "0") == 0 || told.exchange(1)) return;
    if (strcmp(v, "1") != 0) {
        fprintf(stderr, "gpudl: warning: ignoring GPUDL_VERBOSE='%.64s': not 0 or 1; using 0\n", v);
        return;
    }
    fprintf(stderr, "gpudl: fused linear %d x %d x %d without cuBLASLt's epilogue (%s): the GEMM, then the "
                    "bias/activation kernel (said once per process)\n", M, N, K, why);
}

static int gdl__cu_linear_act(int act, int M, int N, int K, const float *x, const float *w, const float *bias,
                              float *y, float *pre) {
    if (M <= 0 || N <= 0) return 0;
    const char *why = K <= 0                                                   ? "K is 0"
                      : act == GDL_UN_GELU_ERF                                 ? "erf GELU has no epilogue"
                      : bias && (uintptr_t)bias % 16                           ? "bias not 16-byte aligned"
                      : pre && (N % 8 || (uintptr_t)pre % 16)                  ? "aux not 16-byte aligned or N % 8"
                      : (uintptr_t)y % 16                                      ? "output not 16-byte aligned"
                                                                               : NULL;
    if (!why) {
        int rc = gdl__cu_lt_matmul(act, M, N, K, x, w, bias, y, pre);
        if (rc <= 0) return rc; /* 1: no algorithm for it, take the other way */
        why = "the heuristic found no algorithm";
    }
    gdl__cu_lt_fallback_notice(why, M, N, K);
    if (gdl__cu_gemm_f32(0, 1, M, N, K, 1.0f, x, K, 0, w, K, 0, 0.0f, y, N, 0, 1) < 0) return -1;
    if (!bias && act < 0) return 0;
    return gdl__cu_bias_act(act, M, N, 1, bias, y, pre);
}

// argmax by the CPU's rule, gdl__max_better's, as max_dim's: the first
// maximum, and the first NaN wins (0 for an empty row). Rows are short
// (classes): a thread per row is enough
__global__ void gdl__k_argmax(int64_t outer, int64_t n, int64_t inner, const float *x, int32_t *out) {
    GDL_CU_LOOP(t, outer * inner) {
        int64_t o = t / inner, i = t - o * inner;
        const float *p = x + o * n * inner + i;
        float bv = 0;
        long long bk = -1;
        for (int64_t k = 0; k < n; k++) {
            float v = p[k * inner];
            if (gdl__max_better(v, k, bv, bk)) {
                bv = v;
                bk = k;
            }
        }
        out[t] = (int32_t)(bk < 0 ? 0 : bk);
    }
}

static int gdl__cu_argmax(int64_t outer, int64_t n, int64_t inner, const float *x, int32_t *out) {
    if (outer * inner <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_argmax, gdl__cu_grid(outer * inner, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(outer, n, inner, x, out);
    GDL_CU_LAUNCHED();
    return 0;
}

// softmax over contiguous rows (inner == 1): one block per row. The max
// ignores NaN as the CPU's "if (v > mx)" does; lse = max + log(sum exp).
__global__ void gdl__k_softmax_rows(int log_, int64_t rows, int64_t n, const float *x, float *y) {
    GDL_CU_ROWS(r, rows) {
        const float *p = x + r * n;
        float *q = y + r * n;
        float mx = -GDL__CU_INF, s = 0;
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) mx = fmaxf(mx, p[k]);
        mx = gdl__block_max(mx);
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s += expf(p[k] - mx);
        s = gdl__block_sum(s);
        float lse = mx + logf(s);
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) q[k] = log_ ? p[k] - lse : expf(p[k] - lse);
    }
}

// strided rows (inner > 1): one thread per (o, i), coalesced across i
__global__ void gdl__k_softmax_strided(int log_, int64_t outer, int64_t n, int64_t inner, const float *x, float *y) {
    GDL_CU_LOOP(t, outer * inner) {
        int64_t o = t / inner, i = t - o * inner;
        const float *p = x + o * n * inner + i;
        float *q = y + o * n * inner + i;
        float mx = -GDL__CU_INF, s = 0;
        for (int64_t k = 0; k < n; k++) mx = fmaxf(mx, p[k * inner]);
        for (int64_t k = 0; k < n; k++) s += expf(p[k * inner] - mx);
        float lse = mx + logf(s);
        for (int64_t k = 0; k < n; k++) q[k * inner] = log_ ? p[k * inner] - lse : expf(p[k * inner] - lse);
    }
}

static int gdl__cu_softmax(int log_, int64_t outer, int64_t n, int64_t inner, const float *x, float *y) {
    if (outer * n * inner <= 0) return 0;
    if (inner == 1)
        GDL_CU_LAUNCH(gdl__k_softmax_rows, gdl__cu_row_grid(outer), gdl__cu_row_threads(n), 0, gdl__cu_stream())(log_, outer, n, x, y);
    else
        GDL_CU_LAUNCH(gdl__k_softmax_strided, gdl__cu_grid(outer * inner, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(log_, outer, n,
                                                                                                  inner, x, y);
    GDL_CU_LAUNCHED();
    return 0;
}

// softmax:     gx += y * (gy - sum(gy * y))
// log_softmax: gx += gy - exp(y) * sum(gy)
__global__ void gdl__k_softmax_backward_rows(int log_, int64_t rows, int64_t n, const float *y, const float *gy,
                                             float *gx) {
    GDL_CU_ROWS(r, rows) {
        int64_t base = r * n;
        float s = 0;
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s += log_ ? gy[base + k] : gy[base + k] * y[base + k];
        s = gdl__block_sum(s);
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
            int64_t j = base + k;
            gx[j] += log_ ? gy[j] - expf(y[j]) * s : y[j] * (gy[j] - s);
        }
    }
}

__global__ void gdl__k_softmax_backward_strided(int log_, int64_t outer, int64_t n, int64_t inner, const float *y,
                                                const float *gy, float *gx) {
    GDL_CU_LOOP(t, outer * inner) {
        int64_t o = t / inner, i = t - o * inner, base = o * n * inner + i;
        float s = 0;
        for (int64_t k = 0; k < n; k++) {
            int64_t j = base + k * inner;
            s += log_ ? gy[j] : gy[j] * y[j];
        }
        for (int64_t k = 0; k < n; k++) {
            int64_t j = base + k * inner;
            gx[j] += log_ ? gy[j] - expf(y[j]) * s : y[j] * (gy[j] - s);
        }
    }
}

static int gdl__cu_softmax_backward(int log_, int64_t outer, int64_t n, int64_t inner, const float *y,
                                    const float *gy, float *gx) {
    if (outer * n * inner <= 0) return 0;
    if (inner == 1)
        GDL_CU_LAUNCH(gdl__k_softmax_backward_rows, gdl__cu_row_grid(outer), gdl__cu_row_threads(n), 0, gdl__cu_stream())(log_, outer, n, y, gy, gx);
    else
        GDL_CU_LAUNCH(gdl__k_softmax_backward_strided, gdl__cu_grid(outer * inner, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
            log_, outer, n, inner, y, gy, gx);
    GDL_CU_LAUNCHED();
    return 0;
}

