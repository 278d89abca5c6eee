/* ---- scaled dot-product attention (torch.nn.functional.scaled_dot_product_attention) ----
   The fused path is one backend call each way (attention / attention_backward) and saves only the
   output and a log-sum-exp per query row; the unfused composition below covers what the kernels do not
   (dropout, q/k/v batch dims that broadcast, long heads, a mask that wants a gradient). gdl_sdpa_heads
   and gdl_sdpa_qkv are the same op over heads packed in the last dim: the kernels read q, k and v and
   write the output and the gradients there at strides (gdl_attn_geom), so a Transformer's heads need no
   permute copy either way. */

/* the layouts of the op (its node's i[1]): q, k and v as given; heads packed in the last dim (q
   [..., L, H*E], gdl_sdpa_heads); q, k and v side by side in one tensor ([..., L, 3*H*E], gdl_sdpa_qkv) */
enum { GDL__SDPA_PLAIN, GDL__SDPA_HEADS, GDL__SDPA_QKV };

/* out = softmax(scale q k^T + mask) v from the differentiable ops: L x S weights in memory (*weights, when not
   NULL, gets them after dropout: nn.MultiheadAttention's need_weights) */
static gdl_tensor *gdl__sdpa_unfused(gdl_tensor *q, gdl_tensor *k, gdl_tensor *v, gdl_tensor *mask, double dropout_p,
                                     int causal, double scale, gdl_tensor **weights) {
    gdl_tensor *s = gdl_mul_scalar(gdl_matmul(q, gdl_transpose(k, -2, -1)), scale);
    if (s && causal) { /* the excluded places: above the main diagonal of an [L, S] of ones */
        int64_t shape[2];
        gdl_tensor *ones;
        const gdl_backend *be;
        shape[0] = s->shape[s->ndim - 2];
        shape[1] = s->shape[s->ndim - 1];
        if (!(be = gdl__be("gdl_scaled_dot_product_attention", s->device)) ||
            !(ones = gdl__tmp("gdl_scaled_dot_product_attention", 2, shape, GDL_F32, s->device)) ||
            be->k.fill(GDL__R(ones), ones->numel, 1) < 0)
            return NULL;
        s = gdl_masked_fill(s, gdl_compare_scalar(gdl_triu(ones, 1), GDL_CMP_NE, 0), -INFINITY);
    } else if (s && mask && mask->dtype == GDL_U8) {
        s = gdl_masked_fill(s, gdl_compare_scalar(mask, GDL_CMP_EQ, 0), -INFINITY);
    } else if (s && mask) {
        s = gdl_add(s, mask);
    }
    if (s && mask) {
        /* a query row no key may attend to (a bool row all false, an additive one all -inf) gives 0 and no
           gradient, as the fused kernels and PyTorch's safe softmax do, not softmax's NaN (which would spread
           into every gradient through the matmuls): such rows take 0 before the softmax (no NaN there or in
           its backward) and 0 after it */
        gdl_tensor *dead = gdl_compare_scalar(gdl_max_dim(gdl_detach(s), -1, 1), GDL_CMP_EQ, -INFINITY);
        s = gdl_masked_fill(gdl_softmax(gdl_masked_fill(s, dead, 0), -1), dead, 0);
    } else {
        s = gdl_softmax(s, -1);
    }
    if (s && dropout_p > 0) s = gdl_dropout(s, dropout_p, 1);
    if (weights) *weights = s;
    return s ? gdl_matmul(s, v) : NULL;
}

/* [..., L, H*E] -> [..., H, L, E] and back: the copies of the composition, for what the kernels do not take */
static gdl_tensor *gdl__sdpa_split(gdl_tensor *x, int H) {
    int64_t s[GDL_MAX_DIMS];
    int d, nd;
    if (!x) return NULL;
    nd = x->ndim;
    for (d = 0; d < nd - 1; d++) s[d] = x->shape[d];
    s[nd - 1] = H;
    s[nd] = x->shape[nd - 1] / H;
    return gdl_transpose(gdl_reshape(x, nd + 1, s), -3, -2);
}

static gdl_tensor *gdl__sdpa_join(gdl_tensor *o) {
    int64_t s[GDL_MAX_DIMS];
    int d, nd;
    if (!o || !(o = gdl_transpose(o, -3, -2))) return NULL;
    nd = o->ndim - 1;
    for (d = 0; d < nd - 1; d++) s[d] = o->shape[d];
    s[nd - 1] = o->shape[nd - 1] * o->shape[nd];
    return gdl_reshape(o, nd, s);
}

