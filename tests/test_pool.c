/* test_pool.c — gpudl's CPU thread pool (src/runtime/thread_pool.h in gpudl.h): every
   index of a parallel loop done exactly once at any thread count; the thread
   count from the API and the environment; the CPU kernels that run in
   parallel give the same bits with 1 thread and with several; a parallel
   region inside a task, and parallel regions and GEMMs from several threads
   at once, neither deadlock nor race (also built under ThreadSanitizer:
   tsan_test_pool); a child forked after the workers started can use the
   pool; the workers are joined at exit (LeakSanitizer: asan_test_pool).
   Also Adam's vector loop against its double formula. Under MinGW-w64
   (tests/windows.mk, with tests/win_compat.h for setenv) all but the fork
   test run; pthreads there are MinGW's winpthreads, the pool's Win32's. */
#define _POSIX_C_SOURCE 200809L
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#ifndef _WIN32
#include <sys/wait.h>
#include <unistd.h>
#endif

static void count_part(const void *p, int64_t lo, int64_t hi) {
    int *hits = (int *)(uintptr_t)p; /* each index has one writer: no race */
    int64_t i;
    for (i = lo; i < hi; i++) hits[i]++;
}

/* Every index once, whatever n and the thread count (more threads than
   indices included). */
TEST test_parallel_for_covers_each_index_once(void) {
    static const int64_t ns[] = {1, 2, 3, 7, 100, 40000, 100003};
    static const int threads[] = {1, 2, 3, 7, 64};
    size_t a, b;
    for (a = 0; a < sizeof threads / sizeof *threads; a++) {
        gdl_set_num_threads(threads[a]);
        ASSERT_EQ(threads[a], gdl_get_num_threads());
        for (b = 0; b < sizeof ns / sizeof *ns; b++) {
            int *hits = (int *)calloc((size_t)ns[b], sizeof(int));
            int64_t i, bad = -1;
            gdl__parallel_for(ns[b], GDL__PAR_MIN + 1, count_part, hits); /* past the threshold */
            for (i = 0; i < ns[b] && bad < 0; i++)
                if (hits[i] != 1) bad = i;
            free(hits);
            ASSERT_EQm("an index was done 0 or 2 times", -1, (int)bad);
        }
    }
    gdl_set_num_threads(0);
    PASS();
}

TEST test_thread_count_api_and_env(void) {
    gdl_set_num_threads(0);
    ASSERT_GE(gdl_get_num_threads(), 1);
#ifdef GDL__POOL
    gdl_set_num_threads(5);
    ASSERT_EQ(5, gdl_get_num_threads());
    gdl_set_num_threads(100000); /* capped */
    ASSERT_EQ(GDL__POOL_MAX, gdl_get_num_threads());
    gdl_set_num_threads(-1);
    setenv("GPUDL_NUM_THREADS", "3", 1);
    setenv("OMP_NUM_THREADS", "6,2", 1);
    ASSERT_EQ(3, gdl__env_threads());
    unsetenv("GPUDL_NUM_THREADS");
    ASSERT_EQ(6, gdl__env_threads()); /* OMP_NUM_THREADS, its first level */
    unsetenv("OMP_NUM_THREADS");
    ASSERT_GE(gdl__env_threads(), 1); /* the CPUs this process may run on */
#else
    gdl_set_num_threads(5);
    ASSERT_EQ(1, gdl_get_num_threads());
#endif
    gdl_set_num_threads(0);
    PASS();
}

/* --- the parallel CPU kernels: 1 thread against 3 ------------------------ */

static float *rnd(int64_t n, uint64_t seed) {
    float *x = (float *)malloc((size_t)n * sizeof(float));
    int64_t i;
    for (i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((double)(seed >> 40) / (double)(1ULL << 24) * 4.0 - 2.0);
    }
    return x;
}

/* Runs every kernel that gdl__parallel_for threads on inputs past the
   threshold; out receives all their outputs, one after another. */
