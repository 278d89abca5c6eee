/* ---- scaled dot-product attention (torch.nn.functional.scaled_dot_product_attention) ----
   The fused path is one backend call each way (attention / attention_backward) and saves only the
   output and a log-sum-exp per query row; the unfused composition below covers what the kernels do not
   (dropout, q/k/v batch dims that broadcast, long heads, a mask that wants a gradient). */

/* out = softmax(scale q k^T + mask) v from the differentiable ops: L x S weights in memory */
static gdl_tensor *gdl__sdpa_unfused(gdl_tensor *q, gdl_tensor *k, gdl_tensor *v, gdl_tensor *mask, double dropout_p,
                                     int causal, double scale) {
    gdl_tensor *s = gdl_mul_scalar(gdl_matmul(q, gdl_transpose(k, -2, -1)), scale);
    if (s && causal) { /* the excluded places: above the main diagonal of an [L, S] of ones */
        int64_t shape[2];
        gdl_tensor *ones;
        const gdl_backend *be;
        shape[0] = s->shape[s->ndim - 2];
        shape[1] = s->shape[s->ndim - 1];
        if (!(be = gdl__be("gdl_scaled_dot_product_attention", s->device)) ||
            !(ones = gdl__tmp("gdl_scaled_dot_product_attention", 2, shape, GDL_F32, s->device)) ||
            be->fill(GDL__R(ones), ones->numel, 1) < 0)
            return NULL;
        s = gdl_masked_fill(s, gdl_compare_scalar(gdl_triu(ones, 1), GDL_CMP_NE, 0), -INFINITY);
    } else if (s && mask && mask->dtype == GDL_U8) {
        s = gdl_masked_fill(s, gdl_compare_scalar(mask, GDL_CMP_EQ, 0), -INFINITY);
    } else if (s && mask) {
        s = gdl_add(s, mask);
    }
    s = gdl_softmax(s, -1);
    if (s && dropout_p > 0) s = gdl_dropout(s, dropout_p, 1);
    return s ? gdl_matmul(s, v) : NULL;
}

/* the arguments' checks, shared with the backward's geometry: the fused kernels' geometry (*fused 0: the
   unfused composition must run); -1 after an error */
static int gdl__sdpa_geom(const char *op, const gdl_tensor *q, const gdl_tensor *k, const gdl_tensor *v,
                          const gdl_tensor *mask, int causal, double scale, gdl_attn_geom *g, int *fused) {
    int nb = q->ndim - 2, d, off;
    int64_t cs[GDL_MAX_DIMS];
    memset(g, 0, sizeof *g);
    if (q->ndim < 2 || k->ndim < 2 || v->ndim < 2 || q->shape[q->ndim - 1] != k->shape[k->ndim - 1] ||
        k->shape[k->ndim - 2] != v->shape[v->ndim - 2]) {
        gdl__set_error("%s: expected query [..., L, E], key [..., S, E] and value [..., S, Ev], got %s, %s and %s", op,
                       gdl_shape_str(q), gdl_shape_str(k), gdl_shape_str(v));
        return -1;
    }
    g->L = q->shape[q->ndim - 2];
    g->S = k->shape[k->ndim - 2];
    g->E = q->shape[q->ndim - 1];
    g->Ev = v->shape[v->ndim - 1];
    g->scale = scale > 0 ? scale : g->E > 0 ? 1 / sqrt((double)g->E) : 1; /* NaN fails scale > 0 */
    g->causal = causal != 0;
    *fused = q->ndim == k->ndim && q->ndim == v->ndim && g->E <= GDL_ATTN_MAX_HEAD && g->Ev <= GDL_ATTN_MAX_HEAD;
    g->B = 1;
    g->nb = nb;
    for (d = 0; d < nb; d++) {
        if (*fused && (q->shape[d] != k->shape[d] || q->shape[d] != v->shape[d])) *fused = 0;
        g->bshape[d] = q->shape[d];
        g->B *= q->shape[d];
    }
    if (!*fused) { /* the batch dims broadcast (matmul's rules), the mask against the broadcast shape */
        const gdl_tensor *t[3];
        int64_t str[3][GDL_MAX_DIMS];
        gdl_tensor hq = *q, hk = *k, hv = *v; /* the batch dims alone */
        t[0] = &hq; t[1] = &hk; t[2] = &hv;
        hq.ndim -= 2; hk.ndim -= 2; hv.ndim -= 2;
        if (gdl__broadcast_k(op, 3, t, &nb, g->bshape, str) < 0) {
            gdl__set_error("%s: the batch dims of query %s, key %s and value %s cannot be broadcast", op,
                           gdl_shape_str(q), gdl_shape_str(k), gdl_shape_str(v));
            return -1;
        }
        g->nb = nb;
    }
    if (!mask) return 0;
    if (causal) {
        gdl__set_error("%s: an explicit attn_mask cannot be set with is_causal (PyTorch's rule)", op);
        return -1;
    }
    if (mask->dtype != GDL_U8 && mask->dtype != q->dtype) {
        gdl__set_error("%s: attn_mask must be u8 (bool) or of the query's dtype %s, got %s %s", op,
                       gdl_dtype_name(q->dtype), gdl_dtype_name(mask->dtype), gdl_shape_str(mask));
        return -1;
    }
    off = nb + 2 - mask->ndim;
    if (off < 0) {
        gdl__set_error("%s: attn_mask %s has more dims than the scores [..., L, S] of query %s and key %s", op,
                       gdl_shape_str(mask), gdl_shape_str(q), gdl_shape_str(k));
        return -1;
    }
    gdl__contig_strides(mask->ndim, mask->shape, cs);
    for (d = 0; d < nb + 2; d++) {
        int64_t want = d < nb ? g->bshape[d] : d == nb ? g->L : g->S, have = d < off ? 1 : mask->shape[d - off];
        int64_t st = d < off || have == 1 ? 0 : cs[d - off];
        if (have != want && have != 1) {
            gdl__set_error("%s: attn_mask %s cannot be broadcast to the scores' shape [..., L=%lld, S=%lld] of query %s "
                           "and key %s", op, gdl_shape_str(mask), (long long)g->L, (long long)g->S, gdl_shape_str(q),
                           gdl_shape_str(k));
            return -1;
        }
        if (d < nb) g->mstr[d] = st;
        else if (d == nb) g->mrow = st;
        else g->mcol = st;
    }
    g->mask = mask->dtype == GDL_U8 ? 1 : 2;
    g->mdt = mask->dtype;
    if (mask->requires_grad) *fused = 0; /* an additive mask's gradient: the composition has it */
    return 0;
}

