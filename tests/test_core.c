/* test_core.c — forward values against independent references (closed forms,
   hand-worked cases, naive loops), the error paths, dtype conversions, the
   generator, autograd behaviour and anomaly mode. Built in f32. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"

#define CPU gdl_cpu()

static gdl_tensor *arr(const float *v, int ndim, const int64_t *shape) {
    return gdl_from_array(v, ndim, shape, GDL_F32, CPU);
}
static float at(const gdl_tensor *t, int64_t i) { return ((const float *)t->data)[i]; }

static void reset(void *u) {
    (void)u;
    gdl_arena_reset();
    gdl_clear_error();
    gdl_set_grad_enabled(1);
    gdl_set_anomaly_mode(0);
}

/* ---- forward values ---- */

TEST test_add_broadcast_values(void) {
    float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {10, 20, 30};
    int64_t sa[2] = {2, 3}, sb[1] = {3};
    gdl_tensor *A = arr(a, 2, sa), *B = arr(b, 1, sb), *C;
    int i;
    C = gdl_add(A, B);
    ASSERT_NOT_NULL(C);
    ASSERT_EQ(2, C->ndim);
    for (i = 0; i < 6; i++) ASSERT_IN_RANGE(a[i] + b[i % 3], at(C, i), 0);
    C = gdl_div(B, A); /* [3] / [2,3] */
    for (i = 0; i < 6; i++) ASSERT_IN_RANGE(b[i % 3] / a[i], at(C, i), 1e-6);
    gdl_free(A);
    gdl_free(B);
    PASS();
}

TEST test_matmul_values(void) {
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {7, 8, 9, 10, 11, 12};
    int64_t sa[2] = {2, 3}, sb[2] = {3, 2};
    gdl_tensor *A = arr(a, 2, sa), *B = arr(b, 2, sb), *C = gdl_matmul(A, B);
    ASSERT_NOT_NULL(C);
    ASSERT_IN_RANGE(58, at(C, 0), 0);
    ASSERT_IN_RANGE(64, at(C, 1), 0);
    ASSERT_IN_RANGE(139, at(C, 2), 0);
    ASSERT_IN_RANGE(154, at(C, 3), 0);
    gdl_free(A);
    gdl_free(B);
    PASS();
}

TEST test_linear_matches_naive(void) {
    int64_t sx[2] = {33, 17}, sw[2] = {5, 17}, sb[1] = {5};
    gdl_tensor *x, *w, *b, *y;
    int i, j, k;
    gdl_manual_seed(3);
    x = gdl_randn(2, sx, CPU); w = gdl_randn(2, sw, CPU); b = gdl_randn(1, sb, CPU);
    y = gdl_linear(x, w, b);
    ASSERT_NOT_NULL(y);
    for (i = 0; i < 33; i++)
        for (j = 0; j < 5; j++) {
            double s = at(b, j);
            for (k = 0; k < 17; k++) s += (double)at(x, i * 17 + k) * at(w, j * 17 + k);
            ASSERT_IN_RANGE(s, at(y, i * 5 + j), 1e-4);
        }
    gdl_free(x); gdl_free(w); gdl_free(b);
    PASS();
}

TEST test_reductions_values(void) {
    float a[6] = {1, -2, 3, 4, 5, -6};
    int64_t s[2] = {2, 3};
    gdl_tensor *A = arr(a, 2, s), *t;
    t = gdl_sum(A);
    ASSERT_EQ(0, t->ndim);
    ASSERT_IN_RANGE(5, gdl_item(t), 1e-6);
    ASSERT_IN_RANGE(5.0 / 6, gdl_item(gdl_mean(A)), 1e-6);
    t = gdl_sum_dim(A, 0, 0);
    ASSERT_EQ(3, t->shape[0]);
    ASSERT_IN_RANGE(5, at(t, 0), 0); ASSERT_IN_RANGE(3, at(t, 1), 0); ASSERT_IN_RANGE(-3, at(t, 2), 0);
    t = gdl_mean_dim(A, 1, 1);
    ASSERT_EQ(2, t->ndim); ASSERT_EQ(1, t->shape[1]);
    ASSERT_IN_RANGE(2.0 / 3, at(t, 0), 1e-6); ASSERT_IN_RANGE(1.0, at(t, 1), 1e-6);
    t = gdl_max_dim(A, 1, 0);
    ASSERT_IN_RANGE(3, at(t, 0), 0); ASSERT_IN_RANGE(5, at(t, 1), 0);
    t = gdl_argmax(A, 1);
    ASSERT_EQ(GDL_I32, t->dtype);
    ASSERT_EQ(2, ((int32_t *)t->data)[0]); ASSERT_EQ(1, ((int32_t *)t->data)[1]);
    gdl_free(A);
    PASS();
}

TEST test_softmax_values(void) {
    float a[3] = {1, 2, 3};
    int64_t s[2] = {1, 3};
    gdl_tensor *A = arr(a, 2, s), *p = gdl_softmax(A, 1), *lp = gdl_log_softmax(A, 1);
    double z = exp(1.0) + exp(2.0) + exp(3.0);
    int i;
    for (i = 0; i < 3; i++) {
        ASSERT_IN_RANGE(exp(a[i]) / z, at(p, i), 1e-6);
        ASSERT_IN_RANGE(a[i] - log(z), at(lp, i), 1e-6);
    }
    /* large logits stay finite */
    ((float *)A->data)[0] = 1000; ((float *)A->data)[1] = 1000; ((float *)A->data)[2] = -1000;
    p = gdl_softmax(A, 1);
    ASSERT_IN_RANGE(0.5, at(p, 0), 1e-6);
    ASSERT_IN_RANGE(0.0, at(p, 2), 1e-6);
    gdl_free(A);
    PASS();
}

TEST test_activation_values(void) {
    float a[4] = {-2, -0.5f, 0.5f, 1};
    int64_t s[1] = {4};
    gdl_tensor *A = arr(a, 1, s);
    ASSERT_IN_RANGE(0, at(gdl_relu(A), 0), 0);
    ASSERT_IN_RANGE(0.5, at(gdl_relu(A), 2), 0);
    ASSERT_IN_RANGE(-0.02, at(gdl_leaky_relu(A, 0.01), 0), 1e-7);
    ASSERT_IN_RANGE(1 / (1 + exp(0.5)), at(gdl_sigmoid(A), 1), 1e-7);
    ASSERT_IN_RANGE(tanh(-2.0), at(gdl_tanh(A), 0), 1e-7);
    ASSERT_IN_RANGE(0.8413447460685429, at(gdl_gelu(A, 0), 3), 1e-6);
    ASSERT_IN_RANGE(0.8411919906082768, at(gdl_gelu(A, 1), 3), 1e-6);
    ASSERT_IN_RANGE(pow(0.5, 3), at(gdl_pow_scalar(A, 3), 2), 1e-7);
    ASSERT_IN_RANGE(2.5, at(gdl_add_scalar(A, 1.5), 3), 0);
    ASSERT_IN_RANGE(-3, at(gdl_mul_scalar(A, -3), 3), 0);
    ASSERT_IN_RANGE(exp(0.5), at(gdl_exp(A), 2), 1e-6);
    ASSERT_IN_RANGE(log(0.5), at(gdl_log(A), 2), 1e-7);
    gdl_free(A);
    PASS();
}

/* direct convolution, the textbook loop */
static double naive_conv(const gdl_tensor *x, const gdl_tensor *w, const gdl_tensor *b, int n, int oc, int oh, int ow,
                         int s, int p, int d, int groups) {
    int C = (int)x->shape[1], H = (int)x->shape[2], W = (int)x->shape[3], OC = (int)w->shape[0];
    int Cg = C / groups, g = oc / (OC / groups), c, kh, kw;
    double acc = b ? at(b, oc) : 0;
    for (c = 0; c < Cg; c++)
        for (kh = 0; kh < w->shape[2]; kh++)
            for (kw = 0; kw < w->shape[3]; kw++) {
                int ih = oh * s - p + kh * d, iw = ow * s - p + kw * d;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += (double)at(x, ((n * C + g * Cg + c) * H + ih) * W + iw) *
                       at(w, ((oc * Cg + c) * w->shape[2] + kh) * w->shape[3] + kw);
            }
    return acc;
}

TEST test_conv2d_matches_naive(void) {
    static const int cfg[][6] = {/* C, OC, k, s, p, d; groups last */
                                 {3, 4, 3, 1, 1, 1}, {2, 5, 3, 2, 0, 2}, {1, 3, 5, 1, 2, 1}, {4, 4, 1, 1, 0, 1}};
    int ci, groups;
    for (ci = 0; ci < 4; ci++)
        for (groups = 1; groups <= 2; groups++) {
            const int *c = cfg[ci];
            int64_t sx[4] = {2, c[0] * groups, 9, 7}, sw[4] = {c[1] * groups, c[0], c[2], c[2]}, sb[1] = {c[1] * groups};
            gdl_tensor *x, *w, *b, *y;
            int n, oc, oh, ow;
            gdl_arena_reset();
            x = gdl_randn(4, sx, CPU); w = gdl_randn(4, sw, CPU); b = gdl_randn(1, sb, CPU);
            y = gdl_conv2d(x, w, b, c[3], c[4], c[5], groups);
            if (!y) FAILm(gdl_last_error());
            for (n = 0; n < 2; n++)
                for (oc = 0; oc < sb[0]; oc++)
                    for (oh = 0; oh < y->shape[2]; oh++)
                        for (ow = 0; ow < y->shape[3]; ow++)
                            ASSERT_IN_RANGE(naive_conv(x, w, b, n, oc, oh, ow, c[3], c[4], c[5], groups),
                                            at(y, ((n * sb[0] + oc) * y->shape[2] + oh) * y->shape[3] + ow), 1e-4);
            gdl_free(x); gdl_free(w); gdl_free(b);
        }
    PASS();
}

