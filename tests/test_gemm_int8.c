/* test_gemm_int8.c — the CPU int8 GEMM a build selects (gdl_gemm_u8s8_cpu:
   AVX-512 VNNI, AVX2, NEON sdot, NEON or portable C) against an int32
   reference: shapes around every kernel's tile sizes (MR 4/8, NR 8/16/32)
   and K around the groups of 4, padded leading dimensions (the padding never
   written), activations of 7 bits (AVX2's fast form), of 8 bits (its exact
   split form) and mixed tile by tile, the saturation edges of vpmaddubsw
   (255 * -128 pairs) up to the largest K, bitwise across thread counts, and
   the errors for shapes the GEMM cannot take. And the loops around it that
   the quantized layers run (quantize, dequantize, min-max, the epilogue:
   vectorised for AVX-512 and AVX2), bit for bit against src/api/backend.h's scalar
   definitions (gdl_q_quantize1, gdl_q_epilogue1), through the API: lengths
   and channel counts around the vector widths, NaN, inf, -0, ties and the
   clamps, the static layers' requantization and a convolution's transposed
   output, and 1 against 3 threads past the size where they use the pool.

   Uses the API only: tests/quant.mk links it with each CPU path's library
   object (tests/cpu_paths.mk builds them) and with the default build's.
   -DQI8_EXPECT="\"avx2\"" makes it check which kernel the build selected. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"

#include <float.h>
#include <math.h>
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

/* ---- the INT8 entries' loops, through the API, against src/api/backend.h's scalar definitions ---- */

static volatile float big_v = 12582912.0f; /* gdl_q_round's big, unfoldable */

/* the byte a quantized value is stored as: u8, or s8's two's complement; a NaN (a NaN input) 0 */
static uint8_t qbyte(float r) { return (uint8_t)(r == r ? (int)r : 0); }

/* a random float in [-a, a) */
static float frand(float a) { return ((float)(rnd() % 1000003) / 1000003.0f * 2 - 1) * a; }

/* Input i for scale s and zero point z: noise over the 8-bit range and past it, and every few elements an
   edge case, so that each falls in vector bodies and in scalar tails: NaN, inf, -0, huge and tiny values,
   exact ties (s a power of 2), the ties at the clamps, values past 2^22 steps. specials 0: none of NaN, inf,
   huge (a dynamic layer refuses the first two, and the last would take all its range). */
static float edge_value(int i, float s, int32_t z, int specials) {
    static const float sp[] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, 1e30f, -1e30f, FLT_MAX, -FLT_MAX, 1e-40f, -1e-40f};
    switch (i % 11) {
    case 0: return specials ? sp[(i / 11) % 11] : -0.0f;
    case 1: return ((float)(int)(rnd() % 600) - 300.5f) * s;
    case 2: return (255.5f - (float)z) * s;
    case 3: return (-0.5f - (float)z) * s;
    case 4: return specials ? (i & 16 ? -1.0f : 1.0f) * 4194304.5f * s : frand(300.0f * s);
    case 5: return specials ? (i & 32 ? -1.0f : 1.0f) * 12582913.0f * s : frand(300.0f * s);
    default: return frand(300.0f * s);
    }
}

/* gdl_quantize_per_tensor: each byte against gdl_q_quantize1 */
static enum harness_result quantize_case(int n, float s, int32_t z, int specials) {
    float *v = (float *)malloc(sizeof(float) * (size_t)n);
    gdl_tensor *x, *q;
    int i;
    for (i = 0; i < n; i++) v[i] = edge_value(i, s, z, specials);
    ASSERT_NOT_NULL(x = gdl_from_array(v, 1, (int64_t[]){n}, GDL_F32, gdl_cpu()));
    ASSERT_NOT_NULL(q = gdl_quantize_per_tensor(x, s, z));
    for (i = 0; i < n; i++) {
        const uint8_t want = qbyte(gdl_q_quantize1(v[i], 1.0f / s, (float)z, 0, 255, big_v));
        const uint8_t got = ((const uint8_t *)q->data)[i];
        if (got != want) {
            const double vi = v[i];
            free(v);
            FAILf("n=%d scale %g zp %d: x[%d] = %g quantized to %d, reference %d", n, (double)s, (int)z, i, vi,
                  (int)got, (int)want);
        }
    }
    gdl_free(x);
    gdl_arena_reset();
    free(v);
    PASS();
}

