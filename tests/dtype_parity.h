/* dtype_parity.h — every row of tests/op_cases.h run in bf16 and in f16
   against the same row in f32, forward and backward, on one device (the CPU
   in tests/test_dtype.c, the emulated GPU in tests/test_cuda.c).

   Both runs start from the same values: every float input is first rounded
   to the low dtype, and the f32 run gets those rounded values. So the runs
   differ only by what the low-precision run rounds: each op's output (once,
   after computing in f32) and each gradient. The row's output-gradient seed
   w is also rounded to the low dtype for both runs.

   Tolerance, per compared tensor (output, each input's gradient):
       max_i |low_i - ref_i| <= tol * max(max_i |ref_i|, 1e-3) + 1e-6
   with tol 1e-2 for bf16 (8 significant bits: one rounding is <= 2^-9 =
   2e-3 relative) and 2e-3 for f16 (11 bits: 2^-12 = 2.4e-4), doubled for a
   fanned-out row (its sum, scale and add round values as large as the
   output). The margin covers the few roundings of a row's chain; reductions accumulate in f32 in both runs, so they need no wider
   tolerance than elementwise ops. BatchNorm's running statistics stay f32
   (inputs of kind IN_CONST / IN_CONST_POS), as under PyTorch's autocast. */
#ifndef GPUDL_DTYPE_PARITY_H
#define GPUDL_DTYPE_PARITY_H

#include "op_cases.h"

typedef struct dtype_run {
    int c;          /* index into cases[] */
    int fanout;
    gdl_dtype dt;   /* GDL_BF16 or GDL_F16 */
    gdl_device dev;
} dtype_run;

static double dtype_tol(gdl_dtype dt) { return dt == GDL_BF16 ? 1e-2 : 2e-3; }
/* a fanned-out row adds three roundings (sum, scale, add) of values as large as the output's */
static double dtype_tol_run(gdl_dtype dt, int fanout) { return dtype_tol(dt) * (fanout ? 2 : 1); }

/* the values of a float tensor on any device, as doubles on the host (malloc'd) */
static double *dtype_host_values(gdl_tensor *t) {
    gdl_tensor *f = gdl_to(gdl_to_dtype(t, GDL_F32), gdl_cpu());
    double *v;
    int64_t i;
    if (!f) return NULL;
    v = (double *)malloc(sizeof(double) * (size_t)(t->numel + 1));
    if (!v) return NULL;
    for (i = 0; i < t->numel; i++) v[i] = (double)((const float *)f->data)[i];
    return v;
}

/* 0 when within tolerance; else the relative error (also for a NaN) */
static double dtype_compare(gdl_tensor *low, gdl_tensor *ref, double tol, double *rel_out) {
    double *a = dtype_host_values(low), *b = dtype_host_values(ref), worst = 0, scale = 1e-3, bad = 0;
    int64_t i;
    if (!a || !b || low->numel != ref->numel) {
        free(a);
        free(b);
        return 1;
    }
    for (i = 0; i < ref->numel; i++)
        if (fabs(b[i]) > scale) scale = fabs(b[i]);
    for (i = 0; i < ref->numel; i++) {
        double e = fabs(a[i] - b[i]);
        if (!(e <= worst)) worst = e; /* NaN sticks */
    }
    *rel_out = worst / scale;
    if (!(worst <= tol * scale + 1e-6)) bad = worst / scale;
    if (bad != bad) bad = 1;
    free(a);
    free(b);
    return bad;
}

static int dtype_is_low_input(const gc_input *d) {
    return d->kind != IN_TARGET && d->kind != IN_TARGET_IGNORE && d->kind != IN_CONST && d->kind != IN_CONST_POS;
}

static gdl_tensor *dtype_forward(const dtype_run *r, gdl_tensor **in) {
    return r->fanout ? fanout_forward(&cases[r->c], in) : cases[r->c].forward(in);
}

