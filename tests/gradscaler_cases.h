/* gradscaler_cases.h -- GradScaler tests shared by the CPU suite (test_nn.c) and
   the GPU suite (test_cuda.c, on the emulator): each takes the device to run on.
   Include after gpudl.h and harness.h.
   * PyTorch's numbers: torch.amp.GradScaler (init 2^16, growth_interval 3) with
     SGD(0.1, momentum 0.9) over nine steps with two forced overflows, from
     tests/gradscaler_ref.py --c (PyTorch 2.15): scale and growth tracker exact,
     the unscaled gradients and the weights to 1e-6 relative after every step
     (and bitwise where gs_ref_case is asked: see its callers);
   * a scaled step captured as a graph and replayed equals the eager steps
     bitwise, overflow (skip + backoff) included, and a steady-state scaled step
     waits for nothing (gdl_sync_count);
   * the scaler's state in training checkpoints; errors. */
#ifndef GPUDL_GRADSCALER_CASES_H
#define GPUDL_GRADSCALER_CASES_H

#include <math.h>
#include <string.h>

typedef struct {
    double scale;
    int tracker;
    double w[4], g[4];
} gdl__gs_row;

static const float gdl__gs_x[9][4] = {{1, 2, 3, 4}, {0.5f, -1, 1e35f, 2}, {1, 1, 1, 1}, {-2, 0.25f, 0.5f, 1},
                                      {3, -1, 2, 0.5f}, {1, 2, -1, -3}, {0.1f, 0.2f, 0.3f, 0.4f}, {1e36f, 1, 1, 1},
                                      {2, 2, 2, 2}};

/* tests/gradscaler_ref.py --c */
static const gdl__gs_row gdl__gs_ref[9] = {
    {0x1.0000000000000p+16, 1, {0x1.3333340000000p-2, -0x1.3333340000000p+0, 0x1.4ccccc0000000p+0, 0x1.9999980000000p-3}, {0x1.0000000000000p+1, -0x1.0000000000000p-1, 0x1.c000000000000p+2, 0x1.6000000000000p+2}},
    {0x1.0000000000000p+15, 0, {0x1.3333340000000p-2, -0x1.3333340000000p+0, 0x1.4ccccc0000000p+0, 0x1.9999980000000p-3}, {0x1.19999a0000000p+0, -0x1.b333340000000p+1, INFINITY, 0x1.3333340000000p+1}},
    {0x1.0000000000000p+15, 1, {-0x1.47ae160000000p-5, -0x1.03d70a0000000p+0, 0x1.3d70a20000000p-2, -0x1.bd70a40000000p-2}, {0x1.99999a0000000p+0, -0x1.6666680000000p+0, 0x1.cccccc0000000p+1, 0x1.6666660000000p+0}},
    {0x1.0000000000000p+15, 2, {-0x1.1a9fc00000000p-3, -0x1.574bc60000000p-1, -0x1.62d0e60000000p-1, -0x1.04fdf40000000p+0}, {-0x1.0a3d700000000p+1, -0x1.c7ae140000000p+0, 0x1.1eb8500000000p+0, 0x1.0a3d700000000p-3}},
    {0x1.0000000000000p+16, 0, {-0x1.fe91000000000p-2, -0x1.02c3c40000000p-3, -0x1.a837b40000000p+0, -0x1.64432c0000000p+0}, {0x1.5cac080000000p+1, -0x1.2ba5e40000000p+1, 0x1.3a5e340000000p-1, -0x1.89fbe80000000p+0}},
    {0x1.0000000000000p+16, 1, {-0x1.a5974e0000000p-1, 0x1.825d900000000p-3, -0x1.0bf38c0000000p+1, -0x1.25f4080000000p+0}, {0x1.6f00000000000p-9, 0x1.bf4f100000000p+0, -0x1.141bda0000000p+2, -0x1.7221960000000p+2}},
    {0x1.0000000000000p+16, 2, {-0x1.ec11e40000000p-1, 0x1.a85ff00000000p-2, -0x1.0c759a0000000p+1, -0x1.7aa6140000000p-1}, {-0x1.8bfdb40000000p+0, 0x1.27952e0000000p-1, -0x1.f180b20000000p+1, -0x1.e581aa0000000p+0}},
    {0x1.0000000000000p+15, 0, {-0x1.ec11e40000000p-1, 0x1.a85ff00000000p-2, -0x1.0c759a0000000p+1, -0x1.7aa6140000000p-1}, {INFINITY, 0x1.d42ff80000000p+0, -0x1.98eb340000000p+1, -0x1.ea98500000000p-2}},
    {0x1.0000000000000p+15, 1, {-0x1.17be520000000p+0, 0x1.56c5ca0000000p-2, -0x1.e1a6440000000p+0, -0x1.b1f95c0000000p-2}, {0x1.3ee1c00000000p-4, 0x1.6a17fc0000000p+1, -0x1.18eb340000000p+1, 0x1.0ab3d80000000p-1}},
};

