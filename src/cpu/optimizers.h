/* src/cpu/optimizers.h — the CPU's optimizer kernels: SGD and Adam over a
   flat table of tensors (with f32 master weights of bf16/f16 parameters),
   the gradient-norm clip, the weight EMA's update. */

/* master weights: a low-precision gradient element in f32, and an f32 master rounded (nearest even); bf16 spelt
   out (gdl_bf16_to_f32, gdl_f32_to_bf16) so the loops below keep no call */
static float gdl__opt_lowf(int low, uint16_t h) {
    return low == GDL_F16 ? gdl_f16_to_f32(h) : gdl__bits_f32((uint32_t)h << 16);
}
static uint16_t gdl__opt_round(int low, float f) {
    uint32_t x, r, q;
    if (low == GDL_F16) return gdl_f32_to_f16(f);
    x = gdl__f32_bits(f);
    r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    q = (x >> 16) | 0x40u;                                  /* a NaN stays a (quiet) NaN */
    return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? q : r); /* a select: the loops vectorise */
}
#if defined(GDL__GEMM_AVX512)
/* master weights, 8 bf16 at a time: widened exactly; rounded as gdl__opt_round (nearest even, NaN kept quiet) */
static __m256 gdl__bf16v_load(const uint16_t *h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)h)), 16));
}
static void gdl__bf16v_store(uint16_t *h, __m256 f) {
    const __m256i x = _mm256_castps_si256(f), one = _mm256_set1_epi32(1);
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)),
                                 _mm256_and_si256(_mm256_srli_epi32(x, 16), one));
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    r = _mm256_blendv_epi8(_mm256_srli_epi32(r, 16), q, nan);
    r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08); /* the 8 halves, in order, in the low 128 bits */
    _mm_storeu_si128((__m128i *)h, _mm256_castsi256_si128(r));
}
#elif defined(GDL__GEMM_AVX2)
/* the same, 4 at a time */
static __m128 gdl__bf16v_load(const uint16_t *h) {
    return _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(_mm_loadl_epi64((const __m128i *)h)), 16));
}
static void gdl__bf16v_store(uint16_t *h, __m128 f) {
    const __m128i x = _mm_castps_si128(f), one = _mm_set1_epi32(1);
    __m128i r = _mm_add_epi32(_mm_add_epi32(x, _mm_set1_epi32(0x7fff)), _mm_and_si128(_mm_srli_epi32(x, 16), one));
    __m128i q = _mm_or_si128(_mm_srli_epi32(x, 16), _mm_set1_epi32(0x40));
    __m128i nan = _mm_cmpgt_epi32(_mm_and_si128(x, _mm_set1_epi32(0x7fffffff)), _mm_set1_epi32(0x7f800000));
    r = _mm_blendv_epi8(_mm_srli_epi32(r, 16), q, nan);
    _mm_storel_epi64((__m128i *)h, _mm_packus_epi32(r, r));
}
#endif
/* the optimizers' vector loops: GDL__OPT_W elements a step, in doubles (GDL__VD's ops, gdl__vd) read from and
   rounded to floats (GDL__VF's, gdl__vf) */
#if defined(GDL__GEMM_AVX512)
#define GDL__OPT_W 8
#define GDL__VD(f) _mm512_##f
#define GDL__VF(f) _mm256_##f
typedef __m512d gdl__vd;
typedef __m256 gdl__vf;
#elif defined(GDL__GEMM_AVX2)
#define GDL__OPT_W 4
#define GDL__VD(f) _mm256_##f
#define GDL__VF(f) _mm_##f
typedef __m256d gdl__vd;
typedef __m128 gdl__vf;
#endif
/* The optimizers' parts update the elements [lo, hi) of the tensor a.t with
   its group's hyper-parameters (both copied: see gdl__args). */
