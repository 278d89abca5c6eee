/* ---------------------------------------------------------------------------
   src/nn/modules.h — modules (PyTorch's nn.Module): the built-in layers, their
   forward, tree walks (parameters, state, devices, modes) and the summary.
   Front end only: modules call the ops of src/api/ops.h.
   ------------------------------------------------------------------------- */

enum {
    GDL__M_LINEAR, GDL__M_CONV2D, GDL__M_BATCHNORM, GDL__M_LAYERNORM, GDL__M_DROPOUT, GDL__M_EMBEDDING,
    GDL__M_RELU, GDL__M_LEAKY_RELU, GDL__M_SIGMOID, GDL__M_TANH, GDL__M_GELU, GDL__M_IDENTITY,
    GDL__M_MAXPOOL, GDL__M_AVGPOOL, GDL__M_GAP, GDL__M_FLATTEN, GDL__M_SEQUENTIAL, GDL__M_RESIDUAL,
    GDL__M_CUSTOM, GDL__M_LSTM, GDL__M_GRU, GDL__M_RNN
};

/* the number of configuration slots, integer and real, of every module */
enum { GDL__NN_IA = 12, GDL__NN_FA = 4 };
/* A module's configuration slots, named per kind: which element of its ia[] (integers) or fa[] (reals)
   holds what. LSTM's and GRU's are GDL__RNN_* (src/nn/rnn.h); a quantized Linear or Conv2d
   (src/quant/layers.h) keeps its float module's ia[] under these names. */
enum { GDL__LIN_IN, GDL__LIN_OUT };                                    /* Linear: ia */
enum { GDL__CONV_IN, GDL__CONV_OUT, GDL__CONV_KH, GDL__CONV_KW, GDL__CONV_SH, GDL__CONV_SW, GDL__CONV_PH,
       GDL__CONV_PW, GDL__CONV_DH, GDL__CONV_DW, GDL__CONV_GROUPS };  /* Conv2d: ia */
enum { GDL__BN_C, GDL__BN_DIMS, GDL__BN_AFFINE, GDL__BN_TRACK };       /* BatchNorm: ia (DIMS: 1 or 2) */
enum { GDL__BN_EPS, GDL__BN_MOMENTUM };                                /* BatchNorm: fa */
enum { GDL__LN_D = 0, GDL__LN_EPS = 0 };                               /* LayerNorm: ia, fa */
enum { GDL__DROPOUT_P = 0 };                                           /* Dropout: fa */
enum { GDL__EMB_V, GDL__EMB_D, GDL__EMB_PAD };                         /* Embedding: ia (PAD: row + 1, 0 none) */
enum { GDL__EMB_MAX_NORM, GDL__EMB_NORM_TYPE };                        /* Embedding: fa */
enum { GDL__LEAKY_SLOPE = 0 };                                         /* LeakyReLU: fa */
enum { GDL__GELU_TANH = 0 };                                           /* GELU: ia (the tanh approximation) */
enum { GDL__POOL_K, GDL__POOL_S, GDL__POOL_P };                        /* MaxPool2d, AvgPool2d: ia */
enum { GDL__FLATTEN_START = 0 };                                       /* Flatten: ia */
enum { GDL__RES_SHORTCUT = 0 };                                        /* Residual: ia (has a shortcut child) */
enum { GDL__BLOCK_IN, GDL__BLOCK_OUT, GDL__BLOCK_STRIDE };             /* ResNet's BasicBlock: ia */

typedef struct gdl__nn_named {
    char *name;    /* local name, owned */
    gdl_tensor *t; /* persistent, owned unless tied */
    int tied;      /* gdl_module_tie: t is another parameter of the tree (not owned, listed and counted there) */
} gdl__nn_named;

/* What a module keeps outside its parameters and buffers (a quantized layer's int8 weight: src/quant/
   makes such modules and fills this in). The tree's walks below ask it, so nn/ needs nothing from quant/. */
typedef struct gdl__nn_extra {
    int (*to)(gdl_module *m, gdl_device dev);               /* gdl_module_to's step: 0 / -1 */
    gdl_device (*device)(const gdl_module *m);              /* where it lives */
    int64_t (*params)(const gdl_module *m, int64_t *bytes); /* its parameter count; *bytes as stored */
    const char *summary_note;                               /* after the summary's size ("; int8 weights ...") */
} gdl__nn_extra;

struct gdl_module {
    int kind;               /* GDL__M_* */
    char *kind_name;        /* "Linear", owned */
    char *name;             /* name in the parent, owned; "" for a root */
    gdl_module *parent;
    int training;
    int nchild, cap_child;
    gdl_module **child;
    int nparam, cap_param;
    gdl__nn_named *param;
    int nbuf, cap_buf;
    gdl__nn_named *buf;
    int64_t ia[GDL__NN_IA]; /* integer configuration, in the kind's named slots (GDL__CONV_GROUPS ...) */
    double fa[GDL__NN_FA];  /* real configuration, likewise (GDL__BN_EPS ...) */
    gdl_forward_fn fwd;     /* custom modules */
    void *user;
    void (*free_user)(void *);
    const gdl__nn_extra *extra; /* storage outside param / buf; NULL for most modules */
    char **interned;        /* full names handed out by gdl_module_named_tensors */
    int ninterned, cap_interned;
};

static char *gdl__nn_strdup(const char *s) {
    size_t n = strlen(s);
    char *r = (char *)GPUDL_MALLOC(n + 1);
    if (r) memcpy(r, s, n + 1);
    return r;
}

/* arr (of elem-sized items, *cap of them) grown to hold count+1: the same pointer when it
   already does, a reallocated one otherwise, NULL when out of memory (arr is then kept). */
static void *gdl__nn_reserve(void *arr, int *cap, int count, size_t elem) {
    void *p;
    int nc;
    if (arr && count < *cap) return arr;
    nc = *cap ? 2 * *cap : 4;
    while (nc <= count) nc *= 2;
    p = GPUDL_REALLOC(arr, elem * (size_t)nc);
    if (p) *cap = nc;
    return p;
}

/* The dotted path of m from its root ("3.body.0"; "" for a root), in a thread-local ring. */
static const char *gdl__nn_path(const gdl_module *m) {
    static GDL__TLS char ring[4][256];
    static GDL__TLS int slot;
    char *s = ring[slot++ & 3];
    const gdl_module *chain[64], *c;
    int n = 0;
    size_t k = 0;
    for (c = m; c && c->parent && n < 64; c = c->parent) chain[n++] = c;
    s[0] = 0;
    while (n-- > 0) {
        size_t len = strlen(chain[n]->name);
        if (k + len + 2 > 256) break; /* cut an absurdly deep path */
        if (k) s[k++] = '.';
        memcpy(s + k, chain[n]->name, len);
        k += len;
        s[k] = 0;
    }
    return s;
}

/* "Linear '3.body.0'" or "Linear" for a root, in a thread-local ring. */
static const char *gdl__nn_label(const gdl_module *m) {
    static GDL__TLS char ring[4][320];
    static GDL__TLS int slot;
    char *s = ring[slot++ & 3];
    const char *p = gdl__nn_path(m);
    if (p[0]) snprintf(s, 320, "%s '%s'", m->kind_name, p);
    else snprintf(s, 320, "%s", m->kind_name);
    return s;
}

/* the recurrent modules (src/nn/, src/nn/rnn.h) */
static void gdl__nn_rnn_config(const gdl_module *m, char *s, size_t n);
static int gdl__nn_rnn_forward(const char *op, gdl_module *m, int kind, gdl_tensor *x, gdl_tensor *h0, gdl_tensor *c0,
                               const int64_t *lens, int64_t nlens, gdl_tensor **out, gdl_tensor **hn,
                               gdl_tensor **cn);