/* relative to the larger of |want| and `floor` (a gradient 1 + 2w near 0 loses the digits of w: an ulp of
   w there is 4e-5 of it) */
static int gdl__gs_close(double want, double got, double rel, double floor) {
    if (isinf(want)) return got == want;
    return fabs(got - want) <= rel * (fabs(want) > floor ? fabs(want) : floor);
}

/* PyTorch's loop on dev: zero_grad, loss = (w*x).sum() + (w*w).sum(), scale(loss).backward(), unscale_,
   step, update; *max_rel gets the largest relative difference of the weights from PyTorch's */
static enum harness_result gs_ref_case(gdl_device dev, double *max_rel) {
    static const float w0[4] = {0.5f, -1.25f, 2.0f, 0.75f};
    gdl_grad_scaler_opts so = gdl_grad_scaler_defaults();
    gdl_tensor *w = gdl_from_array(w0, GDL_DIMS(4), GDL_F32, dev), *x = gdl_zeros(GDL_DIMS(4), GDL_F32, dev);
    gdl_optimizer *opt = gdl_sgd_new(0.1, 0.9, 0, 0, 0);
    gdl_grad_scaler *s;
    int t, k;
    *max_rel = 0;
    so.growth_interval = 3;
    ASSERT(w && x && opt && (s = gdl_grad_scaler_new(&so)) != NULL);
    ASSERT_EQ(0, gdl_set_requires_grad(w, 1));
    ASSERT_EQ(0, gdl_optim_add_params(opt, &w, 1, -1, -1));
    ASSERT_IN_RANGE(65536.0, gdl_grad_scaler_get_scale(s), 0); /* before the first scale: init_scale */
    for (t = 0; t < 9; t++) {
        gdl_tensor *x_host = gdl_from_array(gdl__gs_x[t], GDL_DIMS(4), GDL_F32, gdl_cpu()), *loss, *scaled;
        float wv[4], gv[4];
        gdl_arena_reset();
        ASSERT_EQ(0, gdl_copy_(x, x_host));
        gdl_free(x_host);
        ASSERT_EQ(0, gdl_zero_grad(opt));
        loss = gdl_add(gdl_sum(gdl_mul(w, x)), gdl_sum(gdl_mul(w, w)));
        ASSERT_NOT_NULL(scaled = gdl_grad_scaler_scale(s, loss));
        ASSERT_EQ(0, gdl_backward(scaled));
        ASSERT_EQ(0, gdl_grad_scaler_unscale(s, opt));
        ASSERT_EQ(0, gdl_copy_to_host(w->grad, gv, sizeof gv));
        ASSERT_EQ(0, gdl_grad_scaler_step(s, opt));
        ASSERT_EQ(0, gdl_grad_scaler_update(s));
        ASSERT_EQ(0, gdl_copy_to_host(w, wv, sizeof wv));
        ASSERT_IN_RANGE(gdl__gs_ref[t].scale, gdl_grad_scaler_get_scale(s), 0);
        ASSERT_EQ(gdl__gs_ref[t].tracker, gdl_grad_scaler_get_growth_tracker(s));
        for (k = 0; k < 4; k++) {
            double want = gdl__gs_ref[t].w[k], rel = fabs(wv[k] - want) / fabs(want);
            if (!gdl__gs_close(gdl__gs_ref[t].g[k], gv[k], 1e-6, 1))
                FAILf("step %d: grad[%d] %.9g, PyTorch %.9g", t, k, gv[k], gdl__gs_ref[t].g[k]);
            if (!gdl__gs_close(want, wv[k], 1e-6, 1e-3))
                FAILf("step %d: w[%d] %.9g, PyTorch %.9g", t, k, wv[k], want);
            if (rel > *max_rel) *max_rel = rel;
        }
    }
    /* skipped steps did not count: 7 real steps */
    {
        gdl_tensor *st[4];
        const char *nm[4];
        ASSERT_EQ(2, gdl_optim_state(opt, nm, st, 4));
        ASSERT_STR_EQ("state.0.step", nm[0]);
        ASSERT_IN_RANGE(7.0, gdl_item(st[0]), 0);
    }
    gdl_grad_scaler_free(s);
    gdl_optim_free(opt);
    gdl_free(w);
    gdl_free(x);
    PASS();
}

