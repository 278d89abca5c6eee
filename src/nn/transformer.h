/* src/nn/transformer.h — nn.TransformerEncoderLayer, nn.TransformerEncoder, nn.TransformerDecoderLayer,
   nn.TransformerDecoder and nn.Transformer as custom modules over nn.MultiheadAttention (src/nn/attention.h),
   Linear, LayerNorm and Dropout children under PyTorch's names; the positional embeddings; weight tying (a
   parameter entry that refers to another module's tensor without owning it). */

typedef struct gdl__tfm_cfg {
    int64_t d, ff;
    int nhead, batch_first, norm_first, bias, decoder;
    gdl_act act;     /* the feed-forward's activation, unless fn */
    gdl_unary_fn fn; /* a callable activation (PyTorch's activation=<function>) */
    double dropout, eps;
} gdl__tfm_cfg;

/* an encoder layer (sa, ff, n1, n2, d1, d2) or a decoder layer (also ca, n3, d3) */
typedef struct gdl__tfm_layer {
    gdl__tfm_cfg c;
    gdl_module *sa, *ca, *l1, *drop, *l2, *n1, *n2, *n3, *d1, *d2, *d3;
} gdl__tfm_layer;

typedef struct gdl__tfm_stack {
    int n;
    gdl_module **layers; /* the children of "layers" */
    gdl_module *norm;    /* NULL without a final norm */
} gdl__tfm_stack;

typedef struct gdl__tfm_full {
    gdl_module *enc, *dec; /* nn.Transformer's encoder and decoder */
} gdl__tfm_full;

/* the forwards gdl_forward calls; each kind of module has its own, which tells the kinds apart (a decoder's and
   nn.Transformer's report that they take two inputs) */
static gdl_tensor *gdl__tfm_layer_self(gdl_module *self, gdl_tensor *x);
static gdl_tensor *gdl__tfm_stack_self(gdl_module *self, gdl_tensor *x);
static gdl_tensor *gdl__tfm_dec_layer_self(gdl_module *self, gdl_tensor *x);
static gdl_tensor *gdl__tfm_dec_stack_self(gdl_module *self, gdl_tensor *x);
static gdl_tensor *gdl__tfm_full_self(gdl_module *self, gdl_tensor *x);

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
        gdl__free(m->param[1].t);
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

/* the layers' children in PyTorch's order of construction (and of the state dict): self_attn, [multihead_attn,]
   linear1, dropout, linear2, norm1, norm2, [norm3,] dropout1, dropout2[, dropout3] */
static gdl_module *gdl__tfm_layer_new(const gdl__tfm_cfg *c) {
    const char *op = c->decoder ? "gdl_transformer_decoder_layer" : "gdl_nn_transformer_encoder_layer";
    gdl__tfm_layer *u = (gdl__tfm_layer *)gdl__zalloc(op, sizeof *u);
    gdl_module *m;
    if (!u) return NULL;
    u->c = *c;
    if (!(m = gdl_nn_custom(c->decoder ? "TransformerDecoderLayer" : "TransformerEncoderLayer",
                            c->decoder ? gdl__tfm_dec_layer_self : gdl__tfm_layer_self, u, gdl__mha_free)))
        return NULL;
    if (gdl__tfm_child(m, "self_attn", gdl_nn_multihead_attention(c->d, c->nhead, c->dropout, c->bias, c->batch_first),
                       &u->sa) < 0 ||
        (c->decoder && gdl__tfm_child(m, "multihead_attn", gdl_nn_multihead_attention(c->d, c->nhead, c->dropout,
                                                                                      c->bias, c->batch_first),
                                      &u->ca) < 0) ||
        gdl__tfm_child(m, "linear1", gdl_nn_linear(c->d, c->ff, c->bias), &u->l1) < 0 ||
        gdl__tfm_child(m, "dropout", gdl_nn_dropout(c->dropout), &u->drop) < 0 ||
        gdl__tfm_child(m, "linear2", gdl_nn_linear(c->ff, c->d, c->bias), &u->l2) < 0 ||
        gdl__tfm_child(m, "norm1", gdl__tfm_norm(c->d, c->eps, c->bias), &u->n1) < 0 ||
        gdl__tfm_child(m, "norm2", gdl__tfm_norm(c->d, c->eps, c->bias), &u->n2) < 0 ||
        (c->decoder && gdl__tfm_child(m, "norm3", gdl__tfm_norm(c->d, c->eps, c->bias), &u->n3) < 0) ||
        gdl__tfm_child(m, "dropout1", gdl_nn_dropout(c->dropout), &u->d1) < 0 ||
        gdl__tfm_child(m, "dropout2", gdl_nn_dropout(c->dropout), &u->d2) < 0 ||
        (c->decoder && gdl__tfm_child(m, "dropout3", gdl_nn_dropout(c->dropout), &u->d3) < 0)) {
        gdl_module_free(m);
        return NULL;
    }
    return m;
}

