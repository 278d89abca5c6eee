/* autocast_cases.h — torch.autocast's semantics, on one device (the CPU in
   tests/test_dtype.c, the emulated GPU in tests/test_cuda.c):
   * every row of tests/op_cases.h run inside a region: its output dtype
     follows its op's autocast class (LOW: the region's dtype; F32: f32;
     PROMOTE: the inputs' dtype), f32 leaves get f32 gradients and low ones
     low gradients, and the values match the row run outside autocast (ops
     that do not run in the low dtype exactly);
   * the cache of parameters' casts (one cast per parameter and step; none
     across a gdl_arena_reset or after the outermost region ends), nesting;
   * loss curves of a small MLP and a small CNN trained with bf16 and f16
     autocast against f32.
   Needs dtype_parity.h (and so op_cases.h) first. */
#ifndef GPUDL_AUTOCAST_CASES_H
#define GPUDL_AUTOCAST_CASES_H

typedef struct ac_run {
    gdl_dtype dt; /* the region's dtype */
    gdl_device dev;
    int steps;    /* training curves: steps per run */
} ac_run;

/* the row's ops that leave its result in f32 whatever the PROMOTE rule says:
   an explicit cast to f32, a mean of an F32-class loss (or of log_softmax's, in soft-target cross entropy) */
static int ac_row_ends_f32(const gc_case *c) {
    return c->op == GDL_OP_CAST || strcmp(c->name, "mse_mean") == 0 || strcmp(c->name, "cross_entropy_soft") == 0;
}

/* a row whose result is a view of a LOW op's: a vector's matmul; packed heads' composition (joined by a reshape);
   grouped-query attention (its query heads joined by a reshape) */
static int ac_row_low_view(const gc_case *c) {
    return c->op == GDL_OP_RESHAPE && (strncmp(c->name, "matmul_", 7) == 0 ||
                                       strcmp(c->name, "sdpa_heads_dropout_unfused") == 0 ||
                                       strncmp(c->name, "sdpa_gqa_", 9) == 0);
}

/* does a row run anything in the low dtype under autocast? (a LOW op) */
static int ac_row_has_low(const gc_case *c) {
    return gdl_op_autocast_class(c->op) == GDL_AUTOCAST_LOW || strcmp(c->name, "mlp_chain") == 0 || ac_row_low_view(c);
}

static gdl_dtype ac_expected(const gc_case *c, gdl_dtype ac, gdl_dtype in) {
    int cls = gdl_op_autocast_class(c->op);
    if (cls == GDL_AUTOCAST_LOW || ac_row_low_view(c)) return ac;
    if (cls == GDL_AUTOCAST_F32 || ac_row_ends_f32(c)) return GDL_F32;
    return in;
}

/* One row: a reference outside autocast on f32 leaves, then inside a region
   on the same f32 leaves and on low-precision leaves (of the region's dtype).
   The inputs are rounded to the low dtype first, so a cast autocast makes is
   exact: a row without a LOW op must then match the reference exactly, a
   row with one within the rounding of its output and gradients. */
