/* src/nn/transformer.h — nn.TransformerEncoderLayer and nn.TransformerEncoder as custom modules over nn.MultiheadAttention
   (src/nn/attention.h), Linear, LayerNorm and Dropout children under PyTorch's names; the positional embeddings; weight tying
   (a parameter entry that refers to another module's tensor without owning it). */

typedef struct gdl__tfm_cfg {
    int64_t d, ff;
    int nhead, gelu, batch_first, norm_first, bias;
    double dropout, eps;
} gdl__tfm_cfg;

typedef struct gdl__tfm_layer {
    gdl__tfm_cfg c;
    gdl_module *sa, *l1, *drop, *l2, *n1, *n2, *d1, *d2;
} gdl__tfm_layer;

typedef struct gdl__tfm_stack {
    int n;
    gdl_module **layers; /* the children of "layers" */
    gdl_module *norm;    /* NULL without a final norm */
} gdl__tfm_stack;

static gdl_tensor *gdl__tfm_layer_self(gdl_module *self, gdl_tensor *x);
static gdl_tensor *gdl__tfm_stack_self(gdl_module *self, gdl_tensor *x);

static void gdl__tfm_stack_free(void *u) {
    if (u) GPUDL_FREE(((gdl__tfm_stack *)u)->layers);
    GPUDL_FREE(u);
}

/* LayerNorm(d, eps, bias): PyTorch's bias=False drops the bias tensor */
static gdl_module *gdl__tfm_norm(int64_t d, double eps, int bias) {
    gdl_module *m = gdl_nn_layernorm(d);
    if (!m) return NULL;
    m->fa[GDL__LN_EPS] = eps;
    if (!bias) {
        gdl_free(m->param[1].t);
        GPUDL_FREE(m->param[1].name);
        m->nparam = 1;
    }
    return m;
}

/* adds child `name` and keeps it in *slot; takes ownership of c */
static int gdl__tfm_child(gdl_module *m, const char *name, gdl_module *c, gdl_module **slot) {
    if (gdl_module_add_child(m, name, c) < 0) return -1;
    *slot = c;
    return 0;
}

static gdl_module *gdl__tfm_layer_new(const gdl__tfm_cfg *c) {
    gdl__tfm_layer *u = (gdl__tfm_layer *)gdl__zalloc("gdl_nn_transformer_encoder_layer", sizeof *u);
    gdl_module *m;
    if (!u) return NULL;
    u->c = *c;
    if (!(m = gdl_nn_custom("TransformerEncoderLayer", gdl__tfm_layer_self, u, gdl__mha_free))) return NULL;
    /* PyTorch's order of construction (and of the state dict): self_attn, linear1, dropout, linear2, norm1, norm2 */
    if (gdl__tfm_child(m, "self_attn", gdl_nn_multihead_attention(c->d, c->nhead, c->dropout, c->bias, c->batch_first),
                       &u->sa) < 0 ||
        gdl__tfm_child(m, "linear1", gdl_nn_linear(c->d, c->ff, c->bias), &u->l1) < 0 ||
        gdl__tfm_child(m, "dropout", gdl_nn_dropout(c->dropout), &u->drop) < 0 ||
        gdl__tfm_child(m, "linear2", gdl_nn_linear(c->ff, c->d, c->bias), &u->l2) < 0 ||
        gdl__tfm_child(m, "norm1", gdl__tfm_norm(c->d, c->eps, c->bias), &u->n1) < 0 ||
        gdl__tfm_child(m, "norm2", gdl__tfm_norm(c->d, c->eps, c->bias), &u->n2) < 0 ||
        gdl__tfm_child(m, "dropout1", gdl_nn_dropout(c->dropout), &u->d1) < 0 ||
        gdl__tfm_child(m, "dropout2", gdl_nn_dropout(c->dropout), &u->d2) < 0) {
        gdl_module_free(m);
        return NULL;
    }
    return m;
}

