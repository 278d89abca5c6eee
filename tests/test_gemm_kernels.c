/* test_gemm_kernels.c — the CPU GEMM micro-kernel a build selects (AVX-512,
   AVX2, NEON or portable C) against a double-precision reference, against
   the exact sums it promises (one fused chain per element on the SIMD paths)
   and against the portable kernel, at shapes that take every edge path of
   both: M, N around MR/NR and past MC/NC, K across several K blocks, all
   four transposes, padded leading dimensions, beta 0 (C not read), 1 and
   other, several threads, the unpacked fallback (inside a parallel region,
   and when the packing buffer cannot be allocated).

   Built from this one file twice and linked: compiled with -DTGK_PORTABLE_TU
   it is only the portable kernel (gpudl.h with GPUDL_GEMM_PORTABLE, all
   static) behind tgk_portable_gemm(); without it, the test program, with the
   kernel the compiler flags select. -DTGK_EXPECT="\"avx2\"" makes the test
   check that this build selected the kernel whose name starts so. */
#include <math.h>
#include <stdlib.h>

void tgk_portable_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                       int ldb, float beta, float *C, int ldc);
const char *tgk_portable_name(void);

#ifdef TGK_PORTABLE_TU

#define GPUDL_STATIC
#define GPUDL_GEMM_PORTABLE
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"