/* the activation from its three spellings (gdl_unary_fn's comment): fn, else name, else act; -1 + error */
static int gdl__tfm_act(const char *op, gdl_act act, const char *name, gdl_unary_fn fn, gdl__tfm_cfg *c) {
    c->fn = fn;
    c->act = act;
    if (fn) return 0;
    if (name) {
        if (!strcmp(name, "relu")) c->act = GDL_ACT_RELU;
        else if (!strcmp(name, "gelu")) c->act = GDL_ACT_GELU;
        else if (!strcmp(name, "gelu_tanh")) c->act = GDL_ACT_GELU_TANH;
        else {
            gdl__set_error("%s: activation \"%s\" must be \"relu\", \"gelu\" or \"gelu_tanh\" (or pass activation_fn)",
                           op, name);
            return -1;
        }
        return 0;
    }
    if (act != GDL_ACT_RELU && act != GDL_ACT_GELU && act != GDL_ACT_GELU_TANH) {
        gdl__set_error("%s: activation %d must be GDL_ACT_RELU, GDL_ACT_GELU or GDL_ACT_GELU_TANH", op, (int)act);
        return -1;
    }
    return 0;
}

/* the checks and the configuration of a layer (c's activation already set) */
static int gdl__tfm_cfg_set(const char *op, gdl__tfm_cfg *c, int64_t d_model, int nhead, int64_t dim_feedforward,
                            double dropout, double layer_norm_eps, int batch_first, int norm_first, int bias) {
    if (d_model < 1 || nhead < 1 || d_model % nhead || dim_feedforward < 1 || !(dropout >= 0 && dropout <= 1) ||
        !(layer_norm_eps > 0)) {
        gdl__set_error("%s: d_model %lld must be a positive multiple of nhead %d, "
                       "dim_feedforward %lld positive, dropout %g in [0,1] and layer_norm_eps %g > 0", op,
                       (long long)d_model, nhead, (long long)dim_feedforward, dropout, layer_norm_eps);
        return -1;
    }
    c->d = d_model;
    c->ff = dim_feedforward;
    c->nhead = nhead;
    c->batch_first = batch_first != 0;
    c->norm_first = norm_first != 0;
    c->bias = bias != 0;
    c->dropout = dropout;
    c->eps = layer_norm_eps;
    return 0;
}