TEST dtype_parity(void *arg) {
    const dtype_run *r = (const dtype_run *)arg;
    const gc_case *c = &cases[r->c];
    gdl_tensor *cpu[5] = {0}, *ref[5] = {0}, *low[5] = {0}, *out, *wref, *wlow, *w;
    int k;
    double rel;
    char msg[400] = "";
    gdl_manual_seed(1234);
    for (k = 0; k < c->nin; k++) {
        ASSERT_NOT_NULL(cpu[k] = make_input(&c->in[k]));
        if (dtype_is_low_input(&c->in[k])) { /* round the values once: both runs start from them */
            float *v = (float *)cpu[k]->data;
            int64_t i;
            for (i = 0; i < cpu[k]->numel; i++)
                v[i] = r->dt == GDL_BF16 ? gdl_bf16_to_f32(gdl_f32_to_bf16(v[i])) : gdl_f16_to_f32(gdl_f32_to_f16(v[i]));
        }
    }
    gdl_arena_reset();
    for (k = 0; k < c->nin; k++) {
        ASSERT_NOT_NULL(ref[k] = gdl_to(cpu[k], r->dev));
        if (dtype_is_low_input(&c->in[k])) {
            gdl_tensor *t = gdl_clone(gdl_to_dtype(cpu[k], r->dt));
            ASSERT_NOT_NULL(t);
            ASSERT_NOT_NULL(low[k] = gdl_to(t, r->dev));
            gdl_free(t);
            ASSERT_EQ(0, gdl_set_requires_grad(low[k], cpu[k]->requires_grad));
        } else {
            ASSERT_NOT_NULL(low[k] = gdl_to(cpu[k], r->dev));
        }
    }
    gdl_set_grad_enabled(1);
    /* the f32 run */
    gdl_arena_reset();
    gdl_manual_seed(99);
    out = dtype_forward(r, ref);
    if (!out) FAILf("%s: f32 forward failed: %s", c->name, gdl_last_error());
    w = gdl_randn(out->ndim, out->shape, gdl_cpu());
    ASSERT_NOT_NULL(w);
    {
        float *v = (float *)w->data;
        int64_t i;
        for (i = 0; i < w->numel; i++)
            v[i] = r->dt == GDL_BF16 ? gdl_bf16_to_f32(gdl_f32_to_bf16(v[i])) : gdl_f16_to_f32(gdl_f32_to_f16(v[i]));
    }
    ASSERT_NOT_NULL(wref = gdl_to(w, r->dev));
    if (gdl_backward_grad(out, wref) < 0) FAILf("%s: f32 backward failed: %s", c->name, gdl_last_error());
    {
        gdl_tensor *out_ref = gdl_clone(out), *gl;
        gdl_tensor *gref[5] = {0};
        for (k = 0; k < c->nin; k++)
            if (ref[k]->requires_grad) ASSERT_NOT_NULL(gref[k] = gdl_clone(ref[k]->grad));
        /* the low-precision run */
        gdl_arena_reset();
        gdl_manual_seed(99);
        out = dtype_forward(r, low);
        if (!out) FAILf("%s %s: forward failed: %s", c->name, gdl_dtype_name(r->dt), gdl_last_error());
        /* the cast row converts to f32 */
        ASSERT_EQm("the output keeps the inputs' dtype", (int)(c->op == GDL_OP_CAST ? GDL_F32 : r->dt),
                   (int)out->dtype);
        ASSERT_NOT_NULL(wlow = gdl_to_dtype(wref, r->dt));
        if (gdl_backward_grad(out, wlow) < 0)
            FAILf("%s %s: backward failed: %s", c->name, gdl_dtype_name(r->dt), gdl_last_error());
        if (dtype_compare(out, out_ref, dtype_tol_run(r->dt, r->fanout), &rel))
            snprintf(msg, sizeof msg, "%s %s%s: output differs from f32 by %.3g (relative to its max)", c->name,
                     gdl_dtype_name(r->dt), r->fanout ? " fanout" : "", rel);
        for (k = 0; k < c->nin && !msg[0]; k++) {
            if (!gref[k]) continue;
            gl = low[k]->grad;
            if (!gl) {
                snprintf(msg, sizeof msg, "%s %s: input %d has no gradient", c->name, gdl_dtype_name(r->dt), k);
                break;
            }
            if (gl->dtype != low[k]->dtype) {
                snprintf(msg, sizeof msg, "%s: the gradient of a %s input is %s", c->name, gdl_dtype_name(low[k]->dtype),
                         gdl_dtype_name(gl->dtype));
                break;
            }
            if (dtype_compare(gl, gref[k], dtype_tol_run(r->dt, r->fanout), &rel))
                snprintf(msg, sizeof msg, "%s %s%s: gradient of input %d differs from f32 by %.3g (relative to its max)",
                         c->name, gdl_dtype_name(r->dt), r->fanout ? " fanout" : "", k, rel);
        }
        gdl_free(out_ref);
        for (k = 0; k < c->nin; k++) gdl_free(gref[k]);
    }
    gdl_free(w);
    gdl_free(wref);
    for (k = 0; k < c->nin; k++) {
        gdl_free(cpu[k]);
        gdl_free(ref[k]);
        gdl_free(low[k]);
    }
    gdl_arena_reset();
    if (msg[0]) FAILm(msg);
    PASS();
}

/* a persistent tensor of dtype dt on dev holding randn values (rounded to dt) */
static gdl_tensor *dtype_rnd(int ndim, const int64_t *shape, gdl_dtype dt, gdl_device dev) {
    gdl_tensor *f = gdl_randn(ndim, shape, gdl_cpu()), *t, *r;
    if (!f) return NULL;
    t = dt == GDL_F32 ? f : gdl_clone(gdl_to_dtype(f, dt));
    r = gdl_to(t, dev);
    if (t != f) gdl_free(t);
    gdl_free(f);
    return r;
}

/* max |a - b| over all elements, both read as f32, on any device */
static double dtype_maxdiff(gdl_tensor *a, gdl_tensor *b) {
    double *x = dtype_host_values(a), *y = dtype_host_values(b), m = 0;
    int64_t i;
    if (!x || !y || a->numel != b->numel) m = INFINITY;
    for (i = 0; m == m && m != INFINITY && i < a->numel; i++) {
        double e = fabs(x[i] - y[i]);
        if (!(e <= m)) m = e;
    }
    free(x);
    free(y);
    return m;
}

/* PyTorch's promotion for every pair of float dtypes: the widest wins
   (f16 + bf16 is f32, as neither holds the other); the result equals the
   f32 computation on the same values rounded once. Binary ops, a loss,
   matmul and linear (native when both are one low dtype), concat. */
TEST dtype_promotion(void *arg) {
    static const gdl_dtype dts[3] = {GDL_F32, GDL_BF16, GDL_F16};
    gdl_device dev = *(const gdl_device *)arg;
    int64_t s[2] = {3, 5}, s1 = 5, s15[2] = {1, 5}, s53[2] = {5, 3};
    int i, j;
    for (i = 0; i < 3; i++)
        for (j = 0; j < 3; j++) {
            gdl_tensor *a = dtype_rnd(2, s, dts[i], dev), *b = dtype_rnd(1, &s1, dts[j], dev);
            gdl_tensor *m = dtype_rnd(2, s53, dts[j], dev), *r, *fa, *fb, *want, *xs[2];
            gdl_dtype exp = dts[i] == dts[j] ? dts[i] : GDL_F32;
            ASSERT_NOT_NULL(a);
            ASSERT_NOT_NULL(b);
            ASSERT_NOT_NULL(m);
            fa = gdl_to_dtype(a, GDL_F32);
            fb = gdl_to_dtype(b, GDL_F32);
            ASSERT_NOT_NULL(r = gdl_mul(a, b));
            ASSERT_EQm("mul's result dtype", (int)exp, (int)r->dtype);
            want = gdl_to_dtype(gdl_mul(fa, fb), exp); /* computed in f32, rounded once */
            ASSERT_IN_RANGE(0, dtype_maxdiff(r, want), 0);
            ASSERT_NOT_NULL(r = gdl_sub(b, a));
            ASSERT_EQm("sub's result dtype", (int)exp, (int)r->dtype);
            ASSERT_IN_RANGE(0, dtype_maxdiff(r, gdl_to_dtype(gdl_sub(fb, fa), exp)), 0);
            ASSERT_NOT_NULL(r = gdl_mse_loss(a, a, GDL_REDUCE_MEAN));
            ASSERT_EQ((int)dts[i], (int)r->dtype);
            ASSERT_NOT_NULL(r = gdl_matmul(a, m));
            ASSERT_EQm("matmul's result dtype", (int)exp, (int)r->dtype);
            ASSERT_IN_RANGE(0, dtype_maxdiff(r, gdl_to_dtype(gdl_matmul(fa, gdl_to_dtype(m, GDL_F32)), exp)), 0);
            ASSERT_NOT_NULL(r = gdl_linear(a, gdl_reshape(b, 2, s15), b->ndim ? gdl_slice(b, 0, 1) : NULL));
            ASSERT_EQm("linear's result dtype", (int)exp, (int)r->dtype);
            xs[0] = a;
            xs[1] = gdl_reshape(m, 2, s);
            ASSERT_NOT_NULL(r = gdl_concat(2, xs, 0));
            ASSERT_EQm("concat's result dtype", (int)exp, (int)r->dtype);
            gdl_free(a);
            gdl_free(b);
            gdl_free(m);
            gdl_arena_reset();
        }
    PASS();
}

