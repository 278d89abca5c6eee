/* src/ops/conv_pool.h — 2-D convolution and pooling (NCHW). */

/* ---- convolution and pooling (NCHW) ---- */

/* A convolution on f16/bf16 (dt) x, w, bias: the columns in dt, the GEMMs
   through gemm in dt (f32 sums), the bias first written into out by a rank-1
   GEMM with ones so that out = bias + W*col rounds once, as gdl_linear's
   low path. *colp: the columns (x's data when direct). */
static int gdl__conv2d_lp(const char *op, const gdl_backend *be, gdl_dtype dt, const gdl_conv_geom *g, int groups,
                          int direct, gdl_tensor *x, gdl_tensor *w, gdl_tensor *bias, gdl_tensor *out, void **colp) {
    int64_t OC = out->shape[1], Cg = g->C / groups, OCg = OC / groups, KK = (int64_t)g->KH * g->KW;
    int64_t OHW = (int64_t)g->OH * g->OW;
    void *col = x->data;
    int gi;
    if (!direct && (!(col = gdl__scratch(op, x->device, gdl_dtype_size(dt) * (size_t)(g->N * g->C * KK * OHW))) ||
                    be->k.im2col(dt, g, x->data, col) < 0))
        return -1;
    *colp = col;
    if (bias) {
        void *ones = gdl__ones_dt(op, be, x->device, dt, OHW);
        if (!ones || gdl__gemm_dt(be, dt, 0, 0, (int)OC, (int)OHW, 1, bias->data, 1, 0, ones, (int)OHW, 0, 0, out->data,
                                  (int)OHW, OC * OHW, g->N) < 0)
            return -1;
    }
    for (gi = 0; gi < groups; gi++)
        if (gdl__gemm_dt(be, dt, 0, 0, (int)OCg, (int)OHW, (int)(Cg * KK), GDL__AT(w->data, dt, gi * OCg * Cg * KK),
                         (int)(Cg * KK), 0, GDL__AT(col, dt, gi * Cg * KK * OHW), (int)OHW, g->C * KK * OHW, bias ? 1 : 0,
                         GDL__AT(out->data, dt, gi * OCg * OHW), (int)OHW, OC * OHW, g->N) < 0)
            return -1;
    return 0;
}

/* its backward: the same GEMMs as the f32 one, in dt; the bias gradient is
   gy times ones; the columns' gradient goes back through col2im in dt, whose
   sums are f32 (gx rounded once; the columns' gradient itself is rounded
   to dt first, as the GEMM's output). The weight and bias gradients sum
   over the samples in one gemm call with sC == 0, which sums the
   products in f32 and rounds once (on a GPU once per chunk of samples:
   gdl__cu_gemm_sum), not once a sample. */
