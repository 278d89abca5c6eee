/* fusion_cases.h -- the fused bias + activation ops at the module level, shared
   by the CPU suite (test_nn.c) and the GPU suite (test_cuda.c, on the
   emulator): each case takes the device to run on. Include after gpudl.h and
   harness.h.
   * a Sequential MLP (Linear+ReLU, Linear+GELU tanh, Linear+GELU erf), a
     CNN (Conv2d+ReLU twice, pooling, Linear) and a small ResNet (BatchNorm2d
     +ReLU, two BasicBlocks, BatchNorm1d+ReLU) trained 20 steps with fusion on
     and off (gdl_nn_set_fusion) give the same losses, outputs, gradients and
     weights bit for bit; the sizes take the threaded CPU loops and, on a GPU,
     cuBLASLt's epilogues and both bias-gradient reductions;
   * the fused op is what runs, and is not used where the module layer must
     not fuse (fusion off, anomaly mode, autocast, a non-f32 parameter);
   * batch norm + ReLU / GELU fused is bitwise the two ops;
   * gdl_linear_act / gdl_conv2d_act / gdl_batch_norm_relu / _act's errors name the
     op, shapes, dtypes. */
#ifndef GPUDL_FUSION_CASES_H
#define GPUDL_FUSION_CASES_H

#include <math.h>
#include <string.h>

#define FZ_STEPS 20

/* big (the CPU): past the threaded loops' threshold; else (a GPU, on the emulator) smaller, still with 70+ rows
   and 132 pixels (the block-per-output bias reduction), GELU tanh with 40 outputs (cuBLASLt's GELU_AUX) and 20
   (aux ld not divisible by 8: the GEMM + one pass) */
static gdl_module *fz_mlp(int big) {
    gdl_manual_seed(11);
    return gdl_nn_sequential(9, (gdl_module *[]){gdl_nn_linear(37, big ? 300 : 64, 1), gdl_nn_relu(),
                                                 gdl_nn_linear(big ? 300 : 64, 40, 1), gdl_nn_gelu(1),
                                                 gdl_nn_linear(40, 20, 1), gdl_nn_gelu(1), gdl_nn_linear(20, 12, 1),
                                                 gdl_nn_gelu(0), gdl_nn_linear(12, 10, 1)});
}

static gdl_module *fz_cnn(int big) {
    int c = big ? 24 : 8;
    gdl_manual_seed(12);
    return gdl_nn_sequential(7, (gdl_module *[]){gdl_nn_conv2d(3, c, 3, 1, 1, 1, 1, 1), gdl_nn_relu(),
                                                 gdl_nn_maxpool2d(2, 0, 0), gdl_nn_conv2d(c, 6, 3, 1, 0, 1, 1, 1),
                                                 gdl_nn_relu(), gdl_nn_flatten(1), gdl_nn_linear(72, 10, 1)});
}

/* BatchNorm + ReLU in a Sequential and in a BasicBlock (bn1 and its ReLU), with both shortcuts; big: 16
   channels, 132 pixels a sample (the CPU's vector lanes and a tail) */
static gdl_module *fz_resnet(int big) {
    int c = big ? 16 : 4;
    gdl_manual_seed(14);
    return gdl_nn_sequential(10, (gdl_module *[]){gdl_nn_conv2d(3, c, 3, 1, 1, 1, 1, 0), gdl_nn_batchnorm2d(c),
                                                  gdl_nn_relu(), gdl_nn_basic_block(c, c, 1),
                                                  gdl_nn_basic_block(c, 2 * c, 2), gdl_nn_global_avgpool2d(),
                                                  gdl_nn_flatten(1), gdl_nn_batchnorm1d(2 * c), gdl_nn_relu(),
                                                  gdl_nn_linear(2 * c, 10, 1)});
}

/* BatchNorm + GELU (erf) as the speedrun has them: after a pooled conv, after a conv, and BatchNorm1d
   after the global pooling; big: 16 channels (the CPU's blocks of 8 in [N, C]), 30 pixels a sample */
