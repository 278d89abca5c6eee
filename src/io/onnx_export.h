/* src/io/onnx_export.h — gdl_export_onnx: ONNX export by tracing. One forward runs in evaluation mode
   with gdl__tracing set (src/ops/core.h), so that every op records its tape node; the nodes the outputs
   depend on become ONNX nodes (gdl__ox_op, one case per op of GDL_OP_LIST that has an ONNX form), the
   tensors they read that are not inputs become initializers (the module's parameters and buffers under
   their state_dict names, anything else const_<k>), and src/io/protobuf.h writes the ModelProto
   (onnx.proto's field numbers below). Written after the modules: it walks the module tree. */

/* onnx.proto's field numbers and enums, those written here */
enum {
    GDL__OX_MODEL_IR_VERSION = 1, GDL__OX_MODEL_PRODUCER = 2, GDL__OX_MODEL_PRODUCER_VERSION = 3,
    GDL__OX_MODEL_GRAPH = 7, GDL__OX_MODEL_OPSET = 8,
    GDL__OX_OPSET_DOMAIN = 1, GDL__OX_OPSET_VERSION = 2,
    GDL__OX_GRAPH_NODE = 1, GDL__OX_GRAPH_NAME = 2, GDL__OX_GRAPH_INIT = 5, GDL__OX_GRAPH_INPUT = 11,
    GDL__OX_GRAPH_OUTPUT = 12,
    GDL__OX_NODE_INPUT = 1, GDL__OX_NODE_OUTPUT = 2, GDL__OX_NODE_NAME = 3, GDL__OX_NODE_OP = 4, GDL__OX_NODE_ATTR = 5,
    GDL__OX_ATTR_NAME = 1, GDL__OX_ATTR_F = 2, GDL__OX_ATTR_I = 3, GDL__OX_ATTR_S = 4, GDL__OX_ATTR_INTS = 8,
    GDL__OX_ATTR_TYPE = 20,
    GDL__OX_AT_FLOAT = 1, GDL__OX_AT_INT = 2, GDL__OX_AT_STRING = 3, GDL__OX_AT_INTS = 7,
    GDL__OX_TENSOR_DIMS = 1, GDL__OX_TENSOR_TYPE = 2, GDL__OX_TENSOR_NAME = 8, GDL__OX_TENSOR_RAW = 9,
    GDL__OX_TENSOR_EXTERNAL = 13, GDL__OX_TENSOR_LOCATION = 14, GDL__OX_LOCATION_EXTERNAL = 1,
    GDL__OX_ENTRY_KEY = 1, GDL__OX_ENTRY_VALUE = 2,
    GDL__OX_VI_NAME = 1, GDL__OX_VI_TYPE = 2, GDL__OX_TYPE_TENSOR = 1, GDL__OX_TT_ELEM = 1, GDL__OX_TT_SHAPE = 2,
    GDL__OX_SHAPE_DIM = 1, GDL__OX_DIM_VALUE = 1, GDL__OX_DIM_PARAM = 2,
    GDL__OX_FLOAT = 1, GDL__OX_UINT8 = 2, GDL__OX_INT8 = 3, GDL__OX_INT32 = 6, GDL__OX_INT64 = 7, GDL__OX_BOOL = 9, GDL__OX_FLOAT16 = 10,
    GDL__OX_BFLOAT16 = 16
};

#define GDL__OX_MAX_IN 256 /* inputs of one op (a concat's) */

GPUDL_API gdl_onnx_opts gdl_onnx_defaults(void) {
    gdl_onnx_opts o;
    memset(&o, 0, sizeof o);
    o.opset = GDL_ONNX_OPSET_DEFAULT;
    o.dynamic_batch = 1;
    o.external_min_bytes = 1024;
    return o;
}

/* the IR version that goes with an opset (onnx's helper.VERSION_TABLE) */
static int gdl__ox_ir_version(int opset) { return opset <= 18 ? 8 : opset <= 20 ? 9 : opset <= 22 ? 10 : 11; }

static int gdl__ox_dtype(gdl_dtype dt) {
    switch (dt) {
    case GDL_F32: return GDL__OX_FLOAT;
    case GDL_I32: return GDL__OX_INT32;
    case GDL_F16: return GDL__OX_FLOAT16;
    case GDL_BF16: return GDL__OX_BFLOAT16;
    case GDL_U8: return GDL__OX_UINT8;
    default: return 0;
    }
}

/* a value of the graph: a tensor and its name; bax: which of its dims is the batch (-1 none) */
typedef struct gdl__ox_q { /* a static int8 layer the traced forward ran (gdl__ox_qlayer_traced) */
    const gdl_tensor *x, *y;
    const gdl_module *m;
} gdl__ox_q;

typedef struct gdl__ox_val {
    const gdl_tensor *t;
    char *name;
    int bax;
} gdl__ox_val;

typedef struct gdl__ox {
    const char *fn, *path;
    int opset, dyn;
    gdl__pb nodes, inits; /* the GraphProto's node and initializer fields, in order */
    gdl__ox_val *v;
    int nv, capv;
    int *hash, hcap;      /* tensor -> index in v + 1 (0: empty), open addressing */
    char **pnames;        /* the module's state_dict names and tensors */
    gdl_tensor **ptens;
    int np, nconst, ntmp;
    int64_t B;            /* the traced batch (input 0's dim 0; dynamic batch), and its Shape node's name */
    const char *batch_name;
    int cur;              /* the trace node being written, for names */
    char curname[64];
    FILE *ext;            /* external data: the .bin being written, its name (relative) and length */
    const char *ext_name;
    uint64_t ext_off;
    int64_t ext_min;
    struct gdl__ox_rnn *rnn; /* LSTM / GRU layers found in the trace (gdl__ox_rnn_find), written as one node */
    int nrnn;
    int *absorbed;           /* per trace node: the layer that writes it (-1: none) */
    gdl__ox_q *q;            /* the static int8 layers the forward ran: input, output, module (gdl__ox_qlayer_traced) */
    int nq, capq, qoom;
} gdl__ox;

static size_t gdl__ox_hash_of(const void *p, int cap) {
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 17) & (size_t)(cap - 1);
}

static int gdl__ox_find(const gdl__ox *X, const gdl_tensor *t) {
    size_t i;
    if (!X->hcap) return -1;
    for (i = gdl__ox_hash_of(t, X->hcap); X->hash[i]; i = (i + 1) & (size_t)(X->hcap - 1))
        if (X->v[X->hash[i] - 1].t == t) return X->hash[i] - 1;
    return -1;
}

static int gdl__ox_oom(gdl__ox *X) {
    gdl__set_error("%s: %s: out of memory", X->fn, X->path);
    return -1;
}

/* Names tensor t (a copy of name is kept); its batch dim bax. The index, or -1 after the error. */
static int gdl__ox_add(gdl__ox *X, const gdl_tensor *t, const char *name, int bax) {
    size_t i;
    int k;
    if (X->nv + 1 > X->capv) {
        int cap = X->capv ? 2 * X->capv : 256;
        gdl__ox_val *nv = (gdl__ox_val *)GPUDL_REALLOC(X->v, sizeof *nv * (size_t)cap);
        if (!nv) return gdl__ox_oom(X);
        X->v = nv;
        X->capv = cap;
    }
    if (2 * (X->nv + 1) > X->hcap) { /* rehash at half full */
        int cap = X->hcap ? 2 * X->hcap : 1024;
        int *h = (int *)GPUDL_MALLOC(sizeof(int) * (size_t)cap);
        if (!h) return gdl__ox_oom(X);
        memset(h, 0, sizeof(int) * (size_t)cap);
        for (k = 0; k < X->nv; k++) {
            if (!X->v[k].t) continue;
            for (i = gdl__ox_hash_of(X->v[k].t, cap); h[i]; i = (i + 1) & (size_t)(cap - 1)) {}
            h[i] = k + 1;
        }
        GPUDL_FREE(X->hash);
        X->hash = h;
        X->hcap = cap;
    }
    k = X->nv;
    if (!(X->v[k].name = (char *)GPUDL_MALLOC(strlen(name) + 1))) return gdl__ox_oom(X);
    strcpy(X->v[k].name, name);
    X->v[k].t = t;
    X->v[k].bax = bax;
    X->nv++;
    if (t) {
        for (i = gdl__ox_hash_of(t, X->hcap); X->hash[i]; i = (i + 1) & (size_t)(X->hcap - 1)) {}
        X->hash[i] = k + 1;
    }
    return k;
}

/* A fresh name inside the current node ("<op>_<k>/t<j>"), kept in the value list (no tensor). */
static const char *gdl__ox_tmp(gdl__ox *X) {
    char name[96];
    int k;
    snprintf(name, sizeof name, "%s/t%d", X->curname, X->ntmp++);
    k = gdl__ox_add(X, NULL, name, -1);
    return k < 0 ? NULL : X->v[k].name;
}

/* ---- writing: attributes, nodes, initializers ---- */

static void gdl__ox_attr_int(gdl__pb *a, const char *name, int64_t v) {
    size_t s = gdl__pb_open(a, GDL__OX_NODE_ATTR);
    gdl__pb_str(a, GDL__OX_ATTR_NAME, name);
    gdl__pb_int(a, GDL__OX_ATTR_TYPE, GDL__OX_AT_INT);
    gdl__pb_int(a, GDL__OX_ATTR_I, v);
    gdl__pb_close(a, s);
}
static void gdl__ox_attr_ints(gdl__pb *a, const char *name, const int64_t *v, int n) {
    size_t s = gdl__pb_open(a, GDL__OX_NODE_ATTR);
    int k;
    gdl__pb_str(a, GDL__OX_ATTR_NAME, name);
    gdl__pb_int(a, GDL__OX_ATTR_TYPE, GDL__OX_AT_INTS);
    for (k = 0; k < n; k++) gdl__pb_int(a, GDL__OX_ATTR_INTS, v[k]);
    gdl__pb_close(a, s);
}
static void gdl__ox_attr_float(gdl__pb *a, const char *name, double f) {
    size_t s = gdl__pb_open(a, GDL__OX_NODE_ATTR);
    gdl__pb_str(a, GDL__OX_ATTR_NAME, name);
    gdl__pb_int(a, GDL__OX_ATTR_TYPE, GDL__OX_AT_FLOAT);
    gdl__pb_float(a, GDL__OX_ATTR_F, (float)f);
    gdl__pb_close(a, s);
}
static void gdl__ox_attr_str(gdl__pb *a, const char *name, const char *v) {
    size_t s = gdl__pb_open(a, GDL__OX_NODE_ATTR);
    gdl__pb_str(a, GDL__OX_ATTR_NAME, name);
    gdl__pb_int(a, GDL__OX_ATTR_TYPE, GDL__OX_AT_STRING);
    gdl__pb_str(a, GDL__OX_ATTR_S, v);
    gdl__pb_close(a, s);
}

/* A NodeProto: op_type on inputs in[0..nin) (NULL entries: an omitted optional input, written as "")
   to outputs out[0..nout) (gdl__ox_node: one), with the attributes already encoded in attrs (may be NULL; freed here). */
static void gdl__ox_node_n(gdl__ox *X, const char *op_type, int nin, const char *const *in, int nout,
                           const char *const *out, gdl__pb *attrs) {
    size_t s = gdl__pb_open(&X->nodes, GDL__OX_GRAPH_NODE);
    char name[96];
    int k, last = nin;
    while (last > 0 && !in[last - 1]) last--; /* trailing omitted inputs are left out */
    for (k = 0; k < last; k++) gdl__pb_str(&X->nodes, GDL__OX_NODE_INPUT, in[k] ? in[k] : "");
    for (k = 0; k < nout; k++) gdl__pb_str(&X->nodes, GDL__OX_NODE_OUTPUT, out[k]);
    snprintf(name, sizeof name, "%s/%s_%d", X->curname, op_type, X->ntmp++);
    gdl__pb_str(&X->nodes, GDL__OX_NODE_NAME, name);
    gdl__pb_str(&X->nodes, GDL__OX_NODE_OP, op_type);
    if (attrs) {
        if (attrs->oom) X->nodes.oom = 1;
        gdl__pb_raw(&X->nodes, attrs->p, attrs->n);
        gdl__pb_free(attrs);
    }
    gdl__pb_close(&X->nodes, s);
}
static void gdl__ox_node(gdl__ox *X, const char *op_type, int nin, const char *const *in, const char *out,
                         gdl__pb *attrs) {
    gdl__ox_node_n(X, op_type, nin, in, 1, &out, attrs);
}
static void gdl__ox_node1(gdl__ox *X, const char *op_type, const char *a, const char *out, gdl__pb *attrs) {
    gdl__ox_node(X, op_type, 1, &a, out, attrs);
}
static void gdl__ox_node2(gdl__ox *X, const char *op_type, const char *a, const char *b, const char *out,
                          gdl__pb *attrs) {
    const char *in[2];
    in[0] = a;
    in[1] = b;
    gdl__ox_node(X, op_type, 2, in, out, attrs);
}

static int gdl__ox_big_endian(void) {
    const uint16_t one = 1;
    unsigned char c;
    memcpy(&c, &one, 1);
    return c == 0;
}

/* A TensorProto initializer `name` of ONNX type otype, dims, with `bytes` bytes of host data of
   elements esize wide (made little-endian here); in the external file when asked and large enough. */
static int gdl__ox_init_raw(gdl__ox *X, const char *name, int otype, int ndim, const int64_t *dims, void *data,
                            size_t bytes, size_t esize) {
    gdl__pb *b = &X->inits;
    size_t s = gdl__pb_open(b, GDL__OX_GRAPH_INIT), k, j;
    int d;
    if (gdl__ox_big_endian() && esize > 1)
        for (k = 0; k + esize <= bytes; k += esize)
            for (j = 0; j < esize / 2; j++) {
                unsigned char t = ((unsigned char *)data)[k + j];
                ((unsigned char *)data)[k + j] = ((unsigned char *)data)[k + esize - 1 - j];
                ((unsigned char *)data)[k + esize - 1 - j] = t;
            }
    for (d = 0; d < ndim; d++) gdl__pb_int(b, GDL__OX_TENSOR_DIMS, dims[d]);
    gdl__pb_int(b, GDL__OX_TENSOR_TYPE, otype);
    gdl__pb_str(b, GDL__OX_TENSOR_NAME, name);
    if (X->ext && (int64_t)bytes >= X->ext_min) {
        static const unsigned char zeros[64] = {0};
        char num[32];
        size_t e;
        size_t pad = (size_t)((64 - X->ext_off % 64) % 64); /* each tensor 64-byte aligned in the file */
        if ((pad && fwrite(zeros, 1, pad, X->ext) != pad) || fwrite(data, 1, bytes, X->ext) != bytes) {
            gdl__set_error("%s: %s: writing the external data failed: %s", X->fn, X->path, gdl__strerr(errno));
            return -1;
        }
        X->ext_off += pad;
        e = gdl__pb_open(b, GDL__OX_TENSOR_EXTERNAL);
        gdl__pb_str(b, GDL__OX_ENTRY_KEY, "location");
        gdl__pb_str(b, GDL__OX_ENTRY_VALUE, X->ext_name);
        gdl__pb_close(b, e);
        e = gdl__pb_open(b, GDL__OX_TENSOR_EXTERNAL);
        gdl__pb_str(b, GDL__OX_ENTRY_KEY, "offset");
        snprintf(num, sizeof num, "%llu", (unsigned long long)X->ext_off);
        gdl__pb_str(b, GDL__OX_ENTRY_VALUE, num);
        gdl__pb_close(b, e);
        e = gdl__pb_open(b, GDL__OX_TENSOR_EXTERNAL);
        gdl__pb_str(b, GDL__OX_ENTRY_KEY, "length");
        snprintf(num, sizeof num, "%llu", (unsigned long long)bytes);
        gdl__pb_str(b, GDL__OX_ENTRY_VALUE, num);
        gdl__pb_close(b, e);
        gdl__pb_int(b, GDL__OX_TENSOR_LOCATION, GDL__OX_LOCATION_EXTERNAL);
        X->ext_off += bytes;
    } else {
        gdl__pb_bytes(b, GDL__OX_TENSOR_RAW, bytes ? data : "", bytes);
    }
    gdl__pb_close(b, s);
    return 0;
}

