/* test_dtype.c — run-time dtypes on the CPU: every op that takes floats,
   forward and backward, in bf16 and f16 against f32 (the dtype parity table,
   tests/dtype_parity.h, over the rows of tests/op_cases.h, plain and fanned
   out); PyTorch's type promotion for mixed inputs; gradients in the leaf's
   dtype; GEMM sizes off the kernel's block sizes; error messages that name
   dtypes, and failed calls that leave their inputs untouched; scaled dot-product attention's fused CPU
   kernel against the unfused composition at every tile edge, its errors and its linear memory
   (tests/attention_cases.h). */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"

#include <math.h>
#include <string.h>
#include <stdlib.h>

#include "dtype_parity.h"
#include "autocast_cases.h"
#include "attention_cases.h"
#include <pthread.h>

#define CPU gdl_cpu()

static void reset(void *u) {
    (void)u;
    gdl_arena_reset();
    gdl_clear_error();
    gdl_set_grad_enabled(1);
    while (gdl_autocast_enabled()) gdl_autocast_end(); /* a failed test's region */
}

/* a persistent tensor of dtype dt holding randn values (rounded to dt) */
static gdl_tensor *rnd(int ndim, const int64_t *shape, gdl_dtype dt) {
    gdl_tensor *f = gdl_randn(ndim, shape, CPU), *t;
    if (!f || dt == GDL_F32) return f;
    t = gdl_clone(gdl_to_dtype(f, dt));
    gdl_free(f);
    return t;
}

static double val(gdl_tensor *t, int64_t i) {
    gdl_tensor *f = gdl_to_dtype(t, GDL_F32);
    return f ? (double)((const float *)f->data)[i] : NAN;
}

/* max |a - b| over all elements, both read as f32 */
static double maxdiff(gdl_tensor *a, gdl_tensor *b) {
    gdl_tensor *fa = gdl_to_dtype(a, GDL_F32), *fb = gdl_to_dtype(b, GDL_F32);
    double m = 0;
    int64_t i;
    if (!fa || !fb || a->numel != b->numel) return INFINITY;
    for (i = 0; i < a->numel; i++) {
        double e = fabs((double)((float *)fa->data)[i] - (double)((float *)fb->data)[i]);
        if (!(e <= m)) m = e;
    }
    return m;
}

/* A bf16 leaf used twice, by ops in different dtypes: its gradient is bf16
   and sums both uses. */
TEST grad_dtype_fanout(void) {
    int64_t n = 33;
    gdl_tensor *x = rnd(1, &n, GDL_BF16), *y = rnd(1, &n, GDL_F32), *loss;
    int64_t i;
    ASSERT_NOT_NULL(x);
    ASSERT_EQ(0, gdl_set_requires_grad(x, 1));
    ASSERT_EQ(0, gdl_set_requires_grad(y, 1));
    /* sum(x * 3) + sum(x * y): dx = 3 + y, dy = x */
    loss = gdl_add(gdl_sum(gdl_mul_scalar(x, 3)), gdl_sum(gdl_mul(x, y)));
    ASSERT_NOT_NULL(loss);
    ASSERT_EQm("bf16 + f32 promotes to f32", (int)GDL_F32, (int)loss->dtype);
    ASSERT_EQ(0, gdl_backward(loss));
    ASSERT_NOT_NULL(x->grad);
    ASSERT_EQ((int)GDL_BF16, (int)x->grad->dtype);
    ASSERT_EQ((int)GDL_F32, (int)y->grad->dtype);
    for (i = 0; i < n; i++) {
        double want = 3 + val(y, i);
        ASSERT_IN_RANGE(want, val(x->grad, i), 1e-2 * fabs(want) + 1e-2);
        ASSERT_IN_RANGE(val(x, i), val(y->grad, i), 0);
    }
    /* a bf16 loss: backward seeds it in bf16 */
    ASSERT_EQ(0, gdl_zero_grad_tensor(x));
    loss = gdl_sum(gdl_mul_scalar(x, 2));
    ASSERT_EQ((int)GDL_BF16, (int)loss->dtype);
    ASSERT_EQ(0, gdl_backward(loss));
    for (i = 0; i < n; i++) ASSERT_IN_RANGE(2, val(x->grad, i), 0);
    /* in place */
    {
        double before = val(x, 5);
        ASSERT_EQ(0, gdl_mul_scalar_(x, 0.5));
        ASSERT_IN_RANGE(before * 0.5, val(x, 5), 0);
    }
    gdl_free(x);
    gdl_free(y);
    PASS();
}

