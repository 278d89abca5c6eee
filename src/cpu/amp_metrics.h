/* src/cpu/amp_metrics.h — the CPU's GradScaler kernels (unscale with the
   inf check, the scale's update), gdl_fit's batch metrics, and the
   non-finite count and sum of squares that the anomaly checks use. */


static int gdl__cpu_amp_unscale(int64_t n, gdl_real *g, const gdl_real *scale, gdl_real *found_inf,
                                gdl_real *found_inf2) {
    float inv = (float)(1.0 / (double)*scale); /* PyTorch: scale.double().reciprocal().float() */
    int64_t i;
    int found = 0;
    for (i = 0; i < n; i++) {
        found |= !(g[i] - g[i] == 0); /* inf and NaN give NaN */
        if (inv != 1.0f) g[i] = (gdl_real)(g[i] * inv);
    }
    if (found) {
        *found_inf = 1;
        if (found_inf2) *found_inf2 = 1;
    }
    return 0;
}
static int gdl__cpu_amp_update_scale(gdl_real *scale, int32_t *tracker, gdl_real *found_inf, double growth,
                                     double backoff, int interval) {
    if (*found_inf != 0) {
        *scale = (gdl_real)(float)(*scale * backoff);
        *tracker = 0;
    } else if (*tracker + 1 >= interval) {
        float grown = (float)(*scale * growth);
        if (grown - grown == 0) *scale = (gdl_real)grown;
        *tracker = 0;
    } else {
        (*tracker)++;
    }
    *found_inf = 0;
    return 0;
}
static int gdl__cpu_fit_metrics(const gdl_real *loss, int64_t B, int64_t C, const gdl_real *logits, const int32_t *y,
                                double *acc) {
    acc[0] += (double)loss[0] * (double)B;
    acc[1] += (double)B;
    if (logits) {
        int64_t r, k, correct = 0;
        for (r = 0; r < B; r++) {
            const gdl_real *p = logits + r * C;
            int64_t best = 0;
            for (k = 1; k < C; k++)
                if (p[k] > p[best] || (p[k] != p[k] && p[best] == p[best])) best = k; /* gdl__cpu_argmax's rule */
            correct += best == y[r];
        }
        acc[2] += (double)correct;
        acc[3] += (double)B;
    }
    return 0;
}
static int gdl__cpu_count_nonfinite(int64_t n, const gdl_real *x, int64_t *out) {
    int64_t i, c = 0;
    for (i = 0; i < n; i++) c += !(x[i] - x[i] == 0); /* NaN and Inf give NaN */
    *out = c;
    return 0;
}
static int gdl__cpu_sum_squares(int64_t n, const gdl_real *x, double *out) {
    int64_t i;
    double s = 0;
    for (i = 0; i < n; i++) s += (double)x[i] * x[i];
    *out = s;
    return 0;
}