static void gdl__sgd_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_opt_tensor t = *a.t;
    const gdl_opt_hyper h = *t.hyper;
    gdl_real *p = t.p, *buf = t.s1; /* s1: the momentum buffer */
    const gdl_real *g = t.g;
    const double momentum = buf ? h.momentum : 0;
    const int first_step = a.op; /* the buffer starts as the gradient */
    /* locals, and first_step from the caller: gcc then unswitches the loops on them (a vectorised
       version each); with first_step read from *t.step here it does not (gcc 12, -fopt-info-vec) */
    const double lr = h.lr, dampening = h.dampening, weight_decay = h.weight_decay;
    const int nesterov = h.nesterov;
    int64_t i = lo;
#ifdef GDL__OPT_W
    /* the loops below, 8 (4) elements at a time: the same operations in double, so the same bits. gcc
       vectorises the scalar loops at -O3 only, where it unswitches them on the flags; -O2, the level most
       builds use, left them scalar (fc10's SGD step 2x slower). Master weights in bf16 too (bg, bp); f16's
       go to the scalar loop. */
    if (!t.low || t.low == GDL_BF16) {
        const uint16_t *bg = t.low ? (const uint16_t *)t.glow : NULL;
        uint16_t *bp = t.low ? (uint16_t *)t.plow : NULL;
        const gdl__vd vwd = GDL__VD(set1_pd)(weight_decay), vmom = GDL__VD(set1_pd)(momentum);
        const gdl__vd vdamp = GDL__VD(set1_pd)(1 - dampening), vlr = GDL__VD(set1_pd)(lr);
        for (; i + GDL__OPT_W <= hi; i += GDL__OPT_W) {
            const gdl__vd pi = GDL__VD(cvtps_pd)(GDL__VF(loadu_ps)(p + i));
            gdl__vd d = GDL__VD(cvtps_pd)(bg ? gdl__bf16v_load(bg + i) : GDL__VF(loadu_ps)(g + i));
            gdl__vf pn;
            d = GDL__VD(add_pd)(d, GDL__VD(mul_pd)(vwd, pi));
            if (momentum != 0) {
                gdl__vd b = d;
                if (!first_step)
                    b = GDL__VD(add_pd)(GDL__VD(mul_pd)(vmom, GDL__VD(cvtps_pd)(GDL__VF(loadu_ps)(buf + i))),
                                        GDL__VD(mul_pd)(vdamp, d));
                GDL__VF(storeu_ps)(buf + i, GDL__VD(cvtpd_ps)(b));
                d = nesterov ? GDL__VD(add_pd)(d, GDL__VD(mul_pd)(vmom, b)) : b;
            }
            pn = GDL__VD(cvtpd_ps)(GDL__VD(sub_pd)(pi, GDL__VD(mul_pd)(vlr, d)));
            GDL__VF(storeu_ps)(p + i, pn);
            if (bp) gdl__bf16v_store(bp + i, pn);
        }
    }
#endif
/* one element's step, its gradient GI (a double): every loop below is this */
#define GDL__SGD_ELEM(GI)                                                               \
    do {                                                                                \
        double d = (GI) + weight_decay * p[i];                                          \
        if (momentum != 0) {                                                            \
            double b = first_step ? d : momentum * buf[i] + (1 - dampening) * d;        \
            buf[i] = (gdl_real)b;                                                       \
            d = nesterov ? d + momentum * b : b;                                        \
        }                                                                               \
        p[i] = (gdl_real)(p[i] - lr * d);                                               \
    } while (0)
    if (t.low) { /* the same formula on the f32 master, the gradient read from dtype low */
        const uint16_t *glow = (const uint16_t *)t.glow;
        uint16_t *plow = (uint16_t *)t.plow;
        const int low = t.low;
        if (low == GDL_BF16) /* the loop below with the dtype a constant (no call: vectorised) */
            for (; i < hi; i++) {
                GDL__SGD_ELEM((double)gdl__opt_lowf(GDL_BF16, glow[i]));
                plow[i] = gdl__opt_round(GDL_BF16, (float)p[i]);
            }
        else
            for (; i < hi; i++) {
                GDL__SGD_ELEM((double)gdl__opt_lowf(low, glow[i]));
                plow[i] = gdl__opt_round(low, (float)p[i]);
            }
        return;
    }
    for (; i < hi; i++) GDL__SGD_ELEM(g[i]);