/* BatchNorm on a bf16 input with f32 affine parameters and running
   statistics (autocast's layout): the output is bf16, the running
   statistics update as in f32. */
TEST batch_norm_mixed(void) {
    int64_t s[4] = {4, 3, 5, 5}, c = 3;
    gdl_tensor *x = rnd(4, s, GDL_BF16), *fx, *rm = gdl_zeros(1, &c, GDL_F32, CPU), *rv = gdl_ones(1, &c, GDL_F32, CPU);
    gdl_tensor *rm2 = gdl_zeros(1, &c, GDL_F32, CPU), *rv2 = gdl_ones(1, &c, GDL_F32, CPU), *y, *fy;
    ASSERT_NOT_NULL(fx = gdl_to_dtype(x, GDL_F32));
    ASSERT_NOT_NULL(y = gdl_batch_norm(x, rm, rv, NULL, NULL, 1, 0.1, 1e-5));
    ASSERT_EQ((int)GDL_BF16, (int)y->dtype);
    ASSERT_NOT_NULL(fy = gdl_batch_norm(fx, rm2, rv2, NULL, NULL, 1, 0.1, 1e-5));
    ASSERT_IN_RANGE(0, maxdiff(rm, rm2), 0);
    ASSERT_IN_RANGE(0, maxdiff(rv, rv2), 0);
    ASSERT_IN_RANGE(0, maxdiff(y, gdl_to_dtype(fy, GDL_BF16)), 0);
    /* running statistics in a low dtype have no path (they are updated in place) */
    {
        gdl_tensor *rmb = gdl_clone(gdl_to_dtype(rm, GDL_BF16));
        ASSERT_NULL(gdl_batch_norm(x, rmb, rv, NULL, NULL, 1, 0.1, 1e-5));
        ASSERT_STR_EQ("gdl_batch_norm: running_mean must be f32 here (no bf16/f16 path), got bf16 [3]", gdl_last_error());
        gdl_free(rmb);
    }
    gdl_free(x); gdl_free(rm); gdl_free(rv); gdl_free(rm2); gdl_free(rv2);
    PASS();
}

