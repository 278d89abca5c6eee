/* ---------------------------------------------------------------------------
   src/ops/core.h   The op layer: check arguments, allocate the output, call the
   backend, record a tape node. Each op's backward is listed in the op table
   (gdl__ops, src/ops/op_table.h) under its gdl_op id.
   ------------------------------------------------------------------------- */

typedef struct gdl_node {
    int op;               /* gdl_op */
    int nin;
    gdl_tensor **in;      /* inputs; an entry may be NULL (optional bias) */
    gdl_tensor *out;
    gdl_tensor *saved[2]; /* extra tensors kept for backward (indices, stats) */
    void *buf;            /* scratch kept for backward (im2col columns) */
    int64_t i[8];         /* integer parameters */
    double f[2];          /* real parameters */
    gdl_tensor *stats[2]; /* read, not differentiated: batch norm's running mean and var (for gdl_export_onnx) */
    gdl_conv_geom geom;
    struct gdl_node *prev;
} gdl_node;

typedef int (*gdl__backward_fn)(gdl_node *n, const gdl_backend *be);
typedef struct gdl__op_info {
    const char *name;
    gdl__backward_fn backward;
    int kernel; /* the backend's gdl_binary_op / gdl_unary_op / gdl_reduce_op code */
    int autocast; /* gdl_autocast_class */
} gdl__op_info;
static const gdl__op_info *gdl__op(int op); /* the op table, defined after the ops */

#define GDL__R(t) ((gdl_real *)(t)->data)
#define GDL__G(t) ((t) && (t)->requires_grad ? (gdl_real *)(t)->grad->data : (gdl_real *)NULL)

/* gdl_backward gives an intermediate's gradient buffer unset (GDL__T_UNSET: garbage that stands for
   zeros) to the ops that can write it instead of adding into it (gdl__bw_fresh_ok, src/ops/autograd.h),
   which saves zeroing it and reading it back. Such an op asks gdl__grad_beta right before it writes a
   whole gradient: 0 (store; the gradient counts as written from then on) or 1 (add, as usual). */
static int gdl__grad_beta(gdl_tensor *t) {
    if (!t || !t->requires_grad || !t->grad || !(t->grad->flags & GDL__T_UNSET)) return 1;
    t->grad->flags &= ~(unsigned)GDL__T_UNSET;
    return 0;
}
/* an unset gradient zeroed, for code that adds into it */
static int gdl__grad_zero(gdl_tensor *t, const gdl_backend *be) {
    gdl_tensor *g = t && t->requires_grad ? t->grad : NULL;
    if (!g || !(g->flags & GDL__T_UNSET)) return 0;
    g->flags &= ~(unsigned)GDL__T_UNSET;
    return be->rt.memset0(g->data, (size_t)g->numel * gdl_dtype_size(g->dtype));
}

GPUDL_API const char *gdl_op_name(int op) {
    return (op >= 0 && op < GDL_OP_COUNT) ? gdl__op(op)->name : "invalid-op";
}
GPUDL_API int gdl_op_autocast_class(int op) { return (op >= 0 && op < GDL_OP_COUNT) ? gdl__op(op)->autocast : -1; }
GPUDL_API int gdl_tensor_op(const gdl_tensor *t) { return t && t->node ? t->node->op : -1; }

GPUDL_API int gdl_set_grad_enabled(int on) {
    int prev = gdl__grad_enabled;
    gdl__grad_enabled = on != 0;
    return prev;
}
GPUDL_API int gdl_is_grad_enabled(void) { return gdl__grad_enabled; }
GPUDL_API void gdl_set_anomaly_mode(int on) { gdl__anomaly = on != 0; }

static int gdl__check_in(const char *op, const char *arg, const gdl_tensor *t, int need_f32) {
    if (!t) {
        gdl__null_arg(op, arg);
        return -1;
    }
    if (gdl__stale(op, arg, t) < 0) return -1;
    if (need_f32 && t->dtype != GDL_F32) {
        gdl__set_error(t->dtype == GDL_F16 || t->dtype == GDL_BF16 ? "%s: %s must be f32 here (no bf16/f16 path), got %s %s"
                                                                   : "%s: %s must be a float tensor, got %s %s",
                       op, arg, gdl_dtype_name(t->dtype), gdl_shape_str(t));
        return -1;
    }
    return 0;
}

