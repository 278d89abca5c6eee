/* src/cpu/rnn.h — the fused gate steps of LSTM and GRU (backend entries lstm_gates, gru_gates and their
   backwards): one pass over [B, H] per time step after the two GEMMs, so the gates' pre-activations are
   read once and nothing but the new state is written. The backwards recompute the gates from the saved
   inputs instead of keeping them: the inputs are alive anyway (they are the op's inputs), and with the
   vector sigmoid / tanh below the recomputation costs less than writing and re-reading [B, G·H] per step.
   Rows of B are split across threads. */

typedef struct {
    int64_t H;
    const gdl_real *gx, *gh, *prev, *dout;
    gdl_real *out, *dgx, *dgh, *dprev;
    int64_t B;
} gdl__rnn_job;

#ifdef GPUDL_DOUBLE
/* in double from exp alone: libm's tanh goes through expm1, three times exp's cost and most of a step's
   time; 2/(1+e^-2v) - 1 loses nothing a float result keeps but near 0, where the series is exact */
static double gdl__rnn_sigmoid(double v) { return 1.0 / (1.0 + exp(-v)); }
static double gdl__rnn_tanh(double v) { return fabs(v) < 1e-4 ? v - v * v * v / 3 : 2.0 / (1.0 + exp(-2 * v)) - 1; }

/* the LSTM cell of row b, unit j: activated gates and the new cell state */
typedef struct {
    double i, f, g, o, c;
} gdl__lstm_cell;
static gdl__lstm_cell gdl__lstm_at(const gdl__rnn_job *r, int64_t b, int64_t j) {
    const int64_t H = r->H;
    const gdl_real *x = r->gx + b * 4 * H + j, *h = r->gh + b * 4 * H + j;
    gdl__lstm_cell s;
    s.i = gdl__rnn_sigmoid((double)x[0] + h[0]);
    s.f = gdl__rnn_sigmoid((double)x[H] + h[H]);
    s.g = gdl__rnn_tanh((double)x[2 * H] + h[2 * H]);
    s.o = gdl__rnn_sigmoid((double)x[3 * H] + h[3 * H]);
    s.c = s.f * r->prev[b * H + j] + s.i * s.g;
    return s;
}

static void gdl__lstm_gates_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__rnn_job r = *(const gdl__rnn_job *)a.ctx;
    int64_t b, j;
    for (b = lo; b < hi; b++)
        for (j = 0; j < r.H; j++) {
            gdl__lstm_cell s = gdl__lstm_at(&r, b, j);
            r.out[b * r.H + j] = (gdl_real)(s.o * gdl__rnn_tanh(s.c));
            r.out[(r.B + b) * r.H + j] = (gdl_real)s.c;
        }
}

static void gdl__lstm_gates_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__rnn_job r = *(const gdl__rnn_job *)a.ctx;
    const int64_t H = r.H;
    int64_t b, j, k;
    for (b = lo; b < hi; b++)
        for (j = 0; j < H; j++) {
            gdl__lstm_cell s = gdl__lstm_at(&r, b, j);
            double dh = r.dout[b * H + j], tc = gdl__rnn_tanh(s.c);
            double dc = r.dout[(r.B + b) * H + j] + dh * s.o * (1 - tc * tc), d[4];
            d[0] = dc * s.g * s.i * (1 - s.i);
            d[1] = dc * r.prev[b * H + j] * s.f * (1 - s.f);
            d[2] = dc * s.i * (1 - s.g * s.g);
            d[3] = dh * tc * s.o * (1 - s.o);
            /* gx and gh may be one buffer: two separate adds sum both contributions */
            for (k = 0; k < 4; k++) {
                if (r.dgx) r.dgx[b * 4 * H + k * H + j] += (gdl_real)d[k];
                if (r.dgh) r.dgh[b * 4 * H + k * H + j] += (gdl_real)d[k];
            }
            if (r.dprev) r.dprev[b * H + j] += (gdl_real)(dc * s.f);
        }
}