static gdl_module *fz_bn_gelu_cnn(int big) {
    int c = big ? 16 : 4;
    gdl_manual_seed(15);
    return gdl_nn_sequential(12, (gdl_module *[]){gdl_nn_conv2d(3, c, 3, 1, 1, 1, 1, 0), gdl_nn_maxpool2d(2, 0, 0),
                                                  gdl_nn_batchnorm2d(c), gdl_nn_gelu(0),
                                                  gdl_nn_conv2d(c, c, 3, 1, 1, 1, 1, 0), gdl_nn_batchnorm2d(c),
                                                  gdl_nn_gelu(0), gdl_nn_global_avgpool2d(), gdl_nn_flatten(1),
                                                  gdl_nn_batchnorm1d(c), gdl_nn_gelu(0), gdl_nn_linear(c, 10, 1)});
}

/* appends t's bytes (copied to the host) to *buf */
static int fz_append(unsigned char **buf, size_t *len, gdl_tensor *t) {
    gdl_tensor *h = t ? gdl_to(t, gdl_cpu()) : NULL;
    size_t n;
    unsigned char *nb;
    if (!h) return -1;
    n = (size_t)h->numel * gdl_dtype_size(h->dtype);
    if (!(nb = (unsigned char *)realloc(*buf, *len + n + 1))) {
        gdl_free(h);
        return -1;
    }
    memcpy(nb + *len, h->data, n);
    *buf = nb;
    *len += n;
    gdl_free(h); /* a copy of a persistent tensor is persistent (a no-op for temporaries) */
    return 0;
}

/* trains a fresh model (kind 0 the MLP, 1 the CNN, 2 the ResNet, 3 the BatchNorm + GELU CNN) FZ_STEPS SGD
   steps on dev with fusion on or off; the losses, the last output, every gradient and weight in *buf */
static int fz_train(gdl_device dev, int kind, int fuse, unsigned char **buf, size_t *len) {
    int big = dev.type == GDL_DEVICE_CPU, cnn = kind > 0;
    gdl_module *m = kind == 3 ? fz_bn_gelu_cnn(big) : kind == 2 ? fz_resnet(big) : cnn ? fz_cnn(big) : fz_mlp(big);
    gdl_optimizer *opt = gdl_sgd_new(0.05, 0.9, 0, 1e-4, 0);
    gdl_tensor *x, *y, *out = NULL, *ts[32];
    int32_t lab[130];
    int64_t B = cnn ? (big ? 12 : 4) : (big ? 130 : 70), xs4[4] = {0, 3, 12, 11}, xs2[2] = {0, 37};
    int step, k, n, prev = gdl_nn_set_fusion(fuse), rc = -1;
    *buf = NULL;
    *len = 0;
    xs4[0] = xs2[0] = B;
    gdl_manual_seed(13);
    x = cnn ? gdl_randn(4, xs4, dev) : gdl_randn(2, xs2, dev);
    for (k = 0; k < B; k++) lab[k] = (int32_t)((k * 7 + 3) % 10);
    y = gdl_from_array(lab, 1, &B, GDL_I32, dev);
    if (!m || !opt || !x || !y || gdl_module_to(m, dev) < 0 || gdl_optim_add_module(opt, m, 0) < 0) goto done;
    for (step = 0; step < FZ_STEPS; step++) {
        gdl_tensor *loss;
        gdl_arena_reset();
        if (gdl_zero_grad(opt) < 0) goto done;
        out = gdl_forward(m, x);
        loss = out ? gdl_cross_entropy(out, y) : NULL;
        if (!loss || gdl_backward(loss) < 0 || fz_append(buf, len, loss) < 0) goto done;
        if (step + 1 < FZ_STEPS && gdl_step(opt) < 0) goto done;
    }
    if (fz_append(buf, len, out) < 0) goto done;
    n = gdl_module_named_tensors(m, GDL_PARAMS, NULL, ts, 32);
    for (k = 0; k < n; k++)
        if (fz_append(buf, len, ts[k]) < 0 || fz_append(buf, len, ts[k]->grad) < 0) goto done;
    rc = 0;
done:
    gdl_arena_reset();
    gdl_nn_set_fusion(prev);
    gdl_optim_free(opt);
    gdl_module_free(m);
    gdl_free(x);
    gdl_free(y);
    return rc;
}