/* the packed layouts' shapes and strides into g: q [..., L, H*E] (QKV: [..., L, 3*H*E], k and v its other
   thirds), k [..., S, H*E], v [..., S, H*Ev], out [..., L, H*Ev]; the batch dims, then the heads */
static int gdl__sdpa_heads_geom(const char *op, int lay, int H, const gdl_tensor *q, const gdl_tensor *k,
                                const gdl_tensor *v, gdl_attn_geom *g) {
    const int nb = q->ndim - 2, per = lay == GDL__SDPA_QKV ? 3 : 1;
    int64_t cq[GDL_MAX_DIMS], ck[GDL_MAX_DIMS], cv[GDL_MAX_DIMS], co[GDL_MAX_DIMS], os[GDL_MAX_DIMS], w;
    int d;
    if (H < 1 || q->ndim < 2 || q->ndim >= GDL_MAX_DIMS || (w = q->shape[q->ndim - 1]) % ((int64_t)per * H) != 0) {
        gdl__set_error("%s: expected %s [..., L, %s] of 2 to %d dims with num_heads %d >= 1, got %s", op,
                       per == 3 ? "qkv" : "query", per == 3 ? "3*num_heads*E" : "num_heads*E", GDL_MAX_DIMS - 1, H,
                       gdl_shape_str(q));
        return -1;
    }
    if (per == 3) {
        k = v = q;
    } else {
        int same = k->ndim == q->ndim && v->ndim == q->ndim && k->shape[nb + 1] == w && k->shape[nb] == v->shape[nb] &&
                   v->shape[nb + 1] % H == 0;
        for (d = 0; same && d < nb; d++) same = k->shape[d] == q->shape[d] && v->shape[d] == q->shape[d];
        if (!same) {
            gdl__set_error("%s: expected query [..., L, H*E], key [..., S, H*E] and value [..., S, H*Ev] with the same "
                           "batch dims (num_heads H = %d), got %s, %s and %s", op, H, gdl_shape_str(q), gdl_shape_str(k),
                           gdl_shape_str(v));
            return -1;
        }
    }
    g->L = q->shape[nb];
    g->S = k->shape[nb];
    g->E = w / per / H;
    g->Ev = per == 3 ? g->E : v->shape[nb + 1] / H;
    g->nb = nb + 1;
    g->B = H;
    memcpy(os, q->shape, sizeof os);
    os[nb + 1] = H * g->Ev;
    gdl__contig_strides(q->ndim, q->shape, cq);
    gdl__contig_strides(k->ndim, k->shape, ck);
    gdl__contig_strides(v->ndim, v->shape, cv);
    gdl__contig_strides(q->ndim, os, co);
    for (d = 0; d < nb; d++) {
        g->bshape[d] = q->shape[d];
        g->B *= q->shape[d];
        g->qstr[d] = cq[d];
        g->kstr[d] = ck[d];
        g->vstr[d] = cv[d];
        g->ostr[d] = co[d];
    }
    g->bshape[nb] = H; /* head h: columns h*E ... of a row */
    g->qstr[nb] = g->kstr[nb] = g->E;
    g->vstr[nb] = g->ostr[nb] = g->Ev;
    g->qrow = w;
    g->krow = k->shape[nb + 1];
    g->vrow = v->shape[nb + 1];
    g->orow = H * g->Ev;
    return 0;
}

/* the arguments' checks, shared with the backward's geometry: the fused kernels' geometry for layout lay
   (H heads unless GDL__SDPA_PLAIN; *fused 0: the unfused composition must run); -1 after an error */
