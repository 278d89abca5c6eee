/* ---- views ---- */

static gdl_tensor *gdl__view(const char *opname, gdl_tensor *x, int ndim, const int64_t *shape, int64_t elem_offset) {
    gdl_tensor *t;
    gdl_node *n;
    int err;
    t = gdl__make(opname, ndim, shape, x->dtype, x->device, 0,
                  (char *)x->data + (size_t)elem_offset * gdl_dtype_size(x->dtype));
    if (!t) return NULL;
    t->name = x->name;
    n = gdl__record(opname, elem_offset == 0 && t->numel == x->numel ? GDL_OP_RESHAPE : GDL_OP_SLICE, t, 1, &x, &err);
    if (err) return NULL;
    if (n) n->i[0] = elem_offset;
    return t;
}

static int gdl__bw_view(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *x = n->in[0];
    gdl_real *gx = GDL__G(x);
    if (gx && x->dtype != GDL_F32)
        return gdl__acc_any("gdl_backward", be, x->device, (char *)x->grad->data + (size_t)n->i[0] * gdl_dtype_size(x->dtype),
                            x->dtype, n->out->grad->data, n->out->grad->dtype, n->out->numel);
    return gx ? be->copy2d(1, n->out->numel, GDL__R(n->out->grad), 0, gx + n->i[0], 0, 1) : 0;
}

/* gdl_to: the gradient goes back to the source's device and adds there */
static int gdl__bw_to(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *x = n->in[0];
    gdl_real *gx = GDL__G(x), *g = GDL__R(n->out->grad);
    const gdl_backend *bx;
    (void)be;
    size_t es = gdl_dtype_size(x->grad->dtype);
    if (!gx || !x->numel) return 0;
    if (!gdl_device_equal(x->device, n->out->device)) {
        gdl_real *tmp = (gdl_real *)gdl__scratch("gdl_backward", x->device, es * (size_t)x->numel);
        if (!tmp || gdl__copy_bytes("gdl_backward", tmp, x->device, g, n->out->device, es * (size_t)x->numel) < 0)
            return -1;
        g = tmp;
    }
    if (!(bx = gdl__be("gdl_backward", x->device))) return -1;
    if (x->grad->dtype != GDL_F32)
        return gdl__acc_any("gdl_backward", bx, x->device, gx, x->grad->dtype, g, x->grad->dtype, x->numel);
    return bx->copy2d(1, x->numel, g, 0, gx, 0, 1);
}

GPUDL_API gdl_tensor *gdl_reshape(gdl_tensor *x, int ndim, const int64_t *shape) {
    int64_t s[GDL_MAX_DIMS], known = 1;
    int k, infer = -1;
    if (gdl__check_in("gdl_reshape", "x", x, 0) < 0) return NULL;
    if (ndim < 0 || ndim > GDL_MAX_DIMS || (ndim > 0 && !shape)) {
        gdl__set_error("gdl_reshape: bad target ndim %d", ndim);
        return NULL;
    }
    for (k = 0; k < ndim; k++) {
        s[k] = shape[k];
        if (s[k] == -1 && infer < 0) infer = k;
        else if (s[k] < 0) {
            gdl__set_error("gdl_reshape: bad target shape %s", gdl__shape_fmt(ndim, shape));
            return NULL;
        } else known *= s[k];
    }
    if (infer >= 0) {
        if (known == 0 || x->numel % known) {
            gdl__set_error("gdl_reshape: cannot reshape %s into %s", gdl_shape_str(x), gdl__shape_fmt(ndim, shape));
            return NULL;
        }
        s[infer] = x->numel / known;
        known *= s[infer];
    }
    if (known != x->numel) {
        gdl__set_error("gdl_reshape: cannot reshape %s (%lld elements) into %s", gdl_shape_str(x),
                       (long long)x->numel, gdl__shape_fmt(ndim, shape));
        return NULL;
    }
    return gdl__view("gdl_reshape", x, ndim, s, 0);
}

GPUDL_API gdl_tensor *gdl_flatten(gdl_tensor *x, int start_dim) {
    int64_t s[GDL_MAX_DIMS];
    int d, k;
    if (gdl__check_in("gdl_flatten", "x", x, 0) < 0) return NULL;
    if (x->ndim == 0) return gdl__view("gdl_flatten", x, 1, &x->numel, 0);
    if (gdl__dim("gdl_flatten", x, start_dim, &d) < 0) return NULL;
    for (k = 0; k < d; k++) s[k] = x->shape[k];
    s[d] = 1;
    for (k = d; k < x->ndim; k++) s[d] *= x->shape[k];
    return gdl__view("gdl_flatten", x, d + 1, s, 0);
}

GPUDL_API gdl_tensor *gdl_slice(gdl_tensor *x, int64_t start, int64_t end) {
    int64_t s[GDL_MAX_DIMS], row;
    if (gdl__check_in("gdl_slice", "x", x, 0) < 0) return NULL;
    if (x->ndim < 1 || start < 0 || end < start || end > x->shape[0]) {
        gdl__set_error("gdl_slice: rows [%lld,%lld) out of range for %s", (long long)start, (long long)end,
                       gdl_shape_str(x));
        return NULL;
    }
    memcpy(s, x->shape, sizeof s);
    s[0] = end - start;
    row = x->shape[0] ? x->numel / x->shape[0] : 0;
    return gdl__view("gdl_slice", x, x->ndim, s, start * row);
}

GPUDL_API gdl_tensor *gdl_detach(gdl_tensor *x) {
    if (gdl__check_in("gdl_detach", "x", x, 0) < 0) return NULL;
    return gdl__make("gdl_detach", x->ndim, x->shape, x->dtype, x->device, 0, x->data);
}

/* ---- elementwise binary ops with broadcasting ---- */

static int gdl__broadcast(const char *op, const gdl_tensor *a, const gdl_tensor *b, int *ndim, int64_t *shape,
                          int64_t *astr, int64_t *bstr) {
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim, d;
    int64_t sa = 1, sb = 1;
    for (d = nd - 1; d >= 0; d--) {
        int ia = d - (nd - a->ndim), ib = d - (nd - b->ndim);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            gdl__set_error("%s: shapes %s and %s cannot be broadcast", op, gdl_shape_str(a), gdl_shape_str(b));
            return -1;
        }
        shape[d] = da == 1 ? db : da;
        astr[d] = da == 1 ? 0 : sa;
        bstr[d] = db == 1 ? 0 : sb;
        sa *= da;
        sb *= db;
    }
    *ndim = nd;
    return 0;
}

/* row-major strides (in elements) of a shape */
static void gdl__contig_strides(int ndim, const int64_t *shape, int64_t *str) {
    int64_t s = 1;
    int d;
    for (d = ndim - 1; d >= 0; d--) {
        str[d] = s;
        s *= shape[d];
    }
}

/* NumPy broadcasting of k (2 or 3) tensors: the result's shape, and each tensor's strides into it (0 along
   the dims it is broadcast over) */
