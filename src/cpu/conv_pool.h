/* src/cpu/conv_pool.h — im2col / col2im, the convolution's implicit GEMM and direct kernel (conv_implicit), max and average pooling,
   copy2d, dropout */

/* The conv and pool parts do the planes (n, c) in [lo, hi) of a.g's geometry. */
static void gdl__im2col_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_conv_geom *g = a.g;
    int64_t nc, OHW = (int64_t)g->OH * g->OW;
    for (nc = lo; nc < hi; nc++) {
        const gdl_real *xp = a.x + nc * g->H * g->W;
        gdl_real *cp = a.out + nc * g->KH * g->KW * OHW; /* [n][c*KK + kk][ohw] */
        int kh, kw, oh, ow, lo, hi;
        for (kh = 0; kh < g->KH; kh++)
            for (kw = 0; kw < g->KW; kw++) {
                gdl_real *row = cp + (kh * g->KW + kw) * OHW;
                gdl__valid_cols(g, kw, &lo, &hi);
                for (oh = 0; oh < g->OH; oh++) {
                    int ih = oh * g->SH - g->PH + kh * g->DH;
                    gdl_real *r = row + oh * g->OW;
                    int64_t base = (int64_t)ih * g->W + kw * g->DW - g->PW; /* input index of ow = 0 */
                    if (ih < 0 || ih >= g->H) {
                        for (ow = 0; ow < g->OW; ow++) r[ow] = 0;
                        continue;
                    }
                    for (ow = 0; ow < lo; ow++) r[ow] = 0;
                    if (g->SW == 1)
                        for (ow = lo; ow < hi; ow++) r[ow] = xp[base + ow];
                    else
                        for (ow = lo; ow < hi; ow++) r[ow] = xp[base + (int64_t)ow * g->SW];
                    for (ow = hi; ow < g->OW; ow++) r[ow] = 0;
                }
            }
    }
}
static int gdl__cpu_im2col_f32(const gdl_conv_geom *g, const gdl_real *x, gdl_real *col) {
    gdl__args a = gdl__args_none();
    a.g = g; a.x = x; a.out = col;
    gdl__parallel_loop((int64_t)g->N * g->C, (int64_t)g->N * g->C * g->KH * g->KW * (int64_t)g->OH * g->OW, gdl__im2col_part, &a);
    return 0;
}

/* x: the columns; out: the image they add into */
static void gdl__col2im_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_conv_geom *g = a.g;
    int64_t nc, OHW = (int64_t)g->OH * g->OW;
    for (nc = lo; nc < hi; nc++) {
        gdl_real *xp = a.out + nc * g->H * g->W;
        const gdl_real *cp = a.x + nc * g->KH * g->KW * OHW;
        int kh, kw, oh, ow, lo, hi;
        for (kh = 0; kh < g->KH; kh++)
            for (kw = 0; kw < g->KW; kw++) {
                const gdl_real *row = cp + (kh * g->KW + kw) * OHW;
                gdl__valid_cols(g, kw, &lo, &hi);
                for (oh = 0; oh < g->OH; oh++) {
                    int ih = oh * g->SH - g->PH + kh * g->DH;
                    const gdl_real *r = row + oh * g->OW;
                    int64_t base = (int64_t)ih * g->W + kw * g->DW - g->PW;
                    if (ih < 0 || ih >= g->H) continue;
                    if (g->SW == 1)
                        for (ow = lo; ow < hi; ow++) xp[base + ow] += r[ow];
                    else
                        for (ow = lo; ow < hi; ow++) xp[base + (int64_t)ow * g->SW] += r[ow];
                }
            }
    }
}
static int gdl__cpu_col2im_f32(const gdl_conv_geom *g, const gdl_real *col, gdl_real *x) {
    gdl__args a = gdl__args_none();
    a.g = g; a.x = col; a.out = x;
    gdl__parallel_loop((int64_t)g->N * g->C, (int64_t)g->N * g->C * g->KH * g->KW * (int64_t)g->OH * g->OW, gdl__col2im_part, &a);
    return 0;
}

/* --- convolution without the column matrix (backend entry conv_implicit) --
   Forward: y[n] = W * col(x[n]), an implicit GEMM whose B packing gathers
   col(x[n]) from the image (gdl__gemm_pack_conv), bias + activation in the
   GEMM's epilogue. Weight gradient: gw += sum over n of gy[n] * col(x[n])^T,
   the same gather, transposed. Input gradient: per sample, on its thread,
   the sample's columns' gradient W^T * gy[n] in a buffer of that thread
   (C*KH*KW x OH*OW) and its col2im. Each gives the bits of im2col + GEMM
   (+ col2im): the same packed values, K blocks, tiles and orders. So the
   path may be chosen by shape and thread count freely, and test_conv
   compares them bit for bit.
   Memory: the forward keeps no columns for the backward (the weight
   gradient gathers them again from x): the step arena loses C*KH*KW*OH*OW
   values a sample for each convolution; the input gradient needs one
   sample's columns a thread instead of the batch's.
   On x86 the direct kernel (gdl__dconv_kernel, src/cpu/gemm.h) takes the
   passes it suits (gdl__dconv_pays, gdl__dconv_gx_pays), in the same bits:
   where the GEMM's packing would cost as much as its products. */

#ifndef GDL__GEMM_CBLAS /* the implicit GEMM is the built-in GEMM's packing */
/* Which path: -1 by shape (gdl__conv_implicit_pays, gdl__dconv_pays), 0
   always im2col (conv_implicit declines), 1 the implicit GEMM (or the
   direct kernel, for a pass it suits) wherever it can run, 2 the same
   without the direct kernel. For the tests, which compare them. */
static int gdl__conv_path = -1;

/* Where the implicit GEMM pays (pass as conv_implicit's). Measured on the
   dev VM's Xeon, natively (AVX-512) and with the AVX2 kernel forced, 2
   threads: a conv2d_act (ReLU) forward and backward on batch 32-64, the two
   paths interleaved, 7 pairs (2026-11-28; the table: git log -p
   bench/RESULTS.md). The forward took 0.1-0.95x im2col's time on every
   shape tried (a 28x28 one-channel input 0.1x, 1x1 stride 2 0.3x, 2x2
   images 0.93x): its im2col was a pass over memory as large as the input
   times KH*KW, now never written. The weight gradient
   0.6-1.0x. The input gradient 0.86-0.99x from 8x8 outputs up, a tie at 4x4,
   but 1.1-1.2x at 2x2: a sample's product is then a few columns wide and the
   sample-a-task loop costs more than the batch's buffer saves. So all but
   the input gradient of outputs under 16 pixels, which keeps im2col's
   col2im. (1x1 stride-1 unpadded convolutions do not come here: the op
   layer runs them as a GEMM on the input itself.) */
static int gdl__conv_implicit_pays(int pass, const gdl_conv_geom *g) {
    return pass != 2 || g->OH * g->OW >= 16;
}

/* Samples side by side in one GEMM (gdl__gemm_args.span) for the forward and
   the input gradient, when an image has fewer than GDL__CONV_SPAN_COLS output
   pixels: one sample's product would leave up to NR-1 of the last tile's
   columns empty (a 7x7 output fills 49 of 64 on AVX-512) and pack all of W
   for a few columns. A task takes enough samples for GDL__CONV_SPAN_COLS
   columns, but no more than an equal share of the threads'. Each output is
   the same sum of the same products as a sample's own GEMM (K blocks and
   their order are the same), so the bits do not change. */
#ifndef GDL__CONV_SPAN_COLS
#define GDL__CONV_SPAN_COLS 512
#endif
static int gdl__conv_span(const gdl_conv_geom *g, int threads) {
    const int OHW = g->OH * g->OW, share = (g->N + threads - 1) / threads;
    int nb;
    if (OHW >= GDL__CONV_SPAN_COLS) return 1;
    nb = (GDL__CONV_SPAN_COLS + OHW - 1) / OHW;
    return nb < share ? nb : share;
}

/* The tasks of the forward (pass 0) and the input gradient (pass 2): task t
   takes the samples [t*nb, t*nb + nb), side by side when nb > 1. Pass 2 puts
   their columns' gradient, group by group, into this thread's buffer after
   its packing buffers (csz elements), then col2im's each sample. */
typedef struct {
    gdl__gemm_job j; /* the plan of one group's product for nb samples (each group's is the same shape) */
    const gdl_conv_geom *g;
    int pass, groups, OC, act, nb;
    const gdl_real *x, *w, *gy, *bias;
    gdl_real *out, *pre;
    size_t csz;
} gdl__conv_task_job;

static void gdl__conv_gemm_args(int pass, const gdl_conv_geom *g, int groups, int OC, int gi, int act,
                                const gdl_real *x, const gdl_real *w, const gdl_real *gy, const gdl_real *bias,
                                gdl_real *out, gdl_real *pre, gdl__gemm_args *m);

static void gdl__conv_task(void *p, int t, int nt) {
    const gdl__conv_task_job *d = (const gdl__conv_task_job *)p;
    const gdl_conv_geom *g = d->g;
    const int Cg = g->C / d->groups, OCg = d->OC / d->groups, CgKK = Cg * g->KH * g->KW, OHW = g->OH * g->OW;
    const int n0 = t * d->nb, cnt = g->N - n0 < d->nb ? g->N - n0 : d->nb;
    const ptrdiff_t CHW = (ptrdiff_t)g->C * g->H * g->W, OCHW = (ptrdiff_t)d->OC * OHW, CKKHW = (ptrdiff_t)d->groups * CgKK * OHW;
    gdl_real *buf = gdl__gemm_shared.buf + (size_t)gdl__gemm_slot() * (d->j.asz + d->j.bsz + d->csz);
    gdl_real *gcol = buf + d->j.asz + d->j.bsz;
    int gi, s;
    (void)nt;
    for (gi = 0; gi < d->groups; gi++) {
        gdl__gemm_args m;
        if (d->pass == 0) {
            gdl__conv_gemm_args(0, g, d->groups, d->OC, gi, d->act, d->x + n0 * CHW, d->w, NULL, d->bias,
                                d->out + n0 * OCHW, d->pre ? d->pre + n0 * OCHW : NULL, &m);
            m.sBs = CHW;
            m.sCs = OCHW;
        } else {
            gdl__gemm_args_init(&m, 1, 0, CgKK, OHW, OCg, 1, d->w + (ptrdiff_t)gi * OCg * CgKK, CgKK,
                                d->gy + n0 * OCHW + (ptrdiff_t)gi * OCg * OHW, OHW, 0, gcol + (ptrdiff_t)gi * CgKK * OHW,
                                OHW);
            m.sBs = OCHW;
            m.sCs = CKKHW;
        }
        if (cnt > 1) {
            m.N = cnt * OHW;
            m.span = OHW;
        }
        gdl__gemm_blocked(&m, 0, m.M, 0, m.N, d->j.mc_blk, d->j.kc_blk, d->j.nc_blk, buf, buf + d->j.asz);
    }
    if (d->pass == 2)
        for (s = 0; s < cnt; s++) {
            gdl__args a = gdl__args_none();
            a.g = g; a.x = gcol + s * CKKHW; a.out = d->out + (n0 + s) * CHW;
            gdl__col2im_part(a, 0, g->C);
        }
}

#ifdef GDL__DCONV
/* The forward and the weight gradient by the direct kernel
   (gdl__dconv_kernel) where col has at least 64 rows a group and a group at
   least half a vector tile of output channels: below that the tile's
   stores and the unused lanes outweigh the packing saved (a one-channel
   input's 9 rows stay with the implicit GEMM; its weight gradient does not
   always: gdl__dconv_gw_pays). Measured on the dev VM's
   Xeon (AVX-512), batch 128, 2 threads, the recipe CNN's 3x3 convolutions
   (2026-11-28, git log -p bench/RESULTS.md): 32->64 on 14x14, forward 6.5 -> 3.8 ms, backward
   12.6 -> 9.2 ms; 64->128 on 7x7, 6.3 -> 3.4 and 12.2 -> 7.4 ms. */
static int gdl__dconv_pays(const gdl_conv_geom *g, int groups, int OC) {
    return g->C / groups * g->KH * g->KW >= 64 && OC / groups >= GDL__DCONV_OC / 2;
}

/* The most bytes of buffers a direct pass takes (in the GEMM's grow-only
   buffer, kept for the next step); a pass that would need more runs the
   implicit GEMM, whose buffers are a few blocks a thread. (It also keeps
   every offset into them, the kernel's int tables, far inside an int.) */
#ifndef GDL__DCONV_MAX
#define GDL__DCONV_MAX ((size_t)64 << 20)
#endif

/* The direct forward's plan: task t does the samples [t*nb, t*nb + nb),
   copied with their padding into its thread's buffer (tsz elements after
   the shared wsz), then tile by tile: GDL__DCONV_UR pixels (in the order of
   the samples' output columns) by GDL__DCONV_OC channels of a group, its K
   blocks those of the implicit GEMM (kc_blk), then the tile written to its
   samples' planes and the GEMM's epilogue run on it. */
typedef struct {
    const gdl_conv_geom *g;
    int groups, OC, act, nb, kc_blk, ntile;
    const gdl_real *x, *bias;
    gdl_real *out, *pre;
    const float *wp; /* [group][tile][k][GDL__DCONV_OC]: the weights, zero past the group's channels */
    const int *ko;   /* col row k's offset in a padded sample */
    size_t wsz, tsz;
} gdl__dconv_job;

/* dst[0 .. n) = src[0 .. n) (gdl__dconv_run) or zeros (gdl__dconv_zero), by vectors and a masked tail: the
   runs here are short (a tile's pixels, an image row, its padding), and gcc turns the element loop into
   `rep movs`, whose start-up took 80 % of gdl__dconv_move's time (Zen 4), as libc's memcpy and memset
   calls took 5 % of cnn's step padding its rows. */
static inline void gdl__dconv_run(float *GDL__RESTRICT dst, const float *GDL__RESTRICT src, int n) {
    int j = 0;
    for (; j + GDL__EPI_W <= n; j += GDL__EPI_W) GDL__EPI(storeu_ps)(dst + j, GDL__EPI(loadu_ps)(src + j));
    if (j < n) {
        const gdl__epi_m k = gdl__epi_mask(n - j);
        GDL__EPI_STOREM(dst + j, k, GDL__EPI_LOADM(src + j, k));
    }
}
static inline void gdl__dconv_zero(float *dst, int64_t n) {
    const gdl__epi_v z = GDL__EPI(setzero_ps)();
    int64_t j = 0;
    for (; j + GDL__EPI_W <= n; j += GDL__EPI_W) GDL__EPI(storeu_ps)(dst + j, z);
    if (j < n) GDL__EPI_STOREM(dst + j, gdl__epi_mask((int)(n - j)), z);
}

