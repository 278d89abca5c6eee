/* ---- scaled dot-product attention (the backend entries attention / attention_backward) ----
   Flash-attention style on the CPU: a task takes one batch and a tile of GDL__ATTN_T query rows (forward,
   dq) or key rows (dk, dv) and walks the other side tile by tile, so nothing of L x S exists at any time:
   the forward keeps a running max m, sum l and weighted sum per query row (online softmax) and saves
   lse = m + log l; the backward recomputes each probability as exp(score - lse). Tiles are loaded into
   f32 buffers (gdl__lp_get), which is also the bf16/f16 path: arithmetic in gdl_real, one rounding on
   store. q, k, v and out are read and written at gdl_attn_geom's strides, row by row (one run where the
   rows touch), so packed heads need no permute copy. A task computes the same thing whatever thread runs
   it, so results do not depend on the thread count (nor on the ranges of tasks that a thread takes:
   gdl__parallel_units_for cuts them anywhere). */
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

#ifdef GPUDL_DOUBLE
#define GDL__ATTN_EXP exp
#else
#define GDL__ATTN_EXP expf
#endif

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

#if defined(__AVX2__) && (defined(__FMA__) || defined(_MSC_VER)) && !defined(GPUDL_DOUBLE)
#include <immintrin.h>
#define GDL__ATTN_AVX2 1 /* MSVC's /arch:AVX2 implies FMA but defines no __FMA__ */
#endif

/* d[0:w) = s[0:w) (+ d[0:w) with add), one row of a tile: a head's 32 reals, whose memcpy call cost more than
   the copy (a tenth of the backward) */
static void gdl__attn_row(gdl_real *GDL__RESTRICT d, const gdl_real *GDL__RESTRICT s, int64_t w, int add) {
    int64_t i = 0;
#ifdef GDL__ATTN_AVX2
    for (; i + 8 <= w; i += 8)
        _mm256_storeu_ps(d + i, add ? _mm256_add_ps(_mm256_loadu_ps(d + i), _mm256_loadu_ps(s + i)) : _mm256_loadu_ps(s + i));
#endif
    for (; i < w; i++) d[i] = add ? d[i] + s[i] : s[i];
}

/* n rows of w elements of src (dtype dt) from element off, row apart (gdl_attn_geom's qrow ...), into buf
   as n rows of w reals: one run when the rows touch */
static void gdl__attn_get(gdl_dtype dt, const void *src, int64_t off, int64_t row, int64_t n, int64_t w, gdl_real *buf) {
    int64_t r;
    if (dt == GDL_F32) { /* a copy (gdl__lp_get's strided loop is several times slower) */
        if (row == w)
            memcpy(buf, (const gdl_real *)src + off, sizeof(gdl_real) * (size_t)(n * w));
        else
            for (r = 0; r < n; r++) gdl__attn_row(buf + r * w, (const gdl_real *)src + off + r * row, w, 0);
        return;
    }
    if (row == w) {
        gdl__lp_get(dt, src, off, 1, n * w, buf);
        return;
    }
    for (r = 0; r < n; r++) gdl__lp_get(dt, src, off + r * row, 1, w, buf + r * w);
}

/* the n rows of w reals in buf stored to dst (dtype dt, rounded once) at element off, row apart */
static void gdl__attn_put(gdl_dtype dt, void *dst, int64_t off, int64_t row, int64_t n, int64_t w, const gdl_real *buf) {
    int64_t r;
    if (dt == GDL_F32 && row != w) {
        for (r = 0; r < n; r++) gdl__attn_row((gdl_real *)dst + off + r * row, buf + r * w, w, 0);
        return;
    }
    if (row == w) {
        gdl__lp_put(dt, dst, off, n * w, buf);
        return;
    }
    for (r = 0; r < n; r++) gdl__lp_put(dt, dst, off + r * row, w, buf + r * w);
}

