/* ---------------------------------------------------------------------------
   src/export/c.h  gdl_export_c: a model lowered to a list of kernel calls
   on values (BatchNorm folded, ReLU fused, static INT8 layers turned into
   integer multipliers and shifts), the values placed in one arena by their
   lifetimes, then printed as a C99 file (src/api/export.h).
   ------------------------------------------------------------------------- */

enum { GDL__XO_LINEAR, GDL__XO_CONV, GDL__XO_MAXPOOL, GDL__XO_AVGPOOL, GDL__XO_ACT, GDL__XO_ADD, GDL__XO_REQUANT };
enum { GDL__XA_NONE, GDL__XA_RELU, GDL__XA_LEAKY, GDL__XA_SIGMOID, GDL__XA_TANH, GDL__XA_COUNT };

/* a value: an activation tensor of the batch's one sample; its bytes live in the arena (root < 0: its
   own slot) or in the slot of the value it aliases (Flatten, an in-place activation) */
typedef struct gdl__xval {
    int ndim;
    int64_t d[3], n;  /* shape without the batch dim, elements */
    int def, last;    /* the op that makes it (-1: the input) and the last op that reads it */
    int root;         /* the value whose slot this one shares, or -1 */
    int64_t off;      /* byte offset in the arena (roots) */
} gdl__xval;

/* one kernel call; x, x2 (ADD's second operand), y are value ids */
typedef struct gdl__xop {
    int kind, x, x2, y, act;
    float slope;
    int g[15];             /* LINEAR: rows, in, out; CONV: C,H,W, OC,KH,KW, SH,SW, PH,PW, DH,DW, G, OH,OW;
                              pools: C,H,W, K(h),K(w), S,S, P,P, OH,OW (global: K = H, W) */
    float *w, *b;          /* f32 weights and bias, owned */
    float *wscale;         /* INT8: the weights' scales (nmult of them), for the file's comments */
    int8_t *qw, *shift;    /* INT8 weights; the right shifts (one per multiplier) */
    int32_t *qb, *mult;    /* INT8 bias (in the sum's scale, zero point folded where it can be), multipliers */
    int64_t nw, nb;        /* weights; bias entries and multipliers (per channel: out, else 1 multiplier) */
    int nmult;
    int32_t zx, zy, lo, hi; /* INT8: input zero point, output zero point, clamp (ReLU: lo = zy) */
    char what[256];        /* the comment on its line: the module, the shapes, INT8 parameters */
} gdl__xop;

typedef struct gdl__xnet {
    const char *fn;
    int int8, no_libm;
    gdl__xop *op;
    int nop, cap_op;
    gdl__xval *v;
    int nv, cap_v;
    int qknown;            /* INT8: the current value's scale and zero point are known */
    float qs;
    int32_t qz;
    int qmax;
    float in_s, out_s;     /* INT8: the input's and the output's parameters */
    int32_t in_z, out_z;
    int in_qmax, nq;       /* the first layer's qmax; quantized layers seen */
} gdl__xnet;

static void gdl__x_free(gdl__xnet *N) {
    int i;
    for (i = 0; i < N->nop; i++) {
        gdl__xop *o = &N->op[i];
        GPUDL_FREE(o->w); GPUDL_FREE(o->b); GPUDL_FREE(o->qw); GPUDL_FREE(o->shift); GPUDL_FREE(o->wscale);
        GPUDL_FREE(o->qb); GPUDL_FREE(o->mult);
    }
    GPUDL_FREE(N->op);
    GPUDL_FREE(N->v);
}

/* a new value of shape d[0..ndim) made by op `def` (d may point into N->v: it is read before N->v grows);
   its id or -1 */
static int gdl__x_value(gdl__xnet *N, int ndim, const int64_t *d, int def) {
    gdl__xval *v;
    int64_t dims[3];
    int k;
    void *p;
    for (k = 0; k < ndim; k++) dims[k] = d[k];
    if (!(p = gdl__nn_reserve(N->v, &N->cap_v, N->nv, sizeof *N->v))) {
        gdl__set_error("%s: out of memory", N->fn);
        return -1;
    }
    N->v = (gdl__xval *)p;
    v = &N->v[N->nv];
    memset(v, 0, sizeof *v);
    v->ndim = ndim;
    v->n = 1;
    for (k = 0; k < ndim; k++) v->d[k] = dims[k], v->n *= dims[k];
    v->def = def;
    v->last = def;
    v->root = -1;
    return N->nv++;
}

/* a new op reading x, with a fresh output value of shape d; the op or NULL */
static gdl__xop *gdl__x_op(gdl__xnet *N, int kind, int x, int ndim, const int64_t *d) {
    gdl__xop *o;
    void *p = gdl__nn_reserve(N->op, &N->cap_op, N->nop, sizeof *N->op);
    int y;
    if (!p) {
        gdl__set_error("%s: out of memory", N->fn);
        return NULL;
    }
    N->op = (gdl__xop *)p;
    if ((y = gdl__x_value(N, ndim, d, N->nop)) < 0) return NULL;
    o = &N->op[N->nop++];
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->x = x;
    o->x2 = -1;
    o->y = y;
    return o;
}

static int gdl__x_refuse(gdl__xnet *N, const gdl_module *m, const char *why) {
    gdl__set_error("%s: %s has no form in the C export: %s", N->fn, gdl__nn_label(m), why);
    return -1;
}

static int gdl__x_shape_error(gdl__xnet *N, const gdl_module *m, int x, const char *want) {
    const gdl__xval *v = &N->v[x];
    char got[96];
    size_t n = (size_t)snprintf(got, sizeof got, "[1");
    int k;
    for (k = 0; k < v->ndim && n < sizeof got; k++)
        n += (size_t)snprintf(got + n, sizeof got - n, ",%lld", (long long)v->d[k]);
    gdl__set_error("%s: %s expects an input %s, gets %s] here", N->fn, gdl__nn_label(m), want, got);
    return -1;
}

/* host copies of a module's f32 tensor as float (any device, gdl_real f32 or f64); NULL + error */
static float *gdl__x_floats(const char *op, const gdl_tensor *t) {
    gdl_real *tmp;
    const gdl_real *h;
    float *r;
    int64_t i;
    if (t->dtype != GDL_F32) {
        gdl__set_error("%s: a %s tensor %s: the C export takes f32 parameters", op, gdl_dtype_name(t->dtype),
                       gdl_shape_str(t));
        return NULL;
    }
    if (!(h = gdl__q_host(op, t, &tmp))) return NULL;
    if ((r = (float *)GPUDL_MALLOC(sizeof(float) * (size_t)(t->numel ? t->numel : 1))))
        for (i = 0; i < t->numel; i++) r[i] = (float)h[i];
    else
        gdl__set_error("%s: out of memory", op);
    GPUDL_FREE(tmp);
    return r;
}

/* BatchNorm bn folded into the f32 weight w [C][per] and bias b [C] (torch's fuse_conv_bn_eval, in double) */
static int gdl__x_fold_bn(gdl__xnet *N, const gdl_module *bn, int64_t C, int64_t per, float *w, float *b) {
    float *st[4] = {NULL, NULL, NULL, NULL}; /* running mean, running var, gamma, beta */
    int64_t c, i;
    int k, rc = 0;
    if (!bn->ia[GDL__BN_TRACK]) return gdl__x_refuse(N, bn, "it keeps no running statistics (eval mode uses the batch's)");
    if (bn->ia[GDL__BN_C] != C) return gdl__x_refuse(N, bn, "its channels differ from the layer's before it");
    for (k = 0; k < 4 && rc == 0; k++) {
        const gdl_tensor *t = k < 2 ? gdl__nn_buffer(bn, k) : bn->ia[GDL__BN_AFFINE] ? gdl__nn_param(bn, k - 2) : NULL;
        if (t && !(st[k] = gdl__x_floats(N->fn, t))) rc = -1;
    }
    for (c = 0; c < C && rc == 0; c++) {
        const double kc = (st[2] ? (double)st[2][c] : 1.0) / sqrt((double)st[1][c] + bn->fa[GDL__BN_EPS]);
        for (i = 0; i < per; i++) w[c * per + i] = (float)(w[c * per + i] * kc);
        b[c] = (float)((b[c] - st[0][c]) * kc + (st[3] ? st[3][c] : 0));
    }
    for (k = 0; k < 4; k++) GPUDL_FREE(st[k]);
    return rc;
}

/* the output size of a window of k taps, stride s, padding p, dilation d over n (PyTorch's floor mode) */
static int64_t gdl__x_win(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d) {
    return (n + 2 * p - d * (k - 1) - 1) / s + 1;
}

/* the LINEAR or CONV op of a layer with the float module configuration a (Linear: in, out; Conv2d: as
   gdl_nn_conv2d_ex's ia) on value x, its output shape and call geometry; NULL + error */
