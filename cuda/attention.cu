// ----------------------------------------------------------------------------
// scaled dot-product attention: fused forward and backward, flash-attention style
//
// A block takes one batch and a tile of `tile` query rows (forward, dq) or key rows (dk, dv), one thread
// per row, and walks the other side in tiles staged in shared memory, so nothing of L x S is stored:
// the forward keeps a running max m, sum l and weighted sum of V per query row (online softmax) and
// saves lse = m + log l; the backward recomputes each probability as exp(score - lse). The backward is
// two kernels without atomics: dq (which also writes delta = rowsum(gout * out)), then dk and dv (which
// read delta). Storage in T (float, __half, __nv_bfloat16), arithmetic in f32, one rounding on store.
// The tile shrinks as the head grows, so a block's rows and tiles fit GDL__CU_ATTN_SMEM floats. q, k, v
// and out (gout with it) are addressed at gdl_attn_geom's strides: packed heads are read in place.

#define GDL__CU_ATTN_ROWS 1024 // tile * max(E, Ev)
#define GDL__CU_ATTN_SMEM (6 * GDL__CU_ATTN_ROWS + 64)

static int gdl__cu_attn_tile(const gdl_attn_geom *g) {
    int64_t d = g->E > g->Ev ? g->E : g->Ev;
    int t = 32;
    while (t > 4 && (int64_t)t * d > GDL__CU_ATTN_ROWS) t /= 2;
    return t;
}

// the term added to the score of key j in query row i (mask offset mb): 0, -inf, or the additive mask
__device__ __forceinline__ float gdl__cu_attn_bias(const gdl_attn_geom &g, const void *mask, int64_t mb, int64_t i,
                                                   int64_t j) {
    if (g.causal && j > i) return -GDL__CU_INF;
    if (!g.mask) return 0.0f;
    int64_t off = mb + i * g.mrow + j * g.mcol;
    if (g.mask == 1) return ((const uint8_t *)mask)[off] ? 0.0f : -GDL__CU_INF;
    if (g.mdt == GDL_F16) return gdl__f16_to_f32(((const uint16_t *)mask)[off]);
    if (g.mdt == GDL_BF16) return gdl__bf16_to_f32(((const uint16_t *)mask)[off]);
    return ((const float *)mask)[off];
}

__device__ __forceinline__ float gdl__cu_attn_dot(const float *a, const float *b, int64_t n) {
    float s = 0;
    for (int64_t e = 0; e < n; e++) s += a[e] * b[e];
    return s;
}

