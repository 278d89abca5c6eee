/* master_cases.h -- master weights (gdl_optim_set_master_weights) tests shared by
   the CPU suite (test_nn.c) and the GPU suite (test_cuda.c, on the emulator):
   each takes the device to run on. Include after gpudl.h and harness.h.
   * SGD (momentum, dampening, nesterov, weight decay), Adam and AdamW with bf16
     (and f16) parameters: over 20 steps the f32 masters, the state and the
     parameters equal a hand reference bit for bit (the f32 master updated by
     the f32 formula from the low gradient, the parameter the master rounded
     to nearest even), on sizes that take every path (CPU: one thread and
     the pool; GPU: one chunk, several, tails), with a parameter added later,
     lr changed on the way and master weights turned off at the end;
   * memory: the parameters' and gradients' bytes halve (counted);
   * an MLP trained 200 steps under bf16 autocast tracks the f32 run's loss,
     and its forward casts no parameter;
   * checkpoints: a resume is bit for bit, a plain f32 model loads the masters;
   * errors. */
#ifndef GPUDL_MASTER_CASES_H
#define GPUDL_MASTER_CASES_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    int kind; /* 0 SGD, 1 Adam, 2 AdamW */
    double lr, a, b, c, wd;
    int nesterov;
    gdl_dtype low;
} mw_kind;

static const mw_kind mw_kinds[] = {
    {"sgd_bf16", 0, 0.1, 0, 0, 0, 0, 0, GDL_BF16},
    {"sgd_momentum_dampening_wd_bf16", 0, 0.05, 0.9, 0.3, 0, 0.01, 0, GDL_BF16},
    {"sgd_nesterov_wd_bf16", 0, 0.05, 0.8, 0, 0, 0.02, 1, GDL_BF16},
    {"adam_l2_bf16", 1, 0.01, 0.9, 0.999, 1e-8, 0.05, 0, GDL_BF16},
    {"adamw_bf16", 2, 0.01, 0.9, 0.999, 1e-8, 0.1, 0, GDL_BF16},
    {"adamw_f16", 2, 0.01, 0.9, 0.99, 1e-6, 0.1, 0, GDL_F16},
};

static gdl_optimizer *mw_make_opt(const mw_kind *k) {
    if (k->kind == 0) return gdl_sgd_new(k->lr, k->a, k->b, k->wd, k->nesterov);
    if (k->kind == 1) return gdl_adam_new(k->lr, k->a, k->b, k->c, k->wd);
    return gdl_adamw_new(k->lr, k->a, k->b, k->c, k->wd);
}

static float mw_lowf(gdl_dtype dt, uint16_t h) { return dt == GDL_F16 ? gdl_f16_to_f32(h) : gdl_bf16_to_f32(h); }
static uint16_t mw_round(gdl_dtype dt, float f) { return dt == GDL_F16 ? gdl_f32_to_f16(f) : gdl_f32_to_bf16(f); }

/* One step of the reference on an f32 master (double per element, float storage: the kernels' arithmetic). */
static void mw_ref_step(const mw_kind *k, double lr, double wd, int64_t n, float *p, const float *g, float *s1,
                        float *s2, int step) {
    int64_t i;
    if (k->kind == 0) {
        for (i = 0; i < n; i++) {
            double d = g[i] + wd * p[i];
            if (k->a != 0) {
                double b = step == 0 ? d : k->a * s1[i] + (1 - k->b) * d;
                s1[i] = (float)b;
                d = k->nesterov ? d + k->a * b : b;
            }
            p[i] = (float)(p[i] - lr * d);
        }
    } else {
        double t = (double)(step + 1), bc1 = 1 - pow(k->a, t), bc2 = 1 - pow(k->b, t);
        for (i = 0; i < n; i++) {
            double gi = g[i], pi = p[i];
            if (k->kind == 2) pi -= lr * wd * pi;
            else gi += wd * pi;
            s1[i] = (float)(k->a * s1[i] + (1 - k->a) * gi);
            s2[i] = (float)(k->b * s2[i] + (1 - k->b) * gi * gi);
            p[i] = (float)(pi - lr * (s1[i] / bc1) / (sqrt(s2[i] / bc2) + k->c));
        }
    }
}

/* state tensor `suffix` ("exp_avg", ...) of parameter j from gdl_optim_state, NULL if none */
static gdl_tensor *mw_state(gdl_optimizer *opt, int j, const char *suffix) {
    const char *names[64];
    gdl_tensor *ts[64];
    char want[48];
    int n = gdl_optim_state(opt, names, ts, 64), i;
    snprintf(want, sizeof want, "state.%d.%s", j, suffix);
    for (i = 0; i < n && i < 64; i++)
        if (!strcmp(names[i], want)) return ts[i];
    return NULL;
}

