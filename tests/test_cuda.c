/* test_cuda.c — the GPU suite (`make test-cuda`, needs a GPU): every op case
   of tests/op_cases.h forward and backward on CUDA against the CPU on the same
   random inputs; 200 training steps of an MLP and a CNN from identical weights
   on both devices with matching losses; transfers, device-mismatch errors, the
   caching allocator's steady state and out-of-memory recovery. Without a GPU
   every test is skipped; CI only compiles and links this file. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"
#include "op_cases.h"

#define GPU gdl_cuda(0)

static int have_gpu(void) { return gdl_cuda_is_available(); }

/* largest |a-b| over largest |a| (norm-wise relative error); both host f32 */
static double rel_err(const gdl_tensor *cpu, const gdl_tensor *gpu) {
    float *h = (float *)malloc(sizeof(float) * (size_t)(gpu->numel + 1));
    double num = 0, den = 1e-30;
    int64_t i;
    if (!h || gdl_copy_to_host(gpu, h, sizeof(float) * (size_t)gpu->numel) < 0) {
        free(h);
        return INFINITY;
    }
    for (i = 0; i < cpu->numel; i++) {
        double a = ((float *)cpu->data)[i], d = fabs(a - h[i]);
        if (d > num || d != d) num = d;
        if (fabs(a) > den) den = fabs(a);
    }
    free(h);
    return num / den;
}

TEST parity(void *arg) {
    const gc_case *c = (const gc_case *)arg;
    gdl_tensor *in[5] = {0}, *ing[5] = {0}, *out, *outg, *w, *wg;
    int k;
    double e;
    if (!have_gpu()) SKIPm("no GPU");
    gdl_manual_seed(1234);
    for (k = 0; k < c->nin; k++) {
        ASSERT_NOT_NULL(in[k] = make_input(&c->in[k]));
        ASSERT_NOT_NULL(ing[k] = gdl_to(in[k], GPU));
    }
    gdl_arena_reset();
    gdl_manual_seed(99);
    out = c->forward(in);
    gdl_manual_seed(99); /* the same dropout mask */
    outg = c->forward(ing);
    if (!out || !outg) FAILf("%s: forward failed: %s", c->name, gdl_last_error());
    ASSERT(gdl_same_shape(out, outg));
    e = rel_err(out, outg);
    if (!(e < 1e-5)) FAILf("%s: forward differs: relative error %.3g", c->name, e);
    w = gdl_randn(out->ndim, out->shape, gdl_cpu());
    wg = gdl_to(w, GPU);
    if (gdl_backward_grad(out, w) < 0 || gdl_backward_grad(outg, wg) < 0)
        FAILf("%s: backward failed: %s", c->name, gdl_last_error());
    for (k = 0; k < c->nin; k++) {
        if (!in[k]->requires_grad) continue;
        e = rel_err(in[k]->grad, ing[k]->grad);
        if (!(e < 1e-5)) FAILf("%s: gradient of input %d differs: relative error %.3g", c->name, k, e);
    }
    for (k = 0; k < c->nin; k++) {
        gdl_free(in[k]);
        gdl_free(ing[k]);
    }
    gdl_free(w);
    gdl_free(wg);
    gdl_arena_reset();
    PASS();
}

/* ---- 200 steps on both devices ---- */

typedef struct toy {
    gdl_tensor *p[8];
    int np;
    gdl_tensor *x, *y;
} toy;

static gdl_tensor *toy_forward(toy *t, int cnn) {
    if (!cnn)
        return gdl_linear(gdl_relu(gdl_linear(t->x, t->p[0], t->p[1])), t->p[2], t->p[3]);
    {
        gdl_tensor *h = gdl_max_pool2d(gdl_relu(gdl_conv2d(t->x, t->p[0], t->p[1], 1, 1, 1, 1)), 2, 2, 0);
        h = gdl_max_pool2d(gdl_relu(gdl_conv2d(h, t->p[2], t->p[3], 1, 1, 1, 1)), 2, 2, 0);
        return gdl_linear(gdl_flatten(h, 1), t->p[4], t->p[5]);
    }
}

static void toy_make(toy *t, int cnn) {
    int64_t mlp_shapes[4][2] = {{128, 784}, {128, 0}, {10, 128}, {10, 0}};
    int64_t cnn_shapes[6][4] = {{8, 1, 3, 3}, {8}, {16, 8, 3, 3}, {16}, {10, 16 * 7 * 7}, {10}};
    int cnn_nd[6] = {4, 1, 4, 1, 2, 1};
    int64_t sx_mlp[2] = {64, 784}, sx_cnn[4] = {64, 1, 28, 28}, sy[1] = {64};
    int32_t labels[64];
    int i;
    gdl_manual_seed(5);
    t->np = cnn ? 6 : 4;
    for (i = 0; i < t->np; i++) {
        if (cnn) t->p[i] = gdl_uniform(cnn_nd[i], cnn_shapes[i], -0.1, 0.1, gdl_cpu());
        else t->p[i] = gdl_uniform(mlp_shapes[i][1] ? 2 : 1, mlp_shapes[i], -0.05, 0.05, gdl_cpu());
        gdl_set_requires_grad(t->p[i], 1);
    }
    t->x = cnn ? gdl_rand(4, sx_cnn, gdl_cpu()) : gdl_rand(2, sx_mlp, gdl_cpu());
    for (i = 0; i < 64; i++) labels[i] = (int32_t)(gdl_rng_next_u64() % 10);
    t->y = gdl_from_array(labels, 1, sy, GDL_I32, gdl_cpu());
}

static void toy_free(toy *t) {
    int i;
    for (i = 0; i < t->np; i++) gdl_free(t->p[i]);
    gdl_free(t->x);
    gdl_free(t->y);
}