template <typename T>
__global__ void gdl__k_attn_fwd(gdl_attn_geom g, int tile, const T *q, const T *k, const T *v, const void *mask, T *out,
                                float *lse) {
    __shared__ float sm[GDL__CU_ATTN_SMEM];
    const int64_t E = g.E, Ev = g.Ev, L = g.L, S = g.S, nqt = (L + tile - 1) / tile;
    const int r = threadIdx.x;
    const float scale = (float)g.scale;
    float *ks = sm, *vs = ks + tile * E, *qr = vs + tile * Ev + r * E, *ar = sm + tile * (E + Ev) + tile * E + r * Ev;
    float *sr = sm + tile * (2 * E + 2 * Ev) + r * tile;
    for (int64_t blk = blockIdx.x; blk < g.B * nqt; blk += gridDim.x) {
        const int64_t b = blk / nqt, i0 = (blk % nqt) * tile, nq = L - i0 < tile ? L - i0 : tile, i = i0 + r;
        const int64_t mb = g.mask ? gdl_attn_mask_base(&g, b) : 0, send = g.causal && i0 + nq < S ? i0 + nq : S;
        const int64_t ko = gdl_attn_base(&g, b, g.kstr), vo = gdl_attn_base(&g, b, g.vstr);
        const bool live = r < nq;
        float m = -GDL__CU_INF, l = 0;
        if (live) {
            const int64_t qo = gdl_attn_base(&g, b, g.qstr) + i * g.qrow;
            for (int64_t e = 0; e < E; e++) qr[e] = gdl__ld(q[qo + e]);
            for (int64_t e = 0; e < Ev; e++) ar[e] = 0;
        }
        for (int64_t j0 = 0; j0 < send; j0 += tile) {
            const int64_t nk = send - j0 < tile ? send - j0 : tile;
            __syncthreads(); // the last tile's readers are done
            for (int64_t x = r; x < nk * E; x += tile) ks[x] = gdl__ld(k[ko + (j0 + x / E) * g.krow + x % E]);
            for (int64_t x = r; x < nk * Ev; x += tile) vs[x] = gdl__ld(v[vo + (j0 + x / Ev) * g.vrow + x % Ev]);
            __syncthreads();
            if (!live) continue;
            float mt = -GDL__CU_INF;
            for (int64_t j = 0; j < nk; j++) {
                sr[j] = scale * gdl__cu_attn_dot(qr, ks + j * E, E) + gdl__cu_attn_bias(g, mask, mb, i, j0 + j);
                if (sr[j] > mt) mt = sr[j];
            }
            if (mt == -GDL__CU_INF) continue; // no key of this tile takes part
            float mn = m > mt ? m : mt, alpha = expf(m - mn);
            l *= alpha;
            if (alpha != 1.0f)
                for (int64_t e = 0; e < Ev; e++) ar[e] *= alpha;
            for (int64_t j = 0; j < nk; j++) {
                float p = expf(sr[j] - mn);
                l += p;
                for (int64_t e = 0; e < Ev; e++) ar[e] += p * vs[j * Ev + e];
            }
            m = mn;
        }
        if (live) {
            float inv = l > 0 ? 1.0f / l : 0.0f;
            const int64_t oo = gdl_attn_base(&g, b, g.ostr) + i * g.orow;
            for (int64_t e = 0; e < Ev; e++) out[oo + e] = gdl__st<T>(ar[e] * inv);
            lse[b * L + i] = l > 0 ? m + logf(l) : GDL__CU_INF;
        }
        __syncthreads(); // the next tile's loads overwrite what this one's rows read
    }
}

// dq (+= into gq when not NULL) and delta, one thread per query row
template <typename T>
__global__ void gdl__k_attn_dq(gdl_attn_geom g, int tile, const T *q, const T *k, const T *v, const void *mask,
                               const T *out, const T *gout, const float *lse, float *delta, T *gq) {
    __shared__ float sm[GDL__CU_ATTN_SMEM];
    const int64_t E = g.E, Ev = g.Ev, L = g.L, S = g.S, nqt = (L + tile - 1) / tile;
    const int r = threadIdx.x;
    const float scale = (float)g.scale;
    float *ks = sm, *vs = ks + tile * E, *qr = vs + tile * Ev + r * E;
    float *gr = sm + tile * (2 * E + Ev) + r * Ev, *dq = sm + tile * (2 * E + 2 * Ev) + r * E;
    for (int64_t blk = blockIdx.x; blk < g.B * nqt; blk += gridDim.x) {
        const int64_t b = blk / nqt, i0 = (blk % nqt) * tile, nq = L - i0 < tile ? L - i0 : tile, i = i0 + r;
        const int64_t mb = g.mask ? gdl_attn_mask_base(&g, b) : 0, send = g.causal && i0 + nq < S ? i0 + nq : S;
        const int64_t ko = gdl_attn_base(&g, b, g.kstr), vo = gdl_attn_base(&g, b, g.vstr);
        const int64_t qo = gdl_attn_base(&g, b, g.qstr) + i * g.qrow, oo = gdl_attn_base(&g, b, g.ostr) + i * g.orow;
        const bool live = r < nq;
        float D = 0, ls = 0;
        if (live) {
            for (int64_t e = 0; e < Ev; e++) {
                gr[e] = gdl__ld(gout[oo + e]);
                D += gr[e] * gdl__ld(out[oo + e]);
            }
            delta[b * L + i] = D;
            ls = lse[b * L + i];
            for (int64_t e = 0; e < E; e++) {
                qr[e] = gdl__ld(q[qo + e]);
                dq[e] = 0;
            }
        }
        if (!gq) continue; // block-uniform: delta only
        for (int64_t j0 = 0; j0 < send; j0 += tile) {
            const int64_t nk = send - j0 < tile ? send - j0 : tile;
            __syncthreads();
            for (int64_t x = r; x < nk * E; x += tile) ks[x] = gdl__ld(k[ko + (j0 + x / E) * g.krow + x % E]);
            for (int64_t x = r; x < nk * Ev; x += tile) vs[x] = gdl__ld(v[vo + (j0 + x / Ev) * g.vrow + x % Ev]);
            __syncthreads();
            if (!live) continue;
            for (int64_t j = 0; j < nk; j++) {
                float s = scale * gdl__cu_attn_dot(qr, ks + j * E, E) + gdl__cu_attn_bias(g, mask, mb, i, j0 + j);
                float p = expf(s - ls);
                if (p == 0.0f) continue;
                float ds = scale * p * (gdl__cu_attn_dot(gr, vs + j * Ev, Ev) - D);
                for (int64_t e = 0; e < E; e++) dq[e] += ds * ks[j * E + e];
            }
        }
        if (live)
            for (int64_t e = 0; e < E; e++) gq[qo + e] = gdl__st<T>(gdl__ld(gq[qo + e]) + dq[e]);
        __syncthreads();
    }
}