#define KN 70000
#define KOUT (40 * KN)
/* the backend's multi-tensor optimizer calls on one tensor (a one-entry CPU table) */
static void sgd1(int64_t n, float *p, const float *g, float *buf, double lr, double momentum, double dampening,
                 double weight_decay, int nesterov, int first_step) {
    gdl__cpu_opt_table tab;
    gdl_opt_hyper h;
    int32_t step = first_step ? 0 : 1;
    memset(&tab, 0, sizeof tab);
    memset(&h, 0, sizeof h);
    h.lr = lr, h.momentum = momentum, h.dampening = dampening, h.weight_decay = weight_decay, h.nesterov = nesterov;
    tab.count = 1;
    tab.t[0].n = n, tab.t[0].p = p, tab.t[0].g = g, tab.t[0].s1 = buf, tab.t[0].hyper = &h, tab.t[0].step = &step;
    gdl__cpu_sgd_multi(&tab);
}
static void adam1(int64_t n, float *p, const float *g, float *m, float *v, double lr, double beta1, double beta2,
                  double eps, double weight_decay, int decoupled, int64_t step) {
    gdl__cpu_opt_table tab;
    gdl_opt_hyper h;
    int32_t done = (int32_t)(step - 1); /* the steps taken before: this one is `step` */
    memset(&tab, 0, sizeof tab);
    memset(&h, 0, sizeof h);
    h.lr = lr, h.beta1 = beta1, h.beta2 = beta2, h.eps = eps, h.weight_decay = weight_decay;
    tab.count = 1;
    tab.t[0].n = n, tab.t[0].p = p, tab.t[0].g = g, tab.t[0].s1 = m, tab.t[0].s2 = v, tab.t[0].hyper = &h;
    tab.t[0].step = &done;
    gdl__cpu_adam_multi(&tab, decoupled);
}