/* the n rows of w of dst (as gdl__attn_put's) += buf, summed in gdl_real and rounded once; tmp: n*w reals */
static void gdl__attn_acc(gdl_dtype dt, void *dst, int64_t off, int64_t row, int64_t n, int64_t w, const gdl_real *buf,
                          gdl_real *tmp) {
    int64_t i;
    if (dt == GDL_F32) { /* dst + buf in place: the same sum */
        for (i = 0; i < n; i++) gdl__attn_row((gdl_real *)dst + off + i * row, buf + i * w, w, 1);
        return;
    }
    gdl__attn_get(dt, dst, off, row, n, w, tmp);
    for (i = 0; i < n * w; i++) tmp[i] += buf[i];
    gdl__attn_put(dt, dst, off, row, n, w, tmp);
}

/* at[e*T + j] = a[j*D + e]: a tile of n rows turned so that a row of scores is an axpy per element;
   columns n..T-1 are 0, so the loops below run over whole tiles (a fixed trip count that gcc's -O2
   vectorises) */
static void gdl__attn_turn(const gdl_real *a, int64_t n, int64_t D, gdl_real *at) {
    int64_t j, e;
    for (e = 0; e < D; e++) {
        for (j = 0; j < n; j++) at[e * GDL__ATTN_T + j] = a[j * D + e];
        for (; j < GDL__ATTN_T; j++) at[e * GDL__ATTN_T + j] = 0;
    }
}

/* a + x y rounded as gdl__attn_mm rounds it (one rounding on the AVX2 path), so that delta = rowsum(dO * O)
   cancels dP = dO V^T exactly where O is V's row (a query that one key takes part in: dS is then 0, not
   rounding noise) */
#ifdef GDL__ATTN_AVX2
#define GDL__ATTN_MADD(x, y, a) fmaf(x, y, a)
#else
#define GDL__ATTN_MADD(x, y, a) ((a) + (x) * (y))
#endif

/* c[r*ldc + j] += sum over p < k of A(r,p) b[p*ldb + j] (r < m, j < n), A(r,p) = a[r*ars + p*acs]: every
   product of the tiles (q k^T, P V, dS K, P^T dO, dS^T Q; ars 1 reads a turned). Each element sums over p
   in order on every path. The AVX2 path keeps a block of 4 rows x 16 columns in registers (a plain loop
   keeps its sums in memory: a load and a store per multiply-add), AVX-512 4 x 32, and the rows past the
   last multiple of 4 one at a time; columns past the last multiple of 16 run the plain loop. */
static void gdl__attn_mm_plain(int64_t r0, int64_t r1, int64_t j0, int64_t j1, int64_t k, const gdl_real *a, int64_t ars,
                               int64_t acs, const gdl_real *b, int64_t ldb, gdl_real *c, int64_t ldc) {
    int64_t r, p, j;
    if (j1 <= j0) return; /* no columns left: without this, the loops over r and p read a for nothing */
    for (r = r0; r < r1; r++)
        for (p = 0; p < k; p++) {
            const gdl_real x = a[r * ars + p * acs], *bp = b + p * ldb;
            gdl_real *cr = c + r * ldc;
            for (j = j0; j < j1; j++) cr[j] += x * bp[j];
        }
}

/* gdl__attn_mm's block of 4 rows x 2W columns at (r, j) in registers of W floats: V the vector type, P the
   intrinsics' prefix, SET1(p) *p in every lane. One definition for the 16-column (AVX2) and the 32-column
   (AVX-512) block: the same fused multiply-add per element and step, W columns per instruction. */