GPUDL_API gdl_tensor *gdl_scaled_dot_product_attention(gdl_tensor *q, gdl_tensor *k, gdl_tensor *v, gdl_tensor *mask,
                                                       double dropout_p, int is_causal, double scale) {
    const char *op = "gdl_scaled_dot_product_attention";
    gdl_attn_geom g;
    gdl_tensor *out, *lse, *in[4];
    gdl_node *n;
    const gdl_backend *be;
    int64_t shape[GDL_MAX_DIMS];
    int fused, err, d;
    if (gdl__check_in(op, "query", q, 0) < 0 || gdl__check_in(op, "key", k, 0) < 0 || gdl__check_in(op, "value", v, 0) < 0 ||
        (mask && gdl__check_in(op, "attn_mask", mask, 0) < 0) || gdl__check_dev(op, q, k) < 0 ||
        gdl__check_dev(op, q, v) < 0 || gdl__check_dev(op, q, mask) < 0)
        return NULL;
    if (gdl__ac_dt != GDL_F32) { /* class LOW: float arguments to the region's dtype, then again */
        gdl_tensor **args[4];
        int rc, na = 3;
        args[0] = &q; args[1] = &k; args[2] = &v;
        if (mask && mask->dtype != GDL_U8) args[na++] = &mask;
        if ((rc = gdl__ac_in(op, GDL_OP_SDPA, na, args)) < 0) return NULL;
        if (rc) return gdl_scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal, scale);
    }
    if (!gdl__is_float(q->dtype) || k->dtype != q->dtype || v->dtype != q->dtype) {
        gdl__set_error("%s: query, key and value must have one float dtype (f32, bf16 or f16), got %s %s, %s %s and %s %s",
                       op, gdl_dtype_name(q->dtype), gdl_shape_str(q), gdl_dtype_name(k->dtype), gdl_shape_str(k),
                       gdl_dtype_name(v->dtype), gdl_shape_str(v));
        return NULL;
    }
    if (!(dropout_p >= 0 && dropout_p <= 1)) {
        gdl__set_error("%s: dropout_p %g is not in [0,1]", op, dropout_p);
        return NULL;
    }
    if (gdl__sdpa_geom(op, q, k, v, mask, is_causal, scale, &g, &fused) < 0) return NULL;
    if (!fused || dropout_p > 0) return gdl__sdpa_unfused(q, k, v, mask, dropout_p, g.causal, g.scale);
    for (d = 0; d < q->ndim - 1; d++) shape[d] = q->shape[d];
    shape[q->ndim - 1] = g.Ev;
    if (!(be = gdl__be(op, q->device)) || !(out = gdl__tmp(op, q->ndim, shape, q->dtype, q->device)) ||
        !(lse = gdl__tmp(op, q->ndim - 1, shape, GDL_F32, q->device)))
        return NULL;
    if (out->numel && be->attention(q->dtype, &g, q->data, k->data, v->data, mask ? mask->data : NULL, out->data,
                                     GDL__R(lse)) < 0)
        return NULL;
    in[0] = q;
    in[1] = k;
    in[2] = v;
    in[3] = mask;
    n = gdl__record(op, GDL_OP_SDPA, out, 4, in, &err);
    if (err) return NULL;
    if (n) {
        n->saved[0] = lse;
        n->f[0] = g.scale;
        n->i[0] = g.causal;
    }
    return gdl__finish(op, out);
}

static int gdl__bw_sdpa(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *q = n->in[0], *k = n->in[1], *v = n->in[2], *mask = n->in[3], *out = n->out;
    gdl_attn_geom g;
    gdl_real *delta;
    int fused;
    if (!out->numel || !(q->requires_grad || k->requires_grad || v->requires_grad)) return 0;
    if (gdl__sdpa_geom("gdl_backward", q, k, v, mask, (int)n->i[0], n->f[0], &g, &fused) < 0 ||
        !(delta = (gdl_real *)gdl__scratch("gdl_backward", out->device, sizeof(gdl_real) * (size_t)(g.B * g.L + 1))))
        return -1;
    return be->attention_backward(out->dtype, &g, q->data, k->data, v->data, mask ? mask->data : NULL, out->data,
                                  out->grad->data, GDL__R(n->saved[0]), delta, q->requires_grad ? q->grad->data : NULL,
                                  k->requires_grad ? k->grad->data : NULL, v->requires_grad ? v->grad->data : NULL);
}
