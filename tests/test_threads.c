/* test_threads.c — several threads calling ops at once: two threads each
   training its own model (an MLP with dropout and Adam, a small CNN with
   batch norm and SGD) give bit for bit the losses and weights of the same
   model trained alone; four threads running inference on one shared model
   give the single-thread outputs; each thread has its own generator, grad
   mode and step arena. Built plain, under ASan + UBSan and under
   ThreadSanitizer (build/tsan_test_threads), which checks that none of this
   writes shared state without synchronisation. One translation unit with
   the implementation: a test holds the CPU pool itself (gdl__pool_acquire),
   as another thread's job would, to run every kernel on the path a thread
   takes when the pool is busy. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"
#include <pthread.h>
#include <string.h>

/* What a run leaves behind: every step's loss and the final tensors' bits. */
#define MAX_STEPS 64
typedef struct {
    int ok;
    char err[1200]; /* room for gdl_last_error and a prefix */
    int nsteps;
    double loss[MAX_STEPS];
    uint64_t fnv;     /* over every parameter and buffer, in the module's order */
    double first_u01; /* the generator's next number after training */
} run_result;

static uint64_t tensors_fnv(gdl_module *m) {
    gdl_tensor *t[64];
    int n = gdl_module_named_tensors(m, GDL_PARAMS_AND_BUFFERS, NULL, t, 64), i;
    uint64_t h = 1469598103934665603ULL;
    for (i = 0; i < n && i < 64; i++) {
        const unsigned char *b = (const unsigned char *)t[i]->data;
        size_t j, nb = (size_t)t[i]->numel * gdl_dtype_size(t[i]->dtype);
        for (j = 0; j < nb; j++) h = (h ^ b[j]) * 1099511628211ULL;
    }
    return h;
}

static void fail_run(run_result *r, const char *where) {
    r->ok = 0;
    snprintf(r->err, sizeof r->err, "%s: %s", where, gdl_last_error());
}

/* One training step on (xb, yb), which it frees; the loss into r. 0 / -1. */
static int train_step(gdl_module *m, gdl_optimizer *opt, gdl_tensor *xb, gdl_tensor *yb, run_result *r, int s) {
    gdl_tensor *loss;
    int rc = -1;
    gdl_zero_grad(opt);
    loss = gdl_cross_entropy(gdl_forward(m, xb), yb);
    if (loss && gdl_backward(loss) == 0 && gdl_step(opt) == 0) {
        r->loss[s] = gdl_item(loss);
        r->nsteps = s + 1;
        rc = 0;
    }
    gdl_free(xb);
    gdl_free(yb);
    return rc;
}

/* Trains m with opt for `steps` steps of batch B over the N samples of x (each of shape sample[0..ndim-1])
   and labels y, from gdl_from_array copies; the losses, the tensors' hash and the generator's next number
   into r. Frees m, opt and x. */
static void train(const char *name, gdl_module *m, gdl_optimizer *opt, float *x, int ndim, const int64_t *sample,
                  const int32_t *y, int N, int B, int steps, run_result *r) {
    int64_t xs[GDL_MAX_DIMS], per = 1, ys = B;
    int s, k;
    xs[0] = B;
    for (k = 0; k < ndim; k++) per *= (xs[k + 1] = sample[k]);
    if (!x || !m || !opt || gdl_optim_add_module(opt, m, 0) < 0) {
        fail_run(r, name);
        goto done;
    }
    for (s = 0; s < steps; s++) {
        const int b0 = (s * B) % N;
        gdl_arena_reset();
        if (train_step(m, opt, gdl_from_array(x + (size_t)b0 * (size_t)per, ndim + 1, xs, GDL_F32, gdl_cpu()),
                       gdl_from_array(y + b0, 1, &ys, GDL_I32, gdl_cpu()), r, s) < 0) {
            fail_run(r, name);
            goto done;
        }
    }
    r->fnv = tensors_fnv(m);
    r->first_u01 = gdl_rng_uniform();
done:
    gdl_optim_free(opt);
    gdl_module_free(m);
    free(x);
}

