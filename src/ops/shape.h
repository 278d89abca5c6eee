/* src/ops/shape.h — the ops that move elements without arithmetic: concat,
   permute, slicing, split and stack, index_select and gather, where and
   masked_fill, tril and triu. */

/* ---- concat ---- */

GPUDL_API gdl_tensor *gdl_concat(int count, gdl_tensor *const *xs, int dim) {
    const char *op = "gdl_concat";
    int64_t shape[GDL_MAX_DIMS], outer, nd0, inner, total, off = 0;
    int k, j, d;
    gdl_tensor *out;
    const gdl_backend *be;
    gdl_dtype dt = GDL_F32;
    if (count < 1 || !xs) {
        gdl__set_error("%s: need at least one tensor (got %d)", op, count);
        return NULL;
    }
    for (k = 0; k < count; k++)
        if (!xs[k] || xs[k]->dtype != xs[0]->dtype) break;
    /* native in one low dtype, unless a tensor comes twice (its gradients
       are summed in f32 by the cast path's one copy, rounded once) */
    if (k == count && gdl__lp_native(GDL_OP_CONCAT, xs[0]->dtype)) {
        dt = xs[0]->dtype;
        for (k = 1; k < count && dt != GDL_F32; k++)
            for (j = 0; j < k; j++)
                if (xs[j] == xs[k]) dt = GDL_F32;
    }
    for (k = 0; k < count && dt == GDL_F32; k++)
        if (xs[k] && xs[k]->dtype != GDL_F32) break;
    if (dt == GDL_F32 && k < count) { /* the low-precision path on a copy of the list (the caller's stays as it is) */
        gdl_tensor **cv = (gdl_tensor **)gdl__arena_alloc(&gdl__host_arena, sizeof(gdl_tensor *) * (size_t)count);
        gdl_tensor ***pp = (gdl_tensor ***)gdl__arena_alloc(&gdl__host_arena, sizeof(gdl_tensor **) * (size_t)count);
        if (!cv || !pp) {
            gdl__set_error("%s: out of host memory", op);
            return NULL;
        }
        for (k = 0; k < count; k++) {
            cv[k] = xs[k];
            pp[k] = &cv[k];
        }
        gdl_dtype ac = gdl__ac_dt;
        if ((k = gdl__lowp_in(op, GDL_OP_CONCAT, count, pp, 0, &dt)) <= 0) {
            if (k < 0) return NULL;
        } else {
            return gdl__lowp_out(op, gdl_concat(count, cv, dim), dt, ac);
        }
    }
    for (k = 0; k < count; k++) {
        if (gdl__check_in(op, "an input", xs[k], dt == GDL_F32) < 0 || gdl__check_dev(op, xs[0], xs[k]) < 0) return NULL;
        if (xs[k]->ndim != xs[0]->ndim) {
            gdl__set_error("%s: tensors %s and %s differ in ndim", op, gdl_shape_str(xs[0]), gdl_shape_str(xs[k]));
            return NULL;
        }
    }
    if (gdl__dim(op, xs[0], dim, &d) < 0) return NULL;
    memcpy(shape, xs[0]->shape, sizeof shape);
    shape[d] = 0;
    for (k = 0; k < count; k++) {
        for (j = 0; j < xs[0]->ndim; j++)
            if (j != d && xs[k]->shape[j] != xs[0]->shape[j]) {
                gdl__set_error("%s: tensors %s and %s differ outside dim %d", op, gdl_shape_str(xs[0]),
                               gdl_shape_str(xs[k]), d);
                return NULL;
            }
        shape[d] += xs[k]->shape[d];
    }
    if (!(be = gdl__be(op, xs[0]->device)) || !(out = gdl__tmp(op, xs[0]->ndim, shape, dt, xs[0]->device)))
        return NULL;
    gdl__split(out, d, &outer, &total, &inner);
    total *= inner;
    for (k = 0; k < count; k++) {
        gdl__split(xs[k], d, &outer, &nd0, &inner);
        if (outer * nd0 * inner != 0 &&
            be->k.copy2d(dt, outer, nd0 * inner, xs[k]->data, nd0 * inner,
                         (char *)out->data + (size_t)off * gdl_dtype_size(dt), total, 0) < 0)
            return NULL;
        off += nd0 * inner;
    }
    return gdl__finish_with(op, GDL_OP_CONCAT, out, count, xs, d);
}

