/* src/cpu/rnn.h — the fused gate steps of LSTM and GRU (backend entries lstm_gates, gru_gates and their
   backwards): one pass over [B, H] per time step after the two GEMMs, so the gates' pre-activations are
   read once and nothing but the new state is written. The backwards recompute the gates from the saved
   inputs instead of keeping them: the inputs are alive anyway (they are the op's inputs), and a time
   step's gates would otherwise cost another [B, G·H] per step. Rows of B are split across threads. */

typedef struct {
    int64_t H;
    const gdl_real *gx, *gh, *prev, *dout;
    gdl_real *out, *dgx, *dgh, *dprev;
    int64_t B;
} gdl__rnn_job;

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