/* GEMM shapes that take every path of the blocked kernel (edges off every
   block size, a K longer than one K block, batched), in bf16 and f16 against
   f32 on the same rounded values, forward and both gradients; K = 0 gives
   zeros. Also a bf16 linear with bias, whose bias goes through the GEMM. */
TEST dtype_gemm_sizes(void *arg) {
    gdl_device dev = *(const gdl_device *)arg;
    static const int64_t mnk[][3] = {{1, 1, 1}, {7, 5, 3}, {67, 33, 129}, {130, 17, 300}, {9, 257, 31}, {3, 4, 0}};
    static const gdl_dtype dts[2] = {GDL_BF16, GDL_F16};
    int c, d;
    for (d = 0; d < 2; d++)
        for (c = 0; c < (int)(sizeof mnk / sizeof mnk[0]); c++) {
            int64_t sa[2] = {mnk[c][0], mnk[c][2]}, sb[2] = {mnk[c][2], mnk[c][1]};
            gdl_tensor *a = dtype_rnd(2, sa, dts[d], dev), *b = dtype_rnd(2, sb, dts[d], dev), *fa, *fb, *r, *fr, *w;
            double tol = dtype_tol(dts[d]), rel;
            ASSERT_NOT_NULL(fa = gdl_clone(gdl_to_dtype(a, GDL_F32)));
            ASSERT_NOT_NULL(fb = gdl_clone(gdl_to_dtype(b, GDL_F32)));
            gdl_set_requires_grad(a, 1);
            gdl_set_requires_grad(b, 1);
            gdl_set_requires_grad(fa, 1);
            gdl_set_requires_grad(fb, 1);
            ASSERT_NOT_NULL(r = gdl_matmul(a, b));
            ASSERT_EQ((int)dts[d], (int)r->dtype);
            ASSERT_EQm("bf16 x bf16 runs natively (the GEMM makes the output, no cast)", GDL_OP_MATMUL, gdl_tensor_op(r));
            ASSERT_NOT_NULL(fr = gdl_matmul(fa, fb));
            {
                gdl_tensor *wp = dtype_rnd(r->ndim, r->shape, dts[d], dev);
                ASSERT_NOT_NULL(wp);
                ASSERT_NOT_NULL(w = gdl_to_dtype(wp, dts[d])); /* a temporary copy */
                gdl_free(wp);
            }
            ASSERT_EQ(0, gdl_backward_grad(r, w));
            ASSERT_EQ(0, gdl_backward_grad(fr, gdl_to_dtype(w, GDL_F32)));
            if (dtype_compare(r, fr, tol, &rel)) FAILf("matmul %s %lldx%lldx%lld: output off by %g", gdl_dtype_name(dts[d]),
                                                          (long long)mnk[c][0], (long long)mnk[c][1], (long long)mnk[c][2], rel);
            if (dtype_compare(a->grad, fa->grad, tol, &rel)) FAILf("grad a off by %g", rel);
            if (dtype_compare(b->grad, fb->grad, tol, &rel)) FAILf("grad b off by %g", rel);
            if (mnk[c][1] > 1) { /* linear: x [M,K], weight [N,K] = b^T's layout is not needed: use b [K,N] as [N',K'] */
                int64_t ws[2] = {mnk[c][1], mnk[c][2]}, bs = mnk[c][1];
                gdl_tensor *W = dtype_rnd(2, ws, dts[d], dev), *bias = dtype_rnd(1, &bs, dts[d], dev), *fW, *fbias, *y, *fy;
                ASSERT_NOT_NULL(fW = gdl_clone(gdl_to_dtype(W, GDL_F32)));
                ASSERT_NOT_NULL(fbias = gdl_clone(gdl_to_dtype(bias, GDL_F32)));
                gdl_set_requires_grad(W, 1);
                gdl_set_requires_grad(bias, 1);
                gdl_set_requires_grad(fW, 1);
                gdl_set_requires_grad(fbias, 1);
                ASSERT_NOT_NULL(y = gdl_linear(a, W, bias));
                ASSERT_EQ(GDL_OP_LINEAR, gdl_tensor_op(y));
                ASSERT_EQ((int)dts[d], (int)y->dtype);
                ASSERT_NOT_NULL(fy = gdl_linear(fa, fW, fbias));
                ASSERT_EQ(0, gdl_backward_grad(y, gdl_to_dtype(fy, dts[d])));
                ASSERT_EQ(0, gdl_backward_grad(fy, gdl_to_dtype(gdl_to_dtype(fy, dts[d]), GDL_F32)));
                if (dtype_compare(y, fy, tol, &rel)) FAILf("linear: output off by %g", rel);
                if (dtype_compare(W->grad, fW->grad, tol, &rel)) FAILf("linear: weight grad off by %g", rel);
                if (dtype_compare(bias->grad, fbias->grad, tol, &rel)) FAILf("linear: bias grad off by %g", rel);
                if (dtype_compare(a->grad, fa->grad, 2 * tol, &rel)) FAILf("linear: input grad off by %g", rel);
                gdl_free(W); gdl_free(bias); gdl_free(fW); gdl_free(fbias);
            }
            gdl_free(a); gdl_free(b); gdl_free(fa); gdl_free(fb);
            gdl_arena_reset();
        }
    PASS();
}