static int fz_first_diff(const unsigned char *a, const unsigned char *b, size_t n) {
    size_t i;
    for (i = 0; i < n; i++)
        if (a[i] != b[i]) return (int)i;
    return -1;
}

/* the largest difference of two float buffers over their largest magnitude */
static double fz_rel_diff(const unsigned char *a, const unsigned char *b, size_t n) {
    size_t i;
    double num = 0, den = 1e-30;
    for (i = 0; i + sizeof(float) <= n; i += sizeof(float)) {
        float x, y;
        memcpy(&x, a + i, sizeof x);
        memcpy(&y, b + i, sizeof y);
        if (x != x || y != y) { /* NaN only where both have it */
            if (x == x || y == y) return 1e30;
            continue;
        }
        if (fabs((double)x - y) > num) num = fabs((double)x - y);
        if (fabs((double)x) > den) den = fabs((double)x);
    }
    return num / den;
}

/* Fused and unfused training agree bit for bit on the CPU and the emulator's plain GEMM (the same
   arithmetic). On a real GPU cuBLASLt's kernel and GELU epilogue may differ from cuBLAS's GEMM and our
   kernels in the last bits, so there, and on the emulator under GPUDL_EMU_GEMM=perturbed or shape
   (other summation orders per call or per configuration), they agree to 1e-3 of the largest value
   after the 20 steps. */
#ifdef GPUDL_EMU
#include "cuda_emu/emu_api.h"
#endif
TEST fz_train_bitwise_case(gdl_device dev) {
    static const char *const name[4] = {"MLP", "CNN", "ResNet", "BatchNorm + GELU CNN"};
    int kind;
#ifdef GPUDL_EMU
    int exact = dev.type == GDL_DEVICE_CPU || strcmp(gdl_emu_gemm_mode(), "plain") == 0;
#else
    int exact = dev.type == GDL_DEVICE_CPU;
#endif
    for (kind = 0; kind < 4; kind++) {
        unsigned char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        int ra = fz_train(dev, kind, 1, &a, &la), rb = fz_train(dev, kind, 0, &b, &lb);
        if (ra < 0 || rb < 0) {
            free(a);
            free(b);
            FAILf("%s training failed: %s", name[kind], gdl_last_error());
        }
        if (la != lb || la == 0 || (exact ? fz_first_diff(a, b, la) >= 0 : !(fz_rel_diff(a, b, la) <= 1e-3))) {
            int at = la == lb ? fz_first_diff(a, b, la) : -2;
            free(a);
            free(b);
            FAILf("%s: fused and unfused training differ (%zu vs %zu bytes, first differing byte %d)",
                  name[kind], la, lb, at);
        }
        free(a);
        free(b);
    }
    PASS();
}

/* One run of batch norm + act (GDL_ACT_RELU or GDL_ACT_GELU), fused (gdl_batch_norm_relu,
   gdl_batch_norm_act) or as the two ops, on x [3, 4, 21] (flat: the same values as [21, 12], batch norm's
   blocks of 8 channels and a tail) in dt with NaN, +-0 and Inf in it: mode 0 training with affine parameters and running statistics (updated), 1
   training with neither, 2 eval (running statistics) with affine parameters, 3 eval without. x goes through a scale by 1 first (an intermediate: its gradient is
   unset until the backward stores it) and the output is used twice. The output and the gradients of the
   intermediate, x, weight and bias and the running statistics, widened to f32, in *buf. */