/* ---- a scaled Adam step, eager against captured and replayed ---- */

#define GS_STEPS 14
#define GS_N1 37 /* odd: the second parameter's slot starts after padding */

typedef struct {
    gdl_tensor *w1, *w2, *x;
    gdl_optimizer *opt;
    gdl_grad_scaler *s;
} gs_ctx;

/* zero_grad, loss = sum(w1*x) + sum(w2^3), scale, backward, unscale, step, update: nothing read back */
static int gs_step(void *c) {
    gs_ctx *g = (gs_ctx *)c;
    gdl_tensor *loss;
    if (gdl_zero_grad(g->opt) < 0) return -1;
    loss = gdl_add(gdl_sum(gdl_mul(g->w1, g->x)), gdl_sum(gdl_mul(gdl_mul(g->w2, g->w2), g->w2)));
    if (!(loss = gdl_grad_scaler_scale(g->s, loss)) || gdl_backward(loss) < 0) return -1;
    if (gdl_grad_scaler_unscale(g->s, g->opt) < 0 || gdl_grad_scaler_step(g->s, g->opt) < 0) return -1;
    return gdl_grad_scaler_update(g->s);
}

/* step s's input: an overflow (1e36 times the scale) at step 5, a NaN at step 9 */
static void gs_input(int s, float *x) {
    int i;
    for (i = 0; i < GS_N1; i++) x[i] = (float)sin(0.37 * (i + 1) * (s + 1));
    if (s == 5) x[3] = 1e36f;
    if (s == 9) x[0] = NAN;
}

/* GS_STEPS steps on dev, eager or captured at step 0 and replayed; out: w1, w2, scale, tracker, steps counted.
   *syncs: the host's waits in the eager steps after the second. */
static int gs_run(gdl_device dev, int graph, float *out, int64_t *syncs) {
    gs_ctx c;
    gdl_grad_scaler_opts so = gdl_grad_scaler_defaults();
    gdl_graph *g = NULL;
    float x[GS_N1], w1[GS_N1], w2[5];
    int s, i, rc = -1;
    memset(&c, 0, sizeof c);
    for (i = 0; i < GS_N1; i++) w1[i] = (float)cos(0.1 * i);
    for (i = 0; i < 5; i++) w2[i] = 0.25f * (float)(i + 1);
    so.growth_interval = 3;
    *syncs = 0;
    c.w1 = gdl_from_array(w1, GDL_DIMS(GS_N1), GDL_F32, dev);
    c.w2 = gdl_from_array(w2, GDL_DIMS(5), GDL_F32, dev);
    c.x = gdl_zeros(GDL_DIMS(GS_N1), GDL_F32, dev);
    c.opt = gdl_adam_new(1e-2, 0.9, 0.999, 1e-8, 0);
    c.s = gdl_grad_scaler_new(&so);
    if (!c.w1 || !c.w2 || !c.x || !c.opt || !c.s || gdl_set_requires_grad(c.w1, 1) < 0 ||
        gdl_set_requires_grad(c.w2, 1) < 0 || gdl_optim_add_params(c.opt, &c.w1, 1, -1, -1) < 0 ||
        gdl_optim_add_params(c.opt, &c.w2, 1, -1, -1) < 0)
        goto out;
    for (s = 0; s < GS_STEPS; s++) {
        gdl_tensor *xh;
        gs_input(s, x);
        if (!(xh = gdl_from_array(x, GDL_DIMS(GS_N1), GDL_F32, gdl_cpu()))) goto out;
        rc = gdl_copy_(c.x, xh);
        gdl_free(xh);
        if (rc < 0) goto out;
        rc = -1;
        if (graph && s == 0) {
            if (!(g = gdl_graph_capture(dev, gs_step, &c))) goto out;
        } else if (graph) {
            if (gdl_graph_replay(g) < 0) goto out;
        } else {
            int64_t before = gdl_sync_count();
            gdl_arena_reset();
            if (gs_step(&c) < 0) goto out;
            if (s >= 2) *syncs += gdl_sync_count() - before;
        }
    }
    if (gdl_copy_to_host(c.w1, out, sizeof(float) * GS_N1) < 0 || gdl_copy_to_host(c.w2, out + GS_N1, sizeof w2) < 0)
        goto out;
    out[GS_N1 + 5] = (float)gdl_grad_scaler_get_scale(c.s);
    out[GS_N1 + 6] = (float)gdl_grad_scaler_get_growth_tracker(c.s);
    {
        gdl_tensor *st[6];
        if (gdl_optim_state(c.opt, NULL, st, 6) != 6) goto out;
        out[GS_N1 + 7] = (float)gdl_item(st[0]);
        out[GS_N1 + 8] = (float)gdl_item(st[3]);
    }
    rc = 0;
out:
    gdl_graph_free(g);
    gdl_grad_scaler_free(c.s);
    gdl_optim_free(c.opt);
    gdl_free(c.w1);
    gdl_free(c.w2);
    gdl_free(c.x);
    gdl_arena_reset();
    return rc;
}

