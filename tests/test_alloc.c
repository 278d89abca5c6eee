/* test_alloc.c — the per-step arena through a counting allocator: after the
   first step, a training step with the same shapes performs no heap
   allocation and gets the same addresses; and every allocation failure, at
   every point of a step, gives an "out of memory" error instead of a crash,
   after which the next step runs normally; an optimizer whose state cannot
   be made changes nothing, and gdl_fit retries a step that ran out of
   memory. */
#include <stdlib.h>
#include <stddef.h>

static long n_mallocs;     /* malloc + realloc calls */
static long fail_at = -1;  /* the call number that fails, -1 for none */

static void *count_malloc(size_t n) {
    if (n_mallocs++ == fail_at) return NULL;
    return malloc(n);
}
/* gpudl does not call realloc today; counted all the same */
static void *count_realloc(void *p, size_t n) {
    if (n_mallocs++ == fail_at) return NULL;
    return realloc(p, n);
}

#define GPUDL_MALLOC(sz) count_malloc(sz)
#define GPUDL_REALLOC(p, sz) count_realloc(p, sz)
#define GPUDL_FREE(p) free(p)
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"

typedef struct net {
    gdl_tensor *x, *y, *cw, *cb, *bn_rm, *bn_rv, *bn_w, *bn_b, *w1, *b1, *w2;
} net;

static int make_net(net *m) {
    int64_t sx[4] = {8, 2, 9, 9}, sy[1] = {8}, scw[4] = {4, 2, 3, 3}, s4[1] = {4}, sw1[2] = {17, 64}, s17[1] = {17},
            sw2[2] = {3, 17};
    int32_t labels[8] = {0, 1, 2, 0, 1, 2, 0, 1};
    gdl_tensor **all[] = {&m->cw, &m->cb, &m->bn_w, &m->bn_b, &m->w1, &m->b1, &m->w2};
    size_t k;
    gdl_manual_seed(11);
    m->x = gdl_randn(4, sx, gdl_cpu());
    m->y = gdl_from_array(labels, 1, sy, GDL_I32, gdl_cpu());
    m->cw = gdl_uniform(4, scw, -0.3, 0.3, gdl_cpu());
    m->cb = gdl_zeros(1, s4, GDL_F32, gdl_cpu());
    m->bn_rm = gdl_zeros(1, s4, GDL_F32, gdl_cpu());
    m->bn_rv = gdl_ones(1, s4, GDL_F32, gdl_cpu());
    m->bn_w = gdl_ones(1, s4, GDL_F32, gdl_cpu());
    m->bn_b = gdl_zeros(1, s4, GDL_F32, gdl_cpu());
    m->w1 = gdl_uniform(2, sw1, -0.1, 0.1, gdl_cpu());
    m->b1 = gdl_zeros(1, s17, GDL_F32, gdl_cpu());
    m->w2 = gdl_uniform(2, sw2, -0.2, 0.2, gdl_cpu());
    for (k = 0; k < sizeof all / sizeof all[0]; k++)
        if (!*all[k] || gdl_set_requires_grad(*all[k], 1) < 0) return -1;
    return m->x && m->y && m->bn_rm && m->bn_rv ? 0 : -1;
}

static void free_net(net *m) {
    gdl_tensor *all[] = {m->x, m->y, m->cw, m->cb, m->bn_rm, m->bn_rv, m->bn_w, m->bn_b, m->w1, m->b1, m->w2};
    size_t k;
    for (k = 0; k < sizeof all / sizeof all[0]; k++) gdl_free(all[k]);
}