static int gdl__sdpa_geom(const char *op, int lay, int H, const gdl_tensor *q, const gdl_tensor *k, const gdl_tensor *v,
                          const gdl_tensor *mask, int causal, double scale, gdl_attn_geom *g, int *fused) {
    int nb, d, off;
    int64_t cs[GDL_MAX_DIMS];
    memset(g, 0, sizeof *g);
    if (lay == GDL__SDPA_QKV) k = v = q; /* for the shapes in messages */
    if (lay != GDL__SDPA_PLAIN) {
        if (gdl__sdpa_heads_geom(op, lay, H, q, k, v, g) < 0) return -1;
        *fused = g->E <= GDL_ATTN_MAX_HEAD && g->Ev <= GDL_ATTN_MAX_HEAD;
        nb = g->nb;
    } else {
        nb = q->ndim - 2;
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
        *fused = q->ndim == k->ndim && q->ndim == v->ndim && g->E <= GDL_ATTN_MAX_HEAD && g->Ev <= GDL_ATTN_MAX_HEAD;
        g->B = 1;
        g->nb = nb;
        g->group = 1;
        for (d = 0; d < nb; d++) {
            if (*fused && (q->shape[d] != k->shape[d] || q->shape[d] != v->shape[d])) {
                /* k and v of 1 along q's innermost batch dim: its query heads share them (grouped-query) */
                if (d == nb - 1 && k->shape[d] == 1 && v->shape[d] == 1) g->group = q->shape[d];
                else *fused = 0;
            }
            g->bshape[d] = q->shape[d];
            g->B *= q->shape[d];
        }
        if (!*fused) g->group = 1;
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
        } else { /* contiguous: rows of E (Ev), batches L (S) rows apart */
            for (d = nb - 1; d >= 0; d--) {
                g->qstr[d] = d == nb - 1 ? g->L * g->E : g->qstr[d + 1] * q->shape[d + 1];
                g->kstr[d] = d == nb - 1 ? g->S * g->E : g->kstr[d + 1] * k->shape[d + 1];
                g->vstr[d] = d == nb - 1 ? g->S * g->Ev : g->vstr[d + 1] * v->shape[d + 1];
                g->ostr[d] = d == nb - 1 ? g->L * g->Ev : g->ostr[d + 1] * q->shape[d + 1];
            }
            g->qrow = g->krow = g->E;
            g->vrow = g->orow = g->Ev;
            if (g->group > 1) g->kstr[nb - 1] = g->vstr[nb - 1] = 0;
        }
    }
    /* GDL_SCALE_DEFAULT (NaN): PyTorch's scale=None; any other value as given, 0 and negative ones too */
    g->scale = scale == scale ? scale : g->E > 0 ? 1 / sqrt((double)g->E) : 1;
    g->causal = causal != 0;
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

/* where the kernels find q, k and v (QKV: q's thirds) or, grad set, their gradients (NULL where none is wanted) */
static void gdl__sdpa_ptrs(int lay, const gdl_attn_geom *g, gdl_tensor *q, gdl_tensor *k, gdl_tensor *v, int grad,
                           void **p) {
    int j;
    if (lay == GDL__SDPA_QKV) {
        void *base = !grad ? q->data : q->requires_grad ? q->grad->data : NULL;
        const int64_t third = g->E * g->bshape[g->nb - 1];
        for (j = 0; j < 3; j++) p[j] = base ? GDL__AT(base, q->dtype, j * third) : NULL;
        return;
    }
    p[0] = !grad ? q->data : q->requires_grad ? q->grad->data : NULL;
    p[1] = !grad ? k->data : k->requires_grad ? k->grad->data : NULL;
    p[2] = !grad ? v->data : v->requires_grad ? v->grad->data : NULL;
}