static int ac_row(const ac_run *r, const gc_case *c, char *msg, size_t msz) {
    gdl_tensor *cpu[5] = {0}, *ref[5] = {0}, *low[5] = {0}, *out = NULL, *w = NULL, *wdev = NULL, *wd, *out_ref = NULL;
    gdl_tensor *gref[5] = {0};
    int k, pass, ok = 0;
    double rel, tol = ac_row_has_low(c) ? 2 * dtype_tol(r->dt) : 0;
    gdl_manual_seed(4321);
    for (k = 0; k < c->nin; k++) {
        if (!(cpu[k] = make_input(&c->in[k]))) goto fail;
        if (dtype_is_low_input(&c->in[k])) {
            float *v = (float *)cpu[k]->data;
            int64_t i;
            for (i = 0; i < cpu[k]->numel; i++)
                v[i] = r->dt == GDL_BF16 ? gdl_bf16_to_f32(gdl_f32_to_bf16(v[i])) : gdl_f16_to_f32(gdl_f32_to_f16(v[i]));
        }
    }
    gdl_arena_reset();
    for (k = 0; k < c->nin; k++) {
        if (!(ref[k] = gdl_to(cpu[k], r->dev))) goto fail;
        if (dtype_is_low_input(&c->in[k])) {
            gdl_tensor *t = gdl_clone(gdl_to_dtype(cpu[k], r->dt));
            if (!t || !(low[k] = gdl_to(t, r->dev))) goto fail;
            gdl_free(t);
            if (gdl_set_requires_grad(low[k], cpu[k]->requires_grad) < 0) goto fail;
        } else if (!(low[k] = gdl_to(cpu[k], r->dev))) {
            goto fail;
        }
    }
    for (pass = 0; pass < 3; pass++) { /* 0: reference; 1: autocast, f32 leaves; 2: autocast, low leaves */
        gdl_tensor **in = pass == 2 ? low : ref;
        gdl_dtype want = pass == 0 ? GDL_F32 : ac_expected(c, r->dt, pass == 2 ? r->dt : GDL_F32);
        for (k = 0; k < c->nin; k++)
            if (in[k]->grad && gdl_zero_grad_tensor(in[k]) < 0) goto fail;
        gdl_arena_reset();
        gdl_manual_seed(99);
        if (pass && gdl_autocast_begin(r->dt) < 0) goto fail;
        out = c->forward(in);
        if (pass) gdl_autocast_end();
        if (!out) {
            snprintf(msg, msz, "%s: forward (pass %d) failed: %.200s", c->name, pass, gdl_last_error());
            goto done;
        }
        if (out->dtype != want) {
            snprintf(msg, msz, "%s: under %s autocast with %s inputs the output is %s, expected %s", c->name,
                     gdl_dtype_name(r->dt), pass == 2 ? gdl_dtype_name(r->dt) : "f32", gdl_dtype_name(out->dtype),
                     gdl_dtype_name(want));
            goto done;
        }
        if (!w) { /* the output-gradient seed, representable in the low dtype */
            float *v;
            int64_t i;
            if (!(w = gdl_randn(out->ndim, out->shape, gdl_cpu()))) goto fail;
            v = (float *)w->data;
            for (i = 0; i < w->numel; i++)
                v[i] = r->dt == GDL_BF16 ? gdl_bf16_to_f32(gdl_f32_to_bf16(v[i])) : gdl_f16_to_f32(gdl_f32_to_f16(v[i]));
            if (!(wdev = gdl_to(w, r->dev))) goto fail; /* persistent */
        }
        /* backward outside the region, as with torch.autocast */
        if (!(wd = gdl_to_dtype(wdev, out->dtype)) || gdl_backward_grad(out, wd) < 0) {
            snprintf(msg, msz, "%s: backward (pass %d) failed: %.200s", c->name, pass, gdl_last_error());
            goto done;
        }
        if (pass == 0) {
            if (!(out_ref = gdl_clone(out))) goto fail;
            for (k = 0; k < c->nin; k++)
                if (ref[k]->requires_grad && !(gref[k] = gdl_clone(ref[k]->grad))) goto fail;
            continue;
        }
        if (dtype_compare(out, out_ref, pass == 2 && tol == 0 ? dtype_tol(r->dt) : tol, &rel)) {
            snprintf(msg, msz, "%s: under %s autocast (pass %d) the output differs from f32 by %.3g (relative)",
                     c->name, gdl_dtype_name(r->dt), pass, rel);
            goto done;
        }
        for (k = 0; k < c->nin; k++) {
            gdl_tensor *g = in[k]->grad;
            if (!gref[k]) continue;
            if (!g || g->dtype != in[k]->dtype) {
                snprintf(msg, msz, "%s: the gradient of %s input %d is %s under autocast", c->name,
                         gdl_dtype_name(in[k]->dtype), k, g ? gdl_dtype_name(g->dtype) : "missing");
                goto done;
            }
            if (dtype_compare(g, gref[k], pass == 2 ? 2 * dtype_tol(r->dt) : tol, &rel)) {
                snprintf(msg, msz, "%s: under %s autocast (pass %d) input %d's gradient differs from f32 by %.3g",
                         c->name, gdl_dtype_name(r->dt), pass, k, rel);
                goto done;
            }
        }
    }
    ok = 1;
    goto done;
fail:
    snprintf(msg, msz, "%s: setup failed: %.200s", c->name, gdl_last_error());
done:
    while (gdl_autocast_enabled()) gdl_autocast_end();
    gdl_free(w);
    gdl_free(wdev);
    gdl_free(out_ref);
    for (k = 0; k < 5; k++) {
        gdl_free(cpu[k]);
        gdl_free(ref[k]);
        gdl_free(low[k]);
        gdl_free(gref[k]);
    }
    gdl_arena_reset();
    return ok;
}