static int gdl__broadcast_k(const char *op, int k, const gdl_tensor *const *t, int *ndim, int64_t *shape,
                            int64_t str[][GDL_MAX_DIMS]) {
    int nd = 0, d, j;
    for (j = 0; j < k; j++)
        if (t[j]->ndim > nd) nd = t[j]->ndim;
    for (d = 0; d < nd; d++) shape[d] = 1;
    for (j = 0; j < k; j++)
        for (d = 0; d < t[j]->ndim; d++) {
            int64_t v = t[j]->shape[d], *sd = &shape[d + nd - t[j]->ndim];
            if (v == 1) continue;
            if (*sd != 1 && *sd != v) {
                if (k == 2)
                    gdl__set_error("%s: shapes %s and %s cannot be broadcast", op, gdl_shape_str(t[0]), gdl_shape_str(t[1]));
                else
                    gdl__set_error("%s: shapes %s, %s and %s cannot be broadcast", op, gdl_shape_str(t[0]),
                                   gdl_shape_str(t[1]), gdl_shape_str(t[2]));
                return -1;
            }
            *sd = v;
        }
    for (j = 0; j < k; j++) {
        int64_t cs[GDL_MAX_DIMS];
        int off = nd - t[j]->ndim;
        gdl__contig_strides(t[j]->ndim, t[j]->shape, cs);
        for (d = 0; d < nd; d++) str[j][d] = d < off || t[j]->shape[d - off] == 1 ? 0 : cs[d - off];
    }
    *ndim = nd;
    return 0;
}

static gdl_tensor *gdl__binary(const char *opname, int op, gdl_tensor *a, gdl_tensor *b) {
    int nd, err;
    int64_t shape[GDL_MAX_DIMS], astr[GDL_MAX_DIMS], bstr[GDL_MAX_DIMS];
    gdl_tensor *in[2], *out;
    const gdl_backend *be;
    gdl_dtype dt = GDL_F32;
    if (gdl__ac_dt != GDL_F32 || (a && a->dtype != GDL_F32) || (b && b->dtype != GDL_F32)) {
        if (a && b && a->dtype == b->dtype && gdl__lp_native(op, a->dtype)) dt = a->dtype; /* native */
        else GDL__LOWP2(opname, op, gdl__binary(opname, op, a, b), a, b);
    }
    if (gdl__check_two(opname, "a", a, dt == GDL_F32, "b", b, dt == GDL_F32) < 0 ||
        gdl__broadcast(opname, a, b, &nd, shape, astr, bstr) < 0)
        return NULL;
    if (!(be = gdl__be(opname, a->device))) return NULL;
    if (!(out = gdl__tmp(opname, nd, shape, dt, a->device))) return NULL;
    if (out->numel &&
        (dt == GDL_F32 ? be->binary(gdl__op(op)->kernel, nd, shape, GDL__R(a), astr, GDL__R(b), bstr, GDL__R(out))
                       : be->binary_lp(gdl__op(op)->kernel, nd, shape, dt, a->data, astr, dt, b->data, bstr, dt, out->data)) < 0)
        return NULL;
    in[0] = a;
    in[1] = b;
    gdl__record(opname, op, out, 2, in, &err);
    return err ? NULL : gdl__finish(opname, out);
}

/* the backward of a native low-precision binary op: the products in an f32
   scratch (as the f32 path forms them), each gradient summed in f32 and
   rounded once into the input's gradient. A tensor passed twice (x / x)
   gets both partial gradients summed in f32 first and rounded once, as the
   cast path's one f32 copy: two roundings would lose a cancelling sum. */
static int gdl__bw_binary_lp(gdl_node *n, const gdl_backend *be, int nd, const int64_t *shape, const int64_t *astr,
                             const int64_t *bstr, const int64_t *gstr) {
    gdl_tensor *a = n->in[0], *b = n->in[1];
    gdl_dtype dt = n->out->dtype, gat = dt, gbt = dt;
    const void *g = n->out->grad->data;
    void *ga = a->requires_grad ? a->grad->data : NULL, *gb = b->requires_grad ? b->grad->data : NULL;
    gdl_real *tmp = NULL, *both = NULL;
    int op = n->op, rc = 0;
    const gdl_device dev = n->out->device;
    if (op == GDL_OP_MUL || op == GDL_OP_DIV) {
        tmp = (gdl_real *)gdl__scratch("gdl_backward", dev, sizeof(gdl_real) * (size_t)n->out->numel);
        if (!tmp) return -1;
    }
    if (a == b && ga) {
        if (!(both = (gdl_real *)gdl__scratch("gdl_backward", dev, sizeof(gdl_real) * (size_t)(a->numel + 1))) ||
            be->fill(both, a->numel, 0) < 0)
            return -1;
        ga = gb = both;
        gat = gbt = GDL_F32;
    }
    switch (op) {
    case GDL_OP_ADD:
    case GDL_OP_SUB:
        if (ga) rc = rc || be->sum_to_lp(nd, shape, dt, g, gat, ga, astr, 1) < 0;
        if (gb) rc = rc || be->sum_to_lp(nd, shape, dt, g, gbt, gb, bstr, op == GDL_OP_SUB ? -1.0f : 1.0f) < 0;
        break;
    case GDL_OP_MUL:
        if (ga) rc = rc || be->binary_lp(GDL_BIN_MUL, nd, shape, dt, g, gstr, dt, b->data, bstr, GDL_F32, tmp) < 0 ||
                     be->sum_to_lp(nd, shape, GDL_F32, tmp, gat, ga, astr, 1) < 0;
        if (gb) rc = rc || be->binary_lp(GDL_BIN_MUL, nd, shape, dt, g, gstr, dt, a->data, astr, GDL_F32, tmp) < 0 ||
                     be->sum_to_lp(nd, shape, GDL_F32, tmp, gbt, gb, bstr, 1) < 0;
        break;
    default: /* DIV: d(a/b)/db = -(a/b)/b, with a/b formed again in f32 (the rounded output would lose
                cancelling sums over broadcast dims; PyTorch recomputes it too) */
        if (ga) rc = rc || be->binary_lp(GDL_BIN_DIV, nd, shape, dt, g, gstr, dt, b->data, bstr, GDL_F32, tmp) < 0 ||
                     be->sum_to_lp(nd, shape, GDL_F32, tmp, gat, ga, astr, 1) < 0;
        if (gb) rc = rc || be->binary_lp(GDL_BIN_DIV, nd, shape, dt, a->data, astr, dt, b->data, bstr, GDL_F32, tmp) < 0 ||
                     be->binary_lp(GDL_BIN_MUL, nd, shape, dt, g, gstr, GDL_F32, tmp, gstr, GDL_F32, tmp) < 0 ||
                     be->binary_lp(GDL_BIN_DIV, nd, shape, GDL_F32, tmp, gstr, dt, b->data, bstr, GDL_F32, tmp) < 0 ||
                     be->sum_to_lp(nd, shape, GDL_F32, tmp, gbt, gb, bstr, -1) < 0;
        break;
    }
    if (!rc && both) rc = gdl__acc_any("gdl_backward", be, dev, a->grad->data, dt, both, GDL_F32, a->numel) < 0;
    return rc ? -1 : 0;
}

/* the backward of minimum, maximum and pow, in f32 or natively in a low dtype dt (binary_lp / sum_to_lp:
   the derivative and its product with the gradient formed in f32, each gradient rounded once): for each
   input, d = the op's derivative code on (a, b) (min/max: on (b, a) for b), t = g * d (min/max mask
   exactly: GRAD_SCALE), summed over the broadcast dims into the gradient. A tensor passed twice gets
   both parts summed in f32 first, rounded once. */