/* Copy nplanes planes of H x W from x into xp with PH rows and PW columns of zeros written out on each
   side ([nplanes][H + 2 PH][W + 2 PW]). */
static void gdl__dconv_pad(const gdl_real *x, int64_t nplanes, int H, int W, int PH, int PW, gdl_real *xp) {
    const int Hp = H + 2 * PH, Wp = W + 2 * PW;
    int64_t plane;
    int ih;
    for (plane = 0; plane < nplanes; plane++) {
        const gdl_real *src = x + plane * H * W;
        gdl_real *dst = xp + plane * Hp * Wp;
        gdl__dconv_zero(dst, (int64_t)PH * Wp);
        for (ih = 0; ih < H; ih++) {
            gdl_real *row = dst + (ptrdiff_t)(PH + ih) * Wp;
            gdl__dconv_zero(row, PW);
            gdl__dconv_run(row + PW, src + (ptrdiff_t)ih * W, W);
            gdl__dconv_zero(row + PW + W, PW);
        }
        gdl__dconv_zero(dst + (ptrdiff_t)(PH + H) * Wp, (int64_t)PH * Wp);
    }
}

/* A tile's pixels, q0 .. q0+qn-1 counted over the samples' pixels in order (HW a sample, in rows of W):
   pixel i is pixel qp[i] of sample qs[i], and the kernel reads it at xo[i] = qs sstride + its row rstride
   + its column cstride. Past qn the last pixel's offset is repeated (those lanes are not stored). */
static void gdl__dconv_tile(int q0, int qn, int HW, int W, ptrdiff_t sstride, ptrdiff_t rstride, int cstride, int *qs,
                            int *qp, int *xo) {
    int s = q0 / HW, pix = q0 % HW, i;
    for (i = 0; i < GDL__DCONV_UR; i++) {
        if (i < qn) {
            qs[i] = s;
            qp[i] = pix;
            xo[i] = (int)(s * sstride + (ptrdiff_t)(pix / W) * rstride + pix % W * cstride);
            if (++pix == HW) {
                pix = 0;
                s++;
            }
        } else {
            xo[i] = xo[qn - 1];
        }
    }
}

/* d[c*ldd + r] = s[r*lds + c] for c < 16, r < rows (zero for the rows past), the first drows c of it: a
   16 x 16 transpose in registers on AVX-512, element by element elsewhere. */