TEST test_pool_values(void) {
    float a[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    int64_t s[4] = {1, 1, 4, 4};
    gdl_tensor *A = arr(a, 4, s), *m = gdl_max_pool2d(A, 2, 2, 0), *v = gdl_avg_pool2d(A, 2, 0, 0), *g;
    ASSERT_EQ(2, m->shape[2]);
    ASSERT_IN_RANGE(6, at(m, 0), 0); ASSERT_IN_RANGE(8, at(m, 1), 0);
    ASSERT_IN_RANGE(14, at(m, 2), 0); ASSERT_IN_RANGE(16, at(m, 3), 0);
    ASSERT_IN_RANGE(3.5, at(v, 0), 0); ASSERT_IN_RANGE(13.5, at(v, 3), 0);
    v = gdl_avg_pool2d(A, 3, 2, 1); /* padding counts: corner = (1+2+5+6)/9 */
    ASSERT_IN_RANGE(14.0 / 9, at(v, 0), 1e-6);
    g = gdl_global_avg_pool2d(A);
    ASSERT_EQ(4, g->ndim);
    ASSERT_IN_RANGE(8.5, at(g, 0), 1e-6);
    gdl_free(A);
    PASS();
}

TEST test_batch_norm_values_and_running_stats(void) {
    float a[8] = {1, 2, 3, 4, 10, 20, 30, 40}; /* [N=4, C=2] column-wise: c0 = 1,3,10,30; c1 = 2,4,20,40 */
    int64_t s[2] = {4, 2}, c2[1] = {2};
    gdl_tensor *x = arr(a, 2, s), *rm = gdl_zeros(1, c2, GDL_F32, CPU), *rv = gdl_ones(1, c2, GDL_F32, CPU), *y;
    double mu = (1 + 3 + 10 + 30) / 4.0, var = 0, uvar;
    int i;
    for (i = 0; i < 4; i++) var += (a[2 * i] - mu) * (a[2 * i] - mu);
    uvar = var / 3;
    var /= 4;
    y = gdl_batch_norm(x, rm, rv, NULL, NULL, 1, 0.1, 1e-5);
    ASSERT_NOT_NULL(y);
    for (i = 0; i < 4; i++) ASSERT_IN_RANGE((a[2 * i] - mu) / sqrt(var + 1e-5), at(y, 2 * i), 1e-5);
    ASSERT_IN_RANGE(0.1 * mu, at(rm, 0), 1e-5);
    ASSERT_IN_RANGE(0.9 + 0.1 * uvar, at(rv, 0), 1e-3);
    /* eval uses the running statistics */
    y = gdl_batch_norm(x, rm, rv, NULL, NULL, 0, 0.1, 1e-5);
    ASSERT_IN_RANGE((a[0] - at(rm, 0)) / sqrt(at(rv, 0) + 1e-5), at(y, 0), 1e-5);
    gdl_free(x); gdl_free(rm); gdl_free(rv);
    PASS();
}

TEST test_layer_norm_values(void) {
    float a[4] = {1, 2, 3, 6};
    int64_t s[2] = {1, 4};
    gdl_tensor *x = arr(a, 2, s), *y = gdl_layer_norm(x, NULL, NULL, 1e-5);
    double mu = 3, var = (4 + 1 + 0 + 9) / 4.0;
    int i;
    for (i = 0; i < 4; i++) ASSERT_IN_RANGE((a[i] - mu) / sqrt(var + 1e-5), at(y, i), 1e-5);
    gdl_free(x);
    PASS();
}

TEST test_cross_entropy_values(void) {
    float a[6] = {1, 2, 3, 1, 1, 1};
    int32_t t[2] = {2, 0};
    int64_t s[2] = {2, 3}, st[1] = {2};
    gdl_tensor *x = arr(a, 2, s), *y = gdl_from_array(t, 1, st, GDL_I32, CPU), *l;
    double lse0 = log(exp(1.0) + exp(2.0) + exp(3.0)), lse1 = 1 + log(3.0);
    double r0 = lse0 - 3, r1 = lse1 - 1;
    gdl_ce_opts o = gdl_ce_defaults();
    ASSERT_IN_RANGE((r0 + r1) / 2, gdl_item(gdl_cross_entropy(x, y)), 1e-6);
    o.reduction = GDL_REDUCE_SUM;
    ASSERT_IN_RANGE(r0 + r1, gdl_item(gdl_cross_entropy_ex(x, y, &o)), 1e-6);
    o.label_smoothing = 0.3; /* loss = (1-e)*nll + e*mean_c(-logp_c) */
    ASSERT_IN_RANGE(0.7 * r0 + 0.3 * (lse0 - 2) + 0.7 * r1 + 0.3 * (lse1 - 1), gdl_item(gdl_cross_entropy_ex(x, y, &o)), 1e-5);
    o = gdl_ce_defaults();
    ((int32_t *)y->data)[1] = -100; /* ignored: the mean is over the other row */
    ASSERT_IN_RANGE(r0, gdl_item(gdl_cross_entropy_ex(x, y, &o)), 1e-6);
    o.reduction = GDL_REDUCE_NONE;
    l = gdl_cross_entropy_ex(x, y, &o);
    ASSERT_EQ(1, l->ndim);
    ASSERT_IN_RANGE(r0, at(l, 0), 1e-6);
    ASSERT_IN_RANGE(0, at(l, 1), 0);
    ((int32_t *)y->data)[0] = -100; /* all ignored: NaN, as PyTorch */
    ASSERT(isnan(gdl_item(gdl_cross_entropy(x, y))));
    /* nll on log-probabilities equals cross entropy on logits */
    ((int32_t *)y->data)[0] = 1; ((int32_t *)y->data)[1] = 2;
    ASSERT_IN_RANGE(gdl_item(gdl_cross_entropy(x, y)),
                    gdl_item(gdl_nll_loss(gdl_log_softmax(x, 1), y, GDL_REDUCE_MEAN, -100)), 1e-6);
    gdl_free(x); gdl_free(y);
    PASS();
}

/* Probability targets, against PyTorch 2.15's F.cross_entropy on the same numbers:
   x = [[1,2,3],[0.5,-1,2]], t = [[0.2,0,0.8],[0.5,0.25,0.25]]: mean 1.274458646774292, label_smoothing 0.1
   with sum 2.608917236328125, none [0.8076059818267822, 1.7413114309310913]. One-hot targets give the
   index targets' loss; nll_loss and a shape mismatch are errors. */
TEST test_cross_entropy_soft_targets(void) {
    float a[6] = {1, 2, 3, 0.5f, -1, 2}, p[6] = {0.2f, 0, 0.8f, 0.5f, 0.25f, 0.25f}, oh[6] = {0, 0, 1, 1, 0, 0};
    int32_t t[2] = {2, 0};
    int64_t s[2] = {2, 3}, st[1] = {2}, s4[2] = {2, 4};
    gdl_tensor *x = arr(a, 2, s), *y = arr(p, 2, s), *l, *yi, *yo, *y4;
    gdl_ce_opts o = gdl_ce_defaults();
    ASSERT_IN_RANGE(1.274458646774292, gdl_item(gdl_cross_entropy(x, y)), 1e-6);
    o.label_smoothing = 0.1;
    o.reduction = GDL_REDUCE_SUM;
    ASSERT_IN_RANGE(2.608917236328125, gdl_item(gdl_cross_entropy_ex(x, y, &o)), 1e-6);
    o = gdl_ce_defaults();
    o.reduction = GDL_REDUCE_NONE;
    l = gdl_cross_entropy_ex(x, y, &o);
    ASSERT_NOT_NULL(l);
    ASSERT_EQ(1, l->ndim);
    ASSERT_IN_RANGE(0.8076059818267822, at(l, 0), 1e-6);
    ASSERT_IN_RANGE(1.7413114309310913, at(l, 1), 1e-6);
    yi = gdl_from_array(t, 1, st, GDL_I32, CPU);
    yo = arr(oh, 2, s);
    y4 = gdl_zeros(2, s4, GDL_F32, CPU);
    ASSERT_IN_RANGE(gdl_item(gdl_cross_entropy(x, yi)), gdl_item(gdl_cross_entropy(x, yo)), 1e-6);
    ASSERT_NULL(gdl_nll_loss(x, y, GDL_REDUCE_MEAN, -100));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_nll_loss: probability targets f32 [2,3] need cross entropy");
    ASSERT_NULL(gdl_cross_entropy(x, y4));
    ASSERT_CONTAINS(gdl_last_error(), "probability targets f32 [2,4] need cross entropy over input [B,C] of the same shape, got input f32 [2,3]");
    gdl_free(x); gdl_free(y); gdl_free(yi); gdl_free(yo); gdl_free(y4);
    PASS();
}

TEST test_mse_bce_values(void) {
    float a[3] = {1, -2, 30}, b[3] = {0.5f, 1, 1};
    int64_t s[1] = {3};
    gdl_tensor *x = arr(a, 1, s), *y = arr(b, 1, s);
    double bce = 0;
    int i;
    ASSERT_IN_RANGE((0.25 + 9 + 29.0 * 29) / 3, gdl_item(gdl_mse_loss(x, y, GDL_REDUCE_MEAN)), 1e-4);
    ASSERT_IN_RANGE(0.25 + 9 + 29.0 * 29, gdl_item(gdl_mse_loss(x, y, GDL_REDUCE_SUM)), 1e-3);
    for (i = 0; i < 3; i++) {
        double p = 1 / (1 + exp(-a[i]));
        bce += -(b[i] * log(p) + (1 - b[i]) * log(1 - p));
    }
    ASSERT_IN_RANGE(bce / 3, gdl_item(gdl_bce_with_logits(x, y, GDL_REDUCE_MEAN)), 1e-5);
    ((float *)x->data)[2] = -200; /* stays finite where log(sigmoid) would not */
    ASSERT(isfinite(gdl_item(gdl_bce_with_logits(x, y, GDL_REDUCE_SUM))));
    gdl_free(x); gdl_free(y);
    PASS();
}

TEST test_dropout_behaviour(void) {
    int64_t s[1] = {100000};
    gdl_tensor *x = gdl_ones(1, s, GDL_F32, CPU), *y, *y2;
    int64_t i, kept = 0;
    gdl_manual_seed(5);
    y = gdl_dropout(x, 0.25, 1);
    for (i = 0; i < s[0]; i++) {
        float v = at(y, i);
        ASSERT(v == 0 || fabs(v - 1 / 0.75) < 1e-6);
        kept += v != 0;
    }
    ASSERT_IN_RANGE(0.75, kept / 100000.0, 0.01);
    gdl_manual_seed(5);
    y2 = gdl_dropout(x, 0.25, 1);
    ASSERT(memcmp(y->data, y2->data, sizeof(float) * 100000) == 0);
    ASSERT(gdl_dropout(x, 0.25, 0) == x); /* eval: identity */
    y = gdl_dropout(x, 1.0, 1);
    ASSERT_IN_RANGE(0, gdl_item(gdl_sum(y)), 0);
    gdl_free(x);
    PASS();
}

/* Dropout's mask element by element against gdl_dropout_keep (the definition the CUDA kernel shares): sizes
   around the CPU's 8- and 16-lane blocks and past the parallel split, 1 and 2 threads, probabilities that
   put one element's 24 hash bits exactly on the threshold and one above it; a NaN and a -0 among the
   inputs (a dropped element is +0, a kept one x * scale); the backward through x used twice, so dropout's
   gradient adds to one already there. */
TEST test_dropout_mask_exact(void) {
    static const int64_t sizes[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 100, 70001};
    int nt, si, k;
    for (nt = 1; nt <= 2; nt++) {
        gdl_set_num_threads(nt);
        for (si = 0; si < (int)(sizeof sizes / sizeof *sizes); si++) {
            const int64_t n = sizes[si], j = n / 2; /* the element whose hash bits set two of the p */
            for (k = 0; k < 5; k++) {
                const uint64_t rng = (uint64_t)(100 * si + 10 * k + nt);
                gdl_tensor *x, *w, *y;
                uint64_t seed, r;
                double p;
                float scale;
                int64_t i, kept = 0;
                gdl_manual_seed(rng);
                seed = gdl_rng_next_u64(); /* the draw gdl_dropout makes */
                r = gdl_hash64(seed, (uint64_t)j) >> 40;
                /* k 2: j kept (but r = 0, which no p > 0 keeps); 3: j dropped; 4: all dropped */
                p = k == 0 ? 0.5 : k == 1 ? 1.0 / 3 : k == 2 ? (r ? (double)r : 1) / 16777216.0
                  : k == 3 ? (double)(r + 1) / 16777216.0 : 1;
                scale = p < 1 ? (float)(1.0 / (1.0 - p)) : 0;
                x = gdl_randn(1, &n, CPU);
                w = gdl_randn(1, &n, CPU);
                ((float *)x->data)[0] = NAN;
                if (n > 3) ((float *)x->data)[3] = -0.0f;
                ASSERT_EQ(0, gdl_set_requires_grad(x, 1));
                gdl_manual_seed(rng);
                y = gdl_dropout(x, p, 1);
                ASSERT_NOT_NULL(y);
                ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_mul(gdl_add(y, x), w))));
                for (i = 0; i < n; i++) {
                    const int keep = gdl_dropout_keep(seed, (uint64_t)i, p);
                    const float want = keep ? at(x, i) * scale : 0, wi = at(w, i);
                    ASSERTm("dropout's output, bit for bit", memcmp(&want, (const float *)y->data + i, sizeof want) == 0);
                    ASSERT_IN_RANGE(keep ? wi + wi * scale : wi, at(x->grad, i), 1e-6 * fabs(wi) * (1 + scale));
                    kept += keep;
                }
                if (k == 2 && r) ASSERT(gdl_dropout_keep(seed, (uint64_t)j, p));
                if (k == 3) ASSERT(!gdl_dropout_keep(seed, (uint64_t)j, p));
                if (k == 4) ASSERT_EQ(0, kept);
                gdl_free(x);
                gdl_free(w);
                gdl_arena_reset();
            }
        }
    }
    gdl_set_num_threads(0);
    PASS();
}

TEST test_embedding_concat_views(void) {
    float w[6] = {0, 1, 10, 11, 20, 21};
    int32_t idx[3] = {2, 0, 2};
    int64_t sw[2] = {3, 2}, si[1] = {3}, s6[1] = {6}, s23[2] = {2, 3};
    gdl_tensor *W = arr(w, 2, sw), *I = gdl_from_array(idx, 1, si, GDL_I32, CPU), *e, *c, *r, *parts[2];
    e = gdl_embedding(I, W);
    ASSERT_EQ(2, e->ndim);
    ASSERT_IN_RANGE(20, at(e, 0), 0); ASSERT_IN_RANGE(1, at(e, 3), 0);
    parts[0] = W; parts[1] = W;
    c = gdl_concat(2, parts, 1);
    ASSERT_EQ(4, c->shape[1]);
    ASSERT_IN_RANGE(11, at(c, 5), 0); ASSERT_IN_RANGE(10, at(c, 6), 0);
    r = gdl_reshape(W, 1, s6);
    ASSERT(r->data == W->data); /* a view: no copy */
    r = gdl_slice(W, 1, 3);
    ASSERT(r->data == (float *)W->data + 2);
    ASSERT_EQ(2, r->shape[0]);
    r = gdl_reshape(W, 2, s23);
    ASSERT_EQ(3, r->shape[1]);
    gdl_free(W); gdl_free(I);
    PASS();
}

