/* src/io/onnx_import.h — gdl_load_onnx: an ONNX file read with the bounds-checked protobuf reader of
   src/io/protobuf.h into nodes, attributes and initializers (untrusted input: every length, count, dim,
   dtype and external-data range checked; fuzzed by tests/fuzz/fuzz_onnx.c), and gdl_onnx_run, which runs
   the graph with gdl's ops. It takes the ops gdl_export_onnx writes (docs/onnx.md lists them); any other
   op fails the run with its name. */

#define GDL__OI_MAX_NAME 4096     /* bytes of a name or string attribute */
#define GDL__OI_MAX_COUNT 4000000 /* nodes, attributes, inputs of one list */

typedef struct gdl__oi_val {
    char *name;
    gdl_tensor *t;  /* f32 / i32 / u8 data (int64 data: its i32 copy when every value fits, else NULL) */
    int64_t *i64;   /* int64 data, kept on the host (shapes, axes); NULL otherwise */
    int64_t n64;
    int owned;      /* t is freed with the model (an initializer) */
    int hnd;        /* the tensor's ndim (int64 data: how the host values are shaped) */
    int qtype;      /* GDL__OX_INT8: t is f32 holding the int8 values (quantized data); else 0 */
} gdl__oi_val;

typedef struct gdl__oi_attr {
    char *name, *s;
    int type;
    int64_t i, *ints;
    int nints, nlist; /* nlist: floats, strings, tensors or graphs the attribute lists (not read) */
    double f;
    gdl__oi_val *t; /* a tensor attribute (Constant's value) */
} gdl__oi_attr;

typedef struct gdl__oi_node {
    char *op, *name, **in, **out; /* name: NodeProto's, may be NULL */
    int nin, nout, nat, cap_in, cap_out, cap_at;
    gdl__oi_attr *at;
} gdl__oi_node;

struct gdl_onnx_model {
    gdl__oi_node *node;
    int nnode, cap_node;
    gdl__oi_val *init;
    int ninit, cap_init;
    char **in, **out;
    int nin, nout, cap_in, cap_out;
    int64_t opset;
    gdl_device dev;
    char dir[4096]; /* the file's directory, for external data ("" from memory: none allowed) */
};

static void gdl__oi_val_free(gdl__oi_val *v) {
    GPUDL_FREE(v->name);
    GPUDL_FREE(v->i64);
    if (v->owned) gdl__free(v->t);
    memset(v, 0, sizeof *v);
}

GPUDL_API void gdl_onnx_free(gdl_onnx_model *m) {
    int k, j, a;
    if (!m) return;
    for (k = 0; k < m->nnode; k++) {
        gdl__oi_node *n = &m->node[k];
        GPUDL_FREE(n->op);
        GPUDL_FREE(n->name);
        for (j = 0; j < n->nin; j++) GPUDL_FREE(n->in[j]);
        for (j = 0; j < n->nout; j++) GPUDL_FREE(n->out[j]);
        for (a = 0; a < n->nat; a++) {
            GPUDL_FREE(n->at[a].name);
            GPUDL_FREE(n->at[a].s);
            GPUDL_FREE(n->at[a].ints);
            if (n->at[a].t) gdl__oi_val_free(n->at[a].t);
            GPUDL_FREE(n->at[a].t);
        }
        GPUDL_FREE(n->in);
        GPUDL_FREE(n->out);
        GPUDL_FREE(n->at);
    }
    for (k = 0; k < m->ninit; k++) gdl__oi_val_free(&m->init[k]);
    for (k = 0; k < m->nin; k++) GPUDL_FREE(m->in[k]);
    for (k = 0; k < m->nout; k++) GPUDL_FREE(m->out[k]);
    GPUDL_FREE(m->node);
    GPUDL_FREE(m->init);
    GPUDL_FREE(m->in);
    GPUDL_FREE(m->out);
    GPUDL_FREE(m);
}

static int gdl__oi_bad(const char *what) {
    gdl__set_error("gdl_load_onnx: malformed file: %s", what);
    return -1;
}

/* room for one more element in *arr (count n, capacity *cap, elem bytes each); 0 / -1 + error */
static int gdl__oi_grow(void **arr, int *cap, int n, size_t elem) {
    void *p;
    int c;
    if (n < *cap) return 0;
    if (n >= GDL__OI_MAX_COUNT) return gdl__oi_bad("a list is longer than 4000000 entries");
    c = *cap ? 2 * *cap : 8;
    if (!(p = GPUDL_REALLOC(*arr, elem * (size_t)c))) {
        gdl__set_error("gdl_load_onnx: out of memory");
        return -1;
    }
    memset((char *)p + elem * (size_t)n, 0, elem * (size_t)(c - n));
    *arr = p;
    *cap = c;
    return 0;
}

/* a string field's bytes as a new C string (no NUL inside, at most GDL__OI_MAX_NAME bytes); NULL + error */
static char *gdl__oi_str(const gdl__pbr *s) {
    size_t n = (size_t)(s->end - s->p);
    char *r;
    if (n > GDL__OI_MAX_NAME || memchr(s->p, 0, n)) {
        gdl__oi_bad(n > GDL__OI_MAX_NAME ? "a name longer than 4096 bytes" : "a name with a NUL byte");
        return NULL;
    }
    if (!(r = (char *)GPUDL_MALLOC(n + 1))) {
        gdl__set_error("gdl_load_onnx: out of memory");
        return NULL;
    }
    memcpy(r, s->p, n);
    r[n] = 0;
    return r;
}

/* appends a string field to a list; 0 / -1 */
static int gdl__oi_push_str(char ***list, int *n, int *cap, const gdl__pbr *s) {
    char *str;
    if (gdl__oi_grow((void **)list, cap, *n, sizeof(char *)) < 0 || !(str = gdl__oi_str(s))) return -1;
    (*list)[(*n)++] = str;
    return 0;
}

/* a repeated int64 field's element(s): one varint, or a packed run of them */
static int gdl__oi_ints(int wire, uint64_t v, const gdl__pbr *sub, int64_t **arr, int64_t *n, int64_t max) {
    gdl__pbr r = *sub;
    if (wire == GDL__PB_VARINT) r.p = r.end = NULL;
    else if (wire != GDL__PB_BYTES) return gdl__oi_bad("an int64 list of the wrong wire type");
    for (;;) {
        int64_t *p;
        if (wire == GDL__PB_BYTES) {
            if (r.p >= r.end) return 0;
            if (gdl__pbr_varint(&r, &v) < 0) return gdl__oi_bad("a packed int64 list");
        }
        if (*n >= max) return gdl__oi_bad("an int64 list longer than its limit");
        if (!(p = (int64_t *)GPUDL_REALLOC(*arr, sizeof(int64_t) * (size_t)(*n + 1)))) {
            gdl__set_error("gdl_load_onnx: out of memory");
            return -1;
        }
        *arr = p;
        p[(*n)++] = (int64_t)v;
        if (wire == GDL__PB_VARINT) return 0;
    }
}

/* ---- TensorProto ---- */

/* external data at location (relative to the model's directory, no "..", not absolute), offset, length,
   into dst (NULL: only whether the file holds that range) */
static int gdl__oi_external(const gdl_onnx_model *m, const char *loc, uint64_t off, uint64_t len, void *dst) {
    char path[8300];
    FILE *f;
    long size;
    if (!m->dir[0] && !loc[0]) return gdl__oi_bad("external data without a location");
    if (!loc[0] || loc[0] == '/' || loc[0] == '\\' || strstr(loc, "..") || strchr(loc, ':'))
        return gdl__oi_bad("an external data location outside the model's directory");
    if (!m->dir[0]) {
        gdl__set_error("gdl_load_onnx: external data (%s) needs the model read from a file", loc);
        return -1;
    }
    snprintf(path, sizeof path, "%s/%s", m->dir, loc);
    if (!(f = gdl__os_fopen_read(path))) {
        gdl__set_error("gdl_load_onnx: cannot open the external data %s: %s", path, gdl__strerr(errno));
        return -1;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || off > (uint64_t)size || len > (uint64_t)size - off ||
        (dst && (fseek(f, (long)off, SEEK_SET) != 0 || fread(dst, 1, (size_t)len, f) != (size_t)len))) {
        fclose(f);
        gdl__set_error("gdl_load_onnx: the external data %s does not hold bytes %llu..%llu", path,
                       (unsigned long long)off, (unsigned long long)(off + len));
        return -1;
    }
    fclose(f);
    return 0;
}

/* a TensorProto into v: f32 / i32 / u8 (uint8, bool) as a tensor on m->dev, int8 as an f32 tensor of its integer
   values (v->qtype tells), int64 on the host (and as i32 when it fits); its data from raw_data, the typed lists or
   external data, each checked against the shape (and typed 8-bit values against their type's range) */