/* the GRU cell of row b, unit j: activated gates, the hidden pre-activation of n, and the new state */
typedef struct {
    double r, z, n, hn, h;
} gdl__gru_cell;
static gdl__gru_cell gdl__gru_at(const gdl__rnn_job *q, int64_t b, int64_t j) {
    const int64_t H = q->H;
    const gdl_real *x = q->gx + b * 3 * H + j, *h = q->gh + b * 3 * H + j;
    gdl__gru_cell s;
    s.r = gdl__rnn_sigmoid((double)x[0] + h[0]);
    s.z = gdl__rnn_sigmoid((double)x[H] + h[H]);
    s.hn = h[2 * H];
    s.n = gdl__rnn_tanh((double)x[2 * H] + s.r * s.hn);
    s.h = (1 - s.z) * s.n + s.z * q->prev[b * H + j];
    return s;
}

static void gdl__gru_gates_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__rnn_job q = *(const gdl__rnn_job *)a.ctx;
    int64_t b, j;
    for (b = lo; b < hi; b++)
        for (j = 0; j < q.H; j++) q.out[b * q.H + j] = (gdl_real)gdl__gru_at(&q, b, j).h;
}

static void gdl__gru_gates_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__rnn_job q = *(const gdl__rnn_job *)a.ctx;
    const int64_t H = q.H;
    int64_t b, j, k;
    for (b = lo; b < hi; b++)
        for (j = 0; j < H; j++) {
            gdl__gru_cell s = gdl__gru_at(&q, b, j);
            double dh = q.dout[b * H + j], dn = dh * (1 - s.z) * (1 - s.n * s.n), d[3];
            d[0] = dn * s.hn * s.r * (1 - s.r);
            d[1] = dh * (q.prev[b * H + j] - s.n) * s.z * (1 - s.z);
            d[2] = dn;
            for (k = 0; k < 3; k++) {
                if (q.dgx) q.dgx[b * 3 * H + k * H + j] += (gdl_real)d[k];
                /* r multiplies the hidden side of n only */
                if (q.dgh) q.dgh[b * 3 * H + k * H + j] += (gdl_real)(k == 2 ? dn * s.r : d[k]);
            }
            if (q.dprev) q.dprev[b * H + j] += (gdl_real)(dh * s.z);
        }
}

#else
/* In f32 (a GPUDL_DOUBLE build keeps the double code above): the gates' sigmoid and tanh from one exp
   polynomial (the GELU's, src/cpu/elementwise.h), e^x = m·2^k with |x - k·ln2| <= ln2/2, x clamped to
   [-87, 88] so 2^k stays a normal float and m·2^k is exact. sigmoid(v) = 1 / (1 + e^-v); tanh(v) for
   |v| < 0.5625 is v·(1 + v^2·P(v^2)) (P a least-squares fit in double, coefficients rounded to float), else sign(v)·(1 - e^-2|v|) / (1 + e^-2|v|) (no cancellation there: e^-2|v| <= 1/3).
   The vector loops (AVX-512, AVX2: GDL__GV) do exactly this arithmetic lane by lane: every a·b + c an
   explicit FMA (fmaf here: libm's where the target has no FMA, the same bits), no product ever added by
   a plain + or - (which the compiler could contract on one path and not another), the clamps in the
   vector min / max's order, both tanh branches computed and selected. So a value's bits depend neither
   on the path nor on the thread count. Against double (tests/test_rnn_gates.c, every 997th float): sigmoid
   within 2.2 ulp, tanh within 1.5; a NaN input gives that NaN, +-inf saturates, sigmoid(v <= -88) stays at
   1/(1 + e^88) = 6.1e-39 (the clamp). */
#define GDL__RNN_EXP_LO -87.0f
#define GDL__RNN_EXP_HI 88.0f
#define GDL__RNN_TANH_T 0.5625f
static const float gdl__rnn_tanh_p[5] = {-0.333333135f, 0.133324265f, -0.0538351126f, 0.0209991485f,
                                         -0.00616940018f};

