/* test_gemm_int8.c — the CPU int8 GEMM a build selects (gdl_gemm_u8s8_cpu:
   AVX-512 VNNI, AVX2, NEON sdot, NEON or portable C) against an int32
   reference: shapes around every kernel's tile sizes (MR 4/8, NR 8/16/32)
   and K around the groups of 4, padded leading dimensions (the padding never
   written), activations of 7 bits (AVX2's fast form), of 8 bits (its exact
   split form) and mixed tile by tile, the saturation edges of vpmaddubsw
   (255 * -128 pairs) up to the largest K, bitwise across thread counts, and
   the errors for shapes the GEMM cannot take.

   Uses the API only: tests/quant.mk links it with each CPU path's library
   object (tests/cpu_paths.mk builds them) and with the default build's.
   -DQI8_EXPECT="\"avx2\"" makes it check which kernel the build selected. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"

#include <stdlib.h>
#include <string.h>

#define SENTINEL 0x5A5A5A5A

static unsigned long long rng = 0x9E3779B97F4A7C15ULL;
static unsigned rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng >> 32);
}

/* A: 0 any u8, 1 all <= 127, 2 <= 127 but for one row; B any s8. */
static void fill(uint8_t *A, size_t na, int8_t *B, size_t nb, int amode, int M, int lda) {
    size_t i;
    for (i = 0; i < na; i++) A[i] = (uint8_t)(amode == 0 ? rnd() & 255 : rnd() & 127);
    if (amode == 2 && M > 0) A[(size_t)(M - 1) * lda] = 200; /* the last tile takes the exact form */
    for (i = 0; i < nb; i++) B[i] = (int8_t)(int)((rnd() & 255) - 128);
}

/* Runs one product with padded leading dimensions and checks every element
   against the int32 sum and the padding against SENTINEL. */
static enum harness_result check_case(int M, int N, int K, int amode) {
    const int lda = K + 3, ldb = K + 1, ldc = N + 2;
    uint8_t *A = (uint8_t *)malloc((size_t)M * lda + 1);
    int8_t *B = (int8_t *)malloc((size_t)N * ldb + 1);
    int32_t *C = (int32_t *)malloc(sizeof(int32_t) * ((size_t)M * ldc + 1));
    int i, j, k, rc;
    fill(A, (size_t)M * lda, B, (size_t)N * ldb, amode, M, lda);
    for (i = 0; i < M * ldc; i++) C[i] = SENTINEL;
    rc = gdl_gemm_u8s8_cpu(M, N, K, A, lda, B, ldb, C, ldc);
    if (rc != 0) FAILf("M=%d N=%d K=%d: %s", M, N, K, gdl_last_error());
    for (i = 0; i < M; i++)
        for (j = 0; j < ldc; j++) {
            int32_t ref = SENTINEL;
            if (j < N) {
                ref = 0;
                for (k = 0; k < K; k++) ref += (int32_t)A[(size_t)i * lda + k] * B[(size_t)j * ldb + k];
            }
            if (C[(size_t)i * ldc + j] != ref) {
                const int32_t got = C[(size_t)i * ldc + j];
                free(A);
                free(B);
                free(C);
                FAILf("%s: M=%d N=%d K=%d A-mode %d: C[%d][%d] = %d, reference %d%s", gdl_gemm_int8_kernel_name(), M,
                      N, K, amode, i, j, (int)got, (int)ref, j >= N ? " (padding written)" : "");
            }
        }
    free(A);
    free(B);
    free(C);
    PASS();
}

TEST test_selected_kernel(void) {
    printf("\n  int8 kernel: %s (float GEMM: %s)\n", gdl_gemm_int8_kernel_name(), gdl_gemm_kernel_name());
#ifdef QI8_EXPECT
    if (strncmp(gdl_gemm_int8_kernel_name(), QI8_EXPECT, strlen(QI8_EXPECT)) != 0)
        FAILf("this build should select the %s int8 kernel, it selected %s", QI8_EXPECT, gdl_gemm_int8_kernel_name());
    PASS();
#else
    SKIPm("no QI8_EXPECT given: which kernel this build should select is not checked");
#endif
}

/* every M, N around the tiles, K around the groups of 4 and past them */
TEST test_small_shapes(void) {
    static const int Ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 17};
    static const int Ns[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 40};
    static const int Ks[] = {1, 2, 3, 4, 5, 7, 8, 13, 64, 67};
    size_t a, b, c;
    int n = 0;
    for (a = 0; a < sizeof Ms / sizeof *Ms; a++)
        for (b = 0; b < sizeof Ns / sizeof *Ns; b++)
            for (c = 0; c < sizeof Ks / sizeof *Ks; c++, n++) CHECK_CALL(check_case(Ms[a], Ns[b], Ks[c], n % 3));
    PASS();
}

/* layer-sized products, threaded: an MLP's first layer at batch 33, and past several panels */
TEST test_large_shapes(void) {
    CHECK_CALL(check_case(33, 128, 784, 1));
    CHECK_CALL(check_case(33, 128, 784, 0));
    CHECK_CALL(check_case(70, 300, 257, 2));
    PASS();
}

/* vpmaddubsw's saturation edges: pairs of 255 * -128 and 255 * 127 (each pair
   beyond int16), and the largest K, where the sum just fits int32 */
