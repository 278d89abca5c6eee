/* ---- scaled dot-product attention (the backend entries attention / attention_backward) ----
   Flash-attention style on the CPU: a task takes one batch and a tile of GDL__ATTN_T query rows (forward,
   dq) or key rows (dk, dv) and walks the other side tile by tile, so nothing of L x S exists at any time:
   the forward keeps a running max m, sum l and weighted sum per query row (online softmax) and saves
   lse = m + log l; the backward recomputes each probability as exp(score - lse). Tiles are loaded into
   f32 buffers (gdl__lp_get), which is also the bf16/f16 path: arithmetic in gdl_real, one rounding on
   store. A task computes the same thing whatever thread runs it, so results do not depend on the thread
   count. */
#define GDL__ATTN_T 32

/* the term added to the score of key j in query row i (mask offset mb): 0, -inf, or the additive mask */
static gdl_real gdl__attn_bias(const gdl_attn_geom *g, const void *mask, int64_t mb, int64_t i, int64_t j) {
    int64_t off;
    if (g->causal && j > i) return (gdl_real)-INFINITY;
    if (!g->mask) return 0;
    off = mb + i * g->mrow + j * g->mcol;
    if (g->mask == 1) return ((const uint8_t *)mask)[off] ? (gdl_real)0 : (gdl_real)-INFINITY;
    if (g->mdt == GDL_F16) return (gdl_real)gdl_f16_to_f32(((const uint16_t *)mask)[off]);
    if (g->mdt == GDL_BF16) return (gdl_real)gdl_bf16_to_f32(((const uint16_t *)mask)[off]);
    return ((const gdl_real *)mask)[off];
}