// dk and dv (+= into gk, gv when not NULL), one thread per key row, walking the query tiles that see it; a block
// per (key/value entry, key tile): grouped-query, the group's query heads in turn
template <typename T>
__global__ void gdl__k_attn_dkv(gdl_attn_geom g, int tile, const T *q, const T *k, const T *v, const void *mask,
                                const T *gout, const float *lse, const float *delta, T *gk, T *gv) {
    __shared__ float sm[GDL__CU_ATTN_SMEM];
    const int64_t E = g.E, Ev = g.Ev, L = g.L, S = g.S, nkt = (S + tile - 1) / tile, G = g.group > 1 ? g.group : 1;
    const int r = threadIdx.x;
    const float scale = (float)g.scale;
    float *qs = sm, *gs = qs + tile * E, *kr = gs + tile * Ev + r * E, *vr = sm + tile * (2 * E + Ev) + r * Ev;
    float *dk = sm + tile * (2 * E + 2 * Ev) + r * E, *dv = sm + tile * (3 * E + 2 * Ev) + r * Ev;
    float *ls = sm + tile * (3 * E + 3 * Ev), *ds_ = ls + tile;
    for (int64_t blk = blockIdx.x; blk < g.B / G * nkt; blk += gridDim.x) {
        const int64_t kb = blk / nkt, j0 = (blk % nkt) * tile, nk = S - j0 < tile ? S - j0 : tile, j = j0 + r;
        const int64_t ko = gdl_attn_base(&g, kb * G, g.kstr) + j * g.krow, vo = gdl_attn_base(&g, kb * G, g.vstr) + j * g.vrow;
        const bool live = r < nk;
        if (live) {
            for (int64_t e = 0; e < E; e++) {
                kr[e] = gdl__ld(k[ko + e]);
                dk[e] = 0;
            }
            for (int64_t e = 0; e < Ev; e++) {
                vr[e] = gdl__ld(v[vo + e]);
                dv[e] = 0;
            }
        }
        for (int64_t b = kb * G; b < (kb + 1) * G; b++) {
            const int64_t mb = g.mask ? gdl_attn_mask_base(&g, b) : 0;
            const int64_t qo = gdl_attn_base(&g, b, g.qstr), oo = gdl_attn_base(&g, b, g.ostr);
            for (int64_t i0 = g.causal ? j0 / tile * tile : 0; i0 < L; i0 += tile) { // causal: rows i >= j0 only
                const int64_t nq = L - i0 < tile ? L - i0 : tile;
                __syncthreads();
                for (int64_t x = r; x < nq * E; x += tile) qs[x] = gdl__ld(q[qo + (i0 + x / E) * g.qrow + x % E]);
                for (int64_t x = r; x < nq * Ev; x += tile) gs[x] = gdl__ld(gout[oo + (i0 + x / Ev) * g.orow + x % Ev]);
                if (r < nq) {
                    ls[r] = lse[b * L + i0 + r];
                    ds_[r] = delta[b * L + i0 + r];
                }
                __syncthreads();
                if (!live) continue;
                for (int64_t x = 0; x < nq; x++) {
                    const float *qx = qs + x * E, *gx = gs + x * Ev;
                    float s = scale * gdl__cu_attn_dot(qx, kr, E) + gdl__cu_attn_bias(g, mask, mb, i0 + x, j);
                    float p = expf(s - ls[x]);
                    if (p == 0.0f) continue;
                    for (int64_t e = 0; e < Ev; e++) dv[e] += p * gx[e];
                    float d = scale * p * (gdl__cu_attn_dot(gx, vr, Ev) - ds_[x]);
                    for (int64_t e = 0; e < E; e++) dk[e] += d * qx[e];
                }
            }
        }
        if (live) { // one thread adds both, so gk and gv may be one buffer (k is v)
            if (gk)
                for (int64_t e = 0; e < E; e++) gk[ko + e] = gdl__st<T>(gdl__ld(gk[ko + e]) + dk[e]);
            if (gv)
                for (int64_t e = 0; e < Ev; e++) gv[vo + e] = gdl__st<T>(gdl__ld(gv[vo + e]) + dv[e]);
        }
        __syncthreads();
    }
}

