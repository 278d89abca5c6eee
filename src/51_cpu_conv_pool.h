/* [impl-cpu] 2/7: im2col / col2im, the convolution's implicit GEMM (conv_implicit), max and average pooling,
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
static int gdl__cpu_im2col(const gdl_conv_geom *g, const gdl_real *x, gdl_real *col) {
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
static int gdl__cpu_col2im(const gdl_conv_geom *g, const gdl_real *col, gdl_real *x) {
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
   sample's columns a thread instead of the batch's. */

#ifndef GDL__GEMM_CBLAS /* the implicit GEMM is the built-in GEMM's packing */
/* Which path: -1 by shape (gdl__conv_implicit_pays), 0 always im2col
   (conv_implicit declines), 1 the implicit GEMM wherever it can run. For
   the tests, which compare the two. */
static int gdl__conv_path = -1;

/* Where the implicit GEMM pays (pass as conv_implicit's). Measured on the
   dev VM's Xeon, natively (AVX-512) and with the AVX2 kernel forced, 2
   threads: a conv2d_act (ReLU) forward and backward on batch 32-64, the two
   paths interleaved, 7 pairs (bench/RESULTS.md). The forward took 0.1-0.95x
   im2col's time on every shape tried (a 28x28 one-channel input 0.1x, 1x1
   stride 2 0.3x, 2x2 images 0.93x): its im2col was a pass over memory as
   large as the input times KH*KW, now never written. The weight gradient
   0.6-1.0x. The input gradient 0.86-0.99x from 8x8 outputs up, a tie at 4x4,
   but 1.1-1.2x at 2x2: a sample's product is then a few columns wide and the
   sample-a-task loop costs more than the batch's buffer saves. So all but
   the input gradient of outputs under 16 pixels, which keeps im2col's
   col2im. (1x1 stride-1 unpadded convolutions do not come here: the op
   layer runs them as a GEMM on the input itself.) */
static int gdl__conv_implicit_pays(int pass, const gdl_conv_geom *g) {
    return pass != 2 || g->OH * g->OW >= 16;
}

/* The input gradient's task t: sample t's columns' gradient, group by group,
   into this thread's buffer after its packing buffers, then its col2im. */
typedef struct {
    gdl__gemm_job j; /* the plan of one group's product (each group's is the same shape) */
    const gdl_conv_geom *g;
    int groups, OC;
    const gdl_real *w, *gy;
    gdl_real *gx;
    size_t csz;
} gdl__conv_dx_job;

static void gdl__conv_dx_task(void *p, int t, int nt) {
    const gdl__conv_dx_job *d = (const gdl__conv_dx_job *)p;
    const gdl_conv_geom *g = d->g;
    const int Cg = g->C / d->groups, OCg = d->OC / d->groups, CgKK = Cg * g->KH * g->KW, OHW = g->OH * g->OW;
    gdl_real *buf = gdl__gemm_buf + (size_t)gdl__gemm_slot() * (d->j.asz + d->j.bsz + d->csz);
    gdl_real *gcol = buf + d->j.asz + d->j.bsz;
    gdl__args a = gdl__args_none();
    int gi;
    (void)nt;
    for (gi = 0; gi < d->groups; gi++) {
        gdl__gemm_args m;
        gdl__gemm_args_init(&m, 1, 0, CgKK, OHW, OCg, 1, d->w + (ptrdiff_t)gi * OCg * CgKK, CgKK,
                            d->gy + ((ptrdiff_t)t * d->OC + (ptrdiff_t)gi * OCg) * OHW, OHW, 0,
                            gcol + (ptrdiff_t)gi * CgKK * OHW, OHW);
        gdl__gemm_blocked(&m, 0, m.M, 0, m.N, d->j.mc_blk, d->j.kc_blk, d->j.nc_blk, buf, buf + d->j.asz);
    }
    a.g = g; a.x = gcol; a.out = d->gx + (ptrdiff_t)t * g->C * g->H * g->W;
    gdl__col2im_part(a, 0, g->C);
}

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
    const int threads = gdl_get_num_threads();
    gdl__gemm_args m;
    gdl__gemm_job j;
    int gi, n;
    if (gdl__conv_path == 0 || (gdl__conv_path < 0 && !gdl__conv_implicit_pays(pass, g))) return 1;
    if (g->N <= 0 || OCg <= 0 || CgKK <= 0) return 1;
    /* the input gradient's tasks are the samples: fewer samples than threads would leave threads idle */
    if (pass == 2 && threads > 1 && g->N < threads) return 1;
    if (!gdl__pool_acquire()) return 1; /* another thread's GEMM has the packing buffers */
    if (pass == 2) {
        gdl__conv_dx_job d;
        gdl__gemm_args_init(&m, 1, 0, CgKK, OHW, OCg, 1, w, CgKK, gy, OHW, 0, out, OHW);
        gdl__gemm_plan(&m, &d.j);
        d.g = g; d.groups = groups; d.OC = OC; d.w = w; d.gy = gy; d.gx = out;
        d.csz = ((size_t)g->C * g->KH * g->KW * OHW + 15) & ~(size_t)15;
        if (!gdl__gemm_reserve((size_t)threads * (d.j.asz + d.j.bsz + d.csz))) {
            gdl__pool_release();
            return 1;
        }
        gdl__pool_run(g->N, gdl__conv_dx_task, &d);
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
#ifdef GDL__POOL
        if (pass == 0 && threads > 1 && g->N >= threads &&
            (double)OCg * OHW * CgKK * g->N >= GDL__GEMM_MT_MIN) { /* a sample a task, each whole on its thread */
            j.sB = CHW;
            j.sC = (ptrdiff_t)OC * OHW;
            gdl__pool_run(g->N, gdl__gemm_batch_task, &j);
            continue;
        }
#endif
        gdl__gemm_plan_grid(&j, threads);
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

static void gdl__maxpool_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_conv_geom *g = a.g;
    int64_t p;
    for (p = lo; p < hi; p++) {
        const gdl_real *xp = a.x + p * g->H * g->W;
        int oh, ow, kh, kw;
        if (g->KH == 2 && g->KW == 2 && g->SH == 2 && g->SW == 2 && g->PH == 0 && g->PW == 0) {
            const int W = g->W, OH = g->OH, OW = g->OW;
            for (oh = 0; oh < OH; oh++)
                gdl__maxpool2x2_row(xp + 2 * oh * W, W, 2 * oh * W, OW, a.out + (p * OH + oh) * OW,
                                    a.idx + (p * OH + oh) * OW);
            continue;
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
                    a.out[(p * g->OH + oh) * g->OW + ow] = best;
                    a.idx[(p * g->OH + oh) * g->OW + ow] = bi;
                }
            continue;
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
                a.out[(p * g->OH + oh) * g->OW + ow] = best;
                a.idx[(p * g->OH + oh) * g->OW + ow] = bi < 0 ? 0 : bi;
            }
    }
}
static int gdl__cpu_maxpool(const gdl_conv_geom *g, const gdl_real *x, gdl_real *y, int32_t *idx) {
    gdl__args a = gdl__args_none();
    a.g = g; a.x = x; a.out = y; a.idx = idx;
    gdl__parallel_loop((int64_t)g->N * g->C, (int64_t)g->N * g->C * g->OH * g->OW * g->KH * g->KW, gdl__maxpool_part, &a);
    return 0;
}