/* An MLP (Linear-ReLU-Dropout-Linear, Adam): the label is the largest of the first C features. Large
   enough that its GEMMs and loops go to the thread pool. Everything random comes from the calling thread's
   generator, seeded here. */
static void run_mlp(uint64_t seed, run_result *r) {
    enum { N = 256, D = 128, H = 128, C = 10, B = 64, STEPS = 30 };
    const int64_t sample = D;
    float *x = (float *)malloc(sizeof(float) * N * D);
    int32_t y[N];
    gdl_module *l[4];
    int i, j;
    memset(r, 0, sizeof *r);
    r->ok = 1;
    gdl_manual_seed(seed);
    for (i = 0; x && i < N; i++) {
        y[i] = 0;
        for (j = 0; j < D; j++) x[i * D + j] = (float)(2 * gdl_rng_uniform() - 1);
        for (j = 1; j < C; j++)
            if (x[i * D + j] > x[i * D + y[i]]) y[i] = j;
    }
    l[0] = gdl_nn_linear(D, H, 1);
    l[1] = gdl_nn_relu();
    l[2] = gdl_nn_dropout(0.1);
    l[3] = gdl_nn_linear(H, C, 1);
    train("mlp", gdl_nn_sequential(4, l), gdl_adam_new(1e-2, 0.9, 0.999, 1e-8, 1e-4), x, 1, &sample, y, N, B,
          STEPS, r);
}

/* A small CNN (Conv-BatchNorm-ReLU-MaxPool-Conv-ReLU-GlobalAvgPool-Linear, SGD with Nesterov momentum):
   the label is the image quadrant that is brighter. */
static void run_cnn(uint64_t seed, run_result *r) {
    enum { N = 64, CI = 3, HW = 12, C = 4, B = 32, STEPS = 20 };
    const int64_t sample[3] = {CI, HW, HW};
    float *x = (float *)malloc(sizeof(float) * N * CI * HW * HW);
    int32_t y[N];
    gdl_module *l[9];
    int i, k;
    memset(r, 0, sizeof *r);
    r->ok = 1;
    gdl_manual_seed(seed);
    for (i = 0; x && i < N; i++) {
        y[i] = (int32_t)(gdl_rng_next_u64() % C);
        for (k = 0; k < CI * HW * HW; k++) {
            const int row = k / HW % HW, col = k % HW, quadrant = (row >= HW / 2) * 2 + (col >= HW / 2);
            x[(size_t)i * CI * HW * HW + k] = (float)(gdl_rng_uniform() + (quadrant == y[i] ? 0.4 : 0));
        }
    }
    l[0] = gdl_nn_conv2d(CI, 16, 3, 1, 1, 1, 1, 1);
    l[1] = gdl_nn_batchnorm2d(16);
    l[2] = gdl_nn_relu();
    l[3] = gdl_nn_maxpool2d(2, 0, 0);
    l[4] = gdl_nn_conv2d(16, 16, 3, 1, 0, 1, 1, 0);
    l[5] = gdl_nn_relu();
    l[6] = gdl_nn_global_avgpool2d();
    l[7] = gdl_nn_flatten(1);
    l[8] = gdl_nn_linear(16, C, 1);
    train("cnn", gdl_nn_sequential(9, l), gdl_sgd_new(0.05, 0.9, 0, 1e-3, 1), x, 3, sample, y, N, B, STEPS, r);
}

typedef struct {
    void (*run)(uint64_t seed, run_result *r);
    uint64_t seed;
    run_result r;
} train_job;

static void *train_thread(void *p) {
    train_job *j = (train_job *)p;
    j->run(j->seed, &j->r);
    gdl_thread_cleanup(); /* this thread's arenas */
    return NULL;
}

static int same_run(const run_result *a, const run_result *b) {
    return a->ok && b->ok && a->nsteps == b->nsteps && memcmp(a->loss, b->loss, sizeof a->loss) == 0 &&
           a->fnv == b->fnv && memcmp(&a->first_u01, &b->first_u01, sizeof a->first_u01) == 0;
}

/* Two threads, each training its own model, at once (and the main thread idle), twice over (the second
   time both run the MLP with different seeds): each gives the bits of the same run alone. */
