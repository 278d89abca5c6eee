/* src/ops/nn.h — the network ops: dropout, batch and layer norm, embedding,
   and the losses. */

/* ---- dropout ---- */

GPUDL_API gdl_tensor *gdl_dropout(gdl_tensor *x, double p, int training) {
    const char *op = "gdl_dropout";
    gdl_tensor *out;
    gdl_node *n;
    uint64_t seed;
    int err;
    const gdl_backend *be;
    gdl_dtype dt = GDL_F32;
    if (gdl__ac_dt != GDL_F32 || (x && x->dtype != GDL_F32)) {
        if (x && gdl__lp_native(GDL_OP_DROPOUT, x->dtype)) dt = x->dtype; /* native */
        else GDL__LOWP1(op, GDL_OP_DROPOUT, gdl_dropout(x, p, training), x);
    }
    if (gdl__check_in(op, "x", x, dt == GDL_F32) < 0) return NULL;
    if (!(p >= 0 && p <= 1)) {
        gdl__set_error("%s: probability %g is not in [0,1]", op, p);
        return NULL;
    }
    if (!training || p == 0) return x; /* identity, as PyTorch */
    if (gdl__capturing) { /* the host draws the mask's seed: a replay would repeat it */
        gdl__set_error("%s: dropout in training cannot be captured in a CUDA graph (every replay would drop the "
                       "same elements)", op);
        return NULL;
    }
    seed = gdl_rng_next_u64();
    if (!(be = gdl__be(op, x->device)) || !(out = gdl__tmp(op, x->ndim, x->shape, dt, x->device))) return NULL;
    if (be->k.dropout(dt, x->numel, p, seed, x->data, out->data) < 0)
        return NULL;
    n = gdl__record(op, GDL_OP_DROPOUT, out, 1, &x, &err);
    if (err) return NULL;
    if (n) {
        n->f[0] = p;
        memcpy(&n->i[0], &seed, sizeof seed);
    }
    return gdl__finish(op, out);
}

static int gdl__bw_dropout(gdl_node *n, const gdl_backend *be) {
    gdl_real *gx = GDL__G(n->in[0]);
    uint64_t seed;
    memcpy(&seed, &n->i[0], sizeof seed);
    if (gx && n->out->dtype != GDL_F32)
        return be->k.dropout_backward(n->out->dtype, n->out->numel, n->f[0], seed, n->out->grad->data, gx);
    return gx ? be->k.dropout_backward(GDL_F32, n->out->numel, n->f[0], seed, GDL__R(n->out->grad), gx) : 0;
}

/* ---- normalisation ---- */

static int gdl__check_vec(const char *op, const char *arg, const gdl_tensor *v, int64_t len, const gdl_tensor *x) {
    if (!v) return 0;
    if (gdl__check_in(op, arg, v, 1) < 0 || gdl__check_dev(op, x, v) < 0) return -1;
    if (v->numel != len) {
        gdl__set_error("%s: %s %s should have %lld elements to match input %s", op, arg, gdl_shape_str(v),
                       (long long)len, gdl_shape_str(x));
        return -1;
    }
    return 0;
}

/* the tape node of a normalisation: inputs x, weight, bias (NULL where absent), saved the statistics its
   backward reads (the mean and 1 / std), f[0] eps; the caller adds its sizes. NULL with *err 0 when nothing
   records, as gdl__record. */
static gdl_node *gdl__record_norm(const char *op, int opid, gdl_tensor *out, gdl_tensor *x, gdl_tensor *weight,
                                  gdl_tensor *bias, gdl_tensor *mean, gdl_tensor *istd, double eps, int *err) {
    gdl_tensor *in[3];
    gdl_node *n;
    in[0] = x; in[1] = weight; in[2] = bias;
    if ((n = gdl__record(op, opid, out, 3, in, err)) != NULL) {
        n->saved[0] = mean;
        n->saved[1] = istd;
        n->f[0] = eps;
    }
    return n;
}

/* gdl_batch_norm_act (op: the public call's name) with act GDL_ACT_NONE (gdl_batch_norm), GDL_ACT_RELU
   (gdl_batch_norm_relu) or GDL_ACT_GELU: the activation in the backend's passes. GELU keeps its input, pre
   (f32 whatever x's dtype), for the backward; the CPU's f32 maps (S > 1) keep only the doubles that made it
   (GDL__ACT_GELU_RECIPE, n->i[4] 1): the backward rebuilds it from x. */