/* Each plane's indices point into that plane of gx only: the planes are
   independent tasks, each summed in the order of its outputs. */
static void gdl__maxpool_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_conv_geom *g = a.g;
    const int64_t OHW = (int64_t)g->OH * g->OW, HW = (int64_t)g->H * g->W;
    int64_t p, o;
    for (p = lo; p < hi; p++) {
        gdl_real *gxp = a.out + p * HW;
        const gdl_real *gyp = a.gy + p * OHW;
        const int32_t *ip = a.argmax + p * OHW;
        for (o = 0; o < OHW; o++) gxp[ip[o]] += gyp[o];
    }
}
static int gdl__cpu_maxpool_backward(const gdl_conv_geom *g, const gdl_real *gy, const int32_t *idx, gdl_real *gx) {
    gdl__args a = gdl__args_none();
    a.g = g; a.gy = gy; a.argmax = idx; a.out = gx;
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
static int gdl__cpu_avgpool(const gdl_conv_geom *g, const gdl_real *x, gdl_real *y) {
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
static int gdl__cpu_avgpool_backward(const gdl_conv_geom *g, const gdl_real *gy, gdl_real *gx) {
    gdl__args a = gdl__args_none();
    a.g = g; a.gy = gy; a.out = gx;
    gdl__parallel_loop((int64_t)g->N * g->C, (int64_t)g->N * g->C * g->OH * g->OW * g->KH * g->KW, gdl__avgpool_backward_part, &a);
    return 0;
}

static int gdl__cpu_copy2d(int64_t rows, int64_t cols, const gdl_real *src, int64_t sld, gdl_real *dst,
                           int64_t dld, int accumulate) {
    int64_t r, c;
    for (r = 0; r < rows; r++) {
        if (accumulate)
            for (c = 0; c < cols; c++) dst[r * dld + c] += src[r * sld + c];
        else
            memmove(dst + r * dld, src + r * sld, sizeof(gdl_real) * (size_t)cols);
    }
    return 0;
}

static void gdl__dropout_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_real scale = a.p < 1 ? (gdl_real)(1.0 / (1.0 - a.p)) : 0;
    int64_t i;
    for (i = lo; i < hi; i++) a.out[i] = gdl_dropout_keep(a.seed, (uint64_t)i, a.p) ? a.x[i] * scale : 0;
}
static int gdl__cpu_dropout(int64_t n, double p, uint64_t seed, const gdl_real *x, gdl_real *y) {
    gdl__args a = gdl__args_none();
    a.p = p; a.seed = seed; a.x = x; a.out = y;
    gdl__parallel_loop(n, n, gdl__dropout_part, &a);
    return 0;
}
static void gdl__dropout_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_real scale = a.p < 1 ? (gdl_real)(1.0 / (1.0 - a.p)) : 0;
    int64_t i;
    for (i = lo; i < hi; i++)
        if (gdl_dropout_keep(a.seed, (uint64_t)i, a.p)) a.out[i] += a.gy[i] * scale;
}
static int gdl__cpu_dropout_backward(int64_t n, double p, uint64_t seed, const gdl_real *gy, gdl_real *gx) {
    gdl__args a = gdl__args_none();
    a.p = p; a.seed = seed; a.gy = gy; a.out = gx;
    gdl__parallel_loop(n, n, gdl__dropout_backward_part, &a);
    return 0;
}