#define MW_NP 5
#define MW_STEPS 20
/* sizes: short (one GPU block, the CPU's scalar tail), mid, odd, one past the CPU pool's threshold (32768) and
   many GPU chunks of 2048, and a parameter added at step 8 (f32, converted at the optimizer's next use) */
static enum harness_result mw_bitwise_case(gdl_device dev, const mw_kind *k) {
    static const int64_t sizes[MW_NP] = {5, 1500, 37, 40003, 64};
    gdl_tensor *p[MW_NP];
    float *rm[MW_NP], *rs1[MW_NP], *rs2[MW_NP], *gf, *got;
    uint16_t *gh, *goth;
    int j, s, np = 4, rstep[MW_NP] = {0};
    double lr0 = k->lr, lr1 = 0.03;
    gdl_optimizer *opt = mw_make_opt(k);
    enum harness_result rc = HARNESS_PASS;
    ASSERT_NOT_NULL(opt);
    gf = (float *)malloc(sizeof(float) * 40003);
    got = (float *)malloc(sizeof(float) * 40003);
    gh = (uint16_t *)malloc(sizeof(uint16_t) * 40003);
    goth = (uint16_t *)malloc(sizeof(uint16_t) * 40003);
    ASSERT(gf && got && gh && goth);
    gdl_manual_seed(11);
    for (j = 0; j < MW_NP; j++) {
        gdl_tensor *h = gdl_randn(1, &sizes[j], gdl_cpu());
        ASSERT_NOT_NULL(h);
        ASSERT_NOT_NULL(p[j] = gdl_to(h, dev));
        gdl_free(h);
        ASSERT_EQ(0, gdl_set_requires_grad(p[j], 1));
        rm[j] = (float *)calloc((size_t)sizes[j], sizeof(float));
        rs1[j] = (float *)calloc((size_t)sizes[j], sizeof(float));
        rs2[j] = (float *)calloc((size_t)sizes[j], sizeof(float));
        ASSERT(rm[j] && rs1[j] && rs2[j]);
        ASSERT_EQ(0, gdl_copy_to_host(p[j], rm[j], sizeof(float) * (size_t)sizes[j]));
    }
    ASSERT_EQ(0, gdl_optim_add_params(opt, p, 4, -1, -1));
    ASSERT_EQ(0, gdl_optim_set_master_weights(opt, k->low));
    ASSERT_EQ(k->low, gdl_optim_master_weights(opt));
    for (j = 0; j < 4; j++) { /* at once: the parameters are the masters rounded */
        int64_t i;
        ASSERT_EQ(k->low, p[j]->dtype);
        ASSERT_EQ(0, gdl_copy_to_host(p[j], goth, 2 * (size_t)sizes[j]));
        for (i = 0; i < sizes[j]; i++) ASSERT_EQ(mw_round(k->low, rm[j][i]), goth[i]);
    }
    for (s = 0; s < MW_STEPS && rc == HARNESS_PASS; s++) {
        gdl_tensor *loss = NULL, *c[MW_NP];
        if (s == 8) {
            ASSERT_EQ(1, gdl_optim_add_params(opt, &p[4], 1, lr1, 0));
            np = 5;
        }
        if (s == 12) {
            ASSERT_EQ(0, gdl_optim_set_lr(opt, 0, 0.5 * k->lr));
            lr0 = 0.5 * k->lr;
        }
        gdl_arena_reset();
        ASSERT_EQ(0, gdl_zero_grad_ex(opt, s % 5 == 4));
        for (j = 0; j < np; j++) { /* loss = sum p*c: the gradient of p is c (dtype low), exactly */
            int64_t i;
            for (i = 0; i < sizes[j]; i++) gh[i] = mw_round(k->low, (float)(gdl_rng_uniform() - 0.5));
            ASSERT_NOT_NULL(c[j] = gdl_from_array(gh, 1, &sizes[j], k->low, dev));
            ASSERT_EQ(k->low, p[j]->dtype);
            loss = loss ? gdl_add(loss, gdl_sum(gdl_mul(p[j], c[j]))) : gdl_sum(gdl_mul(p[j], c[j]));
            ASSERT_NOT_NULL(loss);
        }
        ASSERT_EQ(0, gdl_backward(loss));
        ASSERT_EQ(0, gdl_step(opt));
        for (j = 0; j < np && rc == HARNESS_PASS; j++) {
            int64_t i;
            gdl_tensor *m = gdl_optim_master_weight(opt, j), *s1;
            ASSERT_NOT_NULL(m);
            ASSERT_EQ(GDL_F32, m->dtype);
            ASSERT_NOT_NULL(p[j]->grad);
            ASSERT_EQ(k->low, p[j]->grad->dtype);
            ASSERT_EQ(0, gdl_copy_to_host(c[j], gh, 2 * (size_t)sizes[j]));
            for (i = 0; i < sizes[j]; i++) gf[i] = mw_lowf(k->low, gh[i]);
            mw_ref_step(k, j == 4 ? lr1 : lr0, j == 4 ? 0 : k->wd, sizes[j], rm[j], gf, rs1[j], rs2[j], rstep[j]);
            if (k->kind != 0 || k->a != 0) rstep[j]++;
            ASSERT_EQ(0, gdl_copy_to_host(m, got, sizeof(float) * (size_t)sizes[j]));
            if (memcmp(got, rm[j], sizeof(float) * (size_t)sizes[j]))
                FAILf("%s on %s, step %d: the master of parameter %d differs from the reference's bits", k->name,
                      gdl_device_str(dev), s, j);
            ASSERT_EQ(0, gdl_copy_to_host(p[j], goth, 2 * (size_t)sizes[j]));
            for (i = 0; i < sizes[j]; i++)
                if (goth[i] != mw_round(k->low, rm[j][i]))
                    FAILf("%s on %s, step %d: parameter %d[%lld] is 0x%04x, not its master rounded 0x%04x", k->name,
                          gdl_device_str(dev), s, j, (long long)i, goth[i], mw_round(k->low, rm[j][i]));
            if ((s1 = mw_state(opt, j, k->kind == 0 ? "momentum_buffer" : "exp_avg")) != NULL) {
                ASSERT_EQ(0, gdl_copy_to_host(s1, got, sizeof(float) * (size_t)sizes[j]));
                ASSERTm("state (f32) bitwise", !memcmp(got, rs1[j], sizeof(float) * (size_t)sizes[j]));
            }
        }
        for (j = 0; j < np; j++) gdl_free(c[j]);
    }
    /* the gradients in one region of half the f32 one: slot j's grad mirrors its parameter */
    {
        ptrdiff_t region = (char *)p[0]->grad->data - (char *)p[0]->data, off = 0;
        for (j = 0; j < np; j++) {
            ASSERT_EQ(off, (char *)p[j]->data - (char *)p[0]->data);
            ASSERT_EQ(off + region, (char *)p[j]->grad->data - (char *)p[0]->data);
            off += (ptrdiff_t)((sizes[j] * 2 + 63) / 64 * 64);
        }
        ASSERT_EQ(off, region);
    }
    /* off: the parameters are f32 again, their masters' values, and train on as f32 with the same state */
    ASSERT_EQ(0, gdl_optim_set_master_weights(opt, GDL_F32));
    ASSERT_NULL(gdl_optim_master_weight(opt, 0));
    for (j = 0; j < np; j++) {
        ASSERT_EQ(GDL_F32, p[j]->dtype);
        ASSERT_EQ(0, gdl_copy_to_host(p[j], got, sizeof(float) * (size_t)sizes[j]));
        ASSERTm("f32 again: the master's bits", !memcmp(got, rm[j], sizeof(float) * (size_t)sizes[j]));
    }
    {
        gdl_tensor *loss = NULL, *c[MW_NP];
        gdl_arena_reset();
        ASSERT_EQ(0, gdl_zero_grad(opt));
        for (j = 0; j < np; j++) {
            int64_t i;
            for (i = 0; i < sizes[j]; i++) gf[i] = (float)(gdl_rng_uniform() - 0.5);
            ASSERT_NOT_NULL(c[j] = gdl_from_array(gf, 1, &sizes[j], GDL_F32, dev));
            loss = loss ? gdl_add(loss, gdl_sum(gdl_mul(p[j], c[j]))) : gdl_sum(gdl_mul(p[j], c[j]));
        }
        ASSERT_EQ(0, gdl_backward(loss));
        ASSERT_EQ(GDL_F32, p[0]->grad->dtype);
        ASSERT_EQ(0, gdl_step(opt));
        for (j = 0; j < np; j++) {
            ASSERT_EQ(0, gdl_copy_to_host(c[j], gf, sizeof(float) * (size_t)sizes[j]));
            mw_ref_step(k, j == 4 ? lr1 : lr0, j == 4 ? 0 : k->wd, sizes[j], rm[j], gf, rs1[j], rs2[j], rstep[j]);
            ASSERT_EQ(0, gdl_copy_to_host(p[j], got, sizeof(float) * (size_t)sizes[j]));
            ASSERTm("f32 step after master weights: bitwise", !memcmp(got, rm[j], sizeof(float) * (size_t)sizes[j]));
            gdl_free(c[j]);
        }
    }
    gdl_optim_free(opt);
    for (j = 0; j < MW_NP; j++) {
        gdl_free(p[j]);
        free(rm[j]);
        free(rs1[j]);
        free(rs2[j]);
    }
    free(gf);
    free(got);
    free(gh);
    free(goth);
    return rc;
}