static int gdl__bw_conv2d_lp(gdl_node *n, const gdl_backend *be) {
    const gdl_conv_geom *g = &n->geom;
    gdl_dtype dt = n->out->dtype;
    int groups = (int)n->i[0], direct = (int)n->i[1], gi;
    int64_t OC = n->out->shape[1], Cg = g->C / groups, OCg = OC / groups, KK = (int64_t)g->KH * g->KW;
    int64_t OHW = (int64_t)g->OH * g->OW, CKK = (int64_t)g->C * KK;
    void *gy = n->out->grad->data, *W = n->in[1]->data, *col = n->buf;
    void *gx = n->in[0]->requires_grad ? n->in[0]->grad->data : NULL;
    void *gw = n->in[1]->requires_grad ? n->in[1]->grad->data : NULL;
    void *gb = n->in[2] && n->in[2]->requires_grad ? n->in[2]->grad->data : NULL;
    if (gb) {
        void *ones = gdl__ones_dt("gdl_backward", be, n->out->device, dt, OHW);
        if (!ones || gdl__gemm_dt(be, dt, 0, 1, 1, (int)OC, (int)OHW, ones, (int)OHW, 0, gy, (int)OHW, OC * OHW, 1, gb,
                                  (int)OC, 0, g->N) < 0)
            return -1;
    }
    if (gw)
        for (gi = 0; gi < groups; gi++) {
            int64_t wg = OCg * Cg * KK; /* one group's block of gw: OCg rows of Cg*KK, contiguous */
            if (gdl__gemm_dt(be, dt, 0, 1, (int)OCg, (int)(Cg * KK), (int)OHW, GDL__AT(gy, dt, gi * OCg * OHW), (int)OHW,
                             OC * OHW, GDL__AT(col, dt, gi * Cg * KK * OHW), (int)OHW, CKK * OHW, 1,
                             GDL__AT(gw, dt, gi * wg), (int)(Cg * KK), 0, g->N) < 0)
                return -1;
        }
    if (gx) {
        void *gcol = direct ? gx : gdl__scratch("gdl_backward", n->out->device, gdl_dtype_size(dt) * (size_t)(g->N * CKK * OHW));
        if (!gcol) return -1;
        for (gi = 0; gi < groups; gi++)
            if (gdl__gemm_dt(be, dt, 1, 0, (int)(Cg * KK), (int)OHW, (int)OCg, GDL__AT(W, dt, gi * OCg * Cg * KK),
                             (int)(Cg * KK), 0, GDL__AT(gy, dt, gi * OCg * OHW), (int)OHW, OC * OHW, direct ? 1 : 0,
                             GDL__AT(gcol, dt, gi * Cg * KK * OHW), (int)OHW, CKK * OHW, g->N) < 0)
                return -1;
        if (!direct && be->k.col2im(dt, g, gcol, gx) < 0) return -1;
    }
    return 0;
}

/* conv2d (act -2: GDL_OP_CONV2D) or conv2d then bias + act (the backend's code, -1 none) in one pass
   (GDL_OP_CONV2D_ACT) */