static int gdl__check_dev(const char *op, const gdl_tensor *a, const gdl_tensor *b) {
    if (a && b && !gdl_device_equal(a->device, b->device)) {
        gdl__set_error("%s: expected all tensors on the same device, but found %s %s and %s %s", op,
                       gdl_shape_str(a), gdl_device_str(a->device), gdl_shape_str(b), gdl_device_str(b->device));
        return -1;
    }
    return 0;
}

/* The two tensors of an op (a_f32, b_f32: f32 only), each checked, then on one device. */
static int gdl__check_two(const char *op, const char *aname, const gdl_tensor *a, int a_f32, const char *bname,
                          const gdl_tensor *b, int b_f32) {
    if (gdl__check_in(op, aname, a, a_f32) < 0 || gdl__check_in(op, bname, b, b_f32) < 0 || gdl__check_dev(op, a, b) < 0)
        return -1;
    return 0;
}

/* The input, weight and optional bias of an op (linear, convolution; need_f32: f32 only), each checked, then
   all on the input's device. */
static int gdl__check_xwb(const char *op, const gdl_tensor *x, const gdl_tensor *w, const gdl_tensor *bias,
                          int need_f32) {
    if (gdl__check_in(op, "input", x, need_f32) < 0 || gdl__check_in(op, "weight", w, need_f32) < 0 ||
        (bias && gdl__check_in(op, "bias", bias, need_f32) < 0) || gdl__check_dev(op, x, w) < 0 ||
        gdl__check_dev(op, x, bias) < 0)
        return -1;
    return 0;
}

/* gdl_export_onnx's trace (src/io/onnx_export.h): while it is set every op records its node, whatever
   needs a gradient, and marks no output as needing one; the values computed are the same. The ops that
   are not differentiable record theirs only then, under ids after the op list's (a comparison) or as a
   cast between any dtypes (gdl_to_dtype), so that a mask computed from an input is traced too. */
static int gdl__tracing;
enum { GDL__OP_TRACE_COMPARE = GDL_OP_COUNT }; /* i[0]: the gdl_compare_op */

static int gdl__needs_grad(int nin, gdl_tensor *const *in) {
    int k;
    if (gdl__tracing) return 1;
    if (!gdl__grad_enabled) return 0;
    for (k = 0; k < nin; k++)
        if (in[k] && in[k]->requires_grad) return 1;
    return 0;
}

/* Records out = op(in...) on the tape when an input needs a gradient.
   Returns the node, or NULL when none is needed (*err set on failure). */
static gdl_node *gdl__record(const char *opname, int op, gdl_tensor *out, int nin, gdl_tensor *const *in, int *err) {
    gdl_node *n;
    *err = 0;
    if (!gdl__needs_grad(nin, in)) return NULL;
    n = (gdl_node *)gdl__arena_alloc(&gdl__host_arena, sizeof(gdl_node));
    if (n) {
        memset(n, 0, sizeof *n);
        n->in = (gdl_tensor **)gdl__arena_alloc(&gdl__host_arena, sizeof(gdl_tensor *) * (size_t)nin);
    }
    if (!n || !n->in) {
        gdl__set_error("%s: out of memory recording the autograd tape", opname);
        *err = 1;
        return NULL;
    }
    memcpy(n->in, in, sizeof(gdl_tensor *) * (size_t)nin);
    n->op = op;
    n->nin = nin;
    n->out = out;
    n->prev = gdl__tape;
    gdl__tape = n;
    out->node = n;
    out->requires_grad = !gdl__tracing;
    return n;
}