static gdl__xop *gdl__x_layer_op(gdl__xnet *N, const gdl_module *m, int conv, const int64_t *a, int x) {
    const gdl__xval *v = &N->v[x];
    int64_t d[3];
    char want[64];
    gdl__xop *o;
    int k;
    if (!conv) {
        if (v->d[v->ndim - 1] != a[GDL__LIN_IN]) {
            snprintf(want, sizeof want, "[..., %lld]", (long long)a[GDL__LIN_IN]);
            gdl__x_shape_error(N, m, x, want);
            return NULL;
        }
        memcpy(d, v->d, sizeof d);
        d[v->ndim - 1] = a[GDL__LIN_OUT];
        if (!(o = gdl__x_op(N, GDL__XO_LINEAR, x, v->ndim, d))) return NULL;
        v = &N->v[x];
        o->g[0] = (int)(v->n / a[GDL__LIN_IN]); o->g[1] = (int)a[GDL__LIN_IN]; o->g[2] = (int)a[GDL__LIN_OUT];
        snprintf(o->what, sizeof o->what, "%s %lld -> %lld", gdl__nn_label(m), (long long)a[GDL__LIN_IN], (long long)a[GDL__LIN_OUT]);
        return o;
    }
    if (v->ndim != 3 || v->d[0] != a[GDL__CONV_IN]) {
        snprintf(want, sizeof want, "[1,%lld,H,W]", (long long)a[GDL__CONV_IN]);
        gdl__x_shape_error(N, m, x, want);
        return NULL;
    }
    d[0] = a[GDL__CONV_OUT];
    d[1] = gdl__x_win(v->d[1], a[GDL__CONV_KH], a[GDL__CONV_SH], a[GDL__CONV_PH], a[GDL__CONV_DH]);
    d[2] = gdl__x_win(v->d[2], a[GDL__CONV_KW], a[GDL__CONV_SW], a[GDL__CONV_PW], a[GDL__CONV_DW]);
    if (d[1] < 1 || d[2] < 1) {
        gdl__x_shape_error(N, m, x, "at least as large as the kernel");
        return NULL;
    }
    if (!(o = gdl__x_op(N, GDL__XO_CONV, x, 3, d))) return NULL;
    v = &N->v[x];
    o->g[0] = (int)v->d[0]; o->g[1] = (int)v->d[1]; o->g[2] = (int)v->d[2];
    for (k = 0; k < 9; k++) o->g[3 + k] = (int)a[GDL__CONV_OUT + k]; /* OC, KH, KW, SH, SW, PH, PW, DH, DW */
    o->g[12] = (int)a[GDL__CONV_GROUPS];
    o->g[13] = (int)d[1]; o->g[14] = (int)d[2];
    snprintf(o->what, sizeof o->what, "%s %lldx%lldx%lld -> %lldx%lldx%lld", gdl__nn_label(m), (long long)v->d[0],
             (long long)v->d[1], (long long)v->d[2], (long long)d[0], (long long)d[1], (long long)d[2]);
    return o;
}

/* an f32 Linear or Conv2d m, with BatchNorm bn (or NULL) folded in and activation act, on value x */
static int gdl__x_layer(gdl__xnet *N, const gdl_module *m, const gdl_module *bn, int act, int x) {
    const int conv = m->kind == GDL__M_CONV2D;
    const int64_t out = m->ia[conv ? (int)GDL__CONV_OUT : (int)GDL__LIN_OUT];
    gdl__xop *o;
    if (N->int8)
        return gdl__x_refuse(N, m, "a float layer in a quantized model (the INT8 export is integer arithmetic "
                                   "only: quantize every Linear / Conv2d with gdl_quant_prepare and convert)");
    if (bn && bn->ia[GDL__BN_DIMS] != (conv ? 2 : 1))
        return gdl__x_refuse(N, bn, conv ? "a BatchNorm1d after a Conv2d" : "a BatchNorm2d after a Linear");
    if (bn && !conv && N->v[x].ndim != 1) return gdl__x_refuse(N, bn, "a BatchNorm1d over [N, C, L] after a Linear");
    if (!(o = gdl__x_layer_op(N, m, conv, m->ia, x))) return -1;
    o->act = act;
    o->nw = gdl__nn_param(m, 0)->numel;
    o->nb = out;
    if (!(o->w = gdl__x_floats(N->fn, gdl__nn_param(m, 0)))) return -1;
    if (!(o->b = (float *)GPUDL_MALLOC(sizeof(float) * (size_t)out))) {
        gdl__set_error("%s: out of memory", N->fn);
        return -1;
    }
    memset(o->b, 0, sizeof(float) * (size_t)out);
    if (gdl__nn_param(m, 1)) {
        float *b = gdl__x_floats(N->fn, gdl__nn_param(m, 1));
        if (!b) return -1;
        memcpy(o->b, b, sizeof(float) * (size_t)out);
        GPUDL_FREE(b);
    }
    if (bn) {
        if (gdl__x_fold_bn(N, bn, out, o->nw / out, o->w, o->b) < 0) return -1;
        snprintf(o->what + strlen(o->what), sizeof o->what - strlen(o->what), ", %s folded", bn->kind_name);
    }
    if (act == GDL__XA_RELU) snprintf(o->what + strlen(o->what), sizeof o->what - strlen(o->what), ", ReLU");
    return o->y;
}

/* M = m * 2^e as an int32 fraction (Q31) and a right shift of 1..62 for a product with it (CMSIS-NN's and
   TFLite's QuantizeMultiplier, with the shift folded into one right shift); -1 when M is 2^30 or more */
static int gdl__x_multiplier(double M, int32_t *mult, int8_t *rs) {
    int e;
    double f = frexp(M, &e);
    int64_t q = (int64_t)floor(f * 2147483648.0 + 0.5);
    if (!(M > 0)) {
        *mult = 0, *rs = 1;
        return 0;
    }
    if (q == ((int64_t)1 << 31)) q /= 2, e++;
    if (31 - e < 1) return -1;
    if (31 - e > 62) { /* below 2^-32: every product rounds to 0 */
        *mult = 0, *rs = 1;
        return 0;
    }
    *mult = (int32_t)q;
    *rs = (int8_t)(31 - e);
    return 0;
}

/* INT8: the current value requantized to (s, z) when its parameters differ */
static int gdl__x_requant(gdl__xnet *N, const gdl_module *m, int x, float s, int32_t z, int qmax) {
    gdl__xop *o;
    const gdl__xval *v = &N->v[x];
    if (!N->qknown || (N->qs == s && N->qz == z)) return x;
    if (!(o = gdl__x_op(N, GDL__XO_REQUANT, x, v->ndim, v->d))) return -1;
    o->nmult = 1;
    o->mult = (int32_t *)GPUDL_MALLOC(sizeof(int32_t));
    o->shift = (int8_t *)GPUDL_MALLOC(1);
    if (!o->mult || !o->shift) {
        gdl__set_error("%s: out of memory", N->fn);
        return -1;
    }
    if (gdl__x_multiplier((double)N->qs / (double)s, o->mult, o->shift) < 0)
        return gdl__x_refuse(N, m, "its input scale is 2^30 times smaller than the previous layer's output scale");
    o->g[0] = (int)N->v[x].n;
    o->zx = N->qz, o->zy = z, o->lo = 0, o->hi = qmax;
    snprintf(o->what, sizeof o->what, "requantized for %s: scale %g zero point %d -> %g, %d", gdl__nn_label(m),
             (double)N->qs, (int)N->qz, (double)s, (int)z);
    N->qs = s, N->qz = z, N->qmax = qmax;
    return o->y;
}