#undef GDL__SGD_ELEM
}
/* The CPU's table is a copy of the entries: device memory is host memory. */
typedef struct {
    int count;
    gdl_opt_tensor t[1];
} gdl__cpu_opt_table;
static void *gdl__cpu_opt_table_new(int count, const gdl_opt_tensor *t) {
    gdl__cpu_opt_table *tab;
    if (count < 0) count = 0;
    tab = (gdl__cpu_opt_table *)GPUDL_MALLOC(sizeof(gdl__cpu_opt_table) + sizeof(gdl_opt_tensor) * (size_t)count);
    if (!tab) {
        gdl__set_error("gdl: out of memory for the optimizer's table of %d tensors", count);
        return NULL;
    }
    tab->count = count;
    if (count) memcpy(tab->t, t, sizeof(gdl_opt_tensor) * (size_t)count);
    return tab;
}
static void gdl__cpu_opt_table_free(void *table) { GPUDL_FREE(table); }
static void gdl__cpu_opt_count(const gdl__cpu_opt_table *tab) {
    int k;
    for (k = 0; k < tab->count; k++)
        if (tab->t[k].step && *tab->t[k].step < INT32_MAX) (*tab->t[k].step)++;
}
/* GradScaler's found_inf set: the step is skipped, counts included */
static int gdl__cpu_opt_skipped(const gdl__cpu_opt_table *tab) {
    return tab->count > 0 && tab->t[0].skip && *tab->t[0].skip != 0;
}
/* An optimizer's step over the table: part on each tensor, with a.op = op (op < 0: whether the tensor takes
   its first step); the step counts then advance. Nothing when GradScaler skips the step. */
static int gdl__cpu_opt_run(const void *table, gdl__loop_fn part, int op) {
    const gdl__cpu_opt_table *tab = (const gdl__cpu_opt_table *)table;
    int k;
    if (gdl__cpu_opt_skipped(tab)) return 0;
    for (k = 0; k < tab->count; k++) {
        const gdl_opt_tensor *t = &tab->t[k];
        gdl__args a = gdl__args_none();
        a.t = t;
        a.op = op >= 0 ? op : !t->step || *t->step == 0;
        gdl__parallel_loop(t->n, t->n, part, &a);
    }
    gdl__cpu_opt_count(tab);
    return 0;
}
static int gdl__cpu_sgd_multi(const void *table) { return gdl__cpu_opt_run(table, gdl__sgd_part, -1); }

static void gdl__adam_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_opt_tensor t = *a.t;
    const gdl_opt_hyper h = *t.hyper;
    gdl_real *p = t.p, *m = t.s1, *v = t.s2; /* s1, s2: exp_avg, exp_avg_sq */
    const gdl_real *g = t.g;
    const int decoupled = a.op; /* AdamW */
    const double lr = h.lr, beta1 = h.beta1, beta2 = h.beta2, eps = h.eps, weight_decay = h.weight_decay;
    const int64_t stp = t.step ? *t.step : 0, step = stp < INT32_MAX ? stp + 1 : stp;
    int64_t i = lo;
    double bc1 = 1 - pow(beta1, (double)step), bc2 = 1 - pow(beta2, (double)step);
