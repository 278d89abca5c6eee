// ----------------------------------------------------------------------------
// embedding

__global__ void gdl__k_embedding(int64_t n, int64_t D, int64_t V, const int32_t *idx, const float *W, float *out) {
    GDL_CU_LOOP(t, n * D) {
        int64_t i = t / D, k = t - i * D;
        int32_t row = idx[i];
        out[t] = (row >= 0 && row < V) ? W[(int64_t)row * D + k] : 0.0f;
    }
}

// rows repeat in idx, so several threads may add into one gW row: atomics
__global__ void gdl__k_embedding_backward(int64_t n, int64_t D, int64_t V, const int32_t *idx, const float *gy,
                                          float *gW) {
    GDL_CU_LOOP(t, n * D) {
        int64_t i = t / D, k = t - i * D;
        int32_t row = idx[i];
        if (row >= 0 && row < V) atomicAdd(&gW[(int64_t)row * D + k], gy[t]);
    }
}

static int gdl__cu_embedding(int64_t n, int64_t D, int64_t V, const int32_t *idx, const float *W, float *out) {
    if (n <= 0 || D <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_embedding, gdl__cu_grid(n * D, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(n, D, V, idx, W, out);
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_embedding_backward(int64_t n, int64_t D, int64_t V, const int32_t *idx, const float *gy,
                                      float *gW) {
    if (n <= 0 || D <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_embedding_backward, gdl__cu_grid(n * D, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(n, D, V, idx, gy, gW);
    GDL_CU_LAUNCHED();
    return 0;
}

// max_norm: one block walks idx in order (a repeated row is seen after its
// renormalisation, as on the CPU); its threads share a row's norm
__global__ void gdl__k_embedding_renorm(int64_t n, int64_t D, int64_t V, const int32_t *idx, float *W, float max_norm,
                                        float norm_type) {
    const bool inf = isinf(norm_type);
    for (int64_t i = 0; i < n; i++) {
        int32_t row = idx[i];
        if (row < 0 || row >= V) continue;
        float *w = W + (int64_t)row * D;
        float s = 0;
        for (int64_t k = threadIdx.x; k < D; k += blockDim.x) {
            float a = fabsf(w[k]);
            s = inf ? fmaxf(s, a) : s + (norm_type == 1.0f ? a : norm_type == 2.0f ? a * a : powf(a, norm_type));
        }
        s = inf ? gdl__block_max(s) : gdl__block_sum(s);
        float nrm = inf || norm_type == 1.0f ? s : norm_type == 2.0f ? sqrtf(s) : powf(s, 1.0f / norm_type);
        if (nrm > max_norm) {
            float scale = max_norm / (nrm + 1e-7f);
            for (int64_t k = threadIdx.x; k < D; k += blockDim.x) w[k] *= scale;
        }
        __syncthreads(); // every thread's writes before the next row (which may be this one) is read
    }
}

static int gdl__cu_embedding_renorm(int64_t n, int64_t D, int64_t V, const int32_t *idx, float *W, double max_norm,
                                    double norm_type) {
    if (n <= 0 || D <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_embedding_renorm, 1, GDL__CU_THREADS, 0, gdl__cu_stream())(n, D, V, idx, W, (float)max_norm,
                                                                                  (float)norm_type);
    GDL_CU_LAUNCHED();
    return 0;
}

// ----------------------------------------------------------------------------
// losses

// log-sum-exp of a row, by the whole block (every thread gets it)
__device__ float gdl__block_lse(const float *p, int64_t C) {
    float mx = -GDL__CU_INF, s = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) mx = fmaxf(mx, p[c]);
    mx = gdl__block_max(mx);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += expf(p[c] - mx);
    return mx + logf(gdl__block_sum(s));
}

// rows[b] = -((1-eps)*logp[t] + eps/C * sum_c logp[c]), 0 when ignored; a
// target outside [0,C) gives NaN (the CPU op layer rejects it first)
__global__ void gdl__k_xent_rows(int64_t B, int64_t C, const float *x, const int32_t *tgt, int ignore_index,
                                 float smoothing, int from_log_probs, float *rows) {
    GDL_CU_ROWS(b, B) {
        const float *p = x + b * C;
        int32_t t = tgt[b];
        if (t == ignore_index) { /* uniform across the block */
            if (threadIdx.x == 0) rows[b] = 0;
            continue;
        }
        float lse = from_log_probs ? 0.0f : gdl__block_lse(p, C), sum_lp = 0;
        if (smoothing > 0) {
            for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sum_lp += p[c] - lse;
            sum_lp = gdl__block_sum(sum_lp);
        }
        if (threadIdx.x == 0)
            rows[b] = (t < 0 || t >= C) ? GDL__CU_NAN
                                         : -((1 - smoothing) * (p[t] - lse) + smoothing / (float)C * sum_lp);
    }
}

// one block: the sum of the rows and the count of non-ignored rows, left on
// the device (count[0] for the backward pass, out[0] the reduced loss)
__global__ void gdl__k_xent_total(int64_t B, const int32_t *tgt, int ignore_index, const float *rows, int reduction,
                                  float *out, float *count) {
    double s = 0, n = 0;
    for (int64_t b = threadIdx.x; b < B; b += blockDim.x) {
        s += rows[b]; /* ignored rows hold 0 */
        n += tgt[b] != ignore_index;
    }
    s = gdl__block_sum(s);
    n = gdl__block_sum(n);
    if (threadIdx.x == 0) {
        if (count) count[0] = (float)n;
        if (reduction == GDL_REDUCE_SUM) out[0] = (float)s;
        else if (reduction == GDL_REDUCE_MEAN) out[0] = (float)(s / n); /* 0/0 = NaN as PyTorch */
    }
}

static int gdl__cu_xent(int64_t B, int64_t C, const float *x, const int32_t *tgt, int ignore_index,
                        double smoothing, int from_log_probs, int reduction, float *rows, float *out, float *count) {
    if (B > 0 && C > 0) {
        GDL_CU_LAUNCH(gdl__k_xent_rows, gdl__cu_row_grid(B), gdl__cu_row_threads(C), 0, gdl__cu_stream())(B, C, x, tgt, ignore_index,
                                                                          (float)smoothing, from_log_probs, rows);
        GDL_CU_LAUNCHED();
    }
    if (count || reduction != GDL_REDUCE_NONE) {
        GDL_CU_LAUNCH(gdl__k_xent_total, 1, 512, 0, gdl__cu_stream())(B < 0 ? 0 : B, tgt, ignore_index, rows, reduction, out, count);
        GDL_CU_LAUNCHED();
    }
    return 0;
}

// gx[b,c] += g * (softmax(x)[c] - target[c]); from log-probs: g * -target[c].
// g is gy[b] (NONE), gy[0] (SUM) or gy[0]/count[0] (MEAN, count read on the
// device: no host round trip).
__global__ void gdl__k_xent_backward(int64_t B, int64_t C, const float *x, const int32_t *tgt, int ignore_index,
                                     float on, float off, int from_log_probs, int reduction, const float *gy,
                                     const float *count, float *gx) {
    GDL_CU_ROWS(b, B) {
        const float *p = x + b * C;
        int32_t t = tgt[b];
        if (t == ignore_index) continue;
        float g = reduction == GDL_REDUCE_NONE ? gy[b] : reduction == GDL_REDUCE_SUM ? gy[0] : gy[0] / count[0];
        if (t < 0 || t >= C) g = GDL__CU_NAN; /* as the forward pass: a bad target poisons its row */
        float lse = from_log_probs ? 0.0f : gdl__block_lse(p, C);
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            float target = c == t ? on : off;
            float d = from_log_probs ? -target : expf(p[c] - lse) - target;
            gx[b * C + c] += g * d;
        }
    }
}

static int gdl__cu_xent_backward(int64_t B, int64_t C, const float *x, const int32_t *tgt, int ignore_index,
                                 double smoothing, int from_log_probs, int reduction, const float *gy,
                                 const float *count, float *gx) {
    if (B <= 0 || C <= 0) return 0;
    if (reduction == GDL_REDUCE_MEAN && !count) {
        gdl__set_error("gdl_cuda: xent_backward with mean reduction needs the count");
        return -1;
    }
    float on = (float)((1 - smoothing) + smoothing / (double)C), off = (float)(smoothing / (double)C);
    GDL_CU_LAUNCH(gdl__k_xent_backward, gdl__cu_row_grid(B), gdl__cu_row_threads(C), 0, gdl__cu_stream())(B, C, x, tgt, ignore_index, on, off,
                                                                          from_log_probs, reduction, gy, count, gx);
    GDL_CU_LAUNCHED();
    return 0;
}

// MSE: (x-y)^2; BCE with logits, stable: max(x,0) - x*y + log1p(exp(-|x|))
__global__ void gdl__k_pointwise_loss(int kind, int64_t n, const float *x, const float *y, float *out) {
    GDL_CU_LOOP(i, n) {
        float a = x[i], t = y[i];
        out[i] = kind == GDL_LOSS_MSE ? (a - t) * (a - t) : fmaxf(a, 0.0f) - a * t + log1pf(expf(-fabsf(a)));
    }
}

__global__ void gdl__k_pointwise_loss_backward(int kind, int64_t n, const float *x, const float *y, const float *gout,
                                               float *gx, float *gy) {
    GDL_CU_LOOP(i, n) {
        float a = x[i], t = y[i], g = gout[i];
        if (kind == GDL_LOSS_MSE) {
            float d = 2.0f * (a - t) * g;
            if (gx) gx[i] += d;
            if (gy) gy[i] -= d;
        } else {
            if (gx) gx[i] += (1.0f / (1.0f + expf(-a)) - t) * g;
            if (gy) gy[i] -= a * g;
        }
    }
}

static int gdl__cu_pointwise_loss(int kind, int64_t n, const float *x, const float *y, float *out) {
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_pointwise_loss, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(kind, n, x, y, out);
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_pointwise_loss_backward(int kind, int64_t n, const float *x, const float *y, const float *gout,
                                           float *gx, float *gy) {
    if (n <= 0 || (!gx && !gy)) return 0;
    GDL_CU_LAUNCH(gdl__k_pointwise_loss_backward, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(kind, n, x, y, gout, gx,
                                                                                          gy);
    GDL_CU_LAUNCHED();
    return 0;
}