/* one training step; returns the loss tensor's data address, NULL on error */
static void *step(net *m, double *loss_out) {
    gdl_tensor *params[] = {m->cw, m->cb, m->bn_w, m->bn_b, m->w1, m->b1, m->w2};
    gdl_tensor *h, *loss;
    size_t k;
    gdl_arena_reset();
    for (k = 0; k < 7; k++) gdl_zero_grad_tensor(params[k]);
    h = gdl_conv2d(m->x, m->cw, m->cb, 1, 1, 1, 1);
    h = gdl_batch_norm(h, m->bn_rm, m->bn_rv, m->bn_w, m->bn_b, 1, 0.1, 1e-5);
    h = gdl_max_pool2d(gdl_relu(h), 2, 2, 0);
    h = gdl_dropout(gdl_flatten(h, 1), 0.1, 1);
    h = gdl_gelu(gdl_linear(h, m->w1, m->b1), 0);
    loss = gdl_cross_entropy(gdl_linear(h, m->w2, NULL), m->y);
    if (!loss || gdl_backward(loss) < 0) return NULL;
    for (k = 0; k < 7; k++)
        if (gdl_sgd_update_(params[k], 0.05) < 0) return NULL;
    if (loss_out) *loss_out = gdl_item(loss);
    return loss->data;
}

TEST test_steady_state_allocates_nothing(void) {
    net m;
    long before;
    void *addr1, *addr;
    double l0, l;
    int s;
    ASSERT_EQ(0, make_net(&m));
    addr1 = step(&m, &l0);
    ASSERT_NOT_NULL(addr1);
    /* the second step fills the other of the two header arenas (temporaries' headers alternate
       between them so that a stale temporary is caught): steady state starts after it */
    ASSERT(step(&m, NULL) == addr1);
    for (s = 0; s < 5; s++) {
        before = n_mallocs;
        addr = step(&m, &l);
        ASSERT_NOT_NULL(addr);
        ASSERT_EQm("heap allocations in a steady-state step", 0, n_mallocs - before);
        ASSERT(addr == addr1); /* the same addresses every step */
    }
    ASSERT_LT(l, l0); /* and it trains */
    free_net(&m);
    gdl_shutdown();
    PASS();
}

TEST test_every_allocation_failure_is_reported(void) {
    /* fail each heap allocation of building a net and running its first
       step (arena chunks, gradients, GEMM packing buffers), one at a time:
       either the step fails with "out of memory", or a fallback (a smaller
       arena chunk, the unpacked GEMM loop) computes the same loss */
    net m;
    long k, total, failures = 0;
    double ref, l;
    gdl_shutdown();
    total = n_mallocs;
    ASSERT_EQ(0, make_net(&m));
    ASSERT_NOT_NULL(step(&m, &ref));
    total = n_mallocs - total;
    free_net(&m);
    for (k = 0; k < total; k++) {
        int ok;
        gdl_shutdown(); /* empty arenas and GEMM buffers: the step allocates from scratch */
        gdl_clear_error();
        fail_at = n_mallocs + k;
        ok = make_net(&m) == 0 && step(&m, &l) != NULL;
        fail_at = -1;
        if (!ok) {
            failures++;
            if (!strstr(gdl_last_error(), "out of memory")) {
                free_net(&m);
                FAILf("allocation %ld of %ld failed with: %s", k, total, gdl_last_error());
            }
        } else if (!(fabs(l - ref) <= 1e-5 * fabs(ref))) {
            free_net(&m);
            FAILf("allocation %ld of %ld failed quietly and the loss changed: %.9g vs %.9g", k, total, l, ref);
        }
        free_net(&m);
        ASSERT_EQ(0, make_net(&m)); /* usable afterwards */
        ASSERT_NOT_NULL(step(&m, NULL));
        free_net(&m);
    }
    ASSERT_GT(failures, total / 2); /* most allocations have no fallback: they must be reported */
    gdl_shutdown();
    PASS();
}

/* gradients of one step, no update */
static int grads(net *m) {
    gdl_tensor *params[] = {m->cw, m->cb, m->bn_w, m->bn_b, m->w1, m->b1, m->w2};
    gdl_tensor *h, *loss;
    size_t k;
    gdl_arena_reset();
    for (k = 0; k < 7; k++) gdl_zero_grad_tensor(params[k]);
    h = gdl_relu(gdl_conv2d(m->x, m->cw, m->cb, 1, 1, 1, 1));
    h = gdl_gelu(gdl_linear(gdl_flatten(gdl_max_pool2d(h, 2, 2, 0), 1), m->w1, m->b1), 0);
    loss = gdl_cross_entropy(gdl_linear(h, m->w2, NULL), m->y);
    return loss ? gdl_backward(loss) : -1;
}