static int gdl__bw_concat(gdl_node *n, const gdl_backend *be) {
    int64_t outer, nd0, inner, total, off = 0;
    int k, d = (int)n->i[0];
    gdl__split(n->out, d, &outer, &total, &inner);
    total *= inner;
    for (k = 0; k < n->nin; k++) {
        gdl_real *gx = GDL__G(n->in[k]);
        gdl_dtype dt = n->out->dtype;
        gdl__split(n->in[k], d, &outer, &nd0, &inner);
        if (gx && outer * nd0 * inner != 0 &&
            be->k.copy2d(dt, outer, nd0 * inner, (const char *)n->out->grad->data + (size_t)off * gdl_dtype_size(dt),
                         total, gx, nd0 * inner, 1) < 0)
            return -1;
        off += nd0 * inner;
    }
    return 0;
}

/* ---- permute, slicing, split and stack ----
   Tensors are contiguous (MANUAL: the tensor struct), so a permute or a
   slice whose elements are not one block is a copy, made by the backend's
   strided_copy; its backward adds the gradient back through the same
   geometry (strided_copy accumulating). Copies move elements as they are:
   exact in every dtype, so no dtype hook. Where the result is one block of
   the input it is a view (gdl__view). */

/* the geometry of a PERMUTE or NARROW copy (node op and parameters p): the output's shape (nd dims) and,
   per output dim, the stride in x of one step along it; off: the first element's offset in x */
static void gdl__strided_geom(int op, const gdl_tensor *x, const int64_t *p, int *nd, int64_t *shape, int64_t *xstr,
                              int64_t *off) {
    int64_t cs[GDL_MAX_DIMS];
    int k;
    gdl__contig_strides(x->ndim, x->shape, cs);
    if (op == GDL_OP_PERMUTE) { /* p: the permutation */
        *nd = x->ndim;
        for (k = 0; k < x->ndim; k++) {
            shape[k] = x->shape[p[k]];
            xstr[k] = cs[p[k]];
        }
        *off = 0;
    } else { /* NARROW, p: dim, start, step, length */
        int64_t outer, n, inner;
        gdl__split(x, (int)p[0], &outer, &n, &inner);
        *nd = 3;
        shape[0] = outer;
        shape[1] = p[3];
        shape[2] = inner;
        xstr[0] = n * inner;
        xstr[1] = p[2] * inner;
        xstr[2] = 1;
        *off = p[1] * inner;
    }
}

/* a PERMUTE or NARROW copy of x with parameters p (gdl__strided_geom) into an output of out_nd dims */
static gdl_tensor *gdl__strided_op(const char *opname, int op, gdl_tensor *x, const int64_t *p, int out_nd,
                                   const int64_t *out_shape) {
    int64_t shape[GDL_MAX_DIMS], xstr[GDL_MAX_DIMS], ostr[GDL_MAX_DIMS], off;
    int nd, err, k;
    gdl_tensor *out;
    gdl_node *n;
    const gdl_backend *be;
    gdl__strided_geom(op, x, p, &nd, shape, xstr, &off);
    gdl__contig_strides(nd, shape, ostr);
    if (!(be = gdl__be(opname, x->device)) || !(out = gdl__tmp(opname, out_nd, out_shape, x->dtype, x->device))) return NULL;
    if (out->numel && be->k.strided_copy(x->dtype, nd, shape, GDL__AT(x->data, x->dtype, off), xstr, out->data, ostr, 0) < 0)
        return NULL;
    n = gdl__record(opname, op, out, 1, &x, &err);
    if (err) return NULL;
    if (n)
        for (k = 0; k < 8; k++) n->i[k] = p[k];
    return gdl__finish(opname, out);
}