static int gdl__oi_tensor(gdl_onnx_model *m, gdl__pbr r, gdl__oi_val *v) {
    int64_t *dims = NULL, ndim = 0, numel = 1, k, *i64 = NULL, ni64 = 0;
    int field, wire, type = 0, rc = -1, prc, ext = 0, d;
    uint64_t x = 0, off = 0, elen = 0; /* x: set by each varint read (gcc -O3 cannot see it) */
    gdl__pbr sub, raw = {NULL, NULL}, fl = {NULL, NULL};
    char loc[512];
    int64_t nfl = 0;
    size_t es;
    unsigned char *host = NULL;
    gdl_dtype dt;
    loc[0] = 0;
    while ((prc = gdl__pbr_next(&r, &field, &wire, &x, &sub)) == 1) {
        if (field == 1 && gdl__oi_ints(wire, x, &sub, &dims, &ndim, GDL_MAX_DIMS) < 0) goto fail;
        else if (field == 2 && wire == GDL__PB_VARINT) type = (int)x;
        else if (field == 8 && wire == GDL__PB_BYTES && !v->name && !(v->name = gdl__oi_str(&sub))) goto fail;
        else if (field == 9 && wire == GDL__PB_BYTES) raw = sub;
        else if (field == 4 && wire == GDL__PB_BYTES) fl = sub; /* packed float_data */
        else if (field == 4 && wire == GDL__PB_FIXED32) nfl = -1; /* unpacked: not taken */
        else if ((field == 5 || field == 7) && gdl__oi_ints(wire, x, &sub, &i64, &ni64, (int64_t)1 << 28) < 0) goto fail;
        else if (field == 14 && wire == GDL__PB_VARINT) ext = x == 1;
        else if (field == 13 && wire == GDL__PB_BYTES) { /* external_data: key, value */
            gdl__pbr e = sub, kv;
            char *key = NULL, *val = NULL;
            int f2, w2;
            uint64_t y;
            while (gdl__pbr_next(&e, &f2, &w2, &y, &kv) == 1)
                if (w2 == GDL__PB_BYTES && (f2 == 1 || f2 == 2)) {
                    char **dst = f2 == 1 ? &key : &val;
                    GPUDL_FREE(*dst);
                    *dst = gdl__oi_str(&kv);
                }
            if (key && val) {
                if (!strcmp(key, "location")) snprintf(loc, sizeof loc, "%s", val);
                else if (!strcmp(key, "offset")) off = strtoull(val, NULL, 10);
                else if (!strcmp(key, "length")) elen = strtoull(val, NULL, 10);
            }
            GPUDL_FREE(key);
            GPUDL_FREE(val);
        }
    }
    if (prc < 0) {
        gdl__oi_bad("a tensor's fields");
        goto fail;
    }
    if (nfl < 0) {
        gdl__set_error("gdl_load_onnx: tensor '%s': unpacked float_data is not read (use raw_data)", v->name ? v->name : "");
        goto fail;
    }
    for (k = 0; k < ndim; k++) {
        if (dims[k] < 0 || dims[k] > ((int64_t)1 << 31) || (dims[k] && numel > ((int64_t)1 << 34) / dims[k])) {
            gdl__oi_bad("a tensor's dims (negative, or over 2^34 elements)");
            goto fail;
        }
        numel *= dims[k];
    }
    switch (type) {
    case GDL__OX_FLOAT: dt = GDL_F32; es = 4; break;
    case GDL__OX_INT32: dt = GDL_I32; es = 4; break;
    case GDL__OX_INT8: dt = GDL_F32; es = 1; break; /* held as f32 integers: DequantizeLinear's float arithmetic */
    case GDL__OX_UINT8:
    case GDL__OX_BOOL: dt = GDL_U8; es = 1; break;
    case GDL__OX_INT64: dt = GDL_I32; es = 8; break;
    default:
        gdl__set_error("gdl_load_onnx: tensor '%s' has data type %d: only FLOAT, INT8, UINT8, INT32, INT64 and BOOL are read",
                       v->name ? v->name : "", type);
        goto fail;
    }
    /* the data's length checked against the shape before anything is allocated */
    if (ext ? (uint64_t)numel * es != elen
            : raw.p ? (uint64_t)(raw.end - raw.p) != (uint64_t)numel * es
            : fl.p && type == GDL__OX_FLOAT ? (uint64_t)(fl.end - fl.p) != (uint64_t)numel * 4
            : numel && (ni64 != numel || type == GDL__OX_FLOAT)) {
        gdl__oi_bad("a tensor whose data's length is not its shape's");
        goto fail;
    }
    if (ext && gdl__oi_external(m, loc, off, elen, NULL) < 0) goto fail; /* the range, before the allocation */
    if (!(host = (unsigned char *)GPUDL_MALLOC((size_t)numel * 8 + 8))) {
        gdl__set_error("gdl_load_onnx: out of memory");
        goto fail;
    }
    if (ext) {
        if (gdl__oi_external(m, loc, off, elen, host) < 0) goto fail;
    } else if (raw.p) {
        memcpy(host, raw.p, (size_t)numel * es);
    } else if (fl.p && type == GDL__OX_FLOAT) {
        memcpy(host, fl.p, (size_t)numel * 4);
    } else { /* int32_data / int64_data, as varints */
        for (k = 0; k < numel; k++) {
            uint64_t u = (uint64_t)i64[k];
            int b;
            if (es == 1 && (type == GDL__OX_INT8 ? i64[k] < -128 || i64[k] > 127 : i64[k] < 0 || i64[k] > 255)) {
                gdl__set_error("gdl_load_onnx: tensor '%s': int32_data value %lld is outside its 8-bit type's range",
                               v->name ? v->name : "", (long long)i64[k]);
                goto fail;
            }
            for (b = 0; b < (int)es; b++) host[k * (int64_t)es + b] = (unsigned char)(u >> (8 * b));
        }
    }
    if (es == 8) { /* int64: kept on the host; its i32 copy when every value fits */
        int fits = 1;
        if (!(v->i64 = (int64_t *)GPUDL_MALLOC(sizeof(int64_t) * (size_t)(numel ? numel : 1)))) goto oom;
        for (k = 0; k < numel; k++) {
            uint64_t u = 0;
            int b;
            for (b = 0; b < 8; b++) u |= (uint64_t)host[k * 8 + b] << (8 * b);
            v->i64[k] = (int64_t)u;
            if (v->i64[k] < INT32_MIN || v->i64[k] > INT32_MAX) fits = 0;
            else ((int32_t *)(void *)host)[k] = (int32_t)v->i64[k]; /* k*4 < k*8: read already */
        }
        v->n64 = numel;
        v->hnd = (int)ndim;
        if (!fits) goto done;
    } else if (es == 4 && gdl__ox_big_endian()) {
        for (k = 0; k < numel; k++) {
            unsigned char *e = host + 4 * k, t0 = e[0], t1 = e[1];
            e[0] = e[3]; e[1] = e[2]; e[2] = t1; e[3] = t0;
        }
    }
    if (type == GDL__OX_INT8) { /* two's complement bytes to f32 (gdl_real) integers, from the end: in place */
        for (k = numel - 1; k >= 0; k--) {
            const int32_t q = host[k] < 128 ? (int32_t)host[k] : (int32_t)host[k] - 256;
            ((gdl_real *)(void *)host)[k] = (gdl_real)q;
        }
        v->qtype = GDL__OX_INT8;
    } else if (dt == GDL_F32 && sizeof(gdl_real) != 4) { /* GPUDL_DOUBLE: f32 tensors hold doubles */
        for (k = numel - 1; k >= 0; k--) {
            float f;
            memcpy(&f, host + 4 * k, 4);
            ((gdl_real *)(void *)host)[k] = (gdl_real)f;
        }
    }
    {
        int64_t shape[GDL_MAX_DIMS];
        for (d = 0; d < ndim; d++) shape[d] = dims[d];
        v->hnd = (int)ndim;
        if (!(v->t = gdl_from_array(host, (int)ndim, shape, dt, m->dev))) goto fail;
        v->owned = 1;
        v->t->owner = GDL__OWN_ONNX;
    }
done:
    rc = 0;
    goto fail;
oom:
    gdl__set_error("gdl_load_onnx: out of memory");
fail:
    GPUDL_FREE(host);
    GPUDL_FREE(dims);
    GPUDL_FREE(i64);
    return rc;
}

/* ---- NodeProto, AttributeProto, GraphProto, ModelProto ---- */

static int gdl__oi_attr_read(gdl_onnx_model *m, gdl__pbr r, gdl__oi_attr *a) {
    int field, wire, rc;
    uint64_t x = 0;
    gdl__pbr sub;
    int64_t n = 0;
    while ((rc = gdl__pbr_next(&r, &field, &wire, &x, &sub)) == 1) {
        if (field == 1 && wire == GDL__PB_BYTES && !a->name) {
            if (!(a->name = gdl__oi_str(&sub))) return -1;
        } else if (field == 20 && wire == GDL__PB_VARINT) {
            a->type = (int)x;
        } else if (field == 2 && wire == GDL__PB_FIXED32) {
            uint32_t u = (uint32_t)x;
            float f;
            memcpy(&f, &u, 4);
            a->f = f;
        } else if (field == 3 && wire == GDL__PB_VARINT) {
            a->i = (int64_t)x;
        } else if (field == 4 && wire == GDL__PB_BYTES && !a->s) {
            if (!(a->s = gdl__oi_str(&sub))) return -1;
        } else if (field == 8) {
            if (gdl__oi_ints(wire, x, &sub, &a->ints, &n, 1024) < 0) return -1;
            a->nints = (int)n;
        } else if (field == 5 && wire == GDL__PB_BYTES && !a->t) {
            if (!(a->t = (gdl__oi_val *)GPUDL_MALLOC(sizeof *a->t))) return gdl__oi_bad("out of memory");
            memset(a->t, 0, sizeof *a->t);
            if (gdl__oi_tensor(m, sub, a->t) < 0) return -1;
        } else if (field == 7 || field == 9 || field == 10 || field == 11 || field == 6) {
            a->nlist += a->nlist < 1 << 30; /* floats, strings, tensors, graphs, a graph: counted, not read */
        }
    }
    if (rc < 0) return gdl__oi_bad("an attribute's fields");
    if (!a->name) return gdl__oi_bad("an attribute without a name");
    return 0;
}

static int gdl__oi_node_read(gdl_onnx_model *m, gdl__pbr r, gdl__oi_node *n) {
    int field, wire, rc;
    uint64_t x = 0;
    gdl__pbr sub;
    while ((rc = gdl__pbr_next(&r, &field, &wire, &x, &sub)) == 1) {
        if (wire != GDL__PB_BYTES) continue;
        if (field == 1 && gdl__oi_push_str(&n->in, &n->nin, &n->cap_in, &sub) < 0) return -1;
        if (field == 2 && gdl__oi_push_str(&n->out, &n->nout, &n->cap_out, &sub) < 0) return -1;
        if (field == 4 && !n->op && !(n->op = gdl__oi_str(&sub))) return -1;
        if (field == 3 && !n->name && !(n->name = gdl__oi_str(&sub))) return -1;
        if (field == 7 && sub.end > sub.p && (sub.end - sub.p != 7 || memcmp(sub.p, "ai.onnx", 7))) {
            gdl__set_error("gdl_load_onnx: a node of another domain than ai.onnx ('%.*s')", (int)(sub.end - sub.p),
                           (const char *)sub.p);
            return -1;
        }
        if (field == 5) {
            if (gdl__oi_grow((void **)&n->at, &n->cap_at, n->nat, sizeof *n->at) < 0) return -1;
            n->nat++;
            if (gdl__oi_attr_read(m, sub, &n->at[n->nat - 1]) < 0) return -1;
        }
    }
    if (rc < 0) return gdl__oi_bad("a node's fields");
    if (!n->op || n->nout < 1) return gdl__oi_bad("a node without an op_type or an output");
    return 0;
}

static int gdl__oi_graph(gdl_onnx_model *m, gdl__pbr r) {
    int field, wire, rc;
    uint64_t x = 0;
    gdl__pbr sub;
    while ((rc = gdl__pbr_next(&r, &field, &wire, &x, &sub)) == 1) {
        if (wire != GDL__PB_BYTES) continue;
        if (field == 1) {
            if (gdl__oi_grow((void **)&m->node, &m->cap_node, m->nnode, sizeof *m->node) < 0) return -1;
            m->nnode++;
            if (gdl__oi_node_read(m, sub, &m->node[m->nnode - 1]) < 0) return -1;
        } else if (field == 5) {
            if (gdl__oi_grow((void **)&m->init, &m->cap_init, m->ninit, sizeof *m->init) < 0) return -1;
            m->ninit++;
            if (gdl__oi_tensor(m, sub, &m->init[m->ninit - 1]) < 0) return -1;
            if (!m->init[m->ninit - 1].name) return gdl__oi_bad("an initializer without a name");
        } else if (field == 11 || field == 12) { /* ValueInfoProto: its name */
            gdl__pbr vi = sub, nm;
            int f2, w2, got = 0;
            uint64_t y;
            while ((rc = gdl__pbr_next(&vi, &f2, &w2, &y, &nm)) == 1)
                if (f2 == 1 && w2 == GDL__PB_BYTES && !got) {
                    got = 1;
                    if (field == 11 ? gdl__oi_push_str(&m->in, &m->nin, &m->cap_in, &nm) < 0
                                    : gdl__oi_push_str(&m->out, &m->nout, &m->cap_out, &nm) < 0)
                        return -1;
                }
            if (rc < 0 || !got) return gdl__oi_bad("a graph input or output without a name");
        }
    }
    return rc < 0 ? gdl__oi_bad("the graph's fields") : 0;
}

/* The ops gdl_onnx_run runs (the forms it takes are in docs/onnx.md): a node of another op is refused at load. */
static const char *const gdl__oi_ops[] = {
    "Abs", "Add", "AveragePool", "BatchNormalization", "Cast", "CastLike", "Clip", "Concat", "Constant",
    "ConstantOfShape", "Conv", "CumSum", "DequantizeLinear", "Div", "Dropout", "Equal", "Erf", "Exp", "Expand",
    "Flatten", "GRU", "Gather", "GatherElements",
    "Gelu", "Gemm", "GlobalAveragePool", "Greater", "GreaterOrEqual", "Identity", "LSTM", "LayerNormalization",
    "LeakyRelu", "Less", "LessOrEqual", "Log", "LogSoftmax", "MatMul", "Max", "MaxPool", "Min", "Mul", "Neg", "Not",
    "Pow", "QuantizeLinear", "Range", "Reciprocal", "ReduceMax", "ReduceMean", "ReduceSum", "Relu", "Reshape", "Shape", "Sigmoid",
    "Slice", "Softmax", "Split", "Sqrt", "Squeeze", "Sub", "Tanh", "Transpose", "Trilu", "Unsqueeze", "Where"};

/* the node's name for messages: NodeProto's name, else its first output's */
static const char *gdl__oi_node_name(const gdl__oi_node *n) { return n->name && n->name[0] ? n->name : n->out[0]; }

/* every node's op is one gdl_onnx_run runs: 0 / -1 + an error naming the first other node and its op */
static int gdl__oi_check_ops(const gdl_onnx_model *m) {
    int k, j, found;
    for (k = 0; k < m->nnode; k++) {
        for (j = 0, found = 0; j < (int)(sizeof gdl__oi_ops / sizeof gdl__oi_ops[0]) && !found; j++)
            found = !strcmp(m->node[k].op, gdl__oi_ops[j]);
        if (!found) {
            gdl__set_error("gdl_load_onnx: node '%s' (%s): the op is not supported (gdl_onnx_run runs the ops "
                           "docs/onnx.md lists)", gdl__oi_node_name(&m->node[k]), m->node[k].op);
            return -1;
        }
    }
    return 0;
}