static int gdl__bw_binary_deriv(gdl_node *n, const gdl_backend *be, int nd, const int64_t *shape, const int64_t *astr,
                                const int64_t *bstr, const int64_t *gstr) {
    gdl_tensor *a = n->in[0], *b = n->in[1];
    gdl_dtype dt = n->out->dtype, gt[2];
    const void *g = n->out->grad->data;
    void *gp[2];
    gdl_real *tmp, *both = NULL;
    const gdl_device dev = n->out->device;
    int k, pw = n->op == GDL_OP_POW, scale = pw ? GDL_BIN_MUL : GDL_BIN_GRAD_SCALE;
    int code[2];
    code[0] = pw ? GDL_BIN_POW_DA : n->op == GDL_OP_MAXIMUM ? GDL_BIN_MAX_DA : GDL_BIN_MIN_DA;
    code[1] = pw ? GDL_BIN_POW_DB : code[0];
    gp[0] = a->requires_grad ? a->grad->data : NULL;
    gp[1] = b->requires_grad ? b->grad->data : NULL;
    gt[0] = gt[1] = dt;
    if (!(tmp = (gdl_real *)gdl__scratch("gdl_backward", dev, sizeof(gdl_real) * (size_t)(n->out->numel + 1)))) return -1;
    if (a == b && gp[0] && dt != GDL_F32) {
        if (!(both = (gdl_real *)gdl__scratch("gdl_backward", dev, sizeof(gdl_real) * (size_t)(a->numel + 1))) ||
            be->fill(both, a->numel, 0) < 0)
            return -1;
        gp[0] = gp[1] = both;
        gt[0] = gt[1] = GDL_F32;
    }
    for (k = 0; k < 2; k++) {
        /* min/max's derivative for b is the same code with the operands swapped */
        int swap = k == 1 && !pw;
        const void *x = swap ? b->data : a->data, *y = swap ? a->data : b->data;
        const int64_t *xs = swap ? bstr : astr, *ys = swap ? astr : bstr;
        if (!gp[k]) continue;
        if (dt == GDL_F32) {
            if (be->binary(code[k], nd, shape, (const gdl_real *)x, xs, (const gdl_real *)y, ys, tmp) < 0 ||
                be->binary(scale, nd, shape, (const gdl_real *)g, gstr, tmp, gstr, tmp) < 0 ||
                be->sum_to(nd, shape, tmp, (gdl_real *)gp[k], k ? bstr : astr, 1) < 0)
                return -1;
        } else if (be->binary_lp(code[k], nd, shape, dt, x, xs, dt, y, ys, GDL_F32, tmp) < 0 ||
                   be->binary_lp(scale, nd, shape, dt, g, gstr, GDL_F32, tmp, gstr, GDL_F32, tmp) < 0 ||
                   be->sum_to_lp(nd, shape, GDL_F32, tmp, gt[k], gp[k], k ? bstr : astr, 1) < 0) {
            return -1;
        }
    }
    return both ? gdl__acc_any("gdl_backward", be, dev, a->grad->data, dt, both, GDL_F32, a->numel) : 0;
}

static int gdl__bw_binary(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *a = n->in[0], *b = n->in[1];
    gdl_real *g = GDL__R(n->out->grad), *ga = GDL__G(a), *gb = GDL__G(b), *tmp = NULL;
    int64_t shape[GDL_MAX_DIMS], astr[GDL_MAX_DIMS], bstr[GDL_MAX_DIMS], gstr[GDL_MAX_DIMS];
    int nd, op = n->op, rc = 0;
    if (gdl__broadcast("gdl_backward", a, b, &nd, shape, astr, bstr) < 0) return -1;
    gdl__broadcast("gdl_backward", n->out, n->out, &nd, shape, gstr, gstr);
    if (op == GDL_OP_MINIMUM || op == GDL_OP_MAXIMUM || op == GDL_OP_POW)
        return n->out->numel ? gdl__bw_binary_deriv(n, be, nd, shape, astr, bstr, gstr) : 0;
    if (n->out->dtype != GDL_F32) return gdl__bw_binary_lp(n, be, nd, shape, astr, bstr, gstr);
    if (op == GDL_OP_MUL || op == GDL_OP_DIV) {
        tmp = (gdl_real *)gdl__scratch("gdl_backward", n->out->device, sizeof(gdl_real) * (size_t)n->out->numel);
        if (!tmp) return -1;
    }
    switch (op) {
    /* each product goes to tmp, then sums into the gradient: in that order (||, not |) */
    case GDL_OP_ADD:
    case GDL_OP_SUB: /* an unset gradient of a's shape (not broadcast): a copy */
        if (ga && a != b && a->numel == n->out->numel && !gdl__grad_beta(a))
            rc = be->copy2d(1, a->numel, g, 0, ga, 0, 0) < 0;
        else if (ga) rc = rc || gdl__grad_zero(a, be) < 0 || be->sum_to(nd, shape, g, ga, astr, 1) < 0;
        if (gb && op == GDL_OP_ADD && a != b && b->numel == n->out->numel && !gdl__grad_beta(b))
            rc = rc || be->copy2d(1, b->numel, g, 0, gb, 0, 0) < 0;
        else if (gb)
            rc = rc || gdl__grad_zero(b, be) < 0 || be->sum_to(nd, shape, g, gb, bstr, op == GDL_OP_SUB ? -1 : 1) < 0;
        break;
    case GDL_OP_MUL:
        if (ga) rc = rc || be->binary(GDL_BIN_MUL, nd, shape, g, gstr, GDL__R(b), bstr, tmp) < 0 ||
                     be->sum_to(nd, shape, tmp, ga, astr, 1) < 0;
        if (gb) rc = rc || be->binary(GDL_BIN_MUL, nd, shape, g, gstr, GDL__R(a), astr, tmp) < 0 ||
                     be->sum_to(nd, shape, tmp, gb, bstr, 1) < 0;
        break;
    default: /* DIV: d(a/b)/db = -out/b */
        if (ga) rc = rc || be->binary(GDL_BIN_DIV, nd, shape, g, gstr, GDL__R(b), bstr, tmp) < 0 ||
                     be->sum_to(nd, shape, tmp, ga, astr, 1) < 0;
        if (gb) rc = rc || be->binary(GDL_BIN_MUL, nd, shape, g, gstr, GDL__R(n->out), gstr, tmp) < 0 ||
                     be->binary(GDL_BIN_DIV, nd, shape, tmp, gstr, GDL__R(b), bstr, tmp) < 0 ||
                     be->sum_to(nd, shape, tmp, gb, bstr, -1) < 0;
        break;
    }
    return rc ? -1 : 0;
}

GPUDL_API gdl_tensor *gdl_add(gdl_tensor *a, gdl_tensor *b) { return gdl__binary("gdl_add", GDL_OP_ADD, a, b); }
GPUDL_API gdl_tensor *gdl_sub(gdl_tensor *a, gdl_tensor *b) { return gdl__binary("gdl_sub", GDL_OP_SUB, a, b); }
GPUDL_API gdl_tensor *gdl_mul(gdl_tensor *a, gdl_tensor *b) { return gdl__binary("gdl_mul", GDL_OP_MUL, a, b); }
GPUDL_API gdl_tensor *gdl_div(gdl_tensor *a, gdl_tensor *b) { return gdl__binary("gdl_div", GDL_OP_DIV, a, b); }
GPUDL_API gdl_tensor *gdl_minimum(gdl_tensor *a, gdl_tensor *b) { return gdl__binary("gdl_minimum", GDL_OP_MINIMUM, a, b); }
GPUDL_API gdl_tensor *gdl_maximum(gdl_tensor *a, gdl_tensor *b) { return gdl__binary("gdl_maximum", GDL_OP_MAXIMUM, a, b); }
GPUDL_API gdl_tensor *gdl_pow(gdl_tensor *a, gdl_tensor *b) { return gdl__binary("gdl_pow", GDL_OP_POW, a, b); }