/* ---- the sequence-model ops: values against naive loops and hand-worked cases ---- */

static gdl_tensor *iota(int ndim, const int64_t *shape) { /* 0, 1, 2, ... as f32 */
    gdl_tensor *t = gdl_zeros(ndim, shape, GDL_F32, CPU);
    int64_t i;
    for (i = 0; t && i < t->numel; i++) ((float *)t->data)[i] = (float)i;
    return t;
}

TEST test_structure_values(void) {
    int64_t s[3] = {2, 3, 4}, s15[3] = {1, 5, 2}, s2[2] = {4, 7};
    gdl_tensor *x = iota(3, s), *y, *v = iota(3, s15), *m = iota(2, s2), *p[4];
    const int perm[3] = {2, 0, 1}, keep1[3] = {1, 0, 2};
    int i, j, k;
    ASSERT_NOT_NULL(y = gdl_permute(x, 3, perm)); /* y[k][i][j] = x[i][j][k] */
    ASSERT_EQ(4, y->shape[0]); ASSERT_EQ(2, y->shape[1]); ASSERT_EQ(3, y->shape[2]);
    for (i = 0; i < 2; i++)
        for (j = 0; j < 3; j++)
            for (k = 0; k < 4; k++) ASSERT_IN_RANGE(at(x, (i * 3 + j) * 4 + k), at(y, (k * 2 + i) * 3 + j), 0);
    ASSERT_NOT_NULL(y = gdl_transpose(m, 1, 0));
    ASSERT_IN_RANGE(at(m, 1 * 7 + 5), at(y, 5 * 4 + 1), 0);
    ASSERT_NOT_NULL(y = gdl_permute(v, 3, keep1)); /* moves only a size-1 dim: a view */
    ASSERT(y->data == v->data);
    ASSERT_NOT_NULL(y = gdl_narrow(x, 1, 1, 2)); /* [2,2,4] */
    for (i = 0; i < 2; i++)
        for (j = 0; j < 2; j++)
            for (k = 0; k < 4; k++) ASSERT_IN_RANGE(at(x, (i * 3 + j + 1) * 4 + k), at(y, (i * 2 + j) * 4 + k), 0);
    ASSERT_NOT_NULL(y = gdl_narrow(v, 1, -2, 2)); /* one block of v: a view */
    ASSERT(y->data == (float *)v->data + 6);
    ASSERT_NOT_NULL(y = gdl_slice_dim(m, 1, -6, 100, 3)); /* columns 1, 4 */
    ASSERT_EQ(2, y->shape[1]);
    ASSERT_IN_RANGE(at(m, 2 * 7 + 4), at(y, 2 * 2 + 1), 0);
    ASSERT_NOT_NULL(y = gdl_slice_dim(m, 0, 3, 1, 1)); /* end before start: empty */
    ASSERT_EQ(0, y->shape[0]);
    ASSERT_NOT_NULL(y = gdl_select(x, -1, -1)); /* x[:, :, 3] */
    ASSERT_EQ(2, y->ndim);
    ASSERT_IN_RANGE(at(x, (1 * 3 + 2) * 4 + 3), at(y, 1 * 3 + 2), 0);
    ASSERT_EQ(3, gdl_chunk(m, 3, 1, p)); /* 7 in chunks of 3: 3, 3, 1 */
    ASSERT_EQ(3, p[1]->shape[1]);
    ASSERT_EQ(1, p[2]->shape[1]);
    ASSERT_IN_RANGE(at(m, 3 * 7 + 6), at(p[2], 3), 0);
    ASSERT_EQ(2, gdl_split(x, 1, 0, p, 4)); /* dim 0 (size 2) in pieces of 1, then of 5: one piece */
    ASSERT_EQ(1, gdl_split(x, 5, 0, p, 1));
    ASSERT_EQ(2, p[0]->shape[0]);
    p[0] = p[1] = p[2] = m;
    ASSERT_NOT_NULL(y = gdl_stack(3, p, -1)); /* [4,7,3] */
    ASSERT_EQ(3, y->ndim); ASSERT_EQ(3, y->shape[2]);
    ASSERT_IN_RANGE(at(m, 9), at(y, 9 * 3 + 2), 0);
    gdl_free(x); gdl_free(v); gdl_free(m);
    PASS();
}

TEST test_index_values_and_scatter_add(void) {
    float w[6] = {0, 1, 10, 11, 20, 21};
    int32_t idx[3] = {2, 0, 2}, gi[4] = {1, 0, 0, 1};
    int64_t sw[2] = {3, 2}, si[1] = {3}, sg[2] = {2, 2};
    gdl_tensor *W = arr(w, 2, sw), *I = gdl_from_array(idx, 1, si, GDL_I32, CPU), *G = gdl_from_array(gi, 2, sg, GDL_I32, CPU), *y;
    ASSERT_EQ(0, gdl_set_requires_grad(W, 1));
    ASSERT_NOT_NULL(y = gdl_index_select(W, 0, I));
    ASSERT_IN_RANGE(20, at(y, 0), 0); ASSERT_IN_RANGE(1, at(y, 3), 0); ASSERT_IN_RANGE(21, at(y, 5), 0);
    ASSERT_EQ(0, gdl_backward(gdl_sum(y))); /* row 2 picked twice: its gradient sums both */
    ASSERT_IN_RANGE(1, at(W->grad, 0), 0); ASSERT_IN_RANGE(0, at(W->grad, 2), 0); ASSERT_IN_RANGE(2, at(W->grad, 4), 0);
    gdl_zero_grad_tensor(W);
    ASSERT_NOT_NULL(y = gdl_gather(W, 1, G)); /* y[i][j] = W[i][G[i][j]] */
    ASSERT_IN_RANGE(1, at(y, 0), 0); ASSERT_IN_RANGE(0, at(y, 1), 0); ASSERT_IN_RANGE(10, at(y, 2), 0); ASSERT_IN_RANGE(11, at(y, 3), 0);
    ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_mul(y, y))));
    ASSERT_IN_RANGE(0, at(W->grad, 0), 0); ASSERT_IN_RANGE(2, at(W->grad, 1), 0); ASSERT_IN_RANGE(20, at(W->grad, 2), 0);
    ASSERT_IN_RANGE(22, at(W->grad, 3), 0); ASSERT_IN_RANGE(0, at(W->grad, 4), 0);
    gdl_free(W); gdl_free(I); gdl_free(G);
    PASS();
}

TEST test_compare_where_values(void) {
    float a[4] = {1, NAN, 3, -2}, b[2] = {1, 2};
    int32_t ia[2] = {16777217, -5}, ib[2] = {16777216, -5};
    int64_t s4[1] = {4}, s22[2] = {2, 2}, s2[1] = {2};
    gdl_tensor *A = arr(a, 1, s4), *A2 = arr(a, 2, s22), *B = arr(b, 1, s2), *IA = gdl_from_array(ia, 1, s2, GDL_I32, CPU);
    gdl_tensor *IB = gdl_from_array(ib, 1, s2, GDL_I32, CPU), *FB = gdl_to_dtype(IB, GDL_F32), *c, *y;
    const uint8_t *u;
    ASSERT_NOT_NULL(c = gdl_eq(A2, B)); /* [[1==1, NaN==2], [3==1, -2==2]] */
    ASSERT_EQ((int)GDL_U8, (int)c->dtype);
    u = (const uint8_t *)c->data;
    ASSERT(u[0] == 1 && u[1] == 0 && u[2] == 0 && u[3] == 0);
    u = (const uint8_t *)gdl_ne(A2, B)->data; /* NaN is unequal to everything */
    ASSERT(u[0] == 0 && u[1] == 1 && u[2] == 1 && u[3] == 1);
    u = (const uint8_t *)gdl_ge(A2, B)->data;
    ASSERT(u[0] == 1 && u[1] == 0 && u[2] == 1 && u[3] == 0);
    u = (const uint8_t *)gdl_lt(A, gdl_compare_scalar(A, GDL_CMP_GT, 0))->data; /* a float against u8 */
    ASSERT(u[0] == 0 && u[1] == 0 && u[2] == 0 && u[3] == 1);
    u = (const uint8_t *)gdl_eq(IA, IB)->data; /* two i32: exact */
    ASSERT(u[0] == 0 && u[1] == 1);
    u = (const uint8_t *)gdl_eq(IA, FB)->data; /* i32 against f32: both as f32, 2^24 + 1 rounds to 2^24 */
    ASSERT(u[0] == 1 && u[1] == 1);
    u = (const uint8_t *)gdl_compare_scalar(IA, GDL_CMP_LE, 16777216)->data; /* an integer scalar: as i32 */
    ASSERT(u[0] == 0 && u[1] == 1);
    {   /* a bf16 tensor compares with the scalar rounded to bf16 */
        gdl_tensor *h = gdl_to_dtype(gdl_mul_scalar(gdl_add_scalar(B, -1), 0.1), GDL_BF16); /* 0, 0.1 */
        u = (const uint8_t *)gdl_compare_scalar(h, GDL_CMP_EQ, 0.1)->data;
        ASSERT(u[0] == 0 && u[1] == 1);
    }
    ASSERT_NOT_NULL(y = gdl_where(gdl_gt(A2, B), A2, gdl_mul_scalar(B, -1))); /* NaN > 2 is false */
    ASSERT_IN_RANGE(-1, at(y, 0), 0); ASSERT_IN_RANGE(-2, at(y, 1), 0); ASSERT_IN_RANGE(3, at(y, 2), 0); ASSERT_IN_RANGE(-2, at(y, 3), 0);
    ASSERT_NOT_NULL(y = gdl_masked_fill(A2, gdl_compare_scalar(B, GDL_CMP_EQ, 2), -7)); /* column 1 */
    ASSERT_IN_RANGE(1, at(y, 0), 0); ASSERT_IN_RANGE(-7, at(y, 1), 0); ASSERT_IN_RANGE(-7, at(y, 3), 0);
    gdl_free(A); gdl_free(A2); gdl_free(B); gdl_free(IA); gdl_free(IB);
    PASS();
}