void tgk_portable_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                       int ldb, float beta, float *C, int ldc) {
    gdl_gemm_cpu(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
const char *tgk_portable_name(void) { return gdl_gemm_kernel_name(); }

#else /* the test program */

/* allocations can be made to fail, to reach the unpacked fallback */
static int fail_mallocs;
static void *tgk_malloc(size_t n) { return fail_mallocs ? NULL : malloc(n); }
static void *tgk_realloc(void *p, size_t n) { return fail_mallocs ? NULL : realloc(p, n); }
#define GPUDL_MALLOC(n) tgk_malloc(n)
#define GPUDL_REALLOC(p, n) tgk_realloc(p, n)
#define GPUDL_FREE(p) free(p)
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"
#include <float.h>
#include <string.h>

#if defined(GDL__GEMM_CBLAS) || defined(GPUDL_DOUBLE)
#error "test_gemm_kernels tests the built-in float kernels: build without GPUDL_CBLAS and GPUDL_DOUBLE"
#endif

#if defined(GDL__GEMM_AVX512) || defined(GDL__GEMM_AVX2) || defined(GDL__GEMM_NEON)
#define TGK_FUSED 1 /* the selected kernel sums with fused multiply-adds */
#else
#define TGK_FUSED 0
#endif
/* Whether the portable kernel's acc + a*b stays unfused: gcc in ISO C mode
   (-std=c99) does not contract, and nothing can where the target has no
   FMA instruction. Elsewhere its exact bits are not checked. */
#if (defined(__STRICT_ANSI__) && defined(__GNUC__) && !defined(__clang__)) || \
    (!defined(__FMA__) && !defined(__aarch64__) && !defined(__ARM_FEATURE_FMA))
#define TGK_PORTABLE_EXACT 1
#else
#define TGK_PORTABLE_EXACT 0
#endif

static const float SENTINEL = 12345.0f;

typedef struct gemm_case {
    int ta, tb, M, N, K, lda, ldb, ldc;
    float alpha, beta;
    float *A, *B, *C0; /* inputs; C0 is C before the call */
} gemm_case;

static unsigned long long rng_state = 88172645463325252ULL;
static float urand(void) { /* xorshift64: uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 40) / (double)(1ULL << 23) - 1.0);
}

static float *alloc_fill(size_t n) {
    float *p = (float *)malloc((n ? n : 1) * sizeof(float));
    size_t i;
    for (i = 0; i < n; i++) p[i] = urand();
    return p;
}

/* A and B with padded leading dimensions, C with 5 columns of padding set to
   SENTINEL. beta == 0: C's valid part is NaN, which must never be read. */
static void case_init(gemm_case *g, int ta, int tb, int M, int N, int K, float alpha, float beta) {
    const int arows = ta ? K : M, acols = ta ? M : K, brows = tb ? N : K, bcols = tb ? K : N;
    int i, j;
    g->ta = ta; g->tb = tb; g->M = M; g->N = N; g->K = K;
    g->alpha = alpha; g->beta = beta;
    g->lda = acols + 3;
    g->ldb = bcols + 2;
    g->ldc = N + 5;
    g->A = alloc_fill((size_t)arows * g->lda);
    g->B = alloc_fill((size_t)brows * g->ldb);
    g->C0 = alloc_fill((size_t)M * g->ldc);
    for (i = 0; i < M; i++)
        for (j = 0; j < g->ldc; j++)
            if (j >= N) g->C0[(size_t)i * g->ldc + j] = SENTINEL;
            else if (beta == 0) g->C0[(size_t)i * g->ldc + j] = (float)NAN;
}

static void case_free(gemm_case *g) {
    free(g->A);
    free(g->B);
    free(g->C0);
}

static float a_at(const gemm_case *g, int i, int k) {
    return g->ta ? g->A[(size_t)k * g->lda + i] : g->A[(size_t)i * g->lda + k];
}
static float b_at(const gemm_case *g, int k, int j) {
    return g->tb ? g->B[(size_t)j * g->ldb + k] : g->B[(size_t)k * g->ldb + j];
}

/* The exact result promised for alpha == 1, beta in {0, 1}: per K block (as
   gdl_gemm_cpu cuts K), one chain of multiply-adds, fused or not, then added
   to C. With alpha 1 and beta 0 or 1 no product is left for a compiler to
   contract, so this holds whatever -ffp-contract says about the library. */
static float exact_elem(const gemm_case *g, int i, int j, int fused) {
    const int kc_blk = gdl__gemm_block(g->K, GDL__GEMM_KC, 1);
    float c = g->C0[(size_t)i * g->ldc + j];
    int pc, k;
    for (pc = 0; pc < g->K; pc += kc_blk) {
        const int kend = pc + kc_blk < g->K ? pc + kc_blk : g->K;
        float acc = 0;
        for (k = pc; k < kend; k++) {
            if (fused) {
                acc = fmaf(a_at(g, i, k), b_at(g, k, j), acc);
            } else {
                volatile float p = a_at(g, i, k) * b_at(g, k, j); /* rounded on its own */
                acc = acc + p;
            }
        }
        c = (pc == 0 && g->beta == 0) ? acc : acc + c;
    }
    return c;
}

/* Checks C (as computed by some kernel) against the double reference within
   the forward error bound of a K-term sum, the padding against SENTINEL, and
   when exact >= 0 against exact_elem(.., exact) bit for bit. */
static enum harness_result check_c(const char *who, const gemm_case *g, const float *C, int exact) {
    int i, j, k;
    for (i = 0; i < g->M; i++) {
        for (j = 0; j < g->ldc; j++) {
            const float got = C[(size_t)i * g->ldc + j];
            double ref = 0, mag = 0, tol;
            if (j >= g->N) {
                if (got != SENTINEL)
                    FAILf("%s: M=%d N=%d K=%d ta=%d tb=%d: padding C[%d][%d] written (%g)", who, g->M, g->N, g->K,
                          g->ta, g->tb, i, j, (double)got);
                continue;
            }
            for (k = 0; k < g->K; k++) {
                const double p = (double)a_at(g, i, k) * b_at(g, k, j);
                ref += p;
                mag += fabs(p);
            }
            ref *= g->alpha;
            mag *= fabs(g->alpha);
            if (g->beta != 0) {
                ref += (double)g->beta * g->C0[(size_t)i * g->ldc + j];
                mag += fabs((double)g->beta * g->C0[(size_t)i * g->ldc + j]);
            }
            /* |error| <= (K + 2) u * sum |terms| with u = FLT_EPSILON / 2 */
            tol = (g->K + 3) * (double)FLT_EPSILON * mag + 1e-30;
            if (!(fabs(got - ref) <= tol))
                FAILf("%s: M=%d N=%d K=%d ta=%d tb=%d alpha=%g beta=%g: C[%d][%d] = %.9g, reference %.9g (tol %.3g)",
                      who, g->M, g->N, g->K, g->ta, g->tb, (double)g->alpha, (double)g->beta, i, j, (double)got, ref,
                      tol);
            if (exact >= 0) {
                const float e = exact_elem(g, i, j, exact);
                if (memcmp(&e, &got, sizeof e) != 0)
                    FAILf("%s: M=%d N=%d K=%d ta=%d tb=%d beta=%g: C[%d][%d] = %a, exact sum %a", who, g->M, g->N,
                          g->K, g->ta, g->tb, (double)g->beta, i, j, (double)got, (double)e);
            }
        }
    }
    return HARNESS_PASS;
}

static int exact_mode(const gemm_case *g, int fused, int exact_ok) {
    return (exact_ok && g->alpha == 1 && (g->beta == 0 || g->beta == 1)) ? fused : -1;
}

/* Runs one case through the selected and the portable kernel and checks both. */
static enum harness_result run_case(int ta, int tb, int M, int N, int K, float alpha, float beta) {
    gemm_case g;
    const size_t nc = (size_t)M * (N + 5);
    float *cs = (float *)malloc(nc * sizeof(float)), *cp = (float *)malloc(nc * sizeof(float));
    enum harness_result r;
    case_init(&g, ta, tb, M, N, K, alpha, beta);
    memcpy(cs, g.C0, nc * sizeof(float));
    memcpy(cp, g.C0, nc * sizeof(float));
    gdl_gemm_cpu(ta, tb, M, N, K, alpha, g.A, g.lda, g.B, g.ldb, beta, cs, g.ldc);
    tgk_portable_gemm(ta, tb, M, N, K, alpha, g.A, g.lda, g.B, g.ldb, beta, cp, g.ldc);
    r = check_c(gdl_gemm_kernel_name(), &g, cs, exact_mode(&g, TGK_FUSED, TGK_FUSED || TGK_PORTABLE_EXACT));
    if (r == HARNESS_PASS) r = check_c("portable", &g, cp, exact_mode(&g, 0, TGK_PORTABLE_EXACT));
    case_free(&g);
    free(cs);
    free(cp);
    return r;
}

/* ---- tests ---- */

TEST test_selected_kernel(void) {
    printf("\n  selected kernel: %s (MR=%d NR=%d MC=%d KC=%d NC=%d), reference: %s\n", gdl_gemm_kernel_name(),
           GDL__GEMM_MR, GDL__GEMM_NR, GDL__GEMM_MC, GDL__GEMM_KC, GDL__GEMM_NC, tgk_portable_name());
    ASSERT_STR_EQ("portable 4x8", tgk_portable_name());
#ifdef TGK_EXPECT
    if (strncmp(gdl_gemm_kernel_name(), TGK_EXPECT, strlen(TGK_EXPECT)) != 0)
        FAILf("this build should select the %s kernel, it selected %s", TGK_EXPECT, gdl_gemm_kernel_name());
    PASS();
#else
    SKIPm("no TGK_EXPECT given: which kernel this build should select is not checked");
#endif
}

/* Every M, N around the tile sizes of every kernel (MR 4/6/8, NR 8/12/16/32),
   K of one, one and two blocks, all transposes, beta 0 / 1 / other. */
TEST test_small_shapes(void) {
    static const int Ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 17};
    static const int Ns[] = {1, 3, 7, 8, 9, 11, 12, 13, 16, 17, 24, 31, 32, 33, 40};
    static const int Ks[] = {1, 2, 7, 257};
    static const float ab[][2] = {{1, 0}, {1, 1}, {0.5f, -0.75f}, {1, 1}, {1, 0}, {-2, 1}};
    size_t mi, ni, ki;
    int t, n = 0;
    for (mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
        for (ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
            for (ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
                for (t = 0; t < 4; t++, n++) {
                    const float *p = ab[n % 6];
                    CHECK_CALL(run_case(t >> 1, t & 1, Ms[mi], Ns[ni], Ks[ki], p[0], p[1]));
                }
    PASS();
}

/* Past MC and NC of the selected kernel (so several M and N blocks, with
   ragged last tiles) and two K blocks; large enough to be threaded. */
TEST test_large_shapes(void) {
    const int M = GDL__GEMM_MC + GDL__GEMM_MR + 1, N = GDL__GEMM_NC + GDL__GEMM_NR + 3, K = 300;
    CHECK_CALL(run_case(0, 1, M, N, K, 1, 0)); /* y = x W^T */
    CHECK_CALL(run_case(1, 0, M, N, K, 1, 1)); /* dW += dy^T x */
    CHECK_CALL(run_case(0, 0, M, 37, K, 0.25f, 2));
    PASS();
}

/* alpha == 0 or K == 0: A and B are not read, C = beta*C. */
TEST test_degenerate(void) {
    float C[6] = {1, 2, 3, 4, 5, 6}, A[1] = {(float)NAN}, B[1] = {(float)NAN};
    int i;
    gdl_gemm_cpu(0, 0, 2, 3, 1, 0.0f, A, 1, B, 3, 2.0f, C, 3);
    for (i = 0; i < 6; i++) ASSERT_IN_RANGE(2.0 * (i + 1), C[i], 0);
    gdl_gemm_cpu(0, 0, 2, 3, 0, 1.0f, NULL, 1, NULL, 3, 0.0f, C, 3);
    for (i = 0; i < 6; i++) ASSERT_IN_RANGE(0.0, C[i], 0);
    PASS();
}

/* Results must not depend on the number of threads. */
TEST test_thread_count_independent(void) {
#ifdef GDL__POOL
    const int M = 2 * GDL__GEMM_MC + 3, N = 3 * GDL__GEMM_NR + 5, K = 300;
    gemm_case g;
    float *c1, *c4;
    const size_t nc = (size_t)M * (N + 5);
    int same;
    case_init(&g, 0, 1, M, N, K, 0.5f, 0);
    c1 = (float *)malloc(nc * sizeof(float));
    c4 = (float *)malloc(nc * sizeof(float));
    memcpy(c1, g.C0, nc * sizeof(float));
    memcpy(c4, g.C0, nc * sizeof(float));
    gdl_set_num_threads(1);
    gdl_gemm_cpu(0, 1, M, N, K, 0.5f, g.A, g.lda, g.B, g.ldb, 0, c1, g.ldc);
    gdl_set_num_threads(4);
    gdl_gemm_cpu(0, 1, M, N, K, 0.5f, g.A, g.lda, g.B, g.ldb, 0, c4, g.ldc);
    gdl_set_num_threads(0);
    same = memcmp(c1, c4, nc * sizeof(float)) == 0;
    case_free(&g);
    free(c1);
    free(c4);
    ASSERTm("1 and 4 threads give different bits", same);
    PASS();
#else
    SKIPm("built without threads");
#endif
}

/* Every path of the threaded GEMM gives the bits of one thread: cells on the
   shared packing (many per thread, taken in turn), the fused bias + ReLU
   epilogue, K over segments, and above GDL__GEMM_PACKED_MAX the cells that
   pack their own panels; on 2, 3 and 5 threads. */
TEST test_thread_counts_same_bits(void) {
#ifdef GDL__POOL
    static const int shapes[][3] = {{64, 128, 784}, {128, 784, 64}, {768, 192, 64}, {37, 301, 257},
                                    {333, 95, 513}, {1100, 1100, 300}, {64, 44000, 200}};
    size_t si;
    int v, threads;
    for (si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (v = 0; v < 4; v++) { /* NT plain, TN with beta, NN on 3 segments, NT with bias and ReLU */
            const int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2], ta = v == 1, tb = v == 0 || v == 3;
            const int nseg = v == 2 ? 3 : 1, ldc = N + 3;
            const size_t na = (size_t)M * K * nseg, nb = (size_t)K * N * nseg, nc = (size_t)M * ldc;
            float *A = (float *)malloc(na * sizeof(float)), *B = (float *)malloc(nb * sizeof(float));
            float *c1 = (float *)malloc(nc * sizeof(float)), *c2 = (float *)malloc(nc * sizeof(float));
            float *p1 = (float *)calloc(nc, sizeof(float)), *p2 = (float *)calloc(nc, sizeof(float));
            float *bias = (float *)malloc((size_t)N * sizeof(float));
            size_t i;
            int same = 1, bad = 0;
            if (si == 6 && v != 0) { /* the large B once is enough */
                free(A); free(B); free(c1); free(c2); free(p1); free(p2); free(bias);
                continue;
            }
            for (i = 0; i < na; i++) A[i] = urand();
            for (i = 0; i < nb; i++) B[i] = urand();
            for (i = 0; i < (size_t)N; i++) bias[i] = urand();
            for (threads = 1; threads <= 5 && same; threads += threads == 1 ? 1 : 2) {
                float *c = threads == 1 ? c1 : c2, *pre = threads == 1 ? p1 : p2;
                for (i = 0; i < nc; i++) c[i] = (float)(i % 7) - 3;
                gdl_set_num_threads(threads);
                if (v == 3)
                    gdl__cpu_linear_act(GDL_UN_RELU, M, N, K, A, B, bias, c, pre);
                else if (v == 2)
                    gdl__cpu_gemm(GDL_F32, 0, 0, M, N, K, 0.5f, A, K, (int64_t)M * K, B, N, (int64_t)K * N, 1, c, ldc,
                                  0, nseg);
                else
                    gdl_gemm_cpu(ta, tb, M, N, K, 0.5f, A, ta ? M : K, B, tb ? K : N, v == 1 ? 0.25f : 0, c, ldc);
                gdl_set_num_threads(0);
                if (threads > 1 && !(same = !memcmp(c1, c2, nc * sizeof(float)) && !memcmp(p1, p2, nc * sizeof(float))))
                    bad = threads;
            }
            free(A); free(B); free(c1); free(c2); free(p1); free(p2); free(bias);
            if (!same) fprintf(stderr, "  %d x %d x %d, variant %d: %d threads differ from 1\n", M, N, K, v, bad);
            ASSERTm("a thread count gives other bits than one thread", same);
        }
    PASS();
#else
    SKIPm("built without threads");
#endif
}

#ifdef GDL__POOL
typedef struct {
    int ta, tb, M, N, K;
    const gemm_case *g;
    float *c;
} in_task_gemm;
/* Task 0 of a pool job calls the GEMM while its thread holds the pool. */
static void gemm_in_task(void *p, int t, int nt) {
    const in_task_gemm *j = (const in_task_gemm *)p;
    (void)nt;
    if (t == 0)
        gdl_gemm_cpu(j->ta, j->tb, j->M, j->N, j->K, 1, j->g->A, j->g->lda, j->g->B, j->g->ldb, j->g->beta, j->c,
                     j->g->ldc);
}
#endif

/* The batched GEMM with sC == 0 and beta 1 (a convolution's weight
   gradient: every batch accumulates into one C) runs as one call over K
   segments: bitwise the same as a loop of calls, on 1 thread and on 3. */
TEST test_batched_accumulate_same_as_loop(void) {
    static const int shapes[][3] = {{32, 9, 784}, {64, 288, 196}, {13, 70, 300}};
    const int batch = 5;
    size_t si;
    int t, threads;
    for (si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (t = 0; t < 4; t++)
            for (threads = 1; threads <= 3; threads += 2) {
                const int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2], ta = t >> 1, tb = t & 1;
                const int lda = ta ? M : K, ldb = tb ? K : N;
                const size_t na = (size_t)M * K, nb = (size_t)K * N;
                float *A = (float *)malloc(na * batch * sizeof(float)), *B = (float *)malloc(nb * batch * sizeof(float));
                float *c1 = (float *)malloc((size_t)M * N * sizeof(float)), *c2 = (float *)malloc((size_t)M * N * sizeof(float));
                size_t i;
                int b, same;
                for (i = 0; i < na * batch; i++) A[i] = urand();
                for (i = 0; i < nb * batch; i++) B[i] = urand();
                for (i = 0; i < (size_t)M * N; i++) c1[i] = c2[i] = urand();
                gdl_set_num_threads(threads);
                for (b = 0; b < batch; b++)
                    gdl_gemm_cpu(ta, tb, M, N, K, 1, A + b * na, lda, B + b * nb, ldb, 1, c1, N);
                gdl__cpu_gemm(GDL_F32, ta, tb, M, N, K, 1, A, lda, (int64_t)na, B, ldb, (int64_t)nb, 1, c2, N, 0, batch);
                gdl_set_num_threads(0);
                same = memcmp(c1, c2, (size_t)M * N * sizeof(float)) == 0;
                free(A);
                free(B);
                free(c1);
                free(c2);
                ASSERTm("one segmented call and a loop of calls give different bits", same);
            }
    PASS();
}

/* A batch of independent products (sC != 0) runs as one parallel region,
   one product per task: bitwise the same as a loop of calls. */
TEST test_batched_same_as_loop(void) {
    static const int shapes[][3] = {{32, 784, 9}, {64, 196, 288}, {288, 196, 64}};
    const int batch = 7;
    size_t si;
    int t, threads;
    for (si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (t = 0; t < 4; t++)
            for (threads = 2; threads <= 3; threads++) {
                const int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2], ta = t >> 1, tb = t & 1;
                const int lda = ta ? M : K, ldb = tb ? K : N;
                const size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
                float *A = (float *)malloc(na * batch * sizeof(float)), *B = (float *)malloc(nb * batch * sizeof(float));
                float *c1 = (float *)malloc(nc * batch * sizeof(float)), *c2 = (float *)malloc(nc * batch * sizeof(float));
                size_t i;
                int b, same;
                for (i = 0; i < na * batch; i++) A[i] = urand();
                for (i = 0; i < nb * batch; i++) B[i] = urand();
                for (i = 0; i < nc * batch; i++) c1[i] = c2[i] = urand();
                gdl_set_num_threads(threads);
                for (b = 0; b < batch; b++)
                    gdl_gemm_cpu(ta, tb, M, N, K, 0.5f, A + b * na, lda, B + b * nb, ldb, 0.25f, c1 + b * nc, N);
                gdl__cpu_gemm(GDL_F32, ta, tb, M, N, K, 0.5f, A, lda, (int64_t)na, B, ldb, (int64_t)nb, 0.25f, c2, N,
                              (int64_t)nc, batch);
                gdl_set_num_threads(0);
                same = memcmp(c1, c2, nc * batch * sizeof(float)) == 0;
                free(A);
                free(B);
                free(c1);
                free(c2);
                ASSERTm("one batched call and a loop of calls give different bits", same);
            }
    PASS();
}

/* The unpacked fallback sums like the packed path: reached from inside a
   parallel region, and when the packing buffer cannot be allocated. */
static enum harness_result fallback_case(int ta, int tb, int in_parallel) {
    gemm_case g;
    const int M = 2 * GDL__GEMM_MR + 1, N = GDL__GEMM_NR + 3, K = 300;
    const size_t nc = (size_t)M * (N + 5);
    float *c = (float *)malloc(nc * sizeof(float));
    enum harness_result r;
    case_init(&g, ta, tb, M, N, K, 1, (float)(ta ^ tb));
    memcpy(c, g.C0, nc * sizeof(float));
    if (in_parallel) {
#ifdef GDL__POOL
        in_task_gemm j;
        j.ta = ta; j.tb = tb; j.M = M; j.N = N; j.K = K; j.g = &g; j.c = c;
        if (gdl__pool_acquire()) {
            gdl__pool_run(2, gemm_in_task, &j);
            gdl__pool_release();
        }
#endif
    } else {
        gdl__gemm_release();
        fail_mallocs = 1;
        gdl_gemm_cpu(ta, tb, M, N, K, 1, g.A, g.lda, g.B, g.ldb, g.beta, c, g.ldc);
        fail_mallocs = 0;
    }
    r = check_c("fallback", &g, c, exact_mode(&g, TGK_FUSED, TGK_FUSED || TGK_PORTABLE_EXACT));
    case_free(&g);
    free(c);
    return r;
}

TEST test_fallback_no_memory(void) {
    int t;
    for (t = 0; t < 4; t++) CHECK_CALL(fallback_case(t >> 1, t & 1, 0));
    PASS();
}

TEST test_fallback_in_parallel_region(void) {
#ifdef GDL__POOL
    int t;
    for (t = 0; t < 4; t++) CHECK_CALL(fallback_case(t >> 1, t & 1, 1));
    PASS();
#else
    SKIPm("built without threads");
#endif
}

SUITE(gemm_kernels) {
    RUN_TEST(test_selected_kernel);
    RUN_TEST(test_small_shapes);
    RUN_TEST(test_large_shapes);
    RUN_TEST(test_degenerate);
    RUN_TEST(test_thread_count_independent);
    RUN_TEST(test_thread_counts_same_bits);
    RUN_TEST(test_batched_accumulate_same_as_loop);
    RUN_TEST(test_batched_same_as_loop);
    RUN_TEST(test_fallback_no_memory);
    RUN_TEST(test_fallback_in_parallel_region);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_SUITE(gemm_kernels);
    gdl_shutdown();
    HARNESS_MAIN_END();
}

#endif /* TGK_PORTABLE_TU */
