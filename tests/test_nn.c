/* test_nn.c — modules, optimizers and learning-rate schedulers: output shapes,
   parameter counts, PyTorch's initialisation, state_dict names, train/eval,
   the summary; SGD/Adam/AdamW against independent double-precision loops of
   PyTorch's documented algorithms and against numbers printed by PyTorch
   2.15 itself; parameter groups, clipping, checkpointing of the optimizer
   and scheduler state; schedulers against their closed forms and PyTorch;
   gradient accumulation; convergence (linear regression, XOR); ResNet's
   BasicBlock against torchvision; the weight EMA against a hand reference
   (swap, checkpoints); the warm-up cosine schedule against PyTorch; errors;
   nn.MultiheadAttention against PyTorch's numbers.

   Build (from the repository root):
       cc -std=c99 -Wall -Wextra -Wpedantic tests/test_nn.c -lm -o build/test_nn
   (before the nn parts are pasted into gpudl.h: add -DNN_DEV -Iparts) */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"
#include "gradscaler_cases.h"
#include "master_cases.h"
#include "fusion_cases.h"

#include <math.h>
#include <string.h>
#include <stdlib.h>

#define CPU gdl_cpu()
#define PI 3.141592653589793

static void reset(void *u) {
    (void)u;
    gdl_arena_reset();
    gdl_clear_error();
    gdl_set_grad_enabled(1);
}

static gdl_real *R(const gdl_tensor *t) { return (gdl_real *)t->data; }

static gdl_tensor *vec(const float *v, int64_t n) { return gdl_from_array(v, 1, &n, GDL_F32, CPU); }

/* one-dimensional f32 tensor from doubles */
static gdl_tensor *vecd(const double *v, int64_t n) {
    gdl_tensor *t = gdl_zeros(1, &n, GDL_F32, CPU);
    int64_t i;
    for (i = 0; i < n; i++) R(t)[i] = (gdl_real)v[i];
    return t;
}

static int shape_is(const gdl_tensor *t, int ndim, const int64_t *s) {
    int i;
    if (!t || t->ndim != ndim) return 0;
    for (i = 0; i < ndim; i++)
        if (t->shape[i] != s[i]) return 0;
    return 1;
}

/* forward of m on zeros of shape `in`, checking the output shape `out` */
static enum harness_result fwd_shape(gdl_module *m, int nin, const int64_t *in, int nout, const int64_t *out,
                                     gdl_dtype dt) {
    gdl_tensor *x, *y;
    ASSERT_NOT_NULL(m);
    x = gdl_zeros(nin, in, dt, CPU);
    y = gdl_forward(m, x);
    if (!y) FAILf("forward failed: %s", gdl_last_error());
    if (!shape_is(y, nout, out)) FAILf("%s: output shape %s", gdl_module_kind(m), gdl_shape_str(y));
    gdl_free(x);
    gdl_module_free(m);
    PASS();
}
#define SHAPE(m, in, out) CHECK_CALL(fwd_shape((m), GDL_DIMS in, GDL_DIMS out, GDL_F32))

/* ---------------------------------------------------------------------------
   modules
   ------------------------------------------------------------------------- */

TEST test_output_shapes(void) {
    int k31[2] = {3, 1}, p10[2] = {1, 0};
    SHAPE(gdl_nn_linear(10, 4, 1), (3, 10), (3, 4));
    SHAPE(gdl_nn_linear(10, 4, 0), (2, 5, 10), (2, 5, 4));
    SHAPE(gdl_nn_conv2d(3, 8, 3, 1, 1, 1, 1, 1), (2, 3, 8, 8), (2, 8, 8, 8));
    SHAPE(gdl_nn_conv2d(3, 8, 3, 2, 1, 1, 1, 0), (2, 3, 8, 8), (2, 8, 4, 4));
    SHAPE(gdl_nn_conv2d(4, 6, 3, 1, 0, 1, 2, 1), (1, 4, 5, 5), (1, 6, 3, 3));
    SHAPE(gdl_nn_conv2d(2, 2, 3, 1, 0, 2, 1, 1), (1, 2, 7, 7), (1, 2, 3, 3));
    SHAPE(gdl_nn_conv2d_ex(3, 5, k31, NULL, p10, NULL, 1, 1), (2, 3, 6, 4), (2, 5, 6, 4));
    SHAPE(gdl_nn_batchnorm1d(4), (5, 4), (5, 4));
    SHAPE(gdl_nn_batchnorm1d(4), (5, 4, 3), (5, 4, 3));
    SHAPE(gdl_nn_batchnorm2d(3), (2, 3, 4, 4), (2, 3, 4, 4));
    SHAPE(gdl_nn_batchnorm_ex(2, 3, 1e-3, 0.01, 0, 0), (2, 3, 4, 4), (2, 3, 4, 4));
    SHAPE(gdl_nn_layernorm(6), (2, 3, 6), (2, 3, 6));
    SHAPE(gdl_nn_dropout(0.5), (4, 5), (4, 5));
    SHAPE(gdl_nn_relu(), (4, 5), (4, 5));
    SHAPE(gdl_nn_leaky_relu(0.1), (4, 5), (4, 5));
    SHAPE(gdl_nn_sigmoid(), (4, 5), (4, 5));
    SHAPE(gdl_nn_tanh(), (4, 5), (4, 5));
    SHAPE(gdl_nn_gelu(0), (4, 5), (4, 5));
    SHAPE(gdl_nn_gelu(1), (4, 5), (4, 5));
    SHAPE(gdl_nn_identity(), (4, 5), (4, 5));
    SHAPE(gdl_nn_maxpool2d(2, 0, 0), (1, 2, 6, 6), (1, 2, 3, 3));
    SHAPE(gdl_nn_maxpool2d(3, 2, 1), (1, 2, 7, 7), (1, 2, 4, 4));
    SHAPE(gdl_nn_avgpool2d(2, 2, 0), (1, 2, 6, 7), (1, 2, 3, 3));
    SHAPE(gdl_nn_global_avgpool2d(), (2, 5, 3, 4), (2, 5, 1, 1));
    SHAPE(gdl_nn_flatten(1), (2, 3, 4, 4), (2, 48));
    SHAPE(gdl_nn_flatten(0), (2, 3, 4), (24));
    CHECK_CALL(fwd_shape(gdl_nn_embedding(10, 3), GDL_DIMS(2, 4), GDL_DIMS(2, 4, 3), GDL_I32));
    /* a small CNN */
    SHAPE(gdl_nn_sequential(6, (gdl_module *[]){gdl_nn_conv2d(1, 4, 3, 1, 1, 1, 1, 1), gdl_nn_batchnorm2d(4),
                                                 gdl_nn_relu(), gdl_nn_maxpool2d(2, 2, 0), gdl_nn_flatten(1),
                                                 gdl_nn_linear(4 * 4 * 4, 10, 1)}),
          (3, 1, 8, 8), (3, 10));
    /* ResNet basic blocks: identity shortcut, and a strided 1x1 projection */
    SHAPE(gdl_nn_residual(gdl_nn_sequential(5, (gdl_module *[]){gdl_nn_conv2d(4, 4, 3, 1, 1, 1, 1, 0),
                                                                 gdl_nn_batchnorm2d(4), gdl_nn_relu(),
                                                                 gdl_nn_conv2d(4, 4, 3, 1, 1, 1, 1, 0),
                                                                 gdl_nn_batchnorm2d(4)}),
                          NULL),
          (2, 4, 6, 6), (2, 4, 6, 6));
    SHAPE(gdl_nn_residual(gdl_nn_sequential(5, (gdl_module *[]){gdl_nn_conv2d(4, 8, 3, 2, 1, 1, 1, 0),
                                                                 gdl_nn_batchnorm2d(8), gdl_nn_relu(),
                                                                 gdl_nn_conv2d(8, 8, 3, 1, 1, 1, 1, 0),
                                                                 gdl_nn_batchnorm2d(8)}),
                          gdl_nn_sequential(2, (gdl_module *[]){gdl_nn_conv2d(4, 8, 1, 2, 0, 1, 1, 0),
                                                                 gdl_nn_batchnorm2d(8)})),
          (2, 4, 6, 6), (2, 8, 3, 3));
    /* an empty Sequential is the identity */
    SHAPE(gdl_nn_sequential(0, NULL), (2, 3), (2, 3));
    PASS();
}

TEST test_residual_values(void) {
    /* relu(body(x) + x) with body = Linear(2,2) of known weights */
    gdl_module *lin = gdl_nn_linear(2, 2, 1), *res;
    gdl_tensor *x, *y;
    float xv[4] = {1, -2, 0.5f, 3};
    int64_t xs[2] = {2, 2};
    int i, j;
    ASSERT_NOT_NULL(lin);
    R(gdl_module_tensor(lin, "weight"))[0] = 1; R(gdl_module_tensor(lin, "weight"))[1] = 2;
    R(gdl_module_tensor(lin, "weight"))[2] = -1; R(gdl_module_tensor(lin, "weight"))[3] = 0.5;
    R(gdl_module_tensor(lin, "bias"))[0] = 0.25; R(gdl_module_tensor(lin, "bias"))[1] = -0.5;
    res = gdl_nn_residual(lin, NULL);
    ASSERT_NOT_NULL(res);
    x = gdl_from_array(xv, 2, xs, GDL_F32, CPU);
    y = gdl_forward(res, x);
    ASSERT_NOT_NULL(y);
    for (i = 0; i < 2; i++)
        for (j = 0; j < 2; j++) {
            const double W[4] = {1, 2, -1, 0.5}, b[2] = {0.25, -0.5};
            double v = b[j] + W[j * 2] * xv[i * 2] + W[j * 2 + 1] * xv[i * 2 + 1] + xv[i * 2 + j];
            ASSERT_IN_RANGE(v > 0 ? v : 0, R(y)[i * 2 + j], 1e-6);
        }
    gdl_free(x);
    gdl_module_free(res);
    PASS();
}

static gdl_module *basic_block(int cin, int cout, int stride) {
    gdl_module *body = gdl_nn_sequential(5, (gdl_module *[]){gdl_nn_conv2d(cin, cout, 3, stride, 1, 1, 1, 0),
                                                            gdl_nn_batchnorm2d(cout), gdl_nn_relu(),
                                                            gdl_nn_conv2d(cout, cout, 3, 1, 1, 1, 1, 0),
                                                            gdl_nn_batchnorm2d(cout)});
    gdl_module *sc = NULL;
    if (stride != 1 || cin != cout)
        sc = gdl_nn_sequential(2, (gdl_module *[]){gdl_nn_conv2d(cin, cout, 1, stride, 0, 1, 1, 0),
                                                   gdl_nn_batchnorm2d(cout)});
    return gdl_nn_residual(body, sc);
}

TEST test_param_counts(void) {
    gdl_module *m;
    m = gdl_nn_linear(784, 128, 1);
    ASSERT_EQ(100480, gdl_module_num_params(m));
    gdl_module_free(m);
    m = gdl_nn_linear(10, 1, 0);
    ASSERT_EQ(10, gdl_module_num_params(m));
    gdl_module_free(m);
    m = gdl_nn_conv2d(3, 16, 3, 1, 1, 1, 1, 1);
    ASSERT_EQ(16 * 3 * 9 + 16, gdl_module_num_params(m));
    gdl_module_free(m);
    m = gdl_nn_conv2d(8, 16, 3, 1, 1, 1, 4, 0); /* groups: W [16, 2, 3, 3] */
    ASSERT_EQ(16 * 2 * 9, gdl_module_num_params(m));
    gdl_module_free(m);
    m = gdl_nn_batchnorm2d(16); /* buffers are not parameters */
    ASSERT_EQ(32, gdl_module_num_params(m));
    ASSERT_EQ(2, gdl_module_named_tensors(m, GDL_BUFFERS, NULL, NULL, 0));
    gdl_module_free(m);
    m = gdl_nn_batchnorm_ex(1, 16, 1e-5, 0.1, 0, 0);
    ASSERT_EQ(0, gdl_module_num_params(m));
    ASSERT_EQ(0, gdl_module_named_tensors(m, GDL_PARAMS_AND_BUFFERS, NULL, NULL, 0));
    gdl_module_free(m);
    m = gdl_nn_layernorm(6);
    ASSERT_EQ(12, gdl_module_num_params(m));
    gdl_module_free(m);
    m = gdl_nn_embedding(100, 16);
    ASSERT_EQ(1600, gdl_module_num_params(m));
    gdl_module_free(m);
    m = gdl_nn_sequential(3, (gdl_module *[]){gdl_nn_linear(784, 128, 1), gdl_nn_relu(), gdl_nn_linear(128, 10, 1)});
    ASSERT_EQ(101770, gdl_module_num_params(m));
    gdl_module_free(m);
    /* torchvision's ResNet-18 layer2.0 (64 -> 128, stride 2): 230,144 parameters */
    m = basic_block(64, 128, 2);
    ASSERT_EQ(230144, gdl_module_num_params(m));
    gdl_module_free(m);
    PASS();
}

/* mean, variance, min and max of a tensor's elements */
static void stats(const gdl_tensor *t, double *mean, double *var, double *lo, double *hi) {
    double s = 0, q = 0;
    int64_t i;
    *lo = INFINITY;
    *hi = -INFINITY;
    for (i = 0; i < t->numel; i++) {
        double v = R(t)[i];
        s += v;
        if (v < *lo) *lo = v;
        if (v > *hi) *hi = v;
    }
    *mean = s / (double)t->numel;
    for (i = 0; i < t->numel; i++) q += (R(t)[i] - *mean) * (R(t)[i] - *mean);
    *var = q / (double)t->numel;
}

/* U(-b, b): inside the bound, reaching near it, mean ~ 0, var ~ b^2/3 */
static enum harness_result check_uniform(const gdl_tensor *t, double b) {
    double mean, var, lo, hi, n = (double)t->numel;
    stats(t, &mean, &var, &lo, &hi);
    ASSERT(lo >= -b && hi <= b);
    ASSERT(lo < -0.9 * b && hi > 0.9 * b);
    ASSERT_IN_RANGE(0, mean, 5 * b / sqrt(3 * n));
    ASSERT_IN_RANGE(b * b / 3, var, 5 * b * b * 0.3 / sqrt(n));
    PASS();
}

TEST test_init_ranges(void) {
    gdl_module *m;
    gdl_tensor *w;
    double mean, var, lo, hi;
    int64_t i;
    gdl_manual_seed(1);
    m = gdl_nn_linear(256, 64, 1);
    CHECK_CALL(check_uniform(gdl_module_tensor(m, "weight"), 1.0 / 16));
    CHECK_CALL(check_uniform(gdl_module_tensor(m, "bias"), 1.0 / 16));
    ASSERT(gdl_module_tensor(m, "weight")->requires_grad);
    gdl_module_free(m);
    m = gdl_nn_conv2d(8, 32, 3, 1, 1, 1, 1, 1); /* fan_in 72 */
    CHECK_CALL(check_uniform(gdl_module_tensor(m, "weight"), 1 / sqrt(72.0)));
    w = gdl_module_tensor(m, "bias");
    stats(w, &mean, &var, &lo, &hi);
    ASSERT(lo >= -1 / sqrt(72.0) && hi <= 1 / sqrt(72.0));
    gdl_module_free(m);
    m = gdl_nn_conv2d(16, 32, 3, 1, 1, 1, 4, 0); /* fan_in = 16/4*9 = 36 */
    CHECK_CALL(check_uniform(gdl_module_tensor(m, "weight"), 1.0 / 6));
    gdl_module_free(m);
    m = gdl_nn_batchnorm2d(5);
    for (i = 0; i < 5; i++) {
        ASSERT_IN_RANGE(1, R(gdl_module_tensor(m, "weight"))[i], 0);
        ASSERT_IN_RANGE(0, R(gdl_module_tensor(m, "bias"))[i], 0);
        ASSERT_IN_RANGE(0, R(gdl_module_tensor(m, "running_mean"))[i], 0);
        ASSERT_IN_RANGE(1, R(gdl_module_tensor(m, "running_var"))[i], 0);
    }
    ASSERT_FALSE(gdl_module_tensor(m, "running_mean")->requires_grad);
    gdl_module_free(m);
    m = gdl_nn_layernorm(7);
    for (i = 0; i < 7; i++) {
        ASSERT_IN_RANGE(1, R(gdl_module_tensor(m, "weight"))[i], 0);
        ASSERT_IN_RANGE(0, R(gdl_module_tensor(m, "bias"))[i], 0);
    }
    gdl_module_free(m);
    m = gdl_nn_embedding(200, 50);
    stats(gdl_module_tensor(m, "weight"), &mean, &var, &lo, &hi);
    ASSERT_IN_RANGE(0, mean, 0.05);
    ASSERT_IN_RANGE(1, var, 0.06);
    gdl_module_free(m);
    PASS();
}

static gdl_module *small_net(void) {
    return gdl_nn_sequential(4, (gdl_module *[]){gdl_nn_conv2d(2, 3, 3, 1, 1, 1, 1, 1), gdl_nn_flatten(1),
                                                 gdl_nn_linear(3 * 4 * 4, 5, 1), gdl_nn_embedding(3, 2)});
}

TEST test_init_reproducible(void) {
    gdl_module *a, *b, *c;
    gdl_tensor *ta[8], *tb[8], *tc[8];
    int n, i, differ = 0;
    gdl_manual_seed(42);
    a = small_net();
    gdl_manual_seed(42);
    b = small_net();
    gdl_manual_seed(43);
    c = small_net();
    n = gdl_module_named_tensors(a, GDL_PARAMS, NULL, ta, 8);
    ASSERT_EQ(5, n);
    ASSERT_EQ(n, gdl_module_named_tensors(b, GDL_PARAMS, NULL, tb, 8));
    ASSERT_EQ(n, gdl_module_named_tensors(c, GDL_PARAMS, NULL, tc, 8));
    for (i = 0; i < n; i++) {
        ASSERT_EQ(0, memcmp(ta[i]->data, tb[i]->data, sizeof(gdl_real) * (size_t)ta[i]->numel));
        differ += memcmp(ta[i]->data, tc[i]->data, sizeof(gdl_real) * (size_t)ta[i]->numel) != 0;
    }
    ASSERT_EQ(n, differ);
    gdl_module_free(a);
    gdl_module_free(b);
    gdl_module_free(c);
    PASS();
}

static gdl_module *names_net(void) {
    return gdl_nn_sequential(7, (gdl_module *[]){gdl_nn_conv2d(3, 4, 3, 1, 1, 1, 1, 0), gdl_nn_batchnorm2d(4),
                                                 gdl_nn_relu(), basic_block(4, 8, 2), gdl_nn_global_avgpool2d(),
                                                 gdl_nn_flatten(1), gdl_nn_linear(8, 10, 1)});
}

TEST test_state_dict_names(void) {
    static const char *const expect[] = {
        "0.weight", "1.weight", "1.bias", "1.running_mean", "1.running_var",
        "3.body.0.weight", "3.body.1.weight", "3.body.1.bias", "3.body.1.running_mean", "3.body.1.running_var",
        "3.body.3.weight", "3.body.4.weight", "3.body.4.bias", "3.body.4.running_mean", "3.body.4.running_var",
        "3.shortcut.0.weight", "3.shortcut.1.weight", "3.shortcut.1.bias", "3.shortcut.1.running_mean",
        "3.shortcut.1.running_var", "6.weight", "6.bias"};
    const int N = (int)(sizeof expect / sizeof expect[0]);
    const char *names[32], *again[32];
    gdl_tensor *ts[32];
    gdl_module *m = names_net();
    int n, i, np = 0, nb = 0;
    ASSERT_NOT_NULL(m);
    n = gdl_module_named_tensors(m, GDL_PARAMS_AND_BUFFERS, NULL, NULL, 0);
    ASSERT_EQ(N, n);
    ASSERT_EQ(N, gdl_module_named_tensors(m, GDL_PARAMS_AND_BUFFERS, names, ts, 32));
    for (i = 0; i < N; i++) {
        ASSERT_STR_EQ(expect[i], names[i]);
        ASSERT(gdl_module_tensor(m, names[i]) == ts[i]);
        if (strstr(names[i], "running")) nb++;
        else np++;
    }
    /* parameters only, buffers only, and a short buffer */
    ASSERT_EQ(np, gdl_module_named_tensors(m, GDL_PARAMS, again, NULL, 32));
    ASSERT_STR_EQ("3.body.0.weight", again[3]);
    ASSERT_EQ(nb, gdl_module_named_tensors(m, GDL_BUFFERS, again, ts, 32));
    ASSERT_STR_EQ("3.body.4.running_var", again[5]);
    ASSERT_EQ(N, gdl_module_named_tensors(m, GDL_PARAMS_AND_BUFFERS, again, NULL, 3));
    /* names are stable: the same pointers on every call */
    ASSERT_EQ(N, gdl_module_named_tensors(m, GDL_PARAMS_AND_BUFFERS, again, NULL, 32));
    for (i = 0; i < N; i++) ASSERT(again[i] == names[i]);
    /* lookups by path */
    ASSERT_STR_EQ("Residual", gdl_module_kind(gdl_module_child(m, "3")));
    ASSERT_STR_EQ("BatchNorm2d", gdl_module_kind(gdl_module_child(m, "3.shortcut.1")));
    ASSERT_STR_EQ("shortcut", gdl_module_name(gdl_module_child(m, "3.shortcut")));
    ASSERT_EQ(7, gdl_module_num_children(m));
    ASSERT_STR_EQ("6", gdl_module_name(gdl_module_child_at(m, 6)));
    ASSERT_NULL(gdl_module_child_at(m, 7));
    ASSERT_NULL(gdl_module_tensor(m, "3.body.9.weight"));
    ASSERT_CONTAINS(gdl_last_error(), "no module \"9\"");
    ASSERT_NULL(gdl_module_tensor(m, "6.gamma"));
    ASSERT_CONTAINS(gdl_last_error(), "no parameter or buffer \"gamma\" in Linear '6'");
    gdl_module_free(m);
    PASS();
}

static gdl_tensor *scale_forward(gdl_module *self, gdl_tensor *x) {
    return gdl_mul(x, gdl_module_tensor(self, "scale"));
}
static void free_counter(void *p) { (*(int *)p)++; }

TEST test_custom_module(void) {
    static int freed = 0;
    gdl_module *m = gdl_nn_custom("Scale", scale_forward, &freed, free_counter), *seq;
    gdl_tensor *x, *loss, *s;
    const char *names[4];
    float xv[3] = {1, 2, 3};
    int64_t three = 3;
    ASSERT_NOT_NULL(m);
    ASSERT_EQ(0, gdl_module_add_param(m, "scale", gdl_full(1, &three, 2.0, GDL_F32, CPU)));
    ASSERT_EQ(-1, gdl_module_add_param(m, "scale", gdl_zeros(1, &three, GDL_F32, CPU)));
    ASSERT_CONTAINS(gdl_last_error(), "already has a member named \"scale\"");
    ASSERT_EQ(0, gdl_module_add_buffer(m, "count", gdl_zeros(0, NULL, GDL_I32, CPU)));
    ASSERT(gdl_module_user(m) == &freed);
    seq = gdl_nn_sequential(2, (gdl_module *[]){gdl_nn_identity(), m});
    ASSERT_NOT_NULL(seq);
    ASSERT_EQ(2, gdl_module_named_tensors(seq, GDL_PARAMS_AND_BUFFERS, names, NULL, 4));
    ASSERT_STR_EQ("1.scale", names[0]);
    ASSERT_STR_EQ("1.count", names[1]);
    x = vec(xv, 3);
    loss = gdl_sum(gdl_forward(seq, x));
    ASSERT_NOT_NULL(loss);
    ASSERT_IN_RANGE(12, gdl_item(loss), 1e-6);
    ASSERT_EQ(0, gdl_backward(loss));
    s = gdl_module_tensor(seq, "1.scale");
    ASSERT_IN_RANGE(3, R(s->grad)[2], 0);
    gdl_free(x);
    gdl_module_free(seq);
    ASSERT_EQ(1, freed);
    PASS();
}