/* replayed == eager bitwise, overflow steps included; the scale as PyTorch's rule gives it; no waits */
static enum harness_result gs_graph_case(gdl_device dev) {
    float a[GS_N1 + 9], b[GS_N1 + 9];
    int64_t sa, sb;
    double scale = 65536;
    int s, tracker = 0;
    if (gs_run(dev, 0, a, &sa) < 0) FAILf("eager on %s: %s", gdl_device_str(dev), gdl_last_error());
    if (gs_run(dev, 1, b, &sb) < 0) FAILf("graph on %s: %s", gdl_device_str(dev), gdl_last_error());
    ASSERT_EQ(0, sa);
    for (s = 0; s < GS_STEPS; s++) /* _amp_update_scale_ */
        if (s == 5 || s == 9) scale *= 0.5, tracker = 0;
        else if (++tracker == 3) scale *= 2, tracker = 0;
    ASSERT_IN_RANGE(scale, a[GS_N1 + 5], 0);
    ASSERT_IN_RANGE((double)tracker, a[GS_N1 + 6], 0);
    ASSERT_IN_RANGE((double)(GS_STEPS - 2), a[GS_N1 + 7], 0); /* the two overflows skipped, counts too */
    ASSERT_IN_RANGE((double)(GS_STEPS - 2), a[GS_N1 + 8], 0);
    for (s = 0; s < GS_N1 + 5; s++) ASSERT(isfinite(a[s]));
    if (memcmp(a, b, sizeof a)) {
        for (s = 0; s < GS_N1 + 9 && a[s] == b[s]; s++) {
        }
        FAILf("%s: replayed steps differ from eager ones at value %d: %.9g vs %.9g", gdl_device_str(dev), s, b[s], a[s]);
    }
    PASS();
}

/* ---- unscale before clipping; the state in checkpoints; errors ---- */

static gdl_tensor *gs_loss(gdl_tensor *w) {
    return gdl_add(gdl_sum(gdl_mul(w, w)), gdl_sum(gdl_mul_scalar(w, 3.0)));
}