static gdl_tensor *gdl__conv2d(const char *op, gdl_tensor *x, gdl_tensor *w, gdl_tensor *bias, const int stride[2],
                               const int padding[2], const int dilation[2], int groups, int act) {
    gdl_conv_geom g;
    int64_t OC, Cg, OCg, KK, OHW, shape[4];
    gdl_tensor *out, *pre = NULL, *in[3];
    gdl_real *col = NULL;
    gdl_node *n;
    int gi, err, direct, implicit = 0, opid = act >= -1 ? GDL_OP_CONV2D_ACT : GDL_OP_CONV2D;
    const gdl_backend *be;
    gdl_dtype dt = GDL_F32;
    if (gdl__xwb_not_f32(x, w, bias)) {
        /* native (gdl__conv2d_lp) for the plain convolution; the fused one in low precision through f32 copies */
        if (act == -2 && gdl__xwb_native(x, w, bias)) dt = x->dtype;
        else GDL__LOWP3(op, opid, gdl__conv2d(op, x, w, bias, stride, padding, dilation, groups, act), x, w, bias);
    }
    if (gdl__check_xwb(op, x, w, bias, dt == GDL_F32) < 0) return NULL;
    if (!stride || !padding || !dilation) {
        gdl__null_arg(op, !stride ? "stride" : !padding ? "padding" : "dilation");
        return NULL;
    }
    if (x->ndim != 4 || w->ndim != 4) {
        gdl__set_error("%s: expected input [N,C,H,W] and weight [OC,C/groups,KH,KW], got %s and %s", op,
                       gdl_shape_str(x), gdl_shape_str(w));
        return NULL;
    }
    OC = w->shape[0];
    if (groups < 1 || x->shape[1] % groups || OC % groups || w->shape[1] * groups != x->shape[1]) {
        gdl__set_error("%s: input %s, weight %s and groups %d do not match (need C = weight dim 1 x groups, "
                       "both C and OC divisible by groups)", op, gdl_shape_str(x), gdl_shape_str(w), groups);
        return NULL;
    }
    if (stride[0] < 1 || stride[1] < 1 || padding[0] < 0 || padding[1] < 0 || dilation[0] < 1 || dilation[1] < 1) {
        gdl__set_error("%s: bad stride (%d,%d), padding (%d,%d) or dilation (%d,%d)", op, stride[0], stride[1],
                       padding[0], padding[1], dilation[0], dilation[1]);
        return NULL;
    }
    if (bias && (bias->ndim != 1 || bias->shape[0] != OC)) {
        gdl__set_error("%s: bias %s does not match %lld output channels", op, gdl_shape_str(bias), (long long)OC);
        return NULL;
    }
    g.N = (int)x->shape[0]; g.C = (int)x->shape[1]; g.H = (int)x->shape[2]; g.W = (int)x->shape[3];
    g.KH = (int)w->shape[2]; g.KW = (int)w->shape[3];
    g.SH = stride[0]; g.SW = stride[1]; g.PH = padding[0]; g.PW = padding[1]; g.DH = dilation[0]; g.DW = dilation[1];
    g.OH = (g.H + 2 * g.PH - g.DH * (g.KH - 1) - 1) / g.SH + 1;
    g.OW = (g.W + 2 * g.PW - g.DW * (g.KW - 1) - 1) / g.SW + 1;
    if (g.H + 2 * g.PH - g.DH * (g.KH - 1) - 1 < 0 || g.W + 2 * g.PW - g.DW * (g.KW - 1) - 1 < 0 || g.OH < 1 || g.OW < 1) {
        gdl__set_error("%s: kernel %dx%d (dilation %d,%d) is larger than the padded input %s", op, g.KH, g.KW, g.DH,
                       g.DW, gdl_shape_str(x));
        return NULL;
    }
    Cg = g.C / groups; OCg = OC / groups; KK = (int64_t)g.KH * g.KW; OHW = (int64_t)g.OH * g.OW;
    shape[0] = g.N; shape[1] = OC; shape[2] = g.OH; shape[3] = g.OW;
    if (!(be = gdl__be(op, x->device)) || !(out = gdl__tmp(op, 4, shape, dt, x->device))) return NULL;
    /* a 1x1 stride-1 unpadded convolution is a GEMM on the input itself */
    direct = g.KH == 1 && g.KW == 1 && g.SH == 1 && g.SW == 1 && g.PH == 0 && g.PW == 0;
    in[0] = x; in[1] = w; in[2] = bias;
    if (act >= 0 && act != GDL_UN_RELU && gdl__needs_grad(3, in) && !(pre = gdl__tmp(op, 4, shape, GDL_F32, x->device)))
        return NULL;
    if (dt != GDL_F32) {
        void *lcol = NULL;
        if (gdl__conv2d_lp(op, be, dt, &g, groups, direct, x, w, bias, out, &lcol) < 0) return NULL;
        col = (gdl_real *)lcol;
    } else if (!direct && out->numel) { /* the columns gathered in the GEMM's packing, bias and act in its epilogue */
        int rc = be->k.conv_implicit(0, &g, groups, (int)OC, act >= 0 ? act : -1, GDL__R(x), GDL__R(w), NULL,
                                   bias ? GDL__R(bias) : NULL, GDL__R(out), pre ? GDL__R(pre) : NULL);
        if (rc < 0) return NULL;
        implicit = rc == 0; /* 1: not on this backend or for this shape */
    }
    if (dt == GDL_F32 && !implicit) {
        if (direct) {
            col = GDL__R(x);
        } else {
            col = (gdl_real *)gdl__scratch(op, x->device, sizeof(gdl_real) * (size_t)(g.N * g.C * KK * OHW));
            if (!col || be->k.im2col(GDL_F32, &g, GDL__R(x), col) < 0) return NULL;
        }
        for (gi = 0; gi < groups; gi++)
            if (be->k.gemm(GDL_F32, 0, 0, (int)OCg, (int)OHW, (int)(Cg * KK), 1, GDL__R(w) + gi * OCg * Cg * KK, (int)(Cg * KK), 0,
                         col + gi * Cg * KK * OHW, (int)OHW, g.C * KK * OHW, 0, GDL__R(out) + gi * OCg * OHW, (int)OHW,
                         OC * OHW, g.N) < 0)
                return NULL;
    }
    if (act >= -1 && !implicit) {
        if (out->numel && be->k.bias_act(act, g.N, OC, OHW, bias ? GDL__R(bias) : NULL, GDL__R(out),
                                       pre ? GDL__R(pre) : NULL) < 0)
            return NULL;
    } else if (act == -2 && bias && dt == GDL_F32 && !implicit) {
        int64_t s3[3], ostr[3], bstr[3];
        s3[0] = g.N; s3[1] = OC; s3[2] = OHW;
        ostr[0] = OC * OHW; ostr[1] = OHW; ostr[2] = 1;
        bstr[0] = 0; bstr[1] = 1; bstr[2] = 0;
        if (be->k.binary(GDL_BIN_ADD, 3, s3, GDL_F32, GDL__R(out), ostr, GDL_F32, GDL__R(bias), bstr, GDL_F32, GDL__R(out)) < 0) return NULL;
    }
    gdl__flops_add(0, out->numel * Cg * KK, 1);
    n = gdl__record(op, opid, out, 3, in, &err);
    if (err) return NULL;
    if (n) {
        n->geom = g;
        n->buf = col; /* NULL after the implicit GEMM: the backward gathers the columns from x again */
        n->i[0] = groups;
        n->i[1] = direct;
        n->i[2] = act;
        n->saved[0] = pre;
    }
    return gdl__finish(op, out);
}