/* e^x = the result times *scale (2^k, exact) */
static float gdl__rnn_exp_m(float x, float *scale) {
    float kf, r;
    uint32_t bits;
    x = x < GDL__RNN_EXP_HI ? x : GDL__RNN_EXP_HI; /* _mm*_min_ps(x, HI): a NaN gives HI */
    x = x > GDL__RNN_EXP_LO ? x : GDL__RNN_EXP_LO;
    kf = rintf(x * GDL__GELU_INV_LN2);
    r = fmaf(-kf, GDL__GELU_LN2_HI, x);
    r = fmaf(-kf, GDL__GELU_LN2_LO, r);
    bits = (uint32_t)((int32_t)kf + 127) << 23;
    memcpy(scale, &bits, sizeof bits);
    return gdl__gelu_poly(gdl__gelu_e, 8, -r); /* the GELU's polynomial is of e^-r */
}
static float gdl__rnn_sigmoid_f32(float v) {
    float s, m = gdl__rnn_exp_m(-v, &s);
    return v != v ? v : 1.0f / fmaf(m, s, 1.0f);
}
static float gdl__rnn_tanh_f32(float v) {
    float a = fabsf(v), t;
    if (v != v) return v;
    if (a < GDL__RNN_TANH_T) {
        float v2 = v * v;
        return v * fmaf(v2, gdl__gelu_poly(gdl__rnn_tanh_p, 5, v2), 1.0f); /* v times: tanh(-0) = -0 */
    } else {
        float s, m = gdl__rnn_exp_m(-2.0f * a, &s);
        t = fmaf(-m, s, 1.0f) / fmaf(m, s, 1.0f);
        return v < 0 ? -t : t;
    }
}

#ifdef GDL__GV_N
static gdl__gv gdl__rnn_vexp_m(gdl__gv x, gdl__gv *scale) {
    gdl__gv kf, r;
    x = GDL__GV(max_ps)(GDL__GV(min_ps)(x, GDL__GV1(GDL__RNN_EXP_HI)), GDL__GV1(GDL__RNN_EXP_LO));
    kf = GDL__GV_ROUND(GDL__GV(mul_ps)(x, GDL__GV1(GDL__GELU_INV_LN2)));
    r = GDL__GV(fnmadd_ps)(kf, GDL__GV1(GDL__GELU_LN2_HI), x);
    r = GDL__GV(fnmadd_ps)(kf, GDL__GV1(GDL__GELU_LN2_LO), r);
    *scale = GDL__GV_AS_PS(
        GDL__GV(slli_epi32)(GDL__GV(add_epi32)(GDL__GV(cvtps_epi32)(kf), GDL__GV(set1_epi32)(127)), 23));
    return gdl__gelu_vpoly(gdl__gelu_e, 8, GDL__GV_FLIP(r));
}
static gdl__gv gdl__rnn_vsigmoid(gdl__gv v) {
    gdl__gv s, m = gdl__rnn_vexp_m(GDL__GV_FLIP(v), &s);
    gdl__gv y = GDL__GV(div_ps)(GDL__GV1(1.0f), GDL__GV(fmadd_ps)(m, s, GDL__GV1(1.0f)));
    return GDL__GV_SEL(GDL__GV_CMP(v, v, _CMP_UNORD_Q), y, v);
}
static gdl__gv gdl__rnn_vtanh(gdl__gv v) {
    gdl__gv a = GDL__GV_ABS(v), v2 = GDL__GV(mul_ps)(v, v), s, m, big, small, y;
    small = GDL__GV(mul_ps)(v, GDL__GV(fmadd_ps)(v2, gdl__gelu_vpoly(gdl__rnn_tanh_p, 5, v2), GDL__GV1(1.0f)));
    m = gdl__rnn_vexp_m(GDL__GV(mul_ps)(GDL__GV1(-2.0f), a), &s);
    big = GDL__GV(div_ps)(GDL__GV(fnmadd_ps)(m, s, GDL__GV1(1.0f)), GDL__GV(fmadd_ps)(m, s, GDL__GV1(1.0f)));
    big = GDL__GV_SEL(GDL__GV_CMP(v, GDL__GV(setzero_ps)(), _CMP_LT_OQ), big, GDL__GV_FLIP(big));
    y = GDL__GV_SEL(GDL__GV_CMP(a, GDL__GV1(GDL__RNN_TANH_T), _CMP_LT_OQ), big, small);
    return GDL__GV_SEL(GDL__GV_CMP(v, v, _CMP_UNORD_Q), y, v);
}
#define GDL__RV_LD(p) GDL__GV(loadu_ps)(p)
#define GDL__RV_ADD(p, q) GDL__GV(add_ps)(GDL__RV_LD(p), GDL__RV_LD(q))
#define GDL__RV_ONE_MINUS(v) GDL__GV(sub_ps)(GDL__GV1(1.0f), v)
/* *p = a·b + *p */
static void gdl__rnn_vacc(float *p, gdl__gv a, gdl__gv b) { GDL__GV(storeu_ps)(p, GDL__GV(fmadd_ps)(a, b, GDL__RV_LD(p))); }
#endif