TEST errors_name_dtypes(void) {
    int64_t sa[2] = {64, 784}, sb[2] = {784, 10}, s3 = 3;
    gdl_tensor *a = rnd(2, sa, GDL_F16), *b = gdl_zeros(2, sb, GDL_I32, CPU), *u = gdl_zeros(1, &s3, GDL_U8, CPU);
    gdl_tensor *h = rnd(1, &s3, GDL_BF16), *g = rnd(1, &s3, GDL_F16), *f = rnd(1, &s3, GDL_F32);
    uint16_t before[3];
    gdl_tensor *xs[2];
    ASSERT_EQ(0, gdl_set_requires_grad(a, 1));
    ASSERT_EQ(0, gdl_set_requires_grad(h, 1));
    memcpy(before, h->data, sizeof before);
    ASSERT_NULL(gdl_matmul(a, b));
    ASSERT_STR_EQ("gdl_matmul: cannot multiply f16 [64,784] by i32 [784,10]", gdl_last_error());
    ASSERT_NULL(gdl_add(h, u));
    ASSERT_STR_EQ("gdl_add: expected float tensors (f32, bf16 or f16), got bf16 [3] and u8 [3]", gdl_last_error());
    ASSERT_NULL(gdl_relu(u));
    ASSERT_STR_EQ("gdl_relu: expected a float tensor (f32, bf16 or f16), got u8 [3]", gdl_last_error());
    xs[0] = h;
    xs[1] = u;
    ASSERT_NULL(gdl_concat(2, xs, 0));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_concat: expected float tensors (f32, bf16 or f16), got bf16 [3] and u8 [3]");
    ASSERT_NULL(gdl_add(h, a)); /* shapes, after the casts: the op's own message */
    ASSERT_STR_EQ("gdl_add: shapes [3] and [64,784] cannot be broadcast", gdl_last_error());
    ASSERT_EQ(-1, gdl_set_requires_grad(b, 1));
    ASSERT_CONTAINS(gdl_last_error(), "only float tensors");
    ASSERT_EQ(-1, gdl_sgd_update_(h, 0.1)); /* no low-precision path: says so */
    {   /* a bf16 gradient is refused by gradient clipping (its kernels read f32) */
        gdl_tensor *p = rnd(1, &s3, GDL_BF16);
        gdl_tensor *ps[1];
        ps[0] = p;
        ASSERT_EQ(0, gdl_set_requires_grad(p, 1));
        ASSERT_EQ(0, gdl_backward(gdl_sum(p)));
        ASSERT(gdl_clip_grad_norm(ps, 1, 1.0) < 0);
        ASSERT_CONTAINS(gdl_last_error(), "has a bf16 gradient; gradient clipping takes f32 gradients");
        gdl_free(p);
    }
    /* the failed calls left the inputs as they were */
    ASSERT_EQ(0, memcmp(before, h->data, sizeof before));
    ASSERT_NULL(h->grad);
    ASSERT_EQ(1, h->requires_grad);
    ASSERT_NULL(h->node);
    /* mixed promotions that succeed */
    ASSERT_EQ((int)GDL_F32, (int)gdl_add(h, g)->dtype);
    ASSERT_EQ((int)GDL_F32, (int)gdl_sub(g, f)->dtype);
    ASSERT_EQ((int)GDL_F16, (int)gdl_div(g, g)->dtype);
    ASSERT_EQ((int)GDL_I32, (int)gdl_argmax(gdl_reshape(h, 2, (const int64_t[]){1, 3}), 1)->dtype);
    gdl_free(a); gdl_free(b); gdl_free(u); gdl_free(h); gdl_free(g); gdl_free(f);
    PASS();
}

/* autocast's state is per thread, as torch.autocast's: a region opened on
   one thread is not open on another, and each thread nests its own */
static void *ac_thread(void *arg) {
    int *res = (int *)arg;
    res[0] = gdl_autocast_enabled();
    res[1] = gdl_autocast_begin(GDL_F16);
    res[2] = (int)gdl_autocast_dtype();
    res[3] = gdl_autocast_end();
    res[4] = gdl_autocast_end(); /* this thread has no region left */
    return NULL;
}

TEST autocast_threads(void) {
    pthread_t th;
    int res[5] = {-9, -9, -9, -9, -9};
    ASSERT_EQ(0, gdl_autocast_begin(GDL_BF16));
    ASSERT_EQ(0, pthread_create(&th, NULL, ac_thread, res));
    ASSERT_EQ(0, pthread_join(th, NULL));
    ASSERT_EQm("a region on the main thread is not open on another", 0, res[0]);
    ASSERT_EQ(0, res[1]);
    ASSERT_EQ((int)GDL_F16, res[2]);
    ASSERT_EQ(0, res[3]);
    ASSERT_EQ(-1, res[4]);
    ASSERT_EQm("the other thread's regions did not touch this one's", (int)GDL_BF16, (int)gdl_autocast_dtype());
    ASSERT_EQ(0, gdl_autocast_end());
    ASSERT_EQ(0, gdl_autocast_enabled());
    PASS();
}

/* gdl_fit's autocast option: forward and loss in the region (the casts are
   counted), backward and the step outside, validation in it too; the run
   follows the f32 one. A bad option fails before anything runs. */
