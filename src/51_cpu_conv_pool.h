/* The output columns ow whose input column ow*SW - PW + kw*DW lies inside
   [0, W): [*lo, *hi). Rows of im2col are then a zero head, a strided copy
   and a zero tail, with no test per element. */
static void gdl__valid_cols(const gdl_conv_geom *g, int kw, int *lo, int *hi) {
    int off = kw * g->DW - g->PW, l = 0, h = g->OW;
    while (l < h && l * g->SW + off < 0) l++;
    while (h > l && (h - 1) * g->SW + off >= g->W) h--;
    *lo = l;
    *hi = h;
}

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

static int gdl__cpu_maxpool_backward(const gdl_conv_geom *g, const gdl_real *gy, const int32_t *idx, gdl_real *gx) {
    int64_t p, OHW = (int64_t)g->OH * g->OW;
    for (p = 0; p < (int64_t)g->N * g->C; p++) {
        int64_t o;
        for (o = 0; o < OHW; o++) gx[p * g->H * g->W + idx[p * OHW + o]] += gy[p * OHW + o];
    }
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