static void gdl__dconv_tr16(const float *s, ptrdiff_t lds, int rows, float *d, ptrdiff_t ldd, int drows) {
#if defined(GDL__GEMM_AVX512)
    __m512 r[16], u[16];
    int i;
    GDL__UNROLL
    for (i = 0; i < 16; i++) r[i] = i < rows ? _mm512_loadu_ps(s + i * lds) : _mm512_setzero_ps();
    GDL__UNROLL
    for (i = 0; i < 16; i += 2) { /* 2x2 blocks of elements */
        u[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        u[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    GDL__UNROLL
    for (i = 0; i < 16; i += 4) { /* 4x4 */
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(u[i]), _mm512_castps_pd(u[i + 2])));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(u[i]), _mm512_castps_pd(u[i + 2])));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(u[i + 1]), _mm512_castps_pd(u[i + 3])));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(u[i + 1]), _mm512_castps_pd(u[i + 3])));
    }
    GDL__UNROLL
    for (i = 0; i < 4; i++) { /* 128-bit lanes: 8x8, then 16x16 */
        u[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        u[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
        u[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        u[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    GDL__UNROLL
    for (i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_f32x4(u[i], u[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(u[i], u[i + 8], 0xdd);
        r[i + 4] = _mm512_shuffle_f32x4(u[i + 4], u[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_f32x4(u[i + 4], u[i + 12], 0xdd);
    }
    GDL__UNROLL
    for (i = 0; i < 16; i++) /* 16, not drows: a known count, the loop unrolled, r in registers */
        if (i < drows) _mm512_storeu_ps(d + i * ldd, r[i]);
#else
    int c, i;
    for (c = 0; c < drows; c++)
        for (i = 0; i < 16; i++) d[c * ldd + i] = i < rows ? s[i * lds + c] : 0;
#endif
}

/* The tile [pixel i][channel o] (GDL__DCONV_UR x GDL__DCONV_OC) to or from (get) the planes at p: pixel
   qp[i] of sample qs[i], samples sstride apart, channels cstride apart, the first on of them (get: the
   tile's other channels zero). A run of the tile's pixels in one sample is consecutive in memory: moved a
   channel at a time, through tr ([channel][16 pixels]); copying one element at a time, an index computed
   for each, cost as much as a K of 81's multiply-adds. */
static void gdl__dconv_move(float *tile, int qn, const int *qs, const int *qp, float *p, ptrdiff_t sstride,
                            ptrdiff_t cstride, int on, int get) {
    enum { UR = GDL__DCONV_UR, OCT = GDL__DCONV_OC };
    float tr[OCT * 16];
    int i, o;
    if (!get)
        for (o = 0; o < OCT; o += 16) gdl__dconv_tr16(tile + o, OCT, qn, tr + o * 16, 16, 16);
    else
        memset(tr, 0, sizeof tr);
    for (i = 0; i < qn;) { /* the tile's run of each sample */
        const int s0 = qs[i];
        float *at = p + s0 * sstride + qp[i];
        int len = 1;
        while (i + len < qn && qs[i + len] == s0) len++;
        for (o = 0; o < on; o++)
            if (get)
                gdl__dconv_run(tr + o * 16 + i, at + o * cstride, len);
            else
                gdl__dconv_run(at + o * cstride, tr + o * 16 + i, len);
        i += len;
    }
    if (get)
        for (o = 0; o < OCT; o += 16) gdl__dconv_tr16(tr + o * 16, 16, 16, tile + o, OCT, UR);
}

static void gdl__dconv_task(void *p, int t, int nt) {
    const gdl__dconv_job *d = (const gdl__dconv_job *)p;
    const gdl_conv_geom *g = d->g;
    enum { UR = GDL__DCONV_UR, OCT = GDL__DCONV_OC };
    const int Hp = g->H + 2 * g->PH, Wp = g->W + 2 * g->PW, OHW = g->OH * g->OW;
    const int Cg = g->C / d->groups, OCg = d->OC / d->groups, K = Cg * g->KH * g->KW;
    const int n0 = t * d->nb, cnt = g->N - n0 < d->nb ? g->N - n0 : d->nb, nq = cnt * OHW;
    const ptrdiff_t HpWp = (ptrdiff_t)Hp * Wp, CHpWp = g->C * HpWp, OCHW = (ptrdiff_t)d->OC * OHW;
    gdl_real *xp = gdl__gemm_shared.buf + d->wsz + (size_t)gdl__gemm_slot() * d->tsz;
    gdl_real *tile = xp + d->tsz - UR * OCT;
    int xo[UR], qs[UR], qp[UR];
    int gi, ot, q0, i, pc;
    (void)nt;
    gdl__dconv_pad(d->x + (int64_t)n0 * g->C * g->H * g->W, (int64_t)cnt * g->C, g->H, g->W, g->PH, g->PW, xp);
    for (gi = 0; gi < d->groups; gi++) {
        gdl__gemm_args m; /* the epilogue's: the group's channels are its rows */
        gdl__gemm_args_init(&m, 0, 0, OCg, OHW, K, 1, NULL, 0, NULL, 0, 0, NULL, OHW);
        m.bias = d->bias ? d->bias + (ptrdiff_t)gi * OCg : NULL;
        m.act = d->act;
        for (ot = 0; ot < d->ntile; ot++) {
            const float *wt = d->wp + ((size_t)gi * d->ntile + ot) * K * OCT;
            const int o0 = ot * OCT, on = OCg - o0 < OCT ? OCg - o0 : OCT;
            for (q0 = 0; q0 < nq; q0 += UR) {
                const int qn = nq - q0 < UR ? nq - q0 : UR;
                gdl__dconv_tile(q0, qn, OHW, g->OW, CHpWp, (ptrdiff_t)g->SH * Wp, g->SW, qs, qp, xo);
                for (pc = 0; pc < K; pc += d->kc_blk)
                    gdl__dconv_kernel(K - pc < d->kc_blk ? K - pc : d->kc_blk, wt + (size_t)pc * OCT, d->ko + pc,
                                      xp + (ptrdiff_t)gi * Cg * HpWp, xo, tile, pc == 0);
                gdl__dconv_move(tile, qn, qs, qp, d->out + n0 * OCHW + (ptrdiff_t)(gi * OCg + o0) * OHW, OCHW, OHW, on, 0);
                if (m.bias || d->pre || m.act >= 0)
                    for (i = 0; i < qn;) { /* the tile's run of each sample */
                        const int s0 = qs[i], p0 = qp[i];
                        const ptrdiff_t at = (n0 + s0) * OCHW + (ptrdiff_t)gi * OCg * OHW;
                        int len = 0;
                        while (i < qn && qs[i] == s0) {
                            i++;
                            len++;
                        }
                        gdl__gemm_epi_at(&m, d->out + at, d->pre ? d->pre + at : NULL, o0, on, p0, len);
                    }
            }
        }
    }
}

/* The weight gradient by the direct kernel: gw[oc][k] += the sum over the
   samples in turn, each in the implicit GEMM's K blocks of its pixels, of
   gy[n][oc][p] * col[n][k][p]. The kernel's vectors run over output
   channels (gy transposed, [p][GDL__DCONV_OC] a channel tile), its
   broadcasts read col from the padded input (xo: the rows' offsets), and
   its k loop runs over the pixels (ko: their offsets). A work item is a
   tile of GDL__DCONV_UR rows of col by a channel tile of a group, whose sums
   (acc) go through every sample in order, as the GEMM's segments: the bits
   do not depend on which task has the item.
   The batch goes through in spans of samples (about 1 MB of padded inputs
   and transposed gradients: GDL__DCONV_GW_SPAN), two buffers in turn: while the items' tasks
   take span j, other tasks of the same run pad and transpose span j + 1,
   so that the copying (bound by memory: it reads the batch's x and gy) runs
   beside the multiply-adds, and the items read a span that is still in the
   cache (one pass over the batch first wrote the whole batch's copies,
   25 MB for the speedrun's second convolution, a third of the time, then
   every item read them back from memory). Each item task takes its items
   through its span a chunk at a time, so that a chunk's copies are read
   from its cache by all of them. */
typedef struct {
    const gdl_conv_geom *g;
    int groups, OC, ntile, nk, kc_blk, chunk, span;
    int ns_kernel;       /* one K block a sample (a small image): gdl__dconv_kernel_ns */
    int sa, sb, buf;     /* this run's items take the samples [sa, sb) from buffer buf */
    int na, nprep, nitask;  /* its copying tasks the samples [na, na + nprep), into the other buffer */
    const gdl_real *x, *gy;
    gdl_real *gw;
    gdl_real *xp[2];     /* [span][C][Hp][Wp] */
    gdl_real *gyt[2];    /* [span][groups][ntile][OHW][OCT], zero past a group's channels */
    gdl_real *acc;       /* [groups][ntile][nk*UR][OCT] */
    const int *rowoff;   /* [nk*UR]: col row k's offset in a padded sample, the last repeated past K */
    const int *po;       /* [OHW]: pixel p's */
} gdl__dconv_gw_job;

/* dst[p*OCT + o] = src[o*OHW + p] for the on channels of src (zero past them), p < OHW */
static void gdl__dconv_gw_tr(const gdl_real *src, int OHW, int on, gdl_real *dst) {
    enum { OCT = GDL__DCONV_OC };
    int o, q, i;
#if defined(GDL__GEMM_AVX512)
    for (o = 0; o < OCT; o += 16) { /* 16 channels by 16 pixels at a time, in registers */
        const int rows = on - o < 0 ? 0 : on - o < 16 ? on - o : 16;
        for (q = 0; q + 16 <= OHW; q += 16)
            gdl__dconv_tr16(src + (ptrdiff_t)o * OHW + q, OHW, rows, dst + (size_t)q * OCT + o, OCT, 16);
        for (; q < OHW; q++)
            for (i = 0; i < 16; i++) dst[(size_t)q * OCT + o + i] = i < rows ? src[(ptrdiff_t)(o + i) * OHW + q] : 0;
    }
#else
    for (o = 0; o + 8 <= on; o += 8) { /* 8 channels by 8 pixels at a time */
        for (q = 0; q + 8 <= OHW; q += 8) gdl__gemm_tr8x8(src + (ptrdiff_t)o * OHW + q, OHW, dst + (size_t)q * OCT + o, OCT);
        for (; q < OHW; q++)
            for (i = 0; i < 8; i++) dst[(size_t)q * OCT + o + i] = src[(ptrdiff_t)(o + i) * OHW + q];
    }
    for (; o < OCT; o++)
        for (q = 0; q < OHW; q++) dst[(size_t)q * OCT + o] = o < on ? src[(ptrdiff_t)o * OHW + q] : 0;
#endif
}

/* Sample n's padded input and transposed output gradient, at place i of buffer b. */
static void gdl__dconv_gw_prep(const gdl__dconv_gw_job *d, int n, int b, int i) {
    const gdl_conv_geom *g = d->g;
    enum { OCT = GDL__DCONV_OC };
    const int OHW = g->OH * g->OW, OCg = d->OC / d->groups;
    const ptrdiff_t CHpWp = (ptrdiff_t)g->C * (g->H + 2 * g->PH) * (g->W + 2 * g->PW);
    int gi, ot;
    gdl__dconv_pad(d->x + (int64_t)n * g->C * g->H * g->W, g->C, g->H, g->W, g->PH, g->PW, d->xp[b] + i * CHpWp);
    for (gi = 0; gi < d->groups; gi++)
        for (ot = 0; ot < d->ntile; ot++) {
            gdl_real *dst = d->gyt[b] + (((size_t)i * d->groups + gi) * d->ntile + ot) * OHW * OCT;
            const int on = OCg - ot * OCT < OCT ? OCg - ot * OCT : OCT;
            const gdl_real *src = d->gy + ((ptrdiff_t)n * d->OC + (ptrdiff_t)gi * OCg + ot * OCT) * OHW;
            gdl__dconv_gw_tr(src, OHW, on, dst);
        }
}

/* Item task t's share of the work items (a contiguous range, so that a task's items mostly share a channel
   tile and its transposed gradients) through the samples [sa, sb); from gw at the first, back at the last. */
static void gdl__dconv_gw_items(const gdl__dconv_gw_job *d, int t, int nt) {
    const gdl_conv_geom *g = d->g;
    enum { UR = GDL__DCONV_UR, OCT = GDL__DCONV_OC };
    const int OHW = g->OH * g->OW, Cg = g->C / d->groups, OCg = d->OC / d->groups, K = Cg * g->KH * g->KW;
    const int nitems = d->groups * d->ntile * d->nk, i0 = (int)((int64_t)nitems * t / nt),
              i1 = (int)((int64_t)nitems * (t + 1) / nt);
    const ptrdiff_t HpWp = (ptrdiff_t)(g->H + 2 * g->PH) * (g->W + 2 * g->PW), CHpWp = g->C * HpWp;
    int it, s0, s, pc, i, o;
    for (it = i0; it < i1 && d->sa == 0; it++) { /* the sums start from gw (the GEMM's beta 1) */
        const int gi = it / (d->ntile * d->nk), ot = it / d->nk % d->ntile, k0 = it % d->nk * UR;
        gdl_real *a = d->acc + (size_t)it * UR * OCT;
        for (i = 0; i < UR; i++)
            for (o = 0; o < OCT; o++) {
                const int oc = ot * OCT + o;
                a[i * OCT + o] = oc < OCg && k0 + i < K ? d->gw[((ptrdiff_t)gi * OCg + oc) * K + k0 + i] : 0;
            }
    }
    for (s0 = d->sa; s0 < d->sb; s0 += d->chunk)
        for (it = i0; it < i1; it++) {
            const int gi = it / (d->ntile * d->nk), ot = it / d->nk % d->ntile, kt = it % d->nk;
            const int s1 = d->sb - s0 < d->chunk ? d->sb : s0 + d->chunk;
            if (d->ns_kernel) { /* one K block a sample: its two halves, through the chunk's samples */
                const size_t at = (size_t)(s0 - d->sa);
                const gdl_real *gyt = d->gyt[d->buf] + ((at * d->groups + gi) * d->ntile + ot) * OHW * OCT;
                const gdl_real *xs = d->xp[d->buf] + (ptrdiff_t)at * CHpWp + (ptrdiff_t)gi * Cg * HpWp;
                for (i = 0; i < UR; i += UR / 2)
                    gdl__dconv_kernel_ns(s1 - s0, OHW, gyt, (ptrdiff_t)d->groups * d->ntile * OHW * OCT, d->po, xs,
                                         CHpWp, d->rowoff + kt * UR + i, d->acc + ((size_t)it * UR + i) * OCT);
                continue;
            }
            for (s = s0; s < s1; s++) {
                const size_t at = (size_t)(s - d->sa);
                const gdl_real *gyt = d->gyt[d->buf] + ((at * d->groups + gi) * d->ntile + ot) * OHW * OCT;
                const gdl_real *xs = d->xp[d->buf] + (ptrdiff_t)at * CHpWp + (ptrdiff_t)gi * Cg * HpWp;
                for (pc = 0; pc < OHW; pc += d->kc_blk)
                    gdl__dconv_kernel(OHW - pc < d->kc_blk ? OHW - pc : d->kc_blk, gyt + (size_t)pc * OCT, d->po + pc,
                                      xs, d->rowoff + kt * UR, d->acc + (size_t)it * UR * OCT, 0);
            }
        }
    for (it = i0; it < i1 && d->sb == g->N; it++) {
        const int gi = it / (d->ntile * d->nk), ot = it / d->nk % d->ntile, k0 = it % d->nk * UR;
        const gdl_real *a = d->acc + (size_t)it * UR * OCT;
        for (i = 0; i < UR && k0 + i < K; i++)
            for (o = 0; o < OCT && ot * OCT + o < OCg; o++)
                d->gw[((ptrdiff_t)gi * OCg + ot * OCT + o) * K + k0 + i] = a[i * OCT + o];
    }
}

/* A run's task t: the item tasks and the copying tasks (a sample each) alternate while both last, so that
   the two kinds run side by side on two threads. */
static void gdl__dconv_gw_task(void *p, int t, int nt) {
    const gdl__dconv_gw_job *d = (const gdl__dconv_gw_job *)p;
    const int m = d->nprep < d->nitask ? d->nprep : d->nitask;
    int item, prep;
    (void)nt;
    if (t < 2 * m) {
        item = t % 2 == 0 ? t / 2 : -1;
        prep = t % 2 == 1 ? t / 2 : -1;
    } else {
        item = d->nitask > m ? m + t - 2 * m : -1;
        prep = d->nprep > m ? m + t - 2 * m : -1;
    }
    if (item >= 0) gdl__dconv_gw_items(d, item, d->nitask);
    if (prep >= 0) gdl__dconv_gw_prep(d, d->na + prep, d->buf ^ 1, prep);
}

/* The bytes of a span's copies (each of the two buffers): both buffers in a core's L2 (2 MB on the dev VM's
   Xeon), yet enough work a run that its start and end cost little. Measured there on one thread (under load),
   batch 256: 9->32 on 28x28 10.4 ms with spans of 0.5 MB, 11.3-11.7 with 1 MB, 12.2 with 2 MB, 12.7 with 4;
   on 14x14 and 7x7 within 3 %. For the tests, a span of gdl__dconv_gw_span samples instead (0: by size). */
#ifndef GDL__DCONV_GW_SPAN
#define GDL__DCONV_GW_SPAN ((size_t)1 << 20)
#endif
static int gdl__dconv_gw_span;

/* The weight gradient by the direct kernel where the forward's suits (gdl__dconv_pays), and also where col
   has fewer rows but the output channels fill a vector tile: a one-channel input's 9 rows make one work
   item, 3 channels' 27 two. The implicit GEMM packs col for a few kernel calls there, on one thread
   (GDL__CONV_GW_ONE). Measured on the dev VM's Xeon (AVX-512, 1 thread, under load), batch 128, 28x28:
   1 -> 32 channels 3.6 -> 2.2 ms, 3 -> 32 3.6 -> 2.9 ms; but 1 -> 16 1.7 -> 4.0 ms (half the tile idle). */
static int gdl__dconv_gw_pays(const gdl_conv_geom *g, int groups, int OC) {
    return gdl__dconv_pays(g, groups, OC) || OC / groups >= GDL__DCONV_OC;
}

/* The weight gradient by the direct kernel; the caller holds the pool. 0 done, 1 not (no memory, or more
   than GDL__DCONV_MAX bytes of buffers). */
static int gdl__dconv_weight_grad(const gdl_conv_geom *g, int groups, int OC, const gdl_real *x, const gdl_real *gy,
                                  gdl_real *gw, int threads) {
    enum { UR = GDL__DCONV_UR, OCT = GDL__DCONV_OC };
    const int Cg = g->C / groups, OCg = OC / groups, KK = g->KH * g->KW, K = Cg * KK, OHW = g->OH * g->OW;
    const int Hp = g->H + 2 * g->PH, Wp = g->W + 2 * g->PW;
    const size_t xs = (size_t)g->C * Hp * Wp, ys = (size_t)groups * ((OCg + OCT - 1) / OCT) * OHW * OCT; /* a sample's */
    gdl__dconv_gw_job d;
    size_t xsz, ysz, asz, isz;
    int *rowoff, *po, k, q, nitems, sa;
    memset(&d, 0, sizeof d);
    d.g = g; d.groups = groups; d.OC = OC; d.x = x; d.gy = gy; d.gw = gw;
    d.ntile = (OCg + OCT - 1) / OCT;
    d.nk = (K + UR - 1) / UR;
    nitems = groups * d.ntile * d.nk;
    d.kc_blk = gdl__gemm_block(OHW, GDL__GEMM_KC, 1);
    /* images of at most 16 pixels on AVX-512: the kernel that keeps the sums in registers through a chunk
       (3x3, measured under load, 1 thread: 6.9 -> 6.65 ms; on 7x7 it lost, its half tiles reading the
       gradients twice; on AVX2, 3 rows a half tile, it lost on 3x3 too, 10.8 -> 12.1 ms) */
#if defined(GDL__GEMM_AVX512)
    d.ns_kernel = d.kc_blk >= OHW && OHW <= 16;
#endif
    d.span = gdl__dconv_gw_span ? gdl__dconv_gw_span : (int)(GDL__DCONV_GW_SPAN / (sizeof(gdl_real) * (xs + ys)));
    if (d.span < 1) d.span = 1;
    if (d.span > g->N) d.span = g->N;
    xsz = ((size_t)d.span * xs + 15) & ~(size_t)15;
    ysz = ((size_t)d.span * ys + 15) & ~(size_t)15;
    asz = (size_t)nitems * UR * OCT;
    isz = (size_t)d.nk * UR + (size_t)OHW;
    if (sizeof(gdl_real) * (2.0 * ((double)xsz + ysz) + asz + isz) > (double)GDL__DCONV_MAX ||
        !gdl__gemm_reserve(2 * (xsz + ysz) + asz + isz))
        return 1;
    d.xp[0] = gdl__gemm_shared.buf;
    d.xp[1] = d.xp[0] + xsz;
    d.gyt[0] = d.xp[1] + xsz;
    d.gyt[1] = d.gyt[0] + ysz;
    d.acc = d.gyt[1] + ysz;
    rowoff = (int *)(void *)(d.acc + asz);
    po = rowoff + (size_t)d.nk * UR;
    for (k = 0; k < d.nk * UR; k++) {
        const int r = k < K ? k : K - 1, c = r / KK, kh = r % KK / g->KW, kw = r % g->KW;
        rowoff[k] = (int)((ptrdiff_t)c * Hp * Wp + (ptrdiff_t)kh * g->DH * Wp + (ptrdiff_t)kw * g->DW);
    }
    for (q = 0; q < OHW; q++) po[q] = (int)((ptrdiff_t)(q / g->OW) * g->SH * Wp + (ptrdiff_t)(q % g->OW) * g->SW);
    d.rowoff = rowoff;
    d.po = po;
    /* a chunk's padded inputs and gradients in about 512 KB */
    d.chunk = (int)(((size_t)128 << 10) / (xs + ys + 1));
    if (d.chunk < 1) d.chunk = 1;
    /* the first span's copies alone, then each span's items beside the next span's copies. Several item
       tasks a thread (GDL__POOL_SPLIT), taken in turn: a thread the OS deschedules holds up only the item
       range it has begun. One on one thread, which then reads each chunk's copies once. An item's sums go
       through the samples in order whichever task has it. */
    d.nitask = threads <= 1 ? 1 : GDL__POOL_SPLIT * threads < nitems ? GDL__POOL_SPLIT * threads : nitems;
    d.buf = 1;
    for (sa = -d.span; sa < g->N; sa += d.span) {
        const int items = sa >= 0;
        d.sa = sa;
        d.sb = g->N - sa < d.span ? g->N : sa + d.span;
        d.na = sa + d.span;
        d.nprep = g->N - d.na < d.span ? g->N - d.na : d.span;
        if (d.nprep < 0) d.nprep = 0;
        d.buf ^= 1;
        if (!items) { /* only copies: the first span */
            const int keep = d.nitask;
            d.nitask = 0;
            gdl__pool_run(d.nprep, gdl__dconv_gw_task, &d);
            d.nitask = keep;
        } else {
            gdl__pool_run(d.nitask + d.nprep, gdl__dconv_gw_task, &d);
        }
    }
    return 0;
}

/* The input gradient of a stride-1 convolution by the direct kernel, in
   the bits of the implicit GEMM + col2im: for each (kh, kw) in turn, the
   column gradient sum over oc (in the GEMM's K blocks) of w[oc][c][kh][kw]
   * gy[oc][oh][ow], added into gx at the pixels it reaches (col2im adds
   only those). The kernel's vectors run over a group's input channels
   (wq: [tile][kh][kw][oc][OCT]), its broadcasts read gy padded by the
   kernel's reach less the padding (gq: a task's samples), its k loop runs
   over the output channels. A tile is GDL__DCONV_UR pixels of gx (in the
   order of the samples' pixels) by a channel tile; its sums start from gx,
   as col2im's (fresh: from zero, as from a gx of zeros, with no pass to zero
   it and none to read it). Task t does the samples [t*nb, t*nb + nb). */
typedef struct {
    const gdl_conv_geom *g;
    int groups, OC, ntile, nb, kc_blk, Hq, Wq, fresh;
    const gdl_real *w, *gy;
    gdl_real *gx;
    const float *wq;
    const int *ko; /* [OCg]: plane oc's offset in a padded sample of gy */
    size_t wsz, tsz;
} gdl__dconv_gx_job;

/* Direct kernel for the input gradient here: stride 1, padding within the kernel's reach (gy's padding
   is not negative), and the forward's conditions with the roles of C and OC swapped. */
static int gdl__dconv_gx_pays(const gdl_conv_geom *g, int groups, int OC) {
    return g->SH == 1 && g->SW == 1 && g->PH <= g->DH * (g->KH - 1) && g->PW <= g->DW * (g->KW - 1) &&
           g->C / groups * g->KH * g->KW >= 64 && g->C / groups >= GDL__DCONV_OC / 2 && OC / groups >= GDL__DCONV_OC / 2;
}

static void gdl__dconv_gx_task(void *p, int t, int nt) {
    const gdl__dconv_gx_job *d = (const gdl__dconv_gx_job *)p;
    const gdl_conv_geom *g = d->g;
    enum { UR = GDL__DCONV_UR, OCT = GDL__DCONV_OC };
    const int Cg = g->C / d->groups, OCg = d->OC / d->groups, OHW = g->OH * g->OW, HW = g->H * g->W;
    const int PT = g->DH * (g->KH - 1) - g->PH, PL = g->DW * (g->KW - 1) - g->PW, Hq = d->Hq, Wq = d->Wq;
    const int n0 = t * d->nb, cnt = g->N - n0 < d->nb ? g->N - n0 : d->nb, nq = cnt * HW;
    const ptrdiff_t HqWq = (ptrdiff_t)Hq * Wq, OCHqWq = d->OC * HqWq, CHW = (ptrdiff_t)g->C * HW;
    gdl_real *gq = gdl__gemm_shared.buf + d->wsz + (size_t)gdl__gemm_slot() * d->tsz;
    gdl_real *acc = gq + d->tsz - 2 * UR * OCT, *part = acc + UR * OCT;
    int xo[UR], qs[UR], qp[UR], qh[UR], qw[UR];
    int gi, ct, q0, i, o, kh, kw, pc;
    (void)nt;
    /* gy with the padding written out: (PT, PL) each side makes (Hq, Wq) */
    gdl__dconv_pad(d->gy + (ptrdiff_t)n0 * d->OC * OHW, (int64_t)cnt * d->OC, g->OH, g->OW, PT, PL, gq);
    for (gi = 0; gi < d->groups; gi++)
        for (ct = 0; ct < d->ntile; ct++) {
            const int c0 = ct * OCT, cn = Cg - c0 < OCT ? Cg - c0 : OCT;
            for (q0 = 0; q0 < nq; q0 += UR) {
                const int qn = nq - q0 < UR ? nq - q0 : UR;
                gdl__dconv_tile(q0, qn, HW, g->W, OCHqWq, Wq, 1, qs, qp, xo); /* gx pixels; (qh, qw) for col2im's reach */
                for (i = 0; i < qn; i++) {
                    qh[i] = qp[i] / g->W;
                    qw[i] = qp[i] % g->W;
                }
                /* the sums start from gx */
                if (d->fresh)
                    memset(acc, 0, sizeof(float) * UR * OCT);
                else
                    gdl__dconv_move(acc, qn, qs, qp, d->gx + n0 * CHW + ((ptrdiff_t)gi * Cg + c0) * HW, CHW, HW, cn, 1);
                for (kh = 0; kh < g->KH; kh++)
                    for (kw = 0; kw < g->KW; kw++) {
                        /* pixel (ih, iw) reads gy at (ih + PH - kh*DH, iw + PW - kw*DW), padded: + (PT, PL) */
                        const gdl_real *gs = gq + (ptrdiff_t)gi * OCg * HqWq + (ptrdiff_t)g->DH * (g->KH - 1 - kh) * Wq +
                                             (ptrdiff_t)g->DW * (g->KW - 1 - kw);
                        const float *wt = d->wq + ((((size_t)gi * d->ntile + ct) * g->KH + kh) * g->KW + kw) * OCg * OCT;
                        for (pc = 0; pc < OCg; pc += d->kc_blk)
                            gdl__dconv_kernel(OCg - pc < d->kc_blk ? OCg - pc : d->kc_blk, wt + (size_t)pc * OCT, d->ko + pc,
                                              gs, xo, part, pc == 0);
                        for (i = 0; i < qn; i++) { /* col2im adds only what reaches the pixel */
                            const int oh2 = qh[i] + g->PH - kh * g->DH, ow2 = qw[i] + g->PW - kw * g->DW;
                            if (oh2 < 0 || oh2 >= g->OH || ow2 < 0 || ow2 >= g->OW) continue;
                            for (o = 0; o < OCT; o++) acc[i * OCT + o] = acc[i * OCT + o] + part[i * OCT + o];
                        }
                    }
                gdl__dconv_move(acc, qn, qs, qp, d->gx + n0 * CHW + ((ptrdiff_t)gi * Cg + c0) * HW, CHW, HW, cn, 0);
            }
        }
}

/* The input gradient by the direct kernel (fresh: gx written, not added to); the caller holds the pool.
   0 done, 1 no memory. */
static int gdl__dconv_input_grad(const gdl_conv_geom *g, int groups, int OC, const gdl_real *w, const gdl_real *gy,
                                 gdl_real *gx, int fresh, int threads) {
    enum { UR = GDL__DCONV_UR, OCT = GDL__DCONV_OC };
    const int Cg = g->C / groups, OCg = OC / groups, KK = g->KH * g->KW;
    gdl__dconv_gx_job d;
    float *wq;
    int *ko;
    int gi, ct, kk, oc, o, split;
    memset(&d, 0, sizeof d);
    d.g = g; d.groups = groups; d.OC = OC; d.w = w; d.gy = gy; d.gx = gx; d.fresh = fresh;
    d.Hq = g->H + g->DH * (g->KH - 1);
    d.Wq = g->W + g->DW * (g->KW - 1);
    d.ntile = (Cg + OCT - 1) / OCT;
    d.kc_blk = gdl__gemm_block(OCg, GDL__GEMM_KC, 1);
    /* samples a task: about an equal share of GDL__POOL_SPLIT tasks a thread (a thread the OS deschedules
       then holds up only the few samples it has begun; one thread: all), at most 16. Each pixel's sums
       are the same whatever task has it. */
    split = threads <= 1 ? 1 : GDL__POOL_SPLIT * threads;
    d.nb = (g->N + split - 1) / split;
    if (d.nb > 16) d.nb = 16;
    d.wsz = ((size_t)groups * d.ntile * KK * OCg * OCT + (size_t)OCg + 15) & ~(size_t)15;
    d.tsz = (((size_t)d.nb * OC * d.Hq * d.Wq + 15) & ~(size_t)15) + (size_t)2 * UR * OCT;
    if (sizeof(gdl_real) * ((double)d.wsz + (double)threads * d.tsz) > (double)GDL__DCONV_MAX ||
        !gdl__gemm_reserve(d.wsz + (size_t)threads * d.tsz))
        return 1;
    wq = gdl__gemm_shared.buf;
    ko = (int *)(void *)(wq + (size_t)groups * d.ntile * KK * OCg * OCT);
    for (gi = 0; gi < groups; gi++)
        for (ct = 0; ct < d.ntile; ct++)
            for (kk = 0; kk < KK; kk++)
                for (oc = 0; oc < OCg; oc++) {
                    float *dst = wq + ((((size_t)gi * d.ntile + ct) * KK + kk) * OCg + oc) * OCT;
                    for (o = 0; o < OCT; o++) {
                        const int c = ct * OCT + o;
                        dst[o] = c < Cg ? w[(((ptrdiff_t)gi * OCg + oc) * Cg + c) * KK + kk] : 0.0f;
                    }
                }
    for (oc = 0; oc < OCg; oc++) ko[oc] = (int)((ptrdiff_t)oc * d.Hq * d.Wq);
    d.wq = wq;
    d.ko = ko;
    gdl__pool_run((g->N + d.nb - 1) / d.nb, gdl__dconv_gx_task, &d);
    return 0;
}

/* The forward by the direct kernel; the caller holds the pool. 0 done, 1 no memory (nothing done). */
static int gdl__dconv_forward(const gdl_conv_geom *g, int groups, int OC, int act, const gdl_real *x,
                              const gdl_real *w, const gdl_real *bias, gdl_real *out, gdl_real *pre, int threads) {
    enum { OCT = GDL__DCONV_OC };
    const int Cg = g->C / groups, OCg = OC / groups, KK = g->KH * g->KW, K = Cg * KK;
    const int Hp = g->H + 2 * g->PH, Wp = g->W + 2 * g->PW;
    gdl__dconv_job d;
    float *wp;
    int *ko;
    int gi, ot, k, o;
    memset(&d, 0, sizeof d);
    d.g = g; d.groups = groups; d.OC = OC; d.act = act; d.x = x; d.bias = bias; d.out = out; d.pre = pre;
    d.nb = gdl__conv_span(g, threads);
    d.kc_blk = gdl__gemm_block(K, GDL__GEMM_KC, 1);
    d.ntile = (OCg + OCT - 1) / OCT;
    d.wsz = ((size_t)groups * d.ntile * K * OCT + (size_t)K + 15) & ~(size_t)15;
    d.tsz = (((size_t)d.nb * g->C * Hp * Wp + 15) & ~(size_t)15) + (size_t)GDL__DCONV_UR * OCT;
    if (sizeof(gdl_real) * ((double)d.wsz + (double)threads * d.tsz) > (double)GDL__DCONV_MAX ||
        !gdl__gemm_reserve(d.wsz + (size_t)threads * d.tsz))
        return 1;
    wp = gdl__gemm_shared.buf;
    ko = (int *)(void *)(wp + (size_t)groups * d.ntile * K * OCT);
    for (gi = 0; gi < groups; gi++)
        for (ot = 0; ot < d.ntile; ot++) {
            float *wt = wp + ((size_t)gi * d.ntile + ot) * K * OCT;
            for (k = 0; k < K; k++)
                for (o = 0; o < OCT; o++) {
                    const int oc = ot * OCT + o;
                    wt[(size_t)k * OCT + o] = oc < OCg ? w[((ptrdiff_t)gi * OCg + oc) * K + k] : 0.0f;
                }
        }
    for (k = 0; k < K; k++) {
        const int c = k / KK, kh = k % KK / g->KW, kw = k % g->KW;
        ko[k] = (int)((ptrdiff_t)c * Hp * Wp + (ptrdiff_t)kh * g->DH * Wp + (ptrdiff_t)kw * g->DW);
    }
    d.wp = wp;
    d.ko = ko;
    gdl__pool_run((g->N + d.nb - 1) / d.nb, gdl__dconv_task, &d);
    return 0;
}

#ifdef GDL__GEMM_BF16
/* The bf16 precision's stride-1 convolution on AMX (gdl_cpu_set_fp32_precision):
   the forward, and the input gradient as the forward of gy over the flipped,
   transposed weights. Each task takes a sample: its input, padded, goes
   channel-last into bf16 ([Hq*Wq pixels + a margin][Cp channels], Cp a
   multiple of 32), so that the input pixels under 16 consecutive outputs of
   a tap, counted over the padded width Wq, are 16 rows Cp apart: one tile
   load, with no gathering. The outputs are computed at every padded column
   (Wq - OW of every Wq are not kept), 32 at a time by 32 channels (4 tiles),
   the K steps every tap by every 32 input channels. A tile of sums
   ([position][channel]) is transposed to the output planes, then the
   forward's epilogue (bias, activation, the pre-activation copy) runs on
   its runs. The sums are the tile unit's (not "ieee"'s bits); a sample's
   do not depend on which task has it. */
typedef struct {
    const gdl_conv_geom *g;
    int C, O, H, W, PT, PL, Hq, Wq, OH, OW, KH, KW, DH, DW, Cp, ncb, nob, add;
    int F;      /* taps of a kernel row folded into the channels (gdl__aconv_fold): 1 or KW */
    int margin; /* pixels after the padded input: the last tile's reach past it */
    const gdl_real *x; /* [N][C][H][W] */
    gdl_real *y;       /* [N][O][OH][OW] */
    const uint16_t *wb; /* [ob: O/32][tap][cb][2 halves][16 pairs][16][2] */
    gdl__gemm_args epi; /* the forward's bias, activation and pre (ldc = OH*OW), else none */
    gdl_real *pre;
    size_t wsz, tsz;   /* floats: the shared weights; a task's buffer */
    gdl__tile_list steps; /* the forward's K steps (gdl__aconv_task), tap by tap, 32 channels at a time */
    int nstep;
} gdl__aconv_job;

/* The taps of a kernel row folded into the K steps' channels, for Kc channels (the forward's and the
   weight gradient's input channels, the input gradient's output channels) and a kernel KW wide: all of
   them where that takes fewer steps of 32 channels (9 channels by 3 taps: one step a row, not three),
   else none. The products keep the unfolded order (tap by tap, channel by channel), so with an even
   number of channels, where no pair of a dot step straddles two taps, the bits are the unfolded passes'.
   Tests set gdl__aconv_fold_on to 0 to run the unfolded passes on such shapes too. */
static int gdl__aconv_fold_on = 1;
static int gdl__aconv_fold(int Kc, int KW) {
    return gdl__aconv_fold_on && KW > 1 && (Kc * KW + 31) / 32 < KW * ((Kc + 31) / 32) ? KW : 1;
}
/* Tap t of the K list (folded: kernel row t): its input's offset in positions from the output's */
static int gdl__aconv_off(const gdl__aconv_job *d, int t) {
    const int kwn = d->KW / d->F; /* taps a row left after the fold */
    return t / kwn * d->DH * d->Wq + t % kwn * d->F * d->DW;
}
/* ... and the kernel's tap (kh KW + kw) of its folded channel cf = f C + c: the row's tap f */
static int gdl__aconv_tap(const gdl__aconv_job *d, int t, int cf) {
    const int kwn = d->KW / d->F;
    return t / kwn * d->KW + t % kwn * d->F + cf / d->C;
}

/* One sample's input into xb: channel-last, padded (PT, PL), bf16; zero elsewhere. 16 channels by 16
   pixels at a time, the pixels counted over the plane (across its rows: the maps are often narrower than
   16), transposed in registers, rounded and stored a pixel (16 channels) at a time. Folded (F > 1),
   position p's channels f C + c hold the padded plane's pixel p + f DW, channel c: the F taps of a
   kernel row are one K step's channels. */
static void gdl__aconv_input(const gdl__aconv_job *d, const gdl_real *x, uint16_t *xb) {
    const int Cp = d->Cp, W = d->W, HW = d->H * d->W;
    GDL__ALIGNAS(64) float tr[16 * 16], blk[16 * 16];
    int c0, p0, i, f;
    memset(xb, 0, sizeof(uint16_t) * ((size_t)d->Hq * d->Wq + d->margin) * Cp);
    for (c0 = 0; c0 < d->C; c0 += 16) {
        const int cn = d->C - c0 < 16 ? d->C - c0 : 16;
        const gdl_real *xc = x + (ptrdiff_t)c0 * HW;
        int ih = 0, iw = 0; /* pixel p0's row and column */
        for (p0 = 0; p0 < HW; p0 += 16) {
            const int pn = HW - p0 < 16 ? HW - p0 : 16;
            if (pn == 16) {
                gdl__dconv_tr16(xc + p0, HW, cn, tr, 16, 16);
            } else { /* the plane's last pixels: no reading past it */
                const __mmask16 m = (__mmask16)((1u << pn) - 1);
                for (i = 0; i < 16; i++)
                    _mm512_store_ps(blk + i * 16, i < cn ? _mm512_maskz_loadu_ps(m, xc + (ptrdiff_t)i * HW + p0)
                                                         : _mm512_setzero_ps());
                gdl__dconv_tr16(blk, 16, 16, tr, 16, 16);
            }
            for (i = 0; i < pn; i++) {
                const ptrdiff_t at = (ptrdiff_t)(ih + d->PT) * d->Wq + d->PL + iw;
                const __m256i v = (__m256i)_mm512_cvtneps_pbh(_mm512_load_ps(tr + i * 16));
                for (f = 0; f < d->F && at - f * d->DW >= 0; f++) /* cn channels only: the next tap's follow */
                    _mm256_mask_storeu_epi16((void *)(xb + (size_t)(at - f * d->DW) * Cp + f * d->C + c0),
                                             (__mmask16)((1u << cn) - 1), v);
                if (++iw == W) {
                    iw = 0;
                    ih++;
                }
            }
        }
    }
}

/* A run of n <= 32 sums into dst (add: added to it), 16 at a time by masks: a call of memcpy a run
   cost more than the copy (a 28-wide map's block of 32 positions is two runs a channel). */
static void gdl__aconv_put(gdl_real *dst, const float *src, int n, int add) {
    int i;
    for (i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(m, src + i);
        if (add) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, dst + i), v);
        _mm512_mask_storeu_ps(dst + i, m, v);
    }
}

static void gdl__aconv_task(void *p, int t, int nt) {
    const gdl__aconv_job *d = (const gdl__aconv_job *)p;
    const int Cp = d->Cp, Wq = d->Wq, OHW = d->OH * d->OW, nq = d->OH * Wq, ntap = d->KH * (d->KW / d->F);
    const size_t kstep = (size_t)d->ncb * 1024; /* bf16 elements of one tap's weights, a 32-channel block */
    uint16_t *xb = (uint16_t *)(void *)(gdl__gemm_shared.buf + d->wsz + (size_t)gdl__gemm_slot() * d->tsz);
    GDL__ALIGNAS(64) float s[32 * 32], st[32 * 32];
    gdl_real *y = d->y + (ptrdiff_t)t * d->O * OHW;
    gdl_real *pre = d->pre ? d->pre + (ptrdiff_t)t * d->O * OHW : NULL;
    int q0, ob, i, o, k;
    (void)nt;
    gdl__tile_ready();
    gdl__aconv_input(d, d->x + (ptrdiff_t)t * d->C * d->H * d->W, xb);
    for (q0 = 0; q0 < nq; q0 += 32) {
        int run_i[40], run_at[40], run_len[40], nrun = 0;
        for (i = 0; i < 32 && q0 + i < nq;) { /* the kept outputs among positions q0 .. q0+31: runs along a row */
            const int q = q0 + i, oh = q / Wq, ow = q % Wq;
            int len = d->OW - ow;
            if (len <= 0) {
                i += Wq - ow;
                continue;
            }
            if (len > 32 - i) len = 32 - i;
            run_i[nrun] = i;
            run_at[nrun] = oh * d->OW + ow;
            run_len[nrun++] = len;
            i += len;
        }
        if (!nrun) continue;
        for (ob = 0; ob < d->nob; ob++) {
            const uint16_t *wo = d->wb + (size_t)ob * ntap * kstep;
            const int on = d->O - ob * 32 < 32 ? d->O - ob * 32 : 32;
            gdl__tile_steps(xb + (size_t)q0 * Cp, wo, &d->steps, d->nstep, 0, s);
            for (k = 0; k < 4; k++) /* st[channel][position] */
                gdl__dconv_tr16(s + (k >> 1) * 512 + (k & 1) * 16, 32, 16, st + (k & 1) * 512 + (k >> 1) * 16, 32, 16);
            for (o = 0; o < on; o++) {
                gdl_real *yo = y + (ptrdiff_t)(ob * 32 + o) * OHW;
                const float *so = st + o * 32;
                for (k = 0; k < nrun; k++) gdl__aconv_put(yo + run_at[k], so + run_i[k], run_len[k], d->add);
            }
            if (d->epi.bias || pre || d->epi.act >= 0)
                for (k = 0; k < nrun; k++) gdl__gemm_epi_at(&d->epi, y, pre, ob * 32, on, run_at[k], run_len[k]);
        }
    }
}

#ifndef GDL__AGW_CHUNK
#define GDL__AGW_CHUNK 16
#endif
/* The weight gradient's samples a group (gdl__agw_task): one where a sample's outputs fill K steps of
   32 well, else the most (a power of two to the chunk's) whose stacked maps stay about 1024 positions. */
static int gdl__agw_group(const gdl_conv_geom *g) {
    const int P = (g->H + 2 * g->PH) * (g->W + 2 * g->PW);
    int G = 1;
    if (g->OH * (g->W + 2 * g->PW) < 192)
        while (G < GDL__AGW_CHUNK && 2 * G * P <= 1024) G *= 2;
    return G;
}
/* ... and the positions a group of G maps spans, P = Hq Wq apart, to its last output: its K before
   rounding up to the K step's 32 */
static int gdl__agw_span(const gdl_conv_geom *g, int G) {
    const int Wq = g->W + 2 * g->PW;
    return (G - 1) * (g->H + 2 * g->PH) * Wq + g->OH * Wq;
}

/* Where it runs: bf16 precision, stride 1, one group, at least 8 input and 16 output channels (fewer
   would leave most of a tile's 32 channels empty). */
static int gdl__aconv_pays(const gdl_conv_geom *g, int groups, int C, int O) {
    return gdl__cpu_bf16_gemm && groups == 1 && g->SH == 1 && g->SW == 1 && C >= 8 && O >= 16;
}
/* The share of a pass's products that are not padding: of its positions (the outputs kept of those
   computed, 32 a block; the weight gradient's of its group's K) and of its input channels (the
   forward's K, the weight gradient's columns; the input gradient's K is the output channels), of a
   multiple of 32: the smaller. The tile unit takes any (its rate is
   so far above the FMAs' that the padding costs little); vdpbf16ps, at twice the FMAs' rate, only half
   or more (3 x 3 maps fill 9 of 32 positions: there the f32 passes are faster). The channels are
   counted folded (gdl__aconv_fold: 9 channels by 3 taps fill 27 of 32).
   tests/test_conv.c sets the floor to 0 to run every case on this path. */
#ifdef GDL__GEMM_AMX
#define GDL__ACONV_FILL 0.0
#else
#define GDL__ACONV_FILL 0.5
#endif
static double gdl__aconv_fill_min = GDL__ACONV_FILL;
static double gdl__aconv_fill(int pass, const gdl_conv_geom *g, int OC) {
    const int Kc0 = pass == 2 ? OC : g->C, Kc = Kc0 * gdl__aconv_fold(Kc0, g->KW); /* the channels padded to 32 */
    const double chan = (double)Kc / ((Kc + 31) / 32 * 32);
    double pos;
    if (pass == 1) {
        const int G0 = gdl__agw_group(g), G = G0 < g->N ? G0 : g->N;
        pos = (double)G * g->OH * g->OW / ((gdl__agw_span(g, G) + 31) / 32 * 32);
    } else {
        const int rows = pass == 2 ? g->H : g->OH, cols = pass == 2 ? g->W : g->OW;
        const int Wq = pass == 2 ? g->W + g->DW * (g->KW - 1) : g->W + 2 * g->PW;
        pos = (double)rows * cols / (((int64_t)rows * Wq + 31) / 32 * 32);
    }
    return pos < chan ? pos : chan;
}
/* ... for pass (conv_implicit's) of a convolution of OC output channels: the input gradient's padding
   within the kernel's reach (gy padded, not cropped), the weight gradient's group of maps at least 32
   positions over the padded width (below, its one K step is mostly padding: the f32 kernel is faster),
   and the products filled enough for this path (above). */
static int gdl__aconv_takes(int pass, const gdl_conv_geom *g, int groups, int OC) {
    int ok;
    if (pass == 0) {
        ok = gdl__aconv_pays(g, groups, g->C, OC);
    } else if (pass == 1) {
        const int G = gdl__agw_group(g);
        ok = gdl__aconv_pays(g, groups, g->C, OC) && gdl__agw_span(g, G < g->N ? G : g->N) >= 32;
    } else {
        ok = gdl__aconv_pays(g, groups, OC, g->C) && g->PH <= g->DH * (g->KH - 1) && g->PW <= g->DW * (g->KW - 1);
    }
    return ok && (gdl__aconv_fill_min <= 0 || gdl__aconv_fill(pass, g, OC) >= gdl__aconv_fill_min);
}

/* The forward's K steps from a block's first input position (A: 32 positions Cp channels apart by 32
   channels) and its 32 output channels' weights (B): each tap's (folded: each kernel row's), 32 input
   channels a step. 0, or 1 with no memory. */
static int gdl__aconv_list(gdl__aconv_job *d) {
    const int nt = d->KH * (d->KW / d->F);
    ptrdiff_t *ao, *bo;
    int tap, cb, s = 0;
    d->nstep = nt * d->ncb;
    if (!(ao = gdl__tile_list_alloc(&d->steps, d->nstep))) return 1;
    bo = ao + d->nstep;
    for (tap = 0; tap < nt; tap++)
        for (cb = 0; cb < d->ncb; cb++, s++) {
            ao[s] = (ptrdiff_t)gdl__aconv_off(d, tap) * d->Cp + cb * 32;
            bo[s] = ((ptrdiff_t)tap * d->ncb + cb) * 1024;
        }
    d->steps.a1 = (ptrdiff_t)16 * d->Cp;
    d->steps.lda = d->Cp * 2;
    d->steps.b1 = 512;
    d->steps.ldb = 64;
    return 0;
}

/* The weights as B tiles (d->wb): for each block of 32 output channels, each tap of the K list (folded:
   each kernel row) and each 32 of its channels, two halves (output channels 0-15, 16-31) of 16 pairs of
   channels by 16 outputs, bf16, channel c' = f C + c being channel c of the row's tap f. A tile row's 32
   values, 8 output channels by a pair of channels at a time, are a gather of 16: w(oc, c, tap) =
   w[oc][c][tap] (flip: w[c][oc][KK - 1 - tap]) = w[oc so + c sc + tap']. */
static void gdl__aconv_pack(const gdl__aconv_job *d, const gdl_real *w, int flip, uint16_t *wb) {
    const int ntap = d->KH * d->KW, nt = d->KH * (d->KW / d->F), Cf = d->C * d->F;
    const int so = flip ? ntap : d->C * ntap, sc = flip ? d->O * ntap : ntap;
    GDL__ALIGNAS(64) int lane[16];
    int ob, t, cb, kp, e, o, j;
    for (ob = 0; ob < d->nob; ob++)
        for (t = 0; t < nt; t++)
            for (cb = 0; cb < d->ncb; cb++)
                for (kp = 0; kp < 16; kp++) {
                    __mmask16 cm = 0; /* the lanes of real channels */
                    for (j = 0; j < 16; j++) {
                        const int cf = cb * 32 + 2 * kp + (j & 1), tap = gdl__aconv_tap(d, t, cf);
                        lane[j] = (j >> 1) * so + cf % d->C * sc + (flip ? ntap - 1 - tap : tap);
                        if (cf < Cf) cm |= (__mmask16)(1u << j);
                    }
                    for (e = 0; e < 2; e++)
                        for (o = 0; o < 16; o += 8) {
                            const int oc = ob * 32 + e * 16 + o;
                            __mmask16 m = cm;
                            for (j = 0; j < 16; j++)
                                if (oc + (j >> 1) >= d->O) m &= (__mmask16) ~(1u << j);
                            _mm256_storeu_si256(
                                (__m256i *)(void *)(wb + ((((size_t)ob * nt + t) * d->ncb + cb) * 2 + e) * 512 +
                                                    (size_t)kp * 32 + (size_t)o * 2),
                                (__m256i)_mm512_cvtneps_pbh(_mm512_mask_i32gather_ps(
                                    _mm512_setzero_ps(), m, _mm512_load_si512((const void *)lane),
                                    w + (ptrdiff_t)oc * so, 4)));
                        }
                }
}

/* The stride-1 convolution of x [N][C][H][W], padded (PT, PL) to Hq x Wq, by the
   weights wt(o, c, kh, kw) = w[o][c][kh][kw] (flip 0: the forward) or
   w[c][o][KH-1-kh][KW-1-kw] (flip 1: the input gradient, w [C][O][KH][KW] being the
   forward's [OC][C]), into y [N][O][OH][OW] (add: y +=). The caller holds the pool.
   0 done, 1 no memory (nothing done). */
static int gdl__aconv_run(const gdl_conv_geom *g, int C, int O, int H, int W, int PT, int PL, int Hq, int Wq, int OH,
                          int OW, int flip, int add, const gdl_real *x, const gdl_real *w, gdl_real *y,
                          const gdl_real *bias, int act, gdl_real *pre, int threads) {
    const int KH = g->KH, KW = g->KW, F = gdl__aconv_fold(C, KW), nt = KH * (KW / F);
    gdl__aconv_job d;
    uint16_t *wb;
    memset(&d, 0, sizeof d);
    d.g = g; d.C = C; d.O = O; d.H = H; d.W = W; d.PT = PT; d.PL = PL; d.Hq = Hq; d.Wq = Wq; d.OH = OH; d.OW = OW;
    d.KH = KH; d.KW = KW; d.DH = g->DH; d.DW = g->DW; d.add = add; d.x = x; d.y = y; d.pre = pre;
    d.F = F;
    d.Cp = (C * F + 31) / 32 * 32;
    d.ncb = d.Cp / 32;
    d.nob = (O + 31) / 32;
    gdl__gemm_args_init(&d.epi, 0, 0, O, OH * OW, 1, 1, NULL, 0, NULL, 0, 0, NULL, OH * OW);
    d.epi.bias = bias;
    d.epi.act = act;
    d.wsz = ((size_t)d.nob * nt * d.ncb * 1024 / 2 + 15) & ~(size_t)15;
    d.margin = 32 + (KW - 1) * g->DW;
    d.tsz = ((((size_t)Hq * Wq + d.margin) * d.Cp) / 2 + 15) & ~(size_t)15;
    if (sizeof(gdl_real) * ((double)d.wsz + (double)threads * d.tsz) > (double)GDL__DCONV_MAX ||
        !gdl__gemm_reserve(d.wsz + (size_t)threads * d.tsz))
        return 1;
    wb = (uint16_t *)(void *)gdl__gemm_shared.buf;
    gdl__aconv_pack(&d, w, flip, wb);
    d.wb = wb;
    if (gdl__aconv_list(&d)) return 1;
    gdl__pool_run(g->N, gdl__aconv_task, &d);
    free((void *)d.steps.ao);
    return 0;
}

/* The bf16 precision's weight gradient of a stride-1 convolution on AMX:
   gw[o][c][kh][kw] += the sum over the samples and output pixels of
   gy[o][oh][ow] x[c][oh + kh DH - PH][ow + kw DW - PW]. The K of the tile
   products runs over the output positions counted over the padded width
   (q = oh Wq + ow; gy's copy is zero at the Wq - OW columns it does not
   have): an A tile is 16 channels of gy by 32 positions ([O][Lk] bf16), a
   B tile 16 pairs of positions by 16 input channels, read from the padded
   input channel-last with each pair of positions side by side ([pair][Cp][2]:
   one copy for taps at an even offset q + t, one shifted by a position for
   the odd ones). The batch goes in chunks of GDL__AGW_CHUNK samples, each
   chunk's sums into its own block of partial sums (4 tiles of 32 x 32 for
   every tap, 32 output and 32 input channels), the chunks' sums then added
   in their order and into gw: the bits do not depend on which thread took a
   chunk. Small maps go G samples at a time, stacked P = Hq Wq positions
   apart as one tall padded map (gy's copy zero between them), so that a
   block's partial sums are loaded and stored once a group rather than once
   a sample, and a 3 x 3 map's 15 positions do not each take a K step of
   32. */
typedef struct {
    gdl__aconv_job a;    /* the input's geometry and channel-last copy (gdl__aconv_input) */
    int N, O, Op, nob, Lk, nchunk;
    int G, P;            /* samples a group, positions between them */
    int npos;            /* positions of the channel-last input: G P and the margin */
    const gdl_real *gy;  /* [N][O][OH][OW] */
    float *part;         /* [chunk][tap][ob][cb][32][32] */
    size_t psz;          /* floats a chunk's partial sums */
    gdl__tile_list steps; /* K steps of 32 positions: A from gy's copy, B from a paired input copy */
} gdl__agw_job;

static void gdl__agw_task(void *p, int t, int nt) {
    const gdl__agw_job *d = (const gdl__agw_job *)p;
    const gdl__aconv_job *a = &d->a;
    const int Cp = a->Cp, Wq = a->Wq, ntap = a->KH * (a->KW / a->F), OHW = a->OH * a->OW;
    const int npair = d->npos / 2;
    uint16_t *xcl = (uint16_t *)(void *)(gdl__gemm_shared.buf + a->wsz + (size_t)gdl__gemm_slot() * a->tsz);
    uint16_t *xv0 = xcl + (size_t)d->npos * Cp, *xv1 = xv0 + (size_t)npair * Cp * 2;
    uint16_t *gyb = xv1 + (size_t)npair * Cp * 2;
    float *part = d->part + (size_t)t * d->psz;
    const __m512i lo = _mm512_setr_epi32(0x200000, 0x210001, 0x220002, 0x230003, 0x240004, 0x250005, 0x260006,
                                         0x270007, 0x280008, 0x290009, 0x2a000a, 0x2b000b, 0x2c000c, 0x2d000d,
                                         0x2e000e, 0x2f000f);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    int n, n0 = t * GDL__AGW_CHUNK, n1 = n0 + GDL__AGW_CHUNK < d->N ? n0 + GDL__AGW_CHUNK : d->N;
    int i, o, oh, tap, ob, cb, s;
    (void)nt;
    gdl__tile_ready();
    for (n = n0; n < n1; n += d->G) {
        const int gn = n1 - n < d->G ? n1 - n : d->G; /* this group's samples */
        const int npos = gn * d->P + a->margin, Lk = (gdl__agw_span(a->g, gn) + 31) / 32 * 32;
        for (s = 0; s < gn; s++) /* in order: each sample's zeroed margin is the next one's padding */
            gdl__aconv_input(a, a->x + (ptrdiff_t)(n + s) * a->C * a->H * a->W, xcl + (size_t)s * d->P * Cp);
        for (i = 0; i + 1 < npos; i += 2) { /* positions (i, i+1) into xv0, (i+1, i+2) into xv1 */
            int c;
            for (c = 0; c < Cp; c += 32) {
                const __m512i a0 = _mm512_loadu_si512((const void *)(xcl + (size_t)i * Cp + c));
                const __m512i a1 = _mm512_loadu_si512((const void *)(xcl + (size_t)(i + 1) * Cp + c));
                const __m512i a2 = i + 2 < npos ? _mm512_loadu_si512((const void *)(xcl + (size_t)(i + 2) * Cp + c))
                                                : _mm512_setzero_si512();
                uint16_t *d0 = xv0 + ((size_t)(i / 2) * Cp + c) * 2, *d1 = xv1 + ((size_t)(i / 2) * Cp + c) * 2;
                _mm512_storeu_si512((void *)d0, _mm512_permutex2var_epi16(a0, lo, a1));
                _mm512_storeu_si512((void *)(d0 + 32), _mm512_permutex2var_epi16(a0, hi, a1));
                _mm512_storeu_si512((void *)d1, _mm512_permutex2var_epi16(a1, lo, a2));
                _mm512_storeu_si512((void *)(d1 + 32), _mm512_permutex2var_epi16(a1, hi, a2));
            }
        }
        memset(gyb, 0, sizeof(uint16_t) * (size_t)d->Op * d->Lk);
        for (s = 0; s < gn; s++) /* gy's rows: sample s, channel o, row oh at s P + oh Wq of row o */
            for (o = 0; o < d->O; o++)
                for (oh = 0; oh < a->OH; oh++) {
                    const gdl_real *src = d->gy + ((ptrdiff_t)(n + s) * d->O + o) * OHW + (ptrdiff_t)oh * a->OW;
                    uint16_t *dst = gyb + (size_t)o * d->Lk + (size_t)s * d->P + (size_t)oh * Wq;
                    int ow;
                    for (ow = 0; ow < a->OW; ow += 16) {
                        const int k = a->OW - ow < 16 ? a->OW - ow : 16;
                        const __mmask16 m = (__mmask16)((1u << k) - 1);
                        _mm256_mask_storeu_epi16((void *)(dst + ow), m,
                                                 (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + ow)));
                    }
                }
        for (tap = 0; tap < ntap; tap++) {
            const int off = gdl__aconv_off(a, tap);
            const uint16_t *xv = off % 2 ? xv1 + (size_t)(off - 1) / 2 * Cp * 2 : xv0 + (size_t)off / 2 * Cp * 2;
            for (ob = 0; ob < d->nob; ob++)
                for (cb = 0; cb < a->ncb; cb++) {
                    float *acc = part + (((size_t)tap * d->nob + ob) * a->ncb + cb) * 1024;
                    gdl__tile_steps(gyb + (size_t)ob * 32 * d->Lk, xv + (size_t)cb * 64, &d->steps, Lk / 32, n != n0,
                                    acc);
                }
        }
    }
}

/* The weight gradient (gw += ...) by the tile unit; the caller holds the pool. 0 done, 1 no memory. */
static int gdl__agw_run(const gdl_conv_geom *g, int OC, const gdl_real *x, const gdl_real *gy, gdl_real *gw,
                        int threads) {
    const int KK = g->KH * g->KW, F = gdl__aconv_fold(g->C, g->KW), nt = g->KH * (g->KW / F);
    gdl__agw_job d;
    gdl__aconv_job *a = &d.a;
    size_t tsz, npos;
    int ch, t, ob, cb, o, c;
    memset(&d, 0, sizeof d);
    a->g = g; a->C = g->C; a->O = OC; a->H = g->H; a->W = g->W; a->PT = g->PH; a->PL = g->PW;
    a->Hq = g->H + 2 * g->PH; a->Wq = g->W + 2 * g->PW; a->OH = g->OH; a->OW = g->OW;
    a->KH = g->KH; a->KW = g->KW; a->DH = g->DH; a->DW = g->DW; a->x = x;
    a->F = F;
    a->Cp = (g->C * F + 31) / 32 * 32;
    a->ncb = a->Cp / 32;
    /* past the last position a K step reads: the farthest tap, 32 positions, one for the shifted copy, even */
    a->margin = ((g->KH - 1) * g->DH * a->Wq + (g->KW - 1) * g->DW + 34 + 1) & ~1;
    d.G = gdl__agw_group(g);
    d.P = a->Hq * a->Wq;
    npos = (size_t)d.G * d.P + a->margin;
    d.npos = (int)npos;
    d.N = g->N; d.O = OC; d.gy = gy;
    d.nob = (OC + 31) / 32;
    d.Op = d.nob * 32;
    d.Lk = (gdl__agw_span(g, d.G) + 31) / 32 * 32; /* the longest group's K */
    d.nchunk = (g->N + GDL__AGW_CHUNK - 1) / GDL__AGW_CHUNK;
    d.psz = (size_t)nt * d.nob * a->ncb * 1024;
    /* a thread's buffer: the channel-last input, its two paired copies, gy's copy (bf16: halves of floats) */
    tsz = npos * a->Cp + npos / 2 * a->Cp * 2 * 2 + (size_t)d.Op * d.Lk;
    a->tsz = ((tsz + 1) / 2 + 15) & ~(size_t)15;
    a->wsz = ((size_t)d.nchunk * d.psz + 15) & ~(size_t)15;
    if (sizeof(gdl_real) * ((double)a->wsz + (double)threads * a->tsz) > (double)GDL__DCONV_MAX ||
        !gdl__gemm_reserve(a->wsz + (size_t)threads * a->tsz))
        return 1;
    d.part = gdl__gemm_shared.buf;
    {
        ptrdiff_t *o = gdl__tile_list_alloc(&d.steps, d.Lk / 32);
        int s;
        if (!o) return 1;
        for (s = 0; s < d.Lk / 32; s++) {
            o[s] = (ptrdiff_t)s * 32;                 /* gy [Op][Lk]: 32 positions further along the rows */
            o[d.Lk / 32 + s] = (ptrdiff_t)s * 32 * a->Cp; /* the pairs [position / 2][Cp][2]: 16 pairs on */
        }
        d.steps.a1 = (ptrdiff_t)16 * d.Lk;
        d.steps.lda = d.Lk * 2;
        d.steps.b1 = 32;
        d.steps.ldb = a->Cp * 4;
    }
    gdl__pool_run(d.nchunk, gdl__agw_task, &d);
    free((void *)d.steps.ao);
    for (t = 0; t < nt; t++) /* each block's chunks added in order, then into gw */
        for (ob = 0; ob < d.nob; ob++)
            for (cb = 0; cb < a->ncb; cb++) {
                const size_t at = (((size_t)t * d.nob + ob) * a->ncb + cb) * 1024;
                GDL__ALIGNAS(64) float sum[1024];
                for (c = 0; c < 1024; c += 16) {
                    __m512 v = _mm512_loadu_ps(d.part + at + c);
                    for (ch = 1; ch < d.nchunk; ch++) v = _mm512_add_ps(v, _mm512_loadu_ps(d.part + (size_t)ch * d.psz + at + c));
                    _mm512_store_ps(sum + c, v);
                }
                for (o = 0; o < 32 && ob * 32 + o < OC; o++)
                    for (c = 0; c < 32 && cb * 32 + c < g->C * F; c++) { /* channel c' = f C + c of the row's tap f */
                        const int cf = cb * 32 + c, tap = gdl__aconv_tap(a, t, cf);
                        gw[((ptrdiff_t)(ob * 32 + o) * g->C + cf % g->C) * KK + tap] += sum[o * 32 + c];
                    }
            }
    return 0;
}
#endif
#endif

/* Group gi's implicit GEMM of pass 0 (y = W col(x) + bias, act) or 1 (gw += sum over n of gy[n] col(x[n])^T;
   the samples are its segments). Pass 0's samples are sB = C*H*W, sC = OC*OH*OW apart. */
static void gdl__conv_gemm_args(int pass, const gdl_conv_geom *g, int groups, int OC, int gi, int act,
                                const gdl_real *x, const gdl_real *w, const gdl_real *gy, const gdl_real *bias,
                                gdl_real *out, gdl_real *pre, gdl__gemm_args *m) {
    const int Cg = g->C / groups, OCg = OC / groups, CgKK = Cg * g->KH * g->KW, OHW = g->OH * g->OW;
    const gdl_real *xg = x + (ptrdiff_t)gi * Cg * g->H * g->W;
    if (pass == 1) {
        gdl__gemm_args_init(m, 0, 1, OCg, CgKK, OHW, 1, gy + (ptrdiff_t)gi * OCg * OHW, OHW, xg, 0, 1,
                            out + (ptrdiff_t)gi * OCg * CgKK, CgKK);
        m->nseg = g->N;
        m->sA = (ptrdiff_t)OC * OHW;
        m->sB = (ptrdiff_t)g->C * g->H * g->W;
    } else {
        gdl__gemm_args_init(m, 0, 0, OCg, OHW, CgKK, 1, w + (ptrdiff_t)gi * OCg * CgKK, CgKK, xg, 0, 0,
                            out + (ptrdiff_t)gi * OCg * OHW, OHW);
        m->bias = bias ? bias + gi * OCg : NULL;
        m->pre = pre ? pre + (ptrdiff_t)gi * OCg * OHW : NULL;
        m->act = act;
    }
    m->conv = g;
}
#endif

/* A weight gradient of fewer outputs than this (a one-channel input's first convolution: 32 x 9) runs on one
   thread: its grid has a few cells at most and its sum, over every pixel of the batch, cannot be split, so
   two threads would only wait on each other's packing (descheduled beside a busy process: the whole op).
   On x86 the direct kernel takes those whose output channels fill its vector tile (gdl__dconv_gw_pays). */
#ifndef GDL__CONV_GW_ONE
#define GDL__CONV_GW_ONE 1024
#endif
static int gdl__cpu_conv_implicit(int pass, const gdl_conv_geom *g, int groups, int OC, int act, const gdl_real *x,
                                  const gdl_real *w, const gdl_real *gy, const gdl_real *bias, gdl_real *out,
                                  gdl_real *pre) {
#ifdef GDL__GEMM_CBLAS
    (void)pass; (void)g; (void)groups; (void)OC; (void)act; (void)x; (void)w; (void)gy; (void)bias; (void)out;
    (void)pre;
    return 1; /* the packing is the built-in GEMM's */
#else
    const int Cg = g->C / groups, OCg = OC / groups, CgKK = Cg * g->KH * g->KW, OHW = g->OH * g->OW;
    const ptrdiff_t CHW = (ptrdiff_t)g->C * g->H * g->W;
    const int threads = gdl_get_num_threads(), fresh = pass == 3; /* pass 3: pass 2 writing out, not adding */
    gdl__gemm_args m;
    gdl__gemm_job j;
    int gi, n, nb;
    if (fresh) pass = 2;
    if (gdl__conv_path == 0) return 1;
    if (g->N <= 0 || OCg <= 0 || CgKK <= 0) return 1;
    /* the input gradient's tasks are the samples: fewer samples than threads would leave threads idle, and
       the caller's GEMM takes it (but not under the bf16 precision: that GEMM's products are bf16's, this
       file's direct passes f32's, so the path, and the bits, would depend on the thread count) */
    if (pass == 2 && threads > 1 && g->N < threads && !gdl__cpu_bf16_gemm) return 1;
    if (!gdl__pool_acquire()) return 1; /* another thread's GEMM has the packing buffers */
#ifdef GDL__GEMM_BF16
    if (pass == 0 && gdl__aconv_takes(0, g, groups, OC) &&
        gdl__aconv_run(g, g->C, OC, g->H, g->W, g->PH, g->PW, g->H + 2 * g->PH, g->W + 2 * g->PW, g->OH, g->OW, 0, 0, x,
                       w, out, bias, act, pre, threads) == 0) {
        gdl__pool_release();
        return 0;
    }
    if (pass == 1 && gdl__aconv_takes(1, g, groups, OC) && gdl__agw_run(g, OC, x, gy, out, threads) == 0) {
        gdl__pool_release();
        return 0;
    }
    if (pass == 2 && gdl__aconv_takes(2, g, groups, OC) &&
        gdl__aconv_run(g, OC, g->C, g->OH, g->OW, g->DH * (g->KH - 1) - g->PH, g->DW * (g->KW - 1) - g->PW,
                       g->H + g->DH * (g->KH - 1), g->W + g->DW * (g->KW - 1), g->H, g->W, 1, !fresh, gy, w, out, NULL,
                       -1, NULL, threads) == 0) {
        gdl__pool_release();
        return 0;
    }
#endif
#ifdef GDL__DCONV
    if (pass == 0 && gdl__conv_path != 2 && gdl__dconv_pays(g, groups, OC) &&
        gdl__dconv_forward(g, groups, OC, act, x, w, bias, out, pre, threads) == 0) {
        gdl__pool_release();
        return 0;
    }
    if (pass == 2 && gdl__conv_path != 2 && gdl__dconv_gx_pays(g, groups, OC) &&
        gdl__dconv_input_grad(g, groups, OC, w, gy, out, fresh, threads) == 0) {
        gdl__pool_release();
        return 0;
    }
#endif
    if (fresh) { /* the other paths add: the caller zeroes out and asks for pass 2 */
        gdl__pool_release();
        return 1;
    }
#ifdef GDL__DCONV
    if (pass == 1 && gdl__conv_path != 2 && gdl__dconv_gw_pays(g, groups, OC) &&
        gdl__dconv_weight_grad(g, groups, OC, x, gy, out, threads) == 0) {
        gdl__pool_release();
        return 0;
    }
#endif
    /* the direct kernel's passes are chosen by their own tests above; the implicit GEMM by shape */
    if (gdl__conv_path < 0 && !gdl__conv_implicit_pays(pass, g)) {
        gdl__pool_release();
        return 1;
    }
    nb = gdl__conv_span(g, threads);
    if (pass == 2 || (pass == 0 && (nb > 1 || (threads > 1 && g->N >= threads &&
                                               (double)OCg * OHW * CgKK * g->N >= GDL__GEMM_MT_MIN)))) {
        /* tasks of nb samples (one each when the images are large), each whole on its thread */
        gdl__conv_task_job d;
        memset(&d, 0, sizeof d);
        if (pass == 2)
            gdl__gemm_args_init(&m, 1, 0, CgKK, nb * OHW, OCg, 1, w, CgKK, gy, OHW, 0, out, OHW);
        else
            gdl__conv_gemm_args(0, g, groups, OC, 0, act, x, w, gy, bias, out, pre, &m);
        m.N = nb * OHW;
        gdl__gemm_plan(&m, &d.j);
        d.g = g; d.pass = pass; d.groups = groups; d.OC = OC; d.act = act; d.nb = nb;
        d.x = x; d.w = w; d.gy = gy; d.bias = bias; d.out = out; d.pre = pre;
        d.csz = pass == 2 ? ((size_t)g->C * g->KH * g->KW * OHW * nb + 15) & ~(size_t)15 : 0;
        if (!gdl__gemm_reserve((size_t)threads * (d.j.asz + d.j.bsz + d.csz))) {
            gdl__pool_release();
            return 1;
        }
        gdl__pool_run((g->N + nb - 1) / nb, gdl__conv_task, &d);
        gdl__pool_release();
        return 0;
    }
    /* every group's product has the same shape, so one plan sizes the buffers; a grid has at most `threads` cells */
    gdl__conv_gemm_args(pass, g, groups, OC, 0, act, x, w, gy, bias, out, pre, &m);
    gdl__gemm_plan(&m, &j);
    if (!gdl__gemm_reserve((size_t)threads * (j.asz + j.bsz))) {
        gdl__pool_release();
        return 1;
    }
    for (gi = 0; gi < groups; gi++) {
        gdl__conv_gemm_args(pass, g, groups, OC, gi, act, x, w, gy, bias, out, pre, &m);
        j.g = &m;
        j.tm = j.tn = 1;
        gdl__gemm_plan_grid(&j, pass == 1 && (double)OCg * CgKK < GDL__CONV_GW_ONE ? 1 : threads);
        if (pass == 1) { /* one product, K running over the samples in turn */
            gdl__gemm_held(&j);
            continue;
        }
        for (n = 0; n < g->N; n++) { /* a sample at a time, on the grid's threads */
            gdl__gemm_args s = m;
            s.B += n * CHW;
            s.C += (ptrdiff_t)n * OC * OHW;
            if (s.pre) s.pre += (ptrdiff_t)n * OC * OHW;
            j.g = &s;
            gdl__gemm_held(&j);
        }
    }
    gdl__pool_release();
    return 0;
#endif
}

/* gdl_real's bits, for selects by mask */
#ifdef GPUDL_DOUBLE
typedef uint64_t gdl__rbits;
#else
typedef uint32_t gdl__rbits;
#endif

/* v replaces best (and j the index bi) if v is larger, or the first NaN:
   by bit masks, not branches, since after a ReLU ties and the max's place
   are random (5x faster than the branches compilers emit for ?: here). */
#define GDL__MAXSEL(v, j)                                                                       \
    do {                                                                                         \
        const gdl__rbits m_ = (gdl__rbits)0 - (gdl__rbits)(((v) > best) | (((v) != (v)) & (best == best))); \
        gdl__rbits bb_, vb_;                                                                     \
        memcpy(&bb_, &best, sizeof bb_);                                                         \
        memcpy(&vb_, &(v), sizeof vb_);                                                          \
        bb_ ^= (bb_ ^ vb_) & m_;                                                                 \
        memcpy(&best, &bb_, sizeof bb_);                                                         \
        bi ^= (bi ^ (uint32_t)(j)) & (uint32_t)m_;                                               \
    } while (0)

#if defined(GDL__GEMM_AVX512)
/* v replaces best (and jv the indices bi) in the lanes where v is larger, or the first NaN: GDL__MAXSEL's
   rule by compare masks */
static inline void gdl__maxsel16(__m512 v, __m512i jv, __m512 *best, __m512i *bi) {
    const __mmask16 t = (__mmask16)(_mm512_cmp_ps_mask(v, *best, _CMP_GT_OQ) |
                                    (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(*best, *best, _CMP_ORD_Q)));
    *best = _mm512_mask_mov_ps(*best, t, v);
    *bi = _mm512_mask_mov_epi32(*bi, t, jv);
}
/* One output row of a 2x2, stride-2 max pool (the common case): r0 is the top input row, at plane index
   base. 16 outputs at a time (the last ones masked): each input row's 32 values split into the even and
   odd columns by permutes, then the four selects in GDL__MAXSEL's order: the same bits and indices as
   the loop below, which compilers leave scalar when a row has fewer than 16 outputs (14, 7, 3). */
static void gdl__maxpool2x2_row(const gdl_real *r0, int W, int32_t base, int OW, gdl_real *y, int32_t *idx) {
    const gdl_real *r1 = r0 + W;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    int ow;
    for (ow = 0; ow < OW; ow += 16) {
        const int n = OW - ow < 16 ? OW - ow : 16, ni = 2 * n; /* outputs; their inputs in each row */
        const __mmask16 m = (__mmask16)((1u << n) - 1), lo = (__mmask16)(ni >= 16 ? 0xffffu : (1u << ni) - 1);
        const __mmask16 hi = (__mmask16)(ni > 16 ? (1u << (ni - 16)) - 1 : 0);
        const __m512 a0 = _mm512_maskz_loadu_ps(lo, r0 + 2 * ow), a1 = _mm512_maskz_loadu_ps(hi, r0 + 2 * ow + 16);
        const __m512 c0 = _mm512_maskz_loadu_ps(lo, r1 + 2 * ow), c1 = _mm512_maskz_loadu_ps(hi, r1 + 2 * ow + 16);
        const __m512i j = _mm512_add_epi32(_mm512_set1_epi32(base + 2 * ow), even);
        __m512 best = _mm512_permutex2var_ps(a0, even, a1);
        __m512i bi = j;
        gdl__maxsel16(_mm512_permutex2var_ps(a0, odd, a1), _mm512_add_epi32(j, _mm512_set1_epi32(1)), &best, &bi);
        gdl__maxsel16(_mm512_permutex2var_ps(c0, even, c1), _mm512_add_epi32(j, _mm512_set1_epi32(W)), &best, &bi);
        gdl__maxsel16(_mm512_permutex2var_ps(c0, odd, c1), _mm512_add_epi32(j, _mm512_set1_epi32(W + 1)), &best, &bi);
        _mm512_mask_storeu_ps(y + ow, m, best);
        _mm512_mask_storeu_epi32(idx + ow, m, bi);
    }
}
#elif defined(GDL__GEMM_AVX2)
/* GDL__MAXSEL's rule in 8 lanes: v replaces best (and jv the indices bi) where v is larger, or the first NaN */
static inline void gdl__maxsel8(__m256 v, __m256i jv, __m256 *best, __m256i *bi) {
    const __m256 t = _mm256_or_ps(_mm256_cmp_ps(v, *best, _CMP_GT_OQ),
                                  _mm256_and_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), _mm256_cmp_ps(*best, *best, _CMP_ORD_Q)));
    *best = _mm256_blendv_ps(*best, v, t);
    *bi = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(*bi), _mm256_castsi256_ps(jv), t));
}
/* The even (odd: 1) columns of the 16 values a:b, in order: shuffles within the 128-bit lanes, then a
   permute of their 64-bit halves */
static inline __m256 gdl__cols8(__m256 a, __m256 b, int odd) {
    const __m256 s = odd ? _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)) : _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(s), _MM_SHUFFLE(3, 1, 2, 0)));
}
/* One output row of a 2x2, stride-2 max pool (the common case): r0 is the top input row, at plane index
   base. AVX-512's row (above) in 8 lanes: the last outputs by masked loads and stores, the selects in
   GDL__MAXSEL's order: the same bits and indices as the scalar loop (the other ISAs'), on rows of any
   length (the speedrun's are 14, 7 and 3 outputs). */
