/* src/ops/reductions.h — reductions (sum, mean, max, min with their indices, argmax), softmax and
   log-softmax, cumsum. */

/* ---- reductions and softmax ---- */

/* gdl__record, then gdl__finish, for an op over the [outer][nred][inner] split of x at dim d (-1: all of
   x): the node keeps the sizes its backward reads, d for gdl_export_onnx, and saved (max and min's indices) */
static gdl_tensor *gdl__finish_split(const char *opname, int op, gdl_tensor *out, gdl_tensor *x, int64_t outer,
                                     int64_t nred, int64_t inner, int d, gdl_tensor *saved) {
    int err;
    gdl_node *n = gdl__record(opname, op, out, 1, &x, &err);
    if (err) return NULL;
    if (n) {
        n->i[0] = outer; n->i[1] = nred; n->i[2] = inner;
        n->i[3] = d;
        n->saved[0] = saved;
    }
    return gdl__finish(opname, out);
}

/* *idx_out (max, min; when not NULL) gets the index tensor the backward uses: the first extreme, or the
   first NaN */
static gdl_tensor *gdl__reduce_idx(const char *opname, int op, gdl_tensor *x, int all, int dim, int keepdim,
                                   gdl_tensor **idx_out) {
    int64_t outer, nred, inner, shape[GDL_MAX_DIMS] = {0};
    int d = 0, nd = 0, k;
    gdl_tensor *out, *idx = NULL;
    const gdl_backend *be;
    GDL__LOWP1(opname, op, gdl__reduce_idx(opname, op, x, all, dim, keepdim, idx_out), x);
    if (gdl__check_in(opname, "x", x, 1) < 0) return NULL;
    if (all) {
        outer = inner = 1;
        nred = x->numel;
    } else {
        if (gdl__dim(opname, x, dim, &d) < 0) return NULL;
        gdl__split(x, d, &outer, &nred, &inner);
        for (k = 0; k < x->ndim; k++) {
            if (k != d) shape[nd++] = x->shape[k];
            else if (keepdim) shape[nd++] = 1;
        }
    }
    if ((op == GDL_OP_MAX || op == GDL_OP_MIN) && nred == 0) {
        gdl__set_error("%s: cannot take the %s over an empty dimension %d of %s", opname,
                       op == GDL_OP_MAX ? "max" : "min", dim, gdl_shape_str(x));
        return NULL;
    }
    if (!(be = gdl__be(opname, x->device)) || !(out = gdl__tmp(opname, nd, shape, GDL_F32, x->device))) return NULL;
    if ((op == GDL_OP_MAX || op == GDL_OP_MIN) && !(idx = gdl__tmp(opname, nd, shape, GDL_I32, x->device)))
        return NULL;
    if (out->numel && be->k.reduce(gdl__op(op)->kernel, outer, nred, inner, GDL__R(x), GDL__R(out),
                                 idx ? (int32_t *)idx->data : NULL, 0) < 0)
        return NULL;
    if (idx_out) *idx_out = idx;
    return gdl__finish_split(opname, op, out, x, outer, nred, inner, all ? -1 : d, idx);
}
static gdl_tensor *gdl__reduce(const char *opname, int op, gdl_tensor *x, int all, int dim, int keepdim) {
    return gdl__reduce_idx(opname, op, x, all, dim, keepdim, NULL);
}

static int gdl__gap_lp(const char *op, const gdl_backend *be, gdl_dtype dt, gdl_device dev, int64_t P, int64_t HW,
                       const void *src, void *dst, int backward);
static int gdl__bw_reduce(gdl_node *n, const gdl_backend *be) {
    gdl_real *gx = GDL__G(n->in[0]);
    if (!gx || !n->out->numel) return 0;
    if (n->op == GDL_OP_GLOBAL_AVG_POOL2D && n->out->dtype != GDL_F32) /* the native low-precision one */
        return gdl__gap_lp("gdl_backward", be, n->out->dtype, n->out->device, n->i[0], n->i[1], n->out->grad->data, gx, 1);
    return be->k.reduce_backward(gdl__op(n->op)->kernel, n->i[0], n->i[1], n->i[2], GDL__R(n->out->grad),
                               n->saved[0] ? (const int32_t *)n->saved[0]->data : NULL, gx);
}