static double toy_step(toy *t, int cnn) {
    gdl_tensor *loss;
    double l;
    int i;
    for (i = 0; i < t->np; i++) gdl_zero_grad_tensor(t->p[i]);
    loss = gdl_cross_entropy(toy_forward(t, cnn), t->y);
    if (!loss || gdl_backward(loss) < 0) return NAN;
    l = gdl_item(loss);
    for (i = 0; i < t->np; i++) gdl_sgd_update_(t->p[i], 0.05);
    return l;
}

TEST train_parity(void *arg) {
    int cnn = *(const int *)arg, s, i;
    toy a, b;
    if (!have_gpu()) SKIPm("no GPU");
    toy_make(&a, cnn);
    toy_make(&b, cnn);
    for (i = 0; i < b.np; i++) ASSERT_EQ(0, gdl_move_(b.p[i], GPU));
    ASSERT_EQ(0, gdl_move_(b.x, GPU));
    ASSERT_EQ(0, gdl_move_(b.y, GPU));
    for (s = 0; s < 200; s++) {
        double la, lb;
        gdl_arena_reset();
        la = toy_step(&a, cnn);
        lb = toy_step(&b, cnn);
        if (!(fabs(la - lb) <= 1e-4 * (fabs(la) > 1 ? fabs(la) : 1)))
            FAILf("step %d: CPU loss %.7f, GPU loss %.7f (%s)", s, la, lb, gdl_last_error());
    }
    toy_free(&a);
    toy_free(&b);
    PASS();
}

/* ---- devices, transfers, memory ---- */

TEST device_mismatch_error(void) {
    int64_t s[1] = {4};
    gdl_tensor *a, *b;
    if (!have_gpu()) SKIPm("no GPU");
    a = gdl_ones(1, s, GDL_F32, gdl_cpu());
    b = gdl_ones(1, s, GDL_F32, GPU);
    ASSERT_NULL(gdl_add(a, b));
    ASSERT_CONTAINS(gdl_last_error(), "expected all tensors on the same device");
    ASSERT_CONTAINS(gdl_last_error(), "cuda:0");
    gdl_free(a);
    gdl_free(b);
    PASS();
}

TEST transfers_round_trip(void) {
    int64_t s[2] = {33, 17};
    gdl_tensor *a, *g, *back, *h16;
    uint16_t *hh;
    int64_t i;
    if (!have_gpu()) SKIPm("no GPU");
    gdl_manual_seed(3);
    a = gdl_randn(2, s, gdl_cpu());
    g = gdl_to(a, GPU);
    back = gdl_to(g, gdl_cpu());
    ASSERT(memcmp(a->data, back->data, sizeof(float) * 33 * 17) == 0);
    h16 = gdl_to_dtype(g, GDL_F16); /* the GPU's conversion, bit for bit the CPU's */
    hh = (uint16_t *)malloc(2 * 33 * 17);
    ASSERT_EQ(0, gdl_copy_to_host(h16, hh, 2 * 33 * 17));
    for (i = 0; i < a->numel; i++) ASSERT_EQ(gdl_f32_to_f16(((float *)a->data)[i]), hh[i]);
    free(hh);
    gdl_free(a); gdl_free(g); gdl_free(back);
    PASS();
}

TEST allocator_steady_state_and_oom(void) {
#ifndef GPUDL_CUDA
    SKIPm("built without GPUDL_CUDA");
#else
    size_t alloc0, peak0, res0, alloc1, peak1, res1;
    int64_t huge[2] = {1 << 20, 1 << 20}; /* 4 TiB */
    toy t;
    int s, i;
    if (!have_gpu()) SKIPm("no GPU");
    toy_make(&t, 0);
    for (i = 0; i < t.np; i++) gdl_move_(t.p[i], GPU);
    gdl_move_(t.x, GPU);
    gdl_move_(t.y, GPU);
    for (s = 0; s < 3; s++) {
        gdl_arena_reset();
        toy_step(&t, 0);
    }
    gdl_cuda_memory_stats(&alloc0, &peak0, &res0);
    for (s = 0; s < 20; s++) {
        gdl_arena_reset();
        toy_step(&t, 0);
    }
    gdl_cuda_memory_stats(&alloc1, &peak1, &res1);
    ASSERT_EQ((long long)res0, (long long)res1); /* nothing new reserved in steady state */
    ASSERT_EQ((long long)alloc0, (long long)alloc1);
    ASSERT_NULL(gdl_empty(2, huge, GDL_F32, GPU));
    ASSERT_CONTAINS(gdl_last_error(), "out of memory");
    gdl_arena_reset();
    ASSERT(!isnan(toy_step(&t, 0))); /* still usable */
    toy_free(&t);
    PASS();
#endif
}

SUITE(ops) {
    int i;
    for (i = 0; i < NCASES; i++) RUN_TEST_NAMED(cases[i].name, parity, (void *)&cases[i]);
}
SUITE(training) {
    static const int mlp = 0, cnn = 1;
    RUN_TEST_NAMED("mlp_200_steps", train_parity, (void *)&mlp);
    RUN_TEST_NAMED("cnn_200_steps", train_parity, (void *)&cnn);
}
SUITE(devices) {
    RUN_TEST(device_mismatch_error);
    RUN_TEST(transfers_round_trip);
    RUN_TEST(allocator_steady_state_and_oom);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    printf("CUDA devices: %d (%s)\n", gdl_cuda_device_count(), gdl_device_name(gdl_default_device()));
    RUN_SUITE(ops);
    RUN_SUITE(training);
    RUN_SUITE(devices);
    gdl_shutdown();
    HARNESS_MAIN_END();
}