static void run_kernels(float *out) {
    gdl_conv_geom g;
    float *x = rnd(KN * 4, 1), *y = rnd(KN * 4, 2), *w = rnd(KN * 4, 3), *o = out;
    int32_t *idx = (int32_t *)malloc(KN * sizeof(int32_t));
    memset(out, 0, KOUT * sizeof(float));
    gdl__cpu_fill(o, KN, 0.5f);
    o += KN;
    gdl__cpu_unary(GDL_F32, GDL_UN_SIGMOID, KN, x, o, 0);
    o += KN;
    gdl__cpu_unary_backward(GDL_F32, GDL_UN_GELU_ERF, KN, x, y, w, o, 0, 1);
    o += KN;
    gdl__cpu_reduce(GDL_RED_MAX, 70, 100, 10, x, o, idx, 0);
    gdl__cpu_reduce_backward(GDL_RED_MAX, 70, 100, 10, y, idx, o + 700);
    o += KN + 700;
    gdl__cpu_reduce(GDL_RED_MEAN, 70, 100, 10, x, o, NULL, 1);
    gdl__cpu_reduce_backward(GDL_RED_MEAN, 70, 100, 10, y, NULL, o + 700);
    o += KN + 700;
    gdl__cpu_softmax(1, 700, 10, 10, x, o);
    gdl__cpu_softmax_backward(0, 700, 10, 10, y, w, o + KN);
    o += 2 * KN;
    /* 8 x 4 planes of 24 x 24, 3 x 3 windows, stride 1, padding 1 */
    memset(&g, 0, sizeof g);
    g.N = 8; g.C = 4; g.H = 24; g.W = 24; g.KH = 3; g.KW = 3;
    g.SH = g.SW = 1; g.PH = g.PW = 1; g.DH = g.DW = 1; g.OH = 24; g.OW = 24;
    gdl__cpu_im2col(GDL_F32, &g, x, o); /* 8*4*9*576 = 165888 */
    gdl__cpu_col2im(GDL_F32, &g, o, o + 165888);
    o += 165888 + 8 * 4 * 576;
    g.PH = g.PW = 0; g.OH = g.OW = 22; /* every window inside: maxpool's fast path */
    gdl__cpu_maxpool(GDL_F32, &g, x, o, idx);
    o += 8 * 4 * 576;
    g.PH = g.PW = 1; g.OH = g.OW = 24;
    gdl__cpu_maxpool(GDL_F32, &g, x, o, idx);
    gdl__cpu_avgpool(GDL_F32, &g, x, o + 8 * 4 * 576);
    gdl__cpu_avgpool_backward(GDL_F32, &g, y, o + 2 * 8 * 4 * 576);
    o += 3 * 8 * 4 * 576;
    gdl__cpu_dropout(GDL_F32, KN, 0.3, 7, x, o);
    gdl__cpu_dropout_backward(GDL_F32, KN, 0.3, 7, y, o + KN);
    o += 2 * KN;
    { /* batch 64, 16 channels, 8 x 8 */
        float *mean = o + 2 * KN, *inv = mean + 16, *rm = inv + 16, *rv = rm + 16, *gg = rv + 16, *gb = gg + 16;
        int c;
        for (c = 0; c < 16; c++) rv[c] = 1;
        gdl__cpu_batchnorm(GDL_F32, 64, 16, 64, x, w, y, o, mean, inv, rm, rv, 1, 0.1, 1e-5, 0, NULL);
        gdl__cpu_batchnorm_backward(GDL_F32, 64, 16, 64, x, y, NULL, w, mean, inv, 1, o + KN, gg, gb, 1, 0);
        o += 2 * KN + 6 * 16;
    }
    { /* the same with a fused ReLU (its output the backward's mask) */
        float *mean = o + 2 * KN, *inv = mean + 16, *rm = inv + 16, *rv = rm + 16, *gg = rv + 16, *gb = gg + 16;
        int c;
        for (c = 0; c < 16; c++) rv[c] = 1;
        gdl__cpu_batchnorm(GDL_F32, 64, 16, 64, x, w, y, o, mean, inv, rm, rv, 1, 0.1, 1e-5, 1, NULL);
        gdl__cpu_batchnorm_backward(GDL_F32, 64, 16, 64, x, y, o, w, mean, inv, 1, o + KN, gg, gb, 0, 1);
        o += 2 * KN + 6 * 16;
    }
    { /* with a fused GELU (its input kept in pre), [64, 16, 8 x 8] and [700, 20] (blocks of 8 channels) */
        static const int64_t shape[2][3] = {{64, 16, 64}, {700, 20, 1}};
        int k;
        for (k = 0; k < 2; k++) {
            const int64_t N = shape[k][0], C = shape[k][1], S = shape[k][2], n = N * C * S;
            float *pre = o + 2 * n, *mean = pre + n, *inv = mean + C, *rm = inv + C, *rv = rm + C, *gg = rv + C,
                  *gb = gg + C;
            int64_t c;
            for (c = 0; c < C; c++) rv[c] = 1;
            gdl__cpu_batchnorm(GDL_F32, N, C, S, x, w, y, o, mean, inv, rm, rv, 1, 0.1, 1e-5, GDL_ACT_GELU, pre);
            gdl__cpu_batchnorm_backward(GDL_F32, N, C, S, x, y, pre, w, mean, inv, 1, o + n, gg, gb, 0, GDL_ACT_GELU);
            o += 3 * n + 6 * C;
        }
    }
    gdl__cpu_layernorm(700, 100, x, w, y, 1e-5, o, o + KN, o + KN + 700);
    o += KN + 1400;
    memcpy(o, x, KN * sizeof(float));
    memcpy(o + KN, y, KN * sizeof(float));
    sgd1(KN, o, w, o + KN, 0.1, 0.9, 0, 1e-4, 1, 0);
    o += 2 * KN;
    memcpy(o, x, KN * sizeof(float));
    memset(o + KN, 0, 2 * KN * sizeof(float));
    adam1(KN, o, w, o + KN, o + 2 * KN, 1e-3, 0.9, 0.999, 1e-8, 0.01, 1, 3);
    o += 3 * KN;
    gdl_gemm_cpu(0, 1, 150, 130, 140, 1, x, 140, y, 140, 0, o, 130);
    o += 150 * 130;
    gdl__cpu_gemm(GDL_F32, 0, 0, 40, 60, 50, 1, x, 50, 2000, y, 60, 3000, 0, o, 60, 2400, 6); /* a batch: one task each */
    o += 6 * 2400;
    free(x);
    free(y);
    free(w);
    free(idx);
}

TEST test_kernels_same_bits_any_thread_count(void) {
    float *a = (float *)malloc(KOUT * sizeof(float)), *b = (float *)malloc(KOUT * sizeof(float));
    int same;
    gdl_set_num_threads(1);
    run_kernels(a);
    gdl_set_num_threads(3);
    run_kernels(b);
    gdl_set_num_threads(0);
    same = memcmp(a, b, KOUT * sizeof(float)) == 0;
    free(a);
    free(b);
    ASSERTm("1 and 3 threads give different bits", same);
    PASS();
}