static void gdl__maxpool2x2_row(const gdl_real *r0, int W, int32_t base, int OW, gdl_real *y, int32_t *idx) {
    const gdl_real *r1 = r0 + W;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), even = _mm256_add_epi32(lane, lane);
    int ow;
    for (ow = 0; ow < OW; ow += 8) {
        const int n = OW - ow < 8 ? OW - ow : 8; /* outputs; 2n inputs in each row */
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);
        const __m256i lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * n), lane);
        const __m256i hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * n - 8), lane);
        const __m256 a0 = _mm256_maskload_ps(r0 + 2 * ow, lo), a1 = _mm256_maskload_ps(r0 + 2 * ow + 8, hi);
        const __m256 c0 = _mm256_maskload_ps(r1 + 2 * ow, lo), c1 = _mm256_maskload_ps(r1 + 2 * ow + 8, hi);
        const __m256i j = _mm256_add_epi32(_mm256_set1_epi32(base + 2 * ow), even);
        __m256 best = gdl__cols8(a0, a1, 0);
        __m256i bi = j;
        gdl__maxsel8(gdl__cols8(a0, a1, 1), _mm256_add_epi32(j, _mm256_set1_epi32(1)), &best, &bi);
        gdl__maxsel8(gdl__cols8(c0, c1, 0), _mm256_add_epi32(j, _mm256_set1_epi32(W)), &best, &bi);
        gdl__maxsel8(gdl__cols8(c0, c1, 1), _mm256_add_epi32(j, _mm256_set1_epi32(W + 1)), &best, &bi);
        _mm256_maskstore_ps(y + ow, m, best);
        _mm256_maskstore_epi32((int *)(void *)(idx + ow), m, bi);
    }
}
#else
/* One output row of a 2x2, stride-2 max pool (the common case): r0 is the
   top input row, at plane index base. Vectorised at -O3. */
