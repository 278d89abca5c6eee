/* ---------------------------------------------------------------------------
   src/cpu/gemm_int8.h  The CPU int8 GEMM of the quantized layers (src/api/quant.h):

       C[M,N] (int32) = A[M,K] (u8) * B[N,K]^T (s8)

   A is a batch of quantized activations, B a quantized weight in Linear's
   layout [out, in], so C = x W^T. Every path computes the exact integer
   sums, so all paths, tile sizes and thread counts give the same bits. K is
   at most GDL_GEMM_INT8_MAX_K (65536): then no partial sum can leave int32
   (65536 * 255 * 128 < 2^31), on any path.

   B is packed once (a quantized layer packs its weight when it is made):
   panels of NR columns, K padded to KP (a multiple of 4) with zeros, and in
   a panel the 4 k's of each group side by side per column:
       packed[p][g][j][r] = B[p*NR + j][4g + r]     (0 outside B)
   which is the operand layout of the 4-wide dot-product instructions. Its
   column sums (int32) are kept with it: the zero-point correction of the
   quantized layers needs them, and so does the NEON path below. A is read
   in place, rows KP bytes apart or more, the padding of each row any value
   (it meets B's zero padding). The micro-kernel computes an MR x NR tile
   into a local tile; the driver copies the valid part out.

   Micro-kernels (chosen from what the compiler targets, as src/cpu/gemm.h's):
     AVX-512 VNNI 8x32  vpdpbusd: u8 x s8, 4 products summed into an int32
                        lane, exact. Needs -mavx512vnni -mavx512bw
                        (-march=native on Cascade Lake, Ice Lake, Sapphire
                        Rapids, Zen 4).
     AVX2 4x16          vpmaddubsw (u8 x s8, pairs summed into int16 WITH
                        SATURATION) then vpmaddwd by 1 into int32. A pair
                        of products exceeds int16 only when an activation is
                        above 127 (255*-128*2 = -65280), which is why
                        PyTorch's x86 engine quantizes activations to 7 bits
                        (reduce_range). Here: rows whose activations are all
                        <= 127 (the quantized layers' activations, which are
                        7-bit as PyTorch's) take that fast form; a tile with
                        a byte above 127 splits each activation a = l + 128h
                        (l <= 127, h in {0, 1}) and sums l*b and h*b with
                        two vpmaddubsw, the second scaled by 128 in
                        vpmaddwd: exact for all u8, at twice the cost. So
                        the AVX2 path is exact for any input.
     NEON sdot 8x8      (AArch64 with the dot-product extension,
                        __ARM_FEATURE_DOTPROD: -march=armv8.2-a+dotprod,
                        Cortex-A55/A76 and later) vdotq_s32 is s8 x s8, so
                        activations enter as a - 128 (a XOR 0x80) and
                        128 * colsum(B) is added back: exact.
     NEON 4x8           (any AArch64) the same a - 128, products by vmull_s8
                        (each fits int16: |128*128|), pairs widened and
                        summed into int32 by vpadalq_s16: exact.
     portable 4x8       plain C; also -DGPUDL_GEMM_PORTABLE.
   Threads: the MR x NR tiles are cut into contiguous ranges, one task per
   range (src/runtime/thread_pool.h); every tile is computed whole by one task, so the
   threads change nothing but the time.
   ------------------------------------------------------------------------- */

#if !defined(GPUDL_GEMM_PORTABLE)
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512F__)
#include <immintrin.h>
#define GDL__QG_VNNI 1
#elif defined(__AVX2__)
#include <immintrin.h>
#define GDL__QG_AVX2 1
#elif defined(__aarch64__) && defined(__ARM_NEON) && defined(__ARM_FEATURE_DOTPROD)
#include <arm_neon.h>
#define GDL__QG_SDOT 1
#elif (defined(__aarch64__) && defined(__ARM_NEON)) || defined(_M_ARM64) /* MSVC's AArch64: NEON, sdot unknown */
#include <arm_neon.h>
#define GDL__QG_NEON 1
#endif
#endif

/* each kernel's tile, MR x NR, and name (gdl_gemm_int8_kernel_name) */
#if defined(GDL__QG_VNNI)
#define GDL__QG_MR 8
#define GDL__QG_NR 32
#define GDL__QG_NAME "avx512vnni 8x32"
#elif defined(GDL__QG_AVX2)
#define GDL__QG_MR 4
#define GDL__QG_NR 16
#define GDL__QG_NAME "avx2 4x16"
#elif defined(GDL__QG_SDOT)
#define GDL__QG_MR 8
#define GDL__QG_NR 8
#define GDL__QG_NAME "neon-sdot 8x8"
#else /* NEON without sdot, portable */
#define GDL__QG_MR 4
#define GDL__QG_NR 8
#ifdef GDL__QG_NEON
#define GDL__QG_NAME "neon 4x8"
#else
#define GDL__QG_NAME "portable 4x8"
#endif
#endif
#if defined(GDL__QG_SDOT) || defined(GDL__QG_NEON)
#define GDL__QG_SIGNED_A 1 /* the kernel multiplies a - 128: the driver adds 128 * colsum */
#endif

/* A packed B (gdl__qpack_init): npanel panels of NR columns x KP bytes. */
typedef struct gdl__qpack {
    int N, K, KP, npanel;
    int8_t *b;       /* npanel * NR * KP bytes, 64-byte aligned inside raw */
    int32_t *colsum; /* [N]: sum over k of B[n][k] */
    void *raw;
} gdl__qpack;

