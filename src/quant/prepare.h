/* src/quant/prepare.h — observed layers (prepare / calibrate), model copies
   and weight tying in copies. */

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
    y = o->conv ? gdl_conv2d_ex(x, w, gdl__nn_param(m, 1), s, p, d, (int)m->ia[GDL__CONV_GROUPS])
                : gdl_linear(x, w, gdl__nn_param(m, 1));
    if (y && o->relu) y = gdl_relu(y);
    if (y && observe && !o->frozen && gdl__qobs_add(gdl__nn_label(m), &o->out, y) < 0) return NULL;
    return o->qat ? gdl__qprep_fq(o, &o->out, y) : y;
}

static int gdl__is_qprep(const gdl_module *m) { return m && m->kind == GDL__M_CUSTOM && m->fwd == gdl__qprep_forward; }

/* Folds BatchNorm2d bn (eval: running statistics) into the Conv2d weight and bias of m, as
   torch.nn.utils.fuse_conv_bn_eval: w' = w * g / sqrt(var + eps) per output channel, b' = (b - mean) * g /
   sqrt(var + eps) + beta (a missing bias taken as 0 and added). 0 / -1. */
static int gdl__qprep_fold_bn(const char *op, gdl_module *m, const gdl_module *bn) {
    const int64_t C = m->ia[GDL__CONV_OUT];
    const gdl_tensor *st[4]; /* running mean and variance, weight and bias (NULL when not affine) */
    gdl_real *tmp[4] = {NULL, NULL, NULL, NULL};
    const gdl_real *h[4] = {NULL, NULL, NULL, NULL};
    gdl_tensor *w = gdl__nn_param(m, 0), *b = gdl__nn_param(m, 1);
    const gdl_device dev = w->device;
    int64_t c, i, per;
    int k, rc = 0;
    st[0] = gdl__nn_buffer(bn, 0);
    st[1] = gdl__nn_buffer(bn, 1);
    st[2] = bn->ia[GDL__BN_AFFINE] ? gdl__nn_param(bn, 0) : NULL;
    st[3] = bn->ia[GDL__BN_AFFINE] ? gdl__nn_param(bn, 1) : NULL;
    if (!bn->ia[GDL__BN_TRACK] || bn->ia[GDL__BN_C] != C) {
        gdl__set_error("%s: %s cannot be folded into the convolution before it: %s", op, gdl__nn_label(bn),
                       !bn->ia[GDL__BN_TRACK] ? "it keeps no running statistics" : "its channels differ");
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
        const double kc = (h[2] ? (double)h[2][c] : 1.0) / sqrt((double)h[1][c] + bn->fa[GDL__BN_EPS]);
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
    gdl__qprep *o = (gdl__qprep *)gdl__zalloc(op, sizeof(gdl__qprep));
    gdl_module *m;
    int i;
    if (!o) return NULL;
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
    if (a->kind == GDL__M_CONV2D && b->kind == GDL__M_BATCHNORM && b->ia[GDL__BN_DIMS] == 2) {
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
                gdl__free(v->t);
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