static enum harness_result gs_clip_and_checkpoint_case(gdl_device dev, const char *path) {
    static const float w0[3] = {1.5f, -2.0f, 0.5f};
    gdl_module *m = gdl_nn_linear(2, 1, 0), *m2 = gdl_nn_linear(2, 1, 0);
    gdl_tensor *w = gdl_from_array(w0, GDL_DIMS(3), GDL_F32, dev), *w2 = gdl_from_array(w0, GDL_DIMS(3), GDL_F32, dev);
    gdl_optimizer *opt = gdl_sgd_new(0.1, 0, 0, 0, 0), *opt2 = gdl_sgd_new(0.1, 0, 0, 0, 0);
    gdl_grad_scaler *s = gdl_grad_scaler_new(NULL), *s2 = gdl_grad_scaler_new(NULL);
    double n_ref, n;
    float g[3], gr[3];
    gdl_st_file f;
    ASSERT(m && m2 && w && w2 && opt && opt2 && s && s2);
    ASSERT_EQ(0, gdl_set_requires_grad(w, 1));
    ASSERT_EQ(0, gdl_set_requires_grad(w2, 1));
    ASSERT_EQ(0, gdl_optim_add_params(opt, &w, 1, -1, -1));
    ASSERT_EQ(0, gdl_optim_add_params(opt2, &w2, 1, -1, -1));
    /* clipping after unscale sees the true gradients: as an unscaled run's, bit for bit (the scale is 2^16) */
    gdl_arena_reset();
    ASSERT_EQ(0, gdl_zero_grad(opt2));
    ASSERT_EQ(0, gdl_backward(gs_loss(w2)));
    n_ref = gdl_optim_clip_grad_norm(opt2, 1.0);
    ASSERT_EQ(0, gdl_zero_grad(opt));
    ASSERT_EQ(0, gdl_backward(gdl_grad_scaler_scale(s, gs_loss(w))));
    ASSERT_EQ(0, gdl_grad_scaler_unscale(s, opt));
    n = gdl_optim_clip_grad_norm(opt, 1.0);
    ASSERT_IN_RANGE(n_ref, n, 0);
    ASSERT_EQ(0, gdl_copy_to_host(w->grad, g, sizeof g));
    ASSERT_EQ(0, gdl_copy_to_host(w2->grad, gr, sizeof gr));
    ASSERT_EQ(0, memcmp(g, gr, sizeof g));
    ASSERT_EQ(0, gdl_grad_scaler_step(s, opt)); /* no second unscale */
    ASSERT_EQ(0, gdl_grad_scaler_update(s));
    ASSERT_EQ(1, gdl_grad_scaler_get_growth_tracker(s));
    /* the checkpoint: attached by unscale; restored into another scaler attached to another optimizer */
    ASSERT_EQ(0, gdl_grad_scaler_set_state(s, 1024.0, 7));
    ASSERT_EQ(0, gdl_checkpoint_save(m, opt, NULL, 3, path));
    ASSERT_EQ(0, gdl_st_read(path, &f));
    {
        int i, found = 0;
        for (i = 0; i < f.n_meta; i++) {
            if (!strcmp(f.meta_keys[i], "scaler.scale")) found += !strcmp(f.meta_vals[i], "1024");
            if (!strcmp(f.meta_keys[i], "scaler.growth_tracker")) found += !strcmp(f.meta_vals[i], "7");
        }
        gdl_st_free(&f);
        ASSERT_EQ(2, found);
    }
    ASSERT_EQ(0, gdl_optim_set_grad_scaler(opt2, s2));
    ASSERT_EQ(0, gdl_checkpoint_load(m2, opt2, NULL, NULL, path));
    ASSERT_IN_RANGE(1024.0, gdl_grad_scaler_get_scale(s2), 0);
    ASSERT_EQ(7, gdl_grad_scaler_get_growth_tracker(s2));
    /* a checkpoint without a scaler (an older one) loads and leaves the scaler alone */
    ASSERT_EQ(0, gdl_optim_set_grad_scaler(opt, NULL));
    ASSERT_EQ(0, gdl_checkpoint_save(m, opt, NULL, 3, path));
    ASSERT_EQ(0, gdl_grad_scaler_set_state(s2, 8.0, 1));
    ASSERT_EQ(0, gdl_checkpoint_load(m2, opt2, NULL, NULL, path));
    ASSERT_IN_RANGE(8.0, gdl_grad_scaler_get_scale(s2), 0);
    ASSERT_EQ(1, gdl_grad_scaler_get_growth_tracker(s2));
    remove(path);
    gdl_grad_scaler_free(s); /* before its optimizer: detached */
    gdl_optim_free(opt);
    gdl_optim_free(opt2); /* before its scaler */
    gdl_grad_scaler_free(s2);
    gdl_free(w);
    gdl_free(w2);
    gdl_module_free(m);
    gdl_module_free(m2);
    gdl_arena_reset();
    PASS();
}