static int fz_bn_act_run(gdl_device dev, int mode, gdl_dtype dt, int act, int flat, int fused, unsigned char **buf,
                         size_t *len) {
    enum { N = 3, C = 4, S = 21, FC = 12 };
    static const float m4[C] = {0.5f, -0.25f, 0, 1}, v4[C] = {1, 0.5f, 2, 0.25f}, w4[C] = {1.5f, -0.5f, 1, 0.75f},
                       b4[C] = {0, 0.25f, -0.5f, 0};
    float xv[N * C * S], rv[N * C * S], mv[FC], vv[FC], wv[FC], bv[FC];
    int64_t xs[3] = {N, C, S}, fs[2] = {N * C * S / FC, FC}, cs = flat ? FC : C;
    int training = mode < 2, affine = mode % 2 == 0, k, rc = -1;
    gdl_tensor *x, *x0, *t, *r, *w = NULL, *b = NULL, *rm = NULL, *rvar = NULL, *o = NULL, *ts[7];
    for (k = 0; k < N * C * S; k++) {
        xv[k] = (float)((k * 37 % 29) - 14) / 4.0f; /* channel 0 has 0.5s: its running mean, so 0 in eval */
        rv[k] = (float)((k * 11 % 13) - 6) / 3.0f;
    }
    xv[3] = NAN;                  /* channel 0 (all NaN in training) */
    xv[2 * C * S + S + 4] = -0.0f; /* channel 1 */
    xv[C * S + 3 * S + 7] = INFINITY;
    for (k = 0; k < FC; k++) mv[k] = m4[k % C], vv[k] = v4[k % C], wv[k] = w4[k % C], bv[k] = b4[k % C];
    *buf = NULL;
    *len = 0;
    x0 = gdl_from_array(xv, flat ? 2 : 3, flat ? fs : xs, GDL_F32, dev);
    r = gdl_from_array(rv, flat ? 2 : 3, flat ? fs : xs, GDL_F32, dev);
    if (affine) {
        w = gdl_from_array(wv, 1, &cs, GDL_F32, dev);
        b = gdl_from_array(bv, 1, &cs, GDL_F32, dev);
    }
    if (mode != 1) {
        rm = gdl_from_array(mv, 1, &cs, GDL_F32, dev);
        rvar = gdl_from_array(vv, 1, &cs, GDL_F32, dev);
    }
    if (!x0 || !r || (affine && (!w || !b)) || (mode != 1 && (!rm || !rvar))) goto done;
    gdl_set_requires_grad(x0, 1);
    if (w) gdl_set_requires_grad(w, 1);
    if (b) gdl_set_requires_grad(b, 1);
    x = dt == GDL_F32 ? x0 : gdl_to_dtype(x0, dt);
    t = x ? gdl_mul_scalar(x, 1) : NULL;
    if (t && fused) o = act == GDL_ACT_RELU ? gdl_batch_norm_relu(t, rm, rvar, w, b, training, 0.1, 1e-5)
                                            : gdl_batch_norm_act(t, rm, rvar, w, b, training, 0.1, 1e-5, (gdl_act)act);
    else if (t) o = act == GDL_ACT_RELU ? gdl_relu(gdl_batch_norm(t, rm, rvar, w, b, training, 0.1, 1e-5))
                                        : gdl_gelu(gdl_batch_norm(t, rm, rvar, w, b, training, 0.1, 1e-5), 0);
    if (!o || gdl_backward(gdl_sum(gdl_add(gdl_mul(o, dt == GDL_F32 ? r : gdl_to_dtype(r, dt)), o))) < 0) goto done;
    ts[0] = o; ts[1] = t->grad; ts[2] = x0->grad; ts[3] = w ? w->grad : NULL; ts[4] = b ? b->grad : NULL;
    ts[5] = rm;
    ts[6] = rvar;
    for (k = 0; k < 7; k++)
        if (ts[k] && fz_append(buf, len, ts[k]->dtype == GDL_F32 ? ts[k] : gdl_to_dtype(ts[k], GDL_F32)) < 0) goto done;
    rc = 0;
done:
    gdl_arena_reset();
    gdl_free(x0); gdl_free(r); gdl_free(w); gdl_free(b); gdl_free(rm); gdl_free(rvar);
    return rc;
}