#define GDL__ATTN_MM_BLOCK(name, V, P, W, SET1)                                                                     \
    static void name(int64_t r, int64_t j, int64_t k, const gdl_real *a, int64_t ars, int64_t acs, const gdl_real *b, \
                     int64_t ldb, gdl_real *c, int64_t ldc) {                                                        \
        gdl_real *c0 = c + r * ldc + j, *c1 = c0 + ldc, *c2 = c1 + ldc, *c3 = c2 + ldc;                             \
        const gdl_real *a0 = a + r * ars;                                                                            \
        V s00 = P##_loadu_ps(c0), s01 = P##_loadu_ps(c0 + W), s10 = P##_loadu_ps(c1);                               \
        V s11 = P##_loadu_ps(c1 + W), s20 = P##_loadu_ps(c2), s21 = P##_loadu_ps(c2 + W);                           \
        V s30 = P##_loadu_ps(c3), s31 = P##_loadu_ps(c3 + W);                                                       \
        int64_t p;                                                                                                   \
        for (p = 0; p < k; p++) {                                                                                    \
            const gdl_real *ap = a0 + p * acs;                                                                       \
            const V b0 = P##_loadu_ps(b + p * ldb + j), b1 = P##_loadu_ps(b + p * ldb + j + W);                     \
            V x = SET1(ap);                                                                                          \
            s00 = P##_fmadd_ps(x, b0, s00);                                                                          \
            s01 = P##_fmadd_ps(x, b1, s01);                                                                          \
            x = SET1(ap + ars);                                                                                      \
            s10 = P##_fmadd_ps(x, b0, s10);                                                                          \
            s11 = P##_fmadd_ps(x, b1, s11);                                                                          \
            x = SET1(ap + 2 * ars);                                                                                  \
            s20 = P##_fmadd_ps(x, b0, s20);                                                                          \
            s21 = P##_fmadd_ps(x, b1, s21);                                                                          \
            x = SET1(ap + 3 * ars);                                                                                  \
            s30 = P##_fmadd_ps(x, b0, s30);                                                                          \
            s31 = P##_fmadd_ps(x, b1, s31);                                                                          \
        }                                                                                                            \
        P##_storeu_ps(c0, s00);                                                                                      \
        P##_storeu_ps(c0 + W, s01);                                                                                  \
        P##_storeu_ps(c1, s10);                                                                                      \
        P##_storeu_ps(c1 + W, s11);                                                                                  \
        P##_storeu_ps(c2, s20);                                                                                      \
        P##_storeu_ps(c2 + W, s21);                                                                                  \
        P##_storeu_ps(c3, s30);                                                                                      \
        P##_storeu_ps(c3 + W, s31);                                                                                  \
    }
/* ... and of 1 row x 2W columns: the rows past the last multiple of 4 (a sequence of 21 has one), each
   element the same fused multiply-add per step as in the 4-row block (the plain loop rounds the product
   and the sum apart, and with a load and a store per multiply-add it took as long as all the other rows) */
#define GDL__ATTN_MM_ROW(name, V, P, W, SET1)                                                                       \
    static void name(int64_t r, int64_t j, int64_t k, const gdl_real *a, int64_t ars, int64_t acs, const gdl_real *b, \
                     int64_t ldb, gdl_real *c, int64_t ldc) {                                                        \
        gdl_real *c0 = c + r * ldc + j;                                                                              \
        const gdl_real *a0 = a + r * ars;                                                                            \
        V s00 = P##_loadu_ps(c0), s01 = P##_loadu_ps(c0 + W);                                                       \
        int64_t p;                                                                                                   \
        for (p = 0; p < k; p++) {                                                                                    \
            const V x = SET1(a0 + p * acs);                                                                          \
            s00 = P##_fmadd_ps(x, P##_loadu_ps(b + p * ldb + j), s00);                                              \
            s01 = P##_fmadd_ps(x, P##_loadu_ps(b + p * ldb + j + W), s01);                                          \
        }                                                                                                            \
        P##_storeu_ps(c0, s00);                                                                                      \
        P##_storeu_ps(c0 + W, s01);                                                                                  \
    }
#ifdef GDL__ATTN_AVX2
GDL__ATTN_MM_BLOCK(gdl__attn_mm_4x16, __m256, _mm256, 8, _mm256_broadcast_ss)
GDL__ATTN_MM_ROW(gdl__attn_mm_1x16, __m256, _mm256, 8, _mm256_broadcast_ss)
#endif
#if defined(GDL__ATTN_AVX2) && defined(__AVX512F__)
#define GDL__ATTN_AVX512 1
#define GDL__ATTN_SET1_512(p) _mm512_set1_ps(*(p))
GDL__ATTN_MM_BLOCK(gdl__attn_mm_4x32, __m512, _mm512, 16, GDL__ATTN_SET1_512)
GDL__ATTN_MM_ROW(gdl__attn_mm_1x32, __m512, _mm512, 16, GDL__ATTN_SET1_512)
#endif