static gdl_module *gdl__nn_tfm_layer(const char *op, int64_t d_model, int nhead, int64_t dim_feedforward,
                                     double dropout, int gelu, double layer_norm_eps, int batch_first, int norm_first,
                                     int bias) {
    gdl__tfm_cfg c;
    if (d_model < 1 || nhead < 1 || d_model % nhead || dim_feedforward < 1 || !(dropout >= 0 && dropout <= 1) ||
        !(layer_norm_eps > 0)) {
        gdl__set_error("%s: d_model %lld must be a positive multiple of nhead %d, "
                       "dim_feedforward %lld positive, dropout %g in [0,1] and layer_norm_eps %g > 0", op,
                       (long long)d_model, nhead, (long long)dim_feedforward, dropout, layer_norm_eps);
        return NULL;
    }
    c.d = d_model;
    c.ff = dim_feedforward;
    c.nhead = nhead;
    c.gelu = gelu != 0;
    c.batch_first = batch_first != 0;
    c.norm_first = norm_first != 0;
    c.bias = bias != 0;
    c.dropout = dropout;
    c.eps = layer_norm_eps;
    return gdl__tfm_layer_new(&c);
}
GPUDL_API gdl_module *gdl_nn_transformer_encoder_layer(int64_t d_model, int nhead, int64_t dim_feedforward,
                                                       double dropout, int gelu, double layer_norm_eps,
                                                       int batch_first, int norm_first, int bias) {
    return gdl__nn_tfm_layer("gdl_nn_transformer_encoder_layer", d_model, nhead, dim_feedforward, dropout, gelu,
                             layer_norm_eps, batch_first, norm_first, bias);
}
GPUDL_API gdl_transformer_encoder_layer_opts gdl_transformer_encoder_layer_defaults(void) {
    gdl_transformer_encoder_layer_opts o;
    memset(&o, 0, sizeof o);
    o.dim_feedforward = 2048;
    o.dropout = 0.1;
    o.activation = GDL_ACT_RELU;
    o.layer_norm_eps = 1e-5;
    o.bias = 1;
    return o;
}
GPUDL_API gdl_module *gdl_nn_transformer_encoder_layer_ex(int64_t d_model, int nhead,
                                                          const gdl_transformer_encoder_layer_opts *o) {
    const char *op = "gdl_nn_transformer_encoder_layer_ex";
    gdl_transformer_encoder_layer_opts d = o ? *o : gdl_transformer_encoder_layer_defaults();
    if (d.activation != GDL_ACT_RELU && d.activation != GDL_ACT_GELU) {
        gdl__set_error("%s: activation %d must be GDL_ACT_RELU or GDL_ACT_GELU (PyTorch's \"relu\", \"gelu\")", op,
                       (int)d.activation);
        return NULL;
    }
    return gdl__nn_tfm_layer(op, d_model, nhead, d.dim_feedforward, d.dropout, d.activation == GDL_ACT_GELU,
                             d.layer_norm_eps, d.batch_first, d.norm_first, d.bias);
}

static gdl__tfm_layer *gdl__tfm_layer_of(gdl_module *m) {
    return m && m->kind == GDL__M_CUSTOM && m->fwd == gdl__tfm_layer_self ? (gdl__tfm_layer *)m->user : NULL;
}
static gdl__tfm_stack *gdl__tfm_stack_of(gdl_module *m) {
    return m && m->kind == GDL__M_CUSTOM && m->fwd == gdl__tfm_stack_self ? (gdl__tfm_stack *)m->user : NULL;
}

/* copies every parameter and buffer of src into dst (the same architecture) */
static int gdl__tfm_copy_tensors(gdl_module *dst, gdl_module *src) {
    gdl_tensor *a[64], *b[64];
    int n = gdl_module_named_tensors(src, GDL_PARAMS_AND_BUFFERS, NULL, a, 64), i;
    if (n < 0 || n > 64 || gdl_module_named_tensors(dst, GDL_PARAMS_AND_BUFFERS, NULL, b, 64) != n) {
        gdl__set_error("gdl_nn_transformer_encoder: cannot copy the layer's tensors");
        return -1;
    }
    if (gdl_module_to(dst, gdl_module_device(src)) < 0) return -1;
    for (i = 0; i < n; i++)
        if (gdl_copy_(b[i], a[i]) < 0) return -1;
    return 0;
}

static gdl_tensor *gdl__tfm_list_fwd(gdl_module *self, gdl_tensor *x) {
    (void)x;
    gdl__set_error("%s: a ModuleList has no forward; call its layers", gdl__nn_label(self));
    return NULL;
}

