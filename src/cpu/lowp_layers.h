/* src/cpu/lowp_layers.h — the CPU's entries of convolution columns, pooling
   and batch norm, which take a dtype: f32 runs the f32 kernel; bf16/f16 are
   widened to f32, run through the f32 kernel and rounded once. */

/* The low-precision entries on the CPU, which has no bf16/f16 arithmetic:
   the operands widened to f32 in malloc'd memory (not the arena, so only
   the low-precision tensors stay for backward), the f32 kernel, the output
   rounded once -- as gdl__cpu_gemm. An accumulated output (x, gx) is
   widened too, so its old value and the new sum round once together. */
static gdl_real *gdl__cpu_lp_wide(gdl_dtype dt, int nbuf, const void *const *src, const int64_t *n, gdl_real **out) {
    int64_t total = 1;
    int k;
    gdl_real *f;
    for (k = 0; k < nbuf; k++) total += n[k] > 0 ? n[k] : 0;
    if (!(f = (gdl_real *)GPUDL_MALLOC(sizeof(gdl_real) * (size_t)total))) {
        gdl__set_error("%s: out of host memory for the f32 copies of a %s kernel", gdl__be_op, gdl_dtype_name(dt));
        return NULL;
    }
    total = 0;
    for (k = 0; k < nbuf; k++) {
        out[k] = f + total;
        if (src[k] && n[k] > 0) gdl__cpu_cast(out[k], GDL_F32, src[k], dt, n[k]);
        total += n[k] > 0 ? n[k] : 0;
    }
    return f;
}
static int gdl__cpu_lp_check(const char *entry, gdl_dtype dt) {
    if (dt == GDL_F16 || dt == GDL_BF16) return 0;
    gdl__set_error("%s: the low-precision %s takes f16 or bf16, not %s", gdl__be_op, entry, gdl_dtype_name(dt));
    return -1;
}
#define GDL__GEOM_IN(g) ((int64_t)(g)->N * (g)->C * (g)->H * (g)->W)
#define GDL__GEOM_OUT(g) ((int64_t)(g)->N * (g)->C * (g)->OH * (g)->OW)
#define GDL__GEOM_COL(g) (GDL__GEOM_OUT(g) * (g)->KH * (g)->KW)

/* im2col moves values without arithmetic: the 16-bit patterns are gathered
   as they are (f16 and bf16 alike; +0 is 0 in both), in the f32 kernel's
   layout, planes split over the threads */