static void gdl__qpack_free(gdl__qpack *p) {
    if (!p) return;
    GPUDL_FREE(p->raw);
    GPUDL_FREE(p->colsum);
    memset(p, 0, sizeof *p);
}

/* The checks every entry makes; 0, or -1 after the error naming op. */
static int gdl__qgemm_check(const char *op, int M, int N, int K) {
    if (M < 0 || N < 0 || K < 0 || K > GDL_GEMM_INT8_MAX_K) {
        gdl__set_error("%s: the int8 GEMM cannot take M=%d N=%d K=%d: sizes must be >= 0 and K <= %d (beyond it an "
                       "int32 sum of u8*s8 products could overflow)", op, M, N, K, GDL_GEMM_INT8_MAX_K);
        return -1;
    }
    return 0;
}

/* Packs B [N, K] (rows ldb apart) for the kernel. 0 / -1. */
static int gdl__qpack_init(const char *op, gdl__qpack *p, int N, int K, const int8_t *B, ptrdiff_t ldb) {
    const int NR = GDL__QG_NR;
    int n, k;
    size_t bytes;
    memset(p, 0, sizeof *p);
    if (gdl__qgemm_check(op, 1, N, K) < 0) return -1;
    p->N = N;
    p->K = K;
    p->KP = (K + 3) / 4 * 4;
    p->npanel = (N + NR - 1) / NR;
    bytes = (size_t)p->npanel * NR * (size_t)p->KP;
    p->raw = GPUDL_MALLOC(bytes + 64);
    p->colsum = (int32_t *)GPUDL_MALLOC(sizeof(int32_t) * (size_t)(N ? N : 1));
    if (!p->raw || !p->colsum) {
        gdl__qpack_free(p);
        gdl__set_error("%s: out of memory packing a %dx%d int8 weight", op, N, K);
        return -1;
    }
    p->b = (int8_t *)(((uintptr_t)p->raw + 63) & ~(uintptr_t)63);
    memset(p->b, 0, bytes);
    for (n = 0; n < N; n++) {
        const int8_t *src = B + (ptrdiff_t)n * ldb;
        int8_t *dst = p->b + (size_t)(n / NR) * NR * p->KP + (size_t)(n % NR) * 4;
        int32_t s = 0;
        for (k = 0; k < K; k++) {
            dst[(size_t)(k / 4) * NR * 4 + (k & 3)] = src[k];
            s += src[k];
        }
        p->colsum[n] = s;
    }
    return 0;
}

/* --- micro-kernels --------------------------------------------------------
   gdl__qg_kernel(kg, a, lda, m, b, wide, tile): tile[i*NR + j] = sum over the
   kg groups of 4 k's of a[i][k] * b (packed panel), for rows i < m of A
   (rows lda bytes apart; rows m..MR-1 repeat row m-1 and are discarded).
   wide (AVX2 only): some activation of these rows is above 127.

   The SIMD kernels are one body (below the ISAs' sections), each ISA giving
     GDL__QG_ROWS(X)   X(r) for each of the MR rows
     GDL__QG_VEC, GDL__QG_LOAD(p)   B's vector type and its aligned load: a
                       k-group of the panel is two vectors, b0 and b1
     GDL__QG_CONSTS    the constants the steps use
     GDL__QG_ACC(r)    declares row r's accumulators c<r>_0 .. (zero)
     GDL__QG_STEP(r)   adds row r's 4 activations of group g (a<r>[4g ..],
                       read by gdl__qg_a4) times b0, b1 to its accumulators;
                       AVX2 has a second, GDL__QG_STEP_WIDE, for any u8
     GDL__QG_STORE(r)  row r's accumulators into tile[r*NR .. r*NR + NR - 1] */

#if defined(GDL__QG_VNNI) || defined(GDL__QG_AVX2) || defined(GDL__QG_SDOT) || defined(GDL__QG_NEON)
/* the 4 activations a[0..3], as one 32-bit lane to broadcast */
static inline uint32_t gdl__qg_a4(const uint8_t *a) {
    uint32_t v;
    memcpy(&v, a, 4);
    return v;
}
#endif

#if defined(GDL__QG_VNNI)

