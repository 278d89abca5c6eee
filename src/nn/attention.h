/* ---- nn.MultiheadAttention ----
   A custom module (gdl_nn_custom) whose tensors carry PyTorch's names: in_proj_weight (or, when kdim or vdim
   differ from embed_dim, q_proj_weight, k_proj_weight and v_proj_weight) and in_proj_bias, and a Linear child
   out_proj. The forward is the in-projection (self-attention: one GEMM with all of
   in_proj_weight, whose output holds q, k and v side by side; otherwise three, with views of its thirds),
   gdl_sdpa_qkv / gdl_sdpa_heads reading the heads where the projection wrote them, and out_proj reading
   the output as it is: no copy splits or joins the heads. need_weights runs the unfused composition, which
   keeps the L x S weights. */

typedef struct gdl__mha {
    int64_t E, kdim, vdim;
    int H, batch_first;
    double dropout;
    gdl_tensor *w, *b;       /* in_proj_weight (NULL with separate weights), in_proj_bias (NULL without bias) */
    gdl_tensor *wq, *wk, *wv; /* q_proj_weight, k_proj_weight, v_proj_weight (kdim or vdim other than E) */
    gdl_module *out;          /* out_proj */
} gdl__mha;

static void gdl__mha_free(void *u) { GPUDL_FREE(u); }

static gdl_tensor *gdl__mha_self(gdl_module *self, gdl_tensor *x) { return gdl_mha_forward(self, x, x, x, NULL, NULL); }

/* a xavier-uniform [rows, cols] parameter `name` of m, kept in *slot */
static int gdl__mha_xavier(gdl_module *m, const char *name, int64_t rows, int64_t cols, gdl_tensor **slot) {
    int64_t s[2];
    double a = sqrt(6.0 / (double)(rows + cols));
    s[0] = rows;
    s[1] = cols;
    return gdl_module_add_param(m, name, *slot = gdl_uniform(2, s, -a, a, gdl_cpu()));
}

static gdl_module *gdl__nn_mha(const char *op, int64_t embed_dim, int num_heads, const gdl_mha_opts *o) {
    int64_t bs[1];
    gdl__mha *u;
    gdl_module *m, *out;
    int64_t kdim = o->kdim ? o->kdim : embed_dim, vdim = o->vdim ? o->vdim : embed_dim;
    if (embed_dim <= 0 || num_heads <= 0 || embed_dim % num_heads != 0 || !(o->dropout >= 0 && o->dropout <= 1) ||
        kdim < 1 || vdim < 1) {
        gdl__set_error("%s: embed_dim %lld must be a positive multiple of num_heads %d, dropout %g in [0,1], kdim %lld "
                       "and vdim %lld positive (0: embed_dim)", op, (long long)embed_dim, num_heads, o->dropout,
                       (long long)o->kdim, (long long)o->vdim);
        return NULL;
    }
    if (!(u = (gdl__mha *)gdl__zalloc(op, sizeof *u))) return NULL;
    u->E = embed_dim;
    u->kdim = kdim;
    u->vdim = vdim;
    u->H = num_heads;
    u->dropout = o->dropout;
    u->batch_first = o->batch_first != 0;
    if (!(m = gdl_nn_custom("MultiheadAttention", gdl__mha_self, u, gdl__mha_free))) return NULL;
    bs[0] = 3 * embed_dim;
    /* PyTorch's order: in_proj_weight, or q/k/v_proj_weight; in_proj_bias; out_proj */
    if ((kdim == embed_dim && vdim == embed_dim
             ? gdl__mha_xavier(m, "in_proj_weight", 3 * embed_dim, embed_dim, &u->w) < 0
             : gdl__mha_xavier(m, "q_proj_weight", embed_dim, embed_dim, &u->wq) < 0 ||
                   gdl__mha_xavier(m, "k_proj_weight", embed_dim, kdim, &u->wk) < 0 ||
                   gdl__mha_xavier(m, "v_proj_weight", embed_dim, vdim, &u->wv) < 0) ||
        (o->bias && gdl_module_add_param(m, "in_proj_bias", u->b = gdl_zeros(1, bs, GDL_F32, gdl_cpu())) < 0) ||
        gdl_module_add_child(m, "out_proj", out = gdl_nn_linear(embed_dim, embed_dim, o->bias)) < 0) {
        gdl_module_free(m);
        return NULL;
    }
    u->out = out;
    if (o->bias) { /* PyTorch zeroes out_proj.bias */
        gdl_tensor *t[2];
        if (gdl_module_named_tensors(out, GDL_PARAMS, NULL, t, 2) != 2) {
            gdl_module_free(m);
            return NULL;
        }
        memset(t[1]->data, 0, sizeof(gdl_real) * (size_t)t[1]->numel);
    }
    return m;
}