/* ---- native low-precision elementwise ops (the backend's kernels given bf16/f16) ---- */

/* 1 when a and b hold the same bytes (any device) */
static int dtype_same_bits(gdl_tensor *a, gdl_tensor *b) {
    gdl_tensor *ha = a ? gdl_to(a, gdl_cpu()) : NULL, *hb = b ? gdl_to(b, gdl_cpu()) : NULL;
    int same = ha && hb && a->dtype == b->dtype && a->numel == b->numel &&
               memcmp(ha->data, hb->data, (size_t)a->numel * gdl_dtype_size(a->dtype)) == 0;
    if (ha && ha != a) gdl_free(ha);
    if (hb && hb != b) gdl_free(hb);
    return same;
}

/* n values of dtype dt on dev: randn (positive: |randn| + 0.01), the first
   ones the edge cases (zeros of both signs, infinities, NaN, huge, tiny) */
static gdl_tensor *dtype_rnd_edges(int64_t n, gdl_dtype dt, gdl_device dev, int positive) {
    static const float edge[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 3e38f, -1e-30f, 70000.0f, 65504.0f, -65520.0f,
                                 2.98023224e-8f, 4.47034836e-8f, 1e-5f, -6.1e-5f, 1.0009765625f, -2.0f};
    gdl_tensor *f = gdl_randn(1, &n, gdl_cpu()), *t, *r;
    float *v;
    int64_t i;
    if (!f) return NULL;
    v = (float *)f->data;
    for (i = 0; i < n; i++) {
        if (n >= 64 && i < (int64_t)(sizeof edge / sizeof edge[0])) v[i] = edge[i];
        if (positive) v[i] = fabsf(v[i]) + 0.01f;
    }
    t = gdl_clone(gdl_to_dtype(f, dt));
    r = t ? gdl_to(t, dev) : NULL;
    gdl_free(t);
    gdl_free(f);
    return r;
}

/* The gradients of f2(a, b) (b == NULL: f1(a); same: f2(a, a)) in a's low
   dtype against the f32 computation on the same values with the seed
   rounded to that dtype: a native gradient is the f32 one rounded once
   (the f32 path's products and sums, from zero), so the bits must match.
   0 when they do, else a message in msg. */
static int dtype_grads_match(gdl_tensor *(*f1)(gdl_tensor *), gdl_tensor *(*f2)(gdl_tensor *, gdl_tensor *),
                             gdl_tensor *a, gdl_tensor *b, int same, char *msg, size_t msz) {
    gdl_dtype dt = a->dtype;
    gdl_tensor *la = gdl_clone(a), *lb = b && !same ? gdl_clone(b) : NULL;
    gdl_tensor *fa = gdl_clone(gdl_to_dtype(a, GDL_F32)), *fb = b && !same ? gdl_clone(gdl_to_dtype(b, GDL_F32)) : NULL;
    gdl_tensor *lo, *fo, *w = NULL;
    int bad = 1;
    msg[0] = 0;
    if (!la || !fa || (b && !same && (!lb || !fb))) goto done;
    gdl_set_requires_grad(la, 1);
    gdl_set_requires_grad(fa, 1);
    if (lb) gdl_set_requires_grad(lb, 1);
    if (fb) gdl_set_requires_grad(fb, 1);
    lo = b ? f2(la, same ? la : lb) : f1(la);
    fo = b ? f2(fa, same ? fa : fb) : f1(fa);
    if (!lo || !fo || lo->dtype != dt) goto done;
    if (!(w = dtype_rnd(lo->ndim, lo->shape, dt, lo->device))) goto done;
    if (gdl_backward_grad(lo, w) < 0 || gdl_backward_grad(fo, gdl_to_dtype(w, GDL_F32)) < 0) goto done;
    if (!la->grad || la->grad->dtype != dt || !dtype_same_bits(la->grad, gdl_to_dtype(fa->grad, dt))) {
        snprintf(msg, msz, "the first input's gradient");
        goto done;
    }
    if (lb && (!lb->grad || lb->grad->dtype != dt || !dtype_same_bits(lb->grad, gdl_to_dtype(fb->grad, dt)))) {
        snprintf(msg, msz, "the second input's gradient");
        goto done;
    }
    bad = 0;
done:
    if (bad && !msg[0]) snprintf(msg, msz, "%.150s", gdl_last_error());
    gdl_free(la);
    gdl_free(lb);
    gdl_free(fa);
    gdl_free(fb);
    gdl_free(w);
    return bad;
}
static gdl_tensor *dtype_gelu_erf(gdl_tensor *x) { return gdl_gelu(x, 0); }
static gdl_tensor *dtype_gelu_tanh(gdl_tensor *x) { return gdl_gelu(x, 1); }
static gdl_tensor *dtype_leaky(gdl_tensor *x) { return gdl_leaky_relu(x, 0.05); }
static gdl_tensor *dtype_scale(gdl_tensor *x) { return gdl_mul_scalar(x, -1.3); }
static gdl_tensor *dtype_sqrt(gdl_tensor *x) { return gdl_pow_scalar(x, 0.5); }

static size_t dtype_arena_used(gdl_device dev) {
    gdl_memory_status m;
    return gdl_memory_stats(dev, &m) == 0 ? m.arena_used : (size_t)-1;
}

/* the arena bytes of an MLP-like chain of elementwise ops in dt, forward and
   (backward) backward from a seed in dt; 0 on a failure */