TEST test_quantize_bits(void) {
    static const int ns[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 64, 65, 100, 257};
    static const float scales[] = {0.25f, 0.0137f, 3.0e-3f, 1e-30f};
    static const int32_t zps[] = {0, 3, 128, 255};
    size_t a, b, c;
    for (a = 0; a < sizeof ns / sizeof *ns; a++)
        for (b = 0; b < sizeof scales / sizeof *scales; b++)
            for (c = 0; c < sizeof zps / sizeof *zps; c++) CHECK_CALL(quantize_case(ns[a], scales[b], zps[c], 1));
    PASS();
}

/* gdl_dequantize: every byte value, lengths around the vector widths */
TEST test_dequantize_bits(void) {
    static const int ns[] = {1, 7, 8, 9, 15, 16, 17, 33, 256, 259};
    static const float scales[] = {0.25f, 0.0137f, 7.0f};
    static const int32_t zps[] = {0, 77, 255};
    size_t a, b, c;
    for (a = 0; a < sizeof ns / sizeof *ns; a++)
        for (b = 0; b < sizeof scales / sizeof *scales; b++)
            for (c = 0; c < sizeof zps / sizeof *zps; c++) {
                const int n = ns[a];
                uint8_t *v = (uint8_t *)malloc((size_t)n);
                gdl_tensor *q, *y;
                int i;
                for (i = 0; i < n; i++) v[i] = (uint8_t)(i * 37 + 11);
                ASSERT_NOT_NULL(q = gdl_from_array(v, 1, (int64_t[]){n}, GDL_U8, gdl_cpu()));
                ASSERT_NOT_NULL(y = gdl_dequantize(q, scales[b], zps[c]));
                for (i = 0; i < n; i++) {
                    const float want = (float)((int32_t)v[i] - zps[c]) * scales[b], got = (float)((const gdl_real *)y->data)[i];
                    if (memcmp(&want, &got, sizeof want) != 0) {
                        free(v);
                        FAILf("n=%d scale %g zp %d: byte %d dequantized to %.9g, reference %.9g", n, (double)scales[b],
                              (int)zps[c], i, (double)got, (double)want);
                    }
                }
                gdl_free(q);
                gdl_arena_reset();
                free(v);
            }
    PASS();
}

/* A large quantize / dequantize (past the pool's threshold): 1 and 3 threads, the same bytes and floats */
TEST test_quantize_threads(void) {
    const int n = 300001;
    float *v = (float *)malloc(sizeof(float) * n);
    gdl_tensor *x, *q1, *q3, *y1, *y3;
    int i, same;
    for (i = 0; i < n; i++) v[i] = edge_value(i, 0.0137f, 100, 1);
    ASSERT_NOT_NULL(x = gdl_from_array(v, 1, (int64_t[]){n}, GDL_F32, gdl_cpu()));
    gdl_set_num_threads(1);
    q1 = gdl_quantize_per_tensor(x, 0.0137f, 100);
    y1 = q1 ? gdl_dequantize(q1, 0.0137f, 100) : NULL;
    gdl_set_num_threads(3);
    q3 = gdl_quantize_per_tensor(x, 0.0137f, 100);
    y3 = q3 ? gdl_dequantize(q3, 0.0137f, 100) : NULL;
    gdl_set_num_threads(0);
    ASSERT_NOT_NULL(y1);
    ASSERT_NOT_NULL(y3);
    same = memcmp(q1->data, q3->data, (size_t)n) == 0 && memcmp(y1->data, y3->data, sizeof(gdl_real) * n) == 0;
    for (i = 0; i < n && same; i++) same = ((const uint8_t *)q1->data)[i] == qbyte(gdl_q_quantize1(v[i], 1.0f / 0.0137f, 100, 0, 255, big_v));
    gdl_free(x);
    gdl_arena_reset();
    free(v);
    ASSERTm("1 and 3 threads (or the reference) give different quantized bytes or dequantized floats", same);
    PASS();
}