TEST test_saturation_edges(void) {
    static const int Ks[] = {2, 4, 31, 1000, GDL_GEMM_INT8_MAX_K};
    static const int bvals[] = {-128, 127, -1};
    size_t ki, bi;
    for (ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
        for (bi = 0; bi < sizeof bvals / sizeof *bvals; bi++) {
            const int M = 5, N = 17, K = Ks[ki];
            uint8_t *A = (uint8_t *)malloc((size_t)M * K);
            int8_t *B = (int8_t *)malloc((size_t)N * K);
            int32_t *C = (int32_t *)malloc(sizeof(int32_t) * M * N);
            int i, j, k;
            for (i = 0; i < M; i++)
                for (k = 0; k < K; k++) A[(size_t)i * K + k] = (uint8_t)(i == 1 && k % 2 ? 254 : 255);
            for (j = 0; j < N; j++)
                for (k = 0; k < K; k++) B[(size_t)j * K + k] = (int8_t)(j == 3 ? -bvals[bi] - (bvals[bi] == -128) : bvals[bi]);
            if (gdl_gemm_u8s8_cpu(M, N, K, A, K, B, K, C, N) != 0) FAILf("K=%d: %s", K, gdl_last_error());
            for (i = 0; i < M; i++)
                for (j = 0; j < N; j++) {
                    long long ref = 0;
                    for (k = 0; k < K; k++) ref += (long long)A[(size_t)i * K + k] * B[(size_t)j * K + k];
                    if (C[i * N + j] != ref) {
                        const long long got = C[i * N + j];
                        free(A);
                        free(B);
                        free(C);
                        FAILf("%s: K=%d b=%d: C[%d][%d] = %lld, reference %lld", gdl_gemm_int8_kernel_name(), K,
                              bvals[bi], i, j, got, ref);
                    }
                }
            free(A);
            free(B);
            free(C);
        }
    PASS();
}

/* 1 and 3 threads give the same bits (and the reference's) */
TEST test_thread_count_independent(void) {
    const int M = 67, N = 150, K = 300;
    uint8_t *A = (uint8_t *)malloc((size_t)M * K);
    int8_t *B = (int8_t *)malloc((size_t)N * K);
    int32_t *c1 = (int32_t *)malloc(sizeof(int32_t) * M * N), *c3 = (int32_t *)malloc(sizeof(int32_t) * M * N);
    int same;
    fill(A, (size_t)M * K, B, (size_t)N * K, 0, M, K);
    gdl_set_num_threads(1);
    gdl_gemm_u8s8_cpu(M, N, K, A, K, B, K, c1, N);
    gdl_set_num_threads(3);
    gdl_gemm_u8s8_cpu(M, N, K, A, K, B, K, c3, N);
    gdl_set_num_threads(0);
    same = memcmp(c1, c3, sizeof(int32_t) * M * N) == 0;
    free(A);
    free(B);
    free(c1);
    free(c3);
    ASSERTm("1 and 3 threads give different results", same);
    PASS();
}

/* K = 0: C is zero; M or N 0: nothing is written */
TEST test_degenerate(void) {
    int32_t C[6] = {7, 7, 7, 7, 7, 7};
    int i;
    ASSERT_EQ(0, gdl_gemm_u8s8_cpu(2, 3, 0, NULL, 0, NULL, 0, C, 3));
    for (i = 0; i < 6; i++) ASSERT_EQ(0, C[i]);
    C[0] = 7;
    ASSERT_EQ(0, gdl_gemm_u8s8_cpu(0, 3, 5, NULL, 5, NULL, 5, C, 3));
    ASSERT_EQ(7, C[0]);
    PASS();
}

/* shapes it cannot take: clear errors, C untouched */
TEST test_errors(void) {
    uint8_t A[8] = {0};
    int8_t B[8] = {0};
    int32_t C[4] = {9, 9, 9, 9};
    ASSERT_EQ(-1, gdl_gemm_u8s8_cpu(1, 1, GDL_GEMM_INT8_MAX_K + 1, A, GDL_GEMM_INT8_MAX_K + 1, B,
                                    GDL_GEMM_INT8_MAX_K + 1, C, 1));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_gemm_u8s8_cpu: the int8 GEMM cannot take M=1 N=1 K=65537");
    ASSERT_CONTAINS(gdl_last_error(), "overflow");
    ASSERT_EQ(-1, gdl_gemm_u8s8_cpu(-1, 1, 4, A, 4, B, 4, C, 1));
    ASSERT_CONTAINS(gdl_last_error(), "M=-1");
    ASSERT_EQ(-1, gdl_gemm_u8s8_cpu(2, 2, 4, A, 3, B, 4, C, 2));
    ASSERT_CONTAINS(gdl_last_error(), "lda 3");
    ASSERT_EQ(-1, gdl_gemm_u8s8_cpu(2, 2, 4, NULL, 4, B, 4, C, 2));
    ASSERT_CONTAINS(gdl_last_error(), "A NULL");
    ASSERT_EQ(9, C[0]);
    PASS();
}

SUITE(gemm_int8) {
    RUN_TEST(test_selected_kernel);
    RUN_TEST(test_small_shapes);
    RUN_TEST(test_large_shapes);
    RUN_TEST(test_saturation_edges);
    RUN_TEST(test_thread_count_independent);
    RUN_TEST(test_degenerate);
    RUN_TEST(test_errors);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_SUITE(gemm_int8);
    gdl_shutdown();
    HARNESS_MAIN_END();
}