/* Anomaly mode: fail on a non-finite output. */
static gdl_tensor *gdl__finish(const char *op, gdl_tensor *out) {
    int64_t bad = 0;
    if (gdl__prof_on) gdl__prof_close(op);
    if (out && gdl__anomaly && (out->dtype == GDL_F32 || out->dtype == GDL_F16 || out->dtype == GDL_BF16)) {
        const gdl_backend *be = gdl__be(op, out->device);
        gdl_real *f = GDL__R(out);
        if (!be) return NULL;
        if (out->dtype != GDL_F32 && /* a native low-precision op's output: checked in f32 */
            (!(f = (gdl_real *)gdl__scratch(op, out->device, sizeof(gdl_real) * (size_t)(out->numel + 1))) ||
             be->k.cast(f, GDL_F32, out->data, out->dtype, out->numel) < 0))
            return NULL;
        if (be->k.count_nonfinite(out->numel, f, &bad) < 0) return NULL;
        if (bad) {
            gdl__set_error("%s: produced %lld NaN/Inf values in its output %s (anomaly mode)", op, (long long)bad,
                           gdl_shape_str(out));
            return NULL;
        }
    }
    return out;
}

/* gdl__record, then gdl__finish: the tail of an op whose backward reads one integer of its own, attr
   (n->i[0]: a dim, a diagonal, the padding index) */
static gdl_tensor *gdl__finish_with(const char *opname, int op, gdl_tensor *out, int nin, gdl_tensor *const *in,
                                    int64_t attr) {
    int err;
    gdl_node *n = gdl__record(opname, op, out, nin, in, &err);
    if (err) return NULL;
    if (n) n->i[0] = attr;
    return gdl__finish(opname, out);
}

/* ---- run-time dtypes ----
   The kernels compute in f32 (gdl_real). An op given bf16 or f16 inputs
   without a native path (matmul, linear, conv2d, the poolings and
   batch_norm have one: their backend entries take the dtype) runs through
   gdl__lowp_in / gdl__lowp_out, the one place that knows about low
   precision: each low-precision input becomes an f32 temporary (a
   differentiable cast), the f32 op runs unchanged, and its result is rounded
   once to the output dtype (another cast). That is PyTorch's "compute in
   opmath (f32), round the output". Autograd needs nothing else: the casts
   are tape nodes, so a bf16 tensor's gradient arrives in bf16. The ops that
   have native low-precision kernels (matmul, linear, the elementwise ones:
   gdl__lp_native) test for one low dtype before the hook and skip it. */

static int gdl__is_float(gdl_dtype dt) { return dt == GDL_F32 || dt == GDL_F16 || dt == GDL_BF16; }
static int gdl__is_low(gdl_dtype dt) { return dt == GDL_F16 || dt == GDL_BF16; }

/* PyTorch's promotion among the float dtypes: equal stays, anything else is
   f32 (f32 + bf16, f16 + bf16) */
static gdl_dtype gdl__promote(gdl_dtype a, gdl_dtype b) { return a == b ? a : GDL_F32; }

/* dst += src over n elements of any float dtypes (sums in f32, rounds once) */
static int gdl__acc_any(const char *op, const gdl_backend *be, gdl_device dev, void *dst, gdl_dtype ddt,
                        const void *src, gdl_dtype sdt, int64_t n) {
    static const int64_t one = 1;
    (void)op;
    (void)dev;
    if (n <= 0) return 0;
    if (sdt == GDL_F32 && ddt == GDL_F32) return be->k.copy2d(GDL_F32, 1, n, (const gdl_real *)src, 0, (gdl_real *)dst, 0, 1);
    /* in place, no f32 copies: the sum is formed in f32 and rounded once */
    return be->k.binary(GDL_BIN_ADD, 1, &n, ddt, dst, &one, sdt, src, &one, ddt, dst);
}

/* a new temporary x converted to dt; recorded (GDL_OP_CAST) when x needs a
   gradient and both dtypes are floats */
static gdl_tensor *gdl__cast_t(const char *op, gdl_tensor *x, gdl_dtype dt) {
    gdl_tensor *r;
    const gdl_backend *be;
    int err;
    if (!(be = gdl__be(op, x->device)) || !(r = gdl__tmp(op, x->ndim, x->shape, dt, x->device))) return NULL;
    if (x->numel && be->k.cast(r->data, dt, x->data, x->dtype, x->numel) < 0) return NULL;
    r->name = x->name;
    if ((gdl__is_float(x->dtype) && gdl__is_float(dt)) || gdl__tracing) {
        gdl__record(op, GDL_OP_CAST, r, 1, &x, &err);
        if (err) return NULL;
    }
    return r;
}