static void gdl__attn_mm(int64_t m, int64_t n, int64_t k, const gdl_real *a, int64_t ars, int64_t acs, const gdl_real *b,
                         int64_t ldb, gdl_real *c, int64_t ldc) {
    int64_t m4 = 0, n16 = 0;
#ifdef GDL__ATTN_AVX2
    int64_t r, j, n32 = 0;
    m4 = m / 4 * 4;
    n16 = n / 16 * 16;
#ifdef GDL__ATTN_AVX512 /* columns [0, n32) in blocks of 32, the rest of [0, n16) in blocks of 16 */
    n32 = n / 32 * 32;
    for (r = 0; r < m4; r += 4)
        for (j = 0; j < n32; j += 32) gdl__attn_mm_4x32(r, j, k, a, ars, acs, b, ldb, c, ldc);
    for (r = m4; r < m; r++)
        for (j = 0; j < n32; j += 32) gdl__attn_mm_1x32(r, j, k, a, ars, acs, b, ldb, c, ldc);
#endif
    for (r = 0; r < m4; r += 4)
        for (j = n32; j < n16; j += 16) gdl__attn_mm_4x16(r, j, k, a, ars, acs, b, ldb, c, ldc);
    for (r = m4; r < m; r++)
        for (j = n32; j < n16; j += 16) gdl__attn_mm_1x16(r, j, k, a, ars, acs, b, ldb, c, ldc);
    m4 = m; /* every row's columns [0, n16) done */
#endif
    gdl__attn_mm_plain(0, m4, n16, n, k, a, ars, acs, b, ldb, c, ldc);
    gdl__attn_mm_plain(m4, m, 0, n, k, a, ars, acs, b, ldb, c, ldc);
}

/* out[r*T + j] = a_r . b_j for r < na and j < nb rounded up to 16 (a: rows of D; bt: b turned, zero past its
   nb rows); the rest of each row of T is 0 (and is not read: a tile of 16 keys, a sequence of 16, computes
   half the columns) */
static void gdl__attn_rowdots(const gdl_real *a, int64_t na, const gdl_real *bt, int64_t nb, int64_t D,
                             gdl_real *out) {
    const int64_t n = (nb + 15) / 16 * 16 < GDL__ATTN_T ? (nb + 15) / 16 * 16 : GDL__ATTN_T;
    memset(out, 0, sizeof(gdl_real) * (size_t)(na * GDL__ATTN_T));
    gdl__attn_mm(na, n, D, a, D, 1, bt, GDL__ATTN_T, out, GDL__ATTN_T);
}

/* a tile of scores: s = scale * q k^T plus the causal / mask terms (query rows from i0, keys from j0) */
static void gdl__attn_scores(const gdl__attn_ctx *c, const gdl_real *qb, int64_t nq, const gdl_real *kt, int64_t nk,
                             int64_t i0, int64_t j0, int64_t mb, gdl_real *s) {
    const gdl_attn_geom *g = c->g;
    const gdl_real scale = (gdl_real)g->scale;
    int64_t r, j;
    gdl__attn_rowdots(qb, nq, kt, nk, g->E, s);
    for (r = 0; r < nq; r++) {
        gdl_real *sr = s + r * GDL__ATTN_T;
        for (j = 0; j < nk; j++) sr[j] *= scale;
        if (g->mask)
            for (j = 0; j < nk; j++) sr[j] += gdl__attn_bias(g, c->mask, mb, i0 + r, j0 + j);
        else if (g->causal) /* keys j > i take no part (gdl__attn_bias's first case, without a call per score) */
            for (j = i0 + r - j0 + 1 < 0 ? 0 : i0 + r - j0 + 1; j < nk; j++) sr[j] = (gdl_real)-INFINITY;
    }
}

/* the probabilities from the saved log-sum-exps, in place; then ds = scale * p * (dp - delta) in dp */
static void gdl__attn_ds(const gdl__attn_ctx *c, gdl_real *s, gdl_real *dp, int64_t nq, int64_t nk, const gdl_real *lse,
                         const gdl_real *D) {
    const gdl_real scale = (gdl_real)c->g->scale;
    int64_t r, j;
    for (r = 0; r < nq; r++) {
        gdl_real *sr = s + r * GDL__ATTN_T, *dr = dp + r * GDL__ATTN_T;
        for (j = 0; j < nk; j++) {
            sr[j] = GDL__ATTN_EXP(sr[j] - lse[r]); /* lse +inf (a row no key takes part in): 0 */
            dr[j] = scale * sr[j] * (dr[j] - D[r]);
        }
    }
}