/* PyTorch-like description of the configuration: "in_features=10, out_features=1, bias=True". */
static void gdl__nn_config(const gdl_module *m, char *s, size_t n) {
    const int64_t *a = m->ia;
    s[0] = 0;
    switch (m->kind) {
    case GDL__M_LINEAR:
        snprintf(s, n, "in_features=%lld, out_features=%lld, bias=%s", (long long)a[GDL__LIN_IN],
                 (long long)a[GDL__LIN_OUT],
                 m->nparam > 1 ? "True" : "False");
        break;
    case GDL__M_CONV2D:
        snprintf(s, n, "%lld, %lld, kernel_size=(%lld,%lld), stride=(%lld,%lld), padding=(%lld,%lld), "
                 "dilation=(%lld,%lld), groups=%lld", (long long)a[GDL__CONV_IN], (long long)a[GDL__CONV_OUT],
                 (long long)a[GDL__CONV_KH], (long long)a[GDL__CONV_KW], (long long)a[GDL__CONV_SH],
                 (long long)a[GDL__CONV_SW], (long long)a[GDL__CONV_PH], (long long)a[GDL__CONV_PW],
                 (long long)a[GDL__CONV_DH], (long long)a[GDL__CONV_DW], (long long)a[GDL__CONV_GROUPS]);
        break;
    case GDL__M_BATCHNORM:
        snprintf(s, n, "%lld, eps=%g, momentum=%g", (long long)a[GDL__BN_C], m->fa[GDL__BN_EPS],
                 m->fa[GDL__BN_MOMENTUM]);
        break;
    case GDL__M_LAYERNORM: snprintf(s, n, "(%lld,), eps=%g", (long long)a[GDL__LN_D], m->fa[GDL__LN_EPS]); break;
    case GDL__M_DROPOUT: snprintf(s, n, "p=%g", m->fa[GDL__DROPOUT_P]); break;
    case GDL__M_EMBEDDING: {
        int k = snprintf(s, n, "%lld, %lld", (long long)a[GDL__EMB_V], (long long)a[GDL__EMB_D]);
        if (a[GDL__EMB_PAD] && k >= 0 && (size_t)k < n)
            k += snprintf(s + k, n - (size_t)k, ", padding_idx=%lld", (long long)a[GDL__EMB_PAD] - 1);
        if (m->fa[GDL__EMB_MAX_NORM] > 0 && k >= 0 && (size_t)k < n)
            k += snprintf(s + k, n - (size_t)k, ", max_norm=%g", m->fa[GDL__EMB_MAX_NORM]);
        if (m->fa[GDL__EMB_NORM_TYPE] != 2 && k >= 0 && (size_t)k < n)
            snprintf(s + k, n - (size_t)k, ", norm_type=%g", m->fa[GDL__EMB_NORM_TYPE]);
        break;
    }
    case GDL__M_LEAKY_RELU: snprintf(s, n, "negative_slope=%g", m->fa[GDL__LEAKY_SLOPE]); break;
    case GDL__M_MAXPOOL:
    case GDL__M_AVGPOOL:
        snprintf(s, n, "kernel_size=%lld, stride=%lld, padding=%lld", (long long)a[GDL__POOL_K],
                 (long long)a[GDL__POOL_S], (long long)a[GDL__POOL_P]);
        break;
    case GDL__M_FLATTEN: snprintf(s, n, "start_dim=%lld", (long long)a[GDL__FLATTEN_START]); break;
    case GDL__M_LSTM:
    case GDL__M_GRU:
    case GDL__M_RNN: gdl__nn_rnn_config(m, s, n); break;
    default: break;
    }
}

static void gdl__nn_free_named(gdl__nn_named *v, int n) {
    int i;
    for (i = 0; i < n; i++) {
        if (!v[i].tied) gdl__free(v[i].t);
        GPUDL_FREE(v[i].name);
    }
    GPUDL_FREE(v);
}

static void gdl__nn_free_tree(gdl_module *m) {
    int i;
    if (!m) return;
    for (i = 0; i < m->nchild; i++) gdl__nn_free_tree(m->child[i]);
    GPUDL_FREE(m->child);
    gdl__nn_free_named(m->param, m->nparam);
    gdl__nn_free_named(m->buf, m->nbuf);
    gdl__free_strings(m->interned, m->ninterned);
    if (m->free_user) m->free_user(m->user);
    GPUDL_FREE(m->kind_name);
    GPUDL_FREE(m->name);
    GPUDL_FREE(m);
}

GPUDL_API void gdl_module_free(gdl_module *m) {
    if (!m) return;
    if (m->parent) {
        gdl__set_error("gdl_module_free: %s belongs to a parent module; free the root instead", gdl__nn_label(m));
        return;
    }
    gdl__nn_free_tree(m);
}

/* Frees an argument whose ownership a failed call took (unless another module owns it). */
static void gdl__nn_drop(gdl_module *m) {
    if (m && !m->parent) gdl__nn_free_tree(m);
}

static gdl_module *gdl__nn_new(const char *op, int kind, const char *kind_name) {
    gdl_module *m = (gdl_module *)gdl__zalloc(op, sizeof(gdl_module));
    if (!m) return NULL;
    m->kind = kind;
    m->training = 1;
    m->kind_name = gdl__nn_strdup(kind_name);
    m->name = gdl__nn_strdup("");
    if (!m->kind_name || !m->name) {
        gdl__nn_free_tree(m);
        gdl__set_error("%s: out of memory", op);
        return NULL;
    }
    return m;
}

/* Is `name` already used by a parameter, buffer or child of m? */
static int gdl__nn_name_taken(const gdl_module *m, const char *name) {
    int i;
    for (i = 0; i < m->nparam; i++)
        if (!strcmp(m->param[i].name, name)) return 1;
    for (i = 0; i < m->nbuf; i++)
        if (!strcmp(m->buf[i].name, name)) return 1;
    for (i = 0; i < m->nchild; i++)
        if (!strcmp(m->child[i]->name, name)) return 1;
    return 0;
}

static int gdl__nn_check_name(const char *op, const gdl_module *m, const char *name) {
    if (!name || !name[0] || strchr(name, '.')) {
        gdl__set_error("%s: bad name \"%s\" (must be non-empty, without '.')", op, name ? name : "(null)");
        return -1;
    }
    if (strlen(name) > 64) {
        gdl__set_error("%s: name \"%.64s...\" is longer than 64 characters", op, name);
        return -1;
    }
    if (gdl__nn_name_taken(m, name)) {
        gdl__set_error("%s: %s already has a member named \"%s\"", op, gdl__nn_label(m), name);
        return -1;
    }
    return 0;
}

/* Adds a tensor to a module's params (buffer = 0) or buffers; takes ownership of t (one the caller owns: a
   tensor another object owns is refused and left to it). */
static int gdl__nn_add_tensor(const char *op, gdl_module *m, const char *name, gdl_tensor *t, int buffer) {
    gdl__nn_named *v;
    char *nm;
    if (t && gdl__is_persistent(t) && t->owner != GDL__OWN_CALLER) {
        gdl__set_error("%s: \"%s\" %s %s is not the caller's to give: it is %s (gdl_clone makes one that is)", op,
                       name ? name : "(null)", gdl_dtype_name(t->dtype), gdl_shape_str(t), gdl__owner_text[t->owner]);
        return -1;
    }
    if (!m || !t) {
        gdl__null_arg(op, !m ? "module" : "tensor");
        gdl_free(t);
        return -1;
    }
    if (gdl__nn_check_name(op, m, name) < 0) {
        gdl_free(t);
        return -1;
    }
    if (!gdl__own_storage(t) || t->node) {
        gdl__set_error("%s: \"%s\" %s must be a persistent leaf tensor (made by a factory or gdl_clone)", op, name,
                       gdl_shape_str(t));
        gdl_free(t);
        return -1;
    }
    if (!buffer && t->dtype != GDL_F32) {
        gdl__set_error("%s: parameter \"%s\" must be f32, got %s", op, name, gdl_dtype_name(t->dtype));
        gdl_free(t);
        return -1;
    }
    v = (gdl__nn_named *)(buffer ? gdl__nn_reserve(m->buf, &m->cap_buf, m->nbuf, sizeof(gdl__nn_named))
                                 : gdl__nn_reserve(m->param, &m->cap_param, m->nparam, sizeof(gdl__nn_named)));
    if (!v) {
        gdl__set_error("%s: out of memory", op);
        gdl_free(t);
        return -1;
    }
    if (buffer) m->buf = v;
    else m->param = v;
    if (!(nm = gdl__nn_strdup(name))) {
        gdl__set_error("%s: out of memory", op);
        gdl_free(t);
        return -1;
    }
    v = buffer ? &m->buf[m->nbuf++] : &m->param[m->nparam++];
    v->name = nm;
    v->t = t;
    v->tied = 0;
    t->name = nm;
    t->owner = GDL__OWN_MODULE;
    if (!buffer) t->requires_grad = 1;
    return 0;
}

GPUDL_API int gdl_module_add_param(gdl_module *m, const char *name, gdl_tensor *t) {
    return gdl__nn_add_tensor("gdl_module_add_param", m, name, t, 0);
}
GPUDL_API int gdl_module_add_buffer(gdl_module *m, const char *name, gdl_tensor *t) {
    return gdl__nn_add_tensor("gdl_module_add_buffer", m, name, t, 1);
}