/* a static quantized layer (QuantizedLinear(ReLU), QuantizedConv(ReLU)2d) on value x */
static int gdl__x_qlayer(gdl__xnet *N, const gdl_module *m, int x) {
    const gdl__qlayer *q = (const gdl__qlayer *)m->user, *ws = gdl__qlayer_wsrc(q);
    const int qmax = gdl__qlayer_qmax(q);
    const double kmax = (double)q->in * 255.0 * 128.0;
    gdl__xop *o;
    int64_t n, k;
    if (q->mode == GDL__Q_DYNAMIC)
        return gdl__x_refuse(N, m, "dynamic quantization computes the activations' scale at run time from the "
                                   "data; export a static model (gdl_quant_prepare, calibrate, convert)");
    if (!N->int8) return gdl__x_refuse(N, m, "internal: a quantized layer in a float export");
    if (!N->nq++) { /* the first layer: the model's input is quantized with its parameters */
        N->in_s = q->in_scale, N->in_z = q->in_zp, N->in_qmax = qmax;
        N->qknown = 1, N->qs = q->in_scale, N->qz = q->in_zp, N->qmax = qmax;
    }
    if ((x = gdl__x_requant(N, m, x, q->in_scale, q->in_zp, qmax)) < 0) return -1;
    if (!(o = gdl__x_layer_op(N, m, q->conv, q->ia, x))) return -1;
    o->nw = q->in * q->out;
    o->nb = q->out;
    o->nmult = q->per_channel ? (int)q->out : 1;
    o->zx = q->in_zp, o->zy = q->out_zp;
    o->lo = q->relu ? q->out_zp : 0, o->hi = qmax;
    snprintf(o->what + strlen(o->what), sizeof o->what - strlen(o->what),
             "%s; in: scale %.6g zero point %d, out: scale %.6g zero point %d, weights: int8, %s", q->relu ? ", ReLU" : "",
             (double)q->in_scale, (int)q->in_zp, (double)q->out_scale, (int)q->out_zp,
             q->per_channel ? "a scale per output channel" : "one scale");
    o->qw = (int8_t *)GPUDL_MALLOC((size_t)o->nw);
    o->qb = (int32_t *)GPUDL_MALLOC(sizeof(int32_t) * (size_t)q->out);
    o->mult = (int32_t *)GPUDL_MALLOC(sizeof(int32_t) * (size_t)o->nmult);
    o->shift = (int8_t *)GPUDL_MALLOC((size_t)o->nmult);
    o->wscale = (float *)GPUDL_MALLOC(sizeof(float) * (size_t)o->nmult);
    if (!o->qw || !o->qb || !o->mult || !o->shift || !o->wscale) {
        gdl__set_error("%s: out of memory", N->fn);
        return -1;
    }
    memcpy(o->qw, ws->w, (size_t)o->nw);
    memcpy(o->wscale, ws->w_scale, sizeof(float) * (size_t)o->nmult);
    for (n = 0; n < q->out; n++) {
        const float sc = q->in_scale * ws->w_scale[q->per_channel ? n : 0]; /* the sum's scale, as gpudl's f32 */
        const double bq = q->bias ? floor((double)q->bias[n] / (double)sc + 0.5) : 0;
        double b = bq;
        if (!q->conv) { /* sum (x - zx) w = sum x w - zx sum w: the zero point's part joins the bias */
            int64_t colsum = 0;
            for (k = 0; k < q->in; k++) colsum += ws->w[n * q->in + k];
            b -= (double)q->in_zp * (double)colsum;
        }
        if (fabs(b) + kmax * (q->conv ? 2 : 1) >= 2147483647.0)
            return gdl__x_refuse(N, m, "its bias and sums could overflow int32");
        o->qb[n] = (int32_t)b;
        if (n < o->nmult && gdl__x_multiplier((double)sc / (double)q->out_scale, &o->mult[n], &o->shift[n]) < 0)
            return gdl__x_refuse(N, m, "its multiplier s_x * s_w / s_y is 2^30 or more");
    }
    N->qs = q->out_scale, N->qz = q->out_zp, N->qmax = qmax;
    return o->y;
}

/* MaxPool2d, AvgPool2d, GlobalAvgPool2d on value x */
static int gdl__x_pool(gdl__xnet *N, const gdl_module *m, int x) {
    const gdl__xval *v = &N->v[x];
    const int gap = m->kind == GDL__M_GAP;
    int64_t d[3], k, s, p;
    gdl__xop *o;
    if (v->ndim != 3) return gdl__x_shape_error(N, m, x, "[1,C,H,W]");
    k = gap ? 0 : m->ia[GDL__POOL_K], s = gap ? 1 : m->ia[GDL__POOL_S], p = gap ? 0 : m->ia[GDL__POOL_P];
    if (N->int8 && !N->nq && m->kind != GDL__M_MAXPOOL)
        return gdl__x_refuse(N, m, "it comes before the first quantized layer (the INT8 export takes its input "
                                   "quantized with that layer's parameters)");
    d[0] = v->d[0];
    d[1] = gap ? 1 : gdl__x_win(v->d[1], k, s, p, 1);
    d[2] = gap ? 1 : gdl__x_win(v->d[2], k, s, p, 1);
    if (d[1] < 1 || d[2] < 1) return gdl__x_shape_error(N, m, x, "at least as large as the window");
    if (!(o = gdl__x_op(N, m->kind == GDL__M_MAXPOOL ? GDL__XO_MAXPOOL : GDL__XO_AVGPOOL, x, 3, d))) return -1;
    v = &N->v[x];
    o->g[0] = (int)v->d[0]; o->g[1] = (int)v->d[1]; o->g[2] = (int)v->d[2];
    o->g[3] = (int)(gap ? v->d[1] : k); o->g[4] = (int)(gap ? v->d[2] : k);
    o->g[5] = o->g[6] = (int)s;
    o->g[7] = o->g[8] = (int)p;
    o->g[9] = (int)d[1]; o->g[10] = (int)d[2];
    o->zx = o->zy = N->qz, o->lo = 0, o->hi = N->qmax;
    snprintf(o->what, sizeof o->what, "%s %lldx%lldx%lld -> %lldx%lldx%lld", gdl__nn_label(m), (long long)v->d[0],
             (long long)v->d[1], (long long)v->d[2], (long long)d[0], (long long)d[1], (long long)d[2]);
    return o->y;
}

/* an elementwise activation on x (the INT8 path: ReLU only, max(q, zero point)) */
static int gdl__x_act(gdl__xnet *N, const gdl_module *m, int x, int act) {
    gdl__xop *o;
    if (N->int8 && act != GDL__XA_RELU)
        return gdl__x_refuse(N, m, "the INT8 export has ReLU as its only activation outside a fused layer");
    if (N->int8 && !N->nq) return gdl__x_refuse(N, m, "it comes before the first quantized layer");
    if (N->no_libm && (act == GDL__XA_SIGMOID || act == GDL__XA_TANH))
        return gdl__x_refuse(N, m, "it needs libm's expf / tanhf and opts.no_libm is set");
    if (!(o = gdl__x_op(N, GDL__XO_ACT, x, N->v[x].ndim, N->v[x].d))) return -1;
    o->act = act;
    o->slope = (float)m->fa[GDL__LEAKY_SLOPE];
    o->g[0] = (int)N->v[x].n;
    o->zx = o->zy = N->qz, o->lo = N->qz, o->hi = N->qmax;
    snprintf(o->what, sizeof o->what, "%s", gdl__nn_label(m));
    return o->y;
}

/* relu(a + b): a residual block's end */
static int gdl__x_add_relu(gdl__xnet *N, const gdl_module *m, int a, int b) {
    gdl__xop *o;
    if (N->v[a].n != N->v[b].n || N->v[a].ndim != N->v[b].ndim || memcmp(N->v[a].d, N->v[b].d, sizeof N->v[a].d))
        return gdl__x_refuse(N, m, "its body's and shortcut's outputs differ in shape");
    if (!(o = gdl__x_op(N, GDL__XO_ADD, a, N->v[a].ndim, N->v[a].d))) return -1;
    o->x2 = b;
    o->act = GDL__XA_RELU;
    o->g[0] = (int)N->v[a].n;
    snprintf(o->what, sizeof o->what, "%s: relu(body + shortcut)", gdl__nn_label(m));
    return o->y;
}

/* a value sharing x's bytes with another shape (Flatten) */
static int gdl__x_alias(gdl__xnet *N, int x, int ndim, const int64_t *d) {
    int y = gdl__x_value(N, ndim, d, N->nop - 1);
    if (y >= 0) N->v[y].root = x;
    return y;
}

static int gdl__x_lower(gdl__xnet *N, gdl_module *m, int x);

/* the children of a Sequential in order, a Linear / Conv2d taking the BatchNorm and ReLU after it */
static int gdl__x_sequential(gdl__xnet *N, gdl_module *m, int x) {
    int i;
    for (i = 0; i < m->nchild && x >= 0; i++) {
        gdl_module *c = m->child[i], *bn = NULL;
        if (c->kind == GDL__M_LINEAR || c->kind == GDL__M_CONV2D) {
            int act = GDL__XA_NONE;
            if (i + 1 < m->nchild && m->child[i + 1]->kind == GDL__M_BATCHNORM) bn = m->child[++i];
            if (i + 1 < m->nchild && m->child[i + 1]->kind == GDL__M_RELU) act = GDL__XA_RELU, i++;
            x = gdl__x_layer(N, c, bn, act, x);
        } else {
            x = gdl__x_lower(N, c, x);
        }
    }
    return x;
}

static gdl_tensor *gdl__basic_block_forward(gdl_module *m, gdl_tensor *x); /* src/nn/resnet.h */