/* A tensor's data as an initializer named name. */
static int gdl__ox_init_tensor(gdl__ox *X, const gdl_tensor *t, const char *name) {
    size_t es = gdl_dtype_size(t->dtype), bytes = (size_t)t->numel * es;
    int ot = gdl__ox_dtype(t->dtype), rc;
    void *host;
    if (!ot) {
        gdl__set_error("%s: tensor '%s' %s is %s, which has no ONNX type here (f32, i32, f16, bf16)", X->fn, name,
                       gdl_shape_str(t), gdl_dtype_name(t->dtype));
        return -1;
    }
    if (!(host = GPUDL_MALLOC(bytes ? bytes : 1))) return gdl__ox_oom(X);
    if (bytes && gdl_copy_to_host(t, host, bytes) < 0) {
        GPUDL_FREE(host);
        return -1;
    }
    if (t->dtype == GDL_F32 && es != 4) { /* GPUDL_DOUBLE: f32 tensors hold doubles; ONNX's FLOAT is 4 bytes */
        int64_t k;
        for (k = 0; k < t->numel; k++) ((float *)host)[k] = (float)((const gdl_real *)host)[k];
        es = 4;
        bytes = (size_t)t->numel * 4;
    }
    rc = gdl__ox_init_raw(X, name, ot, t->ndim, t->shape, host, bytes, es);
    GPUDL_FREE(host);
    return rc;
}

/* constants the translation adds: an int64 vector, an f32 scalar */
static const char *gdl__ox_const_i64(gdl__ox *X, const int64_t *v, int n) {
    const char *name = gdl__ox_tmp(X);
    int64_t dim = n, *copy;
    int rc;
    if (!name) return NULL;
    if (!(copy = (int64_t *)GPUDL_MALLOC(sizeof(int64_t) * (size_t)(n ? n : 1)))) {
        gdl__ox_oom(X);
        return NULL;
    }
    memcpy(copy, v, sizeof(int64_t) * (size_t)n);
    rc = gdl__ox_init_raw(X, name, GDL__OX_INT64, 1, &dim, copy, sizeof(int64_t) * (size_t)n, sizeof(int64_t));
    GPUDL_FREE(copy);
    return rc < 0 ? NULL : name;
}
static const char *gdl__ox_const_i64_scalar(gdl__ox *X, int64_t v) {
    const char *name = gdl__ox_tmp(X);
    if (!name || gdl__ox_init_raw(X, name, GDL__OX_INT64, 0, NULL, &v, sizeof v, sizeof v) < 0) return NULL;
    return name;
}
static const char *gdl__ox_const_f32(gdl__ox *X, double v) {
    const char *name = gdl__ox_tmp(X);
    float f = (float)v;
    if (!name || gdl__ox_init_raw(X, name, GDL__OX_FLOAT, 0, NULL, &f, 4, 4) < 0) return NULL;
    return name;
}
/* an f32 vector of n copies of v */
static const char *gdl__ox_const_fill(gdl__ox *X, int64_t n, double v) {
    const char *name = gdl__ox_tmp(X);
    float *f;
    int64_t k;
    int rc;
    if (!name) return NULL;
    if (!(f = (float *)GPUDL_MALLOC(sizeof(float) * (size_t)(n ? n : 1)))) {
        gdl__ox_oom(X);
        return NULL;
    }
    for (k = 0; k < n; k++) f[k] = (float)v;
    rc = gdl__ox_init_raw(X, name, GDL__OX_FLOAT, 1, &n, f, sizeof(float) * (size_t)n, 4);
    GPUDL_FREE(f);
    return rc < 0 ? NULL : name;
}

/* A temporary the forward filled with one value that has a dim of the traced batch's size (an RNN's zero
   state [layers, B, H]): with a dynamic batch, that value expanded to the shape with the input's batch at
   that dim (the first such). The value's name, or NULL: not such a tensor (or an error: X->err). */
static const char *gdl__ox_batch_fill(gdl__ox *X, const gdl_tensor *t, const char *name, int *err) {
    size_t es = gdl_dtype_size(t->dtype), bytes = (size_t)t->numel * es, k;
    unsigned char *host;
    const char *parts[3], *val, *shape;
    int64_t dims[GDL_MAX_DIMS];
    int d, bd = -1, np = 0, rc;
    gdl__pb at = {NULL, 0, 0, 0};
    *err = 0;
    if (!X->dyn || !t->gen || t->ndim < 1 || !t->numel || !gdl__ox_dtype(t->dtype)) return NULL;
    for (d = 0, k = 0; d < t->ndim; d++)
        if (t->shape[d] == X->B && (k++, bd < 0)) bd = d;
    if (bd < 0) return NULL;
    if (k > 1) { /* which one is the batch? */
        gdl__set_error("%s: a constant %s made in the forward has %d dims of the traced batch's size %lld: trace "
                       "with a batch size that no other dim has", X->fn, gdl_shape_str(t), (int)k, (long long)X->B);
        *err = 1;
        return NULL;
    }
    if (!(host = (unsigned char *)GPUDL_MALLOC(bytes))) {
        *err = 1;
        gdl__ox_oom(X);
        return NULL;
    }
    if (gdl_copy_to_host(t, host, bytes) < 0) {
        GPUDL_FREE(host);
        *err = 1;
        return NULL;
    }
    for (k = es; k < bytes && !memcmp(host + k, host, es); k += es) {}
    if (k < bytes) { /* not one value */
        GPUDL_FREE(host);
        return NULL;
    }
    if (!X->batch_name) { /* Shape(input 0)[0:1] */
        gdl__ox_attr_int(&at, "start", 0);
        gdl__ox_attr_int(&at, "end", 1);
        if (!(X->batch_name = gdl__ox_tmp(X))) goto fail;
        gdl__ox_node1(X, "Shape", X->v[0].name, X->batch_name, &at);
    }
    if (bd > 0) {
        memcpy(dims, t->shape, sizeof(int64_t) * (size_t)bd);
        if (!(parts[np++] = gdl__ox_const_i64(X, dims, bd))) goto fail;
    }
    parts[np++] = X->batch_name;
    if (bd + 1 < t->ndim && !(parts[np++] = gdl__ox_const_i64(X, t->shape + bd + 1, t->ndim - bd - 1))) goto fail;
    if (!(shape = gdl__ox_tmp(X)) || !(val = gdl__ox_tmp(X))) goto fail;
    gdl__ox_attr_int(&at, "axis", 0);
    gdl__ox_node(X, "Concat", np, parts, shape, &at);
    if (t->dtype == GDL_F32 && es != 4) { /* GPUDL_DOUBLE: the value as ONNX's 4-byte FLOAT */
        float f = (float)*(const gdl_real *)(const void *)host;
        memcpy(host, &f, 4);
        es = 4;
    }
    rc = gdl__ox_init_raw(X, val, gdl__ox_dtype(t->dtype), 0, NULL, host, es, es);
    GPUDL_FREE(host);
    host = NULL;
    if (rc < 0) goto fail;
    gdl__ox_node2(X, "Expand", val, shape, name, NULL);
    return name;
fail:
    GPUDL_FREE(host);
    *err = 1;
    return NULL;
}

static int gdl__ox_qfind(const struct gdl__ox *X, const gdl_tensor *t);
static const char *gdl__ox_qemit(struct gdl__ox *X, int i);

/* The name of tensor t read by a node: a value named already, an int8 layer's output (written here), or a leaf first used here, which becomes
   an initializer (a module tensor under its state_dict name, anything else const_<k>) or a batch-sized
   fill (gdl__ox_batch_fill). */
static const char *gdl__ox_use(gdl__ox *X, const gdl_tensor *t) {
    int k = gdl__ox_find(X, t), j, err;
    char name[32];
    const char *nm = NULL;
    if (k >= 0) return X->v[k].name;
    if ((j = gdl__ox_qfind(X, t)) >= 0) return gdl__ox_qemit(X, j);
    for (j = 0; j < X->np && !nm; j++)
        if (X->ptens[j] == t) nm = X->pnames[j];
    if (!nm) {
        snprintf(name, sizeof name, "const_%d", X->nconst++);
        if (gdl__ox_batch_fill(X, t, name, &err)) {
            int d, bd = -1;
            for (d = 0; d < t->ndim && bd < 0; d++)
                if (t->shape[d] == X->B) bd = d;
            return (k = gdl__ox_add(X, t, name, bd)) < 0 ? NULL : X->v[k].name;
        }
        if (err) return NULL;
        nm = name;
    }
    if ((k = gdl__ox_add(X, t, nm, -1)) < 0 || gdl__ox_init_tensor(X, t, X->v[k].name) < 0) return NULL;
    return X->v[k].name;
}

/* ---- one trace node -> ONNX nodes ---- */

static int gdl__ox_bax_of(const gdl__ox *X, const gdl_tensor *t) {
    int k = t ? gdl__ox_find(X, t) : -1;
    return k >= 0 ? X->v[k].bax : -1;
}

/* GELU: Gelu from opset 20, before it its formula (erf, or PyTorch's tanh approximation) */
static int gdl__ox_gelu(gdl__ox *X, int tanh_form, const char *x, const char *out) {
    const char *a, *b, *c, *d, *k;
    if (X->opset >= 20) {
        gdl__pb at = {NULL, 0, 0, 0};
        gdl__ox_attr_str(&at, "approximate", tanh_form ? "tanh" : "none");
        gdl__ox_node1(X, "Gelu", x, out, &at);
        return 0;
    }
    if (!tanh_form) { /* 0.5 x (1 + erf(x / sqrt 2)) */
        if (!(k = gdl__ox_const_f32(X, 0.70710678118654752440)) || !(a = gdl__ox_tmp(X))) return -1;
        gdl__ox_node2(X, "Mul", x, k, a, NULL);
        if (!(b = gdl__ox_tmp(X))) return -1;
        gdl__ox_node1(X, "Erf", a, b, NULL);
    } else { /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
        const char *x2, *x3;
        if (!(x2 = gdl__ox_tmp(X))) return -1;
        gdl__ox_node2(X, "Mul", x, x, x2, NULL);
        if (!(x3 = gdl__ox_tmp(X))) return -1;
        gdl__ox_node2(X, "Mul", x2, x, x3, NULL);
        if (!(k = gdl__ox_const_f32(X, 0.044715)) || !(a = gdl__ox_tmp(X))) return -1;
        gdl__ox_node2(X, "Mul", x3, k, a, NULL);
        if (!(b = gdl__ox_tmp(X))) return -1;
        gdl__ox_node2(X, "Add", x, a, b, NULL);
        if (!(k = gdl__ox_const_f32(X, 0.79788456080286535588)) || !(a = gdl__ox_tmp(X))) return -1;
        gdl__ox_node2(X, "Mul", b, k, a, NULL);
        if (!(b = gdl__ox_tmp(X))) return -1;
        gdl__ox_node1(X, "Tanh", a, b, NULL);
    }
    if (!(k = gdl__ox_const_f32(X, 1.0)) || !(c = gdl__ox_tmp(X))) return -1;
    gdl__ox_node2(X, "Add", b, k, c, NULL);
    if (!(d = gdl__ox_tmp(X))) return -1;
    gdl__ox_node2(X, "Mul", x, c, d, NULL);
    if (!(k = gdl__ox_const_f32(X, 0.5))) return -1;
    gdl__ox_node2(X, "Mul", d, k, out, NULL);
    return 0;
}

/* the activation of a fused op (a backend code GDL_UN_*, negative: none) from x to out */
static int gdl__ox_act(gdl__ox *X, int code, const char *x, const char *out) {
    if (code == GDL_UN_RELU) gdl__ox_node1(X, "Relu", x, out, NULL);
    else if (code == GDL_UN_GELU_ERF || code == GDL_UN_GELU_TANH) return gdl__ox_gelu(X, code == GDL_UN_GELU_TANH, x, out);
    else gdl__ox_node1(X, "Identity", x, out, NULL);
    return 0;
}

/* Reshape's target for y = reshape(x) (shapes xs, ys): ys, where x has a batch dim (dynamic batch) with the
   dim of y that holds it as -1 (the others are fixed). -1 after the error when the batch is split. */
static int gdl__ox_reshape_target(gdl__ox *X, int xnd, const int64_t *xs, int ynd, const int64_t *ys, int in_bax,
                                  int64_t *target, int *out_bax) {
    int64_t P = 1, B, cum = 1;
    int j, k;
    memcpy(target, ys, sizeof(int64_t) * (size_t)ynd);
    *out_bax = -1;
    if (in_bax < 0) return 0;
    for (k = 0; k < in_bax; k++) P *= xs[k];
    B = xs[in_bax];
    for (j = 0; j < ynd; j++) {
        if (cum * ys[j] >= P * B) break;
        cum *= ys[j];
    }
    if (j == ynd || !cum || P % cum != 0 || !B || (cum * ys[j]) % (P * B) != 0) {
        char a[64], b[64];
        size_t la = 0, lb = 0;
        for (k = 0; k < xnd && la + 24 < sizeof a; k++) la += (size_t)snprintf(a + la, sizeof a - la, "%s%lld", k ? "," : "", (long long)xs[k]);
        for (k = 0; k < ynd && lb + 24 < sizeof b; k++) lb += (size_t)snprintf(b + lb, sizeof b - lb, "%s%lld", k ? "," : "", (long long)ys[k]);
        gdl__set_error("%s: reshape [%s] -> [%s] (node %d) splits the batch dimension (dim %d): it has no "
                       "dynamic-batch form (export with dynamic_batch = 0)", X->fn, a, b, X->cur, in_bax);
        return -1;
    }
    target[j] = -1;
    *out_bax = j;
    return 0;
}