TEST autocast_ops(void *arg) {
    const ac_run *r = (const ac_run *)arg;
    char msg[400] = "";
    int i, op;
    /* every op is in the table (so every op with a float input is checked) */
    for (op = 0; op < GDL_OP_COUNT; op++) {
        for (i = 0; i < NCASES; i++)
            if (cases[i].op == op) break;
        if (i == NCASES) FAILf("op %d has no row in op_cases.h", op);
    }
    /* torch.autocast's lists */
    ASSERT_EQ(GDL_AUTOCAST_LOW, gdl_op_autocast_class(GDL_OP_MATMUL));
    ASSERT_EQ(GDL_AUTOCAST_LOW, gdl_op_autocast_class(GDL_OP_LINEAR));
    ASSERT_EQ(GDL_AUTOCAST_LOW, gdl_op_autocast_class(GDL_OP_CONV2D));
    ASSERT_EQ(GDL_AUTOCAST_F32, gdl_op_autocast_class(GDL_OP_SOFTMAX));
    ASSERT_EQ(GDL_AUTOCAST_F32, gdl_op_autocast_class(GDL_OP_CROSS_ENTROPY));
    ASSERT_EQ(GDL_AUTOCAST_PROMOTE, gdl_op_autocast_class(GDL_OP_RELU));
    for (i = 0; i < NCASES; i++)
        if (!ac_row(r, &cases[i], msg, sizeof msg)) FAILm(msg);
    PASS();
}

/* A parameter used by two ops is cast once; the cache dies with the arena
   generation and with the outermost region, not with an inner one. */
