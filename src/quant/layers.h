/* src/quant/layers.h — the quantized layers and where they run, and fake
   quantization for QAT. */

/* ---- quantized layers: DynamicQuantizedLinear, QuantizedLinear(ReLU), QuantizedConv(ReLU)2d ---- */

enum { GDL__Q_DYNAMIC, GDL__Q_STATIC };

typedef struct gdl__qlayer {
    int mode, conv, relu;  /* GDL__Q_*; a Conv2d; ReLU fused */
    int64_t in, out;       /* the GEMM's K (in_features, or in_channels*kh*kw) and N */
    int64_t ia[GDL__NN_IA]; /* the float module's configuration: GDL__LIN_* or GDL__CONV_* slots */
    int per_channel, reduce_range;
    int8_t *w;             /* [out][in] */
    float *w_scale;        /* [out], or [1] per tensor */
    int32_t *w_zp;         /* as w_scale: all 0 (symmetric) */
    float *bias;           /* [out] or NULL */
    float in_scale, out_scale;   /* static: the activations' parameters */
    int32_t in_zp, out_zp;
    gdl__qpack pack;       /* w packed for the GEMM, with its row sums */
    /* weight tying (gdl_module_tie), at most one of: */
    struct gdl__qlayer *wown;  /* another layer whose w, w_scale, w_zp and pack this one uses (its own are NULL) */
    gdl_tensor *wfloat;        /* the model's f32 parameter that w is quantized from: stored in files, not w */
    gdl_device dev;        /* where it runs (gdl_module_to); not the CPU: the copies there */
    void *d_qw;            /* the backend's qweight_new */
    int32_t *d_colsum;
    float *d_scale, *d_bias;
} gdl__qlayer;

static void gdl__qlayer_drop_dev(gdl__qlayer *q);
static void gdl__qlayer_free(void *p) {
    gdl__qlayer *q = (gdl__qlayer *)p;
    if (!q) return;
    gdl__qlayer_drop_dev(q);
    GPUDL_FREE(q->w);
    GPUDL_FREE(q->w_scale);
    GPUDL_FREE(q->w_zp);
    GPUDL_FREE(q->bias);
    gdl__qpack_free(&q->pack);
    GPUDL_FREE(q);
}

static int64_t gdl__qlayer_nscale(const gdl__qlayer *q) { return q->per_channel ? q->out : 1; }
/* the layer holding q's int8 weight (q itself unless it shares another's) */
static const gdl__qlayer *gdl__qlayer_wsrc(const gdl__qlayer *q) { return q->wown ? q->wown : q; }
static int gdl__qlayer_qmax(const gdl__qlayer *q) { return q->reduce_range ? 127 : 255; }

/* Symmetric int8 weights from an f32 [out][in] (PyTorch's (per_channel_)symmetric MinMax observer): the
   scale of each row (or of the whole) is max(|min|, |max|) / 127.5, at least FLT_EPSILON. */
static void gdl__qlayer_quantize_weight(gdl__qlayer *q, const gdl_real *w) {
    const int64_t rows = q->per_channel ? 1 : q->out, groups = gdl__qlayer_nscale(q);
    const float big = gdl__q_big();
    int64_t g, i;
    for (g = 0; g < groups; g++) {
        const gdl_real *src = w + g * rows * q->in;
        int8_t *dst = q->w + g * rows * q->in;
        float lo = 0, hi = 0, s, inv;
        for (i = 0; i < rows * q->in; i++) {
            const float v = (float)src[i];
            if (v < lo) lo = v;
            if (v > hi) hi = v;
        }
        s = (-lo > hi ? -lo : hi) / 127.5f;
        if (s < FLT_EPSILON) s = FLT_EPSILON;
        inv = 1.0f / s;
        for (i = 0; i < rows * q->in; i++) {
            const float r = gdl__q_round((float)src[i] * inv, big);
            dst[i] = (int8_t)(r < -128 ? -128 : r > 127 ? 127 : r);
        }
        q->w_scale[g] = s;
        q->w_zp[g] = 0;
    }
}

static gdl_tensor *gdl__qlayer_forward(gdl_module *m, gdl_tensor *x);
static int gdl__is_qlayer(const gdl_module *m) { return m && m->kind == GDL__M_CUSTOM && m->fwd == gdl__qlayer_forward; }