/* the saved layer's tensor name (prefix + name) as floats, its element count in *n; NULL if missing */
static float *st_floats(const gdl_st_file *f, const char *prefix, const char *name, int *n) {
    char full[128];
    const gdl_st_entry *e;
    float *out;
    snprintf(full, sizeof full, "%s%s", prefix, name);
    if (!(e = gdl_st_find(f, full))) return NULL;
    *n = (int)((e->end - e->begin) / 4);
    out = (float *)malloc(sizeof(float) * (size_t)(*n ? *n : 1));
    memcpy(out, f->data + e->begin, (size_t)(e->end - e->begin));
    return out;
}

/* a one-element tensor of the file (f32 or i32): its 4 bytes into out. 0 / -1 (missing) */
static int st_word(const gdl_st_file *f, const char *prefix, const char *name, void *out) {
    int n;
    float *v = st_floats(f, prefix, name, &n);
    if (!v) return -1;
    memcpy(out, v, 4);
    free(v);
    return 0;
}

/* A quantized layer as its file holds it: int8 weights [N, K], their row sums, scales, bias (NULL if none),
   and the epilogue's parameters (static layers: the input's and output's scales and zero points). */
typedef struct qlayer_ref {
    int N, K;
    int8_t *w;
    int32_t *colsum;
    float *ws, *bias;
    gdl_qepi e;
} qlayer_ref;

static void free_layer(qlayer_ref *r) {
    free(r->w);
    free(r->colsum);
    free(r->ws);
    free(r->bias);
}

/* m saved and read back (its layer's tensors named prefix + name). 0 / -1. */
static int load_layer(gdl_module *m, const char *prefix, int static_, int relu, qlayer_ref *r) {
    const char *path = "build/test_gemm_int8_layer.safetensors";
    gdl_st_file f;
    const gdl_st_entry *we;
    char full[128];
    int nws = 0, nb = 0, n, k, rc = 0;
    memset(r, 0, sizeof *r);
    snprintf(full, sizeof full, "%sweight_int8", prefix);
    if (gdl_quant_save(m, path) != 0 || gdl_st_read(path, &f) != 0) return -1;
    remove(path);
    if (!(we = gdl_st_find(&f, full)) || !(r->ws = st_floats(&f, prefix, "weight_scale", &nws))) rc = -1;
    else {
        r->N = (int)we->shape[0];
        r->K = (int)((we->end - we->begin) / (uint64_t)r->N);
        r->w = (int8_t *)malloc((size_t)r->N * r->K);
        r->colsum = (int32_t *)malloc(sizeof(int32_t) * r->N);
        memcpy(r->w, f.data + we->begin, (size_t)r->N * r->K);
        for (n = 0; n < r->N; n++)
            for (r->colsum[n] = 0, k = 0; k < r->K; k++) r->colsum[n] += r->w[n * r->K + k];
        r->bias = st_floats(&f, prefix, "bias", &nb);
        if (static_ && (st_word(&f, prefix, "input_scale", &r->e.sa) < 0 || st_word(&f, prefix, "input_zero_point", &r->e.za) < 0 ||
                        st_word(&f, prefix, "output_scale", &r->e.out_scale) < 0 ||
                        st_word(&f, prefix, "output_zero_point", &r->e.out_zp) < 0))
            rc = -1;
    }
    gdl_st_free(&f);
    r->e.N = r->N;
    r->e.colsum = r->colsum;
    r->e.w_scale = r->ws;
    r->e.bias = nb == r->N ? r->bias : NULL;
    r->e.per_channel = nws == r->N && r->N > 1;
    r->e.relu = relu;
    r->e.requant = static_;
    r->e.qmax = 127; /* 7-bit activations, the default */
    return rc;
}

/* The quantized layer m (a Linear, or a Conv2d of kernel 3, padding 1, stride 1; its tensors named prefix +
   name in its file) on x, recomputed with gdl_q_quantize1 and gdl_q_epilogue1 from the file: every output, bit
   for bit, with 1 and with 3 threads. static_: the input's scale and zero point from the file, else from
   gdl_choose_qparams on x's range (dynamic). A row of the products: a sample of a Linear, an output position
   of a sample of a Conv2d (whose taps outside the image are the input's zero point). */