TEST test_train_eval(void) {
    gdl_module *net = gdl_nn_sequential(2, (gdl_module *[]){gdl_nn_batchnorm1d(2), gdl_nn_dropout(0.5)});
    gdl_module *bn = gdl_module_child(net, "0"), *dp = gdl_module_child(net, "1");
    gdl_tensor *x, *y, *rm, *rv, *big, *yb;
    float xv[8] = {1, 10, 2, 20, 3, 30, 6, 0};
    int64_t xs[2] = {4, 2}, bs[2] = {64, 16};
    double mean[2], uvar[2];
    int c, i, zeros = 0, doubled = 0;
    ASSERT_NOT_NULL(net);
    ASSERT_EQ(1, gdl_module_is_training(net));
    ASSERT_EQ(1, gdl_module_is_training(dp));
    x = gdl_from_array(xv, 2, xs, GDL_F32, CPU);
    rm = gdl_module_tensor(net, "0.running_mean");
    rv = gdl_module_tensor(net, "0.running_var");
    /* training: BatchNorm normalises with the batch stats and updates the running ones */
    y = gdl_forward(bn, x);
    ASSERT_NOT_NULL(y);
    for (c = 0; c < 2; c++) {
        double s = 0, q = 0;
        for (i = 0; i < 4; i++) s += xv[i * 2 + c];
        mean[c] = s / 4;
        for (i = 0; i < 4; i++) q += (xv[i * 2 + c] - mean[c]) * (xv[i * 2 + c] - mean[c]);
        uvar[c] = q / 3;
        for (i = 0; i < 4; i++)
            ASSERT_IN_RANGE((xv[i * 2 + c] - mean[c]) / sqrt(q / 4 + 1e-5), R(y)[i * 2 + c], 1e-5);
        ASSERT_IN_RANGE(0.1 * mean[c], R(rm)[c], 1e-6);
        ASSERT_IN_RANGE(0.9 + 0.1 * uvar[c], R(rv)[c], 1e-5);
    }
    /* training: dropout zeroes about half and doubles the rest */
    big = gdl_ones(2, bs, GDL_F32, CPU);
    yb = gdl_forward(dp, big);
    for (i = 0; i < 64 * 16; i++) {
        zeros += R(yb)[i] == 0;
        doubled += R(yb)[i] == 2;
    }
    ASSERT_EQ(64 * 16, zeros + doubled);
    ASSERT(zeros > 400 && zeros < 624);
    /* eval, recursively: the running stats normalise, dropout is the identity, nothing updates */
    ASSERT_EQ(0, gdl_module_train(net, 0));
    ASSERT_EQ(0, gdl_module_is_training(bn));
    ASSERT_EQ(0, gdl_module_is_training(dp));
    y = gdl_forward(net, x);
    ASSERT_NOT_NULL(y);
    for (c = 0; c < 2; c++) {
        for (i = 0; i < 4; i++)
            ASSERT_IN_RANGE((xv[i * 2 + c] - 0.1 * mean[c]) / sqrt(0.9 + 0.1 * uvar[c] + 1e-5), R(y)[i * 2 + c], 1e-5);
        ASSERT_IN_RANGE(0.1 * mean[c], R(rm)[c], 1e-6);
    }
    yb = gdl_forward(dp, big);
    ASSERT(yb == big);
    ASSERT_EQ(0, gdl_module_train(net, 1));
    ASSERT_EQ(1, gdl_module_is_training(dp));
    gdl_free(x);
    gdl_free(big);
    gdl_module_free(net);
    PASS();
}

static char *summary_text(gdl_module *m, int ndim, const int64_t *shape, int *rc) {
    FILE *f = tmpfile();
    long n;
    char *s;
    if (!f) return NULL;
    *rc = gdl_module_summary(m, ndim, shape, f);
    n = ftell(f);
    rewind(f);
    s = (char *)malloc((size_t)n + 1);
    if (s) s[fread(s, 1, (size_t)n, f)] = 0;
    fclose(f);
    return s;
}

TEST test_summary(void) {
    gdl_module *mlp = gdl_nn_sequential(4, (gdl_module *[]){gdl_nn_linear(784, 128, 1), gdl_nn_relu(),
                                                            gdl_nn_dropout(0.2), gdl_nn_linear(128, 10, 1)});
    gdl_module *cnn = names_net(), *emb;
    gdl_tensor *rm;
    int64_t in[2] = {2, 784}, img[4] = {2, 3, 8, 8}, tok[2] = {4, 7};
    uint64_t seed, counter0, counter1;
    char *s;
    int rc = -1;
    s = summary_text(mlp, 2, in, &rc);
    ASSERT_EQ(0, rc);
    ASSERT_NOT_NULL(s);
    ASSERT_CONTAINS(s, "Layer (type)");
    ASSERT_CONTAINS(s, "Sequential ");
    ASSERT_CONTAINS(s, "  0 (Linear)");
    ASSERT_CONTAINS(s, "[2,128]");
    ASSERT_CONTAINS(s, "100,480");
    ASSERT_CONTAINS(s, "  2 (Dropout)");
    ASSERT_CONTAINS(s, "[2,10]");
    ASSERT_CONTAINS(s, "1,290");
    ASSERT_CONTAINS(s, "Total params: 101,770\n");
    ASSERT_CONTAINS(s, "Trainable params: 101,770\n");
    ASSERT_CONTAINS(s, "Non-trainable params: 0\n");
    free(s);
    /* a frozen parameter is counted as non-trainable */
    gdl_module_tensor(mlp, "3.bias")->requires_grad = 0;
    s = summary_text(mlp, 2, in, &rc);
    ASSERT_CONTAINS(s, "Trainable params: 101,760\n");
    ASSERT_CONTAINS(s, "Non-trainable params: 10\n");
    free(s);
    /* nested modules; no side effects: running stats, training flags, generator */
    rm = gdl_module_tensor(cnn, "1.running_mean");
    R(rm)[0] = 0.5;
    seed = gdl_rng_get_state(&counter0);
    s = summary_text(cnn, 4, img, &rc);
    ASSERT_EQ(0, rc);
    ASSERT_CONTAINS(s, "\n      3.body.0 (Conv2d)");
    ASSERT_CONTAINS(s, "[2,8,4,4]");
    ASSERT_CONTAINS(s, "\n  3 (Residual)");
    ASSERT_CONTAINS(s, "\n    3.shortcut (Sequential)");
    ASSERT_CONTAINS(s, "Buffer elements: 56\n");
    ASSERT_CONTAINS(s, "Input shape: [2,3,8,8] on cpu");
    free(s);
    ASSERT_IN_RANGE(0.5, R(rm)[0], 0);
    ASSERT_EQ(1, gdl_module_is_training(gdl_module_child(cnn, "3.body.1")));
    ASSERT_EQ(seed, gdl_rng_get_state(&counter1));
    ASSERT_EQ(counter0, counter1);
    ASSERT_EQ(1, gdl_is_grad_enabled());
    /* a wrong input shape fails with the module's name */
    s = summary_text(mlp, 2, img, &rc);
    ASSERT_EQ(-1, rc);
    ASSERT_CONTAINS(gdl_last_error(), "Linear '0'");
    free(s);
    /* an Embedding first takes i32 indices */
    emb = gdl_nn_sequential(2, (gdl_module *[]){gdl_nn_embedding(50, 8), gdl_nn_layernorm(8)});
    s = summary_text(emb, 2, tok, &rc);
    ASSERT_EQ(0, rc);
    ASSERT_CONTAINS(s, "[4,7,8]");
    ASSERT_CONTAINS(s, "Total params: 416\n");
    free(s);
    gdl_module_free(mlp);
    gdl_module_free(cnn);
    gdl_module_free(emb);
    PASS();
}

TEST test_module_to(void) {
    gdl_module *m = names_net();
    gdl_tensor *x, *y;
    int64_t img[4] = {1, 3, 8, 8};
    ASSERT_EQ(0, gdl_module_to(m, CPU));
    ASSERT_EQ(GDL_DEVICE_CPU, gdl_module_device(m).type);
    x = gdl_zeros(4, img, GDL_F32, CPU);
    y = gdl_forward(m, x);
    ASSERT_NOT_NULL(y);
    if (!gdl_cuda_is_available()) {
        ASSERT_EQ(-1, gdl_module_to(m, gdl_cuda(0)));
        ASSERT_CONTAINS(gdl_last_error(), "cuda:0");
        ASSERT_EQ(GDL_DEVICE_CPU, gdl_module_device(m).type);
    } else {
        gdl_tensor *xg = gdl_to(x, gdl_cuda(0)), *yg;
        ASSERT_EQ(0, gdl_module_to(m, gdl_cuda(0)));
        ASSERT_EQ(GDL_DEVICE_CUDA, gdl_module_device(m).type);
        ASSERT_EQ(GDL_DEVICE_CUDA, gdl_module_tensor(m, "3.body.1.running_var")->device.type);
        yg = gdl_forward(m, xg);
        ASSERT_NOT_NULL(yg);
        ASSERT_EQ(GDL_DEVICE_CUDA, yg->device.type);
        ASSERT_EQ(0, gdl_module_to(m, CPU));
        gdl_free(xg);
    }
    gdl_free(x);
    gdl_module_free(m);
    PASS();
}

/* ---------------------------------------------------------------------------
   optimizers
   ------------------------------------------------------------------------- */

/* The test problem: loss = sum(0.5*p^2 + c*p), so grad = p + c. */
static const double P0[4] = {0.5, -1.0, 2.0, 0.25};
static const double C0[4] = {0.1, -0.2, 0.3, 0.05};

static int loss_backward(gdl_tensor *p, gdl_tensor *c) {
    gdl_tensor *l = gdl_sum(gdl_add(gdl_mul_scalar(gdl_mul(p, p), 0.5), gdl_mul(c, p)));
    return l ? gdl_backward(l) : -1;
}

/* torch.optim.SGD's documented algorithm, in double precision */
static void ref_sgd(double *p, int steps, double lr, double mu, double tau, double wd, int nesterov) {
    double b[4] = {0, 0, 0, 0};
    int t, i;
    for (t = 1; t <= steps; t++)
        for (i = 0; i < 4; i++) {
            double g = p[i] + C0[i];
            if (wd != 0) g += wd * p[i];
            if (mu != 0) {
                b[i] = t == 1 ? g : mu * b[i] + (1 - tau) * g;
                g = nesterov ? g + mu * b[i] : b[i];
            }
            p[i] -= lr * g;
        }
}

/* torch.optim.Adam / AdamW's documented algorithm, in double precision */
static void ref_adam(double *p, int steps, double lr, double b1, double b2, double eps, double wd, int decoupled) {
    double m[4] = {0, 0, 0, 0}, v[4] = {0, 0, 0, 0};
    int t, i;
    for (t = 1; t <= steps; t++)
        for (i = 0; i < 4; i++) {
            double g = p[i] + C0[i], mh, vh;
            if (decoupled) p[i] *= 1 - lr * wd;
            else g += wd * p[i];
            m[i] = b1 * m[i] + (1 - b1) * g;
            v[i] = b2 * v[i] + (1 - b2) * g * g;
            mh = m[i] / (1 - pow(b1, t));
            vh = v[i] / (1 - pow(b2, t));
            p[i] -= lr * mh / (sqrt(vh) + eps);
        }
}

typedef struct opt_case {
    const char *name;
    int kind; /* 0 SGD, 1 Adam, 2 AdamW */
    double lr, a, b, c, wd;
    int nesterov;
    float torch5[4]; /* the parameters after 5 steps, printed by PyTorch 2.15 (float32) */
} opt_case;

static const opt_case opt_cases[] = {
    {"sgd", 0, 0.1, 0, 0, 0, 0, 0, {0.254294008f, -0.508588016f, 1.05812693f, 0.127147004f}},
    {"sgd_momentum", 0, 0.1, 0.9, 0, 0, 0, 0, {-0.117495947f, 0.234991893f, -0.367068142f, -0.0587479733f}},
    {"sgd_dampening", 0, 0.1, 0.9, 0.5, 0, 0, 0, {0.0518108904f, -0.103621781f, 0.281941712f, 0.0259054452f}},
    {"sgd_nesterov", 0, 0.1, 0.9, 0, 0, 0, 1, {-0.162749007f, 0.325498015f, -0.540537834f, -0.0813745037f}},
    {"sgd_weight_decay", 0, 0.1, 0.9, 0, 0, 0.01, 0, {-0.121062465f, 0.24212493f, -0.381594837f, -0.0605312325f}},
    {"adam", 1, 0.1, 0.9, 0.999, 1e-8, 0, 0, {0.019381471f, -0.506016552f, 1.50247014f, -0.166177779f}},
    {"adam_weight_decay", 1, 0.1, 0.9, 0.999, 1e-8, 0.1, 0, {0.0199581981f, -0.506155491f, 1.50250781f, -0.163376436f}},
    {"adamw", 2, 0.1, 0.9, 0.999, 1e-8, 0.1, 0, {0.00612998009f, -0.46767953f, 1.41493845f, -0.166239679f}},
};

static gdl_optimizer *make_opt(const opt_case *k) {
    if (k->kind == 0) return gdl_sgd_new(k->lr, k->a, k->b, k->wd, k->nesterov);
    if (k->kind == 1) return gdl_adam_new(k->lr, k->a, k->b, k->c, k->wd);
    return gdl_adamw_new(k->lr, k->a, k->b, k->c, k->wd);
}

TEST test_optimizer_formulas(const opt_case *k) {
    gdl_tensor *p = vecd(P0, 4), *c = vecd(C0, 4);
    gdl_optimizer *opt = make_opt(k);
    int steps, i;
    ASSERT_NOT_NULL(opt);
    gdl_set_requires_grad(p, 1);
    ASSERT_EQ(0, gdl_optim_add_params(opt, &p, 1, -1, -1));
    for (steps = 1; steps <= 12; steps++) {
        double ref[4];
        gdl_arena_reset();
        ASSERT_EQ(0, gdl_zero_grad(opt));
        ASSERT_EQ(0, loss_backward(p, c));
        ASSERT_EQ(0, gdl_step(opt));
        memcpy(ref, P0, sizeof ref);
        if (k->kind == 0) ref_sgd(ref, steps, k->lr, k->a, k->b, k->wd, k->nesterov);
        else ref_adam(ref, steps, k->lr, k->a, k->b, k->c, k->wd, k->kind == 2);
        for (i = 0; i < 4; i++) ASSERT_IN_RANGE(ref[i], R(p)[i], 1e-6);
        if (steps == 5)
            for (i = 0; i < 4; i++) ASSERT_IN_RANGE(k->torch5[i], R(p)[i], 1e-6);
    }
    ASSERT_EQ(12, gdl_optim_get_step(opt));
    gdl_optim_free(opt);
    gdl_free(p);
    gdl_free(c);
    PASS();
}

/* ---- the flat parameter buffer ---- */

/* The optimizer kernels' arithmetic element by element (double per element,
   float storage), as they were before the parameters became views of one
   buffer: the flat optimizer must give these bits. */
typedef struct fref_group {
    double lr, wd, mom, damp, b1, b2, eps;
    int nesterov;
} fref_group;
static void fref_step(int kind, const fref_group *h, int64_t n, float *p, const float *g, float *s1, float *s2,
                      int *step, int *has_state) {
    int64_t i;
    if (kind == 0) {
        double mom = *has_state ? h->mom : 0;
        for (i = 0; i < n; i++) {
            double d = g[i] + h->wd * p[i];
            if (mom != 0) {
                double b = *step == 0 ? d : mom * s1[i] + (1 - h->damp) * d;
                s1[i] = (float)b;
                d = h->nesterov ? d + mom * b : b;
            }
            p[i] = (float)(p[i] - h->lr * d);
        }
    } else {
        double t = (double)(*step + 1), bc1 = 1 - pow(h->b1, t), bc2 = 1 - pow(h->b2, t);
        for (i = 0; i < n; i++) {
            double gi = g[i], pi = p[i];
            if (kind == 2) pi -= h->lr * h->wd * pi;
            else gi += h->wd * pi;
            s1[i] = (float)(h->b1 * s1[i] + (1 - h->b1) * gi);
            s2[i] = (float)(h->b2 * s2[i] + (1 - h->b2) * gi * gi);
            p[i] = (float)(pi - h->lr * (s1[i] / bc1) / (sqrt(s2[i] / bc2) + h->eps));
        }
    }
    if (*has_state) (*step)++;
}

#define FLAT_NP 4
/* Parameters of 5, 1500, 37 and 64 elements (the last added as a second group after 8 steps), 30 steps
   with lr and momentum (beta1) changed on the way: bitwise the reference's. The parameters, gradients and
   state are views of one allocation: each slot follows the one before at a 64-byte boundary, and the
   gradients, momentum buffers / exp_avg and exp_avg_sq are the same layout one, two and three region
   sizes further on. zero_grad zeroes them; set_to_none gives the same slots back. */
TEST test_flat_buffer_bitwise(const opt_case *k) {
    static const int64_t sizes[FLAT_NP] = {5, 1500, 37, 64};
    gdl_tensor *p[FLAT_NP], *c[FLAT_NP];
    float *rp[FLAT_NP], *rs1[FLAT_NP], *rs2[FLAT_NP];
    int rstep[FLAT_NP] = {0}, rhas[FLAT_NP] = {0}, j, s, np = 3;
    fref_group hg[2];
    gdl_optimizer *opt = make_opt(k);
    ASSERT_NOT_NULL(opt);
    memset(hg, 0, sizeof hg);
    hg[0].lr = k->lr;
    hg[0].wd = k->wd;
    hg[0].mom = k->kind == 0 ? k->a : 0;
    hg[0].damp = k->b;
    hg[0].nesterov = k->nesterov;
    hg[0].b1 = k->a;
    hg[0].b2 = k->b;
    hg[0].eps = k->c;
    hg[1] = hg[0];
    hg[1].lr = 0.03;
    hg[1].wd = 0;
    gdl_manual_seed(5);
    for (j = 0; j < FLAT_NP; j++) {
        ASSERT_NOT_NULL(p[j] = gdl_randn(1, &sizes[j], CPU));
        ASSERT_NOT_NULL(c[j] = gdl_randn(1, &sizes[j], CPU));
        ASSERT_EQ(0, gdl_set_requires_grad(p[j], 1));
        rp[j] = (float *)calloc((size_t)sizes[j], sizeof(float));
        rs1[j] = (float *)calloc((size_t)sizes[j], sizeof(float));
        rs2[j] = (float *)calloc((size_t)sizes[j], sizeof(float));
        ASSERT(rp[j] && rs1[j] && rs2[j]);
        memcpy(rp[j], p[j]->data, sizeof(float) * (size_t)sizes[j]);
    }
    ASSERT_EQ(0, gdl_optim_add_params(opt, p, 3, -1, -1));
    for (s = 0; s < 30; s++) {
        gdl_tensor *loss = NULL;
        if (s == 8) { /* a parameter added later: the buffer is made again, the others keep their state */
            ASSERT_EQ(1, gdl_optim_add_params(opt, &p[3], 1, hg[1].lr, 0));
            np = 4;
        }
        if (s == 12) {
            ASSERT_EQ(0, gdl_optim_set_lr(opt, 0, 0.05));
            hg[0].lr = 0.05;
        }
        if (s == 20) { /* plain SGD gets momentum (its buffers appear), the others a new momentum / beta1 */
            ASSERT_EQ(0, gdl_optim_set_momentum(opt, 0, 0.5));
            if (k->kind == 0) hg[0].mom = 0.5;
            else hg[0].b1 = 0.5;
        }
        gdl_arena_reset();
        ASSERT_EQ(0, gdl_zero_grad_ex(opt, s % 5 == 4)); /* now and then PyTorch's set_to_none */
        for (j = 0; j < np; j++) {
            int64_t i;
            for (i = 0; i < sizes[j]; i++) R(c[j])[i] = (gdl_real)(gdl_rng_uniform() - 0.5);
            loss = loss ? gdl_add(loss, gdl_sum(gdl_mul(p[j], c[j]))) : gdl_sum(gdl_mul(p[j], c[j]));
        }
        ASSERT_EQ(0, gdl_backward(loss)); /* the gradient of p[j] is c[j], exactly */
        ASSERT_EQ(0, gdl_step(opt));
        for (j = 0; j < np; j++) {
            const fref_group *h = &hg[j == 3];
            if (k->kind != 0 || h->mom != 0) rhas[j] = 1;
            fref_step(k->kind, h, sizes[j], rp[j], (const float *)c[j]->data, rs1[j], rs2[j], &rstep[j], &rhas[j]);
            if (memcmp(rp[j], p[j]->data, sizeof(float) * (size_t)sizes[j]) != 0)
                FAILf("%s step %d: parameter %d differs from the reference's bits", k->name, s, j);
        }
        /* one buffer: parameters, gradients and state at fixed distances */
        {
            char *base = (char *)p[0]->data;
            ptrdiff_t region = (char *)p[0]->grad->data - base, off = 0;
            ASSERT(region > 0);
            for (j = 0; j < np; j++) {
                gdl_tensor *st[3];
                char nm[32];
                ASSERT_EQ(off, (char *)p[j]->data - base);
                ASSERT_EQ(off + region, (char *)p[j]->grad->data - base);
                ASSERT_EQ(0, ((uintptr_t)p[j]->data) % 64);
                if (rhas[j]) {
                    const char *names[40];
                    gdl_tensor *ts[40];
                    int n = gdl_optim_state(opt, names, ts, 40), i, found = 0;
                    ASSERT(n > 0 && n <= 40);
                    snprintf(nm, sizeof nm, "state.%d.", j);
                    for (i = 0; i < n; i++)
                        if (!strncmp(names[i], nm, strlen(nm))) st[found++] = ts[i];
                    ASSERT_EQ(k->kind == 0 ? 2 : 3, found);
                    ASSERT_EQ(rstep[j], ((int32_t *)st[0]->data)[0]); /* read back from the buffer */
                    ASSERT_EQ(off + 2 * region, (char *)st[1]->data - base);
                    if (k->kind != 0) ASSERT_EQ(off + 3 * region, (char *)st[2]->data - base);
                }
                off += (ptrdiff_t)((sizes[j] * 4 + 63) / 64 * 64);
            }
            ASSERT_EQ(off, region);
        }
    }
    /* zero_grad: every gradient zero; set_to_none: none, then the same slots again */
    {
        void *g1 = p[1]->grad->data;
        int64_t i;
        ASSERT_EQ(0, gdl_zero_grad(opt));
        for (j = 0; j < np; j++)
            for (i = 0; i < sizes[j]; i++) ASSERT_EQ(0.0, (double)R(p[j]->grad)[i]);
        ASSERT_EQ(0, gdl_zero_grad_ex(opt, 1));
        for (j = 0; j < np; j++) ASSERT(p[j]->grad == NULL);
        gdl_arena_reset();
        ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_mul(p[1], c[1]))));
        ASSERT(p[1]->grad->data == g1);
        ASSERT(p[0]->grad == NULL);
    }
    gdl_optim_free(opt);
    /* the parameters outlive the optimizer (they hold the buffer) */
    ASSERT_EQ(0, memcmp(rp[1], p[1]->data, sizeof(float) * (size_t)sizes[1]));
    for (j = 0; j < FLAT_NP; j++) {
        gdl_free(p[j]);
        gdl_free(c[j]);
        free(rp[j]);
        free(rs1[j]);
        free(rs2[j]);
    }
    PASS();
}

TEST test_param_groups(void) {
    /* group 0: lr 0.1, weight_decay 0.1 (defaults); group 1: lr 0.01, no weight decay */
    gdl_tensor *p1 = vecd(P0, 4), *p2 = vecd(P0, 4), *c = vecd(C0, 4);
    gdl_optimizer *opt = gdl_sgd_new(0.1, 0.9, 0, 0.1, 0);
    double r1[4], r2[4];
    int i;
    gdl_set_requires_grad(p1, 1);
    gdl_set_requires_grad(p2, 1);
    ASSERT_EQ(0, gdl_optim_add_params(opt, &p1, 1, -1, -1));
    ASSERT_EQ(1, gdl_optim_add_params(opt, &p2, 1, 0.01, 0));
    ASSERT_EQ(2, gdl_optim_num_groups(opt));
    ASSERT_EQ(2, gdl_optim_num_params(opt));
    ASSERT_IN_RANGE(0.01, gdl_optim_get_lr(opt, 1), 0);
    for (i = 0; i < 3; i++) {
        gdl_arena_reset();
        gdl_zero_grad(opt);
        ASSERT_EQ(0, loss_backward(p1, c));
        ASSERT_EQ(0, loss_backward(p2, c));
        ASSERT_EQ(0, gdl_step(opt));
    }
    memcpy(r1, P0, sizeof r1);
    memcpy(r2, P0, sizeof r2);
    ref_sgd(r1, 3, 0.1, 0.9, 0, 0.1, 0);
    ref_sgd(r2, 3, 0.01, 0.9, 0, 0, 0);
    for (i = 0; i < 4; i++) {
        ASSERT_IN_RANGE(r1[i], R(p1)[i], 1e-6);
        ASSERT_IN_RANGE(r2[i], R(p2)[i], 1e-6);
    }
    /* a parameter may be in one group only */
    ASSERT_EQ(-1, gdl_optim_add_params(opt, &p1, 1, -1, -1));
    ASSERT_CONTAINS(gdl_last_error(), "already in parameter group 0");
    gdl_optim_free(opt);
    gdl_free(p1);
    gdl_free(p2);
    gdl_free(c);
    PASS();
}