/* gdl_batch_norm_relu is bitwise gdl_batch_norm then gdl_relu (in f32 and bf16), gdl_batch_norm_act with
   GDL_ACT_GELU gdl_batch_norm then gdl_gelu (in f32: in bf16 the fused GELU takes the f32 value, before the
   rounding), NaN where the other has NaN, in every mode, [N, C, L] and [N, C] */
static int fz_bn_act_compare(gdl_device dev, int mode, gdl_dtype dt, int act, int flat, char *why, size_t whylen) {
    unsigned char *a = NULL, *b = NULL;
    size_t la = 0, lb = 0, i;
    int ra = fz_bn_act_run(dev, mode, dt, act, flat, 1, &a, &la), rb = fz_bn_act_run(dev, mode, dt, act, flat, 0, &b, &lb);
    long bad = -1;
    if (ra < 0 || rb < 0) {
        snprintf(why, whylen, "%s", gdl_last_error());
    } else {
        for (i = 0; la == lb && i + sizeof(float) <= la && bad < 0; i += sizeof(float)) {
            float u, v;
            memcpy(&u, a + i, sizeof u);
            memcpy(&v, b + i, sizeof v);
            if (memcmp(&u, &v, sizeof u) != 0 && !(u != u && v != v)) bad = (long)(i / sizeof(float));
        }
        if (la != lb || la == 0 || bad >= 0)
            snprintf(why, whylen, "fused and unfused differ (%zu vs %zu bytes, float %ld)", la, lb, bad);
    }
    free(a);
    free(b);
    return ra < 0 || rb < 0 || la != lb || la == 0 || bad >= 0 ? -1 : 0;
}
TEST fz_bn_act_bitwise_case(gdl_device dev) {
    static const gdl_dtype dts[2] = {GDL_F32, GDL_BF16};
    static const int acts[2] = {GDL_ACT_RELU, GDL_ACT_GELU};
    char why[160];
    int mode, d, k, flat;
    for (k = 0; k < 2; k++)
        for (flat = 0; flat < 2; flat++)
            for (d = 0; d < (acts[k] == GDL_ACT_RELU ? 2 : 1); d++)
                for (mode = 0; mode < 4; mode++)
                    if (fz_bn_act_compare(dev, mode, dts[d], acts[k], flat, why, sizeof why) < 0)
                        FAILf("batch norm + %s, mode %d, %s, %s: %s", k ? "GELU" : "ReLU", mode,
                              gdl_dtype_name(dts[d]), flat ? "[N, C]" : "[N, C, L]", why);
    PASS();
}

/* Batch norm + GELU bitwise the two ops (the output, x's, weight's and bias's gradients, training and
   eval) with long channels (2 x 70001 values each: the CPU's GELU per row rather than over a group of
   channels' spans, gdl__bn_gelu_group) and with 3 x 3 maps, 40 channels (a group's spans, the channels
   split among the threads); on the CPU the backward rebuilds GELU's input from x (GDL__ACT_GELU_RECIPE) */
