/* ---------------------------------------------------------------------------
   src/cpu/gemm.h  CPU GEMM, row-major: C = alpha*op(A)*op(B) + beta*C

   A GotoBLAS/BLIS-style blocked GEMM. Loops, outermost first:

     for jc over N step NC        B panel op(B)[pc:pc+kc, jc:jc+nc] is packed
       for pc over K step KC        into NR-wide micro-panels (k-major); it
                                    stays in L2/L3 while the A blocks use it
         for ic over M step MC    A block op(A)[ic:ic+mc, pc:pc+kc] is packed
                                    into MR-tall micro-panels; it stays in L2
           for jr over nc step NR   one B micro-panel (kc x NR) stays in L1...
             for ir over mc step MR ...while the A micro-panels stream past
               micro-kernel: an MR x NR tile of C in registers, one rank-1
               update per k, then C = alpha*acc + beta*C (the caller's beta
               for the first K block, beta = 1 for the later ones)

   Packing copies op(A) and op(B) into contiguous, zero-padded panels, so the
   transposes, leading dimensions and ragged edges are dealt with once, in
   the packing, and the micro-kernel only ever sees full MR x NR tiles. An
   edge tile is computed into a local tile and its valid part copied out.

   Micro-kernels and block sizes (float; measured on a Sapphire Rapids core:
   KC*NR*4 bytes of B stay in L1 (48 KB), MC*KC*4 bytes of A in L2):
     AVX-512   8x32: 16 zmm accumulators, 2 loads + 8 broadcasts per k.
               MC=64 KC=256 NC=3072 (32 KB of B in L1, 64 KB of A).
               Taken whenever the compiler targets AVX-512 (-march=native
               on Skylake-X ... Sapphire Rapids, Zen 4).
     AMX bf16  32x32: 4 accumulator tiles, 2 A and 2 B tile loads per 32
               k; only under gdl_cpu_set_fp32_precision("bf16") (see "bf16
               products on AMX" below), on the AVX-512 kernel's blocks.
               Without AMX, with AVX512-BF16, the same layouts by
               vdpbf16ps: 8 rows x 32 columns in 16 zmm a pass.
     AVX2+FMA  6x16: 12 ymm accumulators, 2 loads + 6 broadcasts per k.
               MC=72 KC=256 NC=3072 (16 KB of B in L1, 72 KB of A).
     NEON      8x12 (AArch64 Advanced SIMD): 24 q-register accumulators,
               2 A loads + 3 B loads and 24 by-lane FMAs per k.
               MC=128 KC=256 NC=768 (12 KB of B in L1, 128 KB of A, a
               768 KB B panel for the 1-2 MB L2/L3 of Cortex-A72/A76
               boards). Not yet timed on an ARM board (only run under qemu).
     portable  4x8: plain C that the compiler vectorises; it also serves the
               GPUDL_DOUBLE build and -DGPUDL_GEMM_PORTABLE. MC=128 KC=256
               NC=2048.
   Large square products run at ~85% (AVX-512) and ~95% (AVX2) of the
   measured FMA peak; at MLP sizes the rest is mostly packing. The
   transposing packs (A not transposed, B transposed as in y = x*W^T) use
   8x8 / 4x4 register transposes (4x4 on NEON; 6x8 for the AVX2 kernel's A
   panels), and a B not transposed is packed a few rows at a time (read
   along its rows, not 64 bytes of a row per micro-panel).
   K is cut into equal blocks (K=784 -> 4 x 196, not 3 x 256 + 16) and M, N
   likewise (rounded to MR/NR), so no block is a sliver.

   Same bits on every SIMD path: the AVX-512, AVX2 and NEON kernels all
   compute an element of C as one chain of fused multiply-adds over k, in
   order, within K blocks that depend only on K and KC (256 for all), then
   alpha*acc (rounded) + beta*c, unfused. Tile shapes only decide which
   element goes where, so the three give bitwise identical products. The
   portable kernel multiplies and adds separately (x86-64 has no FMA
   baseline), so it differs from them by rounding only.

   Threads (the pool of src/runtime/thread_pool.h): C is cut, at tile
   boundaries, into a grid of cells, several per thread (GDL__GEMM_SPLIT),
   and the threads take cells from the pool's counter until none is left,
   so the others take over the cells of a thread the OS has descheduled (a
   busy process beside) instead of waiting for it. op(A) and op(B) are
   packed once for all cells, into shared copies (gdl__gemm_packed_task):
   the first cell to need a micro-panel (of A) or a chunk of them (of B)
   packs it and flags it ready; a cell that finds it being packed by
   another thread packs a private copy rather than wait. So more cells cost
   no more packing. Above GDL__GEMM_PACKED_MAX elements of packed operands
   the cells pack their own panels, one cell per thread (the grid that
   minimises per-thread work + packing). No barriers inside the parallel
   region; each element of C is written by one cell. K is never split, and
   every tile and K block is the same whatever the grid, so each element of
   C is computed by the same operations in the same order with 1 or 64
   threads: results are bitwise identical for any thread count and any
   timing. Problems with M*N*K < GDL__GEMM_MT_MIN (64^3) stay on the calling
   thread: there the fork/join costs more than it saves. The backend's
   batched GEMM (one product per convolution sample) runs its products as
   the tasks of one parallel region, each whole on its thread's buffers;
   with sC == 0 (all products summed into one C, the weight gradient) it is
   one product whose K runs over the samples in turn. Both give the bits of
   a loop of calls.

   Memory: the packing buffers of all threads are one block, and the shared
   packing another, allocated on first use with GPUDL_MALLOC, grow-only and
   reused by later calls, so the steady state allocates nothing;
   gdl__gemm_release() frees them. If the
   allocation fails, a simple unpacked loop computes the result (slower;
   same K blocks and summation order). A GEMM that finds the pool held by
   another thread (a second thread that calls ops, or a DataLoader worker)
   runs on its own thread with packing buffers of that thread's own
   (thread-local, freed by gdl_thread_cleanup / gdl_shutdown), in the same
   bits; the unpacked loop is left for the pool's workers (a GEMM inside a
   parallel region) and for a failed allocation.

   With -DGPUDL_CBLAS (float build) everything routes to cblas_sgemm.
   ------------------------------------------------------------------------- */

#if defined(GPUDL_CBLAS) && !defined(GPUDL_DOUBLE)
#define GDL__GEMM_CBLAS 1
#include <cblas.h>
#endif

/* Kernel selection, from what the compiler targets (no run-time dispatch:
   build with -march=native, or the flags of the oldest CPU to run on). */
#if !defined(GDL__GEMM_CBLAS) && !defined(GPUDL_DOUBLE) && !defined(GPUDL_GEMM_PORTABLE)
/* MSVC's /arch:AVX2 and /arch:AVX512 imply FMA but define no __FMA__; its AArch64 target defines _M_ARM64 */
#if defined(__AVX2__) && (defined(__FMA__) || defined(_MSC_VER))
#include <immintrin.h>
#if defined(__AVX512F__)
#define GDL__GEMM_AVX512 1 /* e.g. -march=native on Skylake-X ... Sapphire Rapids, Zen 4 */
#else
#define GDL__GEMM_AVX2 1
#endif
#elif (defined(__aarch64__) && defined(__ARM_NEON)) || defined(_M_ARM64)
#include <arm_neon.h> /* every AArch64 CPU has Advanced SIMD: Raspberry Pi 3-5, Jetson */
#define GDL__GEMM_NEON 1
#endif
#endif

/* A convolution's output columns ow whose input column ow*SW - PW + kw*DW
   lies inside [0, W): [*lo, *hi) (im2col, col2im, the implicit GEMM's
   packing). A row of columns is then a zero head, a strided copy and a
   zero tail, with no test per element. */
static void gdl__valid_cols(const gdl_conv_geom *g, int kw, int *lo, int *hi) {
    const int off = kw * g->DW - g->PW; /* input column of ow = 0 */
    int l = off >= 0 ? 0 : (-off + g->SW - 1) / g->SW, h = g->W - off <= 0 ? 0 : (g->W - off + g->SW - 1) / g->SW;
    if (l > g->OW) l = g->OW;
    if (h > g->OW) h = g->OW;
    *lo = l;
    *hi = h < l ? l : h;
}

/* 1 when f32 GEMMs run on the tile unit in bf16 (gdl_cpu_set_fp32_precision) */
static int gdl__cpu_bf16_gemm;

#ifndef GDL__GEMM_CBLAS

/* Block sizes (elements). MC must be a multiple of MR and NC of NR. They may
   be overridden with -D for tuning. KC sets the K blocks and so the rounding
   of the results; MC and NC only change the order in which tiles are done. */
#if defined(GDL__GEMM_AVX512)
#define GDL__GEMM_MR 8
#define GDL__GEMM_NR 32
#ifndef GDL__GEMM_MC
#define GDL__GEMM_MC 64
#endif
#ifndef GDL__GEMM_KC
#define GDL__GEMM_KC 256
#endif
#ifndef GDL__GEMM_NC
#define GDL__GEMM_NC 3072
#endif
#elif defined(GDL__GEMM_AVX2)
#define GDL__GEMM_MR 6
#define GDL__GEMM_NR 16
#ifndef GDL__GEMM_MC
#define GDL__GEMM_MC 72
#endif
#ifndef GDL__GEMM_KC
#define GDL__GEMM_KC 256
#endif
#ifndef GDL__GEMM_NC
#define GDL__GEMM_NC 3072
#endif
#elif defined(GDL__GEMM_NEON)
#define GDL__GEMM_MR 8
#define GDL__GEMM_NR 12
#ifndef GDL__GEMM_MC
#define GDL__GEMM_MC 128
#endif
#ifndef GDL__GEMM_KC
#define GDL__GEMM_KC 256
#endif
#ifndef GDL__GEMM_NC
#define GDL__GEMM_NC 768
#endif
#else
#define GDL__GEMM_MR 4
#define GDL__GEMM_NR 8
#ifndef GDL__GEMM_MC
#define GDL__GEMM_MC 128
#endif
#ifndef GDL__GEMM_KC
#define GDL__GEMM_KC 256
#endif
#ifndef GDL__GEMM_NC
#define GDL__GEMM_NC 2048
#endif
#endif

/* Below this many multiply-adds (M*N*K) the call stays on one thread. */
#ifndef GDL__GEMM_MT_MIN
#define GDL__GEMM_MT_MIN (64.0 * 64.0 * 64.0)
#endif

/* acc + a*b with the same rounding as the micro-kernel, so the fallback loop
   sums like the packed path (fused on the SIMD paths; needs <math.h>). */
#if defined(GDL__GEMM_AVX2) || defined(GDL__GEMM_AVX512) || defined(GDL__GEMM_NEON)
#define GDL__GEMM_MADD(a, b, acc) fmaf((a), (b), (acc))
#else
#define GDL__GEMM_MADD(a, b, acc) ((acc) + (a) * (b))
#endif

/* Packing buffers: grow-only, 64-byte aligned inside the raw allocation. */
typedef struct {
    void *raw;
    gdl_real *buf;
    size_t cap; /* in elements */
} gdl__gemm_space;
static gdl__gemm_space gdl__gemm_shared;       /* the pool's threads', one block: the pool's holder's */
static GDL__TLS gdl__gemm_space gdl__gemm_own; /* a thread's own, when the pool is another thread's */

static void gdl__gemm_space_free(gdl__gemm_space *s) {
    GPUDL_FREE(s->raw);
    s->raw = NULL;
    s->buf = NULL;
    s->cap = 0;
}
static gdl__gemm_space gdl__gemm_packs; /* the shared packing's (gdl__gemm_plan_grid) */
static void gdl__gemm_release(void) {
    gdl__gemm_space_free(&gdl__gemm_shared);
    gdl__gemm_space_free(&gdl__gemm_packs);
}
static void gdl__gemm_release_own(void) { gdl__gemm_space_free(&gdl__gemm_own); }

/* Make s hold at least n elements. Returns 0 on allocation failure (the old
   buffer is kept). The contents are not preserved: free + malloc, not
   realloc, so nothing is copied. */