/* one module on value x: its output value, or -1 + error */
static int gdl__x_lower(gdl__xnet *N, gdl_module *m, int x) {
    const gdl__xval *v = &N->v[x];
    switch (m->kind) {
    case GDL__M_SEQUENTIAL: return gdl__x_sequential(N, m, x);
    case GDL__M_LINEAR:
    case GDL__M_CONV2D: return gdl__x_layer(N, m, NULL, GDL__XA_NONE, x);
    case GDL__M_BATCHNORM:
        return gdl__x_refuse(N, m, "BatchNorm is exported folded into the Linear / Conv2d right before it");
    case GDL__M_IDENTITY:
    case GDL__M_DROPOUT: return x; /* eval mode */
    case GDL__M_FLATTEN: {
        int64_t d[3], sd = m->ia[GDL__FLATTEN_START] < 0 ? m->ia[GDL__FLATTEN_START] + v->ndim + 1 : m->ia[GDL__FLATTEN_START], k, nd;
        if (sd < 0 || sd > v->ndim) return gdl__x_shape_error(N, m, x, "with the dim it flattens from");
        if (sd <= 1) { /* the batch dim is 1: flattening from 0 or 1 leaves the sample's elements */
            d[0] = v->n;
            return gdl__x_alias(N, x, 1, d);
        }
        for (k = 0, nd = 0; k < sd - 1; k++) d[nd++] = v->d[k];
        d[nd] = 1;
        for (k = sd - 1; k < v->ndim; k++) d[nd] *= v->d[k];
        return gdl__x_alias(N, x, (int)nd + 1, d);
    }
    case GDL__M_RELU: return gdl__x_act(N, m, x, GDL__XA_RELU);
    case GDL__M_LEAKY_RELU: return gdl__x_act(N, m, x, GDL__XA_LEAKY);
    case GDL__M_SIGMOID: return gdl__x_act(N, m, x, GDL__XA_SIGMOID);
    case GDL__M_TANH: return gdl__x_act(N, m, x, GDL__XA_TANH);
    case GDL__M_MAXPOOL:
    case GDL__M_AVGPOOL:
    case GDL__M_GAP: return gdl__x_pool(N, m, x);
    case GDL__M_RESIDUAL: {
        int y, s;
        if (N->int8) return gdl__x_refuse(N, m, "residual blocks are exported in f32 models only");
        if ((y = gdl__x_lower(N, m->child[0], x)) < 0) return -1;
        if ((s = m->ia[GDL__RES_SHORTCUT] ? gdl__x_lower(N, m->child[1], x) : x) < 0) return -1;
        return gdl__x_add_relu(N, m, y, s);
    }
    case GDL__M_CUSTOM:
        if (gdl__is_qlayer(m)) return gdl__x_qlayer(N, m, x);
        if (gdl__is_qprep(m))
            return gdl__x_refuse(N, m, "an observed layer: run gdl_quant_convert first (or export the float model)");
        if (m->fwd == gdl__basic_block_forward && m->nchild >= 4) {
            int y, s;
            if (N->int8) return gdl__x_refuse(N, m, "residual blocks are exported in f32 models only");
            if ((y = gdl__x_layer(N, m->child[0], m->child[1], GDL__XA_RELU, x)) < 0 ||
                (y = gdl__x_layer(N, m->child[2], m->child[3], GDL__XA_NONE, y)) < 0)
                return -1;
            if ((s = m->nchild > 4 ? gdl__x_lower(N, m->child[4], x) : x) < 0) return -1;
            return gdl__x_add_relu(N, m, y, s);
        }
        return gdl__x_refuse(N, m, "a custom module (its forward is user code)");
    default:
        return gdl__x_refuse(N, m, "the export takes Sequential, Linear, Conv2d (+ BatchNorm), ReLU, LeakyReLU, "
                                   "Sigmoid, Tanh, MaxPool2d, AvgPool2d, GlobalAvgPool2d, Flatten, Identity, "
                                   "Dropout, Residual, BasicBlock and static quantized layers");
    }
}

/* the first module of the tree in training mode, or NULL */
static const gdl_module *gdl__x_training(const gdl_module *m) {
    int i;
    if (m->training) return m;
    for (i = 0; i < m->nchild; i++) {
        const gdl_module *t = gdl__x_training(m->child[i]);
        if (t) return t;
    }
    return NULL;
}

static int gdl__x_root(const gdl__xnet *N, int v) {
    while (v >= 0 && N->v[v].root >= 0) v = N->v[v].root;
    return v;
}

/* Lifetimes and arena offsets: an elementwise op (activation, add, requantization) writes over its first
   input when nothing reads that later; the other values get the lowest offset that overlaps no value
   alive at the same time (the largest placed first). Returns the arena's bytes. */
static int64_t gdl__x_place(gdl__xnet *N, int input, int output, int esz) {
    int i, j, r, *order, *placed, np = 0;
    int64_t top = 0;
    for (i = 0; i < N->nop; i++) {
        const gdl__xop *o = &N->op[i];
        if (N->v[o->x].last < i) N->v[o->x].last = i;
        if (o->x2 >= 0 && N->v[o->x2].last < i) N->v[o->x2].last = i;
    }
    N->v[output].last = N->nop; /* copied out after the last op */
    for (i = 0; i < N->nv; i++) /* a root lives while any of its aliases does */
        if ((r = gdl__x_root(N, i)) != i && N->v[r].last < N->v[i].last) N->v[r].last = N->v[i].last;
    for (i = 0; i < N->nop; i++) {
        const gdl__xop *o = &N->op[i];
        if (o->kind != GDL__XO_ACT && o->kind != GDL__XO_ADD && o->kind != GDL__XO_REQUANT) continue;
        r = gdl__x_root(N, o->x);
        if (r == input || N->v[r].last != i) continue;
        N->v[o->y].root = r;
        N->v[r].last = N->v[o->y].last;
        for (j = 0; j < N->nv; j++) /* aliases of y made earlier than this decision */
            if (gdl__x_root(N, j) == r && N->v[j].last > N->v[r].last) N->v[r].last = N->v[j].last;
    }
    order = (int *)GPUDL_MALLOC(sizeof(int) * (size_t)(2 * N->nv + 1));
    if (!order) {
        gdl__set_error("%s: out of memory", N->fn);
        return -1;
    }
    placed = order + N->nv;
    for (i = 0; i < N->nv; i++) order[i] = i;
    for (i = 1; i < N->nv; i++) /* by size, the largest first (insertion sort: few values) */
        for (j = i; j > 0 && N->v[order[j]].n > N->v[order[j - 1]].n; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    for (i = 0; i < N->nv; i++) {
        gdl__xval *v = &N->v[order[i]];
        const int64_t bytes = v->n * esz;
        int64_t off = 0;
        int moved = 1;
        if (v->root >= 0 || order[i] == input) continue;
        while (moved) { /* first fit: past every live, overlapping value */
            moved = 0;
            for (j = 0; j < np; j++) {
                const gdl__xval *u = &N->v[placed[j]];
                const int64_t ub = u->n * esz;
                if (u->last < v->def || v->last < u->def) continue;     /* not alive together */
                if (off + bytes <= u->off || u->off + ub <= off) continue; /* apart */
                off = u->off + ub;
                moved = 1;
            }
        }
        v->off = off;
        placed[np++] = order[i];
        if (off + bytes > top) top = off + bytes;
    }
    GPUDL_FREE(order);
    return (top + 3) / 4 * 4;
}

/* ---- printing ---- */

typedef struct gdl__xbuf {
    char *p;
    size_t len, cap;
    int oom;
} gdl__xbuf;

static void gdl__xbuf_printf(gdl__xbuf *b, const char *fmt, ...) {
    va_list ap;
    int n;
    if (b->oom) return;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->p && b->len + (size_t)n < b->cap) break;
        {
            size_t nc = b->cap ? 2 * b->cap : 65536;
            char *q;
            while (nc <= b->len + (size_t)n) nc *= 2;
            if (!(q = (char *)GPUDL_REALLOC(b->p, nc))) {
                b->oom = 1;
                return;
            }
            b->p = q, b->cap = nc;
        }
    }
    b->len += (size_t)n;
}

/* an array's initialiser, 8 (floats) or 16 (integers) to a line */
static void gdl__x_floats_out(gdl__xbuf *b, const char *pre, int id, const char *what, const float *v, int64_t n) {
    int64_t i;
    gdl__xbuf_printf(b, "static const float %s__%s%d[%lld] = {", pre, what, id, (long long)n);
    for (i = 0; i < n; i++) gdl__xbuf_printf(b, "%s%.8ef%s", i % 8 ? " " : "\n    ", (double)v[i], i + 1 < n ? "," : "");
    gdl__xbuf_printf(b, "\n};\n");
}
static void gdl__x_ints_out(gdl__xbuf *b, const char *type, const char *pre, int id, const char *what,
                            const int8_t *v8, const int32_t *v32, int64_t n) {
    int64_t i;
    gdl__xbuf_printf(b, "static const %s %s__%s%d[%lld] = {", type, pre, what, id, (long long)n);
    for (i = 0; i < n; i++)
        gdl__xbuf_printf(b, "%s%ld%s", i % 16 ? " " : "\n    ", v8 ? (long)v8[i] : (long)v32[i], i + 1 < n ? "," : "");
    gdl__xbuf_printf(b, "\n};\n");
}