GPUDL_API gdl_tensor *gdl_conv2d_ex(gdl_tensor *x, gdl_tensor *w, gdl_tensor *bias, const int stride[2],
                                    const int padding[2], const int dilation[2], int groups) {
    return gdl__conv2d("gdl_conv2d", x, w, bias, stride, padding, dilation, groups, -2);
}

GPUDL_API gdl_tensor *gdl_conv2d_act(gdl_tensor *x, gdl_tensor *w, gdl_tensor *bias, int stride, int padding,
                                     int dilation, int groups, gdl_act act) {
    int s[2], p[2], d[2], ua = gdl__act_code("gdl_conv2d_act", (int)act);
    if (ua == -2) return NULL;
    s[0] = s[1] = stride;
    p[0] = p[1] = padding;
    d[0] = d[1] = dilation;
    return gdl__conv2d("gdl_conv2d_act", x, w, bias, s, p, d, groups, ua);
}

GPUDL_API gdl_tensor *gdl_conv2d(gdl_tensor *x, gdl_tensor *w, gdl_tensor *bias, int stride, int padding,
                                 int dilation, int groups) {
    int s[2], p[2], d[2];
    s[0] = s[1] = stride;
    p[0] = p[1] = padding;
    d[0] = d[1] = dilation;
    return gdl_conv2d_ex(x, w, bias, s, p, d, groups);
}