static gdl_tensor *gdl__batch_norm(const char *op, gdl_tensor *x, gdl_tensor *rmean, gdl_tensor *rvar,
                                   gdl_tensor *weight, gdl_tensor *bias, int training, double momentum, double eps,
                                   int act) {
    const gdl_op opid = act == GDL_ACT_RELU   ? GDL_OP_BATCH_NORM_RELU
                        : act == GDL_ACT_GELU ? GDL_OP_BATCH_NORM_GELU
                                              : GDL_OP_BATCH_NORM;
    const int relu = act == GDL_ACT_RELU, gelu = act == GDL_ACT_GELU;
    int64_t N, C, S = 1, cshape;
    int k, err, use_batch, recipe = 0;
    gdl_tensor *out, *mean, *invstd, *stats = NULL, *pre = NULL;
    gdl_node *n;
    const gdl_backend *be;
    gdl_dtype dt = GDL_F32;
    if (act != GDL_ACT_NONE && !relu && !gelu) {
        gdl__set_error("%s: activation %d is not fused after batch norm (GDL_ACT_NONE, GDL_ACT_RELU or GDL_ACT_GELU)",
                       op, act);
        return NULL;
    }
    if (x && gdl__is_low(x->dtype) && (!weight || weight->dtype == GDL_F32 || weight->dtype == x->dtype) &&
        (!bias || bias->dtype == GDL_F32 || bias->dtype == x->dtype)) {
        /* native (cuDNN's under autocast): x and y in dt, the statistics and
           the affine parameters f32 -- low ones get an f32 copy (a cast) */
        dt = x->dtype;
        if (gdl__check_in(op, "weight", weight ? weight : x, 0) < 0 || gdl__check_in(op, "bias", bias ? bias : x, 0) < 0 ||
            gdl__check_dev(op, x, weight) < 0 || gdl__check_dev(op, x, bias) < 0)
            return NULL;
        if (weight && weight->dtype != GDL_F32) {
            gdl_tensor *w0 = weight; /* passed twice (weight is bias): one copy, so its gradient rounds once */
            if (!(weight = gdl__cast_t(op, weight, GDL_F32))) return NULL;
            if (bias == w0) bias = weight;
        }
        if (bias && bias->dtype != GDL_F32 && !(bias = gdl__cast_t(op, bias, GDL_F32))) return NULL;
    } else {
        GDL__LOWP3_FIRST(op, opid, gdl__batch_norm(op, x, rmean, rvar, weight, bias, training, momentum, eps, act), x,
                         weight, bias);
    }
    if (gdl__check_in(op, "input", x, dt == GDL_F32) < 0) return NULL;
    if (x->ndim < 2 || x->ndim > 4) {
        gdl__set_error("%s: expected input [N,C], [N,C,L] or [N,C,H,W], got %s", op, gdl_shape_str(x));
        return NULL;
    }
    N = x->shape[0];
    C = x->shape[1];
    for (k = 2; k < x->ndim; k++) S *= x->shape[k];
    if (gdl__check_vec(op, "running_mean", rmean, C, x) < 0 || gdl__check_vec(op, "running_var", rvar, C, x) < 0 ||
        gdl__check_vec(op, "weight", weight, C, x) < 0 || gdl__check_vec(op, "bias", bias, C, x) < 0)
        return NULL;
    if ((rmean == NULL) != (rvar == NULL)) {
        gdl__set_error("%s: give both running_mean and running_var, or neither", op);
        return NULL;
    }
    use_batch = training || !rmean;
    if (use_batch && N * S <= 1) {
        gdl__set_error("%s: expected more than 1 value per channel when training, got input %s", op, gdl_shape_str(x));
        return NULL;
    }
    cshape = C;
    if (!(be = gdl__be(op, x->device)) || !(out = gdl__tmp(op, x->ndim, x->shape, dt, x->device)))
        return NULL;
    if (gelu) { /* the node keeps two tensors: the statistics [2C] (mean, then invstd) and GELU's input or
                   its recipe [4C doubles] */
        int64_t rshape = 8 * C;
        recipe = dt == GDL_F32 && x->device.type == GDL_DEVICE_CPU && S > 1;
        cshape = 2 * C;
        if (!(stats = gdl__tmp(op, 1, &cshape, GDL_F32, x->device)) ||
            !(pre = recipe ? gdl__tmp(op, 1, &rshape, GDL_F32, x->device)
                           : gdl__tmp(op, x->ndim, x->shape, GDL_F32, x->device)))
            return NULL;
        mean = invstd = stats;
    } else if (!(mean = gdl__tmp(op, 1, &cshape, GDL_F32, x->device)) ||
               !(invstd = gdl__tmp(op, 1, &cshape, GDL_F32, x->device))) {
        return NULL;
    }
    if (dt != GDL_F32) {
        if (be->k.batchnorm(dt, N, C, S, x->data, weight ? GDL__R(weight) : NULL, bias ? GDL__R(bias) : NULL, out->data,
                             GDL__R(mean), GDL__R(invstd) + (gelu ? C : 0), rmean ? GDL__R(rmean) : NULL, rvar ? GDL__R(rvar) : NULL,
                             use_batch, momentum, eps, act, pre ? GDL__R(pre) : NULL) < 0)
            return NULL;
    } else if (be->k.batchnorm(GDL_F32, N, C, S, GDL__R(x), weight ? GDL__R(weight) : NULL, bias ? GDL__R(bias) : NULL, GDL__R(out),
                             GDL__R(mean), GDL__R(invstd) + (gelu ? C : 0), rmean ? GDL__R(rmean) : NULL,
                             rvar ? GDL__R(rvar) : NULL, use_batch, momentum, eps, recipe ? GDL__ACT_GELU_RECIPE : act,
                             pre ? GDL__R(pre) : NULL) < 0) {
        return NULL;
    }
    n = gelu ? gdl__record_norm(op, opid, out, x, weight, bias, stats, pre, eps, &err)
             : gdl__record_norm(op, opid, out, x, weight, bias, mean, invstd, eps, &err);
    if (err) return NULL;
    if (n) {
        n->i[0] = N; n->i[1] = C; n->i[2] = S; n->i[3] = use_batch; n->i[4] = recipe;
        n->stats[0] = rmean; n->stats[1] = rvar;
    }
    return gdl__finish(op, out);
}
GPUDL_API gdl_tensor *gdl_batch_norm(gdl_tensor *x, gdl_tensor *rmean, gdl_tensor *rvar, gdl_tensor *weight,
                                     gdl_tensor *bias, int training, double momentum, double eps) {
    return gdl__batch_norm("gdl_batch_norm", x, rmean, rvar, weight, bias, training, momentum, eps, GDL_ACT_NONE);
}
GPUDL_API gdl_tensor *gdl_batch_norm_relu(gdl_tensor *x, gdl_tensor *rmean, gdl_tensor *rvar, gdl_tensor *weight,
                                          gdl_tensor *bias, int training, double momentum, double eps) {
    return gdl__batch_norm("gdl_batch_norm_relu", x, rmean, rvar, weight, bias, training, momentum, eps, GDL_ACT_RELU);
}
GPUDL_API gdl_tensor *gdl_batch_norm_act(gdl_tensor *x, gdl_tensor *rmean, gdl_tensor *rvar, gdl_tensor *weight,
                                         gdl_tensor *bias, int training, double momentum, double eps, gdl_act act) {
    return gdl__batch_norm("gdl_batch_norm_act", x, rmean, rvar, weight, bias, training, momentum, eps, (int)act);
}

