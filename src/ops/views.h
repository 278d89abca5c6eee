/* src/ops/views.h — views: reshape, slices, detach; tensors that share storage;
   gdl_to, the differentiable copy to another device. */

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
    return gx ? be->k.copy2d(GDL_F32, 1, n->out->numel, GDL__R(n->out->grad), 0, gx + n->i[0], 0, 1) : 0;
}

/* a copy on another device; differentiable (its backward: gdl__bw_to, below) */
GPUDL_API gdl_tensor *gdl_to(gdl_tensor *t, gdl_device dev) {
    gdl_tensor *r;
    if (!t) {
        gdl__null_arg("gdl_to", "t");
        return NULL;
    }
    if (gdl__stale("gdl_to", "t", t) < 0) return NULL;
    r = gdl__make("gdl_to", t->ndim, t->shape, t->dtype, dev, gdl__is_persistent(t), NULL);
    if (!r) return NULL;
    if (gdl_copy_(r, t) < 0) {
        gdl_free(r);
        return NULL;
    }
    r->name = t->name;
    if (gdl__is_persistent(t) && !gdl__tracing) { /* traced: recorded, as a copy made from the input */
        r->requires_grad = t->requires_grad;
    } else {
        int err;
        gdl__record("gdl_to", GDL_OP_TO, r, 1, &t, &err);
        if (err) return NULL;
    }
    return r;
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
    return bx->k.copy2d(GDL_F32, 1, x->numel, g, 0, gx, 0, 1);
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
        } else if (s[k] > 0 && known > INT64_MAX / s[k]) { /* the product would overflow: no tensor has it */
            gdl__set_error("gdl_reshape: cannot reshape %s into %s (more elements than int64 counts)", gdl_shape_str(x),
                           gdl__shape_fmt(ndim, shape));
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
