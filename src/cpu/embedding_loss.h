/* src/cpu/embedding_loss.h — the CPU's embedding (gather / scatter-add of
   rows) and losses (cross-entropy, MSE, BCE with logits), with their backwards. */

static int gdl__cpu_embedding(int64_t n, int64_t D, int64_t V, const int32_t *idx, const gdl_real *W, gdl_real *out) {
    int64_t i;
    for (i = 0; i < n; i++) {
        if (idx[i] < 0 || idx[i] >= V) memset(out + i * D, 0, sizeof(gdl_real) * (size_t)D);
        else memcpy(out + i * D, W + (int64_t)idx[i] * D, sizeof(gdl_real) * (size_t)D);
    }
    return 0;
}
static int gdl__cpu_embedding_backward(int64_t n, int64_t D, int64_t V, const int32_t *idx, const gdl_real *gy,
                                       gdl_real *gW) {
    int64_t i, k;
    for (i = 0; i < n; i++)
        if (idx[i] >= 0 && idx[i] < V)
            for (k = 0; k < D; k++) gW[(int64_t)idx[i] * D + k] += gy[i * D + k];
    return 0;
}

/* the norm of a row: max |w| for norm_type inf, else (sum |w|^p)^(1/p) (PyTorch's torch.norm) */
static double gdl__row_norm(const gdl_real *w, int64_t D, double p) {
    double s = 0;
    int64_t k;
    for (k = 0; k < D; k++) {
        double a = fabs((double)w[k]);
        if (isinf(p)) s = a > s ? a : s;
        else s += p == 1 ? a : p == 2 ? a * a : pow(a, p);
    }
    return isinf(p) || p == 1 ? s : p == 2 ? sqrt(s) : pow(s, 1 / p);
}
/* one row after another, in idx's order: a row that repeats is renormalised once (its norm is then below
   max_norm), the same as the GPU's sequential pass */
static int gdl__cpu_embedding_renorm(int64_t n, int64_t D, int64_t V, const int32_t *idx, gdl_real *W, double max_norm,
                                     double norm_type) {
    int64_t i, k;
    for (i = 0; i < n; i++) {
        gdl_real *w;
        double nrm;
        if (idx[i] < 0 || idx[i] >= V) continue;
        w = W + (int64_t)idx[i] * D;
        nrm = gdl__row_norm(w, D, norm_type);
        if (nrm > max_norm) {
            double scale = max_norm / (nrm + 1e-7);
            for (k = 0; k < D; k++) w[k] = (gdl_real)(w[k] * scale);
        }
    }
    return 0;
}

/* log-sum-exp of a row, stable */
static double gdl__lse(const gdl_real *p, int64_t C) {
    double mx = -INFINITY, s = 0;
    int64_t c;
    for (c = 0; c < C; c++)
        if (p[c] > mx) mx = p[c];
    for (c = 0; c < C; c++) s += exp(p[c] - mx);
    return mx + log(s);
}

static int gdl__cpu_xent(int64_t B, int64_t C, const gdl_real *x, const int32_t *tgt, int ignore_index,
                         double smoothing, int from_log_probs, int reduction, gdl_real *rows, gdl_real *out,
                         gdl_real *count) {
    int64_t b, c, cnt = 0;
    double total = 0;
    for (b = 0; b < B; b++) {
        const gdl_real *p = x + b * C;
        double lse = from_log_probs ? 0 : gdl__lse(p, C), sum_lp = 0, l;
        if (tgt[b] == ignore_index) {
            rows[b] = 0;
            continue;
        }
        if (smoothing > 0)
            for (c = 0; c < C; c++) sum_lp += p[c] - lse;
        l = -((1 - smoothing) * (p[tgt[b]] - lse) + smoothing / (double)C * sum_lp);
        rows[b] = (gdl_real)l;
        total += l;
        cnt++;
    }
    if (count) count[0] = (gdl_real)cnt;
    if (reduction == GDL_REDUCE_SUM) out[0] = (gdl_real)total;
    else if (reduction == GDL_REDUCE_MEAN) out[0] = (gdl_real)(total / (double)cnt); /* 0/0 = NaN as PyTorch */
    return 0;
}

static int gdl__cpu_xent_backward(int64_t B, int64_t C, const gdl_real *x, const int32_t *tgt, int ignore_index,
                                  double smoothing, int from_log_probs, int reduction, const gdl_real *gy,
                                  const gdl_real *count, gdl_real *gx) {
    int64_t b, c;
    for (b = 0; b < B; b++) {
        const gdl_real *p = x + b * C;
        double g, lse;
        if (tgt[b] == ignore_index) continue;
        g = reduction == GDL_REDUCE_NONE ? gy[b] : reduction == GDL_REDUCE_SUM ? gy[0] : gy[0] / (double)count[0];
        lse = from_log_probs ? 0 : gdl__lse(p, C);
        for (c = 0; c < C; c++) {
            double target = (1 - smoothing) * (c == tgt[b]) + smoothing / (double)C;
            double d = from_log_probs ? -target : exp(p[c] - lse) - target;
            gx[b * C + c] += (gdl_real)(g * d);
        }
    }
    return 0;
}

static int gdl__cpu_pointwise_loss(int kind, int64_t n, const gdl_real *x, const gdl_real *y, gdl_real *out) {
    int64_t i;
    for (i = 0; i < n; i++) {
        double a = x[i], t = y[i];
        out[i] = (gdl_real)(kind == GDL_LOSS_MSE ? (a - t) * (a - t) : (a > 0 ? a : 0) - a * t + log1p(exp(-fabs(a))));
    }
    return 0;
}
static int gdl__cpu_pointwise_loss_backward(int kind, int64_t n, const gdl_real *x, const gdl_real *y,
                                            const gdl_real *gout, gdl_real *gx, gdl_real *gy) {
    int64_t i;
    for (i = 0; i < n; i++) {
        double a = x[i], t = y[i], g = gout[i];
        if (kind == GDL_LOSS_MSE) {
            if (gx) gx[i] += (gdl_real)(2 * (a - t) * g);
            if (gy) gy[i] -= (gdl_real)(2 * (a - t) * g);
        } else {
            if (gx) gx[i] += (gdl_real)((1.0 / (1.0 + exp(-a)) - t) * g);
            if (gy) gy[i] -= (gdl_real)(a * g);
        }
    }
    return 0;
}
