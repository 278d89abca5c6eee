/* src/cpu/norm.h — the CPU's batch norm and layer norm, forward and backward
   (batch norm's passes in double lanes, bit for bit the scalar loop). */

/* The normalisations' arguments are theirs alone: a struct of them in a.ctx,
   copied (as gdl__args is) so that the loops keep its fields in registers.
   A part does the channels (batchnorm) or rows (layernorm) [lo, hi). */
typedef struct {
    int64_t N, C, S;
    const gdl_real *x, *gamma, *beta;
    gdl_real *y, *mean, *invstd, *run_mean, *run_var, *pre;
    int training, act; /* act: GDL_ACT_NONE, _RELU, _GELU (pre: where GELU's input is kept) or
                          GDL__ACT_GELU_RECIPE (pre: the recipe's doubles, gdl__bn_recipe) */
    double momentum, eps;
    int *failed;       /* set when a part could not get its scratch */
} gdl__batchnorm_job;
/* Batch norm's elementwise passes in double lanes: GDL__BNV_W floats widened, the scalar expression's
   operations in its order, then rounded once to float (so the vector and scalar loops give one result).
   Written once over GDL__BNV(op), the double lanes' intrinsic, and GDL__BNF(op), that of the floats they
   widen (AVX-512: 8 doubles from 8 floats in 256 bits; AVX2: 4 from 4 in 128); the float compare, spelled
   apart, stays per ISA. */
#if defined(GDL__GELU_AVX512)
#define GDL__BNV_W 8
#define GDL__BNV(op) _mm512_##op
#define GDL__BNF(op) _mm256_##op
typedef __m512d gdl__bnv;
typedef __m256 gdl__bnf;
#define GDL__BNF_GT(a, b) _mm256_cmp_ps(a, b, _CMP_GT_OQ)
#elif defined(GDL__GELU_AVX2)
#define GDL__BNV_W 4
#define GDL__BNV(op) _mm256_##op
#define GDL__BNF(op) _mm_##op
typedef __m256d gdl__bnv;
typedef __m128 gdl__bnf;
#define GDL__BNF_GT(a, b) _mm_cmpgt_ps(a, b)
#endif
#ifdef GDL__BNV_W
static inline gdl__bnv gdl__bnv_set(double v) { return GDL__BNV(set1_pd)(v); }
static inline gdl__bnv gdl__bnv_load(const float *p) { return GDL__BNV(cvtps_pd)(GDL__BNF(loadu_ps)(p)); }
static inline gdl__bnv gdl__bnv_loadd(const double *p) { return GDL__BNV(loadu_pd)(p); }
static inline gdl__bnv gdl__bnv_sub(gdl__bnv a, gdl__bnv b) { return GDL__BNV(sub_pd)(a, b); }
static inline gdl__bnv gdl__bnv_mul(gdl__bnv a, gdl__bnv b) { return GDL__BNV(mul_pd)(a, b); }
static inline gdl__bnv gdl__bnv_add(gdl__bnv a, gdl__bnv b) { return GDL__BNV(add_pd)(a, b); }
static inline void gdl__bnv_store(float *p, gdl__bnv v) { GDL__BNF(storeu_ps)(p, GDL__BNV(cvtpd_ps)(v)); }
/* p = (acc ? p : 0) + v, in float */
static inline void gdl__bnv_store_add(float *p, gdl__bnv v, int acc) {
    const gdl__bnf base = acc ? GDL__BNF(loadu_ps)(p) : GDL__BNF(setzero_ps)();
    GDL__BNF(storeu_ps)(p, GDL__BNF(add_ps)(base, GDL__BNV(cvtpd_ps)(v)));
}
/* p = relu(v rounded to float): max with v first, as gdl__relu_rows */
static inline void gdl__bnv_store_relu(float *p, gdl__bnv v) {
    GDL__BNF(storeu_ps)(p, GDL__BNF(max_ps)(GDL__BNV(cvtpd_ps)(v), GDL__BNF(setzero_ps)()));
}
/* gdl__bn_gy1's value of each lane, widened */
static inline gdl__bnv gdl__bnv_load_gy(const float *gy, const float *y) {
    const gdl__bnf g = GDL__BNF(loadu_ps)(gy), z = GDL__BNF(setzero_ps)();
    return GDL__BNV(cvtps_pd)(y ? GDL__BNF(add_ps)(z, GDL__BNF(and_ps)(GDL__BNF_GT(GDL__BNF(loadu_ps)(y), z), g)) : g);
}
static inline void gdl__bnv_spill(double *p, gdl__bnv v) { GDL__BNV(storeu_pd)(p, v); }
#endif

/* The output gradient batch norm's backward takes at i: gy's, or with a fused ReLU (its output y) ReLU's
   backward into an unset gradient, 0 + (y > 0 ? gy : 0) (gdl__relu_grad_rows: -0 becomes +0) */
static inline gdl_real gdl__bn_gy1(const gdl_real *gy, const gdl_real *y, int64_t i) {
    return y ? (gdl_real)0 + (y[i] > 0 ? gy[i] : (gdl_real)0) : gy[i];
}

/* The channel's two sums of the backward, over N rows of S (x's and y's stride apart, gy's gstride): sg =
   sum of g, sgx = sum of g (x - mu) is, g as gdl__bn_gy1 gives it (y NULL: no ReLU). Eight double lanes
   and a tail, added up by gdl__lanes_total: the vector and scalar loops keep the same lanes, so one
   result. */