/* The kernels of the exported file, '$' standing for its prefix. Plain loops: the compiler of the target
   schedules them; what matters here is that they are exact, small and allocation free. */
static const char gdl__x_k_linear[] =
    "static void $__linear(const float *x, float *y, const float *w, const float *b, int rows, int in, int out,\n"
    "                      int relu) {\n"
    "    int r, n, k;\n"
    "    for (r = 0; r < rows; r++, x += in, y += out)\n"
    "        for (n = 0; n < out; n++) {\n"
    "            const float *wn = w + (size_t)n * (size_t)in;\n"
    "            float s = 0.0f;\n"
    "            for (k = 0; k < in; k++) s += x[k] * wn[k];\n"
    "            s += b[n];\n"
    "            y[n] = relu && s < 0.0f ? 0.0f : s;\n"
    "        }\n"
    "}\n";
/* g: C, H, W, OC, KH, KW, SH, SW, PH, PW, DH, DW, groups, OH, OW */
static const char gdl__x_k_conv[] =
    "static void $__conv(const float *x, float *y, const float *w, const float *b, const int *g, int relu) {\n"
    "    const int H = g[1], W = g[2], OC = g[3], KH = g[4], KW = g[5], OH = g[13], OW = g[14];\n"
    "    const int cg = g[0] / g[12], og = OC / g[12];\n"
    "    int oc, oh, ow, c, i, j;\n"
    "    for (oc = 0; oc < OC; oc++)\n"
    "        for (oh = 0; oh < OH; oh++)\n"
    "            for (ow = 0; ow < OW; ow++) {\n"
    "                const float *xc = x + (size_t)(oc / og * cg) * (size_t)(H * W);\n"
    "                const float *wc = w + (size_t)oc * (size_t)(cg * KH * KW);\n"
    "                int t[4];\n"
    "                float s = 0.0f;\n"
    "                $__taps(oh * g[6] - g[8], g[10], H, KH, t);\n"
    "                $__taps(ow * g[7] - g[9], g[11], W, KW, t + 2);\n"
    "                for (c = 0; c < cg; c++, xc += H * W, wc += KH * KW)\n"
    "                    for (i = t[0]; i < t[1]; i++) {\n"
    "                        const float *xr = xc + (oh * g[6] - g[8] + i * g[10]) * W + ow * g[7] - g[9];\n"
    "                        for (j = t[2]; j < t[3]; j++) s += xr[j * g[11]] * wc[i * KW + j];\n"
    "                    }\n"
    "                s += b[oc];\n"
    "                y[((size_t)oc * (size_t)OH + (size_t)oh) * (size_t)OW + (size_t)ow] = relu && s < 0.0f ? 0.0f : s;\n"
    "            }\n"
    "}\n";
/* the taps k of a window starting at p0 (dilation d, k taps) that fall inside [0, n): [t[0], t[1]) */
static const char gdl__x_k_taps[] =
    "static void $__taps(int p0, int d, int n, int k, int *t) {\n"
    "    t[0] = p0 < 0 ? (-p0 + d - 1) / d : 0;\n"
    "    t[1] = n - p0 <= 0 ? 0 : (n - p0 - 1) / d + 1;\n"
    "    if (t[1] > k) t[1] = k;\n"
    "    if (t[1] < t[0]) t[1] = t[0];\n"
    "}\n";
/* g: C, H, W, KH, KW, SH, SW, PH, PW, OH, OW; the taps in the padding are skipped (max) or count as 0 (avg) */
static const char gdl__x_k_pool[] =
    "static void $__pool(const float *x, float *y, const int *g, int avg) {\n"
    "    const int H = g[1], W = g[2], OH = g[9], OW = g[10];\n"
    "    int c, oh, ow, i, j;\n"
    "    for (c = 0; c < g[0]; c++, x += H * W)\n"
    "        for (oh = 0; oh < OH; oh++)\n"
    "            for (ow = 0; ow < OW; ow++) {\n"
    "                float s = 0.0f;\n"
    "                int first = 1;\n"
    "                for (i = 0; i < g[3]; i++) {\n"
    "                    const int ih = oh * g[5] - g[7] + i;\n"
    "                    if (ih < 0 || ih >= H) continue;\n"
    "                    for (j = 0; j < g[4]; j++) {\n"
    "                        const int iw = ow * g[6] - g[8] + j;\n"
    "                        float v;\n"
    "                        if (iw < 0 || iw >= W) continue;\n"
    "                        v = x[ih * W + iw];\n"
    "                        if (avg) s += v;\n"
    "                        else if (first || v > s) s = v;\n"
    "                        first = 0;\n"
    "                    }\n"
    "                }\n"
    "                *y++ = avg ? s / (float)(g[3] * g[4]) : s;\n"
    "            }\n"
    "}\n";
static const char gdl__x_k_add[] =
    "static void $__add_relu(const float *a, const float *b, float *y, int n) {\n"
    "    int i;\n"
    "    for (i = 0; i < n; i++) {\n"
    "        const float s = a[i] + b[i];\n"
    "        y[i] = s < 0.0f ? 0.0f : s;\n"
    "    }\n"
    "}\n";
/* exp(x) for x <= 0 without libm: x = n ln2 + r, |r| <= ln2 / 2 (ln2 in two parts, so n ln2 is exact), e^r
   by its Taylor polynomial of degree 7 (relative error under 1e-7 there), 2^n put in the exponent bits */
static const char gdl__x_k_exp[] =
    "static float $__exp(float x) {\n"
    "    float r, p, s;\n"
    "    uint32_t bits;\n"
    "    int n;\n"
    "    if (x < -87.0f) return 0.0f;\n"
    "    n = -(int)(-x * 1.44269504f + 0.5f);\n"
    "    r = (x - (float)n * 0.693145751953125f) - (float)n * 1.428606765330187e-06f;\n"
    "    p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 +\n"
    "        r * (1.0f / 720 + r * (1.0f / 5040)))))));\n"
    "    bits = (uint32_t)(n + 127) << 23;\n"
    "    memcpy(&s, &bits, sizeof s);\n"
    "    return p * s;\n"
    "}\n";
static const char gdl__x_k_softmax[] =
    "static void $__softmax(float *y, int n) {\n"
    "    float m = y[0], s = 0.0f;\n"
    "    int i;\n"
    "    for (i = 1; i < n; i++) m = y[i] > m ? y[i] : m;\n"
    "    for (i = 0; i < n; i++) s += (y[i] = $__exp(y[i] - m));\n"
    "    for (i = 0; i < n; i++) y[i] /= s;\n"
    "}\n";
/* INT8: r = round(acc * mult / 2^rs), half away from zero, + the zero point, clamped to [lo, hi]: CMSIS-NN's
   and TFLite's multiplier (an int32 fraction of 2^31) and shift, applied as one 64-bit product and one rounding
   shift. TFLite and CMSIS-NN by default round twice (a doubling high multiply, then a rounding divide by a
   power of two); CMSIS-NN's CMSIS_NN_USE_SINGLE_ROUNDING rounds once, half up. */
static const char gdl__x_k_rq[] =
    "static uint8_t $__rq(int32_t acc, int32_t mult, int rs, int32_t zy, int32_t lo, int32_t hi) {\n"
    "    const int64_t p = (int64_t)acc * mult, h = (int64_t)1 << (rs - 1);\n"
    "    int64_t r = p >= 0 ? (p + h) >> rs : -((-p + h) >> rs);\n"
    "    r += zy;\n"
    "    return (uint8_t)(r < lo ? lo : r > hi ? hi : r);\n"
    "}\n";
/* the zero point of x is in b (b[n] - zx * sum_k w[n][k]) */
static const char gdl__x_k_qlinear[] =
    "static void $__qlinear(const uint8_t *x, uint8_t *y, const int8_t *w, const int32_t *b, const int32_t *mult,\n"
    "                       const int8_t *rs, int per_channel, int rows, int in, int out, int32_t zy, int32_t lo,\n"
    "                       int32_t hi) {\n"
    "    int r, n, k;\n"
    "    for (r = 0; r < rows; r++, x += in, y += out)\n"
    "        for (n = 0; n < out; n++) {\n"
    "            const int8_t *wn = w + (size_t)n * (size_t)in;\n"
    "            const int c = per_channel ? n : 0;\n"
    "            int32_t s = b[n], s1 = 0, s2 = 0, s3 = 0;\n"
    "            for (k = 0; k + 4 <= in; k += 4) { /* four sums: fewer loop steps, independent adds */\n"
    "                s += (int32_t)x[k] * wn[k];\n"
    "                s1 += (int32_t)x[k + 1] * wn[k + 1];\n"
    "                s2 += (int32_t)x[k + 2] * wn[k + 2];\n"
    "                s3 += (int32_t)x[k + 3] * wn[k + 3];\n"
    "            }\n"
    "            for (; k < in; k++) s += (int32_t)x[k] * wn[k];\n"
    "            s += s1 + s2 + s3;\n"
    "            y[n] = $__rq(s, mult[c], rs[c], zy, lo, hi);\n"
    "        }\n"
    "}\n";