/* the ModelProto in [data, data + len) */
static gdl_onnx_model *gdl__oi_parse(const void *data, size_t len, const char *dir, gdl_device dev) {
    gdl_onnx_model *m = (gdl_onnx_model *)GPUDL_MALLOC(sizeof *m);
    gdl__pbr r, sub;
    int field, wire, rc, graphs = 0, k, j;
    uint64_t x = 0;
    if (!m) {
        gdl__set_error("gdl_load_onnx: out of memory");
        return NULL;
    }
    memset(m, 0, sizeof *m);
    m->dev = dev;
    snprintf(m->dir, sizeof m->dir, "%s", dir ? dir : "");
    r.p = (const unsigned char *)data;
    r.end = r.p + len;
    while ((rc = gdl__pbr_next(&r, &field, &wire, &x, &sub)) == 1) {
        if (field == 7 && wire == GDL__PB_BYTES) {
            if (graphs++ || gdl__oi_graph(m, sub) < 0) {
                if (graphs > 1) gdl__oi_bad("two graphs");
                goto fail;
            }
        } else if (field == 8 && wire == GDL__PB_BYTES) { /* opset_import: domain, version */
            gdl__pbr o = sub, s2;
            int f2, w2, ours = 1;
            uint64_t y, ver = 0;
            while (gdl__pbr_next(&o, &f2, &w2, &y, &s2) == 1) {
                if (f2 == 1 && w2 == GDL__PB_BYTES && s2.end > s2.p &&
                    (s2.end - s2.p != 7 || memcmp(s2.p, "ai.onnx", 7)))
                    ours = 0;
                if (f2 == 2 && w2 == GDL__PB_VARINT) ver = y;
            }
            if (ours) m->opset = (int64_t)(ver > 1000 ? 1000 : ver);
        }
    }
    if (rc < 0 || !graphs) {
        gdl__oi_bad(rc < 0 ? "not a protobuf ModelProto" : "no graph");
        goto fail;
    }
    if (m->opset < 13) {
        gdl__set_error("gdl_load_onnx: opset %lld: opsets from 13 are read", (long long)m->opset);
        goto fail;
    }
    for (k = 0, j = 0; k < m->nin; k++) { /* the graph's inputs that an initializer does not give */
        int init = 0, i;
        for (i = 0; i < m->ninit && !init; i++) init = !strcmp(m->init[i].name, m->in[k]);
        if (init) GPUDL_FREE(m->in[k]);
        else m->in[j++] = m->in[k];
    }
    m->nin = j;
    if (gdl__oi_check_ops(m) < 0) goto fail;
    if (m->nout < 1) {
        gdl__oi_bad("a graph without outputs");
        goto fail;
    }
    return m;
fail:
    gdl_onnx_free(m);
    return NULL;
}

GPUDL_API gdl_onnx_model *gdl_onnx_parse(const void *data, size_t len, gdl_device dev) {
    if (!data && len) {
        gdl__null_arg("gdl_onnx_parse", "data");
        return NULL;
    }
    return gdl__oi_parse(data ? data : "", len, NULL, dev);
}

GPUDL_API gdl_onnx_model *gdl_load_onnx(const char *path, gdl_device dev) {
    FILE *f;
    long size;
    unsigned char *buf;
    char dir[4096];
    const char *slash;
    gdl_onnx_model *m;
    if (!path) {
        gdl__null_arg("gdl_load_onnx", "path");
        return NULL;
    }
    if (!(f = gdl__os_fopen_read(path))) {
        gdl__set_error("gdl_load_onnx: cannot open %s: %s", path, gdl__strerr(errno));
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 || size > 0x7fffffffL) {
        fclose(f);
        gdl__set_error("gdl_load_onnx: %s: cannot read its size, or over protobuf's 2 GiB", path);
        return NULL;
    }
    if (!(buf = (unsigned char *)GPUDL_MALLOC((size_t)size + 1)) || fread(buf, 1, (size_t)size, f) != (size_t)size) {
        fclose(f);
        GPUDL_FREE(buf);
        gdl__set_error("gdl_load_onnx: %s: cannot read it", path);
        return NULL;
    }
    fclose(f);
    slash = strrchr(path, '/');
    if (slash) snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path); /* "/x": "/" */
    else snprintf(dir, sizeof dir, ".");
    m = gdl__oi_parse(buf, (size_t)size, dir, dev);
    GPUDL_FREE(buf);
    if (!m) {
        char prev[sizeof gdl__err];
        memcpy(prev, gdl__err, sizeof prev);
        gdl__set_error("%s (%s)", prev, path);
    }
    return m;
}

/* ---- running the graph with gdl's ops ----
   Values are tensors, or int64 values kept on the host (shapes, axes, indices: int64 initializers, Shape's
   results and what the exporters compute from them with Gather, Unsqueeze, Concat, Slice, arithmetic); a host
   value becomes an i32 tensor where an op needs one. */

#define GDL__OI_MAX_OUT 8           /* outputs of one node */
#define GDL__OI_MAX_HOST (1 << 20)  /* values of one host int64 result */
/* Elements of a tensor that ConstantOfShape or Expand makes at a shape computed from the file (a zero state,
   a mask), or a Conv whose pads make its maps larger than its input's: 2^24 (64 MiB of f32) is far above what
   the exporters write, and keeps a file of a few bytes from making a run fill gigabytes (a fuzzed model's
   ConstantOfShape of 2^28 took a minute under ASan). */
#define GDL__OI_MAX_MADE ((int64_t)1 << 24)

typedef struct gdl__oi_rv { /* a value during a run */
    const char *name;
    gdl_tensor *t;        /* NULL for a host value not yet needed as a tensor */
    const int64_t *i64;   /* int64 values on the host, or NULL */
    int64_t n64;
    int hnd;              /* the host values' ndim */
    int qtype;            /* GDL__OX_INT8 / GDL__OX_UINT8: t is f32 holding quantized integers; else 0 */
} gdl__oi_rv;

typedef struct gdl__oi_run {
    const gdl_onnx_model *m;
    gdl__oi_rv *v;
    int nv, cap;
    int64_t **pool; /* host values a run makes, freed at its end */
    int npool, cap_pool;
    const gdl__oi_node *n;
    gdl__oi_rv o[GDL__OI_MAX_OUT]; /* the current node's outputs */
} gdl__oi_run;

static const gdl__oi_attr *gdl__oi_attr_of(const gdl__oi_node *n, const char *name) {
    int k;
    for (k = 0; k < n->nat; k++)
        if (!strcmp(n->at[k].name, name)) return &n->at[k];
    return NULL;
}
static int64_t gdl__oi_ai(const gdl__oi_node *n, const char *name, int64_t dflt) {
    const gdl__oi_attr *a = gdl__oi_attr_of(n, name);
    return a ? a->i : dflt;
}
static double gdl__oi_af(const gdl__oi_node *n, const char *name, double dflt) {
    const gdl__oi_attr *a = gdl__oi_attr_of(n, name);
    return a ? a->f : dflt;
}

/* an error about the current node: "gdl_onnx_run: node 'NAME' (OP): ..." */
static int gdl__oi_fail(gdl__oi_run *R, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    gdl__set_error("gdl_onnx_run: node '%s' (%s): %s", gdl__oi_node_name(R->n), R->n->op, msg);
    return -1;
}

/* a string attribute is absent or one of the allowed values (NULL-terminated list); else the node is refused */
static int gdl__oi_check_str(gdl__oi_run *R, const char *name, const char *const *allowed) {
    const gdl__oi_attr *a = gdl__oi_attr_of(R->n, name);
    int k;
    if (!a) return 0;
    for (k = 0; allowed[k]; k++)
        if (a->s && !strcmp(a->s, allowed[k])) return 0;
    return gdl__oi_fail(R, "attribute %s = '%s' is not supported", name, a->s ? a->s : "");
}

static int gdl__oi_set(gdl__oi_run *R, const char *name, const gdl__oi_rv *val) {
    if (gdl__oi_grow((void **)&R->v, &R->cap, R->nv, sizeof *R->v) < 0) return -1;
    R->v[R->nv] = *val;
    R->v[R->nv].name = name;
    R->nv++;
    return 0;
}

/* input k of the current node: its value, NULL when absent ("" or past the end) or unknown (error) */
static gdl__oi_rv *gdl__oi_in(gdl__oi_run *R, int k, int required) {
    const char *name = k < R->n->nin ? R->n->in[k] : "";
    int j;
    if (name[0])
        for (j = R->nv - 1; j >= 0; j--)
            if (!strcmp(R->v[j].name, name)) return &R->v[j];
    if (required || name[0])
        gdl__oi_fail(R, "input %d ('%s') %s", k, name,
                     name[0] ? "is not computed before it (the nodes must be in order)" : "is missing");
    return NULL;
}
static int gdl__oi_has(const gdl__oi_run *R, int k) { return k < R->n->nin && R->n->in[k][0]; }

/* room for n host values a run makes; NULL + error */
static int64_t *gdl__oi_host_new(gdl__oi_run *R, int64_t n) {
    int64_t *p;
    if (n < 0 || n > GDL__OI_MAX_HOST) {
        gdl__oi_fail(R, "an int64 result of %lld values (at most %d)", (long long)n, GDL__OI_MAX_HOST);
        return NULL;
    }
    if (gdl__oi_grow((void **)&R->pool, &R->cap_pool, R->npool, sizeof *R->pool) < 0) return NULL;
    if (!(p = (int64_t *)GPUDL_MALLOC(sizeof(int64_t) * (size_t)(n + 1)))) {
        gdl__set_error("gdl_onnx_run: out of memory");
        return NULL;
    }
    return R->pool[R->npool++] = p;
}

/* host int64 values as an i32 temporary (made once); NULL + error */
static gdl_tensor *gdl__oi_host_tensor(gdl__oi_run *R, gdl__oi_rv *v) {
    int64_t j, shape[1];
    int32_t *h;
    gdl_tensor *t;
    if (v->t) return v->t;
    if (v->hnd > 1 || (v->hnd == 0 && v->n64 != 1)) {
        gdl__set_error("gdl_onnx_run: '%s': int64 values of %d dims beyond i32", v->name, v->hnd);
        return NULL;
    }
    for (j = 0; j < v->n64; j++)
        if (v->i64[j] < INT32_MIN || v->i64[j] > INT32_MAX) {
            gdl__set_error("gdl_onnx_run: '%s' holds int64 values beyond i32", v->name);
            return NULL;
        }
    if (!(h = (int32_t *)GPUDL_MALLOC(sizeof(int32_t) * (size_t)(v->n64 + 1)))) {
        gdl__set_error("gdl_onnx_run: out of memory");
        return NULL;
    }
    for (j = 0; j < v->n64; j++) h[j] = (int32_t)v->i64[j];
    shape[0] = v->n64;
    t = gdl__tmp("gdl_onnx_run", v->hnd, shape, GDL_I32, R->m->dev);
    if (t && v->n64 && gdl__be("gdl_onnx_run", t->device)->rt.copy(t->data, h, sizeof(int32_t) * (size_t)v->n64, 0) < 0)
        t = NULL;
    GPUDL_FREE(h);
    return v->t = t;
}

/* a tensor input; host int64 values become an i32 temporary here */
static gdl_tensor *gdl__oi_t(gdl__oi_run *R, int k) {
    gdl__oi_rv *v = gdl__oi_in(R, k, 1);
    return v ? gdl__oi_host_tensor(R, v) : NULL;
}