static int gdl__bw_strided(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *x = n->in[0];
    int64_t shape[GDL_MAX_DIMS], xstr[GDL_MAX_DIMS], gstr[GDL_MAX_DIMS], off;
    int nd;
    if (!x->requires_grad || !n->out->numel) return 0;
    gdl__strided_geom(n->op, x, n->i, &nd, shape, xstr, &off);
    gdl__contig_strides(nd, shape, gstr);
    return be->k.strided_copy(x->grad->dtype, nd, shape, n->out->grad->data, gstr,
                            GDL__AT(x->grad->data, x->grad->dtype, off), xstr, 1);
}

GPUDL_API gdl_tensor *gdl_permute(gdl_tensor *x, int ndim, const int *dims) {
    const char *op = "gdl_permute";
    int64_t p[8] = {0}, shape[GDL_MAX_DIMS];
    int k, j, last = -1, view = 1;
    if (gdl__check_in(op, "x", x, 0) < 0) return NULL;
    if (ndim != x->ndim || (ndim && !dims)) {
        gdl__set_error("%s: %d dims given for %s (ndim %d)", op, dims ? ndim : 0, gdl_shape_str(x), x->ndim);
        return NULL;
    }
    for (k = 0; k < ndim; k++) {
        int d = dims[k] < 0 ? dims[k] + ndim : dims[k];
        for (j = 0; j < k && d >= 0 && d < ndim; j++)
            if (p[j] == d) d = -1;
        if (d < 0 || d >= ndim) {
            gdl__set_error("%s: dims are not a permutation of 0..%d for %s (dim %d at position %d)", op, ndim - 1,
                           gdl_shape_str(x), dims[k], k);
            return NULL;
        }
        p[k] = d;
        shape[k] = x->shape[d];
        if (shape[k] != 1) { /* a view when the dims longer than 1 keep their order */
            if (d < last) view = 0;
            last = d;
        }
    }
    if (view) return gdl__view(op, x, ndim, shape, 0);
    return gdl__strided_op(op, GDL_OP_PERMUTE, x, p, ndim, shape);
}

GPUDL_API gdl_tensor *gdl_transpose(gdl_tensor *x, int dim0, int dim1) {
    int dims[GDL_MAX_DIMS], k, d0, d1;
    if (gdl__check_in("gdl_transpose", "x", x, 0) < 0 || gdl__dim("gdl_transpose", x, dim0, &d0) < 0 ||
        gdl__dim("gdl_transpose", x, dim1, &d1) < 0)
        return NULL;
    for (k = 0; k < x->ndim; k++) dims[k] = k;
    dims[d0] = d1;
    dims[d1] = d0;
    return gdl_permute(x, x->ndim, dims);
}

/* elements start, start + step, ... (len of them, in range) along dim d */
static gdl_tensor *gdl__narrow(const char *op, gdl_tensor *x, int d, int64_t start, int64_t len, int64_t step) {
    int64_t shape[GDL_MAX_DIMS], p[8] = {0}, outer, n, inner;
    memcpy(shape, x->shape, sizeof shape);
    shape[d] = len;
    gdl__split(x, d, &outer, &n, &inner);
    if (len == 1) step = 1;
    if (step == 1 && (outer == 1 || len == n)) /* one block of x */
        return gdl__view(op, x, x->ndim, shape, start * inner);
    p[0] = d;
    p[1] = start;
    p[2] = step;
    p[3] = len;
    return gdl__strided_op(op, GDL_OP_NARROW, x, p, x->ndim, shape);
}