static const char gdl__x_k_qconv[] =
    "static void $__qconv(const uint8_t *x, uint8_t *y, const int8_t *w, const int32_t *b, const int32_t *mult,\n"
    "                     const int8_t *rs, int per_channel, const int *g, int32_t zx, int32_t zy, int32_t lo,\n"
    "                     int32_t hi) {\n"
    "    const int C = g[0], H = g[1], W = g[2], OC = g[3], KH = g[4], KW = g[5], OH = g[13], OW = g[14];\n"
    "    int oc, oh, ow, c, i, j;\n"
    "    for (oc = 0; oc < OC; oc++) {\n"
    "        const int m = per_channel ? oc : 0;\n"
    "        for (oh = 0; oh < OH; oh++)\n"
    "            for (ow = 0; ow < OW; ow++) {\n"
    "                const uint8_t *xc = x;\n"
    "                const int8_t *wc = w + (size_t)oc * (size_t)(C * KH * KW);\n"
    "                int t[4];\n"
    "                int32_t s = b[oc];\n"
    "                $__taps(oh * g[6] - g[8], g[10], H, KH, t);\n"
    "                $__taps(ow * g[7] - g[9], g[11], W, KW, t + 2);\n"
    "                for (c = 0; c < C; c++, xc += H * W, wc += KH * KW)\n"
    "                    for (i = t[0]; i < t[1]; i++) {\n"
    "                        const uint8_t *xr = xc + (oh * g[6] - g[8] + i * g[10]) * W + ow * g[7] - g[9];\n"
    "                        for (j = t[2]; j < t[3]; j++) s += ((int32_t)xr[j * g[11]] - zx) * wc[i * KW + j];\n"
    "                    }\n"
    "                *y++ = $__rq(s, mult[m], rs[m], zy, lo, hi);\n"
    "            }\n"
    "    }\n"
    "}\n";
/* max over the window, or the mean of (x - z) rounded half away from zero, + z (taps in the padding: 0) */
static const char gdl__x_k_qpool[] =
    "static void $__qpool(const uint8_t *x, uint8_t *y, const int *g, int avg, int32_t z, int32_t hi) {\n"
    "    const int H = g[1], W = g[2], OH = g[9], OW = g[10], d = g[3] * g[4];\n"
    "    int c, oh, ow, i, j;\n"
    "    for (c = 0; c < g[0]; c++, x += H * W)\n"
    "        for (oh = 0; oh < OH; oh++)\n"
    "            for (ow = 0; ow < OW; ow++) {\n"
    "                int32_t s = 0, m = 0;\n"
    "                for (i = 0; i < g[3]; i++) {\n"
    "                    const int ih = oh * g[5] - g[7] + i;\n"
    "                    if (ih < 0 || ih >= H) continue;\n"
    "                    for (j = 0; j < g[4]; j++) {\n"
    "                        const int iw = ow * g[6] - g[8] + j;\n"
    "                        if (iw < 0 || iw >= W) continue;\n"
    "                        s += (int32_t)x[ih * W + iw] - z;\n"
    "                        if (x[ih * W + iw] > m) m = x[ih * W + iw];\n"
    "                    }\n"
    "                }\n"
    "                if (avg) {\n"
    "                    m = z + (s >= 0 ? (s + d / 2) / d : -((-s + d / 2) / d));\n"
    "                    m = m < 0 ? 0 : m > hi ? hi : m;\n"
    "                }\n"
    "                *y++ = (uint8_t)m;\n"
    "            }\n"
    "}\n";
static const char gdl__x_k_qrelu[] =
    "static void $__qrelu(const uint8_t *x, uint8_t *y, int n, uint8_t z) {\n"
    "    int i;\n"
    "    for (i = 0; i < n; i++) y[i] = x[i] < z ? z : x[i];\n"
    "}\n";
static const char gdl__x_k_requant[] =
    "static void $__requant(const uint8_t *x, uint8_t *y, int n, int32_t mult, int rs, int32_t zx, int32_t zy,\n"
    "                       int32_t hi) {\n"
    "    int i;\n"
    "    for (i = 0; i < n; i++) y[i] = $__rq((int32_t)x[i] - zx, mult, rs, zy, 0, hi);\n"
    "}\n";

/* text with every '$' replaced by pre */
static void gdl__x_src(gdl__xbuf *b, const char *pre, const char *text) {
    const char *p;
    while ((p = strchr(text, '$'))) {
        gdl__xbuf_printf(b, "%.*s%s", (int)(p - text), text, pre);
        text = p + 1;
    }
    gdl__xbuf_printf(b, "%s", text);
}

/* the f32 activation kernel, with the cases the model uses (Sigmoid and Tanh call libm) */
static void gdl__x_act_src(gdl__xbuf *b, const char *pre, const int *used) {
    gdl__xbuf_printf(b, "static void %s__act(const float *x, float *y, int n, int act, float slope) {\n"
                        "    int i;\n    (void)slope;\n    for (i = 0; i < n; i++) {\n        float v = x[i];\n"
                        "        switch (act) {\n", pre);
    if (used[GDL__XA_RELU]) gdl__xbuf_printf(b, "        case %d: v = v < 0.0f ? 0.0f : v; break;\n", GDL__XA_RELU);
    if (used[GDL__XA_LEAKY]) gdl__xbuf_printf(b, "        case %d: v = v < 0.0f ? v * slope : v; break;\n", GDL__XA_LEAKY);
    if (used[GDL__XA_SIGMOID])
        gdl__xbuf_printf(b, "        case %d: v = 1.0f / (1.0f + expf(-v)); break;\n", GDL__XA_SIGMOID);
    if (used[GDL__XA_TANH]) gdl__xbuf_printf(b, "        case %d: v = tanhf(v); break;\n", GDL__XA_TANH);
    gdl__xbuf_printf(b, "        default: break;\n        }\n        y[i] = v;\n    }\n}\n");
}

/* the pointer expression of value v in NAME_run */
static void gdl__x_ptr(const gdl__xnet *N, int v, int input, int esz, char *s, size_t n) {
    const int r = gdl__x_root(N, v);
    if (r == input) snprintf(s, n, "input");
    else snprintf(s, n, "A + %lld", (long long)(N->v[r].off / esz));
}

/* the weights' arrays and the kernels the ops use; the bytes of the arrays */
static int64_t gdl__x_print_data(gdl__xbuf *b, const gdl__xnet *N, const char *pre, int softmax) {
    /* the kernel of each GDL__XO_ kind, f32 and INT8 (f32 activations: gdl__x_act_src) */
    static const char *const kernels[2][7] = {
        {gdl__x_k_linear, gdl__x_k_conv, gdl__x_k_pool, gdl__x_k_pool, NULL, gdl__x_k_add, NULL},
        {gdl__x_k_qlinear, gdl__x_k_qconv, gdl__x_k_qpool, gdl__x_k_qpool, gdl__x_k_qrelu, NULL, gdl__x_k_requant}};
    int i, used[8] = {0}, act_used[GDL__XA_COUNT] = {0};
    int64_t bytes = 0;
    for (i = 0; i < N->nop; i++) {
        const gdl__xop *o = &N->op[i];
        used[o->kind] = 1;
        if (o->kind == GDL__XO_ACT) act_used[o->act] = 1;
        if (o->kind == GDL__XO_CONV || o->kind == GDL__XO_MAXPOOL || o->kind == GDL__XO_AVGPOOL) {
            int k, ng = o->kind == GDL__XO_CONV ? 15 : 11;
            gdl__xbuf_printf(b, "static const int %s__g%d[%d] = {", pre, i, ng);
            for (k = 0; k < ng; k++) gdl__xbuf_printf(b, "%d%s", o->g[k], k + 1 < ng ? ", " : "};\n");
            bytes += 4 * ng;
        }
        if (o->w) {
            gdl__x_floats_out(b, pre, i, "w", o->w, o->nw);
            gdl__x_floats_out(b, pre, i, "b", o->b, o->nb);
            bytes += 4 * (o->nw + o->nb);
        }
        if (o->qw) {
            int64_t k;
            gdl__xbuf_printf(b, "/* op %d's weights: real value = w * scale, %s (the multipliers m%d hold them):", i,
                             o->nmult > 1 ? "a scale per output channel" : "one scale", i);
            for (k = 0; k < o->nmult; k++) gdl__xbuf_printf(b, "%s%.8g", k % 8 ? " " : "\n   ", (double)o->wscale[k]);
            gdl__xbuf_printf(b, " */\n");
            gdl__x_ints_out(b, "int8_t", pre, i, "w", o->qw, NULL, o->nw);
            gdl__x_ints_out(b, "int32_t", pre, i, "b", NULL, o->qb, o->nb);
            bytes += o->nw + 4 * o->nb;
        }
        if (o->qw) {
            gdl__x_ints_out(b, "int32_t", pre, i, "m", NULL, o->mult, o->nmult);
            gdl__x_ints_out(b, "int8_t", pre, i, "s", o->shift, NULL, o->nmult);
            bytes += 5 * o->nmult;
        }
    }
    gdl__xbuf_printf(b, "\n");
    if (N->int8) gdl__x_src(b, pre, gdl__x_k_rq); /* the helpers first */
    if (used[GDL__XO_CONV]) gdl__x_src(b, pre, gdl__x_k_taps);
    for (i = 0; i < 7; i++) { /* each kernel once (both pools share one) */
        const char *k = kernels[N->int8][i];
        if (used[i] && k && !(i == GDL__XO_AVGPOOL && used[GDL__XO_MAXPOOL])) gdl__x_src(b, pre, k);
    }
    if (!N->int8 && used[GDL__XO_ACT]) gdl__x_act_src(b, pre, act_used);
    if (softmax) gdl__x_src(b, pre, N->no_libm ? gdl__x_k_exp : "static float $__exp(float x) { return expf(x); }\n");
    if (softmax) gdl__x_src(b, pre, gdl__x_k_softmax);
    return bytes;
}