TEST test_add_module_no_decay(void) {
    gdl_module *m = gdl_nn_sequential(4, (gdl_module *[]){gdl_nn_conv2d(1, 2, 3, 1, 0, 1, 1, 1), gdl_nn_batchnorm2d(2),
                                                          gdl_nn_flatten(1), gdl_nn_linear(2, 2, 1)});
    gdl_optimizer *a = gdl_adamw_new(1e-3, 0.9, 0.999, 1e-8, 0.05), *b = gdl_sgd_new(0.1, 0, 0, 0, 0);
    gdl_tensor *w = gdl_module_tensor(m, "0.weight"), *bias = gdl_module_tensor(m, "0.bias");
    double wv = R(w)[0], bv = R(bias)[0];
    ASSERT_EQ(0, gdl_optim_add_module(a, m, 1));
    ASSERT_EQ(2, gdl_optim_num_groups(a));
    ASSERT_EQ(6, gdl_optim_num_params(a));
    ASSERT_EQ(0, gdl_optim_add_module(b, m, 0));
    ASSERT_EQ(1, gdl_optim_num_groups(b));
    /* a zero gradient isolates the weight decay: only group 0 (the 2-D+ weights) decays */
    gdl_arena_reset();
    {
        int64_t xs[4] = {2, 1, 3, 3};
        gdl_tensor *x = gdl_zeros(4, xs, GDL_F32, CPU), *loss;
        loss = gdl_mul_scalar(gdl_sum(gdl_forward(m, x)), 0);
        ASSERT_EQ(0, gdl_backward(loss));
        gdl_free(x);
    }
    ASSERT_EQ(0, gdl_step(a));
    ASSERT_IN_RANGE(wv * (1 - 1e-3 * 0.05), R(w)[0], 1e-7);
    ASSERT_IN_RANGE(bv, R(bias)[0], 0);
    gdl_optim_free(a);
    gdl_optim_free(b);
    gdl_module_free(m);
    PASS();
}

/* Weight EMA (AveragedModel + get_ema_multi_avg_fn(0.8), use_buffers): after each SGD step the averages of
   the parameters and of BatchNorm's running statistics against a hand reference in f32 (the first update
   copies, later ones avg += 0.2 (p - avg), torch.lerp's form for a weight < 0.5); swap exchanges model and
   averages; a checkpoint restores them and n_averaged; bad input fails with a clear error. */
static float ema_ref[64], ema_prev[64];
/* m's parameters and buffers (e NULL), or their averages in e, flattened into out; their count, -1 */
static int ema_gather(gdl_ema *e, gdl_module *m, float *out) {
    gdl_tensor *ts[16];
    int n = gdl_module_named_tensors(m, GDL_PARAMS_AND_BUFFERS, NULL, ts, 16), i, k = 0;
    int64_t j;
    for (i = 0; i < n; i++) {
        gdl_tensor *a = e ? gdl_ema_tensor(e, ts[i]) : ts[i];
        if (!a) return -1;
        for (j = 0; j < a->numel; j++) out[k++] = R(a)[j];
    }
    return k;
}
#define ema_collect(m, out) ema_gather(NULL, m, out)
#define ema_collect_avg(e, m, out) ema_gather(e, m, out)
static int ema_train_step(gdl_module *m, gdl_optimizer *opt, int s) {
    int64_t xs[2] = {4, 3};
    gdl_tensor *x = gdl_zeros(2, xs, GDL_F32, CPU), *loss;
    int i, rc;
    for (i = 0; i < 12; i++) R(x)[i] = (float)((i * 7 + s * 3) % 5) - 2.0f;
    gdl_arena_reset();
    gdl_zero_grad(opt);
    loss = gdl_sum(gdl_mul(gdl_forward(m, x), gdl_forward(m, x)));
    rc = loss && gdl_backward(loss) == 0 && gdl_step(opt) == 0 ? 0 : -1;
    gdl_free(x);
    return rc;
}
TEST test_ema(void) {
    gdl_module *m = gdl_nn_sequential(2, (gdl_module *[]){gdl_nn_linear(3, 2, 1), gdl_nn_batchnorm1d(2)});
    gdl_module *m2 = gdl_nn_sequential(2, (gdl_module *[]){gdl_nn_linear(3, 2, 1), gdl_nn_batchnorm1d(2)});
    gdl_optimizer *opt = gdl_sgd_new(0.05, 0.9, 0, 0, 0), *opt2 = gdl_sgd_new(0.05, 0.9, 0, 0, 0), *empty;
    gdl_ema *e, *e2;
    float got[64], now[64];
    const char *path = harness_tmp("test_nn_ema.safetensors");
    int n, i, s;
    gdl_tensor *extra;
    ASSERT_EQ(0, gdl_optim_add_module(opt, m, 0));
    ASSERT_EQ(0, gdl_optim_add_module(opt2, m2, 0));
    e = gdl_ema_new(opt, m, 0.8, 1);
    ASSERT_NOT_NULL(e);
    n = ema_collect(m, ema_ref);
    ASSERT_EQ(2 * 3 + 2 + 2 + 2 + 2 + 2, n);
    ASSERT_EQ(n, ema_collect_avg(e, m, got));
    for (i = 0; i < n; i++) ASSERT_EQ(ema_ref[i], got[i]); /* a copy of the model at the start */
    ASSERT_EQ(0, gdl_ema_num_updates(e));
    for (s = 0; s < 4; s++) {
        ASSERT_EQ(0, ema_train_step(m, opt, s));
        ema_collect(m, now);
        for (i = 0; i < n; i++) ema_ref[i] = s == 0 ? now[i] : ema_ref[i] + 0.2f * (now[i] - ema_ref[i]);
        ASSERT_EQ(n, ema_collect_avg(e, m, got));
        for (i = 0; i < n; i++) ASSERT_IN_RANGE(ema_ref[i], got[i], 1e-6 * (1 + fabs(ema_ref[i])));
    }
    ASSERT_EQ(4, gdl_ema_num_updates(e));
    /* swap: the model holds the averages, and back */
    ema_collect(m, ema_prev);
    ASSERT_EQ(0, gdl_ema_swap(e));
    ema_collect(m, now);
    for (i = 0; i < n; i++) ASSERT_EQ(got[i], now[i]);
    ASSERT_EQ(0, gdl_ema_swap(e));
    ema_collect(m, now);
    for (i = 0; i < n; i++) ASSERT_EQ(ema_prev[i], now[i]);
    /* a checkpoint holds the averages and n_averaged */
    ASSERT_EQ(0, gdl_checkpoint_save(m, opt, NULL, 1, path));
    ASSERT_EQ(-1, gdl_checkpoint_load(m2, opt2, NULL, NULL, path)); /* opt2 has no EMA yet */
    ASSERT_CONTAINS(gdl_last_error(), "the file holds a weight EMA ('ema.0.weight'): attach one to the optimizer");
    e2 = gdl_ema_new(opt2, m2, 0.8, 1);
    ASSERT_NOT_NULL(e2);
    ASSERT_EQ(0, gdl_checkpoint_load(m2, opt2, NULL, NULL, path));
    ASSERT_EQ(4, gdl_ema_num_updates(e2));
    ASSERT_EQ(n, ema_collect_avg(e2, m2, now));
    for (i = 0; i < n; i++) ASSERT_EQ(got[i], now[i]);
    ASSERT_EQ(0, ema_train_step(m, opt, 9));
    ASSERT_EQ(0, ema_train_step(m2, opt2, 9));
    ema_collect_avg(e, m, got);
    ema_collect_avg(e2, m2, now);
    for (i = 0; i < n; i++) ASSERTm("the resumed average goes on as the first", got[i] == now[i]);
    remove(path);
    /* errors */
    ASSERT_NULL(gdl_ema_new(opt, m, 0.5, 0));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_ema_new: the optimizer already has an EMA");
    empty = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0);
    ASSERT_NULL(gdl_ema_new(empty, m, 0.5, 0));
    ASSERT_CONTAINS(gdl_last_error(), "the optimizer has no parameters yet");
    ASSERT_NULL(gdl_ema_new(opt, m, 1.5, 0));
    ASSERT_CONTAINS(gdl_last_error(), "decay 1.5 must be in [0, 1]");
    extra = gdl_zeros(1, (int64_t[]){3}, GDL_F32, CPU);
    ASSERT_NULL(gdl_ema_tensor(e, extra));
    ASSERT_CONTAINS(gdl_last_error(), "is not averaged by this EMA");
    /* a parameter added after the EMA: its step fails, saying why */
    gdl_set_requires_grad(extra, 1);
    ASSERT_EQ(1, gdl_optim_add_params(opt, &extra, 1, -1, -1));
    ASSERT_EQ(-1, ema_train_step(m, opt, 1));
    ASSERT_CONTAINS(gdl_last_error(), "make the EMA after adding every parameter");
    gdl_optim_free(opt);
    ASSERT_EQ(-1, gdl_ema_num_updates(e));
    ASSERT_EQ(-1, gdl_ema_swap(e));
    ASSERT_CONTAINS(gdl_last_error(), "the EMA's optimizer was freed");
    gdl_ema_free(e);
    gdl_ema_free(e2);
    gdl_optim_free(opt2);
    gdl_optim_free(empty);
    gdl_free(extra);
    gdl_module_free(m);
    gdl_module_free(m2);
    PASS();
}

/* ResNet's BasicBlock against torchvision 0.29's BasicBlock (train mode) with every parameter k filled as
   0.5 sin(0.37 j + 1.3 k) and x[i] = cos(0.21 i): output sums, values and bn1's updated running mean, for a
   projection block (3 -> 4 channels, stride 2) and an identity one (4 -> 4); torchvision's names; errors. */