TEST test_elementwise_seq_values(void) {
    float a[5] = {-2, -0.5f, 0, 0.5f, 2}, b[5] = {1, -0.5f, 0, 3, NAN};
    int64_t s5[1] = {5}, s23[2] = {2, 3}, s3[1] = {3};
    gdl_tensor *A = arr(a, 1, s5), *B = arr(b, 1, s5), *y;
    int i;
    gdl_set_requires_grad(A, 1);
    gdl_set_requires_grad(B, 1);
    ASSERT_NOT_NULL(y = gdl_clamp(A, -0.5, 0.5));
    for (i = 0; i < 5; i++) ASSERT_IN_RANGE(a[i] < -0.5f ? -0.5f : a[i] > 0.5f ? 0.5f : a[i], at(y, i), 0);
    ASSERT_EQ(0, gdl_backward(gdl_sum(y))); /* inclusive at the bounds */
    ASSERT_IN_RANGE(0, at(A->grad, 0), 0); ASSERT_IN_RANGE(1, at(A->grad, 1), 0); ASSERT_IN_RANGE(1, at(A->grad, 3), 0);
    ASSERT_IN_RANGE(0, at(A->grad, 4), 0);
    ASSERT_NOT_NULL(y = gdl_clamp(A, 1, -1)); /* min > max: max everywhere */
    for (i = 0; i < 5; i++) ASSERT_IN_RANGE(-1, at(y, i), 0);
    gdl_zero_grad_tensor(A);
    ASSERT_NOT_NULL(y = gdl_maximum(A, B)); /* NaN propagates; a tie halves the gradient */
    ASSERT_IN_RANGE(1, at(y, 0), 0); ASSERT_IN_RANGE(3, at(y, 3), 0); ASSERT(at(y, 4) != at(y, 4));
    ASSERT_EQ(0, gdl_backward(gdl_sum(y)));
    ASSERT_IN_RANGE(0, at(A->grad, 0), 0); ASSERT_IN_RANGE(0.5, at(A->grad, 1), 0); ASSERT_IN_RANGE(0.5, at(B->grad, 2), 0);
    ASSERT_IN_RANGE(1, at(B->grad, 0), 0); ASSERT_IN_RANGE(1, at(A->grad, 4), 0); ASSERT_IN_RANGE(1, at(B->grad, 4), 0);
    gdl_zero_grad_tensor(A);
    gdl_zero_grad_tensor(B);
    ASSERT_NOT_NULL(y = gdl_abs(A));
    ASSERT_EQ(0, gdl_backward(gdl_sum(y))); /* sgn: 0 at 0 */
    ASSERT_IN_RANGE(-1, at(A->grad, 0), 0); ASSERT_IN_RANGE(0, at(A->grad, 2), 0); ASSERT_IN_RANGE(1, at(A->grad, 4), 0);
    gdl_zero_grad_tensor(A);
    ASSERT_NOT_NULL(y = gdl_pow(A, B)); /* 0^0 = 1 with both gradients 0 (PyTorch's masks), (-2)^1 */
    ASSERT_IN_RANGE(1, at(y, 2), 0); ASSERT_IN_RANGE(-2, at(y, 0), 0);
    ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_slice(y, 0, 3))));
    ASSERT_IN_RANGE(0, at(A->grad, 2), 0); ASSERT_IN_RANGE(0, at(B->grad, 2), 0); ASSERT_IN_RANGE(1, at(A->grad, 0), 0);
    {
        gdl_tensor *f4 = gdl_full(1, s3, 4, GDL_F32, CPU);
        ASSERT_NOT_NULL(y = gdl_rsqrt(f4));
        ASSERT_IN_RANGE(0.5, at(y, 1), 0);
        ASSERT_NOT_NULL(y = gdl_sqrt(f4));
        ASSERT_IN_RANGE(2, at(y, 2), 0);
        gdl_free(f4);
    }
    {   /* tril / triu, cumsum */
        gdl_tensor *m = iota(2, s23), *t = gdl_tril(m, 0), *u = gdl_triu(m, 1), *c = gdl_cumsum(m, 1), *c0 = gdl_cumsum(m, 0);
        ASSERT_NOT_NULL(t); ASSERT_NOT_NULL(u); ASSERT_NOT_NULL(c); ASSERT_NOT_NULL(c0);
        ASSERT_IN_RANGE(0, at(t, 1), 0); ASSERT_IN_RANGE(3, at(t, 3), 0); ASSERT_IN_RANGE(4, at(t, 4), 0); ASSERT_IN_RANGE(0, at(t, 5), 0);
        ASSERT_IN_RANGE(0, at(u, 0), 0); ASSERT_IN_RANGE(1, at(u, 1), 0); ASSERT_IN_RANGE(0, at(u, 4), 0); ASSERT_IN_RANGE(5, at(u, 5), 0);
        ASSERT_IN_RANGE(3, at(c, 2), 0); ASSERT_IN_RANGE(12, at(c, 5), 0); ASSERT_IN_RANGE(5, at(c0, 4), 0);
        gdl_free(m);
    }
    gdl_free(A); gdl_free(B);
    PASS();
}

/* broadcast batches against a naive loop; vectors */
TEST test_matmul_broadcast_values(void) {
    int64_t sa[4] = {2, 1, 3, 4}, sb[3] = {3, 4, 5}, sv[1] = {4};
    gdl_tensor *a, *b, *c, *v;
    int i, j, m, n, k;
    gdl_manual_seed(5);
    a = gdl_randn(4, sa, CPU); b = gdl_randn(3, sb, CPU); v = gdl_randn(1, sv, CPU);
    ASSERT_NOT_NULL(c = gdl_matmul(a, b)); /* [2,3,3,5] */
    ASSERT_EQ(4, c->ndim); ASSERT_EQ(3, c->shape[1]); ASSERT_EQ(5, c->shape[3]);
    for (i = 0; i < 2; i++)
        for (j = 0; j < 3; j++)
            for (m = 0; m < 3; m++)
                for (n = 0; n < 5; n++) {
                    double s = 0;
                    for (k = 0; k < 4; k++) s += (double)at(a, (i * 3 + m) * 4 + k) * at(b, (j * 4 + k) * 5 + n);
                    ASSERT_IN_RANGE(s, at(c, ((i * 3 + j) * 3 + m) * 5 + n), 1e-5);
                }
    ASSERT_NOT_NULL(c = gdl_matmul(v, b)); /* [3,5] */
    ASSERT_EQ(2, c->ndim); ASSERT_EQ(5, c->shape[1]);
    ASSERT_NOT_NULL(c = gdl_matmul(v, v)); /* a dot product: a scalar */
    ASSERT_EQ(0, c->ndim);
    {
        double s = 0;
        for (k = 0; k < 4; k++) s += (double)at(v, k) * at(v, k);
        ASSERT_IN_RANGE(s, at(c, 0), 1e-5);
    }
    gdl_free(a); gdl_free(b); gdl_free(v);
    PASS();
}

TEST test_seq_op_errors(void) {
    int64_t s3[3] = {2, 3, 4}, s35[2] = {3, 5}, s4[1] = {4}, s3v[1] = {3}, sab[3] = {2, 3, 4}, sbb[3] = {3, 4, 2};
    gdl_tensor *x = gdl_zeros(3, s3, GDL_F32, CPU), *m = gdl_zeros(2, s35, GDL_F32, CPU), *v4 = gdl_zeros(1, s4, GDL_F32, CPU);
    gdl_tensor *i3 = gdl_zeros(1, s3v, GDL_I32, CPU), *big, *fake, *p[2];
    const int bad[3] = {0, 0, 1}, two[2] = {1, 0};
    int32_t seven[3] = {0, 7, 1};
    ASSERT_NULL(gdl_permute(x, 3, bad));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_permute: dims are not a permutation of 0..2 for [2,3,4]");
    ASSERT_NULL(gdl_permute(x, 2, two));
    ASSERT_STR_EQ("gdl_permute: 2 dims given for [2,3,4] (ndim 3)", gdl_last_error());
    ASSERT_NULL(gdl_transpose(x, 0, 3));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_transpose: dim 3 out of range for [2,3,4]");
    ASSERT_NULL(gdl_narrow(m, 1, 4, 3));
    ASSERT_STR_EQ("gdl_narrow: start 4, length 3 out of range for dim 1 (size 5) of [3,5]", gdl_last_error());
    ASSERT_NULL(gdl_slice_dim(m, 1, 0, 2, 0));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_slice_dim: step 0 must be positive");
    ASSERT_NULL(gdl_select(m, 0, -4));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_select: index -4 is out of range for dim 0 (size 3) of [3,5]");
    ASSERT_EQ(-1, gdl_split(m, 2, 1, p, 2));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_split: [3,5] in pieces of 2 along dim 1 makes 3 tensors, room for 2");
    p[0] = m;
    p[1] = x;
    ASSERT_NULL(gdl_stack(2, p, 0));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_stack: every tensor must have one shape, got [3,5] at entry 0 and [2,3,4] at entry 1");
    ASSERT_NULL(gdl_index_select(m, 0, v4));
    ASSERT_STR_EQ("gdl_index_select: index must be i32, got f32 [4]", gdl_last_error());
    memcpy(i3->data, seven, sizeof seven);
    ASSERT_NULL(gdl_index_select(m, 1, i3));
    ASSERT_STR_EQ("gdl_index_select: index 7 at position 1 is out of range [0,5)", gdl_last_error());
    ASSERT_NULL(gdl_gather(m, 1, i3));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_gather: index [3] does not fit x [3,5]");
    ASSERT_NULL(gdl_where(m, m, m));
    ASSERT_STR_EQ("gdl_where: cond must be u8 (a comparison's result), got f32 [3,5]", gdl_last_error());
    ASSERT_NULL(gdl_where(gdl_eq(v4, v4), m, m));
    ASSERT_STR_EQ("gdl_where: shapes [4], [3,5] and [3,5] cannot be broadcast", gdl_last_error());
    ASSERT_NULL(gdl_masked_fill(v4, gdl_eq(m, m), 1));
    ASSERT_STR_EQ("gdl_masked_fill: mask [3,5] cannot be broadcast to x [4]", gdl_last_error());
    ASSERT_NULL(gdl_masked_fill(i3, gdl_eq(i3, i3), 1));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_masked_fill: expected a float tensor (f32, bf16 or f16), got i32 [3]");
    ASSERT_NULL(gdl_eq(m, v4));
    ASSERT_STR_EQ("gdl_eq: shapes [3,5] and [4] cannot be broadcast", gdl_last_error());
    ASSERT_NULL(gdl_compare(m, m, (gdl_compare_op)9));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_compare: unknown comparison 9");
    ASSERT_NULL(gdl_sqrt(i3));
    ASSERT_STR_EQ("gdl_sqrt: expected a float tensor (f32, bf16 or f16), got i32 [3]", gdl_last_error());
    ASSERT_NULL(gdl_maximum(m, v4));
    ASSERT_STR_EQ("gdl_maximum: shapes [3,5] and [4] cannot be broadcast", gdl_last_error());
    ASSERT_NULL(gdl_clamp(m, NAN, 1));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_clamp: a bound is NaN");
    ASSERT_NULL(gdl_tril(v4, 0));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_tril: expected a float tensor (f32, bf16 or f16) of at least 2 dims, got f32 [4]");
    ASSERT_NULL(gdl_cumsum(m, 2));
    ASSERT_STR_EQ("gdl_cumsum: dim 2 out of range for [3,5] (ndim 2)", gdl_last_error());
    big = gdl_zeros(3, sab, GDL_F32, CPU);
    ASSERT_NULL(gdl_matmul(big, gdl_reshape(big, 3, sbb)));
    ASSERT_STR_EQ("gdl_matmul: batch dimensions cannot be broadcast: [2,3,4] x [3,4,2]", gdl_last_error());
    ASSERT_NULL(gdl_matmul(v4, m));
    ASSERT_STR_EQ("gdl_matmul: inner dimensions differ: [4] x [3,5]", gdl_last_error());
    ASSERT_NULL(gdl_bmm(m, m));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_bmm: expected [B,M,K] x [B,K,N] with one B, got [3,5] x [3,5]");
    /* devices */
    fake = gdl_clone(m);
    fake->device = gdl_cuda(0);
    ASSERT_NULL(gdl_where(gdl_eq(m, m), m, fake));
    ASSERT_STR_EQ("gdl_where: expected all tensors on the same device, but found [3,5] cpu and [3,5] cuda:0", gdl_last_error());
    ASSERT_NULL(gdl_gather(fake, 0, i3));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_gather: expected all tensors on the same device");
    ASSERT_NULL(gdl_lt(m, fake));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_lt: expected all tensors on the same device");
    fake->device = gdl_cpu();
    gdl_free(fake);
    gdl_free(x); gdl_free(m); gdl_free(v4); gdl_free(i3); gdl_free(big);
    PASS();
}

/* ---- autograd behaviour ---- */

TEST test_grad_accumulates_and_zeroes(void) {
    float a[2] = {1, 2};
    int64_t s[1] = {2};
    gdl_tensor *x = arr(a, 1, s);
    gdl_set_requires_grad(x, 1);
    ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_mul(x, x))));
    ASSERT_IN_RANGE(2, at(x->grad, 0), 0);
    gdl_arena_reset();
    ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_mul(x, x))));
    ASSERT_IN_RANGE(4, at(x->grad, 0), 0); /* accumulated */
    ASSERT_IN_RANGE(8, at(x->grad, 1), 0);
    gdl_zero_grad_tensor(x);
    ASSERT_IN_RANGE(0, at(x->grad, 1), 0);
    gdl_free(x);
    PASS();
}

/* An intermediate's gradient starts unset and the first linear / add / sub backward to reach it stores
   instead of adding (src/ops/autograd.h); the others add into it after it: here add(t, t) (one tensor twice),
   linear(t, t) after an add that wrote t's gradient first, a broadcast sub (which adds into zeros) */
TEST test_unset_intermediate_grads(void) {
    float a[4] = {1, 2, 3, 4}, o[2] = {1, 1};
    int64_t s[2] = {2, 2}, s1[1] = {2};
    gdl_tensor *x = arr(a, 2, s), *bl = arr(o, 1, s1), *t, *b;
    int i;
    gdl_set_requires_grad(x, 1);
    gdl_set_requires_grad(bl, 1);
    t = gdl_mul_scalar(x, 2);
    ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_add(t, t))));
    for (i = 0; i < 4; i++) ASSERT_IN_RANGE(4, at(x->grad, i), 0);
    gdl_arena_reset();
    gdl_zero_grad_tensor(x);
    t = gdl_mul_scalar(x, 2); /* [[2, 4], [6, 8]]: column sums 8, 12 */
    ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_add(gdl_linear(t, t, NULL), t))));
    for (i = 0; i < 4; i++) { /* dt = 1 + (ones t) + (ones^T t) = 1 + 2 (column sums) */
        ASSERT_IN_RANGE(i % 2 ? 25 : 17, at(t->grad, i), 0);
        ASSERT_IN_RANGE(i % 2 ? 50 : 34, at(x->grad, i), 0);
    }
    gdl_arena_reset();
    gdl_zero_grad_tensor(x);
    t = gdl_mul_scalar(x, 2);
    b = gdl_mul_scalar(bl, 3);
    ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_sub(t, b))));
    for (i = 0; i < 4; i++) ASSERT_IN_RANGE(2, at(x->grad, i), 0);
    for (i = 0; i < 2; i++) ASSERT_IN_RANGE(-6, at(bl->grad, i), 0);
    gdl_arena_reset();
    gdl_free(x);
    gdl_free(bl);
    PASS();
}