/* delta = rowsum(dO * O) of the nq rows at element offset off of out (gb gets dO's rows, ob O's) */
static void gdl__attn_delta(const gdl__attn_ctx *c, int64_t off, int64_t nq, gdl_real *gb, gdl_real *ob, gdl_real *D) {
    const int64_t Ev = c->g->Ev;
    int64_t r, e;
    gdl__attn_get(c->dt, c->go, off, c->g->orow, nq, Ev, gb);
    gdl__attn_get(c->dt, c->o, off, c->g->orow, nq, Ev, ob);
    for (r = 0; r < nq; r++) {
        gdl_real d = 0;
        for (e = 0; e < Ev; e++) d = GDL__ATTN_MADD(gb[r * Ev + e], ob[r * Ev + e], d);
        D[r] = d;
    }
}

/* one (query tile, key tile) pair of the backward: P into s from the scores and the saved log-sum-exps,
   then dS into dp (dO V^T first); lse and D are the query tile's */
static void gdl__attn_pair(const gdl__attn_ctx *c, const gdl_real *qb, const gdl_real *gb, int64_t nq, const gdl_real *kt,
                           const gdl_real *vt, int64_t nk, int64_t i0, int64_t j0, int64_t mb, const gdl_real *lse,
                           const gdl_real *D, gdl_real *s, gdl_real *dp) {
    gdl__attn_scores(c, qb, nq, kt, nk, i0, j0, mb, s);
    gdl__attn_rowdots(gb, nq, vt, nk, c->g->Ev, dp);
    gdl__attn_ds(c, s, dp, nq, nk, lse, D);
}

/* the forward over tasks (batch, query tile) in [lo, hi) */
static void gdl__attn_fwd_range(const void *p, int64_t lo, int64_t hi) {
    const gdl__attn_ctx *c = (const gdl__attn_ctx *)p;
    const gdl_attn_geom *g = c->g;
    const int64_t T = GDL__ATTN_T, E = g->E, Ev = g->Ev, L = g->L, S = g->S, nqt = (L + T - 1) / T;
    gdl_real *qb = (gdl_real *)GPUDL_MALLOC(sizeof(gdl_real) * (size_t)(T * (3 * E + 2 * Ev + T) + 1)), *kb, *kt, *vb, *acc, *s;
    double m[GDL__ATTN_T], l[GDL__ATTN_T];
    int64_t idx, r, j0, j, e;
    if (!qb) {
        GDL__ATTN_FAILED(c);
        return;
    }
    kb = qb + T * E;
    kt = kb + T * E;
    vb = kt + T * E;
    acc = vb + T * Ev;
    s = acc + T * Ev;
    for (idx = lo; idx < hi; idx++) {
        const int64_t b = idx / nqt, i0 = (idx % nqt) * T, nq = gdl__attn_min(T, L - i0);
        const int64_t mb = g->mask ? gdl_attn_mask_base(g, b) : 0, send = g->causal ? gdl__attn_min(S, i0 + nq) : S;
        const int64_t ko = gdl_attn_base(g, b, g->kstr), vo = gdl_attn_base(g, b, g->vstr);
        gdl__attn_get(c->dt, c->q, gdl_attn_base(g, b, g->qstr) + i0 * g->qrow, g->qrow, nq, E, qb);
        for (r = 0; r < nq; r++) {
            m[r] = -INFINITY;
            l[r] = 0;
        }
        memset(acc, 0, sizeof(gdl_real) * (size_t)(nq * Ev));
        for (j0 = 0; j0 < send; j0 += T) {
            const int64_t nk = gdl__attn_min(T, send - j0);
            gdl__attn_get(c->dt, c->k, ko + j0 * g->krow, g->krow, nk, E, kb);
            gdl__attn_get(c->dt, c->v, vo + j0 * g->vrow, g->vrow, nk, Ev, vb);
            gdl__attn_turn(kb, nk, E, kt);
            gdl__attn_scores(c, qb, nq, kt, nk, i0, j0, mb, s);
            for (r = 0; r < nq; r++) { /* the scores become probabilities (for this tile's max), acc rescaled */
                gdl_real *sr = s + r * T, *ar = acc + r * Ev, mt = (gdl_real)-INFINITY;
                double mn, alpha;
                for (j = 0; j < nk; j++)
                    if (sr[j] > mt) mt = sr[j];
                if (mt == (gdl_real)-INFINITY) { /* no key of this tile takes part */
                    memset(sr, 0, sizeof(gdl_real) * (size_t)nk);
                    continue;
                }
                mn = m[r] > mt ? m[r] : mt;
                alpha = exp(m[r] - mn);
                l[r] *= alpha;
                if (alpha != 1)
                    for (e = 0; e < Ev; e++) ar[e] *= (gdl_real)alpha;
                for (j = 0; j < nk; j++) {
                    sr[j] = GDL__ATTN_EXP(sr[j] - (gdl_real)mn);
                    l[r] += sr[j];
                }
                m[r] = mn;
            }
            gdl__attn_mm(nq, Ev, nk, s, T, 1, vb, Ev, acc, Ev); /* acc += P V */
        }
        for (r = 0; r < nq; r++) {
            const gdl_real inv = l[r] > 0 ? (gdl_real)(1 / l[r]) : 0;
            for (e = 0; e < Ev; e++) acc[r * Ev + e] *= inv;
            c->lse_out[b * L + i0 + r] = l[r] > 0 ? (gdl_real)(m[r] + log(l[r])) : (gdl_real)INFINITY;
        }
        gdl__attn_put(c->dt, c->out, gdl_attn_base(g, b, g->ostr) + i0 * g->orow, g->orow, nq, Ev, acc);
    }
    GPUDL_FREE(qb);
}