static int gdl__nn_add_child(const char *op, gdl_module *m, const char *name, gdl_module *c) {
    gdl_module **kids;
    char *nm;
    if (!m || !c) {
        gdl__null_arg(op, !m ? "module" : "child");
        if (c != m) gdl__nn_drop(c);
        return -1;
    }
    if (c->parent) {
        gdl__set_error("%s: %s already belongs to another module", op, gdl__nn_label(c));
        return -1;
    }
    {
        const gdl_module *a;
        for (a = m; a; a = a->parent)
            if (a == c) {
                gdl__set_error("%s: a module cannot contain itself or one of its ancestors", op);
                return -1;
            }
    }
    if (gdl__nn_check_name(op, m, name) < 0) {
        gdl__nn_drop(c);
        return -1;
    }
    if ((kids = (gdl_module **)gdl__nn_reserve(m->child, &m->cap_child, m->nchild, sizeof(gdl_module *))) != NULL)
        m->child = kids;
    if (!kids || !(nm = gdl__nn_strdup(name))) {
        gdl__set_error("%s: out of memory", op);
        gdl__nn_drop(c);
        return -1;
    }
    GPUDL_FREE(c->name);
    c->name = nm;
    c->parent = m;
    m->child[m->nchild++] = c;
    return 0;
}

GPUDL_API int gdl_module_add_child(gdl_module *m, const char *name, gdl_module *child) {
    return gdl__nn_add_child("gdl_module_add_child", m, name, child);
}

GPUDL_API void *gdl_module_user(const gdl_module *m) { return m ? m->user : NULL; }

/* ---- layer constructors ---- */

/* U(-1/sqrt(fan_in), 1/sqrt(fan_in)) from the global generator, as PyTorch's reset_parameters. */
static gdl_tensor *gdl__nn_uniform_init(int ndim, const int64_t *shape, int64_t fan_in) {
    double bound = fan_in > 0 ? 1.0 / sqrt((double)fan_in) : 0;
    return gdl_uniform(ndim, shape, -bound, bound, gdl_cpu());
}

GPUDL_API gdl_module *gdl_nn_linear(int64_t in_features, int64_t out_features, int bias) {
    const char *op = "gdl_nn_linear";
    gdl_module *m;
    int64_t ws[2];
    if (in_features < 1 || out_features < 1) {
        gdl__set_error("%s: in_features %lld and out_features %lld must be positive", op, (long long)in_features,
                       (long long)out_features);
        return NULL;
    }
    if (!(m = gdl__nn_new(op, GDL__M_LINEAR, "Linear"))) return NULL;
    m->ia[GDL__LIN_IN] = in_features;
    m->ia[GDL__LIN_OUT] = out_features;
    ws[0] = out_features;
    ws[1] = in_features;
    if (gdl__nn_add_tensor(op, m, "weight", gdl__nn_uniform_init(2, ws, in_features), 0) < 0 ||
        (bias && gdl__nn_add_tensor(op, m, "bias", gdl__nn_uniform_init(1, ws, in_features), 0) < 0)) {
        gdl__nn_free_tree(m);
        return NULL;
    }
    return m;
}

GPUDL_API gdl_module *gdl_nn_conv2d_ex(int in_channels, int out_channels, const int kernel[2], const int stride[2],
                                       const int padding[2], const int dilation[2], int groups, int bias) {
    const char *op = "gdl_nn_conv2d";
    gdl_module *m;
    int64_t ws[4], fan_in;
    int s[2] = {1, 1}, p[2] = {0, 0}, d[2] = {1, 1}, k;
    if (!kernel) {
        gdl__null_arg(op, "kernel");
        return NULL;
    }
    for (k = 0; k < 2; k++) {
        if (stride) s[k] = stride[k];
        if (padding) p[k] = padding[k];
        if (dilation) d[k] = dilation[k];
    }
    if (in_channels < 1 || out_channels < 1 || groups < 1 || in_channels % groups || out_channels % groups) {
        gdl__set_error("%s: in_channels %d and out_channels %d must be positive and divisible by groups %d", op,
                       in_channels, out_channels, groups);
        return NULL;
    }
    if (kernel[0] < 1 || kernel[1] < 1 || s[0] < 1 || s[1] < 1 || p[0] < 0 || p[1] < 0 || d[0] < 1 || d[1] < 1) {
        gdl__set_error("%s: bad kernel (%d,%d), stride (%d,%d), padding (%d,%d) or dilation (%d,%d)", op, kernel[0],
                       kernel[1], s[0], s[1], p[0], p[1], d[0], d[1]);
        return NULL;
    }
    if (!(m = gdl__nn_new(op, GDL__M_CONV2D, "Conv2d"))) return NULL;
    m->ia[GDL__CONV_IN] = in_channels; m->ia[GDL__CONV_OUT] = out_channels;
    m->ia[GDL__CONV_KH] = kernel[0]; m->ia[GDL__CONV_KW] = kernel[1];
    m->ia[GDL__CONV_SH] = s[0]; m->ia[GDL__CONV_SW] = s[1];
    m->ia[GDL__CONV_PH] = p[0]; m->ia[GDL__CONV_PW] = p[1];
    m->ia[GDL__CONV_DH] = d[0]; m->ia[GDL__CONV_DW] = d[1];
    m->ia[GDL__CONV_GROUPS] = groups;
    ws[0] = out_channels;
    ws[1] = in_channels / groups;
    ws[2] = kernel[0];
    ws[3] = kernel[1];
    fan_in = ws[1] * ws[2] * ws[3];
    if (gdl__nn_add_tensor(op, m, "weight", gdl__nn_uniform_init(4, ws, fan_in), 0) < 0 ||
        (bias && gdl__nn_add_tensor(op, m, "bias", gdl__nn_uniform_init(1, ws, fan_in), 0) < 0)) {
        gdl__nn_free_tree(m);
        return NULL;
    }
    return m;
}

GPUDL_API gdl_module *gdl_nn_conv2d(int in_channels, int out_channels, int kernel, int stride, int padding,
                                    int dilation, int groups, int bias) {
    int k[2], s[2], p[2], d[2];
    k[0] = k[1] = kernel;
    s[0] = s[1] = stride;
    p[0] = p[1] = padding;
    d[0] = d[1] = dilation;
    return gdl_nn_conv2d_ex(in_channels, out_channels, k, s, p, d, groups, bias);
}

GPUDL_API gdl_module *gdl_nn_batchnorm_ex(int spatial_dims, int64_t C, double eps, double momentum, int affine,
                                          int track_running_stats) {
    const char *op = spatial_dims == 1 ? "gdl_nn_batchnorm1d" : "gdl_nn_batchnorm2d";
    gdl_module *m;
    if (spatial_dims != 1 && spatial_dims != 2) {
        gdl__set_error("gdl_nn_batchnorm_ex: spatial_dims must be 1 or 2, got %d", spatial_dims);
        return NULL;
    }
    if (C < 1 || !(eps > 0) || !(momentum >= 0 && momentum <= 1)) {
        gdl__set_error("%s: bad num_features %lld, eps %g or momentum %g (need C > 0, eps > 0, momentum in [0,1])", op,
                       (long long)C, eps, momentum);
        return NULL;
    }
    if (!(m = gdl__nn_new(op, GDL__M_BATCHNORM, spatial_dims == 1 ? "BatchNorm1d" : "BatchNorm2d"))) return NULL;
    m->ia[GDL__BN_C] = C;
    m->ia[GDL__BN_DIMS] = spatial_dims;
    m->ia[GDL__BN_AFFINE] = affine != 0;
    m->ia[GDL__BN_TRACK] = track_running_stats != 0;
    m->fa[GDL__BN_EPS] = eps;
    m->fa[GDL__BN_MOMENTUM] = momentum;
    if ((affine && (gdl__nn_add_tensor(op, m, "weight", gdl_ones(1, &C, GDL_F32, gdl_cpu()), 0) < 0 ||
                    gdl__nn_add_tensor(op, m, "bias", gdl_zeros(1, &C, GDL_F32, gdl_cpu()), 0) < 0)) ||
        (track_running_stats &&
         (gdl__nn_add_tensor(op, m, "running_mean", gdl_zeros(1, &C, GDL_F32, gdl_cpu()), 1) < 0 ||
          gdl__nn_add_tensor(op, m, "running_var", gdl_ones(1, &C, GDL_F32, gdl_cpu()), 1) < 0))) {
        gdl__nn_free_tree(m);
        return NULL;
    }
    return m;
}
GPUDL_API gdl_module *gdl_nn_batchnorm1d(int64_t C) { return gdl_nn_batchnorm_ex(1, C, 1e-5, 0.1, 1, 1); }
GPUDL_API gdl_module *gdl_nn_batchnorm2d(int64_t C) { return gdl_nn_batchnorm_ex(2, C, 1e-5, 0.1, 1, 1); }

