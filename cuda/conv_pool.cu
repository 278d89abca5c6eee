// ----------------------------------------------------------------------------
// convolution columns and pooling (NCHW, one (n,c) plane after another)

// im2col: one thread per column element [n][c*KH*KW + kh*KW + kw][oh*OW + ow];
// writes are coalesced along ow
template <typename T> __global__ void gdl__k_im2col(gdl_conv_geom g, const T *x, T *col) {
    int64_t OHW = (int64_t)g.OH * g.OW, total = (int64_t)g.N * g.C * g.KH * g.KW * OHW;
    GDL_CU_LOOP(t, total) {
        int64_t row = t / OHW; /* (nc, kh, kw) */
        int ohw = (int)(t - row * OHW), oh = ohw / g.OW, ow = ohw - oh * g.OW;
        int kk = (int)(row % (g.KH * g.KW)), kh = kk / g.KW, kw = kk - kh * g.KW;
        int64_t nc = row / (g.KH * g.KW);
        int ih = oh * g.SH - g.PH + kh * g.DH, iw = ow * g.SW - g.PW + kw * g.DW;
        col[t] = (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W) ? x[(nc * g.H + ih) * g.W + iw] : gdl__st<T>(0.0f);
    }
}

// col2im: one thread per input pixel gathers the column entries that read
// it: for each (kh, kw) at most one output position. Visiting (kh, kw) in
// order and adding into x[...] repeats the CPU's sums exactly, with no atomics.
template <typename T> __global__ void gdl__k_col2im(gdl_conv_geom g, const T *col, T *x) {
    int64_t OHW = (int64_t)g.OH * g.OW, HW = (int64_t)g.H * g.W, total = (int64_t)g.N * g.C * HW;
    GDL_CU_LOOP(t, total) {
        int64_t nc = t / HW;
        int hw = (int)(t - nc * HW), ih = hw / g.W, iw = hw - ih * g.W;
        const T *cp = col + nc * g.KH * g.KW * OHW;
        float acc = gdl__ld(x[t]);
        for (int kh = 0; kh < g.KH; kh++) {
            int h = ih + g.PH - kh * g.DH;
            if (h < 0 || h % g.SH) continue;
            int oh = h / g.SH;
            if (oh >= g.OH) continue;
            for (int kw = 0; kw < g.KW; kw++) {
                int w = iw + g.PW - kw * g.DW;
                if (w < 0 || w % g.SW) continue;
                int ow = w / g.SW;
                if (ow >= g.OW) continue;
                acc += gdl__ld(cp[(int64_t)(kh * g.KW + kw) * OHW + oh * g.OW + ow]);
            }
        }
        x[t] = gdl__st<T>(acc);
    }
}