/* The unary ops and batch norm store an unset gradient too (gdl__bw_fresh_ok): a ReLU first to reach t
   (then a scale adds), a scale first (then the ReLU adds), and a batch norm's input gradient (rows of 16:
   the CPU's vector loops) bit for bit against the same net with t a leaf, whose gradient is added to zeros */
TEST test_unset_grads_unary_and_batchnorm(void) {
    float a[4] = {-1, 2, -3, 4}, xv[96], wv[96];
    int64_t s[1] = {4}, s4[4] = {2, 3, 4, 4};
    gdl_tensor *x = arr(a, 1, s), *t, *r, *u, *xb, *w, *leaf, *g1 = NULL;
    int i, order;
    gdl_set_requires_grad(x, 1);
    for (order = 0; order < 2; order++) {
        t = gdl_mul_scalar(x, 2); /* [-2, 4, -6, 8]: d/dt sum(3t + relu(t)) = 3 + (t > 0) */
        if (order == 0) {
            u = gdl_mul_scalar(t, 3);
            r = gdl_relu(t); /* later on the tape: its backward runs first and stores */
        } else {
            r = gdl_relu(t);
            u = gdl_mul_scalar(t, 3); /* the scale's backward runs first */
        }
        ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_add(u, r))));
        for (i = 0; i < 4; i++) {
            ASSERT_IN_RANGE(i % 2 ? 4 : 3, at(t->grad, i), 0);
            ASSERT_IN_RANGE(i % 2 ? 8 : 6, at(x->grad, i), 0);
        }
        gdl_arena_reset();
        gdl_zero_grad_tensor(x);
    }
    for (i = 0; i < 96; i++) {
        xv[i] = (float)((i * 37 % 23) - 11) / 7.0f;
        wv[i] = (float)((i * 11 % 17) - 8) / 5.0f;
    }
    xb = arr(xv, 4, s4);
    w = arr(wv, 4, s4);
    gdl_set_requires_grad(xb, 1);
    t = gdl_mul_scalar(xb, 1); /* an intermediate */
    ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_mul(gdl_batch_norm(t, NULL, NULL, NULL, NULL, 1, 0.1, 1e-5), w))));
    g1 = gdl_clone(t->grad);
    gdl_arena_reset();
    leaf = gdl_clone(xb);
    gdl_set_requires_grad(leaf, 1);
    ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_mul(gdl_batch_norm(leaf, NULL, NULL, NULL, NULL, 1, 0.1, 1e-5), w))));
    for (i = 0; i < 96; i++) ASSERT_EQ(at(leaf->grad, i), at(g1, i));
    for (i = 0; i < 96; i++) ASSERT_EQ(at(leaf->grad, i), at(xb->grad, i)); /* t = xb: the scale by 1 is exact */
    gdl_arena_reset();
    gdl_free(g1); gdl_free(leaf); gdl_free(xb); gdl_free(w); gdl_free(x);
    PASS();
}

/* One column of batch_norm_1d_columns_bitwise: batch norm of x [N, C] (its column c alone when c >= 0, as
   [N, 1]) with weight, bias and running statistics from the arrays, then sum(y w) + sum(h w) with h = 1 x
   (an intermediate that two backwards reach: batch norm's first, storing into an arena filled with NaN, or
   second, adding, as first_bn); *out holds y, x's gradient, the weight's and the bias's
   gradients and the running statistics after the step (host memory the caller frees). 0 / -1. */
static int bn_cols_run(const float *xv, const float *wv, const float *gv, const float *bv, const float *rmv,
                       const float *rvv, int64_t N, int64_t C, int64_t c, int training, int act, int first_bn,
                       float **out) {
    const int64_t W = c >= 0 ? 1 : C, s[2] = {N, W}, big = 4096;
    float *xs = (float *)malloc(sizeof(float) * (size_t)(2 * N * W + 4 * W)), *ws = xs + N * W, *ps = ws + N * W;
    gdl_tensor *x, *w, *h, *g, *b, *rm, *rv, *y, *hw = NULL, *loss, *ones = gdl_ones(1, &big, GDL_F32, gdl_cpu());
    int64_t n, k, at = 0;
    if (!xs || !ones || !gdl_mul_scalar(ones, NAN) || !(*out = (float *)malloc(sizeof(float) * (size_t)(2 * N * W + 4 * W))))
        return -1;
    gdl_arena_reset(); /* the NaN stay in the arena's memory */
    for (n = 0; n < N; n++)
        for (k = 0; k < W; k++) {
            xs[n * W + k] = xv[n * C + (c >= 0 ? c : k)];
            ws[n * W + k] = wv[n * C + (c >= 0 ? c : k)];
        }
    for (k = 0; k < W; k++) {
        const int64_t j = c >= 0 ? c : k;
        ps[k] = gv[j], ps[W + k] = bv[j], ps[2 * W + k] = rmv[j], ps[3 * W + k] = rvv[j];
    }
    x = arr(xs, 2, s), w = arr(ws, 2, s);
    g = arr(ps, 1, &W), b = arr(ps + W, 1, &W), rm = arr(ps + 2 * W, 1, &W), rv = arr(ps + 3 * W, 1, &W);
    gdl_set_requires_grad(x, 1), gdl_set_requires_grad(g, 1), gdl_set_requires_grad(b, 1);
    h = gdl_mul_scalar(x, 1);
    if (first_bn) hw = gdl_sum(gdl_mul(h, w)); /* earlier on the tape: its backward runs second */
    y = gdl_batch_norm_act(h, rm, rv, g, b, training, 0.1, 1e-5, (gdl_act)act);
    if (!first_bn) hw = gdl_sum(gdl_mul(h, w));
    loss = y ? gdl_add(gdl_sum(gdl_mul(y, w)), hw) : NULL;
    if (!loss || gdl_backward(loss) < 0) return -1;
    memcpy(*out, y->data, sizeof(float) * (size_t)(N * W)), at += N * W;
    memcpy(*out + at, x->grad->data, sizeof(float) * (size_t)(N * W)), at += N * W;
    memcpy(*out + at, g->grad->data, sizeof(float) * (size_t)W), at += W;
    memcpy(*out + at, b->grad->data, sizeof(float) * (size_t)W), at += W;
    memcpy(*out + at, rm->data, sizeof(float) * (size_t)W), at += W;
    memcpy(*out + at, rv->data, sizeof(float) * (size_t)W);
    gdl_arena_reset();
    gdl_free(x), gdl_free(w), gdl_free(g), gdl_free(b), gdl_free(rm), gdl_free(rv), gdl_free(ones);
    free(xs);
    return 0;
}

/* Batch norm of [N, C] (S 1, BatchNorm1d) works on 8 channels side by side in vector lanes and on the rest
   in a scalar loop, each channel with the expressions of a channel alone: every column of [N, 19] (two
   blocks of 8 and a tail of 3) bit for bit the column run as [N, 1] (the scalar loop), forward (y, the
   running statistics) and backward (x, weight and bias gradients; batch norm's backward the first or the
   second to reach x's intermediate), training and eval, with no activation, the fused ReLU (its mask on the
   negative outputs) and the fused GELU (its input kept apart). Both sides are new code: that the block
   gives the bits of the S > 1 loop it replaces for S 1 was checked once, by a hash of every bit of 312
   cases (2026-12-01, 12fcd9c) */
TEST test_batch_norm_1d_columns_bitwise(void) {
    enum { N = 6, C = 19 };
    float xv[N * C], wv[N * C], gv[C], bv[C], rmv[C], rvv[C], *whole = NULL, *col = NULL;
    static const int acts[3] = {GDL_ACT_NONE, GDL_ACT_RELU, GDL_ACT_GELU};
    int i, training, act, first, c;
    for (i = 0; i < N * C; i++) {
        xv[i] = (float)((i * 37 % 23) - 11) / 7.0f;
        wv[i] = (float)((i * 11 % 17) - 8) / 5.0f;
    }
    xv[5] = -0.0f, xv[7] = 0.0f;
    for (i = 0; i < C; i++) {
        gv[i] = 0.5f + (float)(i % 5) / 4, bv[i] = (float)(i % 3) - 1;
        rmv[i] = (float)(i % 4) / 8, rvv[i] = 0.5f + (float)(i % 7) / 7;
    }
    for (i = 0; i < 12; i++) {
        training = i & 1, act = acts[i / 2 % 3], first = i / 6;
        ASSERT_EQ(0, bn_cols_run(xv, wv, gv, bv, rmv, rvv, N, C, -1, training, act, first, &whole));
        for (c = 0; c < C; c++) {
            /* where y, x's gradient, the weight's and bias's gradients, the running mean and variance start */
            const int64_t in_whole[6] = {0, N * C, 2 * N * C, 2 * N * C + C, 2 * N * C + 2 * C, 2 * N * C + 3 * C};
            const int64_t alone[6] = {0, N, 2 * N, 2 * N + 1, 2 * N + 2, 2 * N + 3};
            int j, n;
            ASSERT_EQ(0, bn_cols_run(xv, wv, gv, bv, rmv, rvv, N, C, c, training, act, first, &col));
            for (j = 0; j < 6; j++)
                for (n = 0; n < (j < 2 ? N : 1); n++) {
                    const float a = whole[in_whole[j] + (j < 2 ? n * C : 0) + c], e = col[alone[j] + n];
                    if (memcmp(&a, &e, sizeof a))
                        FAILf("training %d act %d batch norm first %d column %d part %d row %d: %a, alone %a",
                              training, act, first, c, j, n, a, e);
                }
            free(col), col = NULL;
        }
        free(whole), whole = NULL;
    }
    PASS();
}

/* Max pooling stores an unset gradient too (gdl__bw_fresh_ok) and zeroes what no window picks: 2x2 pools
   of an odd-sized plane (its last row and column in no window) and 3x3 stride-2 padded ones (overlapping
   windows), the pool's backward the first or the second to reach t, bit for bit against t a leaf (whose
   gradient is added to zeros). The arena is filled with NaN first, so that a gradient left unzeroed shows. */
TEST test_unset_grads_max_pool(void) {
    float xv[210];
    int64_t s4[4] = {2, 3, 7, 5}, sj[1] = {4096};
    gdl_tensor *xb, *leaf, *t, *ones;
    int i, k, order, src;
    for (i = 0; i < 210; i++) xv[i] = (float)((i * 37 % 29) - 14) / 5.0f;
    ones = gdl_ones(1, sj, GDL_F32, gdl_cpu());
    for (k = 0; k < 2; k++)
        for (order = 0; order < 2; order++) {
            xb = arr(xv, 4, s4);
            leaf = arr(xv, 4, s4);
            gdl_set_requires_grad(xb, 1);
            gdl_set_requires_grad(leaf, 1);
            for (src = 0; src < 2; src++) { /* t an intermediate of xb, then the leaf itself */
                gdl_tensor *p = NULL, *u = NULL;
                ASSERT(gdl_mul_scalar(ones, NAN) != NULL);
                gdl_arena_reset();
                t = src ? leaf : gdl_mul_scalar(xb, 1);
                if (order == 0) u = gdl_mul_scalar(t, 0.25); /* later on the tape: the pool's backward is first */
                p = k ? gdl_max_pool2d(t, 3, 2, 1) : gdl_max_pool2d(t, 2, 0, 0);
                if (order == 1) u = gdl_mul_scalar(t, 0.25);
                ASSERT_EQ(0, gdl_backward(gdl_add(gdl_mul_scalar(gdl_sum(p), 1.5), gdl_sum(u))));
                if (!src) {
                    for (i = 0; i < 210; i++) ASSERT_EQ(at(xb->grad, i), at(t->grad, i)); /* the scale by 1 is exact */
                    gdl_arena_reset();
                }
            }
            for (i = 0; i < 210; i++) {
                ASSERT_EQ(at(leaf->grad, i), at(xb->grad, i));
                if (!k && (i % 5 == 4 || i / 5 % 7 == 6)) ASSERT_EQ(0.25, at(xb->grad, i)); /* in no window */
            }
            gdl_arena_reset();
            gdl_free(xb);
            gdl_free(leaf);
        }
    gdl_free(ones);
    PASS();
}