GPUDL_API gdl_module *gdl_nn_multihead_attention(int64_t embed_dim, int num_heads, double dropout, int bias,
                                                 int batch_first) {
    gdl_mha_opts o = gdl_mha_defaults();
    o.dropout = dropout;
    o.bias = bias;
    o.batch_first = batch_first;
    return gdl__nn_mha("gdl_nn_multihead_attention", embed_dim, num_heads, &o);
}
GPUDL_API gdl_mha_opts gdl_mha_defaults(void) {
    gdl_mha_opts o;
    memset(&o, 0, sizeof o);
    o.bias = 1;
    return o;
}
GPUDL_API gdl_module *gdl_nn_multihead_attention_ex(int64_t embed_dim, int num_heads, const gdl_mha_opts *o) {
    gdl_mha_opts d = o ? *o : gdl_mha_defaults();
    return gdl__nn_mha("gdl_nn_multihead_attention_ex", embed_dim, num_heads, &d);
}

/* a temporary of zeros with mask's shape made additive: -inf where the u8 mask is non-zero; a float mask
   as it is; reshaped to ndim / shape */
static gdl_tensor *gdl__mha_additive(const char *op, gdl_tensor *mask, gdl_dtype dt, int ndim, const int64_t *shape) {
    gdl_tensor *z, *r = gdl_reshape(mask, ndim, shape);
    const gdl_backend *be;
    if (!r || mask->dtype != GDL_U8) return r;
    if (!(be = gdl__be(op, mask->device)) || !(z = gdl__tmp(op, ndim, shape, dt, mask->device)) ||
        be->rt.memset0(z->data, (size_t)z->numel * gdl_dtype_size(dt)) < 0)
        return NULL;
    return gdl_masked_fill(z, r, -INFINITY);
}

/* an [L, S] u8 mask of the keys after each query (non-zero: left out; the top-left triangle, PyTorch's is_causal) */
static gdl_tensor *gdl__mha_causal(const char *op, int64_t L, int64_t S, gdl_device dev) {
    int64_t s[2];
    gdl_tensor *ones;
    const gdl_backend *be;
    s[0] = L;
    s[1] = S;
    if (!(be = gdl__be(op, dev)) || !(ones = gdl__tmp(op, 2, s, GDL_F32, dev)) || be->k.fill(GDL__R(ones), ones->numel, 1) < 0)
        return NULL;
    return gdl_compare_scalar(gdl_triu(ones, 1), GDL_CMP_NE, 0);
}

/* x [lead..., n] viewed with a dim of 1 inserted at `at` (unbatched input as a batch of one), or, with `at` < 0, x
   as it is */
static gdl_tensor *gdl__mha_unsqueeze(gdl_tensor *x, int at) {
    int64_t s[GDL_MAX_DIMS];
    int d, j = 0;
    if (!x || at < 0) return x;
    for (d = 0; d <= x->ndim; d++) s[d] = d == at ? 1 : x->shape[j++];
    return gdl_reshape(x, x->ndim + 1, s);
}

/* x without its dim `at` (of size 1) */
static gdl_tensor *gdl__mha_squeeze(gdl_tensor *x, int at) {
    int64_t s[GDL_MAX_DIMS];
    int d, j = 0;
    if (!x) return NULL;
    for (d = 0; d < x->ndim; d++)
        if (d != at) s[j++] = x->shape[d];
    return gdl_reshape(x, x->ndim - 1, s);
}