static int gdl__gemm_space_reserve(gdl__gemm_space *s, size_t n) {
    void *p;
    if (n <= s->cap) return 1;
    p = GPUDL_MALLOC(n * sizeof(gdl_real) + 64);
    if (!p) return 0;
    GPUDL_FREE(s->raw);
    s->raw = p;
    s->buf = (gdl_real *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
    s->cap = n;
    return 1;
}
static int gdl__gemm_reserve(size_t n) { return gdl__gemm_space_reserve(&gdl__gemm_shared, n); }

/* --- micro-kernels -------------------------------------------------------
   gdl__gemm_kernel(kc, a, b, c, ldc, alpha, beta): one full MR x NR tile.
   a: packed A micro-panel, a[k*MR + i]; b: packed B micro-panel, b[k*NR + j]
   (64-byte aligned). c[i*ldc + j] = alpha*sum_k a*b + beta*c[i*ldc + j];
   beta == 0 writes c without reading it. alpha*acc is rounded before beta*c
   is added. (Edge tiles are finished in scalar code, which the compiler may
   contract into an FMA; whether a tile is an edge tile depends only on its
   position, never on the thread count.) */

#if defined(GDL__GEMM_AVX512)

/* One 16-wide store of alpha*acc (+ beta*c). mode: 0 beta==0, 1 beta==1, 2 other. */
static inline void gdl__gemm_store16(float *c, __m512 acc, __m512 va, __m512 vb, int mode) {
    __m512 r = _mm512_mul_ps(va, acc);
    if (mode == 1) r = _mm512_add_ps(r, _mm512_loadu_ps(c));
    else if (mode == 2) r = _mm512_add_ps(r, _mm512_mul_ps(vb, _mm512_loadu_ps(c)));
    _mm512_storeu_ps(c, r);
}

#define GDL__GEMM_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
static void gdl__gemm_kernel(int kc, const float *GDL__RESTRICT a, const float *GDL__RESTRICT b,
                             float *GDL__RESTRICT c, ptrdiff_t ldc, float alpha, float beta) {
#define GDL__GEMM_DECL(r) __m512 c##r##_0 = _mm512_setzero_ps(), c##r##_1 = _mm512_setzero_ps();
    GDL__GEMM_ROWS(GDL__GEMM_DECL)
#undef GDL__GEMM_DECL
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    const int mode = beta == 0.0f ? 0 : beta == 1.0f ? 1 : 2;
    int k;
    /* Fetch the C tile now so the stores at the end do not wait for it
       (rows of C are often a multiple of 4 KB apart and conflict in L1). */
#define GDL__GEMM_PF(r)                                                   \
    _mm_prefetch((const char *)(c + (r) * ldc), _MM_HINT_T0);             \
    _mm_prefetch((const char *)(c + (r) * ldc + 31), _MM_HINT_T0);
    GDL__GEMM_ROWS(GDL__GEMM_PF)
#undef GDL__GEMM_PF
    for (k = 0; k < kc; k++) {
        const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
        __m512 ar;
#define GDL__GEMM_FMA(r)                              \
    ar = _mm512_set1_ps(a[r]);                        \
    c##r##_0 = _mm512_fmadd_ps(ar, b0, c##r##_0);     \
    c##r##_1 = _mm512_fmadd_ps(ar, b1, c##r##_1);
        GDL__GEMM_ROWS(GDL__GEMM_FMA)
#undef GDL__GEMM_FMA
        a += GDL__GEMM_MR;
        b += 32;
    }
#define GDL__GEMM_STORE(r)                                          \
    gdl__gemm_store16(c + (r) * ldc, c##r##_0, va, vb, mode);       \
    gdl__gemm_store16(c + (r) * ldc + 16, c##r##_1, va, vb, mode);
    GDL__GEMM_ROWS(GDL__GEMM_STORE)
#undef GDL__GEMM_STORE
}
#undef GDL__GEMM_ROWS

#elif defined(GDL__GEMM_AVX2)

/* One 8-wide store of alpha*acc (+ beta*c). mode: 0 beta==0, 1 beta==1, 2 other. */
static inline void gdl__gemm_store8(float *c, __m256 acc, __m256 va, __m256 vb, int mode) {
    __m256 r = _mm256_mul_ps(va, acc);
    if (mode == 1) r = _mm256_add_ps(r, _mm256_loadu_ps(c));
    else if (mode == 2) r = _mm256_add_ps(r, _mm256_mul_ps(vb, _mm256_loadu_ps(c)));
    _mm256_storeu_ps(c, r);
}

static void gdl__gemm_kernel(int kc, const float *GDL__RESTRICT a, const float *GDL__RESTRICT b,
                             float *GDL__RESTRICT c, ptrdiff_t ldc, float alpha, float beta) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    const int mode = beta == 0.0f ? 0 : beta == 1.0f ? 1 : 2;
    int k;
    /* fetch the C tile now so the stores at the end do not wait for it */
#define GDL__GEMM_PF(r)                                                   \
    _mm_prefetch((const char *)(c + (r) * ldc), _MM_HINT_T0);             \
    _mm_prefetch((const char *)(c + (r) * ldc + 15), _MM_HINT_T0);
    GDL__GEMM_PF(0) GDL__GEMM_PF(1) GDL__GEMM_PF(2) GDL__GEMM_PF(3) GDL__GEMM_PF(4) GDL__GEMM_PF(5)
#undef GDL__GEMM_PF
    for (k = 0; k < kc; k++) {
        const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
        __m256 ar;
#define GDL__GEMM_ROW(r)                           \
    ar = _mm256_broadcast_ss(a + r);               \
    c##r##0 = _mm256_fmadd_ps(ar, b0, c##r##0);    \
    c##r##1 = _mm256_fmadd_ps(ar, b1, c##r##1);
        GDL__GEMM_ROW(0) GDL__GEMM_ROW(1) GDL__GEMM_ROW(2)
        GDL__GEMM_ROW(3) GDL__GEMM_ROW(4) GDL__GEMM_ROW(5)
#undef GDL__GEMM_ROW
        a += 6;
        b += 16;
    }
#define GDL__GEMM_STORE(r)                                         \
    gdl__gemm_store8(c + (r) * ldc, c##r##0, va, vb, mode);         \
    gdl__gemm_store8(c + (r) * ldc + 8, c##r##1, va, vb, mode);
    GDL__GEMM_STORE(0) GDL__GEMM_STORE(1) GDL__GEMM_STORE(2)
    GDL__GEMM_STORE(3) GDL__GEMM_STORE(4) GDL__GEMM_STORE(5)
#undef GDL__GEMM_STORE
}

#elif defined(GDL__GEMM_NEON)

/* One 4-wide store of alpha*acc (+ beta*c), unfused as on x86. mode: 0 beta==0,
   1 beta==1, 2 other. */
static inline void gdl__gemm_store4(float *c, float32x4_t acc, float alpha, float beta, int mode) {
    float32x4_t r = vmulq_n_f32(acc, alpha);
    if (mode == 1) r = vaddq_f32(r, vld1q_f32(c));
    else if (mode == 2) r = vaddq_f32(r, vmulq_n_f32(vld1q_f32(c), beta));
    vst1q_f32(c, r);
}

/* Rows 0-3 take their a from lanes of a0, rows 4-7 from lanes of a1. */
#define GDL__GEMM_ROWS(X) X(0, a0, 0) X(1, a0, 1) X(2, a0, 2) X(3, a0, 3) \
                          X(4, a1, 0) X(5, a1, 1) X(6, a1, 2) X(7, a1, 3)
static void gdl__gemm_kernel(int kc, const float *GDL__RESTRICT a, const float *GDL__RESTRICT b,
                             float *GDL__RESTRICT c, ptrdiff_t ldc, float alpha, float beta) {
    const float32x4_t z = vdupq_n_f32(0.0f);
#define GDL__GEMM_DECL(r, av, l) float32x4_t c##r##_0 = z, c##r##_1 = z, c##r##_2 = z;
    GDL__GEMM_ROWS(GDL__GEMM_DECL)
#undef GDL__GEMM_DECL
    const int mode = beta == 0.0f ? 0 : beta == 1.0f ? 1 : 2;
    int k;
    for (k = 0; k < kc; k++) {
        const float32x4_t a0 = vld1q_f32(a), a1 = vld1q_f32(a + 4);
        const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8);
        /* c += b * a[l], fused: the same single rounding as _mm*_fmadd_ps */
#define GDL__GEMM_FMA(r, av, l)                        \
    c##r##_0 = vfmaq_laneq_f32(c##r##_0, b0, av, l);   \
    c##r##_1 = vfmaq_laneq_f32(c##r##_1, b1, av, l);   \
    c##r##_2 = vfmaq_laneq_f32(c##r##_2, b2, av, l);
        GDL__GEMM_ROWS(GDL__GEMM_FMA)
#undef GDL__GEMM_FMA
        a += 8;
        b += 12;
    }
#define GDL__GEMM_STORE(r, av, l)                                  \
    gdl__gemm_store4(c + (r) * ldc, c##r##_0, alpha, beta, mode);   \
    gdl__gemm_store4(c + (r) * ldc + 4, c##r##_1, alpha, beta, mode); \
    gdl__gemm_store4(c + (r) * ldc + 8, c##r##_2, alpha, beta, mode);
    GDL__GEMM_ROWS(GDL__GEMM_STORE)
#undef GDL__GEMM_STORE
}
#undef GDL__GEMM_ROWS

#else /* portable */

static void gdl__gemm_kernel(int kc, const gdl_real *GDL__RESTRICT a, const gdl_real *GDL__RESTRICT b,
                             gdl_real *GDL__RESTRICT c, ptrdiff_t ldc, gdl_real alpha, gdl_real beta) {
    /* Fixed trip counts: the compiler unrolls i and vectorises j, and keeps
       acc in registers where it has enough of them. */
    gdl_real acc[GDL__GEMM_MR][GDL__GEMM_NR];
    int i, j, k;
    for (i = 0; i < GDL__GEMM_MR; i++)
        for (j = 0; j < GDL__GEMM_NR; j++) acc[i][j] = 0;
    for (k = 0; k < kc; k++) {
        for (i = 0; i < GDL__GEMM_MR; i++) {
            const gdl_real ai = a[i];
            for (j = 0; j < GDL__GEMM_NR; j++) acc[i][j] = GDL__GEMM_MADD(ai, b[j], acc[i][j]);
        }
        a += GDL__GEMM_MR;
        b += GDL__GEMM_NR;
    }
    for (i = 0; i < GDL__GEMM_MR; i++) {
        gdl_real *ci = c + i * ldc;
        if (beta == 0)
            for (j = 0; j < GDL__GEMM_NR; j++) ci[j] = alpha * acc[i][j];
        else if (beta == 1)
            for (j = 0; j < GDL__GEMM_NR; j++) ci[j] = alpha * acc[i][j] + ci[j];
        else
            for (j = 0; j < GDL__GEMM_NR; j++) ci[j] = alpha * acc[i][j] + beta * ci[j];
    }
}

#endif

/* --- the direct convolution's micro-kernel (x86 SIMD builds) -------------
   A convolution's forward as an implicit GEMM packs every value of col for
   only OC/MR kernel calls: with 64 or 128 output channels the packing cost
   as much as the products. The direct kernel packs nothing but the weights:
   its vectors run over GDL__DCONV_OC output channels (w, packed [k][OC]
   once a call) and its broadcasts read the input itself, a copy with the
   padding written out (x), at x[xo[i] + ko[k]] for pixel i of the tile and
   row k = (c, kh, kw) of col. A tile is GDL__DCONV_UR pixels: t[i*OC + o]
   = sum over k < kc, in order, of x[...] * w[k*OC + o], FMAs from zero, as
   the GEMM kernel's (the same products, fused in the same order), then
   added to t unless first, as the GEMM adds a K block to C. The weight
   and input gradients use it too, k running over pixels or output
   channels (src/cpu/conv_pool.h). */
#if defined(GDL__GEMM_AVX512) || defined(GDL__GEMM_AVX2)
#define GDL__DCONV 1
/* the vector the direct kernel works in: two of them make a tile's row of GDL__DCONV_OC channels */
#if defined(GDL__GEMM_AVX512)
#define GDL__DCONV_UR 14
#define GDL__DCONV_OC 32
#define GDL__DCONV_PIX(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)
typedef __m512 gdl__dv;
static inline gdl__dv gdl__dv_zero(void) { return _mm512_setzero_ps(); }
static inline gdl__dv gdl__dv_set(float v) { return _mm512_set1_ps(v); }
static inline gdl__dv gdl__dv_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void gdl__dv_store(float *p, gdl__dv v) { _mm512_storeu_ps(p, v); }
static inline gdl__dv gdl__dv_add(gdl__dv a, gdl__dv b) { return _mm512_add_ps(a, b); }
static inline gdl__dv gdl__dv_fma(gdl__dv a, gdl__dv b, gdl__dv c) { return _mm512_fmadd_ps(a, b, c); }
#else
#define GDL__DCONV_UR 6
#define GDL__DCONV_OC 16
#define GDL__DCONV_PIX(X) X(0) X(1) X(2) X(3) X(4) X(5)
typedef __m256 gdl__dv;
static inline gdl__dv gdl__dv_zero(void) { return _mm256_setzero_ps(); }
static inline gdl__dv gdl__dv_set(float v) { return _mm256_set1_ps(v); }
static inline gdl__dv gdl__dv_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void gdl__dv_store(float *p, gdl__dv v) { _mm256_storeu_ps(p, v); }
static inline gdl__dv gdl__dv_add(gdl__dv a, gdl__dv b) { return _mm256_add_ps(a, b); }
static inline gdl__dv gdl__dv_fma(gdl__dv a, gdl__dv b, gdl__dv c) { return _mm256_fmadd_ps(a, b, c); }
#endif
#define GDL__DV_W (GDL__DCONV_OC / 2)
static void gdl__dconv_kernel(int kc, const float *GDL__RESTRICT w, const int *GDL__RESTRICT ko, const float *x,
                              const int *GDL__RESTRICT xo, float *GDL__RESTRICT t, int first) {
#define GDL__DCONV_DECL(i) gdl__dv c##i##_0 = gdl__dv_zero(), c##i##_1 = gdl__dv_zero();
    GDL__DCONV_PIX(GDL__DCONV_DECL)
#undef GDL__DCONV_DECL
    int k;
    for (k = 0; k < kc; k++) {
        const gdl__dv w0 = gdl__dv_load(w), w1 = gdl__dv_load(w + GDL__DV_W);
        const float *xk = x + ko[k];
        gdl__dv b;
#define GDL__DCONV_FMA(i)                        \
    b = gdl__dv_set(xk[xo[i]]);                  \
    c##i##_0 = gdl__dv_fma(b, w0, c##i##_0);     \
    c##i##_1 = gdl__dv_fma(b, w1, c##i##_1);
        GDL__DCONV_PIX(GDL__DCONV_FMA)
#undef GDL__DCONV_FMA
        w += GDL__DCONV_OC;
    }
#define GDL__DCONV_STORE(i)                                                                                  \
    gdl__dv_store(t + (i) * GDL__DCONV_OC,                                                                   \
                  first ? c##i##_0 : gdl__dv_add(c##i##_0, gdl__dv_load(t + (i) * GDL__DCONV_OC)));           \
    gdl__dv_store(t + (i) * GDL__DCONV_OC + GDL__DV_W,                                                       \
                  first ? c##i##_1 : gdl__dv_add(c##i##_1, gdl__dv_load(t + (i) * GDL__DCONV_OC + GDL__DV_W)));
    GDL__DCONV_PIX(GDL__DCONV_STORE)
#undef GDL__DCONV_STORE
}
#undef GDL__DCONV_PIX

/* The weight gradient's kernel for images of one K block (src/cpu/conv_pool.h), on half a tile's rows,
   GDL__DCONV_UR / 2: t[i*OC + o] += the block's sum of each of ns samples in turn (sample s's w at s*ws, its x
   at s*xs), each block's FMAs from zero over its kc pixels, as gdl__dconv_kernel's, then added to the
   running sums: the same operations as ns calls of that kernel (first 0), but the running sums stay in
   registers between the samples, where that kernel loads and stores the tile each call (on a 3x3 image
   its 9 pixels' FMAs took little longer than that). */
#if defined(GDL__GEMM_AVX512)
#define GDL__DCONV_HALF(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6)
#else
#define GDL__DCONV_HALF(X) X(0) X(1) X(2)
#endif
static void gdl__dconv_kernel_ns(int ns, int kc, const float *GDL__RESTRICT w, ptrdiff_t ws,
                                 const int *GDL__RESTRICT ko, const float *x, ptrdiff_t xs,
                                 const int *GDL__RESTRICT xo, float *GDL__RESTRICT t) {
#define GDL__DCONV_DECL(i)                                                                                   \
    gdl__dv a##i##_0 = gdl__dv_load(t + (i) * GDL__DCONV_OC), a##i##_1 = gdl__dv_load(t + (i) * GDL__DCONV_OC + GDL__DV_W); \
    const int o##i = xo[i];
    GDL__DCONV_HALF(GDL__DCONV_DECL)
#undef GDL__DCONV_DECL
    int s, k;
    for (s = 0; s < ns; s++) {
        const float *wk = w + s * ws, *xs0 = x + s * xs;
#define GDL__DCONV_ZERO(i) gdl__dv c##i##_0 = gdl__dv_zero(), c##i##_1 = gdl__dv_zero();
        GDL__DCONV_HALF(GDL__DCONV_ZERO)
#undef GDL__DCONV_ZERO
        for (k = 0; k < kc; k++) {
            const gdl__dv w0 = gdl__dv_load(wk), w1 = gdl__dv_load(wk + GDL__DV_W);
            const float *xk = xs0 + ko[k];
            gdl__dv b;
#define GDL__DCONV_FMA(i)                        \
    b = gdl__dv_set(xk[o##i]);                   \
    c##i##_0 = gdl__dv_fma(b, w0, c##i##_0);     \
    c##i##_1 = gdl__dv_fma(b, w1, c##i##_1);
            GDL__DCONV_HALF(GDL__DCONV_FMA)
#undef GDL__DCONV_FMA
            wk += GDL__DCONV_OC;
        }
#define GDL__DCONV_ADD(i)                        \
    a##i##_0 = gdl__dv_add(c##i##_0, a##i##_0);  \
    a##i##_1 = gdl__dv_add(c##i##_1, a##i##_1);
        GDL__DCONV_HALF(GDL__DCONV_ADD)
#undef GDL__DCONV_ADD
    }
#define GDL__DCONV_STORE(i)                                   \
    gdl__dv_store(t + (i) * GDL__DCONV_OC, a##i##_0);           \
    gdl__dv_store(t + (i) * GDL__DCONV_OC + GDL__DV_W, a##i##_1);
    GDL__DCONV_HALF(GDL__DCONV_STORE)
#undef GDL__DCONV_STORE
}
#undef GDL__DCONV_HALF
#endif

/* --- packing -------------------------------------------------------------
   op(A)[i][k] = transA ? A[k*lda + i] : A[i*lda + k]   (op(A) is M x K)
   op(B)[k][j] = transB ? B[j*ldb + k] : B[k*ldb + j]   (op(B) is K x N)
   A micro-panel: dst[k*MR + i], B micro-panel: dst[k*NR + j]. Both are
   "kc rows of width W, zero-padded from w to W", so two helpers do all
   four cases: a row copy (transA, !transB) and a transpose (!transA,
   transB: y = x*W^T). The transpose is the hot one for small batches, so
   the SIMD builds do it with 8x8 and 4x4 register transposes. */

#if defined(GDL__GEMM_AVX2) || defined(GDL__GEMM_AVX512)
/* d[c*ldd + r] = s[r*lds + c] for r, c < 8 */
static inline void gdl__gemm_tr8x8(const float *s, ptrdiff_t lds, float *d, ptrdiff_t ldd) {
    const __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + lds);
    const __m256 r2 = _mm256_loadu_ps(s + 2 * lds), r3 = _mm256_loadu_ps(s + 3 * lds);
    const __m256 r4 = _mm256_loadu_ps(s + 4 * lds), r5 = _mm256_loadu_ps(s + 5 * lds);
    const __m256 r6 = _mm256_loadu_ps(s + 6 * lds), r7 = _mm256_loadu_ps(s + 7 * lds);
    /* t0 = r0[0] r1[0] r0[1] r1[1] | r0[4] r1[4] r0[5] r1[5], ... */
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    /* u0 = column 0 | column 4 of rows 0-3, u1 = columns 1 | 5, ... */
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(d + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(d + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(d + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(d + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(d + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(d + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(d + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
}

/* d[c*ldd + r] = s[r*lds + c] for r, c < 4 */
static inline void gdl__gemm_tr4x4(const float *s, ptrdiff_t lds, float *d, ptrdiff_t ldd) {
    __m128 r0 = _mm_loadu_ps(s), r1 = _mm_loadu_ps(s + lds);
    __m128 r2 = _mm_loadu_ps(s + 2 * lds), r3 = _mm_loadu_ps(s + 3 * lds);
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
    _mm_storeu_ps(d, r0);
    _mm_storeu_ps(d + ldd, r1);
    _mm_storeu_ps(d + 2 * ldd, r2);
    _mm_storeu_ps(d + 3 * ldd, r3);
}

#if defined(GDL__GEMM_AVX2)
/* d[c*6 + r] = s[r*lds + c] for r < 6, c < 8: eight k of a 6-row A
   micro-panel. tr8x8's network on rows 0-3; rows 4 and 5 only need their
   interleave, two floats per k (element by element, rows 4 and 5 cost
   more than the 4x4 transposes of the other four). */
static inline void gdl__gemm_tr6x8(const float *s, ptrdiff_t lds, float *d) {
    const __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + lds);
    const __m256 r2 = _mm256_loadu_ps(s + 2 * lds), r3 = _mm256_loadu_ps(s + 3 * lds);
    const __m256 r4 = _mm256_loadu_ps(s + 4 * lds), r5 = _mm256_loadu_ps(s + 5 * lds);
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    /* t4 = r4[0] r5[0] r4[1] r5[1] | r4[4] r5[4] r4[5] r5[5], t5 likewise for 2, 3 | 6, 7 */
    const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    /* u0 = k 0 | k 4 of rows 0-3, u1 = k 1 | 5, u2 = k 2 | 6, u3 = k 3 | 7 */
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m128 v4 = _mm256_castps256_ps128(t4), w4 = _mm256_extractf128_ps(t4, 1);
    const __m128 v5 = _mm256_castps256_ps128(t5), w5 = _mm256_extractf128_ps(t5, 1);
    _mm_storeu_ps(d, _mm256_castps256_ps128(u0));
    _mm_storel_pi((__m64 *)(d + 4), v4);
    _mm_storeu_ps(d + 6, _mm256_castps256_ps128(u1));
    _mm_storeh_pi((__m64 *)(d + 10), v4);
    _mm_storeu_ps(d + 12, _mm256_castps256_ps128(u2));
    _mm_storel_pi((__m64 *)(d + 16), v5);
    _mm_storeu_ps(d + 18, _mm256_castps256_ps128(u3));
    _mm_storeh_pi((__m64 *)(d + 22), v5);
    _mm_storeu_ps(d + 24, _mm256_extractf128_ps(u0, 1));
    _mm_storel_pi((__m64 *)(d + 28), w4);
    _mm_storeu_ps(d + 30, _mm256_extractf128_ps(u1, 1));
    _mm_storeh_pi((__m64 *)(d + 34), w4);
    _mm_storeu_ps(d + 36, _mm256_extractf128_ps(u2, 1));
    _mm_storel_pi((__m64 *)(d + 40), w5);
    _mm_storeu_ps(d + 42, _mm256_extractf128_ps(u3, 1));
    _mm_storeh_pi((__m64 *)(d + 46), w5);
}
#endif
#elif defined(GDL__GEMM_NEON)
/* d[c*ldd + r] = s[r*lds + c] for r, c < 4 */
static inline void gdl__gemm_tr4x4(const float *s, ptrdiff_t lds, float *d, ptrdiff_t ldd) {
    /* t01.val[0] = r0[0] r1[0] r0[2] r1[2], t01.val[1] = r0[1] r1[1] r0[3] r1[3] */
    const float32x4x2_t t01 = vtrnq_f32(vld1q_f32(s), vld1q_f32(s + lds));
    const float32x4x2_t t23 = vtrnq_f32(vld1q_f32(s + 2 * lds), vld1q_f32(s + 3 * lds));
    vst1q_f32(d, vcombine_f32(vget_low_f32(t01.val[0]), vget_low_f32(t23.val[0])));
    vst1q_f32(d + ldd, vcombine_f32(vget_low_f32(t01.val[1]), vget_low_f32(t23.val[1])));
    vst1q_f32(d + 2 * ldd, vcombine_f32(vget_high_f32(t01.val[0]), vget_high_f32(t23.val[0])));
    vst1q_f32(d + 3 * ldd, vcombine_f32(vget_high_f32(t01.val[1]), vget_high_f32(t23.val[1])));
}
#endif

/* dst[k*W + x] = src[k*lds + x] for x < w, 0 for w <= x < W (k < kc). */
static inline void gdl__gemm_pack_copy(const gdl_real *src, ptrdiff_t lds, int w, int kc, int W,
                                       gdl_real *GDL__RESTRICT dst) {
    int k, x;
    if (w == W) { /* full panel: fixed-length copies the compiler turns into vector moves */
        for (k = 0; k < kc; k++, src += lds, dst += W)
            for (x = 0; x < W; x++) dst[x] = src[x];
        return;
    }
    for (k = 0; k < kc; k++, src += lds, dst += W) {
        for (x = 0; x < w; x++) dst[x] = src[x];
        for (; x < W; x++) dst[x] = 0;
    }
}

#if defined(GDL__GEMM_AVX2) || defined(GDL__GEMM_AVX512) || defined(GDL__GEMM_NEON)
/* the columns k..kc-1 of the n rows at s (row stride lds) that the transposing tiles left, into dst (row stride W) */
static inline void gdl__gemm_pack_rest(const float *s, ptrdiff_t lds, int k, int kc, int n, float *dst, int W) {
    int i;
    for (; k < kc; k++)
        for (i = 0; i < n; i++) dst[k * W + i] = s[i * lds + k];
}
#endif
/* dst[k*W + x] = src[x*lds + k] for x < w, 0 for w <= x < W (k < kc). */
static inline void gdl__gemm_pack_trans(const gdl_real *src, ptrdiff_t lds, int w, int kc, int W,
                                        gdl_real *GDL__RESTRICT dst) {
    int k, x = 0;
#if defined(GDL__GEMM_AVX2)
    if (W == 6 && w == 6) { /* a full A micro-panel of the AVX2 kernel */
        for (k = 0; k + 8 <= kc; k += 8) gdl__gemm_tr6x8(src + k, lds, dst + k * 6);
        gdl__gemm_pack_rest(src, lds, k, kc, 6, dst, 6);
        return;
    }
#endif
#if defined(GDL__GEMM_AVX2) || defined(GDL__GEMM_AVX512)
    for (; x + 8 <= w; x += 8) {
        const float *s = src + x * lds;
        for (k = 0; k + 8 <= kc; k += 8) gdl__gemm_tr8x8(s + k, lds, dst + k * W + x, W);
        gdl__gemm_pack_rest(s, lds, k, kc, 8, dst + x, W);
    }
#endif
#if defined(GDL__GEMM_AVX2) || defined(GDL__GEMM_AVX512) || defined(GDL__GEMM_NEON)
    for (; x + 4 <= w; x += 4) {
        const float *s = src + x * lds;
        for (k = 0; k + 4 <= kc; k += 4) gdl__gemm_tr4x4(s + k, lds, dst + k * W + x, W);
        gdl__gemm_pack_rest(s, lds, k, kc, 4, dst + x, W);
    }
#endif
    for (; x < w; x++) { /* read row x sequentially, write with stride W */
        const gdl_real *s = src + x * lds;
        for (k = 0; k < kc; k++) dst[k * W + x] = s[k];
    }
    for (; x < W; x++)
        for (k = 0; k < kc; k++) dst[k * W + x] = 0;
}

/* op(A)[i0:i0+m, p0:p0+kc] -> A micro-panel; rows m..MR-1 are zero. */
static void gdl__gemm_pack_a(int transA, const gdl_real *A, ptrdiff_t lda, int i0, int m, int p0, int kc,
                             gdl_real *GDL__RESTRICT dst) {
    if (transA)
        gdl__gemm_pack_copy(A + (ptrdiff_t)p0 * lda + i0, lda, m, kc, GDL__GEMM_MR, dst);
    else
        gdl__gemm_pack_trans(A + (ptrdiff_t)i0 * lda + p0, lda, m, kc, GDL__GEMM_MR, dst);
}

/* --- the implicit GEMM's packing ------------------------------------------
   A convolution's column matrix (im2col's, gdl__cpu_im2col) of one image x
   [C][H][W] in geometry cg: col[r][p] with r = (c*KH + kh)*KW + kw and
   p = oh*OW + ow is x[c][oh*SH - PH + kh*DH][ow*SW - PW + kw*DW], 0 outside
   the image. The B packing gathers its kc x NR micro-panels straight from
   the image, so no more than one KC x NC block of it ever exists (in the
   packing buffer), and the values packed, hence the products, are those of
   im2col + GEMM, bit for bit. */

/* d[0:n) = s[0:n) for the short runs of an image row (a few to a few dozen
   values): masked vector moves, no scalar tail. */
static inline void gdl__gemm_copy_run(gdl_real *GDL__RESTRICT d, const gdl_real *GDL__RESTRICT s, int n) {
#if defined(GDL__GEMM_AVX512)
    for (; n >= 16; n -= 16, d += 16, s += 16) _mm512_storeu_ps(d, _mm512_loadu_ps(s));
    if (n > 0) {
        const __mmask16 m = (__mmask16)((1u << n) - 1);
        _mm512_mask_storeu_ps(d, m, _mm512_maskz_loadu_ps(m, s));
    }
#elif defined(GDL__GEMM_AVX2)
    for (; n >= 8; n -= 8, d += 8, s += 8) _mm256_storeu_ps(d, _mm256_loadu_ps(s));
    if (n > 0) {
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        _mm256_maskstore_ps(d, m, _mm256_maskload_ps(s, m));
    }
#else
    int i;
    for (i = 0; i < n; i++) d[i] = s[i];
#endif
}

/* The valid output columns [lo, hi) of each kernel column (gdl__valid_cols),
   worked out once a packing call rather than once a row of col: its
   divisions cost more than a short row's copy. */
#define GDL__GEMM_KW_TAB 16
typedef struct {
    int lo[GDL__GEMM_KW_TAB], hi[GDL__GEMM_KW_TAB];
} gdl__gemm_cols;

static void gdl__gemm_cols_init(const gdl_conv_geom *cg, gdl__gemm_cols *t) {
    int kw;
    for (kw = 0; kw < cg->KW && kw < GDL__GEMM_KW_TAB; kw++) gdl__valid_cols(cg, kw, &t->lo[kw], &t->hi[kw]);
}

static inline void gdl__gemm_cols_get(const gdl_conv_geom *cg, const gdl__gemm_cols *t, int kw, int *lo, int *hi) {
    if (kw < GDL__GEMM_KW_TAB) {
        *lo = t->lo[kw];
        *hi = t->hi[kw];
    } else {
        gdl__valid_cols(cg, kw, lo, hi);
    }
}

/* Row r of col is (c, kh, kw); the next row's. */
static inline void gdl__gemm_row_next(const gdl_conv_geom *cg, int *c, int *kh, int *kw) {
    if (++*kw == cg->KW) {
        *kw = 0;
        if (++*kh == cg->KH) {
            *kh = 0;
            ++*c;
        }
    }
}

/* d[t*ds] = col[r][p + t] for t < len, where row r reads the plane xc at
   kernel offset (kh, kw), whose valid output columns are [lo, hi), and
   position p is (oh, ow): the positions run along output rows, each row a
   zero head, a copy and a zero tail. */
static void gdl__gemm_gather(const gdl_conv_geom *cg, const gdl_real *xc, int kh, int kw, int lo, int hi, int oh,
                             int ow, int len, gdl_real *d, ptrdiff_t ds) {
    const int SW = cg->SW, off = kw * cg->DW - cg->PW; /* the input column of ow: ow*SW + off */
    int t = 0, u;
    while (t < len) {
        const int e = ow + (cg->OW - ow < len - t ? cg->OW - ow : len - t); /* this row's ow in [ow, e) */
        const int ih = oh * cg->SH - cg->PH + kh * cg->DH;
        const int u0 = lo > ow ? (lo < e ? lo : e) : ow, u1 = hi < e ? (hi > u0 ? hi : u0) : e;
        gdl_real *q = d + t * ds; /* position (oh, ow) */
        if (ih < 0 || ih >= cg->H) {
            for (u = ow; u < e; u++) q[(u - ow) * ds] = 0;
        } else {
            const gdl_real *xr = xc + (ptrdiff_t)ih * cg->W;
            for (u = ow; u < u0; u++) q[(u - ow) * ds] = 0;
            if (ds == 1 && SW == 1)
                gdl__gemm_copy_run(q + (u0 - ow), xr + u0 + off, u1 - u0);
            else
                for (u = u0; u < u1; u++) q[(u - ow) * ds] = xr[u * SW + off];
            for (u = u1; u < e; u++) q[(u - ow) * ds] = 0;
        }
        t += e - ow;
        ow = 0;
        oh++;
    }
}

/* op(B)[p0:p0+kc, j0:j0+n] of the column matrix of x -> B micro-panel
   (columns n..NR-1 zero). Not transposed (a forward: K runs over the rows
   r, N over the positions), each k a row of col, its (c, kh, kw) stepped
   along; transposed (a weight gradient: K over the positions), each of the
   n columns a row of col: on x86 gathered along its length, then put in
   place by 8x8 transposes, else written NR apart. */
static void gdl__gemm_pack_conv(const gdl_conv_geom *cg, int transB, const gdl_real *x, int p0, int kc, int j0, int n,
                                gdl_real *GDL__RESTRICT dst) {
    const int KK = cg->KH * cg->KW;
    const ptrdiff_t HW = (ptrdiff_t)cg->H * cg->W;
    gdl__gemm_cols cols;
    int k, j, c, kh, kw, lo, hi;
    gdl__gemm_cols_init(cg, &cols);
    if (!transB) {
        const int oh = j0 / cg->OW, ow = j0 % cg->OW;
        c = p0 / KK; kh = p0 % KK / cg->KW; kw = p0 % cg->KW;
        for (k = 0; k < kc; k++) {
            gdl_real *d = dst + (ptrdiff_t)k * GDL__GEMM_NR;
            gdl__gemm_cols_get(cg, &cols, kw, &lo, &hi);
            gdl__gemm_gather(cg, x + c * HW, kh, kw, lo, hi, oh, ow, n, d, 1);
            for (j = n; j < GDL__GEMM_NR; j++) d[j] = 0;
            gdl__gemm_row_next(cg, &c, &kh, &kw);
        }
        return;
    }
    c = j0 / KK; kh = j0 % KK / cg->KW; kw = j0 % cg->KW;
#if defined(GDL__GEMM_AVX2) || defined(GDL__GEMM_AVX512)
    if (kc <= GDL__GEMM_KC) {
        gdl_real rows[GDL__GEMM_NR * GDL__GEMM_KC];
        for (j = 0; j < n; j++) {
            gdl__gemm_cols_get(cg, &cols, kw, &lo, &hi);
            gdl__gemm_gather(cg, x + c * HW, kh, kw, lo, hi, p0 / cg->OW, p0 % cg->OW, kc, rows + (ptrdiff_t)j * kc, 1);
            gdl__gemm_row_next(cg, &c, &kh, &kw);
        }
        gdl__gemm_pack_trans(rows, kc, n, kc, GDL__GEMM_NR, dst);
        return;
    }
#endif
    for (j = 0; j < n; j++) {
        gdl__gemm_cols_get(cg, &cols, kw, &lo, &hi);
        gdl__gemm_gather(cg, x + c * HW, kh, kw, lo, hi, p0 / cg->OW, p0 % cg->OW, kc, dst + j, GDL__GEMM_NR);
        gdl__gemm_row_next(cg, &c, &kh, &kw);
    }
    for (; j < GDL__GEMM_NR; j++)
        for (k = 0; k < kc; k++) dst[(ptrdiff_t)k * GDL__GEMM_NR + j] = 0;
}

/* op(B)[p0:p0+kc, j0:j0+n] -> B micro-panel; columns n..NR-1 are zero. */
static void gdl__gemm_pack_b(const gdl_conv_geom *conv, int transB, const gdl_real *B, ptrdiff_t ldb, int p0, int kc,
                             int j0, int n, gdl_real *GDL__RESTRICT dst) {
    if (conv)
        gdl__gemm_pack_conv(conv, transB, B, p0, kc, j0, n, dst);
    else if (transB)
        gdl__gemm_pack_trans(B + (ptrdiff_t)j0 * ldb + p0, ldb, n, kc, GDL__GEMM_NR, dst);
    else
        gdl__gemm_pack_copy(B + (ptrdiff_t)p0 * ldb + j0, ldb, n, kc, GDL__GEMM_NR, dst);
}

/* Rows of B read at a time by gdl__gemm_pack_b_rows. */
#ifndef GDL__GEMM_PACK_ROWS
#define GDL__GEMM_PACK_ROWS 8
#endif

/* The B panel op(B)[p0:p0+kc, j0:j0+nc] of a B not transposed, all its
   micro-panels (NR columns each, kc*NR apart) at once, GDL__GEMM_PACK_ROWS
   rows of B at a time. One micro-panel after another would read 64 bytes
   of each of kc rows, every row on a page of its own when ldb is large:
   a TLB miss per row and nothing for the hardware prefetcher to follow.
   A few rows at a time are read along their length instead. */
static void gdl__gemm_pack_b_rows(const gdl_real *B, ptrdiff_t ldb, int p0, int kc, int j0, int nc,
                                  gdl_real *GDL__RESTRICT dst) {
    int k0, jr;
    for (k0 = 0; k0 < kc; k0 += GDL__GEMM_PACK_ROWS) {
        const int kn = kc - k0 < GDL__GEMM_PACK_ROWS ? kc - k0 : GDL__GEMM_PACK_ROWS;
        const gdl_real *src = B + (ptrdiff_t)(p0 + k0) * ldb + j0;
        for (jr = 0; jr < nc; jr += GDL__GEMM_NR) {
            const int n = nc - jr < GDL__GEMM_NR ? nc - jr : GDL__GEMM_NR;
            gdl__gemm_pack_copy(src + jr, ldb, n, kn, GDL__GEMM_NR, dst + (size_t)jr * kc + (size_t)k0 * GDL__GEMM_NR);
        }
    }
}

/* op(B)[p0:p0+kc, j0:j0+n] of a span GEMM (B not transposed) -> B
   micro-panel, columns n..NR-1 zero: each product's run of columns packed
   from its own B (B + s*sBs), gathered from its image for a convolution.
   The runs are worked out once for all kc rows. */
static void gdl__gemm_pack_span(const gdl_conv_geom *cg, const gdl_real *B, ptrdiff_t ldb, int span, ptrdiff_t sBs,
                                int p0, int kc, int j0, int n, gdl_real *GDL__RESTRICT dst) {
    const gdl_real *src[GDL__GEMM_NR];
    int at[GDL__GEMM_NR], len[GDL__GEMM_NR], oh[GDL__GEMM_NR], ow[GDL__GEMM_NR];
    int nrun = 0, t, k, j, i;
    for (t = 0; t < n; nrun++) { /* run i: product s's columns from jl on, at t in the panel */
        const int s = (j0 + t) / span, jl = j0 + t - s * span;
        at[nrun] = t;
        len[nrun] = span - jl < n - t ? span - jl : n - t;
        src[nrun] = B + s * sBs + (cg ? 0 : jl);
        oh[nrun] = cg ? jl / cg->OW : 0;
        ow[nrun] = cg ? jl % cg->OW : 0;
        t += len[nrun];
    }
    if (cg) {
        const ptrdiff_t HW = (ptrdiff_t)cg->H * cg->W;
        const int KK = cg->KH * cg->KW;
        int c = p0 / KK, kh = p0 % KK / cg->KW, kw = p0 % cg->KW, lo, hi;
        gdl__gemm_cols cols;
        gdl__gemm_cols_init(cg, &cols);
        for (k = 0; k < kc; k++) {
            gdl_real *d = dst + (ptrdiff_t)k * GDL__GEMM_NR;
            gdl__gemm_cols_get(cg, &cols, kw, &lo, &hi);
            for (i = 0; i < nrun; i++)
                gdl__gemm_gather(cg, src[i] + c * HW, kh, kw, lo, hi, oh[i], ow[i], len[i], d + at[i], 1);
            for (j = n; j < GDL__GEMM_NR; j++) d[j] = 0;
            gdl__gemm_row_next(cg, &c, &kh, &kw);
        }
        return;
    }
    for (k = 0; k < kc; k++) {
        gdl_real *d = dst + (ptrdiff_t)k * GDL__GEMM_NR;
        for (i = 0; i < nrun; i++) gdl__gemm_copy_run(d + at[i], src[i] + (ptrdiff_t)(p0 + k) * ldb, len[i]);
        for (j = n; j < GDL__GEMM_NR; j++) d[j] = 0;
    }
}

/* --- drivers -------------------------------------------------------------- */

typedef struct gdl__gemm_args {
    int transA, transB, M, N, K;
    gdl_real alpha, beta;
    const gdl_real *A, *B;
    gdl_real *C;
    ptrdiff_t lda, ldb, ldc;
    /* nseg > 1: C = beta*C + sum over s < nseg of alpha*op(A + s*sA)*op(B + s*sB),
       the segments in turn, each cut into K blocks as a call of its own
       would: the batched GEMM with sC == 0 and beta 1 (a convolution's
       weight gradient over the samples), bitwise as a loop of calls. */
    int nseg;
    ptrdiff_t sA, sB;
    /* conv != NULL: the implicit GEMM of a convolution. B is an image (one
       sample, one group's channels) and op(B) its column matrix, gathered
       by the B packing (gdl__gemm_pack_conv; ldb is not read). */
    const gdl_conv_geom *conv;
    /* The epilogue, on each tile after its last K block (gdl__gemm_epi):
       bias (NULL: none) per row of C (bias_col 0) or per column (1), pre
       (NULL: not kept; ldc apart, as C) and the activation act (< 0: none). */
    const gdl_real *bias;
    gdl_real *pre;
    int bias_col, act;
    /* span > 0: the columns of a batch of products side by side, span each
       (a convolution's samples, whose small images alone would leave most
       of the micro-kernel's columns empty): column j is column j % span of
       product j / span, whose B is sBs and whose C and pre are sCs further
       on. B not transposed, bias per row, one segment; gdl__gemm_blocked
       only. Each element is the sum a call per product would form. */
    int span;
    ptrdiff_t sBs, sCs;
    /* bf16 = 1: on the tile unit (gdl__gemm_blocked_tile), its panels after
       the f32 ones in the packing buffers (gdl__gemm_plan sizes them); read
       once, from the precision when the arguments are made, so that a plan
       and its run agree. Not for an implicit GEMM (conv). */
    int bf16;
} gdl__gemm_args;

/* A plain product: one segment, no implicit B, no epilogue. */
static void gdl__gemm_args_init(gdl__gemm_args *g, int transA, int transB, int M, int N, int K, gdl_real alpha,
                                const gdl_real *A, ptrdiff_t lda, const gdl_real *B, ptrdiff_t ldb, gdl_real beta,
                                gdl_real *C, ptrdiff_t ldc) {
    memset(g, 0, sizeof *g);
    g->transA = transA; g->transB = transB;
    g->M = M; g->N = N; g->K = K;
    g->alpha = alpha; g->beta = beta;
    g->A = A; g->B = B; g->C = C;
    g->lda = lda; g->ldb = ldb; g->ldc = ldc;
    g->nseg = 1;
    g->act = -1;
    g->bf16 = gdl__cpu_bf16_gemm;
}

/* gdl__unary1 (src/cpu/elementwise.h): the epilogue's activations are the unary ops' own */
static gdl_real gdl__unary1(int op, gdl_real x, gdl_real alpha);
static void gdl__gelu_rows(const gdl_real *x, gdl_real *y, int64_t n); /* exact GELU in vectors, the same bits */

/* The epilogue on the rows [i0, i0+m) and columns [j0, j0+n) of the C (and
   pre) at C (P), laid out as g's: v = c + bias,
   pre = v, c = act(v), gdl__cpu_bias_act's arithmetic, so that the fused
   GEMM gives the bits of the GEMM followed by bias_act. Run on a tile just
   stored (in L1), or on all of C after the unpacked fallback. */
/* One row of the epilogue without an activation other than ReLU: c = c + (bias ? bias[j] : b), pre = c,
   then the ReLU (relu set), in vectors on the SIMD paths (on a K of 128 the scalar loop cost a quarter of
   the tile's multiply-adds), each lane the scalar loop's arithmetic */
/* the vectors of the epilogue and of gdl__gemm_put on the SIMD paths: GDL__EPI_W floats a register; a row's
   tail of n < GDL__EPI_W floats by the mask gdl__epi_mask(n) (GDL__EPI_LOADM, GDL__EPI_STOREM) */
#if defined(GDL__GEMM_AVX512)
#define GDL__EPI_W 16
#define GDL__EPI(op) _mm512_##op
typedef __m512 gdl__epi_v;
typedef __mmask16 gdl__epi_m;
#define gdl__epi_mask(n) ((__mmask16)((1u << (n)) - 1))
#define GDL__EPI_LOADM(p, k) _mm512_maskz_loadu_ps((k), (p))
#define GDL__EPI_STOREM(p, k, v) _mm512_mask_storeu_ps((p), (k), (v))
#elif defined(GDL__GEMM_AVX2)
#define GDL__EPI_W 8
#define GDL__EPI(op) _mm256_##op
typedef __m256 gdl__epi_v;
typedef __m256i gdl__epi_m;
#define gdl__epi_mask(n) _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define GDL__EPI_LOADM(p, k) _mm256_maskload_ps((p), (k))
#define GDL__EPI_STOREM(p, k, v) _mm256_maskstore_ps((p), (k), (v))
#endif
static void gdl__gemm_epi_row(gdl_real *GDL__RESTRICT c, gdl_real *GDL__RESTRICT pre,
                              const gdl_real *GDL__RESTRICT bias, int add, gdl_real b, int relu, int n) {
#ifdef GDL__EPI_W
    const gdl__epi_v vb = GDL__EPI(set1_ps)(b), zero = GDL__EPI(setzero_ps)();
    gdl__epi_v v;
    gdl__epi_m k;
    int j = 0;
/* one register of the row at j, loaded and stored by LOAD(p) and STORE(p, v) */
#define GDL__EPI_ROW_STEP(LOAD, STORE)                                                                            \
    do {                                                                                                          \
        v = LOAD(c + j);                                                                                          \
        if (bias) v = GDL__EPI(add_ps)(v, LOAD(bias + j));                                                        \
        else if (add) v = GDL__EPI(add_ps)(v, vb);                                                                \
        if (pre) STORE(pre + j, v);                                                                               \
        if (relu) v = GDL__EPI(max_ps)(v, zero); /* v > 0 ? v : 0: max returns its second operand unless v > 0 */ \
        STORE(c + j, v);                                                                                          \
    } while (0)
#define GDL__EPI_LOAD(p) GDL__EPI(loadu_ps)(p)
#define GDL__EPI_STORE(p, x) GDL__EPI(storeu_ps)((p), (x))
#define GDL__EPI_LOADK(p) GDL__EPI_LOADM((p), k)
#define GDL__EPI_STOREK(p, x) GDL__EPI_STOREM((p), k, (x))
    for (; j + GDL__EPI_W <= n; j += GDL__EPI_W) GDL__EPI_ROW_STEP(GDL__EPI_LOAD, GDL__EPI_STORE);
    if (j < n) { /* the tail by mask: a conv's rows of 196 or 49 positions left a scalar loop a fifth of the time */
        k = gdl__epi_mask(n - j);
        GDL__EPI_ROW_STEP(GDL__EPI_LOADK, GDL__EPI_STOREK);
    }
#undef GDL__EPI_ROW_STEP
#undef GDL__EPI_LOAD
#undef GDL__EPI_STORE
#undef GDL__EPI_LOADK
#undef GDL__EPI_STOREK
#else
    int j;
    for (j = 0; j < n; j++) {
        gdl_real v = c[j];
        if (bias) v = v + bias[j];
        else if (add) v = v + b;
        if (pre) pre[j] = v;
        c[j] = relu ? (v > 0 ? v : 0) : v;
    }
#endif
}

static void gdl__gemm_epi_at(const gdl__gemm_args *g, gdl_real *C, gdl_real *P, int i0, int m, int j0, int n) {
    const int act = g->act;
    int i, j;
    for (i = i0; i < i0 + m; i++) {
        gdl_real *c = C + (ptrdiff_t)i * g->ldc + j0;
        gdl_real *pre = P ? P + (ptrdiff_t)i * g->ldc + j0 : NULL;
        const gdl_real *bias = g->bias && g->bias_col ? g->bias + j0 : NULL;
        gdl__gemm_epi_row(c, pre, bias, g->bias != NULL, g->bias && !g->bias_col ? g->bias[i] : 0, act == GDL_UN_RELU,
                          n);
        if (act == GDL_UN_GELU_ERF)
            gdl__gelu_rows(c, c, n);
        else if (act >= 0 && act != GDL_UN_RELU)
            for (j = 0; j < n; j++) c[j] = gdl__unary1(act, c[j], 0);
    }
}

/* The epilogue on the columns [j0, j0+n), product by product when they span several. */
static void gdl__gemm_epi(const gdl__gemm_args *g, int i0, int m, int j0, int n) {
    if (!g->bias && !g->pre && g->act < 0) return;
    if (!g->span) {
        gdl__gemm_epi_at(g, g->C, g->pre, i0, m, j0, n);
        return;
    }
    while (n > 0) {
        const int s = j0 / g->span, jl = j0 - s * g->span, len = g->span - jl < n ? g->span - jl : n;
        gdl__gemm_epi_at(g, g->C + s * g->sCs, g->pre ? g->pre + s * g->sCs : NULL, i0, m, jl, len);
        j0 += len;
        n -= len;
    }
}

/* Split n into equal blocks of at most max, each a multiple of q (max is a
   multiple of q). */
static int gdl__gemm_block(int n, int max, int q) {
    int nblocks = (n + max - 1) / max;
    int b = (n + nblocks - 1) / nblocks;
    return (b + q - 1) / q * q;
}

/* C = beta*C (beta == 0 writes zeros without reading C), then the epilogue. */
static void gdl__gemm_scale(const gdl__gemm_args *g) {
    int i, j;
    for (i = 0; i < g->M && g->beta != 1; i++) {
        gdl_real *c = g->C + i * g->ldc;
        if (g->beta == 0)
            for (j = 0; j < g->N; j++) c[j] = 0;
        else
            for (j = 0; j < g->N; j++) c[j] *= g->beta;
    }
    gdl__gemm_epi(g, 0, g->M, 0, g->N);
}

/* Unpacked fallback: the same K blocks and summation order as the packed
   path, one dot product per element. Correct for any sizes, slow. */
static void gdl__gemm_simple(const gdl__gemm_args *g, int kc_blk) {
    const ptrdiff_t sa_i = g->transA ? 1 : g->lda, sa_k = g->transA ? g->lda : 1;
    const ptrdiff_t sb_k = g->transB ? 1 : g->ldb, sb_j = g->transB ? g->ldb : 1;
    int i, j, k, pc, seg;
    for (seg = 0; seg < g->nseg; seg++)
    for (pc = 0; pc < g->K; pc += kc_blk) {
        const int kend = pc + kc_blk < g->K ? pc + kc_blk : g->K;
        const gdl_real beta = seg == 0 && pc == 0 ? g->beta : (gdl_real)1;
        for (i = 0; i < g->M; i++) {
            gdl_real *c = g->C + i * g->ldc;
            for (j = 0; j < g->N; j++) {
                const gdl_real *a = g->A + seg * g->sA + i * sa_i, *b = g->B + seg * g->sB + j * sb_j;
                gdl_real acc = 0, t;
                for (k = pc; k < kend; k++) acc = GDL__GEMM_MADD(a[k * sa_k], b[k * sb_k], acc);
                t = g->alpha * acc;
                c[j] = beta == 0 ? t : beta == 1 ? t + c[j] : t + beta * c[j];
            }
        }
    }
    gdl__gemm_epi(g, 0, g->M, 0, g->N);
}

/* C[i0:i0+m, j0:j0+n] = tmp + beta*C, tmp an MR x NR tile (the kernel's
   alpha*AB), product by product when the columns span several. */
static void gdl__gemm_put(const gdl__gemm_args *g, const gdl_real *tmp, gdl_real beta, int i0, int m, int j0, int n) {
    int t = 0, i, j;
    while (t < n) {
        const int s = g->span ? (j0 + t) / g->span : 0, jl = j0 + t - s * g->span;
        const int len = g->span && g->span - jl < n - t ? g->span - jl : n - t;
        gdl_real *c = g->C + s * g->sCs + (ptrdiff_t)i0 * g->ldc + (g->span ? jl : j0 + t);
        for (i = 0; i < m; i++) {
            const gdl_real *ti = tmp + i * GDL__GEMM_NR + t;
            gdl_real *ci = c + i * g->ldc;
            j = 0;
#ifdef GDL__EPI_W
            /* in vectors whatever the optimisation level (gcc -O2 left these loops scalar: a tenth of char_gpt's
               bf16 step), each lane the scalar loop's arithmetic: a product, then a sum, no fused multiply-add */
            for (; j + GDL__EPI_W <= len; j += GDL__EPI_W) {
                const gdl__epi_v v = GDL__EPI(loadu_ps)(ti + j);
                if (beta == 0) GDL__EPI(storeu_ps)(ci + j, v);
                else if (beta == 1) GDL__EPI(storeu_ps)(ci + j, GDL__EPI(add_ps)(v, GDL__EPI(loadu_ps)(ci + j)));
                else
                    GDL__EPI(storeu_ps)(ci + j, GDL__EPI(add_ps)(v, GDL__EPI(mul_ps)(GDL__EPI(set1_ps)(beta),
                                                                                    GDL__EPI(loadu_ps)(ci + j))));
            }
#endif
            if (beta == 0)
                for (; j < len; j++) ci[j] = ti[j];
            else if (beta == 1)
                for (; j < len; j++) ci[j] = ti[j] + ci[j];
            else
                for (; j < len; j++) ci[j] = ti[j] + beta * ci[j];
        }
        t += len;
    }
}

/* gdl__gemm_blocked's packing of segment seg's K block [pc, pc+kc): B's columns [jc, jc+nc) into
   NR-wide micro-panels (kc*NR apart) in bbuf, A's rows [ic, ic+mc) into MR-tall ones in abuf. */
static void gdl__gemm_pack_b_block(const gdl__gemm_args *g, int seg, int pc, int kc, int jc, int nc,
                                   gdl_real *GDL__RESTRICT bbuf) {
    int jr;
    if (g->span)
        for (jr = 0; jr < nc; jr += GDL__GEMM_NR) {
            const int n = nc - jr < GDL__GEMM_NR ? nc - jr : GDL__GEMM_NR;
            gdl__gemm_pack_span(g->conv, g->B, g->ldb, g->span, g->sBs, pc, kc, jc + jr, n, bbuf + (size_t)jr * kc);
        }
    else if (!g->conv && !g->transB)
        gdl__gemm_pack_b_rows(g->B + seg * g->sB, g->ldb, pc, kc, jc, nc, bbuf);
    else
        for (jr = 0; jr < nc; jr += GDL__GEMM_NR) {
            const int n = nc - jr < GDL__GEMM_NR ? nc - jr : GDL__GEMM_NR;
            gdl__gemm_pack_b(g->conv, g->transB, g->B + seg * g->sB, g->ldb, pc, kc, jc + jr, n,
                             bbuf + (size_t)jr * kc);
        }
}
static void gdl__gemm_pack_a_block(const gdl__gemm_args *g, int seg, int ic, int mc, int pc, int kc,
                                   gdl_real *GDL__RESTRICT abuf) {
    int ir;
    for (ir = 0; ir < mc; ir += GDL__GEMM_MR) {
        const int m = mc - ir < GDL__GEMM_MR ? mc - ir : GDL__GEMM_MR;
        gdl__gemm_pack_a(g->transA, g->A + seg * g->sA, g->lda, ic + ir, m, pc, kc, abuf + (size_t)ir * kc);
    }
}

/* Elements of an f32 packing buffer of r x c, rounded up to 64 bytes. */
static size_t gdl__gemm_f32_size(int r, int c) { return ((size_t)r * c + 15) & ~(size_t)15; }

/* --- bf16 products on AMX (gdl_cpu_set_fp32_precision("bf16")) ----------
   With the f32 precision set to "bf16" (off by default, as PyTorch's
   torch.backends.mkldnn fp32_precision "ieee"), a CPU with AMX (Sapphire
   Rapids and later; the compiler targeting it, as -march=native does there)
   runs the f32 GEMMs of this driver (not an implicit GEMM's: g->conv; the
   convolutions have their own tile-unit passes, src/cpu/conv_pool.h) with
   their operands rounded to bf16 (nearest even; the conversion and the tile
   unit take subnormals as zero) and the products summed in f32 by the tile
   unit: about 20x the f32 FMA rate a core. The driver is
   gdl__gemm_blocked's: its f32 packing (the same panels, so transposes and
   edges are dealt with there), then each panel rounded into the tile
   layouts, after the f32 panels in the same buffers (gdl__gemm_plan):
     A: [16-row group][32-k step][16 rows][32 k] (a tile: 16 x 64 bytes)
     B: [32-column micro-panel][32-k step][2 halves][16 k pairs][16 cols][2]
        (VNNI: a tile row holds k and k+1 of 16 columns)
   K is padded to a multiple of 32 with zeros. A 32 x 32 block of C is 4
   tiles; its sums go to C as the f32 kernel's do (alpha * sum + beta * C,
   later K blocks and segments adding). The tile unit's sums are not those of
   an f32 FMA chain (its order and rounding inside a step are its own), so
   "bf16" gives other bits than "ieee", and than a CPU without AMX (which
   runs vdpbf16ps, below, or "ieee"); on one machine they do not depend on the thread count: an
   element's K steps and blocks are the same whichever cell has it, and the
   tile unit's result for an element does not depend on its row or column
   in the tile (tests/test_fp32_precision.c). */
/* A list of K steps for gdl__tile_steps, from bases a and b: step s's A tiles at a + ao[s] (rows 0-15)
   and a + ao[s] + a1 (16-31), lda bytes a row of 32 values; its B tiles at b + bo[s] (columns 0-15) and
   b + bo[s] + b1 (16-31), ldb bytes a row of 16 pairs (elements apart, but lda and ldb). */
typedef struct {
    const ptrdiff_t *ao, *bo;
    ptrdiff_t a1, b1;
    int lda, ldb;
} gdl__tile_list;
#if defined(GDL__GEMM_AVX512) && defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__) && \
    defined(__linux__)
#define GDL__GEMM_AMX 1
#define GDL__GEMM_BF16 1
#define GDL__TILE_NAME "amx bf16"
typedef struct {
    unsigned char palette, start_row, reserved[14];
    unsigned short colsb[16];
    unsigned char rows[16];
} gdl__amx_config;
static int gdl__amx_state;                /* 0 not asked, 1 granted by the kernel, -1 refused */
static GDL__TLS int gdl__amx_configured; /* this thread's tile registers are configured */

/* Ask Linux for the tile data state (once a process; 5.16 and later). */
static int gdl__tile_grant(void) {
    if (gdl__amx_state == 0) gdl__amx_state = gdl__os_amx_grant() == 0 ? 1 : -1;
    return gdl__amx_state == 1;
}
/* this thread's tile registers, before its first tile op */
static void gdl__tile_ready(void) {
    gdl__amx_config c;
    int i;
    if (gdl__amx_configured) return;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (i = 0; i < 8; i++) {
        c.rows[i] = 16;
        c.colsb[i] = 64;
    }
    _tile_loadconfig(&c);
    gdl__amx_configured = 1;
}

/* The 32 x 32 block of sums every tile-unit kernel here keeps: tiles 0-3 its four 16 x 16 quarters
   (rows of A 0-15 / 16-31 by columns of B 0-15 / 16-31), 4-5 the two A tiles, 6-7 the two B tiles. */
static inline void gdl__tile_zero4(void) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
}
/* the block from / to t [32][32] (rows 32 floats apart) */
static inline void gdl__tile_load4(const float *t) {
    _tile_loadd(0, t, 128);
    _tile_loadd(1, t + 16, 128);
    _tile_loadd(2, t + 512, 128);
    _tile_loadd(3, t + 528, 128);
}
static inline void gdl__tile_store4(float *t) {
    _tile_stored(0, t, 128);
    _tile_stored(1, t + 16, 128);
    _tile_stored(2, t + 512, 128);
    _tile_stored(3, t + 528, 128);
}
/* one K step of 32: the A tiles a0, a1 (lda bytes a row), the B tiles b0, b1 (ldb bytes a row of pairs) */
static inline void gdl__tile_step(const uint16_t *a0, const uint16_t *a1, int lda, const uint16_t *b0,
                                  const uint16_t *b1, int ldb) {
    _tile_loadd(4, a0, lda);
    _tile_loadd(5, a1, lda);
    _tile_loadd(6, b0, ldb);
    _tile_loadd(7, b1, ldb);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
}

/* The 32 x 32 block of sums of ks K steps: a0, a1 two A groups, b a micro-panel -> t [32][32] */
static void gdl__tile_kernel(int ks, const uint16_t *a0, const uint16_t *a1, const uint16_t *b, float *t) {
    int s;
    gdl__tile_zero4();
    for (s = 0; s < ks; s++)
        gdl__tile_step(a0 + (size_t)s * 512, a1 + (size_t)s * 512, 64, b + (size_t)s * 1024, b + (size_t)s * 1024 + 512,
                       64);
    gdl__tile_store4(t);
}

/* t [32][32] = the sums of the list's first ns steps from a and b, added to t's (load) or from zero */
static void gdl__tile_steps(const uint16_t *a, const uint16_t *b, const gdl__tile_list *l, int ns, int load, float *t) {
    int s;
    if (load)
        gdl__tile_load4(t);
    else
        gdl__tile_zero4();
    for (s = 0; s < ns; s++)
        gdl__tile_step(a + l->ao[s], a + l->ao[s] + l->a1, l->lda, b + l->bo[s], b + l->bo[s] + l->b1, l->ldb);
    gdl__tile_store4(t);
}

#elif defined(GDL__GEMM_AVX512) && defined(__AVX512BF16__)
/* --- the same bf16 products without a tile unit: AVX512-BF16 ------------
   A CPU with AVX512-BF16 and no AMX (AMD's Zen 4 and Zen 5) runs the same
   passes, in the same layouts, with vdpbf16ps: a 16-lane dot product of
   pairs, 32 multiply-adds an instruction, twice the FMA's. The block of
   sums a tile kernel keeps in tiles 0-3 is here in registers 8 rows (16
   vectors) at a time, across a list's K steps. An element's sum runs over the K pairs in order, acc + a0 b0 + a1
   b1 an instruction (its own rounding: bf16 denormals as zero), so the bits
   are this path's own, not AMX's nor "ieee"'s; as on the tile unit they do
   not depend on an element's row or column, nor on the thread count. */
#define GDL__GEMM_BF16 1
#define GDL__TILE_NAME "avx512 bf16 dot"
static int gdl__tile_grant(void) { return 1; }
static void gdl__tile_ready(void) {}
static inline __m512bh gdl__bf16_pair(const uint16_t *p) { /* the pair at p, in every lane */
    int32_t v;
    memcpy(&v, p, 4);
    return (__m512bh)_mm512_set1_epi32(v);
}
/* rows r0 .. r0+7 of the block in c (two vectors a row: columns 0-15, 16-31) += ns K steps of 32: row r
   of step s at a + s as + r lda (elements), its pair p at 2p; B's pair-row p of step s at b0 + s bs +
   p ldb (columns 0-15), b1 the same (16-31) */
static inline void gdl__tile_rows8(__m512 *c, int ns, const uint16_t *a, size_t as, int lda, const uint16_t *b0,
                                   const uint16_t *b1, size_t bs, int ldb) {
    int s, p, i;
    for (s = 0; s < ns; s++)
        for (p = 0; p < 16; p++) {
            const __m512bh bl = (__m512bh)_mm512_loadu_si512((const void *)(b0 + s * bs + (size_t)p * ldb));
            const __m512bh bh = (__m512bh)_mm512_loadu_si512((const void *)(b1 + s * bs + (size_t)p * ldb));
            GDL__UNROLL
            for (i = 0; i < 8; i++) {
                const __m512bh ap = gdl__bf16_pair(a + s * as + (size_t)i * lda + 2 * p);
                c[2 * i] = _mm512_dpbf16_ps(c[2 * i], ap, bl);
                c[2 * i + 1] = _mm512_dpbf16_ps(c[2 * i + 1], ap, bh);
            }
        }
}
/* t [32][32] = the sums of the list's first ns steps from a and b, added to t's (load) or from zero: 8
   rows at a time, their sums in registers across the steps */
static void gdl__tile_steps(const uint16_t *a, const uint16_t *b, const gdl__tile_list *l, int ns, int load, float *t) {
    int r0, i, s;
    for (r0 = 0; r0 < 32; r0 += 8) {
        const uint16_t *ar = a + (r0 < 16 ? 0 : l->a1) + (ptrdiff_t)(r0 % 16) * (l->lda / 2);
        float *tr = t + r0 * 32;
        __m512 c[16];
        GDL__UNROLL
        for (i = 0; i < 8; i++) {
            c[2 * i] = load ? _mm512_loadu_ps(tr + i * 32) : _mm512_setzero_ps();
            c[2 * i + 1] = load ? _mm512_loadu_ps(tr + i * 32 + 16) : _mm512_setzero_ps();
        }
        for (s = 0; s < ns; s++)
            gdl__tile_rows8(c, 1, ar + l->ao[s], 0, l->lda / 2, b + l->bo[s], b + l->bo[s] + l->b1, 0, l->ldb / 2);
        GDL__UNROLL
        for (i = 0; i < 8; i++) {
            _mm512_storeu_ps(tr + i * 32, c[2 * i]);
            _mm512_storeu_ps(tr + i * 32 + 16, c[2 * i + 1]);
        }
    }
}
/* The 32 x 32 block of sums of ks K steps (the GEMM's layouts: A [ks][16][32], B [ks][2][16][32]) -> t,
   the sums kept in registers across the steps */
static void gdl__tile_kernel(int ks, const uint16_t *a0, const uint16_t *a1, const uint16_t *b, float *t) {
    int r0, i;
    for (r0 = 0; r0 < 32; r0 += 8) {
        __m512 c[16];
        GDL__UNROLL
        for (i = 0; i < 16; i++) c[i] = _mm512_setzero_ps();
        gdl__tile_rows8(c, ks, (r0 < 16 ? a0 : a1) + (size_t)(r0 % 16) * 32, 512, 32, b, b + 512, 1024, 32);
        GDL__UNROLL
        for (i = 0; i < 8; i++) {
            _mm512_store_ps(t + (r0 + i) * 32, c[2 * i]);
            _mm512_store_ps(t + (r0 + i) * 32 + 16, c[2 * i + 1]);
        }
    }
}
#endif

#ifdef GDL__GEMM_BF16
/* room for n steps' offsets: ao then bo in one block (freed through l->ao), NULL without memory */
static ptrdiff_t *gdl__tile_list_alloc(gdl__tile_list *l, int n) {
    ptrdiff_t *o = (ptrdiff_t *)malloc(sizeof(ptrdiff_t) * 2 * (size_t)n);
    l->ao = o;
    l->bo = o ? o + n : NULL;
    return o;
}

/* f32 panel [kc][NR] (NR = 32) -> VNNI bf16 [ks][2][16][32], zero past kc */
static void gdl__tile_cvt_b(const float *src, int kc, int ks, uint16_t *dst) {
    int s, kp, h;
    for (s = 0; s < ks; s++)
        for (kp = 0; kp < 16; kp++) {
            const int k0 = s * 32 + 2 * kp;
            for (h = 0; h < 2; h++) {
                const __m512 r0 = k0 < kc ? _mm512_loadu_ps(src + (size_t)k0 * 32 + 16 * h) : _mm512_setzero_ps();
                const __m512 r1 = k0 + 1 < kc ? _mm512_loadu_ps(src + (size_t)(k0 + 1) * 32 + 16 * h) : _mm512_setzero_ps();
                const __m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(r0));
                const __m512i hi = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(r1));
                _mm512_storeu_si512((void *)(dst + (((size_t)s * 2 + h) * 16 + kp) * 32),
                                    _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
            }
        }
}

/* two f32 A micro-panels [kc][MR = 8] (rows 0-7, 8-15; the second absent
   past mrows) -> [ks][16][32] bf16, zero past kc and mrows */
static void gdl__tile_cvt_a(const float *p0, int mrows, int kc, int ks, uint16_t *dst) {
    const __m512i idx = _mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120);
    int s, r, h;
    for (s = 0; s < ks; s++)
        for (r = 0; r < 16; r++)
            for (h = 0; h < 2; h++) {
                const int k0 = s * 32 + 16 * h, kn = kc - k0;
                __m512 v = _mm512_setzero_ps();
                if (r < mrows && kn > 0) {
                    const float *base = p0 + (size_t)(r / 8) * 8 * kc + (size_t)k0 * 8 + r % 8;
                    const __mmask16 m = kn >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << kn) - 1);
                    v = _mm512_mask_i32gather_ps(v, m, idx, base, 4);
                }
                _mm256_storeu_si256((__m256i *)(void *)(dst + ((size_t)s * 16 + r) * 32 + 16 * h),
                                    (__m256i)_mm512_cvtneps_pbh(v));
            }
}
#endif

#ifdef GDL__GEMM_BF16
/* gdl__gemm_blocked's loops on the tile unit (see above), abuf and bbuf
   holding the bf16 panels after the f32 ones (gdl__gemm_plan's sizes). */
static void gdl__gemm_blocked_tile(const gdl__gemm_args *g, int m0, int m1, int n0, int n1, int mc_blk, int kc_blk,
                                 int nc_blk, gdl_real *GDL__RESTRICT abuf, gdl_real *GDL__RESTRICT bbuf) {
    uint16_t *abf = (uint16_t *)(void *)(abuf + gdl__gemm_f32_size(mc_blk, kc_blk));
    uint16_t *bbf = (uint16_t *)(void *)(bbuf + gdl__gemm_f32_size(kc_blk, nc_blk));
    GDL__ALIGNAS(64) float t[32 * 32];
    int jc, pc, ic, ir, jr, seg, i;
    gdl__tile_ready();
    for (jc = n0; jc < n1; jc += nc_blk) {
        const int nc = n1 - jc < nc_blk ? n1 - jc : nc_blk;
        for (seg = 0; seg < g->nseg; seg++)
        for (pc = 0; pc < g->K; pc += kc_blk) {
            const int kc = g->K - pc < kc_blk ? g->K - pc : kc_blk, ks = (kc + 31) / 32;
            const gdl_real beta = seg == 0 && pc == 0 ? g->beta : (gdl_real)1;
            const int last = seg == g->nseg - 1 && pc + kc == g->K;
            gdl__gemm_pack_b_block(g, seg, pc, kc, jc, nc, bbuf);
            for (jr = 0; jr < nc; jr += 32) gdl__tile_cvt_b(bbuf + (size_t)jr * kc, kc, ks, bbf + (size_t)jr / 32 * ks * 1024);
            for (ic = m0; ic < m1; ic += mc_blk) {
                const int mc = m1 - ic < mc_blk ? m1 - ic : mc_blk;
                gdl__gemm_pack_a_block(g, seg, ic, mc, pc, kc, abuf);
                for (ir = 0; ir < mc; ir += 16)
                    gdl__tile_cvt_a(abuf + (size_t)ir * kc, mc - ir < 16 ? mc - ir : 16, kc, ks,
                                   abf + (size_t)ir / 16 * ks * 512);
                for (jr = 0; jr < nc; jr += 32) {
                    const int n = nc - jr < 32 ? nc - jr : 32;
                    for (ir = 0; ir < mc; ir += 32) {
                        const int m = mc - ir < 32 ? mc - ir : 32;
                        const uint16_t *a0 = abf + (size_t)ir / 16 * ks * 512;
                        gdl__tile_kernel(ks, a0, m > 16 ? a0 + (size_t)ks * 512 : a0, bbf + (size_t)jr / 32 * ks * 1024, t);
                        if (g->alpha != 1)
                            for (i = 0; i < 32 * 32; i++) t[i] *= g->alpha;
                        gdl__gemm_put(g, t, beta, ic + ir, m, jc + jr, n);
                        if (last) gdl__gemm_epi(g, ic + ir, m, jc + jr, n);
                    }
                }
            }
        }
    }
}
#endif

/* The packed, blocked path on one thread, for the rows [m0,m1) and columns
   [n0,n1) of C (m0 a multiple of MR, n0 of NR). abuf holds mc_blk x kc_blk,
   bbuf kc_blk x nc_blk elements, both 64-byte aligned. */
static void gdl__gemm_blocked(const gdl__gemm_args *g, int m0, int m1, int n0, int n1, int mc_blk, int kc_blk,
                              int nc_blk, gdl_real *GDL__RESTRICT abuf, gdl_real *GDL__RESTRICT bbuf) {
    int jc, pc, ic, ir, jr, seg;
#ifdef GDL__GEMM_BF16
    if (g->bf16 && !g->conv) {
        gdl__gemm_blocked_tile(g, m0, m1, n0, n1, mc_blk, kc_blk, nc_blk, abuf, bbuf);
        return;
    }
#endif
    for (jc = n0; jc < n1; jc += nc_blk) {
        const int nc = n1 - jc < nc_blk ? n1 - jc : nc_blk;
        for (seg = 0; seg < g->nseg; seg++)
        for (pc = 0; pc < g->K; pc += kc_blk) {
            const int kc = g->K - pc < kc_blk ? g->K - pc : kc_blk;
            /* later K blocks (and segments) accumulate; the epilogue follows the last */
            const gdl_real beta = seg == 0 && pc == 0 ? g->beta : (gdl_real)1;
            const int last = seg == g->nseg - 1 && pc + kc == g->K;
            gdl__gemm_pack_b_block(g, seg, pc, kc, jc, nc, bbuf);
            for (ic = m0; ic < m1; ic += mc_blk) {
                const int mc = m1 - ic < mc_blk ? m1 - ic : mc_blk;
                gdl__gemm_pack_a_block(g, seg, ic, mc, pc, kc, abuf);
                /* jr outside ir: one B micro-panel stays in L1 while the
                   A micro-panels stream past it from L2 */
                for (jr = 0; jr < nc; jr += GDL__GEMM_NR) {
                    const int n = nc - jr < GDL__GEMM_NR ? nc - jr : GDL__GEMM_NR;
                    const gdl_real *bp = bbuf + (size_t)jr * kc;
                    for (ir = 0; ir < mc; ir += GDL__GEMM_MR) {
                        const int m = mc - ir < GDL__GEMM_MR ? mc - ir : GDL__GEMM_MR;
                        const gdl_real *ap = abuf + (size_t)ir * kc;
                        const int s = g->span ? (jc + jr) / g->span : 0, jl = jc + jr - s * g->span;
                        gdl_real *c = g->C + s * g->sCs + (ptrdiff_t)(ic + ir) * g->ldc + (g->span ? jl : jc + jr);
                        if (m == GDL__GEMM_MR && n == GDL__GEMM_NR && (!g->span || jl + n <= g->span)) {
                            gdl__gemm_kernel(kc, ap, bp, c, g->ldc, g->alpha, beta);
                        } else { /* edge, or across products: the full tile into tmp, then the valid part */
                            gdl_real tmp[GDL__GEMM_MR * GDL__GEMM_NR];
                            gdl__gemm_kernel(kc, ap, bp, tmp, GDL__GEMM_NR, g->alpha, 0);
                            gdl__gemm_put(g, tmp, beta, ic + ir, m, jc + jr, n);
                        }
                        if (last) gdl__gemm_epi(g, ic + ir, m, jc + jr, n);
                    }
                }
            }
        }
    }
}

/* A GEMM's plan and its tasks, each on its thread's packing buffers
   (asz + bsz elements at gdl__gemm_shared.buf + slot * (asz + bsz)): the
   cells of a tm x tn grid of C (gdl__gemm_task, or gdl__gemm_packed_task
   when the operands are packed once for all cells), or the products of a
   batch, sA, sB, sC apart (gdl__gemm_batch_task): the pool's tasks below. */
typedef struct {
    const gdl__gemm_args *g;
    int mc_blk, kc_blk, nc_blk, tm, tn;
    int threads; /* the most threads the job runs on: buffers for that many slots */
    size_t asz, bsz;
    ptrdiff_t sA, sB, sC;
    /* the shared packing (gdl__gemm_packed_task): op(A) and op(B) packed
       whole, K block by K block, each micro-panel (A) or chunk of
       GDL__GEMM_BCHUNK micro-panels (B) by the first task that needs it;
       aflag / bflag: 0 not packed, 1 being packed, 2 ready */
    int packed, nkc, nkb, pm, pn, nbch;
    gdl_real *apack, *bpack;
    int *aflag, *bflag;
} gdl__gemm_job;

#ifdef GDL__POOL
/* Cells per thread that a multi-threaded GEMM aims for: with more cells
   than threads, the other threads take over the cells of one the OS has
   descheduled (another busy process on the machine) instead of waiting
   for it. Fewer when the cells would fall below GDL__GEMM_CELL_MIN
   multiply-adds, where a task's overhead starts to show. */
#ifndef GDL__GEMM_SPLIT
#define GDL__GEMM_SPLIT 4
#endif
#ifndef GDL__GEMM_CELL_MIN
#define GDL__GEMM_CELL_MIN (32.0 * 64.0 * 64.0)
#endif
/* B micro-panels packed together (one flag): a B not transposed is packed
   a few rows at a time across them (gdl__gemm_pack_b_rows) */
#ifndef GDL__GEMM_BCHUNK
#define GDL__GEMM_BCHUNK 8
#endif
/* The shared packing's largest packed A + B (elements); above it the
   cells pack their own panels (and are few: a cell is then large enough
   that its packing is a small part of it) */
#ifndef GDL__GEMM_PACKED_MAX
#define GDL__GEMM_PACKED_MAX ((size_t)8 << 20)
#endif

/* Cut the MR x NR tiles of C into a tm x tn grid of at most nthreads
   rectangles, one per thread, for cells that pack their own panels
   (gdl__gemm_task). Cost of a rectangle of r rows and c columns: r*c*K
   multiply-adds (~32 per cycle) plus (r + c)*K packed elements (~1 per
   cycle), so pick the grid with the least r*c + 32*(r + c). Splitting along
   N makes every thread pack all of its rows of A, splitting along M all of
   B. */
static void gdl__gemm_grid(int M, int N, int nthreads, int *tm, int *tn) {
    const int pm = (M + GDL__GEMM_MR - 1) / GDL__GEMM_MR, pn = (N + GDL__GEMM_NR - 1) / GDL__GEMM_NR;
    double best = -1;
    int a, b;
    *tm = *tn = 1;
    for (b = 1; b <= nthreads && b <= pn; b++)
        for (a = 1; a * b <= nthreads && a <= pm; a++) {
            const double r = (double)((pm + a - 1) / a) * GDL__GEMM_MR;
            const double c = (double)((pn + b - 1) / b) * GDL__GEMM_NR;
            const double cost = r * c + 32.0 * (r + c);
            if (best < 0 || cost < best) {
                best = cost;
                *tm = a;
                *tn = b;
            }
        }
}

/* The grid of the shared packing (nothing is packed twice, so cells cost
   only their multiply-adds and their reads of the packed panels): at least
   `want` cells where the tiles allow, the grid with the least time on
   nthreads threads taking cells in turn (ceil(cells / threads) cells of
   r*c + 8*(r + c): squarish cells read fewer panels per multiply-add),
   ties to the fewer cells. */
static void gdl__gemm_grid_packed(int M, int N, int nthreads, int want, int *tm, int *tn) {
    const int pm = (M + GDL__GEMM_MR - 1) / GDL__GEMM_MR, pn = (N + GDL__GEMM_NR - 1) / GDL__GEMM_NR;
    double best = -1;
    int a, b;
    if (want > pm * pn) want = pm * pn;
    *tm = *tn = 1;
    for (b = 1; b <= pn && b <= 2 * want; b++)
        for (a = 1; a <= pm && a * b <= 2 * want; a++) {
            const double r = (double)((pm + a - 1) / a) * GDL__GEMM_MR;
            const double c = (double)((pn + b - 1) / b) * GDL__GEMM_NR;
            const double cost = (double)((a * b + nthreads - 1) / nthreads) * (r * c + 8.0 * (r + c));
            if (a * b < want) continue;
            if (best < 0 || cost < best) {
                best = cost;
                *tm = a;
                *tn = b;
            }
        }
}

/* Rectangle t of the grid: rows [*m0,*m1), columns [*n0,*n1) of C, cut at
   tile boundaries so every element is computed by the same tile, with the
   same operations, whatever the grid. */
static void gdl__gemm_cell(int M, int N, int tm, int tn, int t, int *m0, int *m1, int *n0, int *n1) {
    const int pm = (M + GDL__GEMM_MR - 1) / GDL__GEMM_MR, pn = (N + GDL__GEMM_NR - 1) / GDL__GEMM_NR;
    const int ti = t / tn, tj = t % tn;
    *m0 = (int)((long long)pm * ti / tm) * GDL__GEMM_MR;
    *m1 = (int)((long long)pm * (ti + 1) / tm) * GDL__GEMM_MR;
    *n0 = (int)((long long)pn * tj / tn) * GDL__GEMM_NR;
    *n1 = (int)((long long)pn * (tj + 1) / tn) * GDL__GEMM_NR;
    if (*m1 > M) *m1 = M;
    if (*n1 > N) *n1 = N;
}

/* The calling thread's packing buffers among the threads' (the pool's slot). */
static int gdl__gemm_slot(void) { return gdl__pool_slot; }

/* One rectangle of the grid, packing its own panels: the pool's task t. */
static void gdl__gemm_task(void *p, int t, int nt) {
    const gdl__gemm_job *j = (const gdl__gemm_job *)p;
    gdl_real *buf = gdl__gemm_shared.buf + (size_t)gdl__gemm_slot() * (j->asz + j->bsz);
    int m0, m1, n0, n1;
    (void)nt;
    gdl__gemm_cell(j->g->M, j->g->N, j->tm, j->tn, t, &m0, &m1, &n0, &n1);
    gdl__gemm_blocked(j->g, m0, m1, n0, n1, j->mc_blk, j->kc_blk, j->nc_blk, buf, buf + j->asz);
}

/* Claims a panel for packing: 1 when this thread is to pack it, 0 when it
   is ready, -1 when another thread is still packing it after a short wait
   (about a chunk's packing time: two threads that reach a panel together
   would otherwise both pack it): then the caller packs a private copy
   rather than wait longer for a thread the OS may have descheduled. A copy
   holds the same values, so the bits do not change. */
static int gdl__gemm_claim(int *flag) {
    int st = gdl__atomic_load(flag, GDL__MO_ACQUIRE), zero = 0, spin;
    if (st == 2) return 0;
    if (st == 0 && gdl__atomic_cas(flag, &zero, 1, 0, GDL__MO_ACQ_REL, GDL__MO_ACQUIRE)) return 1;
    for (spin = 0; spin < GDL__POOL_SPIN; spin++) {
        if (gdl__atomic_load(flag, GDL__MO_ACQUIRE) == 2) return 0;
        GDL__POOL_PAUSE();
    }
    return gdl__atomic_load(flag, GDL__MO_ACQUIRE) == 2 ? 0 : -1;
}

/* K block kb of the shared packing: its segment, first k and length */
static void gdl__gemm_kblock(const gdl__gemm_job *j, int kb, int *seg, int *pc, int *kc) {
    *seg = kb / j->nkc;
    *pc = kb % j->nkc * j->kc_blk;
    *kc = j->g->K - *pc < j->kc_blk ? j->g->K - *pc : j->kc_blk;
}

/* A micro-panel ip (rows ip*MR ...) of K block kb, packed: the shared copy,
   or a private one in own (MR*kc elements) */
static const gdl_real *gdl__gemm_apanel(const gdl__gemm_job *j, int kb, int ip, gdl_real *own) {
    const gdl__gemm_args *g = j->g;
    int seg, pc, kc, c, m = g->M - ip * GDL__GEMM_MR;
    gdl_real *dst;
    gdl__gemm_kblock(j, kb, &seg, &pc, &kc);
    dst = j->apack + (size_t)kb * j->kc_blk * j->pm * GDL__GEMM_MR + (size_t)ip * GDL__GEMM_MR * kc;
    if ((c = gdl__gemm_claim(&j->aflag[kb * j->pm + ip])) == 0) return dst;
    if (m > GDL__GEMM_MR) m = GDL__GEMM_MR;
    if (c < 0) dst = own;
    gdl__gemm_pack_a(g->transA, g->A + seg * g->sA, g->lda, ip * GDL__GEMM_MR, m, pc, kc, dst);
    if (c > 0) gdl__atomic_store(&j->aflag[kb * j->pm + ip], 2, GDL__MO_RELEASE);
    return dst;
}

/* B micro-panel jp (columns jp*NR ...) of K block kb, packed: the shared
   copy (its chunk packed if need be), or a private one in own (NR*kc) */
static const gdl_real *gdl__gemm_bpanel(const gdl__gemm_job *j, int kb, int jp, gdl_real *own) {
    const gdl__gemm_args *g = j->g;
    const int ch = jp / GDL__GEMM_BCHUNK;
    int seg, pc, kc, c, p;
    gdl_real *base;
    gdl__gemm_kblock(j, kb, &seg, &pc, &kc);
    base = j->bpack + (size_t)kb * j->kc_blk * j->pn * GDL__GEMM_NR;
    if ((c = gdl__gemm_claim(&j->bflag[kb * j->nbch + ch])) == 0) return base + (size_t)jp * GDL__GEMM_NR * kc;
    if (c > 0) {
        const int p0 = ch * GDL__GEMM_BCHUNK, p1 = p0 + GDL__GEMM_BCHUNK < j->pn ? p0 + GDL__GEMM_BCHUNK : j->pn;
        const int j0 = p0 * GDL__GEMM_NR, j1 = p1 * GDL__GEMM_NR < g->N ? p1 * GDL__GEMM_NR : g->N;
        if (!g->conv && !g->transB)
            gdl__gemm_pack_b_rows(g->B + seg * g->sB, g->ldb, pc, kc, j0, j1 - j0, base + (size_t)j0 * kc);
        else
            for (p = p0; p < p1; p++) {
                const int n = g->N - p * GDL__GEMM_NR < GDL__GEMM_NR ? g->N - p * GDL__GEMM_NR : GDL__GEMM_NR;
                gdl__gemm_pack_b(g->conv, g->transB, g->B + seg * g->sB, g->ldb, pc, kc, p * GDL__GEMM_NR, n,
                                 base + (size_t)p * GDL__GEMM_NR * kc);
            }
        gdl__atomic_store(&j->bflag[kb * j->nbch + ch], 2, GDL__MO_RELEASE);
        return base + (size_t)jp * GDL__GEMM_NR * kc;
    }
    {
        const int n = g->N - jp * GDL__GEMM_NR < GDL__GEMM_NR ? g->N - jp * GDL__GEMM_NR : GDL__GEMM_NR;
        gdl__gemm_pack_b(g->conv, g->transB, g->B + seg * g->sB, g->ldb, pc, kc, jp * GDL__GEMM_NR, n, own);
    }
    return own;
}

/* One cell of the grid on the shared packing: gdl__gemm_blocked's loops and
   tiles, the panels taken from (or packed into) the shared copies */
static void gdl__gemm_packed_task(void *p, int t, int nt) {
    const gdl__gemm_job *j = (const gdl__gemm_job *)p;
    const gdl__gemm_args *g = j->g;
    gdl_real *own = gdl__gemm_shared.buf + (size_t)gdl__gemm_slot() * (j->asz + j->bsz);
    const gdl_real *ap[GDL__GEMM_MC / GDL__GEMM_MR];
    int m0, m1, n0, n1, jc, kb, ic, ir, jr;
    (void)nt;
    gdl__gemm_cell(g->M, g->N, j->tm, j->tn, t, &m0, &m1, &n0, &n1);
    for (jc = n0; jc < n1; jc += j->nc_blk) {
        const int nc = n1 - jc < j->nc_blk ? n1 - jc : j->nc_blk;
        for (kb = 0; kb < j->nkb; kb++) {
            int seg, pc, kc;
            gdl_real beta;
            gdl__gemm_kblock(j, kb, &seg, &pc, &kc);
            beta = kb == 0 ? g->beta : (gdl_real)1; /* later K blocks (and segments) accumulate */
            for (ic = m0; ic < m1; ic += j->mc_blk) {
                const int mc = m1 - ic < j->mc_blk ? m1 - ic : j->mc_blk;
                for (ir = 0; ir < mc; ir += GDL__GEMM_MR) /* a private A panel each: MR*KC apart in own */
                    ap[ir / GDL__GEMM_MR] = gdl__gemm_apanel(j, kb, (ic + ir) / GDL__GEMM_MR,
                                                             own + (size_t)ir * j->kc_blk);
                for (jr = 0; jr < nc; jr += GDL__GEMM_NR) {
                    const int n = nc - jr < GDL__GEMM_NR ? nc - jr : GDL__GEMM_NR;
                    const gdl_real *bp = gdl__gemm_bpanel(j, kb, (jc + jr) / GDL__GEMM_NR, own + j->asz);
                    for (ir = 0; ir < mc; ir += GDL__GEMM_MR) {
                        const int m = mc - ir < GDL__GEMM_MR ? mc - ir : GDL__GEMM_MR;
                        gdl_real *c = g->C + (ptrdiff_t)(ic + ir) * g->ldc + jc + jr;
                        if (m == GDL__GEMM_MR && n == GDL__GEMM_NR) {
                            gdl__gemm_kernel(kc, ap[ir / GDL__GEMM_MR], bp, c, g->ldc, g->alpha, beta);
                        } else { /* edge: the full tile into tmp, then the valid part */
                            gdl_real tmp[GDL__GEMM_MR * GDL__GEMM_NR];
                            gdl__gemm_kernel(kc, ap[ir / GDL__GEMM_MR], bp, tmp, GDL__GEMM_NR, g->alpha, 0);
                            gdl__gemm_put(g, tmp, beta, ic + ir, m, jc + jr, n);
                        }
                        if (kb == j->nkb - 1) gdl__gemm_epi(g, ic + ir, m, jc + jr, n);
                    }
                }
            }
        }
    }
}

/* Product t of a batch, whole, on the thread's own packing buffers. */
static void gdl__gemm_batch_task(void *p, int t, int nt) {
    const gdl__gemm_job *j = (const gdl__gemm_job *)p;
    gdl__gemm_args g = *j->g;
    gdl_real *buf = gdl__gemm_shared.buf + (size_t)gdl__gemm_slot() * (j->asz + j->bsz);
    (void)nt;
    g.A += t * j->sA;
    g.B += t * j->sB;
    g.C += t * j->sC;
    if (g.pre) g.pre += t * j->sC; /* laid out as C */
    gdl__gemm_blocked(&g, 0, g.M, 0, g.N, j->mc_blk, j->kc_blk, j->nc_blk, buf, buf + j->asz);
}
#else
static int gdl__gemm_slot(void) { return 0; }
#endif /* GDL__POOL */

/* g's block sizes and per-thread buffers, one thread (tm = tn = 1) */
static void gdl__gemm_plan(const gdl__gemm_args *g, gdl__gemm_job *j) {
    memset(j, 0, sizeof *j);
    j->g = g;
    j->tm = j->tn = 1;
    j->threads = 1;
    j->mc_blk = gdl__gemm_block(g->M, GDL__GEMM_MC, GDL__GEMM_MR);
    j->kc_blk = gdl__gemm_block(g->K, GDL__GEMM_KC, 1);
    j->nc_blk = gdl__gemm_block(g->N, GDL__GEMM_NC, GDL__GEMM_NR);
    /* an A block and a B panel, each rounded up to 64 bytes */
    j->asz = gdl__gemm_f32_size(j->mc_blk, j->kc_blk);
    j->bsz = gdl__gemm_f32_size(j->kc_blk, j->nc_blk);
#ifdef GDL__GEMM_BF16
    if (g->bf16 && !g->conv) { /* and their bf16 copies (in floats: two bf16 each) */
        const size_t ks = (size_t)(j->kc_blk + 31) / 32;
        j->asz += (((size_t)j->mc_blk + 15) / 16 * ks * 512 / 2 + 15) & ~(size_t)15;
        j->bsz += (((size_t)j->nc_blk + 31) / 32 * ks * 1024 / 2 + 15) & ~(size_t)15;
    }
#endif
}

/* The planned GEMM (K > 0, alpha != 0), the caller holding the pool and
   gdl__gemm_shared.buf at least j->threads threads' buffers (one when
   tm = tn = 1): on the grid's threads, or on this one. */
static void gdl__gemm_held(gdl__gemm_job *j) {
#ifdef GDL__POOL
    if (j->tm * j->tn > 1) {
        if (j->packed) { /* every panel unpacked; published to the workers by the pool's start of the job */
            memset(j->aflag, 0, sizeof(int) * (size_t)j->nkb * (j->pm + j->nbch));
            gdl__pool_run_on(j->tm * j->tn, j->threads, gdl__gemm_packed_task, j);
        } else {
            gdl__pool_run_on(j->tm * j->tn, j->threads, gdl__gemm_task, j);
        }
        return;
    }
#endif
    gdl__gemm_blocked(j->g, 0, j->g->M, 0, j->g->N, j->mc_blk, j->kc_blk, j->nc_blk, gdl__gemm_shared.buf,
                      gdl__gemm_shared.buf + j->asz);
}

/* The grid of j's GEMM on up to `threads` threads (one below
   GDL__GEMM_MT_MIN): cells on the shared packing where its panels fit
   GDL__GEMM_PACKED_MAX (and memory), else at most one cell per thread,
   each packing its own. The caller reserves threads' packing buffers. */
static void gdl__gemm_plan_grid(gdl__gemm_job *j, int threads) {
#ifdef GDL__POOL
    const gdl__gemm_args *g = j->g;
    const double work = (double)g->M * g->N * g->K * g->nseg;
    j->threads = threads;
    j->tm = j->tn = 1;
    j->packed = 0;
    if (threads <= 1 || work < GDL__GEMM_MT_MIN) return;
    j->pm = (g->M + GDL__GEMM_MR - 1) / GDL__GEMM_MR;
    j->pn = (g->N + GDL__GEMM_NR - 1) / GDL__GEMM_NR;
    j->nbch = (j->pn + GDL__GEMM_BCHUNK - 1) / GDL__GEMM_BCHUNK;
    j->nkc = (g->K + j->kc_blk - 1) / j->kc_blk;
    j->nkb = j->nkc * g->nseg;
    if (!g->span && !(g->bf16 && !g->conv)) { /* (the tile unit's path packs its own) */
        /* A and B whole, each K block kc_blk apart (64-byte multiples), then the flags */
        const size_t asz = ((size_t)j->nkb * j->kc_blk * j->pm * GDL__GEMM_MR + 15) & ~(size_t)15;
        const size_t bsz = ((size_t)j->nkb * j->kc_blk * j->pn * GDL__GEMM_NR + 15) & ~(size_t)15;
        const size_t fsz = ((size_t)j->nkb * (j->pm + j->nbch) * sizeof(int) + sizeof(gdl_real) - 1) / sizeof(gdl_real);
        if (asz + bsz <= GDL__GEMM_PACKED_MAX && gdl__gemm_space_reserve(&gdl__gemm_packs, asz + bsz + fsz)) {
            double cells = work / GDL__GEMM_CELL_MIN;
            int want = cells < threads ? threads : cells > (double)GDL__GEMM_SPLIT * threads ? GDL__GEMM_SPLIT * threads
                                                                                           : (int)cells;
            j->packed = 1;
            j->apack = gdl__gemm_packs.buf;
            j->bpack = gdl__gemm_packs.buf + asz;
            j->aflag = (int *)(void *)(gdl__gemm_packs.buf + asz + bsz);
            j->bflag = j->aflag + (size_t)j->nkb * j->pm;
            gdl__gemm_grid_packed(g->M, g->N, threads, want, &j->tm, &j->tn);
            return;
        }
    }
    gdl__gemm_grid(g->M, g->N, threads, &j->tm, &j->tn);
#else
    (void)j;
    (void)threads;
#endif
}

#endif /* !GDL__GEMM_CBLAS */

#ifndef GDL__GEMM_CBLAS
/* The built-in GEMM on g (M, N > 0): threads, packing buffers, fallbacks.
   Returns 0, having done nothing, only for an implicit GEMM (g->conv) that
   cannot have the packing buffers: the unpacked loop cannot read its B. */
static int gdl__gemm_run(const gdl__gemm_args *g) {
    gdl__gemm_job j;
    if (g->K <= 0 || g->alpha == 0) { /* A and B are not read */
        gdl__gemm_scale(g);
        return 1;
    }
    gdl__gemm_plan(g, &j);
    if (!gdl__pool_acquire()) { /* the shared packing buffers are in use: don't race */
        if (gdl__gemm_slot() == 0 && gdl__gemm_space_reserve(&gdl__gemm_own, j.asz + j.bsz)) {
            gdl__gemm_blocked(g, 0, g->M, 0, g->N, j.mc_blk, j.kc_blk, j.nc_blk, gdl__gemm_own.buf,
                              gdl__gemm_own.buf + j.asz); /* another thread's pool: this thread's own buffers */
            return 1;
        }
        if (g->conv) return 0;
        gdl__gemm_simple(g, j.kc_blk);
        return 1;
    }
    gdl__gemm_plan_grid(&j, gdl_get_num_threads());
    if (!gdl__gemm_reserve((size_t)j.threads * (j.asz + j.bsz))) {
        j.tm = j.tn = 1; /* no memory for every thread: try one thread */
        if (!gdl__gemm_reserve(j.asz + j.bsz)) {
            gdl__pool_release();
            if (g->conv) return 0;
            gdl__gemm_simple(g, j.kc_blk);
            return 1;
        }
    }
    gdl__gemm_held(&j);
    gdl__pool_release();
    return 1;
}
#endif

#if defined(GDL__POOL) && !defined(GDL__GEMM_CBLAS)
#define GDL__GEMM_BATCH 1
/* A batch of independent products (a convolution's samples): task t is
   product t, whole, on the thread's own packing buffers. One parallel region
   instead of one per product, and products too small to split are spread
   over the threads too. Each product is computed as a call of its own would
   (the grid never changes the bits). Returns 0 (nothing done) when the pool
   or the memory is not to be had. */
static int gdl__gemm_batch(const gdl__gemm_args *g, ptrdiff_t sA, ptrdiff_t sB, ptrdiff_t sC, int batch, int threads) {
    gdl__gemm_job j;
    gdl__gemm_plan(g, &j);
    j.sA = sA; j.sB = sB; j.sC = sC;
    if (!gdl__pool_acquire()) return 0;
    if (!gdl__gemm_reserve((size_t)threads * (j.asz + j.bsz))) {
        gdl__pool_release();
        return 0;
    }
    gdl__pool_run_on(batch, threads, gdl__gemm_batch_task, &j);
    gdl__pool_release();
    return 1;
}
#endif

GPUDL_API void gdl_gemm_cpu(int transA, int transB, int M, int N, int K, gdl_real alpha,
                            const gdl_real *A, int lda, const gdl_real *B, int ldb,
                            gdl_real beta, gdl_real *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    GPUDL_ASSERT(C && ldc >= N);
    GPUDL_ASSERT(K <= 0 || alpha == 0 || (A && lda >= (transA ? M : K)));
    GPUDL_ASSERT(K <= 0 || alpha == 0 || (B && ldb >= (transB ? K : N)));
#ifdef GDL__GEMM_CBLAS
    if (K <= 0) { /* BLAS wants lda >= 1 even when K == 0: scale C ourselves */
        int i, j;
        for (i = 0; i < M; i++)
            for (j = 0; j < N; j++) C[(ptrdiff_t)i * ldc + j] = beta == 0 ? 0.0f : beta * C[(ptrdiff_t)i * ldc + j];
        return;
    }
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, N, K,
                alpha, A, lda, B, ldb, beta, C, ldc);
#else
    {
        gdl__gemm_args g;
        gdl__gemm_args_init(&g, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        gdl__gemm_run(&g);
    }
#endif
}

#ifdef GDL__GEMM_CBLAS
static void gdl__gemm_release(void) {} /* nothing cached on the CBLAS path */
static void gdl__gemm_release_own(void) {}
#endif

GPUDL_API int gdl_cpu_set_fp32_precision(const char *precision) {
    if (precision && strcmp(precision, "ieee") == 0) {
        gdl__cpu_bf16_gemm = 0;
        return 0;
    }
    if (precision && strcmp(precision, "bf16") == 0) {
#ifdef GDL__GEMM_BF16
        if (gdl__tile_grant()) {
            gdl__cpu_bf16_gemm = 1;
            return 0;
        }
        gdl__set_error("gdl_cpu_set_fp32_precision(\"bf16\"): the kernel refused the tile registers (AMX needs Linux "
                       "5.16 or later); the precision stays \"%s\"", gdl_cpu_get_fp32_precision());
#else
        gdl__set_error("gdl_cpu_set_fp32_precision(\"bf16\"): this build has no bf16 GEMM (it needs AMX on Linux "
                       "or AVX512-BF16: a CPU that has one and -march=native); the precision stays \"%s\"", gdl_cpu_get_fp32_precision());
#endif
        return -1;
    }
    gdl__set_error("gdl_cpu_set_fp32_precision(\"%s\"): the precisions are \"ieee\" and \"bf16\"",
                   precision ? precision : "(null)");
    return -1;
}
GPUDL_API const char *gdl_cpu_get_fp32_precision(void) { return gdl__cpu_bf16_gemm ? "bf16" : "ieee"; }

GPUDL_API const char *gdl_gemm_kernel_name(void) {
#if defined(GDL__GEMM_CBLAS)
    return "cblas";
#elif defined(GDL__GEMM_AVX512)
    return "avx512 8x32";
#elif defined(GDL__GEMM_AVX2)
    return "avx2 6x16";
#elif defined(GDL__GEMM_NEON)
    return "neon 8x12";
#elif defined(GPUDL_DOUBLE)
    return "portable 4x8 (double)";
#else
    return "portable 4x8";
#endif
}


/* ---- the backend's GEMM entries (f32, and bf16/f16 through f32 copies) ---- */
/* elements a row-major operand spans: rows of cols, ld apart, batch copies s apart */
static int64_t gdl__gemm_span(int rows, int cols, int ld, int64_t s, int batch) {
    if (rows <= 0 || cols <= 0 || batch <= 0) return 0;
    return (int64_t)(rows - 1) * ld + cols + (int64_t)(batch - 1) * (s > 0 ? s : 0);
}
static int gdl__cpu_gemm_f32(int ta, int tb, int M, int N, int K, gdl_real alpha, const gdl_real *A, int lda,
                         int64_t sA, const gdl_real *B, int ldb, int64_t sB, gdl_real beta, gdl_real *C,
                         int ldc, int64_t sC, int batch);
/* The GEMM entry: f32 runs the f32 kernel; bf16 / f16 take f32 copies of
   the spans (C's gaps between rows too, so they go back as they were), the
   f32 kernel, C rounded once */
static int gdl__cpu_gemm(gdl_dtype dt, int ta, int tb, int M, int N, int K, gdl_real alpha, const void *A, int lda,
                         int64_t sA, const void *B, int ldb, int64_t sB, gdl_real beta, void *C, int ldc, int64_t sC,
                         int batch) {
    int64_t na, nb, nc;
    gdl_real *f;
    int rc;
    if (dt == GDL_F32)
        return gdl__cpu_gemm_f32(ta, tb, M, N, K, alpha, (const gdl_real *)A, lda, sA, (const gdl_real *)B, ldb, sB,
                                 beta, (gdl_real *)C, ldc, sC, batch);
    if (M <= 0 || N <= 0 || batch <= 0) return 0;
    na = K > 0 ? gdl__gemm_span(ta ? K : M, ta ? M : K, lda, sA, batch) : 0;
    nb = K > 0 ? gdl__gemm_span(tb ? N : K, tb ? K : N, ldb, sB, batch) : 0;
    nc = gdl__gemm_span(M, N, ldc, sC, batch);
    if (!(f = (gdl_real *)GPUDL_MALLOC(sizeof(gdl_real) * (size_t)(na + nb + nc + 1)))) {
        gdl__set_error("%s: out of host memory for a %s GEMM's f32 copies", gdl__be_op, gdl_dtype_name(dt));
        return -1;
    }
    gdl__cpu_cast(f, GDL_F32, A, dt, na);
    gdl__cpu_cast(f + na, GDL_F32, B, dt, nb);
    gdl__cpu_cast(f + na + nb, GDL_F32, C, dt, nc);
    rc = gdl__cpu_gemm_f32(ta, tb, M, N, K, alpha, f, lda, sA, f + na, ldb, sB, beta, f + na + nb, ldc, sC, batch);
    if (rc == 0) gdl__cpu_cast(C, dt, f + na + nb, GDL_F32, nc);
    GPUDL_FREE(f);
    return rc;
}

static int gdl__cpu_gemm_f32(int ta, int tb, int M, int N, int K, gdl_real alpha, const gdl_real *A, int lda,
                         int64_t sA, const gdl_real *B, int ldb, int64_t sB, gdl_real beta, gdl_real *C,
                         int ldc, int64_t sC, int batch) {
    int b;
#ifndef GDL__GEMM_CBLAS
    if (sC == 0 && batch > 1 && beta == 1 && K > 0 && alpha != 0 && M > 0 && N > 0) {
        /* every batch accumulates into one C: one call over K segments, so
           the threads share the whole sum (same bits as the loop below) */
        gdl__gemm_args g;
        GPUDL_ASSERT(A && B && C && ldc >= N && lda >= (ta ? M : K) && ldb >= (tb ? K : N));
        gdl__gemm_args_init(&g, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        g.nseg = batch; g.sA = (ptrdiff_t)sA; g.sB = (ptrdiff_t)sB;
        gdl__gemm_run(&g);
        return 0;
    }
#ifdef GDL__GEMM_BATCH
    if (sC != 0 && batch > 1 && K > 0 && alpha != 0 && M > 0 && N > 0 && batch >= gdl_get_num_threads() &&
        gdl_get_num_threads() > 1 && (double)M * N * K * batch >= GDL__GEMM_MT_MIN) {
        gdl__gemm_args g;
        GPUDL_ASSERT(A && B && C && ldc >= N && lda >= (ta ? M : K) && ldb >= (tb ? K : N));
        gdl__gemm_args_init(&g, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        if (gdl__gemm_batch(&g, (ptrdiff_t)sA, (ptrdiff_t)sB, (ptrdiff_t)sC, batch, gdl_get_num_threads())) return 0;
    }
#endif
#endif
    for (b = 0; b < batch; b++)
        gdl_gemm_cpu(ta, tb, M, N, K, alpha, A + b * sA, lda, B + b * sB, ldb, beta, C + b * sC, ldc);
    return 0;
}