// Launches a kernel of one thread per output, total of them, that reads `in` and writes `out` by the geometry
// g; nothing where total or `terms` (what each output sums) is 0. Through a pointer: the template's commas
// would split GDL_CU_LAUNCH's arguments.
template <typename T>
static int gdl__cu_geom_launch(void (*gdl__k_geom)(gdl_conv_geom, const T *, T *), const gdl_conv_geom *g, int64_t total,
                               int64_t terms, const T *in, T *out) {
    if (total <= 0 || terms <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_geom, gdl__cu_grid(total, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(*g, in, out);
    GDL_CU_LAUNCHED();
    return 0;
}

template <typename T> static int gdl__cu_im2col_t(const gdl_conv_geom *g, const T *x, T *col) {
    return gdl__cu_geom_launch<T>(gdl__k_im2col<T>, g, (int64_t)g->N * g->C * g->KH * g->KW * g->OH * g->OW, 1, x, col);
}
template <typename T> static int gdl__cu_col2im_t(const gdl_conv_geom *g, const T *col, T *x) {
    return gdl__cu_geom_launch<T>(gdl__k_col2im<T>, g, (int64_t)g->N * g->C * g->H * g->W,
                                  (int64_t)g->KH * g->KW * g->OH * g->OW, col, x);
}

static int gdl__cu_im2col_f32(const gdl_conv_geom *g, const float *x, float *col) { return gdl__cu_im2col_t<float>(g, x, col); }
static int gdl__cu_col2im_f32(const gdl_conv_geom *g, const float *col, float *x) { return gdl__cu_col2im_t<float>(g, col, x); }
// No implicit GEMM here: cuBLAS wants its operands in memory, so the op layer runs im2col + cuBLAS (+ col2im).
static int gdl__cu_conv_implicit(int, const gdl_conv_geom *, int, int, int, const float *, const float *, const float *,
                                 const float *, float *, float *) {
    return 1;
}

// gdl__cu_NAME(dt, g, in, out): a gdl_conv_geom op on one tensor (im2col, col2im, avgpool and its backward)
// in any dtype: gdl__cu_NAME_f32 for f32, else gdl__cu_NAME_t<T> for the dtype's storage type
#define GDL__CU_GEOM_DTYPES(NAME)                                                                     \
    static int gdl__cu_##NAME(gdl_dtype dt, const gdl_conv_geom *g, const void *in, void *out) {       \
        if (dt == GDL_F32) return gdl__cu_##NAME##_f32(g, (const float *)in, (float *)out);            \
        return gdl__cu_dispatch(#NAME, dt, 0, [&](auto t) {                                            \
            typedef typename decltype(t)::type T;                                                      \
            return gdl__cu_##NAME##_t(g, (const T *)in, (T *)out);                                     \
        });                                                                                            \
    }
GDL__CU_GEOM_DTYPES(im2col)
GDL__CU_GEOM_DTYPES(col2im)

// max pooling: one thread per output, the CPU's scan (first max, first NaN)
template <typename T> __global__ void gdl__k_maxpool(gdl_conv_geom g, const T *x, T *y, int32_t *idx) {
    int64_t OHW = (int64_t)g.OH * g.OW, total = (int64_t)g.N * g.C * OHW;
    GDL_CU_LOOP(t, total) {
        int64_t p = t / OHW;
        int o = (int)(t - p * OHW), oh = o / g.OW, ow = o - oh * g.OW;
        const T *xp = x + p * g.H * g.W;
        float best = -GDL__CU_INF;
        int bi = -1;
        for (int kh = 0; kh < g.KH; kh++) {
            int ih = oh * g.SH - g.PH + kh * g.DH;
            if (ih < 0 || ih >= g.H) continue;
            for (int kw = 0; kw < g.KW; kw++) {
                int iw = ow * g.SW - g.PW + kw * g.DW;
                if (iw < 0 || iw >= g.W) continue;
                float v = gdl__ld(xp[ih * g.W + iw]);
                if (bi < 0 || v > best || (v != v && best == best)) {
                    best = v;
                    bi = ih * g.W + iw;
                }
            }
        }
        y[t] = gdl__st<T>(best); /* exact: one of x's values */
        idx[t] = bi < 0 ? 0 : bi;
    }
}

// Backward by gathering: one thread per input pixel looks at the outputs
// whose window covers it and adds gy where the saved index names it. kh and
// kw run downwards so that outputs come in ascending order, the CPU's order.
// beta 0: gx is unset and written, not read (no memset before it).
template <typename T>
__global__ void gdl__k_maxpool_backward(gdl_conv_geom g, const T *gy, const int32_t *idx, T *gx, int beta) {
    int64_t OHW = (int64_t)g.OH * g.OW, HW = (int64_t)g.H * g.W, total = (int64_t)g.N * g.C * HW;
    GDL_CU_LOOP(t, total) {
        int64_t p = t / HW;
        int hw = (int)(t - p * HW), ih = hw / g.W, iw = hw - ih * g.W;
        const T *gp = gy + p * OHW;
        const int32_t *ip = idx + p * OHW;
        float acc = beta ? gdl__ld(gx[t]) : 0.0f;
        for (int kh = g.KH - 1; kh >= 0; kh--) {
            int h = ih + g.PH - kh * g.DH;
            if (h < 0 || h % g.SH) continue;
            int oh = h / g.SH;
            if (oh >= g.OH) continue;
            for (int kw = g.KW - 1; kw >= 0; kw--) {
                int w = iw + g.PW - kw * g.DW;
                if (w < 0 || w % g.SW) continue;
                int ow = w / g.SW;
                if (ow >= g.OW) continue;
                if (ip[oh * g.OW + ow] == hw) acc += gdl__ld(gp[oh * g.OW + ow]);
            }
        }
        gx[t] = gdl__st<T>(acc);
    }
}