/* the LSTM row b: h' and c' (forward), or the gradients (backward) */
static void gdl__lstm_row(const gdl__rnn_job *r, int64_t b, int backward) {
    const int64_t H = r->H;
    const float *x = r->gx + b * 4 * H, *h = r->gh + b * 4 * H, *cp = r->prev + b * H;
    const float *dh = backward ? r->dout + b * H : NULL, *dcn = backward ? r->dout + (r->B + b) * H : NULL;
    float *dx = r->dgx ? r->dgx + b * 4 * H : NULL, *dhh = r->dgh ? r->dgh + b * 4 * H : NULL;
    int64_t j = 0, k;
#ifdef GDL__GV_N
    for (; j + GDL__GV_N <= H; j += GDL__GV_N) {
        gdl__gv i = gdl__rnn_vsigmoid(GDL__RV_ADD(x + j, h + j));
        gdl__gv f = gdl__rnn_vsigmoid(GDL__RV_ADD(x + H + j, h + H + j));
        gdl__gv g = gdl__rnn_vtanh(GDL__RV_ADD(x + 2 * H + j, h + 2 * H + j));
        gdl__gv o = gdl__rnn_vsigmoid(GDL__RV_ADD(x + 3 * H + j, h + 3 * H + j));
        gdl__gv c = GDL__GV(fmadd_ps)(f, GDL__RV_LD(cp + j), GDL__GV(mul_ps)(i, g)), tc = gdl__rnn_vtanh(c);
        if (!backward) {
            GDL__GV(storeu_ps)(r->out + b * H + j, GDL__GV(mul_ps)(o, tc));
            GDL__GV(storeu_ps)(r->out + (r->B + b) * H + j, c);
        } else {
            gdl__gv vdh = GDL__RV_LD(dh + j), dc, a[4], m[4];
            dc = GDL__GV(fmadd_ps)(GDL__GV(mul_ps)(vdh, o), GDL__GV(fnmadd_ps)(tc, tc, GDL__GV1(1.0f)),
                                   GDL__RV_LD(dcn + j));
            a[0] = GDL__GV(mul_ps)(dc, g), m[0] = GDL__GV(mul_ps)(i, GDL__RV_ONE_MINUS(i));
            a[1] = GDL__GV(mul_ps)(dc, GDL__RV_LD(cp + j)), m[1] = GDL__GV(mul_ps)(f, GDL__RV_ONE_MINUS(f));
            a[2] = GDL__GV(mul_ps)(dc, i), m[2] = GDL__GV(fnmadd_ps)(g, g, GDL__GV1(1.0f));
            a[3] = GDL__GV(mul_ps)(vdh, tc), m[3] = GDL__GV(mul_ps)(o, GDL__RV_ONE_MINUS(o));
            /* gx and gh may be one buffer: two separate adds sum both contributions */
            for (k = 0; k < 4; k++) {
                if (dx) gdl__rnn_vacc(dx + k * H + j, a[k], m[k]);
                if (dhh) gdl__rnn_vacc(dhh + k * H + j, a[k], m[k]);
            }
            if (r->dprev) gdl__rnn_vacc(r->dprev + b * H + j, dc, f);
        }
    }
#endif
    for (; j < H; j++) {
        float i = gdl__rnn_sigmoid_f32(x[j] + h[j]), f = gdl__rnn_sigmoid_f32(x[H + j] + h[H + j]);
        float g = gdl__rnn_tanh_f32(x[2 * H + j] + h[2 * H + j]), o = gdl__rnn_sigmoid_f32(x[3 * H + j] + h[3 * H + j]);
        float c = fmaf(f, cp[j], i * g), tc = gdl__rnn_tanh_f32(c);
        if (!backward) {
            r->out[b * H + j] = o * tc;
            r->out[(r->B + b) * H + j] = c;
        } else {
            float dc = fmaf(dh[j] * o, fmaf(-tc, tc, 1.0f), dcn[j]), a[4], m[4];
            a[0] = dc * g, m[0] = i * (1.0f - i);
            a[1] = dc * cp[j], m[1] = f * (1.0f - f);
            a[2] = dc * i, m[2] = fmaf(-g, g, 1.0f);
            a[3] = dh[j] * tc, m[3] = o * (1.0f - o);
            for (k = 0; k < 4; k++) {
                if (dx) dx[k * H + j] = fmaf(a[k], m[k], dx[k * H + j]);
                if (dhh) dhh[k * H + j] = fmaf(a[k], m[k], dhh[k * H + j]);
            }
            if (r->dprev) r->dprev[b * H + j] = fmaf(dc, f, r->dprev[b * H + j]);
        }
    }
}