static int gdl__bw_conv2d(gdl_node *n, const gdl_backend *be) {
    const gdl_conv_geom *g = &n->geom;
    int groups = (int)n->i[0], direct = (int)n->i[1], gi;
    int64_t OC = n->out->shape[1], Cg = g->C / groups, OCg = OC / groups, KK = (int64_t)g->KH * g->KW;
    int64_t OHW = (int64_t)g->OH * g->OW, CKK = (int64_t)g->C * KK;
    gdl_real *gy = GDL__R(n->out->grad), *gx = GDL__G(n->in[0]), *gw = GDL__G(n->in[1]), *gb = GDL__G(n->in[2]);
    gdl_real *W = GDL__R(n->in[1]), *col = (gdl_real *)n->buf;
    gdl__flops_add(1, n->out->numel * Cg * KK, (gx != NULL) + (gw != NULL));
    if (n->out->dtype != GDL_F32) return gdl__bw_conv2d_lp(n, be);
    int act = n->op == GDL_OP_CONV2D_ACT ? (int)n->i[2] : -1;
    /* x's gradient may be unset (gdl__bw_fresh_ok): the tile unit's input gradient writes it, the other paths
       add into it zeroed; the weight's and bias's are added */
    if (gdl__grad_zero(n->in[1], be) < 0 || gdl__grad_zero(n->in[2], be) < 0) return -1;
    if (act >= 0 && n->out->numel && (gx || gw || gb)) {
        /* act' into a scratch gradient, with the bias gradient's per-(n,c) sums in the same pass, in the
           unfused backward's order (sum over the pixels, then over N) */
        gdl_real *gp = (gdl_real *)gdl__scratch("gdl_backward", n->out->device, sizeof(gdl_real) * (size_t)n->out->numel);
        gdl_real *t = gb ? (gdl_real *)gdl__scratch("gdl_backward", n->out->device, sizeof(gdl_real) * (size_t)(g->N * OC))
                         : NULL;
        const gdl_real *pre = n->saved[0] ? GDL__R(n->saved[0]) : GDL__R(n->out);
        if (!gp || (gb && !t) || be->k.act_backward_reduce(act, g->N * OC, OHW, 1, pre, gy, gp, t, 0) < 0 ||
            (gb && be->k.reduce(GDL_RED_SUM, 1, g->N, OC, t, gb, NULL, 1) < 0))
            return -1;
        gy = gp;
    } else if (gb) { /* sum over N and the pixels */
        gdl_real *t = (gdl_real *)gdl__scratch("gdl_backward", n->out->device, sizeof(gdl_real) * (size_t)(g->N * OC));
        if (!t || be->k.reduce(GDL_RED_SUM, g->N * OC, OHW, 1, gy, t, NULL, 0) < 0 ||
            be->k.reduce(GDL_RED_SUM, 1, g->N, OC, t, gb, NULL, 1) < 0)
            return -1;
    }
    if (gw && !direct && !col) { /* the forward's implicit GEMM kept no columns */
        int rc = be->k.conv_implicit(1, g, groups, (int)OC, -1, GDL__R(n->in[0]), NULL, gy, NULL, gw, NULL);
        if (rc < 0) return -1;
        if (rc == 0) gw = NULL; /* done */
        else if (!(col = (gdl_real *)gdl__scratch("gdl_backward", n->out->device, sizeof(gdl_real) * (size_t)(g->N * CKK * OHW))) ||
                 be->k.im2col(GDL_F32, g, GDL__R(n->in[0]), col) < 0)
            return -1;
    }
    if (gw) /* summed over the samples in turn: one batched call with sC == 0 per group */
        for (gi = 0; gi < groups; gi++)
            if (be->k.gemm(GDL_F32, 0, 1, (int)OCg, (int)(Cg * KK), (int)OHW, 1, gy + gi * OCg * OHW, (int)OHW, OC * OHW,
                         col + gi * Cg * KK * OHW, (int)OHW, CKK * OHW, 1, gw + gi * OCg * Cg * KK, (int)(Cg * KK), 0,
                         g->N) < 0)
                return -1;
    if (gx && !direct) { /* one sample's columns' gradient at a time: no buffer for the batch's */
        int rc = 1;
        if (n->in[0]->grad->flags & GDL__T_UNSET) {
            rc = be->k.conv_implicit(3, g, groups, (int)OC, -1, NULL, W, gy, NULL, gx, NULL);
            if (rc == 0) gdl__grad_beta(n->in[0]); /* written: set from now on */
        }
        if (rc == 1) {
            if (gdl__grad_zero(n->in[0], be) < 0) return -1;
            rc = be->k.conv_implicit(2, g, groups, (int)OC, -1, NULL, W, gy, NULL, gx, NULL);
        }
        if (rc < 0) return -1;
        if (rc == 0) gx = NULL; /* done */
    }
    if (gx) {
        if (gdl__grad_zero(n->in[0], be) < 0) return -1;
        /* direct: the columns are the input, so accumulate straight into gx */
        gdl_real *gcol = direct ? gx : (gdl_real *)gdl__scratch("gdl_backward", n->out->device,
                                                                 sizeof(gdl_real) * (size_t)(g->N * CKK * OHW));
        if (!gcol) return -1;
        for (gi = 0; gi < groups; gi++)
            if (be->k.gemm(GDL_F32, 1, 0, (int)(Cg * KK), (int)OHW, (int)OCg, 1, W + gi * OCg * Cg * KK, (int)(Cg * KK), 0,
                         gy + gi * OCg * OHW, (int)OHW, OC * OHW, direct ? 1 : 0, gcol + gi * Cg * KK * OHW, (int)OHW,
                         CKK * OHW, g->N) < 0)
                return -1;
        if (!direct && be->k.col2im(GDL_F32, g, gcol, gx) < 0) return -1;
    }
    return 0;
}