static void gdl__bn_sums2(const gdl_real *x, const gdl_real *gy, const gdl_real *y, int64_t N, int64_t stride,
                          int64_t gstride, int64_t S, double mu, double is, double *sg, double *sgx) {
    const int64_t S8 = S - S % 8;
    double lg[8] = {0, 0, 0, 0, 0, 0, 0, 0}, lx[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tg = 0, tx = 0;
    int64_t n, s;
    int k;
#ifdef GDL__BNV_W
    enum { V = 8 / GDL__BNV_W };
    const gdl__bnv m = gdl__bnv_set(mu), vis = gdl__bnv_set(is);
    gdl__bnv ag[V], ax[V];
    for (k = 0; k < V; k++) ag[k] = ax[k] = gdl__bnv_set(0);
#endif
    for (n = 0; n < N; n++) {
        const gdl_real *r = x + n * stride, *g = gy + n * gstride, *yr = y ? y + n * stride : NULL;
        for (s = 0; s < S8; s += 8) {
#ifdef GDL__BNV_W
            for (k = 0; k < V; k++) {
                const int64_t at = s + k * GDL__BNV_W;
                const gdl__bnv vg = gdl__bnv_load_gy(g + at, yr ? yr + at : NULL), vx = gdl__bnv_load(r + at);
                ag[k] = gdl__bnv_add(ag[k], vg);
                ax[k] = gdl__bnv_add(ax[k], gdl__bnv_mul(gdl__bnv_mul(vg, gdl__bnv_sub(vx, m)), vis));
            }
#else
            for (k = 0; k < 8; k++) {
                const gdl_real gk = gdl__bn_gy1(g, yr, s + k);
                lg[k] += gk;
                lx[k] += gk * (r[s + k] - mu) * is;
            }
#endif
        }
        for (; s < S; s++) {
            const gdl_real gk = gdl__bn_gy1(g, yr, s);
            tg += gk;
            tx += gk * (r[s] - mu) * is;
        }
    }
#ifdef GDL__BNV_W
    for (k = 0; k < V; k++) {
        gdl__bnv_spill(lg + k * GDL__BNV_W, ag[k]);
        gdl__bnv_spill(lx + k * GDL__BNV_W, ax[k]);
    }
#endif
    *sg = gdl__lanes_total(lg, tg);
    *sgx = gdl__lanes_total(lx, tx);
}

/* y = (x - mu) is gm + bt over n values, in double and rounded once, as the scalar expression; act RELU:
   then y > 0 ? y : 0 (a fused ReLU); act GELU: that value into pre, then y = GELU(pre) by gdl__gelu_rows
   (gdl_gelu's routine on the same floats) */
static void gdl__bn_affine_rows(const gdl_real *x, gdl_real *y, int64_t n, double mu, double is, double gm, double bt,
                                int act, gdl_real *pre) {
    const int relu = act == GDL_ACT_RELU;
    gdl_real *const y0 = y;
    int64_t i = 0;
    if (act == GDL_ACT_GELU) y = pre;
#ifdef GDL__BNV_W
    const gdl__bnv m = gdl__bnv_set(mu), vis = gdl__bnv_set(is), vg = gdl__bnv_set(gm), vb = gdl__bnv_set(bt);
    for (; i + GDL__BNV_W <= n; i += GDL__BNV_W) {
        const gdl__bnv v = gdl__bnv_add(gdl__bnv_mul(gdl__bnv_mul(gdl__bnv_sub(gdl__bnv_load(x + i), m), vis), vg), vb);
        if (relu) gdl__bnv_store_relu(y + i, v);
        else gdl__bnv_store(y + i, v);
    }
#endif
    for (; i < n; i++) {
        const gdl_real v = (gdl_real)((x[i] - mu) * is * gm + bt);
        y[i] = !relu || v > 0 ? v : 0;
    }
    if (act == GDL_ACT_GELU) gdl__gelu_rows(pre, y0, n);
}
/* Batch norm of [N, C] (S 1: BatchNorm1d after a Linear) works on blocks of w <= 8 channels side by side,
   the rows in order: per channel the expressions of the S > 1 code (one running sum down the column, as
   gdl__rows_sum gives for S < 8), so the same bits; that code, with one strided value per row, spent most
   of an MLP's step in a chain of dependent adds and a call per element. A full block runs in double
   lanes (gdl__bnv_*), a short one (and every block without them) in the scalar loop. */
#ifdef GDL__BNV_W
enum { GDL__BNV_COLS = 8 / GDL__BNV_W }; /* the vectors of a block of 8 channels */
#endif
/* out[k] = the sum over the N rows (C apart) of x[k] (mu NULL) or of (x[k] - mu[k])^2, k < w <= 8 */
static void gdl__bn_col_sums(const gdl_real *x, int64_t N, int64_t C, int w, const double *mu, double *out) {
    int64_t n;
    int k;
#ifdef GDL__BNV_W
    if (w == 8) {
        gdl__bnv acc[GDL__BNV_COLS], m[GDL__BNV_COLS];
        for (k = 0; k < GDL__BNV_COLS; k++) {
            acc[k] = gdl__bnv_set(0);
            m[k] = mu ? gdl__bnv_loadd(mu + k * GDL__BNV_W) : acc[k];
        }
        for (n = 0; n < N; n++)
            for (k = 0; k < GDL__BNV_COLS; k++) {
                gdl__bnv v = gdl__bnv_load(x + n * C + k * GDL__BNV_W);
                if (mu) v = gdl__bnv_sub(v, m[k]), v = gdl__bnv_mul(v, v);
                acc[k] = gdl__bnv_add(acc[k], v);
            }
        for (k = 0; k < GDL__BNV_COLS; k++) gdl__bnv_spill(out + k * GDL__BNV_W, acc[k]);
        return;
    }
#endif
    if (w > 8) w = 8; /* (said above; gcc's -O3 on some targets cannot see it and warns of out's bounds) */
    for (k = 0; k < w; k++) out[k] = 0;
    for (n = 0; n < N; n++)
        for (k = 0; k < w; k++) {
            const double d = mu ? x[n * C + k] - mu[k] : x[n * C + k];
            out[k] += mu ? d * d : d;
        }
}
/* y[k] = (x[k] - mu[k]) is[k] gm[k] + bt[k] over the N rows, as gdl__bn_affine_rows; act (and pre) as
   there */
static void gdl__bn_col_affine(const gdl_real *x, gdl_real *y, int64_t N, int64_t C, int w, const double *mu,
                               const double *is, const double *gm, const double *bt, int act, gdl_real *pre) {
    const int relu = act == GDL_ACT_RELU;
    int64_t n;
    int k;
    if (act == GDL_ACT_GELU) {
        gdl__bn_col_affine(x, pre, N, C, w, mu, is, gm, bt, GDL_ACT_NONE, NULL);
        for (n = 0; n < N; n++) gdl__gelu_rows(pre + n * C, y + n * C, w);
        return;
    }
#ifdef GDL__BNV_W
    if (w == 8) {
        gdl__bnv m[GDL__BNV_COLS], vis[GDL__BNV_COLS], vg[GDL__BNV_COLS], vb[GDL__BNV_COLS];
        for (k = 0; k < GDL__BNV_COLS; k++) {
            m[k] = gdl__bnv_loadd(mu + k * GDL__BNV_W), vis[k] = gdl__bnv_loadd(is + k * GDL__BNV_W);
            vg[k] = gdl__bnv_loadd(gm + k * GDL__BNV_W), vb[k] = gdl__bnv_loadd(bt + k * GDL__BNV_W);
        }
        for (n = 0; n < N; n++)
            for (k = 0; k < GDL__BNV_COLS; k++) {
                const int64_t at = n * C + k * GDL__BNV_W;
                const gdl__bnv v = gdl__bnv_add(
                    gdl__bnv_mul(gdl__bnv_mul(gdl__bnv_sub(gdl__bnv_load(x + at), m[k]), vis[k]), vg[k]), vb[k]);
                if (relu) gdl__bnv_store_relu(y + at, v);
                else gdl__bnv_store(y + at, v);
            }
        return;
    }
#endif
    for (n = 0; n < N; n++)
        for (k = 0; k < w; k++) {
            const gdl_real v = (gdl_real)((x[n * C + k] - mu[k]) * is[k] * gm[k] + bt[k]);
            y[n * C + k] = !relu || v > 0 ? v : 0;
        }
}
static void gdl__batchnorm_cols(const gdl__batchnorm_job *b, int64_t lo, int64_t hi) {
    const int64_t N = b->N, C = b->C;
    int64_t c0;
    int k;
    for (c0 = lo; c0 < hi; c0 += 8) {
        const int w = hi - c0 < 8 ? (int)(hi - c0) : 8;
        double mu[8], is[8], gm[8], bt[8], sq[8];
        if (b->training) {
            gdl__bn_col_sums(b->x + c0, N, C, w, NULL, mu);
            for (k = 0; k < w; k++) mu[k] /= (double)N;
            gdl__bn_col_sums(b->x + c0, N, C, w, mu, sq);
        }
        for (k = 0; k < w; k++) {
            const int64_t c = c0 + k;
            double var;
            if (b->training) {
                var = sq[k] / (double)N;
                if (b->run_mean) {
                    b->run_mean[c] = (gdl_real)((1 - b->momentum) * b->run_mean[c] + b->momentum * mu[k]);
                    b->run_var[c] = (gdl_real)((1 - b->momentum) * b->run_var[c] +
                                               b->momentum * (N > 1 ? sq[k] / (double)(N - 1) : var));
                }
            } else {
                mu[k] = b->run_mean[c];
                var = b->run_var[c];
            }
            is[k] = 1.0 / sqrt(var + b->eps);
            gm[k] = b->gamma ? b->gamma[c] : 1;
            bt[k] = b->beta ? b->beta[c] : 0;
            b->mean[c] = (gdl_real)mu[k];
            b->invstd[c] = (gdl_real)is[k];
        }
        gdl__bn_col_affine(b->x + c0, b->y + c0, N, C, w, mu, is, gm, bt, b->act, b->pre ? b->pre + c0 : NULL);
    }
}
/* asks for the cache lines of n values at p, the next of a fused GELU's rows: short rows stride apart
   (144 values for 16 channels of 3 x 3) run ahead of the hardware's prefetch, and the backward's GELU
   pass over them took 1.7 times the whole-tensor one it replaces (1.17 ms against 0.86 with this, at
   [256, 128, 3, 3] on 2 threads) */
static void gdl__bn_prefetch(const gdl_real *p, int64_t n) {
#if defined(GDL__GELU_AVX512) || defined(GDL__GELU_AVX2)
    int64_t k;
    for (k = 0; k < n; k += 64 / (int64_t)sizeof(gdl_real)) _mm_prefetch((const char *)(p + k), _MM_HINT_T0);
#else
    (void)p, (void)n;
#endif
}
/* A fused GELU's channels go in groups whose N S values together are about GDL__BN_GELU_GROUP floats (at
   least one channel): GELU runs over each row's span of the group's channels, contiguous in memory and
   still in cache, instead of over rows of S (9 to 196 values in a CNN), whose vector loop's scalar tail
   and short trips made the fused op slower than the two ops. The forward takes a group only where a
   channel's rows are short (more than one channel fits); the backward's scratch holds a group's gradient. */
#define GDL__BN_GELU_GROUP 262144
static int64_t gdl__bn_gelu_group(int64_t N, int64_t S) {
    const int64_t per = N * S > 0 ? N * S : 1;
    return per < GDL__BN_GELU_GROUP ? GDL__BN_GELU_GROUP / per : 1;
}
/* GDL__ACT_GELU_RECIPE: a fused GELU whose input is not kept (S > 1, the CPU's f32): the forward
   writes, for each channel c, the four doubles that made pre, recipe[4c ..] = mean, invstd, weight and
   bias, and the backward rebuilds pre from x with them, a row of a group at a time, in cache: the
   same bits as the kept tensor, without writing it out and reading it back (two passes through memory
   of the input's size). Here: channels [c0, c1) of x's row (the sample) into pre's. */
static void gdl__bn_recipe_rows(const gdl_real *x, int64_t S, int64_t c0, int64_t c1, const double *recipe,
                                gdl_real *pre) {
    int64_t c;
    for (c = c0; c < c1; c++) {
        const double *r = recipe + 4 * c;
        gdl__bn_affine_rows(x + c * S, pre + (c - c0) * S, S, r[0], r[1], r[2], r[3], GDL_ACT_NONE, NULL);
    }
}

/* The S > 1 forward of channels [lo, hi): per channel the statistics (gdl__rows_sum's order) and the
   affine rows; a fused GELU per row, or (grouped, gdl__bn_gelu_group) over the group's spans after it
   (GDL__ACT_GELU_RECIPE: always grouped, pre in the part's scratch) */
static void gdl__batchnorm_part(gdl__args a, int64_t lo, int64_t hi) {
    gdl__batchnorm_job b = *(const gdl__batchnorm_job *)a.ctx;
    const int64_t N = b.N, C = b.C, S = b.S;
    const int recipe = b.act == GDL__ACT_GELU_RECIPE;
    const int64_t G = b.act == GDL_ACT_GELU || recipe ? gdl__bn_gelu_group(N, S) : hi - lo;
    double *rd = recipe ? (double *)(void *)b.pre : NULL;
    int64_t c, c0, c1, n;
    if (S == 1) {
        gdl__batchnorm_cols(&b, lo, hi);
        return;
    }
    if (recipe) { /* pre: the part's scratch, a group's rows laid out as the tensor's ([n][c - c0][S]) */
        const int64_t g = G < hi - lo ? G : hi - lo;
        if (!(b.pre = (gdl_real *)GPUDL_MALLOC(sizeof(gdl_real) * (size_t)(N * S * g)))) {
            gdl__atomic_store(b.failed, 1, GDL__MO_RELAXED);
            return;
        }
    }
    for (c0 = lo; c0 < hi; c0 = c1) {
        const int grouped = recipe || (b.act == GDL_ACT_GELU && G > 1);
        int64_t pC, pc; /* pre's rows hold pC channels from channel pc: the tensor's (C, 0), the scratch's group's */
        c1 = hi - c0 < G ? hi : c0 + G;
        pC = recipe ? c1 - c0 : C;
        pc = recipe ? c0 : 0;
        for (c = c0; c < c1; c++) {
            const gdl_real *x = b.x + c * S;
            int64_t M = N * S;
            double mu, var, is, gm = b.gamma ? b.gamma[c] : 1, bt = b.beta ? b.beta[c] : 0;
            if (b.training) {
                double sq;
                mu = gdl__rows_sum(x, N, C * S, S, 0, 0) / (double)M;
                sq = gdl__rows_sum(x, N, C * S, S, mu, 1);
                var = sq / (double)M;
                if (b.run_mean) {
                    b.run_mean[c] = (gdl_real)((1 - b.momentum) * b.run_mean[c] + b.momentum * mu);
                    b.run_var[c] = (gdl_real)((1 - b.momentum) * b.run_var[c] +
                                              b.momentum * (M > 1 ? sq / (double)(M - 1) : var));
                }
            } else {
                mu = b.run_mean[c];
                var = b.run_var[c];
            }
            is = 1.0 / sqrt(var + b.eps);
            b.mean[c] = (gdl_real)mu;
            b.invstd[c] = (gdl_real)is;
            if (rd) rd[4 * c] = mu, rd[4 * c + 1] = is, rd[4 * c + 2] = gm, rd[4 * c + 3] = bt;
            for (n = 0; n < N; n++) {
                const int64_t at = (n * C + c) * S;
                if (grouped) gdl__bn_affine_rows(x + n * C * S, b.pre + (n * pC + c - pc) * S, S, mu, is, gm, bt, GDL_ACT_NONE, NULL);
                else gdl__bn_affine_rows(x + n * C * S, b.y + at, S, mu, is, gm, bt, b.act, b.pre ? b.pre + at : NULL);
            }
        }
        if (grouped)
            for (n = 0; n < N; n++) {
                if (n + 1 < N) gdl__bn_prefetch(b.pre + ((n + 1) * pC + c0 - pc) * S, (c1 - c0) * S);
                gdl__gelu_rows(b.pre + (n * pC + c0 - pc) * S, b.y + (n * C + c0) * S, (c1 - c0) * S);
            }
    }
    if (recipe) GPUDL_FREE(b.pre);
}
static int gdl__cpu_batchnorm_f32(int64_t N, int64_t C, int64_t S, const gdl_real *x, const gdl_real *gamma,
                              const gdl_real *beta, gdl_real *y, gdl_real *mean, gdl_real *invstd,
                              gdl_real *run_mean, gdl_real *run_var, int training, double momentum, double eps,
                              int act, gdl_real *pre) {
    int failed = 0;
    gdl__batchnorm_job b = {N, C, S, x, gamma, beta, y, mean, invstd, run_mean, run_var, pre, training, act, momentum, eps,
                            &failed};
    gdl__args a = gdl__args_none();
    if (act != GDL_ACT_NONE && act != GDL_ACT_RELU &&
        ((act != GDL_ACT_GELU && act != GDL__ACT_GELU_RECIPE) || !pre || (act == GDL__ACT_GELU_RECIPE && S == 1))) {
        gdl__set_error("%s: batchnorm: fused activation %d%s (GDL_ACT_NONE, GDL_ACT_RELU, or GDL_ACT_GELU with pre)",
                       gdl__be_op, act, act == GDL_ACT_GELU && !pre ? " without pre" : "");
        return -1;
    }
    a.ctx = &b;
    gdl__parallel_loop(C, N * C * S, gdl__batchnorm_part, &a);
    if (failed) {
        const int64_t G = gdl__bn_gelu_group(N, S);
        gdl__set_error("%s: batchnorm: out of host memory for the fused GELU's scratch (%lld floats a part)",
                       gdl__be_op, (long long)(N * S * (G < C ? G : C)));
        return -1;
    }
    return 0;
}

typedef struct {
    int64_t N, C, S;
    const gdl_real *x, *gy, *y, *gamma, *mean, *invstd;
    int training;
    gdl_real *gx, *ggamma, *gbeta;
    int accumulate, act; /* act GDL_ACT_RELU: y is the ReLU's output; GDL_ACT_GELU: y is GELU's input;
                            GDL__ACT_GELU_RECIPE: y is the recipe's doubles */
    int *failed;         /* set when a part could not get its scratch */
} gdl__batchnorm_backward_job;
/* A fused GELU's backward, gdl_gelu's (gdl__gelu_grad_rows into an unset gradient: 0 + gy GELU'(pre)), over
   w values of each of N rows (pre's and gy's rows stride apart) into g, its rows gw apart: the gradient
   batch norm's passes take, in a part's scratch (a channel's or a block's, in cache) instead of a pass of
   its own through memory */
static void gdl__bn_gelu_grads(const gdl_real *pre, const gdl_real *gy, int64_t N, int64_t stride, int64_t w,
                               gdl_real *g, int64_t gw) {
    int64_t n;
    for (n = 0; n < N; n++) {
        if (n + 1 < N) gdl__bn_prefetch(pre + (n + 1) * stride, w), gdl__bn_prefetch(gy + (n + 1) * stride, w);
        gdl__gelu_grad_rows(pre + n * stride, gy + n * stride, g + n * gw, w, 0);
    }
}
/* ... GDL__ACT_GELU_RECIPE's: channels [c0, c1) of each row of x (C S apart) rebuilt into prow (a row's
   span) first */
static void gdl__bn_gelu_grads_recipe(const gdl_real *x, const gdl_real *gy, int64_t N, int64_t C, int64_t S,
                                      int64_t c0, int64_t c1, const double *recipe, gdl_real *prow, gdl_real *g) {
    const int64_t w = (c1 - c0) * S;
    int64_t n;
    for (n = 0; n < N; n++) {
        if (n + 1 < N) gdl__bn_prefetch(x + ((n + 1) * C + c0) * S, w), gdl__bn_prefetch(gy + ((n + 1) * C + c0) * S, w);
        gdl__bn_recipe_rows(x + n * C * S, S, c0, c1, recipe, prow);
        gdl__gelu_grad_rows(prow, gy + (n * C + c0) * S, g + n * w, w, 0);
    }
}
/* gx = (acc ? gx : 0) + A (M g - sg - (x - mu) is sgx) (training; A = gm is / M), or + g gm is, over n
   values, the term in double and rounded once, as the scalar expressions; g as gdl__bn_gy1 gives it (y: a
   fused ReLU's output) */
static void gdl__bn_grad_rows(const gdl_real *x, const gdl_real *gy, const gdl_real *y, gdl_real *gx, int64_t n,
                              int training, double M, double A, double sg, double sgx, double mu, double is, double gm,
                              int acc) {
    int64_t i = 0;
#ifdef GDL__BNV_W
    const gdl__bnv vM = gdl__bnv_set(M), vA = gdl__bnv_set(A), vsg = gdl__bnv_set(sg), vsgx = gdl__bnv_set(sgx);
    const gdl__bnv m = gdl__bnv_set(mu), vis = gdl__bnv_set(is);
    if (training)
        for (; i + GDL__BNV_W <= n; i += GDL__BNV_W) {
            const gdl__bnv g = gdl__bnv_load_gy(gy + i, y ? y + i : NULL), v = gdl__bnv_load(x + i);
            const gdl__bnv t = gdl__bnv_sub(gdl__bnv_sub(gdl__bnv_mul(vM, g), vsg),
                                            gdl__bnv_mul(gdl__bnv_mul(gdl__bnv_sub(v, m), vis), vsgx));
            gdl__bnv_store_add(gx + i, gdl__bnv_mul(vA, t), acc);
        }
#endif
    for (; i < n; i++) {
        const gdl_real g = gdl__bn_gy1(gy, y, i);
        gx[i] = (acc ? gx[i] : (gdl_real)0) +
                (training ? (gdl_real)(A * (M * g - sg - (x[i] - mu) * is * sgx)) : (gdl_real)(g * gm * is));
    }
}
/* sg[k] = the sum of g, sgx[k] of g (x[k] - mu[k]) is[k] over the N rows (x's and y's C apart, gy's gC), g
   as gdl__bn_gy1 gives it */
static void gdl__bn_col_sums2(const gdl_real *x, const gdl_real *gy, const gdl_real *y, int64_t N, int64_t C,
                              int64_t gC, int w, const double *mu, const double *is, double *sg, double *sgx) {
    int64_t n;
    int k;
    for (k = 0; k < w; k++) sg[k] = sgx[k] = 0;
#ifdef GDL__BNV_W
    if (w == 8) {
        gdl__bnv ag[GDL__BNV_COLS], ax[GDL__BNV_COLS], m[GDL__BNV_COLS], vis[GDL__BNV_COLS];
        for (k = 0; k < GDL__BNV_COLS; k++) {
            ag[k] = ax[k] = gdl__bnv_set(0);
            m[k] = gdl__bnv_loadd(mu + k * GDL__BNV_W), vis[k] = gdl__bnv_loadd(is + k * GDL__BNV_W);
        }
        for (n = 0; n < N; n++)
            for (k = 0; k < GDL__BNV_COLS; k++) {
                const int64_t at = n * C + k * GDL__BNV_W;
                const gdl__bnv vg = gdl__bnv_load_gy(gy + n * gC + k * GDL__BNV_W, y ? y + at : NULL),
                               vx = gdl__bnv_load(x + at);
                ag[k] = gdl__bnv_add(ag[k], vg);
                ax[k] = gdl__bnv_add(ax[k], gdl__bnv_mul(gdl__bnv_mul(vg, gdl__bnv_sub(vx, m[k])), vis[k]));
            }
        for (k = 0; k < GDL__BNV_COLS; k++) {
            gdl__bnv_spill(sg + k * GDL__BNV_W, ag[k]);
            gdl__bnv_spill(sgx + k * GDL__BNV_W, ax[k]);
        }
        return;
    }
#endif
    for (n = 0; n < N; n++)
        for (k = 0; k < w; k++) {
            const gdl_real g = y ? gdl__bn_gy1(gy, y, n * C + k) : gy[n * gC + k];
            sg[k] += g;
            sgx[k] += g * (x[n * C + k] - mu[k]) * is[k];
        }
}
/* gx[k] over the N rows, as gdl__bn_grad_rows: (acc ? gx : 0) + A (M g - sg - (x - mu) is sgx) (training),
   or + g gm is; gy's rows gC apart, the others' C */
static void gdl__bn_col_grads(const gdl_real *x, const gdl_real *gy, const gdl_real *y, gdl_real *gx, int64_t N,
                              int64_t C, int64_t gC, int w, int training, const double *A, const double *sg, const double *sgx,
                              const double *mu, const double *is, const double *gm, int acc) {
    const double M = (double)N;
    int64_t n;
    int k;
#ifdef GDL__BNV_W
    if (w == 8) {
        const gdl__bnv vM = gdl__bnv_set(M);
        gdl__bnv vA[GDL__BNV_COLS], vsg[GDL__BNV_COLS], vsgx[GDL__BNV_COLS], m[GDL__BNV_COLS], vis[GDL__BNV_COLS],
            vgm[GDL__BNV_COLS];
        for (k = 0; k < GDL__BNV_COLS; k++) {
            vA[k] = gdl__bnv_loadd(A + k * GDL__BNV_W), vsg[k] = gdl__bnv_loadd(sg + k * GDL__BNV_W);
            vsgx[k] = gdl__bnv_loadd(sgx + k * GDL__BNV_W), m[k] = gdl__bnv_loadd(mu + k * GDL__BNV_W);
            vis[k] = gdl__bnv_loadd(is + k * GDL__BNV_W), vgm[k] = gdl__bnv_loadd(gm + k * GDL__BNV_W);
        }
        for (n = 0; n < N; n++)
            for (k = 0; k < GDL__BNV_COLS; k++) {
                const int64_t at = n * C + k * GDL__BNV_W;
                const gdl__bnv g = gdl__bnv_load_gy(gy + n * gC + k * GDL__BNV_W, y ? y + at : NULL);
                gdl__bnv t;
                if (training)
                    t = gdl__bnv_mul(vA[k], gdl__bnv_sub(gdl__bnv_sub(gdl__bnv_mul(vM, g), vsg[k]),
                                                         gdl__bnv_mul(gdl__bnv_mul(gdl__bnv_sub(gdl__bnv_load(x + at),
                                                                                                m[k]), vis[k]), vsgx[k])));
                else
                    t = gdl__bnv_mul(gdl__bnv_mul(g, vgm[k]), vis[k]);
                gdl__bnv_store_add(gx + at, t, acc);
            }
        return;
    }
#endif
    for (n = 0; n < N; n++)
        for (k = 0; k < w; k++) {
            const int64_t i = n * C + k;
            const gdl_real g = y ? gdl__bn_gy1(gy, y, i) : gy[n * gC + k];
            gx[i] = (acc ? gx[i] : (gdl_real)0) +
                    (training ? (gdl_real)(A[k] * (M * g - sg[k] - (x[i] - mu[k]) * is[k] * sgx[k]))
                              : (gdl_real)(g * gm[k] * is[k]));
        }
}
/* The backward of gdl__batchnorm_cols (S 1), in the same blocks: per channel gdl__bn_sums2's running sums
   and gdl__bn_grad_rows' expressions, so the same bits. */
static void gdl__batchnorm_backward_cols(const gdl__batchnorm_backward_job *b, int64_t lo, int64_t hi) {
    const int64_t N = b->N, C = b->C;
    int64_t c0;
    int k;
    const int gelu = b->act == GDL_ACT_GELU;
    gdl_real *scr = NULL;
    if (gelu && !(scr = (gdl_real *)GPUDL_MALLOC(sizeof(gdl_real) * (size_t)(N * 8)))) {
        gdl__atomic_store(b->failed, 1, GDL__MO_RELAXED);
        return;
    }
    for (c0 = lo; c0 < hi; c0 += 8) {
        const int w = hi - c0 < 8 ? (int)(hi - c0) : 8;
        const gdl_real *y = b->y && !gelu ? b->y + c0 : NULL, *gy = b->gy + c0;
        int64_t gC = C;
        double mu[8], is[8], gm[8], A[8], sg[8], sgx[8];
        if (gelu) {
            gdl__bn_gelu_grads(b->y + c0, gy, N, C, w, scr, w);
            gy = scr;
            gC = w;
        }
        for (k = 0; k < w; k++) {
            mu[k] = b->mean[c0 + k];
            is[k] = b->invstd[c0 + k];
            gm[k] = b->gamma ? b->gamma[c0 + k] : 1;
            A[k] = gm[k] * is[k] / (double)N;
        }
        gdl__bn_col_sums2(b->x + c0, gy, y, N, C, gC, w, mu, is, sg, sgx);
        for (k = 0; k < w; k++) {
            if (b->ggamma) b->ggamma[c0 + k] += (gdl_real)sgx[k];
            if (b->gbeta) b->gbeta[c0 + k] += (gdl_real)sg[k];
        }
        if (b->gx)
            gdl__bn_col_grads(b->x + c0, gy, y, b->gx + c0, N, C, gC, w, b->training, A, sg, sgx, mu, is, gm,
                              b->accumulate);
    }
    GPUDL_FREE(scr);
}
/* The S > 1 backward of channels [lo, hi); a fused GELU's gradient first, a group of channels
   (gdl__bn_gelu_group) at a time, into the part's scratch: row n of it the group's span of row n */
static void gdl__batchnorm_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__batchnorm_backward_job b = *(const gdl__batchnorm_backward_job *)a.ctx;
    const int64_t N = b.N, C = b.C, S = b.S;
    const int recipe = b.act == GDL__ACT_GELU_RECIPE, gelu = b.act == GDL_ACT_GELU || recipe;
    const int64_t G = gelu ? gdl__bn_gelu_group(N, S) : hi - lo, g = G < hi - lo ? G : hi - lo;
    int64_t c, c0, c1, n;
    gdl_real *scr = NULL;
    if (S == 1) {
        gdl__batchnorm_backward_cols(&b, lo, hi);
        return;
    }
    /* a group's gradient (and for the recipe a row's rebuilt pre after it) */
    if (gelu && !(scr = (gdl_real *)GPUDL_MALLOC(sizeof(gdl_real) * (size_t)((N + recipe) * S * g)))) {
        gdl__atomic_store(b.failed, 1, GDL__MO_RELAXED);
        return;
    }
    for (c0 = lo; c0 < hi; c0 = c1) {
        c1 = hi - c0 < G ? hi : c0 + G;
        if (recipe)
            gdl__bn_gelu_grads_recipe(b.x, b.gy, N, C, S, c0, c1, (const double *)(const void *)b.y, scr + N * S * g,
                                      scr);
        else if (gelu)
            gdl__bn_gelu_grads(b.y + c0 * S, b.gy + c0 * S, N, C * S, (c1 - c0) * S, scr, (c1 - c0) * S);
        for (c = c0; c < c1; c++) {
            const gdl_real *x = b.x + c * S, *gy = gelu ? scr + (c - c0) * S : b.gy + c * S;
            const gdl_real *y = b.y && !gelu ? b.y + c * S : NULL;
            const int64_t M = N * S, gs = gelu ? (c1 - c0) * S : C * S;
            double sg, sgx, mu = b.mean[c], is = b.invstd[c], gm = b.gamma ? b.gamma[c] : 1;
            gdl__bn_sums2(x, gy, y, N, C * S, gs, S, mu, is, &sg, &sgx);
            if (b.ggamma) b.ggamma[c] += (gdl_real)sgx;
            if (b.gbeta) b.gbeta[c] += (gdl_real)sg;
            if (!b.gx) continue;
            for (n = 0; n < N; n++)
                gdl__bn_grad_rows(x + n * C * S, gy + n * gs, y ? y + n * C * S : NULL, b.gx + (n * C + c) * S, S,
                                  b.training, (double)M, gm * is / (double)M, sg, sgx, mu, is, gm, b.accumulate);
        }
    }
    GPUDL_FREE(scr);
}
static int gdl__cpu_batchnorm_backward_f32(int64_t N, int64_t C, int64_t S, const gdl_real *x, const gdl_real *gy,
                                       const gdl_real *y, const gdl_real *gamma, const gdl_real *mean,
                                       const gdl_real *invstd, int training, gdl_real *gx, gdl_real *ggamma,
                                       gdl_real *gbeta, int accumulate, int act) {
    int failed = 0;
    gdl__batchnorm_backward_job b = {N, C, S, x, gy, y, gamma, mean, invstd, training, gx, ggamma, gbeta, accumulate,
                                     act, &failed};
    gdl__args a = gdl__args_none();
    if (act != GDL_ACT_NONE &&
        ((act != GDL_ACT_RELU && act != GDL_ACT_GELU && act != GDL__ACT_GELU_RECIPE) || !y ||
         (act == GDL__ACT_GELU_RECIPE && S == 1))) {
        gdl__set_error("%s: batchnorm_backward: fused activation %d%s (GDL_ACT_NONE, or GDL_ACT_RELU / GDL_ACT_GELU "
                       "with y)", gdl__be_op, act, y ? "" : " without y");
        return -1;
    }
    a.ctx = &b;
    gdl__parallel_loop(C, N * C * S, gdl__batchnorm_backward_part, &a);
    if (failed) {
        const int64_t G = gdl__bn_gelu_group(N, S);
        gdl__set_error("%s: batchnorm_backward: out of host memory for the fused GELU's scratch (%lld floats a part)",
                       gdl__be_op, (long long)(S == 1 ? N * 8 : N * S * (G < C ? G : C)));
        return -1;
    }
    return 0;
}