TEST autocast_cache(void *arg) {
    const ac_run *r = (const ac_run *)arg;
    int64_t sw[2] = {8, 8}, sb = 8, sx[2] = {4, 8};
    gdl_tensor *W = dtype_rnd(2, sw, GDL_F32, r->dev), *b = dtype_rnd(1, &sb, GDL_F32, r->dev);
    gdl_tensor *x = dtype_rnd(2, sx, GDL_F32, r->dev), *h, *loss;
    gdl_tensor *Wr, *br, *gW, *gb;
    int64_t c0, h0, c1, h1;
    double rel;
    ASSERT_NOT_NULL(W);
    ASSERT_NOT_NULL(b);
    ASSERT_NOT_NULL(x);
    gdl_mul_scalar_(W, 0.3);
    ASSERT_EQ(0, gdl_set_requires_grad(W, 1));
    ASSERT_EQ(0, gdl_set_requires_grad(b, 1));
    /* the reference: f32 on the low-precision values of W and b (what the casts give) */
    gdl_arena_reset();
    ASSERT_NOT_NULL(Wr = gdl_clone(gdl_to_dtype(gdl_to_dtype(W, r->dt), GDL_F32)));
    ASSERT_NOT_NULL(br = gdl_clone(gdl_to_dtype(gdl_to_dtype(b, r->dt), GDL_F32)));
    ASSERT_EQ(0, gdl_set_requires_grad(Wr, 1));
    ASSERT_EQ(0, gdl_set_requires_grad(br, 1));
    ASSERT_NOT_NULL(loss = gdl_sum(gdl_linear(gdl_linear(x, Wr, br), Wr, br)));
    ASSERT_EQ(0, gdl_backward(loss));

    gdl_arena_reset();
    gdl_autocast_stats(&c0, &h0);
    ASSERT_EQ(0, gdl_autocast_begin(r->dt));
    ASSERT_NOT_NULL(h = gdl_linear(gdl_linear(x, W, b), W, b));
    ASSERT_EQ((int)r->dt, (int)h->dtype);
    gdl_autocast_stats(&c1, &h1);
    ASSERTm("x, W and b are cast once each", c1 - c0 == 3);
    ASSERTm("the second linear takes W and b from the cache", h1 - h0 == 2);
    ASSERT_NOT_NULL(loss = gdl_sum(h)); /* sum is F32-class: an f32 loss */
    ASSERT_EQ((int)GDL_F32, (int)loss->dtype);
    ASSERT_EQ(0, gdl_autocast_end());
    ASSERT_EQ(0, gdl_backward(loss));
    ASSERT_EQm("the parameter's gradient arrives in f32", (int)GDL_F32, (int)W->grad->dtype);
    ASSERT_EQ((int)GDL_F32, (int)b->grad->dtype);
    ASSERT_NOT_NULL(gW = gdl_to_dtype(W->grad, GDL_F32));
    ASSERT_NOT_NULL(gb = gdl_to_dtype(b->grad, GDL_F32));
    ASSERTm("W's gradient sums both uses", !dtype_compare(gW, Wr->grad, 4 * dtype_tol(r->dt), &rel));
    ASSERTm("b's gradient sums both uses", !dtype_compare(gb, br->grad, 4 * dtype_tol(r->dt), &rel));

    /* a gdl_arena_reset inside a region: the cached casts were temporaries, so they are made again */
    gdl_autocast_stats(&c0, &h0);
    ASSERT_EQ(0, gdl_autocast_begin(r->dt));
    ASSERT_NOT_NULL(gdl_linear(x, W, b));
    gdl_arena_reset();
    ASSERT_NOT_NULL(h = gdl_linear(x, W, b));
    gdl_autocast_stats(&c1, &h1);
    ASSERT_EQ(6, c1 - c0);
    ASSERT_EQ(0, h1 - h0);
    /* nested: the inner region shares the cache; ending it keeps the cache */
    ASSERT_EQ(0, gdl_autocast_begin(r->dt));
    ASSERT_NOT_NULL(gdl_linear(x, W, b));
    ASSERT_EQ(0, gdl_autocast_end());
    ASSERT_NOT_NULL(gdl_linear(x, W, NULL));
    gdl_autocast_stats(&c1, &h1);
    ASSERT_EQ(3, h1 - h0);
    ASSERT_EQ(0, gdl_autocast_end());
    /* the outermost end drops it */
    gdl_autocast_stats(&c0, &h0);
    ASSERT_EQ(0, gdl_autocast_begin(r->dt));
    ASSERT_NOT_NULL(gdl_linear(x, W, b));
    ASSERT_EQ(0, gdl_autocast_end());
    gdl_autocast_stats(&c1, &h1);
    ASSERT_EQ(3, c1 - c0);
    ASSERT_EQ(0, h1 - h0);
    /* a cast made in no-grad mode is not reused where the gradient must flow back through it */
    gdl_arena_reset();
    ASSERT_EQ(0, gdl_zero_grad_tensor(W));
    ASSERT_EQ(0, gdl_autocast_begin(r->dt));
    gdl_set_grad_enabled(0);
    ASSERT_NOT_NULL(gdl_linear(x, W, b));
    gdl_set_grad_enabled(1);
    ASSERT_NOT_NULL(loss = gdl_sum(gdl_linear(x, W, b)));
    ASSERT_EQ(0, gdl_autocast_end());
    ASSERT_EQ(0, gdl_backward(loss));
    ASSERT_NOT_NULL(gW = gdl_to_dtype(W->grad, GDL_F32));
    {
        gdl_tensor *z = gdl_zeros(2, sw, GDL_F32, r->dev);
        double d = dtype_maxdiff(gW, z);
        gdl_free(z);
        ASSERTm("W gets its gradient", d > 0 && d < INFINITY);
    }
    /* a backward inside a region drops the cache: a step may follow and change the weights */
    gdl_arena_reset();
    gdl_autocast_stats(&c0, &h0);
    ASSERT_EQ(0, gdl_autocast_begin(r->dt));
    ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_linear(x, W, b))));
    ASSERT_EQ(0, gdl_sgd_update_(W, 0.5));
    ASSERT_NOT_NULL(h = gdl_linear(x, W, b));
    gdl_autocast_stats(&c1, &h1);
    ASSERT_EQ(0, h1 - h0);
    ASSERT_EQm("x, W, b and the sum's input (F32 class), then x, W and b again", 7, c1 - c0);
    ASSERT_EQ(0, gdl_autocast_end());
    ASSERTm("the new cast holds the updated weights",
            dtype_maxdiff(h, gdl_linear(gdl_to_dtype(x, r->dt), gdl_to_dtype(W, r->dt), gdl_to_dtype(b, r->dt))) == 0);
    /* outside a region nothing is cast */
    gdl_autocast_stats(&c0, &h0);
    ASSERT_EQ((int)GDL_F32, (int)gdl_linear(x, W, b)->dtype);
    gdl_autocast_stats(&c1, &h1);
    ASSERT_EQ(0, c1 - c0);
    gdl_free(W); gdl_free(b); gdl_free(x); gdl_free(Wr); gdl_free(br);
    gdl_arena_reset();
    PASS();
}