/* an int64 list input (a shape, axes, starts): at most max values into buf; its count or -1 */
static int64_t gdl__oi_list(gdl__oi_run *R, int k, int64_t *buf, int64_t max) {
    const gdl__oi_rv *v = gdl__oi_in(R, k, 1);
    int64_t j, n;
    if (!v) return -1;
    if (v->i64) {
        if (v->n64 > max) goto big;
        memcpy(buf, v->i64, sizeof(int64_t) * (size_t)v->n64);
        return v->n64;
    }
    if (!v->t || v->t->dtype != GDL_I32) return gdl__oi_fail(R, "input %d must be integers", k);
    if ((n = v->t->numel) > max) goto big;
    {
        int32_t tmp[GDL_MAX_DIMS * 4];
        if (n > (int64_t)(sizeof tmp / sizeof tmp[0])) goto big;
        if (gdl_copy_to_host(v->t, tmp, sizeof(int32_t) * (size_t)n) < 0) return -1;
        for (j = 0; j < n; j++) buf[j] = tmp[j];
    }
    return n;
big:
    return gdl__oi_fail(R, "input %d has more than %lld values", k, (long long)max);
}

static int gdl__oi_axis(gdl__oi_run *R, int64_t a, int ndim) {
    if (a < -ndim || a >= (ndim ? ndim : 1)) return gdl__oi_fail(R, "axis %lld out of range for %d dims", (long long)a, ndim);
    return (int)(a < 0 ? a + ndim : a);
}

/* the axes of Unsqueeze / Squeeze / Reduce*: the input (opset 13+; 18+ for the reductions) or the attribute;
   their count, or -1 (absent: 0) */
static int gdl__oi_axes(gdl__oi_run *R, int k, int64_t *axes) {
    const gdl__oi_attr *a = gdl__oi_attr_of(R->n, "axes");
    int j;
    if (gdl__oi_has(R, k)) return (int)gdl__oi_list(R, k, axes, GDL_MAX_DIMS);
    if (!a) return 0;
    if (a->nints > GDL_MAX_DIMS) return gdl__oi_fail(R, "%d axes", a->nints);
    for (j = 0; j < a->nints; j++) axes[j] = a->ints[j];
    return a->nints;
}

/* Reshape's target: 0 copies x's dim (unless allowzero), one -1 is inferred */
static gdl_tensor *gdl__oi_reshape(gdl__oi_run *R, gdl_tensor *x, const int64_t *s, int64_t n) {
    int64_t shape[GDL_MAX_DIMS], known = 1;
    int k;
    if (!x) return NULL;
    if (n > GDL_MAX_DIMS) {
        gdl__oi_fail(R, "a shape of %lld dims", (long long)n);
        return NULL;
    }
    for (k = 0; k < n; k++) {
        shape[k] = s[k] == 0 && k < x->ndim && !gdl__oi_ai(R->n, "allowzero", 0) ? x->shape[k] : s[k];
        if (shape[k] > 0 && known > ((int64_t)1 << 40) / shape[k]) { /* bounded before gdl_reshape multiplies */
            gdl__oi_fail(R, "a target shape of over 2^40 elements");
            return NULL;
        }
        if (shape[k] > 0) known *= shape[k];
    }
    return gdl_reshape(x, (int)n, shape);
}

static gdl_tensor *gdl__oi_pool(gdl__oi_run *R, gdl_tensor *x, int avg) {
    static const char *const notset[] = {"NOTSET", NULL};
    const gdl__oi_attr *ks = gdl__oi_attr_of(R->n, "kernel_shape"), *st = gdl__oi_attr_of(R->n, "strides"),
                       *pd = gdl__oi_attr_of(R->n, "pads"), *dl = gdl__oi_attr_of(R->n, "dilations");
    int64_t s = st && st->nints == 2 ? st->ints[0] : 1, p = pd && pd->nints == 4 ? pd->ints[0] : 0;
    if (gdl__oi_check_str(R, "auto_pad", notset) < 0) return NULL;
    if (!ks || ks->nints != 2 || ks->ints[0] != ks->ints[1] || (st && (st->nints != 2 || st->ints[1] != s)) ||
        (pd && (pd->nints != 4 || pd->ints[1] != p || pd->ints[2] != p || pd->ints[3] != p)) ||
        (dl && (dl->nints != 2 || dl->ints[0] != 1 || dl->ints[1] != 1)) || gdl__oi_ai(R->n, "ceil_mode", 0) ||
        gdl__oi_ai(R->n, "storage_order", 0) || R->n->nout > 1 ||
        (avg && !gdl__oi_ai(R->n, "count_include_pad", 0) && p) || ks->ints[0] > 1 << 20 || s > 1 << 20 || p > 1 << 20) {
        gdl__oi_fail(R, "only square windows, equal strides and pads, no dilation, ceil_mode or indices%s",
                     avg ? ", padding counted" : "");
        return NULL;
    }
    return avg ? gdl_avg_pool2d(x, (int)ks->ints[0], (int)s, (int)p) : gdl_max_pool2d(x, (int)ks->ints[0], (int)s, (int)p);
}

static gdl_tensor *gdl__oi_conv(gdl__oi_run *R, gdl_tensor *x, gdl_tensor *w, gdl_tensor *b) {
    static const char *const notset[] = {"NOTSET", NULL};
    const gdl__oi_attr *st = gdl__oi_attr_of(R->n, "strides"), *pd = gdl__oi_attr_of(R->n, "pads"),
                       *dl = gdl__oi_attr_of(R->n, "dilations");
    int s[2] = {1, 1}, p[2] = {0, 0}, d[2] = {1, 1}, k;
    if (gdl__oi_check_str(R, "auto_pad", notset) < 0) return NULL;
    for (k = 0; k < 2; k++) {
        if (st && st->nints == 2 && st->ints[k] > 0 && st->ints[k] < 1 << 20) s[k] = (int)st->ints[k];
        if (dl && dl->nints == 2 && dl->ints[k] > 0 && dl->ints[k] < 1 << 20) d[k] = (int)dl->ints[k];
        if (pd && pd->nints == 4 && pd->ints[k] >= 0 && pd->ints[k] < 1 << 20) p[k] = (int)pd->ints[k];
    }
    if ((st && st->nints != 2) || (dl && dl->nints != 2) ||
        (pd && (pd->nints != 4 || pd->ints[0] != pd->ints[2] || pd->ints[1] != pd->ints[3]))) {
        gdl__oi_fail(R, "only 2-D convolutions with symmetric pads");
        return NULL;
    }
    if (x && w && x->ndim == 4 && w->ndim == 4) { /* else gdl_conv2d_ex says what is wrong */
        double out = (double)x->shape[0] * (double)w->shape[0]; /* in double: no overflow from a file's pads */
        for (k = 0; k < 2; k++) {
            const int64_t reach = (int64_t)d[k] * (w->shape[2 + k] - 1) + 1, in = x->shape[2 + k] + 2 * (int64_t)p[k];
            out *= in >= reach ? (double)((in - reach) / s[k] + 1) : 0;
        }
        if (out > (double)x->shape[0] * (double)w->shape[0] * (double)x->shape[2] * (double)x->shape[3] &&
            out > (double)GDL__OI_MAX_MADE) {
            gdl__oi_fail(R, "pads (%d, %d) make an output of %.0f elements from a %s input (the most a padding that "
                         "enlarges the map may make: %lld)", p[0], p[1], out, gdl_shape_str(x),
                         (long long)GDL__OI_MAX_MADE);
            return NULL;
        }
    }
    return gdl_conv2d_ex(x, w, b, s, p, d, (int)gdl__oi_ai(R->n, "group", 1));
}

/* ---- host int64 values: the shape arithmetic the exporters write ---- */

/* the current node on host values when every input it has is one (1-D or a scalar): 1 done (R->o[0] set),
   0 not a host computation, -1 error */
static int gdl__oi_host_op(gdl__oi_run *R) {
    static const char *const ops[] = {"Identity", "Cast", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Add",
                                      "Sub", "Mul", "Div", "Neg", "Min", "Max", "Reshape", "Range", NULL};
    const gdl__oi_node *n = R->n;
    const char *op = n->op;
    const gdl__oi_rv *in[GDL__OX_MAX_IN] = {0}; /* NULL past nin: an op that takes fewer inputs than it reads */
    int64_t *y, ny = 0, k, j, tot = 0;
    int hnd = 1, found = 0;
    for (k = 0; ops[k] && !found; k++) found = !strcmp(op, ops[k]);
    if (!found || n->nin < 1 || n->nin > GDL__OX_MAX_IN) return 0;
    for (k = 0; k < n->nin; k++) {
        if (!n->in[k][0]) {
            in[k] = NULL;
            continue;
        }
        if (!(in[k] = gdl__oi_in(R, (int)k, 1))) return -1;
        if (!in[k]->i64 || in[k]->hnd > 1) return 0;
        tot += in[k]->n64;
    }
    if (!in[0]) return 0;
    if (!strcmp(op, "Cast") && gdl__oi_ai(n, "to", 0) != GDL__OX_INT64 && gdl__oi_ai(n, "to", 0) != GDL__OX_INT32)
        return 0;
    if (tot > GDL__OI_MAX_HOST) return 0; /* too many for the host: the tensor path */
    if (!(y = gdl__oi_host_new(R, tot + 1))) return -1;
    if (!strcmp(op, "Identity") || !strcmp(op, "Cast") || !strcmp(op, "Unsqueeze") || !strcmp(op, "Squeeze") ||
        !strcmp(op, "Reshape")) {
        memcpy(y, in[0]->i64, sizeof(int64_t) * (size_t)in[0]->n64);
        ny = in[0]->n64;
        hnd = !strcmp(op, "Unsqueeze") ? in[0]->hnd + 1 : !strcmp(op, "Squeeze") ? 0 : in[0]->hnd;
        if (!strcmp(op, "Reshape")) hnd = !in[1] ? 2 : in[1]->n64 > 1 ? 2 : (int)in[1]->n64; /* the target's dims */
        if (hnd > 1 || (hnd == 0 && ny != 1)) return 0; /* beyond a vector: the tensor path */
    } else if (!strcmp(op, "Concat")) {
        for (k = 0; k < n->nin; k++)
            if (in[k]) {
                memcpy(y + ny, in[k]->i64, sizeof(int64_t) * (size_t)in[k]->n64);
                ny += in[k]->n64;
            }
    } else if (!strcmp(op, "Gather")) { /* a 1-D data's values at the indices */
        if (!in[1] || in[0]->hnd != 1) return gdl__oi_fail(R, "a host Gather needs 1-D data and indices");
        for (k = 0; k < in[1]->n64; k++) {
            int64_t i = in[1]->i64[k];
            if (i < -in[0]->n64 || i >= in[0]->n64) return gdl__oi_fail(R, "index %lld out of range", (long long)i);
            y[ny++] = in[0]->i64[i < 0 ? i + in[0]->n64 : i];
        }
        hnd = in[1]->hnd;
    } else if (!strcmp(op, "Slice")) { /* of a 1-D value */
        const gdl__oi_rv *axes = n->nin > 3 ? in[3] : NULL;
        int64_t d = in[0]->n64, s0, e0, st = 1;
        if (!in[1] || !in[2] || in[1]->n64 != 1 || in[2]->n64 != 1 ||
            (axes && (axes->n64 != 1 || (axes->i64[0] != 0 && axes->i64[0] != -1))))
            return gdl__oi_fail(R, "a host Slice of one axis");
        if (n->nin > 4 && in[4]) {
            if (in[4]->n64 != 1 || in[4]->i64[0] == 0) return gdl__oi_fail(R, "a host Slice's step");
            st = in[4]->i64[0];
        }
        s0 = in[1]->i64[0];
        e0 = in[2]->i64[0];
        s0 = s0 < 0 ? s0 + d : s0;
        e0 = e0 < 0 ? e0 + d : e0;
        if (st > 0) { /* by count: j + st could overflow */
            s0 = s0 < 0 ? 0 : s0 > d ? d : s0;
            e0 = e0 < 0 ? 0 : e0 > d ? d : e0;
            for (j = 0; s0 < e0 && j <= (e0 - 1 - s0) / st; j++) y[ny++] = in[0]->i64[s0 + j * st];
        } else {
            int64_t back = st == INT64_MIN ? INT64_MAX : -st;
            s0 = s0 < 0 ? -1 : s0 > d - 1 ? d - 1 : s0;
            e0 = e0 < -1 ? -1 : e0 > d - 1 ? d - 1 : e0;
            for (j = 0; s0 > e0 && j <= (s0 - e0 - 1) / back; j++) y[ny++] = in[0]->i64[s0 - j * back];
        }
    } else if (!strcmp(op, "Neg")) {
        for (k = 0; k < in[0]->n64; k++) y[ny++] = -in[0]->i64[k];
        hnd = in[0]->hnd;
    } else if (!strcmp(op, "Range")) {
        double cnt;
        int64_t s0, dl;
        if (n->nin != 3 || !in[1] || !in[2] || in[0]->n64 != 1 || in[1]->n64 != 1 || in[2]->n64 != 1 || !in[2]->i64[0])
            return gdl__oi_fail(R, "Range takes three scalars, delta not 0");
        s0 = in[0]->i64[0], dl = in[2]->i64[0];
        cnt = ceil(((double)in[1]->i64[0] - (double)s0) / (double)dl);
        if (cnt > GDL__OI_MAX_HOST) return gdl__oi_fail(R, "a Range of over %d values", GDL__OI_MAX_HOST);
        if (!(y = gdl__oi_host_new(R, cnt > 0 ? (int64_t)cnt : 0))) return -1;
        for (j = 0; j < (int64_t)cnt; j++) y[ny++] = (int64_t)((uint64_t)s0 + (uint64_t)j * (uint64_t)dl);
    } else { /* Add, Sub, Mul, Div, Min, Max: a vector and a vector of its length or a single value */
        const gdl__oi_rv *a = in[0], *b = n->nin > 1 ? in[1] : NULL;
        if (!b || (a->n64 != b->n64 && a->n64 != 1 && b->n64 != 1)) return gdl__oi_fail(R, "host values of lengths that do not broadcast");
        ny = a->n64 > b->n64 ? a->n64 : b->n64;
        hnd = a->hnd > b->hnd ? a->hnd : b->hnd;
        for (k = 0; k < ny; k++) {
            int64_t u = a->i64[a->n64 == 1 ? 0 : k], w = b->i64[b->n64 == 1 ? 0 : k];
            switch (op[0] == 'M' ? op[1] : op[0]) {
            case 'A': y[k] = (int64_t)((uint64_t)u + (uint64_t)w); break;
            case 'S': y[k] = (int64_t)((uint64_t)u - (uint64_t)w); break;
            case 'u': y[k] = (int64_t)((uint64_t)u * (uint64_t)w); break;
            case 'i': y[k] = u < w ? u : w; break;
            case 'a': y[k] = u > w ? u : w; break;
            default:
                if (!w || (u == INT64_MIN && w == -1)) return gdl__oi_fail(R, "an integer division by zero");
                y[k] = u / w;
            }
        }
    }
    R->o[0].i64 = y;
    R->o[0].n64 = ny;
    R->o[0].hnd = hnd;
    return 1;
}