TEST two_threads_train_as_alone(void) {
    static run_result mlp_ref, cnn_ref, mlp2_ref;
    static train_job jobs[2];
    pthread_t th[2];
    int round, i;
    run_mlp(11, &mlp_ref);
    ASSERTm(mlp_ref.err, mlp_ref.ok);
    run_cnn(22, &cnn_ref);
    ASSERTm(cnn_ref.err, cnn_ref.ok);
    run_mlp(33, &mlp2_ref);
    ASSERTm(mlp2_ref.err, mlp2_ref.ok);
    ASSERT(mlp_ref.loss[mlp_ref.nsteps - 1] < mlp_ref.loss[0]); /* it learns: the comparison means something */
    ASSERT(cnn_ref.loss[cnn_ref.nsteps - 1] < cnn_ref.loss[0]);
    for (round = 0; round < 2; round++) {
        jobs[0].run = run_mlp;
        jobs[0].seed = 11;
        jobs[1].run = round == 0 ? run_cnn : run_mlp;
        jobs[1].seed = round == 0 ? 22 : 33;
        for (i = 0; i < 2; i++) ASSERT_EQ(0, pthread_create(&th[i], NULL, train_thread, &jobs[i]));
        for (i = 0; i < 2; i++) pthread_join(th[i], NULL);
        ASSERTm(jobs[0].r.err, jobs[0].r.ok);
        ASSERTm(jobs[1].r.err, jobs[1].r.ok);
        ASSERTm("the MLP trained beside another thread differs from the MLP trained alone",
                same_run(&jobs[0].r, &mlp_ref));
        ASSERTm("the second model trained beside another thread differs from it trained alone",
                same_run(&jobs[1].r, round == 0 ? &cnn_ref : &mlp2_ref));
    }
    PASS();
}

/* A thread that finds the pool held by another thread runs each parallel loop, GEMM and convolution on
   its own thread (a GEMM with packing buffers of its own): the same bits. Here the pool is held throughout,
   so every kernel takes that path, which two threads at once take only now and then. */
TEST a_busy_pool_gives_the_same_bits(void) {
    static run_result mlp_ref, cnn_ref, mlp_busy, cnn_busy;
    int held;
    if (gdl_get_num_threads() < 2) SKIPm("one thread: the pool is never used");
    run_mlp(11, &mlp_ref);
    ASSERTm(mlp_ref.err, mlp_ref.ok);
    run_cnn(22, &cnn_ref);
    ASSERTm(cnn_ref.err, cnn_ref.ok);
    held = gdl__pool_acquire();
    ASSERT(held);
    run_mlp(11, &mlp_busy);
    run_cnn(22, &cnn_busy);
    gdl__pool_release();
    ASSERTm(mlp_busy.err, mlp_busy.ok);
    ASSERTm(cnn_busy.err, cnn_busy.ok);
    ASSERTm("the MLP trained while the pool was busy differs", same_run(&mlp_busy, &mlp_ref));
    ASSERTm("the CNN trained while the pool was busy differs", same_run(&cnn_busy, &cnn_ref));
    ASSERT(gdl__gemm_own.cap > 0); /* the GEMMs ran on this thread's own packing buffers */
    gdl_thread_cleanup();
    ASSERT_EQ((size_t)0, gdl__gemm_own.cap);
    PASS();
}

/* A step of an optimizer while another thread is in a step of it fails, and changes nothing. The other
   thread's step is stood in for by the optimizer's flag, set by hand: two real steps overlap only by chance. */