/* batch_norm_relu's backward reads its output (the ReLU's mask); batch_norm_gelu's its saved pre or pre's
   recipe (saved[1], the statistics in saved[0]: mean, then invstd) */
static int gdl__bw_batch_norm(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *w = n->in[1];
    const int relu = n->op == GDL_OP_BATCH_NORM_RELU, gelu = n->op == GDL_OP_BATCH_NORM_GELU;
    const int act = relu ? GDL_ACT_RELU : gelu ? (n->i[4] ? GDL__ACT_GELU_RECIPE : GDL_ACT_GELU) : GDL_ACT_NONE;
    if (n->out->dtype != GDL_F32)
        return be->k.batchnorm_backward(n->out->dtype, n->i[0], n->i[1], n->i[2], n->in[0]->data, n->out->grad->data,
                                         relu ? n->out->data : gelu ? n->saved[1]->data : NULL, w ? GDL__R(w) : NULL,
                                         GDL__R(n->saved[0]),
                                         gelu ? GDL__R(n->saved[0]) + n->i[1] : GDL__R(n->saved[1]), (int)n->i[3],
                                         n->in[0]->requires_grad ? n->in[0]->grad->data : NULL, GDL__G(w),
                                         GDL__G(n->in[2]), 1, act);
    /* x's gradient may be unset (gdl__bw_fresh_ok): written, not added; the weight's and bias's are added */
    if (gdl__grad_zero(w, be) < 0 || gdl__grad_zero(n->in[2], be) < 0) return -1;
    return be->k.batchnorm_backward(GDL_F32, n->i[0], n->i[1], n->i[2], GDL__R(n->in[0]), GDL__R(n->out->grad),
                                  relu ? GDL__R(n->out) : gelu ? GDL__R(n->saved[1]) : NULL, w ? GDL__R(w) : NULL,
                                  GDL__R(n->saved[0]), gelu ? GDL__R(n->saved[0]) + n->i[1] : GDL__R(n->saved[1]),
                                  (int)n->i[3], GDL__G(n->in[0]), GDL__G(w), GDL__G(n->in[2]),
                                  gdl__grad_beta(n->in[0]), act);
}