/* nesting restores the enclosing state; errors name what was wrong and change nothing */
TEST autocast_nesting_errors(void *arg) {
    const ac_run *r = (const ac_run *)arg;
    int64_t s[2] = {3, 3};
    gdl_tensor *a = dtype_rnd(2, s, GDL_F32, r->dev);
    int i;
    ASSERT_NOT_NULL(a);
    ASSERT_EQ(0, gdl_autocast_enabled());
    ASSERT_EQ((int)GDL_F32, (int)gdl_autocast_dtype());
    ASSERT_EQ(0, gdl_autocast_begin(GDL_BF16));
    ASSERT_EQ(0, gdl_autocast_begin(GDL_F16));
    ASSERT_EQ((int)GDL_F16, (int)gdl_autocast_dtype());
    ASSERT_EQ((int)GDL_F16, (int)gdl_matmul(a, a)->dtype);
    ASSERT_EQ(0, gdl_autocast_end());
    ASSERT_EQ((int)GDL_BF16, (int)gdl_autocast_dtype());
    ASSERT_EQ((int)GDL_BF16, (int)gdl_matmul(a, a)->dtype);
    /* f16 operands in a bf16 region: cast to bf16, as torch.autocast does */
    ASSERT_EQ((int)GDL_BF16, (int)gdl_matmul(gdl_to_dtype(a, GDL_F16), gdl_to_dtype(a, GDL_F16))->dtype);
    ASSERT_EQ(-1, gdl_autocast_begin(GDL_F32));
    ASSERT_STR_EQ("gdl_autocast_begin: the autocast dtype must be bf16 or f16, got f32", gdl_last_error());
    ASSERT_EQ(-1, gdl_autocast_begin(GDL_I32));
    ASSERT_CONTAINS(gdl_last_error(), "got i32");
    ASSERT_EQ((int)GDL_BF16, (int)gdl_autocast_dtype()); /* the failed calls changed nothing */
    ASSERT_EQ(0, gdl_autocast_end());
    ASSERT_EQ(0, gdl_autocast_enabled());
    ASSERT_EQ((int)GDL_F32, (int)gdl_matmul(a, a)->dtype);
    ASSERT_EQ(-1, gdl_autocast_end());
    ASSERT_STR_EQ("gdl_autocast_end: no autocast region is open on this thread (gdl_autocast_begin)", gdl_last_error());
    for (i = 0; i < 32; i++) ASSERT_EQ(0, gdl_autocast_begin(GDL_BF16));
    ASSERT_EQ(-1, gdl_autocast_begin(GDL_BF16));
    ASSERT_CONTAINS(gdl_last_error(), "more than 32 nested");
    for (i = 0; i < 32; i++) ASSERT_EQ(0, gdl_autocast_end());
    ASSERT_EQ(0, gdl_autocast_enabled());
    /* an integer input to a LOW op still fails with the op's own message */
    ASSERT_EQ(0, gdl_autocast_begin(r->dt));
    ASSERT_NULL(gdl_matmul(a, gdl_to_dtype(a, GDL_I32)));
    ASSERT_STR_EQ("gdl_matmul: cannot multiply f32 [3,3] by i32 [3,3]", gdl_last_error());
    ASSERT_EQ(0, gdl_autocast_end());
    gdl_free(a);
    gdl_arena_reset();
    PASS();
}