static void gdl__maxpool2x2_row(const gdl_real *r0, int W, int32_t base, int OW, gdl_real *y, int32_t *idx) {
    const gdl_real *r1 = r0 + W;
    int ow;
    for (ow = 0; ow < OW; ow++) {
        const gdl_real b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
        const uint32_t j = (uint32_t)(base + 2 * ow);
        gdl_real best = r0[2 * ow];
        uint32_t bi = j;
        GDL__MAXSEL(b, j + 1);
        GDL__MAXSEL(c, j + (uint32_t)W);
        GDL__MAXSEL(d, j + (uint32_t)W + 1);
        y[ow] = best;
        idx[ow] = (int32_t)bi;
    }
}
#endif

/* One plane: xp [H, W] into y and idx [OH, OW] (idx: the max's place in the plane) */
static void gdl__maxpool_plane(const gdl_conv_geom *g, const gdl_real *xp, gdl_real *y, int32_t *idx) {
    int oh, ow, kh, kw;
    if (g->KH == 2 && g->KW == 2 && g->SH == 2 && g->SW == 2 && g->PH == 0 && g->PW == 0) {
        const int W = g->W, OW = g->OW;
        for (oh = 0; oh < g->OH; oh++) gdl__maxpool2x2_row(xp + 2 * oh * W, W, 2 * oh * W, OW, y + oh * OW, idx + oh * OW);
        return;
    }
    if (g->PH == 0 && g->PW == 0 && g->DH == 1 && g->DW == 1) { /* every window inside the plane */
        for (oh = 0; oh < g->OH; oh++)
            for (ow = 0; ow < g->OW; ow++) {
                int32_t base = oh * g->SH * g->W + ow * g->SW, bi = base;
                gdl_real best = xp[base];
                for (kh = 0; kh < g->KH; kh++)
                    for (kw = 0; kw < g->KW; kw++) {
                        int32_t j = base + kh * g->W + kw;
                        gdl_real v = xp[j];
                        /* first max; first NaN wins. Branch-free: the max's place is random */
                        int take = (v > best) | ((v != v) & (best == best));
                        best = take ? v : best;
                        bi = take ? j : bi;
                    }
                y[oh * g->OW + ow] = best;
                idx[oh * g->OW + ow] = bi;
            }
        return;
    }
    for (oh = 0; oh < g->OH; oh++)
        for (ow = 0; ow < g->OW; ow++) {
            gdl_real best = (gdl_real)-INFINITY;
            int32_t bi = -1;
            for (kh = 0; kh < g->KH; kh++) {
                int ih = oh * g->SH - g->PH + kh * g->DH;
                if (ih < 0 || ih >= g->H) continue;
                for (kw = 0; kw < g->KW; kw++) {
                    int iw = ow * g->SW - g->PW + kw * g->DW;
                    if (iw < 0 || iw >= g->W) continue;
                    gdl_real v = xp[ih * g->W + iw];
                    if (bi < 0 || v > best || (v != v && best == best)) { /* first max; first NaN wins */
                        best = v;
                        bi = ih * g->W + iw;
                    }
                }
            }
            y[oh * g->OW + ow] = best;
            idx[oh * g->OW + ow] = bi < 0 ? 0 : bi;
        }
}
static void gdl__maxpool_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_conv_geom *g = a.g;
    const int64_t HW = (int64_t)g->H * g->W, OHW = (int64_t)g->OH * g->OW;
    int64_t p;
    for (p = lo; p < hi; p++) gdl__maxpool_plane(g, a.x + p * HW, a.out + p * OHW, a.idx + p * OHW);
}
static int gdl__cpu_maxpool_f32(const gdl_conv_geom *g, const gdl_real *x, gdl_real *y, int32_t *idx) {
    gdl__args a = gdl__args_none();
    a.g = g; a.x = x; a.out = y; a.idx = idx;
    gdl__parallel_loop((int64_t)g->N * g->C, (int64_t)g->N * g->C * g->OH * g->OW * g->KH * g->KW, gdl__maxpool_part, &a);
    return 0;
}