static int gdl__cu_attn_check(const gdl_attn_geom *g) {
    if (g->E > GDL_ATTN_MAX_HEAD || g->Ev > GDL_ATTN_MAX_HEAD) {
        gdl__set_error("gdl_cuda: attention takes heads of at most %d, got E %lld and Ev %lld", GDL_ATTN_MAX_HEAD,
                       (long long)g->E, (long long)g->Ev);
        return -1;
    }
    return 0;
}

static int gdl__cu_attention(gdl_dtype dt, const gdl_attn_geom *g, const void *q, const void *k, const void *v,
                             const void *mask, void *out, float *lse) {
    const int tile = gdl__cu_attn_tile(g);
    const int64_t tiles = g->B * ((g->L + tile - 1) / tile);
    if (gdl__cu_attn_check(g) < 0) return -1;
    if (tiles <= 0) return 0;
    return gdl__cu_dispatch("attention", dt, 1, [&](auto t) {
        typedef typename decltype(t)::type T;
        GDL_CU_LAUNCH(gdl__k_attn_fwd<T>, gdl__cu_row_grid(tiles), tile, 0, gdl__cu_stream())(
            *g, tile, (const T *)q, (const T *)k, (const T *)v, mask, (T *)out, lse);
        GDL_CU_LAUNCHED();
        return 0;
    });
}

static int gdl__cu_attention_backward(gdl_dtype dt, const gdl_attn_geom *g, const void *q, const void *k, const void *v,
                                      const void *mask, const void *out, const void *gout, const float *lse,
                                      float *delta, void *gq, void *gk, void *gv) {
    const int tile = gdl__cu_attn_tile(g);
    const int64_t qtiles = g->B * ((g->L + tile - 1) / tile);
    const int64_t ktiles = g->B / (g->group > 1 ? g->group : 1) * ((g->S + tile - 1) / tile);
    if (gdl__cu_attn_check(g) < 0) return -1;
    if (qtiles <= 0) return 0;
    return gdl__cu_dispatch("attention_backward", dt, 1, [&](auto t) {
        typedef typename decltype(t)::type T;
        GDL_CU_LAUNCH(gdl__k_attn_dq<T>, gdl__cu_row_grid(qtiles), tile, 0, gdl__cu_stream())(
            *g, tile, (const T *)q, (const T *)k, (const T *)v, mask, (const T *)out, (const T *)gout, lse, delta, (T *)gq);
        GDL_CU_LAUNCHED();
        if ((gk || gv) && ktiles > 0) {
            GDL_CU_LAUNCH(gdl__k_attn_dkv<T>, gdl__cu_row_grid(ktiles), tile, 0, gdl__cu_stream())(
                *g, tile, (const T *)q, (const T *)k, (const T *)v, mask, (const T *)gout, lse, delta, (T *)gk, (T *)gv);
            GDL_CU_LAUNCHED();
        }
        return 0;
    });
}