static double bb_run(gdl_module *b, int cin, const char *const *names, int nn, double *sq, float *first, float *rm) {
    gdl_tensor *ps[16], *x, *y;
    const char *got[16];
    int64_t xs[4] = {2, cin, 6, 6}, j;
    int n = gdl_module_named_tensors(b, GDL_PARAMS, got, ps, 16), k;
    double sum = 0;
    if (n != nn) return NAN;
    for (k = 0; k < n; k++) {
        if (strcmp(names[k], got[k]) != 0) return NAN;
        for (j = 0; j < ps[k]->numel; j++) R(ps[k])[j] = (float)(0.5 * sin(0.37 * (double)j + 1.3 * k));
    }
    x = gdl_zeros(4, xs, GDL_F32, CPU);
    for (j = 0; j < x->numel; j++) R(x)[j] = (float)cos(0.21 * (double)j);
    gdl_arena_reset();
    y = gdl_forward(b, x);
    *sq = 0;
    for (j = 0; y && j < y->numel; j++) sum += R(y)[j], *sq += (double)R(y)[j] * R(y)[j];
    for (j = 0; y && j < 8; j++) first[j] = R(y)[j];
    for (j = 0; j < 4; j++) rm[j] = R(gdl_module_tensor(b, "bn1.running_mean"))[j];
    gdl_free(x);
    return y ? sum : NAN;
}
TEST test_basic_block(void) {
    static const char *const proj[9] = {"conv1.weight", "bn1.weight", "bn1.bias", "conv2.weight", "bn2.weight",
                                        "bn2.bias", "downsample.0.weight", "downsample.1.weight", "downsample.1.bias"};
    gdl_module *b = gdl_nn_basic_block(3, 4, 2), *id = gdl_nn_basic_block(4, 4, 1);
    double sq, sum;
    float first[8], rm[4];
    int64_t xs[4] = {1, 4, 6, 6};
    gdl_tensor *x;
    ASSERT(b && id);
    sum = bb_run(b, 3, proj, 9, &sq, first, rm);
    ASSERT_IN_RANGE(7.372509479522705, sum, 2e-5);
    ASSERT_IN_RANGE(2.71958589553833, sq, 2e-5);
    ASSERT_IN_RANGE(0.3833879828453064, first[4], 1e-6);
    ASSERT_IN_RANGE(0.24620682001113892, first[5], 1e-6);
    ASSERT_IN_RANGE(0.13005571067333221, first[6], 1e-6);
    ASSERT_IN_RANGE(0.273089200258255, first[7], 1e-6);
    ASSERT_IN_RANGE(0.0004024216905236244, rm[0], 1e-7);
    ASSERT_IN_RANGE(-0.005338944029062986, rm[3], 1e-7);
    sum = bb_run(id, 4, proj, 6, &sq, first, rm);
    ASSERT_IN_RANGE(145.81163024902344, sum, 2e-4);
    ASSERT_IN_RANGE(160.6177978515625, sq, 2e-4);
    ASSERT_IN_RANGE(0.8864260911941528, first[0], 1e-6);
    ASSERT_IN_RANGE(0.8296788334846497, first[3], 1e-6);
    ASSERT_IN_RANGE(0.010560047812759876, rm[0], 1e-7);
    ASSERT_IN_RANGE(-0.006904908921569586, rm[3], 1e-7);
    ASSERT_NULL(gdl_module_child(id, "downsample"));
    /* errors */
    x = gdl_zeros(4, xs, GDL_F32, CPU); /* 4 channels into a block of 3 */
    ASSERT_NULL(gdl_nn_basic_block(0, 4, 1));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_nn_basic_block: in_channels 0, out_channels 4 and stride 1 must be >= 1");
    ASSERT_NULL(gdl_forward(b, x));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_forward: Conv2d 'conv1' (3, 4, kernel_size=(3,3), stride=(2,2)");
    ASSERT_CONTAINS(gdl_last_error(), "expected input [N, 3, H, W], got [1,4,6,6]");
    gdl_free(x);
    gdl_module_free(b);
    gdl_module_free(id);
    PASS();
}

TEST test_skip_params_without_grad(void) {
    gdl_tensor *p1 = vecd(P0, 4), *p2 = vecd(P0, 4), *c = vecd(C0, 4);
    gdl_tensor *ps[2];
    gdl_optimizer *opt = gdl_sgd_new(0.1, 0.9, 0, 0.5, 0);
    double r[4];
    int i;
    ps[0] = p1;
    ps[1] = p2;
    gdl_set_requires_grad(p1, 1);
    gdl_set_requires_grad(p2, 1);
    ASSERT_EQ(0, gdl_optim_add_params(opt, ps, 2, -1, -1));
    for (i = 0; i < 2; i++) {
        gdl_arena_reset();
        gdl_zero_grad(opt);
        ASSERT_EQ(0, loss_backward(p1, c));
        ASSERT_EQ(0, gdl_step(opt));
    }
    ASSERT_NULL(p2->grad);
    for (i = 0; i < 4; i++) ASSERT_IN_RANGE(P0[i], R(p2)[i], 0); /* weight decay and momentum did not touch it */
    memcpy(r, P0, sizeof r);
    ref_sgd(r, 2, 0.1, 0.9, 0, 0.5, 0);
    for (i = 0; i < 4; i++) ASSERT_IN_RANGE(r[i], R(p1)[i], 1e-6);
    /* set_to_none: the grads go, and the next step leaves everything alone */
    ASSERT_EQ(0, gdl_zero_grad_ex(opt, 1));
    ASSERT_NULL(p1->grad);
    ASSERT_EQ(0, gdl_step(opt));
    for (i = 0; i < 4; i++) ASSERT_IN_RANGE(r[i], R(p1)[i], 1e-6);
    gdl_optim_free(opt);
    gdl_free(p1);
    gdl_free(p2);
    gdl_free(c);
    PASS();
}

TEST test_clip_grad_norm(void) {
    float c1[2] = {3, 4}, c2[1] = {12};
    gdl_tensor *a = gdl_zeros(GDL_DIMS(2), GDL_F32, CPU), *b = gdl_zeros(GDL_DIMS(1), GDL_F32, CPU);
    gdl_tensor *ca = vec(c1, 2), *cb = vec(c2, 1), *unused = gdl_zeros(GDL_DIMS(3), GDL_F32, CPU), *ps[3];
    gdl_optimizer *opt = gdl_sgd_new(0.1, 0, 0, 0, 0);
    double norm, s = 6.5 / (13 + 1e-6);
    ps[0] = a;
    ps[1] = unused; /* no grad: ignored */
    ps[2] = b;
    gdl_set_requires_grad(a, 1);
    gdl_set_requires_grad(b, 1);
    gdl_set_requires_grad(unused, 1);
    ASSERT_EQ(0, gdl_backward(gdl_add(gdl_sum(gdl_mul(a, ca)), gdl_sum(gdl_mul(b, cb)))));
    /* the norm is sqrt(9 + 16 + 144) = 13 */
    norm = gdl_clip_grad_norm(ps, 3, 100);
    ASSERT_IN_RANGE(13, norm, 1e-9);
    ASSERT_IN_RANGE(3, R(a->grad)[0], 0); /* under the limit: unchanged */
    norm = gdl_clip_grad_norm(ps, 3, 6.5);
    ASSERT_IN_RANGE(13, norm, 1e-9);
    ASSERT_IN_RANGE(3 * s, R(a->grad)[0], 1e-6);
    ASSERT_IN_RANGE(4 * s, R(a->grad)[1], 1e-6);
    ASSERT_IN_RANGE(12 * s, R(b->grad)[0], 1e-6);
    ASSERT_EQ(0, gdl_optim_add_params(opt, ps, 3, -1, -1));
    norm = gdl_optim_clip_grad_norm(opt, 1);
    ASSERT_IN_RANGE(6.5, norm, 1e-5);
    ASSERT_IN_RANGE(1, sqrt(R(a->grad)[0] * R(a->grad)[0] + R(a->grad)[1] * R(a->grad)[1] + R(b->grad)[0] * R(b->grad)[0]),
                    1e-5);
    ASSERT_IN_RANGE(-1, gdl_clip_grad_norm(ps, 3, -1), 0);
    ASSERT_CONTAINS(gdl_last_error(), "max_norm");
    gdl_optim_free(opt);
    gdl_free(a); gdl_free(b); gdl_free(ca); gdl_free(cb); gdl_free(unused);
    PASS();
}

/* k steps of optimizer `opt` on p (the test problem) */
static int run_steps(gdl_optimizer *opt, gdl_tensor *p, gdl_tensor *c, int k) {
    int i;
    for (i = 0; i < k; i++) {
        gdl_arena_reset();
        if (gdl_zero_grad(opt) < 0 || loss_backward(p, c) < 0 || gdl_step(opt) < 0) return -1;
    }
    return 0;
}

/* saving after 3 steps and restoring into a fresh optimizer continues exactly */
TEST test_optim_state_checkpoint(const opt_case *k) {
    gdl_tensor *p = vecd(P0, 4), *q, *c = vecd(C0, 4), *sa[8], *sb[8];
    gdl_optimizer *a = make_opt(k), *b = make_opt(k);
    const char *na[8], *nb[8];
    int n, i;
    gdl_set_requires_grad(p, 1);
    ASSERT_EQ(0, gdl_optim_add_params(a, &p, 1, -1, -1));
    ASSERT_EQ(0, run_steps(a, p, c, 3));
    n = gdl_optim_state(a, na, sa, 8);
    ASSERT_EQ(k->kind == 0 ? (k->a != 0 ? 2 : 0) : 3, n);
    if (n) {
        ASSERT_STR_EQ("state.0.step", na[0]);
        ASSERT_EQ(3, ((int32_t *)sa[0]->data)[0]);
        ASSERT_STR_EQ(k->kind == 0 ? "state.0.momentum_buffer" : "state.0.exp_avg", na[1]);
        if (k->kind) ASSERT_STR_EQ("state.0.exp_avg_sq", na[2]);
    }
    /* restore into b over a copy of the parameter */
    q = gdl_clone(p);
    gdl_set_requires_grad(q, 1);
    ASSERT_EQ(0, gdl_optim_add_params(b, &q, 1, -1, -1));
    ASSERT_EQ(n, gdl_optim_state(b, nb, sb, 8));
    for (i = 0; i < n; i++) {
        ASSERT_STR_EQ(na[i], nb[i]);
        ASSERT_EQ(0, gdl_copy_(sb[i], sa[i]));
    }
    ASSERT_EQ(0, gdl_optim_set_step(b, gdl_optim_get_step(a)));
    ASSERT_EQ(0, run_steps(a, p, c, 2));
    ASSERT_EQ(0, run_steps(b, q, c, 2));
    for (i = 0; i < 4; i++) ASSERT_IN_RANGE(R(p)[i], R(q)[i], 0);
    ASSERT_EQ(5, gdl_optim_get_step(b));
    gdl_optim_free(a);
    gdl_optim_free(b);
    gdl_free(p);
    gdl_free(q);
    gdl_free(c);
    PASS();
}

TEST test_state_made_before_first_step(void) {
    /* listing the state before any step makes zero state with step 0, so the
       first step still starts SGD's momentum buffer at g (dampening shows it) */
    gdl_tensor *p = vecd(P0, 4), *c = vecd(C0, 4), *st[2];
    gdl_optimizer *opt = gdl_sgd_new(0.1, 0.9, 0.5, 0, 0);
    double r[4];
    int i;
    gdl_set_requires_grad(p, 1);
    gdl_optim_add_params(opt, &p, 1, -1, -1);
    ASSERT_EQ(2, gdl_optim_state(opt, NULL, st, 2));
    ASSERT_EQ(0, ((int32_t *)st[0]->data)[0]);
    ASSERT_EQ(0, run_steps(opt, p, c, 3));
    memcpy(r, P0, sizeof r);
    ref_sgd(r, 3, 0.1, 0.9, 0.5, 0, 0);
    for (i = 0; i < 4; i++) ASSERT_IN_RANGE(r[i], R(p)[i], 1e-6);
    gdl_optim_free(opt);
    gdl_free(p);
    gdl_free(c);
    PASS();
}

TEST test_gradient_accumulation(void) {
    /* 4 micro-batches of 8 with the loss scaled by 1/4, then one step == one step on the batch of 32 */
    gdl_module *a, *b;
    gdl_optimizer *oa, *ob;
    gdl_tensor *x, *y, *pa[2], *pb[2];
    int64_t xs[2] = {32, 5}, ys[2] = {32, 3};
    int k, i;
    gdl_manual_seed(7);
    a = gdl_nn_linear(5, 3, 1);
    gdl_manual_seed(7);
    b = gdl_nn_linear(5, 3, 1);
    x = gdl_randn(2, xs, CPU);
    y = gdl_randn(2, ys, CPU);
    oa = gdl_sgd_new(0.5, 0.9, 0, 0.01, 0);
    ob = gdl_sgd_new(0.5, 0.9, 0, 0.01, 0);
    gdl_optim_add_module(oa, a, 0);
    gdl_optim_add_module(ob, b, 0);
    gdl_zero_grad(oa);
    for (k = 0; k < 4; k++) {
        gdl_tensor *l = gdl_mse_loss(gdl_forward(a, gdl_slice(x, 8 * k, 8 * k + 8)), gdl_slice(y, 8 * k, 8 * k + 8),
                                     GDL_REDUCE_MEAN);
        ASSERT_EQ(0, gdl_backward(gdl_mul_scalar(l, 0.25)));
    }
    ASSERT_EQ(0, gdl_step(oa));
    gdl_zero_grad(ob);
    ASSERT_EQ(0, gdl_backward(gdl_mse_loss(gdl_forward(b, x), y, GDL_REDUCE_MEAN)));
    ASSERT_EQ(0, gdl_step(ob));
    gdl_module_named_tensors(a, GDL_PARAMS, NULL, pa, 2);
    gdl_module_named_tensors(b, GDL_PARAMS, NULL, pb, 2);
    for (k = 0; k < 2; k++)
        for (i = 0; i < pa[k]->numel; i++) {
            ASSERT_IN_RANGE(R(pb[k]->grad)[i], R(pa[k]->grad)[i], 1e-6);
            ASSERT_IN_RANGE(R(pb[k])[i], R(pa[k])[i], 1e-6);
        }
    gdl_optim_free(oa);
    gdl_optim_free(ob);
    gdl_module_free(a);
    gdl_module_free(b);
    gdl_free(x);
    gdl_free(y);
    PASS();
}

/* optimizer state follows its parameters when the module moves (needs a GPU) */
TEST test_state_follows_device(void) {
    gdl_module *a, *b;
    gdl_optimizer *oa, *ob;
    gdl_tensor *x, *y, *xg, *yg, *pa[2], *pb[2], *st[8];
    int64_t xs[2] = {16, 4}, ys[2] = {16, 2};
    int k, i, n;
    if (!gdl_cuda_is_available()) SKIPm("no CUDA device");
    gdl_manual_seed(11);
    a = gdl_nn_linear(4, 2, 1);
    gdl_manual_seed(11);
    b = gdl_nn_linear(4, 2, 1);
    x = gdl_randn(2, xs, CPU);
    y = gdl_randn(2, ys, CPU);
    xg = gdl_to(x, gdl_cuda(0));
    yg = gdl_to(y, gdl_cuda(0));
    oa = gdl_adamw_new(0.01, 0.9, 0.999, 1e-8, 0.1);
    ob = gdl_adamw_new(0.01, 0.9, 0.999, 1e-8, 0.1);
    gdl_optim_add_module(oa, a, 1);
    gdl_optim_add_module(ob, b, 1);
    for (k = 0; k < 6; k++) {
        gdl_arena_reset();
        if (k == 3) ASSERT_EQ(0, gdl_module_to(b, gdl_cuda(0))); /* mid-training, with state */
        gdl_zero_grad(oa);
        gdl_zero_grad(ob);
        ASSERT_EQ(0, gdl_backward(gdl_mse_loss(gdl_forward(a, x), y, GDL_REDUCE_MEAN)));
        ASSERT_EQ(0, gdl_backward(gdl_mse_loss(gdl_forward(b, k < 3 ? x : xg), k < 3 ? y : yg, GDL_REDUCE_MEAN)));
        ASSERT_EQ(0, gdl_step(oa));
        ASSERT_EQ(0, gdl_step(ob));
    }
    n = gdl_optim_state(ob, NULL, st, 8);
    ASSERT_EQ(6, n);
    ASSERT_EQ(GDL_DEVICE_CPU, st[0]->device.type); /* the step count stays on the host */
    ASSERT_EQ(GDL_DEVICE_CUDA, st[1]->device.type);
    ASSERT_EQ(GDL_DEVICE_CUDA, st[5]->device.type);
    ASSERT_EQ(0, gdl_module_to(b, CPU));
    gdl_module_named_tensors(a, GDL_PARAMS, NULL, pa, 2);
    gdl_module_named_tensors(b, GDL_PARAMS, NULL, pb, 2);
    for (k = 0; k < 2; k++)
        for (i = 0; i < pa[k]->numel; i++) ASSERT_IN_RANGE(R(pa[k])[i], R(pb[k])[i], 1e-5);
    gdl_optim_free(oa);
    gdl_optim_free(ob);
    gdl_module_free(a);
    gdl_module_free(b);
    gdl_free(x); gdl_free(y); gdl_free(xg); gdl_free(yg);
    PASS();
}

/* ---------------------------------------------------------------------------
   schedulers
   ------------------------------------------------------------------------- */

static gdl_tensor *sched_param;
static gdl_optimizer *sched_opt(int adam) {
    int64_t one = 1;
    gdl_optimizer *o = adam ? gdl_adam_new(0.1, 0.9, 0.999, 1e-8, 0) : gdl_sgd_new(0.1, 0, 0, 0, 0);
    if (!sched_param) {
        sched_param = gdl_zeros(1, &one, GDL_F32, CPU);
        gdl_set_requires_grad(sched_param, 1);
    }
    gdl_optim_add_params(o, &sched_param, 1, -1, -1);
    return o;
}

TEST test_steplr(void) {
    /* PyTorch: StepLR(SGD(lr=0.1), 3, 0.5), lr after 0..10 steps */
    static const double torch_lr[11] = {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125, 0.0125};
    gdl_optimizer *o = sched_opt(0);
    gdl_scheduler *s = gdl_steplr_new(o, 3, 0.5);
    int t;
    ASSERT_NOT_NULL(s);
    for (t = 0; t <= 40; t++) {
        double closed = 0.1 * pow(0.5, t / 3);
        ASSERT_EQ(t, gdl_scheduler_get_last_epoch(s));
        ASSERT_IN_RANGE(closed, gdl_optim_get_lr(o, 0), 1e-15);
        ASSERT_IN_RANGE(closed, gdl_scheduler_get_lr(s, 0), 1e-15);
        if (t <= 10) ASSERT_IN_RANGE(torch_lr[t], gdl_optim_get_lr(o, 0), 1e-15);
        ASSERT_EQ(0, gdl_scheduler_step(s));
    }
    gdl_scheduler_free(s);
    gdl_optim_free(o);
    PASS();
}

TEST test_cosine_lr(void) {
    /* PyTorch: CosineAnnealingLR(SGD(lr=0.1), T_max=10, eta_min=0.001), lr after 0..25 steps */
    static const double torch_lr[26] = {
        0.1, 0.097577297556610113, 0.090546341221559898, 0.079595369988477424, 0.065796341221559904,
        0.050500000000000003, 0.03520365877844011, 0.021404630011522589, 0.010453658778440109,
        0.0034227024433899004, 0.001, 0.0034227024433899004, 0.01045365877844014, 0.021404630011522669,
        0.035203658778440255, 0.050500000000000218, 0.065796341221560181, 0.079595369988477771,
        0.090546341221560314, 0.097577297556610543, 0.10000000000000045, 0.097577297556610543,
        0.090546341221560328, 0.079595369988477785, 0.065796341221560195, 0.050500000000000225};
    gdl_optimizer *o = sched_opt(0);
    gdl_scheduler *s = gdl_cosine_lr_new(o, 10, 0.001);
    int t;
    for (t = 0; t <= 25; t++) {
        double closed = 0.001 + (0.1 - 0.001) * (1 + cos(PI * t / 10)) / 2;
        ASSERT_IN_RANGE(closed, gdl_optim_get_lr(o, 0), 1e-15);
        ASSERT_IN_RANGE(torch_lr[t], gdl_optim_get_lr(o, 0), 1e-14); /* PyTorch's recursive form rounds a little */
        ASSERT_EQ(0, gdl_scheduler_step(s));
    }
    gdl_scheduler_free(s);
    gdl_optim_free(o);
    PASS();
}

TEST test_linear_warmup(void) {
    /* PyTorch: LinearLR(SGD(lr=0.1), 0.25, 1.0, 4), lr after 0..8 steps */
    static const double torch_lr[9] = {0.025, 0.043750000000000004, 0.062500000000000014, 0.081250000000000017,
                                       0.1, 0.1, 0.1, 0.1, 0.1};
    gdl_optimizer *o = sched_opt(0);
    gdl_scheduler *s = gdl_linear_warmup_new(o, 0.25, 1.0, 4);
    int t;
    for (t = 0; t <= 8; t++) {
        double closed = 0.1 * (0.25 + 0.75 * (t < 4 ? t : 4) / 4.0);
        ASSERT_IN_RANGE(closed, gdl_optim_get_lr(o, 0), 1e-15);
        ASSERT_IN_RANGE(torch_lr[t], gdl_optim_get_lr(o, 0), 1e-15);
        ASSERT_EQ(0, gdl_scheduler_step(s));
    }
    gdl_scheduler_free(s);
    gdl_optim_free(o);
    PASS();
}

TEST test_warmup_cosine(void) {
    /* PyTorch 2.15: SequentialLR(SGD(lr=0.1), [LinearLR(0.25, 1.0, total_iters=3), CosineAnnealingLR(T_max=5,
       eta_min=0.01)], milestones=[3]), lr after 0..10 steps */
    static const double torch_lr[11] = {0.025, 0.05, 0.07500000000000001, 0.1, 0.09140576474687263,
                                        0.06890576474687263, 0.04109423525312736, 0.018594235253127367, 0.01,
                                        0.018594235253127367, 0.04109423525312739};
    gdl_optimizer *o = sched_opt(0);
    gdl_scheduler *s = gdl_warmup_cosine_lr_new(o, 3, 0.25, 5, 0.01);
    int t;
    ASSERT_NOT_NULL(s);
    for (t = 0; t <= 10; t++) {
        ASSERT_IN_RANGE(torch_lr[t], gdl_optim_get_lr(o, 0), 1e-15);
        ASSERT_EQ(0, gdl_scheduler_step(s));
    }
    ASSERT_EQ(0, gdl_scheduler_set_last_epoch(s, 5)); /* a restored position gives the same lr */
    ASSERT_IN_RANGE(torch_lr[5], gdl_optim_get_lr(o, 0), 1e-15);
    gdl_scheduler_free(s);
    ASSERT_NULL(gdl_warmup_cosine_lr_new(o, -1, 0.25, 5, 0));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_warmup_cosine_lr_new: bad warmup_iters -1");
    ASSERT_NULL(gdl_warmup_cosine_lr_new(o, 2, 0, 5, 0));
    ASSERT_CONTAINS(gdl_last_error(), "start_factor 0 (in (0,1])");
    ASSERT_NULL(gdl_warmup_cosine_lr_new(o, 2, 0.5, 0, 0));
    ASSERT_CONTAINS(gdl_last_error(), "T_max 0 (>= 1)");
    ASSERT_NULL(gdl_warmup_cosine_lr_new(NULL, 2, 0.5, 3, 0));
    /* no warm-up: CosineAnnealingLR's values */
    s = gdl_warmup_cosine_lr_new(o, 0, 1, 10, 0.001);
    ASSERT_NOT_NULL(s);
    for (t = 0; t <= 12; t++) {
        ASSERT_IN_RANGE(0.001 + (0.1 - 0.001) * (1 + cos(PI * t / 10)) / 2, gdl_optim_get_lr(o, 0), 1e-15);
        ASSERT_EQ(0, gdl_scheduler_step(s));
    }
    gdl_scheduler_free(s);
    gdl_optim_free(o);
    PASS();
}

/* OneCycleLR(max_lr 0.1, total 100) by its definition: two cosine phases */
static void onecycle_closed(int t, double *lr, double *mom) {
    double init = 0.1 / 25, min_lr = init / 1e4, end1 = 0.3 * 100 - 1, pct;
    if (t <= end1) {
        pct = t / end1;
        *lr = 0.1 + (init - 0.1) / 2 * (cos(PI * pct) + 1);
        *mom = 0.85 + (0.95 - 0.85) / 2 * (cos(PI * pct) + 1);
    } else {
        pct = (t - end1) / (99 - end1);
        *lr = min_lr + (0.1 - min_lr) / 2 * (cos(PI * pct) + 1);
        *mom = 0.95 + (0.85 - 0.95) / 2 * (cos(PI * pct) + 1);
    }
}

TEST test_onecycle(void) {
    /* PyTorch: OneCycleLR(SGD(lr=0.1), 0.1, total_steps=100): (step, lr, momentum) */
    static const double torch_pts[8][3] = {
        {0, 0.0040000000000000036, 0.94999999999999996}, {1, 0.0042813780565907483, 0.94970689785771789},
        {10, 0.029516394846410082, 0.92342042203498953}, {29, 0.10000000000000001, 0.84999999999999998},
        {30, 0.099949653528452434, 0.85005034667293422}, {50, 0.079389345057573196, 0.87061073738537631},
        {98, 5.0746471547578801e-05, 0.94994965332706571}, {99, 3.9999999999999998e-07, 0.94999999999999996}};
    int adam, t, k;
    for (adam = 0; adam < 2; adam++) {
        gdl_optimizer *o = sched_opt(adam);
        gdl_scheduler *s = gdl_onecycle_lr_new(o, 0.1, 100);
        double peak = 0;
        int peak_at = -1;
        ASSERT_NOT_NULL(s);
        for (t = 0, k = 0; t <= 99; t++) {
            double lr, mom;
            onecycle_closed(t, &lr, &mom);
            ASSERT_IN_RANGE(lr, gdl_optim_get_lr(o, 0), 1e-15);
            ASSERT_IN_RANGE(mom, gdl_optim_get_momentum(o, 0), 1e-15); /* SGD momentum, Adam beta1 */
            if (gdl_optim_get_lr(o, 0) > peak) {
                peak = gdl_optim_get_lr(o, 0);
                peak_at = t;
            }
            if (k < 8 && torch_pts[k][0] == t) {
                ASSERT_IN_RANGE(torch_pts[k][1], gdl_optim_get_lr(o, 0), 1e-15);
                ASSERT_IN_RANGE(torch_pts[k][2], gdl_optim_get_momentum(o, 0), 1e-15);
                k++;
            }
            if (t < 99) ASSERT_EQ(0, gdl_scheduler_step(s));
        }
        ASSERT_EQ(8, k);
        ASSERT_EQ(29, peak_at); /* pct_start * total - 1 */
        ASSERT_IN_RANGE(0.1, peak, 1e-15);
        ASSERT_IN_RANGE(0.1 / 25 / 1e4, gdl_optim_get_lr(o, 0), 1e-18);
        /* PyTorch allows one step more (to total_steps), then refuses */
        ASSERT_EQ(0, gdl_scheduler_step(s));
        ASSERT_EQ(-1, gdl_scheduler_step(s));
        ASSERT_CONTAINS(gdl_last_error(), "total steps is 100");
        ASSERT_EQ(100, gdl_scheduler_get_last_epoch(s));
        gdl_scheduler_free(s);
        gdl_optim_free(o);
    }
    PASS();
}

TEST test_scheduler_restore(void) {
    /* two groups with their own base lr; a restored scheduler continues exactly */
    int64_t one = 1;
    gdl_tensor *p = gdl_zeros(1, &one, GDL_F32, CPU), *q = gdl_zeros(1, &one, GDL_F32, CPU);
    gdl_optimizer *a = gdl_sgd_new(0.2, 0.9, 0, 0, 0), *b = gdl_sgd_new(0.2, 0.9, 0, 0, 0);
    gdl_scheduler *sa, *sb;
    int t, g;
    gdl_optim_add_params(a, &p, 1, -1, -1);
    gdl_optim_add_params(a, &q, 1, 0.02, -1);
    gdl_optim_add_params(b, &p, 1, -1, -1);
    gdl_optim_add_params(b, &q, 1, 0.02, -1);
    sa = gdl_cosine_lr_new(a, 20, 0);
    for (t = 0; t < 7; t++) gdl_scheduler_step(sa);
    ASSERT_IN_RANGE(0.02 * (1 + cos(PI * 7 / 20)) / 2, gdl_optim_get_lr(a, 1), 1e-15);
    sb = gdl_cosine_lr_new(b, 20, 0);
    ASSERT_EQ(0, gdl_scheduler_set_last_epoch(sb, gdl_scheduler_get_last_epoch(sa)));
    for (t = 0; t < 5; t++) {
        for (g = 0; g < 2; g++) ASSERT_IN_RANGE(gdl_optim_get_lr(a, g), gdl_optim_get_lr(b, g), 0);
        gdl_scheduler_step(sa);
        gdl_scheduler_step(sb);
    }
    ASSERT_EQ(12, gdl_scheduler_get_last_epoch(sb));
    gdl_scheduler_free(sa);
    gdl_scheduler_free(sb);
    /* OneCycle restored mid-way sets lr and momentum */
    sa = gdl_onecycle_lr_new(a, 1.0, 50);
    ASSERT_EQ(0, gdl_scheduler_set_last_epoch(sa, 14));
    ASSERT_IN_RANGE(1.0, gdl_optim_get_lr(a, 1), 1e-15);
    ASSERT_IN_RANGE(0.85, gdl_optim_get_momentum(a, 0), 1e-15);
    ASSERT_EQ(-1, gdl_scheduler_set_last_epoch(sa, 51));
    gdl_scheduler_free(sa);
    gdl_optim_free(a);
    gdl_optim_free(b);
    gdl_free(p);
    gdl_free(q);
    PASS();
}

/* 12 training steps with a scheduler stepped after each, against PyTorch 2.15 */
TEST test_scheduled_training_matches_pytorch(void) {
    static const float torch12[3][4] = {
        {0.152847424f, -0.305694848f, 0.669248402f, 0.0764237121f},     /* SGD(0.1) + OneCycleLR(0.5, 20) */
        {-0.0316217691f, 0.738259852f, -0.693151891f, 0.00202941149f},  /* Adam(0.1) + OneCycleLR(0.5, 20) */
        {-0.180595815f, 0.36119163f, -0.609888077f, -0.0902979076f}};   /* SGD(0.1, 0.9, wd 0.01) + Cosine(8, 0.01) */
    int k, t, i;
    for (k = 0; k < 3; k++) {
        gdl_tensor *p = vecd(P0, 4), *c = vecd(C0, 4);
        gdl_optimizer *o = k == 0 ? gdl_sgd_new(0.1, 0, 0, 0, 0)
                         : k == 1 ? gdl_adam_new(0.1, 0.9, 0.999, 1e-8, 0)
                                  : gdl_sgd_new(0.1, 0.9, 0, 0.01, 0);
        gdl_scheduler *s;
        gdl_set_requires_grad(p, 1);
        gdl_optim_add_params(o, &p, 1, -1, -1);
        s = k < 2 ? gdl_onecycle_lr_new(o, 0.5, 20) : gdl_cosine_lr_new(o, 8, 0.01);
        ASSERT_NOT_NULL(s);
        for (t = 0; t < 12; t++) {
            ASSERT_EQ(0, run_steps(o, p, c, 1));
            ASSERT_EQ(0, gdl_scheduler_step(s));
        }
        for (i = 0; i < 4; i++) ASSERT_IN_RANGE(torch12[k][i], R(p)[i], 1e-6);
        gdl_scheduler_free(s);
        gdl_optim_free(o);
        gdl_free(p);
        gdl_free(c);
    }
    PASS();
}

/* ---------------------------------------------------------------------------
   convergence
   ------------------------------------------------------------------------- */

TEST test_linear_regression(void) {
    int64_t xs[2] = {256, 10}, ws[2] = {10, 1}, ys[2] = {256, 1};
    gdl_tensor *X, *wt, *noise, *Y, *W, *b;
    gdl_module *m;
    gdl_optimizer *opt;
    double loss = 0;
    int step, i;
    gdl_manual_seed(2024);
    X = gdl_randn(2, xs, CPU);
    wt = gdl_randn(2, ws, CPU);
    noise = gdl_randn(2, ys, CPU);
    gdl_mul_scalar_(noise, 0.01);
    Y = gdl_clone(gdl_add_scalar(gdl_add(gdl_matmul(X, wt), noise), 0.5));
    m = gdl_nn_linear(10, 1, 1);
    opt = gdl_sgd_new(0.1, 0, 0, 0, 0);
    gdl_optim_add_module(opt, m, 0);
    for (step = 0; step < 300; step++) {
        gdl_tensor *l;
        gdl_arena_reset();
        gdl_zero_grad(opt);
        l = gdl_mse_loss(gdl_forward(m, X), Y, GDL_REDUCE_MEAN);
        ASSERT_EQ(0, gdl_backward(l));
        ASSERT_EQ(0, gdl_step(opt));
        loss = gdl_item(l);
    }
    W = gdl_module_tensor(m, "weight");
    b = gdl_module_tensor(m, "bias");
    for (i = 0; i < 10; i++) ASSERT_IN_RANGE(R(wt)[i], R(W)[i], 1e-2);
    ASSERT_IN_RANGE(0.5, R(b)[0], 1e-2);
    ASSERT(loss < 2e-4);
    gdl_optim_free(opt);
    gdl_module_free(m);
    gdl_free(X); gdl_free(wt); gdl_free(noise); gdl_free(Y);
    PASS();
}

TEST test_xor_mlp(void) {
    float xv[8] = {0, 0, 0, 1, 1, 0, 1, 1};
    int32_t yv[4] = {0, 1, 1, 0};
    int64_t xs[2] = {4, 2}, four = 4;
    gdl_tensor *X = gdl_from_array(xv, 2, xs, GDL_F32, CPU), *Y = gdl_from_array(yv, 1, &four, GDL_I32, CPU), *pred;
    gdl_module *m;
    gdl_optimizer *opt;
    int step, i, correct = 0;
    gdl_manual_seed(0);
    m = gdl_nn_sequential(3, (gdl_module *[]){gdl_nn_linear(2, 16, 1), gdl_nn_tanh(), gdl_nn_linear(16, 2, 1)});
    opt = gdl_adam_new(0.05, 0.9, 0.999, 1e-8, 0);
    gdl_optim_add_module(opt, m, 0);
    for (step = 0; step < 300; step++) {
        gdl_arena_reset();
        gdl_zero_grad(opt);
        ASSERT_EQ(0, gdl_backward(gdl_cross_entropy(gdl_forward(m, X), Y)));
        ASSERT_EQ(0, gdl_step(opt));
    }
    gdl_arena_reset();
    pred = gdl_argmax(gdl_forward(m, X), 1);
    for (i = 0; i < 4; i++) correct += ((int32_t *)pred->data)[i] == yv[i];
    ASSERT_EQ(4, correct);
    ASSERT(gdl_item(gdl_cross_entropy(gdl_forward(m, X), Y)) < 0.05);
    gdl_optim_free(opt);
    gdl_module_free(m);
    gdl_free(X);
    gdl_free(Y);
    PASS();
}

/* ---------------------------------------------------------------------------
   errors
   ------------------------------------------------------------------------- */

TEST test_module_errors(void) {
    gdl_module *m, *lin;
    gdl_tensor *x;
    int64_t bad[2] = {4, 5};
    x = gdl_zeros(2, bad, GDL_F32, CPU);
    ASSERT_NULL(gdl_forward(NULL, x));
    ASSERT_STR_EQ("gdl_forward: module is NULL", gdl_last_error());
    gdl_clear_error();
    ASSERT_NULL(gdl_nn_linear(-1, 3, 1));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_nn_linear: in_features -1");
    ASSERT_NULL(gdl_nn_conv2d(3, 8, 3, 1, 1, 1, 2, 1));
    ASSERT_CONTAINS(gdl_last_error(), "divisible by groups 2");
    ASSERT_NULL(gdl_nn_conv2d(3, 8, 0, 1, 1, 1, 1, 1));
    ASSERT_CONTAINS(gdl_last_error(), "bad kernel (0,0)");
    ASSERT_NULL(gdl_nn_batchnorm2d(0));
    ASSERT_NULL(gdl_nn_embedding(10, -2));
    ASSERT_CONTAINS(gdl_last_error(), "embedding_dim -2");
    ASSERT_NULL(gdl_nn_dropout(1.5));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_nn_dropout: probability 1.5");
    ASSERT_NULL(gdl_nn_maxpool2d(2, 2, 2));
    ASSERT_CONTAINS(gdl_last_error(), "padding 2");
    /* a wrong input shape names the module, its place and its configuration */
    m = gdl_nn_sequential(3, (gdl_module *[]){gdl_nn_linear(5, 8, 1), gdl_nn_relu(), gdl_nn_linear(10, 1, 1)});
    ASSERT_NULL(gdl_forward(m, x) );
    ASSERT_STR_EQ("gdl_forward: Linear '2' (in_features=10, out_features=1, bias=True): expected input [..., 10], "
                  "got [4,8]", gdl_last_error());
    gdl_module_free(m);
    lin = gdl_nn_linear(10, 1, 1);
    ASSERT_NULL(gdl_forward(lin, x));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_forward: Linear (in_features=10");
    ASSERT_NULL(gdl_forward(lin, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_forward: Linear: input is NULL");
    gdl_module_free(lin);
    m = gdl_nn_sequential(2, (gdl_module *[]){gdl_nn_conv2d(3, 4, 3, 1, 1, 1, 1, 1), gdl_nn_batchnorm2d(4)});
    ASSERT_NULL(gdl_forward(m, x));
    ASSERT_CONTAINS(gdl_last_error(), "Conv2d '0'");
    ASSERT_CONTAINS(gdl_last_error(), "expected input [N, 3, H, W], got [4,5]");
    /* errors from an op inside a module are prefixed with the module */
    gdl_module_free(m);
    m = gdl_nn_sequential(1, (gdl_module *[]){gdl_nn_maxpool2d(2, 2, 0)});
    ASSERT_NULL(gdl_forward(m, x));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_forward: MaxPool2d '0' (kernel_size=2, stride=2, padding=0): gdl_max_pool2d:");
    gdl_module_free(m);
    m = gdl_nn_residual(gdl_nn_linear(5, 3, 1), NULL);
    ASSERT_NULL(gdl_forward(m, x));
    ASSERT_CONTAINS(gdl_last_error(), "body output [4,3] and shortcut output [4,5] differ");
    /* a child cannot be freed on its own, nor added twice */
    gdl_module_free(gdl_module_child(m, "body"));
    ASSERT_CONTAINS(gdl_last_error(), "belongs to a parent");
    lin = gdl_nn_identity();
    ASSERT_EQ(-1, gdl_module_add_child(lin, "x", gdl_module_child(m, "body")));
    ASSERT_CONTAINS(gdl_last_error(), "already belongs to another module");
    ASSERT_EQ(0, gdl_module_num_children(lin));
    gdl_module_free(lin);
    ASSERT_EQ(-1, gdl_nn_sequential_add(m, gdl_nn_relu()));
    ASSERT_CONTAINS(gdl_last_error(), "Residual is not a Sequential");
    ASSERT_EQ(-1, gdl_module_add_param(m, "a.b", gdl_zeros(1, bad, GDL_F32, CPU)));
    ASSERT_CONTAINS(gdl_last_error(), "bad name \"a.b\"");
    ASSERT_EQ(-1, gdl_module_add_param(m, "w", gdl_relu(x)));
    ASSERT_CONTAINS(gdl_last_error(), "must be a persistent leaf tensor");
    gdl_module_free(m);
    /* a failed constructor inside a Sequential: the message says which, the others are freed */
    ASSERT_NULL(gdl_nn_sequential(3, (gdl_module *[]){gdl_nn_linear(2, 2, 1), gdl_nn_linear(0, 2, 1), gdl_nn_relu()}));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_nn_sequential: module 1 is NULL (after: gdl_nn_linear: in_features 0");
    ASSERT_EQ(-1, gdl_module_named_tensors(NULL, GDL_PARAMS, NULL, NULL, 0));
    ASSERT_EQ(-1, gdl_module_train(NULL, 1));
    ASSERT_EQ(-1, gdl_module_num_params(NULL));
    gdl_module_free(NULL);
    gdl_free(x);
    PASS();
}

TEST test_optim_errors(void) {
    gdl_optimizer *o;
    gdl_tensor *p = gdl_zeros(GDL_DIMS(3), GDL_F32, CPU), *i32 = gdl_zeros(GDL_DIMS(3), GDL_I32, CPU);
    ASSERT_NULL(gdl_sgd_new(-0.1, 0, 0, 0, 0));
    ASSERT_STR_EQ("gdl_sgd_new: invalid learning rate -0.1 (must be >= 0)", gdl_last_error());
    ASSERT_NULL(gdl_sgd_new(0.1, 0, 0, 0, 1));
    ASSERT_CONTAINS(gdl_last_error(), "nesterov momentum requires a momentum > 0 and zero dampening");
    ASSERT_NULL(gdl_sgd_new(0.1, -0.5, 0, 0, 0));
    ASSERT_NULL(gdl_adam_new(-1, 0.9, 0.999, 1e-8, 0));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_adam_new: invalid learning rate -1");
    ASSERT_NULL(gdl_adam_new(1e-3, 1.0, 0.999, 1e-8, 0));
    ASSERT_CONTAINS(gdl_last_error(), "invalid beta parameters (1, 0.999)");
    ASSERT_NULL(gdl_adamw_new(1e-3, 0.9, 0.999, -1, 0));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_adamw_new: invalid epsilon -1");
    o = gdl_sgd_new(0.1, 0, 0, 0, 0);
    ASSERT_EQ(-1, gdl_optim_add_params(o, &i32, 1, -1, -1));
    ASSERT_CONTAINS(gdl_last_error(), "params[0] i32 [3] must be a persistent f32 leaf");
    {
        gdl_tensor *tmp = gdl_relu(p);
        ASSERT_EQ(-1, gdl_optim_add_params(o, &tmp, 1, -1, -1));
        ASSERT_CONTAINS(gdl_last_error(), "persistent f32 leaf");
    }
    ASSERT_EQ(-1, gdl_optim_set_lr(o, 0, 0.1));
    ASSERT_CONTAINS(gdl_last_error(), "group 0 out of range (the optimizer has 0 groups)");
    ASSERT_NULL(gdl_steplr_new(o, 3, 0.5));
    ASSERT_CONTAINS(gdl_last_error(), "no parameter groups yet");
    ASSERT_EQ(0, gdl_optim_add_params(o, &p, 1, -1, -1));
    ASSERT_EQ(-1, gdl_optim_set_lr(o, 0, -0.5));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_optim_set_lr: invalid learning rate -0.5");
    ASSERT(isnan(gdl_optim_get_lr(o, 3)));
    ASSERT_NULL(gdl_steplr_new(o, 0, 0.5));
    ASSERT_CONTAINS(gdl_last_error(), "bad step_size 0");
    ASSERT_NULL(gdl_cosine_lr_new(o, 0, 0));
    ASSERT_NULL(gdl_linear_warmup_new(o, 0, 1, 5));
    ASSERT_CONTAINS(gdl_last_error(), "bad start_factor 0");
    ASSERT_NULL(gdl_onecycle_lr_new(o, 0.1, 3));
    ASSERT_CONTAINS(gdl_last_error(), "empty warm-up or annealing phase");
    gdl_clear_error();
    ASSERT_EQ(-1, gdl_step(NULL));
    ASSERT_STR_EQ("gdl_step: opt is NULL", gdl_last_error());
    ASSERT_EQ(-1, gdl_scheduler_step(NULL));
    gdl_optim_free(o);
    gdl_optim_free(NULL);
    gdl_scheduler_free(NULL);
    gdl_free(p);
    gdl_free(i32);
    PASS();
}

/* ---------------------------------------------------------------------------
   main
   ------------------------------------------------------------------------- */

TEST test_module_cycle_refused(void) {
    gdl_module *inner = gdl_nn_sequential(0, NULL), *outer, *kids[1];
    kids[0] = inner;
    outer = gdl_nn_sequential(1, kids);
    ASSERT_NOT_NULL(outer);
    ASSERT_EQ(-1, gdl_module_add_child(gdl_module_child_at(outer, 0), "loop", outer));
    ASSERT_CONTAINS(gdl_last_error(), "cannot contain itself or one of its ancestors");
    ASSERT_EQ(0, gdl_module_train(outer, 0)); /* still a tree */
    gdl_module_free(outer);
    PASS();
}

/* fused Linear/Conv2d + activation in Sequential (tests/fusion_cases.h) */
TEST test_fusion_train_bitwise(void) { return fz_train_bitwise_case(gdl_cpu()); }
TEST test_fusion_when(void) { return fz_when_fused_case(gdl_cpu()); }
TEST test_fusion_errors(void) { return fz_errors_case(gdl_cpu()); }
TEST test_fusion_bn_act_bitwise(void) { return fz_bn_act_bitwise_case(gdl_cpu()); }
TEST test_fusion_bn_gelu_long(void) { return fz_bn_gelu_long_case(gdl_cpu()); }

/* nn.MultiheadAttention against PyTorch 2.15 (float64; E 6, 2 heads, batch_first, N 2, L 3, S 4, the
   tensors holding sin(a i + b), a key padding mask and an [L, S] bool mask, True = left out): the
   parameter names and order, the output and in_proj_weight's gradient of sum(out); batch_first 0 on the
   transposed inputs gives the transposed output; errors. */
static void mha_fill(gdl_tensor *t, double a, double b, double mul) {
    int64_t i;
    for (i = 0; i < t->numel; i++) ((float *)t->data)[i] = (float)(mul * sin(a * (double)i + b));
}
TEST test_multihead_attention_pytorch(void) {
    static const float mha_out[36] = {
        0.12726989f, -0.27548396f, 0.31663194f, 0.16609048f, -0.45939697f, 0.07110325f, 0.017522557f, 0.059783546f,
        0.13327808f, -0.0088834067f, -0.12307553f, -0.047945455f, 0.016906248f, 0.098275862f, 0.10024321f,
        -0.018495626f, -0.081637366f, -0.074559757f, 0.010848512f, 0.15545239f, 0.056315458f, -0.037269159f,
        -0.021297209f, -0.10853745f, 0.21306852f, 0.063385362f, -0.065416711f, 0.16121989f, -0.073090301f,
        -0.26174739f, 0.33620342f, -0.2252278f, 0.063762936f, 0.33690022f, -0.35585511f, -0.19022598f};
    static const float mha_gin[108] = {
        -0.064326901f, -0.048343488f, 0.020470064f, 0.066913771f, 0.040233591f, -0.03041417f, -0.088214806f,
        -0.061850223f, 0.032104764f, 0.090975415f, 0.050427427f, -0.045228044f, 0.17098782f, 0.12312687f,
        -0.059288079f, -0.17691256f, -0.10120562f, 0.085099604f, -0.063307173f, -0.047895978f, 0.019856313f,
        0.065909472f, 0.039936248f, -0.029679617f, -0.016914229f, -0.0099924262f, 0.0078491776f, 0.017113139f,
        0.0076757296f, -0.010149777f, 0.083758244f, 0.059977866f, -0.029346789f, -0.086601046f, -0.049217008f,
        0.041951758f, 0.054449549f, 0.05546751f, 0.030398234f, -0.0089678059f, -0.044116147f, -0.058515974f,
        -0.085693658f, -0.087738614f, -0.048518729f, 0.013520272f, 0.069200478f, 0.092334618f, 0.022452943f,
        0.023410492f, 0.01335772f, -0.0029773959f, -0.017912196f, -0.024422611f, 0.011225605f, 0.011200237f,
        0.0059072224f, -0.0021640508f, -0.0092175371f, -0.011935872f, -0.047546414f, -0.048418579f, -0.02651873f,
        0.007853292f, 0.038531788f, 0.051088182f, 0.030138179f, 0.031159429f, 0.017525912f, -0.0043503144f,
        -0.02418052f, -0.03263825f, -0.13732568f, -0.27321249f, -0.28060319f, -0.15602183f, 0.041939036f,
        0.22017532f, -0.1082249f, -0.21531584f, -0.22114038f, -0.12295914f, 0.033051706f, 0.17351782f,
        -0.026821599f, -0.053362167f, -0.054805673f, -0.030473215f, 0.0081912721f, 0.043003276f, 0.069137383f,
        0.13724121f, 0.14079835f, 0.07813583f, -0.021275195f, -0.11068016f, 0.13231666f, 0.26265528f, 0.26946302f,
        0.14953809f, -0.040716941f, -0.21182216f, 0.13155044f, 0.2611343f, 0.26790261f, 0.14867214f, -0.040481157f,
        -0.21059554f};
    static const char *want_names[4] = {"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"};
    static const uint8_t kpm_v[8] = {0, 0, 1, 0, 0, 0, 0, 1}, am_v[12] = {0, 1, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0};
    int64_t sq[3] = {2, 3, 6}, skv[3] = {2, 4, 6}, sk[2] = {2, 4}, sa[2] = {3, 4}, sbad[2] = {3, 5};
    gdl_module *m = gdl_nn_multihead_attention(6, 2, 0.0, 1, 1), *mt = gdl_nn_multihead_attention(6, 2, 0.0, 1, 0);
    gdl_tensor *t[4], *t2[4], *q, *kv, *kpm, *am, *bad, *o, *o2;
    const char *names[4];
    int i;
    ASSERT(m && mt);
    ASSERT_EQ(4, gdl_module_named_tensors(m, GDL_PARAMS, names, t, 4));
    ASSERT_EQ(4, gdl_module_named_tensors(mt, GDL_PARAMS, NULL, t2, 4));
    for (i = 0; i < 4; i++) ASSERT_STR_EQ(want_names[i], names[i]);
    mha_fill(t[0], 0.37, 0.1, 0.5);
    mha_fill(t[1], 0.53, 0.2, 0.1);
    mha_fill(t[2], 0.71, 0.3, 0.5);
    mha_fill(t[3], 0.91, 0.4, 0.1);
    for (i = 0; i < 4; i++) memcpy(t2[i]->data, t[i]->data, sizeof(float) * (size_t)t[i]->numel);
    ASSERT_NOT_NULL(q = gdl_zeros(3, sq, GDL_F32, gdl_cpu()));
    ASSERT_NOT_NULL(kv = gdl_zeros(3, skv, GDL_F32, gdl_cpu()));
    mha_fill(q, 1.1, 0.5, 1);
    mha_fill(kv, 0.7, 0.6, 1);
    ASSERT_NOT_NULL(kpm = gdl_from_array(kpm_v, 2, sk, GDL_U8, gdl_cpu()));
    ASSERT_NOT_NULL(am = gdl_from_array(am_v, 2, sa, GDL_U8, gdl_cpu()));
    ASSERT_NOT_NULL(bad = gdl_zeros(2, sbad, GDL_U8, gdl_cpu()));
    gdl_arena_reset();
    ASSERT_NOT_NULL(o = gdl_mha_forward(m, q, kv, kv, kpm, am));
    ASSERT_EQ(0, gdl_backward(gdl_sum(o)));
    for (i = 0; i < 36; i++)
        if (!(fabs(((float *)o->data)[i] - mha_out[i]) <= 1e-5)) FAILf("output %d: %.7g, PyTorch %.7g", i, ((float *)o->data)[i], mha_out[i]);
    for (i = 0; i < 108; i++)
        if (!(fabs(((float *)t[0]->grad->data)[i] - mha_gin[i]) <= 1e-5))
            FAILf("in_proj_weight's gradient %d: %.7g, PyTorch %.7g", i, ((float *)t[0]->grad->data)[i], mha_gin[i]);
    /* sequence-first: [L, N, E] in, [L, N, E] out */
    ASSERT_NOT_NULL(o2 = gdl_mha_forward(mt, gdl_transpose(q, 0, 1), gdl_transpose(kv, 0, 1), gdl_transpose(kv, 0, 1), kpm, am));
    ASSERT_NOT_NULL(o2 = gdl_transpose(o2, 0, 1));
    for (i = 0; i < 36; i++) ASSERT_EQ(((float *)o->data)[i], ((float *)o2->data)[i]);
    ASSERT_NULL(gdl_mha_forward(m, q, kv, kv, NULL, bad));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_mha_forward: attn_mask must be [L, S] = [3, 4]");
    ASSERT_NULL(gdl_mha_forward(m, q, kv, kv, am, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_mha_forward: key_padding_mask must be [N, S] = [2, 4], got [3,4]");
    ASSERT_NULL(gdl_mha_forward(m, q, kv, q, NULL, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "disagree in batch or key length");
    {
        gdl_module *relu = gdl_nn_relu();
        o2 = gdl_mha_forward(relu, q, kv, kv, NULL, NULL);
        gdl_module_free(relu);
        ASSERT_NULL(o2);
    }
    ASSERT_CONTAINS(gdl_last_error(), "gdl_mha_forward: expected a module made by gdl_nn_multihead_attention");
    ASSERT_NULL(gdl_nn_multihead_attention(6, 4, 0, 1, 1));
    ASSERT_CONTAINS(gdl_last_error(), "embed_dim 6 must be a positive multiple of num_heads 4");
    ASSERT_NOT_NULL(gdl_forward(m, q)); /* self-attention */
    gdl_module_free(m);
    gdl_module_free(mt);
    gdl_free(q); gdl_free(kv); gdl_free(kpm); gdl_free(am); gdl_free(bad);
    gdl_arena_reset();
    PASS();
}

/* ---- the options structs (gdl_rnn_opts, gdl_mha_opts, gdl_transformer_encoder_layer_opts): the _ex form
   equals the positional form given the same values (the same tensors, the same output), and each option is
   honoured ---- */

/* a and b hold the same parameters and buffers: names, shapes and values */
static enum harness_result same_tensors(gdl_module *a, gdl_module *b) {
    const char *na[64], *nb[64];
    gdl_tensor *ta[64], *tb[64];
    int n = gdl_module_named_tensors(a, GDL_PARAMS_AND_BUFFERS, na, ta, 64), i;
    ASSERT(n > 0 && n <= 64);
    ASSERT_EQ(n, gdl_module_named_tensors(b, GDL_PARAMS_AND_BUFFERS, nb, tb, 64));
    for (i = 0; i < n; i++) {
        ASSERT_STR_EQ(na[i], nb[i]);
        ASSERT(gdl_same_shape(ta[i], tb[i]));
        ASSERT_EQ(0, memcmp(ta[i]->data, tb[i]->data, sizeof(gdl_real) * (size_t)ta[i]->numel));
    }
    PASS();
}

/* the same shape and the same bits */
static enum harness_result same_values(const gdl_tensor *a, const gdl_tensor *b) {
    ASSERT(a && b && gdl_same_shape(a, b));
    ASSERT_EQ(0, memcmp(a->data, b->data, sizeof(gdl_real) * (size_t)a->numel));
    PASS();
}

/* the largest |a - b| (same numel) */
static double max_abs_diff(const gdl_tensor *a, const gdl_tensor *b) {
    double m = 0;
    int64_t i;
    for (i = 0; i < a->numel && i < b->numel; i++) {
        double d = fabs((double)R(a)[i] - (double)R(b)[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

/* y [N, T, E] (batch-first) against z [T, N, E] (sequence-first): the same numbers, transposed */
static enum harness_result transposed_equal(const gdl_tensor *y, const gdl_tensor *z, double tol) {
    int64_t n, t, e, N, T, E;
    ASSERT(y && z && y->ndim == 3 && z->ndim == 3);
    N = y->shape[0], T = y->shape[1], E = y->shape[2];
    ASSERT(z->shape[0] == T && z->shape[1] == N && z->shape[2] == E);
    for (n = 0; n < N; n++)
        for (t = 0; t < T; t++)
            for (e = 0; e < E; e++)
                ASSERT_IN_RANGE(R(z)[(t * N + n) * E + e], R(y)[(n * T + t) * E + e], tol);
    PASS();
}

/* A module kind built from options (o NULL: the defaults) through its _ex call (positional 0) or its
   positional call given the same values (positional 1). */
typedef gdl_module *(*opts_make_fn)(const void *o, int positional);

/* builds both forms under one seed; the same tensors; the same output on x in training mode under one seed
   (dropout draws alike). *ex gets the _ex module, *y its output. */
static enum harness_result ex_matches_positional(opts_make_fn make, const void *o, gdl_tensor *x, gdl_module **ex,
                                                 gdl_tensor **y) {
    gdl_module *a, *b;
    gdl_tensor *ya, *yb;
    enum harness_result r;
    gdl_manual_seed(5);
    a = make(o, 0);
    gdl_manual_seed(5);
    b = make(o, 1);
    ASSERT_NOT_NULL(a);
    ASSERT_NOT_NULL(b);
    r = same_tensors(a, b);
    if (r == HARNESS_PASS) {
        gdl_manual_seed(9);
        ya = gdl_forward(a, x);
        gdl_manual_seed(9);
        yb = gdl_forward(b, x);
        r = same_values(ya, yb);
        *y = ya;
    }
    gdl_module_free(b);
    if (r != HARNESS_PASS) {
        gdl_module_free(a);
        return r;
    }
    *ex = a;
    PASS();
}

static gdl_module *make_lstm(const void *p, int positional) {
    const gdl_rnn_opts *o = (const gdl_rnn_opts *)p;
    gdl_rnn_opts d = gdl_rnn_defaults();
    if (!positional) return gdl_nn_lstm_ex(4, 3, o);
    if (o) d = *o;
    return gdl_nn_lstm(4, 3, d.num_layers, d.bias, d.batch_first, d.dropout, d.bidirectional);
}
static gdl_module *make_gru(const void *p, int positional) {
    const gdl_rnn_opts *o = (const gdl_rnn_opts *)p;
    gdl_rnn_opts d = gdl_rnn_defaults();
    if (!positional) return gdl_nn_gru_ex(4, 3, o);
    if (o) d = *o;
    return gdl_nn_gru(4, 3, d.num_layers, d.bias, d.batch_first, d.dropout, d.bidirectional);
}

/* one option set: the _ex form against the positional one, the output shape, the number of parameters */
static enum harness_result rnn_opts_case(opts_make_fn make, const gdl_rnn_opts *o, gdl_tensor *x, int64_t out_last,
                                         int nparams, gdl_module **keep, gdl_tensor **y) {
    int64_t s[3];
    CHECK_CALL(ex_matches_positional(make, o, x, keep, y));
    s[0] = x->shape[0], s[1] = x->shape[1], s[2] = out_last;
    ASSERT(shape_is(*y, 3, s));
    ASSERT_EQ(nparams, gdl_module_named_tensors(*keep, GDL_PARAMS, NULL, NULL, 0));
    PASS();
}

TEST test_rnn_opts(void) {
    int64_t xs[3] = {5, 2, 4};
    gdl_tensor *x, *y, *y0, *yd, *ybf;
    gdl_module *m, *m0;
    gdl_rnn_opts d = gdl_rnn_defaults(), o;
    int lstm;
    /* PyTorch's defaults */
    ASSERT_EQ(1, d.num_layers);
    ASSERT_EQ(1, d.bias);
    ASSERT_EQ(0, d.batch_first);
    ASSERT_IN_RANGE(0, d.dropout, 0);
    ASSERT_EQ(0, d.bidirectional);
    gdl_manual_seed(3);
    ASSERT_NOT_NULL(x = gdl_randn(3, xs, CPU));
    for (lstm = 1; lstm >= 0; lstm--) {
        opts_make_fn make = lstm ? make_lstm : make_gru;
        /* NULL and the defaults struct: the same module as the positional call with PyTorch's defaults */
        CHECK_CALL(rnn_opts_case(make, NULL, x, 3, 4, &m0, &y0));
        CHECK_CALL(rnn_opts_case(make, &d, x, 3, 4, &m, &y));
        CHECK_CALL(same_values(y0, y));
        gdl_module_free(m);
        /* num_layers: the layer-1 tensors */
        o = d, o.num_layers = 2;
        CHECK_CALL(rnn_opts_case(make, &o, x, 3, 8, &m, &y));
        ASSERT_NOT_NULL(gdl_module_tensor(m, "weight_ih_l1"));
        gdl_module_free(m);
        /* bias 0: no bias tensors */
        o = d, o.bias = 0;
        CHECK_CALL(rnn_opts_case(make, &o, x, 3, 2, &m, &y));
        ASSERT_NULL(gdl_module_tensor(m, "bias_ih_l0"));
        gdl_module_free(m);
        /* bidirectional: the reverse direction's tensors, both directions in the output */
        o = d, o.bidirectional = 1;
        CHECK_CALL(rnn_opts_case(make, &o, x, 6, 8, &m, &y));
        ASSERT_NOT_NULL(gdl_module_tensor(m, "weight_hh_l0_reverse"));
        gdl_module_free(m);
        /* batch_first: [B, T, in]; the same weights give the transposed sequence-first result */
        o = d, o.batch_first = 1;
        CHECK_CALL(rnn_opts_case(make, &o, x, 3, 4, &m, &ybf));
        gdl_module_train(m0, 1);
        CHECK_CALL(transposed_equal(ybf, gdl_forward(m0, gdl_transpose(x, 0, 1)), 1e-6));
        gdl_module_free(m);
        /* dropout between two layers: training draws masks (the output differs from eval's), eval does not */
        o = d, o.num_layers = 2, o.dropout = 0.5;
        CHECK_CALL(rnn_opts_case(make, &o, x, 3, 8, &m, &y));
        ASSERT_EQ(0, gdl_module_train(m, 0));
        ASSERT_NOT_NULL(yd = gdl_forward(m, x));
        ASSERT_GT(max_abs_diff(y, yd), 1e-4);
        gdl_module_free(m);
        gdl_module_free(m0);
    }
    /* bad options name the _ex call */
    o = d, o.dropout = 2;
    ASSERT_NULL(gdl_nn_lstm_ex(4, 3, &o));
    ASSERT_EQ(0, strncmp(gdl_last_error(), "gdl_nn_lstm_ex: ", 16));
    gdl_free(x);
    PASS();
}

static gdl_module *make_mha(const void *p, int positional) {
    const gdl_mha_opts *o = (const gdl_mha_opts *)p;
    gdl_mha_opts d = gdl_mha_defaults();
    if (!positional) return gdl_nn_multihead_attention_ex(4, 2, o);
    if (o) d = *o;
    return gdl_nn_multihead_attention(4, 2, d.dropout, d.bias, d.batch_first);
}

TEST test_mha_opts(void) {
    int64_t xs[3] = {3, 2, 4};
    gdl_tensor *x, *y, *y0, *ye;
    gdl_module *m, *m0;
    gdl_mha_opts d = gdl_mha_defaults(), o;
    ASSERT_IN_RANGE(0, d.dropout, 0);
    ASSERT_EQ(1, d.bias);
    ASSERT_EQ(0, d.batch_first);
    gdl_manual_seed(3);
    ASSERT_NOT_NULL(x = gdl_randn(3, xs, CPU));
    CHECK_CALL(ex_matches_positional(make_mha, NULL, x, &m0, &y0));
    ASSERT(shape_is(y0, 3, xs));
    ASSERT_EQ(4, gdl_module_named_tensors(m0, GDL_PARAMS, NULL, NULL, 0));
    CHECK_CALL(ex_matches_positional(make_mha, &d, x, &m, &y));
    CHECK_CALL(same_values(y0, y));
    gdl_module_free(m);
    o = d, o.bias = 0; /* no in_proj_bias, no out_proj.bias */
    CHECK_CALL(ex_matches_positional(make_mha, &o, x, &m, &y));
    ASSERT_EQ(2, gdl_module_named_tensors(m, GDL_PARAMS, NULL, NULL, 0));
    ASSERT_NULL(gdl_module_tensor(m, "in_proj_bias"));
    gdl_module_free(m);
    o = d, o.batch_first = 1; /* [N, L, E]: the sequence-first result transposed */
    CHECK_CALL(ex_matches_positional(make_mha, &o, x, &m, &y));
    CHECK_CALL(transposed_equal(y, gdl_forward(m0, gdl_transpose(x, 0, 1)), 1e-6));
    gdl_module_free(m);
    o = d, o.dropout = 0.5; /* drops attention weights in training mode only */
    CHECK_CALL(ex_matches_positional(make_mha, &o, x, &m, &y));
    ASSERT_EQ(0, gdl_module_train(m, 0));
    ASSERT_NOT_NULL(ye = gdl_forward(m, x));
    ASSERT_GT(max_abs_diff(y, ye), 1e-4);
    ASSERT_LT(max_abs_diff(y0, ye), 1e-6); /* eval: the default module's weights, no dropout */
    gdl_module_free(m);
    gdl_module_free(m0);
    o = d, o.dropout = -1;
    ASSERT_NULL(gdl_nn_multihead_attention_ex(4, 2, &o));
    ASSERT_EQ(0, strncmp(gdl_last_error(), "gdl_nn_multihead_attention_ex: ", 31));
    gdl_free(x);
    PASS();
}

static gdl_module *make_tfm(const void *p, int positional) {
    const gdl_transformer_encoder_layer_opts *o = (const gdl_transformer_encoder_layer_opts *)p;
    gdl_transformer_encoder_layer_opts d = gdl_transformer_encoder_layer_defaults();
    if (!positional) return gdl_nn_transformer_encoder_layer_ex(4, 2, o);
    if (o) d = *o;
    return gdl_nn_transformer_encoder_layer(4, 2, d.dim_feedforward, d.dropout, d.activation == GDL_ACT_GELU,
                                            d.layer_norm_eps, d.batch_first, d.norm_first, d.bias);
}

/* the _ex layer with o against the positional one, then its eval-mode output on x (*ye) */
static enum harness_result tfm_opts_case(const gdl_transformer_encoder_layer_opts *o, gdl_tensor *x, gdl_module **m,
                                         gdl_tensor **ye) {
    gdl_tensor *y;
    CHECK_CALL(ex_matches_positional(make_tfm, o, x, m, &y));
    ASSERT_EQ(0, gdl_module_train(*m, 0));
    ASSERT_NOT_NULL(*ye = gdl_forward(*m, x));
    PASS();
}

TEST test_transformer_opts(void) {
    int64_t xs[3] = {3, 2, 4}, ff[2] = {8, 4};
    gdl_tensor *x, *y0, *y;
    gdl_module *m, *m0;
    gdl_transformer_encoder_layer_opts d = gdl_transformer_encoder_layer_defaults(), o;
    /* PyTorch's defaults */
    ASSERT_EQ(2048, d.dim_feedforward);
    ASSERT_IN_RANGE(0.1, d.dropout, 0);
    ASSERT_EQ(GDL_ACT_RELU, d.activation);
    ASSERT_IN_RANGE(1e-5, d.layer_norm_eps, 0);
    ASSERT_EQ(0, d.batch_first);
    ASSERT_EQ(0, d.norm_first);
    ASSERT_EQ(1, d.bias);
    gdl_manual_seed(3);
    ASSERT_NOT_NULL(x = gdl_randn(3, xs, CPU));
    CHECK_CALL(tfm_opts_case(NULL, x, &m0, &y0));
    ASSERT(shape_is(y0, 3, xs));
    ASSERT_EQ(2048, gdl_module_tensor(m0, "linear1.weight")->shape[0]);
    CHECK_CALL(tfm_opts_case(&d, x, &m, &y));
    CHECK_CALL(same_values(y0, y));
    gdl_module_free(m);
    gdl_module_free(m0);
    /* the rest against a smaller feed-forward layer (and its eval-mode output y0) */
    d.dim_feedforward = 8;
    CHECK_CALL(tfm_opts_case(&d, x, &m0, &y0));
    ASSERT(shape_is(gdl_module_tensor(m0, "linear1.weight"), 2, ff));
    o = d, o.activation = GDL_ACT_GELU;
    CHECK_CALL(tfm_opts_case(&o, x, &m, &y));
    ASSERT_GT(max_abs_diff(y0, y), 1e-6);
    gdl_module_free(m);
    o = d, o.layer_norm_eps = 0.5;
    CHECK_CALL(tfm_opts_case(&o, x, &m, &y));
    ASSERT_GT(max_abs_diff(y0, y), 1e-6);
    gdl_module_free(m);
    o = d, o.norm_first = 1;
    CHECK_CALL(tfm_opts_case(&o, x, &m, &y));
    ASSERT_GT(max_abs_diff(y0, y), 1e-6);
    gdl_module_free(m);
    o = d, o.batch_first = 1;
    CHECK_CALL(tfm_opts_case(&o, x, &m, &y));
    CHECK_CALL(transposed_equal(y, gdl_forward(m0, gdl_transpose(x, 0, 1)), 1e-5));
    gdl_module_free(m);
    o = d, o.bias = 0; /* no Linear, in_proj or LayerNorm biases: 12 parameters less 6 */
    CHECK_CALL(tfm_opts_case(&o, x, &m, &y));
    ASSERT_EQ(6, gdl_module_named_tensors(m, GDL_PARAMS, NULL, NULL, 0));
    ASSERT_EQ(12, gdl_module_named_tensors(m0, GDL_PARAMS, NULL, NULL, 0));
    gdl_module_free(m);
    o = d, o.dropout = 0.5; /* training mode drops, eval does not */
    CHECK_CALL(ex_matches_positional(make_tfm, &o, x, &m, &y));
    ASSERT_GT(max_abs_diff(y0, y), 1e-4);
    gdl_module_free(m);
    gdl_module_free(m0);
    o = d, o.activation = GDL_ACT_NONE; /* PyTorch's layer takes "relu", "gelu" or a callable */
    ASSERT_NULL(gdl_nn_transformer_encoder_layer_ex(4, 2, &o));
    ASSERT_EQ(0, strncmp(gdl_last_error(), "gdl_nn_transformer_encoder_layer_ex: activation", 47));
    o = d, o.layer_norm_eps = 0;
    ASSERT_NULL(gdl_nn_transformer_encoder_layer_ex(4, 2, &o));
    ASSERT_EQ(0, strncmp(gdl_last_error(), "gdl_nn_transformer_encoder_layer_ex: ", 37));
    gdl_free(x);
    PASS();
}

/* ---- gdl_module_summary records the output shape of modules run through their own forwards
   (gdl_nn_lstm_forward, gdl_nn_gru_forward, gdl_mha_forward, gdl_transformer_encoder_forward), not only
   gdl_forward ---- */
static gdl_tensor *seq_model_fwd(gdl_module *self, gdl_tensor *x) {
    gdl_tensor *out = NULL, *h = NULL, *c = NULL, *g = NULL;
    if (gdl_nn_lstm_forward(gdl_module_child(self, "lstm"), x, NULL, NULL, &out, &h, &c) < 0) return NULL;
    if (gdl_nn_gru_forward(gdl_module_child(self, "gru"), out, NULL, NULL, &g) < 0) return NULL; /* h_n only */
    out = gdl_mha_forward(gdl_module_child(self, "attn"), out, out, out, NULL, NULL);
    return out ? gdl_transformer_encoder_forward(gdl_module_child(self, "enc"), out, NULL, NULL, 1) : NULL;
}

/* the Output Shape column of the summary's row for the module at path ("--" when it did not run) */
static enum harness_result summary_shape_is(const char *s, const char *path, const char *shape) {
    char needle[96], row[200];
    const char *p, *e;
    size_t n;
    snprintf(needle, sizeof needle, " %s (", path);
    ASSERTm(path, (p = strstr(s, needle)) != NULL);
    e = strchr(p, '\n');
    n = e ? (size_t)(e - p) : strlen(p);
    if (n >= sizeof row) n = sizeof row - 1;
    memcpy(row, p, n);
    row[n] = 0;
    ASSERT_CONTAINS(row, shape);
    PASS();
}

TEST test_summary_other_forwards(void) {
    gdl_rnn_opts ro = gdl_rnn_defaults();
    gdl_transformer_encoder_layer_opts to = gdl_transformer_encoder_layer_defaults();
    gdl_module *m = gdl_nn_custom("SeqModel", seq_model_fwd, NULL, NULL);
    int64_t in[3] = {5, 2, 4};
    char *s;
    int rc = -1;
    ro.bidirectional = 1;
    to.dim_feedforward = 8;
    ASSERT_NOT_NULL(m);
    ASSERT_EQ(0, gdl_module_add_child(m, "lstm", gdl_nn_lstm_ex(4, 3, &ro)));
    ASSERT_EQ(0, gdl_module_add_child(m, "gru", gdl_nn_gru_ex(6, 6, NULL)));
    ASSERT_EQ(0, gdl_module_add_child(m, "attn", gdl_nn_multihead_attention_ex(6, 2, NULL)));
    ASSERT_EQ(0, gdl_module_add_child(m, "enc", gdl_nn_transformer_encoder(gdl_nn_transformer_encoder_layer_ex(6, 2, &to),
                                                                           2, gdl_nn_layernorm(6))));
    ASSERT_NOT_NULL(s = summary_text(m, 3, in, &rc));
    ASSERT_EQ(0, rc);
    CHECK_CALL(summary_shape_is(s, "lstm", "[5,2,6]"));
    CHECK_CALL(summary_shape_is(s, "gru", "[5,2,6]")); /* the output, though only h_n was asked for */
    CHECK_CALL(summary_shape_is(s, "attn", "[5,2,6]"));
    CHECK_CALL(summary_shape_is(s, "enc", "[5,2,6]"));
    CHECK_CALL(summary_shape_is(s, "enc.layers.0", "[5,2,6]"));
    CHECK_CALL(summary_shape_is(s, "enc.layers.1", "[5,2,6]"));
    CHECK_CALL(summary_shape_is(s, "enc.layers.0.self_attn", "[5,2,6]"));
    CHECK_CALL(summary_shape_is(s, "enc.layers.1.linear1", "[5,2,8]"));
    free(s);
    gdl_module_free(m);
    PASS();
}

/* PyTorch refuses an optimizer over no parameters ("optimizer got an empty parameter list"); gdl_step on one
   is an error, not a silent no-op */
TEST test_step_empty_optimizer(void) {
    gdl_optimizer *opt = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0);
    gdl_module *m = gdl_nn_relu(); /* no parameters */
    int64_t s[1] = {2};
    gdl_tensor *p;
    ASSERT_NOT_NULL(opt);
    ASSERT_EQ(0, gdl_optim_add_module(opt, m, 0));
    ASSERT_EQ(0, gdl_optim_num_params(opt));
    ASSERT_EQ(-1, gdl_step(opt));
    ASSERT_EQ(0, strncmp(gdl_last_error(), "gdl_step: the Adam optimizer has no parameters", 46));
    ASSERT_EQ(0, gdl_optim_get_step(opt)); /* nothing counted */
    /* with a parameter it steps */
    ASSERT_NOT_NULL(p = gdl_ones(1, s, GDL_F32, CPU));
    gdl_set_requires_grad(p, 1);
    ASSERT_GE(gdl_optim_add_params(opt, &p, 1, -1, -1), 0);
    ASSERT_EQ(0, gdl_step(opt));
    ASSERT_EQ(1, gdl_optim_get_step(opt));
    gdl_optim_free(opt);
    gdl_module_free(m);
    gdl_free(p);
    PASS();
}

SUITE(modules) {
    RUN_TEST(test_module_cycle_refused);
    SET_SETUP(reset, NULL);
    RUN_TEST(test_output_shapes);
    RUN_TEST(test_residual_values);
    RUN_TEST(test_basic_block);
    RUN_TEST(test_param_counts);
    RUN_TEST(test_init_ranges);
    RUN_TEST(test_init_reproducible);
    RUN_TEST(test_state_dict_names);
    RUN_TEST(test_custom_module);
    RUN_TEST(test_train_eval);
    RUN_TEST(test_summary);
    RUN_TEST(test_summary_other_forwards);
    RUN_TEST(test_module_to);
    RUN_TEST(test_fusion_train_bitwise);
    RUN_TEST(test_fusion_when);
    RUN_TEST(test_fusion_errors);
    RUN_TEST(test_fusion_bn_act_bitwise);
    RUN_TEST(test_fusion_bn_gelu_long);
    RUN_TEST(test_multihead_attention_pytorch);
    RUN_TEST(test_mha_opts);
}

/* lr of a group added after the flat buffer was made: set before the next
   step (the buffer is made again then), and the step uses it */
TEST test_set_lr_after_new_group(void) {
    int64_t s2[1] = {3};
    gdl_tensor *a = gdl_full(1, s2, 1.0, GDL_F32, gdl_cpu()), *b = gdl_full(1, s2, 1.0, GDL_F32, gdl_cpu());
    gdl_optimizer *opt = gdl_adam_new(0.1, 0.9, 0.999, 1e-8, 0);
    float va[3], vb[3];
    int k;
    ASSERT(a && b && opt);
    gdl_set_requires_grad(a, 1);
    gdl_set_requires_grad(b, 1);
    ASSERT_EQ(0, gdl_optim_add_params(opt, &a, 1, -1, -1));
    for (k = 0; k < 3; k++) { /* the buffer exists, with one group */
        gdl_arena_reset();
        ASSERT_EQ(0, gdl_zero_grad(opt));
        ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_mul(a, a))));
        ASSERT_EQ(0, gdl_step(opt));
    }
    ASSERT_EQ(1, gdl_optim_add_params(opt, &b, 1, 0.5, 0)); /* the new group's index */
    ASSERT_EQ(0, gdl_optim_set_lr(opt, 1, 0.25)); /* the new group's, before the buffer has it */
    ASSERT_EQ(0, gdl_optim_set_lr(opt, 0, 0.0));
    gdl_arena_reset();
    ASSERT_EQ(0, gdl_zero_grad(opt));
    ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_add(gdl_mul(a, a), gdl_mul(b, b)))));
    ASSERT_EQ(0, gdl_step(opt));
    ASSERT_EQ(0, gdl_copy_to_host(a, va, sizeof va));
    ASSERT_EQ(0, gdl_copy_to_host(b, vb, sizeof vb));
    /* Adam's first step moves b by lr (0.25) exactly in sign; a stays (lr 0) */
    for (k = 0; k < 3; k++) {
        ASSERT(fabsf(vb[k] - 0.75f) < 1e-6f);
        ASSERT(va[k] < 1.0f && va[k] > 0.5f);
    }
    {
        float before[3];
        memcpy(before, va, sizeof va);
        gdl_arena_reset();
        ASSERT_EQ(0, gdl_zero_grad(opt));
        ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_add(gdl_mul(a, a), gdl_mul(b, b)))));
        ASSERT_EQ(0, gdl_step(opt));
        ASSERT_EQ(0, gdl_copy_to_host(a, va, sizeof va));
        ASSERTm("lr 0 leaves a where it was", memcmp(va, before, sizeof va) == 0);
    }
    gdl_optim_free(opt);
    gdl_free(a);
    gdl_free(b);
    PASS();
}

TEST test_grad_scaler_matches_pytorch(void) {
    double rel;
    CHECK_CALL(gs_ref_case(gdl_cpu(), &rel));
    printf("    GradScaler vs PyTorch on the CPU: weights within %.2g relative\n", rel);
    PASS();
}

TEST test_grad_scaler_graph_equals_eager(void) { return gs_graph_case(gdl_cpu()); }
TEST test_grad_scaler_clip_checkpoint(void) { return gs_clip_and_checkpoint_case(gdl_cpu(), harness_tmp("test_nn_scaler.safetensors")); }
TEST test_grad_scaler_errors(void) { return gs_errors_case(gdl_cpu()); }
TEST test_grad_scaler_stale_slot(void) { return gs_stale_slot_case(gdl_cpu()); }

SUITE(optimizers) {
    char name[96];
    size_t i;
    SET_SETUP(reset, NULL);
    for (i = 0; i < sizeof opt_cases / sizeof opt_cases[0]; i++) {
        snprintf(name, sizeof name, "test_optimizer_formulas_%s", opt_cases[i].name);
        RUN_TEST_NAMED(name, test_optimizer_formulas, &opt_cases[i]);
    }
    for (i = 0; i < sizeof opt_cases / sizeof opt_cases[0]; i++) {
        snprintf(name, sizeof name, "test_optim_state_checkpoint_%s", opt_cases[i].name);
        RUN_TEST_NAMED(name, test_optim_state_checkpoint, &opt_cases[i]);
    }
    for (i = 0; i < sizeof opt_cases / sizeof opt_cases[0]; i++) {
        snprintf(name, sizeof name, "test_flat_buffer_bitwise_%s", opt_cases[i].name);
        RUN_TEST_NAMED(name, test_flat_buffer_bitwise, &opt_cases[i]);
    }
    RUN_TEST(test_state_made_before_first_step);
    RUN_TEST(test_param_groups);
    RUN_TEST(test_add_module_no_decay);
    RUN_TEST(test_ema);
    RUN_TEST(test_skip_params_without_grad);
    RUN_TEST(test_clip_grad_norm);
    RUN_TEST(test_gradient_accumulation);
    RUN_TEST(test_state_follows_device);
    RUN_TEST(test_set_lr_after_new_group);
    RUN_TEST(test_grad_scaler_matches_pytorch);
    RUN_TEST(test_grad_scaler_graph_equals_eager);
    RUN_TEST(test_grad_scaler_clip_checkpoint);
    RUN_TEST(test_grad_scaler_errors);
    RUN_TEST(test_grad_scaler_stale_slot);
}

/* ---- master weights (tests/master_cases.h) ---- */
TEST test_master_weights_bitwise(const mw_kind *k) { return mw_bitwise_case(gdl_cpu(), k); }
TEST test_master_weights_memory(void) { return mw_memory_case(gdl_cpu()); }
TEST test_master_weights_mlp(void) { return mw_mlp_case(gdl_cpu(), 200); }
TEST test_master_weights_checkpoint(void) { return mw_checkpoint_case(gdl_cpu(), harness_tmp("test_nn_master.safetensors")); }
TEST test_master_weights_errors(void) { return mw_errors_case(gdl_cpu()); }
TEST test_master_weights_special_values(void) { return mw_special_values_case(gdl_cpu()); }

SUITE(master_weights) {
    char name[96];
    size_t i;
    SET_SETUP(reset, NULL);
    for (i = 0; i < sizeof mw_kinds / sizeof mw_kinds[0]; i++) {
        snprintf(name, sizeof name, "test_master_weights_bitwise_%s", mw_kinds[i].name);
        RUN_TEST_NAMED(name, test_master_weights_bitwise, &mw_kinds[i]);
    }
    RUN_TEST(test_master_weights_memory);
    RUN_TEST(test_master_weights_mlp);
    RUN_TEST(test_master_weights_checkpoint);
    RUN_TEST(test_master_weights_errors);
    RUN_TEST(test_master_weights_special_values);
}

SUITE(schedulers) {
    SET_SETUP(reset, NULL);
    RUN_TEST(test_steplr);
    RUN_TEST(test_cosine_lr);
    RUN_TEST(test_linear_warmup);
    RUN_TEST(test_warmup_cosine);
    RUN_TEST(test_onecycle);
    RUN_TEST(test_scheduler_restore);
    RUN_TEST(test_scheduled_training_matches_pytorch);
}

SUITE(convergence) {
    SET_SETUP(reset, NULL);
    RUN_TEST(test_linear_regression);
    RUN_TEST(test_xor_mlp);
}

SUITE(errors) {
    SET_SETUP(reset, NULL);
    RUN_TEST(test_module_errors);
    RUN_TEST(test_optim_errors);
    RUN_TEST(test_step_empty_optimizer);
}

/* ---- the recurrent modules (LSTM, GRU) ---- */

/* A straightforward reference of nn.LSTM / nn.GRU in double: plain loops over layers, directions, time,
   batch and gate rows, reading the module's parameters by their state_dict names. x [T, B, I] (time-major
   here; the caller transposes), h0 / c0 [L*D, B, H]; out [T, B, D*H], hn / cn [L*D, B, H]. */
typedef struct rnn_ref {
    int lstm, L, D, bias;
    int64_t I, H, B, T;
} rnn_ref;

static double ref_sig(double v) { return 1 / (1 + exp(-v)); }

static double ref_param(gdl_module *m, const char *kind, int l, int d, int64_t i) {
    char nm[48];
    gdl_tensor *t;
    snprintf(nm, sizeof nm, "%s_l%d%s", kind, l, d ? "_reverse" : "");
    t = gdl_module_tensor(m, nm);
    return t ? (double)R(t)[i] : NAN;
}

static void rnn_reference(gdl_module *m, const rnn_ref *c, const double *x, const double *h0, const double *c0,
                          double *out, double *hn, double *cn) {
    const int64_t H = c->H, B = c->B, T = c->T, G = c->lstm ? 4 : 3;
    double *in = (double *)malloc(sizeof(double) * (size_t)(T * B * (c->I > 2 * H ? c->I : 2 * H)));
    double *h = (double *)malloc(sizeof(double) * (size_t)(B * H)), *cc = (double *)malloc(sizeof(double) * (size_t)(B * H));
    double *hnew = (double *)malloc(sizeof(double) * (size_t)(B * H));
    double *gx = (double *)malloc(sizeof(double) * (size_t)(G * H)), *gh = (double *)malloc(sizeof(double) * (size_t)(G * H));
    int64_t in_n = c->I, s, t, b, r, k, j;
    int l, d;
    memcpy(in, x, sizeof(double) * (size_t)(T * B * c->I));
    for (l = 0; l < c->L; l++) {
        for (d = 0; d < c->D; d++) {
            int64_t st = (int64_t)(l * c->D + d) * B * H;
            memcpy(h, h0 + st, sizeof(double) * (size_t)(B * H));
            memcpy(cc, c0 + st, sizeof(double) * (size_t)(B * H));
            for (s = 0; s < T; s++) {
                t = d ? T - 1 - s : s;
                for (b = 0; b < B; b++) {
                    for (r = 0; r < G * H; r++) {
                        gx[r] = c->bias ? ref_param(m, "bias_ih", l, d, r) : 0;
                        gh[r] = c->bias ? ref_param(m, "bias_hh", l, d, r) : 0;
                        for (k = 0; k < in_n; k++) gx[r] += ref_param(m, "weight_ih", l, d, r * in_n + k) * in[(t * B + b) * in_n + k];
                        for (k = 0; k < H; k++) gh[r] += ref_param(m, "weight_hh", l, d, r * H + k) * h[b * H + k];
                    }
                    for (j = 0; j < H; j++) {
                        double hp = h[b * H + j];
                        if (c->lstm) {
                            double ig = ref_sig(gx[j] + gh[j]), fg = ref_sig(gx[H + j] + gh[H + j]);
                            double gg = tanh(gx[2 * H + j] + gh[2 * H + j]), og = ref_sig(gx[3 * H + j] + gh[3 * H + j]);
                            cc[b * H + j] = fg * cc[b * H + j] + ig * gg;
                            hnew[b * H + j] = og * tanh(cc[b * H + j]);
                        } else {
                            double rg = ref_sig(gx[j] + gh[j]), zg = ref_sig(gx[H + j] + gh[H + j]);
                            double ng = tanh(gx[2 * H + j] + rg * gh[2 * H + j]);
                            hnew[b * H + j] = (1 - zg) * ng + zg * hp;
                        }
                    }
                }
                memcpy(h, hnew, sizeof(double) * (size_t)(B * H));
                for (b = 0; b < B; b++)
                    for (j = 0; j < H; j++) out[(t * B + b) * c->D * H + d * H + j] = h[b * H + j];
            }
            memcpy(hn + st, h, sizeof(double) * (size_t)(B * H));
            if (cn) memcpy(cn + st, cc, sizeof(double) * (size_t)(B * H));
        }
        in_n = c->D * H;
        memcpy(in, out, sizeof(double) * (size_t)(T * B * in_n));
    }
    free(in); free(h); free(cc); free(hnew); free(gx); free(gh);
}

static double max_diff(const gdl_tensor *t, const double *ref, int64_t n) {
    double worst = t && t->numel == n ? 0 : INFINITY;
    int64_t i;
    for (i = 0; t && i < n && i < t->numel; i++)
        if (!(fabs((double)R(t)[i] - ref[i]) <= worst)) worst = fabs((double)R(t)[i] - ref[i]);
    return worst;
}

/* values of a tiny 2-layer bidirectional batch_first module (and a unidirectional one without bias) against
   the reference, with random initial states and with NULL (zeros) */
static enum harness_result rnn_values_case(int lstm, int L, int D, int bias, int batch_first) {
    rnn_ref c;
    int64_t xs[3], ss[3], i, t, b, k;
    gdl_module *m;
    gdl_tensor *x, *h0, *c0, *out, *hn, *cn = NULL;
    double xd[2 * 4 * 3], xt[2 * 4 * 3], h0d[4 * 2 * 3], c0d[4 * 2 * 3], zeros[4 * 2 * 3] = {0};
    double ro[4 * 2 * 6], rh[4 * 2 * 3], rc[4 * 2 * 3], ot[4 * 2 * 6];
    int pass, rc_;
    memset(&c, 0, sizeof c);
    c.lstm = lstm; c.L = L; c.D = D; c.bias = bias; c.I = 3; c.H = 3; c.B = 2; c.T = 4;
    gdl_manual_seed(77);
    m = lstm ? gdl_nn_lstm(3, 3, L, bias, batch_first, 0, D == 2) : gdl_nn_gru(3, 3, L, bias, batch_first, 0, D == 2);
    ASSERT_NOT_NULL(m);
    xs[0] = batch_first ? 2 : 4; xs[1] = batch_first ? 4 : 2; xs[2] = 3;
    ss[0] = L * D; ss[1] = 2; ss[2] = 3;
    ASSERT_NOT_NULL(x = gdl_randn(3, xs, CPU));
    ASSERT_NOT_NULL(h0 = gdl_randn(3, ss, CPU));
    ASSERT_NOT_NULL(c0 = gdl_randn(3, ss, CPU));
    for (i = 0; i < x->numel; i++) xd[i] = R(x)[i];
    for (i = 0; i < h0->numel; i++) { h0d[i] = R(h0)[i]; c0d[i] = R(c0)[i]; }
    for (t = 0; t < 4; t++) /* the reference's time-major input */
        for (b = 0; b < 2; b++)
            for (k = 0; k < 3; k++) xt[(t * 2 + b) * 3 + k] = batch_first ? xd[(b * 4 + t) * 3 + k] : xd[(t * 2 + b) * 3 + k];
    for (pass = 0; pass < 2; pass++) {
        gdl_arena_reset();
        rnn_reference(m, &c, xt, pass ? zeros : h0d, pass ? zeros : c0d, ro, rh, lstm ? rc : NULL);
        rc_ = lstm ? gdl_nn_lstm_forward(m, x, pass ? NULL : h0, pass ? NULL : c0, &out, &hn, &cn)
                   : gdl_nn_gru_forward(m, x, pass ? NULL : h0, &out, &hn);
        if (rc_ < 0) FAILf("forward failed: %s", gdl_last_error());
        ASSERT_EQ(3, out->ndim);
        ASSERT_EQ(xs[0], out->shape[0]);
        ASSERT_EQ(xs[1], out->shape[1]);
        ASSERT_EQ(D * 3, out->shape[2]);
        ASSERT(shape_is(hn, 3, ss));
        for (t = 0; t < 4; t++) /* the output in the module's layout */
            for (b = 0; b < 2; b++)
                for (k = 0; k < D * 3; k++)
                    ot[(batch_first ? b * 4 + t : t * 2 + b) * D * 3 + k] = ro[(t * 2 + b) * D * 3 + k];
        if (max_diff(out, ot, 4 * 2 * D * 3) > 2e-6) FAILf("output differs from the reference by %g", max_diff(out, ot, 4 * 2 * D * 3));
        if (max_diff(hn, rh, L * D * 2 * 3) > 2e-6) FAILf("h_n differs from the reference by %g", max_diff(hn, rh, L * D * 2 * 3));
        if (lstm) {
            ASSERT(shape_is(cn, 3, ss));
            if (max_diff(cn, rc, L * D * 2 * 3) > 2e-6) FAILf("c_n differs from the reference by %g", max_diff(cn, rc, L * D * 2 * 3));
        }
    }
    /* gdl_forward gives the zero-state pass's output (still in out) */
    {
        gdl_tensor *y = gdl_forward(m, x);
        ASSERT_NOT_NULL(y);
        ASSERT(gdl_same_shape(y, out));
        for (i = 0; i < y->numel; i++) ASSERT_EQ(R(out)[i], R(y)[i]);
    }
    gdl_free(x); gdl_free(h0); gdl_free(c0);
    gdl_module_free(m);
    PASS();
}
TEST test_lstm_values(void) { return rnn_values_case(1, 2, 2, 1, 1); }
TEST test_gru_values(void) { return rnn_values_case(0, 2, 2, 1, 1); }
TEST test_lstm_values_plain(void) { return rnn_values_case(1, 1, 1, 0, 0); }
TEST test_gru_values_plain(void) { return rnn_values_case(0, 2, 1, 1, 0); }

/* tensors made inline as arguments of the error checks, freed at the end of the test */
static gdl_tensor *rnn_kept[32];
static int rnn_nkept;
static gdl_tensor *Z(gdl_tensor *t) {
    if (rnn_nkept < 32) rnn_kept[rnn_nkept++] = t;
    return t;
}
static void rnn_free_kept(void) {
    while (rnn_nkept > 0) gdl_free(rnn_kept[--rnn_nkept]);
}

/* PyTorch's names, shapes, order and init range; the configuration as its extra_repr */
TEST test_rnn_params(void) {
    static const char *const lstm_names[] = {
        "weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_ih_l0_reverse", "weight_hh_l0_reverse",
        "bias_ih_l0_reverse", "bias_hh_l0_reverse", "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1",
        "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse"};
    static const int64_t lstm_shapes[16][2] = {{80, 10}, {80, 20}, {80, 0}, {80, 0}, {80, 10}, {80, 20}, {80, 0}, {80, 0},
                                               {80, 40}, {80, 20}, {80, 0}, {80, 0}, {80, 40}, {80, 20}, {80, 0}, {80, 0}};
    const char *names[20];
    gdl_tensor *ts[20];
    gdl_module *m = gdl_nn_lstm(10, 20, 2, 1, 1, 0.25, 1), *g;
    char *text;
    int i, n, rc = -1;
    ASSERT_NOT_NULL(m);
    ASSERT_STR_EQ("LSTM", gdl_module_kind(m));
    ASSERT_EQ(16, n = gdl_module_named_tensors(m, GDL_PARAMS_AND_BUFFERS, names, ts, 20));
    for (i = 0; i < n; i++) {
        ASSERT_STR_EQ(lstm_names[i], names[i]);
        ASSERT_EQ(lstm_shapes[i][1] ? 2 : 1, ts[i]->ndim);
        ASSERT_EQ(lstm_shapes[i][0], ts[i]->shape[0]);
        if (lstm_shapes[i][1]) ASSERT_EQ(lstm_shapes[i][1], ts[i]->shape[1]);
        if (check_uniform(ts[i], 1 / sqrt(20.0)) != HARNESS_PASS) FAILf("%s is not U(+-1/sqrt(20))", names[i]);
    }
    /* the summary runs it (batch_first [2, 7, 10] -> [2, 7, 40]); an error shows its configuration */
    text = summary_text(m, 3, (const int64_t[]){2, 7, 10}, &rc);
    ASSERT_EQ(0, rc);
    ASSERT_NOT_NULL(text);
    ASSERT_CONTAINS(text, "[2,7,40]");
    ASSERT_CONTAINS(text, "Total params: 15,040\n");
    free(text);
    ASSERT_NULL(gdl_forward(m, NULL));
    ASSERT_NULL(gdl_forward(m, Z(gdl_zeros(GDL_DIMS(2, 7), GDL_F32, CPU))));
    ASSERT_CONTAINS(gdl_last_error(), "LSTM (10, 20, num_layers=2, batch_first=True, dropout=0.25, bidirectional=True)");
    gdl_module_free(m);
    /* GRU: 3 gates; no bias: the weights only */
    g = gdl_nn_gru(7, 5, 1, 0, 0, 0, 0);
    ASSERT_NOT_NULL(g);
    ASSERT_EQ(2, n = gdl_module_named_tensors(g, GDL_PARAMS, names, ts, 20));
    ASSERT_STR_EQ("weight_ih_l0", names[0]);
    ASSERT_STR_EQ("weight_hh_l0", names[1]);
    ASSERT(shape_is(ts[0], 2, (const int64_t[]){15, 7}));
    ASSERT(shape_is(ts[1], 2, (const int64_t[]){15, 5}));
    ASSERT_NULL(gdl_forward(g, Z(gdl_zeros(GDL_DIMS(2, 7, 1), GDL_F32, CPU))));
    ASSERT_CONTAINS(gdl_last_error(), "GRU (7, 5, bias=False)");
    gdl_module_free(g);
    rnn_free_kept();
    PASS();
}

/* gdl_save_model / gdl_load_model: the file holds PyTorch's names and shapes, a fresh module loads it and
   computes the same */
TEST test_rnn_state_dict_roundtrip(void) {
    const char *path = harness_tmp("test_nn_rnn.safetensors");
    gdl_module *a, *b;
    gdl_tensor *x, *ya, *yb;
    gdl_st_file f;
    const gdl_st_entry *e;
    int64_t i;
    gdl_manual_seed(1);
    a = gdl_nn_sequential(2, (gdl_module *[]){gdl_nn_gru(4, 6, 2, 1, 1, 0, 1), gdl_nn_linear(12, 3, 1)});
    gdl_manual_seed(2);
    b = gdl_nn_sequential(2, (gdl_module *[]){gdl_nn_gru(4, 6, 2, 1, 1, 0, 1), gdl_nn_linear(12, 3, 1)});
    ASSERT_NOT_NULL(a);
    ASSERT_NOT_NULL(b);
    ASSERT_EQ(0, gdl_save_model(a, path));
    ASSERT_EQ(0, gdl_st_read(path, &f));
    ASSERT_NOT_NULL(e = gdl_st_find(&f, "0.weight_ih_l1_reverse"));
    ASSERT_EQ(2, e->ndim);
    ASSERT_EQ(18, e->shape[0]);
    ASSERT_EQ(12, e->shape[1]);
    ASSERT_NOT_NULL(gdl_st_find(&f, "0.bias_hh_l0"));
    ASSERT_EQ(18, (int)f.n); /* 16 recurrent tensors and the Linear's two */
    gdl_st_free(&f);
    gdl_module_train(a, 0);
    gdl_module_train(b, 0);
    ASSERT_NOT_NULL(x = gdl_randn(GDL_DIMS(2, 5, 4), CPU));
    ASSERT_NOT_NULL(ya = gdl_forward(a, x));
    ASSERT_NOT_NULL(yb = gdl_forward(b, x));
    for (i = 0; i < ya->numel && R(ya)[i] == R(yb)[i]; i++) {}
    ASSERT(i < ya->numel); /* two seeds: different outputs before the load */
    ASSERT_EQ(0, gdl_load_model(b, path));
    ASSERT_NOT_NULL(yb = gdl_forward(b, x));
    ASSERT(shape_is(yb, 3, (const int64_t[]){2, 5, 3}));
    for (i = 0; i < ya->numel; i++) ASSERT_EQ(R(ya)[i], R(yb)[i]);
    gdl_free(x);
    gdl_module_free(a);
    gdl_module_free(b);
    remove(path);
    PASS();
}

/* dropout between layers in training mode only; none after the last layer; an unbatched input */
TEST test_rnn_dropout_and_unbatched(void) {
    gdl_module *m;
    gdl_tensor *x, *xb, *y1, *y2, *ye, *hn, *cn, *hb, *cb;
    int64_t i;
    int differ = 0;
    gdl_manual_seed(3);
    ASSERT_NOT_NULL(m = gdl_nn_lstm(3, 8, 2, 1, 0, 0.5, 0));
    ASSERT_NOT_NULL(x = gdl_randn(GDL_DIMS(5, 2, 3), CPU));
    ASSERT_NOT_NULL(y1 = gdl_forward(m, x));
    ASSERT_NOT_NULL(y2 = gdl_forward(m, x));
    for (i = 0; i < y1->numel; i++) differ += R(y1)[i] != R(y2)[i];
    ASSERT(differ > 0); /* two masks */
    gdl_module_train(m, 0);
    ASSERT_NOT_NULL(ye = gdl_forward(m, x));
    ASSERT_NOT_NULL(y2 = gdl_forward(m, x));
    for (i = 0; i < ye->numel; i++) ASSERT_EQ(R(ye)[i], R(y2)[i]);
    /* unbatched [T, in]: batch 1 with that dim removed */
    ASSERT_NOT_NULL(xb = gdl_randn(GDL_DIMS(5, 3), CPU));
    ASSERT_EQ(0, gdl_nn_lstm_forward(m, xb, NULL, NULL, &y1, &hn, &cn));
    ASSERT(shape_is(y1, 2, (const int64_t[]){5, 8}));
    ASSERT(shape_is(hn, 2, (const int64_t[]){2, 8}));
    ASSERT(shape_is(cn, 2, (const int64_t[]){2, 8}));
    ASSERT_EQ(0, gdl_nn_lstm_forward(m, gdl_reshape(xb, GDL_DIMS(5, 1, 3)), NULL, NULL, &y2, &hb, &cb));
    for (i = 0; i < y1->numel; i++) ASSERT_EQ(R(y1)[i], R(y2)[i]);
    for (i = 0; i < hn->numel; i++) ASSERT_EQ(R(hn)[i], R(hb)[i]);
    for (i = 0; i < cn->numel; i++) ASSERT_EQ(R(cn)[i], R(cb)[i]);
    /* the final states can be fed back as the next chunk's initial ones (truncated BPTT) */
    ASSERT_EQ(0, gdl_nn_lstm_forward(m, xb, hn, cn, &y1, NULL, NULL));
    gdl_free(x);
    gdl_free(xb);
    gdl_module_free(m);
    PASS();
}

TEST test_rnn_errors(void) {
    gdl_module *m = gdl_nn_lstm(3, 4, 2, 1, 1, 0, 1), *g = gdl_nn_gru(3, 4, 1, 1, 0, 0, 0);
    gdl_tensor *x = gdl_zeros(GDL_DIMS(2, 5, 3), GDL_F32, CPU), *out, *hn, *cn;
    gdl_tensor *h_bad = gdl_zeros(GDL_DIMS(4, 5, 4), GDL_F32, CPU), *h_ok = gdl_zeros(GDL_DIMS(4, 2, 4), GDL_F32, CPU);
    ASSERT_NOT_NULL(m);
    ASSERT_NOT_NULL(g);
    ASSERT_NULL(gdl_nn_lstm(0, 4, 1, 1, 0, 0, 0));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_nn_lstm: input_size 0, hidden_size 4 and num_layers 1 must be positive");
    ASSERT_NULL(gdl_nn_gru(3, 4, 0, 1, 0, 0, 0));
    ASSERT_CONTAINS(gdl_last_error(), "num_layers 0");
    ASSERT_NULL(gdl_nn_gru(3, 4, 2, 1, 0, 1.5, 0));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_nn_gru: dropout 1.5 is not in [0,1]");
    /* input rank and size */
    ASSERT_NULL(gdl_forward(m, Z(gdl_zeros(GDL_DIMS(2, 5, 3, 1), GDL_F32, CPU))));
    ASSERT_STR_EQ("gdl_forward: LSTM (3, 4, num_layers=2, batch_first=True, bidirectional=True): expected input "
                  "[B, T, input_size] or unbatched [T, 3] (T and B >= 1), got [2,5,3,1]", gdl_last_error());
    ASSERT_EQ(-1, gdl_nn_gru_forward(g, Z(gdl_zeros(GDL_DIMS(5, 2, 7), GDL_F32, CPU)), NULL, &out, &hn));
    ASSERT_CONTAINS(gdl_last_error(), "expected input [T, B, input_size] or unbatched [T, 3]");
    ASSERT_CONTAINS(gdl_last_error(), "got [5,2,7]");
    ASSERT_NULL(out);
    ASSERT_NULL(hn);
    ASSERT_EQ(-1, gdl_nn_gru_forward(g, Z(gdl_zeros(GDL_DIMS(0, 2, 3), GDL_F32, CPU)), NULL, &out, &hn));
    ASSERT_CONTAINS(gdl_last_error(), "got [0,2,3]");
    /* initial states */
    ASSERT_EQ(-1, gdl_nn_lstm_forward(m, x, h_bad, NULL, &out, &hn, &cn));
    ASSERT_STR_EQ("gdl_nn_lstm_forward: LSTM: h0 must be [4, 2, 4] (num_layers*directions, batch, hidden_size) for "
                  "input [2,5,3], got [4,5,4]", gdl_last_error());
    ASSERT_NULL(out);
    ASSERT_EQ(-1, gdl_nn_lstm_forward(m, x, h_ok, h_bad, &out, &hn, &cn));
    ASSERT_CONTAINS(gdl_last_error(), "c0 must be [4, 2, 4]");
    ASSERT_EQ(-1, gdl_nn_lstm_forward(m, Z(gdl_zeros(GDL_DIMS(5, 3), GDL_F32, CPU)), h_ok, NULL, &out, &hn, &cn));
    ASSERT_CONTAINS(gdl_last_error(), "h0 must be [4, 4] (num_layers*directions, hidden_size) for an unbatched input");
    /* the wrong module, a NULL or integer input */
    ASSERT_EQ(-1, gdl_nn_gru_forward(m, x, NULL, &out, &hn));
    ASSERT_STR_EQ("gdl_nn_gru_forward: LSTM is not an GRU", gdl_last_error());
    ASSERT_EQ(-1, gdl_nn_lstm_forward(m, NULL, NULL, NULL, &out, NULL, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "input");
    ASSERT_NULL(gdl_forward(g, Z(gdl_zeros(GDL_DIMS(5, 2, 3), GDL_I32, CPU))));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_forward: GRU: gdl_linear");
    /* the gate ops themselves */
    ASSERT_NULL(gdl_lstm_gates(Z(gdl_zeros(GDL_DIMS(2, 8), GDL_F32, CPU)), Z(gdl_zeros(GDL_DIMS(2, 8), GDL_F32, CPU)),
                               Z(gdl_zeros(GDL_DIMS(2, 3), GDL_F32, CPU))));
    ASSERT_STR_EQ("gdl_lstm_gates: expected gx and gh [B, 4*H] and c_prev [B, H], got gx [2,8], gh [2,8] and c_prev [2,3]",
                  gdl_last_error());
    ASSERT_NULL(gdl_gru_gates(Z(gdl_zeros(GDL_DIMS(2, 6), GDL_F32, CPU)), Z(gdl_zeros(GDL_DIMS(3, 6), GDL_F32, CPU)),
                              Z(gdl_zeros(GDL_DIMS(2, 2), GDL_F32, CPU))));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_gru_gates: expected gx and gh [B, 3*H]");
    ASSERT_NULL(gdl_gru_gates(Z(gdl_zeros(GDL_DIMS(2, 6), GDL_F32, CPU)), NULL, Z(gdl_zeros(GDL_DIMS(2, 2), GDL_F32, CPU))));
    ASSERT_CONTAINS(gdl_last_error(), "gh");
    gdl_free(x); gdl_free(h_bad); gdl_free(h_ok);
    gdl_module_free(m);
    gdl_module_free(g);
    rnn_free_kept();
    PASS();
}

/* a short training run of each, followed by a Linear: output the running sum of the sequence so far (it
   needs the recurrent state); the loss must fall to a tenth of its start in 150 Adam steps */
TEST test_rnn_trains(void) {
    gdl_module *m;
    gdl_optimizer *opt;
    gdl_tensor *x, *y, *out, *loss;
    double first = 0, last = 0;
    int step, lstm;
    for (lstm = 0; lstm < 2; lstm++) {
        gdl_manual_seed(11);
        m = gdl_nn_sequential(2, (gdl_module *[]){lstm ? gdl_nn_lstm(1, 12, 1, 1, 1, 0, 0) : gdl_nn_gru(1, 12, 1, 1, 1, 0, 0),
                                                  gdl_nn_linear(12, 1, 1)});
        ASSERT_NOT_NULL(m);
        ASSERT_NOT_NULL(opt = gdl_adam_new(0.02, 0.9, 0.999, 1e-8, 0));
        ASSERT_EQ(0, gdl_optim_add_module(opt, m, 0));
        ASSERT_NOT_NULL(x = gdl_randn(GDL_DIMS(16, 6, 1), CPU));
        ASSERT_NOT_NULL(y = gdl_cumsum(x, 1));
        ASSERT_NOT_NULL(y = gdl_clone(y));
        for (step = 0; step < 150; step++) {
            gdl_arena_reset();
            gdl_zero_grad(opt);
            ASSERT_NOT_NULL(out = gdl_forward(m, x));
            ASSERT_NOT_NULL(loss = gdl_mse_loss(out, y, GDL_REDUCE_MEAN));
            if (step == 0) first = gdl_item(loss);
            last = gdl_item(loss);
            ASSERT_EQ(0, gdl_backward(loss));
            ASSERT_EQ(0, gdl_step(opt));
        }
        if (!(last < 0.1 * first)) FAILf("%s: loss %g after 150 steps, %g at the start", lstm ? "LSTM" : "GRU", last, first);
        gdl_optim_free(opt);
        gdl_module_free(m);
        gdl_free(x);
        gdl_free(y);
    }
    PASS();
}

/* under bf16 autocast the GEMMs run in bf16 and the gate ops on f32 copies (rounded back): the output is
   bf16, within bf16's error of the f32 run, and every parameter gets a finite gradient */
TEST test_rnn_autocast(void) {
    gdl_module *m;
    gdl_tensor *x, *y32, *y, *ts[8], *yf;
    int lstm, k, n;
    int64_t i;
    for (lstm = 0; lstm < 2; lstm++) {
        double worst = 0, big = 0;
        gdl_manual_seed(4);
        ASSERT_NOT_NULL(m = lstm ? gdl_nn_lstm(6, 16, 1, 1, 1, 0, 1) : gdl_nn_gru(6, 16, 1, 1, 1, 0, 1));
        ASSERT_NOT_NULL(x = gdl_randn(GDL_DIMS(3, 9, 6), CPU));
        gdl_arena_reset();
        ASSERT_NOT_NULL(y32 = gdl_forward(m, x));
        ASSERT_EQ(0, gdl_autocast_begin(GDL_BF16));
        y = gdl_forward(m, x);
        ASSERT_EQ(0, gdl_autocast_end());
        if (!y) FAILf("autocast forward failed: %s", gdl_last_error());
        ASSERT_EQ(GDL_BF16, y->dtype);
        ASSERT_NOT_NULL(yf = gdl_to_dtype(y, GDL_F32));
        for (i = 0; i < yf->numel; i++) {
            double d = fabs((double)R(yf)[i] - (double)R(y32)[i]);
            if (d > worst) worst = d;
            if (fabs((double)R(y32)[i]) > big) big = fabs((double)R(y32)[i]);
        }
        if (!(worst < 0.03 * big)) FAILf("%s: bf16 output differs from f32 by %g (largest value %g)", lstm ? "LSTM" : "GRU", worst, big);
        ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_to_dtype(y, GDL_F32))));
        n = gdl_module_named_tensors(m, GDL_PARAMS, NULL, ts, 8);
        ASSERT_EQ(8, n);
        for (k = 0; k < n; k++) {
            ASSERT_NOT_NULL(ts[k]->grad);
            for (i = 0; i < ts[k]->numel; i++) ASSERT(isfinite((double)R(ts[k]->grad)[i]));
        }
        gdl_free(x);
        gdl_module_free(m);
    }
    PASS();
}