/* Adam's vector loop (AVX2 / AVX-512 builds) gives the bits of the plain
   double formula, decoupled weight decay or not, on the vector body and
   the scalar tail (n = 37). */
TEST test_adam_vector_loop_bits(void) {
    enum { n = 37 };
    float p[n], g[n], m[n], v[n], rp[n], rm[n], rv[n];
    int i, k, bad = 0;
    for (k = 0; k < 2; k++) {
        const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
        const int step = 3;
        const double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
        for (i = 0; i < n; i++) {
            rp[i] = p[i] = (float)(0.37 * i - 5.1);
            g[i] = (float)(0.011 * (i % 7) - 0.03);
            rm[i] = m[i] = (float)(0.001 * i);
            rv[i] = v[i] = (float)(1e-5 * (i % 5));
        }
        adam1(n, p, g, m, v, lr, b1, b2, eps, wd, k, step);
        for (i = 0; i < n; i++) {
            double gi = g[i], pi = rp[i];
            if (k) pi -= lr * wd * pi;
            else gi += wd * pi;
            rm[i] = (float)(b1 * rm[i] + (1 - b1) * gi);
            rv[i] = (float)(b2 * rv[i] + (1 - b2) * gi * gi);
            rp[i] = (float)(pi - lr * (rm[i] / bc1) / (sqrt(rv[i] / bc2) + eps));
        }
        bad += memcmp(p, rp, sizeof p) != 0 || memcmp(m, rm, sizeof m) != 0 || memcmp(v, rv, sizeof v) != 0;
    }
    ASSERT_EQm("Adam's update differs from the double formula", 0, bad);
    PASS();
}

/* After the thread count is lowered, the workers started for the higher
   one sit the jobs out: only slots below the count run tasks (the GEMM
   indexes its packing buffers by slot). */
static void slot_task(void *p, int t, int nt) {
    int *max_slot = (int *)p;
    (void)t;
    (void)nt;
    __atomic_fetch_or(max_slot, 1 << gdl__pool_slot, __ATOMIC_RELAXED);
    { /* long enough for every awake worker to try to claim a task */
        double s = 0;
        int i;
        for (i = 0; i < 200000; i++) s += i * 1e-9;
        if (s < 0) __atomic_fetch_or(max_slot, 1 << 30, __ATOMIC_RELAXED); /* never: keeps the loop */
    }
}

TEST test_lowered_thread_count_uses_fewer_workers(void) {
#ifdef GDL__POOL
    int seen = 0, r;
    gdl_set_num_threads(5);
    ASSERT(gdl__pool_acquire());
    gdl__pool_run(5, slot_task, &seen); /* starts 4 workers */
    gdl__pool_release();
    gdl_set_num_threads(2);
    for (r = 0; r < 5; r++) {
        seen = 0;
        ASSERT(gdl__pool_acquire());
        gdl__pool_run(16, slot_task, &seen);
        gdl__pool_release();
        ASSERT_EQm("a worker past the thread count ran a task", 0, seen & ~3);
    }
    gdl_set_num_threads(0);
    PASS();
#else
    SKIPm("built without threads");
#endif
}

/* --- nesting and concurrency -------------------------------------------- */

static void nested_task(void *p, int t, int nt) {
    int *hits = (int *)p;
    (void)nt;
    /* the pool is held: this inner loop runs on this thread */
    gdl__parallel_for(1000, GDL__PAR_MIN + 1, count_part, hits + t * 1000);
}

TEST test_nested_region_runs_serially(void) {
    int *hits = (int *)calloc(4 * 1000, sizeof(int));
    int i, ok = 1;
    gdl_set_num_threads(4);
    ASSERT(gdl__pool_acquire());
    gdl__pool_run(4, nested_task, hits);
    gdl__pool_release();
    gdl_set_num_threads(0);
    for (i = 0; i < 4000; i++) ok &= hits[i] == 1;
    free(hits);
    ASSERTm("a nested loop missed or repeated an index", ok);
    PASS();
}

/* Each thread: parallel loops and GEMMs on its own data, many times. Only
   one holds the pool at a time; the others run serially (the GEMM unpacked). */
typedef struct {
    float A[96 * 80], B[80 * 72], C[96 * 72], ref[96 * 72];
    int hits[50000];
    int ok;
} worker_data;