GPUDL_API gdl_module *gdl_nn_layernorm(int64_t D) {
    const char *op = "gdl_nn_layernorm";
    gdl_module *m;
    if (D < 1) {
        gdl__set_error("%s: normalized_dim %lld must be positive", op, (long long)D);
        return NULL;
    }
    if (!(m = gdl__nn_new(op, GDL__M_LAYERNORM, "LayerNorm"))) return NULL;
    m->ia[GDL__LN_D] = D;
    m->fa[GDL__LN_EPS] = 1e-5;
    if (gdl__nn_add_tensor(op, m, "weight", gdl_ones(1, &D, GDL_F32, gdl_cpu()), 0) < 0 ||
        gdl__nn_add_tensor(op, m, "bias", gdl_zeros(1, &D, GDL_F32, gdl_cpu()), 0) < 0) {
        gdl__nn_free_tree(m);
        return NULL;
    }
    return m;
}

GPUDL_API gdl_module *gdl_nn_dropout(double p) {
    gdl_module *m;
    if (!(p >= 0 && p <= 1)) {
        gdl__set_error("gdl_nn_dropout: probability %g is not in [0,1]", p);
        return NULL;
    }
    if (!(m = gdl__nn_new("gdl_nn_dropout", GDL__M_DROPOUT, "Dropout"))) return NULL;
    m->fa[GDL__DROPOUT_P] = p;
    return m;
}

static gdl_module *gdl__nn_embedding(const char *op, int64_t V, int64_t D, const gdl_embedding_opts *o) {
    gdl_module *m;
    gdl_tensor *w;
    int64_t ws[2], pad = -1;
    if (V < 1 || D < 1 || V > INT32_MAX) {
        gdl__set_error("%s: num_embeddings %lld (at most 2^31-1) and embedding_dim %lld must be positive", op,
                       (long long)V, (long long)D);
        return NULL;
    }
    if (gdl__embedding_opts(op, o, V, &pad) < 0 || !(m = gdl__nn_new(op, GDL__M_EMBEDDING, "Embedding"))) return NULL;
    m->ia[GDL__EMB_V] = V;
    m->ia[GDL__EMB_D] = D;
    m->ia[GDL__EMB_PAD] = pad + 1;
    m->fa[GDL__EMB_MAX_NORM] = o->max_norm;
    m->fa[GDL__EMB_NORM_TYPE] = o->norm_type;
    ws[0] = V;
    ws[1] = D;
    w = gdl_randn(2, ws, gdl_cpu());
    if (w && pad >= 0) memset((gdl_real *)w->data + pad * D, 0, sizeof(gdl_real) * (size_t)D); /* as PyTorch */
    if (gdl__nn_add_tensor(op, m, "weight", w, 0) < 0) {
        gdl__nn_free_tree(m);
        return NULL;
    }
    return m;
}
GPUDL_API gdl_module *gdl_nn_embedding(int64_t V, int64_t D) {
    gdl_embedding_opts o = gdl_embedding_defaults();
    return gdl__nn_embedding("gdl_nn_embedding", V, D, &o);
}
GPUDL_API gdl_module *gdl_nn_embedding_ex(int64_t V, int64_t D, const gdl_embedding_opts *opts) {
    gdl_embedding_opts o = opts ? *opts : gdl_embedding_defaults();
    return gdl__nn_embedding("gdl_nn_embedding_ex", V, D, &o);
}

/* a module of kind with no parameters; its one configuration value, when it has one, in slot islot of ia[]
   (i) or fslot of fa[] (f); -1: none */
static gdl_module *gdl__nn_simple(const char *op, int kind, const char *kind_name, int fslot, double f, int islot,
                                  int64_t i) {
    gdl_module *m = gdl__nn_new(op, kind, kind_name);
    if (m && fslot >= 0) m->fa[fslot] = f;
    if (m && islot >= 0) m->ia[islot] = i;
    return m;
}
GPUDL_API gdl_module *gdl_nn_relu(void) { return gdl__nn_simple("gdl_nn_relu", GDL__M_RELU, "ReLU", -1, 0, -1, 0); }
GPUDL_API gdl_module *gdl_nn_leaky_relu(double slope) {
    return gdl__nn_simple("gdl_nn_leaky_relu", GDL__M_LEAKY_RELU, "LeakyReLU", GDL__LEAKY_SLOPE, slope, -1, 0);
}
GPUDL_API gdl_module *gdl_nn_sigmoid(void) {
    return gdl__nn_simple("gdl_nn_sigmoid", GDL__M_SIGMOID, "Sigmoid", -1, 0, -1, 0);
}
GPUDL_API gdl_module *gdl_nn_tanh(void) { return gdl__nn_simple("gdl_nn_tanh", GDL__M_TANH, "Tanh", -1, 0, -1, 0); }
GPUDL_API gdl_module *gdl_nn_gelu(int tanh_approx) {
    return gdl__nn_simple("gdl_nn_gelu", GDL__M_GELU, "GELU", -1, 0, GDL__GELU_TANH, tanh_approx != 0);
}
GPUDL_API gdl_module *gdl_nn_identity(void) {
    return gdl__nn_simple("gdl_nn_identity", GDL__M_IDENTITY, "Identity", -1, 0, -1, 0);
}
GPUDL_API gdl_module *gdl_nn_global_avgpool2d(void) {
    return gdl__nn_simple("gdl_nn_global_avgpool2d", GDL__M_GAP, "GlobalAvgPool2d", -1, 0, -1, 0);
}
GPUDL_API gdl_module *gdl_nn_flatten(int start_dim) {
    return gdl__nn_simple("gdl_nn_flatten", GDL__M_FLATTEN, "Flatten", -1, 0, GDL__FLATTEN_START, start_dim);
}

static gdl_module *gdl__nn_pool(const char *op, int kind, const char *kind_name, int kernel, int stride, int padding) {
    gdl_module *m;
    if (kernel < 1 || stride < 0 || padding < 0 || padding > kernel / 2) {
        gdl__set_error("%s: bad kernel %d, stride %d or padding %d (kernel >= 1, stride >= 0 (0 = kernel), "
                       "0 <= padding <= kernel/2)", op, kernel, stride, padding);
        return NULL;
    }
    if (!(m = gdl__nn_new(op, kind, kind_name))) return NULL;
    m->ia[GDL__POOL_K] = kernel;
    m->ia[GDL__POOL_S] = stride ? stride : kernel;
    m->ia[GDL__POOL_P] = padding;
    return m;
}
GPUDL_API gdl_module *gdl_nn_maxpool2d(int kernel, int stride, int padding) {
    return gdl__nn_pool("gdl_nn_maxpool2d", GDL__M_MAXPOOL, "MaxPool2d", kernel, stride, padding);
}
GPUDL_API gdl_module *gdl_nn_avgpool2d(int kernel, int stride, int padding) {
    return gdl__nn_pool("gdl_nn_avgpool2d", GDL__M_AVGPOOL, "AvgPool2d", kernel, stride, padding);
}

GPUDL_API gdl_module *gdl_nn_sequential(int n, gdl_module *const *mods) {
    const char *op = "gdl_nn_sequential";
    gdl_module *m = NULL;
    int i, bad = -1;
    char nm[24];
    if (n < 0 || (n > 0 && !mods)) {
        gdl__set_error("%s: bad module list (n %d, mods %s)", op, n, mods ? "given" : "NULL");
        return NULL;
    }
    for (i = 0; i < n && bad < 0; i++)
        if (!mods[i]) bad = i;
    if (bad >= 0) {
        gdl__error_after("%s: module %d is NULL", op, bad);
    } else {
        m = gdl__nn_new(op, GDL__M_SEQUENTIAL, "Sequential");
    }
    if (!m) { /* ownership was passed: free the given modules */
        for (i = 0; i < n; i++) gdl__nn_drop(mods[i]);
        return NULL;
    }
    for (i = 0; i < n; i++) {
        snprintf(nm, sizeof nm, "%d", i);
        if (gdl__nn_add_child(op, m, nm, mods[i]) < 0) {
            int j;
            for (j = i + 1; j < n; j++) gdl__nn_drop(mods[j]);
            gdl__nn_free_tree(m);
            return NULL;
        }
    }
    return m;
}