static const char *gdl__qlayer_kind(const gdl__qlayer *q) {
    if (q->mode == GDL__Q_DYNAMIC) return "DynamicQuantizedLinear";
    if (q->conv) return q->relu ? "QuantizedConvReLU2d" : "QuantizedConv2d";
    return q->relu ? "QuantizedLinearReLU" : "QuantizedLinear";
}

static int gdl__qlayer_to_dev(gdl__qlayer *q, gdl_device dev);

/* ---- what the module tree's walks ask a quantized layer (gdl__nn_extra, src/nn/modules.h) ---- */
/* gdl_module_to's step: the int8 weight's copies on dev */
static int gdl__qlayer_to(gdl_module *m, gdl_device dev) {
    gdl__qlayer *q = (gdl__qlayer *)m->user;
    if (gdl_device_equal(q->dev, dev)) return 0;
    return gdl__qlayer_to_dev(q, dev);
}

static gdl_device gdl__qlayer_device(const gdl_module *m) { return ((const gdl__qlayer *)m->user)->dev; }

/* the parameter count (int8 weights and bias) and bytes as stored. A weight shared with another layer or derived
   from a float parameter is counted there, as a tied parameter. */
static int64_t gdl__qlayer_params(const gdl_module *m, int64_t *bytes) {
    const gdl__qlayer *q = (const gdl__qlayer *)m->user;
    const int64_t w = q->wown || q->wfloat ? 0 : q->in * q->out;
    if (bytes)
        *bytes = w + (w ? gdl__qlayer_nscale(q) * 8 : 0) + (q->bias ? 4 * q->out : 0) +
                 (q->mode == GDL__Q_STATIC ? 16 : 0);
    return w + (q->bias ? q->out : 0);
}

static const gdl__nn_extra gdl__qlayer_extra = {gdl__qlayer_to, gdl__qlayer_device, gdl__qlayer_params,
                                                "; int8 weights, f32 scales, i32 zero points"};

/* A quantized layer from a Linear or Conv2d's module configuration (ia), its f32 weight and bias, and for a
   static layer the activations' parameters. It is made in host memory and placed on W's device. */
static gdl_module *gdl__qlayer_new(const char *op, const char *who, int mode, int conv, int relu, const int64_t *ia,
                                   const gdl_tensor *W, const gdl_tensor *b, const gdl_qconfig *qc,
                                   const float *act_s, const int32_t *act_z) {
    gdl__qlayer *q;
    gdl_module *m;
    gdl_real *tw = NULL, *tb = NULL;
    const gdl_real *wh, *bh = NULL;
    int64_t i;
    if (W->dtype != GDL_F32 || (b && (b->dtype != GDL_F32 || !gdl_device_equal(b->device, W->device)))) {
        gdl__set_error("%s: %s has a %s weight %s on %s%s: quantized modules are made from f32 weights", op, who,
                       gdl_dtype_name(W->dtype), gdl_shape_str(W), gdl_device_str(W->device),
                       b ? " (and its bias on the same device)" : "");
        return NULL;
    }
    if (conv && ia[GDL__CONV_GROUPS] != 1) {
        gdl__set_error("%s: %s has groups=%lld: quantized convolutions take groups=1 only", op, who,
                       (long long)ia[GDL__CONV_GROUPS]);
        return NULL;
    }
    if (!(q = (gdl__qlayer *)gdl__zalloc(op, sizeof *q))) return NULL;
    q->mode = mode;
    q->conv = conv;
    q->relu = relu;
    memcpy(q->ia, ia, sizeof q->ia);
    q->in = conv ? ia[GDL__CONV_IN] * ia[GDL__CONV_KH] * ia[GDL__CONV_KW] : ia[GDL__LIN_IN];
    q->out = conv ? ia[GDL__CONV_OUT] : ia[GDL__LIN_OUT];
    q->per_channel = qc->per_channel != 0;
    q->reduce_range = qc->reduce_range != 0;
    if (act_s) {
        q->in_scale = act_s[0];
        q->out_scale = act_s[1];
        q->in_zp = act_z[0];
        q->out_zp = act_z[1];
    }
    if (q->in > GDL_GEMM_INT8_MAX_K || q->out > INT32_MAX) {
        gdl__qgemm_check(op, 1, (int)(q->out > INT32_MAX ? -1 : q->out), (int)(q->in > INT32_MAX ? INT32_MAX : q->in));
        gdl__qlayer_free(q);
        return NULL;
    }
    q->w = (int8_t *)GPUDL_MALLOC((size_t)(q->in * q->out));
    q->w_scale = (float *)GPUDL_MALLOC(sizeof(float) * (size_t)gdl__qlayer_nscale(q));
    q->w_zp = (int32_t *)GPUDL_MALLOC(sizeof(int32_t) * (size_t)gdl__qlayer_nscale(q));
    q->bias = b ? (float *)GPUDL_MALLOC(sizeof(float) * (size_t)q->out) : NULL;
    if (!q->w || !q->w_scale || !q->w_zp || (b && !q->bias)) {
        gdl__set_error("%s: out of memory", op);
        gdl__qlayer_free(q);
        return NULL;
    }
    if (!(wh = gdl__q_host(op, W, &tw)) || (b && !(bh = gdl__q_host(op, b, &tb)))) {
        GPUDL_FREE(tw);
        gdl__qlayer_free(q);
        return NULL;
    }
    gdl__qlayer_quantize_weight(q, wh);
    for (i = 0; bh && i < q->out; i++) q->bias[i] = (float)bh[i];
    GPUDL_FREE(tw);
    GPUDL_FREE(tb);
    if (gdl__qpack_init(op, &q->pack, (int)q->out, (int)q->in, q->w, (ptrdiff_t)q->in) < 0) {
        gdl__qlayer_free(q);
        return NULL;
    }
    if (!(m = gdl_nn_custom(gdl__qlayer_kind(q), gdl__qlayer_forward, q, gdl__qlayer_free))) return NULL;
    m->extra = &gdl__qlayer_extra;
    memcpy(m->ia, ia, sizeof m->ia);
    if (W->device.type != GDL_DEVICE_CPU && gdl__qlayer_to_dev(q, W->device) < 0) {
        gdl__nn_free_tree(m);
        return NULL;
    }
    return m;
}