/* Parameter and gradient bytes, f32 vs bf16 with masters, counted from the tensors and the block's layout. */
static enum harness_result mw_memory_case(gdl_device dev) {
    static const int64_t sizes[3] = {32, 4096, 96}; /* whole 64-byte slots in both dtypes: an exact half */
    int64_t bytes[2] = {0, 0}, gap[2] = {0, 0};
    int mode, j;
    for (mode = 0; mode < 2; mode++) {
        gdl_tensor *p[3], *loss = NULL;
        gdl_optimizer *opt = gdl_adamw_new(1e-3, 0.9, 0.999, 1e-8, 0.01);
        ASSERT_NOT_NULL(opt);
        for (j = 0; j < 3; j++) {
            ASSERT_NOT_NULL(p[j] = gdl_ones(1, &sizes[j], GDL_F32, dev));
            ASSERT_EQ(0, gdl_set_requires_grad(p[j], 1));
        }
        ASSERT_EQ(0, gdl_optim_add_params(opt, p, 3, -1, -1));
        if (mode) ASSERT_EQ(0, gdl_optim_set_master_weights(opt, GDL_BF16));
        gdl_arena_reset();
        ASSERT_EQ(0, gdl_zero_grad(opt));
        for (j = 0; j < 3; j++) loss = loss ? gdl_add(loss, gdl_sum(p[j])) : gdl_sum(p[j]);
        ASSERT_EQ(0, gdl_backward(loss));
        ASSERT_EQ(0, gdl_step(opt));
        for (j = 0; j < 3; j++)
            bytes[mode] += p[j]->numel * (int64_t)gdl_dtype_size(p[j]->dtype) +
                           p[j]->grad->numel * (int64_t)gdl_dtype_size(p[j]->grad->dtype);
        gap[mode] = (int64_t)((char *)p[0]->grad->data - (char *)p[0]->data); /* the parameter region */
        gdl_optim_free(opt);
        for (j = 0; j < 3; j++) gdl_free(p[j]);
    }
    ASSERT_EQ(bytes[0], 2 * bytes[1]);
    ASSERT_EQ(gap[0], 2 * gap[1]);
    ASSERT_EQ((int64_t)(4096 + 32 + 96) * 4 * 2, bytes[0]);
    PASS();
}