typedef struct {
    int64_t rows, D;
    const gdl_real *x, *gamma, *beta;
    double eps;
    gdl_real *y, *mean, *rstd;
} gdl__layernorm_job;
/* A row's mean and variance are sums in double, one add after the other (the bits depend on that order):
   a chain of dependent adds, each waiting for the last. GDL__LN_R rows at a time keep that order in each
   row and run the rows' chains side by side. */
#define GDL__LN_R 8
static void gdl__layernorm_rows(const gdl__layernorm_job *b, int64_t r0, int nr) {
    const int64_t D = b->D;
    const gdl_real *p = b->x + r0 * D;
    double s[GDL__LN_R], sq[GDL__LN_R], mu[GDL__LN_R], rs[GDL__LN_R];
    int64_t k;
    int r;
    for (r = 0; r < nr; r++) s[r] = sq[r] = 0;
    for (k = 0; k < D; k++) /* nr constant: the sums stay in registers */
        if (nr == GDL__LN_R)
            for (r = 0; r < GDL__LN_R; r++) s[r] += p[r * D + k];
        else
            for (r = 0; r < nr; r++) s[r] += p[r * D + k];
    for (r = 0; r < nr; r++) mu[r] = s[r] / (double)D;
    for (k = 0; k < D; k++)
        if (nr == GDL__LN_R)
            for (r = 0; r < GDL__LN_R; r++) sq[r] += (p[r * D + k] - mu[r]) * (p[r * D + k] - mu[r]);
        else
            for (r = 0; r < nr; r++) sq[r] += (p[r * D + k] - mu[r]) * (p[r * D + k] - mu[r]);
    for (r = 0; r < nr; r++) {
        const gdl_real *pr = p + r * D;
        gdl_real *y = b->y + (r0 + r) * D;
        rs[r] = 1.0 / sqrt(sq[r] / (double)D + b->eps);
        b->mean[r0 + r] = (gdl_real)mu[r];
        b->rstd[r0 + r] = (gdl_real)rs[r];
        for (k = 0; k < D; k++)
            y[k] = (gdl_real)((pr[k] - mu[r]) * rs[r] * (b->gamma ? b->gamma[k] : 1) + (b->beta ? b->beta[k] : 0));
    }
}
static void gdl__layernorm_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__layernorm_job *b = (const gdl__layernorm_job *)a.ctx;
    int64_t r;
    for (r = lo; r < hi; r += GDL__LN_R) gdl__layernorm_rows(b, r, hi - r < GDL__LN_R ? (int)(hi - r) : GDL__LN_R);
}
static int gdl__cpu_layernorm(int64_t rows, int64_t D, const gdl_real *x, const gdl_real *gamma,
                              const gdl_real *beta, double eps, gdl_real *y, gdl_real *mean, gdl_real *rstd) {
    gdl__layernorm_job b = {rows, D, x, gamma, beta, eps, y, mean, rstd};
    gdl__args a = gdl__args_none();
    a.ctx = &b;
    gdl__parallel_loop(rows, rows * D, gdl__layernorm_part, &a);
    return 0;
}