/* the one additive mask [N or 1, H or 1, L, S] of attn_mask and key_padding_mask (NULL when neither); *err on error */
static gdl_tensor *gdl__mha_mask(const char *op, const gdl__mha *u, gdl_tensor *attn_mask, gdl_tensor *kpm, gdl_dtype dt,
                                 int64_t N, int64_t L, int64_t S, int *err) {
    gdl_tensor *mask = NULL;
    int64_t s4[4];
    *err = 1;
    if (attn_mask) {
        int three;
        if (gdl__check_in(op, "attn_mask", attn_mask, 0) < 0) return NULL;
        three = attn_mask->ndim == 3 && attn_mask->shape[0] == N * u->H && attn_mask->shape[1] == L &&
                attn_mask->shape[2] == S;
        if (!three && !(attn_mask->ndim == 2 && attn_mask->shape[0] == L && attn_mask->shape[1] == S)) {
            gdl__set_error("%s: attn_mask must be [L, S] = [%lld, %lld] or [N*num_heads, L, S] = [%lld, %lld, %lld], got %s",
                           op, (long long)L, (long long)S, (long long)(N * u->H), (long long)L, (long long)S,
                           gdl_shape_str(attn_mask));
            return NULL;
        }
        s4[0] = three ? N : 1;
        s4[1] = three ? u->H : 1;
        s4[2] = L;
        s4[3] = S;
        if (!(mask = gdl__mha_additive(op, attn_mask, dt, 4, s4))) return NULL;
    }
    if (kpm) {
        gdl_tensor *km;
        if (gdl__check_in(op, "key_padding_mask", kpm, 0) < 0) return NULL;
        if (kpm->ndim != 2 || kpm->shape[0] != N || kpm->shape[1] != S) {
            gdl__set_error("%s: key_padding_mask must be [N, S] = [%lld, %lld], got %s", op, (long long)N, (long long)S,
                           gdl_shape_str(kpm));
            return NULL;
        }
        s4[0] = N;
        s4[1] = 1;
        s4[2] = 1;
        s4[3] = S;
        if (!(km = gdl__mha_additive(op, kpm, dt, 4, s4))) return NULL;
        if (!(mask = mask ? gdl_add(mask, km) : km)) return NULL;
    }
    *err = 0;
    return mask;
}

/* the in-projection of input k (0 q, 1 k, 2 v) */
static gdl_tensor *gdl__mha_proj(const gdl__mha *u, int k, gdl_tensor *x) {
    gdl_tensor *w, *b = u->b ? gdl_narrow(u->b, 0, k * u->E, u->E) : NULL;
    if (u->b && !b) return NULL;
    w = u->w ? gdl_narrow(u->w, 0, k * u->E, u->E) : k == 0 ? u->wq : k == 1 ? u->wk : u->wv;
    return w ? gdl_linear(x, w, b) : NULL;
}

/* softmax(q k^T / sqrt(E/H) + mask) v over the heads of the projections h (batch-first), the weights kept: *w
   [N, H, L, S], or [N, L, S] averaged over the heads */
static gdl_tensor *gdl__mha_weights(const gdl__mha *u, gdl_tensor **h, gdl_tensor *mask, double dropout, int average,
                                    gdl_tensor **w) {
    gdl_tensor *q = gdl__sdpa_split(h[0], u->H), *k = gdl__sdpa_split(h[1], u->H), *v = gdl__sdpa_split(h[2], u->H), *o;
    if (!q || !k || !v) return NULL;
    o = gdl__sdpa_join(gdl__sdpa_unfused(q, k, v, mask, dropout, 0, 1 / sqrt((double)(u->E / u->H)), w));
    if (o && average && !(*w = gdl_mean_dim(*w, 1, 0))) return NULL;
    return o;
}