/* the GRU row b: h' (forward), or the gradients (backward); n = tanh(gx_n + r·gh_n) */
static void gdl__gru_row(const gdl__rnn_job *q, int64_t b, int backward) {
    const int64_t H = q->H;
    const float *x = q->gx + b * 3 * H, *h = q->gh + b * 3 * H, *hp = q->prev + b * H;
    const float *dh = backward ? q->dout + b * H : NULL;
    float *dx = q->dgx ? q->dgx + b * 3 * H : NULL, *dhh = q->dgh ? q->dgh + b * 3 * H : NULL;
    int64_t j = 0, k;
#ifdef GDL__GV_N
    for (; j + GDL__GV_N <= H; j += GDL__GV_N) {
        gdl__gv r = gdl__rnn_vsigmoid(GDL__RV_ADD(x + j, h + j));
        gdl__gv z = gdl__rnn_vsigmoid(GDL__RV_ADD(x + H + j, h + H + j)), hn = GDL__RV_LD(h + 2 * H + j);
        gdl__gv n = gdl__rnn_vtanh(GDL__GV(fmadd_ps)(r, hn, GDL__RV_LD(x + 2 * H + j))), vhp = GDL__RV_LD(hp + j);
        if (!backward) {
            GDL__GV(storeu_ps)(q->out + b * H + j, GDL__GV(fmadd_ps)(z, vhp, GDL__GV(mul_ps)(GDL__RV_ONE_MINUS(z), n)));
        } else {
            gdl__gv vdh = GDL__RV_LD(dh + j), a[3], m[3];
            a[2] = GDL__GV(mul_ps)(vdh, GDL__RV_ONE_MINUS(z)), m[2] = GDL__GV(fnmadd_ps)(n, n, GDL__GV1(1.0f));
            a[0] = GDL__GV(mul_ps)(GDL__GV(mul_ps)(a[2], m[2]), hn), m[0] = GDL__GV(mul_ps)(r, GDL__RV_ONE_MINUS(r));
            a[1] = GDL__GV(mul_ps)(vdh, GDL__GV(sub_ps)(vhp, n)), m[1] = GDL__GV(mul_ps)(z, GDL__RV_ONE_MINUS(z));
            for (k = 0; k < 3; k++) {
                if (dx) gdl__rnn_vacc(dx + k * H + j, a[k], m[k]);
                /* r multiplies the hidden side of n only */
                if (dhh) gdl__rnn_vacc(dhh + k * H + j, k == 2 ? GDL__GV(mul_ps)(a[2], m[2]) : a[k], k == 2 ? r : m[k]);
            }
            if (q->dprev) gdl__rnn_vacc(q->dprev + b * H + j, vdh, z);
        }
    }
#endif
    for (; j < H; j++) {
        float r = gdl__rnn_sigmoid_f32(x[j] + h[j]), z = gdl__rnn_sigmoid_f32(x[H + j] + h[H + j]);
        float hn = h[2 * H + j], n = gdl__rnn_tanh_f32(fmaf(r, hn, x[2 * H + j]));
        if (!backward) {
            q->out[b * H + j] = fmaf(z, hp[j], (1.0f - z) * n);
        } else {
            float a[3], m[3];
            a[2] = dh[j] * (1.0f - z), m[2] = fmaf(-n, n, 1.0f);
            a[0] = a[2] * m[2] * hn, m[0] = r * (1.0f - r);
            a[1] = dh[j] * (hp[j] - n), m[1] = z * (1.0f - z);
            for (k = 0; k < 3; k++) {
                if (dx) dx[k * H + j] = fmaf(a[k], m[k], dx[k * H + j]);
                if (dhh) dhh[k * H + j] = fmaf(k == 2 ? a[2] * m[2] : a[k], k == 2 ? r : m[k], dhh[k * H + j]);
            }
            if (q->dprev) q->dprev[b * H + j] = fmaf(dh[j], z, q->dprev[b * H + j]);
        }
    }
}