/* ---- comparisons (not differentiable: a u8 result, no tape node) ---- */

static gdl_tensor *gdl__compare(const char *opname, gdl_tensor *a, gdl_tensor *b, int op) {
    int nd;
    int64_t shape[GDL_MAX_DIMS], str[2][GDL_MAX_DIMS];
    const gdl_tensor *t[2];
    gdl_tensor *out;
    const gdl_backend *be;
    if (gdl__check_two(opname, "a", a, 0, "b", b, 0) < 0) return NULL;
    if ((unsigned)op > GDL_CMP_GE) {
        gdl__set_error("%s: unknown comparison %d (GDL_CMP_EQ ... GDL_CMP_GE)", opname, op);
        return NULL;
    }
    t[0] = a;
    t[1] = b;
    if (gdl__broadcast_k(opname, 2, t, &nd, shape, str) < 0 || !(be = gdl__be(opname, a->device)) ||
        !(out = gdl__tmp(opname, nd, shape, GDL_U8, a->device)))
        return NULL;
    if (out->numel &&
        be->compare(op, nd, shape, a->dtype, a->data, str[0], b->dtype, b->data, str[1], (uint8_t *)out->data) < 0)
        return NULL;
    return gdl__finish(opname, out);
}

GPUDL_API gdl_tensor *gdl_compare(gdl_tensor *a, gdl_tensor *b, gdl_compare_op op) { return gdl__compare("gdl_compare", a, b, (int)op); }
GPUDL_API gdl_tensor *gdl_eq(gdl_tensor *a, gdl_tensor *b) { return gdl__compare("gdl_eq", a, b, GDL_CMP_EQ); }
GPUDL_API gdl_tensor *gdl_ne(gdl_tensor *a, gdl_tensor *b) { return gdl__compare("gdl_ne", a, b, GDL_CMP_NE); }
GPUDL_API gdl_tensor *gdl_lt(gdl_tensor *a, gdl_tensor *b) { return gdl__compare("gdl_lt", a, b, GDL_CMP_LT); }
GPUDL_API gdl_tensor *gdl_le(gdl_tensor *a, gdl_tensor *b) { return gdl__compare("gdl_le", a, b, GDL_CMP_LE); }
GPUDL_API gdl_tensor *gdl_gt(gdl_tensor *a, gdl_tensor *b) { return gdl__compare("gdl_gt", a, b, GDL_CMP_GT); }
GPUDL_API gdl_tensor *gdl_ge(gdl_tensor *a, gdl_tensor *b) { return gdl__compare("gdl_ge", a, b, GDL_CMP_GE); }

/* a one-element temporary of dtype dt on dev holding v (through f32, then rounded to dt) */
static gdl_tensor *gdl__scalar_tmp(const char *op, const gdl_backend *be, gdl_device dev, gdl_dtype dt, double v) {
    static const int64_t one = 1;
    gdl_tensor *f = gdl__tmp(op, 0, &one, GDL_F32, dev), *r;
    if (!f || be->fill(GDL__R(f), 1, (gdl_real)v) < 0) return NULL;
    if (dt == GDL_F32) return f;
    if (!(r = gdl__tmp(op, 0, &one, dt, dev)) || be->cast(r->data, dt, f->data, GDL_F32, 1) < 0) return NULL;
    return r;
}

GPUDL_API gdl_tensor *gdl_compare_scalar(gdl_tensor *x, gdl_compare_op op, double value) {
    const char *name = "gdl_compare_scalar";
    const gdl_backend *be;
    gdl_tensor *s;
    gdl_dtype dt;
    if (gdl__check_in(name, "x", x, 0) < 0 || !(be = gdl__be(name, x->device))) return NULL;
    if (gdl__is_float(x->dtype)) dt = x->dtype;
    else dt = value == floor(value) && fabs(value) <= 16777216.0 ? GDL_I32 : GDL_F32;
    if (!(s = gdl__scalar_tmp(name, be, x->device, dt, value))) return NULL;
    return gdl__compare(name, x, s, (int)op);
}

/* ---- elementwise unary ops ---- */

static gdl_tensor *gdl__unary(const char *opname, int op, gdl_tensor *x, double alpha) {
    gdl_tensor *out;
    gdl_node *n;
    const gdl_backend *be;
    int err;
    gdl_dtype dt = GDL_F32;
    if (gdl__ac_dt != GDL_F32 || (x && x->dtype != GDL_F32)) {
        if (x && gdl__lp_native(op, x->dtype)) dt = x->dtype; /* native */
        else GDL__LOWP1(opname, op, gdl__unary(opname, op, x, alpha), x);
    }
    if (gdl__check_in(opname, "x", x, dt == GDL_F32) < 0 || !(be = gdl__be(opname, x->device))) return NULL;
    if (!(out = gdl__tmp(opname, x->ndim, x->shape, dt, x->device))) return NULL;
    if ((dt == GDL_F32 ? be->unary(gdl__op(op)->kernel, x->numel, GDL__R(x), GDL__R(out), (gdl_real)alpha)
                       : be->unary_lp(dt, gdl__op(op)->kernel, x->numel, x->data, out->data, (float)alpha)) < 0)
        return NULL;
    n = gdl__record(opname, op, out, 1, &x, &err);
    if (err) return NULL;
    if (n) n->f[0] = alpha;
    return gdl__finish(opname, out);
}

static int gdl__bw_unary(gdl_node *n, const gdl_backend *be) {
    gdl_real *gx = GDL__G(n->in[0]);
    if (!gx) return 0;
    if (n->out->dtype != GDL_F32) /* native: the saved output is the rounded one, as PyTorch's */
        return be->unary_backward_lp(n->out->dtype, gdl__op(n->op)->kernel, n->out->numel, n->in[0]->data, n->out->data,
                                     n->out->grad->data, gx, (float)n->f[0]);
    return be->unary_backward(gdl__op(n->op)->kernel, n->out->numel, GDL__R(n->in[0]), GDL__R(n->out),
                              GDL__R(n->out->grad), gx, (gdl_real)n->f[0], gdl__grad_beta(n->in[0]));
}