/* Each plane's indices point into that plane of gx only: the planes are
   independent tasks, each summed in the order of its outputs. An unset gx
   (accumulate 0) is zeroed a plane at a time, so that the adds that follow
   find it in cache rather than after a pass over the whole gradient. */
static void gdl__maxpool_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_conv_geom *g = a.g;
    const int64_t OHW = (int64_t)g->OH * g->OW, HW = (int64_t)g->H * g->W;
    int64_t p, o;
    for (p = lo; p < hi; p++) {
        gdl_real *gxp = a.out + p * HW;
        const gdl_real *gyp = a.gy + p * OHW;
        const int32_t *ip = a.argmax + p * OHW;
        if (!a.accumulate) memset(gxp, 0, (size_t)HW * sizeof *gxp);
        for (o = 0; o < OHW; o++) gxp[ip[o]] += gyp[o];
    }
}
static int gdl__cpu_maxpool_backward_f32(const gdl_conv_geom *g, const gdl_real *gy, const int32_t *idx, gdl_real *gx,
                                     int beta) {
    gdl__args a = gdl__args_none();
    a.g = g; a.gy = gy; a.argmax = idx; a.out = gx; a.accumulate = beta;
    gdl__parallel_loop((int64_t)g->N * g->C, (int64_t)g->N * g->C * g->OH * g->OW, gdl__maxpool_backward_part, &a);
    return 0;
}