static void *hammer(void *p) {
    worker_data *d = (worker_data *)p;
    int r, i;
    d->ok = 1;
    for (r = 0; r < 40; r++) {
        memset(d->hits, 0, sizeof d->hits);
        gdl__parallel_for(50000, 50000, count_part, d->hits);
        for (i = 0; i < 50000; i++) d->ok &= d->hits[i] == 1;
        gdl_gemm_cpu(0, 0, 96, 72, 80, 1, d->A, 80, d->B, 72, 0, d->C, 72);
        d->ok &= memcmp(d->C, d->ref, sizeof d->C) == 0;
    }
    gdl_thread_cleanup(); /* a GEMM on a thread that found the pool busy packed into this thread's buffers */
    return NULL;
}

TEST test_concurrent_callers(void) {
    enum { NT = 3 };
    pthread_t th[NT];
    worker_data *d = (worker_data *)calloc(NT + 1, sizeof(worker_data));
    int t, i, ok = 1;
    gdl_set_num_threads(2);
    for (t = 0; t <= NT; t++) {
        for (i = 0; i < 96 * 80; i++) d[t].A[i] = (float)((i * 7 + t) % 13) - 6;
        for (i = 0; i < 80 * 72; i++) d[t].B[i] = (float)((i * 5 + t) % 11) - 5;
        gdl_gemm_cpu(0, 0, 96, 72, 80, 1, d[t].A, 80, d[t].B, 72, 0, d[t].ref, 72);
    }
    for (t = 0; t < NT; t++) ASSERT_EQ(0, pthread_create(&th[t], NULL, hammer, &d[t]));
    hammer(&d[NT]); /* and this thread */
    for (t = 0; t < NT; t++) pthread_join(th[t], NULL);
    for (t = 0; t <= NT; t++) ok &= d[t].ok;
    free(d);
    gdl_set_num_threads(0);
    ASSERTm("a concurrent loop or GEMM gave a wrong result", ok);
    PASS();
}

/* A child of fork() after the workers started: its parallel GEMM must
   finish (libgomp's would hang). The parent kills it after 20 s. */
#if defined(__SANITIZE_THREAD__)
#define TP_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TP_TSAN 1
#endif
#endif
TEST test_fork_child_uses_pool(void) {
#if defined(_WIN32)
    SKIPm("Windows has no fork(): a pool's fork-safety is a POSIX concern");
#elif defined(TP_TSAN)
    SKIPm("ThreadSanitizer does not support threads started after a multi-threaded fork");
#else
    float *A = rnd(200 * 200, 5), *C = (float *)malloc(200 * 200 * sizeof(float));
    pid_t pid;
    int status = 0, waited = 0;
    gdl_set_num_threads(2);
    gdl_gemm_cpu(0, 0, 200, 200, 200, 1, A, 200, A, 200, 0, C, 200); /* workers running */
    pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        float *c2 = (float *)malloc(200 * 200 * sizeof(float));
        gdl_gemm_cpu(0, 0, 200, 200, 200, 1, A, 200, A, 200, 0, c2, 200);
        _exit(memcmp(C, c2, 200 * 200 * sizeof(float)) == 0 ? 0 : 3);
    }
    while (waited < 2000 && waitpid(pid, &status, WNOHANG) == 0) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
        waited++;
    }
    if (waited >= 2000) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    free(A);
    free(C);
    gdl_set_num_threads(0);
    ASSERTm("the forked child hung", waited < 2000);
    ASSERT(WIFEXITED(status));
    ASSERT_EQm("the child's GEMM differs", 0, WEXITSTATUS(status));
    PASS();
#endif
}

SUITE(pool) {
    RUN_TEST(test_parallel_for_covers_each_index_once);
    RUN_TEST(test_thread_count_api_and_env);
    RUN_TEST(test_kernels_same_bits_any_thread_count);
    RUN_TEST(test_adam_vector_loop_bits);
    RUN_TEST(test_nested_region_runs_serially);
    RUN_TEST(test_lowered_thread_count_uses_fewer_workers);
    RUN_TEST(test_concurrent_callers);
    RUN_TEST(test_fork_child_uses_pool);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_SUITE(pool);
    gdl_shutdown();
    HARNESS_MAIN_END();
}