static size_t dtype_chain_bytes(gdl_device dev, gdl_dtype dt, int backward) {
    int64_t sx[2] = {64, 1024}, sb = 1024, sw[2] = {128, 1024};
    gdl_tensor *x = dtype_rnd(2, sx, dt, dev), *b = dtype_rnd(1, &sb, dt, dev), *w = dtype_rnd(2, sw, dt, dev), *y, *xs[2];
    size_t before, after = 0;
    if (!x || !b || !w || gdl_set_requires_grad(x, 1) < 0 || gdl_set_requires_grad(b, 1) < 0) goto done;
    gdl_arena_reset();
    before = dtype_arena_used(dev);
    y = gdl_gelu(gdl_add(gdl_relu(x), b), 0);
    xs[0] = gdl_sub(gdl_mul_scalar(gdl_dropout(gdl_tanh(y), 0.25, 1), 0.5), x);
    xs[1] = gdl_sigmoid(x);
    y = xs[0] && xs[1] ? gdl_concat(2, xs, 0) : NULL;
    if (!y || y->dtype != dt || (backward && gdl_backward_grad(y, w) < 0)) goto done;
    if (backward && (!x->grad || x->grad->dtype != dt || !b->grad || b->grad->dtype != dt)) goto done;
    after = dtype_arena_used(dev) - before;
done:
    gdl_free(x);
    gdl_free(b);
    gdl_free(w);
    gdl_arena_reset();
    return after;
}

/* Elementwise ops on one low dtype run natively: (1) the result equals the
   cast path's (f32 copies, the f32 op, the result rounded once) bit for bit
   -- unary ops, binary ops with broadcasting, dropout, concat -- over sizes that take
   every path (odd sizes, chunk tails, threaded sizes) and edge values;
   (2) no f32 temporaries: an elementwise chain in bf16 uses half the arena
   bytes of the same chain in f32, forward and backward (the cast path used
   more than f32); (3) autocast: class PROMOTE ops stay native in either low
   dtype, class F32 (exp) still casts. */