/* the input names of n; NULL after the error */
static int gdl__ox_inputs(gdl__ox *X, const gdl_node *n, const char **in) {
    int k;
    for (k = 0; k < n->nin; k++) {
        in[k] = NULL;
        if (n->in[k] && !(in[k] = gdl__ox_use(X, n->in[k]))) return -1;
    }
    return 0;
}

static const char *gdl__ox_op_name(int op) { return op == GDL__OP_TRACE_COMPARE ? "compare" : gdl_op_name(op); }

static int gdl__ox_no_form(gdl__ox *X, const gdl_node *n, int total, const char *why) {
    char ins[512];
    size_t len = 0;
    int k;
    ins[0] = 0;
    for (k = 0; k < n->nin && len + 80 < sizeof ins; k++) {
        int j = n->in[k] ? gdl__ox_find(X, n->in[k]) : -1;
        len += (size_t)snprintf(ins + len, sizeof ins - len, "%s%s %s", k ? ", " : "",
                                j >= 0 ? X->v[j].name : n->in[k] ? "(a tensor)" : "(none)",
                                n->in[k] ? gdl_shape_str(n->in[k]) : "");
    }
    gdl__set_error("%s: op \"%s\" has no ONNX form%s%s (node %d of %d of the trace, output %s, inputs: %s)", X->fn,
                   gdl__ox_op_name(n->op), why ? ": " : "", why ? why : "", X->cur, total, gdl_shape_str(n->out), ins);
    return -1;
}

static const char *gdl__ox_unary_name(int op) {
    switch (op) {
    case GDL_OP_EXP: return "Exp";
    case GDL_OP_LOG: return "Log";
    case GDL_OP_RELU: return "Relu";
    case GDL_OP_SIGMOID: return "Sigmoid";
    case GDL_OP_TANH: return "Tanh";
    case GDL_OP_SQRT: return "Sqrt";
    case GDL_OP_ABS: return "Abs";
    case GDL_OP_TO: return "Identity";
    default: return NULL;
    }
}
static const char *gdl__ox_binary_name(int op) {
    switch (op) {
    case GDL_OP_ADD: return "Add";
    case GDL_OP_SUB: return "Sub";
    case GDL_OP_MUL: return "Mul";
    case GDL_OP_DIV: return "Div";
    case GDL_OP_POW: return "Pow";
    case GDL_OP_MINIMUM: return "Min";
    case GDL_OP_MAXIMUM: return "Max";
    case GDL_OP_ADD_SCALAR: return "Add";
    case GDL_OP_MUL_SCALAR: return "Mul";
    case GDL_OP_POW_SCALAR: return "Pow";
    case GDL_OP_CLAMP_MIN: return "Max";
    case GDL_OP_CLAMP_MAX: return "Min";
    default: return NULL;
    }
}

/* the batch dim of a broadcasting op's output: the first input's that has one, moved by the ranks' difference */
static int gdl__ox_bax_broadcast(const gdl__ox *X, const gdl_node *n) {
    int k, b;
    for (k = 0; k < n->nin; k++)
        if (n->in[k] && (b = gdl__ox_bax_of(X, n->in[k])) >= 0) return b + n->out->ndim - n->in[k]->ndim;
    return -1;
}

/* linear (and linear_act's linear part) to out: Gemm for a 2-D input, else MatMul by W^T (+ bias) */
static int gdl__ox_linear(gdl__ox *X, const char *const *in, int xdim, const char *out) {
    gdl__pb at = {NULL, 0, 0, 0};
    const char *wt, *m;
    static const int64_t perm[2] = {1, 0};
    if (xdim == 2) {
        gdl__ox_attr_int(&at, "transB", 1);
        gdl__ox_node(X, "Gemm", 3, in, out, &at);
        return 0;
    }
    if (!(wt = gdl__ox_tmp(X))) return -1;
    gdl__ox_attr_ints(&at, "perm", perm, 2);
    gdl__ox_node1(X, "Transpose", in[1], wt, &at);
    if (!in[2]) {
        gdl__ox_node2(X, "MatMul", in[0], wt, out, NULL);
        return 0;
    }
    if (!(m = gdl__ox_tmp(X))) return -1;
    gdl__ox_node2(X, "MatMul", in[0], wt, m, NULL);
    gdl__ox_node2(X, "Add", m, in[2], out, NULL);
    return 0;
}

/* conv2d / max / avg pooling's window attributes from the node's geometry */
static void gdl__ox_window(gdl__pb *at, const gdl_conv_geom *g, int dilations) {
    int64_t v[4];
    v[0] = g->KH; v[1] = g->KW;
    gdl__ox_attr_ints(at, "kernel_shape", v, 2);
    v[0] = g->SH; v[1] = g->SW;
    gdl__ox_attr_ints(at, "strides", v, 2);
    v[0] = v[2] = g->PH; v[1] = v[3] = g->PW;
    gdl__ox_attr_ints(at, "pads", v, 4);
    if (dilations) {
        v[0] = g->DH; v[1] = g->DW;
        gdl__ox_attr_ints(at, "dilations", v, 2);
    }
}

/* ReduceSum / ReduceMean / ReduceMax over dim (-1: all) keeping it or not; axes an input from opset 18
   (ReduceSum: 13) */
static int gdl__ox_reduce(gdl__ox *X, const char *op_type, const char *x, int dim, int keep, const char *out) {
    gdl__pb at = {NULL, 0, 0, 0};
    int64_t ax = dim;
    gdl__ox_attr_int(&at, "keepdims", keep);
    if (dim < 0) {
        gdl__ox_node1(X, op_type, x, out, &at);
    } else if (X->opset >= 18 || !strcmp(op_type, "ReduceSum")) {
        const char *axes = gdl__ox_const_i64(X, &ax, 1);
        if (!axes) {
            gdl__pb_free(&at);
            return -1;
        }
        gdl__ox_node2(X, op_type, x, axes, out, &at);
    } else {
        gdl__ox_attr_ints(&at, "axes", &ax, 1);
        gdl__ox_node1(X, op_type, x, out, &at);
    }
    return 0;
}

/* x [..., L, H*E] (nd dims) -> [..., H, L, E]: a Reshape that keeps the leading dims (0: copy) and a Transpose */
static const char *gdl__ox_split_heads(gdl__ox *X, const char *x, int nd, int64_t H, int64_t E) {
    int64_t shape[GDL_MAX_DIMS + 1], perm[GDL_MAX_DIMS + 1];
    const char *s, *r, *t;
    gdl__pb at = {NULL, 0, 0, 0};
    int d;
    for (d = 0; d < nd - 1; d++) shape[d] = 0;
    shape[nd - 1] = H;
    shape[nd] = E;
    for (d = 0; d <= nd; d++) perm[d] = d;
    perm[nd - 2] = nd - 1;
    perm[nd - 1] = nd - 2;
    if (!(s = gdl__ox_const_i64(X, shape, nd + 1)) || !(r = gdl__ox_tmp(X)) || !(t = gdl__ox_tmp(X))) return NULL;
    gdl__ox_node2(X, "Reshape", x, s, r, NULL);
    gdl__ox_attr_ints(&at, "perm", perm, nd + 1);
    gdl__ox_node1(X, "Transpose", r, t, &at);
    return t;
}

/* scaled dot-product attention as the composition softmax(scale q k^T + mask) v (q, k, v with nd dims,
   heads split or not); the causal mask a constant [L, S] of 0 and -inf above the diagonal, a u8 mask's
   zeros -inf, a float mask added */
static int gdl__ox_attention(gdl__ox *X, const gdl_node *n, const char *q, const char *k, const char *v,
                             const char *mask, int nd, int64_t L, int64_t S, const char *out) {
    int64_t perm[GDL_MAX_DIMS + 1];
    const char *kt, *s, *c, *w;
    gdl__pb at = {NULL, 0, 0, 0};
    int d;
    for (d = 0; d < nd; d++) perm[d] = d;
    perm[nd - 2] = nd - 1;
    perm[nd - 1] = nd - 2;
    if (!(kt = gdl__ox_tmp(X)) || !(s = gdl__ox_tmp(X))) return -1;
    gdl__ox_attr_ints(&at, "perm", perm, nd);
    gdl__ox_node1(X, "Transpose", k, kt, &at);
    gdl__ox_node2(X, "MatMul", q, kt, s, NULL);
    if (!(c = gdl__ox_const_f32(X, n->f[0])) || !(w = gdl__ox_tmp(X))) return -1;
    gdl__ox_node2(X, "Mul", s, c, w, NULL);
    s = w;
    if (n->i[0]) { /* causal */
        float *m = (float *)GPUDL_MALLOC(sizeof(float) * (size_t)(L * S > 0 ? L * S : 1));
        int64_t i, j, dims[2];
        int rc;
        if (!m) return gdl__ox_oom(X);
        for (i = 0; i < L; i++)
            for (j = 0; j < S; j++) m[i * S + j] = j > i ? -INFINITY : 0.0f;
        dims[0] = L;
        dims[1] = S;
        c = gdl__ox_tmp(X);
        rc = c ? gdl__ox_init_raw(X, c, GDL__OX_FLOAT, 2, dims, m, sizeof(float) * (size_t)(L * S), 4) : -1;
        GPUDL_FREE(m);
        if (rc < 0 || !(w = gdl__ox_tmp(X))) return -1;
        gdl__ox_node2(X, "Add", s, c, w, NULL);
        s = w;
    } else if (mask && n->in[3]->dtype == GDL_U8) {
        const char *b, *wi[3];
        gdl__pb at2 = {NULL, 0, 0, 0};
        if (!(b = gdl__ox_tmp(X)) || !(wi[2] = gdl__ox_const_f32(X, -INFINITY)) || !(w = gdl__ox_tmp(X))) return -1;
        gdl__ox_attr_int(&at2, "to", GDL__OX_BOOL);
        gdl__ox_node1(X, "Cast", mask, b, &at2);
        wi[0] = b;
        wi[1] = s;
        gdl__ox_node(X, "Where", 3, wi, w, NULL);
        s = w;
    } else if (mask) {
        if (!(w = gdl__ox_tmp(X))) return -1;
        gdl__ox_node2(X, "Add", s, mask, w, NULL);
        s = w;
    }
    if (!(w = gdl__ox_tmp(X))) return -1;
    gdl__ox_attr_int(&at, "axis", -1);
    gdl__ox_node1(X, "Softmax", s, w, &at);
    gdl__ox_node2(X, "MatMul", w, v, out, NULL);
    return 0;
}

/* SDPA's node: layouts plain, heads packed in the last dim, or q, k and v side by side (src/ops/attention.h) */
static int gdl__ox_sdpa(gdl__ox *X, const gdl_node *n, const char *const *in, const char *out) {
    const gdl_tensor *q = n->in[0];
    const int lay = (int)n->i[1], nd = q->ndim;
    const int64_t H = n->i[2], L = q->shape[nd - 2];
    const char *qs, *ks, *vs, *o, *t, *s;
    int64_t E, Ev, S, shape[GDL_MAX_DIMS], perm[GDL_MAX_DIMS + 1];
    gdl__pb at = {NULL, 0, 0, 0};
    int d;
    if (lay == GDL__SDPA_PLAIN)
        return gdl__ox_attention(X, n, in[0], in[1], in[2], in[3], nd, L, n->in[1]->shape[nd - 2], out);
    if (lay == GDL__SDPA_QKV) { /* the three thirds of the last dim */
        const char *si[4], *part[3];
        int64_t third = q->shape[nd - 1] / 3, ax = -1, st, en;
        int j;
        for (j = 0; j < 3; j++) {
            st = j * third;
            en = st + third;
            si[0] = in[0];
            if (!(si[1] = gdl__ox_const_i64(X, &st, 1)) || !(si[2] = gdl__ox_const_i64(X, &en, 1)) ||
                !(si[3] = gdl__ox_const_i64(X, &ax, 1)) || !(part[j] = gdl__ox_tmp(X)))
                return -1;
            gdl__ox_node(X, "Slice", 4, si, part[j], NULL);
        }
        E = Ev = third / H;
        S = L;
        qs = part[0], ks = part[1], vs = part[2];
    } else {
        E = q->shape[nd - 1] / H;
        Ev = n->in[2]->shape[nd - 1] / H;
        S = n->in[1]->shape[nd - 2];
        qs = in[0], ks = in[1], vs = in[2];
    }
    if (!(qs = gdl__ox_split_heads(X, qs, nd, H, E)) || !(ks = gdl__ox_split_heads(X, ks, nd, H, E)) ||
        !(vs = gdl__ox_split_heads(X, vs, nd, H, Ev)) || !(o = gdl__ox_tmp(X)) ||
        gdl__ox_attention(X, n, qs, ks, vs, in[3], nd + 1, L, S, o) < 0)
        return -1;
    for (d = 0; d <= nd; d++) perm[d] = d; /* [..., H, L, Ev] -> [..., L, H, Ev] -> [..., L, H*Ev] */
    perm[nd - 2] = nd - 1;
    perm[nd - 1] = nd - 2;
    if (!(t = gdl__ox_tmp(X))) return -1;
    gdl__ox_attr_ints(&at, "perm", perm, nd + 1);
    gdl__ox_node1(X, "Transpose", o, t, &at);
    for (d = 0; d < nd - 1; d++) shape[d] = 0;
    shape[nd - 1] = H * Ev;
    if (!(s = gdl__ox_const_i64(X, shape, nd))) return -1;
    gdl__ox_node2(X, "Reshape", t, s, out, NULL);
    return 0;
}

/* a view of a contiguous block of x (elements off .. off + count, SLICE's node): x[i0, .., ia-1, s:s+len] for
   the outermost dim a where the block is whole rows of dim a, as a Slice over dims 0..a, then reshaped */