/* ---- training curves ----
   A 16-32-4 MLP on 64 samples and a conv(1->4, 3x3) + ReLU + max-pool + linear
   CNN on 16 8x8 images, labels from a random teacher, plain SGD, full batch.
   Each autocast run starts from the f32 run's initial weights; its losses
   must follow the f32 curve within AC_CURVE_TOL(dt) * the initial loss at
   every step, and it must learn (last loss below half the first). Measured
   on the CPU (GPUDL_AC_VERBOSE=1 prints it): bf16 stays within 5.2e-4 of the
   initial loss, f16 within 8.1e-5 (11 significant bits to bf16's 8: about
   an eighth); the tolerances leave about 10x. */
#define AC_CURVE_TOL(dt) ((dt) == GDL_BF16 ? 5e-3 : 1e-3)

static double ac_train(const ac_run *r, int cnn, gdl_dtype dt, double *losses) {
    int64_t N = cnn ? 16 : 64;
    gdl_tensor *p[4] = {0}, *x = NULL, *y = NULL;
    int i, s, np = 4;
    double worst = -1;
    int32_t lab[64];
    gdl_manual_seed(7);
    if (cnn) {
        int64_t sx[4] = {16, 1, 8, 8}, sw[4] = {4, 1, 3, 3}, sb = 4, sl[2] = {4, 64}, sl2 = 4;
        gdl_tensor *xc = gdl_randn(4, sx, gdl_cpu());
        const float *v = xc ? (const float *)xc->data : NULL;
        if (!v) return -1;
        for (i = 0; i < 16; i++) { /* the brightest quadrant */
            int q, best = 0;
            double m[4] = {0, 0, 0, 0};
            for (q = 0; q < 64; q++) m[(q / 32) * 2 + (q % 8) / 4] += v[i * 64 + q];
            for (q = 1; q < 4; q++)
                if (m[q] > m[best]) best = q;
            lab[i] = best;
        }
        x = gdl_to(xc, r->dev);
        gdl_free(xc);
        p[0] = gdl_randn(4, sw, r->dev);
        p[1] = gdl_zeros(1, &sb, GDL_F32, r->dev);
        p[2] = gdl_randn(2, sl, r->dev);
        p[3] = gdl_zeros(1, &sl2, GDL_F32, r->dev);
        if (!p[0] || !p[2]) return -1;
        gdl_mul_scalar_(p[0], 0.3);
        gdl_mul_scalar_(p[2], 0.1);
    } else {
        int64_t sx[2] = {64, 16}, st[2] = {16, 4}, s1[2] = {32, 16}, b1 = 32, s2[2] = {4, 32}, b2 = 4;
        gdl_tensor *xc = gdl_randn(2, sx, gdl_cpu()), *t = gdl_randn(2, st, gdl_cpu());
        const float *v, *tv;
        if (!xc || !t) return -1;
        v = (const float *)xc->data;
        tv = (const float *)t->data;
        for (i = 0; i < 64; i++) {
            int c, k, best = 0;
            double z[4];
            for (c = 0; c < 4; c++)
                for (z[c] = 0, k = 0; k < 16; k++) z[c] += v[i * 16 + k] * tv[k * 4 + c];
            for (c = 1; c < 4; c++)
                if (z[c] > z[best]) best = c;
            lab[i] = best;
        }
        x = gdl_to(xc, r->dev);
        gdl_free(xc);
        gdl_free(t);
        p[0] = gdl_randn(2, s1, r->dev);
        p[1] = gdl_zeros(1, &b1, GDL_F32, r->dev);
        p[2] = gdl_randn(2, s2, r->dev);
        p[3] = gdl_zeros(1, &b2, GDL_F32, r->dev);
        if (!p[0] || !p[2]) return -1;
        gdl_mul_scalar_(p[0], 0.25);
        gdl_mul_scalar_(p[2], 0.18);
    }
    {
        gdl_tensor *yc = gdl_from_array(lab, 1, &N, GDL_I32, gdl_cpu());
        y = yc ? gdl_to(yc, r->dev) : NULL;
        gdl_free(yc);
    }
    if (!x || !y) return -1;
    for (i = 0; i < np; i++)
        if (!p[i] || gdl_set_requires_grad(p[i], 1) < 0) return -1;
    for (s = 0; s < r->steps; s++) {
        gdl_tensor *h, *loss;
        gdl_arena_reset(); /* before the region opens: its cached casts live in this step's arena */
        for (i = 0; i < np; i++) gdl_zero_grad_tensor(p[i]);
        if (dt != GDL_F32 && gdl_autocast_begin(dt) < 0) return -1;
        if (cnn) h = gdl_linear(gdl_flatten(gdl_max_pool2d(gdl_relu(gdl_conv2d(x, p[0], p[1], 1, 1, 1, 1)), 2, 0, 0), 1),
                                p[2], p[3]);
        else h = gdl_linear(gdl_relu(gdl_linear(x, p[0], p[1])), p[2], p[3]);
        if (h && dt != GDL_F32 && h->dtype != dt) {
            gdl_autocast_end();
            return -2; /* logits not in the low dtype */
        }
        loss = gdl_cross_entropy(h, y);
        if (dt != GDL_F32) gdl_autocast_end();
        if (!loss || loss->dtype != GDL_F32 || gdl_backward(loss) < 0) return -1;
        for (i = 0; i < np; i++)
            if (p[i]->grad->dtype != GDL_F32 || gdl_sgd_update_(p[i], cnn ? 0.1 : 0.2) < 0) return -1;
        losses[s] = gdl_item(loss);
        worst = 0;
    }
    for (i = 0; i < np; i++) gdl_free(p[i]);
    gdl_free(x);
    gdl_free(y);
    gdl_arena_reset();
    return worst;
}