/* one kernel call of NAME_run */
static void gdl__x_print_call(gdl__xbuf *b, const gdl__xnet *N, const char *pre, int i, int input, int esz) {
    const gdl__xop *o = &N->op[i];
    char x[64], x2[64], y[64], what[sizeof o->what];
    size_t k;
    gdl__x_ptr(N, o->x, input, esz, x, sizeof x);
    gdl__x_ptr(N, o->y, input, esz, y, sizeof y);
    /* module names are the user's: a '/' beside a '*' in one would end the comment or open another */
    for (k = 0; o->what[k]; k++)
        what[k] = o->what[k] == '/' && ((k && o->what[k - 1] == '*') || o->what[k + 1] == '*') ? '|' : o->what[k];
    what[k] = 0;
    gdl__xbuf_printf(b, "    /* %d: %s */\n    ", i, what);
    if (N->int8) {
        switch (o->kind) {
        case GDL__XO_LINEAR:
            gdl__xbuf_printf(b, "%s__qlinear(%s, %s, %s__w%d, %s__b%d, %s__m%d, %s__s%d, %d, %d, %d, %d, %d, %d, %d);\n",
                             pre, x, y, pre, i, pre, i, pre, i, pre, i, o->nmult > 1, o->g[0], o->g[1], o->g[2],
                             (int)o->zy, (int)o->lo, (int)o->hi);
            break;
        case GDL__XO_CONV:
            gdl__xbuf_printf(b, "%s__qconv(%s, %s, %s__w%d, %s__b%d, %s__m%d, %s__s%d, %d, %s__g%d, %d, %d, %d, %d);\n",
                             pre, x, y, pre, i, pre, i, pre, i, pre, i, o->nmult > 1, pre, i, (int)o->zx, (int)o->zy,
                             (int)o->lo, (int)o->hi);
            break;
        case GDL__XO_MAXPOOL:
        case GDL__XO_AVGPOOL:
            gdl__xbuf_printf(b, "%s__qpool(%s, %s, %s__g%d, %d, %d, %d);\n", pre, x, y, pre, i,
                             o->kind == GDL__XO_AVGPOOL, (int)o->zy, (int)o->hi);
            break;
        case GDL__XO_ACT: gdl__xbuf_printf(b, "%s__qrelu(%s, %s, %d, %d);\n", pre, x, y, o->g[0], (int)o->lo); break;
        default:
            gdl__xbuf_printf(b, "%s__requant(%s, %s, %d, %ld, %d, %d, %d, %d);\n", pre, x, y, o->g[0], (long)o->mult[0],
                             (int)o->shift[0], (int)o->zx, (int)o->zy, (int)o->hi);
        }
        return;
    }
    switch (o->kind) {
    case GDL__XO_LINEAR:
        gdl__xbuf_printf(b, "%s__linear(%s, %s, %s__w%d, %s__b%d, %d, %d, %d, %d);\n", pre, x, y, pre, i, pre, i,
                         o->g[0], o->g[1], o->g[2], o->act == GDL__XA_RELU);
        break;
    case GDL__XO_CONV:
        gdl__xbuf_printf(b, "%s__conv(%s, %s, %s__w%d, %s__b%d, %s__g%d, %d);\n", pre, x, y, pre, i, pre, i, pre, i,
                         o->act == GDL__XA_RELU);
        break;
    case GDL__XO_MAXPOOL:
    case GDL__XO_AVGPOOL:
        gdl__xbuf_printf(b, "%s__pool(%s, %s, %s__g%d, %d);\n", pre, x, y, pre, i, o->kind == GDL__XO_AVGPOOL);
        break;
    case GDL__XO_ACT:
        gdl__xbuf_printf(b, "%s__act(%s, %s, %d, %d, %.8ef);\n", pre, x, y, o->g[0], o->act, (double)o->slope);
        break;
    default:
        gdl__x_ptr(N, o->x2, input, esz, x2, sizeof x2);
        gdl__xbuf_printf(b, "%s__add_relu(%s, %s, %s, %d);\n", pre, x, x2, y, o->g[0]);
    }
}

/* the file: the declarations, then behind NAME_IMPLEMENTATION the data, kernels and NAME_run */
static void gdl__x_print(gdl__xbuf *b, const gdl__xnet *N, const char *pre, const char *up, const int64_t *ishape,
                         int ndim, int input, int output, int softmax, gdl_export_c_info *inf) {
    const int esz = N->int8 ? 1 : 4;
    const char *t = N->int8 ? "uint8_t" : "float";
    const int libm = !N->int8 && !N->no_libm;
    char shp[160], y[64];
    int i;
    size_t k = 0;
    shp[0] = 0;
    for (i = 0; i < ndim && k + 24 < sizeof shp; i++) k += (size_t)snprintf(shp + k, sizeof shp - k, "%s%lld", i ? "," : "", (long long)ishape[i]);
    gdl__xbuf_printf(b, "/* %s.h: an %s network for microcontrollers, written by gpudl %s (gdl_export_c): one\n"
                        "   self-contained C99 file, stb-style. In ONE C file of the program:\n"
                        "       #define %s_IMPLEMENTATION\n       #include \"%s.h\"\n"
                        "   elsewhere only the #include. %s_run(input, output) computes the forward of one sample\n"
                        "   (input [%s], %lld values; output %lld values) in a static arena of %s_ARENA_BYTES: no\n"
                        "   malloc, no stdio, no threads; not reentrant (one call at a time).\n"
                        "   Includes <stdint.h>, <stddef.h>, <string.h>%s.\n",
                     pre, N->int8 ? "INT8 (integer arithmetic only)" : "f32", GPUDL_VERSION, up, pre, pre, shp,
                     (long long)inf->input_size, (long long)inf->output_size, up, libm ? ", <math.h>" : "");
    if (N->int8)
        gdl__xbuf_printf(b, "   The input is u8: q = clamp(round(x / %s_INPUT_SCALE) + %s_INPUT_ZERO_POINT, 0,\n"
                            "   %s_INPUT_QMAX); the output u8, real value (q - %s_OUTPUT_ZERO_POINT) * %s_OUTPUT_SCALE.\n",
                         up, up, up, up, up);
    if (softmax) gdl__xbuf_printf(b, "   The output is softmax(logits)%s.\n", N->no_libm ? ", exp by a polynomial (no libm)" : "");
    gdl__xbuf_printf(b, "   The ops are listed in %s_run. */\n#ifndef %s_H_INCLUDED\n#define %s_H_INCLUDED\n"
                        "#include <stdint.h>\n#include <stddef.h>\n\n", pre, up, up);
    gdl__xbuf_printf(b, "#define %s_INPUT_SIZE %lld\n#define %s_OUTPUT_SIZE %lld\n#define %s_ARENA_BYTES %lld\n"
                        "#define %s_WEIGHT_BYTES %lld\n#define %s_INT8 %d\n",
                     up, (long long)inf->input_size, up, (long long)inf->output_size, up, (long long)inf->arena_bytes,
                     up, (long long)inf->weight_bytes, up, N->int8);
    if (N->int8)
        gdl__xbuf_printf(b, "#define %s_INPUT_SCALE %.8ef\n#define %s_INPUT_ZERO_POINT %d\n#define %s_INPUT_QMAX %d\n"
                            "#define %s_OUTPUT_SCALE %.8ef\n#define %s_OUTPUT_ZERO_POINT %d\n",
                         up, (double)N->in_s, up, (int)N->in_z, up, N->in_qmax, up, (double)N->out_s, up, (int)N->out_z);
    gdl__xbuf_printf(b, "\n#ifdef __cplusplus\nextern \"C\" {\n#endif\nvoid %s_run(const %s *input, %s *output);\n"
                        "#ifdef __cplusplus\n}\n#endif\n#endif /* %s_H_INCLUDED */\n\n#ifdef %s_IMPLEMENTATION\n"
                        "#include <string.h>\n%s\n",
                     pre, t, t, up, up, libm ? "#include <math.h>\n" : "");
    gdl__x_print_data(b, N, pre, softmax);
    gdl__xbuf_printf(b, "\nstatic %s %s__arena[%lld];\n\nvoid %s_run(const %s *input, %s *output) {\n    %s *A = %s__arena;\n",
                     t, pre, (long long)(inf->arena_bytes / esz), pre, t, t, t, pre);
    for (i = 0; i < N->nop; i++) gdl__x_print_call(b, N, pre, i, input, esz);
    gdl__x_ptr(N, output, input, esz, y, sizeof y);
    gdl__xbuf_printf(b, "    memcpy(output, %s, sizeof(%s) * %lld);\n", y, t, (long long)inf->output_size);
    if (softmax) gdl__xbuf_printf(b, "    %s__softmax(output, %lld);\n", pre, (long long)inf->output_size);
    gdl__xbuf_printf(b, "}\n#endif /* %s_IMPLEMENTATION */\n", up);
}