SUITE(recurrent) {
    SET_SETUP(reset, NULL);
    RUN_TEST(test_lstm_values);
    RUN_TEST(test_gru_values);
    RUN_TEST(test_lstm_values_plain);
    RUN_TEST(test_gru_values_plain);
    RUN_TEST(test_rnn_params);
    RUN_TEST(test_rnn_state_dict_roundtrip);
    RUN_TEST(test_rnn_dropout_and_unbatched);
    RUN_TEST(test_rnn_errors);
    RUN_TEST(test_rnn_trains);
    RUN_TEST(test_rnn_autocast);
    RUN_TEST(test_rnn_opts);
}

/* ---- nn.TransformerEncoderLayer / TransformerEncoder, positional embeddings, weight tying ----
   Reference numbers: tests/transformer_ref.py (PyTorch 2.15, float64, dropout 0, training mode): every
   parameter j in state_dict order holds 0.5 sin((0.37 + 0.11 j) i + 0.1 j), src [2, 3, 4] holds
   sin(1.1 i + 0.5) (batch-first; transposed for a sequence-first layer), the loss is sum(out * cos(0.3 i)). */
/* names: self_attn.in_proj_weight, self_attn.in_proj_bias, self_attn.out_proj.weight, self_attn.out_proj.bias,
   linear1.weight, linear1.bias, linear2.weight, linear2.bias, norm1.weight, norm1.bias, norm2.weight, norm2.bias */