/* ---- where a quantized layer runs ----
   The int8 weight, its row sums, scales and bias stay in host memory (the
   files read and write them there; the CPU runs on them, its pack made with
   the layer); gdl_module_to another device makes copies there (dev), which
   the forward then uses through that device's backend entries. */

static void gdl__qlayer_drop_dev(gdl__qlayer *q) {
    const gdl_backend *be;
    if (q->dev.type == GDL_DEVICE_CPU) return;
    if ((be = gdl__be("gdl_module_to", q->dev)) != NULL) {
        if (q->d_qw) be->k.qweight_free(q->d_qw);
        be->rt.free(q->d_colsum);
        be->rt.free(q->d_scale);
        be->rt.free(q->d_bias);
    }
    q->d_qw = NULL;
    q->d_colsum = NULL;
    q->d_scale = q->d_bias = NULL;
    q->dev = gdl_cpu();
}

/* a host array copied to the device of be; NULL + error */
static void *gdl__qlayer_upload(const gdl_backend *be, const void *src, size_t bytes) {
    void *d = be->rt.alloc(bytes ? bytes : 1);
    if (d && bytes && be->rt.copy(d, src, bytes, 0) < 0) {
        be->rt.free(d);
        return NULL;
    }
    return d;
}

/* The layer's copies on dev (none for the CPU), replacing those it had. 0 / -1 (the layer then on the CPU). */
static int gdl__qlayer_to_dev(gdl__qlayer *q, gdl_device dev) {
    const gdl__qlayer *ws = gdl__qlayer_wsrc(q);
    const gdl_backend *be;
    const int64_t ns = gdl__qlayer_nscale(q);
    gdl__qlayer_drop_dev(q);
    if (dev.type == GDL_DEVICE_CPU) return 0;
    if (!(be = gdl__be("gdl_module_to", dev))) return -1;
    q->dev = dev;
    q->d_qw = be->k.qweight_new((int)q->out, (int)q->in, ws->w, ws->pack.colsum);
    q->d_colsum = (int32_t *)gdl__qlayer_upload(be, ws->pack.colsum, sizeof(int32_t) * (size_t)q->out);
    q->d_scale = (float *)gdl__qlayer_upload(be, ws->w_scale, sizeof(float) * (size_t)ns);
    q->d_bias = q->bias ? (float *)gdl__qlayer_upload(be, q->bias, sizeof(float) * (size_t)q->out) : NULL;
    if (!q->d_qw || !q->d_colsum || !q->d_scale || (q->bias && !q->d_bias)) {
        gdl__qlayer_drop_dev(q);
        return -1;
    }
    return 0;
}