GPUDL_API gdl_module *gdl_nn_transformer_encoder_layer(int64_t d_model, int nhead, int64_t dim_feedforward,
                                                       double dropout, int gelu, double layer_norm_eps,
                                                       int batch_first, int norm_first, int bias) {
    gdl__tfm_cfg c;
    memset(&c, 0, sizeof c);
    c.act = gelu ? GDL_ACT_GELU : GDL_ACT_RELU;
    if (gdl__tfm_cfg_set("gdl_nn_transformer_encoder_layer", &c, d_model, nhead, dim_feedforward, dropout,
                         layer_norm_eps, batch_first, norm_first, bias) < 0)
        return NULL;
    return gdl__tfm_layer_new(&c);
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
/* a layer of either kind from its options (o NULL: the defaults) */
static gdl_module *gdl__tfm_layer_ex(const char *op, int decoder, int64_t d_model, int nhead,
                                     const gdl_transformer_encoder_layer_opts *o) {
    gdl_transformer_encoder_layer_opts d = o ? *o : gdl_transformer_encoder_layer_defaults();
    gdl__tfm_cfg c;
    memset(&c, 0, sizeof c);
    c.decoder = decoder;
    if (gdl__tfm_act(op, d.activation, d.activation_name, d.activation_fn, &c) < 0 ||
        gdl__tfm_cfg_set(op, &c, d_model, nhead, d.dim_feedforward, d.dropout, d.layer_norm_eps, d.batch_first,
                         d.norm_first, d.bias) < 0)
        return NULL;
    return gdl__tfm_layer_new(&c);
}
GPUDL_API gdl_module *gdl_nn_transformer_encoder_layer_ex(int64_t d_model, int nhead,
                                                          const gdl_transformer_encoder_layer_opts *o) {
    return gdl__tfm_layer_ex("gdl_nn_transformer_encoder_layer_ex", 0, d_model, nhead, o);
}

GPUDL_API gdl_transformer_decoder_layer_opts gdl_transformer_decoder_layer_defaults(void) {
    return gdl_transformer_encoder_layer_defaults();
}
GPUDL_API gdl_module *gdl_transformer_decoder_layer(int64_t d_model, int nhead,
                                                    const gdl_transformer_decoder_layer_opts *o) {
    return gdl__tfm_layer_ex("gdl_transformer_decoder_layer", 1, d_model, nhead, o);
}

/* m's state when m is a custom module whose forward is enc (dec: -1 or 0) or dec_fwd (dec: -1 or 1), else NULL */
static void *gdl__tfm_user(gdl_module *m, int dec, gdl_forward_fn enc, gdl_forward_fn dec_fwd) {
    if (!m || m->kind != GDL__M_CUSTOM) return NULL;
    return (dec != 1 && m->fwd == enc) || (dec != 0 && m->fwd == dec_fwd) ? m->user : NULL;
}
/* the layer of either kind behind m, NULL when m is none; dec: -1 either kind, 0 encoder, 1 decoder */
static gdl__tfm_layer *gdl__tfm_layer_kind(gdl_module *m, int dec) {
    return (gdl__tfm_layer *)gdl__tfm_user(m, dec, gdl__tfm_layer_self, gdl__tfm_dec_layer_self);
}
static gdl__tfm_layer *gdl__tfm_layer_of(gdl_module *m) { return gdl__tfm_layer_kind(m, 0); }
/* a stack of either kind (TransformerEncoder, TransformerDecoder), NULL when m is none; dec as above */
static gdl__tfm_stack *gdl__tfm_stack_kind(gdl_module *m, int dec) {
    return (gdl__tfm_stack *)gdl__tfm_user(m, dec, gdl__tfm_stack_self, gdl__tfm_dec_stack_self);
}
static gdl__tfm_stack *gdl__tfm_stack_of(gdl_module *m) { return gdl__tfm_stack_kind(m, 0); }
static gdl__tfm_full *gdl__tfm_full_of(gdl_module *m) {
    return m && m->kind == GDL__M_CUSTOM && m->fwd == gdl__tfm_full_self ? (gdl__tfm_full *)m->user : NULL;
}

/* copies every parameter and buffer of src into dst (the same architecture) */
static int gdl__tfm_copy_tensors(const char *op, gdl_module *dst, gdl_module *src) {
    gdl_tensor *a[64], *b[64];
    int n = gdl_module_named_tensors(src, GDL_PARAMS_AND_BUFFERS, NULL, a, 64), i;
    if (n < 0 || n > 64 || gdl_module_named_tensors(dst, GDL_PARAMS_AND_BUFFERS, NULL, b, 64) != n) {
        gdl__set_error("%s: cannot copy the layer's tensors", op);
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

/* TransformerEncoder / TransformerDecoder: num_layers copies of layer under layers.<i>, then norm */
static gdl_module *gdl__tfm_stack_new(const char *op, int dec, gdl_module *layer, int num_layers, gdl_module *norm) {
    gdl__tfm_layer *lu = gdl__tfm_layer_kind(layer, dec);
    gdl__tfm_stack *u;
    gdl_module *m, *list;
    int i;
    if (!lu || layer->parent || num_layers < 1) {
        gdl__set_error("%s: expected a %s without a parent and num_layers >= 1, got %s and %d", op,
                       dec ? "TransformerDecoderLayer (gdl_transformer_decoder_layer)"
                           : "TransformerEncoderLayer (gdl_nn_transformer_encoder_layer)",
                       layer ? layer->kind_name : "NULL", num_layers);
        gdl__nn_drop(layer);
        gdl__nn_drop(norm);
        return NULL;
    }
    u = (gdl__tfm_stack *)GPUDL_MALLOC(sizeof *u);
    if (u) memset(u, 0, sizeof *u);
    if (!u || !(u->layers = (gdl_module **)GPUDL_MALLOC(sizeof(gdl_module *) * (size_t)num_layers))) {
        gdl__tfm_stack_free(u);
        gdl__set_error("%s: out of host memory", op);
        gdl__nn_drop(layer);
        gdl__nn_drop(norm);
        return NULL;
    }
    u->n = num_layers;
    if (!(m = gdl_nn_custom(dec ? "TransformerDecoder" : "TransformerEncoder",
                            dec ? gdl__tfm_dec_stack_self : gdl__tfm_stack_self, u, gdl__tfm_stack_free))) {
        gdl__nn_drop(layer);
        gdl__nn_drop(norm);
        return NULL;
    }
    if (gdl_module_add_child(m, "layers", list = gdl_nn_custom("ModuleList", gdl__tfm_list_fwd, NULL, NULL)) < 0) {
        gdl__nn_drop(layer);
        gdl__nn_drop(norm);
        gdl_module_free(m);
        return NULL;
    }
    for (i = 0; i < num_layers; i++) { /* layer 0 is the layer itself; the others start as its copies */
        char nm[16];
        gdl_module *c = i ? gdl__tfm_layer_new(&lu->c) : layer;
        int ok = c != NULL;
        snprintf(nm, sizeof nm, "%d", i);
        if (ok && i && gdl__tfm_copy_tensors(op, c, layer) < 0) {
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

GPUDL_API gdl_module *gdl_nn_transformer_encoder(gdl_module *encoder_layer, int num_layers, gdl_module *norm) {
    return gdl__tfm_stack_new("gdl_nn_transformer_encoder", 0, encoder_layer, num_layers, norm);
}
GPUDL_API gdl_module *gdl_transformer_decoder(gdl_module *decoder_layer, int num_layers, gdl_module *norm) {
    return gdl__tfm_stack_new("gdl_transformer_decoder", 1, decoder_layer, num_layers, norm);
}

GPUDL_API gdl_transformer_opts gdl_transformer_defaults(void) {
    gdl_transformer_encoder_layer_opts l = gdl_transformer_encoder_layer_defaults(); /* its layers': one source */
    gdl_transformer_opts o;
    memset(&o, 0, sizeof o);
    o.d_model = 512;
    o.nhead = 8;
    o.num_encoder_layers = o.num_decoder_layers = 6;
    o.dim_feedforward = l.dim_feedforward, o.dropout = l.dropout, o.activation = l.activation;
    o.layer_norm_eps = l.layer_norm_eps, o.bias = l.bias;
    return o;
}

/* PyTorch's Transformer._reset_parameters: xavier_uniform_ on every parameter of two or more dims */
static int gdl__tfm_xavier_all(const char *op, gdl_module *m) {
    int n = gdl_module_named_tensors(m, GDL_PARAMS, NULL, NULL, 0), i;
    gdl_tensor **t;
    if (n < 0) return -1;
    if (!(t = (gdl_tensor **)gdl__zalloc(op, sizeof(gdl_tensor *) * (size_t)(n + 1)))) return -1;
    gdl_module_named_tensors(m, GDL_PARAMS, NULL, t, n);
    for (i = 0; i < n; i++) {
        gdl_tensor *x = t[i], *r;
        int64_t fan_in, fan_out, rf = 1;
        int d;
        double a;
        if (x->ndim < 2) continue;
        for (d = 2; d < x->ndim; d++) rf *= x->shape[d];
        fan_in = x->shape[1] * rf;
        fan_out = x->shape[0] * rf;
        a = sqrt(6.0 / (double)(fan_in + fan_out));
        if (!(r = gdl_uniform(x->ndim, x->shape, -a, a, x->device)) || gdl_copy_(x, r) < 0) {
            gdl_free(r);
            GPUDL_FREE(t);
            return -1;
        }
        gdl_free(r);
    }
    GPUDL_FREE(t);
    return 0;
}

GPUDL_API gdl_module *gdl_transformer(const gdl_transformer_opts *o) {
    const char *op = "gdl_transformer";
    gdl_transformer_opts d = o ? *o : gdl_transformer_defaults();
    gdl__tfm_cfg c;
    gdl__tfm_full *u;
    gdl_module *m, *enc, *dec;
    memset(&c, 0, sizeof c);
    if (d.num_encoder_layers < 1 || d.num_decoder_layers < 1) {
        gdl__set_error("%s: num_encoder_layers %d and num_decoder_layers %d must be >= 1", op, d.num_encoder_layers,
                       d.num_decoder_layers);
        return NULL;
    }
    if (gdl__tfm_act(op, d.activation, d.activation_name, d.activation_fn, &c) < 0 ||
        gdl__tfm_cfg_set(op, &c, d.d_model, d.nhead, d.dim_feedforward, d.dropout, d.layer_norm_eps, d.batch_first,
                         d.norm_first, d.bias) < 0 ||
        !(u = (gdl__tfm_full *)gdl__zalloc(op, sizeof *u)))
        return NULL;
    if (!(m = gdl_nn_custom("Transformer", gdl__tfm_full_self, u, gdl__mha_free))) return NULL;
    enc = gdl__tfm_stack_new(op, 0, gdl__tfm_layer_new(&c), d.num_encoder_layers, gdl__tfm_norm(c.d, c.eps, c.bias));
    c.decoder = 1;
    if (gdl__tfm_child(m, "encoder", enc, &u->enc) < 0 ||
        gdl__tfm_child(m, "decoder",
                       gdl__tfm_stack_new(op, 1, gdl__tfm_layer_new(&c), d.num_decoder_layers,
                                          gdl__tfm_norm(c.d, c.eps, c.bias)),
                       &dec) < 0 ||
        gdl__tfm_xavier_all(op, m) < 0) {
        gdl_module_free(m);
        return NULL;
    }
    u->dec = dec;
    return m;
}

GPUDL_API gdl_tensor *gdl_generate_square_subsequent_mask(int64_t T) {
    const char *op = "gdl_generate_square_subsequent_mask";
    int64_t s[2], i, j;
    gdl_tensor *t;
    if (T < 1 || T > ((int64_t)1 << 31)) {
        gdl__set_error("%s: T %lld must be in [1, 2^31]", op, (long long)T);
        return NULL;
    }
    s[0] = s[1] = T;
    if (!(t = gdl_zeros(2, s, GDL_F32, gdl_cpu()))) return NULL;
    for (i = 0; i < T; i++)
        for (j = i + 1; j < T; j++) ((gdl_real *)t->data)[i * T + j] = (gdl_real)-INFINITY;
    return t;
}

/* linear2(dropout(act(linear1(x)))); linear1 and a named activation run as one gdl_linear_act where
   Sequential would fuse them (gdl_nn_set_fusion: the same bits, one pass over the hidden layer fewer) */
static gdl_tensor *gdl__tfm_ff(gdl__tfm_layer *u, gdl_tensor *x) {
    if (!u->c.fn && u->l1->kind == GDL__M_LINEAR && gdl__nn_fuse_ok(u->l1, x)) {
        if (!(x = gdl__nn_forward_act(u->l1, x, u->c.act))) {
            gdl__nn_fwd_error(u->l1);
            return NULL;
        }
    } else {
        if (!(x = gdl_forward(u->l1, x))) return NULL;
        x = u->c.fn ? u->c.fn(x) : u->c.act == GDL_ACT_RELU ? gdl_relu(x) : gdl_gelu(x, u->c.act == GDL_ACT_GELU_TANH);
    }
    return gdl_forward(u->l2, gdl_forward(u->drop, x));
}

/* the masks of one attention of a layer: mask, key padding mask, causal (a flag to the attention when mask is NULL) */
typedef struct gdl__tfm_att {
    gdl_tensor *mask, *kpm;
    int causal;
} gdl__tfm_att;
static gdl__tfm_att gdl__tfm_att_of(gdl_tensor *mask, gdl_tensor *kpm, int causal) {
    gdl__tfm_att a;
    a.mask = mask;
    a.kpm = kpm;
    a.causal = causal;
    return a;
}

/* one attention of a layer: mha(q, kv, kv) with its masks */
static gdl_tensor *gdl__tfm_attend(gdl_module *mha, gdl_tensor *q, gdl_tensor *kv, const gdl__tfm_att *a) {
    gdl_mha_args g = gdl_mha_args_defaults();
    g.attn_mask = a->mask;
    g.key_padding_mask = a->kpm;
    g.is_causal = a->causal && !a->mask;
    return q && kv ? gdl__mha_run("gdl_mha_forward", mha, q, kv, kv, &g, NULL) : NULL;
}

static gdl_tensor *gdl__tfm_layer_run(gdl__tfm_layer *u, gdl_tensor *x, const gdl__tfm_att *sa) {
    gdl_tensor *h;
    if (u->c.norm_first) {
        h = gdl_forward(u->n1, x);
        if (!(h = gdl__tfm_attend(u->sa, h, h, sa)) || !(x = gdl_add(x, gdl_forward(u->d1, h)))) return NULL;
        return gdl_add(x, gdl_forward(u->d2, gdl__tfm_ff(u, gdl_forward(u->n2, x))));
    }
    h = gdl__tfm_attend(u->sa, x, x, sa);
    if (!h || !(x = gdl_forward(u->n1, gdl_add(x, gdl_forward(u->d1, h))))) return NULL;
    return gdl_forward(u->n2, gdl_add(x, gdl_forward(u->d2, gdl__tfm_ff(u, x))));
}

/* the decoder layer: sa the target's self-attention masks, ca the memory's */
static gdl_tensor *gdl__tfm_dec_run(gdl__tfm_layer *u, gdl_tensor *x, gdl_tensor *mem, const gdl__tfm_att *sa,
                                    const gdl__tfm_att *ca) {
    gdl_tensor *h;
    if (u->c.norm_first) {
        h = gdl_forward(u->n1, x);
        if (!(h = gdl__tfm_attend(u->sa, h, h, sa)) || !(x = gdl_add(x, gdl_forward(u->d1, h)))) return NULL;
        if (!(h = gdl__tfm_attend(u->ca, gdl_forward(u->n2, x), mem, ca)) || !(x = gdl_add(x, gdl_forward(u->d2, h))))
            return NULL;
        return gdl_add(x, gdl_forward(u->d3, gdl__tfm_ff(u, gdl_forward(u->n3, x))));
    }
    h = gdl__tfm_attend(u->sa, x, x, sa);
    if (!h || !(x = gdl_forward(u->n1, gdl_add(x, gdl_forward(u->d1, h))))) return NULL;
    h = gdl__tfm_attend(u->ca, x, mem, ca);
    if (!h || !(x = gdl_forward(u->n2, gdl_add(x, gdl_forward(u->d2, h))))) return NULL;
    return gdl_forward(u->n3, gdl_add(x, gdl_forward(u->d3, gdl__tfm_ff(u, x))));
}

/* checks x (what: its argument's name) against the layers' d_model: [N, T, d] / [T, N, d], or unbatched [T, d] when
   *unb allows it (-1: either, set here; 0 / 1: as the first input) */
static int gdl__tfm_check_x(const char *op, const char *what, gdl_tensor *x, const gdl__tfm_cfg *c, int *unb) {
    if (gdl__check_in(op, what, x, 0) < 0) return -1;
    if ((x->ndim != 3 && x->ndim != 2) || x->shape[x->ndim - 1] != c->d || (*unb >= 0 && (x->ndim == 2) != *unb)) {
        gdl__set_error("%s: %s must be [%s, %lld] (d_model %lld), got %s (or unbatched [T, %lld]%s)", op, what,
                       c->batch_first ? "N, T" : "T, N", (long long)c->d, (long long)c->d, gdl_shape_str(x),
                       (long long)c->d, *unb >= 0 ? ", as the other input" : "");
        return -1;
    }
    *unb = x->ndim == 2;
    return 0;
}

/* an unbatched input as a batch of one: x [T, d] -> [1, T, d] or [T, 1, d] (its masks: gdl__tfm_check_masks) */
static gdl_tensor *gdl__tfm_batch1(gdl_tensor *x, const gdl__tfm_cfg *c) {
    return gdl__mha_unsqueeze(x, c->batch_first ? 0 : 1);
}

/* checks the masks of one attention (names: the mask's and the key padding mask's) against its query length L, key
   length S, batch N (the input batched: bat) and heads H, dtype dt and device dev; an unbatched key padding mask [S]
   becomes [1, S] (a->kpm set); -1 + error */
static int gdl__tfm_check_masks(const char *op, const char *mname, const char *kname, gdl__tfm_att *a, int64_t L,
                                int64_t S, int64_t N, int H, int bat, gdl_dtype dt, gdl_device dev) {
    gdl_tensor *m = a->mask, *k = a->kpm;
    int k2;
    if (m) {
        if (gdl__check_in(op, mname, m, 0) < 0) return -1;
        if (!((m->ndim == 2 && m->shape[0] == L && m->shape[1] == S) ||
              (m->ndim == 3 && m->shape[0] == N * H && m->shape[1] == L && m->shape[2] == S))) {
            gdl__set_error("%s: %s must be [%lld, %lld] or [N*nhead, %lld, %lld] = [%lld, %lld, %lld], got %s", op, mname,
                           (long long)L, (long long)S, (long long)L, (long long)S, (long long)(N * H), (long long)L,
                           (long long)S, gdl_shape_str(m));
            return -1;
        }
    }
    if (k) {
        if (gdl__check_in(op, kname, k, 0) < 0) return -1;
        k2 = bat ? k->ndim == 2 && k->shape[0] == N && k->shape[1] == S : k->ndim == 1 && k->shape[0] == S;
        if (!k2 && bat) {
            gdl__set_error("%s: %s must be [N, S] = [%lld, %lld], got %s", op, kname, (long long)N, (long long)S,
                           gdl_shape_str(k));
            return -1;
        }
        if (!k2) {
            gdl__set_error("%s: %s must be [%lld] (the input unbatched), got %s", op, kname, (long long)S, gdl_shape_str(k));
            return -1;
        }
    }
    for (k2 = 0; k2 < 2; k2++) {
        gdl_tensor *t = k2 ? k : m;
        if (!t) continue;
        if (t->dtype != GDL_U8 && t->dtype != dt) {
            gdl__set_error("%s: %s must be u8 (bool) or of the input's dtype %s, got %s %s", op, k2 ? kname : mname,
                           gdl_dtype_name(dt), gdl_dtype_name(t->dtype), gdl_shape_str(t));
            return -1;
        }
        if (!gdl_device_equal(t->device, dev)) {
            gdl__set_error("%s: %s %s is on %s, the input on %s", op, k2 ? kname : mname, gdl_shape_str(t),
                           gdl_device_str(t->device), gdl_device_str(dev));
            return -1;
        }
    }
    if (k && !bat && !(a->kpm = gdl__mha_unsqueeze(k, 0))) return -1;
    return 0;
}

/* an encoder layer or stack on src (batched), norm included */
static gdl_tensor *gdl__tfm_enc(gdl_module *m, gdl_tensor *x, const gdl__tfm_att *sa) {
    gdl__tfm_layer *lu = gdl__tfm_layer_of(m);
    gdl__tfm_stack *su = gdl__tfm_stack_of(m);
    int i;
    if (lu) {
        if ((x = gdl__tfm_layer_run(lu, x, sa))) gdl__nn_record(m, x);
        return x;
    }
    for (i = 0; i < su->n && x; i++)
        if ((x = gdl__tfm_layer_run(gdl__tfm_layer_of(su->layers[i]), x, sa))) gdl__nn_record(su->layers[i], x);
    if (x && su->norm) x = gdl_forward(su->norm, x);
    if (x) gdl__nn_record(m, x);
    return x;
}

/* the batch of x [N, T, d] / [T, N, d] */
static int64_t gdl__tfm_batch(const gdl_tensor *x, const gdl__tfm_cfg *c) { return x->shape[c->batch_first ? 0 : 1]; }

/* the encoder part of m (a Transformer's encoder, a TransformerEncoder or layer) with the masks; unbatched input
   handled; NULL + error */
static gdl_tensor *gdl__tfm_encode(const char *op, gdl_module *m, gdl_tensor *src, gdl_tensor *mask, gdl_tensor *kpm,
                                   int causal) {
    gdl__tfm_full *fu = gdl__tfm_full_of(m);
    gdl_module *e = fu ? fu->enc : m;
    gdl__tfm_layer *lu = gdl__tfm_layer_of(e);
    gdl__tfm_stack *su = gdl__tfm_stack_of(e);
    const gdl__tfm_cfg *c;
    gdl__tfm_att sa;
    gdl_tensor *x;
    int unb = -1;
    if (!lu && !su) {
        gdl__set_error("%s: expected a module made by gdl_nn_transformer_encoder_layer, gdl_nn_transformer_encoder or "
                       "gdl_transformer, got %s", op, m ? m->kind_name : "NULL");
        return NULL;
    }
    c = lu ? &lu->c : &gdl__tfm_layer_of(su->layers[0])->c;
    if (gdl__tfm_check_x(op, "src", src, c, &unb) < 0) return NULL;
    sa = gdl__tfm_att_of(mask, kpm, causal);
    if (gdl__tfm_check_masks(op, "src_mask", "src_key_padding_mask", &sa, src->shape[unb ? 0 : c->batch_first],
                             src->shape[unb ? 0 : c->batch_first], unb ? 1 : gdl__tfm_batch(src, c), c->nhead, !unb,
                             src->dtype, src->device) < 0)
        return NULL;
    if (unb && !(src = gdl__tfm_batch1(src, c))) return NULL;
    if (!(x = gdl__tfm_enc(e, src, &sa))) return NULL;
    return unb ? gdl__mha_squeeze(x, c->batch_first ? 0 : 1) : x;
}

GPUDL_API gdl_tensor *gdl_transformer_encoder_forward(gdl_module *m, gdl_tensor *src, gdl_tensor *src_mask,
                                                      gdl_tensor *src_key_padding_mask, int is_causal) {
    return gdl__tfm_encode("gdl_transformer_encoder_forward", m, src, src_mask, src_key_padding_mask, is_causal);
}

GPUDL_API gdl_tensor *gdl_transformer_encode(gdl_module *m, gdl_tensor *src, const gdl_transformer_masks *masks) {
    gdl_transformer_masks z;
    memset(&z, 0, sizeof z);
    if (masks) z = *masks;
    return gdl__tfm_encode("gdl_transformer_encode", m, src, z.src_mask, z.src_key_padding_mask, z.src_is_causal);
}

/* the decoder part of m (a Transformer's decoder, a TransformerDecoder or layer) with the masks; unbatched input
   handled; NULL + error naming op */
static gdl_tensor *gdl__tfm_decode(const char *op, gdl_module *m, gdl_tensor *tgt, gdl_tensor *memory,
                                   const gdl_transformer_masks *masks) {
    gdl__tfm_full *fu = gdl__tfm_full_of(m);
    gdl_module *dm = fu ? fu->dec : m;
    gdl__tfm_layer *lu = gdl__tfm_layer_kind(dm, 1);
    gdl__tfm_stack *su = gdl__tfm_stack_kind(dm, 1);
    const gdl__tfm_cfg *c;
    gdl_transformer_masks z;
    gdl__tfm_att sa, ca;
    gdl_tensor *x;
    int64_t T, S, N;
    int unb = -1, i;
    if (!lu && !su) {
        gdl__set_error("%s: expected a module made by gdl_transformer_decoder_layer, gdl_transformer_decoder or "
                       "gdl_transformer, got %s", op, m ? m->kind_name : "NULL");
        return NULL;
    }
    memset(&z, 0, sizeof z);
    if (masks) z = *masks;
    c = lu ? &lu->c : &gdl__tfm_layer_kind(su->layers[0], 1)->c;
    if (gdl__tfm_check_x(op, "tgt", tgt, c, &unb) < 0 || gdl__tfm_check_x(op, "memory", memory, c, &unb) < 0) return NULL;
    T = tgt->shape[unb ? 0 : c->batch_first];
    S = memory->shape[unb ? 0 : c->batch_first];
    N = unb ? 1 : gdl__tfm_batch(tgt, c);
    if (!unb && gdl__tfm_batch(memory, c) != N) {
        gdl__set_error("%s: tgt %s and memory %s must agree in batch", op, gdl_shape_str(tgt), gdl_shape_str(memory));
        return NULL;
    }
    sa = gdl__tfm_att_of(z.tgt_mask, z.tgt_key_padding_mask, z.tgt_is_causal);
    ca = gdl__tfm_att_of(z.memory_mask, z.memory_key_padding_mask, z.memory_is_causal);
    if (gdl__tfm_check_masks(op, "tgt_mask", "tgt_key_padding_mask", &sa, T, T, N, c->nhead, !unb, tgt->dtype,
                             tgt->device) < 0 ||
        gdl__tfm_check_masks(op, "memory_mask", "memory_key_padding_mask", &ca, T, S, N, c->nhead, !unb, tgt->dtype,
                             tgt->device) < 0)
        return NULL;
    if (unb && (!(tgt = gdl__tfm_batch1(tgt, c)) || !(memory = gdl__tfm_batch1(memory, c)))) return NULL;
    x = tgt;
    if (lu) {
        if ((x = gdl__tfm_dec_run(lu, x, memory, &sa, &ca))) gdl__nn_record(dm, x);
    } else {
        for (i = 0; i < su->n && x; i++)
            if ((x = gdl__tfm_dec_run(gdl__tfm_layer_kind(su->layers[i], 1), x, memory, &sa, &ca)))
                gdl__nn_record(su->layers[i], x);
        if (x && su->norm) x = gdl_forward(su->norm, x);
        if (x) gdl__nn_record(dm, x);
    }
    if (!x) return NULL;
    return unb ? gdl__mha_squeeze(x, c->batch_first ? 0 : 1) : x;
}

GPUDL_API gdl_tensor *gdl_transformer_decode(gdl_module *m, gdl_tensor *tgt, gdl_tensor *memory,
                                             const gdl_transformer_masks *masks) {
    return gdl__tfm_decode("gdl_transformer_decode", m, tgt, memory, masks);
}

GPUDL_API gdl_tensor *gdl_transformer_forward(gdl_module *m, gdl_tensor *src, gdl_tensor *tgt,
                                              const gdl_transformer_masks *masks) {
    const char *op = "gdl_transformer_forward";
    gdl__tfm_full *fu = gdl__tfm_full_of(m);
    gdl_tensor *mem, *out;
    int bf;
    if (!fu) {
        gdl__set_error("%s: expected a module made by gdl_transformer, got %s", op, m ? m->kind_name : "NULL");
        return NULL;
    }
    if (gdl__check_in(op, "src", src, 0) < 0 || gdl__check_in(op, "tgt", tgt, 0) < 0) return NULL;
    bf = gdl__tfm_layer_of(gdl__tfm_stack_of(fu->enc)->layers[0])->c.batch_first;
    if (src->ndim != tgt->ndim || (src->ndim == 3 && src->shape[bf ? 0 : 1] != tgt->shape[bf ? 0 : 1])) {
        gdl__set_error("%s: src %s and tgt %s must agree in batch (PyTorch's \"the batch number of src and tgt must be "
                       "equal\")", op, gdl_shape_str(src), gdl_shape_str(tgt));
        return NULL;
    }
    if (!(mem = gdl__tfm_encode(op, m, src, masks ? masks->src_mask : NULL, masks ? masks->src_key_padding_mask : NULL,
                                masks ? masks->src_is_causal : 0)) ||
        !(out = gdl__tfm_decode(op, m, tgt, mem, masks)))
        return NULL;
    gdl__nn_record(m, out);
    return out;
}

static gdl_tensor *gdl__tfm_layer_self(gdl_module *self, gdl_tensor *x) {
    return gdl_transformer_encoder_forward(self, x, NULL, NULL, 0);
}
static gdl_tensor *gdl__tfm_stack_self(gdl_module *self, gdl_tensor *x) {
    return gdl_transformer_encoder_forward(self, x, NULL, NULL, 0);
}
/* a decoder or a Transformer has two inputs: gdl_forward(m, x) cannot run it */
static gdl_tensor *gdl__tfm_needs_memory(gdl_module *self) {
    gdl__set_error("%s: takes two inputs; call gdl_transformer_decode (or gdl_transformer_forward) instead of gdl_forward",
                   gdl__nn_label(self));
    return NULL;
}
static gdl_tensor *gdl__tfm_dec_layer_self(gdl_module *self, gdl_tensor *x) {
    (void)x;
    return gdl__tfm_needs_memory(self);
}
static gdl_tensor *gdl__tfm_dec_stack_self(gdl_module *self, gdl_tensor *x) {
    (void)x;
    return gdl__tfm_needs_memory(self);
}
static gdl_tensor *gdl__tfm_full_self(gdl_module *self, gdl_tensor *x) {
    (void)x;
    return gdl__tfm_needs_memory(self);
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
    gdl__free(o->param[k].t);
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
