/* test_fp32_precision.c — gdl_cpu_set_fp32_precision: the API's edges on
   every machine, and where "bf16" is granted (AMX, or AVX512-BF16) the bf16 GEMM against a
   double reference of the bf16-rounded operands (transposes, edges, K blocks,
   alpha and beta, the backend's batched calls), its bits across thread
   counts (GEMMs, a Linear layer, a broadcast matmul's backward), "ieee"
   bitwise unchanged after a round trip, a 3x3 convolution on the tile unit
   (other bits, close to "ieee"), and a Linear layer's forward and backward
   close to "ieee".
   Where "bf16" is refused (neither is in the CPU or the build) the tests that
   need it are skipped, and the refusal itself is checked. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"
#include <float.h>
#include <string.h>

#if defined(GDL__GEMM_CBLAS) || defined(GPUDL_DOUBLE)
#error "test_fp32_precision tests the built-in float GEMM: build without GPUDL_CBLAS and GPUDL_DOUBLE"
#endif

#ifdef GDL__TILE_NAME
#define BF16_PATH GDL__TILE_NAME /* "amx bf16" or "avx512 bf16 dot" (src/cpu/gemm.h) */
#else
#define BF16_PATH "none"
#endif

static int have_bf16; /* gdl_cpu_set_fp32_precision("bf16") granted on this machine and build */