static int gdl__bw_cast(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *x = n->in[0];
    if (!x->requires_grad) return 0;
    return gdl__acc_any("gdl_backward", be, x->device, x->grad->data, x->grad->dtype, n->out->grad->data,
                        n->out->grad->dtype, x->numel);
}

GPUDL_API gdl_tensor *gdl_to_dtype(gdl_tensor *t, gdl_dtype dt) {
    if (!t) {
        gdl__null_arg("gdl_to_dtype", "t");
        return NULL;
    }
    if (gdl__stale("gdl_to_dtype", "t", t) < 0) return NULL;
    if ((unsigned)dt >= GDL_DTYPE_COUNT) {
        gdl__set_error("gdl_to_dtype: invalid dtype %d", (int)dt);
        return NULL;
    }
    return gdl__finish("gdl_to_dtype", gdl__cast_t("gdl_to_dtype", t, dt));
}

/* ---- autocast (MANUAL: Mixed precision) ----
   The state is per host thread, as torch.autocast's: the dtype ops of class
   GDL_AUTOCAST_LOW run in (GDL_F32 = off, so the hooks' test is one compare
   of it), the enclosing regions' dtypes, and the cache of parameters' casts.
   A cache entry is valid only in the arena generation it was made in: the
   cast is a temporary, and gdl_arena_reset hands its memory to the next
   step. */
#define GDL__AC_DEPTH 32
#define GDL__AC_CACHE 256
typedef struct gdl__ac_entry {
    const gdl_tensor *src;
    gdl_tensor *cast;
    unsigned gen;
} gdl__ac_entry;
static GDL__TLS gdl_dtype gdl__ac_dt = GDL_F32;
static GDL__TLS int gdl__ac_depth;
static GDL__TLS gdl_dtype gdl__ac_outer[GDL__AC_DEPTH];
static GDL__TLS gdl__ac_entry gdl__ac_cache[GDL__AC_CACHE];
static GDL__TLS int gdl__ac_ncache;
static GDL__TLS int64_t gdl__ac_stat[2]; /* casts made, cache hits */

GPUDL_API int gdl_autocast_begin(gdl_dtype dt) {
    if (dt != GDL_BF16 && dt != GDL_F16) {
        gdl__set_error("gdl_autocast_begin: the autocast dtype must be bf16 or f16, got %s", gdl_dtype_name(dt));
        return -1;
    }
    if (gdl__ac_depth == GDL__AC_DEPTH) {
        gdl__set_error("gdl_autocast_begin: more than %d nested autocast regions", GDL__AC_DEPTH);
        return -1;
    }
    gdl__ac_outer[gdl__ac_depth++] = gdl__ac_dt;
    gdl__ac_dt = dt;
    return 0;
}

GPUDL_API int gdl_autocast_end(void) {
    if (gdl__ac_depth == 0) {
        gdl__set_error("gdl_autocast_end: no autocast region is open on this thread (gdl_autocast_begin)");
        return -1;
    }
    gdl__ac_dt = gdl__ac_outer[--gdl__ac_depth];
    if (gdl__ac_depth == 0) gdl__ac_ncache = 0; /* torch.autocast drops its cache on leaving the outermost region */
    return 0;
}

GPUDL_API gdl_dtype gdl_autocast_dtype(void) { return gdl__ac_dt; }
GPUDL_API int gdl_autocast_enabled(void) { return gdl__ac_dt != GDL_F32; }
GPUDL_API void gdl_autocast_stats(int64_t *casts, int64_t *cache_hits) {
    if (casts) *casts = gdl__ac_stat[0];
    if (cache_hits) *cache_hits = gdl__ac_stat[1];
}

/* x in dt for an autocast op. A parameter (a persistent leaf that requires a
   gradient) going to a low dtype is cast once per region and step, as
   torch.autocast caches: a weight used by several ops is rounded once and
   its gradient arrives through one cast, in f32. */