GPUDL_API gdl_tensor *gdl_sum(gdl_tensor *x) { return gdl__reduce("gdl_sum", GDL_OP_SUM, x, 1, 0, 0); }
GPUDL_API gdl_tensor *gdl_mean(gdl_tensor *x) { return gdl__reduce("gdl_mean", GDL_OP_MEAN, x, 1, 0, 0); }
GPUDL_API gdl_tensor *gdl_sum_dim(gdl_tensor *x, int dim, int keepdim) { return gdl__reduce("gdl_sum_dim", GDL_OP_SUM, x, 0, dim, keepdim); }
GPUDL_API gdl_tensor *gdl_mean_dim(gdl_tensor *x, int dim, int keepdim) { return gdl__reduce("gdl_mean_dim", GDL_OP_MEAN, x, 0, dim, keepdim); }
GPUDL_API gdl_tensor *gdl_max_dim(gdl_tensor *x, int dim, int keepdim) { return gdl__reduce("gdl_max_dim", GDL_OP_MAX, x, 0, dim, keepdim); }
GPUDL_API gdl_tensor *gdl_min_dim(gdl_tensor *x, int dim, int keepdim) { return gdl__reduce("gdl_min_dim", GDL_OP_MIN, x, 0, dim, keepdim); }

/* torch.max(x, dim, keepdim) / torch.min: the values (differentiable) and their i32 indices */
static int gdl__extreme_dim(const char *opname, int op, gdl_tensor *x, int dim, int keepdim, gdl_tensor **values,
                            gdl_tensor **indices) {
    gdl_tensor *idx = NULL, *v;
    if (values) *values = NULL;
    if (indices) *indices = NULL;
    if (!values && !indices) {
        gdl__null_arg(opname, "values and indices");
        return -1;
    }
    /* a bf16 / f16 x: the op runs on an f32 copy (GDL__LOWP1), whose call sets idx */
    if (!(v = gdl__reduce_idx(opname, op, x, 0, dim, keepdim, &idx))) return -1;
    if (values) *values = v;
    if (indices) *indices = idx;
    return 0;
}
GPUDL_API int gdl_max_dim_ex(gdl_tensor *x, int dim, int keepdim, gdl_tensor **values, gdl_tensor **indices) {
    return gdl__extreme_dim("gdl_max_dim_ex", GDL_OP_MAX, x, dim, keepdim, values, indices);
}
GPUDL_API int gdl_min_dim_ex(gdl_tensor *x, int dim, int keepdim, gdl_tensor **values, gdl_tensor **indices) {
    return gdl__extreme_dim("gdl_min_dim_ex", GDL_OP_MIN, x, dim, keepdim, values, indices);
}

GPUDL_API gdl_tensor *gdl_argmax(gdl_tensor *x, int dim) {
    int64_t outer, nred, inner, shape[GDL_MAX_DIMS];
    int d, k, nd = 0;
    gdl_tensor *out;
    const gdl_backend *be;
    GDL__LOWP1("gdl_argmax", -1, gdl_argmax(x, dim), x);
    if (gdl__check_in("gdl_argmax", "x", x, 1) < 0 || gdl__dim("gdl_argmax", x, dim, &d) < 0) return NULL;
    gdl__split(x, d, &outer, &nred, &inner);
    if (nred == 0) {
        gdl__set_error("gdl_argmax: empty dimension %d of %s", dim, gdl_shape_str(x));
        return NULL;
    }
    for (k = 0; k < x->ndim; k++)
        if (k != d) shape[nd++] = x->shape[k];
    if (!(be = gdl__be("gdl_argmax", x->device)) || !(out = gdl__tmp("gdl_argmax", nd, shape, GDL_I32, x->device)))
        return NULL;
    if (out->numel && be->k.argmax(outer, nred, inner, GDL__R(x), (int32_t *)out->data) < 0) return NULL;
    return gdl__finish("gdl_argmax", out);
}