TEST test_backward_twice_same_graph(void) {
    float a[1] = {3};
    int64_t s[1] = {1};
    gdl_tensor *x = arr(a, 1, s), *l;
    gdl_set_requires_grad(x, 1);
    l = gdl_sum(gdl_mul(x, x));
    ASSERT_EQ(0, gdl_backward(l));
    ASSERT_EQ(0, gdl_backward(l)); /* intermediates restart, the leaf accumulates */
    ASSERT_IN_RANGE(12, at(x->grad, 0), 0);
    gdl_free(x);
    PASS();
}

TEST test_no_grad_and_detach(void) {
    int64_t s[1] = {3};
    gdl_tensor *x = gdl_ones(1, s, GDL_F32, CPU), *y;
    gdl_set_requires_grad(x, 1);
    ASSERT_EQ(1, gdl_set_grad_enabled(0));
    y = gdl_sum(gdl_mul(x, x));
    ASSERT_EQ(0, y->requires_grad);
    ASSERT_EQ(-1, gdl_tensor_op(y));
    ASSERT_EQ(-1, gdl_backward(y));
    ASSERT_CONTAINS(gdl_last_error(), "does not require grad");
    gdl_set_grad_enabled(1);
    y = gdl_sum(gdl_mul(gdl_detach(x), x)); /* only one path carries the gradient */
    ASSERT_EQ(0, gdl_backward(y));
    ASSERT_IN_RANGE(1, at(x->grad, 0), 0);
    gdl_free(x);
    PASS();
}

TEST test_anomaly_mode_names_the_op(void) {
    float a[2] = {1, -1};
    int64_t s[1] = {2};
    gdl_tensor *x = arr(a, 1, s), *y;
    ASSERT_NOT_NULL(gdl_log(x)); /* without anomaly mode: NaN flows on */
    gdl_set_anomaly_mode(1);
    ASSERT_NULL(gdl_log(x));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_log");
    ASSERT_CONTAINS(gdl_last_error(), "NaN/Inf");
    ((float *)x->data)[1] = 0; /* sqrt'(0) = inf: caught in backward */
    gdl_set_requires_grad(x, 1);
    y = gdl_sum(gdl_pow_scalar(x, 0.5));
    ASSERT_NOT_NULL(y);
    ASSERT_EQ(-1, gdl_backward(y));
    ASSERT_CONTAINS(gdl_last_error(), "pow_scalar");
    gdl_set_anomaly_mode(0);
    gdl_free(x);
    PASS();
}

/* ---- errors: message names the op, shapes, dtypes, devices; inputs untouched ---- */