static void gdl__im2col16_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl_conv_geom *g = a.g;
    int64_t nc, OHW = (int64_t)g->OH * g->OW;
    for (nc = lo; nc < hi; nc++) {
        const uint16_t *xp = (const uint16_t *)a.lx + nc * g->H * g->W;
        uint16_t *cp = (uint16_t *)a.lout + nc * g->KH * g->KW * OHW;
        int kh, kw, oh, ow;
        for (kh = 0; kh < g->KH; kh++)
            for (kw = 0; kw < g->KW; kw++)
                for (oh = 0; oh < g->OH; oh++) {
                    int ih = oh * g->SH - g->PH + kh * g->DH;
                    uint16_t *r = cp + (kh * g->KW + kw) * OHW + (int64_t)oh * g->OW;
                    if (ih < 0 || ih >= g->H) {
                        memset(r, 0, sizeof(uint16_t) * (size_t)g->OW);
                        continue;
                    }
                    for (ow = 0; ow < g->OW; ow++) {
                        int iw = ow * g->SW - g->PW + kw * g->DW;
                        r[ow] = iw >= 0 && iw < g->W ? xp[(int64_t)ih * g->W + iw] : (uint16_t)0;
                    }
                }
    }
}
static int gdl__cpu_im2col(gdl_dtype dt, const gdl_conv_geom *g, const void *x, void *col) {
    gdl__args a = gdl__args_none();
    if (dt == GDL_F32) return gdl__cpu_im2col_f32(g, (const gdl_real *)x, (gdl_real *)col);
    if (gdl__cpu_lp_check("im2col", dt) < 0) return -1;
    a.g = g; a.lx = x; a.lout = col;
    gdl__parallel_loop((int64_t)g->N * g->C, GDL__GEOM_COL(g), gdl__im2col16_part, &a);
    return 0;
}
static int gdl__cpu_col2im(gdl_dtype dt, const gdl_conv_geom *g, const void *col, void *x) {
    const void *src[2];
    int64_t n[2];
    gdl_real *b[2], *f;
    if (dt == GDL_F32) return gdl__cpu_col2im_f32(g, (const gdl_real *)col, (gdl_real *)x);
    if (gdl__cpu_lp_check("col2im", dt) < 0) return -1;
    src[0] = col; n[0] = GDL__GEOM_COL(g); src[1] = x; n[1] = GDL__GEOM_IN(g);
    if (n[0] <= 0 || n[1] <= 0) return 0;
    if (!(f = gdl__cpu_lp_wide(dt, 2, src, n, b))) return -1;
    gdl__cpu_col2im_f32(g, b[0], b[1]);
    gdl__cpu_cast(x, dt, b[1], GDL_F32, n[1]);
    GPUDL_FREE(f);
    return 0;
}
/* pooling forward (avg selects avgpool; idx for the max) */
static int gdl__cpu_pool_lp(gdl_dtype dt, int avg, const gdl_conv_geom *g, const void *x, void *y, int32_t *idx) {
    const void *src[2];
    int64_t n[2];
    gdl_real *b[2], *f;
    if (gdl__cpu_lp_check(avg ? "avgpool" : "maxpool", dt) < 0) return -1;
    src[0] = x; n[0] = GDL__GEOM_IN(g); src[1] = NULL; n[1] = GDL__GEOM_OUT(g);
    if (n[1] <= 0) return 0;
    if (!(f = gdl__cpu_lp_wide(dt, 2, src, n, b))) return -1;
    if (avg) gdl__cpu_avgpool_f32(g, b[0], b[1]);
    else gdl__cpu_maxpool_f32(g, b[0], b[1], idx);
    gdl__cpu_cast(y, dt, b[1], GDL_F32, n[1]);
    GPUDL_FREE(f);
    return 0;
}
static int gdl__cpu_pool_backward_lp(gdl_dtype dt, int avg, const gdl_conv_geom *g, const void *gy, const int32_t *idx,
                                     void *gx) {
    const void *src[2];
    int64_t n[2];
    gdl_real *b[2], *f;
    if (gdl__cpu_lp_check(avg ? "avgpool_backward" : "maxpool_backward", dt) < 0) return -1;
    src[0] = gy; n[0] = GDL__GEOM_OUT(g); src[1] = gx; n[1] = GDL__GEOM_IN(g);
    if (n[0] <= 0 || n[1] <= 0) return 0;
    if (!(f = gdl__cpu_lp_wide(dt, 2, src, n, b))) return -1;
    if (avg) gdl__cpu_avgpool_backward_f32(g, b[0], b[1]);
    else gdl__cpu_maxpool_backward_f32(g, b[0], idx, b[1], 1);
    gdl__cpu_cast(gx, dt, b[1], GDL_F32, n[1]);
    GPUDL_FREE(f);
    return 0;
}
/* the pooling entries: f32 runs the f32 kernels, bf16 / f16 the above */
static int gdl__cpu_maxpool(gdl_dtype dt, const gdl_conv_geom *g, const void *x, void *y, int32_t *idx) {
    if (dt == GDL_F32) return gdl__cpu_maxpool_f32(g, (const gdl_real *)x, (gdl_real *)y, idx);
    return gdl__cpu_pool_lp(dt, 0, g, x, y, idx);
}
static int gdl__cpu_maxpool_backward(gdl_dtype dt, const gdl_conv_geom *g, const void *gy, const int32_t *idx, void *gx,
                                     int beta) {
    if (dt == GDL_F32) return gdl__cpu_maxpool_backward_f32(g, (const gdl_real *)gy, idx, (gdl_real *)gx, beta);
    if (!beta && GDL__GEOM_IN(g) > 0) memset(gx, 0, (size_t)GDL__GEOM_IN(g) * gdl_dtype_size(dt)); /* then += */
    return gdl__cpu_pool_backward_lp(dt, 0, g, gy, idx, gx);
}
static int gdl__cpu_avgpool(gdl_dtype dt, const gdl_conv_geom *g, const void *x, void *y) {
    if (dt == GDL_F32) return gdl__cpu_avgpool_f32(g, (const gdl_real *)x, (gdl_real *)y);
    return gdl__cpu_pool_lp(dt, 1, g, x, y, NULL);
}
static int gdl__cpu_avgpool_backward(gdl_dtype dt, const gdl_conv_geom *g, const void *gy, void *gx) {
    if (dt == GDL_F32) return gdl__cpu_avgpool_backward_f32(g, (const gdl_real *)gy, (gdl_real *)gx);
    return gdl__cpu_pool_backward_lp(dt, 1, g, gy, NULL, gx);
}
static int gdl__cpu_batchnorm(gdl_dtype dt, int64_t N, int64_t C, int64_t S, const void *x, const gdl_real *gamma,
                              const gdl_real *beta, void *y, gdl_real *mean, gdl_real *invstd, gdl_real *run_mean,
                              gdl_real *run_var, int training, double momentum, double eps, int act, gdl_real *pre) {
    const void *src[2];
    int64_t n[2];
    gdl_real *b[2], *f;
    int rc;
    if (dt == GDL_F32)
        return gdl__cpu_batchnorm_f32(N, C, S, (const gdl_real *)x, gamma, beta, (gdl_real *)y, mean, invstd, run_mean,
                                      run_var, training, momentum, eps, act, pre);
    if (gdl__cpu_lp_check("batchnorm", dt) < 0) return -1;
    src[0] = x; n[0] = N * C * S; src[1] = NULL; n[1] = N * C * S;
    if (!(f = gdl__cpu_lp_wide(dt, 2, src, n, b))) return -1;
    /* relu on the f32 value, then rounded: the same as rounded, then relu (rounding keeps the sign); GELU on
       the f32 value (kept in pre, f32), rounded once */
    rc = gdl__cpu_batchnorm_f32(N, C, S, b[0], gamma, beta, b[1], mean, invstd, run_mean, run_var, training, momentum, eps,
                            act, pre);
    if (rc == 0) gdl__cpu_cast(y, dt, b[1], GDL_F32, n[1]);
    GPUDL_FREE(f);
    return rc;
}
static int gdl__cpu_batchnorm_backward(gdl_dtype dt, int64_t N, int64_t C, int64_t S, const void *x, const void *gy,
                                       const void *y, const gdl_real *gamma, const gdl_real *mean,
                                       const gdl_real *invstd, int training, void *gx, gdl_real *ggamma,
                                       gdl_real *gbeta, int accumulate, int act) {
    const void *src[4];
    int64_t n[4];
    gdl_real *b[4], *f;
    int rc;
    if (dt == GDL_F32)
        return gdl__cpu_batchnorm_backward_f32(N, C, S, (const gdl_real *)x, (const gdl_real *)gy, (const gdl_real *)y,
                                               gamma, mean, invstd, training, (gdl_real *)gx, ggamma, gbeta, accumulate,
                                               act);
    if (!accumulate && gx && N * C * S > 0) memset(gx, 0, (size_t)(N * C * S) * gdl_dtype_size(dt)); /* then += */
    if (gdl__cpu_lp_check("batchnorm_backward", dt) < 0) return -1;
    /* a fused GELU's y is its f32 input, pre: read as it is; a ReLU's output is widened */
    src[0] = x; src[1] = gy; src[2] = gx; src[3] = act == GDL_ACT_GELU ? NULL : y;
    n[0] = n[1] = N * C * S; n[2] = gx ? N * C * S : 0; n[3] = y && act != GDL_ACT_GELU ? N * C * S : 0;
    if (!(f = gdl__cpu_lp_wide(dt, 4, src, n, b))) return -1;
    rc = gdl__cpu_batchnorm_backward_f32(N, C, S, b[0], b[1], act == GDL_ACT_GELU ? (const gdl_real *)y : y ? b[3] : NULL,
                                     gamma, mean, invstd, training, gx ? b[2] : NULL, ggamma, gbeta, 1, act);
    if (rc == 0 && gx) gdl__cpu_cast(gx, dt, b[2], GDL_F32, n[2]);
    GPUDL_FREE(f);
    return rc;
}