GPUDL_API gdl_tensor *gdl_narrow(gdl_tensor *x, int dim, int64_t start, int64_t length) {
    const char *op = "gdl_narrow";
    int d;
    int64_t n;
    if (gdl__check_in(op, "x", x, 0) < 0 || gdl__dim(op, x, dim, &d) < 0) return NULL;
    n = x->shape[d];
    if (start < 0 && start >= -n) start += n;
    if (start < 0 || start > n || length < 0 || length > n - start) {
        gdl__set_error("%s: start %lld, length %lld out of range for dim %d (size %lld) of %s", op, (long long)start,
                       (long long)length, dim, (long long)n, gdl_shape_str(x));
        return NULL;
    }
    return gdl__narrow(op, x, d, start, length, 1);
}

GPUDL_API gdl_tensor *gdl_slice_dim(gdl_tensor *x, int dim, int64_t start, int64_t end, int64_t step) {
    const char *op = "gdl_slice_dim";
    int d;
    int64_t n;
    if (gdl__check_in(op, "x", x, 0) < 0 || gdl__dim(op, x, dim, &d) < 0) return NULL;
    if (step < 1) {
        gdl__set_error("%s: step %lld must be positive", op, (long long)step);
        return NULL;
    }
    n = x->shape[d];
    if (start < 0) start += n;
    if (end < 0) end += n;
    start = start < 0 ? 0 : start > n ? n : start;
    end = end < start ? start : end > n ? n : end;
    return gdl__narrow(op, x, d, start, (end - start + step - 1) / step, step);
}

GPUDL_API gdl_tensor *gdl_select(gdl_tensor *x, int dim, int64_t index) {
    const char *op = "gdl_select";
    int64_t shape[GDL_MAX_DIMS];
    int d, k, nd = 0;
    gdl_tensor *r;
    if (gdl__check_in(op, "x", x, 0) < 0 || gdl__dim(op, x, dim, &d) < 0) return NULL;
    if (index < -x->shape[d] || index >= x->shape[d]) {
        gdl__set_error("%s: index %lld is out of range for dim %d (size %lld) of %s", op, (long long)index, dim,
                       (long long)x->shape[d], gdl_shape_str(x));
        return NULL;
    }
    if (!(r = gdl__narrow(op, x, d, index < 0 ? index + x->shape[d] : index, 1, 1))) return NULL;
    for (k = 0; k < x->ndim; k++)
        if (k != d) shape[nd++] = x->shape[k];
    return gdl__view(op, r, nd, shape, 0);
}

GPUDL_API int gdl_split(gdl_tensor *x, int64_t split_size, int dim, gdl_tensor **out, int max_out) {
    const char *op = "gdl_split";
    int d, k, count;
    int64_t n;
    if (gdl__check_in(op, "x", x, 0) < 0 || gdl__dim(op, x, dim, &d) < 0) return -1;
    n = x->shape[d];
    if (!out || split_size < 1) {
        gdl__set_error(!out ? "%s: out is NULL" : "%s: split_size %lld must be positive", op, (long long)split_size);
        return -1;
    }
    count = n == 0 ? 1 : (int)((n + split_size - 1) / split_size);
    if (count > max_out) {
        gdl__set_error("%s: %s in pieces of %lld along dim %d makes %d tensors, room for %d", op, gdl_shape_str(x),
                       (long long)split_size, dim, count, max_out);
        return -1;
    }
    for (k = 0; k < count; k++) {
        int64_t s = (int64_t)k * split_size, len = n - s < split_size ? n - s : split_size;
        if (!(out[k] = gdl__narrow(op, x, d, s, len, 1))) return -1;
    }
    return count;
}

GPUDL_API int gdl_chunk(gdl_tensor *x, int chunks, int dim, gdl_tensor **out) {
    int d;
    if (gdl__check_in("gdl_chunk", "x", x, 0) < 0 || gdl__dim("gdl_chunk", x, dim, &d) < 0) return -1;
    if (chunks < 1) {
        gdl__set_error("gdl_chunk: chunks %d must be positive", chunks);
        return -1;
    }
    return gdl_split(x, x->shape[d] ? (x->shape[d] + chunks - 1) / chunks : 1, dim, out, chunks);
}