GPUDL_API int gdl_nn_sequential_add(gdl_module *seq, gdl_module *mod) {
    char nm[24];
    if (!seq || seq->kind != GDL__M_SEQUENTIAL) {
        if (seq) gdl__set_error("gdl_nn_sequential_add: %s is not a Sequential", gdl__nn_label(seq));
        else gdl__null_arg("gdl_nn_sequential_add", "seq");
        if (mod != seq) gdl__nn_drop(mod);
        return -1;
    }
    snprintf(nm, sizeof nm, "%d", seq->nchild);
    return gdl__nn_add_child("gdl_nn_sequential_add", seq, nm, mod);
}

GPUDL_API gdl_module *gdl_nn_residual(gdl_module *body, gdl_module *shortcut) {
    const char *op = "gdl_nn_residual";
    gdl_module *m;
    if (!body) {
        gdl__null_arg(op, "body");
        gdl__nn_drop(shortcut);
        return NULL;
    }
    if (body == shortcut) {
        gdl__set_error("%s: body and shortcut are the same module", op);
        gdl__nn_drop(body);
        return NULL;
    }
    if (!(m = gdl__nn_new(op, GDL__M_RESIDUAL, "Residual"))) {
        gdl__nn_drop(body);
        gdl__nn_drop(shortcut);
        return NULL;
    }
    m->ia[GDL__RES_SHORTCUT] = shortcut != NULL;
    if (gdl__nn_add_child(op, m, "body", body) < 0) {
        gdl__nn_drop(shortcut);
        gdl__nn_free_tree(m);
        return NULL;
    }
    if (shortcut && gdl__nn_add_child(op, m, "shortcut", shortcut) < 0) {
        gdl__nn_free_tree(m);
        return NULL;
    }
    return m;
}

GPUDL_API gdl_module *gdl_nn_custom(const char *kind, gdl_forward_fn forward, void *user, void (*free_user)(void *)) {
    gdl_module *m;
    if (!kind || !kind[0] || !forward) {
        if (!forward) gdl__null_arg("gdl_nn_custom", "forward");
        else gdl__set_error("gdl_nn_custom: kind must be a non-empty string");
        if (free_user) free_user(user);
        return NULL;
    }
    if (!(m = gdl__nn_new("gdl_nn_custom", GDL__M_CUSTOM, kind))) {
        if (free_user) free_user(user);
        return NULL;
    }
    m->fwd = forward;
    m->user = user;
    m->free_user = free_user;
    return m;
}

/* ---- forward ---- */

/* gdl_module_summary's recorder: rows in pre-order; gdl_forward fills the output shapes. */
typedef struct gdl__nn_row {
    gdl_module *m;
    int depth;
    int ran;
    int ndim;
    int64_t shape[GDL_MAX_DIMS];
    int training;
} gdl__nn_row;
static GDL__TLS gdl__nn_row *gdl__nn_rows; /* per thread: a summary records its own thread's forwards */
static GDL__TLS int gdl__nn_nrows;

/* During a summary, records y as module m's output: gdl_forward does, and so does every public forward that
   runs a module some other way (gdl_nn_lstm_forward, gdl_mha_forward, gdl_transformer_encoder_forward). */
static void gdl__nn_record(const gdl_module *m, const gdl_tensor *y) {
    int i;
    for (i = 0; i < gdl__nn_nrows; i++)
        if (gdl__nn_rows[i].m == m) {
            gdl__nn_rows[i].ran = 1;
            gdl__nn_rows[i].ndim = y->ndim;
            memcpy(gdl__nn_rows[i].shape, y->shape, sizeof y->shape);
        }
}

/* Prefixes the current error with the module (once: nested modules keep the innermost). */
static void gdl__nn_fwd_error(const gdl_module *m) {
    char cfg[200];
    if (!strncmp(gdl__err, "gdl_forward: ", 13)) return;
    gdl__nn_config(m, cfg, sizeof cfg);
    gdl__error_context("gdl_forward: %s (%s)", gdl__nn_label(m), cfg);
}

static gdl_tensor *gdl__nn_fwd_fail(const gdl_module *m, const char *want, const char *got) {
    char cfg[200];
    gdl__nn_config(m, cfg, sizeof cfg);
    gdl__set_error("gdl_forward: %s (%s): expected input %s, got %s", gdl__nn_label(m), cfg, want, got);
    return NULL;
}

static gdl_tensor *gdl__nn_param(const gdl_module *m, int i) { return i < m->nparam ? m->param[i].t : NULL; }
static gdl_tensor *gdl__nn_buffer(const gdl_module *m, int i) { return i < m->nbuf ? m->buf[i].t : NULL; }

/* Fusion of a Linear, Conv2d or BatchNorm with the activation module after it
   in a Sequential (gdl_nn_set_fusion). It is skipped wherever the intermediate is
   looked at or the numerics would differ: anomaly mode (which checks each
   op's output), gdl_module_summary's recording (each module's output
   shape), autocast or a non-f32 input or parameter. */
static int gdl__nn_fuse = -1; /* -1: not read from GPUDL_NO_FUSION yet; atomic: every forward reads it */
GPUDL_API int gdl_nn_set_fusion(int on) {
#ifdef GDL__ATOMICS
    const int stored = gdl__atomic_load(&gdl__nn_fuse, GDL__MO_RELAXED);
#else
    const int stored = gdl__nn_fuse;
#endif
    int prev = stored;
    if (prev < 0) { /* two threads may both read the environment: they store the same value */
        prev = !gdl__env_flag("GPUDL_NO_FUSION", 0);
    }
    if (on >= 0 || stored < 0) {
        const int next = on >= 0 ? on != 0 : prev;
#ifdef GDL__ATOMICS
        gdl__atomic_store(&gdl__nn_fuse, next, GDL__MO_RELAXED);
#else
        gdl__nn_fuse = next;
#endif
    }
    return prev;
}

/* whether module a may run fused with an activation after it, on input x (the conditions above) */
static int gdl__nn_fuse_ok(const gdl_module *a, const gdl_tensor *x) {
    int k;
    if (gdl_nn_set_fusion(-1) == 0 || gdl__anomaly || gdl__nn_nrows || gdl__ac_dt != GDL_F32 || !x ||
        x->dtype != GDL_F32)
        return 0;
    for (k = 0; k < a->nparam; k++)
        if (a->param[k].t && a->param[k].t->dtype != GDL_F32) return 0;
    return 1;
}

/* the gdl_act to fuse a followed by b with (input x), or -1 */
static int gdl__nn_fusable(const gdl_module *a, const gdl_module *b, const gdl_tensor *x) {
    int act;
    if (a->kind != GDL__M_LINEAR && a->kind != GDL__M_CONV2D && a->kind != GDL__M_BATCHNORM) return -1;
    if (b->kind == GDL__M_RELU) act = GDL_ACT_RELU;
    else if (b->kind == GDL__M_GELU && a->kind == GDL__M_LINEAR)
        act = b->ia[GDL__GELU_TANH] ? GDL_ACT_GELU_TANH : GDL_ACT_GELU;
    else if (b->kind == GDL__M_GELU && a->kind == GDL__M_BATCHNORM && !b->ia[GDL__GELU_TANH])
        act = GDL_ACT_GELU; /* erf GELU: gdl_batch_norm_act's */
    else return -1;
    return gdl__nn_fuse_ok(a, x) ? act : -1;
}

/* A Linear's input [..., in_features] (conv: a Conv2d's [N, in_channels, H, W]) checked against module m:
   0, or -1 after the error; for a Conv2d its stride, padding and dilation. */
static int gdl__nn_check_xw(gdl_module *m, const gdl_tensor *x, int conv, int s[2], int p[2], int d[2]) {
    char want[96];
    const int64_t *a = m->ia;
    const int64_t in = conv ? a[GDL__CONV_IN] : a[GDL__LIN_IN];
    if (!conv ? x->ndim < 1 || x->shape[x->ndim - 1] != in : x->ndim != 4 || x->shape[1] != in) {
        if (!conv) snprintf(want, sizeof want, "[..., %lld]", (long long)in);
        else snprintf(want, sizeof want, "[N, %lld, H, W]", (long long)in);
        gdl__nn_fwd_fail(m, want, gdl_shape_str(x));
        return -1;
    }
    if (conv) {
        s[0] = (int)a[GDL__CONV_SH]; s[1] = (int)a[GDL__CONV_SW];
        p[0] = (int)a[GDL__CONV_PH]; p[1] = (int)a[GDL__CONV_PW];
        d[0] = (int)a[GDL__CONV_DH]; d[1] = (int)a[GDL__CONV_DW];
    }
    return 0;
}

