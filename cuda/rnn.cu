// ----------------------------------------------------------------------------
// the fused LSTM / GRU gate steps (gdl_lstm_gates, gdl_gru_gates) and their
// backwards: one thread per (row, unit), reading the unit's G pre-activations
// from gx and gh and writing the new state; the backward recomputes the gates
// (nothing saved). Each thread owns its G gradient slots, so the += need no
// atomics, and gx and gh may share one gradient buffer. The arithmetic is the
// CPU's f32 code (src/cpu/rnn.h: gdl__rnn_exp_m, gdl__lstm_row, gdl__gru_row)
// op for op, its constants copied: every a*b+c an explicit fmaf and no product
// added by a plain + (nvcc would contract it), IEEE division, so the two agree
// bit for bit.

#define GDL__CU_RNN_EXP_LO -87.0f
#define GDL__CU_RNN_EXP_HI 88.0f
#define GDL__CU_RNN_TANH_T 0.5625f

// e^x = the result times *scale (2^k, exact); the polynomial is the GELU's of e^-r
__device__ __forceinline__ float gdl__cu_rnn_exp_m(float x, float *scale) {
    x = x < GDL__CU_RNN_EXP_HI ? x : GDL__CU_RNN_EXP_HI;
    x = x > GDL__CU_RNN_EXP_LO ? x : GDL__CU_RNN_EXP_LO;
    float kf = rintf(x * 1.44269502f), r = fmaf(-kf, 0.693147182f, x), p = -0.000197402551f;
    r = -fmaf(-kf, -1.90465421e-09f, r);
    p = fmaf(p, r, 0.00139350793f);
    p = fmaf(p, r, -0.00833357032f);
    p = fmaf(p, r, 0.041666463f);
    p = fmaf(p, r, -0.166666657f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, -1.0f);
    *scale = __int_as_float(((int)kf + 127) << 23);
    return fmaf(p, r, 1.0f);
}
__device__ __forceinline__ float gdl__cu_rnn_sigm(float v) {
    float s, m = gdl__cu_rnn_exp_m(-v, &s);
    return v != v ? v : 1.0f / fmaf(m, s, 1.0f);
}
__device__ __forceinline__ float gdl__cu_rnn_tanh(float v) {
    float a = fabsf(v);
    if (v != v) return v;
    if (a < GDL__CU_RNN_TANH_T) {
        float v2 = v * v, p = -0.00616940018f;
        p = fmaf(p, v2, 0.0209991485f);
        p = fmaf(p, v2, -0.0538351126f);
        p = fmaf(p, v2, 0.133324265f);
        p = fmaf(p, v2, -0.333333135f);
        return v * fmaf(v2, p, 1.0f);
    }
    float s, m = gdl__cu_rnn_exp_m(-2.0f * a, &s), t = fmaf(-m, s, 1.0f) / fmaf(m, s, 1.0f);
    return v < 0 ? -t : t;
}

__global__ void gdl__k_lstm_gates(int64_t B, int64_t H, const float *gx, const float *gh, const float *c_prev,
                                  float *hc, const float *dhc, float *dgx, float *dgh, float *dc_prev) {
    GDL_CU_LOOP(t, B * H) {
        int64_t b = t / H, j = t - b * H, base = b * 4 * H + j;
        float gi = gdl__cu_rnn_sigm(gx[base] + gh[base]);
        float gf = gdl__cu_rnn_sigm(gx[base + H] + gh[base + H]);
        float gg = gdl__cu_rnn_tanh(gx[base + 2 * H] + gh[base + 2 * H]);
        float go = gdl__cu_rnn_sigm(gx[base + 3 * H] + gh[base + 3 * H]);
        float cp = c_prev[t], c = fmaf(gf, cp, gi * gg), tc = gdl__cu_rnn_tanh(c);
        if (!dhc) { // forward
            hc[t] = go * tc;
            hc[B * H + t] = c;
            continue;
        }
        float dh = dhc[t], dc = fmaf(dh * go, fmaf(-tc, tc, 1.0f), dhc[B * H + t]);
        float a[4] = {dc * gg, dc * cp, dc * gi, dh * tc};
        float m[4] = {gi * (1.0f - gi), gf * (1.0f - gf), fmaf(-gg, gg, 1.0f), go * (1.0f - go)};
        for (int k = 0; k < 4; k++) {
            if (dgx) dgx[base + k * H] = fmaf(a[k], m[k], dgx[base + k * H]);
            if (dgh) dgh[base + k * H] = fmaf(a[k], m[k], dgh[base + k * H]);
        }
        if (dc_prev) dc_prev[t] = fmaf(dc, gf, dc_prev[t]);
    }
}

__global__ void gdl__k_gru_gates(int64_t B, int64_t H, const float *gx, const float *gh, const float *h_prev,
                                 float *h, const float *dh, float *dgx, float *dgh, float *dh_prev) {
    GDL_CU_LOOP(t, B * H) {
        int64_t b = t / H, j = t - b * H, base = b * 3 * H + j;
        float r = gdl__cu_rnn_sigm(gx[base] + gh[base]);
        float z = gdl__cu_rnn_sigm(gx[base + H] + gh[base + H]);
        float hn = gh[base + 2 * H], n = gdl__cu_rnn_tanh(fmaf(r, hn, gx[base + 2 * H])), hp = h_prev[t];
        if (!dh) { // forward
            h[t] = fmaf(z, hp, (1.0f - z) * n);
            continue;
        }
        float g = dh[t], a[3], m[3];
        a[2] = g * (1.0f - z), m[2] = fmaf(-n, n, 1.0f);
        a[0] = a[2] * m[2] * hn, m[0] = r * (1.0f - r);
        a[1] = g * (hp - n), m[1] = z * (1.0f - z);
        for (int k = 0; k < 3; k++) {
            if (dgx) dgx[base + k * H] = fmaf(a[k], m[k], dgx[base + k * H]);
            // r scales gh_n only
            if (dgh) dgh[base + k * H] = fmaf(k == 2 ? a[2] * m[2] : a[k], k == 2 ? r : m[k], dgh[base + k * H]);
        }
        if (dh_prev) dh_prev[t] = fmaf(g, z, dh_prev[t]);
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
