/* bench/gemm.c — speed of gpudl's built-in CPU GEMM (gdl_gemm_cpu) against
   OpenBLAS cblas_sgemm, single-threaded and with all threads.

   Build and run (from the repository root):

       cc -O3 -march=native -DGPUDL_BENCH_OPENBLAS bench/gemm.c \
          -lopenblas -lm -pthread -o build/bench_gemm
       ./build/bench_gemm

   Without -DGPUDL_BENCH_OPENBLAS (and -lopenblas) only the built-in kernel
   is timed, and it is checked against a double-precision reference on a
   sample of elements instead of against OpenBLAS.
   Arguments, if any, pick the shapes whose name contains one of them
   (./build/bench_gemm 1024 2048: the squares of those sizes only).
   Define GEMM_BENCH_NO_IMPL to link gdl_gemm_cpu from another object instead
   of compiling gpudl's implementation into this file.

   Shapes: square n x n x n for n = 128 ... 2048, every GEMM of one
   training step of a 784-128-10 MLP at batch 64 (y = x·Wᵀ forward, dW = gyᵀ·x
   and dx = gy·W backward), the linear layers of examples/char_gpt.c's
   default model and the LSTM of examples/text_classify.c. Row-major;
   C = A·B with alpha = 1, beta = 0.

   Peak: the FMA peak of one thread is measured first (16 independent
   chains of the widest fused multiply-adds the build targets; the best of
   three), and each figure is also given as a share of it ("%pk"; of
   threads x peak for the multi-threaded column). Without OpenBLAS the
   1-thread and the all-thread calls are timed in turn, so "speedup" is
   their ratio under the same load.

   Timing: one warm-up call, then the number of calls that lasts >= 50 ms is
   found; ours and OpenBLAS are timed in turn, 7 such stretches each,
   interleaved (a machine shared with other busy processes slows both
   alike), and each side's median (monotonic clock) is reported as
   GFLOP/s = 2·M·N·K / time. Inputs are uniform random in [-1, 1).
   "err" is max|C - C_ref| / max|C_ref|, C_ref from OpenBLAS (or double).
   The first lines name the CPU model and the micro-kernel compiled in
   (gdl_gemm_kernel_name(): set by the -march flags). The last line says
   whether the target "built-in single-threaded at n = 1024 >= 0.5x
   OpenBLAS single-threaded" is met.

   bf16 columns: where gdl_cpu_set_fp32_precision("bf16") is granted (a CPU
   with AMX, on Linux 5.16 or later, or with AVX512-BF16; a -march=native
   build), the same calls with the operands rounded to bf16 (on the tile
   unit, or by vdpbf16ps), timed interleaved
   with the "ieee" ones (1 thread, then all): GFLOP/s, "x ieee" (the ieee
   time over the bf16 time: the speedup), and their "err" against the same
   reference (~1e-3: bf16 keeps 8 significant bits). Elsewhere the first
   lines say "refused" and the columns are left out. */
#if defined(__linux__) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 199309L /* clock_gettime under -std=c99 */
#endif
#ifndef GEMM_BENCH_NO_IMPL
#define GPUDL_IMPLEMENTATION
#endif
#include "../gpudl.h"
#include "bench_cpu.h"
#ifndef GDL__TILE_NAME
#define GDL__TILE_NAME "none" /* (no bf16 path in this build: never printed) */
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef GPUDL_BENCH_OPENBLAS
#include <cblas.h>
void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);
#endif


typedef struct shape {
    const char *name;
    int transA, transB, M, N, K;
} shape;