TEST dtype_native_elementwise(void *arg) {
    gdl_device dev = *(const gdl_device *)arg;
    static const int64_t sizes[] = {1, 7, 255, 256, 257, 1000, 40001};
    static const gdl_dtype dts[2] = {GDL_BF16, GDL_F16};
    int d, s, k;
    size_t lo[2], hi[2];
    int64_t casts0, casts1;
    for (d = 0; d < 2; d++)
        for (s = 0; s < (int)(sizeof sizes / sizeof sizes[0]); s++) {
            int64_t n = sizes[s], rows = n > 7 ? 3 : 1, sh[2] = {rows, n};
            gdl_tensor *x = dtype_rnd_edges(n, dts[d], dev, 0), *p = dtype_rnd_edges(n, dts[d], dev, 1);
            gdl_tensor *m = dtype_rnd(2, sh, dts[d], dev), *fx, *fp, *fm, *r, *want;
            ASSERT_NOT_NULL(x);
            ASSERT_NOT_NULL(p);
            ASSERT_NOT_NULL(m);
            ASSERT_NOT_NULL(fx = gdl_to_dtype(x, GDL_F32));
            ASSERT_NOT_NULL(fp = gdl_to_dtype(p, GDL_F32));
            ASSERT_NOT_NULL(fm = gdl_to_dtype(m, GDL_F32));
            for (k = 0; k < 13; k++) {
                gdl_tensor *in = k >= 10 ? p : x, *fin = k >= 10 ? fp : fx;
                gdl_tensor *(*f1)(gdl_tensor *) = NULL;
                switch (k) {
                case 0: f1 = gdl_relu; break;
                case 1: f1 = gdl_sigmoid; break;
                case 2: f1 = gdl_tanh; break;
                case 3: f1 = gdl_exp; break;
                case 10: f1 = gdl_log; break;
                default: break;
                }
                if (f1) {
                    r = f1(in);
                    want = gdl_to_dtype(f1(fin), dts[d]);
                } else if (k == 4 || k == 5) {
                    r = gdl_gelu(in, k == 5);
                    want = gdl_to_dtype(gdl_gelu(fin, k == 5), dts[d]);
                } else if (k == 6) {
                    r = gdl_leaky_relu(in, 0.1);
                    want = gdl_to_dtype(gdl_leaky_relu(fin, 0.1), dts[d]);
                } else if (k == 7) {
                    r = gdl_mul_scalar(in, 0.3);
                    want = gdl_to_dtype(gdl_mul_scalar(fin, 0.3), dts[d]);
                } else if (k == 8) {
                    r = gdl_add_scalar(in, -1.7);
                    want = gdl_to_dtype(gdl_add_scalar(fin, -1.7), dts[d]);
                } else if (k == 9) {
                    gdl_manual_seed(99);
                    r = gdl_dropout(in, 0.3, 1);
                    gdl_manual_seed(99);
                    want = gdl_to_dtype(gdl_dropout(fin, 0.3, 1), dts[d]);
                } else {
                    r = gdl_pow_scalar(in, k == 11 ? 0.5 : 3);
                    want = gdl_to_dtype(gdl_pow_scalar(fin, k == 11 ? 0.5 : 3), dts[d]);
                }
                ASSERT_NOT_NULL(r);
                ASSERT_NOT_NULL(want);
                ASSERT_EQm("a native op's result has its input's dtype", (int)dts[d], (int)r->dtype);
                if (!dtype_same_bits(r, want))
                    FAILf("%s unary case %d on %lld elements differs from the cast path", gdl_dtype_name(dts[d]), k,
                          (long long)n);
            }
            /* binary: [rows, n] op [n] (broadcast), [n] op [rows, n], same shapes */
            for (k = 0; k < 4; k++) {
                gdl_tensor *(*f2)(gdl_tensor *, gdl_tensor *) =
                    k == 0 ? gdl_add : k == 1 ? gdl_sub : k == 2 ? gdl_mul : gdl_div;
                ASSERT_NOT_NULL(r = f2(m, p));
                ASSERT_EQ((int)dts[d], (int)r->dtype);
                ASSERT(dtype_same_bits(r, gdl_to_dtype(f2(fm, fp), dts[d])));
                ASSERT_NOT_NULL(r = f2(x, m));
                ASSERT(dtype_same_bits(r, gdl_to_dtype(f2(fx, fm), dts[d])));
                ASSERT_NOT_NULL(r = f2(m, m));
                ASSERT(dtype_same_bits(r, gdl_to_dtype(f2(fm, fm), dts[d])));
            }
            {   /* concat: an exact copy */
                gdl_tensor *xs[3], *fxs[3];
                xs[0] = m;
                xs[1] = gdl_relu(m);
                xs[2] = m;
                fxs[0] = fm;
                fxs[1] = gdl_relu(fm);
                fxs[2] = fm;
                ASSERT_NOT_NULL(r = gdl_concat(2, xs, 1));
                ASSERT_EQ((int)dts[d], (int)r->dtype);
                ASSERT(dtype_same_bits(r, gdl_to_dtype(gdl_concat(2, fxs, 1), dts[d])));
                ASSERT_NOT_NULL(r = gdl_concat(3, xs, 0)); /* m twice: the cast path */
                ASSERT_EQ((int)dts[d], (int)r->dtype);
                ASSERT(dtype_same_bits(r, gdl_to_dtype(gdl_concat(3, fxs, 0), dts[d])));
            }
            if (n <= 1000) { /* gradients: broadcast dims summed in f32 (every sum_to path), a tensor passed twice */
                int64_t sr1[2] = {rows, 1}, s1 = 1;
                gdl_tensor *bs[4], *pm, *r1 = dtype_rnd(2, sr1, GDL_F32, dev), *r2 = dtype_rnd(1, &s1, GDL_F32, dev);
                char msg[200];
                int v;
                gdl_tensor *(*un[])(gdl_tensor *) = {gdl_relu, dtype_gelu_erf, dtype_gelu_tanh, dtype_leaky, dtype_scale,
                                                     gdl_log, dtype_sqrt};
                ASSERT_NOT_NULL(pm = gdl_to_dtype(gdl_add_scalar(gdl_sigmoid(fm), 0.5), dts[d])); /* positive */
                bs[0] = gdl_reshape(p, 1, &n);
                ASSERT_NOT_NULL(r1);
                ASSERT_NOT_NULL(r2);
                bs[1] = gdl_to_dtype(gdl_add_scalar(gdl_sigmoid(r1), 0.5), dts[d]);
                bs[2] = gdl_to_dtype(gdl_add_scalar(gdl_sigmoid(r2), 0.5), dts[d]);
                gdl_free(r1); /* the temporaries made of them stay until the arena's reset */
                gdl_free(r2);
                bs[3] = pm;
                for (k = 0; k < 4; k++) {
                    gdl_tensor *(*f2)(gdl_tensor *, gdl_tensor *) =
                        k == 0 ? gdl_add : k == 1 ? gdl_sub : k == 2 ? gdl_mul : gdl_div;
                    for (v = 0; v < 4; v++) {
                        ASSERT_NOT_NULL(bs[v]);
                        if (dtype_grads_match(NULL, f2, m, bs[v], 0, msg, sizeof msg))
                            FAILf("%s binary op %d, b variant %d, %lld elements: %s differs from the f32 one rounded",
                                  gdl_dtype_name(dts[d]), k, v, (long long)n, msg);
                        if (dtype_grads_match(NULL, f2, bs[v], m, 0, msg, sizeof msg))
                            FAILf("%s binary op %d, a variant %d, %lld elements: %s differs from the f32 one rounded",
                                  gdl_dtype_name(dts[d]), k, v, (long long)n, msg);
                    }
                    if (dtype_grads_match(NULL, f2, pm, pm, 1, msg, sizeof msg))
                        FAILf("%s binary op %d of a tensor with itself: %s differs from the f32 one rounded",
                              gdl_dtype_name(dts[d]), k, msg);
                }
                for (k = 0; k < (int)(sizeof un / sizeof un[0]); k++)
                    if (dtype_grads_match(un[k], NULL, k >= 5 ? pm : m, NULL, 0, msg, sizeof msg))
                        FAILf("%s unary case %d, %lld elements: %s differs from the f32 one rounded", gdl_dtype_name(dts[d]),
                              k, (long long)n, msg);
            }
            /* in place, rounded once */
            ASSERT_NOT_NULL(want = gdl_to_dtype(gdl_mul_scalar(fx, -0.7), dts[d]));
            ASSERT_EQ(0, gdl_mul_scalar_(x, -0.7));
            ASSERT(dtype_same_bits(x, want));
            gdl_free(x);
            gdl_free(p);
            gdl_free(m);
            gdl_arena_reset();
        }
    /* memory: half of f32's arena bytes, headers aside (the CPU's arena holds the tape too) */
    for (k = 0; k < 2; k++) {
        ASSERT((lo[k] = dtype_chain_bytes(dev, GDL_BF16, k)) > 0);
        ASSERT((hi[k] = dtype_chain_bytes(dev, GDL_F32, k)) > 0);
        if (!(lo[k] <= hi[k] / 2 + 32768))
            FAILf("a bf16 elementwise chain (%s) used %zu arena bytes, f32 %zu: not native?", k ? "forward+backward" : "forward",
                  lo[k], hi[k]);
    }
    if (getenv("GPUDL_TEST_VERBOSE"))
        printf("\n  arena bytes, elementwise chain on %s: forward bf16 %zu f32 %zu; forward+backward bf16 %zu f32 %zu\n",
               gdl_device_str(dev), lo[0], hi[0], lo[1], hi[1]);
    /* autocast: PROMOTE ops stay native in either region; exp (class F32) casts to f32 */
    {
        int64_t n = 100;
        gdl_tensor *x = dtype_rnd(1, &n, GDL_BF16, dev), *r;
        ASSERT_NOT_NULL(x);
        ASSERT_EQ(0, gdl_autocast_begin(GDL_F16));
        gdl_autocast_stats(&casts0, NULL);
        ASSERT_NOT_NULL(r = gdl_dropout(gdl_add(gdl_relu(x), x), 0.5, 1));
        ASSERT_EQ((int)GDL_BF16, (int)r->dtype);
        gdl_autocast_stats(&casts1, NULL);
        ASSERT_EQm("PROMOTE ops on bf16 under f16 autocast cast nothing", casts0, casts1);
        ASSERT_NOT_NULL(r = gdl_exp(x));
        ASSERT_EQ((int)GDL_F32, (int)r->dtype);
        gdl_autocast_stats(&casts1, NULL);
        ASSERT_EQ(casts0 + 1, casts1);
        ASSERT_EQ(0, gdl_autocast_end());
        /* anomaly mode sees a native op's non-finite output as it saw the f32 op's */
        gdl_set_anomaly_mode(1);
        r = gdl_log(gdl_sub(x, x)); /* log 0 = -inf */
        gdl_set_anomaly_mode(0);
        ASSERT_NULL(r);
        ASSERT_CONTAINS(gdl_last_error(), "gdl_log: produced 100 NaN/Inf values");
        gdl_free(x);
        gdl_arena_reset();
    }
    PASS();
}