/* the backward's tile buffers, one allocation per task range: the K and V tiles and their transposes, a Q
   and a dO tile, the dK and dV sums, a tile pair's P (s) and dS (dp), then `extra` reals (the one-pass
   dq); pass 1 reads O's rows into vb and sums dq in dk */
typedef struct gdl__attn_bw_bufs {
    gdl_real *kb, *kt, *vb, *vt, *qb, *gb, *dk, *dv, *s, *dp, *extra;
} gdl__attn_bw_bufs;

static gdl_real *gdl__attn_bw_alloc(const gdl__attn_ctx *c, int64_t extra, gdl__attn_bw_bufs *w) {
    const int64_t T = GDL__ATTN_T, E = c->g->E, Ev = c->g->Ev;
    gdl_real *all = (gdl_real *)GPUDL_MALLOC(sizeof(gdl_real) * (size_t)(T * (4 * E + 4 * Ev + 2 * T) + extra + 1));
    if (!all) {
        GDL__ATTN_FAILED(c);
        return NULL;
    }
    w->kb = all;
    w->kt = w->kb + T * E;
    w->vb = w->kt + T * E;
    w->vt = w->vb + T * Ev;
    w->qb = w->vt + T * Ev;
    w->gb = w->qb + T * E;
    w->dk = w->gb + T * Ev;
    w->dv = w->dk + T * E;
    w->s = w->dv + T * Ev;
    w->dp = w->s + T * T;
    w->extra = w->dp + T * T;
    return all;
}