GPUDL_API gdl_tensor *gdl_stack(int count, gdl_tensor *const *xs, int dim) {
    const char *op = "gdl_stack";
    int64_t shape[GDL_MAX_DIMS];
    gdl_tensor **v;
    int k, d, nd;
    if (count < 1 || !xs) {
        gdl__set_error("%s: need at least one tensor (got %d)", op, count);
        return NULL;
    }
    for (k = 0; k < count; k++) {
        if (gdl__check_in(op, "an input", xs[k], 0) < 0) return NULL;
        if (!gdl_same_shape(xs[k], xs[0])) {
            gdl__set_error("%s: every tensor must have one shape, got %s at entry 0 and %s at entry %d", op,
                           gdl_shape_str(xs[0]), gdl_shape_str(xs[k]), k);
            return NULL;
        }
    }
    nd = xs[0]->ndim + 1;
    d = dim < 0 ? dim + nd : dim;
    if (d < 0 || d >= nd || nd > GDL_MAX_DIMS) {
        gdl__set_error("%s: dim %d out of range for stacking %s tensors", op, dim, gdl_shape_str(xs[0]));
        return NULL;
    }
    if (!(v = (gdl_tensor **)gdl__arena_alloc(&gdl__host_arena, sizeof(gdl_tensor *) * (size_t)count))) {
        gdl__set_error("%s: out of host memory", op);
        return NULL;
    }
    for (k = 0; k < nd; k++) shape[k] = k < d ? xs[0]->shape[k] : k == d ? 1 : xs[0]->shape[k - 1];
    for (k = 0; k < count; k++)
        if (!(v[k] = gdl__view(op, xs[k], nd, shape, 0))) return NULL;
    return gdl_concat(count, v, d);
}

/* ---- index_select and gather (the backend's gather; backward: scatter_add) ---- */

/* the CPU checks every index (a GPU's out-of-range element reads 0: checking would wait for the device) */
static int gdl__check_index_range(const char *op, const gdl_tensor *idx, int64_t n) {
    int64_t i;
    if (idx->device.type != GDL_DEVICE_CPU) return 0;
    for (i = 0; i < idx->numel; i++) {
        int32_t v = ((const int32_t *)idx->data)[i];
        if (v < 0 || v >= n) {
            gdl__set_error("%s: index %d at position %lld is out of range [0,%lld)", op, (int)v, (long long)i, (long long)n);
            return -1;
        }
    }
    return 0;
}

/* index strides for an op: INDEX_SELECT's 1-D index moves along dim d only; GATHER's has the output's shape */
static void gdl__gather_istr(int op, int d, int nd, const int64_t *shape, int64_t *istr) {
    int k;
    if (op == GDL_OP_GATHER) {
        gdl__contig_strides(nd, shape, istr);
        return;
    }
    for (k = 0; k < nd; k++) istr[k] = k == d ? 1 : 0;
}

