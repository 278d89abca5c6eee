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
} gdl__oi_val;

typedef struct gdl__oi_attr {
    char *name, *s;
    int type;
    int64_t i, *ints;
    int nints;
    double f;
    gdl__oi_val *t; /* a tensor attribute (Constant's value) */
} gdl__oi_attr;

typedef struct gdl__oi_node {
    char *op, **in, **out;
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
    if (v->owned) gdl_free(v->t);
    memset(v, 0, sizeof *v);
}

GPUDL_API void gdl_onnx_free(gdl_onnx_model *m) {
    int k, j, a;
    if (!m) return;
    for (k = 0; k < m->nnode; k++) {
        gdl__oi_node *n = &m->node[k];
        GPUDL_FREE(n->op);
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

/* a TensorProto into v: f32 / i32 / u8 (bool) as a tensor on m->dev, int64 on the host (and as i32 when
   it fits); its data from raw_data, the typed lists or external data, each checked against the shape */
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
    case GDL__OX_UINT8:
    case GDL__OX_BOOL: dt = GDL_U8; es = 1; break;
    case GDL__OX_INT64: dt = GDL_I32; es = 8; break;
    default:
        gdl__set_error("gdl_load_onnx: tensor '%s' has data type %d: only FLOAT, INT32, INT64, UINT8 and BOOL are read",
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
        if (!fits) goto done;
    } else if (es == 4 && gdl__ox_big_endian()) {
        for (k = 0; k < numel; k++) {
            unsigned char *e = host + 4 * k, t0 = e[0], t1 = e[1];
            e[0] = e[3]; e[1] = e[2]; e[2] = t1; e[3] = t0;
        }
    }
    if (dt == GDL_F32 && sizeof(gdl_real) != 4) { /* GPUDL_DOUBLE: f32 tensors hold doubles */
        for (k = numel - 1; k >= 0; k--) {
            float f;
            memcpy(&f, host + 4 * k, 4);
            ((gdl_real *)(void *)host)[k] = (gdl_real)f;
        }
    }
    {
        int64_t shape[GDL_MAX_DIMS];
        for (d = 0; d < ndim; d++) shape[d] = dims[d];
        if (!(v->t = gdl_from_array(host, (int)ndim, shape, dt, m->dev))) goto fail;
        v->owned = 1;
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

/* ---- running the graph with gdl's ops ---- */

typedef struct gdl__oi_rv { /* a value during a run */
    const char *name;
    gdl_tensor *t;
    const int64_t *i64;
    int64_t n64;
} gdl__oi_rv;

typedef struct gdl__oi_run {
    const gdl_onnx_model *m;
    gdl__oi_rv *v;
    int nv, cap;
    int64_t *pool[64]; /* int64 values a run makes (Shape's), freed at its end */
    int npool;
    const gdl__oi_node *n;
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

static int gdl__oi_set(gdl__oi_run *R, const char *name, gdl_tensor *t, const int64_t *i64, int64_t n64) {
    if (gdl__oi_grow((void **)&R->v, &R->cap, R->nv, sizeof *R->v) < 0) return -1;
    R->v[R->nv].name = name;
    R->v[R->nv].t = t;
    R->v[R->nv].i64 = i64;
    R->v[R->nv].n64 = n64;
    R->nv++;
    return 0;
}

/* input k of the current node: its value, NULL when absent ("" or past the end) or unknown (error) */
static const gdl__oi_rv *gdl__oi_in(gdl__oi_run *R, int k, int required) {
    const char *name = k < R->n->nin ? R->n->in[k] : "";
    int j;
    if (name[0])
        for (j = R->nv - 1; j >= 0; j--)
            if (!strcmp(R->v[j].name, name)) return &R->v[j];
    if (required || name[0])
        gdl__set_error("gdl_onnx_run: %s node '%s': input %d ('%s') %s", R->n->op, R->n->out[0], k, name,
                       name[0] ? "is not computed before it (the nodes must be in order)" : "is missing");
    return NULL;
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
    if (!v->t || v->t->dtype != GDL_I32) {
        gdl__set_error("gdl_onnx_run: %s node '%s': input %d must be integers", R->n->op, R->n->out[0], k);
        return -1;
    }
    if ((n = v->t->numel) > max) goto big;
    {
        int32_t tmp[GDL_MAX_DIMS * 4];
        if (n > (int64_t)(sizeof tmp / sizeof tmp[0])) goto big;
        if (gdl_copy_to_host(v->t, tmp, sizeof(int32_t) * (size_t)n) < 0) return -1;
        for (j = 0; j < n; j++) buf[j] = tmp[j];
    }
    return n;
big:
    gdl__set_error("gdl_onnx_run: %s node '%s': input %d has more than %lld values", R->n->op, R->n->out[0], k,
                   (long long)max);
    return -1;
}

/* a tensor input (an int64 one as its i32 copy) */
static gdl_tensor *gdl__oi_t(gdl__oi_run *R, int k) {
    const gdl__oi_rv *v = gdl__oi_in(R, k, 1);
    if (v && !v->t)
        gdl__set_error("gdl_onnx_run: %s node '%s': input %d holds int64 values beyond i32", R->n->op, R->n->out[0], k);
    return v ? v->t : NULL;
}

static int gdl__oi_axis(gdl__oi_run *R, int64_t a, int ndim) {
    if (a < -ndim || a >= (ndim ? ndim : 1)) {
        gdl__set_error("gdl_onnx_run: %s node '%s': axis %lld out of range for %d dims", R->n->op, R->n->out[0],
                       (long long)a, ndim);
        return -1;
    }
    return (int)(a < 0 ? a + ndim : a);
}

/* Reshape's target: 0 copies x's dim, one -1 is inferred */
static gdl_tensor *gdl__oi_reshape(gdl__oi_run *R, gdl_tensor *x, const int64_t *s, int64_t n) {
    int64_t shape[GDL_MAX_DIMS];
    int k;
    if (!x) return NULL;
    if (n > GDL_MAX_DIMS) {
        gdl__set_error("gdl_onnx_run: Reshape node '%s': %lld dims", R->n->out[0], (long long)n);
        return NULL;
    }
    for (k = 0; k < n; k++) shape[k] = s[k] == 0 && k < x->ndim ? x->shape[k] : s[k];
    return gdl_reshape(x, (int)n, shape);
}

static gdl_tensor *gdl__oi_pool(gdl__oi_run *R, gdl_tensor *x, int avg) {
    const gdl__oi_attr *ks = gdl__oi_attr_of(R->n, "kernel_shape"), *st = gdl__oi_attr_of(R->n, "strides"),
                       *pd = gdl__oi_attr_of(R->n, "pads");
    int64_t s = st && st->nints == 2 ? st->ints[0] : 1, p = pd && pd->nints == 4 ? pd->ints[0] : 0;
    if (!ks || ks->nints != 2 || ks->ints[0] != ks->ints[1] || (st && (st->nints != 2 || st->ints[1] != s)) ||
        (pd && (pd->nints != 4 || pd->ints[1] != p || pd->ints[2] != p || pd->ints[3] != p)) ||
        gdl__oi_ai(R->n, "ceil_mode", 0) || (avg && !gdl__oi_ai(R->n, "count_include_pad", 0) && p) ||
        ks->ints[0] > 1 << 20 || s > 1 << 20 || p > 1 << 20) {
        gdl__set_error("gdl_onnx_run: %s node '%s': only square windows, equal strides and pads, no ceil_mode%s",
                       R->n->op, R->n->out[0], avg ? ", padding counted" : "");
        return NULL;
    }
    return avg ? gdl_avg_pool2d(x, (int)ks->ints[0], (int)s, (int)p) : gdl_max_pool2d(x, (int)ks->ints[0], (int)s, (int)p);
}

static gdl_tensor *gdl__oi_conv(gdl__oi_run *R, gdl_tensor *x, gdl_tensor *w, gdl_tensor *b) {
    const gdl__oi_attr *st = gdl__oi_attr_of(R->n, "strides"), *pd = gdl__oi_attr_of(R->n, "pads"),
                       *dl = gdl__oi_attr_of(R->n, "dilations");
    int s[2] = {1, 1}, p[2] = {0, 0}, d[2] = {1, 1}, k;
    for (k = 0; k < 2; k++) {
        if (st && st->nints == 2 && st->ints[k] > 0 && st->ints[k] < 1 << 20) s[k] = (int)st->ints[k];
        if (dl && dl->nints == 2 && dl->ints[k] > 0 && dl->ints[k] < 1 << 20) d[k] = (int)dl->ints[k];
        if (pd && pd->nints == 4 && pd->ints[k] >= 0 && pd->ints[k] < 1 << 20) p[k] = (int)pd->ints[k];
    }
    if ((st && st->nints != 2) || (dl && dl->nints != 2) ||
        (pd && (pd->nints != 4 || pd->ints[0] != pd->ints[2] || pd->ints[1] != pd->ints[3]))) {
        gdl__set_error("gdl_onnx_run: Conv node '%s': only 2-D convolutions with symmetric pads", R->n->out[0]);
        return NULL;
    }
    return gdl_conv2d_ex(x, w, b, s, p, d, (int)gdl__oi_ai(R->n, "group", 1));
}

/* one node; its output in *y (a tensor) or in *i64 and *n64 (int64 values made on the host) */
static int gdl__oi_node_run(gdl__oi_run *R, gdl_tensor **y, int64_t **i64, int64_t *n64) {
    const gdl__oi_node *n = R->n;
    const char *op = n->op;
    gdl_tensor *x = NULL, *a, *b;
    int64_t L[GDL_MAX_DIMS * 4], nl;
    int ax;
    *y = NULL;
    *i64 = NULL;
    if (!strcmp(op, "Concat") && n->nin > 0) { /* of int64 values on the host (a shape made of Shape's parts) */
        int k, host = 1;
        int64_t tot = 0;
        for (k = 0; k < n->nin && host; k++) {
            const gdl__oi_rv *v = gdl__oi_in(R, k, 1);
            if (!v) return -1;
            host = v->i64 != NULL && (tot += v->n64) <= GDL_MAX_DIMS * 4;
        }
        if (host) {
            if (R->npool >= 64) return gdl__oi_bad("over 64 int64 results");
            if (!(*i64 = R->pool[R->npool++] = (int64_t *)GPUDL_MALLOC(sizeof(int64_t) * (size_t)(tot + 1))))
                return gdl__oi_bad("out of memory");
            for (k = 0, *n64 = 0; k < n->nin; k++) {
                const gdl__oi_rv *v = gdl__oi_in(R, k, 1);
                memcpy(*i64 + *n64, v->i64, sizeof(int64_t) * (size_t)v->n64);
                *n64 += v->n64;
            }
            return 0;
        }
    }
    if (strcmp(op, "Constant") && strcmp(op, "Shape") && !(x = gdl__oi_t(R, 0))) return -1; /* every other op has one */
#define GDL__OI_UN(name, call) if (!strcmp(op, name)) return (*y = (call)) ? 0 : -1
    GDL__OI_UN("Identity", x);
    GDL__OI_UN("Relu", gdl_relu(x));
    GDL__OI_UN("Sigmoid", gdl_sigmoid(x));
    GDL__OI_UN("Tanh", gdl_tanh(x));
    GDL__OI_UN("Exp", gdl_exp(x));
    GDL__OI_UN("Log", gdl_log(x));
    GDL__OI_UN("Sqrt", gdl_sqrt(x));
    GDL__OI_UN("Abs", gdl_abs(x));
    GDL__OI_UN("Reciprocal", gdl_pow_scalar(x, -1));
    GDL__OI_UN("LeakyRelu", gdl_leaky_relu(x, gdl__oi_af(n, "alpha", 0.01)));
    GDL__OI_UN("MaxPool", gdl__oi_pool(R, x, 0));
    GDL__OI_UN("AveragePool", gdl__oi_pool(R, x, 1));
    GDL__OI_UN("GlobalAveragePool", gdl_global_avg_pool2d(x));
    GDL__OI_UN("Not", gdl_compare_scalar(x, GDL_CMP_EQ, 0));
    if (!strcmp(op, "Erf")) { /* gpudl has no erf op: Abramowitz and Stegun's 7.1.26, absolute error under 1.5e-7 */
        static const double p = 0.3275911, c[5] = {0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429};
        gdl_tensor *ab = gdl_abs(x), *t, *poly, *r;
        int k;
        t = gdl_pow_scalar(gdl_add_scalar(gdl_mul_scalar(ab, p), 1), -1);
        poly = gdl_mul_scalar(t, c[4]);
        for (k = 3; k >= 0; k--) poly = gdl_mul(gdl_add_scalar(poly, c[k]), t);
        r = gdl_add_scalar(gdl_mul_scalar(gdl_mul(poly, gdl_exp(gdl_mul_scalar(gdl_mul(ab, ab), -1))), -1), 1);
        return (*y = gdl_where(gdl_compare_scalar(x, GDL_CMP_GE, 0), r, gdl_mul_scalar(r, -1))) ? 0 : -1;
    }
    if (!strcmp(op, "Gelu")) {
        const gdl__oi_attr *ap = gdl__oi_attr_of(n, "approximate");
        return (*y = gdl_gelu(x, ap && ap->s && !strcmp(ap->s, "tanh"))) ? 0 : -1;
    }
    if (!strcmp(op, "Softmax") || !strcmp(op, "LogSoftmax")) {
        if ((ax = gdl__oi_axis(R, gdl__oi_ai(n, "axis", -1), x->ndim)) < 0) return -1;
        *y = op[0] == 'S' ? gdl_softmax(x, ax) : gdl_log_softmax(x, ax);
        return *y ? 0 : -1;
    }
    if (!strcmp(op, "Add") || !strcmp(op, "Sub") || !strcmp(op, "Mul") || !strcmp(op, "Div") || !strcmp(op, "Pow") ||
        !strcmp(op, "Min") || !strcmp(op, "Max") || !strcmp(op, "MatMul") || !strcmp(op, "Equal") ||
        !strcmp(op, "Less") || !strcmp(op, "LessOrEqual") || !strcmp(op, "Greater") || !strcmp(op, "GreaterOrEqual")) {
        if (!(b = gdl__oi_t(R, 1))) return -1;
        switch (op[0]) {
        case 'A': *y = gdl_add(x, b); break;
        case 'S': *y = gdl_sub(x, b); break;
        case 'D': *y = gdl_div(x, b); break;
        case 'P': *y = gdl_pow(x, b); break;
        case 'E': *y = gdl_compare(x, b, GDL_CMP_EQ); break;
        case 'L': *y = gdl_compare(x, b, op[4] ? GDL_CMP_LE : GDL_CMP_LT); break;
        case 'G': *y = gdl_compare(x, b, op[7] ? GDL_CMP_GE : GDL_CMP_GT); break;
        default:
            *y = !strcmp(op, "Mul") ? gdl_mul(x, b) : !strcmp(op, "Min") ? gdl_minimum(x, b)
               : !strcmp(op, "Max") ? gdl_maximum(x, b) : gdl_matmul(x, b);
        }
        return *y ? 0 : -1;
    }
    if (!strcmp(op, "Gemm")) {
        gdl_tensor *c = n->nin > 2 && n->in[2][0] ? gdl__oi_t(R, 2) : NULL;
        if (!(b = gdl__oi_t(R, 1)) || (n->nin > 2 && n->in[2][0] && !c)) return -1;
        if (gdl__oi_ai(n, "transA", 0) || gdl__oi_af(n, "alpha", 1) != 1 || gdl__oi_af(n, "beta", 1) != 1) {
            gdl__set_error("gdl_onnx_run: Gemm node '%s': only transA 0, alpha 1, beta 1", n->out[0]);
            return -1;
        }
        if (gdl__oi_ai(n, "transB", 0)) *y = gdl_linear(x, b, c);
        else *y = c ? gdl_add(gdl_matmul(x, b), c) : gdl_matmul(x, b);
        return *y ? 0 : -1;
    }
    if (!strcmp(op, "Transpose")) {
        const gdl__oi_attr *p = gdl__oi_attr_of(n, "perm");
        int perm[GDL_MAX_DIMS], k;
        if (!p || p->nints != x->ndim) {
            gdl__set_error("gdl_onnx_run: Transpose node '%s': perm must give %d dims", n->out[0], x->ndim);
            return -1;
        }
        for (k = 0; k < x->ndim; k++) perm[k] = p->ints[k] >= 0 && p->ints[k] < x->ndim ? (int)p->ints[k] : -1;
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
        return (*y = gdl_reshape(x, 2, L)) ? 0 : -1;
    }
    if (!strcmp(op, "Conv")) {
        gdl_tensor *c = n->nin > 2 && n->in[2][0] ? gdl__oi_t(R, 2) : NULL;
        if (!(b = gdl__oi_t(R, 1)) || (n->nin > 2 && n->in[2][0] && !c)) return -1;
        return (*y = gdl__oi_conv(R, x, b, c)) ? 0 : -1;
    }
    if (!strcmp(op, "BatchNormalization")) {
        gdl_tensor *s = gdl__oi_t(R, 1), *bb = gdl__oi_t(R, 2), *mean = gdl__oi_t(R, 3), *var = gdl__oi_t(R, 4);
        if (!s || !bb || !mean || !var) return -1;
        if (gdl__oi_ai(n, "training_mode", 0)) {
            gdl__set_error("gdl_onnx_run: BatchNormalization node '%s': training_mode is not run", n->out[0]);
            return -1;
        }
        return (*y = gdl_batch_norm(x, mean, var, s, bb, 0, 0.1, gdl__oi_af(n, "epsilon", 1e-5))) ? 0 : -1;
    }
    if (!strcmp(op, "LayerNormalization")) {
        gdl_tensor *s = gdl__oi_t(R, 1), *bb = n->nin > 2 && n->in[2][0] ? gdl__oi_t(R, 2) : NULL;
        if (!s || (n->nin > 2 && n->in[2][0] && !bb)) return -1;
        if ((ax = gdl__oi_axis(R, gdl__oi_ai(n, "axis", -1), x->ndim)) < 0) return -1;
        if (ax != x->ndim - 1) {
            gdl__set_error("gdl_onnx_run: LayerNormalization node '%s': only the last axis", n->out[0]);
            return -1;
        }
        return (*y = gdl_layer_norm(x, s, bb, gdl__oi_af(n, "epsilon", 1e-5))) ? 0 : -1;
    }
    if (!strcmp(op, "Concat")) {
        gdl_tensor *xs[GDL__OX_MAX_IN];
        int k;
        if (n->nin > GDL__OX_MAX_IN) return gdl__oi_bad("a Concat of over 256 inputs");
        for (k = 0; k < n->nin; k++)
            if (!(xs[k] = gdl__oi_t(R, k))) return -1;
        if ((ax = gdl__oi_axis(R, gdl__oi_ai(n, "axis", 0), x->ndim)) < 0) return -1;
        return (*y = gdl_concat(n->nin, xs, ax)) ? 0 : -1;
    }
    if (!strcmp(op, "Gather")) {
        if (!(b = gdl__oi_t(R, 1))) return -1;
        if ((ax = gdl__oi_axis(R, gdl__oi_ai(n, "axis", 0), x->ndim)) < 0) return -1;
        if (ax == 0 && x->ndim == 2 && x->dtype == GDL_F32) *y = gdl_embedding(b, x);
        else if (b->ndim == 1) *y = gdl_index_select(x, ax, b);
        else {
            gdl__set_error("gdl_onnx_run: Gather node '%s': indices %s on axis %d: only an embedding (data [V,D], "
                           "axis 0) or 1-D indices", n->out[0], gdl_shape_str(b), ax);
            return -1;
        }
        return *y ? 0 : -1;
    }
    if (!strcmp(op, "GatherElements")) {
        if (!(b = gdl__oi_t(R, 1)) || (ax = gdl__oi_axis(R, gdl__oi_ai(n, "axis", 0), x->ndim)) < 0) return -1;
        return (*y = gdl_gather(x, ax, b)) ? 0 : -1;
    }
    if (!strcmp(op, "ReduceMean") || !strcmp(op, "ReduceSum") || !strcmp(op, "ReduceMax")) {
        const gdl__oi_attr *axa = gdl__oi_attr_of(n, "axes");
        int keep = (int)gdl__oi_ai(n, "keepdims", 1);
        nl = 0;
        if (n->nin > 1 && n->in[1][0]) {
            if ((nl = gdl__oi_list(R, 1, L, 1)) < 0) return -1;
        } else if (axa) {
            if (axa->nints > 1) nl = 2;
            else if ((nl = axa->nints) == 1) L[0] = axa->ints[0];
        }
        if (nl > 1 || (nl == 0 && keep)) {
            gdl__set_error("gdl_onnx_run: %s node '%s': one axis, or all of them without keepdims", op, n->out[0]);
            return -1;
        }
        if (nl == 0 && !strcmp(op, "ReduceMax")) {
            gdl__set_error("gdl_onnx_run: ReduceMax node '%s': over all axes is not run", n->out[0]);
            return -1;
        }
        if (nl == 0) *y = op[6] == 'M' ? gdl_mean(x) : gdl_sum(x);
        else if ((ax = gdl__oi_axis(R, L[0], x->ndim)) < 0) return -1;
        else *y = op[6] == 'M' && op[7] == 'e' ? gdl_mean_dim(x, ax, keep) : op[6] == 'S' ? gdl_sum_dim(x, ax, keep)
                                                                           : gdl_max_dim(x, ax, keep);
        return *y ? 0 : -1;
    }
    if (!strcmp(op, "Cast")) {
        int64_t to = gdl__oi_ai(n, "to", 0);
        gdl_dtype dt = to == GDL__OX_FLOAT ? GDL_F32 : to == GDL__OX_INT32 || to == GDL__OX_INT64 ? GDL_I32
                     : to == GDL__OX_UINT8 || to == GDL__OX_BOOL ? GDL_U8 : to == GDL__OX_FLOAT16 ? GDL_F16
                     : to == GDL__OX_BFLOAT16 ? GDL_BF16 : GDL_DTYPE_COUNT;
        if (dt == GDL_DTYPE_COUNT) {
            gdl__set_error("gdl_onnx_run: Cast node '%s': to type %lld is not run", n->out[0], (long long)to);
            return -1;
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
        if (n->nin > 1 && n->in[1][0] && gdl__oi_list(R, 1, &k, 1) != 1) return -1;
        *y = gdl__oi_ai(n, "upper", 1) ? gdl_triu(x, k) : gdl_tril(x, k);
        return *y ? 0 : -1;
    }
    if (!strcmp(op, "CumSum")) {
        if (gdl__oi_list(R, 1, L, 1) != 1 || (ax = gdl__oi_axis(R, L[0], x->ndim)) < 0) return -1;
        if (gdl__oi_ai(n, "exclusive", 0) || gdl__oi_ai(n, "reverse", 0)) {
            gdl__set_error("gdl_onnx_run: CumSum node '%s': exclusive and reverse are not run", n->out[0]);
            return -1;
        }
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
        if (n->nin > 3 && n->in[3][0] && gdl__oi_list(R, 3, axs, GDL_MAX_DIMS) != ns) return -1;
        if (n->nin > 4 && n->in[4][0] && gdl__oi_list(R, 4, sp, GDL_MAX_DIMS) != ns) return -1;
        for (k = 0; k < ns && r; k++) {
            int64_t d, s0, e0;
            if ((ax = gdl__oi_axis(R, axs[k], r->ndim)) < 0) return -1;
            d = r->shape[ax];
            if (sp[k] != 1) {
                gdl__set_error("gdl_onnx_run: Slice node '%s': only step 1", n->out[0]);
                return -1;
            }
            s0 = st[k] < 0 ? st[k] + d : st[k];
            e0 = en[k] < 0 ? en[k] + d : en[k];
            s0 = s0 < 0 ? 0 : s0 > d ? d : s0;
            e0 = e0 < s0 ? s0 : e0 > d ? d : e0;
            r = gdl_narrow(r, ax, s0, e0 - s0);
        }
        return (*y = r) ? 0 : -1;
    }
    if (!strcmp(op, "Shape")) { /* int64 values on the host */
        const gdl__oi_rv *v = gdl__oi_in(R, 0, 1);
        int64_t s0 = gdl__oi_ai(n, "start", 0), e0, nd, k;
        if (!v || !v->t) return -1;
        nd = v->t->ndim;
        e0 = gdl__oi_ai(n, "end", nd);
        s0 = s0 < 0 ? s0 + nd : s0;
        e0 = e0 < 0 ? e0 + nd : e0;
        s0 = s0 < 0 ? 0 : s0 > nd ? nd : s0;
        e0 = e0 < s0 ? s0 : e0 > nd ? nd : e0;
        if (R->npool >= 64) return gdl__oi_bad("over 64 Shape nodes");
        if (!(*i64 = R->pool[R->npool++] = (int64_t *)GPUDL_MALLOC(sizeof(int64_t) * (size_t)(e0 - s0 + 1))))
            return gdl__oi_bad("out of memory");
        for (k = s0; k < e0; k++) (*i64)[k - s0] = v->t->shape[k];
        *n64 = e0 - s0;
        return 0;
    }
    if (!strcmp(op, "Expand")) { /* x broadcast to the shape: x + zeros(shape) */
        gdl_tensor *z;
        int64_t cnt = 1, k;
        if ((nl = gdl__oi_list(R, 1, L, GDL_MAX_DIMS)) < 0) return -1;
        for (k = 0; k < nl; k++) {
            if (L[k] < 0 || (L[k] && cnt > ((int64_t)1 << 28) / L[k])) {
                gdl__set_error("gdl_onnx_run: Expand node '%s': a shape of over 2^28 elements or a negative dim",
                               n->out[0]);
                return -1;
            }
            cnt *= L[k];
        }
        if (!(z = gdl__tmp("gdl_onnx_run", (int)nl, L, x->dtype, x->device)) || gdl_fill_(z, 0) < 0) return -1;
        return (*y = x->dtype == GDL_F32 ? gdl_add(z, x) : gdl_where(gdl_compare_scalar(z, GDL_CMP_EQ, 0), x, z)) ? 0 : -1;
    }
    if (!strcmp(op, "Constant")) {
        const gdl__oi_attr *v = gdl__oi_attr_of(n, "value");
        if (!v || !v->t) {
            gdl__set_error("gdl_onnx_run: Constant node '%s': only a tensor value", n->out[0]);
            return -1;
        }
        *y = v->t->t;
        *i64 = v->t->i64;
        *n64 = v->t->n64;
        return 0;
    }
    gdl__set_error("gdl_onnx_run: op \"%s\" (node '%s') is not run by gpudl (docs/onnx.md lists the ops it runs)", op,
                   n->out[0]);
    return -1;
#undef GDL__OI_UN
}

GPUDL_API int gdl_onnx_run(gdl_onnx_model *m, int nin, gdl_tensor *const *inputs, int max_out, gdl_tensor **outputs,
                           int *nout) {
    gdl__oi_run R;
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
    for (k = 0; k < m->ninit; k++)
        if (gdl__oi_set(&R, m->init[k].name, m->init[k].t, m->init[k].i64, m->init[k].n64) < 0) goto done;
    for (k = 0; k < nin; k++) {
        if (!inputs[k]) {
            gdl__set_error("gdl_onnx_run: input %d ('%s') is NULL", k, m->in[k]);
            goto done;
        }
        if (gdl__oi_set(&R, m->in[k], inputs[k], NULL, 0) < 0) goto done;
    }
    for (k = 0; k < m->nnode; k++) {
        gdl_tensor *y;
        int64_t *i64, n64 = 0;
        R.n = &m->node[k];
        if (gdl__oi_node_run(&R, &y, &i64, &n64) < 0) {
            if (!gdl__err[0]) gdl__set_error("gdl_onnx_run: %s node '%s' failed", R.n->op, R.n->out[0]);
            else if (strncmp(gdl__err, "gdl_onnx_run", 12)) {
                char prev[sizeof gdl__err];
                memcpy(prev, gdl__err, sizeof prev);
                gdl__set_error("gdl_onnx_run: %s node '%s': %s", R.n->op, R.n->out[0], prev);
            }
            goto done;
        }
        if (gdl__oi_set(&R, R.n->out[0], y, i64, n64) < 0) goto done;
    }
    for (k = 0; k < m->nout; k++) {
        for (j = R.nv - 1; j >= 0 && strcmp(R.v[j].name, m->out[k]); j--) {}
        if (j < 0 || !R.v[j].t) {
            gdl__set_error("gdl_onnx_run: output '%s' is not computed by the graph", m->out[k]);
            goto done;
        }
        outputs[k] = R.v[j].t;
    }
    *nout = m->nout;
    rc = 0;
done:
    for (k = 0; k < R.npool; k++) GPUDL_FREE(R.pool[k]);
    GPUDL_FREE(R.v);
    return rc;
}
