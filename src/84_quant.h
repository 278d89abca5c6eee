/* ---------------------------------------------------------------------------
   [impl-quant]  Quantized modules ([api-quant]): dynamic quantization of
   Linear, LSTM and GRU, static post-training quantization of Linear and
   Conv2d (observers, prepare / calibrate / convert), QAT, model copies (weight
   tying kept), sizes, safetensors files. The layers run on the backend
   entries of their device (quantize, qgemm, qepilogue...); weights are
   quantized, and files read and written, in host memory.
   ------------------------------------------------------------------------- */

/* ---- tensors: quantize_per_tensor (quint8) and dequantize, on any device ---- */

static int gdl__q_tensor_args(const char *op, const gdl_tensor *x, gdl_dtype want, float scale, int32_t zp) {
    if (!x) {
        gdl__null_arg(op, "x");
        return -1;
    }
    if (x->dtype != want) {
        gdl__set_error("%s: expected a %s tensor, got %s %s on %s", op, gdl_dtype_name(want),
                       gdl_dtype_name(x->dtype), gdl_shape_str(x), gdl_device_str(x->device));
        return -1;
    }
    if (!(scale > 0) || isinf(scale) || zp < 0 || zp > 255) {
        gdl__set_error("%s: bad scale %g or zero point %d (quint8: in [0, 255])", op, (double)scale, (int)zp);
        return -1;
    }
    return 0;
}

GPUDL_API gdl_tensor *gdl_quantize_per_tensor(gdl_tensor *x, float scale, int32_t zero_point) {
    const char *op = "gdl_quantize_per_tensor";
    const gdl_backend *be;
    gdl_tensor *q;
    if (gdl__q_tensor_args(op, x, GDL_F32, scale, zero_point) < 0 || !(be = gdl__be(op, x->device)) ||
        !(q = gdl__tmp(op, x->ndim, x->shape, GDL_U8, x->device)))
        return NULL;
    return be->quantize(1, x->numel, (const gdl_real *)x->data, scale, zero_point, 0, 255, q->data, x->numel) < 0
               ? NULL : q;
}

GPUDL_API gdl_tensor *gdl_dequantize(gdl_tensor *q, float scale, int32_t zero_point) {
    const char *op = "gdl_dequantize";
    const gdl_backend *be;
    gdl_tensor *y;
    if (gdl__q_tensor_args(op, q, GDL_U8, scale, zero_point) < 0 || !(be = gdl__be(op, q->device)) ||
        !(y = gdl__tmp(op, q->ndim, q->shape, GDL_F32, q->device)))
        return NULL;
    return be->dequantize(q->numel, q->data, 0, scale, zero_point, (gdl_real *)y->data) < 0 ? NULL : y;
}

GPUDL_API gdl_qconfig gdl_qconfig_default(void) {
    gdl_qconfig q;
    memset(&q, 0, sizeof q);
    q.per_channel = 1;
    q.reduce_range = 1;
    q.observer = GDL_QOBS_MINMAX;
    q.averaging_constant = 0.01;
    q.percentile = 0.9999;
    return q;
}

GPUDL_API int gdl_choose_qparams(float min, float max, int qmin, int qmax, float *scale, int32_t *zero_point) {
    double s, zmin, zmax, emin, emax, z;
    if (!scale || !zero_point) {
        gdl__null_arg("gdl_choose_qparams", !scale ? "scale" : "zero_point");
        return -1;
    }
    if (qmin >= qmax || min != min || max != max || min > max) {
        gdl__set_error("gdl_choose_qparams: bad range [%g, %g] or integer range [%d, %d]", (double)min, (double)max,
                       qmin, qmax);
        return -1;
    }
    /* fbgemm's ChooseQuantizationParams (preserve_sparsity off), in its order of operations */
    if (min > 0) min = 0;
    if (max < 0) max = 0;
    s = ((double)max - min) / ((double)qmax - qmin);
    if ((float)s == 0.0f || isinf(1.0f / (float)s)) s = 0.1;
    if (s < 6.1e-5) { /* fbgemm's SMALL_SCALE_THRESHOLD: widen the range instead */
        const float org = (float)s, th = 6.1e-5f;
        s = th;
        if (min == 0.0f) max = th * (float)(qmax - qmin);
        else if (max == 0.0f) min = -th * (float)(qmax - qmin);
        else {
            min *= th / org;
            max *= th / org;
        }
    }
    s = (float)s; /* the scale used is the float one */
    zmin = qmin - min / s;
    zmax = qmax - max / s;
    emin = fabs((double)qmin) - fabs(min / s);
    emax = fabs((double)qmax) - fabs(max / s);
    z = emin < emax ? zmin : zmax;
    *scale = (float)s;
    *zero_point = z < qmin ? qmin : z > qmax ? qmax : (int32_t)nearbyint(z);
    return 0;
}

/* PyTorch's observers' affine parameters (UniformQuantizationObserverBase._calculate_qparams, per tensor,
   in float32): the range widened to hold 0, scale (max - min) / (qmax - qmin) at least FLT_EPSILON, zero point
   qmin - round_half_even(min / scale), clamped. */
static void gdl__qparams_affine(float lo, float hi, int qmin, int qmax, float *s, int32_t *z) {
    const float mn = lo < 0 ? lo : 0, mx = hi > 0 ? hi : 0;
    float sc = (mx - mn) / (float)(qmax - qmin), r;
    if (sc < FLT_EPSILON) sc = FLT_EPSILON;
    r = (float)qmin - gdl__q_round(mn / sc, gdl__q_big());
    *s = sc;
    *z = r < (float)qmin ? qmin : r > (float)qmax ? qmax : (int32_t)r;
}

/* t's values (f32) in host memory: t->data on the CPU, else a copy in *tmp, which the caller frees. NULL +
   error. (The observers' histograms, fake quantization, folding and the files work on host values; a model on a
   GPU has them copied.) */
static const gdl_real *gdl__q_host(const char *op, const gdl_tensor *t, gdl_real **tmp) {
    const size_t bytes = sizeof(gdl_real) * (size_t)t->numel;
    *tmp = NULL;
    if (t->device.type == GDL_DEVICE_CPU) return (const gdl_real *)t->data;
    if (gdl__no_capture(op, t->device) < 0) return NULL; /* a captured step cannot read the device */
    if (!(*tmp = (gdl_real *)GPUDL_MALLOC(bytes + 1))) {
        gdl__set_error("%s: out of memory (host)", op);
        return NULL;
    }
    if (gdl__copy_bytes(op, *tmp, gdl_cpu(), t->data, t->device, bytes) < 0) {
        GPUDL_FREE(*tmp);
        *tmp = NULL;
        return NULL;
    }
    return *tmp;
}

/* ---- observers (activations, per tensor) ---- */

#define GDL__QHIST_BINS 2048

typedef struct gdl__qobs {
    int kind;            /* GDL_QOBS_* */
    double c, pct;       /* moving average's constant; the histogram's percentile */
    int64_t batches;     /* batches seen */
    float lo, hi;        /* min-max, or their moving averages; the histogram's range */
    double *hist;        /* GDL__QHIST_BINS counts over [lo, hi] */
} gdl__qobs;

/* Re-bins the histogram's counts onto [lo, hi] (a range that holds the old one): each old bin's count goes
   to the new bin holding its centre. */
static void gdl__qobs_rebin(gdl__qobs *o, float lo, float hi) {
    double tmp[GDL__QHIST_BINS];
    const double w = ((double)o->hi - o->lo) / GDL__QHIST_BINS, nw = ((double)hi - lo) / GDL__QHIST_BINS;
    int i;
    memcpy(tmp, o->hist, sizeof tmp);
    memset(o->hist, 0, sizeof tmp);
    for (i = 0; i < GDL__QHIST_BINS; i++)
        if (tmp[i] != 0) {
            int b = nw > 0 ? (int)((o->lo + (i + 0.5) * w - lo) / nw) : 0;
            o->hist[b < 0 ? 0 : b >= GDL__QHIST_BINS ? GDL__QHIST_BINS - 1 : b] += tmp[i];
        }
    o->lo = lo;
    o->hi = hi;
}

/* One batch: the values of f32 tensor t, on any device (its min and max from the backend's qminmax, exact
   there as here). 0 / -1 (NaN or inf: no range can be taken from them). */