TEST a_step_during_another_threads_step_fails(void) {
    const int64_t n = 4;
    gdl_tensor *p = gdl_full(1, &n, 1.0, GDL_F32, gdl_cpu());
    gdl_optimizer *opt = gdl_sgd_new(0.5, 0, 0, 0, 0);
    float v[4];
    ASSERT(p != NULL && opt != NULL);
    ASSERT_EQ(0, gdl_set_requires_grad(p, 1));
    ASSERT_EQ(0, gdl_optim_add_params(opt, &p, 1, -1, -1));
    gdl_arena_reset();
    ASSERT_EQ(0, gdl_backward(gdl_sum(p)));
    opt->stepping = 1;
    ASSERT_EQ(-1, gdl_step(opt));
    ASSERT(strstr(gdl_last_error(), "gdl_step: the SGD optimizer is in a step on another thread") != NULL);
    ASSERT_EQ(0, gdl_copy_to_host(p, v, sizeof v));
    ASSERT_EQ(1.0f, v[0]); /* unchanged */
    opt->stepping = 0;
    ASSERT_EQ(0, gdl_step(opt));
    ASSERT_EQ(0, gdl_copy_to_host(p, v, sizeof v));
    ASSERT_EQ(0.5f, v[0]);
    ASSERT_EQ(0, opt->stepping);
    gdl_optim_free(opt);
    gdl_free(p);
    PASS();
}

/* ---- inference on one shared model ---- */

enum { INF_B = 16, INF_D = 64, INF_C = 10, INF_REPS = 6 };
typedef struct {
    gdl_module *m;
    const float *x;
    const float *want; /* the single-thread output */
    int ok;
    char err[1200]; /* room for gdl_last_error and a prefix */
} infer_job;

/* This thread's forward passes, without grad, compared with the reference bit for bit. */
static void *infer_thread(void *p) {
    infer_job *j = (infer_job *)p;
    const int64_t xs[2] = {INF_B, INF_D};
    int rep;
    j->ok = 1;
    gdl_set_grad_enabled(0);
    for (rep = 0; rep < INF_REPS && j->ok; rep++) {
        float got[INF_B * INF_C];
        gdl_tensor *x, *y;
        gdl_arena_reset();
        x = gdl_from_array(j->x, 2, xs, GDL_F32, gdl_cpu());
        y = gdl_forward(j->m, x);
        if (!y || gdl_copy_to_host(y, got, sizeof got) < 0) {
            j->ok = 0;
            snprintf(j->err, sizeof j->err, "forward: %s", gdl_last_error());
        } else if (memcmp(got, j->want, sizeof got) != 0) {
            j->ok = 0;
            snprintf(j->err, sizeof j->err, "rep %d: the output differs from the single-thread one", rep);
        } else if (y->node != NULL || y->requires_grad) {
            j->ok = 0;
            snprintf(j->err, sizeof j->err, "rep %d: a no-grad forward recorded a node", rep);
        }
        gdl_free(x);
    }
    gdl_thread_cleanup();
    return NULL;
}

TEST four_threads_share_a_model_for_inference(void) {
    static float x[INF_B * INF_D], want[INF_B * INF_C];
    static infer_job jobs[4];
    const int64_t xs[2] = {INF_B, INF_D};
    gdl_module *l[5], *m;
    pthread_t th[4];
    gdl_tensor *xt, *y;
    int i, prev;
    gdl_manual_seed(5);
    for (i = 0; i < INF_B * INF_D; i++) x[i] = (float)gdl_rng_uniform();
    l[0] = gdl_nn_linear(INF_D, 256, 1);
    l[1] = gdl_nn_relu();
    l[2] = gdl_nn_dropout(0.5); /* eval mode: the identity, and no draw from any generator */
    l[3] = gdl_nn_linear(256, INF_C, 1);
    l[4] = gdl_nn_layernorm(INF_C);
    m = gdl_nn_sequential(5, l);
    ASSERT(m != NULL);
    ASSERT_EQ(0, gdl_module_train(m, 0));
    prev = gdl_set_grad_enabled(0);
    gdl_arena_reset();
    xt = gdl_from_array(x, 2, xs, GDL_F32, gdl_cpu());
    y = gdl_forward(m, xt);
    ASSERTm(gdl_last_error(), y != NULL);
    ASSERT_EQ(0, gdl_copy_to_host(y, want, sizeof want));
    gdl_free(xt);
    gdl_set_grad_enabled(prev);
    for (i = 0; i < 4; i++) {
        jobs[i].m = m;
        jobs[i].x = x;
        jobs[i].want = want;
        ASSERT_EQ(0, pthread_create(&th[i], NULL, infer_thread, &jobs[i]));
    }
    for (i = 0; i < 4; i++) pthread_join(th[i], NULL);
    gdl_module_free(m);
    for (i = 0; i < 4; i++) ASSERTm(jobs[i].err, jobs[i].ok);
    ASSERT_EQ(1, gdl_is_grad_enabled()); /* the workers' no-grad mode stayed on their threads */
    PASS();
}