static enum harness_result layer_bits(gdl_module *m, const char *prefix, gdl_tensor *x, int conv, int static_, int relu) {
    const gdl_real *xd = (const gdl_real *)x->data;
    const int B = conv ? (int)x->shape[0] : (int)(x->numel / x->shape[x->ndim - 1]);
    const int C = conv ? (int)x->shape[1] : 0, H = conv ? (int)x->shape[2] : 1, W = conv ? (int)x->shape[3] : 1;
    const int pos = conv ? H * W : 0;
    qlayer_ref r;
    uint8_t *xq;
    float lo = 0, hi = 0;
    int i, n, k, t;
    ASSERT_EQ(0, load_layer(m, prefix, static_, relu, &r));
    r.e.pos = pos;
    for (i = 0; i < x->numel && !static_; i++) {
        lo = (float)xd[i] < lo ? (float)xd[i] : lo;
        hi = (float)xd[i] > hi ? (float)xd[i] : hi;
    }
    if (!static_) ASSERT_EQ(0, gdl_choose_qparams(lo, hi, 0, r.e.qmax, &r.e.sa, &r.e.za));
    xq = (uint8_t *)malloc((size_t)x->numel);
    for (i = 0; i < x->numel; i++)
        xq[i] = qbyte(gdl_q_quantize1((float)xd[i], 1.0f / r.e.sa, (float)r.e.za, 0, (float)r.e.qmax, big_v));
    for (t = 0; t < 2; t++) {
        gdl_tensor *y;
        gdl_set_num_threads(t ? 3 : 1);
        y = gdl_forward(m, x);
        gdl_set_num_threads(0);
        ASSERT_NOT_NULL(y);
        for (i = 0; i < B * (conv ? pos : 1); i++) {
            const int b = conv ? i / pos : i, p = conv ? i % pos : 0, oy = p / W, ox = p % W;
            for (n = 0; n < r.N; n++) {
                int32_t acc = 0;
                float want, got;
                for (k = 0; k < r.K; k++) {
                    const int c = k / 9, yy = oy - 1 + k / 3 % 3, xx = ox - 1 + k % 3;
                    const int a = !conv ? xq[(size_t)b * r.K + k]
                                  : yy < 0 || yy >= H || xx < 0 || xx >= W ? r.e.za : xq[((b * C + c) * H + yy) * W + xx];
                    acc += a * r.w[n * r.K + k];
                }
                want = gdl_q_epilogue1(&r.e, acc, n, big_v);
                got = (float)((const gdl_real *)y->data)[conv ? ((b * r.N + n) * pos + p) : i * r.N + n];
                if (memcmp(&want, &got, sizeof want) != 0) {
                    free_layer(&r);
                    free(xq);
                    FAILf("%s %s N=%d K=%d, %d thread(s): output row %d channel %d = %.9g, reference %.9g",
                          static_ ? "static" : "dynamic", conv ? "Conv2d" : "Linear", r.N, r.K, t ? 3 : 1, i, n,
                          (double)got, (double)want);
                }
            }
        }
        gdl_arena_reset();
    }
    free_layer(&r);
    free(xq);
    PASS();
}

/* x [rows, in] of edge values without NaN/inf (a dynamic layer refuses them), at scale 1/64 */
static gdl_tensor *edge_input(int ndim, const int64_t *shape, int specials) {
    gdl_tensor *x = gdl_zeros(ndim, shape, GDL_F32, gdl_cpu());
    int64_t i;
    if (x)
        for (i = 0; i < x->numel; i++) ((gdl_real *)x->data)[i] = edge_value((int)i, 1.0f / 64, 0, specials);
    return x;
}

/* dynamic Linear layers: rows, in and out around the vector widths (8, 16) and the tiles, with and without
   bias, per channel and per tensor; the largest past the epilogue's pool threshold */