static gdl_tensor *gdl__ac_cast(const char *op, gdl_tensor *x, gdl_dtype dt) {
    int i, cache = gdl__is_low(dt) && x->requires_grad && !x->node && gdl__is_persistent(x);
    gdl_tensor *r;
    if (cache)
        for (i = 0; i < gdl__ac_ncache; i++)
            if (gdl__ac_cache[i].src == x && gdl__ac_cache[i].gen == gdl__arena_gen && gdl__ac_cache[i].cast->dtype == dt &&
                (gdl__ac_cache[i].cast->node != NULL) == (gdl__grad_enabled != 0)) { /* a no-grad cast has no way back */
                gdl__ac_stat[1]++;
                return gdl__ac_cache[i].cast;
            }
    if (!(r = gdl__cast_t(op, x, dt))) return NULL;
    gdl__ac_stat[0]++;
    if (cache) {
        for (i = 0; i < gdl__ac_ncache && gdl__ac_cache[i].gen == gdl__arena_gen; i++) {}
        if (i == gdl__ac_ncache && i < GDL__AC_CACHE) gdl__ac_ncache++; /* else a stale entry's slot, or none */
        if (i < GDL__AC_CACHE) {
            gdl__ac_cache[i].src = x;
            gdl__ac_cache[i].cast = r;
            gdl__ac_cache[i].gen = gdl__arena_gen;
        }
    }
    return r;
}

/* a native low-precision GEMM in dt is what autocast wants (or autocast is off) */
static int gdl__ac_native(gdl_dtype dt) { return gdl__ac_dt == GDL_F32 || gdl__ac_dt == dt; }

/* An op on input, weight and optional bias (linear, convolution) leaves its f32 path: autocast is on, or one
   of them is not f32. */
static int gdl__xwb_not_f32(const gdl_tensor *x, const gdl_tensor *w, const gdl_tensor *bias) {
    return gdl__ac_dt != GDL_F32 || (x && x->dtype != GDL_F32) || (w && w->dtype != GDL_F32) ||
           (bias && bias->dtype != GDL_F32);
}

/* ... and runs natively in their dtype: all of one low dtype, which autocast wants (or autocast is off). */
static int gdl__xwb_native(const gdl_tensor *x, const gdl_tensor *w, const gdl_tensor *bias) {
    return x && w && x->dtype == w->dtype && gdl__is_low(x->dtype) && (!bias || bias->dtype == x->dtype) &&
           gdl__ac_native(x->dtype);
}

/* an elementwise op (opid) whose float inputs all have the low dtype dt runs
   natively in dt (the backend's kernels, given dt) unless autocast wants its
   inputs cast: class F32 (exp, log, pow_scalar) in a region, or class LOW in
   a region of the other low dtype */
static int gdl__lp_native(int opid, gdl_dtype dt) {
    int cls;
    if (!gdl__is_low(dt)) return 0;
    if (gdl__ac_dt == GDL_F32) return 1;
    cls = gdl__op(opid)->autocast;
    return cls == GDL_AUTOCAST_PROMOTE || (cls == GDL_AUTOCAST_LOW && gdl__ac_dt == dt);
}

/* Autocast's part of the hooks' slow path: an op of class LOW (F32) whose
   float arguments are not all the autocast dtype (f32) gets them cast, and
   `call` re-runs it on them: 1. Otherwise 0, and the op goes on as outside
   autocast (class PROMOTE always does). */
static int gdl__ac_in(const char *op, int opid, int n, gdl_tensor **const *args) {
    int k, j, cls = opid >= 0 ? gdl__op(opid)->autocast : GDL_AUTOCAST_PROMOTE;
    gdl_tensor *orig[8] = {0};
    gdl_dtype to;
    if (cls == GDL_AUTOCAST_PROMOTE) return 0;
    to = cls == GDL_AUTOCAST_LOW ? gdl__ac_dt : GDL_F32;
    for (k = 0; k < n; k++) /* a non-float argument: the op's own error, naming the dtypes given */
        if (*args[k] && !gdl__is_float((*args[k])->dtype)) return 0;
    for (k = 0; k < n; k++)
        if (*args[k] && (*args[k])->dtype != to) break;
    if (k == n) return 0;
    for (k = 0; k < n; k++) {
        gdl_tensor *t = *args[k];
        if (!t || t->dtype == to) continue;
        if (gdl__stale(op, "an input", t) < 0) return -1;
        for (j = 0; j < k && j < 8; j++) /* a tensor passed twice: one cast (see gdl__lowp_in) */
            if (orig[j] == t) break;
        if (k < 8) orig[k] = t;
        if (j < k && j < 8) *args[k] = *args[j];
        else if (!(*args[k] = gdl__ac_cast(op, t, to))) return -1;
    }
    return 1;
}