static int same_params(net *a, net *b) {
    gdl_tensor *pa[] = {a->cw, a->cb, a->w1, a->b1, a->w2}, *pb[] = {b->cw, b->cb, b->w1, b->b1, b->w2};
    size_t k;
    for (k = 0; k < 5; k++)
        if (memcmp(pa[k]->data, pb[k]->data, (size_t)pa[k]->numel * sizeof(float)) != 0) return 0;
    return 1;
}

static gdl_optimizer *adam_over(net *m) {
    gdl_tensor *params[] = {m->cw, m->cb, m->w1, m->b1, m->w2};
    gdl_optimizer *o = gdl_adamw_new(0.01, 0.9, 0.99, 1e-8, 0.1);
    if (o && gdl_optim_add_params(o, params, 5, -1, -1) < 0) {
        gdl_optim_free(o);
        return NULL;
    }
    return o;
}

TEST test_optimizer_state_oom_changes_nothing(void) {
    /* every heap allocation of an optimizer's first step (its state, the
       step's table in the arena) failing in turn: "out of memory", the
       parameters and the step count unchanged, and the step taken again
       equals an uninjected one bitwise */
    net a, b, c; /* c: the initial parameters */
    gdl_optimizer *oa, *ob;
    long k, total, failures = 0;
    ASSERT_EQ(0, make_net(&a));
    ASSERT_EQ(0, make_net(&b));
    ASSERT_EQ(0, make_net(&c));
    ASSERT_NOT_NULL(ob = adam_over(&b));
    ASSERT_EQ(0, grads(&b));
    gdl_shutdown(); /* the step's table needs a fresh arena chunk too */
    ASSERT_EQ(0, grads(&b));
    total = n_mallocs;
    ASSERT_EQ(0, gdl_step(ob));
    total = n_mallocs - total;
    ASSERT_GT(total, 5); /* at least a header and data per state tensor */
    for (k = 0; k < total; k++) {
        ASSERT_NOT_NULL(oa = adam_over(&a));
        ASSERT_EQ(0, grads(&a));
        fail_at = n_mallocs + k;
        if (gdl_step(oa) < 0) {
            fail_at = -1;
            failures++;
            ASSERT_CONTAINS(gdl_last_error(), "out of memory");
            ASSERT_EQ(0, (int)gdl_optim_get_step(oa));
            if (!same_params(&a, &c)) FAILf("allocation %ld of %ld: a failed step changed the parameters", k, total);
            ASSERT_EQ(0, gdl_step(oa));
        }
        fail_at = -1;
        if (!same_params(&a, &b)) FAILf("allocation %ld of %ld of the first step: the parameters differ", k, total);
        gdl_optim_free(oa);
        free_net(&a);
        ASSERT_EQ(0, make_net(&a));
    }
    ASSERT_EQ(total, failures);
    gdl_optim_free(ob);
    free_net(&a);
    free_net(&b);
    free_net(&c);
    gdl_shutdown();
    PASS();
}

/* gdl_fit on the CPU with the allocation of a scratch tensor in the loss of
   call `fail_at` failing: the retry gives the uninjected weights bitwise;
   without it, an error and the weights of the last completed step */
typedef struct fit_fault {
    int calls, fail_at, snap_at;
    gdl_module *m;
    float snap[131];
} fit_fault;

static int fit_params(gdl_module *m, float *w) {
    gdl_tensor *ts[4];
    int n = gdl_module_named_tensors(m, GDL_PARAMS, NULL, ts, 4), i, off = 0;
    for (i = 0; i < n && n == 4; i++) {
        memcpy(w + off, ts[i]->data, sizeof(float) * (size_t)ts[i]->numel);
        off += (int)ts[i]->numel;
    }
    return off == 131 ? 0 : -1;
}