static void gdl__lstm_gates_part(gdl__args a, int64_t lo, int64_t hi) {
    for (; lo < hi; lo++) gdl__lstm_row((const gdl__rnn_job *)a.ctx, lo, 0);
}
static void gdl__lstm_gates_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    for (; lo < hi; lo++) gdl__lstm_row((const gdl__rnn_job *)a.ctx, lo, 1);
}
static void gdl__gru_gates_part(gdl__args a, int64_t lo, int64_t hi) {
    for (; lo < hi; lo++) gdl__gru_row((const gdl__rnn_job *)a.ctx, lo, 0);
}
static void gdl__gru_gates_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    for (; lo < hi; lo++) gdl__gru_row((const gdl__rnn_job *)a.ctx, lo, 1);
}
#endif

static int gdl__cpu_rnn_run(gdl__loop_fn body, int64_t B, int64_t H, const gdl_real *gx, const gdl_real *gh,
                            const gdl_real *prev, const gdl_real *dout, gdl_real *out, gdl_real *dgx, gdl_real *dgh,
                            gdl_real *dprev) {
    gdl__args a = gdl__args_none();
    gdl__rnn_job r;
    r.B = B; r.H = H; r.gx = gx; r.gh = gh; r.prev = prev; r.dout = dout;
    r.out = out; r.dgx = dgx; r.dgh = dgh; r.dprev = dprev;
    a.ctx = &r;
    gdl__parallel_loop(B, B * H * 40, body, &a);
    return 0;
}
static int gdl__cpu_lstm_gates(int64_t B, int64_t H, const gdl_real *gx, const gdl_real *gh, const gdl_real *c_prev,
                               gdl_real *hc) {
    return gdl__cpu_rnn_run(gdl__lstm_gates_part, B, H, gx, gh, c_prev, NULL, hc, NULL, NULL, NULL);
}
static int gdl__cpu_lstm_gates_backward(int64_t B, int64_t H, const gdl_real *gx, const gdl_real *gh,
                                        const gdl_real *c_prev, const gdl_real *dhc, gdl_real *dgx, gdl_real *dgh,
                                        gdl_real *dc_prev) {
    return gdl__cpu_rnn_run(gdl__lstm_gates_backward_part, B, H, gx, gh, c_prev, dhc, NULL, dgx, dgh, dc_prev);
}
static int gdl__cpu_gru_gates(int64_t B, int64_t H, const gdl_real *gx, const gdl_real *gh, const gdl_real *h_prev,
                              gdl_real *h) {
    return gdl__cpu_rnn_run(gdl__gru_gates_part, B, H, gx, gh, h_prev, NULL, h, NULL, NULL, NULL);
}
static int gdl__cpu_gru_gates_backward(int64_t B, int64_t H, const gdl_real *gx, const gdl_real *gh,
                                       const gdl_real *h_prev, const gdl_real *dh, gdl_real *dgx, gdl_real *dgh,
                                       gdl_real *dh_prev) {
    return gdl__cpu_rnn_run(gdl__gru_gates_backward_part, B, H, gx, gh, h_prev, dh, NULL, dgx, dgh, dh_prev);
}