static gdl_real gdl__attn_dot(const gdl_real *a, const gdl_real *b, int64_t n) {
    gdl_real s = 0;
    int64_t i;
    for (i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

typedef struct gdl__attn_ctx {
    gdl_dtype dt;
    const gdl_attn_geom *g;
    const void *q, *k, *v, *mask, *o, *go;
    void *out, *gq, *gk, *gv;
    const gdl_real *lse;
    gdl_real *lse_out, *delta;
    int *failed;
} gdl__attn_ctx;

#ifdef GDL__ATOMICS
#define GDL__ATTN_FAILED(c) gdl__atomic_store((c)->failed, 1, GDL__MO_RELAXED)
#else
#define GDL__ATTN_FAILED(c) (*(c)->failed = 1)
#endif

static int64_t gdl__attn_min(int64_t a, int64_t b) { return a < b ? a : b; }

/* dst[n] (dtype dt, from element off) += buf, summed in gdl_real and rounded once; tmp: n reals */
static void gdl__attn_acc(gdl_dtype dt, void *dst, int64_t off, int64_t n, const gdl_real *buf, gdl_real *tmp) {
    int64_t i;
    gdl__lp_get(dt, dst, off, 1, n, tmp);
    for (i = 0; i < n; i++) tmp[i] += buf[i];
    gdl__lp_put(dt, dst, off, n, tmp);
}

/* the forward over tasks (batch, query tile) in [lo, hi) */
static void gdl__attn_fwd_range(const void *p, int64_t lo, int64_t hi) {
    const gdl__attn_ctx *c = (const gdl__attn_ctx *)p;
    const gdl_attn_geom *g = c->g;
    const int64_t T = GDL__ATTN_T, E = g->E, Ev = g->Ev, L = g->L, S = g->S, nqt = (L + T - 1) / T;
    const gdl_real scale = (gdl_real)g->scale;
    gdl_real *qb = (gdl_real *)GPUDL_MALLOC(sizeof(gdl_real) * (size_t)(T * (2 * E + 2 * Ev + T) + 1)), *kb, *vb, *acc, *s;
    double m[GDL__ATTN_T], l[GDL__ATTN_T];
    int64_t idx, r, j0, j, e;
    if (!qb) {
        GDL__ATTN_FAILED(c);
        return;
    }
    kb = qb + T * E;
    vb = kb + T * E;
    acc = vb + T * Ev;
    s = acc + T * Ev;
    for (idx = lo; idx < hi; idx++) {
        const int64_t b = idx / nqt, i0 = (idx % nqt) * T, nq = gdl__attn_min(T, L - i0);
        const int64_t mb = g->mask ? gdl_attn_mask_base(g, b) : 0, send = g->causal ? gdl__attn_min(S, i0 + nq) : S;
        gdl__lp_get(c->dt, c->q, (b * L + i0) * E, 1, nq * E, qb);
        for (r = 0; r < nq; r++) {
            m[r] = -INFINITY;
            l[r] = 0;
        }
        memset(acc, 0, sizeof(gdl_real) * (size_t)(nq * Ev));
        for (j0 = 0; j0 < send; j0 += T) {
            const int64_t nk = gdl__attn_min(T, send - j0);
            gdl__lp_get(c->dt, c->k, (b * S + j0) * E, 1, nk * E, kb);
            gdl__lp_get(c->dt, c->v, (b * S + j0) * Ev, 1, nk * Ev, vb);
            for (r = 0; r < nq; r++) {
                gdl_real *sr = s + r * T, *ar = acc + r * Ev, mt = (gdl_real)-INFINITY;
                double mn, alpha;
                for (j = 0; j < nk; j++) {
                    sr[j] = scale * gdl__attn_dot(qb + r * E, kb + j * E, E) + gdl__attn_bias(g, c->mask, mb, i0 + r, j0 + j);
                    if (sr[j] > mt) mt = sr[j];
                }
                if (mt == (gdl_real)-INFINITY) continue; /* no key of this tile takes part */
                mn = m[r] > mt ? m[r] : mt;
                alpha = exp(m[r] - mn);
                l[r] *= alpha;
                if (alpha != 1)
                    for (e = 0; e < Ev; e++) ar[e] *= (gdl_real)alpha;
                for (j = 0; j < nk; j++) {
                    const gdl_real pj = (gdl_real)exp(sr[j] - mn);
                    const gdl_real *vj = vb + j * Ev;
                    l[r] += pj;
                    for (e = 0; e < Ev; e++) ar[e] += pj * vj[e];
                }
                m[r] = mn;
            }
        }
        for (r = 0; r < nq; r++) {
            const gdl_real inv = l[r] > 0 ? (gdl_real)(1 / l[r]) : 0;
            for (e = 0; e < Ev; e++) acc[r * Ev + e] *= inv;
            c->lse_out[b * L + i0 + r] = l[r] > 0 ? (gdl_real)(m[r] + log(l[r])) : (gdl_real)INFINITY;
        }
        gdl__lp_put(c->dt, c->out, (b * L + i0) * Ev, nq * Ev, acc);
    }
    GPUDL_FREE(qb);
}

/* backward, pass 1 over tasks (batch, query tile): delta = rowsum(gout * out), and dq */
static void gdl__attn_dq_range(const void *p, int64_t lo, int64_t hi) {
    const gdl__attn_ctx *c = (const gdl__attn_ctx *)p;
    const gdl_attn_geom *g = c->g;
    const int64_t T = GDL__ATTN_T, E = g->E, Ev = g->Ev, L = g->L, S = g->S, nqt = (L + T - 1) / T;
    const gdl_real scale = (gdl_real)g->scale;
    gdl_real *qb = (gdl_real *)GPUDL_MALLOC(sizeof(gdl_real) * (size_t)(T * (3 * E + 3 * Ev) + 1)), *gb, *ob, *kb, *vb, *dq;
    int64_t idx, r, j0, j, e;
    if (!qb) {
        GDL__ATTN_FAILED(c);
        return;
    }
    gb = qb + T * E;
    ob = gb + T * Ev;
    kb = ob + T * Ev;
    vb = kb + T * E;
    dq = vb + T * Ev;
    for (idx = lo; idx < hi; idx++) {
        const int64_t b = idx / nqt, i0 = (idx % nqt) * T, nq = gdl__attn_min(T, L - i0);
        const int64_t mb = g->mask ? gdl_attn_mask_base(g, b) : 0, send = g->causal ? gdl__attn_min(S, i0 + nq) : S;
        const gdl_real *lse = c->lse + b * L + i0;
        gdl_real *D = c->delta + b * L + i0;
        gdl__lp_get(c->dt, c->go, (b * L + i0) * Ev, 1, nq * Ev, gb);
        gdl__lp_get(c->dt, c->o, (b * L + i0) * Ev, 1, nq * Ev, ob);
        for (r = 0; r < nq; r++) D[r] = gdl__attn_dot(gb + r * Ev, ob + r * Ev, Ev);
        if (!c->gq) continue;
        gdl__lp_get(c->dt, c->q, (b * L + i0) * E, 1, nq * E, qb);
        memset(dq, 0, sizeof(gdl_real) * (size_t)(nq * E));
        for (j0 = 0; j0 < send; j0 += T) {
            const int64_t nk = gdl__attn_min(T, send - j0);
            gdl__lp_get(c->dt, c->k, (b * S + j0) * E, 1, nk * E, kb);
            gdl__lp_get(c->dt, c->v, (b * S + j0) * Ev, 1, nk * Ev, vb);
            for (r = 0; r < nq; r++)
                for (j = 0; j < nk; j++) {
                    const gdl_real sc = scale * gdl__attn_dot(qb + r * E, kb + j * E, E) +
                                        gdl__attn_bias(g, c->mask, mb, i0 + r, j0 + j);
                    const gdl_real pj = (gdl_real)exp(sc - lse[r]), *kj = kb + j * E;
                    gdl_real ds;
                    if (pj == 0) continue;
                    ds = scale * pj * (gdl__attn_dot(gb + r * Ev, vb + j * Ev, Ev) - D[r]);
                    for (e = 0; e < E; e++) dq[r * E + e] += ds * kj[e];
                }
        }
        gdl__attn_acc(c->dt, c->gq, (b * L + i0) * E, nq * E, dq, kb);
    }
    GPUDL_FREE(qb);
}

/* backward, pass 2 over tasks (batch, key tile): dk and dv, walking the query tiles that see the keys */
static void gdl__attn_dkv_range(const void *p, int64_t lo, int64_t hi) {
    const gdl__attn_ctx *c = (const gdl__attn_ctx *)p;
    const gdl_attn_geom *g = c->g;
    const int64_t T = GDL__ATTN_T, E = g->E, Ev = g->Ev, L = g->L, S = g->S, nkt = (S + T - 1) / T;
    const gdl_real scale = (gdl_real)g->scale;
    gdl_real *kb = (gdl_real *)GPUDL_MALLOC(sizeof(gdl_real) * (size_t)(T * (3 * E + 3 * Ev) + 1)), *vb, *qb, *gb, *dk, *dv;
    int64_t idx, r, i0, j, e;
    if (!kb) {
        GDL__ATTN_FAILED(c);
        return;
    }
    vb = kb + T * E;
    qb = vb + T * Ev;
    gb = qb + T * E;
    dk = gb + T * Ev;
    dv = dk + T * E;
    for (idx = lo; idx < hi; idx++) {
        const int64_t b = idx / nkt, j0 = (idx % nkt) * T, nk = gdl__attn_min(T, S - j0);
        const int64_t mb = g->mask ? gdl_attn_mask_base(g, b) : 0;
        gdl__lp_get(c->dt, c->k, (b * S + j0) * E, 1, nk * E, kb);
        gdl__lp_get(c->dt, c->v, (b * S + j0) * Ev, 1, nk * Ev, vb);
        memset(dk, 0, sizeof(gdl_real) * (size_t)(nk * E));
        memset(dv, 0, sizeof(gdl_real) * (size_t)(nk * Ev));
        for (i0 = g->causal ? j0 / T * T : 0; i0 < L; i0 += T) { /* causal: rows i >= j0 only */
            const int64_t nq = gdl__attn_min(T, L - i0);
            const gdl_real *lse = c->lse + b * L + i0, *D = c->delta + b * L + i0;
            gdl__lp_get(c->dt, c->q, (b * L + i0) * E, 1, nq * E, qb);
            gdl__lp_get(c->dt, c->go, (b * L + i0) * Ev, 1, nq * Ev, gb);
            for (j = 0; j < nk; j++)
                for (r = 0; r < nq; r++) {
                    const gdl_real sc = scale * gdl__attn_dot(qb + r * E, kb + j * E, E) +
                                        gdl__attn_bias(g, c->mask, mb, i0 + r, j0 + j);
                    const gdl_real pj = (gdl_real)exp(sc - lse[r]), *gr = gb + r * Ev, *qr = qb + r * E;
                    gdl_real ds;
                    if (pj == 0) continue;
                    for (e = 0; e < Ev; e++) dv[j * Ev + e] += pj * gr[e];
                    ds = scale * pj * (gdl__attn_dot(gr, vb + j * Ev, Ev) - D[r]);
                    for (e = 0; e < E; e++) dk[j * E + e] += ds * qr[e];
                }
        }
        if (c->gk) gdl__attn_acc(c->dt, c->gk, (b * S + j0) * E, nk * E, dk, qb);
        if (c->gv) gdl__attn_acc(c->dt, c->gv, (b * S + j0) * Ev, nk * Ev, dv, qb);
    }
    GPUDL_FREE(kb);
}

static int gdl__attn_oom(int failed) {
    if (!failed) return 0;
    gdl__set_error("gdl_scaled_dot_product_attention: out of host memory for the CPU kernel's tiles");
    return -1;
}

static int gdl__cpu_attention(gdl_dtype dt, const gdl_attn_geom *g, const void *q, const void *k, const void *v,
                              const void *mask, void *out, gdl_real *lse) {
    gdl__attn_ctx c;
    int failed = 0;
    memset(&c, 0, sizeof c);
    c.dt = dt; c.g = g; c.q = q; c.k = k; c.v = v; c.mask = mask; c.out = out; c.lse_out = lse; c.failed = &failed;
    gdl__parallel_for(g->B * ((g->L + GDL__ATTN_T - 1) / GDL__ATTN_T), g->B * g->L * g->S * (g->E + g->Ev),
                      gdl__attn_fwd_range, &c);
    return gdl__attn_oom(failed);
}

static int gdl__cpu_attention_backward(gdl_dtype dt, const gdl_attn_geom *g, const void *q, const void *k,
                                       const void *v, const void *mask, const void *out, const void *gout,
                                       const gdl_real *lse, gdl_real *delta, void *gq, void *gk, void *gv) {
    gdl__attn_ctx c;
    int failed = 0;
    const int64_t work = g->B * g->L * g->S * (g->E + g->Ev);
    memset(&c, 0, sizeof c);
    c.dt = dt; c.g = g; c.q = q; c.k = k; c.v = v; c.mask = mask; c.o = out; c.go = gout;
    c.lse = lse; c.delta = delta; c.gq = gq; c.gk = gk; c.gv = gv; c.failed = &failed;
    gdl__parallel_for(g->B * ((g->L + GDL__ATTN_T - 1) / GDL__ATTN_T), work, gdl__attn_dq_range, &c);
    if (!failed && (gk || gv))
        gdl__parallel_for(g->B * ((g->S + GDL__ATTN_T - 1) / GDL__ATTN_T), work, gdl__attn_dkv_range, &c);
    return gdl__attn_oom(failed);
}