static int gdl__qobs_add(const char *what, gdl__qobs *o, const gdl_tensor *t) {
    const gdl_backend *be;
    float mm[3], bl, bh;
    if (t->numel <= 0) return 0;
    if (gdl__no_capture("gdl_forward", t->device) < 0 || !(be = gdl__be("gdl_forward", t->device)) ||
        be->qminmax(t->numel, (const gdl_real *)t->data, mm) < 0)
        return -1;
    bl = mm[0];
    bh = mm[1];
    if (mm[2] != 0 || isinf(bl) || isinf(bh)) {
        gdl__set_error("gdl_forward: %s: the observed tensor holds NaN or inf", what);
        return -1;
    }
    if (o->kind == GDL_QOBS_MOVING_AVERAGE && o->batches > 0) {
        o->lo = (float)(o->lo + o->c * ((double)bl - o->lo));
        o->hi = (float)(o->hi + o->c * ((double)bh - o->hi));
    } else if (o->kind != GDL_QOBS_HISTOGRAM) {
        if (o->batches == 0 || bl < o->lo) o->lo = bl;
        if (o->batches == 0 || bh > o->hi) o->hi = bh;
    } else {
        gdl_real *tmp;
        const gdl_real *x;
        double w;
        int64_t i;
        if (!o->hist && !(o->hist = (double *)GPUDL_MALLOC(sizeof(double) * GDL__QHIST_BINS))) {
            gdl__set_error("gdl_forward: %s: out of memory", what);
            return -1;
        }
        if (!(x = gdl__q_host("gdl_forward", t, &tmp))) return -1;
        if (o->batches == 0) {
            memset(o->hist, 0, sizeof(double) * GDL__QHIST_BINS);
            o->lo = bl;
            o->hi = bh > bl ? bh : bl + (fabsf(bl) > 1 ? fabsf(bl) * 1e-6f : 1e-6f);
        } else if (bl < o->lo || bh > o->hi) {
            gdl__qobs_rebin(o, bl < o->lo ? bl : o->lo, bh > o->hi ? bh : o->hi);
        }
        w = ((double)o->hi - o->lo) / GDL__QHIST_BINS;
        for (i = 0; i < t->numel; i++) {
            int b = (int)(((double)x[i] - o->lo) / w);
            o->hist[b < 0 ? 0 : b >= GDL__QHIST_BINS ? GDL__QHIST_BINS - 1 : b] += 1;
        }
        GPUDL_FREE(tmp);
    }
    o->batches++;
    return 0;
}

/* The observer's range: min-max, the moving averages, or the histogram's percentiles (pct and 1 - pct). */
static void gdl__qobs_range(const gdl__qobs *o, float *lo, float *hi) {
    double total = 0, acc = 0, w;
    int i, first = -1, last = -1;
    *lo = o->lo;
    *hi = o->hi;
    if (o->kind != GDL_QOBS_HISTOGRAM || !o->hist) return;
    for (i = 0; i < GDL__QHIST_BINS; i++) total += o->hist[i];
    w = ((double)o->hi - o->lo) / GDL__QHIST_BINS;
    for (i = 0; i < GDL__QHIST_BINS; i++) {
        acc += o->hist[i];
        if (first < 0 && acc > (1 - o->pct) * total) first = i;
        if (last < 0 && acc >= o->pct * total) last = i;
    }
    if (first > 0) *lo = (float)(o->lo + first * w); /* bin 0 keeps the exact minimum */
    if (last >= 0 && last < GDL__QHIST_BINS - 1) *hi = (float)(o->lo + (last + 1) * w);
}

/* ---- quantized layers: DynamicQuantizedLinear, QuantizedLinear(ReLU), QuantizedConv(ReLU)2d ---- */

enum { GDL__Q_DYNAMIC, GDL__Q_STATIC };

typedef struct gdl__qlayer {
    int mode, conv, relu;  /* GDL__Q_*; a Conv2d; ReLU fused */
    int64_t in, out;       /* the GEMM's K (in_features, or in_channels*kh*kw) and N */
    int64_t ia[12];        /* the float module's configuration (Conv2d: geometry) */
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
    if (conv && ia[10] != 1) {
        gdl__set_error("%s: %s has groups=%lld: quantized convolutions take groups=1 only", op, who, (long long)ia[10]);
        return NULL;
    }
    if (!(q = (gdl__qlayer *)GPUDL_MALLOC(sizeof *q))) {
        gdl__set_error("%s: out of memory", op);
        return NULL;
    }
    memset(q, 0, sizeof *q);
    q->mode = mode;
    q->conv = conv;
    q->relu = relu;
    memcpy(q->ia, ia, sizeof q->ia);
    q->in = conv ? ia[0] * ia[2] * ia[3] : ia[0];
    q->out = ia[1];
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
        if (q->d_qw) be->qweight_free(q->d_qw);
        be->free(q->d_colsum);
        be->free(q->d_scale);
        be->free(q->d_bias);
    }
    q->d_qw = NULL;
    q->d_colsum = NULL;
    q->d_scale = q->d_bias = NULL;
    q->dev = gdl_cpu();
}