/* buf written to path.tmp.<pid>.<n>, then renamed over path; the temporary removed on failure */
static int gdl__x_write(const char *fn, const char *path, const char *p, size_t n) {
    static unsigned counter;
    const size_t tl = strlen(path) + 64;
    char *tmp = (char *)GPUDL_MALLOC(tl);
    FILE *f;
    int ok;
    if (!tmp) {
        gdl__set_error("%s: %s: out of memory", fn, path);
        return -1;
    }
    snprintf(tmp, tl, "%s.tmp.%ld.%u", path, gdl__os_pid(), ++counter);
    if (!(f = fopen(tmp, "wb"))) {
        gdl__set_error("%s: %s: cannot create the temporary %s: %s", fn, path, tmp, gdl__strerr(errno));
        GPUDL_FREE(tmp);
        return -1;
    }
    errno = 0;
    ok = fwrite(p, 1, n, f) == n && fflush(f) == 0 && gdl__os_fsync(f) == 0;
    if (fclose(f) != 0) ok = 0;
    if (!ok) gdl__set_error("%s: %s: writing the temporary %s failed: %s", fn, path, tmp, gdl__strerr(errno));
    else if (gdl__os_replace(tmp, path) != 0) {
        gdl__set_error("%s: %s: cannot rename %s over it: %s", fn, path, tmp, gdl__strerr(errno));
        ok = 0;
    }
    if (!ok) remove(tmp);
    GPUDL_FREE(tmp);
    return ok ? 0 : -1;
}

GPUDL_API gdl_export_c_opts gdl_export_c_defaults(void) {
    gdl_export_c_opts o;
    memset(&o, 0, sizeof o);
    o.name = "model";
    o.report = stdout;
    return o;
}

/* checks the arguments; fills the prefix and its upper case. 0 / -1 */
static int gdl__x_args(const char *fn, gdl_module *m, int ndim, const int64_t *shape, const char *path,
                       const gdl_export_c_opts *o, char *pre, char *up) {
    const char *s = o->name;
    int i;
    if (!m) return gdl__null_arg(fn, "model"), -1;
    if (!shape) return gdl__null_arg(fn, "input_shape"), -1;
    if (!path) return gdl__null_arg(fn, "path"), -1;
    if (ndim < 2 || ndim > 4 || shape[0] != 1) {
        gdl__set_error("%s: input_shape must be the batch (1) and 1 to 3 dims of a sample, got %d dims%s", fn, ndim,
                       ndim >= 1 && shape[0] != 1 ? " with a batch other than 1" : "");
        return -1;
    }
    for (i = 1; i < ndim; i++)
        if (shape[i] < 1 || shape[i] > INT32_MAX) {
            gdl__set_error("%s: input_shape[%d] = %lld is not a positive int", fn, i, (long long)shape[i]);
            return -1;
        }
    if (!s || !*s || strlen(s) > 48 || (s[0] >= '0' && s[0] <= '9')) {
        gdl__set_error("%s: name \"%s\" must be a C identifier of at most 48 characters", fn, s ? s : "(null)");
        return -1;
    }
    for (i = 0; s[i]; i++) {
        const int lower = s[i] >= 'a' && s[i] <= 'z';
        if (!lower && !(s[i] >= 'A' && s[i] <= 'Z') && !(s[i] >= '0' && s[i] <= '9') && s[i] != '_') {
            gdl__set_error("%s: name \"%s\" must be a C identifier (letters, digits, '_')", fn, s);
            return -1;
        }
        pre[i] = s[i];
        up[i] = (char)(lower ? s[i] - 'a' + 'A' : s[i]);
    }
    pre[i] = up[i] = 0;
    return 0;
}

GPUDL_API int gdl_export_c(gdl_module *m, int ndim, const int64_t *input_shape, const char *path,
                           const gdl_export_c_opts *opts, gdl_export_c_info *info) {
    static const char fn[] = "gdl_export_c";
    const gdl_export_c_opts o = opts ? *opts : gdl_export_c_defaults();
    gdl__xnet N;
    gdl__xbuf b;
    gdl_export_c_info inf;
    const gdl_module *tr;
    char pre[64], up[64];
    int input, output, rc = -1;
    memset(&N, 0, sizeof N);
    memset(&b, 0, sizeof b);
    memset(&inf, 0, sizeof inf);
    if (gdl__x_args(fn, m, ndim, input_shape, path, &o, pre, up) < 0) return -1;
    if ((tr = gdl__x_training(m))) {
        gdl__set_error("%s: %s is in training mode: export a model in eval mode (gdl_module_train(model, 0)), "
                       "whose dropout is the identity and whose BatchNorm uses its running statistics",
                       fn, gdl__nn_label(tr));
        return -1;
    }
    N.fn = fn;
    N.int8 = gdl_module_is_quantized(m);
    N.no_libm = o.no_libm != 0;
    if (N.int8 && o.softmax) {
        gdl__set_error("%s: softmax (opts.softmax) has no INT8 form: export without it and take the argmax of the "
                       "u8 outputs (or a softmax of their dequantized values)", fn);
        return -1;
    }
    if ((input = gdl__x_value(&N, ndim - 1, input_shape + 1, -1)) < 0 || (output = gdl__x_lower(&N, m, input)) < 0)
        goto done;
    if (gdl__x_root(&N, output) == input || N.nop == 0) {
        gdl__set_error("%s: %s computes nothing (its output is its input)", fn, gdl__nn_label(m));
        goto done;
    }
    N.out_s = N.qs, N.out_z = N.qz;
    inf.int8 = N.int8;
    inf.nops = N.nop;
    inf.input_size = N.v[input].n;
    inf.output_size = N.v[output].n;
    if ((inf.arena_bytes = gdl__x_place(&N, input, output, N.int8 ? 1 : 4)) < 0) goto done;
    { /* the weights' bytes: a dry print of the data */
        gdl__xbuf dry;
        memset(&dry, 0, sizeof dry);
        inf.weight_bytes = gdl__x_print_data(&dry, &N, pre, o.softmax);
        GPUDL_FREE(dry.p);
    }
    gdl__x_print(&b, &N, pre, up, input_shape, ndim, input, output, o.softmax, &inf);
    if (b.oom) {
        gdl__set_error("%s: %s: out of memory", fn, path);
        goto done;
    }
    if (gdl__x_write(fn, path, b.p, b.len) < 0) goto done;
    if (o.report)
        fprintf(o.report, "%s: %s: %s, %s, %d ops, input %lld, output %lld, weights %lld bytes, arena %lld bytes "
                          "(%s_ARENA_BYTES)\n", fn, path, pre, N.int8 ? "int8" : "f32", inf.nops,
                (long long)inf.input_size, (long long)inf.output_size, (long long)inf.weight_bytes,
                (long long)inf.arena_bytes, up);
    if (info) *info = inf;
    rc = 0;
done:
    gdl__x_free(&N);
    GPUDL_FREE(b.p);
    return rc;
}
