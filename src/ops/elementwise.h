/* src/ops/elementwise.h — the elementwise ops: binary with broadcasting,
   comparisons, unary; checks, outputs, tape nodes and backwards. */

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
    if (out->numel && be->k.binary(gdl__op(op)->kernel, nd, shape, dt, a->data, astr, dt, b->data, bstr, dt, out->data) < 0)
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
            be->k.fill(both, a->numel, 0) < 0)
            return -1;
        ga = gb = both;
        gat = gbt = GDL_F32;
    }
    switch (op) {
    case GDL_OP_ADD:
    case GDL_OP_SUB:
        if (ga) rc = rc || be->k.sum_to(nd, shape, dt, g, gat, ga, astr, 1) < 0;
        if (gb) rc = rc || be->k.sum_to(nd, shape, dt, g, gbt, gb, bstr, op == GDL_OP_SUB ? -1.0f : 1.0f) < 0;
        break;
    case GDL_OP_MUL:
        if (ga) rc = rc || be->k.binary(GDL_BIN_MUL, nd, shape, dt, g, gstr, dt, b->data, bstr, GDL_F32, tmp) < 0 ||
                     be->k.sum_to(nd, shape, GDL_F32, tmp, gat, ga, astr, 1) < 0;
        if (gb) rc = rc || be->k.binary(GDL_BIN_MUL, nd, shape, dt, g, gstr, dt, a->data, astr, GDL_F32, tmp) < 0 ||
                     be->k.sum_to(nd, shape, GDL_F32, tmp, gbt, gb, bstr, 1) < 0;
        break;
    default: /* DIV: d(a/b)/db = -(a/b)/b, with a/b formed again in f32 (the rounded output would lose
                cancelling sums over broadcast dims; PyTorch recomputes it too) */
        if (ga) rc = rc || be->k.binary(GDL_BIN_DIV, nd, shape, dt, g, gstr, dt, b->data, bstr, GDL_F32, tmp) < 0 ||
                     be->k.sum_to(nd, shape, GDL_F32, tmp, gat, ga, astr, 1) < 0;
        if (gb) rc = rc || be->k.binary(GDL_BIN_DIV, nd, shape, dt, a->data, astr, dt, b->data, bstr, GDL_F32, tmp) < 0 ||
                     be->k.binary(GDL_BIN_MUL, nd, shape, dt, g, gstr, GDL_F32, tmp, gstr, GDL_F32, tmp) < 0 ||
                     be->k.binary(GDL_BIN_DIV, nd, shape, GDL_F32, tmp, gstr, dt, b->data, bstr, GDL_F32, tmp) < 0 ||
                     be->k.sum_to(nd, shape, GDL_F32, tmp, gbt, gb, bstr, -1) < 0;
        break;
    }
    if (!rc && both) rc = gdl__acc_any("gdl_backward", be, dev, a->grad->data, dt, both, GDL_F32, a->numel) < 0;
    return rc ? -1 : 0;
}