GPUDL_API gdl_tensor *gdl_layer_norm(gdl_tensor *x, gdl_tensor *weight, gdl_tensor *bias, double eps) {
    const char *op = "gdl_layer_norm";
    int64_t D, rows;
    int err;
    gdl_tensor *out, *mean, *rstd;
    gdl_node *n;
    const gdl_backend *be;
    GDL__LOWP3_FIRST(op, GDL_OP_LAYER_NORM, gdl_layer_norm(x, weight, bias, eps), x, weight, bias);
    if (gdl__check_in(op, "input", x, 1) < 0) return NULL;
    if (x->ndim < 1 || x->shape[x->ndim - 1] == 0) {
        gdl__set_error("%s: expected an input with a non-empty last dim, got %s", op, gdl_shape_str(x));
        return NULL;
    }
    D = x->shape[x->ndim - 1];
    rows = x->numel / D;
    if (gdl__check_vec(op, "weight", weight, D, x) < 0 || gdl__check_vec(op, "bias", bias, D, x) < 0) return NULL;
    if (!(be = gdl__be(op, x->device)) || !(out = gdl__tmp(op, x->ndim, x->shape, GDL_F32, x->device)) ||
        !(mean = gdl__tmp(op, 1, &rows, GDL_F32, x->device)) || !(rstd = gdl__tmp(op, 1, &rows, GDL_F32, x->device)))
        return NULL;
    if (rows && be->k.layernorm(rows, D, GDL__R(x), weight ? GDL__R(weight) : NULL, bias ? GDL__R(bias) : NULL, eps,
                              GDL__R(out), GDL__R(mean), GDL__R(rstd)) < 0)
        return NULL;
    n = gdl__record_norm(op, GDL_OP_LAYER_NORM, out, x, weight, bias, mean, rstd, eps, &err);
    if (err) return NULL;
    if (n) {
        n->i[0] = rows; n->i[1] = D;
    }
    return gdl__finish(op, out);
}

static int gdl__bw_layer_norm(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *w = n->in[1];
    if (!n->i[0]) return 0;
    return be->k.layernorm_backward(n->i[0], n->i[1], GDL__R(n->in[0]), GDL__R(n->out->grad), w ? GDL__R(w) : NULL,
                                  GDL__R(n->saved[0]), GDL__R(n->saved[1]), GDL__G(n->in[0]), GDL__G(w),
                                  GDL__G(n->in[2]));
}

/* ---- embedding ---- */

/* Host-side range check of integer indices (CPU tensors only). */
static int gdl__check_indices(const char *op, const gdl_tensor *idx, int64_t lo, int64_t hi, int ignore_ok, int ignore) {
    int64_t i;
    const int32_t *p = (const int32_t *)idx->data;
    if (idx->device.type != GDL_DEVICE_CPU) return 0;
    for (i = 0; i < idx->numel; i++)
        if ((p[i] < lo || p[i] >= hi) && !(ignore_ok && p[i] == ignore)) {
            gdl__set_error("%s: index %d at position %lld is out of range [%lld,%lld)", op, p[i], (long long)i,
                           (long long)lo, (long long)hi);
            return -1;
        }
    return 0;
}

GPUDL_API gdl_embedding_opts gdl_embedding_defaults(void) {
    gdl_embedding_opts o;
    o.padding_idx = GDL_NO_PADDING_IDX;
    o.max_norm = 0;
    o.norm_type = 2;
    return o;
}

/* the options checked against weight [V, D]; *pad the padding row in [0, V), or -1 for none */
static int gdl__embedding_opts(const char *op, const gdl_embedding_opts *o, int64_t V, int64_t *pad) {
    *pad = -1;
    if (o->padding_idx != GDL_NO_PADDING_IDX) {
        if (o->padding_idx < -V || o->padding_idx >= V) {
            gdl__set_error("%s: padding_idx %lld is not in [-%lld, %lld) (num_embeddings %lld)", op,
                           (long long)o->padding_idx, (long long)V, (long long)V, (long long)V);
            return -1;
        }
        *pad = o->padding_idx < 0 ? o->padding_idx + V : o->padding_idx;
    }
    if (!(o->max_norm >= 0) || !(o->norm_type > 0)) {
        gdl__set_error("%s: max_norm %g must be >= 0 (0: none) and norm_type %g positive", op, o->max_norm,
                       o->norm_type);
        return -1;
    }
    return 0;
}