/* ---- per-thread state ---- */

typedef struct {
    uint64_t first;      /* the first number this thread drew */
    int grad_enabled;    /* the grad mode this thread started in */
    size_t arena_used;   /* its step arena, before it made anything */
    double sum;          /* of temporaries it made after its gdl_arena_reset */
    size_t reserved_before, reserved_after; /* its arenas' memory before and after gdl_thread_cleanup */
} state_probe;

static void *probe_thread(void *p) {
    state_probe *s = (state_probe *)p;
    const int64_t n = 1000;
    gdl_tensor *a, *b;
    s->grad_enabled = gdl_is_grad_enabled();
    s->arena_used = gdl_arena_used();
    s->first = gdl_rng_next_u64();
    gdl_set_grad_enabled(0); /* this thread's only */
    gdl_arena_reset();       /* this thread's arena only */
    a = gdl_full(1, &n, 1.0, GDL_F32, gdl_cpu());
    b = gdl_rand(1, &n, gdl_cpu());
    s->sum = gdl_item(gdl_sum(gdl_add(a, b))); /* temporaries in this thread's arena */
    gdl_free(a);
    gdl_free(b);
    s->reserved_before = gdl_arena_reserved();
    gdl_thread_cleanup();
    s->reserved_after = gdl_arena_reserved();
    return NULL;
}

/* A thread that never seeded starts from the process seed (the last gdl_manual_seed) with a fresh
   counter, in grad mode, with an empty arena; what it does to its generator, grad mode and arena
   leaves the main thread's alone. */
TEST each_thread_has_its_own_generator_grad_mode_and_arena(void) {
    state_probe s;
    pthread_t th;
    uint64_t counter, want_first, main_next;
    const int64_t n = 8;
    gdl_tensor *t, *tmp, *u;
    memset(&s, 0, sizeof s);
    gdl_manual_seed(77);
    (void)gdl_rng_next_u64();
    (void)gdl_rng_next_u64();
    want_first = gdl_hash64(77, 0);
    main_next = gdl_hash64(77, 2);
    gdl_set_grad_enabled(1);
    gdl_arena_reset();
    t = gdl_full(1, &n, 3.0, GDL_F32, gdl_cpu());
    ASSERT(t != NULL);
    tmp = gdl_add(t, t); /* a temporary of this thread's step */
    ASSERT(tmp != NULL);
    ASSERT_EQ(0, pthread_create(&th, NULL, probe_thread, &s));
    pthread_join(th, NULL);
    ASSERT_EQ(want_first, s.first);
    ASSERT_EQ(1, s.grad_enabled);
    ASSERT_EQ((size_t)0, s.arena_used);
    ASSERT(s.sum > 1000.0 && s.sum < 2000.0);
    ASSERT(s.reserved_before > 0);
    ASSERT_EQ((size_t)0, s.reserved_after);
    ASSERT_EQ(1, gdl_is_grad_enabled());
    ASSERT_EQ((uint64_t)77, gdl_rng_get_state(&counter));
    ASSERT_EQ((uint64_t)2, counter);
    ASSERT_EQ(main_next, gdl_rng_next_u64());
    u = gdl_add(tmp, t); /* tmp survived the other thread's gdl_arena_reset */
    ASSERTm(gdl_last_error(), u != NULL);
    ASSERT_EQ(9.0, gdl_item(gdl_sum(u)) / 8);
    gdl_free(t);
    PASS();
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_TEST(each_thread_has_its_own_generator_grad_mode_and_arena);
    RUN_TEST(a_busy_pool_gives_the_same_bits);
    RUN_TEST(two_threads_train_as_alone);
    RUN_TEST(a_step_during_another_threads_step_fails);
    RUN_TEST(four_threads_share_a_model_for_inference);
    gdl_shutdown();
    HARNESS_MAIN_END();
}