GPUDL_API gdl_tensor *gdl_add_scalar(gdl_tensor *x, double s) { return gdl__unary("gdl_add_scalar", GDL_OP_ADD_SCALAR, x, s); }
GPUDL_API gdl_tensor *gdl_mul_scalar(gdl_tensor *x, double s) { return gdl__unary("gdl_mul_scalar", GDL_OP_MUL_SCALAR, x, s); }
GPUDL_API gdl_tensor *gdl_pow_scalar(gdl_tensor *x, double p) { return gdl__unary("gdl_pow_scalar", GDL_OP_POW_SCALAR, x, p); }
GPUDL_API gdl_tensor *gdl_exp(gdl_tensor *x) { return gdl__unary("gdl_exp", GDL_OP_EXP, x, 0); }
GPUDL_API gdl_tensor *gdl_log(gdl_tensor *x) { return gdl__unary("gdl_log", GDL_OP_LOG, x, 0); }
GPUDL_API gdl_tensor *gdl_sqrt(gdl_tensor *x) { return gdl__unary("gdl_sqrt", GDL_OP_SQRT, x, 0); }
GPUDL_API gdl_tensor *gdl_rsqrt(gdl_tensor *x) { return gdl__unary("gdl_rsqrt", GDL_OP_RSQRT, x, 0); }
GPUDL_API gdl_tensor *gdl_abs(gdl_tensor *x) { return gdl__unary("gdl_abs", GDL_OP_ABS, x, 0); }
GPUDL_API gdl_tensor *gdl_clamp_min(gdl_tensor *x, double min) {
    if (min != min) {
        gdl__set_error("gdl_clamp_min: the bound is NaN");
        return NULL;
    }
    return gdl__unary("gdl_clamp_min", GDL_OP_CLAMP_MIN, x, min);
}
GPUDL_API gdl_tensor *gdl_clamp_max(gdl_tensor *x, double max) {
    if (max != max) {
        gdl__set_error("gdl_clamp_max: the bound is NaN");
        return NULL;
    }
    return gdl__unary("gdl_clamp_max", GDL_OP_CLAMP_MAX, x, max);
}
/* max(x, min) then min(.., max): PyTorch's order, so min > max gives max everywhere, and the gradient
   passes where min <= x <= max */
GPUDL_API gdl_tensor *gdl_clamp(gdl_tensor *x, double min, double max) {
    if (min != min || max != max) {
        gdl__set_error("gdl_clamp: a bound is NaN (min %g, max %g)", min, max);
        return NULL;
    }
    if (max == INFINITY) return gdl_clamp_min(x, min);
    return gdl_clamp_max(min == -INFINITY ? x : gdl_clamp_min(x, min), max);
}
GPUDL_API gdl_tensor *gdl_relu(gdl_tensor *x) { return gdl__unary("gdl_relu", GDL_OP_RELU, x, 0); }
GPUDL_API gdl_tensor *gdl_leaky_relu(gdl_tensor *x, double slope) { return gdl__unary("gdl_leaky_relu", GDL_OP_LEAKY_RELU, x, slope); }
GPUDL_API gdl_tensor *gdl_sigmoid(gdl_tensor *x) { return gdl__unary("gdl_sigmoid", GDL_OP_SIGMOID, x, 0); }
GPUDL_API gdl_tensor *gdl_tanh(gdl_tensor *x) { return gdl__unary("gdl_tanh", GDL_OP_TANH, x, 0); }
GPUDL_API gdl_tensor *gdl_gelu(gdl_tensor *x, int tanh_approximation) {
    return tanh_approximation ? gdl__unary("gdl_gelu", GDL_OP_GELU_TANH, x, 0) : gdl__unary("gdl_gelu", GDL_OP_GELU, x, 0);
}

GPUDL_API int gdl_mul_scalar_(gdl_tensor *t, double s) {
    const gdl_backend *be;
    if (gdl__check_in("gdl_mul_scalar_", "t", t, 0) < 0 || !(be = gdl__be("gdl_mul_scalar_", t->device))) return -1;
    if (t->dtype == GDL_F16 || t->dtype == GDL_BF16) /* in f32, rounded once, in place */
        return be->unary_lp(t->dtype, GDL_UN_SCALE, t->numel, t->data, t->data, (float)s);
    if (gdl__check_in("gdl_mul_scalar_", "t", t, 1) < 0) return -1;
    return be->unary(GDL_UN_SCALE, t->numel, GDL__R(t), GDL__R(t), (gdl_real)s);
}

/* ---- matmul and linear ----
   Both run natively in f16 and bf16 (inputs of one low dtype): the
   backend's gemm_lp sums in f32 and rounds C once, forward and backward. */

#define GDL__AT(p, dt, off) ((void *)((char *)(p) + (size_t)(off) * gdl_dtype_size(dt)))

/* C = op(A)op(B) + beta*C in dtype dt: the f32 kernels or the low-precision GEMM */
static int gdl__gemm_dt(const gdl_backend *be, gdl_dtype dt, int ta, int tb, int M, int N, int K, const void *A, int lda,
                        int64_t sA, const void *B, int ldb, int64_t sB, int beta, void *C, int ldc, int64_t sC, int batch) {
    if (dt == GDL_F32)
        return be->gemm(ta, tb, M, N, K, 1, (const gdl_real *)A, lda, sA, (const gdl_real *)B, ldb, sB, (gdl_real)beta,
                        (gdl_real *)C, ldc, sC, batch);
    return be->gemm_lp(dt, ta, tb, M, N, K, 1.0f, A, lda, sA, B, ldb, sB, (float)beta, C, ldc, sC, batch);
}

/* n ones of dtype dt (a low-precision linear's bias goes in and out through a rank-1 GEMM with them) */
static void *gdl__ones_dt(const char *op, const gdl_backend *be, gdl_device dev, gdl_dtype dt, int64_t n) {
    gdl_real *f = (gdl_real *)gdl__scratch(op, dev, sizeof(gdl_real) * (size_t)(n ? n : 1));
    void *o = gdl__scratch(op, dev, gdl_dtype_size(dt) * (size_t)(n ? n : 1));
    if (!f || !o || be->fill(f, n, 1) < 0 || be->cast(o, dt, f, GDL_F32, n) < 0) return NULL;
    return o;
}

/* How a matmul of a [..., M, K] and b [..., K, N] runs: the batch dims broadcast, size-1 ones dropped and
   neighbours that are contiguous in a, b and the output merged; the GEMM is batched over the innermost of
   them (element strides sa, sb, sc; sa or sb 0 where that operand repeats) and called once per index of
   the outer ones. fold: b has no batch and a's batches are contiguous: one GEMM of all a's rows. */
typedef struct gdl__mm_plan {
    int64_t M, N, K;
    int nb;                         /* batch dims kept */
    int64_t bs[GDL_MAX_DIMS], sa[GDL_MAX_DIMS], sb[GDL_MAX_DIMS], sc[GDL_MAX_DIMS];
    int out_nd;
    int64_t out_shape[GDL_MAX_DIMS];
} gdl__mm_plan;

