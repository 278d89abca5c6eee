/* src/ops/matmul.h — matmul, linear and their fused bias + activation. */

/* ---- matmul and linear ----
   Both run natively in f16 and bf16 (inputs of one low dtype): the
   backend's gemm in a low dtype sums in f32 and rounds C once, forward and backward. */

#define GDL__AT(p, dt, off) ((void *)((char *)(p) + (size_t)(off) * gdl_dtype_size(dt)))

/* C = op(A)op(B) + beta*C in dtype dt (beta 0 or 1) */
static int gdl__gemm_dt(const gdl_backend *be, gdl_dtype dt, int ta, int tb, int M, int N, int K, const void *A, int lda,
                        int64_t sA, const void *B, int ldb, int64_t sB, int beta, void *C, int ldc, int64_t sC, int batch) {
    return be->k.gemm(dt, ta, tb, M, N, K, 1, A, lda, sA, B, ldb, sB, (gdl_real)beta, C, ldc, sC, batch);
}

/* n ones of dtype dt (a low-precision linear's bias goes in and out through a rank-1 GEMM with them) */
static void *gdl__ones_dt(const char *op, const gdl_backend *be, gdl_device dev, gdl_dtype dt, int64_t n) {
    gdl_real *f = (gdl_real *)gdl__scratch(op, dev, sizeof(gdl_real) * (size_t)(n ? n : 1));
    void *o = gdl__scratch(op, dev, gdl_dtype_size(dt) * (size_t)(n ? n : 1));
    if (!f || !o || be->k.fill(f, n, 1) < 0 || be->k.cast(o, dt, f, GDL_F32, n) < 0) return NULL;
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
    gdl__flops_add(0, out->numel * p.K, 1);
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
    gdl__flops_add(1, n->out->numel * p.K, n->in[0]->requires_grad + n->in[1]->requires_grad);
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
        if (be->k.linear_act(-1, (int)rows, (int)out_f, (int)in_f, GDL__R(x), GDL__R(w), GDL__R(bias), GDL__R(out), NULL) < 0)
            return NULL;
    } else if (out->numel) {
        int64_t s2[2], ystr[2], bstr[2];
        if (be->k.gemm(GDL_F32, 0, 1, (int)rows, (int)out_f, (int)in_f, 1, GDL__R(x), (int)in_f, 0, GDL__R(w), (int)in_f, 0, 0,
                     GDL__R(out), (int)out_f, 0, 1) < 0)
            return NULL;
        s2[0] = rows; s2[1] = out_f;
        ystr[0] = out_f; ystr[1] = 1;
        bstr[0] = 0; bstr[1] = 1;
        if (bias && be->k.binary(GDL_BIN_ADD, 2, s2, GDL_F32, GDL__R(out), ystr, GDL_F32, GDL__R(bias), bstr, GDL_F32, GDL__R(out)) < 0) return NULL;
    }
    gdl__flops_add(0, out->numel * in_f, 1);
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
    if (gx && be->k.gemm(GDL_F32, 0, 0, rows, in_f, out_f, 1, g, out_f, 0, GDL__R(w), in_f, 0, (gdl_real)gdl__grad_beta(x), gx,
                       in_f, 0, 1) < 0)
        return -1;
    if (gw && be->k.gemm(GDL_F32, 1, 0, out_f, in_f, rows, 1, g, out_f, 0, GDL__R(x), in_f, 0, (gdl_real)gdl__grad_beta(w), gw,
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
    gdl__flops_add(1, n->out->numel * in_f, (gx != NULL) + (gw != NULL));
    if (dt != GDL_F32) { /* the same GEMMs in dt; the bias gradient is ones^T g */
        void *ones = gb ? gdl__ones_dt("gdl_backward", be, x->device, dt, rows) : NULL;
        if (gx && gdl__gemm_dt(be, dt, 0, 0, rows, in_f, out_f, g, out_f, 0, w->data, in_f, 0, 1, gx, in_f, 0, 1) < 0) return -1;
        if (gw && gdl__gemm_dt(be, dt, 1, 0, out_f, in_f, rows, g, out_f, 0, x->data, in_f, 0, 1, gw, in_f, 0, 1) < 0) return -1;
        if (gb && (!ones || gdl__gemm_dt(be, dt, 0, 0, 1, out_f, rows, ones, rows, 0, g, out_f, 0, 1, gb, out_f, 0, 1) < 0))
            return -1;
        return 0;
    }
    if (gdl__linear_grads_xw(be, rows, in_f, out_f, g, x, w, gx, gw) < 0) return -1;
    if (gb && be->k.reduce(GDL_RED_SUM, 1, rows, out_f, g, gb, NULL, gdl__grad_beta(n->in[2])) < 0) return -1;
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
    if (out->numel && be->k.linear_act(ua, (int)rows, (int)out_f, (int)in_f, GDL__R(x), GDL__R(w),
                                     bias ? GDL__R(bias) : NULL, GDL__R(out), pre ? GDL__R(pre) : NULL) < 0)
        return NULL;
    gdl__flops_add(0, out->numel * in_f, 1);
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
    gdl__flops_add(1, n->out->numel * in_f, (gx != NULL) + (gw != NULL));
    if (ua >= 0 && (gx || gw || gb)) { /* act' and the bias gradient in one pass; then the GEMMs take act'·g */
        gdl_real *gp = (gdl_real *)gdl__scratch("gdl_backward", n->out->device, sizeof(gdl_real) * (size_t)n->out->numel);
        const gdl_real *pre = n->saved[0] ? GDL__R(n->saved[0]) : GDL__R(n->out);
        if (!gp || be->k.act_backward_reduce(ua, 1, rows, out_f, pre, g, gp, gb, gb ? gdl__grad_beta(n->in[2]) : 1) < 0)
            return -1;
        g = gp;
    } else if (gb && be->k.reduce(GDL_RED_SUM, 1, rows, out_f, g, gb, NULL, gdl__grad_beta(n->in[2])) < 0) {
        return -1;
    }
    return gdl__linear_grads_xw(be, rows, in_f, out_f, g, x, w, gx, gw);
}