/* ---- LSTM and GRU nodes: PyTorch's gate steps (gdl_lstm_gates, gdl_gru_gates), the gates reordered ---- */

/* rows [blk*H, (blk+1)*H) of w for each blk of order, joined: ONNX's gate order into PyTorch's */
static gdl_tensor *gdl__oi_gates(gdl_tensor *w, int g, const int *order, int64_t h) {
    gdl_tensor *part[4];
    int k;
    for (k = 0; k < g; k++)
        if (!(part[k] = gdl_narrow(w, 0, order[k] * h, h))) return NULL;
    return gdl_concat(g, part, 0);
}

/* X [T,B,I], W [D,G*H,I], R [D,G*H,H], B [D,2*G*H], initial_h [D,B,H] (and initial_c): Y [T,D,B,H], Y_h, Y_c */
static int gdl__oi_rnn(gdl__oi_run *R, gdl_tensor *x, int lstm) {
    static const int lstm_order[4] = {0, 2, 3, 1}; /* ONNX i, o, f, c -> PyTorch i, f, g(c), o */
    static const int gru_order[3] = {1, 0, 2};     /* ONNX z, r, h -> PyTorch r, z, n */
    static const char *const dirs[] = {"forward", "reverse", "bidirectional", NULL};
    const gdl__oi_node *n = R->n;
    const gdl__oi_attr *dir = gdl__oi_attr_of(n, "direction");
    int g = lstm ? 4 : 3, nd = dir && dir->s && !strcmp(dir->s, "bidirectional") ? 2 : 1, d, rev, rc = -1;
    int64_t hs = gdl__oi_ai(n, "hidden_size", 0), T, B, t, shape[2];
    gdl_tensor *W = gdl__oi_t(R, 1), *Rw = gdl__oi_t(R, 2), *Bb = NULL, *h0 = NULL, *c0 = NULL;
    gdl_tensor **ys = NULL, *yd[2], *hl[2], *cl[2];
    if (!W || !Rw) return -1;
    if (gdl__oi_check_str(R, "direction", dirs) < 0) return -1;
    if (gdl__oi_attr_of(n, "activations") || gdl__oi_attr_of(n, "activation_alpha") ||
        gdl__oi_attr_of(n, "activation_beta") || gdl__oi_attr_of(n, "clip") || gdl__oi_ai(n, "layout", 0) ||
        gdl__oi_ai(n, "input_forget", 0) || (!lstm && !gdl__oi_ai(n, "linear_before_reset", 0)) ||
        gdl__oi_has(R, 4) || (lstm && gdl__oi_has(R, 7)))
        return gdl__oi_fail(R, "only the default activations, no clip, layout 0, %s, no sequence_lens%s",
                            lstm ? "input_forget 0" : "linear_before_reset 1 (PyTorch's)", lstm ? " or peepholes" : "");
    if ((gdl__oi_has(R, 3) && !(Bb = gdl__oi_t(R, 3))) || (gdl__oi_has(R, 5) && !(h0 = gdl__oi_t(R, 5))) ||
        (lstm && gdl__oi_has(R, 6) && !(c0 = gdl__oi_t(R, 6))))
        return -1;
    if (x->ndim != 3 || x->dtype != GDL_F32 || (T = x->shape[0]) < 1 || hs < 1 || hs > 1 << 20 ||
        W->ndim != 3 || W->shape[0] != nd || W->shape[1] != g * hs || W->shape[2] != x->shape[2] || Rw->ndim != 3 ||
        Rw->shape[0] != nd || Rw->shape[1] != g * hs || Rw->shape[2] != hs ||
        (Bb && (Bb->ndim != 2 || Bb->shape[0] != nd || Bb->shape[1] != 2 * g * hs)) ||
        (h0 && (h0->ndim != 3 || h0->shape[0] != nd || h0->shape[1] != x->shape[1] || h0->shape[2] != hs)) ||
        (c0 && (c0->ndim != 3 || c0->shape[0] != nd || c0->shape[1] != x->shape[1] || c0->shape[2] != hs)))
        return gdl__oi_fail(R, "X %s, W %s, R %s with hidden_size %lld and %d directions do not fit", gdl_shape_str(x),
                            gdl_shape_str(W), gdl_shape_str(Rw), (long long)hs, nd);
    B = x->shape[1];
    if (!(ys = (gdl_tensor **)GPUDL_MALLOC(sizeof *ys * (size_t)T))) {
        gdl__set_error("gdl_onnx_run: out of memory");
        return -1;
    }
    for (d = 0; d < nd; d++) {
        gdl_tensor *wd = gdl_select(W, 0, d), *rd = gdl_select(Rw, 0, d), *wp, *rp, *wb = NULL, *rb = NULL, *gx, *h, *c;
        int64_t xs[2] = {T * B, x->shape[2]}, gs[3] = {T, B, g * hs};
        rev = (dir && dir->s && !strcmp(dir->s, "reverse")) || d == 1;
        wp = gdl__oi_gates(wd, g, lstm ? lstm_order : gru_order, hs);
        rp = gdl__oi_gates(rd, g, lstm ? lstm_order : gru_order, hs);
        if (Bb) {
            gdl_tensor *bd = gdl_select(Bb, 0, d);
            wb = gdl__oi_gates(gdl_narrow(bd, 0, 0, g * hs), g, lstm ? lstm_order : gru_order, hs);
            rb = gdl__oi_gates(gdl_narrow(bd, 0, g * hs, g * hs), g, lstm ? lstm_order : gru_order, hs);
            if (!wb || !rb) goto done;
        }
        if (!wp || !rp || !(gx = gdl_reshape(gdl_linear(gdl_reshape(x, 2, xs), wp, wb), 3, gs))) goto done;
        shape[0] = B;
        shape[1] = hs;
        h = h0 ? gdl_select(h0, 0, d) : gdl__tmp("gdl_onnx_run", 2, shape, GDL_F32, x->device);
        c = !lstm ? NULL : c0 ? gdl_select(c0, 0, d) : gdl__tmp("gdl_onnx_run", 2, shape, GDL_F32, x->device);
        if (!h || (lstm && !c) || (!h0 && gdl_fill_(h, 0) < 0) || (lstm && !c0 && gdl_fill_(c, 0) < 0)) goto done;
        for (t = 0; t < T; t++) {
            int64_t s = rev ? T - 1 - t : t;
            gdl_tensor *gh = gdl_linear(h, rp, rb), *gxs = gdl_select(gx, 0, s);
            if (lstm) {
                gdl_tensor *st = gdl_lstm_gates(gxs, gh, c);
                h = gdl_select(st, 0, 0);
                c = gdl_select(st, 0, 1);
            } else {
                h = gdl_gru_gates(gxs, gh, h);
            }
            if (!(ys[s] = h) || (lstm && !c)) goto done;
        }
        hl[d] = h;
        cl[d] = c;
        if (!(yd[d] = gdl_stack((int)T, ys, 0))) goto done;
    }
    if (!(R->o[0].t = gdl_stack(nd, yd, 1)) || (n->nout > 1 && n->out[1][0] && !(R->o[1].t = gdl_stack(nd, hl, 0))) ||
        (lstm && n->nout > 2 && n->out[2][0] && !(R->o[2].t = gdl_stack(nd, cl, 0))))
        goto done;
    rc = 0;
done:
    GPUDL_FREE(ys);
    return rc;
}

/* ---- the nodes ---- */

/* Split: equal parts (num_outputs, opset 18+, or as many as outputs) or the sizes of its second input (the
   attribute below opset 13) */
static int gdl__oi_split(gdl__oi_run *R, gdl_tensor *x) {
    const gdl__oi_node *n = R->n;
    const gdl__oi_attr *sa = gdl__oi_attr_of(n, "split");
    int64_t sz[GDL__OI_MAX_OUT], ns = 0, k, at = 0, d;
    int ax = gdl__oi_axis(R, gdl__oi_ai(n, "axis", 0), x->ndim);
    if (ax < 0) return -1;
    if (n->nout > GDL__OI_MAX_OUT) return gdl__oi_fail(R, "%d outputs (at most %d)", n->nout, GDL__OI_MAX_OUT);
    d = x->shape[ax];
    if (gdl__oi_has(R, 1)) {
        if ((ns = gdl__oi_list(R, 1, sz, GDL__OI_MAX_OUT)) < 0) return -1;
    } else if (sa) {
        for (ns = 0; ns < sa->nints && ns < GDL__OI_MAX_OUT; ns++) sz[ns] = sa->ints[ns];
    } else { /* equal parts, the last one smaller */
        int64_t parts = gdl__oi_ai(n, "num_outputs", n->nout), each;
        if (parts != n->nout || parts < 1) return gdl__oi_fail(R, "num_outputs %lld for %d outputs", (long long)parts, n->nout);
        each = (d + parts - 1) / parts;
        for (ns = 0; ns < parts; ns++) sz[ns] = each * (ns + 1) <= d ? each : d - each * ns > 0 ? d - each * ns : 0;
    }
    for (k = 0; k < ns; k++) at += sz[k] >= 0 && sz[k] <= d ? sz[k] : d + 1; /* at most 8 * (d + 1) */
    if (ns != n->nout || at != d)
        return gdl__oi_fail(R, "split sizes for %d outputs that do not add up to dim %d's %lld", n->nout, ax, (long long)d);
    for (k = 0, at = 0; k < ns; at += sz[k], k++)
        if (!(R->o[k].t = gdl_narrow(x, ax, at, sz[k]))) return -1;
    return 0;
}