static unsigned long long rng_state = 0x9E3779B97F4A7C15ULL;
static float urand(void) { /* xorshift64: uniform in [-1, 1), multiples of 2^-23 (no subnormals) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 40) / (double)(1 << 23) - 1.0);
}
static float *rand_buf(size_t n) {
    float *p = (float *)malloc(sizeof(float) * (n ? n : 1));
    size_t i;
    if (p)
        for (i = 0; i < n; i++) p[i] = urand();
    return p;
}

/* x rounded to bf16, nearest even (x finite) */
static double bf16_round(float x) {
    uint32_t u;
    float r;
    memcpy(&u, &x, 4);
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    memcpy(&r, &u, 4);
    return r;
}

static int restore_ieee(void) { return gdl_cpu_set_fp32_precision("ieee"); }

/* ---- 1. the API's edges ---- */

/* a refused string: -1, an error naming the call and both precisions, the precision unchanged */
static enum harness_result check_refused(const char *s, const char *before) {
    gdl_clear_error();
    ASSERT_EQm(s ? s : "(NULL)", -1, gdl_cpu_set_fp32_precision(s));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_cpu_set_fp32_precision");
    ASSERT_CONTAINS(gdl_last_error(), "\"ieee\"");
    ASSERT_CONTAINS(gdl_last_error(), "\"bf16\"");
    ASSERT_STR_EQ(before, gdl_cpu_get_fp32_precision());
    return HARNESS_PASS;
}

TEST api_edges(void) {
    static const char *bad[] = {NULL, "", "BF16", "fp16", "IEEE", "ieee ", "bf16\n", "tf32"};
    size_t i;
    ASSERT_EQ(0, gdl_cpu_set_fp32_precision("ieee"));
    ASSERT_STR_EQ("ieee", gdl_cpu_get_fp32_precision());
    ASSERT_EQ(0, gdl_cpu_set_fp32_precision("ieee")); /* twice: still 0 */
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK_CALL(check_refused(bad[i], "ieee"));
    if (have_bf16) {
        ASSERT_EQ(0, gdl_cpu_set_fp32_precision("bf16"));
        ASSERT_STR_EQ("bf16", gdl_cpu_get_fp32_precision());
        ASSERT_EQ(0, gdl_cpu_set_fp32_precision("bf16"));
        for (i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK_CALL(check_refused(bad[i], "bf16"));
        ASSERT_EQ(0, gdl_cpu_set_fp32_precision("ieee"));
        ASSERT_STR_EQ("ieee", gdl_cpu_get_fp32_precision());
    } else { /* the refusal of "bf16" itself: -1, why, and "ieee" kept */
        gdl_clear_error();
        ASSERT_EQ(-1, gdl_cpu_set_fp32_precision("bf16"));
        ASSERT_CONTAINS(gdl_last_error(), "gdl_cpu_set_fp32_precision(\"bf16\")");
        ASSERT_CONTAINS(gdl_last_error(), "AMX");
        ASSERT_STR_EQ("ieee", gdl_cpu_get_fp32_precision());
    }
#ifndef GDL__GEMM_BF16
    ASSERTm("a build without a bf16 path granted \"bf16\"", !have_bf16);
#endif
    PASS();
}

/* ---- 2. the bf16 GEMM against a reference ---- */

typedef struct gemm_case {
    int ta, tb, M, N, K, pad; /* pad: extra elements on every leading dimension */
    float alpha, beta;
} gemm_case;

typedef struct gemm_data {
    int lda, ldb, ldc;
    float *A, *B, *C0, *C;
} gemm_data;

static int gemm_data_make(const gemm_case *c, gemm_data *d) {
    const int ar = c->ta ? c->K : c->M, ac = c->ta ? c->M : c->K;
    const int br = c->tb ? c->N : c->K, bc = c->tb ? c->K : c->N;
    d->lda = ac + c->pad;
    d->ldb = bc + c->pad;
    d->ldc = c->N + c->pad;
    d->A = rand_buf((size_t)ar * d->lda);
    d->B = rand_buf((size_t)br * d->ldb);
    d->C0 = rand_buf((size_t)c->M * d->ldc);
    d->C = (float *)malloc(sizeof(float) * (size_t)c->M * d->ldc);
    return d->A && d->B && d->C0 && d->C;
}
static void gemm_data_free(gemm_data *d) {
    free(d->A);
    free(d->B);
    free(d->C0);
    free(d->C);
}
/* C = C0 (NaN where beta is 0: it must not be read), then the product */
static void gemm_data_run(const gemm_case *c, gemm_data *d) {
    size_t i, n = (size_t)c->M * d->ldc;
    for (i = 0; i < n; i++) d->C[i] = c->beta == 0 && (int)(i % d->ldc) < c->N ? NAN : d->C0[i];
    gdl_gemm_cpu(c->ta, c->tb, c->M, c->N, c->K, c->alpha, d->A, d->lda, d->B, d->ldb, c->beta, d->C, d->ldc);
}

/* Products of two bf16 values (8-bit significands) are exact in f32 (24
   bits), so against the exact sum of the rounded operands' products only the
   f32 summation's rounding remains: at most (K-1) * 2^-24 * sum_k |a_k b_k|
   in the worst case, ~sqrt(K) * 2^-24 * that for these random-sign operands
   (K <= 1100: ~2e-6), plus alpha's and beta's roundings (2^-24 each, relative).
   1e-5 leaves that a margin and is still 100x below what a product of one
   unrounded operand would miss by (2^-9 relative per product, ~4e-3 / sqrt(K)
   of sum |a_k b_k| at least). tiny: FLT_MIN, for sums that cancel to 0. */
#define BF16_REL 1e-5
static double ref_tol = BF16_REL;

/* every element of C against the reference; C's padding untouched. Returns
   the number of elements off; *worst the largest err / tolerance */
static long gemm_check(const gemm_case *c, const gemm_data *d, int round_a, int round_b, double *worst) {
    long off = 0;
    int i, j, k;
    *worst = 0;
    for (i = 0; i < c->M; i++) {
        for (j = 0; j < c->N; j++) {
            double s = 0, sa = 0, want, tol, got = d->C[(size_t)i * d->ldc + j];
            for (k = 0; k < c->K; k++) {
                const float a = c->ta ? d->A[(size_t)k * d->lda + i] : d->A[(size_t)i * d->lda + k];
                const float b = c->tb ? d->B[(size_t)j * d->ldb + k] : d->B[(size_t)k * d->ldb + j];
                const double p = (round_a ? bf16_round(a) : a) * (round_b ? bf16_round(b) : b);
                s += p;
                sa += fabs(p);
            }
            want = c->alpha * s;
            tol = fabs(c->alpha) * sa;
            if (c->beta != 0) {
                want += c->beta * (double)d->C0[(size_t)i * d->ldc + j];
                tol += fabs(c->beta * (double)d->C0[(size_t)i * d->ldc + j]);
            }
            tol = ref_tol * tol + FLT_MIN;
            if (!(fabs(got - want) <= tol)) off++;
            if (fabs(got - want) / tol > *worst || got != got) *worst = got != got ? INFINITY : fabs(got - want) / tol;
        }
        for (j = c->N; j < d->ldc; j++)
            if (memcmp(&d->C[(size_t)i * d->ldc + j], &d->C0[(size_t)i * d->ldc + j], 4) != 0) off++;
    }
    return off;
}

static long bits_differing(const float *x, const float *y, size_t n) {
    long d = 0;
    size_t i;
    for (i = 0; i < n; i++) d += memcmp(x + i, y + i, 4) != 0;
    return d;
}

/* the shapes: tiny, odd (not multiples of 8/16/32), around the tile sizes,
   several K blocks (KC 256), and one that several threads and cells share */
static const int shapes[][3] = {{1, 1, 1},    {3, 3, 3},    {1, 17, 33},   {17, 33, 1},   {33, 1, 17},
                                {17, 17, 17}, {33, 33, 33}, {31, 47, 63},  {16, 32, 32},  {48, 96, 100},
                                {65, 97, 257}, {40, 50, 513}, {7, 33, 1100}, {300, 700, 600}};
static const float alphas_betas[][2] = {{1, 0}, {0.5f, 1}, {1, 0.25f}, {0.5f, 0}, {1, 1}, {0.5f, 0.25f}};

TEST gemm_bf16_vs_reference(void) {
    size_t s;
    int t, n = 0;
    if (!have_bf16) SKIPm("no bf16 products: \"bf16\" refused");
    for (s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (t = 0; t < 4; t++, n++) {
            gemm_case c;
            gemm_data d;
            double worst;
            long off;
            c.ta = t >> 1;
            c.tb = t & 1;
            c.M = shapes[s][0];
            c.N = shapes[s][1];
            c.K = shapes[s][2];
            c.pad = n % 3 == 0 ? 3 : 0;
            c.alpha = alphas_betas[n % 6][0];
            c.beta = alphas_betas[n % 6][1];
            ASSERT(gemm_data_make(&c, &d));
            ASSERT_EQ(0, gdl_cpu_set_fp32_precision("bf16"));
            gemm_data_run(&c, &d);
            ASSERT_EQ(0, restore_ieee());
            off = gemm_check(&c, &d, 1, 1, &worst);
            if (off) {
                gemm_data_free(&d);
                FAILf("ta %d tb %d M %d N %d K %d alpha %g beta %g pad %d: %ld elements off the bf16 reference "
                      "(worst err %.3g x tolerance)", c.ta, c.tb, c.M, c.N, c.K, c.alpha, c.beta, c.pad, off, worst);
            }
            gemm_data_free(&d);
        }
    PASS();
}

/* The path ran: with operands that are not bf16-exact the result misses the
   unrounded operands' reference (what "ieee" meets) by far more than the
   tolerance, and most elements differ from "ieee"'s bits */
TEST gemm_bf16_is_not_ieee(void) {
    gemm_case c = {0, 1, 64, 96, 300, 0, 1, 0};
    gemm_data d;
    float *ieee;
    double worst_bf, worst_ieee, worst_unrounded;
    size_t n;
    long diff;
    if (!have_bf16) SKIPm("no bf16 products: \"bf16\" refused");
    ASSERT(gemm_data_make(&c, &d));
    n = (size_t)c.M * d.ldc;
    ASSERT_NOT_NULL(ieee = (float *)malloc(sizeof(float) * n));
    gemm_data_run(&c, &d);
    memcpy(ieee, d.C, sizeof(float) * n);
    gemm_check(&c, &d, 0, 0, &worst_ieee);
    ASSERT_EQ(0, gdl_cpu_set_fp32_precision("bf16"));
    gemm_data_run(&c, &d);
    ASSERT_EQ(0, restore_ieee());
    ASSERT_EQ(0, gemm_check(&c, &d, 1, 1, &worst_bf));
    gemm_check(&c, &d, 0, 0, &worst_unrounded);
    diff = bits_differing(ieee, d.C, n);
    printf("    bf16 vs ieee: %ld of %ld elements differ; worst err / tol: bf16 %.3g, ieee vs unrounded %.3g, "
           "bf16 vs unrounded %.3g\n", diff, (long)(c.M * c.N), worst_bf, worst_ieee, worst_unrounded);
    free(ieee);
    gemm_data_free(&d);
    ASSERT_LE(worst_ieee, 1);
    ASSERT_GT(worst_unrounded, 10);
    ASSERT_GT(diff, (long)(c.M * c.N) / 2);
    PASS();
}

/* The backend's batched GEMM (the op layer's): *acc 1, every product summed
   into one C (sC 0, beta 1: one call over K segments the threads share);
   0, a C per product (sC M*N, beta 0: the products spread over the threads).
   A is [batch][K][M] (transposed), B [batch][K][N]. */
enum { BM = 70, BN = 90, BK = 130, BATCH = 5 };
static int batch_run(int acc, const float *A, const float *B, const float *C0, float *C) {
    const size_t nc = (size_t)BM * BN * (acc ? 1 : BATCH);
    size_t i;
    for (i = 0; i < nc; i++) C[i] = acc ? C0[i] : NAN; /* beta 0: C not read */
    return gdl__cpu_gemm_f32(1, 0, BM, BN, BK, 1, A, BM, (int64_t)BK * BM, B, BN, (int64_t)BK * BN, acc ? 1 : 0, C,
                             BN, acc ? 0 : (int64_t)BM * BN, BATCH);
}
/* C against the reference; the number of elements off */
static long batch_check(int acc, const float *A, const float *B, const float *C0, const float *C) {
    long off = 0;
    int i, j, b, k;
    for (b = 0; b < (acc ? 1 : BATCH); b++)
        for (i = 0; i < BM; i++)
            for (j = 0; j < BN; j++) {
                double s = acc ? C0[i * BN + j] : 0, sa = fabs(s);
                int b0;
                for (b0 = acc ? 0 : b; b0 < (acc ? BATCH : b + 1); b0++)
                    for (k = 0; k < BK; k++) {
                        const double p = bf16_round(A[((size_t)b0 * BK + k) * BM + i]) *
                                         bf16_round(B[((size_t)b0 * BK + k) * BN + j]);
                        s += p;
                        sa += fabs(p);
                    }
                off += !(fabs(C[((size_t)b * BM + i) * BN + j] - s) <= ref_tol * sa + FLT_MIN);
            }
    return off;
}

TEST gemm_bf16_batched(const int *acc) {
    const size_t nc = (size_t)BM * BN * BATCH;
    float *A = rand_buf((size_t)BATCH * BK * BM), *B = rand_buf((size_t)BATCH * BK * BN), *C0 = rand_buf(nc);
    float *C = (float *)malloc(sizeof(float) * nc), *C1 = (float *)malloc(sizeof(float) * nc);
    int th, differ = 0;
    long off = -1;
    if (have_bf16 && A && B && C0 && C && C1 && gdl_cpu_set_fp32_precision("bf16") == 0) {
        for (th = 1; th <= 3 && !differ; th++) {
            gdl_set_num_threads(th);
            if (batch_run(*acc, A, B, C0, th == 1 ? C1 : C) != 0) break;
            differ = th > 1 && bits_differing(C1, C, *acc ? (size_t)BM * BN : nc) ? th : 0; /* the C written */
        }
        restore_ieee();
        if (th > 3 || differ) off = batch_check(*acc, A, B, C0, C1);
    }
    free(A), free(B), free(C0), free(C), free(C1);
    if (!have_bf16) SKIPm("no bf16 products: \"bf16\" refused");
    ASSERTm("the batched GEMM ran", off >= 0);
    if (differ) FAILf("the batch's bits differ at %d threads from 1 thread", differ);
    ASSERT_EQm("elements of the batch off the bf16 reference", 0, off);
    PASS();
}

/* ---- 3. bits independent of the thread count ---- */

TEST gemm_bf16_threads_bitwise(void) {
    static const int sh[][3] = {{300, 700, 600}, {65, 97, 513}, {129, 250, 70}};
    size_t s;
    int t, th, saved = gdl_get_num_threads();
    if (!have_bf16) SKIPm("no bf16 products: \"bf16\" refused");
    for (s = 0; s < sizeof sh / sizeof sh[0]; s++)
        for (t = 0; t < 4; t++) {
            gemm_case c;
            gemm_data d;
            float *one;
            size_t n;
            long diff = 0;
            c.ta = t >> 1;
            c.tb = t & 1;
            c.M = sh[s][0];
            c.N = sh[s][1];
            c.K = sh[s][2];
            c.pad = 1;
            c.alpha = t == 3 ? 0.5f : 1;
            c.beta = t == 2 ? 0.25f : 0;
            ASSERT(gemm_data_make(&c, &d));
            n = (size_t)c.M * d.ldc;
            ASSERT_NOT_NULL(one = (float *)malloc(sizeof(float) * n));
            ASSERT_EQ(0, gdl_cpu_set_fp32_precision("bf16"));
            for (th = 1; th <= 3 && !diff; th++) {
                gdl_set_num_threads(th);
                gemm_data_run(&c, &d);
                if (th == 1) memcpy(one, d.C, sizeof(float) * n);
                else diff = bits_differing(one, d.C, n);
            }
            gdl_set_num_threads(saved);
            ASSERT_EQ(0, restore_ieee());
            free(one);
            gemm_data_free(&d);
            if (diff)
                FAILf("ta %d tb %d %dx%dx%d: %ld elements differ at %d threads from 1 thread", c.ta, c.tb, c.M, c.N,
                      c.K, diff, th - 1);
        }
    PASS();
}

/* a Linear layer forward and backward: y, dx, dW, db (flattened into out) */
typedef struct lin_result {
    float *y, *gx, *gw, *gb;
} lin_result;
enum { LB = 96, LIN = 300, LOUT = 200 };
static float *lin_x, *lin_w, *lin_b, *lin_gy;

static int lin_inputs(void) {
    if (lin_x) return 1;
    lin_x = rand_buf((size_t)LB * LIN);
    lin_w = rand_buf((size_t)LOUT * LIN);
    lin_b = rand_buf(LOUT);
    lin_gy = rand_buf((size_t)LB * LOUT);
    return lin_x && lin_w && lin_b && lin_gy;
}
static void lin_free(lin_result *r) {
    free(r->y), free(r->gx), free(r->gw), free(r->gb);
    memset(r, 0, sizeof *r);
}
static float *host_copy(const gdl_tensor *t) {
    float *p = t ? (float *)malloc(sizeof(float) * (size_t)t->numel) : NULL;
    if (p && gdl_copy_to_host(t, p, sizeof(float) * (size_t)t->numel) != 0) {
        free(p);
        p = NULL;
    }
    return p;
}
/* y = x W^T + b; loss = sum(y * gy) so that dy = gy */
static int lin_run(lin_result *r) {
    gdl_tensor *x, *w, *b, *gy, *y;
    int ok;
    memset(r, 0, sizeof *r);
    if (!lin_inputs()) return 0;
    x = gdl_from_array(lin_x, GDL_DIMS(LB, LIN), GDL_F32, gdl_cpu());
    w = gdl_from_array(lin_w, GDL_DIMS(LOUT, LIN), GDL_F32, gdl_cpu());
    b = gdl_from_array(lin_b, GDL_DIMS(LOUT), GDL_F32, gdl_cpu());
    gy = gdl_from_array(lin_gy, GDL_DIMS(LB, LOUT), GDL_F32, gdl_cpu());
    ok = x && w && b && gy && gdl_set_requires_grad(x, 1) == 0 && gdl_set_requires_grad(w, 1) == 0 &&
         gdl_set_requires_grad(b, 1) == 0 && (y = gdl_linear(x, w, b)) != NULL &&
         gdl_backward(gdl_sum(gdl_mul(y, gy))) == 0;
    if (ok) {
        r->y = host_copy(y);
        r->gx = host_copy(x->grad);
        r->gw = host_copy(w->grad);
        r->gb = host_copy(b->grad);
        ok = r->y && r->gx && r->gw && r->gb;
    }
    gdl_free(x), gdl_free(w), gdl_free(b), gdl_free(gy);
    gdl_arena_reset();
    if (!ok) lin_free(r);
    return ok;
}

/* a broadcast matmul's backward: a [M,K] times b [BATCH,K,N]; a's gradient
   sums the batch's products (one accumulating GEMM) */
static float *bmm_grad_a(void) {
    enum { M = 40, K = 70, N = 120, BATCH = 6 };
    static float *ha, *hb;
    gdl_tensor *a, *b;
    float *g = NULL;
    if (!ha) {
        ha = rand_buf((size_t)M * K);
        hb = rand_buf((size_t)BATCH * K * N);
    }
    a = gdl_from_array(ha, GDL_DIMS(M, K), GDL_F32, gdl_cpu());
    b = gdl_from_array(hb, GDL_DIMS(BATCH, K, N), GDL_F32, gdl_cpu());
    if (a && b && gdl_set_requires_grad(a, 1) == 0 && gdl_set_requires_grad(b, 1) == 0 &&
        gdl_backward(gdl_sum(gdl_mul(gdl_matmul(a, b), gdl_matmul(a, b)))) == 0)
        g = host_copy(a->grad);
    gdl_free(a), gdl_free(b);
    gdl_arena_reset();
    return g;
}

static int lin_bits_equal(const lin_result *p, const lin_result *q) {
    return !bits_differing(p->y, q->y, (size_t)LB * LOUT) && !bits_differing(p->gx, q->gx, (size_t)LB * LIN) &&
           !bits_differing(p->gw, q->gw, (size_t)LOUT * LIN) && !bits_differing(p->gb, q->gb, LOUT);
}

TEST ops_bf16_threads_bitwise(void) {
    lin_result one, r;
    float *g1 = NULL, *g;
    int th, saved = gdl_get_num_threads(), same = 1;
    if (!have_bf16) SKIPm("no bf16 products: \"bf16\" refused");
    ASSERT_EQ(0, gdl_cpu_set_fp32_precision("bf16"));
    for (th = 1; th <= 3 && same; th++) {
        gdl_set_num_threads(th);
        ASSERT(lin_run(th == 1 ? &one : &r));
        ASSERT_NOT_NULL(g = bmm_grad_a());
        if (th == 1) {
            g1 = g;
        } else {
            same = lin_bits_equal(&one, &r) && !bits_differing(g1, g, 40 * 70);
            lin_free(&r);
            free(g);
        }
    }
    gdl_set_num_threads(saved);
    ASSERT_EQ(0, restore_ieee());
    lin_free(&one);
    free(g1);
    if (!same) FAILf("a Linear layer's or a broadcast matmul's gradients differ at %d threads from 1", th - 1);
    PASS();
}

/* ---- 4. "ieee" unchanged by a round trip through "bf16" ---- */

static const gemm_case ieee_cases[] = {{0, 0, 300, 700, 600, 0, 1, 0}, {1, 1, 33, 17, 513, 2, 0.5f, 0.25f},
                                       {1, 0, 3, 1, 1100, 0, 1, 1}};
#define N_IEEE (sizeof ieee_cases / sizeof ieee_cases[0])
static float *ieee_before[N_IEEE];
static lin_result lin_before;
static unsigned long long ieee_seed;

/* before any "bf16" call: the products and the Linear layer in "ieee" */
static int ieee_baseline(void) {
    size_t i;
    ieee_seed = rng_state;
    for (i = 0; i < N_IEEE; i++) {
        gemm_data d;
        if (!gemm_data_make(&ieee_cases[i], &d)) return 0;
        gemm_data_run(&ieee_cases[i], &d);
        ieee_before[i] = d.C;
        d.C = NULL;
        gemm_data_free(&d);
    }
    return lin_run(&lin_before);
}

TEST ieee_unchanged_after_bf16(void) {
    unsigned long long saved_rng = rng_state;
    lin_result r;
    size_t i;
    long diff = 0;
    ASSERT_NOT_NULL(lin_before.y);
    if (have_bf16) { /* a bf16 product first, so the tile unit was used on these threads */
        gemm_case c = {0, 0, 100, 100, 100, 0, 1, 0};
        gemm_data d;
        ASSERT(gemm_data_make(&c, &d));
        ASSERT_EQ(0, gdl_cpu_set_fp32_precision("bf16"));
        gemm_data_run(&c, &d);
        gemm_data_free(&d);
    } else {
        ASSERT_EQ(-1, gdl_cpu_set_fp32_precision("bf16"));
    }
    ASSERT_EQ(0, gdl_cpu_set_fp32_precision("ieee"));
    rng_state = ieee_seed; /* the baseline's operands again */
    for (i = 0; i < N_IEEE; i++) {
        gemm_data d;
        ASSERT(gemm_data_make(&ieee_cases[i], &d));
        gemm_data_run(&ieee_cases[i], &d);
        diff += bits_differing(ieee_before[i], d.C, (size_t)ieee_cases[i].M * d.ldc);
        gemm_data_free(&d);
    }
    rng_state = saved_rng;
    ASSERT_EQm("\"ieee\" products' bits after \"bf16\" and back", 0, diff);
    ASSERT(lin_run(&r));
    ASSERTm("the Linear layer's \"ieee\" bits after \"bf16\" and back", lin_bits_equal(&lin_before, &r));
    lin_free(&r);
    PASS();
}

/* A 3x3 convolution (2 x 16 x 12 x 12 into 24 channels), forward and backward: y, dx, dW copied out. */
static int conv_run(float **y, float **gx, float **gw) {
    gdl_tensor *x, *w, *out;
    int ok;
    gdl_manual_seed(11);
    x = gdl_randn(GDL_DIMS(2, 16, 12, 12), gdl_cpu());
    w = gdl_randn(GDL_DIMS(24, 16, 3, 3), gdl_cpu());
    ok = x && w && gdl_set_requires_grad(x, 1) == 0 && gdl_set_requires_grad(w, 1) == 0 &&
         (out = gdl_conv2d(x, w, NULL, 1, 1, 1, 1)) != NULL && gdl_backward(gdl_sum(gdl_mul(out, out))) == 0;
    *y = ok ? host_copy(out) : NULL;
    *gx = ok ? host_copy(x->grad) : NULL;
    *gw = ok ? host_copy(w->grad) : NULL;
    gdl_free(x), gdl_free(w);
    gdl_arena_reset();
    return *y && *gx && *gw;
}

/* ||p - q|| / ||q|| */
static double rel_err(const float *p, const float *q, size_t n) {
    double d = 0, s = 0;
    size_t i;
    for (i = 0; i < n; i++) {
        d += ((double)p[i] - q[i]) * ((double)p[i] - q[i]);
        s += (double)q[i] * q[i];
    }
    return sqrt(d / (s > 0 ? s : 1));
}

/* A 3x3 stride-1 convolution runs on the tile unit under "bf16" (tests/test_conv.c checks its passes
   against the direct loop): every pass's bits change, each result within bf16's rounding of ieee's. */
TEST conv_takes_bf16(void) {
    float *y0, *gx0, *gw0, *y1 = NULL, *gx1 = NULL, *gw1 = NULL;
    long diff[3] = {-1, -1, -1};
    double e[3] = {1, 1, 1};
    int i;
    if (!have_bf16) SKIPm("no bf16 products: \"bf16\" refused");
    ASSERT(conv_run(&y0, &gx0, &gw0));
    if (gdl_cpu_set_fp32_precision("bf16") == 0 && conv_run(&y1, &gx1, &gw1)) {
        diff[0] = bits_differing(y0, y1, 2 * 24 * 12 * 12);
        diff[1] = bits_differing(gx0, gx1, 2 * 16 * 12 * 12);
        diff[2] = bits_differing(gw0, gw1, 24 * 16 * 9);
        e[0] = rel_err(y1, y0, 2 * 24 * 12 * 12);
        e[1] = rel_err(gx1, gx0, 2 * 16 * 12 * 12);
        e[2] = rel_err(gw1, gw0, 24 * 16 * 9);
    }
    restore_ieee();
    free(y0), free(gx0), free(gw0), free(y1), free(gx1), free(gw1);
    for (i = 0; i < 3; i++) {
        if (diff[i] <= 0) FAILf("pass %d (y, dx, dW): %ld elements changed by \"bf16\"", i, diff[i]);
        if (!(e[i] < 1e-2)) FAILf("pass %d (y, dx, dW): relative error %.3g against ieee", i, e[i]);
    }
    PASS();
}

/* The input gradient into an intermediate's unset gradient (written, not added: conv_implicit's pass 3),
   as conv_run's but x through h = 1 x (mode 0), with sum(h h) added to the loss after the convolution
   (mode 1: its backward first, the convolution's adds) or before it (mode 2: the convolution's first). */
static float *conv_fresh_gx(int mode) {
    gdl_tensor *x, *w, *h, *out, *loss = NULL, *hh = NULL;
    float *gx = NULL;
    gdl_manual_seed(11);
    x = gdl_randn(GDL_DIMS(2, 16, 12, 12), gdl_cpu());
    w = gdl_randn(GDL_DIMS(24, 16, 3, 3), gdl_cpu());
    if (x && w && gdl_set_requires_grad(x, 1) == 0 && (h = gdl_mul_scalar(x, 1)) != NULL) {
        if (mode == 2) hh = gdl_sum(gdl_mul(h, h));
        out = gdl_conv2d(h, w, NULL, 1, 1, 1, 1);
        loss = out ? gdl_sum(gdl_mul(out, out)) : NULL;
        if (mode == 1) hh = gdl_sum(gdl_mul(h, h));
        if (loss && mode) loss = hh ? gdl_add(loss, hh) : NULL;
        if (loss && gdl_backward(loss) == 0) gx = host_copy(x->grad);
    }
    gdl_free(x), gdl_free(w);
    gdl_arena_reset();
    return gx;
}
TEST conv_bf16_into_unset_grad(void) {
    enum { NX = 2 * 16 * 12 * 12 };
    float *leaf = NULL, *y = NULL, *gw = NULL, *g[3] = {NULL, NULL, NULL}, *x = NULL;
    long i, bad[3] = {0, 0, 0};
    int m;
    if (!have_bf16) SKIPm("no bf16 products: \"bf16\" refused");
    if (gdl_cpu_set_fp32_precision("bf16") == 0 && conv_run(&y, &leaf, &gw))
        for (m = 0; m < 3; m++) g[m] = conv_fresh_gx(m);
    gdl_manual_seed(11);
    {
        gdl_tensor *xt = gdl_randn(GDL_DIMS(2, 16, 12, 12), gdl_cpu());
        x = xt ? host_copy(xt) : NULL;
        gdl_free(xt);
    }
    restore_ieee();
    if (leaf && g[0] && g[1] && g[2] && x)
        for (i = 0; i < NX; i++) {
            const double want = (double)leaf[i] + 2.0 * x[i], tol = 1e-6 * (fabs(leaf[i]) + fabs(2.0 * x[i])) + 1e-30;
            bad[0] += g[0][i] != leaf[i]; /* the same sums, stored instead of added to zero */
            bad[1] += !(fabs(g[1][i] - want) <= tol);
            bad[2] += !(fabs(g[2][i] - want) <= tol);
        }
    else
        bad[0] = -1;
    free(leaf), free(y), free(gw), free(x), free(g[0]), free(g[1]), free(g[2]);
    if (bad[0] < 0) FAILf("a run failed: %s", gdl_last_error());
    for (m = 0; m < 3; m++)
        if (bad[m]) FAILf("mode %d (0: conv alone, 1: it adds, 2: it writes first): %ld of %d gradients off", m, bad[m], NX);
    PASS();
}

/* ---- 5. a Linear layer under "bf16" close to "ieee" ---- */

TEST linear_bf16_close_to_ieee(void) {
    lin_result bf;
    double e[4];
    int i;
    if (!have_bf16) SKIPm("no bf16 products: \"bf16\" refused");
    ASSERT_NOT_NULL(lin_before.y);
    ASSERT_EQ(0, gdl_cpu_set_fp32_precision("bf16"));
    ASSERT(lin_run(&bf));
    ASSERT_STR_EQ("bf16", gdl_cpu_get_fp32_precision());
    ASSERT_EQ(0, restore_ieee());
    ASSERT_STR_EQ("ieee", gdl_cpu_get_fp32_precision());
    e[0] = rel_err(bf.y, lin_before.y, (size_t)LB * LOUT);
    e[1] = rel_err(bf.gx, lin_before.gx, (size_t)LB * LIN);
    e[2] = rel_err(bf.gw, lin_before.gw, (size_t)LOUT * LIN);
    e[3] = rel_err(bf.gb, lin_before.gb, LOUT); /* a sum of dy: no GEMM of rounded operands in it */
    printf("    Linear bf16 vs ieee, relative error: y %.2e, dx %.2e, dW %.2e, db %.2e\n", e[0], e[1], e[2], e[3]);
    lin_free(&bf);
    /* bf16 keeps 8 significant bits: each operand off by up to 2^-9 relative,
       sums of random-sign products ~2^-9 relative overall; a few 1e-3 */
    for (i = 0; i < 3; i++) {
        ASSERT_LT(e[i], 1e-2);
        ASSERT_GT(e[i], 1e-5); /* the bf16 path ran */
    }
    ASSERT_LT(e[3], 1e-2);
    PASS();
}

/* after every test, passed or not: "ieee" and the thread count it found */
static void back_to_ieee(void *threads) {
    gdl_cpu_set_fp32_precision("ieee");
    gdl_set_num_threads(*(int *)threads);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    static const int one = 1, zero = 0;
    int baseline, threads;
    HARNESS_MAIN_BEGIN(argc, argv);
    threads = gdl_get_num_threads();
    gdl_manual_seed(7);
    baseline = ieee_baseline(); /* before any "bf16" call */
    have_bf16 = gdl_cpu_set_fp32_precision("bf16") == 0;
    printf("fp32 precision \"bf16\": %s (GEMM kernel %s)\n",
           have_bf16 ? "granted: the bf16 cases run (" BF16_PATH ")" : gdl_last_error(), gdl_gemm_kernel_name());
    if (!have_bf16) printf("no bf16 products (AMX or AVX512-BF16): the bf16 cases are skipped, the API's edges and \"ieee\" run\n");
    restore_ieee();
    if (!baseline) printf("the ieee baseline could not be computed\n");
    SET_TEARDOWN(back_to_ieee, &threads);
    RUN_TEST(api_edges);
    RUN_TEST(gemm_bf16_vs_reference);
    RUN_TEST(gemm_bf16_is_not_ieee);
    RUN_TEST_NAMED("gemm_bf16_batch_accumulated", gemm_bf16_batched, &one);
    RUN_TEST_NAMED("gemm_bf16_batch_separate", gemm_bf16_batched, &zero);
    RUN_TEST(gemm_bf16_threads_bitwise);
    RUN_TEST(ops_bf16_threads_bitwise);
    RUN_TEST(ieee_unchanged_after_bf16);
    RUN_TEST(conv_takes_bf16);
    RUN_TEST(conv_bf16_into_unset_grad);
    RUN_TEST(linear_bf16_close_to_ieee);
    HARNESS_MAIN_END();
}