template <typename T> static int gdl__cu_maxpool_t(const gdl_conv_geom *g, const T *x, T *y, int32_t *idx) {
    int64_t total = (int64_t)g->N * g->C * g->OH * g->OW;
    if (total <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_maxpool<T>, gdl__cu_grid(total, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(*g, x, y, idx);
    GDL_CU_LAUNCHED();
    return 0;
}

template <typename T>
static int gdl__cu_maxpool_backward_t(const gdl_conv_geom *g, const T *gy, const int32_t *idx, T *gx, int beta) {
    int64_t total = (int64_t)g->N * g->C * g->H * g->W;
    if (total <= 0 || (int64_t)g->OH * g->OW <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_maxpool_backward<T>, gdl__cu_grid(total, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(*g, gy, idx, gx, beta);
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_maxpool_f32(const gdl_conv_geom *g, const float *x, float *y, int32_t *idx) {
    return gdl__cu_maxpool_t<float>(g, x, y, idx);
}
static int gdl__cu_maxpool_backward_f32(const gdl_conv_geom *g, const float *gy, const int32_t *idx, float *gx, int beta) {
    return gdl__cu_maxpool_backward_t<float>(g, gy, idx, gx, beta);
}
static int gdl__cu_maxpool(gdl_dtype dt, const gdl_conv_geom *g, const void *x, void *y, int32_t *idx) {
    if (dt == GDL_F32) return gdl__cu_maxpool_f32(g, (const float *)x, (float *)y, idx);
    return gdl__cu_dispatch("maxpool", dt, 0, [&](auto t) {
        typedef typename decltype(t)::type T;
        return gdl__cu_maxpool_t(g, (const T *)x, (T *)y, idx);
    });
}
static int gdl__cu_maxpool_backward(gdl_dtype dt, const gdl_conv_geom *g, const void *gy, const int32_t *idx, void *gx,
                                    int beta) {
    if (dt == GDL_F32) return gdl__cu_maxpool_backward_f32(g, (const float *)gy, idx, (float *)gx, beta);
    return gdl__cu_dispatch("maxpool_backward", dt, 0, [&](auto t) {
        typedef typename decltype(t)::type T;
        return gdl__cu_maxpool_backward_t(g, (const T *)gy, idx, (T *)gx, beta);
    });
}

// average pooling counts the padding: always divide by KH*KW. Like the CPU,
// no dilation (pooling windows are dense).
template <typename T> __global__ void gdl__k_avgpool(gdl_conv_geom g, const T *x, T *y) {
    int64_t OHW = (int64_t)g.OH * g.OW, total = (int64_t)g.N * g.C * OHW;
    GDL_CU_LOOP(t, total) {
        int64_t p = t / OHW;
        int o = (int)(t - p * OHW), oh = o / g.OW, ow = o - oh * g.OW;
        const T *xp = x + p * g.H * g.W;
        float s = 0;
        for (int kh = 0; kh < g.KH; kh++) {
            int ih = oh * g.SH - g.PH + kh;
            if (ih < 0 || ih >= g.H) continue;
            for (int kw = 0; kw < g.KW; kw++) {
                int iw = ow * g.SW - g.PW + kw;
                if (iw >= 0 && iw < g.W) s += gdl__ld(xp[ih * g.W + iw]);
            }
        }
        y[t] = gdl__st<T>(s / (float)(g.KH * g.KW));
    }
}

// gathering, in the CPU's order (ascending outputs), as maxpool_backward
template <typename T> __global__ void gdl__k_avgpool_backward(gdl_conv_geom g, const T *gy, T *gx) {
    int64_t OHW = (int64_t)g.OH * g.OW, HW = (int64_t)g.H * g.W, total = (int64_t)g.N * g.C * HW;
    float area = (float)(g.KH * g.KW);
    GDL_CU_LOOP(t, total) {
        int64_t p = t / HW;
        int hw = (int)(t - p * HW), ih = hw / g.W, iw = hw - ih * g.W;
        const T *gp = gy + p * OHW;
        float acc = gdl__ld(gx[t]);
        for (int kh = g.KH - 1; kh >= 0; kh--) {
            int h = ih + g.PH - kh;
            if (h < 0 || h % g.SH) continue;
            int oh = h / g.SH;
            if (oh >= g.OH) continue;
            for (int kw = g.KW - 1; kw >= 0; kw--) {
                int w = iw + g.PW - kw;
                if (w < 0 || w % g.SW) continue;
                int ow = w / g.SW;
                if (ow >= g.OW) continue;
                acc += gdl__ld(gp[oh * g.OW + ow]) / area;
            }
        }
        gx[t] = gdl__st<T>(acc);
    }
}

template <typename T> static int gdl__cu_avgpool_t(const gdl_conv_geom *g, const T *x, T *y) {
    return gdl__cu_geom_launch<T>(gdl__k_avgpool<T>, g, (int64_t)g->N * g->C * g->OH * g->OW, 1, x, y);
}
template <typename T> static int gdl__cu_avgpool_backward_t(const gdl_conv_geom *g, const T *gy, T *gx) {
    return gdl__cu_geom_launch<T>(gdl__k_avgpool_backward<T>, g, (int64_t)g->N * g->C * g->H * g->W,
                                  (int64_t)g->OH * g->OW, gy, gx);
}

static int gdl__cu_avgpool_f32(const gdl_conv_geom *g, const float *x, float *y) { return gdl__cu_avgpool_t<float>(g, x, y); }
static int gdl__cu_avgpool_backward_f32(const gdl_conv_geom *g, const float *gy, float *gx) {
    return gdl__cu_avgpool_backward_t<float>(g, gy, gx);
}
GDL__CU_GEOM_DTYPES(avgpool)
GDL__CU_GEOM_DTYPES(avgpool_backward)

// ----------------------------------------------------------------------------
// copy2d, dropout

// A copy moves the elements' bits as they are; accumulate adds in f32 and
// rounds once.
template <typename T>
__global__ void gdl__k_copy2d(int64_t rows, int64_t cols, const T *src, int64_t sld, T *dst, int64_t dld, int accumulate) {
    GDL_CU_LOOP(t, rows * cols) {
        int64_t r = t / cols, c = t - r * cols;
        T v = src[r * sld + c];
        if (accumulate) dst[r * dld + c] = gdl__st<T>(gdl__ld(dst[r * dld + c]) + gdl__ld(v));
        else dst[r * dld + c] = v;
    }
}

template <typename T>
static int gdl__cu_copy2d_t(int64_t rows, int64_t cols, const T *src, int64_t sld, T *dst, int64_t dld, int accumulate) {
    if (rows <= 0 || cols <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_copy2d<T>, gdl__cu_grid(rows * cols, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        rows, cols, src, sld, dst, dld, accumulate);
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_copy2d_f32(int64_t rows, int64_t cols, const float *src, int64_t sld, float *dst, int64_t dld,
                          int accumulate) {
    return gdl__cu_copy2d_t(rows, cols, src, sld, dst, dld, accumulate);
}

static int gdl__cu_copy2d(gdl_dtype dt, int64_t rows, int64_t cols, const void *src, int64_t sld, void *dst,
                          int64_t dld, int accumulate) {
    if (dt == GDL_F32) return gdl__cu_copy2d_f32(rows, cols, (const float *)src, sld, (float *)dst, dld, accumulate);
    return gdl__cu_dispatch("copy2d", dt, 0, [&](auto t) {
        typedef typename decltype(t)::type T;
        return gdl__cu_copy2d_t(rows, cols, (const T *)src, sld, (T *)dst, dld, accumulate);
    });
}

// the mask is gdl_dropout_keep from gpudl.h: the same bits as on the CPU
template <typename T> __global__ void gdl__k_dropout(int64_t n, double p, uint64_t seed, float scale, const T *x, T *y) {
    GDL_CU_LOOP(i, n) y[i] = gdl__st<T>(gdl_dropout_keep(seed, (uint64_t)i, p) ? gdl__ld(x[i]) * scale : 0.0f);
}

// gx += (kept ? gy * scale : 0), rounded once. A dropped element leaves an
// f32 gx alone (the CPU's f32 loop skips it); a 16-bit gx gets + 0 in f32,
// as the f32 path's zeroed gradient of an f32 copy (-0 becomes +0).
template <typename T>
__global__ void gdl__k_dropout_backward(int64_t n, double p, uint64_t seed, float scale, const T *gy, T *gx) {
    GDL_CU_LOOP(i, n) {
        bool keep = gdl_dropout_keep(seed, (uint64_t)i, p);
        if (sizeof(T) == 2) gx[i] = gdl__st<T>(gdl__ld(gx[i]) + (keep ? gdl__ld(gy[i]) * scale : 0.0f));
        else if (keep) gx[i] = gdl__st<T>(gdl__ld(gx[i]) + gdl__ld(gy[i]) * scale);
    }
}

template <typename T>
static int gdl__cu_dropout_t(int64_t n, double p, uint64_t seed, const T *x, T *y, int backward) {
    float scale = p < 1 ? (float)(1.0 / (1.0 - p)) : 0.0f;
    if (n <= 0) return 0;
    if (backward)
        GDL_CU_LAUNCH(gdl__k_dropout_backward<T>, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
            n, p, seed, scale, x, y);
    else
        GDL_CU_LAUNCH(gdl__k_dropout<T>, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
            n, p, seed, scale, x, y);
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_dropout_f32(int64_t n, double p, uint64_t seed, const float *x, float *y) {
    return gdl__cu_dropout_t(n, p, seed, x, y, 0);
}
static int gdl__cu_dropout_backward_f32(int64_t n, double p, uint64_t seed, const float *gy, float *gx) {
    return gdl__cu_dropout_t(n, p, seed, gy, gx, 1);
}
static int gdl__cu_dropout(gdl_dtype dt, int64_t n, double p, uint64_t seed, const void *x, void *y) {
    if (dt == GDL_F32) return gdl__cu_dropout_f32(n, p, seed, (const float *)x, (float *)y);
    return gdl__cu_dispatch("dropout", dt, 0, [&](auto t) {
        typedef typename decltype(t)::type T;
        return gdl__cu_dropout_t(n, p, seed, (const T *)x, (T *)y, 0);
    });
}
static int gdl__cu_dropout_backward(gdl_dtype dt, int64_t n, double p, uint64_t seed, const void *gy, void *gx) {
    if (dt == GDL_F32) return gdl__cu_dropout_backward_f32(n, p, seed, (const float *)gy, (float *)gx);
    return gdl__cu_dispatch("dropout_backward", dt, 0, [&](auto t) {
        typedef typename decltype(t)::type T;
        return gdl__cu_dropout_t(n, p, seed, (const T *)gy, (T *)gx, 1);
    });
}