static gdl_tensor *gdl__embedding(const char *op, gdl_tensor *idx, gdl_tensor *w, const gdl_embedding_opts *o) {
    int64_t shape[GDL_MAX_DIMS], pad;
    gdl_tensor *out, *in[2];
    const gdl_backend *be;
    if (o->max_norm > 0 && w && w->dtype != GDL_F32) { /* the renormalisation writes the weight itself */
        gdl__set_error("%s: max_norm renormalises the weight in place: it must be f32, got %s %s", op,
                       gdl_dtype_name(w->dtype), gdl_shape_str(w));
        return NULL;
    }
    GDL__LOWP1(op, GDL_OP_EMBEDDING, gdl__embedding(op, idx, w, o), w);
    if (gdl__check_two(op, "indices", idx, 0, "weight", w, 1) < 0) return NULL;
    if (idx->dtype != GDL_I32 || w->ndim != 2 || idx->ndim >= GDL_MAX_DIMS) {
        gdl__set_error("%s: expected i32 indices and a weight [V,D], got %s %s and %s %s", op, gdl_dtype_name(idx->dtype),
                       gdl_shape_str(idx), gdl_dtype_name(w->dtype), gdl_shape_str(w));
        return NULL;
    }
    if (gdl__check_indices(op, idx, 0, w->shape[0], 0, 0) < 0 || gdl__embedding_opts(op, o, w->shape[0], &pad) < 0)
        return NULL;
    memcpy(shape, idx->shape, sizeof shape);
    shape[idx->ndim] = w->shape[1];
    if (!(be = gdl__be(op, w->device)) || !(out = gdl__tmp(op, idx->ndim + 1, shape, GDL_F32, w->device))) return NULL;
    if (o->max_norm > 0 && idx->numel &&
        be->k.embedding_renorm(idx->numel, w->shape[1], w->shape[0], (const int32_t *)idx->data, GDL__R(w),
                               o->max_norm, o->norm_type) < 0)
        return NULL;
    if (out->numel && be->k.embedding(idx->numel, w->shape[1], w->shape[0], (const int32_t *)idx->data, GDL__R(w), GDL__R(out)) < 0)
        return NULL;
    in[0] = idx;
    in[1] = w;
    return gdl__finish_with(op, GDL_OP_EMBEDDING, out, 2, in, pad);
}

GPUDL_API gdl_tensor *gdl_embedding(gdl_tensor *idx, gdl_tensor *w) {
    gdl_embedding_opts o = gdl_embedding_defaults();
    return gdl__embedding("gdl_embedding", idx, w, &o);
}
GPUDL_API gdl_tensor *gdl_embedding_ex(gdl_tensor *idx, gdl_tensor *w, const gdl_embedding_opts *opts) {
    gdl_embedding_opts o = opts ? *opts : gdl_embedding_defaults();
    return gdl__embedding("gdl_embedding_ex", idx, w, &o);
}

/* padding_idx: the padding row's gradient as it was before this op's scatter-add (saved, then put back),
   so the row gets nothing from this lookup and keeps what other ops gave it */
static int gdl__bw_embedding(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *w = n->in[1], *keep = NULL;
    gdl_real *gw = GDL__G(w);
    const int64_t D = w->shape[1], pad = n->i[0];
    const size_t row = sizeof(gdl_real) * (size_t)D;
    if (!gw || !n->out->numel) return 0;
    if (pad >= 0 && (!(keep = gdl__tmp("gdl_backward", 1, &w->shape[1], GDL_F32, w->device)) ||
                     be->rt.copy(keep->data, gw + pad * D, row, 2) < 0))
        return -1;
    if (be->k.embedding_backward(n->in[0]->numel, D, w->shape[0], (const int32_t *)n->in[0]->data,
                                 GDL__R(n->out->grad), gw) < 0)
        return -1;
    return keep ? be->rt.copy(gw + pad * D, keep->data, row, 2) : 0;
}

/* ---- losses ---- */

GPUDL_API gdl_ce_opts gdl_ce_defaults(void) {
    gdl_ce_opts o;
    o.reduction = GDL_REDUCE_MEAN;
    o.ignore_index = -100;
    o.label_smoothing = 0;
    o.weight = NULL;
    return o;
}

/* Cross entropy with class-probability targets [B,C] (PyTorch's, as mixup/cutmix make them), composed from
   differentiable ops: -sum_c t_c log_softmax(x)_c per row, the targets smoothed first as
   t (1 - ls) + ls / C; the mean is over the B rows. */