/* Unsqueeze / Squeeze of a tensor: its shape with axes put in or taken out */
static gdl_tensor *gdl__oi_squeeze(gdl__oi_run *R, gdl_tensor *x, int un) {
    int64_t axes[GDL_MAX_DIMS], shape[GDL_MAX_DIMS];
    int na = gdl__oi_axes(R, 1, axes), out = un ? x->ndim + na : x->ndim, k, j, src = 0, keep[GDL_MAX_DIMS * 2];
    if (na < 0) return NULL;
    if (out > GDL_MAX_DIMS) {
        gdl__oi_fail(R, "%d dims", out);
        return NULL;
    }
    for (k = 0; k < GDL_MAX_DIMS * 2; k++) keep[k] = 1;
    for (j = 0; j < na; j++) {
        int a = gdl__oi_axis(R, axes[j], out);
        if (a < 0) return NULL;
        if ((!un && x->shape[a] != 1) || !keep[a]) {
            gdl__oi_fail(R, keep[a] ? "dim %d of %s is not 1" : "axis %d twice (input %s)", a, gdl_shape_str(x));
            return NULL;
        }
        keep[a] = 0;
    }
    if (!un && !na)
        for (k = 0; k < x->ndim; k++) keep[k] = x->shape[k] != 1;
    for (k = 0, j = 0; k < out; k++) {
        if (un) shape[j++] = keep[k] ? x->shape[src++] : 1;
        else if (keep[k]) shape[j++] = x->shape[k];
    }
    return gdl_reshape(x, j, shape);
}

/* ReduceMean / ReduceSum / ReduceMax over the given axes (all when none), one dim at a time from the last */
static gdl_tensor *gdl__oi_reduce(gdl__oi_run *R, gdl_tensor *x) {
    const char *op = R->n->op;
    int64_t axes[GDL_MAX_DIMS];
    int keep = (int)gdl__oi_ai(R->n, "keepdims", 1), na = gdl__oi_axes(R, 1, axes), on[GDL_MAX_DIMS] = {0}, k, nd = x->ndim;
    if (na < 0) return NULL;
    if (!na && gdl__oi_ai(R->n, "noop_with_empty_axes", 0)) return x;
    for (k = 0; k < na; k++) {
        int a = gdl__oi_axis(R, axes[k], nd);
        if (a < 0) return NULL;
        on[a] = 1;
    }
    for (k = nd - 1; k >= 0 && x; k--)
        if (on[k] || !na)
            x = op[6] == 'S' ? gdl_sum_dim(x, k, keep) : op[7] == 'e' ? gdl_mean_dim(x, k, keep) : gdl_max_dim(x, k, keep);
    return x;
}

/* Gemm: alpha * A' B' + beta * C, A' and B' transposed as transA / transB say */
static gdl_tensor *gdl__oi_gemm(gdl__oi_run *R, gdl_tensor *a) {
    double alpha = gdl__oi_af(R->n, "alpha", 1), beta = gdl__oi_af(R->n, "beta", 1);
    gdl_tensor *b = gdl__oi_t(R, 1), *c = gdl__oi_has(R, 2) ? gdl__oi_t(R, 2) : NULL, *y;
    if (!b || (gdl__oi_has(R, 2) && !c)) return NULL;
    if (a->ndim != 2 || b->ndim != 2) {
        gdl__oi_fail(R, "A %s and B %s must be matrices", gdl_shape_str(a), gdl_shape_str(b));
        return NULL;
    }
    if (gdl__oi_ai(R->n, "transA", 0)) a = gdl_transpose(a, 0, 1);
    if (c && beta != 1) c = gdl_mul_scalar(c, beta);
    if (gdl__oi_ai(R->n, "transB", 0)) {
        if (alpha == 1) return gdl_linear(a, b, c); /* PyTorch's nn.Linear: one fused op */
        y = gdl_linear(a, b, NULL);
    } else {
        y = gdl_matmul(a, b);
    }
    if (alpha != 1) y = gdl_mul_scalar(y, alpha);
    return c ? gdl_add(y, c) : y;
}

/* Gather along axis: an embedding (f32 [V,D] data, axis 0, any indices), 1-D indices (index_select) or a single
   index (the axis taken out) */
static gdl_tensor *gdl__oi_gather(gdl__oi_run *R, gdl_tensor *x, gdl_tensor *idx) {
    int ax = gdl__oi_axis(R, gdl__oi_ai(R->n, "axis", 0), x->ndim), k, j;
    int64_t shape[GDL_MAX_DIMS], one = 1;
    gdl_tensor *y;
    if (ax < 0) return NULL;
    if (ax == 0 && x->ndim == 2 && x->dtype == GDL_F32) return gdl_embedding(idx, x);
    if (idx->ndim == 1) return gdl_index_select(x, ax, idx);
    if (idx->ndim != 0) {
        gdl__oi_fail(R, "indices %s on axis %d of %s: only an embedding (data [V,D], axis 0), 1-D indices or one "
                     "index", gdl_shape_str(idx), ax, gdl_shape_str(x));
        return NULL;
    }
    if (!(y = gdl_index_select(x, ax, gdl_reshape(idx, 1, &one)))) return NULL;
    for (k = 0, j = 0; k < x->ndim; k++)
        if (k != ax) shape[j++] = x->shape[k];
    return gdl_reshape(y, j, shape);
}

/* Constant: a tensor, or value_int / value_ints (host values) or value_float */
static int gdl__oi_constant(gdl__oi_run *R) {
    const gdl__oi_node *n = R->n;
    const gdl__oi_attr *v = gdl__oi_attr_of(n, "value"), *vi = gdl__oi_attr_of(n, "value_int"),
                       *vis = gdl__oi_attr_of(n, "value_ints"), *vf = gdl__oi_attr_of(n, "value_float");
    if (v && v->t) {
        R->o[0].t = v->t->t;
        R->o[0].i64 = v->t->i64;
        R->o[0].n64 = v->t->n64;
        R->o[0].hnd = v->t->hnd;
        R->o[0].qtype = v->t->qtype;
        return 0;
    }
    if (vi || vis) {
        R->o[0].i64 = vi ? &vi->i : vis->ints;
        R->o[0].n64 = vi ? 1 : vis->nints;
        R->o[0].hnd = vi ? 0 : 1;
        return 0;
    }
    if (vf) {
        int64_t none[1] = {1};
        gdl_tensor *t = gdl__tmp("gdl_onnx_run", 0, none, GDL_F32, R->m->dev);
        if (!t || gdl_fill_(t, vf->f) < 0) return -1;
        R->o[0].t = t;
        return 0;
    }
    return gdl__oi_fail(R, "only value, value_int, value_ints or value_float");
}

/* The shape L[0..nl) that ConstantOfShape or Expand makes a tensor of: no negative dim, at most
   GDL__OI_MAX_MADE elements. 0 / -1 + error. */
static int gdl__oi_made_shape(gdl__oi_run *R, const int64_t *L, int64_t nl) {
    int64_t k, cnt = 1;
    for (k = 0; k < nl; k++) {
        if (L[k] < 0) return gdl__oi_fail(R, "a negative dim in the shape %lld", (long long)L[k]);
        if (L[k] && L[k] > GDL__OI_MAX_MADE / cnt)
            return gdl__oi_fail(R, "a shape of over %lld elements (the most it makes)", (long long)GDL__OI_MAX_MADE);
        cnt *= L[k] ? L[k] : 1;
    }
    return 0;
}

/* ConstantOfShape: the value (a one-element tensor, 0.0f by default) at the shape of the host input */
static gdl_tensor *gdl__oi_const_of_shape(gdl__oi_run *R) {
    const gdl__oi_attr *v = gdl__oi_attr_of(R->n, "value");
    int64_t shape[GDL_MAX_DIMS], nl = gdl__oi_list(R, 0, shape, GDL_MAX_DIMS);
    gdl_dtype dt = v && v->t && v->t->t ? v->t->t->dtype : GDL_F32;
    double val = 0;
    gdl_tensor *t;
    if (nl < 0 || gdl__oi_made_shape(R, shape, nl) < 0) return NULL;
    if (v && v->t) {
        const gdl_tensor *c = v->t->t;
        unsigned char raw[16];
        if (v->t->i64 && v->t->n64 == 1) {
            val = (double)v->t->i64[0];
        } else if (!c || c->numel != 1 || (c->dtype != GDL_F32 && c->dtype != GDL_I32 && c->dtype != GDL_U8)) {
            gdl__oi_fail(R, "the value must be one f32, integer or bool");
            return NULL;
        } else if (gdl_copy_to_host(c, raw, gdl_dtype_size(c->dtype)) < 0) {
            return NULL;
        } else if (c->dtype == GDL_F32) {
            gdl_real r;
            memcpy(&r, raw, sizeof r);
            val = (double)r;
        } else if (c->dtype == GDL_I32) {
            int32_t i;
            memcpy(&i, raw, sizeof i);
            val = i;
        } else {
            val = raw[0];
        }
    }
    if (!(t = gdl__tmp("gdl_onnx_run", (int)nl, shape, dt, R->m->dev)) || gdl_fill_(t, val) < 0) return NULL;
    return t;
}

/* Erf: gpudl has no erf op; Abramowitz and Stegun's 7.1.26, absolute error under 1.5e-7 (differentiable: its
   gradient is the approximation's) */
static gdl_tensor *gdl__oi_erf(gdl_tensor *x) {
    static const double p = 0.3275911, c[5] = {0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429};
    gdl_tensor *ab = gdl_abs(x), *t, *poly, *r;
    int k;
    t = gdl_pow_scalar(gdl_add_scalar(gdl_mul_scalar(ab, p), 1), -1);
    poly = gdl_mul_scalar(t, c[4]);
    for (k = 3; k >= 0; k--) poly = gdl_mul(gdl_add_scalar(poly, c[k]), t);
    r = gdl_add_scalar(gdl_mul_scalar(gdl_mul(poly, gdl_exp(gdl_mul_scalar(gdl_mul(ab, ab), -1))), -1), 1);
    return gdl_where(gdl_compare_scalar(x, GDL_CMP_GE, 0), r, gdl_mul_scalar(r, -1));
}

/* the ops of two inputs (broadcasting): their index in this list, or -1 */
static const char *const gdl__oi_binaries[] = {"Add", "Sub", "Mul", "Div", "Pow", "Min", "Max", "MatMul", "Equal",
                                               "Less", "LessOrEqual", "Greater", "GreaterOrEqual", NULL};
static int gdl__oi_binary_of(const char *op) {
    int k;
    for (k = 0; gdl__oi_binaries[k]; k++)
        if (!strcmp(op, gdl__oi_binaries[k])) return k;
    return -1;
}
static gdl_tensor *gdl__oi_binary(int which, gdl_tensor *x, gdl_tensor *b) {
    static const gdl_compare_op cmp[5] = {GDL_CMP_EQ, GDL_CMP_LT, GDL_CMP_LE, GDL_CMP_GT, GDL_CMP_GE};
    switch (which) {
    case 0: return gdl_add(x, b);
    case 1: return gdl_sub(x, b);
    case 2: return gdl_mul(x, b);
    case 3: return gdl_div(x, b);
    case 4: return gdl_pow(x, b);
    case 5: return gdl_minimum(x, b);
    case 6: return gdl_maximum(x, b);
    case 7: return gdl_matmul(x, b);
    default: return gdl_compare(x, b, cmp[which - 8]);
    }
}

/* ---- QuantizeLinear / DequantizeLinear (QDQ), on f32 tensors holding the integers ----
   y = saturate(round_half_even(x / scale) + zero_point) and x = (y - zero_point) * scale, each step rounded to
   f32 as ONNX Runtime computes it; the integer type (uint8 or int8) is the zero point's, uint8 without one. */

/* input k (a scale or zero point) shaped to broadcast against x: a scalar or 1-element tensor as it is, a 1-D
   tensor of x's size along the axis attribute (per axis) as [1.., C, ..1]; as f32. NULL + error */