/* A BatchNorm module's forward, act (a gdl_act) fused after it: GDL_ACT_RELU gdl_batch_norm_relu's,
   GDL_ACT_GELU gdl_batch_norm_act's */
static gdl_tensor *gdl__nn_batchnorm_forward(gdl_module *m, gdl_tensor *x, int act) {
    const char *op = act == GDL_ACT_RELU ? "gdl_batch_norm_relu" : act ? "gdl_batch_norm_act" : "gdl_batch_norm";
    char want[96];
    const int64_t *a = m->ia;
    const int64_t C = a[GDL__BN_C];
    if (a[GDL__BN_DIMS] == 1 ? (x->ndim != 2 && x->ndim != 3) || x->shape[1] != C : x->ndim != 4 || x->shape[1] != C) {
        if (a[GDL__BN_DIMS] == 1) snprintf(want, sizeof want, "[N, %lld] or [N, %lld, L]", (long long)C, (long long)C);
        else snprintf(want, sizeof want, "[N, %lld, H, W]", (long long)C);
        return gdl__nn_fwd_fail(m, want, gdl_shape_str(x));
    }
    return gdl__batch_norm(op, x, gdl__nn_buffer(m, 0), gdl__nn_buffer(m, 1), gdl__nn_param(m, 0), gdl__nn_param(m, 1),
                           m->training, m->fa[GDL__BN_MOMENTUM], m->fa[GDL__BN_EPS], act);
}

/* the Linear / Conv2d / BatchNorm module m's forward with act fused in; input checks as gdl__nn_forward's */
static gdl_tensor *gdl__nn_forward_act(gdl_module *m, gdl_tensor *x, gdl_act act) {
    int s[2], p[2], d[2], conv = m->kind != GDL__M_LINEAR;
    if (m->kind == GDL__M_BATCHNORM) return gdl__nn_batchnorm_forward(m, x, (int)act);
    if (gdl__nn_check_xw(m, x, conv, s, p, d) < 0) return NULL;
    if (!conv) return gdl_linear_act(x, gdl__nn_param(m, 0), gdl__nn_param(m, 1), act);
    return gdl__conv2d("gdl_conv2d_act", x, gdl__nn_param(m, 0), gdl__nn_param(m, 1), s, p, d,
                       (int)m->ia[GDL__CONV_GROUPS], gdl__act_code("gdl_conv2d_act", (int)act));
}

static gdl_tensor *gdl__nn_forward(gdl_module *m, gdl_tensor *x) {
    char want[96];
    const int64_t *a = m->ia;
    int i;
    switch (m->kind) {
    case GDL__M_LINEAR:
        if (gdl__nn_check_xw(m, x, 0, NULL, NULL, NULL) < 0) return NULL;
        return gdl_linear(x, gdl__nn_param(m, 0), gdl__nn_param(m, 1));
    case GDL__M_CONV2D: {
        int s[2], p[2], d[2];
        if (gdl__nn_check_xw(m, x, 1, s, p, d) < 0) return NULL;
        return gdl_conv2d_ex(x, gdl__nn_param(m, 0), gdl__nn_param(m, 1), s, p, d, (int)a[GDL__CONV_GROUPS]);
    }
    case GDL__M_BATCHNORM: return gdl__nn_batchnorm_forward(m, x, GDL_ACT_NONE);
    case GDL__M_LAYERNORM:
        if (x->ndim < 1 || x->shape[x->ndim - 1] != a[GDL__LN_D]) {
            snprintf(want, sizeof want, "[..., %lld]", (long long)a[GDL__LN_D]);
            return gdl__nn_fwd_fail(m, want, gdl_shape_str(x));
        }
        return gdl_layer_norm(x, gdl__nn_param(m, 0), gdl__nn_param(m, 1), m->fa[GDL__LN_EPS]);
    case GDL__M_DROPOUT: return gdl_dropout(x, m->fa[GDL__DROPOUT_P], m->training);
    case GDL__M_EMBEDDING:
        if (x->dtype != GDL_I32) {
            snprintf(want, sizeof want, "i32 indices in [0, %lld)", (long long)a[GDL__EMB_V]);
            return gdl__nn_fwd_fail(m, want, gdl_dtype_name(x->dtype));
        }
        {
            gdl_embedding_opts o = gdl_embedding_defaults();
            o.padding_idx = a[GDL__EMB_PAD] ? a[GDL__EMB_PAD] - 1 : GDL_NO_PADDING_IDX;
            o.max_norm = m->fa[GDL__EMB_MAX_NORM];
            o.norm_type = m->fa[GDL__EMB_NORM_TYPE];
            return gdl_embedding_ex(x, gdl__nn_param(m, 0), &o);
        }
    case GDL__M_RELU: return gdl_relu(x);
    case GDL__M_LEAKY_RELU: return gdl_leaky_relu(x, m->fa[GDL__LEAKY_SLOPE]);
    case GDL__M_SIGMOID: return gdl_sigmoid(x);
    case GDL__M_TANH: return gdl_tanh(x);
    case GDL__M_GELU: return gdl_gelu(x, (int)a[GDL__GELU_TANH]);
    case GDL__M_IDENTITY: return x;
    case GDL__M_MAXPOOL: return gdl_max_pool2d(x, (int)a[GDL__POOL_K], (int)a[GDL__POOL_S], (int)a[GDL__POOL_P]);
    case GDL__M_AVGPOOL: return gdl_avg_pool2d(x, (int)a[GDL__POOL_K], (int)a[GDL__POOL_S], (int)a[GDL__POOL_P]);
    case GDL__M_GAP: return gdl_global_avg_pool2d(x);
    case GDL__M_FLATTEN: return gdl_flatten(x, (int)a[GDL__FLATTEN_START]);
    case GDL__M_SEQUENTIAL:
        for (i = 0; i < m->nchild && x; i++) {
            int act = i + 1 < m->nchild ? gdl__nn_fusable(m->child[i], m->child[i + 1], x) : -1;
            if (act >= 0) { /* Linear/Conv2d/BatchNorm then its activation: one fused op (gdl_nn_set_fusion) */
                x = gdl__nn_forward_act(m->child[i], x, (gdl_act)act);
                if (!x) gdl__nn_fwd_error(m->child[i]);
                i++;
            } else {
                x = gdl_forward(m->child[i], x);
            }
        }
        return x;
    case GDL__M_RESIDUAL: {
        gdl_tensor *y = gdl_forward(m->child[0], x), *sc;
        if (!y) return NULL;
        sc = a[GDL__RES_SHORTCUT] ? gdl_forward(m->child[1], x) : x;
        if (!sc) return NULL;
        if (!gdl_same_shape(y, sc)) {
            gdl__set_error("gdl_forward: %s: body output %s and shortcut output %s differ (%s)", gdl__nn_label(m),
                           gdl_shape_str(y), gdl_shape_str(sc),
                           a[GDL__RES_SHORTCUT] ? "check the shortcut's stride and channels"
                                                : "an identity shortcut needs the body to keep the shape");
            return NULL;
        }
        y = gdl_add(y, sc);
        return y ? gdl_relu(y) : NULL;
    }
    case GDL__M_CUSTOM: return m->fwd(m, x);
    case GDL__M_LSTM: /* the output sequence; gdl_forward_ex and gdl_nn_rnn_forward give the states too */
    case GDL__M_GRU:
    case GDL__M_RNN: {
        gdl_tensor *y;
        return gdl__nn_rnn_forward("gdl_forward", m, m->kind, x, NULL, NULL, NULL, 0, &y, NULL, NULL) < 0 ? NULL : y;
    }
    default: gdl__set_error("gdl_forward: unknown module kind %d", m->kind); return NULL;
    }
}

GPUDL_API gdl_tensor *gdl_forward(gdl_module *m, gdl_tensor *x) {
    gdl_tensor *y;
    if (!m) {
        gdl__null_arg("gdl_forward", "module");
        return NULL;
    }
    if (!x) {
        gdl__error_after("gdl_forward: %s: input is NULL", gdl__nn_label(m));
        return NULL;
    }
    y = gdl__nn_forward(m, x);
    if (!y) {
        gdl__nn_fwd_error(m);
        return NULL;
    }
    gdl__nn_record(m, y);
    return y;
}