static int ac_curves(const ac_run *r, int cnn, char *msg, size_t msz) {
    double *ref = (double *)calloc((size_t)r->steps, sizeof(double)), *lo = (double *)calloc((size_t)r->steps, sizeof(double));
    int s, ok = 0;
    double worst = 0;
    if (!ref || !lo) goto out;
    if (ac_train(r, cnn, GDL_F32, ref) < 0 || ac_train(r, cnn, r->dt, lo) < 0) {
        snprintf(msg, msz, "%s %s training failed: %.200s", cnn ? "cnn" : "mlp", gdl_dtype_name(r->dt), gdl_last_error());
        goto out;
    }
    for (s = 0; s < r->steps; s++) {
        double e = fabs(lo[s] - ref[s]);
        if (!(e <= worst)) worst = e;
    }
    if (!(worst <= AC_CURVE_TOL(r->dt) * ref[0]))
        snprintf(msg, msz, "%s %s: loss curve off f32's by %.4g (initial loss %.4g, tolerance %.3g of it)",
                 cnn ? "cnn" : "mlp", gdl_dtype_name(r->dt), worst, ref[0], AC_CURVE_TOL(r->dt));
    else if (!(lo[r->steps - 1] < 0.5 * lo[0]))
        snprintf(msg, msz, "%s %s: did not learn: loss %.4g -> %.4g", cnn ? "cnn" : "mlp", gdl_dtype_name(r->dt), lo[0],
                 lo[r->steps - 1]);
    else
        ok = 1;
    if (getenv("GPUDL_AC_VERBOSE"))
        printf("  %s %s %s: %d steps, loss %.4f -> %.4f (f32 %.4f), max |diff| %.4g = %.3g of the initial loss\n",
               gdl_device_str(r->dev), cnn ? "cnn" : "mlp", gdl_dtype_name(r->dt), r->steps, lo[0], lo[r->steps - 1],
               ref[r->steps - 1], worst, worst / ref[0]);
out:
    free(ref);
    free(lo);
    return ok;
}

TEST autocast_training(void *arg) {
    const ac_run *r = (const ac_run *)arg;
    char msg[300] = "";
    if (!ac_curves(r, 0, msg, sizeof msg) || !ac_curves(r, 1, msg, sizeof msg)) FAILm(msg);
    PASS();
}

#endif