/* The backward in two parallel passes, each with the one-thread loop's arithmetic (the same bits for any
   thread count): over rows, gx (a row's sums s1, s2 need only that row); then over blocks of columns,
   ggamma and gbeta, each column added up in row order as before. */
typedef struct {
    int64_t rows, D;
    const gdl_real *x, *gy, *gamma, *mean, *rstd;
    gdl_real *gx, *ggamma, *gbeta;
} gdl__lnb_job;
/* gx += rs (gh - s1/D - xh s2/D) over a row (m1 = s1/D): blocks of 8 (a constant trip count, which gcc
   vectorises at -O2 when it knows gx apart from the inputs: this loop divides per element); gamma NULL:
   gh = gy */
static void gdl__lnb_gx_row(const gdl_real *GDL__RESTRICT p, const gdl_real *GDL__RESTRICT g,
                            const gdl_real *GDL__RESTRICT gamma, int64_t D, double mu, double rs, double m1, double s2,
                            gdl_real *GDL__RESTRICT gx) {
    int64_t k = 0;
    int j;
    if (gamma)
        for (; k + 8 <= D; k += 8)
            for (j = 0; j < 8; j++) {
                double xh = (p[k + j] - mu) * rs, gh = g[k + j] * gamma[k + j];
                gx[k + j] += (gdl_real)(rs * (gh - m1 - xh * s2 / (double)D));
            }
    else
        for (; k + 8 <= D; k += 8)
            for (j = 0; j < 8; j++) {
                double xh = (p[k + j] - mu) * rs, gh = g[k + j];
                gx[k + j] += (gdl_real)(rs * (gh - m1 - xh * s2 / (double)D));
            }
    for (; k < D; k++) {
        double xh = (p[k] - mu) * rs, gh = g[k] * (gamma ? gamma[k] : 1);
        gx[k] += (gdl_real)(rs * (gh - m1 - xh * s2 / (double)D));
    }
}
static void gdl__lnb_rows(const gdl__lnb_job *b, int64_t r0, int nr) { /* GDL__LN_R rows side by side */
    const int64_t D = b->D;
    const gdl_real *x = b->x + r0 * D, *gy = b->gy + r0 * D;
    double mu[GDL__LN_R], rs[GDL__LN_R], s1[GDL__LN_R], s2[GDL__LN_R];
    int64_t k;
    int r;
    for (r = 0; r < nr; r++) {
        mu[r] = b->mean[r0 + r];
        rs[r] = b->rstd[r0 + r];
        s1[r] = s2[r] = 0;
    }
    for (k = 0; k < D; k++) {
        const gdl_real gam = b->gamma ? b->gamma[k] : 1;
        if (nr == GDL__LN_R) /* a constant trip count: the sums stay in registers */
            for (r = 0; r < GDL__LN_R; r++) {
                double xh = (x[r * D + k] - mu[r]) * rs[r], gh = gy[r * D + k] * gam;
                s1[r] += gh;
                s2[r] += gh * xh;
            }
        else
            for (r = 0; r < nr; r++) {
                double xh = (x[r * D + k] - mu[r]) * rs[r], gh = gy[r * D + k] * gam;
                s1[r] += gh;
                s2[r] += gh * xh;
            }
    }
    for (r = 0; r < nr; r++)
        gdl__lnb_gx_row(x + r * D, gy + r * D, b->gamma, D, mu[r], rs[r], s1[r] / (double)D, s2[r], b->gx + (r0 + r) * D);
}
static void gdl__lnb_rows_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__lnb_job *b = (const gdl__lnb_job *)a.ctx;
    int64_t r;
    for (r = lo; r < hi; r += GDL__LN_R) gdl__lnb_rows(b, r, hi - r < GDL__LN_R ? (int)(hi - r) : GDL__LN_R);
}
#define GDL__LNB_COLS 32
static void gdl__lnb_cols_part(gdl__args a, int64_t lo, int64_t hi) { /* blocks [lo, hi) of GDL__LNB_COLS columns */
    const gdl__lnb_job b = *(const gdl__lnb_job *)a.ctx;
    const int64_t D = b.D;
    int64_t blk, r;
    int j;
    for (blk = lo; blk < hi; blk++) {
        const int64_t k0 = blk * GDL__LNB_COLS, w = D - k0 < GDL__LNB_COLS ? D - k0 : GDL__LNB_COLS;
        /* the column sums in locals (f32, added in row order as in the output): no aliasing, so they vectorise */
        gdl_real sg[GDL__LNB_COLS], sb[GDL__LNB_COLS];
        for (j = 0; j < w; j++) {
            sg[j] = b.ggamma ? b.ggamma[k0 + j] : 0;
            sb[j] = b.gbeta ? b.gbeta[k0 + j] : 0;
        }
        for (r = 0; r < b.rows; r++) {
            const gdl_real *p = b.x + r * D + k0, *g = b.gy + r * D + k0;
            const double mu = b.mean[r], rs = b.rstd[r];
            if (b.ggamma == b.gbeta) { /* weight and bias one tensor: one sum, both terms in turn */
                for (j = 0; j < w; j++) {
                    sg[j] += (gdl_real)(g[j] * ((p[j] - mu) * rs));
                    sg[j] += g[j];
                }
            } else if (w == GDL__LNB_COLS) {
                for (j = 0; j < GDL__LNB_COLS; j++) sg[j] += (gdl_real)(g[j] * ((p[j] - mu) * rs));
                for (j = 0; j < GDL__LNB_COLS; j++) sb[j] += g[j];
            } else {
                for (j = 0; j < w; j++) sg[j] += (gdl_real)(g[j] * ((p[j] - mu) * rs));
                for (j = 0; j < w; j++) sb[j] += g[j];
            }
        }
        for (j = 0; j < w; j++) {
            if (b.ggamma) b.ggamma[k0 + j] = sg[j];
            if (b.gbeta && b.gbeta != b.ggamma) b.gbeta[k0 + j] = sb[j];
        }
    }
}
static int gdl__cpu_layernorm_backward(int64_t rows, int64_t D, const gdl_real *x, const gdl_real *gy,
                                       const gdl_real *gamma, const gdl_real *mean, const gdl_real *rstd,
                                       gdl_real *gx, gdl_real *ggamma, gdl_real *gbeta) {
    gdl__lnb_job b = {rows, D, x, gy, gamma, mean, rstd, gx, ggamma, gbeta};
    gdl__args a = gdl__args_none();
    a.ctx = &b;
    if (gx) gdl__parallel_loop(rows, 4 * rows * D, gdl__lnb_rows_part, &a);
    if (ggamma || gbeta) gdl__parallel_units((D + GDL__LNB_COLS - 1) / GDL__LNB_COLS, 2 * rows * D, gdl__lnb_cols_part, &a);
    return 0;
}