static int gdl__mm_plan_of(const char *op, const gdl_tensor *a, const gdl_tensor *b, gdl__mm_plan *p) {
    int nda = a->ndim - 2, ndb = b->ndim - 2, nbd = nda > ndb ? nda : ndb, d, k = 0;
    int64_t ma, mb, mc, cnt = 1, rsa = 1, rsb = 1, rsc = 1, bsz[GDL_MAX_DIMS], ba[GDL_MAX_DIMS], bb[GDL_MAX_DIMS];
    p->M = a->shape[a->ndim - 2];
    p->K = a->shape[a->ndim - 1];
    p->N = b->shape[b->ndim - 1];
    if (b->shape[b->ndim - 2] != p->K) {
        gdl__set_error("%s: inner dimensions differ: %s x %s", op, gdl_shape_str(a), gdl_shape_str(b));
        return -1;
    }
    if (nbd + 2 > GDL_MAX_DIMS) {
        gdl__set_error("%s: the result of %s x %s has more than %d dims", op, gdl_shape_str(a), gdl_shape_str(b), GDL_MAX_DIMS);
        return -1;
    }
    for (d = 0; d < nbd; d++) {
        int ia = d - (nbd - nda), ib = d - (nbd - ndb);
        ba[d] = ia >= 0 ? a->shape[ia] : 1;
        bb[d] = ib >= 0 ? b->shape[ib] : 1;
        if (ba[d] != bb[d] && ba[d] != 1 && bb[d] != 1) {
            gdl__set_error("%s: batch dimensions cannot be broadcast: %s x %s", op, gdl_shape_str(a), gdl_shape_str(b));
            return -1;
        }
        bsz[d] = ba[d] == 1 ? bb[d] : ba[d];
        p->out_shape[d] = bsz[d];
    }
    p->out_nd = nbd + 2;
    p->out_shape[nbd] = p->M;
    p->out_shape[nbd + 1] = p->N;
    if (p->M > INT32_MAX || p->N > INT32_MAX || p->K > INT32_MAX) {
        gdl__set_error("%s: dimensions too large for the GEMM: %s x %s", op, gdl_shape_str(a), gdl_shape_str(b));
        return -1;
    }
    /* inner to outer: the strides in elements, merging a dim into the kept one inside it when all three
       continue it */
    ma = p->M * p->K;
    mb = p->K * p->N;
    mc = p->M * p->N;
    p->nb = 0;
    for (d = nbd - 1; d >= 0; d--) {
        int64_t sa = ba[d] == 1 ? 0 : rsa * ma, sb = bb[d] == 1 ? 0 : rsb * mb, sc = rsc * mc;
        if (ba[d] != 1) rsa *= ba[d];
        if (bb[d] != 1) rsb *= bb[d];
        rsc *= bsz[d];
        if (bsz[d] == 1) continue;
        if (k > 0 && sa == p->sa[k - 1] * p->bs[k - 1] && sb == p->sb[k - 1] * p->bs[k - 1] &&
            sc == p->sc[k - 1] * p->bs[k - 1]) {
            p->bs[k - 1] *= bsz[d];
            continue;
        }
        p->bs[k] = bsz[d];
        p->sa[k] = sa;
        p->sb[k] = sb;
        p->sc[k] = sc;
        k++;
    }
    for (d = 0; d < k / 2; d++) { /* outer first */
        int64_t t;
        t = p->bs[d]; p->bs[d] = p->bs[k - 1 - d]; p->bs[k - 1 - d] = t;
        t = p->sa[d]; p->sa[d] = p->sa[k - 1 - d]; p->sa[k - 1 - d] = t;
        t = p->sb[d]; p->sb[d] = p->sb[k - 1 - d]; p->sb[k - 1 - d] = t;
        t = p->sc[d]; p->sc[d] = p->sc[k - 1 - d]; p->sc[k - 1 - d] = t;
    }
    p->nb = k;
    for (d = 0; d < k; d++) cnt *= p->bs[d];
    /* fold: one GEMM of batch*M rows when b repeats for every batch and a and the output run on */
    if (k == 1 && p->sb[0] == 0 && p->sa[0] == ma) {
        p->M *= p->bs[0];
        p->nb = 0;
    }
    if (cnt > INT32_MAX || p->M > INT32_MAX) {
        gdl__set_error("%s: dimensions too large for the GEMM: %s x %s", op, gdl_shape_str(a), gdl_shape_str(b));
        return -1;
    }
    return 0;
}

/* what: 0 the forward C = A B, 1 gA += G B^T, 2 gB += A^T G; each GEMM batched over the plan's innermost
   batch dim, once per index of the outer ones. An operand that repeats along the batched dim (stride 0)
   gets the products summed into it (the backend's sC == 0: beta 1); along an outer dim, calls in turn. */
static int gdl__mm_run(const gdl_backend *be, gdl_dtype dt, const gdl__mm_plan *p, int what, const void *A,
                       const void *B, void *C) {
    int M = (int)p->M, N = (int)p->N, K = (int)p->K, last = p->nb - 1, d;
    int64_t outer = 1, o, idx[GDL_MAX_DIMS] = {0}, oa = 0, ob = 0, oc = 0;
    int batch = last >= 0 ? (int)p->bs[last] : 1;
    int64_t sa = last >= 0 ? p->sa[last] : 0, sb = last >= 0 ? p->sb[last] : 0, sc = last >= 0 ? p->sc[last] : 0;
    for (d = 0; d < last; d++) outer *= p->bs[d];
    for (o = 0; o < outer; o++) {
        const void *a = GDL__AT(A, dt, oa), *b = GDL__AT(B, dt, ob);
        int rc;
        if (what == 0)
            rc = gdl__gemm_dt(be, dt, 0, 0, M, N, K, a, K, sa, b, N, sb, 0, GDL__AT(C, dt, oc), N, sc, batch);
        else if (what == 1) /* A is G here, B is b; C is ga */
            rc = gdl__gemm_dt(be, dt, 0, 1, M, K, N, GDL__AT(A, dt, oc), N, sc, b, N, sb, 1, GDL__AT(C, dt, oa), K, sa,
                              batch);
        else /* A is a, B is G; C is gb */
            rc = gdl__gemm_dt(be, dt, 1, 0, K, N, M, a, K, sa, GDL__AT(B, dt, oc), N, sc, 1, GDL__AT(C, dt, ob), N, sb,
                              batch);
        if (rc < 0) return -1;
        for (d = last - 1; d >= 0; d--) { /* the odometer over the outer batch dims */
            oa += p->sa[d];
            ob += p->sb[d];
            oc += p->sc[d];
            if (++idx[d] < p->bs[d]) break;
            oa -= p->sa[d] * p->bs[d];
            ob -= p->sb[d] * p->bs[d];
            oc -= p->sc[d] * p->bs[d];
            idx[d] = 0;
        }
    }
    return 0;
}

static gdl_tensor *gdl__matmul_nd(const char *op, gdl_tensor *a, gdl_tensor *b, gdl_dtype dt) {
    gdl__mm_plan p;
    gdl_tensor *out, *in[2];
    const gdl_backend *be;
    int err;
    if (gdl__mm_plan_of(op, a, b, &p) < 0) return NULL;
    if (!(be = gdl__be(op, a->device)) || !(out = gdl__tmp(op, p.out_nd, p.out_shape, dt, a->device))) return NULL;
    if (out->numel && gdl__mm_run(be, dt, &p, 0, a->data, b->data, out->data) < 0) return NULL;
    in[0] = a;
    in[1] = b;
    gdl__record(op, GDL_OP_MATMUL, out, 2, in, &err);
    return err ? NULL : gdl__finish(op, out);
}