/* a host array copied to the device of be; NULL + error */
static void *gdl__qlayer_upload(const gdl_backend *be, const void *src, size_t bytes) {
    void *d = be->alloc(bytes ? bytes : 1);
    if (d && bytes && be->copy(d, src, bytes, 0) < 0) {
        be->free(d);
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
    q->d_qw = be->qweight_new((int)q->out, (int)q->in, ws->w, ws->pack.colsum);
    q->d_colsum = (int32_t *)gdl__qlayer_upload(be, ws->pack.colsum, sizeof(int32_t) * (size_t)q->out);
    q->d_scale = (float *)gdl__qlayer_upload(be, ws->w_scale, sizeof(float) * (size_t)ns);
    q->d_bias = q->bias ? (float *)gdl__qlayer_upload(be, q->bias, sizeof(float) * (size_t)q->out) : NULL;
    if (!q->d_qw || !q->d_colsum || !q->d_scale || (q->bias && !q->d_bias)) {
        gdl__qlayer_drop_dev(q);
        return -1;
    }
    return 0;
}

/* gdl_module_to's step for a quantized layer (nothing when m is not one) */
static int gdl__qlayer_to(gdl_module *m, gdl_device dev) {
    gdl__qlayer *q;
    if (!gdl__is_qlayer(m)) return 0;
    q = (gdl__qlayer *)m->user;
    if (gdl_device_equal(q->dev, dev)) return 0;
    return gdl__qlayer_to_dev(q, dev);
}

/* gdl_module_device's answer for a model with no float tensor: its first quantized layer's device */
static int gdl__qlayer_first_device(const gdl_module *m, gdl_device *d) {
    int i;
    if (gdl__is_qlayer(m)) {
        *d = ((const gdl__qlayer *)m->user)->dev;
        return 1;
    }
    for (i = 0; i < m->nchild; i++)
        if (gdl__qlayer_first_device(m->child[i], d)) return 1;
    return 0;
}

/* checks x for layer m: f32 on the layer's device, [..., in] (Linear) or [N, C, H, W] (Conv2d). 0 / -1. */
static int gdl__qlayer_check(const gdl_module *m, const gdl__qlayer *q, const gdl_tensor *x) {
    char want[128];
    const char *where = q->dev.type == GDL_DEVICE_CPU ? "the CPU" : gdl_device_str(q->dev);
    const int ok = !q->conv ? x->ndim >= 1 && x->shape[x->ndim - 1] == q->in : x->ndim == 4 && x->shape[1] == q->ia[0];
    if (x->dtype == GDL_F32 && gdl_device_equal(x->device, q->dev) && ok) return 0;
    if (!q->conv) snprintf(want, sizeof want, "f32 [..., %lld] on %s", (long long)q->in, where);
    else snprintf(want, sizeof want, "f32 [N, %lld, H, W] on %s", (long long)q->ia[0], where);
    gdl__set_error("gdl_forward: %s (in=%lld, out=%lld, dtype=qint8): expected input %s, got %s %s on %s%s",
                   gdl__nn_label(m), (long long)(q->conv ? q->ia[0] : q->in), (long long)q->out, want,
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
    if (be->qminmax(x->numel, (const gdl_real *)x->data, mm) < 0) return -1;
    if (mm[2] != 0 || isinf(mm[0]) || isinf(mm[1])) {
        gdl__set_error("gdl_forward: %s: the input holds NaN or inf: it cannot be quantized", gdl__nn_label(m));
        return -1;
    }
    return gdl_choose_qparams(mm[0], mm[1], 0, gdl__qlayer_qmax(q), sa, za);
}

/* The forward of every quantized layer (see [api-quant]), on the backend of the layer's device: quantize
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
        const int64_t OH = (x->shape[2] + 2 * ia[6] - ia[8] * (ia[2] - 1) - 1) / ia[4] + 1;
        const int64_t OW = (x->shape[3] + 2 * ia[7] - ia[9] * (ia[3] - 1) - 1) / ia[5] + 1;
        if (OH < 1 || OW < 1) {
            gdl__set_error("gdl_forward: %s: input %s is smaller than the kernel", gdl__nn_label(m), gdl_shape_str(x));
            return NULL;
        }
        if (x->shape[2] > INT32_MAX || x->shape[3] > INT32_MAX) {
            gdl__set_error("gdl_forward: %s: input %s is too large", gdl__nn_label(m), gdl_shape_str(x));
            return NULL;
        }
        N = x->shape[0];
        g.N = 1; g.C = (int)ia[0]; g.H = (int)x->shape[2]; g.W = (int)x->shape[3]; g.KH = (int)ia[2]; g.KW = (int)ia[3];
        g.SH = (int)ia[4]; g.SW = (int)ia[5]; g.PH = (int)ia[6]; g.PW = (int)ia[7]; g.DH = (int)ia[8]; g.DW = (int)ia[9];
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
        rc = be->quantize(rows, q->in, (const gdl_real *)x->data, e.sa, e.za, 0, e.qmax, a->data, KP);
        if (rc == 0) rc = be->qgemm((int)rows, (const uint8_t *)a->data, (int)KP, qw, (int32_t *)acc->data, (int)q->out);
        if (rc == 0) rc = be->qepilogue(&e, rows, (const int32_t *)acc->data, (gdl_real *)y->data);
    } else {
        const int64_t chw = x->numel / (N ? N : 1);
        rc = be->quantize(1, x->numel, (const gdl_real *)x->data, e.sa, e.za, 0, e.qmax, a->data, x->numel);
        for (s = 0; s < N && rc == 0; s++) {
            rc = be->qim2col(&g, (const uint8_t *)a->data + s * chw, e.za, (uint8_t *)cols->data, KP);
            if (rc == 0)
                rc = be->qgemm((int)rows, (const uint8_t *)cols->data, (int)KP, qw, (int32_t *)acc->data, (int)q->out);
            if (rc == 0)
                rc = be->qepilogue(&e, rows, (const int32_t *)acc->data, (gdl_real *)y->data + s * q->out * rows);
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

/* ---- observed layers (prepare): the float layer, its input and output watched ---- */

typedef struct gdl__qprep {
    int conv, relu;
    int qat, frozen;   /* quantization-aware training: fake-quantized; observers no longer updated */
    gdl_qconfig qc;
    gdl__qobs in, out;
} gdl__qprep;

/* the activations' fake quantization with what obs has seen (nothing seen yet: x as it is) */
static gdl_tensor *gdl__qprep_fq(const gdl__qprep *o, const gdl__qobs *obs, gdl_tensor *x) {
    float lo, hi, s;
    int32_t z;
    if (!x || obs->batches == 0) return x;
    gdl__qobs_range(obs, &lo, &hi);
    gdl__qparams_affine(lo, hi, 0, o->qc.reduce_range ? 127 : 255, &s, &z);
    return gdl__fake_quant("gdl_forward", x, 0, &s, &z, 0, o->qc.reduce_range ? 127 : 255);
}

/* the weight's fake quantization, symmetric per output channel (or per tensor), from its current values */
static gdl_tensor *gdl__qprep_fq_weight(const gdl__qprep *o, gdl_tensor *w) {
    const int64_t rows = w->shape[0], per = w->numel / rows;
    const int groups = o->qc.per_channel ? (int)rows : 1;
    float *s = (float *)GPUDL_MALLOC(sizeof(float) * (size_t)groups);
    int32_t *z = (int32_t *)GPUDL_MALLOC(sizeof(int32_t) * (size_t)groups);
    gdl_tensor *r = NULL;
    gdl_real *tmp = NULL;
    const gdl_real *wh = s && z ? gdl__q_host("gdl_forward", w, &tmp) : NULL;
    int64_t g, i;
    if (wh) {
        for (g = 0; g < groups; g++) {
            const int64_t n = o->qc.per_channel ? per : w->numel;
            const gdl_real *d = wh + g * per;
            float amax = 0;
            for (i = 0; i < n; i++) amax = fabsf((float)d[i]) > amax ? fabsf((float)d[i]) : amax;
            s[g] = amax / 127.5f < FLT_EPSILON ? FLT_EPSILON : amax / 127.5f;
            z[g] = 0;
        }
        r = gdl__fake_quant("gdl_forward", w, o->qc.per_channel ? (int)rows : 0, s, z, -128, 127);
    } else if (!s || !z) {
        gdl__set_error("gdl_forward: out of memory");
    }
    GPUDL_FREE(tmp);
    GPUDL_FREE(s);
    GPUDL_FREE(z);
    return r;
}

static void gdl__qprep_free(void *p) {
    gdl__qprep *o = (gdl__qprep *)p;
    if (!o) return;
    GPUDL_FREE(o->in.hist);
    GPUDL_FREE(o->out.hist);
    GPUDL_FREE(o);
}

static gdl_tensor *gdl__qprep_forward(gdl_module *m, gdl_tensor *x) {
    gdl__qprep *o = (gdl__qprep *)m->user;
    /* gdl_module_summary's pass (on zeros) is not data: it is not observed */
    const int observe = gdl__nn_nrows == 0;
    gdl_tensor *y, *w = gdl__nn_param(m, 0);
    int s[2], p[2], d[2];
    if (gdl__nn_check_xw(m, x, o->conv, s, p, d) < 0) return NULL;
    if ((observe || o->qat) && x->dtype != GDL_F32) {
        gdl__set_error("gdl_forward: %s: observers watch f32 tensors, got %s %s on %s", gdl__nn_label(m),
                       gdl_dtype_name(x->dtype), gdl_shape_str(x), gdl_device_str(x->device));
        return NULL;
    }
    if (observe && !o->frozen && gdl__qobs_add(gdl__nn_label(m), &o->in, x) < 0) return NULL;
    if (o->qat) { /* the input and the weight as the quantized layer will see them */
        if (!(x = gdl__qprep_fq(o, &o->in, x)) || !(w = gdl__qprep_fq_weight(o, w))) return NULL;
    }
    y = o->conv ? gdl_conv2d_ex(x, w, gdl__nn_param(m, 1), s, p, d, (int)m->ia[10]) : gdl_linear(x, w, gdl__nn_param(m, 1));
    if (y && o->relu) y = gdl_relu(y);
    if (y && observe && !o->frozen && gdl__qobs_add(gdl__nn_label(m), &o->out, y) < 0) return NULL;
    return o->qat ? gdl__qprep_fq(o, &o->out, y) : y;
}

static int gdl__is_qprep(const gdl_module *m) { return m && m->kind == GDL__M_CUSTOM && m->fwd == gdl__qprep_forward; }

/* Folds BatchNorm2d bn (eval: running statistics) into the Conv2d weight and bias of m, as
   torch.nn.utils.fuse_conv_bn_eval: w' = w * g / sqrt(var + eps) per output channel, b' = (b - mean) * g /
   sqrt(var + eps) + beta (a missing bias taken as 0 and added). 0 / -1. */
static int gdl__qprep_fold_bn(const char *op, gdl_module *m, const gdl_module *bn) {
    const int64_t C = m->ia[1];
    const gdl_tensor *st[4]; /* running mean and variance, weight and bias (NULL when not affine) */
    gdl_real *tmp[4] = {NULL, NULL, NULL, NULL};
    const gdl_real *h[4] = {NULL, NULL, NULL, NULL};
    gdl_tensor *w = gdl__nn_param(m, 0), *b = gdl__nn_param(m, 1);
    const gdl_device dev = w->device;
    int64_t c, i, per;
    int k, rc = 0;
    st[0] = gdl__nn_buffer(bn, 0);
    st[1] = gdl__nn_buffer(bn, 1);
    st[2] = bn->ia[2] ? gdl__nn_param(bn, 0) : NULL;
    st[3] = bn->ia[2] ? gdl__nn_param(bn, 1) : NULL;
    if (!bn->ia[3] || bn->ia[0] != C) {
        gdl__set_error("%s: %s cannot be folded into the convolution before it: %s", op, gdl__nn_label(bn),
                       !bn->ia[3] ? "it keeps no running statistics" : "its channels differ");
        return -1;
    }
    if (st[0]->dtype != GDL_F32 || w->dtype != GDL_F32 || (st[2] && st[2]->dtype != GDL_F32)) {
        gdl__set_error("%s: %s: folding takes f32 tensors, got a %s weight and %s statistics", op, gdl__nn_label(bn),
                       gdl_dtype_name(w->dtype), gdl_dtype_name(st[0]->dtype));
        return -1;
    }
    for (k = 0; k < 4 && rc == 0; k++)
        if (st[k] && !(h[k] = gdl__q_host(op, st[k], &tmp[k]))) rc = -1;
    /* the copy's weight and bias folded in host memory (moved there and back: they are the copy's own) */
    if (rc == 0 && !b && gdl__nn_add_tensor(op, m, "bias", gdl_zeros(1, &C, GDL_F32, gdl_cpu()), 0) < 0) rc = -1;
    b = gdl__nn_param(m, 1);
    if (rc == 0 && (gdl_move_(w, gdl_cpu()) < 0 || gdl_move_(b, gdl_cpu()) < 0)) rc = -1;
    per = w->numel / C;
    for (c = 0; c < C && rc == 0; c++) {
        const double kc = (h[2] ? (double)h[2][c] : 1.0) / sqrt((double)h[1][c] + bn->fa[0]);
        gdl_real *wc = (gdl_real *)w->data + c * per, *bc = (gdl_real *)b->data + c;
        for (i = 0; i < per; i++) wc[i] = (gdl_real)(wc[i] * kc);
        *bc = (gdl_real)((*bc - h[0][c]) * kc + (h[3] ? h[3][c] : 0));
    }
    if (rc == 0 && (gdl_move_(w, dev) < 0 || gdl_move_(b, dev) < 0)) rc = -1;
    for (k = 0; k < 4; k++) GPUDL_FREE(tmp[k]);
    return rc;
}

/* An observed copy of Linear / Conv2d lin (ReLU fused when relu; a BatchNorm2d bn after a Conv2d folded into
   it with its running statistics; quantization-aware when qat). */
static gdl_module *gdl__qprep_new(const char *op, const gdl_module *lin, const gdl_module *bn, int relu, int qat,
                                  const gdl_qconfig *qc) {
    const int conv = lin->kind == GDL__M_CONV2D;
    gdl__qprep *o = (gdl__qprep *)GPUDL_MALLOC(sizeof(gdl__qprep));
    gdl_module *m;
    int i;
    if (!o) {
        gdl__set_error("%s: out of memory", op);
        return NULL;
    }
    memset(o, 0, sizeof *o);
    o->conv = conv;
    o->relu = relu;
    o->qat = qat;
    o->qc = *qc;
    o->in.kind = o->out.kind = qc->observer;
    o->in.c = o->out.c = qc->averaging_constant;
    o->in.pct = o->out.pct = qc->percentile;
    if (!(m = gdl_nn_custom(conv ? (relu ? (qat ? "QATConvReLU2d" : "ObservedConvReLU2d") : (qat ? "QATConv2d" : "ObservedConv2d"))
                                 : (relu ? (qat ? "QATLinearReLU" : "ObservedLinearReLU") : (qat ? "QATLinear" : "ObservedLinear")),
                            gdl__qprep_forward, o, gdl__qprep_free)))
        return NULL;
    memcpy(m->ia, lin->ia, sizeof m->ia);
    for (i = 0; i < lin->nparam; i++)
        if (gdl__nn_add_tensor(op, m, lin->param[i].name, gdl_clone(lin->param[i].t), 0) < 0) {
            gdl__nn_free_tree(m);
            return NULL;
        }
    if (bn && gdl__qprep_fold_bn(op, m, bn) < 0) {
        gdl__nn_free_tree(m);
        return NULL;
    }
    return m;
}

/* The static quantized layer of an observed one: NULL + error when it has not been calibrated. */
static gdl_module *gdl__qprep_convert(const char *op, const gdl_module *m) {
    const gdl__qprep *o = (const gdl__qprep *)m->user;
    const int qmax = o->qc.reduce_range ? 127 : 255;
    float s[2], lo, hi;
    int32_t z[2];
    if (o->in.batches == 0 || o->out.batches == 0) {
        gdl__set_error("%s: %s has observed no data: calibrate the prepared model (gdl_quant_calibrate, or "
                       "forward passes) before converting it", op, gdl__nn_label(m));
        return NULL;
    }
    gdl__qobs_range(&o->in, &lo, &hi);
    gdl__qparams_affine(lo, hi, 0, qmax, &s[0], &z[0]);
    gdl__qobs_range(&o->out, &lo, &hi);
    gdl__qparams_affine(lo, hi, 0, qmax, &s[1], &z[1]);
    return gdl__qlayer_new(op, gdl__nn_label(m), GDL__Q_STATIC, o->conv, o->relu, m->ia, gdl__nn_param(m, 0),
                           gdl__nn_param(m, 1), &o->qc, s, z);
}

/* ---- model copies ---- */

enum { GDL__QC_DYNAMIC, GDL__QC_PREPARE, GDL__QC_PREPARE_QAT, GDL__QC_CONVERT };

/* In a Sequential, how many modules from child i on become one observed layer: Conv2d + BatchNorm2d +
   ReLU (3), Conv2d + BatchNorm2d or Linear / Conv2d + ReLU (2), Linear / Conv2d (1); 0: not a layer. */
static int gdl__quant_fusable(const gdl_module *seq, int i, const gdl_module **bn, int *relu) {
    const gdl_module *a = seq->child[i], *b = i + 1 < seq->nchild ? seq->child[i + 1] : NULL;
    const gdl_module *c = i + 2 < seq->nchild ? seq->child[i + 2] : NULL;
    *bn = NULL;
    *relu = 0;
    if (a->kind != GDL__M_LINEAR && a->kind != GDL__M_CONV2D) return 0;
    if (seq->kind != GDL__M_SEQUENTIAL || !b) return 1;
    if (a->kind == GDL__M_CONV2D && b->kind == GDL__M_BATCHNORM && b->ia[1] == 2) {
        *bn = b;
        *relu = c && c->kind == GDL__M_RELU;
        return 2 + *relu;
    }
    *relu = b->kind == GDL__M_RELU;
    return 1 + *relu;
}

/* ---- weight tying in copies ----
   A copy clones each parameter on its own, so a parameter tied to another (gdl_module_tie) would come out as
   two tensors, saved twice. The copy records where each parameter went (a clone in a module, or the
   quantized layer made from it) and then makes the entries that came from one tensor one again: float
   entries are tied to one clone (its owner the clone of the source's owner); a quantized layer made from a
   tensor that a float module also keeps is marked as derived from that float parameter (wfloat: the file
   holds the float values once and loading quantizes them again); quantized layers made from one tensor and
   no float module share the first's int8 weight (wown: quantized and stored once). */

typedef struct gdl__qtie {
    const gdl_tensor *from; /* the source's tensor */
    gdl_module *m;          /* the copy's module holding its clone as parameter idx, or NULL and ... */
    int idx;
    gdl__qlayer *q;         /* ... the quantized layer made from it */
    int tied;               /* the source entry was a tied one (not the owner) */
} gdl__qtie;

typedef struct gdl__qties {
    int n, cap;
    gdl__qtie *r;
} gdl__qties;

static int gdl__qties_add(const char *op, gdl__qties *T, const gdl_tensor *from, gdl_module *m, int idx, gdl__qlayer *q,
                          int tied) {
    gdl__qtie *v = (gdl__qtie *)gdl__nn_reserve(T->r, &T->cap, T->n, sizeof(gdl__qtie));
    if (!v) {
        gdl__set_error("%s: out of memory", op);
        return -1;
    }
    T->r = v;
    v = &T->r[T->n++];
    v->from = from;
    v->m = m;
    v->idx = idx;
    v->q = q;
    v->tied = tied;
    return 0;
}

/* the parameters of a copied (or observed) module c, cloned from those of src */
static int gdl__qties_params(const char *op, gdl__qties *T, const gdl_module *src, gdl_module *c) {
    int i;
    for (i = 0; i < src->nparam && i < c->nparam; i++)
        if (gdl__qties_add(op, T, src->param[i].t, c, i, NULL, src->param[i].tied) < 0) return -1;
    return 0;
}

/* q uses the int8 weight of o (made from the same tensor, so equal to its own), its own freed */
static void gdl__qlayer_share(gdl__qlayer *q, gdl__qlayer *o) {
    if (q->in != o->in || q->out != o->out || q->per_channel != o->per_channel || q->conv != o->conv) return;
    GPUDL_FREE(q->w);
    GPUDL_FREE(q->w_scale);
    GPUDL_FREE(q->w_zp);
    gdl__qpack_free(&q->pack);
    q->w = NULL;
    q->w_scale = NULL;
    q->w_zp = NULL;
    memset(&q->pack, 0, sizeof q->pack);
    q->wown = o;
}

static void gdl__qties_resolve(gdl__qties *T) {
    int i, j;
    char *done = (char *)GPUDL_MALLOC((size_t)T->n + 1);
    if (!done) return; /* then nothing is tied: correct, only larger */
    memset(done, 0, (size_t)T->n + 1);
    for (i = 0; i < T->n; i++) {
        int own = -1, qown = -1, k;
        if (done[i]) continue;
        for (j = i; j < T->n; j++) /* the group of entries made from T->r[i].from: its owners */
            if (T->r[j].from == T->r[i].from) {
                done[j] = 1;
                if (T->r[j].m && (own < 0 || (T->r[own].tied && !T->r[j].tied))) own = j;
                if (T->r[j].q && (qown < 0 || (T->r[qown].tied && !T->r[j].tied))) qown = j;
            }
        for (j = i; j < T->n; j++) {
            gdl__qtie *e = &T->r[j];
            if (e->from != T->r[i].from || j == own || j == qown) continue;
            if (e->m) { /* a float entry: the owner's clone */
                gdl__nn_named *v = &e->m->param[e->idx];
                gdl_tensor *t = T->r[own].m->param[T->r[own].idx].t;
                if (v->t == t) continue;
                gdl_free(v->t);
                v->t = t;
                v->tied = 1;
            } else if (own < 0) {
                gdl__qlayer_share(e->q, T->r[qown].q);
            }
        }
        for (k = i; own >= 0 && k < T->n; k++) /* derived from the float owner */
            if (T->r[k].from == T->r[i].from && T->r[k].q) T->r[k].q->wfloat = T->r[own].m->param[T->r[own].idx].t;
    }
    GPUDL_FREE(done);
}

/* ---- the recurrent modules, dynamically quantized ----
   torch.ao.nn.quantized.dynamic.LSTM / GRU: per layer and direction, the input and hidden projections
   become DynamicQuantizedLinear children "ih_l<l>" / "hh_l<l>" ("_reverse" for the backward direction)
   with the biases b_ih, b_hh; the module keeps nn.LSTM's kind and configuration (flagged GDL__RNN_QUANT),
   so [impl-nn]'s recurrence runs it: the input projection of a whole sequence at once (one activation
   scale for all its steps, as PyTorch's CPU path), the hidden one per step, the gates in f32. */
static gdl_module *gdl__qrnn_new(const char *op, const gdl_module *m, const gdl_qconfig *qc) {
    const int D = m->ia[GDL__RNN_BIDIR] ? 2 : 1, bias = (int)m->ia[GDL__RNN_BIAS], per = bias ? 4 : 2;
    const int lstm = m->kind == GDL__M_LSTM;
    gdl_module *c, *k;
    int l, d, j;
    if (!(c = gdl__nn_new(op, m->kind, lstm ? "DynamicQuantizedLSTM" : "DynamicQuantizedGRU"))) return NULL;
    c->training = m->training;
    memcpy(c->ia, m->ia, sizeof c->ia);
    memcpy(c->fa, m->fa, sizeof c->fa);
    c->ia[GDL__RNN_QUANT] = 1;
    for (l = 0; l < (int)m->ia[GDL__RNN_LAYERS]; l++)
        for (d = 0; d < D; d++)
            for (j = 0; j < 2; j++) { /* ih, hh */
                const int base = (l * D + d) * per;
                const gdl_tensor *W = gdl__nn_param(m, base + j), *b = bias ? gdl__nn_param(m, base + 2 + j) : NULL;
                int64_t ia[12];
                char name[48], who[320];
                memset(ia, 0, sizeof ia);
                ia[0] = W->shape[1];
                ia[1] = W->shape[0];
                snprintf(name, sizeof name, "%s_l%d%s", j ? "hh" : "ih", l, d ? "_reverse" : "");
                snprintf(who, sizeof who, "%s's %s", gdl__nn_label(m), m->param[base + j].name);
                k = gdl__qlayer_new(op, who, GDL__Q_DYNAMIC, 0, 0, ia, W, b, qc, NULL, NULL);
                if (!k || gdl__nn_add_child(op, c, name, k) < 0) {
                    gdl__nn_free_tree(c);
                    return NULL;
                }
            }
    return c;
}

/* A deep copy of m (parameters cloned) in which, by mode: every Linear (and LSTM, GRU) is dynamically
   quantized; every Linear and Conv2d observed (a ReLU after it in a Sequential fused in, and replaced by an
   Identity, as torch.ao.quantization.fuse_modules does); every observed layer converted. T records where the
   parameters went. */
static gdl_module *gdl__quant_copy(const char *op, const gdl_module *m, int mode, const gdl_qconfig *qc,
                                   gdl__qties *T) {
    gdl_module *c, *k;
    int i;
    if (mode == GDL__QC_DYNAMIC && m->kind == GDL__M_LINEAR) {
        k = gdl__qlayer_new(op, gdl__nn_label(m), GDL__Q_DYNAMIC, 0, 0, m->ia, gdl__nn_param(m, 0),
                            gdl__nn_param(m, 1), qc, NULL, NULL);
        if (k && gdl__qties_add(op, T, m->param[0].t, NULL, 0, (gdl__qlayer *)k->user, m->param[0].tied) < 0) {
            gdl__nn_free_tree(k);
            return NULL;
        }
        return k;
    }
    if (mode == GDL__QC_DYNAMIC && (m->kind == GDL__M_LSTM || m->kind == GDL__M_GRU) && !m->ia[GDL__RNN_QUANT])
        return gdl__qrnn_new(op, m, qc);
    if ((mode == GDL__QC_PREPARE || mode == GDL__QC_PREPARE_QAT) && (m->kind == GDL__M_LINEAR || m->kind == GDL__M_CONV2D)) {
        if (m->kind == GDL__M_CONV2D && m->ia[10] != 1) {
            gdl__set_error("%s: %s has groups=%lld: quantized convolutions take groups=1 only", op, gdl__nn_label(m),
                           (long long)m->ia[10]);
            return NULL;
        }
        k = gdl__qprep_new(op, m, NULL, 0, mode == GDL__QC_PREPARE_QAT, qc);
        if (k && gdl__qties_params(op, T, m, k) < 0) {
            gdl__nn_free_tree(k);
            return NULL;
        }
        return k;
    }
    if (mode == GDL__QC_CONVERT && gdl__is_qprep(m)) {
        k = gdl__qprep_convert(op, m);
        if (k && gdl__qties_add(op, T, m->param[0].t, NULL, 0, (gdl__qlayer *)k->user, m->param[0].tied) < 0) {
            gdl__nn_free_tree(k);
            return NULL;
        }
        return k;
    }
    if (m->kind == GDL__M_CUSTOM) {
        gdl__set_error("%s: %s is a custom module%s: it cannot be copied; quantize a model of built-in modules", op,
                       gdl__nn_label(m), gdl__is_qlayer(m) ? " (already quantized)" : gdl__is_qprep(m) ? " (prepared)" : "");
        return NULL;
    }
    if (!(c = gdl__nn_new(op, m->kind, m->kind_name))) return NULL;
    c->training = m->training;
    memcpy(c->ia, m->ia, sizeof c->ia);
    memcpy(c->fa, m->fa, sizeof c->fa);
    for (i = 0; i < m->nparam; i++)
        if (gdl__nn_add_tensor(op, c, m->param[i].name, gdl_clone(m->param[i].t), 0) < 0) goto fail;
    for (i = 0; i < m->nbuf; i++)
        if (gdl__nn_add_tensor(op, c, m->buf[i].name, gdl_clone(m->buf[i].t), 1) < 0) goto fail;
    if (gdl__qties_params(op, T, m, c) < 0) goto fail;
    for (i = 0; i < m->nchild; i++) {
        const gdl_module *ch = m->child[i], *bn;
        int relu, j, nf = mode == GDL__QC_PREPARE || mode == GDL__QC_PREPARE_QAT ? gdl__quant_fusable(m, i, &bn, &relu) : 0;
        if (nf > 1 && (ch->kind == GDL__M_LINEAR || ch->ia[10] == 1)) { /* fused: BatchNorm, ReLU become Identities */
            k = gdl__qprep_new(op, ch, bn, relu, mode == GDL__QC_PREPARE_QAT, qc);
            if (!k || gdl__nn_add_child(op, c, ch->name, k) < 0) goto fail;
            if (!bn && gdl__qties_params(op, T, ch, k) < 0) goto fail; /* a folded weight is another tensor */
            for (j = 1; j < nf; j++) {
                k = gdl_nn_identity();
                if (!k || gdl__nn_add_child(op, c, m->child[i + j]->name, k) < 0) goto fail;
            }
            i += nf - 1;
            continue;
        }
        k = gdl__quant_copy(op, ch, mode, qc, T);
        if (!k || gdl__nn_add_child(op, c, ch->name, k) < 0) goto fail;
    }
    return c;
fail:
    gdl__nn_free_tree(c);
    return NULL;
}

static gdl_module *gdl__quant_copy_root(const char *op, gdl_module *m, int mode, const gdl_qconfig *qc) {
    gdl_qconfig def = gdl_qconfig_default();
    gdl__qties T;
    gdl_module *r;
    int grad;
    if (!m) {
        gdl__null_arg(op, "module");
        return NULL;
    }
    if (!qc) qc = &def;
    if (qc->observer < GDL_QOBS_MINMAX || qc->observer > GDL_QOBS_HISTOGRAM || !(qc->averaging_constant > 0) ||
        !(qc->averaging_constant <= 1) || !(qc->percentile > 0.5) || !(qc->percentile <= 1)) {
        gdl__set_error("%s: bad qconfig: observer %d (GDL_QOBS_*), averaging_constant %g (in (0, 1]), percentile %g "
                       "(in (0.5, 1])", op, qc->observer, qc->averaging_constant, qc->percentile);
        return NULL;
    }
    memset(&T, 0, sizeof T);
    grad = gdl_set_grad_enabled(0);
    r = gdl__quant_copy(op, m, mode, qc, &T);
    gdl_set_grad_enabled(grad);
    if (r) gdl__qties_resolve(&T);
    GPUDL_FREE(T.r);
    return r;
}

GPUDL_API gdl_module *gdl_quantize_dynamic(gdl_module *m, const gdl_qconfig *qc) {
    return gdl__quant_copy_root("gdl_quantize_dynamic", m, GDL__QC_DYNAMIC, qc);
}

GPUDL_API gdl_module *gdl_quant_prepare(gdl_module *m, const gdl_qconfig *qc) {
    return gdl__quant_copy_root("gdl_quant_prepare", m, GDL__QC_PREPARE, qc);
}

GPUDL_API gdl_module *gdl_quant_prepare_qat(gdl_module *m, const gdl_qconfig *qc) {
    gdl_qconfig def = gdl_qconfig_default();
    gdl_module *r;
    if (!qc) { /* PyTorch's default QAT qconfig: moving-average observers */
        def.observer = GDL_QOBS_MOVING_AVERAGE;
        qc = &def;
    }
    r = gdl__quant_copy_root("gdl_quant_prepare_qat", m, GDL__QC_PREPARE_QAT, qc);
    if (r) gdl_module_train(r, gdl_module_is_training(m));
    return r;
}

/* sets the frozen flag of every observed layer under m; the count of them */
static int gdl__quant_freeze(gdl_module *m, int on) {
    int i, n = 0;
    if (gdl__is_qprep(m)) {
        ((gdl__qprep *)m->user)->frozen = on != 0;
        n++;
    }
    for (i = 0; i < m->nchild; i++) n += gdl__quant_freeze(m->child[i], on);
    return n;
}

GPUDL_API int gdl_quant_freeze_observers(gdl_module *m, int on) {
    if (!m) {
        gdl__null_arg("gdl_quant_freeze_observers", "module");
        return -1;
    }
    if (gdl__quant_freeze(m, on) == 0) {
        gdl__set_error("gdl_quant_freeze_observers: %s has no observed layer (gdl_quant_prepare_qat makes them)",
                       gdl__nn_label(m));
        return -1;
    }
    return 0;
}

/* 1 when m or a descendant passes test */
static int gdl__quant_any(const gdl_module *m, int (*test)(const gdl_module *)) {
    int i;
    if (!m) return 0;
    if (test(m)) return 1;
    for (i = 0; i < m->nchild; i++)
        if (gdl__quant_any(m->child[i], test)) return 1;
    return 0;
}

GPUDL_API gdl_module *gdl_quant_convert(gdl_module *m) {
    const char *op = "gdl_quant_convert";
    if (m && !gdl__quant_any(m, gdl__is_qprep)) {
        gdl__set_error("%s: %s has no observed layer: convert takes a model made by gdl_quant_prepare and "
                       "calibrated", op, gdl__nn_label(m));
        return NULL;
    }
    return gdl__quant_copy_root(op, m, GDL__QC_CONVERT, NULL);
}

GPUDL_API int64_t gdl_quant_calibrate(gdl_module *m, gdl_loader *l, int64_t max_batches) {
    const char *op = "gdl_quant_calibrate";
    gdl_tensor *x, *y;
    int64_t n = 0;
    int was_training, grad, rc = 0;
    if (!m || !l) {
        gdl__null_arg(op, !m ? "module" : "loader");
        return -1;
    }
    if (!gdl__quant_any(m, gdl__is_qprep)) {
        gdl__set_error("%s: %s has no observed layer: calibrate a model made by gdl_quant_prepare", op,
                       gdl__nn_label(m));
        return -1;
    }
    was_training = gdl_module_is_training(m);
    gdl_module_train(m, 0);
    grad = gdl_set_grad_enabled(0);
    while ((max_batches <= 0 || n < max_batches) && (rc = gdl_loader_next(l, &x, &y)) == 1) {
        gdl_arena_reset();
        if (!gdl_forward(m, x)) {
            rc = -1;
            break;
        }
        n++;
    }
    gdl_set_grad_enabled(grad);
    gdl_module_train(m, was_training);
    return rc < 0 ? -1 : n;
}

GPUDL_API int gdl_module_is_quantized(const gdl_module *m) { return gdl__quant_any(m, gdl__is_qlayer); }

/* A quantized module's parameter count (int8 weights and bias) and bytes as stored; 0 for other modules. A
   weight shared with another layer or derived from a float parameter is counted there, as a tied parameter. */
static int64_t gdl__quant_params(const gdl_module *m, int64_t *bytes) {
    const gdl__qlayer *q;
    int64_t w;
    if (!gdl__is_qlayer(m)) {
        if (bytes) *bytes = 0;
        return 0;
    }
    q = (const gdl__qlayer *)m->user;
    w = q->wown || q->wfloat ? 0 : q->in * q->out;
    if (bytes)
        *bytes = w + (w ? gdl__qlayer_nscale(q) * 8 : 0) + (q->bias ? 4 * q->out : 0) +
                 (q->mode == GDL__Q_STATIC ? 16 : 0);
    return w + (q->bias ? q->out : 0);
}

GPUDL_API int64_t gdl_module_nbytes(const gdl_module *m) {
    int64_t n = 0, qb;
    int i;
    if (!m) return -1;
    for (i = 0; i < m->nparam; i++) n += m->param[i].tied ? 0 : m->param[i].t->numel * (int64_t)gdl_dtype_size(m->param[i].t->dtype);
    for (i = 0; i < m->nbuf; i++) n += m->buf[i].t->numel * (int64_t)gdl_dtype_size(m->buf[i].t->dtype);
    gdl__quant_params(m, &qb);
    n += qb;
    for (i = 0; i < m->nchild; i++) n += gdl_module_nbytes(m->child[i]);
    return n;
}

/* ---- files ----
   One list of a quantized model's tensors (name, dtype, shape, where the
   values live) serves the writer and the reader. */

typedef struct gdl__qslot {
    char name[GDL_ST_NAME_MAX];
    const char *dtype;  /* "I8", "F32", "I32" */
    int ndim;
    int64_t shape[GDL_MAX_DIMS];
    int64_t numel;
    void *raw;          /* host array of the dtype (quantized modules), or NULL: ... */
    gdl_tensor *t;      /* ... an f32 parameter or buffer (gdl_real, on any device) */
    gdl__qlayer *q;     /* the layer whose weight is raw (to repack after a load), or whose weight is derived */
    int zp_free;        /* an activation's zero point: any value (a weight's must be 0) */
    int derived;        /* not in the file: q's int8 weight, quantized from q->wfloat (another slot's t) */
} gdl__qslot;

typedef struct gdl__qlist {
    int n, cap;
    gdl__qslot *s;
} gdl__qlist;

static gdl__qslot *gdl__qlist_add(const char *op, gdl__qlist *L, const char *path, const char *leaf, const char *dtype) {
    gdl__qslot *v = (gdl__qslot *)gdl__nn_reserve(L->s, &L->cap, L->n, sizeof(gdl__qslot)), *e;
    if (!v) {
        gdl__set_error("%s: out of memory", op);
        return NULL;
    }
    L->s = v;
    e = &L->s[L->n++];
    memset(e, 0, sizeof *e);
    if (snprintf(e->name, sizeof e->name, "%s%s%s", path, path[0] ? "." : "", leaf) >= (int)sizeof e->name) {
        gdl__set_error("%s: tensor name \"%s.%s\" is too long", op, path, leaf);
        return NULL;
    }
    e->dtype = dtype;
    return e;
}

/* A quantized layer's slots. Its int8 weight, scales and zero points are left out when it shares another
   layer's (stored there) or is derived from a float parameter (stored as that parameter). */
static int gdl__qlist_qlayer(const char *op, gdl__qlist *L, const char *path, gdl__qlayer *q) {
    const int64_t ns = gdl__qlayer_nscale(q);
    gdl__qslot *e;
    if (q->wfloat) { /* a slot for the load, not written */
        if (!(e = gdl__qlist_add(op, L, path, "(derived)", "F32"))) return -1;
        e->q = q;
        e->derived = 1;
    }
    if (!q->wown && !q->wfloat) {
        if (!(e = gdl__qlist_add(op, L, path, "weight_int8", "I8"))) return -1;
        e->ndim = 2; e->shape[0] = q->out; e->shape[1] = q->in; e->numel = q->out * q->in; e->raw = q->w; e->q = q;
        if (q->conv) { /* Conv2d's [out, in, kh, kw] */
            e->ndim = 4; e->shape[1] = q->ia[0]; e->shape[2] = q->ia[2]; e->shape[3] = q->ia[3];
        }
        if (!(e = gdl__qlist_add(op, L, path, "weight_scale", "F32"))) return -1;
        e->ndim = 1; e->shape[0] = ns; e->numel = ns; e->raw = q->w_scale;
        if (!(e = gdl__qlist_add(op, L, path, "weight_zero_point", "I32"))) return -1;
        e->ndim = 1; e->shape[0] = ns; e->numel = ns; e->raw = q->w_zp;
    }
    if (q->bias) {
        if (!(e = gdl__qlist_add(op, L, path, "bias", "F32"))) return -1;
        e->ndim = 1; e->shape[0] = q->out; e->numel = q->out; e->raw = q->bias;
    }
    if (q->mode == GDL__Q_STATIC) { /* the activations' parameters, [1] each */
        static const char *const nm[4] = {"input_scale", "input_zero_point", "output_scale", "output_zero_point"};
        void *const at[4] = {&q->in_scale, &q->in_zp, &q->out_scale, &q->out_zp};
        int k;
        for (k = 0; k < 4; k++) {
            if (!(e = gdl__qlist_add(op, L, path, nm[k], k % 2 ? "I32" : "F32"))) return -1;
            e->ndim = 1; e->shape[0] = 1; e->numel = 1; e->raw = at[k]; e->zp_free = 1;
        }
    }
    return 0;
}

static int gdl__qlist_collect(const char *op, gdl__qlist *L, gdl_module *m) {
    const char *path = gdl__nn_path(m);
    gdl__qslot *e;
    int i;
    if (gdl__is_qlayer(m)) return gdl__qlist_qlayer(op, L, path, (gdl__qlayer *)m->user);
    for (i = 0; i < m->nparam + m->nbuf; i++) {
        gdl__nn_named *v = i < m->nparam ? &m->param[i] : &m->buf[i - m->nparam];
        if (v->tied) continue; /* stored under its owner's name, as gdl_save_model does */
        if (v->t->dtype != GDL_F32) {
            gdl__set_error("%s: %s \"%s\" is %s %s on %s: quantized models keep f32 tensors besides their int8 ones",
                           op, gdl__nn_label(m), v->name, gdl_dtype_name(v->t->dtype), gdl_shape_str(v->t),
                           gdl_device_str(v->t->device));
            return -1;
        }
        if (!(e = gdl__qlist_add(op, L, path, v->name, "F32"))) return -1;
        e->ndim = v->t->ndim;
        memcpy(e->shape, v->t->shape, sizeof e->shape);
        e->numel = v->t->numel;
        e->t = v->t;
    }
    for (i = 0; i < m->nchild; i++)
        if (gdl__qlist_collect(op, L, m->child[i]) < 0) return -1;
    return 0;
}

/* The list of a quantized model m, or -1 (m NULL, not quantized, out of memory). */
static int gdl__qlist_make(const char *op, gdl__qlist *L, gdl_module *m, const char *path) {
    memset(L, 0, sizeof *L);
    if (!m || !path) {
        gdl__null_arg(op, !m ? "module" : "path");
        return -1;
    }
    if (!gdl_module_is_quantized(m)) {
        gdl__set_error("%s: %s holds no quantized module: a float model is saved with gdl_save_model (quantize it "
                       "first: gdl_quantize_dynamic, or gdl_quant_prepare / _calibrate / _convert)", op, gdl__nn_label(m));
        return -1;
    }
    if (gdl__qlist_collect(op, L, m) < 0) {
        GPUDL_FREE(L->s);
        L->s = NULL;
        return -1;
    }
    return 0;
}

/* the slot of the float tensor t (a derived layer's source), NULL when the list has none */
static const gdl__qslot *gdl__qlist_tensor(const gdl__qlist *L, const gdl_tensor *t) {
    int i;
    for (i = 0; i < L->n; i++)
        if (L->s[i].t == t) return &L->s[i];
    return NULL;
}

GPUDL_API int gdl_quant_save(gdl_module *m, const char *path) {
    static const char *const keys[2] = {"gpudl.quantized", "gpudl"};
    static const char *const vals[2] = {"int8", GPUDL_VERSION};
    const char *op = "gdl_quant_save";
    gdl__qlist L;
    gdl_st_tensor *st;
    float **conv;
    int i, n = 0, rc = -1;
    if (gdl__qlist_make(op, &L, m, path) < 0) return -1;
    st = (gdl_st_tensor *)GPUDL_MALLOC(sizeof(gdl_st_tensor) * (size_t)L.n);
    conv = (float **)GPUDL_MALLOC(sizeof(float *) * (size_t)L.n);
    if (!st || !conv) {
        gdl__set_error("%s: out of memory", op);
        goto done;
    }
    memset(conv, 0, sizeof(float *) * (size_t)L.n);
    for (i = 0; i < L.n; i++) {
        const gdl__qslot *e = &L.s[i];
        if (e->derived) continue;
        st[n].name = e->name;
        st[n].dtype = e->dtype;
        st[n].ndim = e->ndim;
        st[n].shape = e->shape;
        st[n].data = e->raw;
        if (e->t) { /* gdl_real (float, or double in GPUDL_DOUBLE builds; on any device) to float */
            gdl_real *tmp;
            const gdl_real *h = gdl__q_host(op, e->t, &tmp);
            int64_t k;
            if (!h) goto done;
            if (!(conv[i] = (float *)GPUDL_MALLOC(sizeof(float) * (size_t)e->numel + 1))) {
                gdl__set_error("%s: out of memory", op);
                GPUDL_FREE(tmp);
                goto done;
            }
            for (k = 0; k < e->numel; k++) conv[i][k] = (float)h[k];
            GPUDL_FREE(tmp);
            st[n].data = conv[i];
        }
        n++;
    }
    rc = gdl_st_write(path, n, st, 2, keys, vals);
done:
    if (conv)
        for (i = 0; i < L.n; i++) GPUDL_FREE(conv[i]);
    GPUDL_FREE(conv);
    GPUDL_FREE(st);
    GPUDL_FREE(L.s);
    return rc;
}

static uint32_t gdl__q_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Checks f against the list (names, dtypes, shapes, nothing extra, zero points 0). 0 / -1. */
static int gdl__qload_check(const char *op, const char *path, const gdl__qlist *L, const gdl_st_file *f) {
    int i, k;
    for (k = 0; k < f->n; k++) {
        for (i = 0; i < L->n; i++)
            if (!L->s[i].derived && !strcmp(f->entries[k].name, L->s[i].name)) break;
        if (i == L->n) {
            gdl__set_error("%s: %s: unexpected tensor '%s' (not in the quantized model)", op, path, f->entries[k].name);
            return -1;
        }
    }
    for (i = 0; i < L->n; i++) {
        const gdl__qslot *e = &L->s[i];
        const gdl_st_entry *fe = e->derived ? NULL : gdl_st_find(f, e->name);
        if (e->derived) continue;
        if (!fe) {
            gdl__set_error("%s: %s: missing tensor '%s' (%s %s)", op, path, e->name, e->dtype,
                           gdl__shape_fmt(e->ndim, e->shape));
            return -1;
        }
        if (strcmp(fe->dtype, e->dtype) || fe->ndim != e->ndim ||
            memcmp(fe->shape, e->shape, sizeof(int64_t) * (size_t)e->ndim)) {
            gdl__set_error("%s: %s: tensor '%s' is %s %s in the file but %s %s in the model", op, path, e->name,
                           fe->dtype, gdl__shape_fmt(fe->ndim, fe->shape), e->dtype, gdl__shape_fmt(e->ndim, e->shape));
            return -1;
        }
        if (!strcmp(e->dtype, "I32") && !e->zp_free) {
            int64_t j;
            for (j = 0; j < e->numel; j++)
                if (gdl__q_le32(f->data + fe->begin + 4 * j) != 0) {
                    gdl__set_error("%s: %s: '%s' holds a nonzero zero point: the int8 weights are symmetric", op, path,
                                   e->name);
                    return -1;
                }
        }
    }
    return 0;
}

/* n little-endian f32 values of a file as gdl_real (a fresh array; NULL + error) */
static gdl_real *gdl__qload_reals(const char *op, const unsigned char *src, int64_t n) {
    gdl_real *r = (gdl_real *)GPUDL_MALLOC(sizeof(gdl_real) * (size_t)n + 1);
    int64_t k;
    if (!r) {
        gdl__set_error("%s: out of memory", op);
        return NULL;
    }
    for (k = 0; k < n; k++) {
        const uint32_t u = gdl__q_le32(src + 4 * k);
        float v;
        memcpy(&v, &u, 4);
        r[k] = (gdl_real)v;
    }
    return r;
}

/* The int8 weight of q quantized anew from the f32 values w into nw (its own arrays and pack; q's
   configuration): a derived layer's weight after its float parameter is loaded. 0 / -1. */
static int gdl__qlayer_requant(const char *op, const gdl__qlayer *q, const gdl_real *w, gdl__qlayer *nw) {
    const int64_t ns = gdl__qlayer_nscale(q);
    memset(nw, 0, sizeof *nw);
    nw->in = q->in;
    nw->out = q->out;
    nw->per_channel = q->per_channel;
    nw->w = (int8_t *)GPUDL_MALLOC((size_t)(q->in * q->out) + 1);
    nw->w_scale = (float *)GPUDL_MALLOC(sizeof(float) * (size_t)ns);
    nw->w_zp = (int32_t *)GPUDL_MALLOC(sizeof(int32_t) * (size_t)ns);
    if (nw->w && nw->w_scale && nw->w_zp) {
        gdl__qlayer_quantize_weight(nw, w);
        if (gdl__qpack_init(op, &nw->pack, (int)q->out, (int)q->in, nw->w, (ptrdiff_t)q->in) == 0) return 0;
    } else {
        gdl__set_error("%s: out of memory", op);
    }
    GPUDL_FREE(nw->w);
    GPUDL_FREE(nw->w_scale);
    GPUDL_FREE(nw->w_zp);
    memset(nw, 0, sizeof *nw);
    return -1;
}

/* the device copies of every quantized layer of m on a device made anew (after a load) */
static int gdl__qload_refresh(gdl_module *m) {
    int i;
    if (gdl__is_qlayer(m)) {
        gdl__qlayer *q = (gdl__qlayer *)m->user;
        return q->dev.type == GDL_DEVICE_CPU ? 0 : gdl__qlayer_to_dev(q, q->dev);
    }
    for (i = 0; i < m->nchild; i++)
        if (gdl__qload_refresh(m->child[i]) < 0) return -1;
    return 0;
}

/* One slot's values from the file (src; NULL for a derived layer) into the model: a weight with its new pack
   (fresh, which gives its arrays up), the other arrays and tensors converted. 0 / -1. */
static int gdl__qload_commit(const char *op, gdl__qslot *e, gdl__qlayer *fresh, const unsigned char *src) {
    int64_t k;
    int rc = 0;
    if (e->derived) { /* the new arrays replace the old ones */
        gdl__qlayer *q = e->q;
        GPUDL_FREE(q->w);
        GPUDL_FREE(q->w_scale);
        GPUDL_FREE(q->w_zp);
        gdl__qpack_free(&q->pack);
        q->w = fresh->w;
        q->w_scale = fresh->w_scale;
        q->w_zp = fresh->w_zp;
        q->pack = fresh->pack;
        memset(fresh, 0, sizeof *fresh);
    } else if (e->q) {
        memcpy(e->raw, src, (size_t)e->numel);
        gdl__qpack_free(&e->q->pack);
        e->q->pack = fresh->pack;
        memset(&fresh->pack, 0, sizeof fresh->pack);
    } else if (!strcmp(e->dtype, "I32")) {
        for (k = 0; k < e->numel; k++) ((int32_t *)e->raw)[k] = (int32_t)gdl__q_le32(src + 4 * k);
    } else if (e->raw) {
        for (k = 0; k < e->numel; k++) {
            const uint32_t u = gdl__q_le32(src + 4 * k);
            memcpy((float *)e->raw + k, &u, 4);
        }
    } else { /* a parameter or buffer, on its device */
        gdl_real *w = gdl__qload_reals(op, src, e->numel);
        rc = w ? gdl__copy_bytes(op, e->t->data, e->t->device, w, gdl_cpu(), sizeof(gdl_real) * (size_t)e->numel) : -1;
        GPUDL_FREE(w);
    }
    return rc;
}

GPUDL_API int gdl_quant_load(gdl_module *m, const char *path) {
    const char *op = "gdl_quant_load";
    gdl__qlist L;
    gdl_st_file f;
    gdl__qlayer *fresh; /* per slot: its new weight (packed), made before anything changes */
    int i, rc = -1;
    if (gdl__qlist_make(op, &L, m, path) < 0) return -1;
    if (gdl_st_read(path, &f) < 0) {
        GPUDL_FREE(L.s);
        return -1;
    }
    /* the new weights packed first (derived ones quantized from their float parameter's values in the file):
       nothing is changed unless all can be */
    fresh = (gdl__qlayer *)GPUDL_MALLOC(sizeof(gdl__qlayer) * (size_t)L.n);
    if (!fresh) gdl__set_error("%s: out of memory", op);
    else memset(fresh, 0, sizeof(gdl__qlayer) * (size_t)L.n);
    if (fresh && gdl__qload_check(op, path, &L, &f) == 0) {
        rc = 0;
        for (i = 0; i < L.n && rc == 0; i++) {
            const gdl__qslot *e = &L.s[i], *src;
            gdl_real *w;
            if (!e->q) continue;
            if (!e->derived) {
                rc = gdl__qpack_init(op, &fresh[i].pack, (int)e->q->out, (int)e->q->in,
                                     (const int8_t *)(f.data + gdl_st_find(&f, e->name)->begin), (ptrdiff_t)e->q->in);
                continue;
            }
            if (!(src = gdl__qlist_tensor(&L, e->q->wfloat)) || src->numel != e->q->in * e->q->out) {
                gdl__set_error("%s: %s: the float parameter a quantized layer is tied to is not in the model", op, path);
                rc = -1;
            } else if (!(w = gdl__qload_reals(op, f.data + gdl_st_find(&f, src->name)->begin, src->numel))) {
                rc = -1;
            } else {
                rc = gdl__qlayer_requant(op, e->q, w, &fresh[i]);
                GPUDL_FREE(w);
            }
        }
        for (i = 0; i < L.n && rc == 0; i++)
            rc = gdl__qload_commit(op, &L.s[i], &fresh[i],
                                   L.s[i].derived ? NULL : f.data + gdl_st_find(&f, L.s[i].name)->begin);
    }
    if (rc == 0) rc = gdl__qload_refresh(m); /* the copies of the layers on a device: new ones */
    if (fresh)
        for (i = 0; i < L.n; i++) {
            gdl__qpack_free(&fresh[i].pack);
            GPUDL_FREE(fresh[i].w);
            GPUDL_FREE(fresh[i].w_scale);
            GPUDL_FREE(fresh[i].w_zp);
        }
    GPUDL_FREE(fresh);
    gdl_st_free(&f);
    GPUDL_FREE(L.s);
    return rc;
}