/* ---- tree walks ---- */

GPUDL_API int gdl_module_train(gdl_module *m, int on) {
    int i;
    if (!m) {
        gdl__null_arg("gdl_module_train", "module");
        return -1;
    }
    m->training = on != 0;
    for (i = 0; i < m->nchild; i++) gdl_module_train(m->child[i], on);
    return 0;
}

GPUDL_API int gdl_module_is_training(const gdl_module *m) { return m ? m->training : 0; }

GPUDL_API int gdl_module_to(gdl_module *m, gdl_device dev) {
    int i;
    if (!m) {
        gdl__null_arg("gdl_module_to", "module");
        return -1;
    }
    if (!gdl__be("gdl_module_to", dev)) return -1;
    for (i = 0; i < m->nparam; i++)
        if (gdl_move_(m->param[i].t, dev) < 0) return -1;
    for (i = 0; i < m->nbuf; i++)
        if (gdl_move_(m->buf[i].t, dev) < 0) return -1;
    if (m->extra && m->extra->to(m, dev) < 0) return -1; /* a quantized layer's int8 weight */
    for (i = 0; i < m->nchild; i++)
        if (gdl_module_to(m->child[i], dev) < 0) return -1;
    return 0;
}

static const gdl_tensor *gdl__nn_first_tensor(const gdl_module *m) {
    int i;
    const gdl_tensor *t;
    if (m->nparam) return m->param[0].t;
    if (m->nbuf) return m->buf[0].t;
    for (i = 0; i < m->nchild; i++)
        if ((t = gdl__nn_first_tensor(m->child[i])) != NULL) return t;
    return NULL;
}

/* the first module of the tree with storage of its own (gdl__nn_extra), or NULL */
static const gdl_module *gdl__nn_first_extra(const gdl_module *m) {
    const gdl_module *e;
    int i;
    if (m->extra) return m;
    for (i = 0; i < m->nchild; i++)
        if ((e = gdl__nn_first_extra(m->child[i])) != NULL) return e;
    return NULL;
}

GPUDL_API gdl_device gdl_module_device(const gdl_module *m) {
    const gdl_tensor *t = m ? gdl__nn_first_tensor(m) : NULL;
    const gdl_module *e = m && !t ? gdl__nn_first_extra(m) : NULL; /* a model of quantized layers only */
    return t ? t->device : e ? e->extra->device(e) : gdl_cpu();
}

GPUDL_API int gdl_module_zero_grad(gdl_module *m) {
    int i;
    if (!m) {
        gdl__null_arg("gdl_module_zero_grad", "module");
        return -1;
    }
    for (i = 0; i < m->nparam; i++)
        if (gdl_zero_grad_tensor(m->param[i].t) < 0) return -1;
    for (i = 0; i < m->nchild; i++)
        if (gdl_module_zero_grad(m->child[i]) < 0) return -1;
    return 0;
}

GPUDL_API int64_t gdl_module_num_params(const gdl_module *m) {
    int64_t n = 0;
    int i;
    if (!m) return -1;
    for (i = 0; i < m->nparam; i++) n += m->param[i].tied ? 0 : m->param[i].t->numel;
    for (i = 0; i < m->nchild; i++) n += gdl_module_num_params(m->child[i]);
    return n;
}

GPUDL_API int gdl_module_num_children(const gdl_module *m) { return m ? m->nchild : 0; }
GPUDL_API const char *gdl_module_kind(const gdl_module *m) { return m ? m->kind_name : ""; }
GPUDL_API const char *gdl_module_name(const gdl_module *m) { return m ? m->name : ""; }

GPUDL_API gdl_module *gdl_module_child_at(gdl_module *m, int i) {
    if (!m) {
        gdl__null_arg("gdl_module_child_at", "module");
        return NULL;
    }
    if (i < 0 || i >= m->nchild) {
        gdl__set_error("gdl_module_child_at: index %d out of range: %s has %d children", i, gdl__nn_label(m), m->nchild);
        return NULL;
    }
    return m->child[i];
}

/* Walks `path` (dotted) from m; *rest receives the last component when want_leaf (a tensor name). */
static gdl_module *gdl__nn_walk(const char *op, gdl_module *m, const char *path, int want_leaf, const char **rest) {
    const char *p = path;
    while (1) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        int i, found = -1;
        if (!dot && want_leaf) {
            *rest = p;
            return m;
        }
        for (i = 0; i < m->nchild && found < 0; i++)
            if (strlen(m->child[i]->name) == len && !strncmp(m->child[i]->name, p, len)) found = i;
        if (found < 0) {
            gdl__set_error("%s: no module \"%.*s\" in %s (looking up \"%s\")", op, (int)len, p,
                           m->parent ? gdl__nn_label(m) : m->kind_name, path);
            return NULL;
        }
        m = m->child[found];
        if (!dot) return m;
        p = dot + 1;
    }
}

GPUDL_API gdl_module *gdl_module_child(gdl_module *m, const char *path) {
    if (!m || !path) {
        gdl__null_arg("gdl_module_child", !m ? "module" : "path");
        return NULL;
    }
    return gdl__nn_walk("gdl_module_child", m, path, 0, NULL);
}

GPUDL_API gdl_tensor *gdl_module_tensor(gdl_module *m, const char *name) {
    const char *leaf = NULL;
    gdl_module *o;
    int i;
    if (!m || !name) {
        gdl__null_arg("gdl_module_tensor", !m ? "module" : "name");
        return NULL;
    }
    if (!(o = gdl__nn_walk("gdl_module_tensor", m, name, 1, &leaf))) return NULL;
    for (i = 0; i < o->nparam; i++)
        if (!strcmp(o->param[i].name, leaf)) return o->param[i].t;
    for (i = 0; i < o->nbuf; i++)
        if (!strcmp(o->buf[i].name, leaf)) return o->buf[i].t;
    gdl__set_error("gdl_module_tensor: no parameter or buffer \"%s\" in %s (looking up \"%s\")", leaf,
                   o->parent ? gdl__nn_label(o) : o->kind_name, name);
    return NULL;
}

/* Returns a copy of s owned by root, reusing an equal string (slot hint first). */
static const char *gdl__nn_intern(gdl_module *root, const char *s, int hint) {
    int i;
    char *c, **v;
    if (hint < root->ninterned && !strcmp(root->interned[hint], s)) return root->interned[hint];
    for (i = 0; i < root->ninterned; i++)
        if (!strcmp(root->interned[i], s)) return root->interned[i];
    v = (char **)gdl__nn_reserve(root->interned, &root->cap_interned, root->ninterned, sizeof(char *));
    if (!v) return NULL;
    root->interned = v;
    if (!(c = gdl__nn_strdup(s))) return NULL;
    root->interned[root->ninterned++] = c;
    return c;
}

typedef struct gdl__nn_lister {
    gdl_module *root;
    int which, max, count;
    const char **names;
    gdl_tensor **tensors;
    char path[512];
} gdl__nn_lister;

static int gdl__nn_emit(gdl__nn_lister *L, size_t plen, const gdl__nn_named *v) {
    if (L->count < L->max) {
        if (L->names) {
            const char *s;
            if (plen + strlen(v->name) + 1 > sizeof L->path) {
                gdl__set_error("gdl_module_named_tensors: name \"%s%s\" is too long", L->path, v->name);
                return -1;
            }
            strcpy(L->path + plen, v->name);
            if (!(s = gdl__nn_intern(L->root, L->path, L->count))) {
                gdl__set_error("gdl_module_named_tensors: out of memory");
                return -1;
            }
            L->path[plen] = 0;
            L->names[L->count] = s;
        }
        if (L->tensors) L->tensors[L->count] = v->t;
    }
    L->count++;
    return 0;
}

static int gdl__nn_list(gdl__nn_lister *L, const gdl_module *m, size_t plen) {
    int i;
    if (L->which & GDL_PARAMS)
        for (i = 0; i < m->nparam; i++)
            if (!m->param[i].tied && gdl__nn_emit(L, plen, &m->param[i]) < 0) return -1;
    if (L->which & GDL_BUFFERS)
        for (i = 0; i < m->nbuf; i++)
            if (gdl__nn_emit(L, plen, &m->buf[i]) < 0) return -1;
    for (i = 0; i < m->nchild; i++) {
        size_t n = strlen(m->child[i]->name);
        if (plen + n + 2 > sizeof L->path) {
            gdl__set_error("gdl_module_named_tensors: module path \"%s%s\" is too long", L->path, m->child[i]->name);
            return -1;
        }
        memcpy(L->path + plen, m->child[i]->name, n);
        L->path[plen + n] = '.';
        L->path[plen + n + 1] = 0;
        if (gdl__nn_list(L, m->child[i], plen + n + 1) < 0) return -1;
        L->path[plen] = 0;
    }
    return 0;
}