static int gdl__ox_block(gdl__ox *X, const gdl_node *n, int total, const char *x, int b0, const char *out, int *bax) {
    const gdl_tensor *t = n->in[0], *y = n->out;
    int64_t off = n->i[0], cnt = y->numel, inner = 1, s = 0, len = 0, starts[GDL_MAX_DIMS], ends[GDL_MAX_DIMS],
            axes[GDL_MAX_DIMS], mid[GDL_MAX_DIMS], target[GDL_MAX_DIMS];
    const char *si[4], *part, *shape;
    int a, k, sb;
    for (a = 0; a < t->ndim; a++) {
        for (inner = 1, k = a + 1; k < t->ndim; k++) inner *= t->shape[k];
        if (!inner || off % inner || cnt % inner) continue;
        s = off / inner;
        len = cnt / inner;
        if (s % t->shape[a] + len <= t->shape[a]) break;
    }
    if (a == t->ndim) return gdl__ox_no_form(X, n, total, "a block that is not whole rows of one dim");
    starts[a] = s % t->shape[a];
    ends[a] = starts[a] + len;
    s /= t->shape[a];
    for (k = a - 1; k >= 0; k--) { /* the fixed indices of the dims before a */
        starts[k] = s % t->shape[k];
        ends[k] = starts[k] + 1;
        s /= t->shape[k];
    }
    if (b0 >= 0 && (b0 < a || (b0 == a && len != t->shape[a])))
        return gdl__ox_no_form(X, n, total, "a block across the batch dim (export with dynamic_batch = 0)");
    for (k = 0; k <= a; k++) axes[k] = k;
    for (k = 0; k < t->ndim; k++) mid[k] = k < a ? 1 : k == a ? len : t->shape[k];
    si[0] = x;
    if (!(si[1] = gdl__ox_const_i64(X, starts, a + 1)) || !(si[2] = gdl__ox_const_i64(X, ends, a + 1)) ||
        !(si[3] = gdl__ox_const_i64(X, axes, a + 1)) || !(part = gdl__ox_tmp(X)))
        return -1;
    gdl__ox_node(X, "Slice", 4, si, part, NULL);
    if (gdl__ox_reshape_target(X, t->ndim, mid, y->ndim, y->shape, b0, target, &sb) < 0 ||
        !(shape = gdl__ox_const_i64(X, target, y->ndim)))
        return -1;
    gdl__ox_node2(X, "Reshape", part, shape, out, NULL);
    *bax = sb;
    return 0;
}

/* a u8 mask as ONNX's bool */
static const char *gdl__ox_bool(gdl__ox *X, const char *mask) {
    gdl__pb at = {NULL, 0, 0, 0};
    const char *b = gdl__ox_tmp(X);
    if (!b) return NULL;
    gdl__ox_attr_int(&at, "to", GDL__OX_BOOL);
    gdl__ox_node1(X, "Cast", mask, b, &at);
    return b;
}