static const shape shapes[] = {
    {"square 128", 0, 0, 128, 128, 128},
    {"square 256", 0, 0, 256, 256, 256},
    {"square 512", 0, 0, 512, 512, 512},
    {"square 1024", 0, 0, 1024, 1024, 1024},
    {"square 2048", 0, 0, 2048, 2048, 2048},
    /* 784-128-10 MLP, batch 64: Linear W is [out, in], y = x·Wᵀ */
    {"fc1 fwd  y=x.W1^T", 0, 1, 64, 128, 784},
    {"fc2 fwd  y=h.W2^T", 0, 1, 64, 10, 128},
    {"fc2 bwd dW2=gy^T.h", 1, 0, 10, 128, 64},
    {"fc2 bwd  dh=gy.W2", 0, 0, 64, 128, 10},
    {"fc1 bwd dW1=gy^T.x", 1, 0, 128, 784, 64},
    {"fc1 bwd  dx=gy.W1", 0, 0, 64, 784, 128},
    /* examples/char_gpt.c's defaults: batch 12 x context 64 = 768 rows, width 128 */
    {"gpt qkv  y=x.Wqkv^T", 0, 1, 768, 384, 128},
    {"gpt fc   y=x.Wfc^T", 0, 1, 768, 512, 128},
    {"gpt proj y=h.Wp^T", 0, 1, 768, 128, 512},
    {"gpt fc dW=gy^T.x", 1, 0, 512, 128, 768},
    {"gpt fc  dx=gy.W", 0, 0, 768, 128, 512},
    /* examples/text_classify.c's LSTM(64, 128), batch 128, 64 steps: the input projection of all steps,
       then per step the hidden GEMM and its two backward GEMMs */
    {"lstm in  gx=x.Wih^T", 0, 1, 8192, 512, 64},
    {"lstm hh  gh=h.Whh^T", 0, 1, 128, 512, 128},
    {"lstm hh  dh=gy.Whh", 0, 0, 128, 128, 512},
    {"lstm hh dW=gy^T.h", 1, 0, 512, 128, 128},
    /* examples/seq2seq.c's default Transformer (width 128, ff 512), the decoder's 64 x 21 rows */
    {"s2s qkv  y=x.Wqkv^T", 0, 1, 1344, 384, 128},
    {"s2s fc   y=x.Wfc^T", 0, 1, 1344, 512, 128},
    {"s2s proj y=h.Wp^T", 0, 1, 1344, 128, 512},
    {"s2s fc dW=gy^T.x", 1, 0, 512, 128, 1344},
    {"s2s proj dW=gy^T.h", 1, 0, 128, 512, 1344},
    {"s2s fc  dx=gy.W", 0, 0, 1344, 128, 512},
    {"s2s proj dh=gy.Wp", 0, 0, 1344, 512, 128},
};
#define NSHAPES (int)(sizeof shapes / sizeof shapes[0])

/* GEMM_BENCH_CLOCK=thread: the calling thread's CPU time instead of the
   monotonic clock, for the 1-thread columns on a machine shared with other
   busy processes (the time slices they take are not counted; the caches
   they disturb still are). The multi-threaded columns are nonsense then.
   GEMM_BENCH_CLOCK=process: the CPU time of all the process's threads:
   the multi-threaded column is then the work the threads do together
   (panels packed twice and spinning waits included), and "speedup" the
   1-thread work over it: what the threads cost, measurable on a busy
   machine. */
