// ----------------------------------------------------------------------------
// the fused LSTM / GRU gate steps (gdl_lstm_gates, gdl_gru_gates) and their
// backwards: one thread per (row, unit), reading the unit's G pre-activations
// from gx and gh and writing the new state; the backward recomputes the gates
// (nothing saved). Each thread owns its G gradient slots, so the += need no
// atomics, and gx and gh may share one gradient buffer. Arithmetic in double
// as the CPU's, so the two agree to the last rounding (up to libm's exp/tanh).

__device__ __forceinline__ double gdl__cu_sigm(double v) { return 1.0 / (1.0 + exp(-v)); }

__global__ void gdl__k_lstm_gates(int64_t B, int64_t H, const float *gx, const float *gh, const float *c_prev,
                                  float *hc, const float *dhc, float *dgx, float *dgh, float *dc_prev) {
    GDL_CU_LOOP(t, B * H) {
        int64_t b = t / H, j = t - b * H, base = b * 4 * H + j;
        double gi = gdl__cu_sigm((double)gx[base] + gh[base]);
        double gf = gdl__cu_sigm((double)gx[base + H] + gh[base + H]);
        double gg = tanh((double)gx[base + 2 * H] + gh[base + 2 * H]);
        double go = gdl__cu_sigm((double)gx[base + 3 * H] + gh[base + 3 * H]);
        double cp = c_prev[t], c = gf * cp + gi * gg, tc = tanh(c);
        if (!dhc) { // forward
            hc[t] = (float)(go * tc);
            hc[B * H + t] = (float)c;
            continue;
        }
        double dh = dhc[t], dc = dhc[B * H + t] + dh * go * (1 - tc * tc);
        double d[4] = {dc * gg * gi * (1 - gi), dc * cp * gf * (1 - gf), dc * gi * (1 - gg * gg),
                       dh * tc * go * (1 - go)};
        for (int k = 0; k < 4; k++) {
            if (dgx) dgx[base + k * H] += (float)d[k];
            if (dgh) dgh[base + k * H] += (float)d[k];
        }
        if (dc_prev) dc_prev[t] += (float)(dc * gf);
    }
}

__global__ void gdl__k_gru_gates(int64_t B, int64_t H, const float *gx, const float *gh, const float *h_prev,
                                 float *h, const float *dh, float *dgx, float *dgh, float *dh_prev) {
    GDL_CU_LOOP(t, B * H) {
        int64_t b = t / H, j = t - b * H, base = b * 3 * H + j;
        double r = gdl__cu_sigm((double)gx[base] + gh[base]);
        double z = gdl__cu_sigm((double)gx[base + H] + gh[base + H]);
        double hn = gh[base + 2 * H], n = tanh((double)gx[base + 2 * H] + r * hn), hp = h_prev[t];
        if (!dh) { // forward
            h[t] = (float)((1 - z) * n + z * hp);
            continue;
        }
        double g = dh[t], dn = g * (1 - z) * (1 - n * n);
        double d[3] = {dn * hn * r * (1 - r), g * (hp - n) * z * (1 - z), dn};
        for (int k = 0; k < 3; k++) {
            if (dgx) dgx[base + k * H] += (float)d[k];
            if (dgh) dgh[base + k * H] += (float)(k == 2 ? dn * r : d[k]); // r scales gh_n only
        }
        if (dh_prev) dh_prev[t] += (float)(g * z);
    }
}

static int gdl__cu_lstm_gates(int64_t B, int64_t H, const float *gx, const float *gh, const float *c_prev, float *hc) {
    if (B * H <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_lstm_gates, gdl__cu_grid(B * H, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        B, H, gx, gh, c_prev, hc, (const float *)NULL, (float *)NULL, (float *)NULL, (float *)NULL);
    GDL_CU_LAUNCHED();
    return 0;
}
static int gdl__cu_lstm_gates_backward(int64_t B, int64_t H, const float *gx, const float *gh, const float *c_prev,
                                       const float *dhc, float *dgx, float *dgh, float *dc_prev) {
    if (B * H <= 0 || (!dgx && !dgh && !dc_prev)) return 0;
    GDL_CU_LAUNCH(gdl__k_lstm_gates, gdl__cu_grid(B * H, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        B, H, gx, gh, c_prev, (float *)NULL, dhc, dgx, dgh, dc_prev);
    GDL_CU_LAUNCHED();
    return 0;
}
static int gdl__cu_gru_gates(int64_t B, int64_t H, const float *gx, const float *gh, const float *h_prev, float *h) {
    if (B * H <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_gru_gates, gdl__cu_grid(B * H, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        B, H, gx, gh, h_prev, h, (const float *)NULL, (float *)NULL, (float *)NULL, (float *)NULL);
    GDL_CU_LAUNCHED();
    return 0;
}
static int gdl__cu_gru_gates_backward(int64_t B, int64_t H, const float *gx, const float *gh, const float *h_prev,
                                      const float *dh, float *dgx, float *dgh, float *dh_prev) {
    if (B * H <= 0 || (!dgx && !dgh && !dh_prev)) return 0;
    GDL_CU_LAUNCH(gdl__k_gru_gates, gdl__cu_grid(B * H, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        B, H, gx, gh, h_prev, (float *)NULL, dh, dgx, dgh, dh_prev);
    GDL_CU_LAUNCHED();
    return 0;
}