static gdl_tensor *gdl__pool(const char *opname, int op, gdl_tensor *x, int kernel, int stride, int padding) {
    gdl_conv_geom g;
    int64_t shape[4];
    gdl_tensor *out, *idx = NULL;
    gdl_node *n;
    int err, rc;
    const gdl_backend *be;
    gdl_dtype dt = GDL_F32;
    if (x && gdl__is_low(x->dtype)) dt = x->dtype; /* native (autocast's class PROMOTE casts nothing) */
    else GDL__LOWP1(opname, op, gdl__pool(opname, op, x, kernel, stride, padding), x);
    if (gdl__check_in(opname, "input", x, dt == GDL_F32) < 0) return NULL;
    if (x->ndim != 4) {
        gdl__set_error("%s: expected input [N,C,H,W], got %s", opname, gdl_shape_str(x));
        return NULL;
    }
    if (stride == 0) stride = kernel;
    if (kernel < 1 || stride < 1 || padding < 0 || padding > kernel / 2) {
        gdl__set_error("%s: bad kernel %d, stride %d or padding %d (padding must be at most half the kernel)", opname,
                       kernel, stride, padding);
        return NULL;
    }
    memset(&g, 0, sizeof g);
    g.N = (int)x->shape[0]; g.C = (int)x->shape[1]; g.H = (int)x->shape[2]; g.W = (int)x->shape[3];
    g.KH = g.KW = kernel; g.SH = g.SW = stride; g.PH = g.PW = padding; g.DH = g.DW = 1;
    if (g.H + 2 * padding < kernel || g.W + 2 * padding < kernel) {
        gdl__set_error("%s: kernel %d is larger than the padded input %s", opname, kernel, gdl_shape_str(x));
        return NULL;
    }
    g.OH = (g.H + 2 * padding - kernel) / stride + 1;
    g.OW = (g.W + 2 * padding - kernel) / stride + 1;
    shape[0] = g.N; shape[1] = g.C; shape[2] = g.OH; shape[3] = g.OW;
    if (!(be = gdl__be(opname, x->device)) || !(out = gdl__tmp(opname, 4, shape, dt, x->device))) return NULL;
    if (op == GDL_OP_MAX_POOL2D) {
        if (!(idx = gdl__tmp(opname, 4, shape, GDL_I32, x->device))) return NULL;
        rc = !out->numel ? 0 : be->k.maxpool(dt, &g, x->data, out->data, (int32_t *)idx->data);
    } else {
        rc = !out->numel ? 0 : be->k.avgpool(dt, &g, x->data, out->data);
    }
    if (rc < 0) return NULL;
    n = gdl__record(opname, op, out, 1, &x, &err);
    if (err) return NULL;
    if (n) {
        n->geom = g;
        n->saved[0] = idx;
    }
    return gdl__finish(opname, out);
}

static int gdl__bw_pool(gdl_node *n, const gdl_backend *be) {
    gdl_real *gx = GDL__G(n->in[0]);
    gdl_dtype dt = n->out->dtype;
    if (!gx) return 0;
    if (!n->out->numel) return gdl__grad_zero(n->in[0], be);
    if (dt != GDL_F32) {
        if (n->op == GDL_OP_MAX_POOL2D)
            return be->k.maxpool_backward(dt, &n->geom, n->out->grad->data, (const int32_t *)n->saved[0]->data, gx, 1);
        return be->k.avgpool_backward(dt, &n->geom, n->out->grad->data, gx);
    }
    if (n->op == GDL_OP_MAX_POOL2D) /* x's gradient may be unset (gdl__bw_fresh_ok): written, not added */
        return be->k.maxpool_backward(GDL_F32, &n->geom, GDL__R(n->out->grad), (const int32_t *)n->saved[0]->data, gx,
                                    gdl__grad_beta(n->in[0]));
    return be->k.avgpool_backward(GDL_F32, &n->geom, GDL__R(n->out->grad), gx);
}