GPUDL_API int gdl_module_named_tensors(gdl_module *m, int which, const char **names, gdl_tensor **tensors, int max) {
    gdl__nn_lister L;
    if (!m) {
        gdl__null_arg("gdl_module_named_tensors", "module");
        return -1;
    }
    if (which < 1 || which > 3 || max < 0) {
        gdl__set_error("gdl_module_named_tensors: bad which %d (GDL_PARAMS, GDL_BUFFERS or both) or max %d", which, max);
        return -1;
    }
    memset(&L, 0, sizeof L);
    L.root = m;
    L.which = which;
    L.max = max;
    L.names = names;
    L.tensors = tensors;
    return gdl__nn_list(&L, m, 0) < 0 ? -1 : L.count;
}

/* ---- summary ---- */

static void gdl__nn_count_str(int64_t v, char *s, size_t n) {
    char tmp[32];
    int len, i, k = 0, lead;
    snprintf(tmp, sizeof tmp, "%lld", (long long)(v < 0 ? -v : v));
    len = (int)strlen(tmp);
    lead = len % 3 ? len % 3 : 3;
    if (v < 0 && (size_t)k + 1 < n) s[k++] = '-';
    for (i = 0; i < len && (size_t)k + 2 < n; i++) {
        if (i >= lead && (i - lead) % 3 == 0) s[k++] = ',';
        s[k++] = tmp[i];
    }
    s[k] = 0;
}

static int gdl__nn_add_rows(gdl_module *m, int depth, gdl__nn_row *rows, int *n) {
    int i;
    rows[*n].m = m;
    rows[*n].depth = depth;
    rows[*n].training = m->training;
    (*n)++;
    for (i = 0; i < m->nchild; i++) gdl__nn_add_rows(m->child[i], depth + 1, rows, n);
    return 0;
}

static int gdl__nn_count_modules(const gdl_module *m) {
    int i, n = 1;
    for (i = 0; i < m->nchild; i++) n += gdl__nn_count_modules(m->child[i]);
    return n;
}

/* the parameters a module keeps outside param (a quantized layer's int8 weight and bias) and *bytes
   (when bytes is not NULL) their size as stored; 0 for the others */
static int64_t gdl__nn_extra_params(const gdl_module *m, int64_t *bytes) {
    if (bytes) *bytes = 0;
    return m->extra ? m->extra->params(m, bytes) : 0;
}

GPUDL_API int64_t gdl_module_nbytes(const gdl_module *m) {
    int64_t n = 0, eb;
    int i;
    if (!m) return -1;
    for (i = 0; i < m->nparam; i++) n += m->param[i].tied ? 0 : m->param[i].t->numel * (int64_t)gdl_dtype_size(m->param[i].t->dtype);
    for (i = 0; i < m->nbuf; i++) n += m->buf[i].t->numel * (int64_t)gdl_dtype_size(m->buf[i].t->dtype);
    gdl__nn_extra_params(m, &eb);
    n += eb;
    for (i = 0; i < m->nchild; i++) n += gdl_module_nbytes(m->child[i]);
    return n;
}

static void gdl__nn_param_totals(const gdl_module *m, int64_t *total, int64_t *trainable, int64_t *buffers) {
    int i;
    *total += gdl__nn_extra_params(m, NULL);
    for (i = 0; i < m->nparam; i++) {
        if (m->param[i].tied) continue;
        *total += m->param[i].t->numel;
        if (m->param[i].t->requires_grad) *trainable += m->param[i].t->numel;
    }
    for (i = 0; i < m->nbuf; i++) *buffers += m->buf[i].t->numel;
    for (i = 0; i < m->nchild; i++) gdl__nn_param_totals(m->child[i], total, trainable, buffers);
}

GPUDL_API int gdl_module_summary(gdl_module *m, int ndim, const int64_t *input_shape, FILE *f) {
    const char *op = "gdl_module_summary";
    gdl__nn_row *rows;
    gdl_tensor *x, *y;
    const gdl_module *first;
    int n = 0, i, prev_grad;
    int64_t total = 0, trainable = 0, buffers = 0;
    char line[80];
    if (!m || !f) {
        gdl__null_arg(op, !m ? "module" : "f");
        return -1;
    }
    if (m->parent) {
        gdl__set_error("%s: %s is a child module; summarise its root", op, gdl__nn_label(m));
        return -1;
    }
    if (gdl__nn_rows) {
        gdl__set_error("%s: called from inside a summary", op);
        return -1;
    }
    rows = (gdl__nn_row *)GPUDL_MALLOC(sizeof(gdl__nn_row) * (size_t)gdl__nn_count_modules(m));
    if (!rows) {
        gdl__set_error("%s: out of memory", op);
        return -1;
    }
    memset(rows, 0, sizeof(gdl__nn_row) * (size_t)gdl__nn_count_modules(m));
    gdl__nn_add_rows(m, 0, rows, &n);
    /* an Embedding as the first layer takes i32 indices */
    for (first = m; first->nchild; first = first->child[0]) {}
    x = gdl_zeros(ndim, input_shape, first->kind == GDL__M_EMBEDDING ? GDL_I32 : GDL_F32, gdl_module_device(m));
    if (!x) {
        gdl__error_context("%s: cannot make the input", op);
        GPUDL_FREE(rows);
        return -1;
    }
    /* eval mode and no grad: no running-stat updates, no dropout draws, no tape */
    for (i = 0; i < n; i++) rows[i].m->training = 0;
    prev_grad = gdl_set_grad_enabled(0);
    gdl__nn_rows = rows;
    gdl__nn_nrows = n;
    y = gdl_forward(m, x);
    gdl__nn_rows = NULL;
    gdl__nn_nrows = 0;
    gdl_set_grad_enabled(prev_grad);
    for (i = 0; i < n; i++) rows[i].m->training = rows[i].training;
    gdl_free(x);
    if (!y) {
        GPUDL_FREE(rows);
        return -1;
    }
    memset(line, '=', 78);
    line[78] = 0;
    fprintf(f, "%-44s %-20s %12s\n%s\n", "Layer (type)", "Output Shape", "Param #", line);
    for (i = 0; i < n; i++) {
        const gdl_module *r = rows[i].m;
        char label[256], shape[64], params[32];
        int64_t own = 0;
        int k;
        for (k = 0; k < r->nparam; k++) own += r->param[k].tied ? 0 : r->param[k].t->numel;
        own += gdl__nn_extra_params(r, NULL);
        if (i == 0) snprintf(label, sizeof label, "%s", r->kind_name);
        else snprintf(label, sizeof label, "%*s%s (%s)", 2 * rows[i].depth, "", gdl__nn_path(r), r->kind_name);
        if (rows[i].ran) snprintf(shape, sizeof shape, "%s", gdl__shape_fmt(rows[i].ndim, rows[i].shape));
        else snprintf(shape, sizeof shape, "--");
        if (r->nchild && !r->nparam) snprintf(params, sizeof params, "--");
        else gdl__nn_count_str(own, params, sizeof params);
        fprintf(f, "%-44s %-20s %12s\n", label, shape, params);
    }
    gdl__nn_param_totals(m, &total, &trainable, &buffers);
    fprintf(f, "%s\n", line);
    gdl__nn_count_str(total, line, sizeof line);
    fprintf(f, "Total params: %s\n", line);
    gdl__nn_count_str(trainable, line, sizeof line);
    fprintf(f, "Trainable params: %s\n", line);
    gdl__nn_count_str(total - trainable, line, sizeof line);
    fprintf(f, "Non-trainable params: %s\n", line);
    gdl__nn_count_str(buffers, line, sizeof line);
    fprintf(f, "Buffer elements: %s\n", line);
    gdl__nn_count_str(gdl_module_nbytes(m), line, sizeof line);
    first = gdl__nn_first_extra(m);
    fprintf(f, "Size: %s bytes (parameters and buffers as stored%s)\n", line, first ? first->extra->summary_note : "");
    fprintf(f, "Input shape: %s on %s\n", gdl__shape_fmt(ndim, input_shape), gdl_device_str(gdl_module_device(m)));
    GPUDL_FREE(rows);
    return 0;
}