GPUDL_API gdl_tensor *gdl_matmul(gdl_tensor *a, gdl_tensor *b) {
    const char *op = "gdl_matmul";
    gdl_dtype dt = GDL_F32;
    gdl_tensor *r;
    int64_t s[GDL_MAX_DIMS];
    int k, nd;
    if (gdl__ac_dt != GDL_F32 || (a && a->dtype != GDL_F32) || (b && b->dtype != GDL_F32)) {
        if (a && b && a->dtype == b->dtype && gdl__is_low(a->dtype) && gdl__ac_native(a->dtype)) dt = a->dtype; /* native */
        else GDL__LOWP2(op, GDL_OP_MATMUL, gdl_matmul(a, b), a, b);
    }
    if (gdl__check_two(op, "a", a, dt == GDL_F32, "b", b, dt == GDL_F32) < 0) return NULL;
    if (a->ndim < 1 || b->ndim < 1) {
        gdl__set_error("%s: both operands need at least 1 dim, got %s x %s", op, gdl_shape_str(a), gdl_shape_str(b));
        return NULL;
    }
    if (a->ndim >= 2 && b->ndim >= 2) return gdl__matmul_nd(op, a, b, dt);
    /* a vector: a row [1,K] (a) or a column [K,1] (b), its dim taken out of the result (torch.matmul) */
    if ((a->ndim == 1 ? a->shape[0] : a->shape[a->ndim - 1]) != (b->ndim == 1 ? b->shape[0] : b->shape[b->ndim - 2])) {
        gdl__set_error("%s: inner dimensions differ: %s x %s", op, gdl_shape_str(a), gdl_shape_str(b));
        return NULL;
    }
    {
        int64_t row[2], col[2];
        gdl_tensor *a2 = a, *b2 = b;
        row[0] = 1;
        row[1] = a->shape[0];
        col[0] = b->shape[0];
        col[1] = 1;
        if (a->ndim == 1 && !(a2 = gdl__view(op, a, 2, row, 0))) return NULL;
        if (b->ndim == 1 && !(b2 = gdl__view(op, b, 2, col, 0))) return NULL;
        if (!(r = gdl__matmul_nd(op, a2, b2, dt))) return NULL;
    }
    nd = 0;
    for (k = 0; k < r->ndim; k++)
        if (!((a->ndim == 1 && k == r->ndim - 2) || (b->ndim == 1 && k == r->ndim - 1))) s[nd++] = r->shape[k];
    return gdl__view(op, r, nd, s, 0);
}

GPUDL_API gdl_tensor *gdl_bmm(gdl_tensor *a, gdl_tensor *b) {
    if (a && b && (a->ndim != 3 || b->ndim != 3 || a->shape[0] != b->shape[0])) {
        gdl__set_error("gdl_bmm: expected [B,M,K] x [B,K,N] with one B, got %s x %s", gdl_shape_str(a), gdl_shape_str(b));
        return NULL;
    }
    return gdl_matmul(a, b);
}

static int gdl__bw_matmul(gdl_node *n, const gdl_backend *be) {
    gdl__mm_plan p;
    gdl_dtype dt = n->out->dtype; /* f32, or the inputs' one low dtype */
    void *g = n->out->grad->data, *A = n->in[0]->data, *B = n->in[1]->data;
    if (!n->out->numel || gdl__mm_plan_of("gdl_backward", n->in[0], n->in[1], &p) < 0) return n->out->numel ? -1 : 0;
    if (n->in[0]->requires_grad && gdl__mm_run(be, dt, &p, 1, g, B, n->in[0]->grad->data) < 0) return -1;
    if (n->in[1]->requires_grad && gdl__mm_run(be, dt, &p, 2, A, g, n->in[1]->grad->data) < 0) return -1;
    return 0;
}

/* gdl_linear's and gdl_linear_act's shapes: input [..., in_features], weight [out_features, in_features],
   bias [out_features]; the output's shape and the GEMM's rows (the input's leading dims). -1 after an error. */
static int gdl__linear_shapes(const char *op, const gdl_tensor *x, const gdl_tensor *w, const gdl_tensor *bias,
                              int64_t shape[GDL_MAX_DIMS], int64_t *rows) {
    int64_t in_f, out_f;
    int k;
    if (w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1]) {
        gdl__set_error("%s: input %s does not match weight %s (expected the input's last dim = in_features = weight dim 1)",
                       op, gdl_shape_str(x), gdl_shape_str(w));
        return -1;
    }
    in_f = w->shape[1];
    out_f = w->shape[0];
    if (bias && (bias->ndim != 1 || bias->shape[0] != out_f)) {
        gdl__set_error("%s: bias %s does not match weight %s (expected [%lld])", op, gdl_shape_str(bias),
                       gdl_shape_str(w), (long long)out_f);
        return -1;
    }
    memcpy(shape, x->shape, sizeof(int64_t) * GDL_MAX_DIMS);
    shape[x->ndim - 1] = out_f;
    *rows = 1;
    for (k = 0; k + 1 < x->ndim; k++) *rows *= x->shape[k];
    if (*rows > INT32_MAX || in_f > INT32_MAX || out_f > INT32_MAX) {
        gdl__set_error("%s: dimensions too large for the GEMM: input %s, weight %s", op, gdl_shape_str(x), gdl_shape_str(w));
        return -1;
    }
    return 0;
}

GPUDL_API gdl_tensor *gdl_linear(gdl_tensor *x, gdl_tensor *w, gdl_tensor *bias) {
    const char *op = "gdl_linear";
    int64_t in_f, out_f, rows, shape[GDL_MAX_DIMS];
    int err;
    gdl_tensor *out, *in[3];
    const gdl_backend *be;
    gdl_dtype dt = GDL_F32;
    if (gdl__xwb_not_f32(x, w, bias)) {
        if (gdl__xwb_native(x, w, bias)) dt = x->dtype;
        else GDL__LOWP3(op, GDL_OP_LINEAR, gdl_linear(x, w, bias), x, w, bias);
    }
    if (gdl__check_xwb(op, x, w, bias, dt == GDL_F32) < 0 || gdl__linear_shapes(op, x, w, bias, shape, &rows) < 0)
        return NULL;
    in_f = w->shape[1];
    out_f = w->shape[0];
    if (!(be = gdl__be(op, x->device)) || !(out = gdl__tmp(op, x->ndim, shape, dt, x->device))) return NULL;
    if (out->numel && dt != GDL_F32) { /* out = bias rows (ones x bias), then out += x W^T: one rounding */
        void *ones = bias ? gdl__ones_dt(op, be, x->device, dt, rows) : NULL;
        if ((bias && (!ones || gdl__gemm_dt(be, dt, 0, 0, (int)rows, (int)out_f, 1, ones, 1, 0, bias->data, (int)out_f, 0,
                                            0, out->data, (int)out_f, 0, 1) < 0)) ||
            gdl__gemm_dt(be, dt, 0, 1, (int)rows, (int)out_f, (int)in_f, x->data, (int)in_f, 0, w->data, (int)in_f, 0,
                         bias ? 1 : 0, out->data, (int)out_f, 0, 1) < 0)
            return NULL;
    } else if (out->numel && bias && x->device.type == GDL_DEVICE_CPU) {
        /* the bias in the GEMM's epilogue, on each tile as it is stored: the bits of the add below
           without its pass over out (on the GPU, cuBLASLt's epilogue would round differently) */
        if (be->linear_act(-1, (int)rows, (int)out_f, (int)in_f, GDL__R(x), GDL__R(w), GDL__R(bias), GDL__R(out), NULL) < 0)
            return NULL;
    } else if (out->numel) {
        int64_t s2[2], ystr[2], bstr[2];
        if (be->gemm(0, 1, (int)rows, (int)out_f, (int)in_f, 1, GDL__R(x), (int)in_f, 0, GDL__R(w), (int)in_f, 0, 0,
                     GDL__R(out), (int)out_f, 0, 1) < 0)
            return NULL;
        s2[0] = rows; s2[1] = out_f;
        ystr[0] = out_f; ystr[1] = 1;
        bstr[0] = 0; bstr[1] = 1;
        if (bias && be->binary(GDL_BIN_ADD, 2, s2, GDL__R(out), ystr, GDL__R(bias), bstr, GDL__R(out)) < 0) return NULL;
    }
    in[0] = x;
    in[1] = w;
    in[2] = bias;
    gdl__record(op, GDL_OP_LINEAR, out, 3, in, &err);
    return err ? NULL : gdl__finish(op, out);
}