static gdl_tensor *gdl__oi_qparam(gdl__oi_run *R, int k, const gdl_tensor *x) {
    gdl_tensor *p = gdl__oi_t(R, k);
    int64_t shape[GDL_MAX_DIMS];
    int ax, d;
    if (!p) return NULL;
    if (p->dtype != GDL_F32 && !(p = gdl_to_dtype(p, GDL_F32))) return NULL;
    if (p->numel == 1 && p->ndim <= 1) return p;
    if (gdl__oi_ai(R->n, "block_size", 0)) {
        gdl__oi_fail(R, "blocked quantization (block_size) is not run");
        return NULL;
    }
    if ((ax = gdl__oi_axis(R, gdl__oi_ai(R->n, "axis", 1), x->ndim)) < 0) return NULL;
    if (p->ndim != 1 || p->numel != x->shape[ax]) {
        gdl__oi_fail(R, "input %d %s is neither a scalar nor one value per index of axis %d of %s", k, gdl_shape_str(p),
                     ax, gdl_shape_str(x));
        return NULL;
    }
    for (d = 0; d < x->ndim; d++) shape[d] = d == ax ? x->shape[ax] : 1;
    return gdl_reshape(p, x->ndim, shape);
}

/* QuantizeLinear (q = 1) or DequantizeLinear (q = 0) of x into R->o[0] */
static int gdl__oi_qdq(gdl__oi_run *R, gdl_tensor *x, int q) {
    const gdl__oi_rv *zv = gdl__oi_has(R, 2) ? gdl__oi_in(R, 2, 1) : NULL;
    gdl_tensor *s, *z = NULL, *y;
    int qtype = GDL__OX_UINT8;
    if (gdl__oi_has(R, 2) && !zv) return -1;
    if (zv) { /* the integer type: int8 (f32 integers), uint8; int32 zero points only dequantize */
        const gdl_tensor *zt = zv->t;
        qtype = zv->qtype ? zv->qtype : zt && zt->dtype == GDL_U8 ? GDL__OX_UINT8 : !q && zt && zt->dtype == GDL_I32 ? GDL__OX_INT32 : 0;
        if (!qtype) return gdl__oi_fail(R, "zero point type %s is not run (int8 or uint8%s)",
                                        zt ? gdl_dtype_name(zt->dtype) : "int64", q ? "" : ", or int32");
    } else if (q && gdl__oi_attr_of(R->n, "output_dtype")) {
        int64_t od = gdl__oi_ai(R->n, "output_dtype", GDL__OX_UINT8);
        if (od != GDL__OX_UINT8 && od != GDL__OX_INT8) return gdl__oi_fail(R, "output_dtype %lld is not run", (long long)od);
        qtype = (int)od;
    }
    if (x->dtype != GDL_F32 && !(x = gdl_to_dtype(x, GDL_F32))) return -1;
    if (!(s = gdl__oi_qparam(R, 1, x)) || (zv && !(z = gdl__oi_qparam(R, 2, x)))) return -1;
    if (!q) { /* (y - zero_point) * scale: the difference is an exact integer */
        y = gdl_mul(z ? gdl_sub(x, z) : x, s);
    } else { /* round half to even by adding and taking away 1.5 * 2^23 (exact below 2^22; clamped after), 2^52
                with GPUDL_DOUBLE, whose f32 tensors hold doubles */
        const double big = sizeof(gdl_real) == 4 ? 12582912.0 : 6755399441055744.0, lo = qtype == GDL__OX_INT8 ? -128 : 0, hi = qtype == GDL__OX_INT8 ? 127 : 255;
        y = gdl_add_scalar(gdl_add_scalar(gdl_div(x, s), big), -big);
        if (y && z) y = gdl_add(y, z);
        if (y) y = gdl_clamp(y, lo, hi);
        R->o[0].qtype = qtype;
    }
    return (R->o[0].t = y) ? 0 : -1;
}

/* Clip: x between the optional min and max inputs (opset 11+) or attributes (before) */
static gdl_tensor *gdl__oi_clip(gdl__oi_run *R, gdl_tensor *x) {
    gdl_tensor *lo = gdl__oi_has(R, 1) ? gdl__oi_t(R, 1) : NULL, *hi = gdl__oi_has(R, 2) ? gdl__oi_t(R, 2) : NULL;
    if ((gdl__oi_has(R, 1) && !lo) || (gdl__oi_has(R, 2) && !hi)) return NULL;
    if (!gdl__oi_has(R, 1) && gdl__oi_attr_of(R->n, "min")) x = gdl_clamp_min(x, gdl__oi_af(R->n, "min", 0));
    if (!gdl__oi_has(R, 2) && gdl__oi_attr_of(R->n, "max") && x) x = gdl_clamp_max(x, gdl__oi_af(R->n, "max", 0));
    if (lo && x) x = gdl_maximum(x, lo);
    if (hi && x) x = gdl_minimum(x, hi);
    return x;
}

/* the ONNX element type `to` as a gdl dtype (GDL_DTYPE_COUNT: none) */
static gdl_dtype gdl__oi_dtype(int64_t to) {
    return to == GDL__OX_FLOAT ? GDL_F32 : to == GDL__OX_INT32 || to == GDL__OX_INT64 ? GDL_I32
         : to == GDL__OX_UINT8 || to == GDL__OX_BOOL ? GDL_U8 : to == GDL__OX_FLOAT16 ? GDL_F16
         : to == GDL__OX_BFLOAT16 ? GDL_BF16 : GDL_DTYPE_COUNT;
}

/* one node on tensors; its outputs in R->o */
static int gdl__oi_node_run(gdl__oi_run *R) {
    const gdl__oi_node *n = R->n;
    const char *op = n->op;
    gdl_tensor *x = NULL, *a, *b, **y = &R->o[0].t;
    int64_t L[GDL_MAX_DIMS * 4], nl;
    int ax, rc;
    if (!strcmp(op, "Constant")) return gdl__oi_constant(R);
    if (!strcmp(op, "Shape")) { /* int64 values on the host */
        const gdl__oi_rv *v = gdl__oi_in(R, 0, 1);
        int64_t s0 = gdl__oi_ai(n, "start", 0), e0, nd, k, *sh;
        if (!v) return -1;
        nd = v->t ? v->t->ndim : v->hnd;
        e0 = gdl__oi_ai(n, "end", nd);
        s0 = s0 < 0 ? s0 + nd : s0;
        e0 = e0 < 0 ? e0 + nd : e0;
        s0 = s0 < 0 ? 0 : s0 > nd ? nd : s0;
        e0 = e0 < s0 ? s0 : e0 > nd ? nd : e0;
        if (!(sh = gdl__oi_host_new(R, e0 - s0))) return -1;
        for (k = s0; k < e0; k++) sh[k - s0] = v->t ? v->t->shape[k] : v->n64;
        R->o[0].i64 = sh;
        R->o[0].n64 = e0 - s0;
        R->o[0].hnd = 1;
        return 0;
    }
    if ((rc = gdl__oi_host_op(R)) != 0) return rc < 0 ? -1 : 0;
    if (!strcmp(op, "ConstantOfShape")) return (*y = gdl__oi_const_of_shape(R)) ? 0 : -1;
    if (!(x = gdl__oi_t(R, 0))) return -1; /* every other op has a first input */
#define GDL__OI_UN(name, call) if (!strcmp(op, name)) return (*y = (call)) ? 0 : -1
    GDL__OI_UN("Identity", x);
    GDL__OI_UN("Dropout", x); /* inference: the identity; its mask output is not made */
    GDL__OI_UN("Relu", gdl_relu(x));
    GDL__OI_UN("Sigmoid", gdl_sigmoid(x));
    GDL__OI_UN("Tanh", gdl_tanh(x));
    GDL__OI_UN("Exp", gdl_exp(x));
    GDL__OI_UN("Log", gdl_log(x));
    GDL__OI_UN("Sqrt", gdl_sqrt(x));
    GDL__OI_UN("Abs", gdl_abs(x));
    GDL__OI_UN("Neg", gdl_mul_scalar(x, -1));
    GDL__OI_UN("Reciprocal", gdl_pow_scalar(x, -1));
    GDL__OI_UN("Erf", gdl__oi_erf(x));
    GDL__OI_UN("LeakyRelu", gdl_leaky_relu(x, gdl__oi_af(n, "alpha", 0.01)));
    GDL__OI_UN("MaxPool", gdl__oi_pool(R, x, 0));
    GDL__OI_UN("AveragePool", gdl__oi_pool(R, x, 1));
    GDL__OI_UN("GlobalAveragePool", gdl_global_avg_pool2d(x));
    GDL__OI_UN("Not", gdl_compare_scalar(x, GDL_CMP_EQ, 0));
    GDL__OI_UN("Gemm", gdl__oi_gemm(R, x));
    GDL__OI_UN("Unsqueeze", gdl__oi_squeeze(R, x, 1));
    GDL__OI_UN("Squeeze", gdl__oi_squeeze(R, x, 0));
    GDL__OI_UN("ReduceMean", gdl__oi_reduce(R, x));
    GDL__OI_UN("ReduceSum", gdl__oi_reduce(R, x));
    GDL__OI_UN("ReduceMax", gdl__oi_reduce(R, x));
    GDL__OI_UN("Clip", gdl__oi_clip(R, x));
    if (!strcmp(op, "QuantizeLinear") || !strcmp(op, "DequantizeLinear")) return gdl__oi_qdq(R, x, op[0] == 'Q');
    if (!strcmp(op, "Split")) return gdl__oi_split(R, x);
    if (!strcmp(op, "LSTM") || !strcmp(op, "GRU")) return gdl__oi_rnn(R, x, op[0] == 'L');
    if (!strcmp(op, "Gelu")) {
        static const char *const approx[] = {"none", "tanh", NULL};
        const gdl__oi_attr *ap = gdl__oi_attr_of(n, "approximate");
        if (gdl__oi_check_str(R, "approximate", approx) < 0) return -1;
        return (*y = gdl_gelu(x, ap && ap->s && !strcmp(ap->s, "tanh"))) ? 0 : -1;
    }
    if (!strcmp(op, "Softmax") || !strcmp(op, "LogSoftmax")) {
        if ((ax = gdl__oi_axis(R, gdl__oi_ai(n, "axis", -1), x->ndim)) < 0) return -1;
        return (*y = op[0] == 'S' ? gdl_softmax(x, ax) : gdl_log_softmax(x, ax)) ? 0 : -1;
    }
    if ((rc = gdl__oi_binary_of(op)) >= 0) {
        if (!(b = gdl__oi_t(R, 1))) return -1;
        return (*y = gdl__oi_binary(rc, x, b)) ? 0 : -1;
    }
    if (!strcmp(op, "Transpose")) {
        const gdl__oi_attr *p = gdl__oi_attr_of(n, "perm");
        int perm[GDL_MAX_DIMS], k;
        if (!p) { /* the dims reversed */
            for (k = 0; k < x->ndim; k++) perm[k] = x->ndim - 1 - k;
        } else if (p->nints != x->ndim) {
            return gdl__oi_fail(R, "perm must give %d dims", x->ndim);
        } else {
            for (k = 0; k < x->ndim; k++) perm[k] = p->ints[k] >= 0 && p->ints[k] < x->ndim ? (int)p->ints[k] : -1;
        }
        return (*y = gdl_permute(x, x->ndim, perm)) ? 0 : -1;
    }
    if (!strcmp(op, "Reshape")) {
        if ((nl = gdl__oi_list(R, 1, L, GDL_MAX_DIMS)) < 0) return -1;
        return (*y = gdl__oi_reshape(R, x, L, nl)) ? 0 : -1;
    }
    if (!strcmp(op, "Flatten")) {
        if ((ax = gdl__oi_axis(R, gdl__oi_ai(n, "axis", 1), x->ndim + 1)) < 0) return -1;
        L[0] = 1;
        for (nl = 0; nl < ax; nl++) L[0] *= x->shape[nl];
        L[1] = -1;
        if (!L[0]) return gdl__oi_fail(R, "a flatten of an empty tensor");
        return (*y = gdl_reshape(x, 2, L)) ? 0 : -1;
    }
    if (!strcmp(op, "Conv")) {
        gdl_tensor *c = gdl__oi_has(R, 2) ? gdl__oi_t(R, 2) : NULL;
        if (!(b = gdl__oi_t(R, 1)) || (gdl__oi_has(R, 2) && !c)) return -1;
        return (*y = gdl__oi_conv(R, x, b, c)) ? 0 : -1;
    }
    if (!strcmp(op, "BatchNormalization")) {
        gdl_tensor *s = gdl__oi_t(R, 1), *bb = gdl__oi_t(R, 2), *mean = gdl__oi_t(R, 3), *var = gdl__oi_t(R, 4);
        if (!s || !bb || !mean || !var) return -1;
        if (gdl__oi_ai(n, "training_mode", 0) || n->nout > 1) return gdl__oi_fail(R, "training_mode is not run");
        return (*y = gdl_batch_norm(x, mean, var, s, bb, 0, 0.1, gdl__oi_af(n, "epsilon", 1e-5))) ? 0 : -1;
    }
    if (!strcmp(op, "LayerNormalization")) {
        gdl_tensor *s = gdl__oi_t(R, 1), *bb = gdl__oi_has(R, 2) ? gdl__oi_t(R, 2) : NULL;
        if (!s || (gdl__oi_has(R, 2) && !bb)) return -1;
        if ((ax = gdl__oi_axis(R, gdl__oi_ai(n, "axis", -1), x->ndim)) < 0) return -1;
        if (ax != x->ndim - 1 || n->nout > 1) return gdl__oi_fail(R, "only the last axis, and no Mean / InvStdDev outputs");
        return (*y = gdl_layer_norm(x, s, bb, gdl__oi_af(n, "epsilon", 1e-5))) ? 0 : -1;
    }
    if (!strcmp(op, "Concat")) {
        gdl_tensor *xs[GDL__OX_MAX_IN];
        int k;
        if (n->nin > GDL__OX_MAX_IN) return gdl__oi_fail(R, "over %d inputs", GDL__OX_MAX_IN);
        for (k = 0; k < n->nin; k++)
            if (!(xs[k] = gdl__oi_t(R, k))) return -1;
        if ((ax = gdl__oi_axis(R, gdl__oi_ai(n, "axis", 0), x->ndim)) < 0) return -1;
        return (*y = gdl_concat(n->nin, xs, ax)) ? 0 : -1;
    }
    if (!strcmp(op, "Gather")) {
        if (!(b = gdl__oi_t(R, 1))) return -1;
        return (*y = gdl__oi_gather(R, x, b)) ? 0 : -1;
    }
    if (!strcmp(op, "GatherElements")) {
        if (!(b = gdl__oi_t(R, 1)) || (ax = gdl__oi_axis(R, gdl__oi_ai(n, "axis", 0), x->ndim)) < 0) return -1;
        return (*y = gdl_gather(x, ax, b)) ? 0 : -1;
    }
    if (!strcmp(op, "Cast") || !strcmp(op, "CastLike")) {
        gdl_dtype dt;
        int64_t to = gdl__oi_ai(n, "to", 0);
        if (op[4]) { /* CastLike: the second input's type */
            if (!(b = gdl__oi_t(R, 1))) return -1;
            dt = b->dtype;
            to = dt == GDL_F32 ? GDL__OX_FLOAT : dt == GDL_U8 ? GDL__OX_UINT8 : GDL__OX_INT32;
        } else if ((dt = gdl__oi_dtype(to)) == GDL_DTYPE_COUNT) {
            return gdl__oi_fail(R, "to type %lld is not run", (long long)to);
        }
        if (to == GDL__OX_BOOL && x->dtype != GDL_U8) return (*y = gdl_compare_scalar(x, GDL_CMP_NE, 0)) ? 0 : -1;
        return (*y = x->dtype == dt ? x : gdl_to_dtype(x, dt)) ? 0 : -1;
    }
    if (!strcmp(op, "Where")) {
        gdl_tensor *c = gdl__oi_t(R, 2);
        if (!(a = gdl__oi_t(R, 1)) || !c) return -1;
        return (*y = gdl_where(x, a, c)) ? 0 : -1;
    }
    if (!strcmp(op, "Trilu")) {
        int64_t k = 0;
        if (gdl__oi_has(R, 1) && gdl__oi_list(R, 1, &k, 1) != 1) return -1;
        return (*y = gdl__oi_ai(n, "upper", 1) ? gdl_triu(x, k) : gdl_tril(x, k)) ? 0 : -1;
    }
    if (!strcmp(op, "CumSum")) {
        if (gdl__oi_list(R, 1, L, 1) != 1 || (ax = gdl__oi_axis(R, L[0], x->ndim)) < 0) return -1;
        if (gdl__oi_ai(n, "exclusive", 0) || gdl__oi_ai(n, "reverse", 0)) return gdl__oi_fail(R, "exclusive and reverse are not run");
        return (*y = gdl_cumsum(x, ax)) ? 0 : -1;
    }
    if (!strcmp(op, "Slice")) {
        int64_t st[GDL_MAX_DIMS], en[GDL_MAX_DIMS], axs[GDL_MAX_DIMS], sp[GDL_MAX_DIMS], ns, k;
        gdl_tensor *r = x;
        if ((ns = gdl__oi_list(R, 1, st, GDL_MAX_DIMS)) < 0 || gdl__oi_list(R, 2, en, GDL_MAX_DIMS) != ns) return -1;
        for (k = 0; k < ns; k++) {
            axs[k] = k;
            sp[k] = 1;
        }
        if (gdl__oi_has(R, 3) && gdl__oi_list(R, 3, axs, GDL_MAX_DIMS) != ns) return -1;
        if (gdl__oi_has(R, 4) && gdl__oi_list(R, 4, sp, GDL_MAX_DIMS) != ns) return -1;
        for (k = 0; k < ns && r; k++) {
            int64_t d, s0, e0;
            if ((ax = gdl__oi_axis(R, axs[k], r->ndim)) < 0) return -1;
            d = r->shape[ax];
            if (sp[k] < 1) return gdl__oi_fail(R, "only positive steps");
            s0 = st[k] < 0 ? st[k] + d : st[k];
            e0 = en[k] < 0 ? en[k] + d : en[k];
            s0 = s0 < 0 ? 0 : s0 > d ? d : s0;
            e0 = e0 < s0 ? s0 : e0 > d ? d : e0;
            r = sp[k] == 1 ? gdl_narrow(r, ax, s0, e0 - s0) : gdl_slice_dim(r, ax, s0, e0, sp[k]);
        }
        return (*y = r) ? 0 : -1;
    }
    if (!strcmp(op, "Expand")) { /* x broadcast to the shape: x + zeros(shape) */
        gdl_tensor *z;
        if ((nl = gdl__oi_list(R, 1, L, GDL_MAX_DIMS)) < 0 || gdl__oi_made_shape(R, L, nl) < 0) return -1;
        if (!(z = gdl__tmp("gdl_onnx_run", (int)nl, L, x->dtype, x->device)) || gdl_fill_(z, 0) < 0) return -1;
        return (*y = x->dtype == GDL_F32 ? gdl_add(z, x) : gdl_where(gdl_compare_scalar(z, GDL_CMP_EQ, 0), x, z)) ? 0 : -1;
    }
    return gdl__oi_fail(R, "the op is not run (docs/onnx.md lists the ops gdl_onnx_run runs)");
#undef GDL__OI_UN
}