/* ---- native low-precision CNN ops ----
   conv2d, the poolings and batch_norm on bf16/f16 inputs run in the low
   dtype itself: the output is made by the op (no cast node), and a forward
   plus backward keeps at most ~70% of the f32 run's arena bytes (the old
   path, f32 copies of every input, kept more than f32). The backward starts
   from a per-sample dot product with random weights (a convolution whose
   kernel is the whole output plane, itself native), since seeding a large
   low-precision root takes f32 scratch. Geometries: stride,
   padding, dilation, groups, odd sizes, a 1x1 convolution (the GEMM on the
   input), and sizes above the CPU's threading threshold; the values are
   checked against f32 on the same rounded inputs as dtype_parity. */
typedef struct dtype_cnn_case {
    const char *name;
    int op;            /* the GDL_OP_ that must make the output */
    int nin;           /* x, then w, bias (conv) or weight, bias, running stats (bn) */
    int64_t shape[5][4];
    int ndims[5];
    int low_params;    /* bn: weight and bias in the low dtype too (f32 copies inside the op) */
    double arena_ratio;
    double tol_mul;    /* 0: the parity tolerance; else that times it */
} dtype_cnn_case;

static gdl_tensor *dtype_cnn_forward(const dtype_cnn_case *c, gdl_tensor **in) {
    int s2[2] = {2, 1}, p2[2] = {1, 2}, d2[2] = {2, 1};
    if (strcmp(c->name, "conv3x3_bias") == 0 || strcmp(c->name, "conv_batch64") == 0) return gdl_conv2d(in[0], in[1], in[2], 1, 1, 1, 1);
    if (strcmp(c->name, "conv_s2p1d2_g2") == 0) return gdl_conv2d_ex(in[0], in[1], in[2], s2, p2, d2, 2);
    if (strcmp(c->name, "conv1x1") == 0) return gdl_conv2d(in[0], in[1], NULL, 1, 0, 1, 1);
    if (strcmp(c->name, "maxpool2") == 0) return gdl_max_pool2d(in[0], 2, 0, 0);
    if (strcmp(c->name, "maxpool3s2p1") == 0) return gdl_max_pool2d(in[0], 3, 2, 1);
    if (strcmp(c->name, "avgpool3s2p1") == 0) return gdl_avg_pool2d(in[0], 3, 2, 1);
    if (strcmp(c->name, "global_avg_pool") == 0) return gdl_global_avg_pool2d(in[0]);
    if (strcmp(c->name, "bn_eval") == 0) return gdl_batch_norm(in[0], in[3], in[4], in[1], in[2], 0, 0.1, 1e-5);
    return gdl_batch_norm(in[0], in[3], in[4], in[1], in[2], 1, 0.1, 1e-5); /* bn_train* */
}

static const dtype_cnn_case dtype_cnn_cases[] = {
    {"conv3x3_bias", GDL_OP_CONV2D, 3, {{4, 8, 16, 16}, {16, 8, 3, 3}, {16}}, {4, 4, 1}, 0, 0.7, 0},
    /* the weight and bias gradients sum over 64 samples: rounded to the low
       dtype once or twice, not once per sample (cuBLAS's sC == 0 loop) */
    {"conv_batch64", GDL_OP_CONV2D, 3, {{64, 4, 12, 12}, {8, 4, 3, 3}, {8}}, {4, 4, 1}, 0, 0.7, 0.4},
    {"conv_s2p1d2_g2", GDL_OP_CONV2D, 3, {{2, 4, 11, 9}, {6, 2, 3, 3}, {6}}, {4, 4, 1}, 0, 0.7, 0},
    {"conv1x1", GDL_OP_CONV2D, 2, {{2, 8, 16, 16}, {16, 8, 1, 1}}, {4, 4}, 0, 0.7, 0},
    {"maxpool2", GDL_OP_MAX_POOL2D, 1, {{4, 8, 16, 16}}, {4}, 0, 0.7, 0},
    {"maxpool3s2p1", GDL_OP_MAX_POOL2D, 1, {{2, 3, 9, 7}}, {4}, 0, 0.8, 0},
    {"avgpool3s2p1", GDL_OP_AVG_POOL2D, 1, {{4, 8, 17, 15}}, {4}, 0, 0.7, 0},
    {"global_avg_pool", GDL_OP_GLOBAL_AVG_POOL2D, 1, {{64, 32, 4, 4}}, {4}, 0, 0.7, 0},
    {"bn_train", GDL_OP_BATCH_NORM, 5, {{4, 8, 16, 16}, {8}, {8}, {8}, {8}}, {4, 1, 1, 1, 1}, 0, 0.7, 0},
    {"bn_train_low_params", GDL_OP_BATCH_NORM, 5, {{4, 8, 16, 16}, {8}, {8}, {8}, {8}}, {4, 1, 1, 1, 1}, 1, 0.7, 0},
    {"bn_eval", GDL_OP_BATCH_NORM, 5, {{3, 5, 7, 9}, {5}, {5}, {5}, {5}}, {4, 1, 1, 1, 1}, 0, 0.8, 0},
};
#define DTYPE_NCNN ((int)(sizeof dtype_cnn_cases / sizeof dtype_cnn_cases[0]))