static gdl_tensor *gdl__gather_op(const char *opname, int op, gdl_tensor *x, int dim, gdl_tensor *index) {
    int64_t shape[GDL_MAX_DIMS], xstr[GDL_MAX_DIMS], istr[GDL_MAX_DIMS];
    int d, k;
    gdl_tensor *out, *in[2];
    const gdl_backend *be;
    if (gdl__check_two(opname, "x", x, 0, "index", index, 0) < 0 || gdl__dim(opname, x, dim, &d) < 0) return NULL;
    if (index->dtype != GDL_I32) {
        gdl__set_error("%s: index must be i32, got %s %s", opname, gdl_dtype_name(index->dtype), gdl_shape_str(index));
        return NULL;
    }
    memcpy(shape, x->shape, sizeof shape);
    if (op == GDL_OP_INDEX_SELECT) {
        if (index->ndim > 1) {
            gdl__set_error("%s: index must have at most 1 dim, got %s", opname, gdl_shape_str(index));
            return NULL;
        }
        shape[d] = index->numel;
    } else {
        for (k = 0; k < x->ndim && index->ndim == x->ndim; k++)
            if (k != d && index->shape[k] > x->shape[k]) break;
        if (index->ndim != x->ndim || k < x->ndim) {
            gdl__set_error("%s: index %s does not fit x %s (the same ndim, no longer than x outside dim %d)", opname,
                           gdl_shape_str(index), gdl_shape_str(x), d);
            return NULL;
        }
        memcpy(shape, index->shape, sizeof(int64_t) * (size_t)x->ndim);
    }
    if (gdl__check_index_range(opname, index, x->shape[d]) < 0) return NULL;
    gdl__contig_strides(x->ndim, x->shape, xstr);
    gdl__gather_istr(op, d, x->ndim, shape, istr);
    if (!(be = gdl__be(opname, x->device)) || !(out = gdl__tmp(opname, x->ndim, shape, x->dtype, x->device))) return NULL;
    if (out->numel && be->k.gather(x->dtype, x->ndim, shape, d, x->data, xstr, x->shape[d], (const int32_t *)index->data,
                                 istr, out->data) < 0)
        return NULL;
    in[0] = x;
    in[1] = index;
    return gdl__finish_with(opname, op, out, 2, in, d);
}

/* scatter-add into f32: x's own gradient, or an f32 sum added to a bf16/f16 one with one rounding */
static int gdl__bw_gather(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *x = n->in[0], *out = n->out;
    int64_t xstr[GDL_MAX_DIMS], istr[GDL_MAX_DIMS];
    int d = (int)n->i[0];
    gdl_real *dst;
    if (!x->requires_grad || !out->numel) return 0;
    gdl__contig_strides(x->ndim, x->shape, xstr);
    gdl__gather_istr(n->op, d, out->ndim, out->shape, istr);
    dst = x->grad->dtype == GDL_F32 ? GDL__R(x->grad)
                                    : (gdl_real *)gdl__scratch("gdl_backward", x->device, sizeof(gdl_real) * (size_t)(x->numel + 1));
    if (!dst || (x->grad->dtype != GDL_F32 && be->k.fill(dst, x->numel, 0) < 0)) return -1;
    if (be->k.scatter_add(out->grad->dtype, out->ndim, out->shape, d, out->grad->data, (const int32_t *)n->in[1]->data, istr,
                        dst, xstr, x->shape[d]) < 0)
        return -1;
    return x->grad->dtype == GDL_F32 ? 0
                                     : gdl__acc_any("gdl_backward", be, x->device, x->grad->data, x->grad->dtype, dst,
                                                    GDL_F32, x->numel);
}

GPUDL_API gdl_tensor *gdl_index_select(gdl_tensor *x, int dim, gdl_tensor *index) {
    return gdl__gather_op("gdl_index_select", GDL_OP_INDEX_SELECT, x, dim, index);
}
GPUDL_API gdl_tensor *gdl_gather(gdl_tensor *x, int dim, gdl_tensor *index) {
    return gdl__gather_op("gdl_gather", GDL_OP_GATHER, x, dim, index);
}

/* ---- where, masked_fill (the backend's where: a selection, exact in every float dtype) ---- */

static int gdl__check_mask(const char *op, const char *arg, const gdl_tensor *m, const gdl_tensor *x) {
    if (gdl__check_in(op, arg, m, 0) < 0 || gdl__check_dev(op, x, m) < 0) return -1;
    if (m->dtype != GDL_U8) {
        gdl__set_error("%s: %s must be u8 (a comparison's result), got %s %s", op, arg, gdl_dtype_name(m->dtype),
                       gdl_shape_str(m));
        return -1;
    }
    return 0;
}