static gdl_dataset *ac_blobs(int64_t n, uint64_t seed) {
    float *x = (float *)malloc(sizeof(float) * (size_t)n * 4);
    int32_t *y = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
    int64_t i, shape[1] = {4};
    gdl_dataset *ds;
    gdl_manual_seed(seed);
    for (i = 0; i < n && x && y; i++) {
        int c = (int)(gdl_rng_next_u64() % 3), k;
        y[i] = c;
        for (k = 0; k < 4; k++) x[i * 4 + k] = (float)((k == c ? 2.0 : 0.0) + (gdl_rng_uniform() - 0.5) * 2);
    }
    ds = x && y ? gdl_dataset_from_arrays(x, GDL_F32, 1, shape, y, n, 3) : NULL;
    free(x);
    free(y);
    return ds;
}

static int ac_fit(gdl_dtype dt, gdl_epoch_stats *h, int64_t *casts) {
    gdl_dataset *tr = ac_blobs(512, 1), *va = ac_blobs(256, 2);
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_loader *tl, *vl;
    gdl_module *l[4], *m;
    gdl_optimizer *opt = gdl_adam_new(1e-2, 0.9, 0.999, 1e-8, 0);
    gdl_fit_opts o = gdl_fit_defaults();
    int64_t c0, c1;
    int rc;
    lo.batch_size = 32;
    lo.shuffle = 1;
    lo.seed = 7;
    tl = gdl_loader_new(tr, &lo);
    lo.shuffle = 0;
    vl = gdl_loader_new(va, &lo);
    gdl_manual_seed(3);
    l[0] = gdl_nn_linear(4, 16, 1);
    l[1] = gdl_nn_batchnorm1d(16);
    l[2] = gdl_nn_relu();
    l[3] = gdl_nn_linear(16, 3, 1);
    m = gdl_nn_sequential(4, l);
    if (!m || !opt || !tl || !vl || gdl_optim_add_module(opt, m, 0) < 0) return -1;
    o.epochs = 3;
    o.val = vl;
    o.verbose = 0;
    o.autocast = dt;
    gdl_autocast_stats(&c0, NULL);
    rc = gdl_fit(m, tl, opt, &o, h);
    gdl_autocast_stats(&c1, NULL);
    *casts = c1 - c0;
    gdl_optim_free(opt);
    gdl_module_free(m);
    gdl_loader_free(tl);
    gdl_loader_free(vl);
    gdl_dataset_free(tr);
    gdl_dataset_free(va);
    return rc;
}

TEST autocast_fit(void) {
    gdl_epoch_stats ref[3], low[3];
    int64_t casts;
    int e, dt;
    ASSERT_EQ(0, ac_fit(GDL_F32, ref, &casts));
    ASSERT_EQm("no casts without the option", 0, casts);
    ASSERT_GT(ref[2].val_accuracy, 0.9);
    for (dt = 0; dt < 2; dt++) {
        ASSERT_EQ(0, ac_fit(dt ? GDL_F16 : GDL_BF16, low, &casts));
        /* 16 training and 8 validation batches an epoch, two linears each: at least their inputs and weights */
        ASSERT_GT(casts, 3 * (16 + 8) * 4 - 1);
        ASSERT_EQm("the region is closed after gdl_fit", 0, gdl_autocast_enabled());
        for (e = 0; e < 3; e++) {
            ASSERT_IN_RANGE(ref[e].loss, low[e].loss, 0.02 * ref[0].loss);
            ASSERT_IN_RANGE(ref[e].val_loss, low[e].val_loss, 0.02 * ref[0].loss);
            ASSERT_IN_RANGE(ref[e].val_accuracy, low[e].val_accuracy, 0.02);
            ASSERT_IN_RANGE(ref[e].accuracy, low[e].accuracy, 0.02);
        }
    }
    ASSERT_EQ(-1, ac_fit(GDL_I32, low, &casts));
    ASSERT_STR_EQ("gdl_fit: the autocast option must be bf16, f16 or f32 (off), got i32", gdl_last_error());
    ASSERT_EQ(0, casts);
    PASS();
}