/* post_relu */
static const float post_relu_out[24] = {0.5597159f, 0.696326424f, -0.125097748f, 0.125555208f, 0.532266252f,
    0.657793026f, -0.376433814f, 0.322023445f, 0.533616278f, 0.658967622f, -0.371692376f, 0.319626383f,
    0.723606557f, 0.621913299f, -0.0598551585f, 0.113359679f, 0.500745074f, 0.689597694f, -0.317478112f,
    0.269405367f, 0.635422789f, 0.58953665f, -0.420589168f, 0.379151881f};
static const float post_relu_g_self_attn_in_proj_weight[48] = {0.00777752373f, 0.0266156136f, 0.0163679545f,
    -0.0117667323f, 0.00111745574f, -0.00957751477f, -0.00980610285f, 0.000681494333f, -0.00486400508f,
    0.0141315185f, 0.0176840091f, 0.00191127732f, -0.00421445881f, -0.0145360738f, -0.0089725546f, 0.00639624189f,
    -0.00623845537f, -0.00767618625f, -0.000725321248f, 0.00701818044f, -0.0181092253f, -0.0137638721f,
    0.00562274722f, 0.0188647848f, -0.020298809f, -0.0214696973f, 0.000821666224f, 0.0222151065f, -0.030292633f,
    -0.0406490124f, -0.00658383569f, 0.0346762077f, 0.0463425561f, -0.0884659675f, -0.126598196f, -0.0263829335f,
    0.0162289535f, -0.0803068005f, -0.08908266f, -0.000508297632f, -0.0216786382f, -0.049992626f, -0.0236742843f,
    0.0285154989f, -0.0431968222f, -0.00406951887f, 0.0395049863f, 0.039908136f};