static gdl_tensor *gdl__xent_soft(const char *opname, int op, gdl_tensor *x, gdl_tensor *tgt, const gdl_ce_opts *o) {
    gdl_tensor *t = tgt, *rows;
    if (op != GDL_OP_CROSS_ENTROPY || x->ndim != 2 || !gdl_same_shape(x, tgt)) {
        gdl__set_error("%s: probability targets %s %s need cross entropy over input [B,C] of the same shape, got "
                       "input %s %s", opname, gdl_dtype_name(tgt->dtype), gdl_shape_str(tgt), gdl_dtype_name(x->dtype),
                       gdl_shape_str(x));
        return NULL;
    }
    if ((unsigned)o->reduction > GDL_REDUCE_NONE || !(o->label_smoothing >= 0 && o->label_smoothing <= 1)) {
        gdl__set_error("%s: bad reduction %d or label_smoothing %g", opname, (int)o->reduction, o->label_smoothing);
        return NULL;
    }
    if (x->shape[1] == 0) {
        gdl__set_error("%s: input %s has no classes", opname, gdl_shape_str(x));
        return NULL;
    }
    if (o->label_smoothing > 0)
        t = gdl_add_scalar(gdl_mul_scalar(tgt, 1 - o->label_smoothing), o->label_smoothing / (double)x->shape[1]);
    if (o->weight) t = gdl_mul(t, o->weight);
    rows = gdl_mul_scalar(gdl_sum_dim(gdl_mul(t, gdl_log_softmax(x, 1)), 1, 0), -1);
    if (!rows) return NULL;
    return o->reduction == GDL_REDUCE_NONE ? rows : o->reduction == GDL_REDUCE_SUM ? gdl_sum(rows) : gdl_mean(rows);
}

static gdl_tensor *gdl__xent(const char *opname, int op, gdl_tensor *x, gdl_tensor *tgt, const gdl_ce_opts *o);

/* PyTorch's weighted cross entropy over x [N, C] and i32 targets [N], composed: the picks are nll_loss
   ops (on x * weight for the loss, on the weights for each target's weight, on ones for the targets not
   ignored), so every part has its own backward and ignored targets give 0 everywhere. Per row
   (1 - ls) * -w_y logp_y + ls / C * -sum_c w_c logp_c; the mean divides the sum by the targets' weights. */
static gdl_tensor *gdl__xent_weighted(const char *opname, gdl_tensor *x, gdl_tensor *tgt, const gdl_ce_opts *o) {
    const double ls = o->label_smoothing;
    gdl_tensor *logp = gdl_log_softmax(x, 1), *ones, *wlogp, *rows, *wy;
    ones = gdl__tmp(opname, 2, x->shape, GDL_F32, x->device);
    if (!logp || !ones || gdl_fill_(ones, 1) < 0 || !(wlogp = gdl_mul(logp, o->weight))) return NULL;
    rows = gdl_mul_scalar(gdl_nll_loss(wlogp, tgt, GDL_REDUCE_NONE, o->ignore_index), 1 - ls);
    if (ls > 0) {
        gdl_tensor *valid = gdl_mul_scalar(gdl_nll_loss(ones, tgt, GDL_REDUCE_NONE, o->ignore_index), -1);
        gdl_tensor *smooth = gdl_mul(gdl_sum_dim(wlogp, 1, 0), valid);
        rows = gdl_sub(rows, gdl_mul_scalar(smooth, ls / (double)x->shape[1]));
    }
    if (!rows || o->reduction == GDL_REDUCE_NONE) return rows;
    if (o->reduction == GDL_REDUCE_SUM) return gdl_sum(rows);
    wy = gdl_nll_loss(gdl_detach(gdl_mul(ones, o->weight)), tgt, GDL_REDUCE_SUM, o->ignore_index);
    return gdl_div(gdl_sum(rows), gdl_mul_scalar(wy, -1));
}

/* [B, C, d1, ...] logits (targets [B, d1, ...], or probabilities of the logits' shape) as [N, C] rows, a
   weight checked, then the loss of the rows; reduction none reshaped to [B, d1, ...] */