GPUDL_API gdl_tensor *gdl_where(gdl_tensor *cond, gdl_tensor *a, gdl_tensor *b) {
    const char *op = "gdl_where";
    int64_t shape[GDL_MAX_DIMS], str[3][GDL_MAX_DIMS];
    const gdl_tensor *t[3];
    gdl_tensor *out, *in[3];
    const gdl_backend *be;
    int nd, err;
    gdl_dtype dt = GDL_F32;
    if (gdl__ac_dt != GDL_F32 || (a && a->dtype != GDL_F32) || (b && b->dtype != GDL_F32)) {
        /* native in one low dtype, unless a is b (its two gradients are summed by the cast path's one copy) */
        if (a && b && a != b && a->dtype == b->dtype && gdl__lp_native(GDL_OP_WHERE, a->dtype)) dt = a->dtype;
        else GDL__LOWP2(op, GDL_OP_WHERE, gdl_where(cond, a, b), a, b);
    }
    if (gdl__check_two(op, "a", a, dt == GDL_F32, "b", b, dt == GDL_F32) < 0 || gdl__check_mask(op, "cond", cond, a) < 0)
        return NULL;
    t[0] = cond;
    t[1] = a;
    t[2] = b;
    if (gdl__broadcast_k(op, 3, t, &nd, shape, str) < 0 || !(be = gdl__be(op, a->device)) ||
        !(out = gdl__tmp(op, nd, shape, dt, a->device)))
        return NULL;
    if (out->numel && be->k.where(dt, nd, shape, (const uint8_t *)cond->data, str[0], a->data, str[1], b->data, str[2],
                                out->data) < 0)
        return NULL;
    in[0] = cond;
    in[1] = a;
    in[2] = b;
    gdl__record(op, GDL_OP_WHERE, out, 3, in, &err);
    return err ? NULL : gdl__finish(op, out);
}

GPUDL_API gdl_tensor *gdl_masked_fill(gdl_tensor *x, gdl_tensor *mask, double value) {
    const char *op = "gdl_masked_fill";
    int64_t shape[GDL_MAX_DIMS], str[2][GDL_MAX_DIMS], zero[GDL_MAX_DIMS] = {0};
    const gdl_tensor *t[2];
    gdl_tensor *out, *v, *in[2];
    gdl_node *n;
    const gdl_backend *be;
    int nd, err;
    if (gdl__check_in(op, "x", x, 0) < 0 || gdl__check_mask(op, "mask", mask, x) < 0) return NULL;
    if (!gdl__is_float(x->dtype)) {
        gdl__set_error("%s: expected a float tensor (f32, bf16 or f16), got %s %s", op, gdl_dtype_name(x->dtype),
                       gdl_shape_str(x));
        return NULL;
    }
    t[0] = mask;
    t[1] = x;
    if (gdl__broadcast_k(op, 2, t, &nd, shape, str) < 0 || nd != x->ndim || gdl__numel_of(nd, shape) != x->numel) {
        gdl__set_error("%s: mask %s cannot be broadcast to x %s", op, gdl_shape_str(mask), gdl_shape_str(x));
        return NULL;
    }
    if (!(be = gdl__be(op, x->device)) || !(v = gdl__scalar_tmp(op, be, x->device, x->dtype, value)) ||
        !(out = gdl__tmp(op, x->ndim, x->shape, x->dtype, x->device)))
        return NULL;
    if (out->numel &&
        be->k.where(x->dtype, nd, shape, (const uint8_t *)mask->data, str[0], v->data, zero, x->data, str[1], out->data) < 0)
        return NULL;
    in[0] = x;
    in[1] = mask;
    n = gdl__record(op, GDL_OP_MASKED_FILL, out, 2, in, &err);
    if (n) n->f[0] = value; /* for gdl_export_onnx */
    return err ? NULL : gdl__finish(op, out);
}

/* where's gradient to a branch is where(cond, g, 0) (the false branch: where(cond, 0, g)), summed over
   what the branch was broadcast along; masked_fill's x is where's false branch */