static dtype_run runs[4 * NCASES];

SUITE(parity) {
    int i, j;
    char name[128];
    SET_SETUP(reset, NULL);
    for (i = 0; i < NCASES; i++)
        for (j = 0; j < 4; j++) {
            dtype_run *r = &runs[4 * i + j];
            r->c = i;
            r->dt = j < 2 ? GDL_BF16 : GDL_F16;
            r->fanout = j & 1;
            r->dev = gdl_cpu();
            snprintf(name, sizeof name, "%s_%s%s", cases[i].name, gdl_dtype_name(r->dt), r->fanout ? "_fanout" : "");
            RUN_TEST_NAMED(name, dtype_parity, (void *)r);
        }
}

static dtype_run cnn_runs[2 * DTYPE_NCNN];
SUITE(native_cnn) {
    int i, j;
    char name[128];
    SET_SETUP(reset, NULL);
    for (i = 0; i < DTYPE_NCNN; i++)
        for (j = 0; j < 2; j++) {
            dtype_run *r = &cnn_runs[2 * i + j];
            r->c = i;
            r->dt = j ? GDL_F16 : GDL_BF16;
            r->dev = gdl_cpu();
            snprintf(name, sizeof name, "%s_%s", dtype_cnn_cases[i].name, gdl_dtype_name(r->dt));
            RUN_TEST_NAMED(name, dtype_native_cnn, (void *)r);
        }
}

SUITE(semantics) {
    SET_SETUP(reset, NULL);
    {
        static gdl_device cpu_dev0;
        cpu_dev0 = gdl_cpu();
        RUN_TEST_NAMED("promotion", dtype_promotion, (void *)&cpu_dev0);
    }
    RUN_TEST(grad_dtype_fanout);
    {
        static gdl_device cpu_dev;
        cpu_dev = gdl_cpu();
        RUN_TEST_NAMED("gemm_sizes", dtype_gemm_sizes, (void *)&cpu_dev);
    }
    RUN_TEST(batch_norm_mixed);
    RUN_TEST(errors_name_dtypes);
    {
        static gdl_device cpu_dev1;
        cpu_dev1 = gdl_cpu();
        RUN_TEST_NAMED("native_elementwise", dtype_native_elementwise, (void *)&cpu_dev1);
    }
}

SUITE(autocast) {
    static ac_run ac[2];
    int j;
    SET_SETUP(reset, NULL);
    for (j = 0; j < 2; j++) {
        char name[64];
        ac[j].dt = j ? GDL_F16 : GDL_BF16;
        ac[j].dev = gdl_cpu();
        ac[j].steps = 200;
        snprintf(name, sizeof name, "ops_%s", gdl_dtype_name(ac[j].dt));
        RUN_TEST_NAMED(name, autocast_ops, (void *)&ac[j]);
        snprintf(name, sizeof name, "cache_%s", gdl_dtype_name(ac[j].dt));
        RUN_TEST_NAMED(name, autocast_cache, (void *)&ac[j]);
        snprintf(name, sizeof name, "training_200_steps_%s", gdl_dtype_name(ac[j].dt));
        RUN_TEST_NAMED(name, autocast_training, (void *)&ac[j]);
    }
    RUN_TEST_NAMED("nesting_errors", autocast_nesting_errors, (void *)&ac[0]);
    RUN_TEST(autocast_threads);
    RUN_TEST(autocast_fit);
}

/* The CPU backward runs in one pass per batch entry (gdl__attn_bw_range) when there are at least 4 per
   thread, else in two passes over tiles: one thread takes the first here (6 entries), 64 the second; both
   must give the same bits */