static gdl_tensor *gdl__xent_nd(const char *opname, int op, gdl_tensor *x, gdl_tensor *tgt, const gdl_ce_opts *o) {
    const int soft = gdl__is_float(tgt->dtype), nd = x->ndim;
    int perm[GDL_MAX_DIMS], k, bad = 0;
    int64_t rows_shape[2], tshape[GDL_MAX_DIMS], N = 1;
    gdl_ce_opts o2 = *o;
    gdl_tensor *x2 = x, *t2 = tgt, *r;
    GDL__LOWP1(opname, op, gdl__xent_nd(opname, op, x, tgt, o), x);
    if (gdl__check_two(opname, "input", x, 1, "target", tgt, 0) < 0) return NULL;
    if (nd < 2) bad = 1;
    else if (soft) bad = !gdl_same_shape(x, tgt);
    else if (tgt->dtype != GDL_I32 || tgt->ndim != nd - 1 || tgt->shape[0] != x->shape[0]) bad = 1;
    for (k = 2; !bad && !soft && k < nd; k++) bad = tgt->shape[k - 1] != x->shape[k];
    if (bad) {
        gdl__set_error("%s: expected input [B, C, d1, ...] with i32 target [B, d1, ...] (or probabilities of the "
                       "input's shape), got %s %s and %s %s", opname, gdl_dtype_name(x->dtype), gdl_shape_str(x),
                       gdl_dtype_name(tgt->dtype), gdl_shape_str(tgt));
        return NULL;
    }
    if ((unsigned)o->reduction > GDL_REDUCE_NONE || !(o->label_smoothing >= 0 && o->label_smoothing <= 1) ||
        x->shape[1] == 0) {
        gdl__set_error("%s: bad reduction %d or label_smoothing %g, or input %s has no classes", opname,
                       (int)o->reduction, o->label_smoothing, gdl_shape_str(x));
        return NULL;
    }
    if (o->weight) {
        if (gdl__check_in(opname, "weight", o->weight, 1) < 0 ||
            gdl__check_dev(opname, x, o->weight) < 0)
            return NULL;
        if (o->weight->ndim != 1 || o->weight->shape[0] != x->shape[1] || o->weight->dtype != GDL_F32) {
            gdl__set_error("%s: weight must be f32 [C] = [%lld] for input %s, got %s %s", opname,
                           (long long)x->shape[1], gdl_shape_str(x), gdl_dtype_name(o->weight->dtype),
                           gdl_shape_str(o->weight));
            return NULL;
        }
    }
    if (nd > 2) { /* the classes last: [B, d1, ..., C], then [N, C] */
        perm[0] = 0;
        for (k = 1; k < nd - 1; k++) perm[k] = k + 1;
        perm[nd - 1] = 1;
        for (k = 0; k < nd; k++)
            if (k != 1) N *= x->shape[k];
        rows_shape[0] = N;
        rows_shape[1] = x->shape[1];
        if (!(x2 = gdl_reshape(gdl_permute(x, nd, perm), 2, rows_shape))) return NULL;
        if (!(t2 = soft ? gdl_reshape(gdl_permute(tgt, nd, perm), 2, rows_shape) : gdl_reshape(tgt, 1, &N)))
            return NULL;
    }
    if (o->weight && !soft) {
        if (gdl__check_indices(opname, t2, 0, x->shape[1], 1, o->ignore_index) < 0) return NULL;
        r = gdl__xent_weighted(opname, x2, t2, o);
    } else {
        r = soft ? gdl__xent_soft(opname, op, x2, t2, o) : (o2.weight = NULL, gdl__xent(opname, op, x2, t2, &o2));
    }
    if (!r || nd <= 2 || o->reduction != GDL_REDUCE_NONE) return r;
    tshape[0] = x->shape[0];
    for (k = 2; k < nd; k++) tshape[k - 1] = x->shape[k];
    return gdl_reshape(r, nd - 1, tshape);
}

static gdl_tensor *gdl__xent(const char *opname, int op, gdl_tensor *x, gdl_tensor *tgt, const gdl_ce_opts *o) {
    int64_t B, C, one = 1;
    int err;
    gdl_tensor *rows, *out, *count, *in[2];
    gdl_node *n;
    const gdl_backend *be;
    if (x && tgt && (x->ndim > 2 || o->weight)) return gdl__xent_nd(opname, op, x, tgt, o);
    if (x && tgt && gdl__is_float(tgt->dtype) && tgt->ndim == 2) return gdl__xent_soft(opname, op, x, tgt, o);
    GDL__LOWP1(opname, op, gdl__xent(opname, op, x, tgt, o), x);
    if (gdl__check_two(opname, "input", x, 1, "target", tgt, 0) < 0) return NULL;
    if (x->ndim != 2 || tgt->ndim != 1 || tgt->dtype != GDL_I32 || tgt->shape[0] != x->shape[0]) {
        gdl__set_error("%s: expected input [B,C] and i32 target [B], got %s %s and %s %s", opname,
                       gdl_dtype_name(x->dtype), gdl_shape_str(x), gdl_dtype_name(tgt->dtype), gdl_shape_str(tgt));
        return NULL;
    }
    if ((unsigned)o->reduction > GDL_REDUCE_NONE || !(o->label_smoothing >= 0 && o->label_smoothing <= 1)) {
        gdl__set_error("%s: bad reduction %d or label_smoothing %g", opname, (int)o->reduction, o->label_smoothing);
        return NULL;
    }
    B = x->shape[0];
    C = x->shape[1];
    if (C == 0) {
        gdl__set_error("%s: input %s has no classes", opname, gdl_shape_str(x));
        return NULL;
    }
    if (gdl__check_indices(opname, tgt, 0, C, 1, o->ignore_index) < 0) return NULL;
    if (!(be = gdl__be(opname, x->device)) || !(rows = gdl__tmp(opname, 1, &B, GDL_F32, x->device)) ||
        !(count = gdl__tmp(opname, 1, &one, GDL_F32, x->device)))
        return NULL;
    out = rows;
    if (o->reduction != GDL_REDUCE_NONE && !(out = gdl__tmp(opname, 0, NULL, GDL_F32, x->device))) return NULL;
    if (be->k.xent(B, C, GDL__R(x), (const int32_t *)tgt->data, o->ignore_index, o->label_smoothing,
                 op == GDL_OP_NLL_LOSS, o->reduction, GDL__R(rows), GDL__R(out), GDL__R(count)) < 0)
        return NULL;
    in[0] = x;
    in[1] = tgt;
    n = gdl__record(opname, op, out, 2, in, &err);
    if (err) return NULL;
    if (n) {
        n->saved[0] = count;
        n->i[0] = o->ignore_index;
        n->i[1] = o->reduction;
        n->f[0] = o->label_smoothing;
    }
    return gdl__finish(opname, out);
}