static void gdl__avgpool_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_conv_geom *g = a.g;
    int64_t p;
    for (p = lo; p < hi; p++) {
        const gdl_real *xp = a.x + p * g->H * g->W;
        int oh, ow, kh, kw;
        for (oh = 0; oh < g->OH; oh++)
            for (ow = 0; ow < g->OW; ow++) {
                double s = 0;
                for (kh = 0; kh < g->KH; kh++) {
                    int ih = oh * g->SH - g->PH + kh;
                    if (ih < 0 || ih >= g->H) continue;
                    for (kw = 0; kw < g->KW; kw++) {
                        int iw = ow * g->SW - g->PW + kw;
                        if (iw >= 0 && iw < g->W) s += xp[ih * g->W + iw];
                    }
                }
                a.out[(p * g->OH + oh) * g->OW + ow] = (gdl_real)(s / (g->KH * g->KW));
            }
    }
}
static int gdl__cpu_avgpool_f32(const gdl_conv_geom *g, const gdl_real *x, gdl_real *y) {
    gdl__args a = gdl__args_none();
    a.g = g; a.x = x; a.out = y;
    gdl__parallel_loop((int64_t)g->N * g->C, (int64_t)g->N * g->C * g->OH * g->OW * g->KH * g->KW, gdl__avgpool_part, &a);
    return 0;
}