/* the op in layout lay (k and v NULL for QKV) */
static gdl_tensor *gdl__sdpa(const char *op, int lay, int H, gdl_tensor *q, gdl_tensor *k, gdl_tensor *v,
                             gdl_tensor *mask, double dropout_p, int is_causal, double scale) {
    const int qkv = lay == GDL__SDPA_QKV;
    gdl_attn_geom g;
    gdl_tensor *out, *lse, *in[4];
    gdl_node *n;
    const gdl_backend *be;
    int64_t shape[GDL_MAX_DIMS], nl;
    void *p[3];
    int fused, err, d;
    if (gdl__check_in(op, qkv ? "qkv" : "query", q, 0) < 0 || (!qkv && gdl__check_in(op, "key", k, 0) < 0) ||
        (!qkv && gdl__check_in(op, "value", v, 0) < 0) || (mask && gdl__check_in(op, "attn_mask", mask, 0) < 0) ||
        (!qkv && gdl__check_dev(op, q, k) < 0) || (!qkv && gdl__check_dev(op, q, v) < 0) || gdl__check_dev(op, q, mask) < 0)
        return NULL;
    if (gdl__ac_dt != GDL_F32) { /* class LOW: float arguments to the region's dtype, then again */
        gdl_tensor **args[4];
        int rc, na = 0;
        args[na++] = &q;
        if (!qkv) {
            args[na++] = &k;
            args[na++] = &v;
        }
        if (mask && mask->dtype != GDL_U8) args[na++] = &mask;
        if ((rc = gdl__ac_in(op, GDL_OP_SDPA, na, args)) < 0) return NULL;
        if (rc) return gdl__sdpa(op, lay, H, q, k, v, mask, dropout_p, is_causal, scale);
    }
    if (!gdl__is_float(q->dtype) || (!qkv && (k->dtype != q->dtype || v->dtype != q->dtype))) {
        if (qkv)
            gdl__set_error("%s: qkv must be a float tensor (f32, bf16 or f16), got %s %s", op, gdl_dtype_name(q->dtype),
                           gdl_shape_str(q));
        else
            gdl__set_error("%s: query, key and value must have one float dtype (f32, bf16 or f16), got %s %s, %s %s and "
                           "%s %s", op, gdl_dtype_name(q->dtype), gdl_shape_str(q), gdl_dtype_name(k->dtype),
                           gdl_shape_str(k), gdl_dtype_name(v->dtype), gdl_shape_str(v));
        return NULL;
    }
    if (!(dropout_p >= 0 && dropout_p <= 1)) {
        gdl__set_error("%s: dropout_p %g is not in [0,1]", op, dropout_p);
        return NULL;
    }
    if (gdl__sdpa_geom(op, lay, H, q, k, v, mask, is_causal, scale, &g, &fused) < 0) return NULL;
    if (!fused || dropout_p > 0) {
        if (lay == GDL__SDPA_PLAIN) return gdl__sdpa_unfused(q, k, v, mask, dropout_p, g.causal, g.scale, NULL);
        if (qkv) {
            const int64_t third = g.E * H;
            k = gdl_narrow(q, -1, third, third);
            v = gdl_narrow(q, -1, 2 * third, third);
            q = gdl_narrow(q, -1, 0, third);
        }
        if (!(q = gdl__sdpa_split(q, H)) || !(k = gdl__sdpa_split(k, H)) || !(v = gdl__sdpa_split(v, H))) return NULL;
        return gdl__sdpa_join(gdl__sdpa_unfused(q, k, v, mask, dropout_p, g.causal, g.scale, NULL));
    }
    for (d = 0; d < q->ndim - 1; d++) shape[d] = q->shape[d];
    shape[q->ndim - 1] = lay == GDL__SDPA_PLAIN ? g.Ev : H * g.Ev;
    nl = g.B * g.L;
    gdl__sdpa_ptrs(lay, &g, q, k, v, 0, p);
    if (!(be = gdl__be(op, q->device)) || !(out = gdl__tmp(op, q->ndim, shape, q->dtype, q->device)) ||
        !(lse = gdl__tmp(op, 1, &nl, GDL_F32, q->device)))
        return NULL;
    if (out->numel && be->k.attention(q->dtype, &g, p[0], p[1], p[2], mask ? mask->data : NULL, out->data, GDL__R(lse)) < 0)
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
        n->i[1] = lay;
        n->i[2] = H;
    }
    return gdl__finish(op, out);
}

GPUDL_API gdl_tensor *gdl_scaled_dot_product_attention(gdl_tensor *q, gdl_tensor *k, gdl_tensor *v, gdl_tensor *mask,
                                                       double dropout_p, int is_causal, double scale) {
    return gdl__sdpa("gdl_scaled_dot_product_attention", GDL__SDPA_PLAIN, 1, q, k, v, mask, dropout_p, is_causal, scale);
}

/* x [..., n, a, b] with its dim -3 split into [n / G, G] (mask: a dim -3 of 1 gets one more 1 before it; a mask of
   two dims stays as it is) */
static gdl_tensor *gdl__sdpa_group_view(gdl_tensor *x, int64_t G, int mask) {
    int64_t s[GDL_MAX_DIMS];
    int d, nd;
    if (!x || (mask && x->ndim < 3)) return x;
    nd = x->ndim;
    for (d = 0; d < nd - 3; d++) s[d] = x->shape[d];
    s[nd - 3] = x->shape[nd - 3] == 1 ? 1 : x->shape[nd - 3] / G;
    s[nd - 2] = x->shape[nd - 3] == 1 ? 1 : G;
    s[nd - 1] = x->shape[nd - 2];
    s[nd] = x->shape[nd - 1];
    return gdl_reshape(x, nd + 1, s);
}