/* checks x for layer m: f32 on the layer's device, [..., in] (Linear) or [N, C, H, W] (Conv2d). 0 / -1. */
static int gdl__qlayer_check(const gdl_module *m, const gdl__qlayer *q, const gdl_tensor *x) {
    char want[128];
    const char *where = q->dev.type == GDL_DEVICE_CPU ? "the CPU" : gdl_device_str(q->dev);
    const int64_t C = q->ia[GDL__CONV_IN];
    const int ok = !q->conv ? x->ndim >= 1 && x->shape[x->ndim - 1] == q->in : x->ndim == 4 && x->shape[1] == C;
    if (x->dtype == GDL_F32 && gdl_device_equal(x->device, q->dev) && ok) return 0;
    if (!q->conv) snprintf(want, sizeof want, "f32 [..., %lld] on %s", (long long)q->in, where);
    else snprintf(want, sizeof want, "f32 [N, %lld, H, W] on %s", (long long)C, where);
    gdl__set_error("gdl_forward: %s (in=%lld, out=%lld, dtype=qint8): expected input %s, got %s %s on %s%s",
                   gdl__nn_label(m), (long long)(q->conv ? C : q->in), (long long)q->out, want,
                   gdl_dtype_name(x->dtype), gdl_shape_str(x), gdl_device_str(x->device),
                   gdl_device_equal(x->device, q->dev) ? "" : " (the layer moves with gdl_module_to)");
    return -1;
}

/* The activations' scale and zero point of this forward: a static layer's own; a dynamic layer's from the
   range of the whole input (PyTorch's). 0 / -1. */
static int gdl__qlayer_act_params(const gdl_module *m, const gdl__qlayer *q, const gdl_backend *be, const gdl_tensor *x,
                                  float *sa, int32_t *za) {
    float mm[3];
    *sa = q->in_scale;
    *za = q->in_zp;
    if (q->mode != GDL__Q_DYNAMIC) return 0;
    if (be->k.qminmax(x->numel, (const gdl_real *)x->data, mm) < 0) return -1;
    if (mm[2] != 0 || isinf(mm[0]) || isinf(mm[1])) {
        gdl__set_error("gdl_forward: %s: the input holds NaN or inf: it cannot be quantized", gdl__nn_label(m));
        return -1;
    }
    return gdl_choose_qparams(mm[0], mm[1], 0, gdl__qlayer_qmax(q), sa, za);
}

/* The forward of every quantized layer (see src/api/quant.h), on the backend of the layer's device: quantize
   (the image, for a convolution then its u8 columns per sample), the int8 GEMM, the epilogue. */