GPUDL_API int gdl_onnx_run(gdl_onnx_model *m, int nin, gdl_tensor *const *inputs, int max_out, gdl_tensor **outputs,
                           int *nout) {
    gdl__oi_run R;
    gdl__oi_rv val;
    int k, j, rc = -1;
    if (!m || !inputs || !outputs || !nout) {
        gdl__null_arg("gdl_onnx_run", !m ? "model" : !inputs ? "inputs" : !outputs ? "outputs" : "nout");
        return -1;
    }
    *nout = 0;
    if (nin != m->nin || max_out < m->nout) {
        gdl__set_error("gdl_onnx_run: the model takes %d inputs and gives %d outputs; given %d inputs and room for %d",
                       m->nin, m->nout, nin, max_out);
        return -1;
    }
    memset(&R, 0, sizeof R);
    R.m = m;
    for (k = 0; k < m->ninit; k++) {
        memset(&val, 0, sizeof val);
        val.t = m->init[k].t;
        val.i64 = m->init[k].i64;
        val.n64 = m->init[k].n64;
        val.hnd = m->init[k].hnd;
        val.qtype = m->init[k].qtype;
        if (gdl__oi_set(&R, m->init[k].name, &val) < 0) goto done;
    }
    for (k = 0; k < nin; k++) {
        if (!inputs[k]) {
            gdl__set_error("gdl_onnx_run: input %d ('%s') is NULL", k, m->in[k]);
            goto done;
        }
        memset(&val, 0, sizeof val);
        val.t = inputs[k];
        if (gdl__oi_set(&R, m->in[k], &val) < 0) goto done;
    }
    for (k = 0; k < m->nnode; k++) {
        R.n = &m->node[k];
        memset(R.o, 0, sizeof R.o);
        gdl__err[0] = 0;
        if (R.n->nout > GDL__OI_MAX_OUT) {
            gdl__oi_fail(&R, "%d outputs (at most %d)", R.n->nout, GDL__OI_MAX_OUT);
            goto done;
        }
        if (gdl__oi_node_run(&R) < 0) {
            if (!gdl__err[0]) gdl__oi_fail(&R, "failed");
            else if (strncmp(gdl__err, "gdl_onnx_run", 12)) { /* an op's error: the node in front */
                char prev[sizeof gdl__err];
                memcpy(prev, gdl__err, sizeof prev);
                gdl__oi_fail(&R, "%s", prev);
            }
            goto done;
        }
        for (j = 0; j < R.n->nout; j++) /* outputs the node does not make ("" or not computed) stay unknown */
            if (R.n->out[j][0] && (R.o[j].t || R.o[j].i64) && gdl__oi_set(&R, R.n->out[j], &R.o[j]) < 0) goto done;
    }
    for (k = 0; k < m->nout; k++) {
        gdl__oi_rv *v = NULL;
        for (j = R.nv - 1; j >= 0 && !v; j--)
            if (!strcmp(R.v[j].name, m->out[k])) v = &R.v[j];
        if (!v) {
            gdl__set_error("gdl_onnx_run: output '%s' is not computed by the graph", m->out[k]);
            goto done;
        }
        if (!(outputs[k] = gdl__oi_host_tensor(&R, v))) goto done; /* host values: as an i32 tensor */
    }
    *nout = m->nout;
    rc = 0;
done:
    for (k = 0; k < R.npool; k++) GPUDL_FREE(R.pool[k]);
    GPUDL_FREE(R.pool);
    GPUDL_FREE(R.v);
    return rc;
}

/* The trainable initializers: every f32 one but batch norm's running statistics (inputs 3 and 4 of a
   BatchNormalization node) and the constants of quantization: int8 data, the scales and zero points of
   QuantizeLinear / DequantizeLinear and the bounds of Clip (inputs 1 and 2 of each) */
GPUDL_API int gdl_onnx_parameters(gdl_onnx_model *m, const char **names, gdl_tensor **params, int max) {
    int k, j, i, cnt = 0, stat;
    if (!m) {
        gdl__null_arg("gdl_onnx_parameters", "model");
        return -1;
    }
    if (max < 0 || (max > 0 && !names && !params)) {
        gdl__set_error("gdl_onnx_parameters: max %d with %s", max, max < 0 ? "a negative count" : "no names or params");
        return -1;
    }
    for (k = 0; k < m->ninit; k++) {
        const gdl__oi_val *v = &m->init[k];
        if (!v->t || v->t->dtype != GDL_F32 || v->i64 || v->qtype) continue;
        for (j = 0, stat = 0; j < m->nnode && !stat; j++) {
            const char *op = m->node[j].op;
            const int qc = !strcmp(op, "QuantizeLinear") || !strcmp(op, "DequantizeLinear") || !strcmp(op, "Clip");
            if (qc || !strcmp(op, "BatchNormalization"))
                for (i = qc ? 1 : 3; i < (qc ? 3 : 5) && i < m->node[j].nin; i++) stat |= !strcmp(m->node[j].in[i], v->name);
        }
        if (stat) continue;
        if (cnt < max) {
            if (gdl_set_requires_grad(v->t, 1) < 0) return -1;
            if (names) names[cnt] = v->name;
            if (params) params[cnt] = v->t;
        }
        cnt++;
    }
    return cnt;
}