/* An MLP on a fixed regression-to-classes task, 200 steps of AdamW under bf16 autocast: f32 parameters (cast
   each step) vs bf16 parameters with f32 masters (no cast). Returns the two last losses and the casts per step. */
static enum harness_result mw_mlp_run(gdl_device dev, int master, int steps, double *first, double *last,
                                      int64_t *casts_per_step) {
    int64_t xs[2] = {64, 16}, n = 64;
    gdl_module *m;
    gdl_optimizer *opt;
    gdl_tensor *x, *xh, *y;
    int32_t lab[64];
    int s, i;
    int64_t c0, h0, c1, h1;
    gdl_manual_seed(3);
    m = gdl_nn_sequential(5, (gdl_module *[]){gdl_nn_linear(16, 64, 1), gdl_nn_relu(), gdl_nn_linear(64, 64, 1),
                                              gdl_nn_relu(), gdl_nn_linear(64, 4, 1)});
    ASSERT_NOT_NULL(m);
    ASSERT_EQ(0, gdl_module_to(m, dev));
    ASSERT_NOT_NULL(xh = gdl_randn(2, xs, gdl_cpu()));
    for (i = 0; i < 64; i++) { /* the class: the sign pattern of two inputs */
        const float *r = (const float *)xh->data + 16 * i;
        lab[i] = (r[0] > 0) + 2 * (r[1] > 0);
    }
    ASSERT_NOT_NULL(x = gdl_to(xh, dev));
    ASSERT_NOT_NULL(y = gdl_from_array(lab, 1, &n, GDL_I32, dev));
    ASSERT_NOT_NULL(opt = gdl_adamw_new(1e-3, 0.9, 0.999, 1e-8, 0.01));
    ASSERT_EQ(0, gdl_optim_add_module(opt, m, 0));
    if (master) ASSERT_EQ(0, gdl_optim_set_master_weights(opt, GDL_BF16));
    gdl_autocast_stats(&c0, &h0);
    for (s = 0; s < steps; s++) {
        gdl_tensor *loss;
        gdl_arena_reset();
        ASSERT_EQ(0, gdl_zero_grad(opt));
        ASSERT_EQ(0, gdl_autocast_begin(GDL_BF16));
        loss = gdl_cross_entropy(gdl_forward(m, x), y);
        ASSERT_EQ(0, gdl_autocast_end());
        ASSERT_NOT_NULL(loss);
        ASSERT_EQ(0, gdl_backward(loss));
        ASSERT_EQ(0, gdl_step(opt));
        if (s == 0) *first = gdl_item(loss);
        if (s == steps - 1) *last = gdl_item(loss);
    }
    gdl_autocast_stats(&c1, &h1);
    *casts_per_step = (c1 - c0) / steps;
    ASSERT_EQ(0, (c1 - c0) % steps);
    gdl_optim_free(opt);
    gdl_module_free(m);
    gdl_free(x);
    gdl_free(xh);
    gdl_free(y);
    PASS();
}