/* The slow path of the GDL__LOWP hooks (below), taken when a float argument
   of an op is not f32 or autocast is on; args point at its float arguments
   (NULL entries: absent optional arguments); opid: the op's GDL_OP_ id (its
   autocast class), -1 for none. Under autocast, an op of class LOW or F32
   gets its arguments cast to its dtype and re-runs (1, *out_dt f32: the
   result stays as it comes). Otherwise returns 0 when all are f32; -1 with
   an error naming the dtypes when one is not a float; 1 when some are bf16/f16:
   then each of them is replaced by an f32 copy, *out_dt is the dtype the
   op's result must be rounded to (PyTorch's promotion; follow_first: the
   first argument's dtype, as the norms' and embedding's output), and autocast
   is off until gdl__lowp_out: the re-run is the f32 computation itself. */
static int gdl__lowp_in(const char *op, int opid, int n, gdl_tensor **const *args, int follow_first, gdl_dtype *out_dt) {
    int k, low = 0, first = 1;
    gdl_dtype dt = GDL_F32;
    gdl_tensor *orig[8] = {0};
    if (gdl__ac_dt != GDL_F32 && (k = gdl__ac_in(op, opid, n, args)) != 0) {
        *out_dt = GDL_F32;
        return k;
    }
    for (k = 0; k < n; k++)
        if (*args[k] && (*args[k])->dtype != GDL_F32) break;
    if (k == n) return 0;
    for (k = 0; k < n; k++) {
        gdl_tensor *t = *args[k];
        if (!t) continue;
        if (gdl__stale(op, "an input", t) < 0) return -1;
        if (!gdl__is_float(t->dtype)) {
            char buf[256];
            int j, len = 0, last = 0;
            buf[0] = 0;
            for (j = 0; j < n; j++)
                if (*args[j]) last = j;
            for (j = 0; j < n && len < (int)sizeof buf - 64; j++)
                if (*args[j])
                    len += snprintf(buf + len, sizeof buf - (size_t)len, "%s%s %s", len ? (j < last ? ", " : " and ") : "",
                                    gdl_dtype_name((*args[j])->dtype), gdl_shape_str(*args[j]));
            if (strcmp(op, "gdl_matmul") == 0 && *args[0] && *args[1])
                gdl__set_error("%s: cannot multiply %s %s by %s %s", op, gdl_dtype_name((*args[0])->dtype),
                               gdl_shape_str(*args[0]), gdl_dtype_name((*args[1])->dtype), gdl_shape_str(*args[1]));
            else
                gdl__set_error("%s: expected %s (f32, bf16 or f16), got %s", op,
                               strchr(buf, ',') || strstr(buf, " and ") ? "float tensors" : "a float tensor", buf);
            return -1;
        }
        if (t->dtype != GDL_F32) low = 1;
        if (first) dt = t->dtype;
        else if (!follow_first) dt = gdl__promote(dt, t->dtype);
        first = 0;
    }
    if (!low) return 0;
    for (k = 1; k < n; k++)
        if (*args[0] && gdl__check_dev(op, *args[0], *args[k]) < 0) return -1;
    for (k = 0; k < n; k++) {
        gdl_tensor *t = *args[k];
        int j;
        if (!t || t->dtype == GDL_F32) continue;
        /* a tensor passed twice (x / x) gets one copy, so its two partial
           gradients sum in f32 and round once: two casts would round each
           and add in the low dtype, which loses a cancelling sum */
        for (j = 0; j < k && j < 8; j++)
            if (orig[j] == t) break;
        if (j < k && j < 8) {
            *args[k] = *args[j];
            continue;
        }
        if (k < 8) orig[k] = t;
        if (!(*args[k] = gdl__cast_t(op, t, GDL_F32))) return -1;
    }
    *out_dt = dt;
    gdl__ac_dt = GDL_F32;
    return 1;
}