GPUDL_API gdl_tensor *gdl_max_pool2d(gdl_tensor *x, int kernel, int stride, int padding) {
    return gdl__pool("gdl_max_pool2d", GDL_OP_MAX_POOL2D, x, kernel, stride, padding);
}
GPUDL_API gdl_tensor *gdl_avg_pool2d(gdl_tensor *x, int kernel, int stride, int padding) {
    return gdl__pool("gdl_avg_pool2d", GDL_OP_AVG_POOL2D, x, kernel, stride, padding);
}

/* global average pooling of rows [P, HW] in dt as GEMMs with a vector of
   ones and alpha = 1/HW: forward y = x ones / HW, backward gx += gy ones^T /
   HW (f32 sums, rounded once) */
static int gdl__gap_lp(const char *op, const gdl_backend *be, gdl_dtype dt, gdl_device dev, int64_t P, int64_t HW,
                       const void *src, void *dst, int backward) {
    void *ones;
    float inv = (float)(1.0 / (double)HW);
    if (P > INT32_MAX || HW > INT32_MAX) {
        gdl__set_error("%s: input too large for the low-precision path (%lld planes of %lld)", op, (long long)P, (long long)HW);
        return -1;
    }
    if (!(ones = gdl__ones_dt(op, be, dev, dt, HW))) return -1;
    if (backward) /* dst = gx [P,HW] += src = gy [P,1] x ones [1,HW] / HW */
        return be->k.gemm(dt, 0, 0, (int)P, (int)HW, 1, inv, src, 1, 0, ones, (int)HW, 0, 1.0f, dst, (int)HW, 0, 1);
    return be->k.gemm(dt, 0, 0, (int)P, 1, (int)HW, inv, src, (int)HW, 0, ones, 1, 0, 0.0f, dst, 1, 0, 1);
}

GPUDL_API gdl_tensor *gdl_global_avg_pool2d(gdl_tensor *x) {
    const char *op = "gdl_global_avg_pool2d";
    int64_t shape[4];
    gdl_tensor *out;
    gdl_node *n;
    int err;
    const gdl_backend *be;
    gdl_dtype dt = GDL_F32;
    if (x && gdl__is_low(x->dtype)) dt = x->dtype; /* native: a GEMM with ones (f32 sums, one rounding) */
    else GDL__LOWP1(op, GDL_OP_GLOBAL_AVG_POOL2D, gdl_global_avg_pool2d(x), x);
    if (gdl__check_in(op, "input", x, dt == GDL_F32) < 0) return NULL;
    if (x->ndim != 4 || x->shape[2] * x->shape[3] == 0) {
        gdl__set_error("%s: expected a non-empty input [N,C,H,W], got %s", op, gdl_shape_str(x));
        return NULL;
    }
    shape[0] = x->shape[0]; shape[1] = x->shape[1]; shape[2] = shape[3] = 1;
    if (!(be = gdl__be(op, x->device)) || !(out = gdl__tmp(op, 4, shape, dt, x->device))) return NULL;
    if (dt != GDL_F32) {
        if (out->numel && gdl__gap_lp(op, be, dt, x->device, shape[0] * shape[1], x->shape[2] * x->shape[3], x->data,
                                      out->data, 0) < 0)
            return NULL;
    } else if (out->numel && be->k.reduce(GDL_RED_MEAN, shape[0] * shape[1], x->shape[2] * x->shape[3], 1, GDL__R(x),
                                        GDL__R(out), NULL, 0) < 0) {
        return NULL;
    }
    n = gdl__record(op, GDL_OP_GLOBAL_AVG_POOL2D, out, 1, &x, &err);
    if (err) return NULL;
    if (n) {
        n->i[0] = shape[0] * shape[1]; n->i[1] = x->shape[2] * x->shape[3]; n->i[2] = 1;
    }
    return gdl__finish(op, out);
}
