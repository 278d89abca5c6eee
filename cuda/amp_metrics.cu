// ----------------------------------------------------------------------------
// GradScaler: the CPU's formulas; the scale, found_inf and the tracker stay
// in device memory (nothing read back, so a captured step replays right).
// found_inf is only ever set to 1 by the unscale kernel (a benign race).

__global__ void gdl__k_amp_unscale(int64_t n, float *g, const float *scale, float *found_inf, float *found_inf2) {
    float inv = (float)(1.0 / (double)*scale); // PyTorch: scale.double().reciprocal().float()
    int found = 0;
    GDL_CU_LOOP(i, n) {
        float v = g[i];
        found |= !(v - v == 0.0f);
        if (inv != 1.0f) g[i] = v * inv;
    }
    if (found) {
        *found_inf = 1.0f;
        if (found_inf2) *found_inf2 = 1.0f;
    }
}

static int gdl__cu_amp_unscale(int64_t n, float *g, const float *scale, float *found_inf, float *found_inf2) {
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_amp_unscale, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        n, g, scale, found_inf, found_inf2);
    GDL_CU_LAUNCHED();
    return 0;
}

__global__ void gdl__k_amp_update_scale(float *scale, int32_t *tracker, float *found_inf, double growth,
                                        double backoff, int interval) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    if (*found_inf != 0.0f) {
        *scale = (float)(*scale * backoff);
        *tracker = 0;
    } else if (*tracker + 1 >= interval) {
        float grown = (float)(*scale * growth);
        if (grown - grown == 0.0f) *scale = grown;
        *tracker = 0;
    } else {
        *tracker += 1;
    }
    *found_inf = 0.0f;
}

static int gdl__cu_amp_update_scale(float *scale, int32_t *tracker, float *found_inf, double growth, double backoff,
                                    int interval) {
    GDL_CU_LAUNCH(gdl__k_amp_update_scale, 1, 32, 0, gdl__cu_stream())(scale, tracker, found_inf, growth, backoff,
                                                                       interval);
    GDL_CU_LAUNCHED();
    return 0;
}

// ----------------------------------------------------------------------------
// training metrics on the device (gdl_fit reads them at its progress refresh)

// one block: the threads take rows, the row's argmax by gdl__k_argmax's rule;
// the correct count is summed in a fixed order, thread 0 adds it all
__global__ void gdl__k_fit_metrics(const float *loss, int64_t B, int64_t C, const float *logits, const int32_t *y,
                                   double *acc) {
    unsigned long long correct = 0;
    if (logits)
        for (int64_t r = threadIdx.x; r < B; r += blockDim.x) {
            const float *p = logits + r * C;
            int64_t best = 0;
            float bv = C ? p[0] : 0.0f;
            for (int64_t k = 1; k < C; k++) {
                float v = p[k];
                if (v > bv || (v != v && bv == bv)) {
                    best = k;
                    bv = v;
                }
            }
            correct += best == y[r];
        }
    correct = gdl__block_sum(correct);
    if (threadIdx.x == 0) {
        acc[0] += (double)loss[0] * (double)B;
        acc[1] += (double)B;
        if (logits) {
            acc[2] += (double)correct;
            acc[3] += (double)B;
        }
    }
}

static int gdl__cu_fit_metrics(const float *loss, int64_t B, int64_t C, const float *logits, const int32_t *y,
                               double *acc) {
    GDL_CU_LAUNCH(gdl__k_fit_metrics, 1, GDL__CU_THREADS, 0, gdl__cu_stream())(loss, B, C, logits, y, acc);
    GDL_CU_LAUNCHED();
    return 0;
}

// ----------------------------------------------------------------------------
// host-visible results: two passes (per-block partials, then one block sums
// them in order), so the result does not depend on scheduling; then one
// synchronising copy to the host

#define GDL__CU_PARTIALS 1024

__global__ void gdl__k_nonfinite_partial(int64_t n, const float *x, unsigned long long *part) {
    unsigned long long c = 0;
    GDL_CU_LOOP(i, n) c += !isfinite(x[i]);
    c = gdl__block_sum(c);
    if (threadIdx.x == 0) part[blockIdx.x] = c;
}

__global__ void gdl__k_sum_squares_partial(int64_t n, const float *x, double *part) {
    double s = 0;
    GDL_CU_LOOP(i, n) s += (double)x[i] * x[i];
    s = gdl__block_sum(s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

template <typename T> __global__ void gdl__k_sum_partials(int nb, const T *part, T *out) {
    T s = 0;
    for (int i = threadIdx.x; i < nb; i += blockDim.x) s += part[i];
    s = gdl__block_sum(s);
    if (threadIdx.x == 0) *out = s;
}

// partials then total, both in one scratch block: [nb partials][total]
template <typename T, typename K>
static int gdl__cu_reduce_to_host(int64_t n, const float *x, T *out, K partial_kernel) {
    unsigned nb = gdl__cu_grid(n, GDL__CU_THREADS);
    if (nb > GDL__CU_PARTIALS) nb = GDL__CU_PARTIALS;
    T *buf = (T *)gdl__cu_alloc(sizeof(T) * (nb + 1));
    if (!buf) return -1;
    GDL_CU_LAUNCH(partial_kernel, nb, GDL__CU_THREADS, 0, gdl__cu_stream())(n, x, buf);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) {
        GDL_CU_LAUNCH(gdl__k_sum_partials<T>, 1, GDL__CU_THREADS, 0, gdl__cu_stream())((int)nb, buf, buf + nb);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpyAsync(out, buf + nb, sizeof(T), cudaMemcpyDeviceToHost, gdl__cu_stream());
    if (e == cudaSuccess) {
        gdl__count_sync();
        e = cudaStreamSynchronize(gdl__cu_stream());
    }
    gdl__cu_free(buf);
    GDL_CU_TRY(e, -1);
    return 0;
}

static int gdl__cu_count_nonfinite(int64_t n, const float *x, int64_t *out) {
    unsigned long long c = 0;
    if (n > 0 && gdl__cu_reduce_to_host(n, x, &c, gdl__k_nonfinite_partial) < 0) return -1;
    *out = (int64_t)c;
    return 0;
}

static int gdl__cu_sum_squares(int64_t n, const float *x, double *out) {
    double s = 0;
    if (n > 0 && gdl__cu_reduce_to_host(n, x, &s, gdl__k_sum_squares_partial) < 0) return -1;
    *out = s;
    return 0;
}

