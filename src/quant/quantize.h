/* ---------------------------------------------------------------------------
   src/quant/quantize.h — quantized tensors (quantize_per_tensor, dequantize)
   and the activation observers. The folder, src/quant/: quantized modules
   (src/api/quant.h): dynamic quantization of
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

/* x checked (dtype want; quint8's scale and zero point), its device's backend (*be), and the result: dtype out,
   x's shape. NULL + error. */
static gdl_tensor *gdl__q_tensor_begin(const char *op, const gdl_tensor *x, gdl_dtype want, float scale, int32_t zp,
                                       gdl_dtype out, const gdl_backend **be) {
    if (gdl__q_tensor_args(op, x, want, scale, zp) < 0 || !(*be = gdl__be(op, x->device))) return NULL;
    return gdl__tmp(op, x->ndim, x->shape, out, x->device);
}

GPUDL_API gdl_tensor *gdl_quantize_per_tensor(gdl_tensor *x, float scale, int32_t zero_point) {
    const char *op = "gdl_quantize_per_tensor";
    const gdl_backend *be;
    gdl_tensor *q;
    if (!(q = gdl__q_tensor_begin(op, x, GDL_F32, scale, zero_point, GDL_U8, &be))) return NULL;
    return be->k.quantize(1, x->numel, (const gdl_real *)x->data, scale, zero_point, 0, 255, q->data, x->numel) < 0
               ? NULL : q;
}

GPUDL_API gdl_tensor *gdl_dequantize(gdl_tensor *q, float scale, int32_t zero_point) {
    const char *op = "gdl_dequantize";
    const gdl_backend *be;
    gdl_tensor *y;
    if (!(y = gdl__q_tensor_begin(op, q, GDL_U8, scale, zero_point, GDL_F32, &be))) return NULL;
    return be->k.dequantize(q->numel, q->data, 0, scale, zero_point, (gdl_real *)y->data) < 0 ? NULL : y;
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
        be->k.qminmax(t->numel, (const gdl_real *)t->data, mm) < 0)
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