/* a comparison (u8 result): both sides as f32 where their dtypes differ, as gdl_compare does */
static int gdl__ox_compare(gdl__ox *X, const gdl_node *n, const char *const *in, const char *out) {
    static const char *const names[] = {"Equal", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"};
    const char *a = in[0], *b = in[1], *r, *r2;
    gdl__pb at = {NULL, 0, 0, 0};
    int op = (int)n->i[0], k;
    if (n->in[0]->dtype != n->in[1]->dtype) {
        const char **side[2];
        side[0] = &a;
        side[1] = &b;
        for (k = 0; k < 2; k++) {
            gdl__pb c = {NULL, 0, 0, 0};
            const char *f;
            if (n->in[k]->dtype == GDL_F32) continue;
            if (!(f = gdl__ox_tmp(X))) return -1;
            gdl__ox_attr_int(&c, "to", GDL__OX_FLOAT);
            gdl__ox_node1(X, "Cast", *side[k], f, &c);
            *side[k] = f;
        }
    }
    if (op < 0 || op > GDL_CMP_GE || !(r = gdl__ox_tmp(X))) return -1;
    gdl__ox_node2(X, names[op], a, b, r, NULL);
    if (op == GDL_CMP_NE) {
        if (!(r2 = gdl__ox_tmp(X))) return -1;
        gdl__ox_node1(X, "Not", r, r2, NULL);
        r = r2;
    }
    gdl__ox_attr_int(&at, "to", GDL__OX_UINT8);
    gdl__ox_node1(X, "Cast", r, out, &at);
    return 0;
}

/* [B, G*H] -> its k-th of G parts along dim 1 */
static const char *gdl__ox_part(gdl__ox *X, const char *x, int64_t k, int64_t H) {
    const char *si[4], *p;
    int64_t st = k * H, en = (k + 1) * H, ax = 1;
    if (!(si[0] = x)) return NULL;
    if (!(si[1] = gdl__ox_const_i64(X, &st, 1)) || !(si[2] = gdl__ox_const_i64(X, &en, 1)) ||
        !(si[3] = gdl__ox_const_i64(X, &ax, 1)) || !(p = gdl__ox_tmp(X)))
        return NULL;
    gdl__ox_node(X, "Slice", 4, si, p, NULL);
    return p;
}

/* y = op(a, b) into a fresh name; NULL after an error */
static const char *gdl__ox_bin(gdl__ox *X, const char *op, const char *a, const char *b) {
    const char *y = a && b ? gdl__ox_tmp(X) : NULL;
    if (y) gdl__ox_node2(X, op, a, b, y, NULL);
    return y;
}
static const char *gdl__ox_un(gdl__ox *X, const char *op, const char *a) {
    const char *y = a ? gdl__ox_tmp(X) : NULL;
    if (y) gdl__ox_node1(X, op, a, y, NULL);
    return y;
}

/* lstm_gates (gates i, f, g, o of gx + gh; out [2, B, H]: h' then c') and gru_gates (r, z, n; out [B, H]),
   the formulas of src/api/ops.h */
static int gdl__ox_rnn_gates(gdl__ox *X, const gdl_node *n, const char *const *in, const char *out) {
    const int64_t H = n->in[2]->shape[1];
    const char *g[4], *s, *c, *h, *r3[2], *shape;
    gdl__pb at = {NULL, 0, 0, 0};
    int k;
    if (n->op == GDL_OP_LSTM_GATES) {
        int64_t tgt[3];
        if (!(s = gdl__ox_bin(X, "Add", in[0], in[1]))) return -1;
        for (k = 0; k < 4; k++)
            if (!(g[k] = gdl__ox_part(X, s, k, H)) || !(g[k] = gdl__ox_un(X, k == 2 ? "Tanh" : "Sigmoid", g[k])))
                return -1;
        if (!(c = gdl__ox_bin(X, "Add", gdl__ox_bin(X, "Mul", g[1], in[2]), gdl__ox_bin(X, "Mul", g[0], g[2]))) ||
            !(h = gdl__ox_bin(X, "Mul", g[3], gdl__ox_un(X, "Tanh", c))))
            return -1;
        tgt[0] = 1; tgt[1] = -1; tgt[2] = H;
        if (!(shape = gdl__ox_const_i64(X, tgt, 3)) || !(r3[0] = gdl__ox_bin(X, "Reshape", h, shape)) ||
            !(r3[1] = gdl__ox_bin(X, "Reshape", c, shape)))
            return -1;
        gdl__ox_attr_int(&at, "axis", 0);
        gdl__ox_node(X, "Concat", 2, r3, out, &at);
        return 0;
    }
    { /* GRU: r, z from gx + gh; n = tanh(gx_n + r gh_n); h' = (1 - z) n + z h_prev = n + z (h_prev - n) */
        const char *r, *z, *nn;
        if (!(r = gdl__ox_un(X, "Sigmoid", gdl__ox_bin(X, "Add", gdl__ox_part(X, in[0], 0, H), gdl__ox_part(X, in[1], 0, H)))) ||
            !(z = gdl__ox_un(X, "Sigmoid", gdl__ox_bin(X, "Add", gdl__ox_part(X, in[0], 1, H), gdl__ox_part(X, in[1], 1, H)))) ||
            !(nn = gdl__ox_un(X, "Tanh", gdl__ox_bin(X, "Add", gdl__ox_part(X, in[0], 2, H),
                                                      gdl__ox_bin(X, "Mul", r, gdl__ox_part(X, in[1], 2, H))))) ||
            !(h = gdl__ox_bin(X, "Mul", z, gdl__ox_bin(X, "Sub", in[2], nn))))
            return -1;
        gdl__ox_node2(X, "Add", nn, h, out, NULL);
        return 0;
    }
}

/* One trace node n (whose output is named out) as ONNX nodes; its output's batch dim in *bax. */
static int gdl__ox_op(gdl__ox *X, const gdl_node *n, int total, const char *out, int *bax) {
    const char *in[GDL__OX_MAX_IN], *t, *c;
    gdl__pb at = {NULL, 0, 0, 0};
    int b0, op = n->op;
    int64_t v[GDL_MAX_DIMS + 2];
    *bax = -1;
    if (n->nin > GDL__OX_MAX_IN) return gdl__ox_no_form(X, n, total, "too many inputs");
    if (gdl__ox_inputs(X, n, in) < 0) return -1;
    b0 = n->nin && n->in[0] ? gdl__ox_bax_of(X, n->in[0]) : -1;
    *bax = b0;
    if (gdl__ox_unary_name(op)) {
        gdl__ox_node1(X, gdl__ox_unary_name(op), in[0], out, NULL);
        return 0;
    }
    if (gdl__ox_binary_name(op)) {
        if (n->nin == 1) { /* a scalar op: its scalar a constant */
            if (!(c = gdl__ox_const_f32(X, n->f[0]))) return -1;
            gdl__ox_node2(X, gdl__ox_binary_name(op), in[0], c, out, NULL);
            return 0;
        }
        gdl__ox_node2(X, gdl__ox_binary_name(op), in[0], in[1], out, NULL);
        *bax = gdl__ox_bax_broadcast(X, n);
        return 0;
    }
    switch (op) {
    case GDL_OP_RESHAPE: {
        const char *shape;
        if (gdl__ox_reshape_target(X, n->in[0]->ndim, n->in[0]->shape, n->out->ndim, n->out->shape, b0, v, bax) < 0 ||
            !(shape = gdl__ox_const_i64(X, v, n->out->ndim)))
            return -1;
        gdl__ox_node2(X, "Reshape", in[0], shape, out, NULL);
        return 0;
    }
    case GDL_OP_SLICE: return gdl__ox_block(X, n, total, in[0], b0, out, bax);
    case GDL_OP_LEAKY_RELU:
        gdl__ox_attr_float(&at, "alpha", n->f[0]);
        gdl__ox_node1(X, "LeakyRelu", in[0], out, &at);
        return 0;
    case GDL_OP_RSQRT:
        if (!(t = gdl__ox_tmp(X))) return -1;
        gdl__ox_node1(X, "Sqrt", in[0], t, NULL);
        gdl__ox_node1(X, "Reciprocal", t, out, NULL);
        return 0;
    case GDL_OP_GELU:
    case GDL_OP_GELU_TANH: return gdl__ox_gelu(X, op == GDL_OP_GELU_TANH, in[0], out);
    case GDL_OP_MATMUL: {
        int ba = b0, bb = gdl__ox_bax_of(X, n->in[1]);
        gdl__ox_node2(X, "MatMul", in[0], in[1], out, NULL);
        *bax = ba >= 0 && ba <= n->in[0]->ndim - 2 ? ba + n->out->ndim - n->in[0]->ndim
             : bb >= 0 && bb != n->in[1]->ndim - 2 ? bb + n->out->ndim - n->in[1]->ndim : -1;
        return 0;
    }
    case GDL_OP_LINEAR:
    case GDL_OP_LINEAR_ACT: {
        int code = op == GDL_OP_LINEAR_ACT ? (int)n->i[0] : -1;
        const char *y = code >= 0 ? gdl__ox_tmp(X) : out;
        if (b0 >= n->in[0]->ndim - 1) *bax = -1;
        if (!y || gdl__ox_linear(X, in, n->in[0]->ndim, y) < 0) return -1;
        return code >= 0 ? gdl__ox_act(X, code, y, out) : 0;
    }
    case GDL_OP_SUM:
    case GDL_OP_MEAN:
    case GDL_OP_MAX:
    case GDL_OP_MIN: {
        int dim = (int)n->i[3], keep = dim >= 0 && n->out->ndim == n->in[0]->ndim;
        if (b0 >= 0 && (dim < 0 || dim == b0)) *bax = -1;
        else if (b0 > dim && !keep) *bax = b0 - 1;
        return gdl__ox_reduce(X, op == GDL_OP_SUM ? "ReduceSum" : op == GDL_OP_MEAN ? "ReduceMean"
                              : op == GDL_OP_MAX ? "ReduceMax" : "ReduceMin", in[0],
                              dim, keep, out);
    }
    case GDL_OP_SOFTMAX:
    case GDL_OP_LOG_SOFTMAX:
        gdl__ox_attr_int(&at, "axis", n->i[3]);
        gdl__ox_node1(X, op == GDL_OP_SOFTMAX ? "Softmax" : "LogSoftmax", in[0], out, &at);
        return 0;
    case GDL_OP_CONV2D:
    case GDL_OP_CONV2D_ACT: {
        int code = (int)n->i[2];
        const char *y = code >= 0 ? gdl__ox_tmp(X) : out;
        if (!y) return -1;
        gdl__ox_window(&at, &n->geom, 1);
        gdl__ox_attr_int(&at, "group", n->i[0]);
        gdl__ox_node(X, "Conv", n->in[2] ? 3 : 2, in, y, &at);
        return code >= 0 ? gdl__ox_act(X, code, y, out) : 0;
    }
    case GDL_OP_MAX_POOL2D:
    case GDL_OP_AVG_POOL2D:
        gdl__ox_window(&at, &n->geom, 0);
        if (op == GDL_OP_AVG_POOL2D) gdl__ox_attr_int(&at, "count_include_pad", 1); /* PyTorch's default */
        gdl__ox_node1(X, op == GDL_OP_MAX_POOL2D ? "MaxPool" : "AveragePool", in[0], out, &at);
        return 0;
    case GDL_OP_GLOBAL_AVG_POOL2D: gdl__ox_node1(X, "GlobalAveragePool", in[0], out, NULL); return 0;
    case GDL_OP_CONCAT:
        gdl__ox_attr_int(&at, "axis", n->i[0]);
        gdl__ox_node(X, "Concat", n->nin, in, out, &at);
        *bax = gdl__ox_bax_broadcast(X, n);
        return 0;
    case GDL_OP_PERMUTE: {
        int k;
        for (k = 0; k < n->in[0]->ndim; k++) {
            v[k] = n->i[k];
            if (b0 >= 0 && n->i[k] == b0) *bax = k;
        }
        gdl__ox_attr_ints(&at, "perm", v, n->in[0]->ndim);
        gdl__ox_node1(X, "Transpose", in[0], out, &at);
        return 0;
    }
    case GDL_OP_NARROW: { /* i: dim, start, step, length */
        const char *si[5];
        int64_t dim = n->i[0], start = n->i[1], step = n->i[2], end = n->i[1] + n->i[2] * (n->i[3] - 1) + 1;
        if (dim == b0) return gdl__ox_no_form(X, n, total, "a slice along the batch dim (export with dynamic_batch = 0)");
        si[0] = in[0];
        if (!(si[1] = gdl__ox_const_i64(X, &start, 1)) || !(si[2] = gdl__ox_const_i64(X, &end, 1)) ||
            !(si[3] = gdl__ox_const_i64(X, &dim, 1)) || !(si[4] = gdl__ox_const_i64(X, &step, 1)))
            return -1;
        gdl__ox_node(X, "Slice", 5, si, out, NULL);
        return 0;
    }
    case GDL_OP_INDEX_SELECT:
    case GDL_OP_GATHER:
        gdl__ox_attr_int(&at, "axis", n->i[0]);
        gdl__ox_node2(X, op == GDL_OP_GATHER ? "GatherElements" : "Gather", in[0], in[1], out, &at);
        if (b0 >= 0 && b0 == n->i[0]) *bax = -1;
        return 0;
    case GDL_OP_EMBEDDING: /* in: indices, weight */
        gdl__ox_node2(X, "Gather", in[1], in[0], out, NULL);
        return 0;
    case GDL_OP_BATCH_NORM:
    case GDL_OP_BATCH_NORM_RELU:
    case GDL_OP_BATCH_NORM_GELU: {
        const char *bi[5], *y = op != GDL_OP_BATCH_NORM ? gdl__ox_tmp(X) : out;
        int64_t C = n->in[0]->shape[1];
        if (n->i[3] || !n->stats[0] || !n->stats[1])
            return gdl__ox_no_form(X, n, total, "normalising by the batch's statistics (training mode, or no running "
                                                "statistics): only evaluation mode's running statistics export");
        bi[0] = in[0];
        if (!y || !(bi[1] = in[1] ? in[1] : gdl__ox_const_fill(X, C, 1.0)) ||
            !(bi[2] = in[2] ? in[2] : gdl__ox_const_fill(X, C, 0.0)) || !(bi[3] = gdl__ox_use(X, n->stats[0])) ||
            !(bi[4] = gdl__ox_use(X, n->stats[1])))
            return -1;
        gdl__ox_attr_float(&at, "epsilon", n->f[0]);
        gdl__ox_node(X, "BatchNormalization", 5, bi, y, &at);
        if (op == GDL_OP_BATCH_NORM_RELU) gdl__ox_node1(X, "Relu", y, out, NULL);
        if (op == GDL_OP_BATCH_NORM_GELU) return gdl__ox_gelu(X, 0, y, out);
        return 0;
    }
    case GDL_OP_LAYER_NORM: {
        const char *li[3];
        li[0] = in[0];
        if (!(li[1] = in[1] ? in[1] : gdl__ox_const_fill(X, n->i[1], 1.0))) return -1;
        li[2] = in[2];
        gdl__ox_attr_int(&at, "axis", -1);
        gdl__ox_attr_float(&at, "epsilon", n->f[0]);
        gdl__ox_node(X, "LayerNormalization", 3, li, out, &at);
        return 0;
    }
    case GDL_OP_SDPA:
        if (b0 >= n->in[0]->ndim - 2) *bax = -1; /* the batch among q's leading dims */
        return gdl__ox_sdpa(X, n, in, out);
    case GDL__OP_TRACE_COMPARE:
        *bax = gdl__ox_bax_broadcast(X, n);
        return gdl__ox_compare(X, n, in, out);
    case GDL_OP_WHERE: {
        const char *wi[3];
        if (!(wi[0] = gdl__ox_bool(X, in[0]))) return -1;
        wi[1] = in[1];
        wi[2] = in[2];
        gdl__ox_node(X, "Where", 3, wi, out, NULL);
        *bax = gdl__ox_bax_broadcast(X, n);
        return 0;
    }
    case GDL_OP_MASKED_FILL: {
        const char *wi[3];
        if (!(wi[0] = gdl__ox_bool(X, in[1])) || !(wi[1] = gdl__ox_const_f32(X, n->f[0]))) return -1;
        wi[2] = in[0];
        gdl__ox_node(X, "Where", 3, wi, out, NULL);
        return 0;
    }
    case GDL_OP_TRIL:
    case GDL_OP_TRIU:
        if (!(c = gdl__ox_const_i64_scalar(X, n->i[0]))) return -1;
        gdl__ox_attr_int(&at, "upper", op == GDL_OP_TRIU);
        gdl__ox_node2(X, "Trilu", in[0], c, out, &at);
        return 0;
    case GDL_OP_CUMSUM:
        if (!(c = gdl__ox_const_i64_scalar(X, n->i[3]))) return -1;
        gdl__ox_node2(X, "CumSum", in[0], c, out, NULL);
        return 0;
    case GDL_OP_LSTM_GATES:
    case GDL_OP_GRU_GATES:
        if (op == GDL_OP_LSTM_GATES && b0 >= 0) *bax = b0 + 1;
        return gdl__ox_rnn_gates(X, n, in, out);
    case GDL_OP_CAST:
        if (!gdl__ox_dtype(n->out->dtype)) return gdl__ox_no_form(X, n, total, "to a dtype ONNX lacks here");
        gdl__ox_attr_int(&at, "to", gdl__ox_dtype(n->out->dtype));
        gdl__ox_node1(X, "Cast", in[0], out, &at);
        return 0;
    case GDL_OP_DROPOUT:
        return gdl__ox_no_form(X, n, total, "dropout called with training = 1 (the export runs modules in "
                                            "evaluation mode; a forward that calls gdl_dropout itself should pass "
                                            "gdl_module_is_training)");
    default: return gdl__ox_no_form(X, n, total, NULL);
    }
}

/* ---- static int8 layers as QuantizeLinear / DequantizeLinear (QDQ) around the float op ----
   A quantized layer runs outside the tape; during the trace its forward is wrapped (gdl__ox_qlayer_traced) to
   note its input and output, and the output's first reader writes the layer (gdl__ox_qemit): the input
   clipped to the layer's activation range, QuantizeLinear and DequantizeLinear with its scale and zero point
   (u8), the int8 weight through DequantizeLinear (per output channel: axis 0), Gemm / MatMul / Conv with the
   f32 bias, ReLU when fused, and the output requantized the same way: the arithmetic of src/quant/layers.h,
   written out. A runtime may fuse the pattern into integer ops (QLinearMatMul, QLinearConv). */

static GDL__TLS gdl__ox *gdl__ox_qcur; /* the export whose trace is running on this thread */

static gdl_tensor *gdl__ox_qlayer_traced(gdl_module *m, gdl_tensor *x) {
    gdl_tensor *y = gdl__qlayer_forward(m, x);
    gdl__ox *X = gdl__ox_qcur;
    if (y && X) {
        if (X->nq == X->capq) {
            int cap = X->capq ? 2 * X->capq : 16;
            gdl__ox_q *nq = (gdl__ox_q *)GPUDL_REALLOC(X->q, sizeof *nq * (size_t)cap);
            if (!nq) {
                X->qoom = 1;
                return y;
            }
            X->q = nq;
            X->capq = cap;
        }
        X->q[X->nq].x = x;
        X->q[X->nq].y = y;
        X->q[X->nq].m = m;
        X->nq++;
    }
    return y;
}

/* the layer that made t, or -1 */
static int gdl__ox_qfind(const gdl__ox *X, const gdl_tensor *t) {
    int k;
    for (k = X->nq - 1; k >= 0; k--)
        if (X->q[k].y == t) return k;
    return -1;
}
/* t, or through int8 layers the tensor their chain started from (whose node a trace recorded) */
static const gdl_tensor *gdl__ox_qsrc(const gdl__ox *X, const gdl_tensor *t) {
    int k, hops = 0;
    while (t && (k = gdl__ox_qfind(X, t)) >= 0 && hops++ <= X->nq) t = X->q[k].x;
    return t;
}

/* a model's int8 layers wrapped for the trace (on 1) or unwrapped (0); 0, or -1 + error for a dynamic one */
static int gdl__ox_qwrap(gdl__ox *X, gdl_module *const *mods, int nm, int on) {
    int k;
    for (k = 0; k < nm; k++) {
        gdl_module *m = mods[k];
        if (!on && m->fwd == gdl__ox_qlayer_traced) m->fwd = gdl__qlayer_forward;
        if (!on || !gdl__is_qlayer(m)) continue;
        if (((const gdl__qlayer *)m->user)->mode == GDL__Q_DYNAMIC) {
            gdl__set_error("%s: %s is a %s: its activations are quantized per batch (%s), which has no ONNX form "
                           "here; export a statically quantized model (gdl_quant_prepare, calibrate, convert) or "
                           "the float model", X->fn, gdl__nn_label(m), gdl_module_kind(m),
                           ((const gdl__qlayer *)m->user)->reduce_range ? "7 bits" : "at run time");
            gdl__ox_qwrap(X, mods, nm, 0);
            return -1;
        }
        m->fwd = gdl__ox_qlayer_traced;
    }
    return 0;
}

/* a scalar initializer of ONNX type otype (u8 or f32) */
static const char *gdl__ox_const_scalar(gdl__ox *X, int otype, double v) {
    const char *name = gdl__ox_tmp(X);
    unsigned char u = (unsigned char)v;
    float f = (float)v;
    if (!name || gdl__ox_init_raw(X, name, otype, 0, NULL, otype == GDL__OX_UINT8 ? (void *)&u : (void *)&f,
                                  otype == GDL__OX_UINT8 ? 1 : 4, otype == GDL__OX_UINT8 ? 1 : 4) < 0)
        return NULL;
    return name;
}

/* x clipped to the range q's integers 0..qmax hold at (scale, zp), quantized and dequantized; out: the result's
   name (NULL: a fresh one) */
static const char *gdl__ox_qdq(gdl__ox *X, const char *x, double scale, int32_t zp, int qmax, const char *out) {
    const char *ci[3], *s, *z, *c, *q;
    if (!(s = gdl__ox_const_scalar(X, GDL__OX_FLOAT, scale)) || !(z = gdl__ox_const_scalar(X, GDL__OX_UINT8, zp)) ||
        !(ci[1] = gdl__ox_const_f32(X, (double)(float)((0 - zp) * scale))) ||
        !(ci[2] = gdl__ox_const_f32(X, (double)(float)((qmax - zp) * scale))) || !(c = gdl__ox_tmp(X)) ||
        !(q = gdl__ox_tmp(X)) || (!out && !(out = gdl__ox_tmp(X))))
        return NULL;
    ci[0] = x;
    gdl__ox_node(X, "Clip", 3, ci, c, NULL);
    ci[0] = c, ci[1] = s, ci[2] = z;
    gdl__ox_node(X, "QuantizeLinear", 3, ci, q, NULL);
    ci[0] = q;
    gdl__ox_node(X, "DequantizeLinear", 3, ci, out, NULL);
    return out;
}

/* the int8 layer X->q[i] as QDQ nodes; the name of its output */
static const char *gdl__ox_qemit(gdl__ox *X, int i) {
    const gdl_module *m = X->q[i].m;
    const gdl__qlayer *q = (const gdl__qlayer *)m->user, *ws = gdl__qlayer_wsrc(q);
    const gdl_tensor *x = X->q[i].x;
    const int64_t ns = gdl__qlayer_nscale(q);
    const char *xs, *xd, *in[3], *wd, *y;
    char name[4][96];
    gdl__pb at = {NULL, 0, 0, 0};
    int64_t wdims[4], k;
    int32_t *zeros;
    int bax, rc;
    if (!(xs = gdl__ox_use(X, x))) return NULL;
    bax = gdl__ox_bax_of(X, x);
    for (k = 0; k < 4; k++) snprintf(name[k], sizeof name[k], "qlayer_%d.%s", i, k == 0 ? "weight_int8" : k == 1 ? "weight_scale" : k == 2 ? "weight_zero_point" : "bias");
    if (!(xd = gdl__ox_qdq(X, xs, q->in_scale, q->in_zp, gdl__qlayer_qmax(q), NULL))) return NULL;
    wdims[0] = q->out;
    if (q->conv) {
        wdims[1] = q->ia[GDL__CONV_IN];
        wdims[2] = q->ia[GDL__CONV_KH];
        wdims[3] = q->ia[GDL__CONV_KW];
    } else {
        wdims[1] = q->in;
    }
    if (!(zeros = (int32_t *)GPUDL_MALLOC(sizeof(int32_t) * (size_t)ns))) {
        gdl__ox_oom(X);
        return NULL;
    }
    memset(zeros, 0, (size_t)ns); /* symmetric: an int8 zero point of 0 per scale */
    rc = gdl__ox_init_raw(X, name[0], GDL__OX_INT8, q->conv ? 4 : 2, wdims, ws->w, (size_t)(q->in * q->out), 1);
    if (rc == 0) rc = gdl__ox_init_raw(X, name[2], GDL__OX_INT8, q->per_channel, &ns, zeros, (size_t)ns, 1);
    /* the f32 data copied first: the writer makes it little-endian in place */
    for (k = 0; rc == 0 && k < 2; k++) {
        const int64_t n = k ? (q->bias ? q->out : 0) : ns;
        float *f = n ? (float *)GPUDL_MALLOC(sizeof(float) * (size_t)n) : NULL;
        if (!n) continue;
        if (!f) {
            rc = gdl__ox_oom(X);
            break;
        }
        memcpy(f, k ? q->bias : ws->w_scale, sizeof(float) * (size_t)n);
        rc = gdl__ox_init_raw(X, name[k ? 3 : 1], GDL__OX_FLOAT, k ? 1 : q->per_channel, k ? &wdims[0] : &ns, f,
                              sizeof(float) * (size_t)n, 4);
        GPUDL_FREE(f);
    }
    GPUDL_FREE(zeros);
    if (rc < 0 || !(wd = gdl__ox_tmp(X)) || !(y = gdl__ox_tmp(X))) return NULL;
    if (q->per_channel) gdl__ox_attr_int(&at, "axis", 0);
    in[0] = name[0], in[1] = name[1], in[2] = name[2];
    gdl__ox_node(X, "DequantizeLinear", 3, in, wd, &at);
    in[0] = xd, in[1] = wd, in[2] = q->bias ? name[3] : NULL;
    if (q->conv) {
        int64_t v[4];
        v[0] = q->ia[GDL__CONV_SH], v[1] = q->ia[GDL__CONV_SW];
        gdl__ox_attr_ints(&at, "strides", v, 2);
        v[0] = v[2] = q->ia[GDL__CONV_PH], v[1] = v[3] = q->ia[GDL__CONV_PW];
        gdl__ox_attr_ints(&at, "pads", v, 4);
        v[0] = q->ia[GDL__CONV_DH], v[1] = q->ia[GDL__CONV_DW];
        gdl__ox_attr_ints(&at, "dilations", v, 2);
        gdl__ox_node(X, "Conv", q->bias ? 3 : 2, in, y, &at);
    } else if (x->ndim == 2) {
        gdl__ox_attr_int(&at, "transB", 1);
        gdl__ox_node(X, "Gemm", q->bias ? 3 : 2, in, y, &at);
    } else if (!(in[1] = gdl__ox_un(X, "Transpose", wd)) || !(y = gdl__ox_bin(X, "MatMul", xd, in[1])) ||
               (q->bias && !(y = gdl__ox_bin(X, "Add", y, name[3])))) {
        return NULL;
    }
    if (q->relu && !(y = gdl__ox_un(X, "Relu", y))) return NULL;
    snprintf(name[0], sizeof name[0], "qlayer_%d", i);
    if ((k = gdl__ox_add(X, X->q[i].y, name[0], bax)) < 0) return NULL;
    return gdl__ox_qdq(X, y, q->out_scale, q->out_zp, gdl__qlayer_qmax(q), X->v[k].name);
}

/* ---- the trace ---- */

#define GDL__OX_MAX_OUT 64

/* m's tree in pre-order (list and flags may be NULL: only counted from n on); the count */
static int gdl__ox_modules(gdl_module *m, gdl_module **list, int *training, int n) {
    int k;
    if (list) {
        list[n] = m;
        training[n] = gdl_module_is_training(m);
    }
    n++;
    for (k = 0; k < gdl_module_num_children(m); k++) n = gdl__ox_modules(gdl_module_child_at(m, k), list, training, n);
    return n;
}

/* Runs fn once with every op recording its node (gdl__tracing), no gradients and model in evaluation
   mode, all three restored after. The nodes recorded, oldest first, in *nodes (to free), their count in
   *nn; the tape is left as it was. 0 / -1 + error. */
static int gdl__ox_trace(gdl__ox *X, gdl_module *model, gdl_onnx_forward_fn fn, void *user, int nin,
                         gdl_tensor *const *in, gdl_tensor **outs, int *nout, gdl_node ***nodes, int *nn) {
    gdl_node *tape0 = gdl__tape, *nd;
    gdl_module **mods = NULL;
    int *training = NULL, nm = 0, k, rc, prev_grad, count = 0;
    if (model) {
        nm = gdl__ox_modules(model, NULL, NULL, 0);
        mods = (gdl_module **)GPUDL_MALLOC(sizeof *mods * (size_t)nm);
        training = (int *)GPUDL_MALLOC(sizeof(int) * (size_t)nm);
        if (!mods || !training) {
            GPUDL_FREE(mods);
            GPUDL_FREE(training);
            return gdl__ox_oom(X);
        }
        gdl__ox_modules(model, mods, training, 0);
        if (gdl__ox_qwrap(X, mods, nm, 1) < 0) {
            GPUDL_FREE(mods);
            GPUDL_FREE(training);
            return -1;
        }
        gdl_module_train(model, 0);
    }
    prev_grad = gdl_set_grad_enabled(0);
    gdl__tracing = 1;
    gdl__ox_qcur = X;
    *nout = 0;
    rc = fn(user, nin, in, GDL__OX_MAX_OUT, outs, nout);
    gdl__ox_qcur = NULL;
    gdl__tracing = 0;
    if (model) gdl__ox_qwrap(X, mods, nm, 0);
    for (nd = gdl__tape; nd && nd != tape0; nd = nd->prev) count++;
    *nodes = (gdl_node **)GPUDL_MALLOC(sizeof(gdl_node *) * (size_t)(count ? count : 1));
    if (*nodes)
        for (nd = gdl__tape, k = count; k > 0; nd = nd->prev) (*nodes)[--k] = nd;
    *nn = count;
    gdl__tape = tape0; /* the trace's nodes are not the caller's to backward through */
    gdl_set_grad_enabled(prev_grad);
    for (k = 0; k < nm; k++) gdl_module_train(mods[k], training[k]); /* pre-order: children after parents */
    GPUDL_FREE(mods);
    GPUDL_FREE(training);
    if (!*nodes || X->qoom) return gdl__ox_oom(X);
    if (rc < 0) {
        char prev[sizeof gdl__err];
        memcpy(prev, gdl__err, sizeof prev);
        gdl__set_error("%s: the traced forward failed: %s", X->fn, prev[0] ? prev : "(no message)");
        return -1;
    }
    if (*nout < 1 || *nout > GDL__OX_MAX_OUT) {
        gdl__set_error("%s: the forward gave %d outputs (1 to %d)", X->fn, *nout, GDL__OX_MAX_OUT);
        return -1;
    }
    for (k = 0; k < *nout; k++)
        if (!outs[k]) {
            gdl__set_error("%s: the forward's output %d is NULL", X->fn, k);
            return -1;
        }
    return 0;
}

/* which trace nodes the outputs depend on (live[k]) */
static const gdl_tensor *gdl__ox_qsrc(const gdl__ox *X, const gdl_tensor *t);
static int gdl__ox_live(gdl__ox *X, gdl_node **nodes, int nn, gdl_tensor **outs, int nout, char *live) {
    int cap = 16, k, j, *h;
    size_t i;
    while (cap < 2 * nn) cap *= 2;
    if (!(h = (int *)GPUDL_MALLOC(sizeof(int) * (size_t)cap))) return gdl__ox_oom(X);
    memset(h, 0, sizeof(int) * (size_t)cap);
    for (k = 0; k < nn; k++) {
        for (i = gdl__ox_hash_of(nodes[k], cap); h[i]; i = (i + 1) & (size_t)(cap - 1)) {}
        h[i] = k + 1;
    }
#define GDL__OX_MARK(nodep)                                                                          \
    do {                                                                                             \
        const gdl_node *m_ = (nodep);                                                                \
        if (m_)                                                                                      \
            for (i = gdl__ox_hash_of(m_, cap); h[i]; i = (i + 1) & (size_t)(cap - 1))                \
                if (nodes[h[i] - 1] == m_) {                                                         \
                    live[h[i] - 1] = 1;                                                              \
                    break;                                                                           \
                }                                                                                    \
    } while (0)
    if (nn > 0) memset(live, 0, (size_t)nn); /* nn >= 0: the guard tells gcc -O1 so */
    for (k = 0; k < nout; k++) GDL__OX_MARK(gdl__ox_qsrc(X, outs[k])->node); /* through int8 layers to a node */
    for (k = nn - 1; k >= 0; k--)
        if (live[k])
            for (j = 0; j < nodes[k]->nin; j++)
                if (nodes[k]->in[j]) GDL__OX_MARK(gdl__ox_qsrc(X, nodes[k]->in[j])->node);
#undef GDL__OX_MARK
    GPUDL_FREE(h);
    return 0;
}

/* ---- LSTM and GRU layers as ONNX LSTM / GRU nodes ----
   A recurrent layer's direction runs, in the trace, as: gx = linear(xs [T,B,I], w_ih, b_ih); per step t
   gh = linear(h, w_hh, b_hh) and the gates op on (gx[t], gh, c or h), the next step reading the h (and c) it
   made. gdl__ox_rnn_find finds such chains, over every step of gx in order (forward) or backwards
   (reverse), whose inner values nothing else reads; each becomes one LSTM / GRU node written where gx was
   (its weights reordered from PyTorch's gates i, f, g, o and r, z, n into ONNX's i, o, f, c and z, r, h; GRU
   with linear_before_reset = 1), and the steps' h that other ops read are slices of its Y. Anything else
   stays unrolled (the gates' formulas). */

typedef struct gdl__ox_rnn {
    int lstm, T, rev, ok;
    int emit;                     /* the trace node (gx's linear) where the node is written */
    const gdl_tensor *xs, *w_ih, *b_ih, *w_hh, *b_hh, *h0, *c0, *c_last;
    const gdl_tensor **h;         /* each step's h, in time order */
    char *h_read;                 /* which of them something outside the layer reads */
    int *steps;                   /* the gates nodes, step order */
} gdl__ox_rnn;

/* pointer -> index maps over the trace nodes (open addressing; cap a power of two) */
static int gdl__ox_index_of(const int *h, int cap, gdl_node *const *nodes, const gdl_node *p) {
    size_t i;
    if (!p) return -1;
    for (i = gdl__ox_hash_of(p, cap); h[i]; i = (i + 1) & (size_t)(cap - 1))
        if (nodes[h[i] - 1] == p) return h[i] - 1;
    return -1;
}

static int gdl__ox_is_linear(const gdl_node *n) {
    return n && (n->op == GDL_OP_LINEAR || (n->op == GDL_OP_LINEAR_ACT && n->i[0] < 0)) && n->nin >= 2;
}
static int gdl__ox_is_leaf(const gdl_tensor *t) { return !t || (!t->node && t->dtype == GDL_F32); }

/* t as a row of another tensor (gdl_select: a slice then a reshape, or one of them): that tensor, the
   row's element offset and the view nodes (1 or 2, into v); NULL when t is not such a view */
static const gdl_tensor *gdl__ox_row(const gdl_tensor *t, int64_t *off, const gdl_node **v) {
    const gdl_node *n = t->node;
    v[0] = v[1] = NULL;
    if (!n || (n->op != GDL_OP_SLICE && n->op != GDL_OP_RESHAPE)) return NULL;
    v[0] = n;
    *off = n->op == GDL_OP_SLICE ? n->i[0] : 0;
    if (n->op == GDL_OP_RESHAPE && n->in[0]->node && n->in[0]->node->op == GDL_OP_SLICE) {
        v[1] = n->in[0]->node;
        *off = v[1]->i[0];
        return v[1]->in[0];
    }
    return n->in[0];
}

/* the gates node whose step comes before gates node g (through its h and c), or NULL */
static const gdl_node *gdl__ox_rnn_prev(const gdl_node *g) {
    const gdl_node *gh = g->in[1]->node, *v[2];
    const gdl_tensor *h, *src, *c;
    int64_t off = -1, coff = -1;
    if (!gdl__ox_is_linear(gh)) return NULL;
    h = gh->in[0];
    if (g->op == GDL_OP_GRU_GATES) return h == g->in[2] && h->node && h->node->op == GDL_OP_GRU_GATES ? h->node : NULL;
    if (!(src = gdl__ox_row(h, &off, v)) || off != 0 || !src->node || src->node->op != GDL_OP_LSTM_GATES ||
        !(c = gdl__ox_row(g->in[2], &coff, v)) || c != src || coff != h->numel)
        return NULL;
    return src->node;
}

static void gdl__ox_rnn_free(gdl__ox *X) {
    int k;
    for (k = 0; k < X->nrnn; k++) {
        GPUDL_FREE(X->rnn[k].h);
        GPUDL_FREE(X->rnn[k].h_read);
        GPUDL_FREE(X->rnn[k].steps);
    }
    GPUDL_FREE(X->rnn);
    GPUDL_FREE(X->absorbed);
    X->rnn = NULL;
    X->absorbed = NULL;
    X->nrnn = 0;
}

/* one chain from its first gates node: checked, its nodes marked absorbed[] = r; 0 not a layer, 1 one, -1 oom */
static int gdl__ox_rnn_chain(gdl__ox *X, gdl_node **nodes, const int *h, int cap, const int *next, int first,
                             gdl__ox_rnn *L, int r) {
    const gdl_node *g0 = nodes[first], *gxn, *v[2];
    const gdl_tensor *gx;
    int64_t B, H, G, T, t, off0 = 0;
    int k, j, m;
    memset(L, 0, sizeof *L);
    L->lstm = g0->op == GDL_OP_LSTM_GATES;
    G = L->lstm ? 4 : 3;
    if (!(gx = gdl__ox_row(g0->in[0], &off0, v)) || !gdl__ox_is_linear(gxn = gx->node) || gx->ndim != 3 ||
        gxn->in[0]->ndim != 3)
        return 0;
    T = gx->shape[0];
    B = gx->shape[1];
    H = g0->in[2]->shape[1];
    if (gx->shape[2] != G * H || !gdl__ox_is_leaf(gxn->in[1]) || !gdl__ox_is_leaf(gxn->nin > 2 ? gxn->in[2] : NULL))
        return 0;
    L->T = (int)T;
    L->rev = T > 1 && off0 == (T - 1) * B * G * H;
    L->xs = gxn->in[0];
    L->w_ih = gxn->in[1];
    L->b_ih = gxn->nin > 2 ? gxn->in[2] : NULL;
    L->w_hh = g0->in[1]->node->in[1];
    L->b_hh = g0->in[1]->node->nin > 2 ? g0->in[1]->node->in[2] : NULL;
    L->h0 = g0->in[1]->node->in[0];
    L->c0 = L->lstm ? g0->in[2] : NULL;
    if (!gdl__ox_is_leaf(L->w_hh) || !gdl__ox_is_leaf(L->b_hh) || L->w_ih->ndim != 2 || L->w_hh->ndim != 2 ||
        L->w_hh->shape[0] != G * H || L->w_hh->shape[1] != H || (L->b_ih && L->b_ih->numel != G * H) ||
        (L->b_hh && L->b_hh->numel != G * H) || L->h0->ndim != 2 || (L->c0 && L->c0->ndim != 2))
        return 0;
    L->emit = gdl__ox_index_of(h, cap, nodes, gxn);
    /* the initial states exist before the node is written */
    if (L->emit < 0 || gdl__ox_index_of(h, cap, nodes, L->h0->node) >= L->emit ||
        (L->c0 && gdl__ox_index_of(h, cap, nodes, L->c0->node) >= L->emit))
        return 0;
    if (!(L->steps = (int *)GPUDL_MALLOC(sizeof(int) * (size_t)T)) ||
        !(L->h = (const gdl_tensor **)GPUDL_MALLOC(sizeof *L->h * (size_t)T)) || !(L->h_read = (char *)GPUDL_MALLOC((size_t)T)))
        return -1;
    memset(L->h_read, 0, (size_t)T);
    memset((void *)L->h, 0, sizeof *L->h * (size_t)T);
    for (t = 0, k = first; t < T; t++, k = next[k]) {
        const gdl_node *g = k >= 0 ? nodes[k] : NULL, *gh;
        int64_t at = L->rev ? T - 1 - t : t, off = -1;
        if (!g || (g->op == GDL_OP_LSTM_GATES) != L->lstm || gdl__ox_row(g->in[0], &off, v) != gx ||
            off != at * B * G * H || !(gh = g->in[1]->node) || !gdl__ox_is_linear(gh) || gh->in[1] != L->w_hh ||
            (gh->nin > 2 ? gh->in[2] : NULL) != L->b_hh)
            return 0;
        L->steps[t] = k;
    }
    if (k >= 0) return 0; /* more steps than gx has rows */
    /* its nodes: gx's linear, and per step the row of gx, gh's linear, the gates, the h and c rows the next
       step reads (all of this trace) */
    for (m = 0; m < 2; m++) { /* m 0: each is in the trace; 1: marked */
        if (m) X->absorbed[L->emit] = r;
        for (t = 0; t < T; t++) {
            const gdl_node *g = nodes[L->steps[t]], *part[7];
            int64_t off;
            int p, np = 0;
            part[np++] = g->in[1]->node;
            gdl__ox_row(g->in[0], &off, v);
            part[np++] = v[0], part[np++] = v[1];
            if (t > 0 && L->lstm) {
                gdl__ox_row(g->in[1]->node->in[0], &off, v);
                part[np++] = v[0], part[np++] = v[1];
                gdl__ox_row(g->in[2], &off, v);
                part[np++] = v[0], part[np++] = v[1];
            }
            for (p = 0; p < np; p++) {
                int at = part[p] ? gdl__ox_index_of(h, cap, nodes, part[p]) : -2;
                if (at == -1) return 0;
                if (m && at >= 0) X->absorbed[at] = r;
            }
            if (m) X->absorbed[L->steps[t]] = r;
        }
    }
    for (t = 0; t < T; t++) {
        const gdl_node *g = nodes[L->steps[t]];
        j = (int)(L->rev ? T - 1 - t : t);
        if (!L->lstm) L->h[j] = g->out;
        else if (t > 0) L->h[L->rev ? j + 1 : j - 1] = g->in[1]->node->in[0];
    }
    L->ok = 1;
    return 1;
}

/* Finds the layers (X->rnn) and the trace nodes they absorb (X->absorbed). 0 / -1 + error. */
static int gdl__ox_rnn_find(gdl__ox *X, gdl_node **nodes, int nn, const char *live, gdl_tensor **outs, int nout) {
    int cap = 16, *h = NULL, *next = NULL, *prev = NULL, k, j, r, rc = -1, pass;
    X->nrnn = 0;
    size_t i;
    for (k = 0; k < nn && !(live[k] && (nodes[k]->op == GDL_OP_LSTM_GATES || nodes[k]->op == GDL_OP_GRU_GATES)); k++) {}
    if (k == nn) return 0; /* no recurrent gates */
    while (cap < 2 * nn) cap *= 2;
    if (!(h = (int *)GPUDL_MALLOC(sizeof(int) * (size_t)cap)) || !(next = (int *)GPUDL_MALLOC(sizeof(int) * (size_t)nn)) ||
        !(prev = (int *)GPUDL_MALLOC(sizeof(int) * (size_t)nn)) ||
        !(X->absorbed = (int *)GPUDL_MALLOC(sizeof(int) * (size_t)nn)))
        goto oom;
    memset(h, 0, sizeof(int) * (size_t)cap);
    for (k = 0; k < nn; k++) {
        for (i = gdl__ox_hash_of(nodes[k], cap); h[i]; i = (i + 1) & (size_t)(cap - 1)) {}
        h[i] = k + 1;
        next[k] = prev[k] = X->absorbed[k] = -1;
    }
    for (k = 0; k < nn; k++) /* each step's link to the one before; a step two read is no chain */
        if (live[k] && (nodes[k]->op == GDL_OP_LSTM_GATES || nodes[k]->op == GDL_OP_GRU_GATES) &&
            (j = gdl__ox_index_of(h, cap, nodes, gdl__ox_rnn_prev(nodes[k]))) >= 0) {
            prev[k] = j;
            next[j] = next[j] == -1 ? k : -2;
        }
    for (k = 0; k < nn; k++) {
        gdl__ox_rnn *L;
        if (!live[k] || (nodes[k]->op != GDL_OP_LSTM_GATES && nodes[k]->op != GDL_OP_GRU_GATES) || prev[k] >= 0)
            continue;
        if (!(L = (gdl__ox_rnn *)GPUDL_REALLOC(X->rnn, sizeof *L * (size_t)(X->nrnn + 1)))) goto oom;
        X->rnn = L;
        X->nrnn++;
        if ((j = gdl__ox_rnn_chain(X, nodes, h, cap, next, k, &X->rnn[X->nrnn - 1], X->nrnn - 1)) < 0) goto oom;
    }
    /* pass 0: the last LSTM step's h and c slices join the layer; pass 1: a value of a layer that anything
       outside it reads (but its steps' h and the last c) undoes the layer */
    for (pass = 0; pass < 2; pass++)
        for (k = 0; k < nn; k++) {
            const gdl_node *n = nodes[k];
            if (!live[k] || X->absorbed[k] >= 0) continue;
            for (j = 0; j < n->nin; j++) {
                const gdl_tensor *in = n->in[j];
                int a = in && in->node ? gdl__ox_index_of(h, cap, nodes, in->node) : -1, t;
                gdl__ox_rnn *L = a >= 0 && X->absorbed[a] >= 0 ? &X->rnn[X->absorbed[a]] : NULL;
                if (!L || !L->ok) continue;
                for (t = 0; t < L->T && L->h[t] != in; t++) {}
                if (t < L->T) {
                    if (pass) L->h_read[t] = 1;
                    continue;
                }
                if (pass == 0 && L->lstm && (n->op == GDL_OP_SLICE || n->op == GDL_OP_RESHAPE)) {
                    /* the last step's h (offset 0) or c: a slice of its gates' output, or a reshape of that */
                    const gdl_node *v[2];
                    int64_t off = -1;
                    const gdl_tensor *src = gdl__ox_row(n->out, &off, v);
                    if (src && src->node == nodes[L->steps[L->T - 1]] && n->out->numel * 2 == src->numel &&
                        (off == 0 || off == n->out->numel)) {
                        X->absorbed[k] = (int)(X->absorbed[a]);
                        if (off == 0) L->h[L->rev ? 0 : L->T - 1] = n->out;
                        else L->c_last = n->out;
                        continue;
                    }
                }
                if (pass == 0 || in == L->c_last) continue;
                L->ok = 0;
            }
        }
    for (k = 0; k < nout; k++) /* a graph output: read from outside too */
        for (r = 0; r < X->nrnn; r++) {
            gdl__ox_rnn *L = &X->rnn[r];
            int t;
            for (t = 0; t < L->T && L->ok; t++)
                if (L->h[t] == outs[k]) L->h_read[t] = 1;
            if (L->ok && outs[k]->node && X->absorbed[gdl__ox_index_of(h, cap, nodes, outs[k]->node)] == r &&
                outs[k] != L->c_last) {
                for (t = 0; t < L->T && L->h[t] != outs[k]; t++) {}
                if (t == L->T) L->ok = 0;
            }
        }
    for (k = 0; k < nn; k++)
        if (X->absorbed[k] >= 0 && !X->rnn[X->absorbed[k]].ok) X->absorbed[k] = -1;
    rc = 0;
    goto done;
oom:
    gdl__ox_oom(X);
done:
    GPUDL_FREE(h);
    GPUDL_FREE(next);
    GPUDL_FREE(prev);
    return rc;
}


/* W or R of the node: t [G*H, K] (PyTorch's gate order) as [1, G*H, K] in ONNX's, an initializer `name` */
static int gdl__ox_rnn_weight(gdl__ox *X, const gdl_tensor *t, const int *from, int G, int64_t H, int64_t K,
                              const char *name, float *buf, gdl_real *host) {
    int64_t dims[3], j, e;
    if (gdl_copy_to_host(t, host, sizeof(gdl_real) * (size_t)t->numel) < 0) return -1;
    for (j = 0; j < G; j++)
        for (e = 0; e < H * K; e++) buf[j * H * K + e] = (float)host[from[j] * H * K + e];
    dims[0] = 1;
    dims[1] = G * H;
    dims[2] = K;
    return gdl__ox_init_raw(X, name, GDL__OX_FLOAT, 3, dims, buf, sizeof(float) * (size_t)(G * H * K), 4);
}

/* layer L as its LSTM / GRU node, written where its gx linear was; names for the steps' h other ops read
   (Y's rows) and the last c */
static int gdl__ox_rnn_emit(gdl__ox *X, const gdl__ox_rnn *L) {
    static const int lstm_from[4] = {0, 3, 1, 2}; /* ONNX i, o, f, c from PyTorch i, f, g, o */
    static const int gru_from[3] = {1, 0, 2};     /* ONNX z, r, h from PyTorch r, z, n */
    const int *from = L->lstm ? lstm_from : gru_from;
    const int G = L->lstm ? 4 : 3;
    const int64_t H = L->w_hh->shape[1], In = L->w_ih->shape[1], zero = 0;
    const char *in[7], *outs[3], *ax0;
    char name[3][160];
    gdl__pb at = {NULL, 0, 0, 0};
    int64_t dims[2], big = G * H * (In > H ? In : H), t;
    int bax, k, rc = -1;
    float *buf = NULL;
    gdl_real *host = NULL;
    if (!(in[0] = gdl__ox_use(X, L->xs)) || !(in[5] = gdl__ox_use(X, L->h0)) || (L->c0 && !(in[6] = gdl__ox_use(X, L->c0))))
        return -1;
    bax = gdl__ox_bax_of(X, L->xs);
    if (bax >= 0 && bax != 1) {
        gdl__set_error("%s: a recurrent layer's input %s has its batch in dim %d, not 1 (time-major inside the "
                       "layer): export with dynamic_batch = 0", X->fn, gdl_shape_str(L->xs), bax);
        return -1;
    }
    for (k = 0; k < 3; k++) snprintf(name[k], sizeof name[k], "%s.%c", X->curname, "WRB"[k]);
    if (!(buf = (float *)GPUDL_MALLOC(sizeof(float) * (size_t)big)) ||
        !(host = (gdl_real *)GPUDL_MALLOC(sizeof(gdl_real) * (size_t)big))) {
        gdl__ox_oom(X);
        goto done;
    }
    if (gdl__ox_rnn_weight(X, L->w_ih, from, G, H, In, name[0], buf, host) < 0 ||
        gdl__ox_rnn_weight(X, L->w_hh, from, G, H, H, name[1], buf, host) < 0)
        goto done;
    memset(buf, 0, sizeof(float) * (size_t)(2 * G * H));
    for (k = 0; k < 2; k++) { /* B: the input bias, then the hidden one */
        const gdl_tensor *b = k ? L->b_hh : L->b_ih;
        int64_t j, e;
        if (!b) continue;
        if (gdl_copy_to_host(b, host, sizeof(gdl_real) * (size_t)(G * H)) < 0) goto done;
        for (j = 0; j < G; j++)
            for (e = 0; e < H; e++) buf[k * G * H + j * H + e] = (float)host[from[j] * H + e];
    }
    dims[0] = 1;
    dims[1] = 2 * G * H;
    if (gdl__ox_init_raw(X, name[2], GDL__OX_FLOAT, 2, dims, buf, sizeof(float) * (size_t)(2 * G * H), 4) < 0) goto done;
    in[1] = name[0];
    in[2] = name[1];
    in[3] = name[2];
    in[4] = NULL; /* sequence_lens */
    if (!(ax0 = gdl__ox_const_i64(X, &zero, 1)) || !(in[5] = gdl__ox_bin(X, "Unsqueeze", in[5], ax0)) ||
        (L->lstm && !(in[6] = gdl__ox_bin(X, "Unsqueeze", in[6], ax0))))
        goto done;
    for (k = 0; k < (L->lstm ? 3 : 2); k++)
        if (!(outs[k] = gdl__ox_tmp(X))) goto done;
    gdl__ox_attr_int(&at, "hidden_size", H);
    gdl__ox_attr_str(&at, "direction", L->rev ? "reverse" : "forward");
    if (!L->lstm) gdl__ox_attr_int(&at, "linear_before_reset", 1);
    gdl__ox_node_n(X, L->lstm ? "LSTM" : "GRU", L->lstm ? 7 : 6, in, L->lstm ? 3 : 2, outs, &at);
    for (t = 0; t < L->T; t++) { /* Y [T, 1, B, H]: row t, the direction dim squeezed */
        const char *row;
        char hn[192];
        if (!L->h_read[t] || !L->h[t]) continue;
        at.p = NULL, at.n = at.cap = 0, at.oom = 0;
        gdl__ox_attr_int(&at, "axis", 0);
        if (!(row = gdl__ox_tmp(X)) || !(in[1] = gdl__ox_const_i64_scalar(X, t))) goto done;
        gdl__ox_node2(X, "Gather", outs[0], in[1], row, &at);
        snprintf(hn, sizeof hn, "%s.h%lld", X->curname, (long long)t);
        if ((k = gdl__ox_add(X, L->h[t], hn, bax >= 0 ? 0 : -1)) < 0) goto done;
        gdl__ox_node2(X, "Squeeze", row, ax0, X->v[k].name, NULL);
    }
    if (L->c_last) {
        char cn[192];
        snprintf(cn, sizeof cn, "%s.c", X->curname);
        if ((k = gdl__ox_add(X, L->c_last, cn, bax >= 0 ? 0 : -1)) < 0) goto done;
        gdl__ox_node2(X, "Squeeze", outs[2], ax0, X->v[k].name, NULL);
    }
    rc = 0;
done:
    GPUDL_FREE(buf);
    GPUDL_FREE(host);
    return rc;
}

/* ---- the file ---- */

/* a ValueInfoProto: name, the elem type and the shape, dim bax (if >= 0) the symbolic "batch" when it
   has the traced batch's size B, else unknown */
static void gdl__ox_value_info(gdl__pb *b, int field, const char *name, const gdl_tensor *t, int bax, int64_t B) {
    size_t s = gdl__pb_open(b, field), ty, tt, sh, d;
    int k;
    gdl__pb_str(b, GDL__OX_VI_NAME, name);
    ty = gdl__pb_open(b, GDL__OX_VI_TYPE);
    tt = gdl__pb_open(b, GDL__OX_TYPE_TENSOR);
    gdl__pb_int(b, GDL__OX_TT_ELEM, gdl__ox_dtype(t->dtype));
    sh = gdl__pb_open(b, GDL__OX_TT_SHAPE);
    for (k = 0; k < t->ndim; k++) {
        d = gdl__pb_open(b, GDL__OX_SHAPE_DIM);
        if (k != bax) gdl__pb_int(b, GDL__OX_DIM_VALUE, t->shape[k]);
        else if (t->shape[k] == B) gdl__pb_str(b, GDL__OX_DIM_PARAM, "batch");
        gdl__pb_close(b, d);
    }
    gdl__pb_close(b, sh);
    gdl__pb_close(b, tt);
    gdl__pb_close(b, ty);
    gdl__pb_close(b, s);
}

/* writes buf to tmp (flushed, synced); 0 / -1 + error */
static int gdl__ox_write_file(gdl__ox *X, const char *tmp, const void *buf, size_t len) {
    FILE *f = fopen(tmp, "wb");
    int ok;
    if (!f) {
        gdl__set_error("%s: %s: cannot create temporary file %s: %s", X->fn, X->path, tmp, gdl__strerr(errno));
        return -1;
    }
    ok = fwrite(buf, 1, len, f) == len && fflush(f) == 0 && gdl__os_fsync(f) == 0;
    if (fclose(f) != 0) ok = 0;
    if (!ok) {
        gdl__set_error("%s: %s: writing temporary file %s failed: %s", X->fn, X->path, tmp, gdl__strerr(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}

static int gdl__ox_check_opts(const char *fn, const gdl_onnx_opts *o, int nin, gdl_tensor *const *inputs,
                              const char *path) {
    int k;
    if (!path || !*path) {
        gdl__set_error("%s: path is %s", fn, path ? "empty" : "NULL");
        return -1;
    }
    if (o->opset < GDL_ONNX_OPSET_MIN || o->opset > GDL_ONNX_OPSET_MAX) {
        gdl__set_error("%s: opset %d is not supported (%d to %d)", fn, o->opset, GDL_ONNX_OPSET_MIN, GDL_ONNX_OPSET_MAX);
        return -1;
    }
    if (nin < 1 || nin > GDL__OX_MAX_IN || !inputs) {
        gdl__set_error("%s: %d example inputs (1 to %d)", fn, nin, GDL__OX_MAX_IN);
        return -1;
    }
    for (k = 0; k < nin; k++) {
        if (!inputs[k]) {
            gdl__set_error("%s: example input %d is NULL", fn, k);
            return -1;
        }
        if (!gdl__ox_dtype(inputs[k]->dtype)) {
            gdl__set_error("%s: example input %d is %s %s: ONNX inputs here are f32, i32, f16 or bf16", fn, k,
                           gdl_dtype_name(inputs[k]->dtype), gdl_shape_str(inputs[k]));
            return -1;
        }
        if (o->dynamic_batch && inputs[k]->ndim < 1) {
            gdl__set_error("%s: example input %d is a scalar: a dynamic batch needs a dim 0 (or dynamic_batch = 0)",
                           fn, k);
            return -1;
        }
        if ((o->input_names && (!o->input_names[k] || !*o->input_names[k]))) {
            gdl__set_error("%s: input_names[%d] is %s", fn, k, o->input_names[k] ? "empty" : "NULL");
            return -1;
        }
    }
    return 0;
}

static void gdl__ox_free(gdl__ox *X) {
    int k;
    for (k = 0; k < X->nv; k++) GPUDL_FREE(X->v[k].name);
    GPUDL_FREE(X->v);
    GPUDL_FREE(X->hash);
    GPUDL_FREE(X->pnames);
    GPUDL_FREE(X->ptens);
    gdl__ox_rnn_free(X);
    GPUDL_FREE(X->q);
    gdl__pb_free(&X->nodes);
    gdl__pb_free(&X->inits);
}

/* the graph's nodes and initializers from the live trace nodes; the outputs' names. 0 / -1 + error */
static int gdl__ox_translate(gdl__ox *X, gdl_node **nodes, int nn, const char *live, gdl_tensor **outs, int nout,
                             const gdl_onnx_opts *o, int *out_idx) {
    char name[96];
    int k, j, i, bax = -1, total = 0;
    for (k = 0; k < nn; k++) total += live[k];
    if (gdl__ox_rnn_find(X, nodes, nn, live, outs, nout) < 0) return -1;
    for (k = 0, X->cur = 0; k < nn; k++) {
        const gdl_node *n = nodes[k];
        const char *out = NULL;
        if (!live[k]) continue;
        if (X->absorbed && X->absorbed[k] >= 0) { /* a step of a recurrent layer: its node, once */
            const gdl__ox_rnn *L = &X->rnn[X->absorbed[k]];
            if (k != L->emit) continue;
            X->ntmp = 0;
            snprintf(X->curname, sizeof X->curname, "%s_%d", L->lstm ? "lstm" : "gru", X->cur++);
            if (gdl__ox_rnn_emit(X, L) < 0) return -1;
            if (X->nodes.oom || X->inits.oom) return gdl__ox_oom(X);
            continue;
        }
        X->ntmp = 0;
        snprintf(X->curname, sizeof X->curname, "%s_%d", gdl__ox_op_name(n->op), X->cur);
        for (j = 0; j < nout && !out; j++) /* a graph output takes its given name */
            if (outs[j] == n->out && out_idx[j] < 0) {
                if (o->output_names && o->output_names[j] && *o->output_names[j]) out = o->output_names[j];
                else if (nout == 1) out = "output";
                else snprintf(name, sizeof name, "output%d", j), out = name;
            }
        if (!out) out = X->curname;
        if (!gdl__ox_dtype(n->out->dtype))
            return gdl__ox_no_form(X, n, total, "its output's dtype has no ONNX type here");
        if (gdl__ox_op(X, n, total, out, &bax) < 0) return -1;
        if (X->nodes.oom || X->inits.oom) return gdl__ox_oom(X);
        if ((j = gdl__ox_add(X, n->out, out, X->dyn ? bax : -1)) < 0) return -1;
        for (i = 0; i < nout; i++)
            if (outs[i] == n->out && out_idx[i] < 0) out_idx[i] = j;
        X->cur++;
    }
    /* outputs that no node of the trace made (an input, a parameter, a repeated output): an Identity */
    for (k = 0; k < nout; k++) {
        const char *src;
        if (out_idx[k] >= 0) continue;
        if (gdl__ox_find(X, outs[k]) < 0 && outs[k]->gen && gdl__ox_qfind(X, outs[k]) < 0) { /* made by no op */
            gdl__set_error("%s: output %d %s was not made by an op the trace records (computed outside the ops, "
                           "e.g. read back to the host and made again): it would be a constant", X->fn, k,
                           gdl_shape_str(outs[k]));
            return -1;
        }
        X->ntmp = 0;
        snprintf(X->curname, sizeof X->curname, "output_identity_%d", k);
        if (o->output_names && o->output_names[k] && *o->output_names[k]) snprintf(name, sizeof name, "%s", o->output_names[k]);
        else if (nout == 1) snprintf(name, sizeof name, "output");
        else snprintf(name, sizeof name, "output%d", k);
        if (!(src = gdl__ox_use(X, outs[k]))) return -1;
        gdl__ox_node1(X, "Identity", src, name, NULL);
        if ((j = gdl__ox_add(X, NULL, name, gdl__ox_bax_of(X, outs[k]))) < 0) return -1;
        out_idx[k] = j;
    }
    return 0;
}

/* the ModelProto around the graph, into m */
static void gdl__ox_model(gdl__ox *X, gdl__pb *m, const char *graph_name, int nin, gdl_tensor *const *inputs,
                          gdl_tensor **outs, int nout, const int *out_idx) {
    char ver[32];
    size_t s;
    int k;
    int64_t B = X->dyn ? inputs[0]->shape[0] : -1;
    snprintf(ver, sizeof ver, "%d.%d.%d", GPUDL_VERSION_MAJOR, GPUDL_VERSION_MINOR, GPUDL_VERSION_PATCH);
    gdl__pb_int(m, GDL__OX_MODEL_IR_VERSION, gdl__ox_ir_version(X->opset));
    gdl__pb_str(m, GDL__OX_MODEL_PRODUCER, "gpudl");
    gdl__pb_str(m, GDL__OX_MODEL_PRODUCER_VERSION, ver);
    s = gdl__pb_open(m, GDL__OX_MODEL_OPSET);
    gdl__pb_str(m, GDL__OX_OPSET_DOMAIN, "");
    gdl__pb_int(m, GDL__OX_OPSET_VERSION, X->opset);
    gdl__pb_close(m, s);
    s = gdl__pb_open(m, GDL__OX_MODEL_GRAPH);
    if (X->nodes.oom || X->inits.oom) m->oom = 1;
    gdl__pb_raw(m, X->nodes.p, X->nodes.n);
    gdl__pb_str(m, GDL__OX_GRAPH_NAME, graph_name);
    gdl__pb_raw(m, X->inits.p, X->inits.n);
    for (k = 0; k < nin; k++)
        gdl__ox_value_info(m, GDL__OX_GRAPH_INPUT, X->v[k].name, inputs[k], X->dyn ? 0 : -1, B);
    for (k = 0; k < nout; k++)
        gdl__ox_value_info(m, GDL__OX_GRAPH_OUTPUT, X->v[out_idx[k]].name, outs[k], X->v[out_idx[k]].bax, B);
    gdl__pb_close(m, s);
}

/* <path without .onnx>.bin, and its last component (what the model's external_data entries name) */
static char *gdl__ox_bin_path(const char *path, const char **base) {
    size_t n = strlen(path);
    char *p;
    const char *slash;
    if (n > 5 && !strcmp(path + n - 5, ".onnx")) n -= 5;
    if (!(p = (char *)GPUDL_MALLOC(n + 5))) return NULL;
    memcpy(p, path, n);
    strcpy(p + n, ".bin");
    slash = strrchr(p, '/');
#ifdef _WIN32
    if (strrchr(p, '\\') > slash) slash = strrchr(p, '\\');
#endif
    *base = slash ? slash + 1 : p;
    return p;
}

static int gdl__ox_export(const char *fn, gdl_module *model, gdl_onnx_forward_fn f, void *user, int nin,
                          gdl_tensor *const *inputs, const char *path, const gdl_onnx_opts *opts) {
    static unsigned counter;
    gdl_onnx_opts o = opts ? *opts : gdl_onnx_defaults();
    gdl__ox X;
    gdl__pb m = {NULL, 0, 0, 0};
    gdl_node **nodes = NULL;
    gdl_tensor *outs[GDL__OX_MAX_OUT];
    int out_idx[GDL__OX_MAX_OUT], nout = 0, nn = 0, k, rc = -1;
    char *live = NULL, *tmp = NULL, *bin = NULL, *bintmp = NULL, name[32];
    memset(&X, 0, sizeof X);
    X.fn = fn;
    X.path = path;
    if (!f) {
        gdl__null_arg(fn, "forward");
        return -1;
    }
    if (gdl__ox_check_opts(fn, &o, nin, inputs, path) < 0) return -1;
    X.opset = o.opset;
    X.dyn = o.dynamic_batch != 0;
    X.B = X.dyn ? inputs[0]->shape[0] : -1;
    X.ext_min = o.external_min_bytes;
    if (model) { /* the state_dict names */
        int np = gdl_module_named_tensors(model, GDL_PARAMS_AND_BUFFERS, NULL, NULL, 0);
        if (np < 0) return -1;
        X.pnames = (char **)GPUDL_MALLOC(sizeof(char *) * (size_t)(np + 1));
        X.ptens = (gdl_tensor **)GPUDL_MALLOC(sizeof(gdl_tensor *) * (size_t)(np + 1));
        if (!X.pnames || !X.ptens) goto oom;
        X.np = gdl_module_named_tensors(model, GDL_PARAMS_AND_BUFFERS, (const char **)X.pnames, X.ptens, np);
    }
    for (k = 0; k < nin; k++) { /* the inputs come first in the value list */
        const char *nm = name;
        if (o.input_names) nm = o.input_names[k];
        else if (nin == 1) nm = "input";
        else snprintf(name, sizeof name, "input%d", k);
        if (gdl__ox_find(&X, inputs[k]) >= 0) {
            gdl__set_error("%s: example input %d is also input %d: give distinct tensors", fn, k,
                           gdl__ox_find(&X, inputs[k]));
            goto done;
        }
        if (gdl__ox_add(&X, inputs[k], nm, X.dyn ? 0 : -1) < 0) goto done;
    }
    if (gdl__ox_trace(&X, model, f, user, nin, inputs, outs, &nout, &nodes, &nn) < 0) goto done;
    for (k = 0; k < nout; k++) out_idx[k] = -1;
    if (!(live = (char *)GPUDL_MALLOC((size_t)(nn ? nn : 1))) || !(tmp = (char *)GPUDL_MALLOC(strlen(path) + 64)))
        goto oom;
    if (gdl__ox_live(&X, nodes, nn, outs, nout, live) < 0) goto done;
    if (o.external_data) {
        if (!(bin = gdl__ox_bin_path(path, &X.ext_name)) || !(bintmp = (char *)GPUDL_MALLOC(strlen(bin) + 64))) goto oom;
        snprintf(bintmp, strlen(bin) + 64, "%s.tmp.%ld.%u", bin, gdl__os_pid(), ++counter);
        if (!(X.ext = fopen(bintmp, "wb"))) {
            gdl__set_error("%s: %s: cannot create temporary file %s: %s", fn, path, bintmp, gdl__strerr(errno));
            GPUDL_FREE(bintmp);
            bintmp = NULL;
            goto done;
        }
    }
    if (gdl__ox_translate(&X, nodes, nn, live, outs, nout, &o, out_idx) < 0) goto done;
    gdl__ox_model(&X, &m, model ? gdl_module_kind(model) : "gpudl", nin, inputs, outs, nout, out_idx);
    if (m.oom) goto oom;
    if (m.n > 0x7fffffffu) {
        gdl__set_error("%s: %s: the model is %zu bytes, over protobuf's 2 GiB: export with external_data = 1", fn, path,
                       m.n);
        goto done;
    }
    if (X.ext) {
        FILE *e = X.ext;
        int ok = fflush(e) == 0 && gdl__os_fsync(e) == 0;
        X.ext = NULL;
        if (fclose(e) != 0 || !ok) {
            gdl__set_error("%s: %s: writing %s failed: %s", fn, path, bintmp, gdl__strerr(errno));
            goto done;
        }
    }
    snprintf(tmp, strlen(path) + 64, "%s.tmp.%ld.%u", path, gdl__os_pid(), ++counter);
    if (gdl__ox_write_file(&X, tmp, m.p, m.n) < 0) goto done;
    if (bintmp && gdl__os_replace(bintmp, bin) != 0) {
        gdl__set_error("%s: %s: cannot rename %s over it: %s", fn, bin, bintmp, gdl__strerr(errno));
        remove(tmp);
        goto done;
    }
    if (gdl__os_replace(tmp, path) != 0) {
        gdl__set_error("%s: %s: cannot rename %s over it: %s", fn, path, tmp, gdl__strerr(errno));
        remove(tmp);
        if (bin) remove(bin);
        goto done;
    }
    if (bintmp) { /* renamed: nothing left to remove */
        GPUDL_FREE(bintmp);
        bintmp = NULL;
    }
    rc = 0;
    goto done;
oom:
    gdl__ox_oom(&X);
done:
    if (X.ext) fclose(X.ext);
    if (bintmp) remove(bintmp);
    GPUDL_FREE(bintmp);
    GPUDL_FREE(bin);
    GPUDL_FREE(tmp);
    GPUDL_FREE(live);
    GPUDL_FREE(nodes);
    gdl__pb_free(&m);
    gdl__ox_free(&X);
    return rc;
}

GPUDL_API int gdl_export_onnx_fn(gdl_module *model, gdl_onnx_forward_fn fn, void *user, int nin,
                                 gdl_tensor *const *inputs, const char *path, const gdl_onnx_opts *opts) {
    return gdl__ox_export("gdl_export_onnx_fn", model, fn, user, nin, inputs, path, opts);
}

/* gdl_export_onnx's forward: the module's, one input, one output */
static int gdl__ox_module_forward(void *user, int nin, gdl_tensor *const *in, int max_out, gdl_tensor **out,
                                  int *nout) {
    (void)nin;
    (void)max_out;
    if (!(out[0] = gdl_forward((gdl_module *)user, in[0]))) return -1;
    *nout = 1;
    return 0;
}

GPUDL_API int gdl_export_onnx(gdl_module *model, gdl_tensor *x, const char *path, const gdl_onnx_opts *opts) {
    if (!model) {
        gdl__null_arg("gdl_export_onnx", "model");
        return -1;
    }
    return gdl__ox_export("gdl_export_onnx", model, gdl__ox_module_forward, model, 1, &x, path, opts);
}