/* steps: 200 on the CPU; fewer on the emulator, whose kernels the bitwise cases check */
static enum harness_result mw_mlp_case(gdl_device dev, int steps) {
    double f0, l0, f1, l1, learnt = steps >= 200 ? 0.5 : 0.8;
    int64_t c_f32, c_mw;
    CHECK_CALL(mw_mlp_run(dev, 0, steps, &f0, &l0, &c_f32));
    CHECK_CALL(mw_mlp_run(dev, 1, steps, &f1, &l1, &c_mw));
    printf("    MLP %d steps under bf16 autocast on %s: loss %.5f -> %.5f (f32 params), %.5f -> %.5f (bf16 + f32 "
           "masters); casts per step %lld vs %lld\n", steps, gdl_device_str(dev), f0, l0, f1, l1, (long long)c_f32,
           (long long)c_mw);
    ASSERT_IN_RANGE(f0, f1, 0.02);          /* the same start, up to the parameters' rounding */
    ASSERT_LT(l0, learnt * f0);              /* both learn ... */
    ASSERT_LT(l1, learnt * f1);
    ASSERT_IN_RANGE(l0, l1, 0.05 + 0.1 * l0); /* ... and the same way */
    /* in fact bit for bit: under autocast each f32 weight's gradient arrives through its bf16 cast (so it is a
       bf16 value widened), the forward reads round(f32 weight), and the f32 optimizer's update of it is the
       master's: the two runs are the same computation */
    /* (on the CPU and the emulator; a real GPU's cuBLAS may pick other kernels for the differently aligned
       operands of the two runs, flat slots against arena casts, so there the tolerance above stands) */
#ifndef GPUDL_EMU
    if (dev.type == GDL_DEVICE_CPU)
#endif
        if (memcmp(&l0, &l1, sizeof l0)) FAILf("last losses %a (f32 parameters) and %a (master weights) differ", l0, l1);
    ASSERT_EQ(c_f32 - 6, c_mw);              /* the 6 weights and biases are not cast */
    PASS();
}

/* 4 steps, a checkpoint, 4 more; a fresh model and optimizer (master weights) loaded from it repeat the 4 steps bit
   for bit; a plain f32 model and optimizer load the masters as their parameters. */