static const float post_relu_g_linear1_weight[24] = {-0.00639064442f, 0.0151643561f, -0.0159369672f, -0.0122930067f,
    0.000141313115f, 0.00132117383f, -0.000711724234f, 0.000185296312f, 0.00653614573f, -0.0138040257f,
    0.0152041491f, 0.0124837948f, 0.f, 0.f, 0.f, 0.f, -0.000381525432f, -0.000600270366f, 0.000464492208f,
    -0.00220640975f, 0.f, 0.f, 0.f, 0.f};
static const float post_relu_g_norm1_weight[4] = {-0.864484855f, -0.0506706728f, -0.90155803f, 0.202902381f};
/* pre_gelu */
static const float pre_gelu_out[24] = {0.879336503f, 2.38033654f, 1.7213747f, -0.841522412f, -0.568463951f,
    1.03327376f, 2.21091423f, 0.633823645f, 0.555452739f, 0.526759551f, 0.561262997f, -0.218618043f, 1.32021603f,
    2.08075559f, 1.19444507f, -1.25388607f, -0.260667289f, 1.59229598f, 2.52861249f, 0.204626864f, -0.0494723827f,
    0.258449876f, 1.16540966f, 0.273160101f};
static const float pre_gelu_g_self_attn_out_proj_weight[16] = {-0.573600274f, -0.579266692f, -0.305779453f,
    -0.10342975f, -0.501751364f, -0.518087982f, -0.239546941f, -0.0690889692f, -0.467713966f, -0.509338083f,
    -0.185820138f, -0.0212946179f, -0.23699813f, -0.339269242f, -0.0363789621f, 0.0813724133f};