TEST fz_bn_gelu_long_case(gdl_device dev) {
    static const int64_t shapes[2][4] = {{2, 3, 70001, 1}, {7, 40, 3, 3}};
    int fused, rc, sh;
    for (sh = 0; sh < 4; sh++) { /* each shape in eval (training 0), then training */
        const int64_t *xs = shapes[sh / 2], cs = xs[1];
        const int ndim = xs[3] > 1 ? 4 : 3, training = sh % 2;
        unsigned char *buf[2] = {NULL, NULL};
        size_t len[2] = {0, 0};
        for (fused = 0; fused < 2; fused++) {
            gdl_tensor *x, *w, *b, *rm, *rv, *y = NULL, *g;
            gdl_manual_seed(21);
            x = gdl_randn(ndim, xs, dev), w = gdl_randn(1, &cs, dev), b = gdl_randn(1, &cs, dev);
            rm = gdl_randn(1, &cs, dev), rv = gdl_ones(1, &cs, GDL_F32, dev);
            g = gdl_randn(ndim, xs, dev);
            rc = x && w && b && rm && rv && g ? 0 : -1;
            if (rc == 0) {
                gdl_set_requires_grad(x, 1), gdl_set_requires_grad(w, 1), gdl_set_requires_grad(b, 1);
                y = fused ? gdl_batch_norm_act(x, rm, rv, w, b, training, 0.1, 1e-5, GDL_ACT_GELU)
                          : gdl_gelu(gdl_batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5), 0);
                rc = y && gdl_backward_grad(y, g) == 0 && fz_append(&buf[fused], &len[fused], y) == 0 &&
                             fz_append(&buf[fused], &len[fused], x->grad) == 0 &&
                             fz_append(&buf[fused], &len[fused], w->grad) == 0 &&
                             fz_append(&buf[fused], &len[fused], b->grad) == 0
                         ? 0
                         : -1;
            }
            gdl_arena_reset();
            gdl_free(x), gdl_free(w), gdl_free(b), gdl_free(rm), gdl_free(rv), gdl_free(g);
            if (rc < 0) {
                free(buf[0]), free(buf[1]);
                FAILf("batch norm + GELU, %lld x %lld x %lld x %lld: %s", (long long)xs[0], (long long)xs[1],
                      (long long)xs[2], (long long)xs[3], gdl_last_error());
            }
        }
        rc = len[0] == len[1] && len[0] > 0 ? fz_first_diff(buf[0], buf[1], len[0]) : -2;
        free(buf[0]), free(buf[1]);
        if (rc != -1)
            FAILf("batch norm + GELU, %lld x %lld x %lld x %lld, training %d: fused and unfused differ at byte %d",
                  (long long)xs[0], (long long)xs[1], (long long)xs[2], (long long)xs[3], training, rc);
    }
    PASS();
}

/* the op that made a two-module Sequential's output: a Linear (conv 0), Conv2d (1) or BatchNorm2d (2), then act */
static int fz_pair_op(gdl_device dev, gdl_module *act, int conv) {
    gdl_module *m;
    gdl_tensor *x, *y;
    int64_t s4[4] = {2, 3, 5, 4}, s2[2] = {4, 6};
    int op;
    gdl_manual_seed(3);
    m = gdl_nn_sequential(2, (gdl_module *[]){conv == 2 ? gdl_nn_batchnorm2d(3)
                                              : conv   ? gdl_nn_conv2d(3, 4, 3, 1, 1, 1, 1, 1)
                                                       : gdl_nn_linear(6, 5, 1),
                                              act});
    x = conv ? gdl_randn(4, s4, dev) : gdl_randn(2, s2, dev);
    if (!m || !x || gdl_module_to(m, dev) < 0) return -2;
    y = gdl_forward(m, x);
    op = y ? gdl_tensor_op(y) : -3;
    gdl_module_free(m);
    gdl_free(x);
    gdl_arena_reset();
    return op;
}