/* f32 linear backward's GEMMs: gx = g w and gw = g^T x, each stored or added as its gradient asks
   (gdl__grad_beta); shared by gdl_linear and gdl_linear_act */
static int gdl__linear_grads_xw(const gdl_backend *be, int rows, int in_f, int out_f, const gdl_real *g,
                                gdl_tensor *x, gdl_tensor *w, gdl_real *gx, gdl_real *gw) {
    if (gx && be->gemm(0, 0, rows, in_f, out_f, 1, g, out_f, 0, GDL__R(w), in_f, 0, (gdl_real)gdl__grad_beta(x), gx,
                       in_f, 0, 1) < 0)
        return -1;
    if (gw && be->gemm(1, 0, out_f, in_f, rows, 1, g, out_f, 0, GDL__R(x), in_f, 0, (gdl_real)gdl__grad_beta(w), gw,
                       in_f, 0, 1) < 0)
        return -1;
    return 0;
}

static int gdl__bw_linear(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *x = n->in[0], *w = n->in[1];
    int in_f = (int)w->shape[1], out_f = (int)w->shape[0], rows = (int)(n->out->numel / (out_f ? out_f : 1));
    gdl_real *g = GDL__R(n->out->grad), *gx = GDL__G(x), *gw = GDL__G(w), *gb = GDL__G(n->in[2]);
    gdl_dtype dt = n->out->dtype;
    if (!n->out->numel) return 0;
    if (dt != GDL_F32) { /* the same GEMMs in dt; the bias gradient is ones^T g */
        void *ones = gb ? gdl__ones_dt("gdl_backward", be, x->device, dt, rows) : NULL;
        if (gx && gdl__gemm_dt(be, dt, 0, 0, rows, in_f, out_f, g, out_f, 0, w->data, in_f, 0, 1, gx, in_f, 0, 1) < 0) return -1;
        if (gw && gdl__gemm_dt(be, dt, 1, 0, out_f, in_f, rows, g, out_f, 0, x->data, in_f, 0, 1, gw, in_f, 0, 1) < 0) return -1;
        if (gb && (!ones || gdl__gemm_dt(be, dt, 0, 0, 1, out_f, rows, ones, rows, 0, g, out_f, 0, 1, gb, out_f, 0, 1) < 0))
            return -1;
        return 0;
    }
    if (gdl__linear_grads_xw(be, rows, in_f, out_f, g, x, w, gx, gw) < 0) return -1;
    if (gb && be->reduce(GDL_RED_SUM, 1, rows, out_f, g, gb, NULL, gdl__grad_beta(n->in[2])) < 0) return -1;
    return 0;
}

/* gdl_act -> the backend's activation code (GDL_UN_*, -1 none); -2 after an error naming op */
static int gdl__act_code(const char *op, int act) {
    switch (act) {
    case GDL_ACT_NONE: return -1;
    case GDL_ACT_RELU: return GDL_UN_RELU;
    case GDL_ACT_GELU_TANH: return GDL_UN_GELU_TANH;
    case GDL_ACT_GELU: return GDL_UN_GELU_ERF;
    default:
        gdl__set_error("%s: unknown activation %d (GDL_ACT_NONE, GDL_ACT_RELU, GDL_ACT_GELU_TANH or GDL_ACT_GELU)", op,
                       act);
        return -2;
    }
}

GPUDL_API gdl_tensor *gdl_linear_act(gdl_tensor *x, gdl_tensor *w, gdl_tensor *bias, gdl_act act) {
    const char *op = "gdl_linear_act";
    int64_t in_f, out_f, rows, shape[GDL_MAX_DIMS];
    int err, ua = gdl__act_code(op, (int)act);
    gdl_tensor *out, *pre = NULL, *in[3];
    gdl_node *n;
    const gdl_backend *be;
    if (ua == -2) return NULL;
    /* low dtypes and autocast: the f32 op on f32 copies, rounded once */
    GDL__LOWP3(op, GDL_OP_LINEAR_ACT, gdl_linear_act(x, w, bias, act), x, w, bias);
    if (gdl__check_xwb(op, x, w, bias, 1) < 0 || gdl__linear_shapes(op, x, w, bias, shape, &rows) < 0) return NULL;
    in_f = w->shape[1];
    out_f = w->shape[0];
    in[0] = x;
    in[1] = w;
    in[2] = bias;
    if (!(be = gdl__be(op, x->device)) || !(out = gdl__tmp(op, x->ndim, shape, GDL_F32, x->device))) return NULL;
    /* GELU's backward needs its input (cuBLASLt's aux output); ReLU's reads the output */
    if ((ua == GDL_UN_GELU_TANH || ua == GDL_UN_GELU_ERF) && gdl__needs_grad(3, in) &&
        !(pre = gdl__tmp(op, x->ndim, shape, GDL_F32, x->device)))
        return NULL;
    if (out->numel && be->linear_act(ua, (int)rows, (int)out_f, (int)in_f, GDL__R(x), GDL__R(w),
                                     bias ? GDL__R(bias) : NULL, GDL__R(out), pre ? GDL__R(pre) : NULL) < 0)
        return NULL;
    n = gdl__record(op, GDL_OP_LINEAR_ACT, out, 3, in, &err);
    if (err) return NULL;
    if (n) {
        n->i[0] = ua;
        n->saved[0] = pre;
    }
    return gdl__finish(op, out);
}

static int gdl__bw_linear_act(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *x = n->in[0], *w = n->in[1];
    int in_f = (int)w->shape[1], out_f = (int)w->shape[0], rows = (int)(n->out->numel / (out_f ? out_f : 1));
    int ua = (int)n->i[0];
    gdl_real *g = GDL__R(n->out->grad), *gx = GDL__G(x), *gw = GDL__G(w), *gb = GDL__G(n->in[2]);
    if (!n->out->numel) return 0;
    if (ua >= 0 && (gx || gw || gb)) { /* act' and the bias gradient in one pass; then the GEMMs take act'·g */
        gdl_real *gp = (gdl_real *)gdl__scratch("gdl_backward", n->out->device, sizeof(gdl_real) * (size_t)n->out->numel);
        const gdl_real *pre = n->saved[0] ? GDL__R(n->saved[0]) : GDL__R(n->out);
        if (!gp || be->act_backward_reduce(ua, 1, rows, out_f, pre, g, gp, gb, gb ? gdl__grad_beta(n->in[2]) : 1) < 0)
            return -1;
        g = gp;
    } else if (gb && be->reduce(GDL_RED_SUM, 1, rows, out_f, g, gb, NULL, gdl__grad_beta(n->in[2])) < 0) {
        return -1;
    }
    return gdl__linear_grads_xw(be, rows, in_f, out_f, g, x, w, gx, gw);
}