#ifdef GDL__OPT_W
    /* the loop below, 8 (4) elements at a time: the same operations in
       double, so the same bits; compilers do not vectorise the loop itself
       (sqrt's errno). Master weights in bf16 too (bg, bp: the gradient read
       from bf16, the parameter rounded to it); f16's go to the scalar loop. */
    if (!t.low || t.low == GDL_BF16) {
        const uint16_t *bg = t.low ? (const uint16_t *)t.glow : NULL;
        uint16_t *bp = t.low ? (uint16_t *)t.plow : NULL;
        const gdl__vd b1 = GDL__VD(set1_pd)(beta1), b1c = GDL__VD(set1_pd)(1 - beta1), b2 = GDL__VD(set1_pd)(beta2);
        const gdl__vd b2c = GDL__VD(set1_pd)(1 - beta2), vlr = GDL__VD(set1_pd)(lr), vbc1 = GDL__VD(set1_pd)(bc1);
        const gdl__vd vbc2 = GDL__VD(set1_pd)(bc2), veps = GDL__VD(set1_pd)(eps);
        const gdl__vd vwd = GDL__VD(set1_pd)(decoupled ? lr * weight_decay : weight_decay);
        for (; i + GDL__OPT_W <= hi; i += GDL__OPT_W) {
            gdl__vd gi = GDL__VD(cvtps_pd)(bg ? gdl__bf16v_load(bg + i) : GDL__VF(loadu_ps)(g + i));
            gdl__vd pi = GDL__VD(cvtps_pd)(GDL__VF(loadu_ps)(p + i)), md, den;
            gdl__vf mf, vv, pn;
            if (decoupled) pi = GDL__VD(sub_pd)(pi, GDL__VD(mul_pd)(vwd, pi));
            else gi = GDL__VD(add_pd)(gi, GDL__VD(mul_pd)(vwd, pi));
            mf = GDL__VD(cvtpd_ps)(GDL__VD(add_pd)(GDL__VD(mul_pd)(b1, GDL__VD(cvtps_pd)(GDL__VF(loadu_ps)(m + i))),
                                                   GDL__VD(mul_pd)(b1c, gi)));
            vv = GDL__VD(cvtpd_ps)(GDL__VD(add_pd)(GDL__VD(mul_pd)(b2, GDL__VD(cvtps_pd)(GDL__VF(loadu_ps)(v + i))),
                                                   GDL__VD(mul_pd)(GDL__VD(mul_pd)(b2c, gi), gi)));
            GDL__VF(storeu_ps)(m + i, mf);
            GDL__VF(storeu_ps)(v + i, vv);
            md = GDL__VD(mul_pd)(vlr, GDL__VD(div_pd)(GDL__VD(cvtps_pd)(mf), vbc1));
            den = GDL__VD(add_pd)(GDL__VD(sqrt_pd)(GDL__VD(div_pd)(GDL__VD(cvtps_pd)(vv), vbc2)), veps);
            pn = GDL__VD(cvtpd_ps)(GDL__VD(sub_pd)(pi, GDL__VD(div_pd)(md, den)));
            GDL__VF(storeu_ps)(p + i, pn);
            if (bp) gdl__bf16v_store(bp + i, pn);
        }
    }
#endif
/* one element's step, its gradient GI (a double): both loops below are this */
#define GDL__ADAM_ELEM(GI)                                                          \
    do {                                                                            \
        double gi = (GI), pi = p[i];                                                \
        gdl_real mi, vi;                                                            \
        if (decoupled) pi -= lr * weight_decay * pi;                                \
        else gi += weight_decay * pi;                                               \
        m[i] = mi = (gdl_real)(beta1 * m[i] + (1 - beta1) * gi);                    \
        v[i] = vi = (gdl_real)(beta2 * v[i] + (1 - beta2) * gi * gi);               \
        p[i] = (gdl_real)(pi - lr * (mi / bc1) / (sqrt(vi / bc2) + eps));           \
    } while (0)
    if (t.low) { /* on the f32 master, the gradient read from dtype low */
        const uint16_t *glow = (const uint16_t *)t.glow;
        uint16_t *plow = (uint16_t *)t.plow;
        const int low = t.low;
        for (; i < hi; i++) {
            GDL__ADAM_ELEM(gdl__opt_lowf(low, glow[i]));
            plow[i] = gdl__opt_round(low, (float)p[i]);
        }
        return;
    }
    for (; i < hi; i++) GDL__ADAM_ELEM(g[i]);
#undef GDL__ADAM_ELEM
}
static int gdl__cpu_adam_multi(const void *table, int decoupled) {
    return gdl__cpu_opt_run(table, gdl__adam_part, decoupled != 0);
}
/* The norm: the sum of squares in blocks of GDL__NORM_BLK elements of a gradient, each block in 8 running
   sums (lane l takes elements l, l+8, ...) added up in a fixed tree at its end, the blocks' sums then added
   in order. One chain of dependent adds over every parameter (0.8M in char_gpt) took milliseconds on one
   thread; this order is as fixed (the same bits for any thread count, on every path), runs 8 chains side by
   side and spreads the blocks over the threads. */
