/* src/quant/files.h — quantized models' safetensors files. */

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
            e->ndim = 4; e->shape[1] = q->ia[GDL__CONV_IN]; e->shape[2] = q->ia[GDL__CONV_KH];
            e->shape[3] = q->ia[GDL__CONV_KW];
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
    rc = gdl__st_write(op, path, n, st, 2, keys, vals);
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
    if (gdl__st_read(op, path, &f) < 0) {
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