GPUDL_API gdl_tensor *gdl_scaled_dot_product_attention_ex(gdl_tensor *q, gdl_tensor *k, gdl_tensor *v,
                                                          gdl_tensor *attn_mask, double dropout_p, int is_causal,
                                                          double scale, int enable_gqa) {
    const char *op = "gdl_scaled_dot_product_attention_ex";
    int64_t Hq, Hkv, G, s[GDL_MAX_DIMS];
    gdl_tensor *o;
    int d;
    if (!enable_gqa) return gdl__sdpa(op, GDL__SDPA_PLAIN, 1, q, k, v, attn_mask, dropout_p, is_causal, scale);
    if (gdl__check_in(op, "query", q, 0) < 0 || gdl__check_in(op, "key", k, 0) < 0 || gdl__check_in(op, "value", v, 0) < 0)
        return NULL;
    if (q->ndim < 3 || q->ndim >= GDL_MAX_DIMS || k->ndim != q->ndim || v->ndim != q->ndim ||
        k->shape[k->ndim - 3] != v->shape[v->ndim - 3] || k->shape[k->ndim - 3] < 1 ||
        q->shape[q->ndim - 3] % k->shape[k->ndim - 3] != 0) {
        gdl__set_error("%s: enable_gqa expects query [..., Hq, L, E], key [..., Hkv, S, E] and value [..., Hkv, S, Ev] "
                       "of 3 to %d dims with Hq a multiple of Hkv, got %s, %s and %s", op, GDL_MAX_DIMS - 1,
                       gdl_shape_str(q), gdl_shape_str(k), gdl_shape_str(v));
        return NULL;
    }
    Hq = q->shape[q->ndim - 3];
    Hkv = k->shape[k->ndim - 3];
    G = Hq / Hkv;
    if (G == 1) return gdl__sdpa(op, GDL__SDPA_PLAIN, 1, q, k, v, attn_mask, dropout_p, is_causal, scale);
    if (attn_mask && attn_mask->ndim >= 3 && attn_mask->shape[attn_mask->ndim - 3] != 1 &&
        attn_mask->shape[attn_mask->ndim - 3] != Hq) {
        gdl__set_error("%s: attn_mask %s cannot be broadcast to the scores [..., Hq=%lld, L, S] of query %s", op,
                       gdl_shape_str(attn_mask), (long long)Hq, gdl_shape_str(q));
        return NULL;
    }
    /* q [..., Hkv, G, L, E] against k and v [..., Hkv, 1, S, E]: the fused kernels' group (gdl_attn_geom) */
    o = gdl__sdpa(op, GDL__SDPA_PLAIN, 1, gdl__sdpa_group_view(q, G, 0), gdl__sdpa_group_view(k, 1, 0),
                  gdl__sdpa_group_view(v, 1, 0), gdl__sdpa_group_view(attn_mask, G, 1), dropout_p, is_causal, scale);
    if (!o) return NULL;
    for (d = 0; d < q->ndim - 1; d++) s[d] = q->shape[d];
    s[q->ndim - 1] = v->shape[v->ndim - 1];
    return gdl_reshape(o, q->ndim, s);
}

GPUDL_API gdl_tensor *gdl_sdpa_heads(gdl_tensor *q, gdl_tensor *k, gdl_tensor *v, int num_heads, gdl_tensor *attn_mask,
                                     double dropout_p, int is_causal, double scale) {
    return gdl__sdpa("gdl_sdpa_heads", GDL__SDPA_HEADS, num_heads, q, k, v, attn_mask, dropout_p, is_causal, scale);
}

GPUDL_API gdl_tensor *gdl_sdpa_qkv(gdl_tensor *qkv, int num_heads, gdl_tensor *attn_mask, double dropout_p, int is_causal,
                                   double scale) {
    return gdl__sdpa("gdl_sdpa_qkv", GDL__SDPA_QKV, num_heads, qkv, NULL, NULL, attn_mask, dropout_p, is_causal, scale);
}

static int gdl__bw_sdpa(gdl_node *n, const gdl_backend *be) {
    const int lay = (int)n->i[1], H = (int)n->i[2];
    gdl_tensor *q = n->in[0], *k = n->in[1], *v = n->in[2], *mask = n->in[3], *out = n->out;
    gdl_attn_geom g;
    gdl_real *delta;
    void *p[3], *gp[3];
    int fused;
    if (!out->numel || !(q->requires_grad || (k && k->requires_grad) || (v && v->requires_grad))) return 0;
    if (gdl__sdpa_geom("gdl_backward", lay, H, q, k, v, mask, (int)n->i[0], n->f[0], &g, &fused) < 0 ||
        !(delta = (gdl_real *)gdl__scratch("gdl_backward", out->device, sizeof(gdl_real) * (size_t)(g.B * g.L + 1))))
        return -1;
    gdl__sdpa_ptrs(lay, &g, q, k, v, 0, p);
    gdl__sdpa_ptrs(lay, &g, q, k, v, 1, gp);
    return be->k.attention_backward(out->dtype, &g, p[0], p[1], p[2], mask ? mask->data : NULL, out->data, out->grad->data,
                                  GDL__R(n->saved[0]), delta, gp[0], gp[1], gp[2]);
}