#define GDL__NORM_BLK 8192
typedef struct {
    int count;
    gdl_real *const *g;
    const int64_t *n, *first; /* first[i]: gradient i's first block; first[count]: the blocks */
    double *part;             /* a sum per block */
    double coef;
} gdl__norm_job;
static double gdl__sumsq_block(const gdl_real *x, int64_t n) {
    double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t j = 0;
    int l;
    for (; j + 8 <= n; j += 8)
        for (l = 0; l < 8; l++) s[l] += (double)x[j + l] * x[j + l];
    for (l = 0; j < n; j++, l++) s[l] += (double)x[j] * x[j];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}
static void gdl__norm_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__norm_job *b = (const gdl__norm_job *)a.ctx;
    int i = 0;
    int64_t k;
    for (k = lo; k < hi; k++) {
        int64_t off, len;
        while (b->first[i + 1] <= k) i++;
        off = (k - b->first[i]) * GDL__NORM_BLK;
        len = b->n[i] - off < GDL__NORM_BLK ? b->n[i] - off : GDL__NORM_BLK;
        if (a.op) { /* the scaling */
            gdl_real *x = b->g[i] + off;
            const gdl_real c = (gdl_real)b->coef;
            int64_t j;
            for (j = 0; j < len; j++) x[j] = c * x[j];
        } else {
            b->part[k] = gdl__sumsq_block(b->g[i] + off, len);
        }
    }
}
static int gdl__cpu_clip_grad_norm(int count, gdl_real *const *g, const int64_t *n, double max_norm, double *norm) {
    double total = 0, nrm, coef;
    int64_t *first = (int64_t *)GPUDL_MALLOC(sizeof(int64_t) * (size_t)(count + 1)), nb, k, work = 0;
    double *part;
    gdl__norm_job b;
    gdl__args a = gdl__args_none();
    int i;
    if (!first) goto oom;
    first[0] = 0;
    for (i = 0; i < count; i++) {
        first[i + 1] = first[i] + (n[i] + GDL__NORM_BLK - 1) / GDL__NORM_BLK;
        work += n[i];
    }
    nb = first[count];
    if (!(part = (double *)GPUDL_MALLOC(sizeof(double) * (size_t)(nb + 1)))) {
        GPUDL_FREE(first);
        goto oom;
    }
    b.count = count; b.g = g; b.n = n; b.first = first; b.part = part; b.coef = 0;
    a.ctx = &b;
    gdl__parallel_units(nb, work, gdl__norm_part, &a);
    for (k = 0; k < nb; k++) total += part[k];
    nrm = sqrt(total);
    coef = max_norm / (nrm + 1e-6);
    if (norm) *norm = nrm;
    if (!(coef >= 1)) { /* PyTorch multiplies by min(coef, 1); a NaN norm spreads NaN as there */
        b.coef = coef;
        a.op = 1;
        gdl__parallel_units(nb, work, gdl__norm_part, &a);
    }
    GPUDL_FREE(part);
    GPUDL_FREE(first);
    return 0;
oom:
    gdl__set_error("gdl_clip_grad_norm: out of host memory");
    return -1;
}
static void gdl__ema_lerp_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_real w = a.alpha;
    gdl_real *avg = a.out;
    const gdl_real *x = a.x;
    int64_t i;
    if (w < (gdl_real)0.5)
        for (i = lo; i < hi; i++) avg[i] = avg[i] + w * (x[i] - avg[i]);
    else
        for (i = lo; i < hi; i++) avg[i] = x[i] - (x[i] - avg[i]) * ((gdl_real)1 - w);
}
/* in parallel: one pass over every parameter after each step (an MLP's 537k: 2-5 % of its step alone) */
static int gdl__cpu_ema_lerp(int64_t n, gdl_real *avg, const gdl_real *x, gdl_real w) {
    gdl__args a = gdl__args_none();
    a.out = avg; a.x = x; a.alpha = w;
    gdl__parallel_loop(n, n, gdl__ema_lerp_part, &a);
    return 0;
}