/* backward, pass 1 over tasks (batch, query tile): delta = rowsum(gout * out), and dq += ds k */
static void gdl__attn_dq_range(const void *p, int64_t lo, int64_t hi) {
    const gdl__attn_ctx *c = (const gdl__attn_ctx *)p;
    const gdl_attn_geom *g = c->g;
    const int64_t T = GDL__ATTN_T, E = g->E, Ev = g->Ev, L = g->L, S = g->S, nqt = (L + T - 1) / T;
    gdl__attn_bw_bufs w;
    gdl_real *all = gdl__attn_bw_alloc(c, 0, &w);
    int64_t idx, j0;
    if (!all) return;
    for (idx = lo; idx < hi; idx++) {
        const int64_t b = idx / nqt, i0 = (idx % nqt) * T, nq = gdl__attn_min(T, L - i0);
        const int64_t mb = g->mask ? gdl_attn_mask_base(g, b) : 0, send = g->causal ? gdl__attn_min(S, i0 + nq) : S;
        const int64_t qo = gdl_attn_base(g, b, g->qstr) + i0 * g->qrow, oo = gdl_attn_base(g, b, g->ostr) + i0 * g->orow;
        const int64_t ko = gdl_attn_base(g, b, g->kstr), vo = gdl_attn_base(g, b, g->vstr);
        const gdl_real *lse = c->lse + b * L + i0;
        gdl_real *D = c->delta + b * L + i0;
        gdl__attn_delta(c, oo, nq, w.gb, w.vb, D);
        if (!c->gq) continue;
        gdl__attn_get(c->dt, c->q, qo, g->qrow, nq, E, w.qb);
        memset(w.dk, 0, sizeof(gdl_real) * (size_t)(nq * E));
        for (j0 = 0; j0 < send; j0 += T) {
            const int64_t nk = gdl__attn_min(T, send - j0);
            gdl__attn_get(c->dt, c->k, ko + j0 * g->krow, g->krow, nk, E, w.kb);
            gdl__attn_get(c->dt, c->v, vo + j0 * g->vrow, g->vrow, nk, Ev, w.vb);
            gdl__attn_turn(w.kb, nk, E, w.kt);
            gdl__attn_turn(w.vb, nk, Ev, w.vt);
            gdl__attn_pair(c, w.qb, w.gb, nq, w.kt, w.vt, nk, i0, j0, mb, lse, D, w.s, w.dp);
            gdl__attn_mm(nq, E, nk, w.dp, T, 1, w.kb, E, w.dk, E); /* dq += dS K */
        }
        gdl__attn_acc(c->dt, c->gq, qo, g->qrow, nq, E, w.dk, w.kb);
    }
    GPUDL_FREE(all);
}

/* the key tile at j0 of key/value entry kb: dk and dv over the query tiles that see its keys (in ascending
   order; grouped-query: over the group's query heads in turn), added into gk and gv; with dq (the entry's L x E
   sums; no group), dq += dS K as well */
static void gdl__attn_key_tile(const gdl__attn_ctx *c, const gdl__attn_bw_bufs *w, int64_t kb, int64_t j0, gdl_real *dq) {
    const gdl_attn_geom *g = c->g;
    const int64_t T = GDL__ATTN_T, E = g->E, Ev = g->Ev, L = g->L, nk = gdl__attn_min(T, g->S - j0);
    const int64_t G = g->group > 1 ? g->group : 1;
    const int64_t ko = gdl_attn_base(g, kb * G, g->kstr) + j0 * g->krow, vo = gdl_attn_base(g, kb * G, g->vstr) + j0 * g->vrow;
    int64_t i0, b;
    gdl__attn_get(c->dt, c->k, ko, g->krow, nk, E, w->kb);
    gdl__attn_get(c->dt, c->v, vo, g->vrow, nk, Ev, w->vb);
    gdl__attn_turn(w->kb, nk, E, w->kt);
    gdl__attn_turn(w->vb, nk, Ev, w->vt);
    memset(w->dk, 0, sizeof(gdl_real) * (size_t)(nk * E));
    memset(w->dv, 0, sizeof(gdl_real) * (size_t)(nk * Ev));
    for (b = kb * G; b < (kb + 1) * G; b++) {
        const int64_t mb = g->mask ? gdl_attn_mask_base(g, b) : 0, qo = gdl_attn_base(g, b, g->qstr);
        const int64_t oo = gdl_attn_base(g, b, g->ostr);
        for (i0 = g->causal ? j0 / T * T : 0; i0 < L; i0 += T) { /* causal: rows i >= j0 only */
            const int64_t nq = gdl__attn_min(T, L - i0);
            gdl__attn_get(c->dt, c->q, qo + i0 * g->qrow, g->qrow, nq, E, w->qb);
            gdl__attn_get(c->dt, c->go, oo + i0 * g->orow, g->orow, nq, Ev, w->gb);
            gdl__attn_pair(c, w->qb, w->gb, nq, w->kt, w->vt, nk, i0, j0, mb, c->lse + b * L + i0,
                           c->delta + b * L + i0, w->s, w->dp);
            if (c->gv) gdl__attn_mm(nk, Ev, nq, w->s, 1, T, w->gb, Ev, w->dv, Ev); /* dv += P^T dO */
            if (c->gk) gdl__attn_mm(nk, E, nq, w->dp, 1, T, w->qb, E, w->dk, E);   /* dk += dS^T Q */
            if (dq) gdl__attn_mm(nq, E, nk, w->dp, T, 1, w->kb, E, dq + i0 * E, E); /* dq += dS K */
        }
    }
    if (c->gk) gdl__attn_acc(c->dt, c->gk, ko, g->krow, nk, E, w->dk, w->qb);
    if (c->gv) gdl__attn_acc(c->dt, c->gv, vo, g->vrow, nk, Ev, w->dv, w->qb);
}