static gdl_tensor *gdl__qlayer_forward(gdl_module *m, gdl_tensor *x) {
    const gdl__qlayer *q = (const gdl__qlayer *)m->user, *ws = gdl__qlayer_wsrc(q);
    const char *op = "gdl_forward";
    const int64_t KP = ws->pack.KP;
    const int cpu = q->dev.type == GDL_DEVICE_CPU;
    const gdl_backend *be;
    gdl_tensor *y, *a, *acc, *cols = NULL;
    gdl_conv_geom g;
    gdl_qepi e;
    int64_t shape[GDL_MAX_DIMS], rows, s, N = 1;
    const void *qw = cpu ? (const void *)&ws->pack : q->d_qw;
    int rc = 0;
    if (gdl__qlayer_check(m, q, x) < 0 || !(be = gdl__be(op, x->device))) return NULL;
    memcpy(shape, x->shape, sizeof shape);
    memset(&g, 0, sizeof g);
    if (q->conv) {
        const int64_t *ia = q->ia;
        const int64_t OH = (x->shape[2] + 2 * ia[GDL__CONV_PH] - ia[GDL__CONV_DH] * (ia[GDL__CONV_KH] - 1) - 1) /
                               ia[GDL__CONV_SH] + 1;
        const int64_t OW = (x->shape[3] + 2 * ia[GDL__CONV_PW] - ia[GDL__CONV_DW] * (ia[GDL__CONV_KW] - 1) - 1) /
                               ia[GDL__CONV_SW] + 1;
        if (OH < 1 || OW < 1) {
            gdl__set_error("gdl_forward: %s: input %s is smaller than the kernel", gdl__nn_label(m), gdl_shape_str(x));
            return NULL;
        }
        if (x->shape[2] > INT32_MAX || x->shape[3] > INT32_MAX) {
            gdl__set_error("gdl_forward: %s: input %s is too large", gdl__nn_label(m), gdl_shape_str(x));
            return NULL;
        }
        N = x->shape[0];
        g.N = 1; g.C = (int)ia[GDL__CONV_IN]; g.H = (int)x->shape[2]; g.W = (int)x->shape[3];
        g.KH = (int)ia[GDL__CONV_KH]; g.KW = (int)ia[GDL__CONV_KW];
        g.SH = (int)ia[GDL__CONV_SH]; g.SW = (int)ia[GDL__CONV_SW];
        g.PH = (int)ia[GDL__CONV_PH]; g.PW = (int)ia[GDL__CONV_PW];
        g.DH = (int)ia[GDL__CONV_DH]; g.DW = (int)ia[GDL__CONV_DW];
        g.OH = (int)OH; g.OW = (int)OW;
        shape[1] = q->out;
        shape[2] = OH;
        shape[3] = OW;
        rows = OH * OW; /* per sample */
    } else {
        shape[x->ndim - 1] = q->out;
        rows = q->in ? x->numel / q->in : 0;
    }
    if (rows > INT32_MAX) {
        gdl__set_error("gdl_forward: %s: %lld rows are more than the int8 GEMM takes", gdl__nn_label(m), (long long)rows);
        return NULL;
    }
    memset(&e, 0, sizeof e);
    if (gdl__qlayer_act_params(m, q, be, x, &e.sa, &e.za) < 0) return NULL;
    e.N = q->out;
    e.pos = q->conv ? rows : 0;
    e.colsum = cpu ? ws->pack.colsum : q->d_colsum;
    e.w_scale = cpu ? ws->w_scale : q->d_scale;
    e.bias = cpu ? q->bias : q->d_bias;
    e.per_channel = q->per_channel;
    e.relu = q->relu;
    e.requant = q->mode == GDL__Q_STATIC;
    e.out_scale = q->out_scale;
    e.out_zp = q->out_zp;
    e.qmax = gdl__qlayer_qmax(q);
    { /* the quantized input (the image, or the GEMM's rows), the sums, a sample's columns */
        const int64_t na = q->conv ? x->numel : rows * KP, nacc = rows * q->out, ncol = rows * KP;
        if (!(y = gdl__tmp(op, x->ndim, shape, GDL_F32, x->device)) || !(a = gdl__tmp(op, 1, &na, GDL_U8, x->device)) ||
            !(acc = gdl__tmp(op, 1, &nacc, GDL_I32, x->device)) ||
            (q->conv && !(cols = gdl__tmp(op, 1, &ncol, GDL_U8, x->device))))
            return NULL;
    }
    if (!q->conv) {
        rc = be->k.quantize(rows, q->in, (const gdl_real *)x->data, e.sa, e.za, 0, e.qmax, a->data, KP);
        if (rc == 0) rc = be->k.qgemm((int)rows, (const uint8_t *)a->data, (int)KP, qw, (int32_t *)acc->data, (int)q->out);
        if (rc == 0) rc = be->k.qepilogue(&e, rows, (const int32_t *)acc->data, (gdl_real *)y->data);
    } else {
        const int64_t chw = x->numel / (N ? N : 1);
        rc = be->k.quantize(1, x->numel, (const gdl_real *)x->data, e.sa, e.za, 0, e.qmax, a->data, x->numel);
        for (s = 0; s < N && rc == 0; s++) {
            rc = be->k.qim2col(&g, (const uint8_t *)a->data + s * chw, e.za, (uint8_t *)cols->data, KP);
            if (rc == 0)
                rc = be->k.qgemm((int)rows, (const uint8_t *)cols->data, (int)KP, qw, (int32_t *)acc->data, (int)q->out);
            if (rc == 0)
                rc = be->k.qepilogue(&e, rows, (const int32_t *)acc->data, (gdl_real *)y->data + s * q->out * rows);
        }
    }
    return rc == 0 ? y : NULL;
}