static int mw_ckpt_steps(gdl_module *m, gdl_optimizer *opt, gdl_tensor *x, gdl_tensor *y, int n) {
    int s;
    for (s = 0; s < n; s++) {
        gdl_tensor *loss;
        gdl_arena_reset();
        if (gdl_zero_grad(opt) < 0 || gdl_autocast_begin(GDL_BF16) < 0) return -1;
        loss = gdl_cross_entropy(gdl_forward(m, x), y);
        gdl_autocast_end();
        if (!loss || gdl_backward(loss) < 0 || gdl_step(opt) < 0) return -1;
    }
    return 0;
}
static gdl_module *mw_ckpt_model(gdl_device dev, uint64_t seed) {
    gdl_module *m;
    gdl_manual_seed(seed);
    m = gdl_nn_sequential(3, (gdl_module *[]){gdl_nn_linear(8, 32, 1), gdl_nn_gelu(0), gdl_nn_linear(32, 3, 1)});
    if (m && gdl_module_to(m, dev) < 0) {
        gdl_module_free(m);
        return NULL;
    }
    return m;
}
static enum harness_result mw_checkpoint_case(gdl_device dev, const char *path) {
    int64_t xs[2] = {16, 8}, n = 16;
    int32_t lab[16];
    gdl_tensor *xh, *x, *y, *wa[4], *wb[4], *ma, *mb;
    gdl_module *a = mw_ckpt_model(dev, 1), *b = mw_ckpt_model(dev, 2), *c = mw_ckpt_model(dev, 3);
    gdl_optimizer *oa = gdl_adamw_new(1e-2, 0.9, 0.999, 1e-8, 0.01), *ob = gdl_adamw_new(1e-2, 0.9, 0.999, 1e-8, 0.01);
    gdl_optimizer *oc = gdl_adamw_new(1e-2, 0.9, 0.999, 1e-8, 0.01);
    int i, k;
    ASSERT(a && b && c && oa && ob && oc);
    ASSERT_NOT_NULL(xh = gdl_randn(2, xs, gdl_cpu()));
    for (i = 0; i < 16; i++) lab[i] = i % 3;
    ASSERT_NOT_NULL(x = gdl_to(xh, dev));
    ASSERT_NOT_NULL(y = gdl_from_array(lab, 1, &n, GDL_I32, dev));
    ASSERT_EQ(0, gdl_optim_add_module(oa, a, 0)); /* one group: optimizer index = module order */
    ASSERT_EQ(0, gdl_optim_add_module(ob, b, 0)); /* one group: optimizer index = module order */
    ASSERT_EQ(0, gdl_optim_add_module(oc, c, 0)); /* one group: optimizer index = module order */
    ASSERT_EQ(0, gdl_optim_set_master_weights(oa, GDL_BF16));
    ASSERT_EQ(0, gdl_optim_set_master_weights(ob, GDL_BF16));
    ASSERT_EQ(0, mw_ckpt_steps(a, oa, x, y, 4));
    ASSERT_EQ(0, gdl_checkpoint_save(a, oa, NULL, 0, path));
    ASSERT_EQ(4, gdl_module_named_tensors(a, GDL_PARAMS, NULL, wa, 4));
    ASSERT_EQ(4, gdl_module_named_tensors(c, GDL_PARAMS, NULL, wb, 4));
    /* the plain f32 model takes the masters as its parameters */
    ASSERT_EQ(0, gdl_checkpoint_load(c, oc, NULL, NULL, path));
    for (k = 0; k < 4; k++) {
        float fa[256], fc[256];
        ASSERT_EQ(GDL_F32, wb[k]->dtype);
        ASSERT_NOT_NULL(ma = gdl_optim_master_weight(oa, k));
        ASSERT_EQ(0, gdl_copy_to_host(ma, fa, sizeof(float) * (size_t)ma->numel));
        ASSERT_EQ(0, gdl_copy_to_host(wb[k], fc, sizeof(float) * (size_t)ma->numel));
        ASSERTm("a plain f32 model loads the masters", !memcmp(fa, fc, sizeof(float) * (size_t)ma->numel));
    }
    ASSERT_EQ(0, mw_ckpt_steps(a, oa, x, y, 4));
    ASSERT_EQ(0, gdl_checkpoint_load(b, ob, NULL, NULL, path));
    ASSERT_EQ(0, mw_ckpt_steps(b, ob, x, y, 4));
    ASSERT_EQ(4, gdl_module_named_tensors(b, GDL_PARAMS, NULL, wb, 4));
    for (k = 0; k < 4; k++) {
        uint16_t ha[256], hb[256];
        float fa[256], fb[256];
        ASSERT_EQ(GDL_BF16, wb[k]->dtype);
        ASSERT_EQ(0, gdl_copy_to_host(wa[k], ha, 2 * (size_t)wa[k]->numel));
        ASSERT_EQ(0, gdl_copy_to_host(wb[k], hb, 2 * (size_t)wb[k]->numel));
        ASSERTm("resumed parameters bitwise", !memcmp(ha, hb, 2 * (size_t)wa[k]->numel));
        ASSERT_NOT_NULL(ma = gdl_optim_master_weight(oa, k));
        ASSERT_NOT_NULL(mb = gdl_optim_master_weight(ob, k));
        ASSERT_EQ(0, gdl_copy_to_host(ma, fa, sizeof(float) * (size_t)ma->numel));
        ASSERT_EQ(0, gdl_copy_to_host(mb, fb, sizeof(float) * (size_t)mb->numel));
        ASSERTm("resumed masters bitwise", !memcmp(fa, fb, sizeof(float) * (size_t)ma->numel));
    }
    /* a model file of the bf16 parameters (gdl_save_model, widened to f32) loads back into them exactly */
    {
        char mpath[512];
        uint16_t before[256], after[256];
        snprintf(mpath, sizeof mpath, "%s.model", path);
        ASSERT_EQ(0, gdl_save_model(a, mpath));
        ASSERT_EQ(0, gdl_copy_to_host(wa[0], before, 2 * (size_t)wa[0]->numel));
        ASSERT_EQ(0, gdl_load_model(b, mpath));
        ASSERT_EQ(0, gdl_copy_to_host(wb[0], after, 2 * (size_t)wb[0]->numel));
        ASSERT(!memcmp(before, after, 2 * (size_t)wa[0]->numel));
        remove(mpath);
    }
    remove(path);
    gdl_optim_free(oa);
    gdl_optim_free(ob);
    gdl_optim_free(oc);
    gdl_module_free(a);
    gdl_module_free(b);
    gdl_module_free(c);
    gdl_free(x);
    gdl_free(xh);
    gdl_free(y);
    PASS();
}