static int attn_bw_run(int threads, gdl_dtype dt, int L, int S, int causal, const float *h[4], double *res[4]) {
    enum { N = 2, H = 3, E = 8, EV = 12 };
    int64_t sq[4] = {N, H, L, E}, sk[4] = {N, H, S, E}, sv[4] = {N, H, S, EV}, so[4] = {N, H, L, EV};
    gdl_tensor *t[4] = {0}, *out;
    int k, bad = 1;
    gdl_set_num_threads(threads);
    t[0] = attn_put(h[0], 4, sq, dt, gdl_cpu(), 1);
    t[1] = attn_put(h[1], 4, sk, dt, gdl_cpu(), 1);
    t[2] = attn_put(h[2], 4, sv, dt, gdl_cpu(), 1);
    t[3] = attn_put(h[3], 4, so, dt, gdl_cpu(), 0);
    if (!t[0] || !t[1] || !t[2] || !t[3]) goto done;
    out = gdl_scaled_dot_product_attention(t[0], t[1], t[2], NULL, 0, causal, NAN);
    if (!out || gdl_backward_grad(out, t[3]) < 0) goto done;
    for (k = 0; k < 3; k++)
        if (!(res[k] = dtype_host_values(t[k]->grad))) goto done;
    if (!(res[3] = dtype_host_values(out))) goto done;
    bad = 0;
done:
    gdl_set_num_threads(0);
    for (k = 0; k < 4; k++) gdl_free(t[k]);
    gdl_arena_reset();
    return bad;
}
TEST attn_backward_one_pass(void) {
    static const int sizes[][2] = {{31, 32}, {64, 64}, {97, 40}, {5, 97}};
    static const gdl_dtype dts[2] = {GDL_F32, GDL_BF16};
    int s, d, causal, k;
    gdl_manual_seed(1414);
    for (d = 0; d < 2; d++)
        for (s = 0; s < 4; s++)
            for (causal = 0; causal < 2; causal++) {
                const int L = sizes[s][0], S = sizes[s][1];
                const int64_t n[4] = {6LL * L * 8, 6LL * S * 8, 6LL * S * 12, 6LL * L * 12};
                const float *h[4];
                float *v[4];
                double *one[4] = {0}, *two[4] = {0};
                int bad;
                for (k = 0; k < 4; k++) h[k] = v[k] = attn_randn(n[k], dts[d], 1);
                bad = !v[0] || !v[1] || !v[2] || !v[3] || attn_bw_run(1, dts[d], L, S, causal, h, one) ||
                      attn_bw_run(64, dts[d], L, S, causal, h, two);
                for (k = 0; k < 4 && !bad; k++) bad = memcmp(one[k], two[k], sizeof(double) * (size_t)n[k]) != 0;
                for (k = 0; k < 4; k++) {
                    free(v[k]);
                    free(one[k]);
                    free(two[k]);
                }
                if (bad) FAILf("%s, L %d, S %d, causal %d: one pass and two passes differ (or failed: %.200s)",
                               gdl_dtype_name(dts[d]), L, S, causal, gdl_last_error());
            }
    PASS();
}

SUITE(attention) {
    static gdl_device cpu;
    cpu = gdl_cpu();
    RUN_TEST_NAMED("tile_edges", attn_tile_edges, (void *)&cpu);
    RUN_TEST_NAMED("errors", attn_errors, (void *)&cpu);
    RUN_TEST_NAMED("heads_strided", attn_heads_strided, (void *)&cpu);
    RUN_TEST_NAMED("heads_errors", attn_heads_errors, (void *)&cpu);
    RUN_TEST_NAMED("memory_linear_in_T", attn_memory_linear, (void *)&cpu);
    RUN_TEST_NAMED("fully_masked_rows", attn_fully_masked_rows, (void *)&cpu);
    RUN_TEST_NAMED("explicit_scale", attn_explicit_scale, (void *)&cpu);
    RUN_TEST(attn_backward_one_pass);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_SUITE(parity);
    RUN_SUITE(native_cnn);
    RUN_SUITE(semantics);
    RUN_SUITE(autocast);
    RUN_SUITE(attention);
    gdl_shutdown();
    HARNESS_MAIN_END();
}