#define GDL__QG_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define GDL__QG_VEC __m512i
#define GDL__QG_LOAD(p) _mm512_load_si512((const void *)(p))
#define GDL__QG_CONSTS
#define GDL__QG_ACC(r) __m512i c##r##_0 = _mm512_setzero_si512(), c##r##_1 = _mm512_setzero_si512();
#define GDL__QG_STEP(r)                                                         \
    {                                                                           \
        const __m512i av = _mm512_set1_epi32((int32_t)gdl__qg_a4(a##r + 4 * g)); \
        c##r##_0 = _mm512_dpbusd_epi32(c##r##_0, av, b0);                       \
        c##r##_1 = _mm512_dpbusd_epi32(c##r##_1, av, b1);                       \
    }
#define GDL__QG_STORE(r)                                                        \
    _mm512_storeu_si512((void *)(tile + (r) * 32), c##r##_0);                   \
    _mm512_storeu_si512((void *)(tile + (r) * 32 + 16), c##r##_1);

#elif defined(GDL__QG_AVX2)

#define GDL__QG_ROWS(X) X(0) X(1) X(2) X(3)
#define GDL__QG_VEC __m256i
#define GDL__QG_LOAD(p) _mm256_load_si256((const __m256i *)(p))
#define GDL__QG_CONSTS const __m256i ones = _mm256_set1_epi16(1), v128 = _mm256_set1_epi16(128);
#define GDL__QG_ACC(r) __m256i c##r##_0 = _mm256_setzero_si256(), c##r##_1 = _mm256_setzero_si256();
/* activations <= 127: a pair of products fits int16 */
#define GDL__QG_STEP(r)                                                                            \
    {                                                                                              \
        const __m256i av = _mm256_set1_epi32((int32_t)gdl__qg_a4(a##r + 4 * g));                   \
        c##r##_0 = _mm256_add_epi32(c##r##_0, _mm256_madd_epi16(_mm256_maddubs_epi16(av, b0), ones)); \
        c##r##_1 = _mm256_add_epi32(c##r##_1, _mm256_madd_epi16(_mm256_maddubs_epi16(av, b1), ones)); \
    }
/* any u8: a = l + 128 h, and l*b and h*b never saturate */
#define GDL__QG_STEP_WIDE(r)                                                                            \
    {                                                                                                   \
        const uint32_t v = gdl__qg_a4(a##r + 4 * g);                                                    \
        const __m256i lo = _mm256_set1_epi32((int32_t)(v & 0x7F7F7F7Fu));                               \
        const __m256i hi = _mm256_set1_epi32((int32_t)((v >> 7) & 0x01010101u));                        \
        c##r##_0 = _mm256_add_epi32(c##r##_0, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, b0), ones));   \
        c##r##_0 = _mm256_add_epi32(c##r##_0, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, b0), v128));   \
        c##r##_1 = _mm256_add_epi32(c##r##_1, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, b1), ones));   \
        c##r##_1 = _mm256_add_epi32(c##r##_1, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, b1), v128));   \
    }
#define GDL__QG_STORE(r)                                                        \
    _mm256_storeu_si256((__m256i *)(tile + (r) * 16), c##r##_0);                \
    _mm256_storeu_si256((__m256i *)(tile + (r) * 16 + 8), c##r##_1);

#elif defined(GDL__QG_SDOT) || defined(GDL__QG_NEON)

#define GDL__QG_VEC int8x16_t
#define GDL__QG_LOAD(p) vld1q_s8(p)
#define GDL__QG_CONSTS const uint8x16_t flip = vdupq_n_u8(0x80);
/* row r's 4 activations of group g, minus 128 (s8), in each 32-bit lane */
#define GDL__QG_AS8(r) vreinterpretq_s8_u8(veorq_u8(vreinterpretq_u8_u32(vdupq_n_u32(gdl__qg_a4(a##r + 4 * g))), flip))
#if defined(GDL__QG_SDOT)
#define GDL__QG_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define GDL__QG_ACC(r) int32x4_t c##r##_0 = vdupq_n_s32(0), c##r##_1 = vdupq_n_s32(0);
#define GDL__QG_STEP(r)                                \
    {                                                  \
        const int8x16_t av = GDL__QG_AS8(r);           \
        c##r##_0 = vdotq_s32(c##r##_0, b0, av);        \
        c##r##_1 = vdotq_s32(c##r##_1, b1, av);        \
    }
#define GDL__QG_STORE(r)                       \
    vst1q_s32(tile + (r) * 8, c##r##_0);       \
    vst1q_s32(tile + (r) * 8 + 4, c##r##_1);
#else
/* per row 4 accumulators of 2 columns each: lanes (j, k0+k1), (j, k2+k3), (j+1, ...), folded at the end */
#define GDL__QG_ROWS(X) X(0) X(1) X(2) X(3)
#define GDL__QG_ACC(r) int32x4_t c##r##_0 = vdupq_n_s32(0), c##r##_1 = c##r##_0, c##r##_2 = c##r##_0, c##r##_3 = c##r##_0;
#define GDL__QG_STEP(r)                                                                    \
    {                                                                                      \
        const int8x16_t av = GDL__QG_AS8(r);                                               \
        c##r##_0 = vpadalq_s16(c##r##_0, vmull_s8(vget_low_s8(b0), vget_low_s8(av)));      \
        c##r##_1 = vpadalq_s16(c##r##_1, vmull_high_s8(b0, av));                           \
        c##r##_2 = vpadalq_s16(c##r##_2, vmull_s8(vget_low_s8(b1), vget_low_s8(av)));      \
        c##r##_3 = vpadalq_s16(c##r##_3, vmull_high_s8(b1, av));                           \
    }
#define GDL__QG_STORE(r)                                                \
    vst1q_s32(tile + (r) * 8, vpaddq_s32(c##r##_0, c##r##_1));          \
    vst1q_s32(tile + (r) * 8 + 4, vpaddq_s32(c##r##_2, c##r##_3));
#endif

#endif

#ifdef GDL__QG_ROWS
/* the k-groups, b advancing a group (NR columns x 4 k's) at a time */
#define GDL__QG_GROUPS(STEP)                                                                  \
    for (g = 0; g < kg; g++, b += GDL__QG_NR * 4) {                                           \
        const GDL__QG_VEC b0 = GDL__QG_LOAD(b), b1 = GDL__QG_LOAD(b + GDL__QG_NR * 2);        \
        GDL__QG_ROWS(STEP)                                                                    \
    }
static void gdl__qg_kernel(int kg, const uint8_t *a, ptrdiff_t lda, int m, const int8_t *GDL__RESTRICT b, int wide,
                           int32_t *GDL__RESTRICT tile) {
#define GDL__QG_DECL(r)                                                   \
    const uint8_t *a##r = a + (ptrdiff_t)((r) < m ? (r) : m - 1) * lda;  \
    GDL__QG_ACC(r)
    GDL__QG_ROWS(GDL__QG_DECL)
#undef GDL__QG_DECL
    GDL__QG_CONSTS
    int g;
    (void)wide;
#ifdef GDL__QG_STEP_WIDE
    if (wide) GDL__QG_GROUPS(GDL__QG_STEP_WIDE)
    else
#endif
        GDL__QG_GROUPS(GDL__QG_STEP)
    GDL__QG_ROWS(GDL__QG_STORE)
}
#undef GDL__QG_GROUPS
#undef GDL__QG_ROWS
#undef GDL__QG_VEC
#undef GDL__QG_LOAD
#undef GDL__QG_CONSTS
#undef GDL__QG_ACC
#undef GDL__QG_STEP
#undef GDL__QG_STEP_WIDE
#undef GDL__QG_STORE
#undef GDL__QG_AS8

#else /* portable */

static void gdl__qg_kernel(int kg, const uint8_t *a, ptrdiff_t lda, int m, const int8_t *GDL__RESTRICT b, int wide,
                           int32_t *GDL__RESTRICT tile) {
    int32_t acc[GDL__QG_MR][GDL__QG_NR];
    int i, j, g, r;
    (void)wide;
    memset(acc, 0, sizeof acc);
    for (g = 0; g < kg; g++, b += GDL__QG_NR * 4)
        for (i = 0; i < GDL__QG_MR; i++) {
            const uint8_t *ai = a + (ptrdiff_t)(i < m ? i : m - 1) * lda + 4 * g;
            for (j = 0; j < GDL__QG_NR; j++)
                for (r = 0; r < 4; r++) acc[i][j] += (int32_t)ai[r] * b[j * 4 + r];
        }
    memcpy(tile, acc, sizeof acc);
}

#endif

/* --- driver --------------------------------------------------------------- */

typedef struct gdl__qgemm_job {
    int M, mt;             /* rows, row tiles */
    const uint8_t *A;
    ptrdiff_t lda, ldc;
    const gdl__qpack *p;
    const unsigned char *wide; /* per row tile (AVX2), or NULL */
    int32_t *C;
} gdl__qgemm_job;

/* Tiles [lo, hi): tile u is row tile u % mt of panel u / mt (a panel stays in
   cache while the row tiles pass). */
static void gdl__qgemm_range(const void *ctx, int64_t lo, int64_t hi) {
    const gdl__qgemm_job *j = (const gdl__qgemm_job *)ctx;
    const gdl__qpack *p = j->p;
    int32_t tile[GDL__QG_MR * GDL__QG_NR];
    int64_t u;
    for (u = lo; u < hi; u++) {
        const int panel = (int)(u / j->mt), rt = (int)(u % j->mt);
        const int i0 = rt * GDL__QG_MR, j0 = panel * GDL__QG_NR;
        const int m = j->M - i0 < GDL__QG_MR ? j->M - i0 : GDL__QG_MR;
        const int n = p->N - j0 < GDL__QG_NR ? p->N - j0 : GDL__QG_NR;
        int i, c;
        gdl__qg_kernel(p->KP / 4, j->A + (ptrdiff_t)i0 * j->lda, j->lda, m, p->b + (size_t)panel * GDL__QG_NR * p->KP,
                       j->wide ? j->wide[rt] : 1, tile);
        for (i = 0; i < m; i++) {
            int32_t *ci = j->C + (ptrdiff_t)(i0 + i) * j->ldc + j0;
            const int32_t *ti = tile + i * GDL__QG_NR;
#ifdef GDL__QG_SIGNED_A
            for (c = 0; c < n; c++) ci[c] = ti[c] + 128 * p->colsum[j0 + c];
#else
            for (c = 0; c < n; c++) ci[c] = ti[c];
#endif
        }
    }
}

/* C [M, N] (rows ldc apart) = A [M, K] * B^T for a packed B; A's rows are
   lda >= KP bytes apart, readable up to KP. 0 / -1 (out of memory). */
static int gdl__qgemm(const char *op, int M, const uint8_t *A, ptrdiff_t lda, const gdl__qpack *p, int32_t *C,
                      ptrdiff_t ldc) {
    gdl__qgemm_job j = {M, (M + GDL__QG_MR - 1) / GDL__QG_MR, A, lda, ldc, p, NULL /* wide: below */, C};
    unsigned char *wide = NULL;
    int64_t ntiles;
    if (M <= 0 || p->N <= 0) return 0;
    if (p->K == 0) {
        int i;
        for (i = 0; i < M; i++) memset(C + (ptrdiff_t)i * ldc, 0, sizeof(int32_t) * (size_t)p->N);
        return 0;
    }
#ifdef GDL__QG_AVX2
    { /* which row tiles hold an activation above 127 (the exact, slower form) */
        int t, i, k;
        if (!(wide = (unsigned char *)GPUDL_MALLOC((size_t)j.mt))) {
            gdl__set_error("%s: out of memory", op);
            return -1;
        }
        for (t = 0; t < j.mt; t++) {
            uint64_t acc = 0, w;
            for (i = t * GDL__QG_MR; i < M && i < (t + 1) * GDL__QG_MR; i++) { /* 8 bytes a step */
                const uint8_t *ai = A + (ptrdiff_t)i * lda;
                for (k = 0; k + 8 <= p->KP; k += 8) {
                    memcpy(&w, ai + k, 8);
                    acc |= w;
                }
                for (; k < p->KP; k++) acc |= ai[k];
            }
            wide[t] = (acc & 0x8080808080808080ull) != 0;
        }
        j.wide = wide;
    }
#endif
    (void)op;
    ntiles = (int64_t)j.mt * p->npanel;
    gdl__parallel_for(ntiles, (int64_t)M * p->N * (p->KP / 16), gdl__qgemm_range, &j);
    GPUDL_FREE(wide);
    return 0;
}

GPUDL_API int gdl_gemm_u8s8_cpu(int M, int N, int K, const uint8_t *A, int lda, const int8_t *B, int ldb, int32_t *C,
                                int ldc) {
    const char *op = "gdl_gemm_u8s8_cpu";
    gdl__qpack p;
    uint8_t *a = NULL;
    int KP, i, rc;
    if (gdl__qgemm_check(op, M, N, K) < 0) return -1;
    if (M == 0 || N == 0) return 0;
    if ((K > 0 && (!A || !B)) || !C || lda < K || ldb < K || ldc < N) {
        gdl__set_error("%s: bad arguments: A %s, B %s, C %s, lda %d, ldb %d (>= K = %d), ldc %d (>= N = %d)", op,
                       A ? "given" : "NULL", B ? "given" : "NULL", C ? "given" : "NULL", lda, ldb, K, ldc, N);
        return -1;
    }
    if (gdl__qpack_init(op, &p, N, K, B, ldb) < 0) return -1;
    KP = p.KP;
    /* A's rows with KP bytes each (the last group of a row read whole) */
    if (!(a = (uint8_t *)GPUDL_MALLOC((size_t)M * KP + 1))) {
        gdl__qpack_free(&p);
        gdl__set_error("%s: out of memory", op);
        return -1;
    }
    for (i = 0; i < M; i++) {
        if (K) memcpy(a + (size_t)i * KP, A + (ptrdiff_t)i * lda, (size_t)K);
        memset(a + (size_t)i * KP + K, 0, (size_t)(KP - K));
    }
    rc = gdl__qgemm(op, M, a, KP, &p, C, ldc);
    GPUDL_FREE(a);
    gdl__qpack_free(&p);
    return rc;
}

GPUDL_API const char *gdl_gemm_int8_kernel_name(void) { return GDL__QG_NAME; }

/* --- the CPU backend's INT8 entries (src/api/backend.h: qweight_new ... qepilogue) --- */

/* round half to even (gdl_q_round of src/api/backend.h), as nearbyintf in the default rounding mode, without a call
   into libm (the quantization loops run it per element, vectorised): adding and taking away big = 1.5 * 2^23 leaves v
   rounded to an integer wherever |v| < 2^22. Larger values (there is no NaN here) come back within 1 of v,
   which every caller then clamps into an 8-bit range anyway. big comes from gdl__q_big(), a volatile read
   the compiler cannot fold, so the sum survives any flags (-ffast-math would otherwise cancel it). */
static volatile float gdl__q_big_v = 12582912.0f;
static float gdl__q_big(void) { return gdl__q_big_v; }
#define gdl__q_round gdl_q_round /* src/api/backend.h's one definition */

/* A quantized value (an integer in [-128, 255] as a float, or NaN) as its byte: u8, or s8's two's complement.
   A NaN (a NaN input of a static layer) gives 0, as the vector loops' conversion does. */
static uint8_t gdl__q_byte(float r) { return (uint8_t)(r == r ? (int)r : 0); }

/* --- the vectors of the INT8 entries' loops ---------------------------------------------------------------
   The quantize, dequantize, min-max and epilogue loops below are written once over W floats at a time with
   these few operations, AVX-512F (W 16) or AVX2 (W 8) from what the compiler targets (with f32 gdl_real), and a
   scalar tail made of src/api/backend.h's definitions (gdl_q_quantize1, gdl_q_epilogue1), which is also the whole loop
   elsewhere (portable C, NEON: the compiler's own vectorisation). They give those definitions' bits:
     - round: vroundps / vrndscaleps to nearest even; gdl_q_round's big gives the same wherever |v| < 2^22,
       and beyond it both results lie outside any 8-bit range, which the clamp that follows makes equal;
     - min(hi, max(lo, r)): x86's min/max return their second operand when either is NaN or both are equal,
       so this is the scalar r < lo ? lo : r > hi ? hi : r, a NaN and a -0 passing through as there; the
       min-max reduction's min(v, l) is likewise l = v < l ? v : l;
     - a NaN converts to 0x80000000, whose low byte (the only one stored) is gdl__q_byte's 0;
     - products and sums are separate instructions, no FMA, as in src/api/backend.h (the library is built as ISO C,
       where GCC does not contract a * b + c; gnu modes with -ffp-contract=fast would, on both sides). */
#if !defined(GPUDL_GEMM_PORTABLE) && !defined(GPUDL_DOUBLE) && defined(__AVX512F__)
#include <immintrin.h>
#define GDL__QV_W 16
#define GDL__QV(op) _mm512_##op /* the ISA's intrinsic of the operations written once below */
typedef __m512 gdl__qv;
typedef __m512i gdl__qvi;
typedef __mmask16 gdl__qvnan; /* lanes that have seen a NaN */
static gdl__qv gdl__qv_round(gdl__qv v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static gdl__qvi gdl__qvi_load(const int32_t *p) { return _mm512_loadu_si512((const void *)p); }
static gdl__qvi gdl__qv_bytes_in(const uint8_t *p, int is_signed) { /* W bytes, u8 or s8, widened */
    const __m128i b = _mm_loadu_si128((const __m128i *)p);
    return is_signed ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
}
static void gdl__qv_bytes_out(uint8_t *p, gdl__qv r) { /* r's integers, their low bytes */
    _mm_storeu_si128((__m128i *)p, _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(r)));
}
static gdl__qvnan gdl__qv_nan_none(void) { return 0; }
static gdl__qvnan gdl__qv_nan_add(gdl__qvnan m, gdl__qv v) { return m | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q); }
static int gdl__qv_nan_any(gdl__qvnan m) { return m != 0; }
#elif !defined(GPUDL_GEMM_PORTABLE) && !defined(GPUDL_DOUBLE) && defined(__AVX2__)
#include <immintrin.h>
#define GDL__QV_W 8
#define GDL__QV(op) _mm256_##op
typedef __m256 gdl__qv;
typedef __m256i gdl__qvi;
typedef __m256 gdl__qvnan;
static gdl__qv gdl__qv_round(gdl__qv v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static gdl__qvi gdl__qvi_load(const int32_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
static gdl__qvi gdl__qv_bytes_in(const uint8_t *p, int is_signed) {
    const __m128i b = _mm_loadl_epi64((const __m128i *)p);
    return is_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
}
static void gdl__qv_bytes_out(uint8_t *p, gdl__qv r) { /* bytes 0, 4, 8, 12 of each 128-bit half, then the halves joined */
    const __m256i lows = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i b = _mm256_shuffle_epi8(_mm256_cvttps_epi32(r), lows);
    _mm_storel_epi64((__m128i *)p, _mm_unpacklo_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1)));
}
static gdl__qvnan gdl__qv_nan_none(void) { return _mm256_setzero_ps(); }
static gdl__qvnan gdl__qv_nan_add(gdl__qvnan m, gdl__qv v) { return _mm256_or_ps(m, _mm256_cmp_ps(v, v, _CMP_UNORD_Q)); }
static int gdl__qv_nan_any(gdl__qvnan m) { return _mm256_movemask_ps(m) != 0; }
#endif
#ifdef GDL__QV_W /* the operations spelled alike in both ISAs but for the prefix */
static gdl__qv gdl__qv_set(float v) { return GDL__QV(set1_ps)(v); }
static gdl__qv gdl__qv_load(const float *p) { return GDL__QV(loadu_ps)(p); }
static void gdl__qv_store(float *p, gdl__qv v) { GDL__QV(storeu_ps)(p, v); }
static gdl__qv gdl__qv_mul(gdl__qv a, gdl__qv b) { return GDL__QV(mul_ps)(a, b); }
static gdl__qv gdl__qv_add(gdl__qv a, gdl__qv b) { return GDL__QV(add_ps)(a, b); }
static gdl__qv gdl__qv_sub(gdl__qv a, gdl__qv b) { return GDL__QV(sub_ps)(a, b); }
static gdl__qv gdl__qv_div(gdl__qv a, gdl__qv b) { return GDL__QV(div_ps)(a, b); }
static gdl__qv gdl__qv_min(gdl__qv a, gdl__qv b) { return GDL__QV(min_ps)(a, b); }
static gdl__qv gdl__qv_max(gdl__qv a, gdl__qv b) { return GDL__QV(max_ps)(a, b); }
static gdl__qvi gdl__qvi_set(int32_t v) { return GDL__QV(set1_epi32)(v); }
static gdl__qvi gdl__qvi_sub(gdl__qvi a, gdl__qvi b) { return GDL__QV(sub_epi32)(a, b); }
static gdl__qvi gdl__qvi_mul(gdl__qvi a, gdl__qvi b) { return GDL__QV(mullo_epi32)(a, b); }
static gdl__qv gdl__qvi_float(gdl__qvi v) { return GDL__QV(cvtepi32_ps)(v); }
#endif

/* min and max of x[0, n) (0 when n is 0); 1 if x holds a NaN (left out of the min and max). A zero may come
   back as -0 or +0 depending on the order of the reduction, which gdl_choose_qparams does not tell apart. */
static int gdl__q_minmax(const gdl_real *x, int64_t n, float *lo, float *hi) {
    float l = n > 0 ? (float)x[0] : 0, h = l;
    int64_t i = 0;
    int bad = 0;
#ifdef GDL__QV_W
    if (n >= 4 * GDL__QV_W) { /* 4 chains of each: vminps' latency */
        gdl__qv vl[4], vh[4];
        gdl__qvnan nan = gdl__qv_nan_none();
        float t[GDL__QV_W];
        int k;
        for (k = 0; k < 4; k++) vl[k] = vh[k] = gdl__qv_set(l);
        for (; i + 4 * GDL__QV_W <= n; i += 4 * GDL__QV_W)
            for (k = 0; k < 4; k++) {
                const gdl__qv v = gdl__qv_load(x + i + k * GDL__QV_W);
                nan = gdl__qv_nan_add(nan, v);
                vl[k] = gdl__qv_min(v, vl[k]);
                vh[k] = gdl__qv_max(v, vh[k]);
            }
        bad = gdl__qv_nan_any(nan);
        for (k = 1; k < 4; k++) {
            vl[0] = gdl__qv_min(vl[k], vl[0]);
            vh[0] = gdl__qv_max(vh[k], vh[0]);
        }
        gdl__qv_store(t, vl[0]);
        for (k = 0; k < GDL__QV_W; k++) l = t[k] < l ? t[k] : l;
        gdl__qv_store(t, vh[0]);
        for (k = 0; k < GDL__QV_W; k++) h = t[k] > h ? t[k] : h;
    }
#endif
    for (; i < n; i++) {
        const float v = (float)x[i];
        bad |= v != v;
        l = v < l ? v : l;
        h = v > h ? v : h;
    }
    *lo = l;
    *hi = h;
    return bad;
}

static void *gdl__cpu_qweight_new(int N, int K, const int8_t *w, const int32_t *colsum) {
    gdl__qpack *p = (gdl__qpack *)GPUDL_MALLOC(sizeof *p);
    (void)colsum; /* the pack sums its columns itself */
    if (!p) {
        gdl__set_error("%s: out of memory", gdl__backend_op());
        return NULL;
    }
    if (gdl__qpack_init(gdl__backend_op(), p, N, K, w, K) < 0) {
        GPUDL_FREE(p);
        return NULL;
    }
    return p;
}

static void gdl__cpu_qweight_free(void *qw) {
    gdl__qpack_free((gdl__qpack *)qw);
    GPUDL_FREE(qw);
}

static int gdl__cpu_qgemm(int M, const uint8_t *A, int lda, const void *qw, int32_t *C, int ldc) {
    return gdl__qgemm(gdl__backend_op(), M, A, lda, (const gdl__qpack *)qw, C, ldc);
}

/* The loops below go to the thread pool only past ~256K elements (work / 8 against GDL__PAR_MIN): vectorised,
   a smaller batch takes less time than waking the workers. Each element is computed alone, so the ranges
   change nothing but the time. */
#define GDL__Q_PAR_WORK(n) ((n) / 8)

/* quantize: n values x to bytes q (gdl_q_quantize1, then gdl__q_byte) */
static void gdl__q_quantize_run(const gdl_real *x, int64_t n, float inv, float fz, float lo, float hi, float big,
                                uint8_t *q) {
    int64_t j = 0;
#ifdef GDL__QV_W
    const gdl__qv vi = gdl__qv_set(inv), vz = gdl__qv_set(fz), vl = gdl__qv_set(lo), vh = gdl__qv_set(hi);
    for (; j + GDL__QV_W <= n; j += GDL__QV_W) {
        const gdl__qv r = gdl__qv_add(gdl__qv_round(gdl__qv_mul(gdl__qv_load(x + j), vi)), vz);
        gdl__qv_bytes_out(q + j, gdl__qv_min(vh, gdl__qv_max(vl, r)));
    }
#endif
    for (; j < n; j++) q[j] = gdl__q_byte(gdl_q_quantize1((float)x[j], inv, fz, lo, hi, big));
}

typedef struct gdl__q_quant_job {
    const gdl_real *x;
    int64_t k, ldq;
    float inv, fz, lo, hi, big;
    uint8_t *q;
} gdl__q_quant_job;

/* rows [r0, r1); with ldq == k, the whole as one run of elements [r0, r1) */
static void gdl__q_quant_range(const void *ctx, int64_t r0, int64_t r1) {
    const gdl__q_quant_job *j = (const gdl__q_quant_job *)ctx;
    int64_t i;
    if (j->ldq == j->k) {
        gdl__q_quantize_run(j->x + r0, r1 - r0, j->inv, j->fz, j->lo, j->hi, j->big, j->q + r0);
        return;
    }
    for (i = r0; i < r1; i++) {
        gdl__q_quantize_run(j->x + i * j->k, j->k, j->inv, j->fz, j->lo, j->hi, j->big, j->q + i * j->ldq);
        memset(j->q + i * j->ldq + j->k, 0, (size_t)(j->ldq - j->k));
    }
}

static int gdl__cpu_quantize(int64_t rows, int64_t k, const gdl_real *x, float s, int32_t z, int qmin, int qmax,
                             void *q, int64_t ldq) {
    gdl__q_quant_job j;
    j.x = x;
    j.k = k;
    j.ldq = ldq;
    j.inv = 1.0f / s;
    j.fz = (float)z;
    j.lo = (float)qmin;
    j.hi = (float)qmax;
    j.big = gdl__q_big();
    j.q = (uint8_t *)q;
    gdl__parallel_for(ldq == k ? rows * k : rows, GDL__Q_PAR_WORK(rows * k), gdl__q_quant_range, &j);
    return 0;
}

typedef struct gdl__q_deq_job {
    const uint8_t *q;
    int is_signed;
    float s;
    int32_t z;
    gdl_real *y;
} gdl__q_deq_job;

static void gdl__q_deq_range(const void *ctx, int64_t lo, int64_t hi) {
    const gdl__q_deq_job *j = (const gdl__q_deq_job *)ctx;
    int64_t i = lo;
#ifdef GDL__QV_W
    const gdl__qvi vz = gdl__qvi_set(j->z);
    const gdl__qv vs = gdl__qv_set(j->s);
    for (; i + GDL__QV_W <= hi; i += GDL__QV_W)
        gdl__qv_store(j->y + i, gdl__qv_mul(gdl__qvi_float(gdl__qvi_sub(gdl__qv_bytes_in(j->q + i, j->is_signed), vz)), vs));
#endif
    for (; i < hi; i++) {
        const int32_t v = j->is_signed ? (int32_t)((const int8_t *)j->q)[i] : (int32_t)j->q[i];
        j->y[i] = (gdl_real)GDL_Q_MUL((float)(v - j->z), j->s);
    }
}

static int gdl__cpu_dequantize(int64_t n, const void *q, int is_signed, float s, int32_t z, gdl_real *y) {
    gdl__q_deq_job j;
    j.q = (const uint8_t *)q;
    j.is_signed = is_signed;
    j.s = s;
    j.z = z;
    j.y = y;
    gdl__parallel_for(n, GDL__Q_PAR_WORK(n), gdl__q_deq_range, &j);
    return 0;
}

static int gdl__cpu_qminmax(int64_t n, const gdl_real *x, float *out) {
    out[2] = (float)gdl__q_minmax(x, n, &out[0], &out[1]);
    return 0;
}

static int gdl__cpu_qim2col(const gdl_conv_geom *g, const uint8_t *x, int32_t za, uint8_t *cols, int64_t KP) {
    int64_t oy, ox, c, i, j;
    for (oy = 0; oy < g->OH; oy++)
        for (ox = 0; ox < g->OW; ox++) {
            uint8_t *row = cols + (oy * g->OW + ox) * KP, *d = row;
            for (c = 0; c < g->C; c++)
                for (i = 0; i < g->KH; i++) {
                    const int64_t y = oy * g->SH - g->PH + i * g->DH;
                    for (j = 0; j < g->KW; j++) {
                        const int64_t xx = ox * g->SW - g->PW + j * g->DW;
                        *d++ = (y < 0 || y >= g->H || xx < 0 || xx >= g->W) ? (uint8_t)za
                                                                            : x[(c * g->H + y) * g->W + xx];
                    }
                }
            while (d < row + KP) *d++ = 0;
        }
    return 0;
}

typedef struct gdl__q_epi_job {
    const gdl_qepi *e;
    const int32_t *acc;
    gdl_real *y;
} gdl__q_epi_job;

/* the epilogue of rows [lo, hi): gdl_q_epilogue1 per element, W channels at a time */
static void gdl__q_epi_range(const void *ctx, int64_t lo, int64_t hi) {
    const gdl__q_epi_job *j = (const gdl__q_epi_job *)ctx;
    const gdl_qepi *e = j->e;
    const int64_t N = e->N, pos = e->pos;
    const float big = gdl__q_big();
    int64_t i, n, c;
#ifdef GDL__QV_W
    const gdl__qvi vza = gdl__qvi_set(e->za);
    const gdl__qv vsa = gdl__qv_set(e->sa), zero = gdl__qv_set(0.0f), vos = gdl__qv_set(e->out_scale),
                  vzp = gdl__qv_set((float)e->out_zp), vqmax = gdl__qv_set((float)e->qmax),
                  vsc0 = gdl__qv_set(GDL_Q_MUL(e->sa, e->w_scale[0]));
    float t[GDL__QV_W];
#endif
    for (i = lo; i < hi; i++) {
        const int32_t *a = j->acc + i * N;
        n = 0;
#ifdef GDL__QV_W
        for (; n + GDL__QV_W <= N; n += GDL__QV_W) {
            const gdl__qvi v = gdl__qvi_sub(gdl__qvi_load(a + n), gdl__qvi_mul(vza, gdl__qvi_load(e->colsum + n)));
            const gdl__qv sc = e->per_channel ? gdl__qv_mul(vsa, gdl__qv_load(e->w_scale + n)) : vsc0;
            gdl__qv y = gdl__qv_add(gdl__qv_mul(gdl__qvi_float(v), sc), e->bias ? gdl__qv_load(e->bias + n) : zero);
            if (e->relu) y = gdl__qv_max(zero, y);
            if (e->requant) {
                const gdl__qv r = gdl__qv_add(gdl__qv_round(gdl__qv_div(y, vos)), vzp);
                y = gdl__qv_mul(gdl__qv_sub(gdl__qv_min(vqmax, gdl__qv_max(zero, r)), vzp), vos);
            }
            if (!pos) {
                gdl__qv_store(j->y + i * N + n, y);
                continue;
            }
            gdl__qv_store(t, y); /* a convolution's [channel][position] */
            for (c = 0; c < GDL__QV_W; c++) j->y[(n + c) * pos + i] = t[c];
        }
#endif
        for (c = n; c < N; c++) j->y[pos ? c * pos + i : i * N + c] = (gdl_real)gdl_q_epilogue1(e, a[c], c, big);
    }
}

static int gdl__cpu_qepilogue(const gdl_qepi *e, int64_t rows, const int32_t *acc, gdl_real *y) {
    gdl__q_epi_job j;
    j.e = e;
    j.acc = acc;
    j.y = y;
    gdl__parallel_for(rows, GDL__Q_PAR_WORK(rows * e->N), gdl__q_epi_range, &j);
    return 0;
}