TEST dtype_native_cnn(void *arg) {
    const dtype_run *r = (const dtype_run *)arg;
    const dtype_cnn_case *c = &dtype_cnn_cases[r->c];
    gdl_tensor *f[5] = {0}, *l[5] = {0}, *out, *fout, *seed, *gref[5] = {0}, *oref, *root, *one;
    double tol = dtype_tol(r->dt) * (c->tol_mul > 0 ? c->tol_mul : 1), rel, af, al;
    int k, bn = c->op == GDL_OP_BATCH_NORM;
    gdl_manual_seed(77);
    for (k = 0; k < c->nin; k++) {
        int is_x = k == 0, stat = bn && k >= 3; /* running statistics stay f32, positive variance */
        gdl_tensor *v = dtype_rnd(c->ndims[k], c->shape[k], r->dt, r->dev);
        ASSERT_NOT_NULL(v);
        if (stat && k == 4) {
            ASSERT_NOT_NULL(f[k] = gdl_clone(gdl_to_dtype(gdl_add_scalar(gdl_mul(v, v), 0.5), GDL_F32)));
        } else {
            ASSERT_NOT_NULL(f[k] = gdl_clone(gdl_to_dtype(v, GDL_F32)));
        }
        if (stat || (bn && !is_x && !c->low_params)) ASSERT_NOT_NULL(l[k] = gdl_clone(f[k]));
        else ASSERT_NOT_NULL(l[k] = gdl_clone(v));
        gdl_free(v);
        if (!stat) {
            ASSERT_EQ(0, gdl_set_requires_grad(f[k], 1));
            ASSERT_EQ(0, gdl_set_requires_grad(l[k], 1));
        }
        gdl_arena_reset();
    }
    /* f32 */
    gdl_arena_reset();
    ASSERT_NOT_NULL(fout = dtype_cnn_forward(c, f));
    {
        int64_t ws[4] = {1, fout->shape[1], fout->shape[2], fout->shape[3]};
        gdl_tensor *w = dtype_rnd(4, ws, r->dt, r->dev);
        ASSERT_NOT_NULL(w);
        ASSERT_NOT_NULL(seed = gdl_clone(gdl_to_dtype(w, GDL_F32)));
        gdl_free(w);
    }
    ASSERT_NOT_NULL(root = gdl_conv2d(fout, seed, NULL, 1, 0, 1, 1));
    ASSERT_NOT_NULL(one = gdl_full(root->ndim, root->shape, 1.0, GDL_F32, r->dev));
    ASSERT_EQ(0, gdl_backward_grad(root, one));
    gdl_free(one);
    af = (double)dtype_arena_used(r->dev);
    /* On the CPU the f32 convolutions keep no columns (the implicit GEMM), the native bf16/f16
       one still keeps its columns in dt: the f32 side is counted with those of the root convolution
       (out's size, as its im2col kept them), and a convolution case's own arena is not compared there
       (until the low dtypes get the implicit GEMM too). */
    if (r->dev.type == GDL_DEVICE_CPU) af += 4.0 * (double)fout->numel;
    ASSERT_NOT_NULL(oref = gdl_clone(fout));
    for (k = 0; k < c->nin; k++)
        if (f[k]->requires_grad) ASSERT_NOT_NULL(gref[k] = gdl_clone(f[k]->grad));
    /* low */
    gdl_arena_reset();
    ASSERT_NOT_NULL(out = dtype_cnn_forward(c, l));
    ASSERT_EQm("the output keeps the input's dtype", (int)r->dt, (int)out->dtype);
    ASSERT_EQm("the op itself makes the output (native, no cast of an f32 result)", c->op, gdl_tensor_op(out));
    ASSERT_NOT_NULL(root = gdl_conv2d(out, gdl_to_dtype(seed, r->dt), NULL, 1, 0, 1, 1));
    ASSERT_NOT_NULL(one = gdl_full(root->ndim, root->shape, 1.0, r->dt, r->dev));
    ASSERT_EQ(0, gdl_backward_grad(root, one));
    gdl_free(one);
    al = (double)dtype_arena_used(r->dev);
    if (!(r->dev.type == GDL_DEVICE_CPU && c->op == GDL_OP_CONV2D) && !(al <= c->arena_ratio * af))
        FAILf("%s %s: the arena holds %.0f bytes after forward+backward, f32 %.0f (want <= %.2fx)", c->name,
              gdl_dtype_name(r->dt), al, af, c->arena_ratio);
    if (dtype_compare(out, oref, tol, &rel)) FAILf("%s %s: output off by %.3g", c->name, gdl_dtype_name(r->dt), rel);
    for (k = 0; k < c->nin; k++) {
        if (!gref[k]) continue;
        ASSERT_NOT_NULL(l[k]->grad);
        ASSERT_EQm("a gradient has its tensor's dtype", (int)l[k]->dtype, (int)l[k]->grad->dtype);
        if (dtype_compare(l[k]->grad, gref[k], tol, &rel))
            FAILf("%s %s: gradient of input %d off by %.3g", c->name, gdl_dtype_name(r->dt), k, rel);
    }
    if (bn && c->nin > 3) /* the running statistics: f32, as the f32 run left them */
        for (k = 3; k < 5; k++)
            if (dtype_maxdiff(l[k], f[k]) > 1e-2 * (1 + dtype_maxdiff(f[k], f[k])))
                FAILf("%s: running statistic %d differs", c->name, k);
    /* under autocast: conv2d (class LOW) casts f32 inputs and runs natively;
       pooling and batch_norm (PROMOTE) take a low activation natively */
    gdl_arena_reset();
    ASSERT_EQ(0, gdl_autocast_begin(r->dt));
    out = dtype_cnn_forward(c, c->op == GDL_OP_CONV2D ? f : l);
    ASSERT_EQ(0, gdl_autocast_end());
    ASSERT_NOT_NULL(out);
    ASSERT_EQm("autocast: the output is in the region's dtype", (int)r->dt, (int)out->dtype);
    ASSERT_EQm("autocast: the op itself makes the output", c->op, gdl_tensor_op(out));
    gdl_arena_reset();
    for (k = 0; k < c->nin; k++) {
        gdl_free(f[k]);
        gdl_free(l[k]);
        gdl_free(gref[k]);
    }
    gdl_free(seed);
    gdl_free(oref);
    PASS();
}

#endif