/* NaN, infinities and values that round to infinity: each parameter is its master rounded as gdl_f32_to_bf16
   rounds (a quiet NaN kept a NaN), in the vector body and the tail of the loops */
static enum harness_result mw_special_values_run(gdl_device dev, int adam) {
    int64_t n = 45, i;
    float v[45], got[45];
    uint16_t gh[45], ph[45];
    gdl_tensor *p, *c, *m, *loss;
    gdl_optimizer *opt = adam ? gdl_adamw_new(1e-3, 0.9, 0.999, 1e-8, 0.01) : gdl_sgd_new(1.0, 0, 0, 0, 0);
    ASSERT_NOT_NULL(opt);
    for (i = 0; i < n; i++) {
        v[i] = (float)(i - 20) * 0.37f;
        gh[i] = gdl_f32_to_bf16((float)(i % 7) - 3.0f);
    }
    v[3] = 3.4e38f; /* rounds up to inf in bf16 */
    v[40] = -3.4e38f;
    v[41] = 1e-40f;    /* subnormal */
    gh[5] = 0x7fc1;    /* NaN */
    gh[6] = 0x7f80;    /* inf */
    gh[42] = 0xff80;   /* -inf */
    gh[43] = 0x7f81;   /* signalling NaN */
    gh[3] = gh[40] = gh[41] = 0;
    ASSERT_NOT_NULL(p = gdl_from_array(v, 1, &n, GDL_F32, dev));
    ASSERT_EQ(0, gdl_set_requires_grad(p, 1));
    ASSERT_EQ(0, gdl_optim_add_params(opt, &p, 1, -1, -1));
    ASSERT_EQ(0, gdl_optim_set_master_weights(opt, GDL_BF16));
    ASSERT_NOT_NULL(c = gdl_from_array(gh, 1, &n, GDL_BF16, dev));
    gdl_arena_reset();
    ASSERT_EQ(0, gdl_zero_grad(opt));
    ASSERT_NOT_NULL(loss = gdl_sum(gdl_mul(p, c)));
    ASSERT_EQ(0, gdl_backward(loss));
    ASSERT_EQ(0, gdl_step(opt));
    ASSERT_NOT_NULL(m = gdl_optim_master_weight(opt, 0));
    ASSERT_EQ(0, gdl_copy_to_host(m, got, sizeof got));
    ASSERT_EQ(0, gdl_copy_to_host(p, ph, sizeof ph));
    for (i = 0; i < n; i++)
        if (ph[i] != gdl_f32_to_bf16(got[i]))
            FAILf("element %lld: master %a rounds to 0x%04x, the parameter is 0x%04x", (long long)i, (double)got[i],
                  gdl_f32_to_bf16(got[i]), ph[i]);
    ASSERT(got[5] != got[5]);
    ASSERT_EQ(0x7f80, ph[3]);
    ASSERT_EQ(0xff80, ph[40]);
    gdl_optim_free(opt);
    gdl_free(p);
    gdl_free(c);
    PASS();
}
static enum harness_result mw_special_values_case(gdl_device dev) {
    CHECK_CALL(mw_special_values_run(dev, 0)); /* SGD */
    CHECK_CALL(mw_special_values_run(dev, 1)); /* AdamW (the CPU's vector loop) */
    PASS();
}