static enum harness_result gs_errors_case(gdl_device dev) {
    gdl_grad_scaler_opts o = gdl_grad_scaler_defaults();
    gdl_tensor *w = gdl_ones(GDL_DIMS(3), GDL_F32, dev);
    gdl_optimizer *opt = gdl_sgd_new(0.1, 0, 0, 0, 0);
    gdl_grad_scaler *s, *other, *off;
    float before[3], after[3];
    ASSERT(w && opt);
    ASSERT_EQ(0, gdl_set_requires_grad(w, 1));
    ASSERT_EQ(0, gdl_optim_add_params(opt, &w, 1, -1, -1));
    /* bad options */
    o.init_scale = 0;
    ASSERT_NULL(gdl_grad_scaler_new(&o));
    ASSERT_CONTAINS(gdl_last_error(), "init_scale");
    o = gdl_grad_scaler_defaults();
    o.init_scale = 1e300; /* not a float */
    ASSERT_NULL(gdl_grad_scaler_new(&o));
    o = gdl_grad_scaler_defaults();
    o.growth_factor = 1.0;
    ASSERT_NULL(gdl_grad_scaler_new(&o));
    ASSERT_CONTAINS(gdl_last_error(), "growth_factor");
    o = gdl_grad_scaler_defaults();
    o.backoff_factor = 1.0;
    ASSERT_NULL(gdl_grad_scaler_new(&o));
    ASSERT_CONTAINS(gdl_last_error(), "backoff_factor");
    o = gdl_grad_scaler_defaults();
    o.growth_interval = 0;
    ASSERT_NULL(gdl_grad_scaler_new(&o));
    ASSERT_CONTAINS(gdl_last_error(), "growth_interval");
    /* NULLs */
    ASSERT_NOT_NULL(s = gdl_grad_scaler_new(NULL));
    ASSERT_NOT_NULL(other = gdl_grad_scaler_new(NULL));
    ASSERT_NULL(gdl_grad_scaler_scale(NULL, w));
    ASSERT_NULL(gdl_grad_scaler_scale(s, NULL));
    ASSERT_EQ(-1, gdl_grad_scaler_unscale(NULL, opt));
    ASSERT_EQ(-1, gdl_grad_scaler_unscale(s, NULL));
    ASSERT_EQ(-1, gdl_grad_scaler_step(s, NULL));
    ASSERT_EQ(-1, gdl_grad_scaler_update(NULL));
    ASSERT(isnan(gdl_grad_scaler_get_scale(NULL)));
    ASSERT_EQ(-1, gdl_grad_scaler_get_growth_tracker(NULL));
    ASSERT_EQ(-1, gdl_grad_scaler_set_state(NULL, 1, 0));
    ASSERT_EQ(-1, gdl_grad_scaler_set_state(s, -1, 0));
    ASSERT_EQ(-1, gdl_grad_scaler_set_state(s, 1, -1));
    ASSERT_EQ(-1, gdl_optim_set_grad_scaler(NULL, s));
    gdl_grad_scaler_free(NULL);
    /* out of order */
    ASSERT_EQ(-1, gdl_grad_scaler_unscale(s, opt));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_grad_scaler_scale first");
    ASSERT_EQ(-1, gdl_grad_scaler_update(s));
    gdl_arena_reset();
    ASSERT_EQ(0, gdl_zero_grad(opt));
    {
        gdl_tensor *ints = gdl_arange(3, GDL_I32, dev);
        gdl_tensor *r = gdl_grad_scaler_scale(s, ints);
        gdl_free(ints);
        ASSERT_NULL(r);
        ASSERT_CONTAINS(gdl_last_error(), "float");
    }
    ASSERT_EQ(0, gdl_backward(gdl_grad_scaler_scale(s, gs_loss(w))));
    ASSERT_EQ(-1, gdl_grad_scaler_update(s));
    ASSERT_CONTAINS(gdl_last_error(), "no optimizer was unscaled");
    ASSERT_EQ(0, gdl_grad_scaler_unscale(s, opt));
    ASSERT_EQ(0, gdl_copy_to_host(w->grad, before, sizeof before));
    ASSERT_EQ(-1, gdl_grad_scaler_unscale(s, opt));
    ASSERT_CONTAINS(gdl_last_error(), "already");
    ASSERT_EQ(0, gdl_copy_to_host(w->grad, after, sizeof after));
    ASSERT_EQ(0, memcmp(before, after, sizeof before)); /* the refused call changed nothing */
    ASSERT_EQ(0, gdl_grad_scaler_step(s, opt));
    ASSERT_EQ(-1, gdl_grad_scaler_step(s, opt));
    ASSERT_CONTAINS(gdl_last_error(), "already");
    ASSERT_EQ(-1, gdl_grad_scaler_unscale(s, opt));
    ASSERT_CONTAINS(gdl_last_error(), "after gdl_grad_scaler_step");
    ASSERT_EQ(0, gdl_grad_scaler_update(s));
    /* one scaler per optimizer */
    ASSERT_NOT_NULL(gdl_grad_scaler_scale(other, gs_loss(w)));
    ASSERT_EQ(-1, gdl_grad_scaler_unscale(other, opt));
    ASSERT_CONTAINS(gdl_last_error(), "another GradScaler");
    /* disabled: the identity, and gdl_step */
    o = gdl_grad_scaler_defaults();
    o.enabled = 0;
    ASSERT_NOT_NULL(off = gdl_grad_scaler_new(&o));
    {
        gdl_tensor *l = gs_loss(w);
        ASSERT(gdl_grad_scaler_scale(off, l) == l);
    }
    ASSERT_IN_RANGE(1.0, gdl_grad_scaler_get_scale(off), 0);
    ASSERT_EQ(0, gdl_grad_scaler_unscale(off, opt));
    ASSERT_EQ(0, gdl_grad_scaler_update(off));
    gdl_grad_scaler_free(off);
    gdl_grad_scaler_free(other);
    gdl_grad_scaler_free(s);
    gdl_optim_free(opt);
    gdl_free(w);
    gdl_arena_reset();
    PASS();
}