TEST test_error_messages(void) {
    int64_t s1[2] = {64, 784}, s2[2] = {128, 10}, s3[1] = {3}, s4[4] = {1, 1, 2, 2};
    gdl_tensor *a = gdl_zeros(2, s1, GDL_F32, CPU), *b = gdl_zeros(2, s2, GDL_F32, CPU);
    gdl_tensor *i = gdl_zeros(1, s3, GDL_I32, CPU), *img = gdl_ones(4, s4, GDL_F32, CPU), fake;
    ASSERT_NULL(gdl_matmul(a, b));
    ASSERT_STR_EQ("gdl_matmul: inner dimensions differ: [64,784] x [128,10]", gdl_last_error());
    ASSERT_NULL(gdl_add(a, b));
    ASSERT_STR_EQ("gdl_add: shapes [64,784] and [128,10] cannot be broadcast", gdl_last_error());
    ASSERT_NULL(gdl_relu(i));
    ASSERT_STR_EQ("gdl_relu: expected a float tensor (f32, bf16 or f16), got i32 [3]", gdl_last_error());
    ASSERT_NULL(gdl_linear(a, b, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_linear: input [64,784] does not match weight [128,10]");
    ASSERT_NULL(gdl_sum_dim(a, 2, 0));
    ASSERT_STR_EQ("gdl_sum_dim: dim 2 out of range for [64,784] (ndim 2)", gdl_last_error());
    ASSERT_NULL(gdl_conv2d(a, b, NULL, 1, 0, 1, 1));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_conv2d: expected input [N,C,H,W]");
    ASSERT_NULL(gdl_max_pool2d(img, 3, 1, 0));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_max_pool2d: kernel 3 is larger than the padded input [1,1,2,2]");
    ASSERT_NULL(gdl_cross_entropy(a, i));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_cross_entropy: expected input [B,C] and i32 target [B]");
    ASSERT_NULL(gdl_reshape(a, 2, s2));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_reshape: cannot reshape [64,784]");
    {   /* a target whose element count overflows int64 is refused, not wrapped round to a match */
        const int64_t huge[3] = {(int64_t)1 << 40, (int64_t)1 << 40, (int64_t)1 << 40};
        ASSERT_NULL(gdl_reshape(a, 3, huge));
        ASSERT_CONTAINS(gdl_last_error(), "more elements than int64 counts");
    }
    ASSERT_NULL(gdl_slice(a, 10, 65));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_slice: rows [10,65) out of range");
    ASSERT_NULL(gdl_dropout(a, 1.5, 1));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_dropout: probability 1.5");
    ASSERT_EQ(-1, gdl_backward(a));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_backward: the loss must have one element, got [64,784]");
    ASSERT(isnan(gdl_item(a)));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_item: tensor [64,784] has 50176 elements");
    /* device mismatch, as PyTorch's "Expected all tensors to be on the same device" */
    fake = *b;
    fake.device = gdl_cuda(0);
    ASSERT_NULL(gdl_add(b, &fake));
    ASSERT_STR_EQ("gdl_add: expected all tensors on the same device, but found [128,10] cpu and [128,10] cuda:0",
                  gdl_last_error());
    /* NULL arguments keep the earlier cause */
    ASSERT_NULL(gdl_relu(gdl_matmul(a, b)));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_relu: x is NULL (after: gdl_matmul: inner dimensions differ");
    gdl_clear_error();
    ASSERT_NULL(gdl_sigmoid(NULL));
    ASSERT_STR_EQ("gdl_sigmoid: x is NULL", gdl_last_error());
    gdl_free(a); gdl_free(b); gdl_free(i); gdl_free(img);
    PASS();
}

/* A temporary kept across gdl_arena_reset(): its memory holds the next step's data, so every use of it
   is refused with a message (a loss saved from the last step must not print this step's value). */
TEST test_stale_temporary_refused(void) {
    int64_t s[2] = {2, 3};
    gdl_tensor *w = gdl_randn(2, s, CPU), *old, *now, *kept;
    float host[6];
    double v_old;
    ASSERT_NOT_NULL(w);
    ASSERT_EQ(0, gdl_set_requires_grad(w, 1));
    gdl_arena_reset();
    old = gdl_sum(gdl_mul_scalar(w, 2.0));
    ASSERT_NOT_NULL(old);
    v_old = gdl_item(old); /* fine within its step */
    ASSERT(v_old == v_old);
    ASSERT_NOT_NULL(kept = gdl_clone(old)); /* the way to keep it */
    gdl_arena_reset();
    now = gdl_sum(gdl_mul_scalar(w, 3.0));
    ASSERT_NOT_NULL(now);
    ASSERT(gdl_item(old) != gdl_item(old)); /* NaN */
    ASSERT_CONTAINS(gdl_last_error(), "gdl_item: t is a temporary from before the last gdl_arena_reset()");
    ASSERT_CONTAINS(gdl_last_error(), "gdl_clone");
    ASSERT_NULL(gdl_add(now, old));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_add: b is a temporary from before the last gdl_arena_reset()");
    ASSERT_EQ(-1, gdl_backward(old));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_backward: loss is a temporary");
    ASSERT_NULL(gdl_clone(old));
    ASSERT_NULL(gdl_to(old, CPU));
    ASSERT_EQ(-1, gdl_copy_to_host(old, host, sizeof host));
    ASSERT_EQ(-1, gdl_print(old, stderr));
    /* this step's temporaries, the clone and persistent tensors work */
    ASSERT_IN_RANGE(1.5 * v_old, gdl_item(now), 1e-5 * (1 + fabs(v_old)));
    ASSERT_IN_RANGE(v_old, gdl_item(kept), 0);
    ASSERT_EQ(0, gdl_backward(now));
    gdl_free(kept);
    gdl_free(w);
    gdl_arena_reset();
    PASS();
}

/* A CPU build has no GPU monitoring compiled in, and says how to get it. */
TEST test_gpu_monitor_not_compiled_in(void) {
    gdl_gpu_status s;
#if defined(GPUDL_CUDA) || defined(GPUDL_NVML)
    SKIPm("built with GPU monitoring (tests/test_monitor.c covers it)");
#endif
    ASSERT_EQ(-1, gdl_gpu_count());
    ASSERT_CONTAINS(gdl_last_error(), "gdl_gpu_count: GPU monitoring is not compiled in: build with -DGPUDL_CUDA or -DGPUDL_NVML");
    ASSERT_EQ(-1, gdl_gpu_stats(0, &s));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_gpu_stats: GPU monitoring is not compiled in");
    PASS();
}

TEST test_index_errors(void) {
    float w[4] = {0, 1, 2, 3};
    int32_t idx[3] = {0, 2, 1}, tg[2] = {1, 5};
    int64_t sw[2] = {2, 2}, si[1] = {3}, st[1] = {2};
    gdl_tensor *W = arr(w, 2, sw), *I = gdl_from_array(idx, 1, si, GDL_I32, CPU), *T = gdl_from_array(tg, 1, st, GDL_I32, CPU);
    ASSERT_NULL(gdl_embedding(I, W));
    ASSERT_STR_EQ("gdl_embedding: index 2 at position 1 is out of range [0,2)", gdl_last_error());
    ASSERT_NULL(gdl_cross_entropy(W, T));
    ASSERT_STR_EQ("gdl_cross_entropy: index 5 at position 1 is out of range [0,2)", gdl_last_error());
    gdl_free(W); gdl_free(I); gdl_free(T);
    PASS();
}

TEST test_factory_errors(void) {
    int64_t bad[2] = {2, -1}, ok[1] = {4}, huge[3] = {1 << 20, 1 << 20, 1 << 20};
    ASSERT_NULL(gdl_zeros(2, bad, GDL_F32, CPU));
    ASSERT_CONTAINS(gdl_last_error(), "negative dimension in shape [2,-1]");
    ASSERT_NULL(gdl_zeros(7, ok, GDL_F32, CPU));
    ASSERT_CONTAINS(gdl_last_error(), "ndim 7 out of range");
    ASSERT_NULL(gdl_zeros(1, ok, (gdl_dtype)42, CPU));
    ASSERT_CONTAINS(gdl_last_error(), "invalid dtype 42");
    ASSERT_NULL(gdl_zeros(3, huge, GDL_F32, CPU));
    ASSERT_CONTAINS(gdl_last_error(), "too large");
#ifndef GPUDL_CUDA
    ASSERT_NULL(gdl_zeros(1, ok, GDL_F32, gdl_cuda(0)));
    ASSERT_CONTAINS(gdl_last_error(), "cuda:0 is not available in this build");
    ASSERT_EQ(0, gdl_cuda_is_available());
    ASSERT_EQ(GDL_DEVICE_CPU, gdl_default_device().type);
#endif
    gdl_clear_error();
    ASSERT_NULL(gdl_from_array(NULL, 1, ok, GDL_F32, CPU));
    ASSERT_STR_EQ("gdl_from_array: data is NULL", gdl_last_error());
    {
        gdl_tensor *leaf = gdl_ones(1, ok, GDL_F32, CPU);
        ASSERT_EQ(0, gdl_set_requires_grad(gdl_relu(leaf), 1)); /* made without grad: a leaf, as in PyTorch */
        gdl_set_requires_grad(leaf, 1);
        ASSERT_EQ(-1, gdl_set_requires_grad(gdl_relu(leaf), 0));
        ASSERT_CONTAINS(gdl_last_error(), "is the result of relu, not a leaf");
        gdl_free(leaf);
    }
    PASS();
}

TEST test_failed_ops_leave_inputs_untouched(void) {
    int64_t s[2] = {3, 4}, s2[2] = {5, 4};
    gdl_tensor *a, *b, *a0, *b0;
    gdl_manual_seed(8);
    a = gdl_randn(2, s, CPU); b = gdl_randn(2, s2, CPU);
    gdl_set_requires_grad(a, 1);
    a0 = gdl_clone(a); b0 = gdl_clone(b);
    ASSERT_NULL(gdl_matmul(a, b));
    ASSERT_NULL(gdl_add(a, b));
    ASSERT_NULL(gdl_concat(2, (gdl_tensor *[]){a, b}, 1));
    ASSERT(memcmp(a->data, a0->data, sizeof(float) * 12) == 0);
    ASSERT(memcmp(b->data, b0->data, sizeof(float) * 20) == 0);
    ASSERT_NULL(a->grad);
    ASSERT(gdl_same_shape(a, a0));
    gdl_free(a); gdl_free(b); gdl_free(a0); gdl_free(b0);
    PASS();
}

/* ---- dtypes and the generator ---- */

static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

TEST test_f16_round_trip_all(void) {
    uint32_t h;
    for (h = 0; h < 65536; h++) {
        float f = gdl_f16_to_f32((uint16_t)h);
        if (isnan(f)) {
            ASSERT(((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff));
            ASSERT(isnan(gdl_f16_to_f32(gdl_f32_to_f16(f))));
        } else {
            ASSERT_EQ(h, gdl_f32_to_f16(f));
        }
    }
    PASS();
}

TEST test_f16_rounding(void) {
    ASSERT_EQ(0x3c00, gdl_f32_to_f16(1.0f));
    ASSERT_EQ(0x3c00, gdl_f32_to_f16(1.0f + 1.0f / 2048));          /* tie -> even */
    ASSERT_EQ(0x3c02, gdl_f32_to_f16(1.0f + 3.0f / 2048));          /* tie -> even (up) */
    ASSERT_EQ(0x3c01, gdl_f32_to_f16(1.0f + 1.0f / 2048 + 1e-6f)); /* above the tie */
    ASSERT_EQ(0x7bff, gdl_f32_to_f16(65504.0f));
    ASSERT_EQ(0x7bff, gdl_f32_to_f16(65519.0f));
    ASSERT_EQ(0x7c00, gdl_f32_to_f16(65520.0f));
    ASSERT_EQ(0xfc00, gdl_f32_to_f16(-INFINITY));
    ASSERT_EQ(0x0001, gdl_f32_to_f16(bitsf(0x33800000))); /* 2^-24, smallest subnormal */
    ASSERT_EQ(0x0000, gdl_f32_to_f16(bitsf(0x33000000))); /* 2^-25: tie -> 0 */
    ASSERT_EQ(0x0001, gdl_f32_to_f16(bitsf(0x33400000))); /* 1.5 * 2^-25 -> 2^-24 */
    ASSERT_EQ(0x0400, gdl_f32_to_f16(bitsf(0x38800000))); /* 2^-14, smallest normal */
    ASSERT_EQ(0x8000, gdl_f32_to_f16(-0.0f));
    ASSERT(isnan(gdl_f16_to_f32(gdl_f32_to_f16(NAN))));
    PASS();
}

TEST test_bf16_rounding(void) {
    ASSERT_EQ(0x3f80, gdl_f32_to_bf16(1.0f));
    ASSERT_EQ(0x3f80, gdl_f32_to_bf16(bitsf(0x3f808000))); /* tie -> even */
    ASSERT_EQ(0x3f82, gdl_f32_to_bf16(bitsf(0x3f818000))); /* tie -> even (up) */
    ASSERT_EQ(0x3f81, gdl_f32_to_bf16(bitsf(0x3f808001)));
    ASSERT_EQ(0x7f80, gdl_f32_to_bf16(INFINITY));
    ASSERT_EQ(0x7f80, gdl_f32_to_bf16(bitsf(0x7f7fffff))); /* max float rounds to inf */
    ASSERT(isnan(gdl_bf16_to_f32(gdl_f32_to_bf16(NAN))));
    ASSERT_EQ(fbits(1.0f), fbits(gdl_bf16_to_f32(0x3f80)));
    PASS();
}

TEST test_to_dtype_and_fill(void) {
    float a[4] = {1.5f, -2.25f, 300.7f, 0.1f};
    int64_t s[1] = {4};
    gdl_tensor *x = arr(a, 1, s), *h = gdl_to_dtype(x, GDL_F16), *back, *i32, *u8 = gdl_full(1, s, 7, GDL_U8, CPU);
    ASSERT_EQ(GDL_F16, h->dtype);
    ASSERT_EQ(gdl_f32_to_f16(0.1f), ((uint16_t *)h->data)[3]);
    back = gdl_to_dtype(h, GDL_F32);
    ASSERT_IN_RANGE(-2.25, at(back, 1), 0);
    ASSERT_IN_RANGE(0.1, at(back, 3), 1e-4);
    i32 = gdl_to_dtype(x, GDL_I32);
    ASSERT_EQ(300, ((int32_t *)i32->data)[2]);
    ASSERT_EQ(-2, ((int32_t *)i32->data)[1]); /* toward zero */
    ASSERT_EQ(7, ((uint8_t *)u8->data)[3]);
    ASSERT_IN_RANGE(7, at(gdl_to_dtype(u8, GDL_F32), 0), 0);
    ASSERT_EQ(2, (int)gdl_dtype_size(GDL_BF16));
    ASSERT_STR_EQ("bf16", gdl_dtype_name(GDL_BF16));
    gdl_free(x); gdl_free(u8);
    PASS();
}

TEST test_generator_reproducible(void) {
    int64_t s[1] = {1000};
    gdl_tensor *a, *b, *u;
    double m = 0, v = 0;
    int i;
    gdl_manual_seed(42);
    /* splitmix64 of (seed, counter): integer arithmetic, the same everywhere */
    ASSERT(gdl_rng_next_u64() == 0xbdd732262feb6e95ull);
    ASSERT(gdl_rng_next_u64() == 0x28efe333b266f103ull);
    gdl_manual_seed(7);
    a = gdl_randn(1, s, CPU);
    gdl_manual_seed(7);
    b = gdl_randn(1, s, CPU);
    ASSERT(memcmp(a->data, b->data, sizeof(float) * 1000) == 0);
    for (i = 0; i < 1000; i++) m += at(a, i);
    m /= 1000;
    for (i = 0; i < 1000; i++) v += (at(a, i) - m) * (at(a, i) - m);
    ASSERT_IN_RANGE(0, m, 0.1);
    ASSERT_IN_RANGE(1, v / 999, 0.1);
    u = gdl_uniform(1, s, -2, 3, CPU);
    for (i = 0; i < 1000; i++) ASSERT(at(u, i) >= -2 && at(u, i) < 3);
    {
        gdl_tensor *r = gdl_arange(5, GDL_I32, CPU);
        ASSERT_EQ(4, ((int32_t *)r->data)[4]);
        gdl_free(r);
    }
    gdl_free(a); gdl_free(b); gdl_free(u);
    PASS();
}

TEST test_print(void) {
    float a[4] = {1, 2, 3, 4};
    int64_t s[2] = {2, 2};
    gdl_tensor *x = arr(a, 2, s);
    char buf[512] = {0};
    FILE *f = tmpfile();
    ASSERT_NOT_NULL(f);
    ASSERT_EQ(0, gdl_print(x, f));
    rewind(f);
    ASSERT(fread(buf, 1, sizeof buf - 1, f) > 0);
    fclose(f);
    ASSERT_CONTAINS(buf, "tensor([[1.0000, 2.0000],");
    ASSERT_CONTAINS(buf, "shape=[2,2], dtype=f32, device=cpu");
    gdl_free(x);
    PASS();
}

TEST test_to_and_clone_lifetimes(void) {
    int64_t s[1] = {3};
    gdl_tensor *p = gdl_ones(1, s, GDL_F32, CPU), *q = gdl_to(p, CPU), *t, *c;
    ASSERT(q->flags & 1); /* persistent source -> persistent copy */
    ASSERT(q->data != p->data);
    t = gdl_relu(p);
    ASSERT(gdl_to(t, CPU) && !(gdl_to(t, CPU)->flags & 1)); /* temporary source -> temporary */
    c = gdl_clone(t);
    gdl_arena_reset();
    ASSERT_IN_RANGE(1, at(c, 2), 0); /* survives the reset */
    gdl_free(p); gdl_free(q); gdl_free(c);
    PASS();
}

TEST test_move_in_place(void) {
    int64_t s[1] = {3};
    gdl_tensor *p = gdl_ones(1, s, GDL_F32, CPU), *t;
    ASSERT_EQ(0, gdl_move_(p, CPU)); /* same device: nothing to do */
    t = gdl_relu(p);
    ASSERT_EQ(-1, gdl_move_(t, CPU));
    ASSERT_CONTAINS(gdl_last_error(), "only persistent tensors move in place");
#ifndef GPUDL_CUDA
    ASSERT_EQ(-1, gdl_move_(p, gdl_cuda(0)));
    ASSERT_CONTAINS(gdl_last_error(), "not available");
    ASSERT_EQ(GDL_DEVICE_CPU, p->device.type); /* untouched on failure */
    ASSERT_IN_RANGE(1, at(p, 2), 0);
#endif
    gdl_free(p);
    PASS();
}

/* regressions from review: each once returned wrong values silently */
TEST test_review_regressions(void) {
    int64_t s20[2] = {2, 0}, s30[2] = {3, 0}, s3[1] = {3}, s1[1] = {3};
    float nanv[3] = {1, NAN, 2}, bias[3] = {1, 2, 3};
    gdl_tensor *x, *w, *b, *y, *v, *W, *h2, *loss, *big;
    /* linear with in_features 0: y = bias (an empty sum), not stale memory */
    x = gdl_zeros(2, s20, GDL_F32, CPU); w = gdl_zeros(2, s30, GDL_F32, CPU); b = arr(bias, 1, s3);
    y = gdl_linear(x, w, b);
    ASSERT_NOT_NULL(y);
    ASSERT_IN_RANGE(1, at(y, 0), 0); ASSERT_IN_RANGE(3, at(y, 5), 0);
    /* argmax agrees with max_dim on NaN (PyTorch: NaN wins) */
    v = arr(nanv, 1, s1);
    ASSERT_EQ(1, ((int32_t *)gdl_argmax(v, 0)->data)[0]);
    /* integer stores saturate instead of overflowing */
    big = gdl_full(1, s3, 1e12, GDL_I32, CPU);
    ASSERT_EQ(INT32_MAX, ((int32_t *)big->data)[0]);
    /* gdl_to on a temporary passes the gradient back (PyTorch's .to) */
    W = gdl_ones(1, s3, GDL_F32, CPU);
    gdl_set_requires_grad(W, 1);
    h2 = gdl_to(gdl_mul_scalar(W, 2), CPU);
    ASSERT_EQ(GDL_OP_TO, gdl_tensor_op(h2));
    loss = gdl_sum(gdl_add(h2, W));
    ASSERT_EQ(0, gdl_backward(loss));
    ASSERT_IN_RANGE(3, at(W->grad, 0), 0);
    gdl_free(x); gdl_free(w); gdl_free(b); gdl_free(v); gdl_free(big); gdl_free(W);
    PASS();
}

/* scaled dot-product attention against PyTorch 2's F.scaled_dot_product_attention (float64, the values
   below): q [1,2,3,4], k [1,2,5,4], v [1,2,5,3] holding sin(a i + b) with is_causal (L < S: keys past
   the query's own index take no part), and with a u8 mask [3,5] whose second row keeps one key and
   scale 0.6; out, and the gradients of sum(out * w). A row that no key takes part in gives 0, as there. */
static void sdpa_fill(gdl_tensor *t, double a, double b) {
    int64_t i;
    for (i = 0; i < t->numel; i++) ((float *)t->data)[i] = (float)sin(a * (double)i + b);
}
static int sdpa_close(const gdl_tensor *t, const float *want) {
    int64_t i;
    for (i = 0; i < t->numel; i++)
        if (!(fabs(((const float *)t->data)[i] - want[i]) <= 2e-6 + 1e-5 * fabs(want[i]))) return 0;
    return 1;
}
TEST test_sdpa_pytorch_values(void) {
    static const float causal_out[18] = {
        0.29552021f, 0.93203909f, 0.86320937f, 0.2455415f, 0.40771484f, 0.26133772f, -0.1670341f, 0.027107994f,
        0.2007353f, 0.94369567f, 0.84574683f, 0.10775365f, -0.099279667f, -0.31247385f, -0.28919405f, 0.2561023f,
        0.19288841f, -0.016299586f};
    static const float causal_gq[24] = {
        0, 0, 0, 0, 0.17917746f, 0.10931124f, -0.1206962f, -0.17388343f, -0.068815976f, 0.13596745f, 0.14155824f,
        -0.06023412f, 0, 0, 0, 0, 0.18943778f, -0.055215608f, -0.21897801f, -0.061937112f, 0.21432888f,
        -0.14712826f, -0.29304216f, -0.0096486059f};
    static const float causal_gk[40] = {
        0.099384892f, -0.093315935f, -0.24212882f, -0.27706474f, -0.20458919f, 0.11558178f, 0.38139283f,
        0.46782887f, 0.1052043f, -0.022265842f, -0.13926401f, -0.19076414f, 0, 0, 0, 0, 0, 0, 0, 0, 0.11930808f,
        0.13998291f, 0.094821592f, 0.0050641987f, -0.20268676f, -0.20575175f, -0.11204848f, 0.034352947f,
        0.083378684f, 0.065768841f, 0.017226884f, -0.039417145f, 0, 0, 0, 0, 0, 0, 0, 0};
    static const float causal_gv[30] = {
        0.99199976f, 1.1394725f, 1.0079627f, 0.21035267f, -0.039625172f, -0.27990139f, -0.12217511f, -0.32882345f,
        -0.45496433f, 0, 0, 0, 0, 0, 0, -0.44682211f, -0.13740596f, 0.20565195f, 0.43624914f, 0.67482037f,
        0.74817203f, 0.1436109f, 0.12285978f, 0.072028307f, 0, 0, 0, 0, 0, 0};
    static const float bool_out[18] = {
        0.027416002f, 0.49278663f, 0.58522617f, -0.55068554f, 0.31154136f, 0.93799998f, -0.059733841f,
        -0.00051643515f, 0.059091799f, 0.81341463f, 0.73346549f, 0.098444285f, 0.34331493f, 0.94912455f,
        0.83665564f, 0.1996648f, 0.1607187f, 0.0001438833f};
    static const float bool_gq[24] = {
        0.048708901f, 0.3005834f, 0.11210251f, -0.24060882f, 0, 0, 0, 0, -0.0037939833f, 0.10803753f, 0.061593809f,
        -0.075084987f, -0.18116341f, -0.156043f, 0.097680767f, 0.20830198f, 0, 0, 0, 0, 0.29987583f, -0.075349029f,
        -0.34018739f, -0.10665043f};
    static const float bool_gk[40] = {
        0.062021213f, 0.099608667f, 0.090348608f, 0.038596187f, -0.13794628f, 0.02919548f, 0.18260615f, 0.25013429f,
        0.11915f, -0.029084011f, -0.16363935f, -0.22123255f, -0.036770213f, -0.10108624f, -0.11785983f,
        -0.079202095f, -0.0064547183f, 0.0013661014f, 0.0085444222f, 0.011704168f, 0.28739195f, 0.27017705f,
        0.12589366f, -0.077599486f, -0.40313548f, -0.31799199f, -0.08329189f, 0.19058168f, 0.076926042f,
        0.060184464f, 0.015137192f, -0.037029338f, 0.041810034f, -0.010009016f, -0.057120669f, -0.077367579f,
        -0.0029925429f, -0.0023605084f, -0.0006182898f, 0.0014147201f};
    static const float bool_gv[30] = {
        0.1129859f, 0.21084675f, 0.25708497f, -0.074841248f, -0.20142857f, -0.27869915f, 1.0209556f, 0.75764573f,
        0.30883775f, 0.035252224f, 0.042111163f, 0.038659821f, -0.014175145f, -0.038151143f, -0.05278641f,
        -0.35254492f, -0.24633818f, -0.079819267f, 0.31124642f, 0.26627274f, 0.15610621f, 0.11524554f, 0.5844703f,
        0.91059634f, -0.025032628f, -0.016098733f, -0.0032233067f, 0.08412353f, 0.071968067f, 0.04219231f};
    static const uint8_t mask_v[15] = {1, 0, 1, 1, 0, 0, 0, 1, 0, 0, 1, 1, 1, 1, 1}, none_v[15] = {1, 1, 1, 1, 1};
    int64_t sq[4] = {1, 2, 3, 4}, sk[4] = {1, 2, 5, 4}, sv[4] = {1, 2, 5, 3}, sw[4] = {1, 2, 3, 3}, sm[2] = {3, 5};
    gdl_tensor *q = gdl_zeros(4, sq, GDL_F32, gdl_cpu()), *k = gdl_zeros(4, sk, GDL_F32, gdl_cpu());
    gdl_tensor *v = gdl_zeros(4, sv, GDL_F32, gdl_cpu()), *w = gdl_zeros(4, sw, GDL_F32, gdl_cpu());
    gdl_tensor *m = gdl_from_array(mask_v, 2, sm, GDL_U8, gdl_cpu()), *m0 = gdl_from_array(none_v, 2, sm, GDL_U8, gdl_cpu());
    gdl_tensor *o;
    const float *want[2][4] = {{causal_out, causal_gq, causal_gk, causal_gv}, {bool_out, bool_gq, bool_gk, bool_gv}};
    int pass, j;
    ASSERT(q && k && v && w && m && m0);
    sdpa_fill(q, 0.7, 0.1);
    sdpa_fill(k, 1.3, 0.2);
    sdpa_fill(v, 0.9, 0.3);
    sdpa_fill(w, 0.5, 0.4);
    gdl_set_requires_grad(q, 1);
    gdl_set_requires_grad(k, 1);
    gdl_set_requires_grad(v, 1);
    for (pass = 0; pass < 2; pass++) {
        gdl_tensor *t[4];
        gdl_arena_reset();
        gdl_zero_grad_tensor(q);
        gdl_zero_grad_tensor(k);
        gdl_zero_grad_tensor(v);
        ASSERT_NOT_NULL(o = gdl_scaled_dot_product_attention(q, k, v, pass ? m : NULL, 0, !pass, pass ? 0.6 : NAN));
        ASSERT_EQ(0, gdl_backward_grad(o, w));
        t[0] = o; t[1] = q->grad; t[2] = k->grad; t[3] = v->grad;
        for (j = 0; j < 4; j++)
            if (!sdpa_close(t[j], want[pass][j]))
                FAILf("%s: %s differs from PyTorch's", pass ? "u8 mask" : "is_causal", j ? "a gradient" : "the output");
    }
    gdl_arena_reset(); /* the first query row with no key: 0 */
    ASSERT_NOT_NULL(o = gdl_scaled_dot_product_attention(q, k, v, m0, 0, 0, GDL_SCALE_DEFAULT));
    for (j = 0; j < 3; j++) ASSERT_EQ(0.0, (double)((float *)o->data)[1 * 3 + j]);
    gdl_free(q); gdl_free(k); gdl_free(v); gdl_free(w); gdl_free(m); gdl_free(m0);
    gdl_arena_reset();
    PASS();
}

SUITE(values) {
    SET_SETUP(reset, NULL);
    RUN_TEST(test_add_broadcast_values);
    RUN_TEST(test_matmul_values);
    RUN_TEST(test_linear_matches_naive);
    RUN_TEST(test_reductions_values);
    RUN_TEST(test_softmax_values);
    RUN_TEST(test_activation_values);
    RUN_TEST(test_conv2d_matches_naive);
    RUN_TEST(test_pool_values);
    RUN_TEST(test_batch_norm_values_and_running_stats);
    RUN_TEST(test_layer_norm_values);
    RUN_TEST(test_cross_entropy_values);
    RUN_TEST(test_cross_entropy_soft_targets);
    RUN_TEST(test_mse_bce_values);
    RUN_TEST(test_dropout_behaviour);
    RUN_TEST(test_dropout_mask_exact);
    RUN_TEST(test_embedding_concat_views);
    RUN_TEST(test_review_regressions);
    RUN_TEST(test_structure_values);
    RUN_TEST(test_index_values_and_scatter_add);
    RUN_TEST(test_compare_where_values);
    RUN_TEST(test_elementwise_seq_values);
    RUN_TEST(test_matmul_broadcast_values);
    RUN_TEST(test_sdpa_pytorch_values);
}

SUITE(autograd) {
    SET_SETUP(reset, NULL);
    RUN_TEST(test_grad_accumulates_and_zeroes);
    RUN_TEST(test_unset_intermediate_grads);
    RUN_TEST(test_unset_grads_unary_and_batchnorm);
    RUN_TEST(test_batch_norm_1d_columns_bitwise);
    RUN_TEST(test_unset_grads_max_pool);
    RUN_TEST(test_backward_twice_same_graph);
    RUN_TEST(test_no_grad_and_detach);
    RUN_TEST(test_anomaly_mode_names_the_op);
}

/* gdl_item_ex tells a NaN element (0, *out NaN) from an error (-1, *out untouched); gdl_item gives NaN for both */
TEST test_item_ex(void) {
    int64_t s1[1] = {1}, s3[1] = {3};
    gdl_tensor *one = gdl_full(1, s1, 2.5, GDL_F32, CPU), *nan = gdl_full(1, s1, NAN, GDL_F32, CPU);
    gdl_tensor *three = gdl_zeros(1, s3, GDL_F32, CPU), *h = gdl_full(0, s1, -1.5, GDL_BF16, CPU), *old;
    double v = 7;
    ASSERT(one && nan && three && h);
    ASSERT_EQ(0, gdl_item_ex(one, &v));
    ASSERT_IN_RANGE(2.5, v, 0);
    ASSERT_EQ(0, gdl_item_ex(h, &v)); /* a 0-d bf16 scalar */
    ASSERT_IN_RANGE(-1.5, v, 0);
    gdl_clear_error();
    ASSERT_EQ(0, gdl_item_ex(nan, &v)); /* a NaN loss is a value, not an error */
    ASSERT(isnan(v));
    ASSERT_STR_EQ("", gdl_last_error());
    v = 7;
    ASSERT_EQ(-1, gdl_item_ex(three, &v)); /* an error leaves *out alone */
    ASSERT_IN_RANGE(7, v, 0);
    ASSERT_STR_EQ("gdl_item_ex: tensor [3] has 3 elements, expected 1", gdl_last_error());
    gdl_clear_error();
    ASSERT_EQ(-1, gdl_item_ex(NULL, &v));
    ASSERT_STR_EQ("gdl_item_ex: t is NULL", gdl_last_error());
    ASSERT_EQ(-1, gdl_item_ex(one, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_item_ex: out is NULL");
    old = gdl_add(one, one); /* a temporary read after the reset */
    ASSERT_NOT_NULL(old);
    gdl_arena_reset();
    ASSERT_EQ(-1, gdl_item_ex(old, &v));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_item_ex: t is a temporary from before the last gdl_arena_reset()");
    ASSERT_IN_RANGE(7, v, 0);
    /* gdl_item: NaN either way, the error only after a failure */
    ASSERT(isnan(gdl_item(nan)));
    ASSERT(isnan(gdl_item(three)));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_item: tensor [3] has 3 elements");
    gdl_free(one);
    gdl_free(nan);
    gdl_free(three);
    gdl_free(h);
    PASS();
}

/* The version is written once (GPUDL_VERSION); the numeric macros and gdl_version() agree with it */
TEST test_version(void) {
    char v[64];
    snprintf(v, sizeof v, "%d.%d.%d", GPUDL_VERSION_MAJOR, GPUDL_VERSION_MINOR, GPUDL_VERSION_PATCH);
    ASSERT_STR_EQ(GPUDL_VERSION, v);
    ASSERT_STR_EQ(GPUDL_VERSION, gdl_version());
    PASS();
}

SUITE(errors) {
    SET_SETUP(reset, NULL);
    RUN_TEST(test_error_messages);
    RUN_TEST(test_index_errors);
    RUN_TEST(test_stale_temporary_refused);
    RUN_TEST(test_gpu_monitor_not_compiled_in);
    RUN_TEST(test_factory_errors);
    RUN_TEST(test_failed_ops_leave_inputs_untouched);
    RUN_TEST(test_seq_op_errors);
    RUN_TEST(test_item_ex);
    RUN_TEST(test_version);
}

SUITE(tensors) {
    SET_SETUP(reset, NULL);
    RUN_TEST(test_f16_round_trip_all);
    RUN_TEST(test_f16_rounding);
    RUN_TEST(test_bf16_rounding);
    RUN_TEST(test_to_dtype_and_fill);
    RUN_TEST(test_generator_reproducible);
    RUN_TEST(test_print);
    RUN_TEST(test_to_and_clone_lifetimes);
    RUN_TEST(test_move_in_place);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_SUITE(values);
    RUN_SUITE(autograd);
    RUN_SUITE(errors);
    RUN_SUITE(tensors);
    gdl_shutdown();
    HARNESS_MAIN_END();
}