/* ---- fake quantization (QAT) ----
   y = (clamp(round(x / s) + z, qmin, qmax) - z) * s, with the clipped
   straight-through estimator as its gradient: dy/dx = 1 where round(x / s) + z
   is within [qmin, qmax], else 0 (PyTorch's fake_quantize_per_*_affine). It is
   made of two differentiable ops on constants: y = x * mask + (fq - x * mask),
   mask the 0/1 tensor above, so autograd needs nothing new. The sum gives fq
   exactly: where mask is 1, x and fq differ by at most s/2 and either fq is 0
   or they are within a factor 2 of each other, so fq - x is exact (Sterbenz)
   and so is x + (fq - x). rows > 0: per channel, x [rows, ...] with scale[r]
   and zp[r]; rows 0: one scale. On a GPU, mask and the constant are computed from a host copy of x and
   copied back (two copies each way: QAT on a GPU is correct, and equal to the CPU's, but not fast). */
static gdl_tensor *gdl__fake_quant(const char *op, gdl_tensor *x, int rows, const float *scale, const int32_t *zp,
                                   int qmin, int qmax) {
    const int host = x->device.type == GDL_DEVICE_CPU;
    const int64_t per = rows > 0 ? x->numel / rows : x->numel;
    const size_t bytes = sizeof(gdl_real) * (size_t)x->numel;
    gdl_tensor *mask, *c;
    gdl_real *md, *cd, *tmp = NULL;
    const gdl_real *xd;
    float big;
    int64_t i;
    if (x->dtype != GDL_F32) {
        gdl__set_error("%s: fake quantization takes f32 tensors, got %s %s on %s", op, gdl_dtype_name(x->dtype),
                       gdl_shape_str(x), gdl_device_str(x->device));
        return NULL;
    }
    if (!(mask = gdl__tmp(op, x->ndim, x->shape, GDL_F32, x->device)) ||
        !(c = gdl__tmp(op, x->ndim, x->shape, GDL_F32, x->device)) || !(xd = gdl__q_host(op, x, &tmp)))
        return NULL;
    md = host ? (gdl_real *)mask->data : (gdl_real *)GPUDL_MALLOC(2 * bytes + 1);
    if (!md) {
        gdl__set_error("%s: out of memory (host)", op);
        GPUDL_FREE(tmp);
        return NULL;
    }
    cd = host ? (gdl_real *)c->data : md + x->numel;
    big = gdl__q_big();
    for (i = 0; i < x->numel; i++) {
        const int64_t r = rows > 0 ? i / per : 0;
        const float s = scale[r], inv = 1.0f / s, z = (float)zp[r];
        const float q = gdl__q_round((float)xd[i] * inv, big) + z, qc = q < qmin ? (float)qmin : q > qmax ? (float)qmax : q;
        const gdl_real fq = (gdl_real)((qc - z) * s);
        md[i] = q >= qmin && q <= qmax ? 1 : 0;
        cd[i] = fq - xd[i] * md[i];
    }
    GPUDL_FREE(tmp);
    if (!host) {
        const int rc = gdl__copy_bytes(op, mask->data, x->device, md, gdl_cpu(), bytes) < 0 ||
                               gdl__copy_bytes(op, c->data, x->device, cd, gdl_cpu(), bytes) < 0
                           ? -1 : 0;
        GPUDL_FREE(md);
        if (rc < 0) return NULL;
    }
    return gdl_add(gdl_mul(x, mask), c);
}

GPUDL_API gdl_tensor *gdl_fake_quantize(gdl_tensor *x, float scale, int32_t zero_point, int qmin, int qmax) {
    const char *op = "gdl_fake_quantize";
    if (!x) {
        gdl__null_arg(op, "x");
        return NULL;
    }
    if (!(scale > 0) || isinf(scale) || qmin >= qmax || zero_point < qmin || zero_point > qmax) {
        gdl__set_error("%s: bad scale %g, zero point %d or range [%d, %d]", op, (double)scale, (int)zero_point, qmin,
                       qmax);
        return NULL;
    }
    return gdl__fake_quant(op, x, 0, &scale, &zero_point, qmin, qmax);
}