/* a parameter without a gradient (zero_grad set_to_none, unused) whose slot still holds an overflowed
   gradient of an earlier step: unscale skips its slot (the gradient range is cut there), so the step runs */
static enum harness_result gs_stale_slot_case(gdl_device dev) {
    static const float big[5] = {1e38f, 1e38f, 1e38f, 1e38f, 1e38f};
    gdl_tensor *p[3], *xb = gdl_from_array(big, GDL_DIMS(5), GDL_F32, dev);
    gdl_optimizer *opt = gdl_sgd_new(0.5, 0, 0, 0, 0);
    gdl_grad_scaler *s = gdl_grad_scaler_new(NULL);
    float a0[3], a1[3], c1[4];
    int i;
    p[0] = gdl_ones(GDL_DIMS(3), GDL_F32, dev);
    p[1] = gdl_ones(GDL_DIMS(5), GDL_F32, dev);
    p[2] = gdl_ones(GDL_DIMS(4), GDL_F32, dev);
    ASSERT(p[0] && p[1] && p[2] && xb && opt && s);
    for (i = 0; i < 3; i++) ASSERT_EQ(0, gdl_set_requires_grad(p[i], 1));
    ASSERT_EQ(0, gdl_optim_add_params(opt, p, 3, -1, -1));
    /* step 1: p[1]'s gradient overflows: skipped */
    gdl_arena_reset();
    ASSERT_EQ(0, gdl_zero_grad(opt));
    ASSERT_EQ(0, gdl_backward(gdl_grad_scaler_scale(
                     s, gdl_add(gdl_add(gdl_sum(p[0]), gdl_sum(gdl_mul(p[1], xb))), gdl_sum(p[2])))));
    ASSERT_EQ(0, gdl_grad_scaler_step(s, opt));
    ASSERT_EQ(0, gdl_grad_scaler_update(s));
    ASSERT_IN_RANGE(32768.0, gdl_grad_scaler_get_scale(s), 0);
    ASSERT_EQ(0, gdl_copy_to_host(p[0], a0, sizeof a0));
    ASSERT_IN_RANGE(1.0, a0[0], 0);
    /* step 2 without p[1] */
    gdl_arena_reset();
    ASSERT_EQ(0, gdl_zero_grad_ex(opt, 1));
    ASSERT_EQ(0, gdl_backward(gdl_grad_scaler_scale(s, gdl_add(gdl_sum(p[0]), gdl_sum(p[2])))));
    ASSERT_NULL(p[1]->grad);
    ASSERT_EQ(0, gdl_grad_scaler_step(s, opt));
    ASSERT_EQ(0, gdl_grad_scaler_update(s));
    ASSERT_EQ(1, gdl_grad_scaler_get_growth_tracker(s));
    ASSERT_EQ(0, gdl_copy_to_host(p[0], a1, sizeof a1));
    ASSERT_EQ(0, gdl_copy_to_host(p[2], c1, sizeof c1));
    ASSERT_IN_RANGE(0.5, a1[2], 0); /* 1 - 0.5 * 1 */
    ASSERT_IN_RANGE(0.5, c1[3], 0);
    gdl_grad_scaler_free(s);
    gdl_optim_free(opt);
    for (i = 0; i < 3; i++) gdl_free(p[i]);
    gdl_free(xb);
    gdl_arena_reset();
    PASS();
}

#endif