static int gdl__bw_xent(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *x = n->in[0];
    gdl_real *gx = GDL__G(x);
    if (!gx) return 0;
    return be->k.xent_backward(x->shape[0], x->shape[1], GDL__R(x), (const int32_t *)n->in[1]->data, (int)n->i[0],
                             n->f[0], n->op == GDL_OP_NLL_LOSS, (int)n->i[1], GDL__R(n->out->grad),
                             GDL__R(n->saved[0]), gx);
}

GPUDL_API gdl_tensor *gdl_cross_entropy_ex(gdl_tensor *logits, gdl_tensor *targets, const gdl_ce_opts *opts) {
    gdl_ce_opts o = opts ? *opts : gdl_ce_defaults();
    return gdl__xent("gdl_cross_entropy", GDL_OP_CROSS_ENTROPY, logits, targets, &o);
}
GPUDL_API gdl_tensor *gdl_cross_entropy(gdl_tensor *logits, gdl_tensor *targets) {
    return gdl_cross_entropy_ex(logits, targets, NULL);
}
GPUDL_API gdl_tensor *gdl_nll_loss(gdl_tensor *log_probs, gdl_tensor *targets, gdl_reduction r, int ignore_index) {
    gdl_ce_opts o = gdl_ce_defaults();
    o.reduction = r;
    o.ignore_index = ignore_index;
    return gdl__xent("gdl_nll_loss", GDL_OP_NLL_LOSS, log_probs, targets, &o);
}

static gdl_tensor *gdl__pointwise_loss(const char *opname, int op, gdl_tensor *x, gdl_tensor *y, gdl_reduction r) {
    int err;
    gdl_tensor *out, *in[2];
    const gdl_backend *be;
    GDL__LOWP2(opname, op, gdl__pointwise_loss(opname, op, x, y, r), x, y);
    if (gdl__check_two(opname, "input", x, 1, "target", y, 1) < 0) return NULL;
    if (!gdl_same_shape(x, y)) {
        gdl__set_error("%s: input %s and target %s must have the same shape", opname, gdl_shape_str(x), gdl_shape_str(y));
        return NULL;
    }
    if ((unsigned)r > GDL_REDUCE_NONE) {
        gdl__set_error("%s: bad reduction %d", opname, (int)r);
        return NULL;
    }
    if (!(be = gdl__be(opname, x->device)) || !(out = gdl__tmp(opname, x->ndim, x->shape, GDL_F32, x->device))) return NULL;
    if (be->k.pointwise_loss(op == GDL_OP_MSE ? GDL_LOSS_MSE : GDL_LOSS_BCE_LOGITS, x->numel, GDL__R(x), GDL__R(y),
                           GDL__R(out)) < 0)
        return NULL;
    in[0] = x;
    in[1] = y;
    gdl__record(opname, op, out, 2, in, &err);
    if (err || !gdl__finish(opname, out)) return NULL;
    return r == GDL_REDUCE_NONE ? out : r == GDL_REDUCE_SUM ? gdl_sum(out) : gdl_mean(out);
}

static int gdl__bw_pointwise_loss(gdl_node *n, const gdl_backend *be) {
    return be->k.pointwise_loss_backward(n->op == GDL_OP_MSE ? GDL_LOSS_MSE : GDL_LOSS_BCE_LOGITS, n->out->numel,
                                       GDL__R(n->in[0]), GDL__R(n->in[1]), GDL__R(n->out->grad), GDL__G(n->in[0]),
                                       GDL__G(n->in[1]));
}

GPUDL_API gdl_tensor *gdl_mse_loss(gdl_tensor *input, gdl_tensor *target, gdl_reduction r) {
    return gdl__pointwise_loss("gdl_mse_loss", GDL_OP_MSE, input, target, r);
}
GPUDL_API gdl_tensor *gdl_bce_with_logits(gdl_tensor *input, gdl_tensor *target, gdl_reduction r) {
    return gdl__pointwise_loss("gdl_bce_with_logits", GDL_OP_BCE_WITH_LOGITS, input, target, r);
}