static const float pre_gelu_g_linear2_bias[4] = {0.775874893f, 0.773905624f, 0.70280567f, 0.568926179f};
static const float pre_gelu_g_norm2_bias[4] = {0.0566559411f, -0.0404310757f, -0.112410268f, -0.114582331f};
/* nobias_seq */
static const float nobias_seq_out[24] = {0.678205224f, 0.963193854f, 0.271112785f, -0.442008163f, 1.11936289f,
    0.685122734f, -0.317743187f, -0.747178284f, -0.944613721f, -0.189066827f, 0.620207592f, 0.950566252f,
    -0.649753311f, 0.388835105f, 0.929666035f, 0.565294029f, 0.244613887f, -0.786276952f, -1.03823199f,
    0.153859559f, -0.372711807f, -0.91918086f, -0.606542951f, 0.72355141f};
static const float nobias_seq_g_linear1_weight[24] = {0.0120117012f, 0.0130573735f, -0.00856892648f, 0.00311096401f,
    0.0113051742f, -0.333049594f, -0.0876299555f, -0.0514176566f, 0.249497888f, -0.252497636f, -0.301493864f,
    -0.0182656386f, 0.139554232f, 0.179894892f, -0.105828492f, 0.0384808994f, -0.0316868614f, 0.034929394f,
    0.0397711782f, 0.00290515847f, -0.135539386f, -0.155437302f, 0.102560433f, -0.0351066165f};
/* stack names: layers.0.self_attn.in_proj_weight, layers.0.self_attn.in_proj_bias,
   layers.0.self_attn.out_proj.weight, layers.0.self_attn.out_proj.bias, layers.0.linear1.weight,
   layers.0.linear1.bias, layers.0.linear2.weight, layers.0.linear2.bias, layers.0.norm1.weight,
   layers.0.norm1.bias, layers.0.norm2.weight, layers.0.norm2.bias, layers.1.self_attn.in_proj_weight,
   layers.1.self_attn.in_proj_bias, layers.1.self_attn.out_proj.weight, layers.1.self_attn.out_proj.bias,
   layers.1.linear1.weight, layers.1.linear1.bias, layers.1.linear2.weight, layers.1.linear2.bias,
   layers.1.norm1.weight, layers.1.norm1.bias, layers.1.norm2.weight, layers.1.norm2.bias, norm.weight, norm.bias */
/* stack */
static const float stack_out[24] = {0.757865578f, -0.29122504f, 0.377737318f, 0.33782176f, 0.766175499f,
    -0.281441267f, 0.368732643f, 0.327723624f, 0.766164792f, -0.281477562f, 0.368721765f, 0.327740514f,
    0.766525863f, -0.280846643f, 0.36851553f, 0.327256991f, 0.761293536f, -0.287292055f, 0.373994085f, 0.33374718f,
    0.774724809f, -0.270700725f, 0.359473412f, 0.316540933f};
static const float stack_g_layers_1_linear1_weight[24] = {-0.0207597598f, 0.0193959995f, -0.00127457435f,
    0.00393570863f, -0.00120319739f, 0.0025247901f, 0.00126945588f, 0.0012984029f, 0.00428557704f, -0.00535623207f,
    -0.00126459953f, -0.00201603589f, -0.0343567662f, 0.041430944f, 0.00631697015f, 0.0132611645f, -0.000747517339f,
    0.000681549293f, -1.92411803e-05f, 0.00016026232f, 0.00352164965f, -0.00735710997f, -0.00354152722f,
    -0.00367192391f};
static const float stack_g_layers_0_self_attn_in_proj_bias[12] = {0.0014213464f, -0.000636296411f, 0.00288423298f,
    -0.00193262147f, 2.99849663e-19f, 3.38813179e-19f, 1.35525272e-19f, 1.30104261e-18f, 0.0151962383f,
    0.0177513159f, 0.0143043426f, 0.00602080449f};
static const float pe_ref[30] = {0.f, 1.f, 0.f, 1.f, 0.f, 1.f, 0.841470957f, 0.540302336f, 0.0463992283f,
    0.998922944f, 0.00215443317f, 0.999997675f, 0.909297407f, -0.416146845f, 0.092698507f, 0.99569422f,
    0.00430885609f, 0.999990702f, 0.141120002f, -0.989992499f, 0.138798103f, 0.990320683f, 0.00646325899f,
    0.999979138f, -0.756802499f, -0.653643608f, 0.184598729f, 0.982813954f, 0.00861763209f, 0.999962866f};
/* tying: 1 parameter(s) seen by the optimizer; state_dict: wte.weight, lm_head.weight */
static const float tie_loss[1] = {1.88283517f};
static const float tie_w[15] = {0.0516321155f, 0.205327302f, 0.331232402f, 0.383419592f, 0.404033066f, 0.36996256f,
    0.311865917f, 0.183901399f, 0.0310466887f, -0.106974864f, -0.268018153f, -0.392786443f, -0.400344986f,
    -0.39737387f, -0.340620064f};

static void tfm_setw(gdl_module *m) {
    gdl_tensor *t[64];
    int n = gdl_module_named_tensors(m, GDL_PARAMS_AND_BUFFERS, NULL, t, 64), j;
    for (j = 0; j < n; j++) mha_fill(t[j], 0.37 + 0.11 * j, 0.1 * j, 0.5);
}

/* the N 2, T 3 case: out and the named gradients against PyTorch's, at 2e-5 */
static int tfm_case(gdl_module *m, int batch_first, int with_kpm, int causal, const float *out_ref, int ngrad,
                    const char *const *gnames, const float *const *grefs) {
    static const uint8_t kpm_v[6] = {0, 0, 1, 0, 0, 0};
    int64_t sx[3] = {2, 3, 4}, sk[2] = {2, 3};
    gdl_tensor *x, *kpm, *o, *w, *g;
    int64_t i;
    int k, rc = 0;
    tfm_setw(m);
    x = gdl_zeros(3, sx, GDL_F32, gdl_cpu());
    kpm = gdl_from_array(kpm_v, 2, sk, GDL_U8, gdl_cpu());
    if (!x || !kpm) return -1;
    mha_fill(x, 1.1, 0.5, 1);
    gdl_arena_reset();
    o = gdl_transformer_encoder_forward(m, batch_first ? x : gdl_transpose(x, 0, 1), NULL, with_kpm ? kpm : NULL,
                                        causal);
    if (!o || !(w = gdl_zeros(3, o->shape, GDL_F32, gdl_cpu()))) {
        fprintf(stderr, "tfm_case: %s\n", gdl_last_error());
        return -1;
    }
    for (i = 0; i < w->numel; i++) ((float *)w->data)[i] = (float)cos(0.3 * (double)i);
    o = gdl_mul(o, w); /* contiguous, in o's logical order */
    if (!o || gdl_backward(gdl_sum(o)) < 0) rc = -1;
    for (i = 0; rc == 0 && i < 24; i++)
        if (!(fabs(((float *)o->data)[i] / ((float *)w->data)[i] - out_ref[i]) <= 2e-5)) {
            fprintf(stderr, "tfm_case: output %d: %.7g, PyTorch %.7g\n", (int)i,
                    ((float *)o->data)[i] / ((float *)w->data)[i], out_ref[i]);
            rc = -1;
        }
    for (k = 0; rc == 0 && k < ngrad; k++) {
        if (!(g = gdl_module_tensor(m, gnames[k])) || !g->grad) return -1;
        for (i = 0; i < g->numel; i++)
            if (!(fabs(((float *)g->grad->data)[i] - grefs[k][i]) <= 2e-5)) {
                fprintf(stderr, "tfm_case: %s's gradient %d: %.7g, PyTorch %.7g\n", gnames[k], (int)i,
                        ((float *)g->grad->data)[i], grefs[k][i]);
                rc = -1;
                break;
            }
    }
    gdl_free(w);
    gdl_free(x);
    gdl_free(kpm);
    gdl_arena_reset();
    return rc;
}

TEST test_transformer_layer_pytorch(void) {
    static const char *const names[12] = {"self_attn.in_proj_weight", "self_attn.in_proj_bias",
        "self_attn.out_proj.weight", "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
        "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"};
    static const char *const g1[3] = {"self_attn.in_proj_weight", "linear1.weight", "norm1.weight"};
    static const char *const g2[3] = {"self_attn.out_proj.weight", "linear2.bias", "norm2.bias"};
    static const char *const g3[1] = {"linear1.weight"};
    const float *r1[3] = {post_relu_g_self_attn_in_proj_weight, post_relu_g_linear1_weight, post_relu_g_norm1_weight};
    const float *r2[3] = {pre_gelu_g_self_attn_out_proj_weight, pre_gelu_g_linear2_bias, pre_gelu_g_norm2_bias};
    const float *r3[1] = {nobias_seq_g_linear1_weight};
    const char *got[12];
    gdl_module *m;
    int i;
    /* post-norm, ReLU, batch-first, a key padding mask and the causal mask */
    ASSERT_NOT_NULL(m = gdl_nn_transformer_encoder_layer(4, 2, 6, 0.0, 0, 1e-5, 1, 0, 1));
    ASSERT_EQ(12, gdl_module_named_tensors(m, GDL_PARAMS_AND_BUFFERS, got, NULL, 12));
    for (i = 0; i < 12; i++) ASSERT_STR_EQ(names[i], got[i]);
    ASSERT_STR_EQ("TransformerEncoderLayer", gdl_module_kind(m));
    ASSERT_EQ(0, tfm_case(m, 1, 1, 1, post_relu_out, 3, g1, r1));
    gdl_module_free(m);
    /* pre-norm, GELU, eps 1e-3, the padding mask only */
    ASSERT_NOT_NULL(m = gdl_nn_transformer_encoder_layer(4, 2, 6, 0.0, 1, 1e-3, 1, 1, 1));
    ASSERT_EQ(0, tfm_case(m, 1, 1, 0, pre_gelu_out, 3, g2, r2));
    gdl_module_free(m);
    /* pre-norm without biases (LayerNorm(bias=False) too), sequence-first, causal */
    ASSERT_NOT_NULL(m = gdl_nn_transformer_encoder_layer(4, 2, 6, 0.0, 0, 1e-5, 0, 1, 0));
    ASSERT_EQ(6, gdl_module_named_tensors(m, GDL_PARAMS, got, NULL, 12));
    ASSERT_STR_EQ("norm2.weight", got[5]);
    ASSERT_EQ(0, tfm_case(m, 0, 0, 1, nobias_seq_out, 1, g3, r3));
    gdl_module_free(m);
    PASS();
}

/* the stack: 2 post-norm GELU layers and a final LayerNorm (PyTorch's names), the copies start equal */
TEST test_transformer_encoder_pytorch(void) {
    static const char *const g[2] = {"layers.1.linear1.weight", "layers.0.self_attn.in_proj_bias"};
    const float *r[2] = {stack_g_layers_1_linear1_weight, stack_g_layers_0_self_attn_in_proj_bias};
    const char *names[32];
    gdl_tensor *t[32];
    gdl_module *m;
    ASSERT_NOT_NULL(m = gdl_nn_transformer_encoder(gdl_nn_transformer_encoder_layer(4, 2, 6, 0.0, 1, 1e-5, 1, 0, 1), 2,
                                                   gdl_nn_layernorm(4)));
    ASSERT_EQ(26, gdl_module_named_tensors(m, GDL_PARAMS_AND_BUFFERS, names, t, 32));
    ASSERT_STR_EQ("layers.0.self_attn.in_proj_weight", names[0]);
    ASSERT_STR_EQ("layers.1.self_attn.in_proj_weight", names[12]);
    ASSERT_STR_EQ("layers.1.norm2.bias", names[23]);
    ASSERT_STR_EQ("norm.weight", names[24]);
    ASSERT_STR_EQ("norm.bias", names[25]);
    ASSERT_EQ(0, memcmp(t[4]->data, t[16]->data, sizeof(float) * (size_t)t[4]->numel)); /* deepcopy */
    ASSERT_EQ(0, tfm_case(m, 1, 1, 1, stack_out, 2, g, r));
    {   /* gdl_forward: no masks, the same as the forward without them */
        int64_t s[3] = {2, 3, 4};
        gdl_tensor *x = gdl_randn(3, s, gdl_cpu()), *a, *b;
        ASSERT_NOT_NULL(x);
        ASSERT_NOT_NULL(a = gdl_forward(m, x));
        ASSERT_NOT_NULL(b = gdl_transformer_encoder_forward(m, x, NULL, NULL, 0));
        ASSERT_EQ(0, memcmp(a->data, b->data, sizeof(float) * 24));
        gdl_free(x);
    }
    gdl_module_free(m);
    gdl_arena_reset();
    PASS();
}

TEST test_transformer_errors(void) {
    int64_t s[3] = {2, 3, 5}, sm[2] = {2, 2};
    gdl_tensor *x = gdl_zeros(3, s, GDL_F32, gdl_cpu()), *mk = gdl_zeros(2, sm, GDL_U8, gdl_cpu());
    gdl_module *m = gdl_nn_transformer_encoder_layer(4, 2, 6, 0.1, 0, 1e-5, 1, 0, 1), *relu;
    ASSERT(x && mk && m);
    ASSERT_NULL(gdl_nn_transformer_encoder_layer(6, 4, 8, 0.1, 0, 1e-5, 1, 0, 1));
    ASSERT_CONTAINS(gdl_last_error(), "d_model 6 must be a positive multiple of nhead 4");
    ASSERT_NULL(gdl_nn_transformer_encoder_layer(4, 2, 8, 1.5, 0, 1e-5, 1, 0, 1));
    ASSERT_CONTAINS(gdl_last_error(), "dropout 1.5");
    ASSERT_NULL(gdl_transformer_encoder_forward(m, x, NULL, NULL, 0));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_transformer_encoder_forward: src must be [N, T, 4] (d_model 4), got [2,3,5]");
    ASSERT_NULL(gdl_forward(m, x));
    ASSERT_CONTAINS(gdl_last_error(), "TransformerEncoderLayer");
    s[2] = 4;
    gdl_free(x);
    ASSERT_NOT_NULL(x = gdl_zeros(3, s, GDL_F32, gdl_cpu()));
    ASSERT_NULL(gdl_transformer_encoder_forward(m, x, mk, NULL, 0));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_transformer_encoder_forward: src_mask must be [3, 3] or [N*nhead, 3, 3]");
    ASSERT_NULL(gdl_transformer_encoder_forward(m, x, NULL, mk, 0));
    ASSERT_CONTAINS(gdl_last_error(), "key_padding_mask must be [N, S] = [2, 3], got [2,2]");
    ASSERT_NOT_NULL(relu = gdl_nn_relu());
    ASSERT_NULL(gdl_transformer_encoder_forward(relu, x, NULL, NULL, 0));
    ASSERT_CONTAINS(gdl_last_error(), "expected a module made by gdl_nn_transformer_encoder_layer");
    ASSERT_NULL(gdl_nn_transformer_encoder(relu, 2, NULL)); /* takes ownership: relu is freed */
    ASSERT_CONTAINS(gdl_last_error(), "expected a TransformerEncoderLayer");
    ASSERT_NULL(gdl_nn_transformer_encoder(m, 0, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "num_layers >= 1, got TransformerEncoderLayer and 0");
    gdl_free(x);
    gdl_free(mk);
    gdl_arena_reset();
    PASS();
}

/* the sinusoidal table against the PyTorch tutorial's, the learned one's name and sum, T > max_len */
TEST test_positional_embeddings(void) {
    int64_t s[3] = {2, 5, 6};
    const char *names[4];
    gdl_tensor *x = gdl_randn(3, s, gdl_cpu()), *t[4], *y;
    gdl_module *sin_pe = gdl_nn_sinusoidal_positional_encoding(5, 6, 0.0), *lp = gdl_nn_learned_positional_embedding(7, 6);
    int64_t i;
    ASSERT(x && sin_pe && lp);
    ASSERT_EQ(0, gdl_module_named_tensors(sin_pe, GDL_PARAMS, NULL, NULL, 0)); /* a buffer, not trained */
    ASSERT_EQ(1, gdl_module_named_tensors(sin_pe, GDL_BUFFERS, names, t, 4));
    ASSERT_STR_EQ("pe", names[0]);
    for (i = 0; i < 30; i++) ASSERT(fabs(((float *)t[0]->data)[i] - pe_ref[i]) <= 1e-6);
    ASSERT_NOT_NULL(y = gdl_forward(sin_pe, x));
    for (i = 0; i < 60; i++) ASSERT_EQ(((float *)x->data)[i] + ((float *)t[0]->data)[i % 30], ((float *)y->data)[i]);
    ASSERT_EQ(1, gdl_module_named_tensors(lp, GDL_PARAMS, names, t, 4));
    ASSERT_STR_EQ("weight", names[0]);
    ASSERT_EQ(7, t[0]->shape[0]);
    ASSERT_NOT_NULL(y = gdl_forward(lp, x));
    for (i = 0; i < 60; i++) ASSERT_EQ(((float *)x->data)[i] + ((float *)t[0]->data)[i % 30], ((float *)y->data)[i]);
    ASSERT_EQ(0, gdl_backward(gdl_sum(y)));
    for (i = 0; i < 42; i++) ASSERT_EQ(i < 30 ? 2.0f : 0.0f, ((float *)t[0]->grad->data)[i]); /* rows 5, 6 unused */
    s[1] = 6;
    gdl_free(x);
    ASSERT_NOT_NULL(x = gdl_zeros(3, s, GDL_F32, gdl_cpu()));
    ASSERT_NULL(gdl_forward(sin_pe, x));
    ASSERT_CONTAINS(gdl_last_error(), "the sequence has 6 positions but max_len is 5");
    ASSERT_NULL(gdl_nn_learned_positional_embedding(0, 4));
    ASSERT_CONTAINS(gdl_last_error(), "max_len 0 and d_model 4 must be positive");
    gdl_free(x);
    gdl_module_free(sin_pe);
    gdl_module_free(lp);
    gdl_arena_reset();
    PASS();
}

static gdl_tensor *tie_fwd(gdl_module *self, gdl_tensor *x) {
    return gdl_forward(gdl_module_child(self, "lm_head"), gdl_forward(gdl_module_child(self, "wte"), x));
}
static gdl_module *tie_model(void) {
    gdl_module *m = gdl_nn_custom("TiedLM", tie_fwd, NULL, NULL);
    if (!m || gdl_module_add_child(m, "wte", gdl_nn_embedding(5, 3)) < 0 ||
        gdl_module_add_child(m, "lm_head", gdl_nn_linear(3, 5, 0)) < 0) {
        gdl_module_free(m);
        return NULL;
    }
    mha_fill(gdl_module_tensor(m, "wte.weight"), 0.37, 0.1, 0.5);
    return m;
}

/* nanoGPT's lm_head.weight = wte.weight: one tensor, listed, counted and updated once; a step equal to
   PyTorch's; saved once and loaded from either name or both; errors */
TEST test_weight_tying(void) {
    static const int32_t xv[6] = {1, 4, 2, 0, 3, 3}, yv[6] = {4, 2, 0, 3, 3, 1};
    int64_t s2[2] = {2, 3}, s1[1] = {6};
    const char *path = harness_tmp("test_nn_tied.safetensors");
    const char *names[4];
    gdl_module *m = tie_model(), *m2 = tie_model();
    gdl_tensor *x = gdl_from_array(xv, 2, s2, GDL_I32, gdl_cpu()), *y = gdl_from_array(yv, 1, s1, GDL_I32, gdl_cpu());
    gdl_tensor *w, *loss, *lg;
    gdl_optimizer *opt = gdl_sgd_new(0.5, 0, 0, 0, 0);
    gdl_st_file f;
    int64_t s15[2] = {6, 5};
    int i;
    ASSERT(m && m2 && x && y && opt);
    w = gdl_module_tensor(m, "wte.weight");
    ASSERT_EQ(0, gdl_module_tie(m, "lm_head.weight", "wte.weight"));
    ASSERT(gdl_module_tensor(m, "lm_head.weight") == w);
    ASSERT_EQ(1, gdl_module_named_tensors(m, GDL_PARAMS_AND_BUFFERS, names, NULL, 4));
    ASSERT_STR_EQ("wte.weight", names[0]);
    ASSERT_EQ(15, gdl_module_num_params(m));
    ASSERT_EQ(0, gdl_optim_add_module(opt, m, 0));
    ASSERT_EQ(1, gdl_optim_num_params(opt));
    gdl_arena_reset();
    ASSERT_EQ(0, gdl_zero_grad(opt));
    ASSERT_NOT_NULL(lg = gdl_reshape(gdl_forward(m, x), 2, s15));
    ASSERT_NOT_NULL(loss = gdl_cross_entropy(lg, y));
    ASSERT(fabs(gdl_item(loss) - tie_loss[0]) <= 1e-6);
    ASSERT_EQ(0, gdl_backward(loss));
    ASSERT_EQ(0, gdl_step(opt));
    for (i = 0; i < 15; i++)
        if (!(fabs(((float *)w->data)[i] - tie_w[i]) <= 1e-6)) FAILf("weight %d after the step: %.7g, PyTorch %.7g", i, ((float *)w->data)[i], tie_w[i]);
    /* saved once, under the owner's name; loads back into a tied model */
    ASSERT_EQ(0, gdl_save_model(m, path));
    ASSERT_EQ(0, gdl_st_read(path, &f));
    ASSERT_EQ(1, f.n);
    ASSERT_STR_EQ("wte.weight", f.entries[0].name);
    gdl_st_free(&f);
    ASSERT_EQ(0, gdl_module_tie(m2, "lm_head.weight", "wte.weight"));
    ASSERT_EQ(0, gdl_load_model(m2, path));
    ASSERT_EQ(0, memcmp(w->data, gdl_module_tensor(m2, "lm_head.weight")->data, 60));
    {   /* files with the other name only (PyTorch's save_model may keep it) or with both (torch's state_dict) */
        static const char *const nm[2] = {"lm_head.weight", "wte.weight"};
        gdl_st_tensor st[2];
        int64_t ws[2] = {5, 3};
        float vals[15];
        for (i = 0; i < 15; i++) vals[i] = (float)i;
        for (i = 0; i < 2; i++) {
            st[i].name = nm[i];
            st[i].dtype = "F32";
            st[i].ndim = 2;
            st[i].shape = ws;
            st[i].data = vals;
        }
        ASSERT_EQ(0, gdl_st_write(path, 1, st, 0, NULL, NULL));
        ASSERT_EQ(0, gdl_load_model(m2, path));
        ASSERT_EQ(14.0f, ((float *)gdl_module_tensor(m2, "wte.weight")->data)[14]);
        vals[14] = 7;
        ASSERT_EQ(0, gdl_st_write(path, 2, st, 0, NULL, NULL));
        ASSERT_EQ(0, gdl_load_model(m2, path));
        ASSERT_EQ(7.0f, ((float *)gdl_module_tensor(m2, "wte.weight")->data)[14]);
        ws[0] = 4; /* a wrong shape under the other name is refused */
        ASSERT_EQ(0, gdl_st_write(path, 1, st, 0, NULL, NULL));
        ASSERT_EQ(-1, gdl_load_model(m2, path));
        ASSERT_CONTAINS(gdl_last_error(), "has shape [4,3] in the file but [5,3] in the model");
    }
    ASSERT_EQ(0, gdl_module_to(m2, gdl_cpu()));
    ASSERT_EQ(-1, gdl_module_tie(m2, "lm_head.weight", "wte.weight"));
    ASSERT_CONTAINS(gdl_last_error(), "\"lm_head.weight\" is already tied");
    ASSERT_EQ(-1, gdl_module_tie(m2, "lm_head.bias", "wte.weight"));
    ASSERT_CONTAINS(gdl_last_error(), "\"lm_head.bias\" is not a parameter of TiedLM");
    ASSERT_EQ(-1, gdl_module_tie(m2, "nope.weight", "wte.weight"));
    ASSERT_CONTAINS(gdl_last_error(), "no module \"nope\"");
    {
        gdl_module *a = gdl_nn_custom("Pair", tie_fwd, NULL, NULL);
        ASSERT_NOT_NULL(a);
        ASSERT_EQ(0, gdl_module_add_child(a, "wte", gdl_nn_embedding(5, 3)));
        ASSERT_EQ(0, gdl_module_add_child(a, "lm_head", gdl_nn_linear(5, 3, 0)));
        ASSERT_EQ(-1, gdl_module_tie(a, "lm_head.weight", "wte.weight"));
        ASSERT_CONTAINS(gdl_last_error(), "differ in shape or device");
        gdl_module_free(a);
    }
    gdl_optim_free(opt);
    gdl_module_free(m);
    gdl_module_free(m2);
    gdl_free(x);
    gdl_free(y);
    gdl_arena_reset();
    PASS();
}

SUITE(transformer) {
    SET_SETUP(reset, NULL);
    RUN_TEST(test_transformer_layer_pytorch);
    RUN_TEST(test_transformer_encoder_pytorch);
    RUN_TEST(test_transformer_errors);
    RUN_TEST(test_positional_embeddings);
    RUN_TEST(test_weight_tying);
    RUN_TEST(test_transformer_opts);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_SUITE(modules);
    RUN_SUITE(optimizers);
    RUN_SUITE(master_weights);
    RUN_SUITE(schedulers);
    RUN_SUITE(convergence);
    RUN_SUITE(errors);
    RUN_SUITE(recurrent);
    RUN_SUITE(transformer);
    gdl_free(sched_param);
    gdl_shutdown();
    HARNESS_MAIN_END();
}