static gdl_tensor *gdl__mha_run(const char *op, gdl_module *m, gdl_tensor *query, gdl_tensor *key, gdl_tensor *value,
                                const gdl_mha_args *a, gdl_tensor **attn_weights) {
    gdl__mha *u = m && m->fwd == gdl__mha_self ? (gdl__mha *)m->user : NULL;
    gdl_tensor *x[3], *h[3], *mask, *o, *w = NULL, *am, *kpm;
    gdl_mha_args d;
    int64_t N, L, S, width[3];
    int k, self, unb, bf, err, causal = 0;
    if (attn_weights) *attn_weights = NULL;
    if (!u) {
        gdl__set_error("%s: expected a module made by gdl_nn_multihead_attention", op);
        return NULL;
    }
    memset(&d, 0, sizeof d);
    if (a) d = *a;
    if (d.need_weights && !attn_weights) {
        gdl__null_arg(op, "attn_weights (need_weights is set)");
        return NULL;
    }
    x[0] = query;
    x[1] = key;
    x[2] = value;
    width[0] = u->E;
    width[1] = u->kdim;
    width[2] = u->vdim;
    self = query == key && key == value;
    for (k = 0; k < 3; k++)
        if (gdl__check_in(op, k == 0 ? "query" : k == 1 ? "key" : "value", x[k], 0) < 0) return NULL;
    unb = query->ndim == 2; /* unbatched: [L, E], a batch of one */
    bf = u->batch_first || unb;
    for (k = 0; k < 3; k++) {
        if (x[k]->ndim != query->ndim || (x[k]->ndim != 3 && x[k]->ndim != 2) || x[k]->shape[x[k]->ndim - 1] != width[k]) {
            gdl__set_error("%s: query, key and value must be [%s, %lld], [%s, %lld] and [%s, %lld] (or unbatched, "
                           "without N), got %s, %s and %s", op, u->batch_first ? "N, L" : "L, N", (long long)u->E,
                           u->batch_first ? "N, S" : "S, N", (long long)u->kdim, u->batch_first ? "N, S" : "S, N",
                           (long long)u->vdim, gdl_shape_str(query), gdl_shape_str(key), gdl_shape_str(value));
            return NULL;
        }
        if (unb && !(x[k] = k && self ? x[0] : gdl__mha_unsqueeze(x[k], 0))) return NULL;
        if (!bf && !(x[k] = k && self ? x[0] : gdl_transpose(x[k], 0, 1))) return NULL;
    }
    N = x[0]->shape[0];
    L = x[0]->shape[1];
    S = x[1]->shape[1];
    if (x[1]->shape[0] != N || x[2]->shape[0] != N || x[2]->shape[1] != S) {
        gdl__set_error("%s: query %s, key %s and value %s disagree in batch or key length", op, gdl_shape_str(query),
                       gdl_shape_str(key), gdl_shape_str(value));
        return NULL;
    }
    am = d.attn_mask;
    kpm = d.key_padding_mask;
    if (unb && am && am->ndim == 3 && !(am = gdl__mha_unsqueeze(am, 0))) return NULL; /* [H, L, S] -> [1*H, L, S] */
    if (unb && am && am->ndim == 4 && !(am = gdl__mha_squeeze(am, 0))) return NULL;
    if (unb && kpm && kpm->ndim == 1 && !(kpm = gdl__mha_unsqueeze(kpm, 0))) return NULL;
    if (d.is_causal && !am) { /* a flag to the fused kernels alone; a mask when it meets others */
        if (kpm || d.need_weights) {
            if (!(am = gdl__mha_causal(op, L, S, query->device))) return NULL;
        } else {
            causal = 1;
        }
    }
    mask = gdl__mha_mask(op, u, am, kpm, query->dtype, N, L, S, &err);
    if (err) return NULL;
    if (self && u->w && !d.need_weights) {
        if (!(h[0] = gdl_linear(x[0], u->w, u->b))) return NULL;
        o = gdl_sdpa_qkv(h[0], u->H, mask, m->training ? u->dropout : 0, causal, GDL_SCALE_DEFAULT);
    } else {
        for (k = 0; k < 3; k++)
            if (!(h[k] = gdl__mha_proj(u, k, x[k]))) return NULL;
        if (d.need_weights)
            o = gdl__mha_weights(u, h, mask, m->training ? u->dropout : 0, d.average_attn_weights, &w);
        else
            o = gdl_sdpa_heads(h[0], h[1], h[2], u->H, mask, m->training ? u->dropout : 0, causal, GDL_SCALE_DEFAULT);
    }
    if (!o || !(o = gdl_forward(u->out, o)) || !(o = bf ? o : gdl_transpose(o, 0, 1))) return NULL;
    if (unb && (!(o = gdl__mha_squeeze(o, 0)) || (w && !(w = gdl__mha_squeeze(w, 0))))) return NULL;
    gdl__nn_record(m, o);
    if (attn_weights) *attn_weights = w;
    return o;
}

GPUDL_API gdl_tensor *gdl_mha_forward_ex(gdl_module *m, gdl_tensor *query, gdl_tensor *key, gdl_tensor *value,
                                         const gdl_mha_args *a, gdl_tensor **attn_weights) {
    return gdl__mha_run("gdl_mha_forward_ex", m, query, key, value, a, attn_weights);
}

GPUDL_API gdl_tensor *gdl_mha_forward(gdl_module *m, gdl_tensor *query, gdl_tensor *key, gdl_tensor *value,
                                      gdl_tensor *key_padding_mask, gdl_tensor *attn_mask) {
    gdl_mha_args a;
    memset(&a, 0, sizeof a);
    a.key_padding_mask = key_padding_mask;
    a.attn_mask = attn_mask;
    return gdl__mha_run("gdl_mha_forward", m, query, key, value, &a, NULL);
}