TEST fz_when_fused_case(gdl_device dev) {
    int prev = gdl_nn_set_fusion(1);
    ASSERT_EQ(1, gdl_nn_set_fusion(-1));
    ASSERT_EQ(GDL_OP_LINEAR_ACT, fz_pair_op(dev, gdl_nn_relu(), 0));
    ASSERT_EQ(GDL_OP_LINEAR_ACT, fz_pair_op(dev, gdl_nn_gelu(1), 0));
    ASSERT_EQ(GDL_OP_LINEAR_ACT, fz_pair_op(dev, gdl_nn_gelu(0), 0));
    ASSERT_EQ(GDL_OP_CONV2D_ACT, fz_pair_op(dev, gdl_nn_relu(), 1));
    ASSERT_EQ(GDL_OP_GELU_TANH, fz_pair_op(dev, gdl_nn_gelu(1), 1)); /* only ReLU after a Conv2d */
    ASSERT_EQ(GDL_OP_BATCH_NORM_RELU, fz_pair_op(dev, gdl_nn_relu(), 2));
    ASSERT_EQ(GDL_OP_BATCH_NORM_GELU, fz_pair_op(dev, gdl_nn_gelu(0), 2)); /* erf GELU after a BatchNorm */
    ASSERT_EQ(GDL_OP_GELU_TANH, fz_pair_op(dev, gdl_nn_gelu(1), 2));      /* not the tanh form */
    ASSERT_EQ(GDL_OP_TANH, fz_pair_op(dev, gdl_nn_tanh(), 0));
    /* anomaly mode checks the intermediate: not fused */
    gdl_set_anomaly_mode(1);
    ASSERT_EQ(GDL_OP_RELU, fz_pair_op(dev, gdl_nn_relu(), 0));
    ASSERT_EQ(GDL_OP_RELU, fz_pair_op(dev, gdl_nn_relu(), 2));
    ASSERT_EQ(GDL_OP_GELU, fz_pair_op(dev, gdl_nn_gelu(0), 2));
    gdl_set_anomaly_mode(0);
    /* autocast: the unfused ops' dtypes */
    {
        int op;
        ASSERT_EQ(0, gdl_autocast_begin(GDL_BF16));
        op = fz_pair_op(dev, gdl_nn_relu(), 0);
        ASSERT_EQ(0, gdl_autocast_end());
        ASSERT(op >= 0 && op != GDL_OP_LINEAR_ACT); /* relu on bf16: its f32 run and the cast to bf16 */
        ASSERT_EQ(0, gdl_autocast_begin(GDL_BF16));
        op = fz_pair_op(dev, gdl_nn_relu(), 2);
        ASSERT_EQ(0, gdl_autocast_end());
        ASSERT(op >= 0 && op != GDL_OP_BATCH_NORM_RELU);
        ASSERT_EQ(0, gdl_autocast_begin(GDL_BF16));
        op = fz_pair_op(dev, gdl_nn_gelu(0), 2);
        ASSERT_EQ(0, gdl_autocast_end());
        ASSERT(op >= 0 && op != GDL_OP_BATCH_NORM_GELU);
    }
    ASSERT_EQ(1, gdl_nn_set_fusion(0));
    ASSERT_EQ(GDL_OP_RELU, fz_pair_op(dev, gdl_nn_relu(), 0));
    ASSERT_EQ(GDL_OP_RELU, fz_pair_op(dev, gdl_nn_relu(), 1));
    ASSERT_EQ(GDL_OP_RELU, fz_pair_op(dev, gdl_nn_relu(), 2));
    ASSERT_EQ(GDL_OP_GELU, fz_pair_op(dev, gdl_nn_gelu(0), 2));
    ASSERT_EQ(0, gdl_nn_set_fusion(prev));
    PASS();
}