TEST test_dynamic_layer_bits(void) {
    static const int shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {5, 17, 33}, {9, 31, 15}, {33, 64, 40}, {7, 130, 16},
                                    {2, 9, 17}, {300, 8, 1000}};
    size_t s;
    int v;
    gdl_manual_seed(4);
    for (s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (v = 0; v < 2; v++) {
            gdl_qconfig qc = gdl_qconfig_default();
            gdl_module *lin = gdl_nn_linear(shapes[s][1], shapes[s][2], v == 0), *q;
            gdl_tensor *x = edge_input(2, (int64_t[]){shapes[s][0], shapes[s][1]}, 0);
            qc.per_channel = v == 0;
            ASSERT_NOT_NULL(lin);
            ASSERT_NOT_NULL(x);
            ASSERT_NOT_NULL(q = gdl_quantize_dynamic(lin, &qc));
            CHECK_CALL(layer_bits(q, "", x, 0, 0, 0));
            gdl_module_free(lin);
            gdl_module_free(q);
            gdl_free(x);
        }
    PASS();
}

/* A NaN or inf anywhere in a dynamic layer's input (vector body or tail of the min-max) is refused */
TEST test_dynamic_nan_anywhere(void) {
    static const int at[] = {0, 5, 63, 64, 150, 198, 199};
    gdl_module *lin = gdl_nn_linear(20, 3, 1), *q;
    size_t a;
    int bad;
    ASSERT_NOT_NULL(lin);
    ASSERT_NOT_NULL(q = gdl_quantize_dynamic(lin, NULL));
    for (a = 0; a < sizeof at / sizeof *at; a++)
        for (bad = 0; bad < 3; bad++) {
            gdl_tensor *x = edge_input(2, (int64_t[]){10, 20}, 0);
            ASSERT_NOT_NULL(x);
            ((gdl_real *)x->data)[at[a]] = bad == 0 ? NAN : bad == 1 ? INFINITY : -INFINITY;
            if (gdl_forward(q, x) != NULL) FAILf("a %s at %d was not refused", bad ? "inf" : "NaN", at[a]);
            ASSERT_CONTAINS(gdl_last_error(), "holds NaN or inf");
            gdl_free(x);
        }
    gdl_module_free(lin);
    gdl_module_free(q);
    PASS();
}

/* static Linear(+ReLU) and Conv2d(+ReLU): the requantizing epilogue, a convolution's [channel][position]
   output; calibrated on clean data, then run on edge values with NaN and inf (quantized as byte 0 and the
   clamps) */
TEST test_static_layer_bits(void) {
    int conv, relu;
    gdl_manual_seed(9);
    for (conv = 0; conv < 2; conv++)
        for (relu = 0; relu < 2; relu++) {
            gdl_module *layer = conv ? gdl_nn_conv2d(2, 21, 3, 1, 1, 1, 1, 1) : gdl_nn_linear(37, 21, 1);
            gdl_module *m = relu ? gdl_nn_sequential(2, (gdl_module *[]){layer, gdl_nn_relu()})
                                 : gdl_nn_sequential(1, (gdl_module *[]){layer});
            gdl_tensor *xc, *x;
            gdl_module *p, *q;
            if (conv) {
                xc = gdl_randn(GDL_DIMS(3, 2, 5, 7), gdl_cpu());
                x = edge_input(4, (int64_t[]){3, 2, 5, 7}, 1);
            } else {
                xc = gdl_randn(GDL_DIMS(10, 37), gdl_cpu());
                x = edge_input(2, (int64_t[]){10, 37}, 1);
            }
            ASSERT_NOT_NULL(m);
            ASSERT_NOT_NULL(xc);
            ASSERT_NOT_NULL(x);
            ASSERT_NOT_NULL(p = gdl_quant_prepare(m, NULL));
            ASSERT_NOT_NULL(gdl_forward(p, xc));
            ASSERT_NOT_NULL(q = gdl_quant_convert(p));
            CHECK_CALL(layer_bits(q, "0.", x, conv, 1, relu));
            gdl_module_free(m);
            gdl_module_free(p);
            gdl_module_free(q);
            gdl_free(xc);
            gdl_free(x);
            gdl_arena_reset();
        }
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
    RUN_TEST(test_quantize_bits);
    RUN_TEST(test_dequantize_bits);
    RUN_TEST(test_quantize_threads);
    RUN_TEST(test_dynamic_layer_bits);
    RUN_TEST(test_dynamic_nan_anywhere);
    RUN_TEST(test_static_layer_bits);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_SUITE(gemm_int8);
    gdl_shutdown();
    HARNESS_MAIN_END();
}