GPUDL_API gdl_module *gdl_nn_transformer_encoder(gdl_module *encoder_layer, int num_layers, gdl_module *norm) {
    const char *op = "gdl_nn_transformer_encoder";
    gdl__tfm_layer *lu = gdl__tfm_layer_of(encoder_layer);
    gdl__tfm_stack *u;
    gdl_module *m, *list;
    int i;
    if (!lu || encoder_layer->parent || num_layers < 1) {
        gdl__set_error("%s: expected a TransformerEncoderLayer without a parent (gdl_nn_transformer_encoder_layer) and "
                       "num_layers >= 1, got %s and %d", op, encoder_layer ? encoder_layer->kind_name : "NULL",
                       num_layers);
        gdl__nn_drop(encoder_layer);
        gdl__nn_drop(norm);
        return NULL;
    }
    u = (gdl__tfm_stack *)GPUDL_MALLOC(sizeof *u);
    if (u) memset(u, 0, sizeof *u);
    if (!u || !(u->layers = (gdl_module **)GPUDL_MALLOC(sizeof(gdl_module *) * (size_t)num_layers))) {
        gdl__tfm_stack_free(u);
        gdl__set_error("%s: out of host memory", op);
        gdl__nn_drop(encoder_layer);
        gdl__nn_drop(norm);
        return NULL;
    }
    u->n = num_layers;
    if (!(m = gdl_nn_custom("TransformerEncoder", gdl__tfm_stack_self, u, gdl__tfm_stack_free))) {
        gdl__nn_drop(encoder_layer);
        gdl__nn_drop(norm);
        return NULL;
    }
    if (gdl_module_add_child(m, "layers", list = gdl_nn_custom("ModuleList", gdl__tfm_list_fwd, NULL, NULL)) < 0) {
        gdl__nn_drop(encoder_layer);
        gdl__nn_drop(norm);
        gdl_module_free(m);
        return NULL;
    }
    for (i = 0; i < num_layers; i++) { /* layer 0 is encoder_layer itself; the others start as its copies */
        char nm[16];
        gdl_module *c = i ? gdl__tfm_layer_new(&lu->c) : encoder_layer;
        int ok = c != NULL;
        snprintf(nm, sizeof nm, "%d", i);
        if (ok && i && gdl__tfm_copy_tensors(c, encoder_layer) < 0) {
            gdl__nn_drop(c);
            ok = 0;
        }
        if (!ok || gdl__tfm_child(list, nm, c, &u->layers[i]) < 0) { /* a failed add has freed c */
            gdl__nn_drop(norm);
            gdl_module_free(m);
            return NULL;
        }
    }
    if (norm && gdl__tfm_child(m, "norm", norm, &u->norm) < 0) {
        gdl_module_free(m);
        return NULL;
    }
    return m;
}

/* an [T, T] u8 mask of the keys after each query (non-zero: left out) */
static gdl_tensor *gdl__tfm_causal(const char *op, int64_t T, gdl_device dev) {
    int64_t s[2];
    gdl_tensor *ones;
    const gdl_backend *be;
    s[0] = s[1] = T;
    if (!(be = gdl__be(op, dev)) || !(ones = gdl__tmp(op, 2, s, GDL_F32, dev)) || be->k.fill(GDL__R(ones), ones->numel, 1) < 0)
        return NULL;
    return gdl_compare_scalar(gdl_triu(ones, 1), GDL_CMP_NE, 0);
}

/* linear2(dropout(act(linear1(x)))) */
static gdl_tensor *gdl__tfm_ff(gdl__tfm_layer *u, gdl_tensor *x) {
    x = gdl_forward(u->l1, x);
    x = x ? (u->c.gelu ? gdl_gelu(x, 0) : gdl_relu(x)) : NULL;
    return gdl_forward(u->l2, gdl_forward(u->drop, x));
}

static gdl_tensor *gdl__tfm_layer_run(gdl__tfm_layer *u, gdl_tensor *x, gdl_tensor *mask, gdl_tensor *kpm) {
    gdl_tensor *h;
    if (u->c.norm_first) {
        h = gdl_forward(u->n1, x);
        h = h ? gdl_mha_forward(u->sa, h, h, h, kpm, mask) : NULL;
        if (!h || !(x = gdl_add(x, gdl_forward(u->d1, h)))) return NULL;
        return gdl_add(x, gdl_forward(u->d2, gdl__tfm_ff(u, gdl_forward(u->n2, x))));
    }
    h = gdl_mha_forward(u->sa, x, x, x, kpm, mask);
    if (!h || !(x = gdl_forward(u->n1, gdl_add(x, gdl_forward(u->d1, h))))) return NULL;
    return gdl_forward(u->n2, gdl_add(x, gdl_forward(u->d2, gdl__tfm_ff(u, x))));
}