static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(bench_clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float rand_uniform(void) { /* xorshift64*, [-1, 1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float)((rng_state * 0x2545F4914F6CDD1Dull) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

#ifndef GPUDL_BENCH_OPENBLAS
static int rand_index(int n) { return (int)((rand_uniform() + 1.0f) * 0.5f * (float)n) % n; }
#endif

typedef struct problem {
    const shape *s;
    gdl_real *A, *B, *C;
    int lda, ldb, ldc;
#ifdef GPUDL_BENCH_OPENBLAS
    float *Af, *Bf, *Cf; /* OpenBLAS is single precision even in a GPUDL_DOUBLE build */
#endif
} problem;

static void run_builtin(const problem *p) {
    const shape *s = p->s;
    gdl_gemm_cpu(s->transA, s->transB, s->M, s->N, s->K, 1, p->A, p->lda, p->B, p->ldb, 0, p->C, p->ldc);
}

/* the same product with the f32 precision "bf16" (AMX), then "ieee" again
   for the other calls (setting it is a string compare) */
static void run_bf16(const problem *p) {
    gdl_cpu_set_fp32_precision("bf16");
    run_builtin(p);
    gdl_cpu_set_fp32_precision("ieee");
}

/* the built-in GEMM on 1 thread and on all (bench_threads), for timing the two in turn */
static int bench_threads = 1;
#ifndef GPUDL_BENCH_OPENBLAS
static void run_builtin_1t(const problem *p) {
    gdl_set_num_threads(1);
    run_builtin(p);
}
static void run_builtin_nt(const problem *p) {
    gdl_set_num_threads(bench_threads);
    run_builtin(p);
}
static void run_bf16_1t(const problem *p) {
    gdl_set_num_threads(1);
    run_bf16(p);
}
static void run_bf16_nt(const problem *p) {
    gdl_set_num_threads(bench_threads);
    run_bf16(p);
}
#endif

#ifdef GPUDL_BENCH_OPENBLAS
static void run_openblas(const problem *p) {
    const shape *s = p->s;
    cblas_sgemm(CblasRowMajor, s->transA ? CblasTrans : CblasNoTrans, s->transB ? CblasTrans : CblasNoTrans, s->M,
                s->N, s->K, 1.0f, p->Af, p->lda, p->Bf, p->ldb, 0.0f, p->Cf, p->ldc);
}
#endif

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* How many calls of fn last >= 50 ms (after one warm-up call: first-touch,
   packing buffers, thread start). */
static long calls_for_50ms(void (*fn)(const problem *), const problem *p) {
    long iters = 1, i;
    double t0, dt;
    fn(p);
    for (;;) {
        t0 = now_s();
        for (i = 0; i < iters; i++) fn(p);
        dt = now_s() - t0;
        if (dt >= 0.05) return iters;
        iters = dt < 0.005 ? iters * 10 : (long)(iters * 0.06 / dt) + 1;
    }
}

static double seconds_per_call(void (*fn)(const problem *), const problem *p, long iters) {
    double t0 = now_s();
    long i;
    for (i = 0; i < iters; i++) fn(p);
    return (now_s() - t0) / (double)iters;
}

/* The measured FMA peak of one thread, GFLOP/s: 16 independent chains of
   vector fused multiply-adds (more than the FMA units' latency x count on
   any current core) for >= 50 ms, the widest vectors the build targets, as
   the micro-kernel. */
#if defined(__AVX512F__)
#include <immintrin.h>
#define PEAK_W 16
typedef __m512 peak_v;
#define PEAK_SET(x) _mm512_set1_ps(x)
#define PEAK_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define PEAK_SUM(v) _mm512_reduce_add_ps(v)
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define PEAK_W 8
typedef __m256 peak_v;
#define PEAK_SET(x) _mm256_set1_ps(x)
#define PEAK_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
static float peak_sum8(__m256 v) {
    float f[8];
    int i;
    _mm256_storeu_ps(f, v);
    for (i = 1; i < 8; i++) f[0] += f[i];
    return f[0];
}
#define PEAK_SUM(v) peak_sum8(v)
#else
#define PEAK_W 1
typedef float peak_v;
#define PEAK_SET(x) (x)
#define PEAK_FMA(a, b, c) ((a) * (b) + (c))
#define PEAK_SUM(v) (v)
#endif
static volatile float peak_sink;
static double fma_peak_gflops(void) {
    const peak_v m = PEAK_SET(0.999999f), a = PEAK_SET(1e-7f);
    peak_v c[16];
    long iters = 1 << 16, i, reps = 0;
    double t0, dt = 0;
    int k;
    for (k = 0; k < 16; k++) c[k] = PEAK_SET((float)k);
    t0 = now_s();
    while (dt < 0.05) {
        for (i = 0; i < iters; i++)
            for (k = 0; k < 16; k++) c[k] = PEAK_FMA(c[k], m, a);
        reps++;
        dt = now_s() - t0;
    }
    for (k = 1; k < 16; k++) c[0] = c[0] + c[k] * 0; /* keep every chain live */
    peak_sink = PEAK_SUM(c[0]);
    return 2.0 * PEAK_W * 16.0 * (double)iters * (double)reps / dt * 1e-9;
}

#define REPEATS 7
#define MAX_TIMED 4
typedef void (*bench_fn)(const problem *);
/* Median seconds per call of each of the n functions fn over REPEATS
   stretches of >= 50 ms each, interleaved (fn[0], fn[1], ..., fn[0], ...)
   so that another process busy on the machine slows them alike. */
static void time_interleaved(const bench_fn *fn, int n, const problem *p, double *t_out) {
    double t[MAX_TIMED][REPEATS];
    long calls[MAX_TIMED];
    int r, f;
    for (f = 0; f < n; f++) calls[f] = calls_for_50ms(fn[f], p);
    for (r = 0; r < REPEATS; r++)
        for (f = 0; f < n; f++) t[f][r] = seconds_per_call(fn[f], p, calls[f]);
    for (f = 0; f < n; f++) {
        qsort(t[f], REPEATS, sizeof t[f][0], cmp_double);
        t_out[f] = t[f][REPEATS / 2];
    }
}

static void set_threads(int n) {
    gdl_set_num_threads(n);
#ifdef GPUDL_BENCH_OPENBLAS
    openblas_set_num_threads(n);
#endif
}

/* max|C - ref| / max|ref|, C from run (run_builtin or run_bf16) */
static double check(const problem *p, bench_fn run) {
    const shape *s = p->s;
    double maxdiff = 0, maxref = 0;
    int i, j;
#ifdef GPUDL_BENCH_OPENBLAS
    run(p);
    run_openblas(p);
    for (i = 0; i < s->M; i++)
        for (j = 0; j < s->N; j++) {
            double c = p->C[(size_t)i * p->ldc + j], ref = p->Cf[(size_t)i * p->ldc + j];
            if (fabs(c - ref) > maxdiff || c != c) maxdiff = c != c ? INFINITY : fabs(c - ref);
            if (fabs(ref) > maxref) maxref = fabs(ref);
        }
#else
    /* a double-precision reference on <= 4096 sampled elements */
    int n;
    run(p);
    for (n = 0; n < 4096 && n < s->M * s->N; n++) {
        double ref = 0, c;
        int k;
        i = s->M * s->N <= 4096 ? n / s->N : rand_index(s->M);
        j = s->M * s->N <= 4096 ? n % s->N : rand_index(s->N);
        for (k = 0; k < s->K; k++) {
            double a = s->transA ? p->A[(size_t)k * p->lda + i] : p->A[(size_t)i * p->lda + k];
            double b = s->transB ? p->B[(size_t)j * p->ldb + k] : p->B[(size_t)k * p->ldb + j];
            ref += a * b;
        }
        c = p->C[(size_t)i * p->ldc + j];
        if (fabs(c - ref) > maxdiff || c != c) maxdiff = c != c ? INFINITY : fabs(c - ref);
        if (fabs(ref) > maxref) maxref = fabs(ref);
    }
#endif
    return maxref > 0 ? maxdiff / maxref : maxdiff;
}

int main(int argc, char **argv) {
    int have_bf16; /* "bf16" granted: its columns are timed */
    int nthreads = gdl_get_num_threads(), si, target_known = 0, target_met = 0;
    double target_ratio = 0, peak = 0;
    if (getenv("GEMM_BENCH_CLOCK") && !strcmp(getenv("GEMM_BENCH_CLOCK"), "thread"))
        bench_clock = CLOCK_THREAD_CPUTIME_ID;
    if (getenv("GEMM_BENCH_CLOCK") && !strcmp(getenv("GEMM_BENCH_CLOCK"), "process"))
        bench_clock = CLOCK_PROCESS_CPUTIME_ID;
    printf("cpu: %s\n", bench_cpu_model());
    printf("gpudl GEMM benchmark: gdl_gemm_cpu (%s, micro-kernel %s)", sizeof(gdl_real) == 4 ? "float" : "double",
           gdl_gemm_kernel_name());
#ifdef GPUDL_BENCH_OPENBLAS
    printf(" vs OpenBLAS cblas_sgemm (core %s)", openblas_get_corename());
#endif
    if (bench_clock == CLOCK_THREAD_CPUTIME_ID) printf("\nclock: the calling thread's CPU time (GEMM_BENCH_CLOCK=thread)");
    if (bench_clock == CLOCK_PROCESS_CPUTIME_ID)
        printf("\nclock: the process's CPU time, all threads' (GEMM_BENCH_CLOCK=process): \"speedup\" is the work of "
               "1 thread over the work of all, waits included (1.00: the threads add no work)");
    printf("\nthreads: 1 and %d (all); GFLOP/s, median of 7 interleaved repeats of >= 50 ms; ratio = built-in / OpenBLAS\n",
           nthreads);
    { /* other busy processes make the multi-threaded columns meaningless: say so */
        FILE *f = fopen("/proc/loadavg", "r");
        double load = 0;
        if (f) {
            if (fscanf(f, "%lf", &load) == 1 && load > 0.5)
                printf("note: load average %.2f before start: other busy processes skew the %d-thread columns\n",
                       load, nthreads);
            fclose(f);
        }
    }
    { /* the best of three: a busy machine only lowers it */
        int r;
        for (r = 0; r < 3; r++) {
            double g = fma_peak_gflops();
            if (g > peak) peak = g;
        }
        printf("measured FMA peak: %.1f GFLOP/s per thread (%d-wide fused multiply-adds); %%pk: of it (x %d threads "
               "for the %d-thread column)\n", peak, PEAK_W, nthreads, nthreads);
    }
    bench_threads = nthreads;
    have_bf16 = gdl_cpu_set_fp32_precision("bf16") == 0;
    if (have_bf16)
        printf("fp32 precision \"bf16\" (" GDL__TILE_NAME "): granted; its columns: GFLOP/s, x ieee = ieee time / bf16 time "
               "(interleaved with the ieee calls), err\n");
    else
        printf("fp32 precision \"bf16\": refused (%s); no bf16 columns\n", gdl_last_error());
    gdl_cpu_set_fp32_precision("ieee");
    printf("\n");
#ifdef GPUDL_BENCH_OPENBLAS
    printf("%-20s %2s %4s %4s %4s | %8s %8s %5s | %8s %8s %5s | %8s", "shape", "op", "M", "N", "K", "ours 1T",
           "oblas 1T", "ratio", "ours", "oblas", "ratio", "err");
#else
    printf("%-20s %2s %4s %4s %4s | %8s %4s | %8s %4s %7s | %8s", "shape", "op", "M", "N", "K", "ours 1T", "%pk",
           "ours", "%pk", "speedup", "err");
#endif
    if (have_bf16) printf(" | %8s %6s | %8s %6s | %8s", "bf16 1T", "x ieee", "bf16", "x ieee", "bf16 err");
    printf("\n");
    for (si = 0; si < NSHAPES; si++) {
        const shape *s = &shapes[si];
        problem p;
        size_t na, nb, nc, i;
        double flop = 2.0 * s->M * s->N * s->K, err, err_bf = 0, t[2 * MAX_TIMED];
        int ai, wanted = argc <= 1;
        for (ai = 1; ai < argc; ai++) wanted |= strstr(s->name, argv[ai]) != NULL;
        if (!wanted) continue;
        memset(&p, 0, sizeof p);
        p.s = s;
        p.lda = s->transA ? s->M : s->K;
        p.ldb = s->transB ? s->K : s->N;
        p.ldc = s->N;
        na = (size_t)s->M * s->K;
        nb = (size_t)s->K * s->N;
        nc = (size_t)s->M * s->N;
        p.A = (gdl_real *)malloc(na * sizeof(gdl_real));
        p.B = (gdl_real *)malloc(nb * sizeof(gdl_real));
        p.C = (gdl_real *)malloc(nc * sizeof(gdl_real));
        if (!p.A || !p.B || !p.C) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        for (i = 0; i < na; i++) p.A[i] = rand_uniform();
        for (i = 0; i < nb; i++) p.B[i] = rand_uniform();
        for (i = 0; i < nc; i++) p.C[i] = rand_uniform();
#ifdef GPUDL_BENCH_OPENBLAS
        p.Af = (float *)malloc(na * sizeof(float));
        p.Bf = (float *)malloc(nb * sizeof(float));
        p.Cf = (float *)malloc(nc * sizeof(float));
        if (!p.Af || !p.Bf || !p.Cf) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        for (i = 0; i < na; i++) p.Af[i] = (float)p.A[i];
        for (i = 0; i < nb; i++) p.Bf[i] = (float)p.B[i];
        for (i = 0; i < nc; i++) p.Cf[i] = (float)p.C[i];
#endif
        set_threads(nthreads);
        {
            const uint64_t sample = rng_state; /* (without OpenBLAS: the same sampled elements for bf16) */
            err = check(&p, run_builtin);
            if (have_bf16) {
                const uint64_t after = rng_state;
                rng_state = sample;
                err_bf = check(&p, run_bf16);
                rng_state = after;
            }
        }

        set_threads(1);
#ifdef GPUDL_BENCH_OPENBLAS
        { /* t: ours, OpenBLAS (, bf16) at 1 thread, then at all */
            const bench_fn fn[3] = {run_builtin, run_openblas, run_bf16};
            const int n = have_bf16 ? 3 : 2;
            time_interleaved(fn, n, &p, t);
            set_threads(nthreads);
            time_interleaved(fn, n, &p, t + n);
            printf("%-20s %c%c %4d %4d %4d | %8.1f %8.1f %5.2f | %8.1f %8.1f %5.2f | %8.1e", s->name,
                   s->transA ? 'T' : 'N', s->transB ? 'T' : 'N', s->M, s->N, s->K, flop / t[0] * 1e-9,
                   flop / t[1] * 1e-9, t[1] / t[0], flop / t[n] * 1e-9, flop / t[n + 1] * 1e-9, t[n + 1] / t[n], err);
            if (have_bf16)
                printf(" | %8.1f %5.2fx | %8.1f %5.2fx | %8.1e", flop / t[2] * 1e-9, t[0] / t[2], flop / t[5] * 1e-9,
                       t[3] / t[5], err_bf);
            if (s->M == 1024 && s->N == 1024 && s->K == 1024) {
                target_known = 1;
                target_ratio = t[1] / t[0];
                target_met = target_ratio >= 0.5;
            }
            free(p.Af);
            free(p.Bf);
            free(p.Cf);
        }
#else
        { /* 1 and all threads (, and bf16 on each) in turn: the ratios of one run, under the same load */
            const bench_fn fn[4] = {run_builtin_1t, run_builtin_nt, run_bf16_1t, run_bf16_nt};
            time_interleaved(fn, have_bf16 ? 4 : 2, &p, t);
            printf("%-20s %c%c %4d %4d %4d | %8.1f %3.0f%% | %8.1f %3.0f%% %6.2fx | %8.1e", s->name,
                   s->transA ? 'T' : 'N', s->transB ? 'T' : 'N', s->M, s->N, s->K, flop / t[0] * 1e-9,
                   100 * flop / t[0] * 1e-9 / peak, flop / t[1] * 1e-9, 100 * flop / t[1] * 1e-9 / (peak * nthreads),
                   t[0] / t[1], err);
            if (have_bf16)
                printf(" | %8.1f %5.2fx | %8.1f %5.2fx | %8.1e", flop / t[2] * 1e-9, t[0] / t[2], flop / t[3] * 1e-9,
                       t[1] / t[3], err_bf);
        }
#endif
        printf("\n");
        fflush(stdout);
        free(p.A);
        free(p.B);
        free(p.C);
    }
    printf("\n");
    if (target_known)
        printf("target: built-in single-threaded at n=1024 >= 0.5x OpenBLAS single-threaded: %s (%.2fx)\n",
               target_met ? "MET" : "NOT MET", target_ratio);
    else
        printf("target: built-in single-threaded at n=1024 >= 0.5x OpenBLAS single-threaded: unknown "
               "(build with -DGPUDL_BENCH_OPENBLAS -lopenblas)\n");
    return 0;
}