static void gdl__avgpool_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_conv_geom *g = a.g;
    int64_t p;
    for (p = lo; p < hi; p++) {
        gdl_real *xp = a.out + p * g->H * g->W;
        int oh, ow, kh, kw;
        for (oh = 0; oh < g->OH; oh++)
            for (ow = 0; ow < g->OW; ow++) {
                gdl_real v = a.gy[(p * g->OH + oh) * g->OW + ow] / (gdl_real)(g->KH * g->KW);
                for (kh = 0; kh < g->KH; kh++) {
                    int ih = oh * g->SH - g->PH + kh;
                    if (ih < 0 || ih >= g->H) continue;
                    for (kw = 0; kw < g->KW; kw++) {
                        int iw = ow * g->SW - g->PW + kw;
                        if (iw >= 0 && iw < g->W) xp[ih * g->W + iw] += v;
                    }
                }
            }
    }
}
static int gdl__cpu_avgpool_backward_f32(const gdl_conv_geom *g, const gdl_real *gy, gdl_real *gx) {
    gdl__args a = gdl__args_none();
    a.g = g; a.gy = gy; a.out = gx;
    gdl__parallel_loop((int64_t)g->N * g->C, (int64_t)g->N * g->C * g->OH * g->OW * g->KH * g->KW, gdl__avgpool_backward_part, &a);
    return 0;
}

/* rows [lo, hi) of copy2d (a.n columns, a.inner and a.C the source's and destination's row strides) */
static void gdl__copy2d_part(gdl__args a, int64_t lo, int64_t hi) {
    const int64_t cols = a.n, sld = a.inner, dld = a.C;
    int64_t r, c;
    for (r = lo; r < hi; r++) {
        if (a.accumulate)
            for (c = 0; c < cols; c++) a.out[r * dld + c] += a.x[r * sld + c];
        else
            memmove(a.out + r * dld, a.x + r * sld, sizeof(gdl_real) * (size_t)cols);
    }
}
/* elements [lo, hi) of a contiguous copy2d, as one row */
static void gdl__copy_flat_part(gdl__args a, int64_t lo, int64_t hi) {
    int64_t i;
    if (a.accumulate)
        for (i = lo; i < hi; i++) a.out[i] += a.x[i];
    else
        memcpy(a.out + lo, a.x + lo, sizeof(gdl_real) * (size_t)(hi - lo));
}
/* On the threads where the source and destination do not overlap (a gradient's copy: one thread's copy
   of resnet10's residual gradients took 2.6 ms of its step on a Zen 4); contiguous rows as one range. */
static int gdl__cpu_copy2d_f32(int64_t rows, int64_t cols, const gdl_real *src, int64_t sld, gdl_real *dst,
                           int64_t dld, int accumulate) {
    gdl__args a = gdl__args_none();
    if (rows <= 0 || cols <= 0) return 0;
    a.x = src; a.out = dst; a.accumulate = accumulate; a.n = cols; a.inner = sld; a.C = dld;
    if ((uintptr_t)(src + (rows - 1) * sld + cols) > (uintptr_t)dst &&
        (uintptr_t)(dst + (rows - 1) * dld + cols) > (uintptr_t)src) /* overlapping: in order, on this thread */
        gdl__copy2d_part(a, 0, rows);
    else if (rows == 1 || (sld == cols && dld == cols))
        gdl__parallel_loop(rows * cols, rows * cols, gdl__copy_flat_part, &a);
    else
        gdl__parallel_loop(rows, rows * cols, gdl__copy2d_part, &a);
    return 0;
}

/* Dropout's mask in vectors: gdl_hash64 in 64-bit lanes, and element i kept iff its hash's top 24 bits r
   reach gdl__dropout_threshold(p). That is gdl_dropout_keep's r / 2^24 >= p without the conversion to
   double (both sides exact: r is an integer and p * 2^24 a power-of-two scaling), so the same mask. gcc at
   -O2, the examples' build, vectorises neither loop on its own, nor at -O3 with AVX2 only (no 64-bit
   multiply: three 32-bit ones here). The range [lo, hi) starts at a multiple of 16 (gdl__pfor_bound), so
   the scalar tail holds the same indices for any thread count. */
#if !defined(GPUDL_DOUBLE) && defined(__AVX512F__) && defined(__AVX512DQ__)
#include <immintrin.h>
#define GDL__DROPOUT_LANES 16
typedef __mmask16 gdl__dmask;
static inline __m512i gdl__hash64x8(uint64_t seed, int64_t i) { /* gdl_hash64(seed, i .. i + 7) */
    __m512i z = _mm512_add_epi64(_mm512_set1_epi64((long long)(i + 1)), _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
    z = _mm512_add_epi64(_mm512_set1_epi64((long long)seed),
                         _mm512_mullo_epi64(z, _mm512_set1_epi64((long long)0x9E3779B97F4A7C15ull)));
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)), _mm512_set1_epi64((long long)0xBF58476D1CE4E5B9ull));
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)), _mm512_set1_epi64((long long)0x94D049BB133111EBull));
    return _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
}
static inline gdl__dmask gdl__dropout_mask(uint64_t seed, int64_t i, uint64_t t) { /* elements i .. i + 15 */
    const __m512i vt = _mm512_set1_epi64((long long)t);
    const __mmask8 lo = _mm512_cmpge_epu64_mask(_mm512_srli_epi64(gdl__hash64x8(seed, i), 40), vt);
    const __mmask8 hi = _mm512_cmpge_epu64_mask(_mm512_srli_epi64(gdl__hash64x8(seed, i + 8), 40), vt);
    return (gdl__dmask)(lo | (unsigned)hi << 8);
}
static inline void gdl__dropout_block(gdl__dmask m, gdl_real s, const gdl_real *x, gdl_real *y) {
    _mm512_storeu_ps(y, _mm512_maskz_mul_ps(m, _mm512_loadu_ps(x), _mm512_set1_ps(s)));
}
static inline void gdl__dropout_backward_block(gdl__dmask m, gdl_real s, const gdl_real *gy, gdl_real *gx) {
    const __m512 g = _mm512_loadu_ps(gx);
    _mm512_storeu_ps(gx, _mm512_mask_blend_ps(m, g, _mm512_add_ps(g, _mm512_mul_ps(_mm512_loadu_ps(gy), _mm512_set1_ps(s)))));
}
#elif !defined(GPUDL_DOUBLE) && defined(__AVX2__)
#include <immintrin.h>
#define GDL__DROPOUT_LANES 8
typedef __m256 gdl__dmask; /* all ones in a kept lane */
static inline __m256i gdl__mul64x4(__m256i a, uint64_t b) { /* the low 64 bits of a * b, lane by lane */
    const __m256i bl = _mm256_set1_epi64x((long long)(b & 0xFFFFFFFFu)), bh = _mm256_set1_epi64x((long long)(b >> 32));
    const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), bl), _mm256_mul_epu32(a, bh));
    return _mm256_add_epi64(_mm256_mul_epu32(a, bl), _mm256_slli_epi64(cross, 32));
}
static inline __m256i gdl__hash64x4(uint64_t seed, int64_t i) { /* gdl_hash64(seed, i .. i + 3) */
    __m256i z = _mm256_add_epi64(_mm256_set1_epi64x((long long)(i + 1)), _mm256_setr_epi64x(0, 1, 2, 3));
    z = _mm256_add_epi64(_mm256_set1_epi64x((long long)seed), gdl__mul64x4(z, 0x9E3779B97F4A7C15ull));
    z = gdl__mul64x4(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), 0xBF58476D1CE4E5B9ull);
    z = gdl__mul64x4(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), 0x94D049BB133111EBull);
    return _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
}
static inline gdl__dmask gdl__dropout_mask(uint64_t seed, int64_t i, uint64_t t) { /* elements i .. i + 7 */
    /* r < 2^24 and t <= 2^24: a signed compare, r > t - 1 */
    const __m256i vt = _mm256_set1_epi64x((long long)t - 1);
    const __m256i lo = _mm256_cmpgt_epi64(_mm256_srli_epi64(gdl__hash64x4(seed, i), 40), vt);
    const __m256i hi = _mm256_cmpgt_epi64(_mm256_srli_epi64(gdl__hash64x4(seed, i + 4), 40), vt);
    /* each 64-bit lane's low half, in order: lo's 0 1, hi's 0 1 | lo's 2 3, hi's 2 3, then the middle pairs swapped */
    const __m256 m = _mm256_shuffle_ps(_mm256_castsi256_ps(lo), _mm256_castsi256_ps(hi), _MM_SHUFFLE(2, 0, 2, 0));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(m), _MM_SHUFFLE(3, 1, 2, 0)));
}
static inline void gdl__dropout_block(gdl__dmask m, gdl_real s, const gdl_real *x, gdl_real *y) {
    _mm256_storeu_ps(y, _mm256_and_ps(m, _mm256_mul_ps(_mm256_loadu_ps(x), _mm256_set1_ps(s))));
}
static inline void gdl__dropout_backward_block(gdl__dmask m, gdl_real s, const gdl_real *gy, gdl_real *gx) {
    const __m256 g = _mm256_loadu_ps(gx);
    _mm256_storeu_ps(gx, _mm256_blendv_ps(g, _mm256_add_ps(g, _mm256_mul_ps(_mm256_loadu_ps(gy), _mm256_set1_ps(s))), m));
}
#else
#define GDL__DROPOUT_LANES 0
#endif
#if GDL__DROPOUT_LANES
static uint64_t gdl__dropout_threshold(double p) { return (uint64_t)ceil(p * 16777216.0); } /* p in [0, 1] */
#endif

/* forward: a.x to a.out; backward (a.accumulate): a.gy * scale added into a.out where kept */
static void gdl__dropout_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_real scale = a.p < 1 ? (gdl_real)(1.0 / (1.0 - a.p)) : 0;
    const int backward = a.accumulate;
    int64_t i = lo;
#if GDL__DROPOUT_LANES
    const uint64_t t = gdl__dropout_threshold(a.p);
    for (; i + GDL__DROPOUT_LANES <= hi; i += GDL__DROPOUT_LANES) {
        const gdl__dmask m = gdl__dropout_mask(a.seed, i, t);
        if (backward) gdl__dropout_backward_block(m, scale, a.gy + i, a.out + i);
        else gdl__dropout_block(m, scale, a.x + i, a.out + i);
    }
#endif
    for (; i < hi; i++) {
        const int keep = gdl_dropout_keep(a.seed, (uint64_t)i, a.p);
        if (!backward) a.out[i] = keep ? a.x[i] * scale : 0;
        else if (keep) a.out[i] += a.gy[i] * scale;
    }
}
static int gdl__cpu_dropout_f32(int64_t n, double p, uint64_t seed, const gdl_real *x, gdl_real *y) {
    gdl__args a = gdl__args_none();
    a.p = p; a.seed = seed; a.x = x; a.out = y;
    gdl__parallel_loop(n, n, gdl__dropout_part, &a);
    return 0;
}
static int gdl__cpu_dropout_backward_f32(int64_t n, double p, uint64_t seed, const gdl_real *gy, gdl_real *gx) {
    gdl__args a = gdl__args_none();
    a.p = p; a.seed = seed; a.gy = gy; a.out = gx; a.accumulate = 1;
    gdl__parallel_loop(n, n, gdl__dropout_part, &a);
    return 0;
}