GPUDL_API gdl_tensor *gdl_transformer_encoder_forward(gdl_module *m, gdl_tensor *src, gdl_tensor *src_mask,
                                                      gdl_tensor *src_key_padding_mask, int is_causal) {
    const char *op = "gdl_transformer_encoder_forward";
    gdl__tfm_layer *lu = gdl__tfm_layer_of(m);
    gdl__tfm_stack *su = gdl__tfm_stack_of(m);
    gdl__tfm_cfg *c;
    gdl_tensor *x = src;
    int i;
    if (!lu && !su) {
        gdl__set_error("%s: expected a module made by gdl_nn_transformer_encoder_layer or gdl_nn_transformer_encoder, "
                       "got %s", op, m ? m->kind_name : "NULL");
        return NULL;
    }
    c = lu ? &lu->c : &gdl__tfm_layer_of(su->layers[0])->c;
    if (gdl__check_in(op, "src", src, 0) < 0) return NULL;
    if (src->ndim != 3 || src->shape[2] != c->d) {
        gdl__set_error("%s: src must be [%s, %lld] (d_model %lld), got %s", op, c->batch_first ? "N, T" : "T, N",
                       (long long)c->d, (long long)c->d, gdl_shape_str(src));
        return NULL;
    }
    if (is_causal && !src_mask && !(src_mask = gdl__tfm_causal(op, src->shape[c->batch_first ? 1 : 0], src->device)))
        return NULL;
    if (lu) {
        if ((x = gdl__tfm_layer_run(lu, src, src_mask, src_key_padding_mask))) gdl__nn_record(m, x);
        return x;
    }
    for (i = 0; i < su->n && x; i++)
        if ((x = gdl__tfm_layer_run(gdl__tfm_layer_of(su->layers[i]), x, src_mask, src_key_padding_mask)))
            gdl__nn_record(su->layers[i], x);
    if (x && su->norm) x = gdl_forward(su->norm, x);
    if (x) gdl__nn_record(m, x);
    return x;
}

static gdl_tensor *gdl__tfm_layer_self(gdl_module *self, gdl_tensor *x) {
    return gdl_transformer_encoder_forward(self, x, NULL, NULL, 0);
}
static gdl_tensor *gdl__tfm_stack_self(gdl_module *self, gdl_tensor *x) {
    return gdl_transformer_encoder_forward(self, x, NULL, NULL, 0);
}

/* ---- positional embeddings ---- */

static gdl_tensor *gdl__pos_fwd(gdl_module *self, gdl_tensor *x) {
    gdl_tensor *p = self->nparam ? self->param[0].t : self->buf[0].t;
    int64_t L = p->shape[0], d = p->shape[1];
    if (gdl__check_in("gdl_forward", "x", x, 0) < 0) return NULL;
    if (x->ndim != 3 || x->shape[2] != d) {
        gdl__set_error("%s: expected x [N, T, %lld], got %s", gdl__nn_label(self), (long long)d, gdl_shape_str(x));
        return NULL;
    }
    if (x->shape[1] > L) {
        gdl__set_error("%s: the sequence has %lld positions but max_len is %lld", gdl__nn_label(self),
                       (long long)x->shape[1], (long long)L);
        return NULL;
    }
    x = gdl_add(x, gdl_narrow(p, 0, 0, x->shape[1]));
    return self->nchild ? gdl_forward(self->child[0], x) : x;
}

static int gdl__pos_check(const char *op, int64_t max_len, int64_t d) {
    if (max_len >= 1 && d >= 1 && max_len <= INT64_MAX / d) return 0;
    gdl__set_error("%s: max_len %lld and d_model %lld must be positive", op, (long long)max_len, (long long)d);
    return -1;
}

GPUDL_API gdl_module *gdl_nn_learned_positional_embedding(int64_t max_len, int64_t d_model) {
    const char *op = "gdl_nn_learned_positional_embedding";
    int64_t s[2];
    gdl_module *m;
    if (gdl__pos_check(op, max_len, d_model) < 0 || !(m = gdl_nn_custom("PositionalEmbedding", gdl__pos_fwd, NULL, NULL)))
        return NULL;
    s[0] = max_len;
    s[1] = d_model;
    if (gdl_module_add_param(m, "weight", gdl_randn(2, s, gdl_cpu())) < 0) {
        gdl_module_free(m);
        return NULL;
    }
    return m;
}