static int gdl__bw_where(gdl_node *n, const gdl_backend *be) {
    int fill = n->op == GDL_OP_MASKED_FILL, nd, k;
    gdl_tensor *cond = n->in[fill ? 1 : 0], *br[2], *out = n->out;
    int64_t shape[GDL_MAX_DIMS], str[3][GDL_MAX_DIMS], gstr[GDL_MAX_DIMS], zstr[GDL_MAX_DIMS] = {0};
    const gdl_tensor *t[3];
    gdl_dtype dt = out->dtype;
    void *zero, *tmp;
    br[0] = fill ? NULL : n->in[1];
    br[1] = n->in[fill ? 0 : 2];
    t[0] = cond;
    t[1] = fill ? br[1] : br[0];
    t[2] = br[1];
    if (!out->numel || gdl__broadcast_k("gdl_backward", fill ? 2 : 3, t, &nd, shape, str) < 0) return out->numel ? -1 : 0;
    gdl__contig_strides(nd, shape, gstr);
    if (!(zero = gdl__scratch("gdl_backward", out->device, 8)) || be->rt.memset0(zero, 8) < 0 ||
        !(tmp = gdl__scratch("gdl_backward", out->device, gdl_dtype_size(dt) * (size_t)out->numel)))
        return -1;
    for (k = 0; k < 2; k++) {
        gdl_tensor *x = br[k];
        const int64_t *xs = fill ? str[1] : str[k + 1];
        if (!x || !x->requires_grad) continue;
        if (be->k.where(dt, nd, shape, (const uint8_t *)cond->data, str[0], k ? zero : out->grad->data, k ? zstr : gstr,
                      k ? out->grad->data : zero, k ? gstr : zstr, tmp) < 0)
            return -1;
        if (be->k.sum_to(nd, shape, dt, tmp, x->grad->dtype, x->grad->data, xs, 1) < 0)
            return -1;
    }
    return 0;
}

/* ---- tril / triu (the backend's tri; exact in every float dtype) ---- */

static gdl_tensor *gdl__tri_op(const char *opname, int op, gdl_tensor *x, int64_t k) {
    int64_t R, C;
    gdl_tensor *out;
    const gdl_backend *be;
    if (gdl__check_in(opname, "x", x, 0) < 0) return NULL;
    if (!gdl__is_float(x->dtype) || x->ndim < 2) {
        gdl__set_error("%s: expected a float tensor (f32, bf16 or f16) of at least 2 dims, got %s %s", opname,
                       gdl_dtype_name(x->dtype), gdl_shape_str(x));
        return NULL;
    }
    R = x->shape[x->ndim - 2];
    C = x->shape[x->ndim - 1];
    if (!(be = gdl__be(opname, x->device)) || !(out = gdl__tmp(opname, x->ndim, x->shape, x->dtype, x->device))) return NULL;
    if (out->numel && be->k.tri(x->dtype, op == GDL_OP_TRIU, x->numel / (R * C), R, C, k, x->data, out->data, 0) < 0)
        return NULL;
    return gdl__finish_with(opname, op, out, 1, &x, k);
}

static int gdl__bw_tri(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *x = n->in[0];
    int64_t R = x->shape[x->ndim - 2], C = x->shape[x->ndim - 1];
    if (!x->requires_grad || !x->numel) return 0;
    return be->k.tri(x->grad->dtype, n->op == GDL_OP_TRIU, x->numel / (R * C), R, C, n->i[0], n->out->grad->data,
                   x->grad->data, 1);
}

GPUDL_API gdl_tensor *gdl_tril(gdl_tensor *x, int64_t diagonal) { return gdl__tri_op("gdl_tril", GDL_OP_TRIL, x, diagonal); }
GPUDL_API gdl_tensor *gdl_triu(gdl_tensor *x, int64_t diagonal) { return gdl__tri_op("gdl_triu", GDL_OP_TRIU, x, diagonal); }
