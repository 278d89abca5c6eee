/* ---- nn.MultiheadAttention ----
   A custom module (gdl_nn_custom) whose tensors carry PyTorch's names: in_proj_weight and in_proj_bias,
   and a Linear child out_proj. The forward is the in-projection (self-attention: one GEMM with all of
   in_proj_weight, whose output holds q, k and v side by side; otherwise three, with views of its thirds),
   gdl_sdpa_qkv / gdl_sdpa_heads reading the heads where the projection wrote them, and out_proj reading
   the output as it is: no copy splits or joins the heads. */

typedef struct gdl__mha {
    int64_t E;
    int H, batch_first;
    double dropout;
    gdl_tensor *w, *b; /* in_proj_weight, in_proj_bias (NULL without bias) */
    gdl_module *out;   /* out_proj */
} gdl__mha;

static void gdl__mha_free(void *u) { GPUDL_FREE(u); }

static gdl_tensor *gdl__mha_self(gdl_module *self, gdl_tensor *x) { return gdl_mha_forward(self, x, x, x, NULL, NULL); }

static gdl_module *gdl__nn_mha(const char *op, int64_t embed_dim, int num_heads, double dropout, int bias,
                               int batch_first) {
    int64_t ws[2], bs[1];
    double a;
    gdl__mha *u;
    gdl_module *m, *out;
    if (embed_dim <= 0 || num_heads <= 0 || embed_dim % num_heads != 0 || !(dropout >= 0 && dropout <= 1)) {
        gdl__set_error("%s: embed_dim %lld must be a positive multiple of num_heads %d, and dropout %g in [0,1]", op,
                       (long long)embed_dim, num_heads, dropout);
        return NULL;
    }
    if (!(u = (gdl__mha *)gdl__zalloc(op, sizeof *u))) return NULL;
    u->E = embed_dim;
    u->H = num_heads;
    u->dropout = dropout;
    u->batch_first = batch_first != 0;
    if (!(m = gdl_nn_custom("MultiheadAttention", gdl__mha_self, u, gdl__mha_free))) return NULL;
    ws[0] = 3 * embed_dim;
    ws[1] = embed_dim;
    bs[0] = 3 * embed_dim;
    a = sqrt(6.0 / (double)(ws[0] + ws[1])); /* xavier_uniform_ of [3E, E] */
    if (gdl_module_add_param(m, "in_proj_weight", u->w = gdl_uniform(2, ws, -a, a, gdl_cpu())) < 0 ||
        (bias && gdl_module_add_param(m, "in_proj_bias", u->b = gdl_zeros(1, bs, GDL_F32, gdl_cpu())) < 0) ||
        gdl_module_add_child(m, "out_proj", out = gdl_nn_linear(embed_dim, embed_dim, bias)) < 0) {
        gdl_module_free(m);
        return NULL;
    }
    u->out = out;
    if (bias) { /* PyTorch zeroes out_proj.bias */
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
    return gdl__nn_mha("gdl_nn_multihead_attention", embed_dim, num_heads, dropout, bias, batch_first);
}
GPUDL_API gdl_mha_opts gdl_mha_defaults(void) {
    gdl_mha_opts o;
    memset(&o, 0, sizeof o);
    o.bias = 1;
    return o;
}
GPUDL_API gdl_module *gdl_nn_multihead_attention_ex(int64_t embed_dim, int num_heads, const gdl_mha_opts *o) {
    gdl_mha_opts d = o ? *o : gdl_mha_defaults();
    return gdl__nn_mha("gdl_nn_multihead_attention_ex", embed_dim, num_heads, d.dropout, d.bias, d.batch_first);
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

GPUDL_API gdl_tensor *gdl_mha_forward(gdl_module *m, gdl_tensor *query, gdl_tensor *key, gdl_tensor *value,
                                      gdl_tensor *key_padding_mask, gdl_tensor *attn_mask) {
    const char *op = "gdl_mha_forward";
    gdl__mha *u = m && m->fwd == gdl__mha_self ? (gdl__mha *)m->user : NULL;
    gdl_tensor *x[3], *h[3], *mask = NULL, *o;
    int64_t N, L, S, E, s4[4];
    int k, self;
    if (!u) {
        gdl__set_error("%s: expected a module made by gdl_nn_multihead_attention", op);
        return NULL;
    }
    x[0] = query;
    x[1] = key;
    x[2] = value;
    self = query == key && key == value;
    for (k = 0; k < 3; k++) {
        if (gdl__check_in(op, k == 0 ? "query" : k == 1 ? "key" : "value", x[k], 0) < 0) return NULL;
        if (x[k]->ndim != 3 || x[k]->shape[2] != u->E) {
            gdl__set_error("%s: query, key and value must be [%s, %lld] (embed_dim %lld), got %s, %s and %s", op,
                           u->batch_first ? "N, L" : "L, N", (long long)u->E, (long long)u->E, gdl_shape_str(query),
                           gdl_shape_str(key), gdl_shape_str(value));
            return NULL;
        }
        if (!u->batch_first && !(x[k] = k && self ? x[0] : gdl_transpose(x[k], 0, 1))) return NULL;
    }
    N = x[0]->shape[0];
    L = x[0]->shape[1];
    S = x[1]->shape[1];
    E = u->E;
    if (x[1]->shape[0] != N || x[2]->shape[0] != N || x[2]->shape[1] != S) {
        gdl__set_error("%s: query %s, key %s and value %s disagree in batch or key length", op, gdl_shape_str(query),
                       gdl_shape_str(key), gdl_shape_str(value));
        return NULL;
    }
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
        if (!(mask = gdl__mha_additive(op, attn_mask, query->dtype, 4, s4))) return NULL;
    }
    if (key_padding_mask) {
        gdl_tensor *km;
        if (gdl__check_in(op, "key_padding_mask", key_padding_mask, 0) < 0) return NULL;
        if (key_padding_mask->ndim != 2 || key_padding_mask->shape[0] != N || key_padding_mask->shape[1] != S) {
            gdl__set_error("%s: key_padding_mask must be [N, S] = [%lld, %lld], got %s", op, (long long)N, (long long)S,
                           gdl_shape_str(key_padding_mask));
            return NULL;
        }
        s4[0] = N;
        s4[1] = 1;
        s4[2] = 1;
        s4[3] = S;
        if (!(km = gdl__mha_additive(op, key_padding_mask, query->dtype, 4, s4))) return NULL;
        if (!(mask = mask ? gdl_add(mask, km) : km)) return NULL;
    }
    if (self) {
        if (!(h[0] = gdl_linear(x[0], u->w, u->b))) return NULL;
        o = gdl_sdpa_qkv(h[0], u->H, mask, m->training ? u->dropout : 0, 0, GDL_SCALE_DEFAULT);
    } else {
        for (k = 0; k < 3; k++) {
            gdl_tensor *w = gdl_narrow(u->w, 0, k * E, E), *b = u->b ? gdl_narrow(u->b, 0, k * E, E) : NULL;
            if (!w || (u->b && !b) || !(h[k] = gdl_linear(x[k], w, b))) return NULL;
        }
        o = gdl_sdpa_heads(h[0], h[1], h[2], u->H, mask, m->training ? u->dropout : 0, 0, GDL_SCALE_DEFAULT);
    }
    if (!o || !(o = gdl_forward(u->out, o)) || !(o = u->batch_first ? o : gdl_transpose(o, 0, 1))) return NULL;
    gdl__nn_record(m, o);
    return o;
}