GPUDL_API gdl_module *gdl_nn_sinusoidal_positional_encoding(int64_t max_len, int64_t d_model, double dropout) {
    const char *op = "gdl_nn_sinusoidal_positional_encoding";
    int64_t s[2], p, i;
    gdl_tensor *pe;
    gdl_module *m;
    if (gdl__pos_check(op, max_len, d_model) < 0) return NULL;
    if (!(dropout >= 0 && dropout <= 1)) {
        gdl__set_error("%s: dropout %g is not in [0,1]", op, dropout);
        return NULL;
    }
    s[0] = max_len;
    s[1] = d_model;
    if (!(m = gdl_nn_custom("PositionalEncoding", gdl__pos_fwd, NULL, NULL))) return NULL;
    if (!(pe = gdl_zeros(2, s, GDL_F32, gdl_cpu())) || gdl_module_add_buffer(m, "pe", pe) < 0 ||
        gdl_module_add_child(m, "dropout", gdl_nn_dropout(dropout)) < 0) {
        gdl_module_free(m);
        return NULL;
    }
    for (p = 0; p < max_len; p++)
        for (i = 0; i < d_model; i++) { /* the tutorial's div_term, exp(2i * -ln(10000) / d), in float as torch */
            float div = (float)exp((double)(i - i % 2) * (-log(10000.0) / (double)d_model));
            float a = (float)p * div;
            ((gdl_real *)pe->data)[p * d_model + i] = (gdl_real)(i % 2 ? cosf(a) : sinf(a));
        }
    return m;
}

/* ---- weight tying ---- */

/* the index of parameter `path` in *o's list, -1 + error when path names none */
static int gdl__tie_find(const char *op, gdl_module *root, const char *path, gdl_module **o) {
    const char *leaf = NULL;
    int i;
    if (!(*o = gdl__nn_walk(op, root, path, 1, &leaf))) return -1;
    for (i = 0; i < (*o)->nparam; i++)
        if (!strcmp((*o)->param[i].name, leaf)) return i;
    gdl__set_error("%s: \"%s\" is not a parameter of %s", op, path, root->kind_name);
    return -1;
}

GPUDL_API int gdl_module_tie(gdl_module *root, const char *name, const char *target) {
    const char *op = "gdl_module_tie";
    gdl_module *o, *ot;
    gdl_tensor *t;
    int k, kt;
    if (!root || !name || !target) {
        gdl__null_arg(op, !root ? "root" : !name ? "name" : "target");
        return -1;
    }
    if ((k = gdl__tie_find(op, root, name, &o)) < 0 || (kt = gdl__tie_find(op, root, target, &ot)) < 0) return -1;
    t = ot->param[kt].t;
    if (o->param[k].tied || o->param[k].t == t) {
        gdl__set_error("%s: \"%s\" is already tied", op, name);
        return -1;
    }
    if (!gdl_same_shape(o->param[k].t, t) || !gdl_device_equal(o->param[k].t->device, t->device)) {
        gdl__set_error("%s: \"%s\" %s on %s and \"%s\" %s on %s differ in shape or device", op, name,
                       gdl_shape_str(o->param[k].t), gdl_device_str(o->param[k].t->device), target, gdl_shape_str(t),
                       gdl_device_str(t->device));
        return -1;
    }
    gdl_free(o->param[k].t);
    o->param[k].t = t;
    o->param[k].tied = 1;
    return 0;
}

/* (src/train/checkpoints.h) the tensor that a tied parameter's (unprefixed) name refers to, NULL when name is not one */
static gdl_tensor *gdl__nn_tied_tensor(gdl_module *root, const char *name) {
    const char *leaf = NULL;
    gdl_module *o;
    int i;
    char prev[sizeof gdl__err];
    memcpy(prev, gdl__err, sizeof prev); /* a failed walk is an answer here, not an error */
    o = gdl__nn_walk("gdl__nn_tied_tensor", root, name, 1, &leaf);
    memcpy(gdl__err, prev, sizeof prev);
    for (i = 0; o && i < o->nparam; i++)
        if (o->param[i].tied && !strcmp(o->param[i].name, leaf)) return o->param[i].t;
    return NULL;
}