static gdl_tensor *fit_loss(gdl_tensor *out, gdl_tensor *y, void *user) {
    fit_fault *f = (fit_fault *)user;
    int n = ++f->calls;
    if (n == f->snap_at && fit_params(f->m, f->snap) < 0) return NULL;
    if (n == f->fail_at) {
        int64_t s[1] = {64};
        gdl_tensor *scratch;
        fail_at = n_mallocs;
        scratch = gdl_zeros(1, s, GDL_F32, gdl_cpu());
        fail_at = -1;
        if (!scratch) return NULL;
        gdl_free(scratch);
    }
    return gdl_cross_entropy(out, y);
}

static int fit_run(fit_fault *f, int oom_retry, float *w) {
    float x[96 * 4];
    int32_t y[96];
    int64_t shape[1] = {4};
    int i, rc = -1;
    gdl_dataset *ds;
    gdl_loader *l = NULL;
    gdl_module *layers[3], *m;
    gdl_optimizer *opt = NULL;
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_fit_opts o = gdl_fit_defaults();
    gdl_manual_seed(17);
    for (i = 0; i < 96 * 4; i++) x[i] = (float)gdl_rng_uniform();
    for (i = 0; i < 96; i++) y[i] = (int32_t)(gdl_rng_next_u64() % 3);
    ds = gdl_dataset_from_arrays(x, GDL_F32, 1, shape, y, 96, 3);
    layers[0] = gdl_nn_linear(4, 16, 1);
    layers[1] = gdl_nn_relu();
    layers[2] = gdl_nn_linear(16, 3, 1);
    m = gdl_nn_sequential(3, layers);
    lo.batch_size = 32;
    lo.shuffle = 1;
    if (ds && m && (l = gdl_loader_new(ds, &lo)) && (opt = gdl_adam_new(0.05, 0.9, 0.999, 1e-8, 0)) &&
        gdl_optim_add_module(opt, m, 0) == 0) {
        f->m = m;
        o.epochs = 2;
        o.verbose = 0;
        o.loss = fit_loss;
        o.loss_user = f;
        o.oom_retry = oom_retry;
        rc = gdl_fit(m, l, opt, &o, NULL);
        if (fit_params(m, w) < 0) rc = -2;
    }
    gdl_optim_free(opt);
    gdl_loader_free(l);
    gdl_module_free(m);
    gdl_dataset_free(ds);
    return rc;
}

TEST test_fit_retries_after_oom(void) {
    static fit_fault ref, f;
    float w_ref[131], w[131];
    memset(&ref, 0, sizeof ref);
    ref.snap_at = 5; /* epoch 2, batch 2: the weights after 4 steps */
    ASSERT_EQ(0, fit_run(&ref, 1, w_ref));
    memset(&f, 0, sizeof f);
    f.fail_at = 5;
    ASSERT_EQ(0, fit_run(&f, 1, w));
    ASSERT_EQ(7, f.calls); /* 6 batches, one retried */
    ASSERT(memcmp(w, w_ref, sizeof w) == 0);
    memset(&f, 0, sizeof f);
    f.fail_at = 5;
    ASSERT_EQ(-1, fit_run(&f, 0, w));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_fit: epoch 2, batch 2 of 3");
    ASSERT_CONTAINS(gdl_last_error(), "out of memory");
    ASSERT(memcmp(w, ref.snap, sizeof w) == 0);
    gdl_shutdown();
    PASS();
}

TEST test_factories_report_oom(void) {
    int64_t s[1] = {16};
    fail_at = n_mallocs;
    ASSERT_NULL(gdl_zeros(1, s, GDL_F32, gdl_cpu()));
    ASSERT_CONTAINS(gdl_last_error(), "out of memory");
    fail_at = n_mallocs + 1; /* the header succeeds, the data fails: nothing leaks */
    ASSERT_NULL(gdl_randn(1, s, gdl_cpu()));
    fail_at = -1;
    PASS();
}

SUITE(arena) {
    RUN_TEST(test_steady_state_allocates_nothing);
    RUN_TEST(test_every_allocation_failure_is_reported);
    RUN_TEST(test_optimizer_state_oom_changes_nothing);
    RUN_TEST(test_fit_retries_after_oom);
    RUN_TEST(test_factories_report_oom);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    (void)count_realloc;
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_SUITE(arena);
    gdl_shutdown();
    HARNESS_MAIN_END();
}