/* the backward of minimum, maximum and pow, in f32 or natively in a low dtype dt (binary / sum_to:
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
            be->k.fill(both, a->numel, 0) < 0)
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
            if (be->k.binary(code[k], nd, shape, GDL_F32, (const gdl_real *)x, xs, GDL_F32, (const gdl_real *)y, ys, GDL_F32, tmp) < 0 ||
                be->k.binary(scale, nd, shape, GDL_F32, (const gdl_real *)g, gstr, GDL_F32, tmp, gstr, GDL_F32, tmp) < 0 ||
                be->k.sum_to(nd, shape, GDL_F32, tmp, GDL_F32, (gdl_real *)gp[k], k ? bstr : astr, 1) < 0)
                return -1;
        } else if (be->k.binary(code[k], nd, shape, dt, x, xs, dt, y, ys, GDL_F32, tmp) < 0 ||
                   be->k.binary(scale, nd, shape, dt, g, gstr, GDL_F32, tmp, gstr, GDL_F32, tmp) < 0 ||
                   be->k.sum_to(nd, shape, GDL_F32, tmp, gt[k], gp[k], k ? bstr : astr, 1) < 0) {
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
            rc = be->k.copy2d(GDL_F32, 1, a->numel, g, 0, ga, 0, 0) < 0;
        else if (ga) rc = rc || gdl__grad_zero(a, be) < 0 || be->k.sum_to(nd, shape, GDL_F32, g, GDL_F32, ga, astr, 1) < 0;
        if (gb && op == GDL_OP_ADD && a != b && b->numel == n->out->numel && !gdl__grad_beta(b))
            rc = rc || be->k.copy2d(GDL_F32, 1, b->numel, g, 0, gb, 0, 0) < 0;
        else if (gb)
            rc = rc || gdl__grad_zero(b, be) < 0 || be->k.sum_to(nd, shape, GDL_F32, g, GDL_F32, gb, bstr, op == GDL_OP_SUB ? -1 : 1) < 0;
        break;
    case GDL_OP_MUL:
        if (ga) rc = rc || be->k.binary(GDL_BIN_MUL, nd, shape, GDL_F32, g, gstr, GDL_F32, GDL__R(b), bstr, GDL_F32, tmp) < 0 ||
                     be->k.sum_to(nd, shape, GDL_F32, tmp, GDL_F32, ga, astr, 1) < 0;
        if (gb) rc = rc || be->k.binary(GDL_BIN_MUL, nd, shape, GDL_F32, g, gstr, GDL_F32, GDL__R(a), astr, GDL_F32, tmp) < 0 ||
                     be->k.sum_to(nd, shape, GDL_F32, tmp, GDL_F32, gb, bstr, 1) < 0;
        break;
    default: /* DIV: d(a/b)/db = -out/b */
        if (ga) rc = rc || be->k.binary(GDL_BIN_DIV, nd, shape, GDL_F32, g, gstr, GDL_F32, GDL__R(b), bstr, GDL_F32, tmp) < 0 ||
                     be->k.sum_to(nd, shape, GDL_F32, tmp, GDL_F32, ga, astr, 1) < 0;
        if (gb) rc = rc || be->k.binary(GDL_BIN_MUL, nd, shape, GDL_F32, g, gstr, GDL_F32, GDL__R(n->out), gstr, GDL_F32, tmp) < 0 ||
                     be->k.binary(GDL_BIN_DIV, nd, shape, GDL_F32, tmp, gstr, GDL_F32, GDL__R(b), bstr, GDL_F32, tmp) < 0 ||
                     be->k.sum_to(nd, shape, GDL_F32, tmp, GDL_F32, gb, bstr, -1) < 0;
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
        be->k.compare(op, nd, shape, a->dtype, a->data, str[0], b->dtype, b->data, str[1], (uint8_t *)out->data) < 0)
        return NULL;
    if (gdl__tracing) { /* gdl_export_onnx's trace only: no gradient flows through a comparison */
        gdl_tensor *in[2];
        gdl_node *n;
        int err;
        in[0] = a;
        in[1] = b;
        if ((n = gdl__record(opname, GDL__OP_TRACE_COMPARE, out, 2, in, &err)) != NULL) n->i[0] = op;
        if (err) return NULL;
    }
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
    if (!f || be->k.fill(GDL__R(f), 1, (gdl_real)v) < 0) return NULL;
    if (dt == GDL_F32) return f;
    if (!(r = gdl__tmp(op, 0, &one, dt, dev)) || be->k.cast(r->data, dt, f->data, GDL_F32, 1) < 0) return NULL;
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
    if ((dt == GDL_F32 ? be->k.unary(GDL_F32, gdl__op(op)->kernel, x->numel, GDL__R(x), GDL__R(out), (gdl_real)alpha)
                       : be->k.unary(dt, gdl__op(op)->kernel, x->numel, x->data, out->data, (float)alpha)) < 0)
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
        return be->k.unary_backward(n->out->dtype, gdl__op(n->op)->kernel, n->out->numel, n->in[0]->data, n->out->data,
                                     n->out->grad->data, gx, (float)n->f[0], 1);
    return be->k.unary_backward(GDL_F32, gdl__op(n->op)->kernel, n->out->numel, GDL__R(n->in[0]), GDL__R(n->out),
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
        return be->k.unary(t->dtype, GDL_UN_SCALE, t->numel, t->data, t->data, (float)s);
    if (gdl__check_in("gdl_mul_scalar_", "t", t, 1) < 0) return -1;
    return be->k.unary(GDL_F32, GDL_UN_SCALE, t->numel, GDL__R(t), GDL__R(t), (gdl_real)s);
}