/* the f32 result of an op that had low-precision inputs, rounded to dt;
   ac: the autocast dtype before gdl__lowp_in, restored */
static gdl_tensor *gdl__lowp_out(const char *op, gdl_tensor *r, gdl_dtype dt, gdl_dtype ac) {
    gdl__ac_dt = ac;
    if (!r || r->dtype != GDL_F32 || dt == GDL_F32) return r;
    return gdl__finish(op, gdl__cast_t(op, r, dt));
}

/* The hook at the top of an op, naming its GDL_OP_ id (its autocast class;
   -1: none) and its float arguments (up to three variables; NULL ones are
   absent optional arguments): `call` re-runs the op on the copies. The f32
   path outside autocast pays one compare per argument and one for autocast;
   the arguments' addresses are never taken, so they stay in registers. */
#define GDL__LOWP_(op, opid, follow, call, a, b, c)                                                   \
    do {                                                                                              \
        gdl_tensor *lp_none_ = NULL;                                                                  \
        if (gdl__ac_dt != GDL_F32 || ((a) && (a)->dtype != GDL_F32) || ((b) && (b)->dtype != GDL_F32) || \
            ((c) && (c)->dtype != GDL_F32)) {                                                         \
            gdl_tensor *lp_t_[3];                                                                     \
            gdl_tensor **const lp_p_[3] = {&lp_t_[0], &lp_t_[1], &lp_t_[2]};                          \
            gdl_dtype lp_dt_ = GDL_F32, lp_ac_ = gdl__ac_dt;                                          \
            int lp_rc_;                                                                               \
            lp_t_[0] = (a);                                                                           \
            lp_t_[1] = (b);                                                                           \
            lp_t_[2] = (c);                                                                           \
            lp_rc_ = gdl__lowp_in(op, opid, 3, lp_p_, follow, &lp_dt_);                               \
            if (lp_rc_ < 0) return NULL;                                                              \
            if (lp_rc_ > 0) {                                                                         \
                (a) = lp_t_[0];                                                                       \
                (b) = lp_t_[1];                                                                       \
                (c) = lp_t_[2];                                                                       \
                return gdl__lowp_out(op, call, lp_dt_, lp_ac_);                                       \
            }                                                                                         \
        }                                                                                             \
        (void)lp_none_;                                                                               \
    } while (0)
#define GDL__LOWP1(op, opid, call, a) GDL__LOWP_(op, opid, 0, call, a, lp_none_, lp_none_)
#define GDL__LOWP2(op, opid, call, a, b) GDL__LOWP_(op, opid, 0, call, a, b, lp_none_)
#define GDL__LOWP3(op, opid, call, a, b, c) GDL__LOWP_(op, opid, 0, call, a, b, c)
/* the result follows the first argument's dtype (the norms) */
#define GDL__LOWP3_FIRST(op, opid, call, a, b, c) GDL__LOWP_(op, opid, 1, call, a, b, c)

/* normalises a possibly negative dim */
static int gdl__dim(const char *op, const gdl_tensor *x, int dim, int *out) {
    int d = dim < 0 ? dim + x->ndim : dim;
    if (d < 0 || d >= x->ndim) {
        gdl__set_error("%s: dim %d out of range for %s (ndim %d)", op, dim, gdl_shape_str(x), x->ndim);
        return -1;
    }
    *out = d;
    return 0;
}

/* [outer, n, inner] around dim d */
static void gdl__split(const gdl_tensor *x, int d, int64_t *outer, int64_t *n, int64_t *inner) {
    int k;
    *outer = 1;
    *inner = 1;
    for (k = 0; k < d; k++) *outer *= x->shape[k];
    for (k = d + 1; k < x->ndim; k++) *inner *= x->shape[k];
    *n = x->shape[d];
}