static gdl_tensor *gdl__softmax(const char *opname, int op, gdl_tensor *x, int dim) {
    int64_t outer, nred, inner;
    int d;
    gdl_tensor *out;
    const gdl_backend *be;
    GDL__LOWP1(opname, op, gdl__softmax(opname, op, x, dim), x);
    if (gdl__check_in(opname, "x", x, 1) < 0 || gdl__dim(opname, x, dim, &d) < 0) return NULL;
    gdl__split(x, d, &outer, &nred, &inner);
    if (!(be = gdl__be(opname, x->device)) || !(out = gdl__tmp(opname, x->ndim, x->shape, GDL_F32, x->device))) return NULL;
    if (out->numel && be->k.softmax(op == GDL_OP_LOG_SOFTMAX, outer, nred, inner, GDL__R(x), GDL__R(out)) < 0) return NULL;
    return gdl__finish_split(opname, op, out, x, outer, nred, inner, d, NULL);
}

static int gdl__bw_softmax(gdl_node *n, const gdl_backend *be) {
    gdl_real *gx = GDL__G(n->in[0]);
    if (!gx || !n->out->numel) return 0;
    return be->k.softmax_backward(n->op == GDL_OP_LOG_SOFTMAX, n->i[0], n->i[1], n->i[2], GDL__R(n->out),
                                GDL__R(n->out->grad), gx);
}

GPUDL_API gdl_tensor *gdl_softmax(gdl_tensor *x, int dim) { return gdl__softmax("gdl_softmax", GDL_OP_SOFTMAX, x, dim); }
GPUDL_API gdl_tensor *gdl_log_softmax(gdl_tensor *x, int dim) { return gdl__softmax("gdl_log_softmax", GDL_OP_LOG_SOFTMAX, x, dim); }

/* cumsum: an F32-class op (torch.autocast), so bf16/f16 inputs run on f32 copies (the hook) */
GPUDL_API gdl_tensor *gdl_cumsum(gdl_tensor *x, int dim) {
    const char *op = "gdl_cumsum";
    int64_t outer, nred, inner;
    int d;
    gdl_tensor *out;
    const gdl_backend *be;
    GDL__LOWP1(op, GDL_OP_CUMSUM, gdl_cumsum(x, dim), x);
    if (gdl__check_in(op, "x", x, 1) < 0) return NULL;
    if (x->ndim == 0) { /* a scalar: itself, as torch.cumsum(dim 0 or -1) */
        if (dim != 0 && dim != -1) {
            gdl__set_error("%s: dim %d out of range for a scalar", op, dim);
            return NULL;
        }
        d = 0;
        outer = nred = inner = 1;
    } else {
        if (gdl__dim(op, x, dim, &d) < 0) return NULL;
        gdl__split(x, d, &outer, &nred, &inner);
    }
    if (!(be = gdl__be(op, x->device)) || !(out = gdl__tmp(op, x->ndim, x->shape, GDL_F32, x->device))) return NULL;
    if (out->numel && be->k.cumsum(outer, nred, inner, GDL__R(x), GDL__R(out), 0, 0) < 0) return NULL;
    return gdl__finish_split(op, GDL_OP_CUMSUM, out, x, outer, nred, inner, d, NULL);
}

/* the gradient of a prefix sum is the suffix sum of the gradient */
static int gdl__bw_cumsum(gdl_node *n, const gdl_backend *be) {
    gdl_real *gx = GDL__G(n->in[0]);
    if (!gx || !n->out->numel) return 0;
    return be->k.cumsum(n->i[0], n->i[1], n->i[2], GDL__R(n->out->grad), gx, 1, 1);
}