/* backward, pass 2 over tasks (key/value entry, key tile): dk and dv, walking the query tiles that see the keys */
static void gdl__attn_dkv_range(const void *p, int64_t lo, int64_t hi) {
    const gdl__attn_ctx *c = (const gdl__attn_ctx *)p;
    const int64_t T = GDL__ATTN_T, nkt = (c->g->S + T - 1) / T;
    gdl__attn_bw_bufs w;
    gdl_real *all = gdl__attn_bw_alloc(c, 0, &w);
    int64_t idx;
    if (!all) return;
    for (idx = lo; idx < hi; idx++) gdl__attn_key_tile(c, &w, idx / nkt, (idx % nkt) * T, NULL);
    GPUDL_FREE(all);
}

/* backward in one pass over tasks (batch): per key tile, the query tiles that see it, each pair's
   probabilities and dS computed once for dq, dk and dv (the two passes above compute them twice). Every
   sum runs in the passes' order: dk and dv of a key tile over the query tiles, dq of a query tile over the
   key tiles, both ascending, so the results are the passes' bits. dq of the whole batch entry stays in
   the task's buffer (L x E) until its last key tile. Used when there are batch entries enough to share
   among the threads. */
static void gdl__attn_bw_range(const void *p, int64_t lo, int64_t hi) {
    const gdl__attn_ctx *c = (const gdl__attn_ctx *)p;
    const gdl_attn_geom *g = c->g;
    const int64_t T = GDL__ATTN_T, E = g->E, L = g->L;
    gdl__attn_bw_bufs w;
    gdl_real *all = gdl__attn_bw_alloc(c, L * E, &w), *dq;
    int64_t b, i0, j0;
    if (!all) return;
    dq = c->gq ? w.extra : NULL;
    for (b = lo; b < hi; b++) {
        const int64_t oo = gdl_attn_base(g, b, g->ostr), qo = gdl_attn_base(g, b, g->qstr);
        for (i0 = 0; i0 < L; i0 += T) /* delta, as pass 1 */
            gdl__attn_delta(c, oo + i0 * g->orow, gdl__attn_min(T, L - i0), w.gb, w.vb, c->delta + b * L + i0);
        if (dq) memset(dq, 0, sizeof(gdl_real) * (size_t)(L * E));
        for (j0 = 0; j0 < g->S; j0 += T) gdl__attn_key_tile(c, &w, b, j0, dq);
        for (i0 = 0; dq && i0 < L; i0 += T)
            gdl__attn_acc(c->dt, c->gq, qo + i0 * g->qrow, g->qrow, gdl__attn_min(T, L - i0), E, dq + i0 * E, w.qb);
    }
    GPUDL_FREE(all);
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
    gdl__parallel_units_for(g->B * ((g->L + GDL__ATTN_T - 1) / GDL__ATTN_T), g->B * g->L * g->S * (g->E + g->Ev),
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
    const int64_t G = g->group > 1 ? g->group : 1; /* grouped-query: pass 2's tasks take the group's query heads */
    if (gq && (gk || gv) && G == 1 && g->B >= 4 * gdl_get_num_threads()) { /* the same bits as the passes below */
        gdl__parallel_units_for(g->B, work, gdl__attn_bw_range, &c);
        return gdl__attn_oom(failed);
    }
    gdl__parallel_units_for(g->B * ((g->L + GDL__ATTN_T - 1) / GDL__ATTN_T), work, gdl__attn_dq_range, &c);
    if (!failed && (gk || gv))
        gdl__parallel_units_for(g->B / G * ((g->S + GDL__ATTN_T - 1) / GDL__ATTN_T), work, gdl__attn_dkv_range, &c);
    return gdl__attn_oom(failed);
}