static enum harness_result mw_errors_case(gdl_device dev) {
    int64_t n = 8;
    gdl_tensor *p = gdl_ones(1, &n, GDL_F32, dev), *q = gdl_ones(1, &n, GDL_BF16, dev), *loss;
    gdl_optimizer *opt = gdl_sgd_new(0.1, 0, 0, 0, 0), *o2 = gdl_sgd_new(0.1, 0, 0, 0, 0);
    gdl_grad_scaler *sc = gdl_grad_scaler_new(NULL);
    ASSERT(p && q && opt && o2 && sc);
    ASSERT_EQ(0, gdl_set_requires_grad(p, 1));
    ASSERT_EQ(0, gdl_set_requires_grad(q, 1));
    ASSERT_EQ(-1, gdl_optim_set_master_weights(NULL, GDL_BF16));
    ASSERT_EQ(-1, gdl_optim_set_master_weights(opt, GDL_I32));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_optim_set_master_weights");
    ASSERT_CONTAINS(gdl_last_error(), "i32");
    ASSERT_NULL(gdl_optim_master_weight(opt, 0));
    ASSERT_CONTAINS(gdl_last_error(), "out of range");
    /* a bf16 parameter needs master weights of its dtype */
    ASSERT_EQ(-1, gdl_optim_add_params(opt, &q, 1, -1, -1));
    ASSERT_CONTAINS(gdl_last_error(), "bf16");
    ASSERT_EQ(0, gdl_optim_add_params(opt, &p, 1, -1, -1));
    ASSERT_NULL(gdl_optim_master_weight(opt, 0));
    ASSERT_CONTAINS(gdl_last_error(), "no master weights");
    ASSERT_EQ(0, gdl_optim_set_master_weights(opt, GDL_BF16));
    ASSERT_EQ(0, gdl_optim_set_master_weights(opt, GDL_BF16)); /* again: nothing to do */
    ASSERT_EQ(0, gdl_optim_set_master_weights(o2, GDL_BF16));
    ASSERT_EQ(0, gdl_optim_add_params(o2, &q, 1, -1, -1));      /* ... and then it is welcome */
    gdl_arena_reset();
    ASSERT_EQ(0, gdl_zero_grad(opt));
    ASSERT_NOT_NULL(loss = gdl_sum(p));
    ASSERT_EQ(0, gdl_backward(loss));
    /* clipping and the GradScaler take f32 gradients: refused, naming the dtype */
    ASSERT_EQ(-1, gdl_optim_clip_grad_norm(opt, 1.0));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_optim_clip_grad_norm");
    ASSERT_CONTAINS(gdl_last_error(), "bf16");
    ASSERT_EQ(-1, gdl_clip_grad_norm(&p, 1, 1.0));
    ASSERT_CONTAINS(gdl_last_error(), "bf16 gradient");
    ASSERT_NOT_NULL(gdl_grad_scaler_scale(sc, loss));
    ASSERT_EQ(-1, gdl_grad_scaler_unscale(sc, opt)); /* it attaches itself to opt: refused there */
    ASSERT_CONTAINS(gdl_last_error(), "gradients are bf16");
    ASSERT_EQ(-1, gdl_optim_set_grad_scaler(opt, sc));
    ASSERT_CONTAINS(gdl_last_error(), "f32 master weights");
    ASSERT_EQ(0, gdl_optim_set_master_weights(opt, GDL_F32));
    ASSERT_EQ(0, gdl_optim_set_grad_scaler(opt, sc));
    ASSERT_EQ(-1, gdl_optim_set_master_weights(opt, GDL_BF16));
    ASSERT_CONTAINS(gdl_last_error(), "GradScaler");
    ASSERT_EQ(GDL_F32, p->dtype);
    ASSERT_EQ(0, gdl_optim_set_grad_scaler(opt, NULL));
    /* a gradient of another dtype than its parameter: the step names both */
    ASSERT_EQ(0, gdl_optim_set_master_weights(opt, GDL_BF16));
    ASSERT_EQ(0, gdl_zero_grad_ex(opt, 1)); /* drops the grad, which is p's (gdl_free refuses it) */
    ASSERT_NOT_NULL(p->grad = gdl_zeros(1, &n, GDL_F32, dev));
    ASSERT_EQ(-1, gdl_step(opt));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_step");
    ASSERT_CONTAINS(gdl_last_error(), "bf16");
    ASSERT_CONTAINS(gdl_last_error(), "f32");
    gdl_optim_free(opt);
    gdl_optim_free(o2);
    gdl_grad_scaler_free(sc);
    gdl_free(p);
    gdl_free(q);
    PASS();
}

#endif