TEST fz_errors_case(gdl_device dev) {
    int64_t s2[2] = {4, 6}, w2[2] = {5, 6}, wbad[2] = {5, 7}, b1 = 5, bbad = 4, s4[4] = {2, 3, 5, 4},
            k4[4] = {4, 3, 3, 3};
    gdl_tensor *x = gdl_randn(2, s2, dev), *w = gdl_randn(2, w2, dev), *wb = gdl_randn(2, wbad, dev);
    gdl_tensor *b = gdl_randn(1, &b1, dev), *bb = gdl_randn(1, &bbad, dev), *bc = gdl_randn(1, &b1, gdl_cpu());
    gdl_tensor *xi = gdl_zeros(2, s2, GDL_I32, dev), *xc = gdl_randn(4, s4, dev), *wc = gdl_randn(4, k4, dev);
    gdl_tensor *y;
    ASSERT(x && w && wb && b && bb && bc && xi && xc && wc);
    ASSERT(gdl_linear_act(x, w, b, (gdl_act)7) == NULL);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_linear_act: unknown activation 7");
    ASSERT(gdl_conv2d_act(xc, wc, NULL, 1, 1, 1, 1, (gdl_act)-1) == NULL);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_conv2d_act: unknown activation -1");
    ASSERT(gdl_linear_act(x, wb, b, GDL_ACT_RELU) == NULL);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_linear_act: input [4,6] does not match weight [5,7]");
    ASSERT(gdl_linear_act(x, w, bb, GDL_ACT_GELU_TANH) == NULL);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_linear_act: bias [4] does not match weight [5,6]");
    ASSERT(gdl_linear_act(xi, w, b, GDL_ACT_RELU) == NULL);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_linear_act");
    ASSERT_CONTAINS(gdl_last_error(), "i32");
    if (dev.type != GDL_DEVICE_CPU) {
        ASSERT(gdl_linear_act(x, w, bc, GDL_ACT_RELU) == NULL);
        ASSERT_CONTAINS(gdl_last_error(), "gdl_linear_act");
        ASSERT_CONTAINS(gdl_last_error(), "cpu");
    }
    ASSERT(gdl_conv2d_act(xc, w, NULL, 1, 1, 1, 1, GDL_ACT_RELU) == NULL);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_conv2d_act: expected input [N,C,H,W] and weight");
    ASSERT(gdl_conv2d_act(xc, wc, b, 1, 1, 1, 1, GDL_ACT_RELU) == NULL);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_conv2d_act: bias [5] does not match 4 output channels");
    ASSERT(gdl_batch_norm_relu(b, NULL, NULL, NULL, NULL, 1, 0.1, 1e-5) == NULL);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_batch_norm_relu: expected input [N,C], [N,C,L] or [N,C,H,W], got [5]");
    ASSERT(gdl_batch_norm_relu(xc, NULL, NULL, b, NULL, 1, 0.1, 1e-5) == NULL);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_batch_norm_relu: weight [5] should have 3 elements to match input [2,3,5,4]");
    ASSERT(gdl_batch_norm_relu(xi, NULL, NULL, NULL, NULL, 1, 0.1, 1e-5) == NULL);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_batch_norm_relu");
    ASSERT_CONTAINS(gdl_last_error(), "i32");
    ASSERT(gdl_batch_norm_act(xc, NULL, NULL, NULL, NULL, 1, 0.1, 1e-5, GDL_ACT_GELU_TANH) == NULL);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_batch_norm_act: activation 2 is not fused after batch norm");
    ASSERT(gdl_batch_norm_act(xc, NULL, NULL, NULL, NULL, 1, 0.1, 1e-5, (gdl_act)9) == NULL);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_batch_norm_act: activation 9");
    ASSERT(gdl_batch_norm_act(b, NULL, NULL, NULL, NULL, 1, 0.1, 1e-5, GDL_ACT_GELU) == NULL);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_batch_norm_act: expected input [N,C], [N,C,L] or [N,C,H,W], got [5]");
    ASSERT(gdl_batch_norm_act(xc, NULL, NULL, b, NULL, 1, 0.1, 1e-5, GDL_ACT_GELU) == NULL);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_batch_norm_act: weight [5] should have 3 elements to match input [2,3,5,4]");
    ASSERT(gdl_batch_norm_act(xi, NULL, NULL, NULL, NULL, 1, 0.1, 1e-5, GDL_ACT_GELU) == NULL);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_batch_norm_act");
    ASSERT_CONTAINS(gdl_last_error(), "i32");
    /* the inputs are untouched and still usable */
    y = gdl_linear_act(x, w, b, GDL_ACT_RELU);
    ASSERT(y != NULL);
    gdl_arena_reset();
    gdl_free(x); gdl_free(w); gdl_free(wb); gdl_free(b); gdl_free(bb); gdl_free(bc); gdl_free(xi); gdl_free(xc);
    gdl_free(wc);
    PASS();
}

#endif
