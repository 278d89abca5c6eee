/* ---------------------------------------------------------------------------
   [impl-cpu]   The CPU backend: plain loops over contiguous memory. The
   reductions accumulate in double and run serially over the reduced
   dimension, so results do not depend on the thread count.
   ------------------------------------------------------------------------- */

/* The loops worth threads run through gdl__parallel_loop ([impl-pool]): the
   loop over a range [lo, hi) in a _part function, its arguments in the
   slots of a gdl__args. */

/* Each block starts with its size, so that a free knows what it gives back (gdl_memory_stats). 64 bytes
   keep the alignment malloc gave. The counters belong to the op layer's thread, as the allocations do. */
#define GDL__CPU_HDR 64
static gdl_memory_status gdl__cpu_mem;
static void *gdl__cpu_alloc(size_t bytes) {
    char *p = bytes <= SIZE_MAX - GDL__CPU_HDR ? (char *)GPUDL_MALLOC(GDL__CPU_HDR + (bytes ? bytes : 1)) : NULL;
    gdl__cpu_mem.requests++;
    if (!p) {
        gdl__set_error("gdl: out of memory allocating %.0f bytes on the host", (double)bytes);
        return NULL;
    }
    memcpy(p, &bytes, sizeof bytes);
    gdl__cpu_mem.device_mallocs++;
    gdl__cpu_mem.allocated += bytes;
    if (gdl__cpu_mem.allocated > gdl__cpu_mem.peak_allocated) gdl__cpu_mem.peak_allocated = gdl__cpu_mem.allocated;
    return p + GDL__CPU_HDR;
}
static void gdl__cpu_free(void *p) {
    size_t bytes;
    if (!p) return;
    memcpy(&bytes, (char *)p - GDL__CPU_HDR, sizeof bytes);
    gdl__cpu_mem.allocated -= bytes;
    gdl__cpu_mem.frees++;
    GPUDL_FREE((char *)p - GDL__CPU_HDR);
}
static int gdl__cpu_memory_stats(int device, gdl_memory_status *s) {
    (void)device;
    *s = gdl__cpu_mem;
    s->reserved = s->allocated; /* nothing is cached */
    s->peak_reserved = s->peak_allocated;
    return 0;
}
static int gdl__cpu_memory_reset_peak(int device) {
    (void)device;
    gdl__cpu_mem.peak_allocated = gdl__cpu_mem.allocated;
    return 0;
}
static int gdl__cpu_copy(void *dst, const void *src, size_t bytes, int kind) {
    (void)kind;
    if (bytes && dst != src) memmove(dst, src, bytes);
    return 0;
}
static int gdl__cpu_memset0(void *p, size_t bytes) {
    if (bytes) memset(p, 0, bytes);
    return 0;
}
static int gdl__cpu_synchronize(void) { return 0; }
static void *gdl__cpu_host_alloc(size_t bytes) { return gdl__cpu_alloc(bytes); }
static void gdl__cpu_host_free(void *p) { GPUDL_FREE(p); }
/* CPU work is finished when its call returns: streams and events are
   stand-ins that order nothing, distinct non-NULL handles so that callers
   can tell them from a failure */
static char gdl__cpu_stream_token, gdl__cpu_event_token;
static void *gdl__cpu_stream_create(void) { return &gdl__cpu_stream_token; }
static void gdl__cpu_stream_destroy(void *stream) { (void)stream; }
static int gdl__cpu_copy_async(void *dst, const void *src, size_t bytes, int kind, void *stream) {
    (void)stream;
    return gdl__cpu_copy(dst, src, bytes, kind);
}
static void *gdl__cpu_event_create(void) { return &gdl__cpu_event_token; }
static void gdl__cpu_event_destroy(void *event) { (void)event; }
static int gdl__cpu_event_record(void *event, void *stream) {
    (void)event;
    (void)stream;
    return 0;
}
static int gdl__cpu_stream_wait_event(void *stream, void *event) {
    (void)stream;
    (void)event;
    return 0;
}
static int gdl__cpu_event_synchronize(void *event) {
    (void)event;
    return 0;
}

static void gdl__fill_part(gdl__args a, int64_t lo, int64_t hi) {
    int64_t i;
    for (i = lo; i < hi; i++) a.out[i] = a.alpha;
}
static int gdl__cpu_fill(gdl_real *x, int64_t n, gdl_real v) {
    gdl__args a = gdl__args_none();
    a.out = x; a.alpha = v;
    gdl__parallel_loop(n, n, gdl__fill_part, &a);
    return 0;
}

static int gdl__cpu_cast(void *dst, gdl_dtype dt, const void *src, gdl_dtype st, int64_t n) {
    int64_t i;
    size_t ds = gdl_dtype_size(dt), ss = gdl_dtype_size(st);
    if (dt == st) {
        memmove(dst, src, (size_t)n * ds);
        return 0;
    }
    if (dt == GDL_F32 && (st == GDL_F16 || st == GDL_BF16)) { /* the low-precision ops' inputs: a tight loop */
        const uint16_t *h = (const uint16_t *)src;
        gdl_real *f = (gdl_real *)dst;
        if (st == GDL_F16)
            for (i = 0; i < n; i++) f[i] = (gdl_real)gdl_f16_to_f32(h[i]);
        else
            for (i = 0; i < n; i++) f[i] = (gdl_real)gdl_bf16_to_f32(h[i]);
        return 0;
    }
    for (i = 0; i < n; i++) {
        const void *s = (const char *)src + (size_t)i * ss;
        void *d = (char *)dst + (size_t)i * ds;
        if (st == GDL_F32 && (dt == GDL_F16 || dt == GDL_BF16)) {
            /* direct, so the float rounds once */
            float v = (float)*(const gdl_real *)s;
            *(uint16_t *)d = dt == GDL_F16 ? gdl_f32_to_f16(v) : gdl_f32_to_bf16(v);
        } else {
            gdl__store(d, dt, gdl__load(s, st));
        }
    }
    return 0;
}

/* elements a row-major operand spans: rows of cols, ld apart, batch copies s apart */
static int64_t gdl__gemm_span(int rows, int cols, int ld, int64_t s, int batch) {
    if (rows <= 0 || cols <= 0 || batch <= 0) return 0;
    return (int64_t)(rows - 1) * ld + cols + (int64_t)(batch - 1) * (s > 0 ? s : 0);
}
static int gdl__cpu_gemm(int ta, int tb, int M, int N, int K, gdl_real alpha, const gdl_real *A, int lda,
                         int64_t sA, const gdl_real *B, int ldb, int64_t sB, gdl_real beta, gdl_real *C,
                         int ldc, int64_t sC, int batch);
/* f32 copies of the spans (C's gaps between rows too, so they go back as
   they were), the f32 kernel, C rounded once */
static int gdl__cpu_gemm_lp(gdl_dtype dt, int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda,
                            int64_t sA, const void *B, int ldb, int64_t sB, float beta, void *C, int ldc, int64_t sC,
                            int batch) {
    int64_t na, nb, nc;
    gdl_real *f;
    int rc;
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
    rc = gdl__cpu_gemm(ta, tb, M, N, K, alpha, f, lda, sA, f + na, ldb, sB, beta, f + na + nb, ldc, sC, batch);
    if (rc == 0) gdl__cpu_cast(C, dt, f + na + nb, GDL_F32, nc);
    GPUDL_FREE(f);
    return rc;
}

static int gdl__cpu_gemm(int ta, int tb, int M, int N, int K, gdl_real alpha, const gdl_real *A, int lda,
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

/* Walks `shape` in row-major order, advancing two strided offsets. */
typedef struct gdl__iter {
    int ndim;
    int64_t idx[GDL_MAX_DIMS];
} gdl__iter;

/* one element of a binary op (enum gdl_binary_op); the CUDA backend's gdl__bin1 is the same in f32 */
static gdl_real gdl__bin1(int op, gdl_real a, gdl_real b) {
    switch (op) {
    case GDL_BIN_ADD: return a + b;
    case GDL_BIN_SUB: return a - b;
    case GDL_BIN_MUL: return a * b;
    case GDL_BIN_DIV: return a / b;
    case GDL_BIN_MIN: return a != a ? a : b != b ? b : a < b ? a : b;
    case GDL_BIN_MAX: return a != a ? a : b != b ? b : a > b ? a : b;
    case GDL_BIN_POW: return (gdl_real)pow((double)a, (double)b);
    case GDL_BIN_MAX_DA: return a > b ? 1 : a == b ? (gdl_real)0.5 : a < b ? 0 : 1;
    case GDL_BIN_MIN_DA: return a < b ? 1 : a == b ? (gdl_real)0.5 : a > b ? 0 : 1;
    case GDL_BIN_POW_DA: return b == 0 ? 0 : (gdl_real)((double)b * pow((double)a, (double)b - 1));
    case GDL_BIN_POW_DB: return a == 0 && b >= 0 ? 0 : (gdl_real)(pow((double)a, (double)b) * log((double)a));
    default: return b == 0 ? 0 : a * b; /* GDL_BIN_GRAD_SCALE */
    }
}

/* one row of a binary op: o[i] = a[i*sa] op b[i*sb]; the contiguous and
   broadcast-scalar cases of the four arithmetic ops get their own loops so
   they vectorise */
static void gdl__bin_row(int op, int64_t n, const gdl_real *a, int64_t sa, const gdl_real *b, int64_t sb, gdl_real *o) {
    int64_t i;
    if (op > GDL_BIN_DIV) {
        for (i = 0; i < n; i++) o[i] = gdl__bin1(op, a[i * sa], b[i * sb]);
    } else if (sa == 1 && sb == 1) {
        switch (op) {
        case GDL_BIN_ADD: for (i = 0; i < n; i++) o[i] = a[i] + b[i]; break;
        case GDL_BIN_SUB: for (i = 0; i < n; i++) o[i] = a[i] - b[i]; break;
        case GDL_BIN_MUL: for (i = 0; i < n; i++) o[i] = a[i] * b[i]; break;
        default: for (i = 0; i < n; i++) o[i] = a[i] / b[i]; break;
        }
    } else if (sa == 1 && sb == 0) {
        const gdl_real v = b[0];
        switch (op) {
        case GDL_BIN_ADD: for (i = 0; i < n; i++) o[i] = a[i] + v; break;
        case GDL_BIN_SUB: for (i = 0; i < n; i++) o[i] = a[i] - v; break;
        case GDL_BIN_MUL: for (i = 0; i < n; i++) o[i] = a[i] * v; break;
        default: for (i = 0; i < n; i++) o[i] = a[i] / v; break;
        }
    } else {
        switch (op) {
        case GDL_BIN_ADD: for (i = 0; i < n; i++) o[i] = a[i * sa] + b[i * sb]; break;
        case GDL_BIN_SUB: for (i = 0; i < n; i++) o[i] = a[i * sa] - b[i * sb]; break;
        case GDL_BIN_MUL: for (i = 0; i < n; i++) o[i] = a[i * sa] * b[i * sb]; break;
        default: for (i = 0; i < n; i++) o[i] = a[i * sa] / b[i * sb]; break;
        }
    }
}

/* Walks the outer dims (all but the last) in row-major order, advancing
   two strided offsets: the odometer shared by binary and sum_to. */
static void gdl__odometer_step(int ndim, const int64_t *shape, int64_t *idx, int64_t *oa, const int64_t *astr,
                               int64_t *ob, const int64_t *bstr) {
    int d;
    for (d = ndim - 2; d >= 0; d--) {
        *oa += astr[d];
        *ob += bstr[d];
        if (++idx[d] < shape[d]) return;
        *oa -= astr[d] * shape[d];
        *ob -= bstr[d] * shape[d];
        idx[d] = 0;
    }
}

static int gdl__cpu_binary(int op, int ndim, const int64_t *shape, const gdl_real *a, const int64_t *astr,
                           const gdl_real *b, const int64_t *bstr, gdl_real *out) {
    int64_t rows = 1, inner = ndim ? shape[ndim - 1] : 1, r, oa = 0, ob = 0, idx[GDL_MAX_DIMS] = {0};
    int d;
    for (d = 0; d + 1 < ndim; d++) rows *= shape[d];
    if (inner == 0) return 0;
    for (r = 0; r < rows; r++) {
        gdl__bin_row(op, inner, a + oa, ndim ? astr[ndim - 1] : 0, b + ob, ndim ? bstr[ndim - 1] : 0, out + r * inner);
        gdl__odometer_step(ndim, shape, idx, &oa, astr, &ob, bstr);
    }
    return 0;
}

static int gdl__cpu_sum_to(int ndim, const int64_t *shape, const gdl_real *src, gdl_real *dst,
                           const int64_t *dstr, gdl_real alpha) {
    int64_t rows = 1, inner = ndim ? shape[ndim - 1] : 1, r, i, o = 0, unused = 0, idx[GDL_MAX_DIMS] = {0};
    int64_t ds = ndim ? dstr[ndim - 1] : 0, zero[GDL_MAX_DIMS] = {0};
    int d;
    for (d = 0; d + 1 < ndim; d++) rows *= shape[d];
    if (inner == 0) return 0;
    for (r = 0; r < rows; r++) {
        const gdl_real *p = src + r * inner;
        gdl_real *q = dst + o;
        if (ds == 0) { /* the row sums into one element */
            gdl_real acc = 0;
            for (i = 0; i < inner; i++) acc += p[i];
            q[0] += alpha * acc;
        } else if (ds == 1) {
            for (i = 0; i < inner; i++) q[i] += alpha * p[i];
        } else {
            for (i = 0; i < inner; i++) q[i * ds] += alpha * p[i];
        }
        gdl__odometer_step(ndim, shape, idx, &o, dstr, &unused, zero);
    }
    return 0;
}

#define GDL__SQRT_2_OVER_PI 0.7978845608028654
#define GDL__INV_SQRT_2 0.7071067811865476

#ifndef GPUDL_DOUBLE
/* Exact GELU in f32 without libm's double erf (issue 27: it was a fifth of
   char_gpt's step). With Phi the normal CDF, a = |x| and T = 0.75:
     a <  T:  Phi(x) = 1/2 + x Q(x^2), GELU' = 1/2 + x S(x^2) (odd parts,
              minimax polynomials);
     a >= T:  Phi(-a) = exp(-a^2/2) R(a), R(a) = t P(t), t = 1/(1 + a/2)
              (R is Mills' ratio over sqrt(2 pi): smooth, ~1/a, so P is
              tame in t out to a = 16, past which everything underflows);
              Phi(a) = 1 - Phi(-a); GELU'(-a) = exp(-a^2/2) (R - a/sqrt(2 pi)),
              GELU'(a) = 1 - GELU'(-a).
   exp(-a^2/2) is taken of a*a split exactly (s + e by an FMA), since a's
   square has an error amplified a^2 times in exp; the result is scaled by
   2^-k in two halves so that tails rounding into subnormals round once.
   The polynomials were fitted in double (relative minimax, coefficients
   rounded to float one at a time, the rest refitted). Against double
   erfc over every 13th float: GELU within 5.6 ulp (the tail's roundings
   add up: t, P, exp's polynomial, three products), GELU' within 4 ulp of
   max(|GELU'|, 1/8), i.e. absolute near its zero at x = -0.7518;
   tests/test_gelu.c asserts 6 on every path. The vector loops below do
   exactly this arithmetic lane by lane (every a*b+c an explicit FMA, no
   contraction left to the compiler), so a value's bits do not depend on
   the path, AVX-512, AVX2, NEON or this scalar code (where fmaf is libm's
   on an x86-64 without FMA: slower, the same bits), nor on the thread count.
   Specials are the double formula's: GELU(+inf) = inf, GELU(-inf) = NaN,
   GELU(-0) = -0, GELU'(+-inf) = NaN; GELU'(x) = +0 where it underflows. Past x = -8.3
   the formula's 1 + erf is 0 (GELU -0), here the tail is kept down to its underflow at -14.4. */
#define GDL__GELU_T 0.75f
#define GDL__GELU_AMAX 16.0f
static const float gdl__gelu_q[6] = {0.398942292f, -0.0664913654f, 0.00998739339f, -0.00125556206f,
                                     0.000252942991f, -0.000106172338f};
static const float gdl__gelu_s[6] = {0.797884583f, -0.265963435f, 0.0598677658f, -0.00962691661f,
                                     0.00140782353f, -0.000283525849f};
static const float gdl__gelu_p[13] = {0.199470878f, 0.199482769f, 0.149378523f, 0.0523609109f, -0.0797890052f,
                                      -0.032856781f, -0.260735571f, 0.467131644f, 0.289655507f, -1.43587279f,
                                      1.62267113f, -0.851068556f, 0.180238605f};
/* exp(-r) on |r| <= ln2/2 + a little; the first two are 1 and -1 */
static const float gdl__gelu_e[8] = {1.0f, -1.0f, 0.5f, -0.166666657f, 0.041666463f, -0.00833357032f,
                                     0.00139350793f, -0.000197402551f};
#define GDL__GELU_INV_LN2 1.44269502f
#define GDL__GELU_LN2_HI 0.693147182f
#define GDL__GELU_LN2_LO -1.90465421e-09f
#define GDL__GELU_INV_SQRT_2PI 0.398942292f

static float gdl__gelu_poly(const float *c, int n, float v) {
    float p = c[n - 1];
    int i;
    for (i = n - 2; i >= 0; i--) p = fmaf(p, v, c[i]);
    return p;
}
static float gdl__pow2_neg(int k) { /* 2^-k, 0 <= k <= 126 */
    uint32_t b = (uint32_t)(127 - k) << 23;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}
/* For T <= a <= GDL__GELU_AMAX: exp(-a^2/2) = *m 2^-k, and R(a) in *r */
static void gdl__gelu_tail(float a, float *m, int *k, float *r) {
    float s = a * a, e = fmaf(a, a, -s), h = 0.5f * s;
    float kf = rintf(h * GDL__GELU_INV_LN2);
    float rr = fmaf(-kf, GDL__GELU_LN2_HI, h), t;
    rr = fmaf(-kf, GDL__GELU_LN2_LO, rr);
    rr = fmaf(0.5f, e, rr);
    *m = gdl__gelu_poly(gdl__gelu_e, 8, rr);
    *k = (int)kf;
    t = 1.0f / fmaf(0.5f, a, 1.0f);
    *r = t * gdl__gelu_poly(gdl__gelu_p, 13, t);
}
/* v 2^-k, rounded once */
static float gdl__gelu_scale(float v, int k) { return v * gdl__pow2_neg(k >> 1) * gdl__pow2_neg(k - (k >> 1)); }

static float gdl__gelu_f32(float x) {
    float a = fabsf(x), ac = a < GDL__GELU_AMAX ? a : GDL__GELU_AMAX, m, r;
    int k;
    if (x != x || x == -INFINITY) return x != x ? x + x : NAN;
    if (a < GDL__GELU_T) return x * fmaf(x, gdl__gelu_poly(gdl__gelu_q, 6, x * x), 0.5f);
    gdl__gelu_tail(ac, &m, &k, &r);
    if (x > 0) return fmaf(-ac, gdl__gelu_scale(r * m, k), a);
    return -gdl__gelu_scale(ac * (r * m), k);
}
static float gdl__gelu_grad_f32(float x) {
    float a = fabsf(x), ac = a < GDL__GELU_AMAX ? a : GDL__GELU_AMAX, m, r, d;
    int k;
    if (x != x || a == INFINITY) return x != x ? x + x : NAN;
    if (a < GDL__GELU_T) return fmaf(x, gdl__gelu_poly(gdl__gelu_s, 6, x * x), 0.5f);
    gdl__gelu_tail(ac, &m, &k, &r);
    d = gdl__gelu_scale(fmaf(ac, -GDL__GELU_INV_SQRT_2PI, r) * m, k);
    return x > 0 ? 1.0f - d : d + 0.0f;
}

/* The vector loops: gdl__gelu_f32's and gdl__gelu_grad_f32's arithmetic, 16 or 8 lanes at a time, both
   branches computed and the lanes selected. */
#if defined(__AVX512F__)
#include <immintrin.h>
#define GDL__GELU_AVX512 1
static __m512 gdl__gelu_poly16(const float *c, int n, __m512 v) {
    __m512 p = _mm512_set1_ps(c[n - 1]);
    int i;
    for (i = n - 2; i >= 0; i--) p = _mm512_fmadd_ps(p, v, _mm512_set1_ps(c[i]));
    return p;
}
static __m512 gdl__gelu_pow2_neg16(__m512i k) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_sub_epi32(_mm512_set1_epi32(127), k), 23));
}
static void gdl__gelu_tail16(__m512 a, __m512 *m, __m512i *k, __m512 *r) {
    __m512 s = _mm512_mul_ps(a, a), e = _mm512_fmsub_ps(a, a, s), h = _mm512_mul_ps(_mm512_set1_ps(0.5f), s);
    __m512 kf = _mm512_roundscale_ps(_mm512_mul_ps(h, _mm512_set1_ps(GDL__GELU_INV_LN2)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 rr = _mm512_fnmadd_ps(kf, _mm512_set1_ps(GDL__GELU_LN2_HI), h), t;
    rr = _mm512_fnmadd_ps(kf, _mm512_set1_ps(GDL__GELU_LN2_LO), rr);
    rr = _mm512_fmadd_ps(_mm512_set1_ps(0.5f), e, rr);
    *m = gdl__gelu_poly16(gdl__gelu_e, 8, rr);
    *k = _mm512_cvtps_epi32(kf);
    t = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(_mm512_set1_ps(0.5f), a, _mm512_set1_ps(1.0f)));
    *r = _mm512_mul_ps(t, gdl__gelu_poly16(gdl__gelu_p, 13, t));
}
static __m512 gdl__gelu_scale16(__m512 v, __m512i k) {
    __m512i k1 = _mm512_srai_epi32(k, 1);
    return _mm512_mul_ps(_mm512_mul_ps(v, gdl__gelu_pow2_neg16(k1)), gdl__gelu_pow2_neg16(_mm512_sub_epi32(k, k1)));
}
static __m512 gdl__gelu16(__m512 x) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    __m512 a = _mm512_abs_ps(x), ac = _mm512_min_ps(a, _mm512_set1_ps(GDL__GELU_AMAX)), m, r, pos, neg, small;
    __m512i k;
    __mmask16 tiny = _mm512_cmp_ps_mask(a, _mm512_set1_ps(GDL__GELU_T), _CMP_LT_OQ);
    __mmask16 gt0 = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ);
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    __mmask16 ninf = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ);
    gdl__gelu_tail16(ac, &m, &k, &r);
    pos = _mm512_fnmadd_ps(ac, gdl__gelu_scale16(_mm512_mul_ps(r, m), k), a);
    neg = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(gdl__gelu_scale16(_mm512_mul_ps(ac, _mm512_mul_ps(r, m)), k)),
                                               _mm512_castps_si512(sign))); /* AVX-512F: no xor_ps */
    small = _mm512_mul_ps(x, _mm512_fmadd_ps(x, gdl__gelu_poly16(gdl__gelu_q, 6, _mm512_mul_ps(x, x)), _mm512_set1_ps(0.5f)));
    r = _mm512_mask_blend_ps(gt0, neg, pos);
    r = _mm512_mask_blend_ps(tiny, r, small);
    r = _mm512_mask_blend_ps(ninf, r, _mm512_set1_ps(NAN));
    return _mm512_mask_blend_ps(nan, r, _mm512_add_ps(x, x));
}
static __m512 gdl__gelu_grad16(__m512 x) {
    __m512 a = _mm512_abs_ps(x), ac = _mm512_min_ps(a, _mm512_set1_ps(GDL__GELU_AMAX)), m, r, d, small;
    __m512i k;
    __mmask16 tiny = _mm512_cmp_ps_mask(a, _mm512_set1_ps(GDL__GELU_T), _CMP_LT_OQ);
    __mmask16 gt0 = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ);
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    __mmask16 inf = _mm512_cmp_ps_mask(a, _mm512_set1_ps(INFINITY), _CMP_EQ_OQ);
    gdl__gelu_tail16(ac, &m, &k, &r);
    d = gdl__gelu_scale16(_mm512_mul_ps(_mm512_fmadd_ps(ac, _mm512_set1_ps(-GDL__GELU_INV_SQRT_2PI), r), m), k);
    small = _mm512_fmadd_ps(x, gdl__gelu_poly16(gdl__gelu_s, 6, _mm512_mul_ps(x, x)), _mm512_set1_ps(0.5f));
    r = _mm512_mask_blend_ps(gt0, _mm512_add_ps(d, _mm512_setzero_ps()), _mm512_sub_ps(_mm512_set1_ps(1.0f), d));
    r = _mm512_mask_blend_ps(tiny, r, small);
    r = _mm512_mask_blend_ps(inf, r, _mm512_set1_ps(NAN));
    return _mm512_mask_blend_ps(nan, r, _mm512_add_ps(x, x));
}
#elif defined(__AVX2__) && (defined(__FMA__) || defined(_MSC_VER))
#include <immintrin.h>
#define GDL__GELU_AVX2 1
static __m256 gdl__gelu_poly8(const float *c, int n, __m256 v) {
    __m256 p = _mm256_set1_ps(c[n - 1]);
    int i;
    for (i = n - 2; i >= 0; i--) p = _mm256_fmadd_ps(p, v, _mm256_set1_ps(c[i]));
    return p;
}
static __m256 gdl__gelu_pow2_neg8(__m256i k) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(127), k), 23));
}
static void gdl__gelu_tail8(__m256 a, __m256 *m, __m256i *k, __m256 *r) {
    __m256 s = _mm256_mul_ps(a, a), e = _mm256_fmsub_ps(a, a, s), h = _mm256_mul_ps(_mm256_set1_ps(0.5f), s);
    __m256 kf = _mm256_round_ps(_mm256_mul_ps(h, _mm256_set1_ps(GDL__GELU_INV_LN2)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 rr = _mm256_fnmadd_ps(kf, _mm256_set1_ps(GDL__GELU_LN2_HI), h), t;
    rr = _mm256_fnmadd_ps(kf, _mm256_set1_ps(GDL__GELU_LN2_LO), rr);
    rr = _mm256_fmadd_ps(_mm256_set1_ps(0.5f), e, rr);
    *m = gdl__gelu_poly8(gdl__gelu_e, 8, rr);
    *k = _mm256_cvtps_epi32(kf);
    t = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_set1_ps(0.5f), a, _mm256_set1_ps(1.0f)));
    *r = _mm256_mul_ps(t, gdl__gelu_poly8(gdl__gelu_p, 13, t));
}
static __m256 gdl__gelu_scale8(__m256 v, __m256i k) {
    __m256i k1 = _mm256_srai_epi32(k, 1);
    return _mm256_mul_ps(_mm256_mul_ps(v, gdl__gelu_pow2_neg8(k1)), gdl__gelu_pow2_neg8(_mm256_sub_epi32(k, k1)));
}
static __m256 gdl__gelu8(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 a = _mm256_andnot_ps(sign, x), ac = _mm256_min_ps(a, _mm256_set1_ps(GDL__GELU_AMAX)), m, r, pos, neg, small;
    __m256 tiny = _mm256_cmp_ps(a, _mm256_set1_ps(GDL__GELU_T), _CMP_LT_OQ);
    __m256 gt0 = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ);
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    __m256 ninf = _mm256_cmp_ps(x, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ);
    __m256i k;
    gdl__gelu_tail8(ac, &m, &k, &r);
    pos = _mm256_fnmadd_ps(ac, gdl__gelu_scale8(_mm256_mul_ps(r, m), k), a);
    neg = _mm256_xor_ps(gdl__gelu_scale8(_mm256_mul_ps(ac, _mm256_mul_ps(r, m)), k), sign);
    small = _mm256_mul_ps(x, _mm256_fmadd_ps(x, gdl__gelu_poly8(gdl__gelu_q, 6, _mm256_mul_ps(x, x)), _mm256_set1_ps(0.5f)));
    r = _mm256_blendv_ps(neg, pos, gt0);
    r = _mm256_blendv_ps(r, small, tiny);
    r = _mm256_blendv_ps(r, _mm256_set1_ps(NAN), ninf);
    return _mm256_blendv_ps(r, _mm256_add_ps(x, x), nan);
}
static __m256 gdl__gelu_grad8(__m256 x) {
    __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x), ac = _mm256_min_ps(a, _mm256_set1_ps(GDL__GELU_AMAX)), m, r, d, small;
    __m256 tiny = _mm256_cmp_ps(a, _mm256_set1_ps(GDL__GELU_T), _CMP_LT_OQ);
    __m256 gt0 = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ);
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    __m256 inf = _mm256_cmp_ps(a, _mm256_set1_ps(INFINITY), _CMP_EQ_OQ);
    __m256i k;
    gdl__gelu_tail8(ac, &m, &k, &r);
    d = gdl__gelu_scale8(_mm256_mul_ps(_mm256_fmadd_ps(ac, _mm256_set1_ps(-GDL__GELU_INV_SQRT_2PI), r), m), k);
    small = _mm256_fmadd_ps(x, gdl__gelu_poly8(gdl__gelu_s, 6, _mm256_mul_ps(x, x)), _mm256_set1_ps(0.5f));
    r = _mm256_blendv_ps(_mm256_add_ps(d, _mm256_setzero_ps()), _mm256_sub_ps(_mm256_set1_ps(1.0f), d), gt0);
    r = _mm256_blendv_ps(r, small, tiny);
    r = _mm256_blendv_ps(r, _mm256_set1_ps(NAN), inf);
    return _mm256_blendv_ps(r, _mm256_add_ps(x, x), nan);
}
#endif
static gdl_real gdl__gelu1(gdl_real x) { return gdl__gelu_f32(x); }
static double gdl__gelu_grad1(double x) { return gdl__gelu_grad_f32((float)x); } /* x: a float */
#else /* GPUDL_DOUBLE: libm's double erf, PyTorch's float64 numerics */
static gdl_real gdl__gelu1(gdl_real x) { return (gdl_real)(0.5 * x * (1.0 + erf(x * GDL__INV_SQRT_2))); }
static double gdl__gelu_grad1(double x) {
    return 0.5 * (1 + erf(x * GDL__INV_SQRT_2)) + x * exp(-0.5 * x * x) * 0.3989422804014327;
}
#endif

/* y = GELU(x) over n (y may be x) */
static void gdl__gelu_rows(const gdl_real *x, gdl_real *y, int64_t n) {
    int64_t i = 0;
#if defined(GDL__GELU_AVX512)
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, gdl__gelu16(_mm512_loadu_ps(x + i)));
#elif defined(GDL__GELU_AVX2)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, gdl__gelu8(_mm256_loadu_ps(x + i)));
#endif
    for (; i < n; i++) y[i] = gdl__gelu1(x[i]);
}
/* out = (accumulate ? out : 0) + gy GELU'(x) over n, the product rounded first, as gdl__unary_grad1's callers */
static void gdl__gelu_grad_rows(const gdl_real *x, const gdl_real *gy, gdl_real *out, int64_t n, int accumulate) {
    int64_t i = 0;
#if defined(GDL__GELU_AVX512)
    for (; i + 16 <= n; i += 16) {
        __m512 p = _mm512_mul_ps(_mm512_loadu_ps(gy + i), gdl__gelu_grad16(_mm512_loadu_ps(x + i)));
        _mm512_storeu_ps(out + i, _mm512_add_ps(accumulate ? _mm512_loadu_ps(out + i) : _mm512_setzero_ps(), p));
    }
#elif defined(GDL__GELU_AVX2)
    for (; i + 8 <= n; i += 8) {
        __m256 p = _mm256_mul_ps(_mm256_loadu_ps(gy + i), gdl__gelu_grad8(_mm256_loadu_ps(x + i)));
        _mm256_storeu_ps(out + i, _mm256_add_ps(accumulate ? _mm256_loadu_ps(out + i) : _mm256_setzero_ps(), p));
    }
#endif
    for (; i < n; i++) out[i] = (accumulate ? out[i] : (gdl_real)0) + (gdl_real)(gy[i] * gdl__gelu_grad1(x[i]));
}

/* out = (accumulate ? out : 0) + (x > 0 ? gy : 0) over n: the ReLU's gradient, the bits of
   gdl__unary_grad1's callers. In vectors where there are some: gcc (under the default -ftrapping-math)
   makes the scalar loop a branch per element on a sign that is random, which made it a sixth of a CNN
   step's time. */
static void gdl__relu_grad_rows(const gdl_real *x, const gdl_real *gy, gdl_real *out, int64_t n, int accumulate) {
    int64_t i = 0;
#if defined(GDL__GELU_AVX512)
    for (; i + 16 <= n; i += 16) {
        const __mmask16 pos = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), _mm512_setzero_ps(), _CMP_GT_OQ);
        _mm512_storeu_ps(out + i, _mm512_add_ps(accumulate ? _mm512_loadu_ps(out + i) : _mm512_setzero_ps(),
                                                _mm512_maskz_mov_ps(pos, _mm512_loadu_ps(gy + i))));
    }
#elif defined(GDL__GELU_AVX2)
    for (; i + 8 <= n; i += 8) {
        const __m256 pos = _mm256_cmp_ps(_mm256_loadu_ps(x + i), _mm256_setzero_ps(), _CMP_GT_OQ);
        _mm256_storeu_ps(out + i, _mm256_add_ps(accumulate ? _mm256_loadu_ps(out + i) : _mm256_setzero_ps(),
                                                _mm256_and_ps(pos, _mm256_loadu_ps(gy + i))));
    }
#endif
    for (; i < n; i++) out[i] = (accumulate ? out[i] : (gdl_real)0) + (x[i] > 0 ? gy[i] : 0);
}
/* y = x > 0 ? x : 0 over n (NaN and -0 give +0): max(x, 0) with x first, which returns its second operand
   unless x > 0 */
static void gdl__relu_rows(const gdl_real *x, gdl_real *y, int64_t n) {
    int64_t i = 0;
#if defined(GDL__GELU_AVX512)
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_max_ps(_mm512_loadu_ps(x + i), _mm512_setzero_ps()));
#elif defined(GDL__GELU_AVX2)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_max_ps(_mm256_loadu_ps(x + i), _mm256_setzero_ps()));
#endif
    for (; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0;
}

static gdl_real gdl__unary1(int op, gdl_real x, gdl_real alpha) {
    switch (op) {
    case GDL_UN_RELU: return x > 0 ? x : 0;
    case GDL_UN_LEAKY_RELU: return x > 0 ? x : alpha * x;
    case GDL_UN_SIGMOID: return (gdl_real)(1.0 / (1.0 + exp(-(double)x)));
    case GDL_UN_TANH: return (gdl_real)tanh((double)x);
    case GDL_UN_GELU_ERF: return gdl__gelu1(x);
    case GDL_UN_GELU_TANH:
        return (gdl_real)(0.5 * x * (1.0 + tanh(GDL__SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))));
    case GDL_UN_EXP: return (gdl_real)exp((double)x);
    case GDL_UN_LOG: return (gdl_real)log((double)x);
    case GDL_UN_SQRT: return (gdl_real)sqrt((double)x);
    case GDL_UN_RSQRT: return (gdl_real)(1.0 / sqrt((double)x));
    case GDL_UN_ABS: return (gdl_real)fabs((double)x);
    case GDL_UN_CLAMP_MIN: return x < alpha ? alpha : x;
    case GDL_UN_CLAMP_MAX: return x > alpha ? alpha : x;
    case GDL_UN_SCALE: return alpha * x;
    case GDL_UN_ADD_SCALAR: return x + alpha;
    default: return (gdl_real)pow((double)x, (double)alpha); /* GDL_UN_POW */
    }
}

/* d y / d x at x (y = f(x) given) */
static double gdl__unary_grad1(int op, double x, double y, double alpha) {
    switch (op) {
    case GDL_UN_RELU: return x > 0 ? 1 : 0;
    case GDL_UN_LEAKY_RELU: return x > 0 ? 1 : alpha;
    case GDL_UN_SIGMOID: return y * (1 - y);
    case GDL_UN_TANH: return 1 - y * y;
    case GDL_UN_GELU_ERF: return gdl__gelu_grad1(x);
    case GDL_UN_GELU_TANH: {
        double u = GDL__SQRT_2_OVER_PI * (x + 0.044715 * x * x * x), th = tanh(u);
        return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * GDL__SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x);
    }
    case GDL_UN_EXP: return y;
    case GDL_UN_LOG: return 1 / x;
    case GDL_UN_SQRT: return 0.5 / y;      /* PyTorch: grad / (2 * result) */
    case GDL_UN_RSQRT: return -0.5 * y * y * y; /* -0.5 * grad * result^3 */
    case GDL_UN_ABS: return x > 0 ? 1 : x < 0 ? -1 : 0; /* sgn: 0 at 0 and NaN */
    case GDL_UN_CLAMP_MIN: return x >= alpha ? 1 : 0;
    case GDL_UN_CLAMP_MAX: return x <= alpha ? 1 : 0;
    case GDL_UN_SCALE: return alpha;
    case GDL_UN_ADD_SCALAR: return 1;
    default: return alpha * pow(x, alpha - 1); /* GDL_UN_POW */
    }
}

/* the cheap ops get their own loops (they vectorise); the rest go through
   gdl__unary1 */
/* The unary ops that cost more than a memory pass, in parallel; and the ReLU, in vectors (its plain
   loops were branches, as gdl__relu_grad_rows says) and in parallel (a CNN's ReLU outputs are large). */
static void gdl__unary_part(gdl__args a, int64_t lo, int64_t hi) {
    int64_t i;
    if (a.op == GDL_UN_RELU) {
        gdl__relu_rows(a.x + lo, a.out + lo, hi - lo);
        return;
    }
    if (a.op == GDL_UN_GELU_ERF) {
        gdl__gelu_rows(a.x + lo, a.out + lo, hi - lo);
        return;
    }
    for (i = lo; i < hi; i++) a.out[i] = gdl__unary1(a.op, a.x[i], a.alpha);
}
static void gdl__unary_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    int64_t i;
    if (a.op == GDL_UN_RELU) {
        gdl__relu_grad_rows(a.x + lo, a.gy + lo, a.out + lo, hi - lo, a.accumulate);
        return;
    }
    if (a.op == GDL_UN_GELU_ERF) {
        gdl__gelu_grad_rows(a.x + lo, a.gy + lo, a.out + lo, hi - lo, a.accumulate);
        return;
    }
    for (i = lo; i < hi; i++) a.out[i] += (gdl_real)(a.gy[i] * gdl__unary_grad1(a.op, a.x[i], a.y[i], a.alpha));
}
static int gdl__cpu_unary(int op, int64_t n, const gdl_real *x, gdl_real *y, gdl_real alpha) {
    int64_t i;
    switch (op) {
    case GDL_UN_SCALE:
        for (i = 0; i < n; i++) y[i] = alpha * x[i];
        break;
    case GDL_UN_ADD_SCALAR:
        for (i = 0; i < n; i++) y[i] = x[i] + alpha;
        break;
    default: {
        gdl__args a = gdl__args_none();
        a.op = op; a.x = x; a.out = y; a.alpha = alpha;
        gdl__parallel_loop(n, n, gdl__unary_part, &a);
        break;
    }
    }
    return 0;
}
static int gdl__cpu_unary_backward(int op, int64_t n, const gdl_real *x, const gdl_real *y, const gdl_real *gy,
                                   gdl_real *gx, gdl_real alpha, int accumulate) {
    int64_t i;
    /* the ReLU and GELU store an unset gradient in their pass; the rest add to zeros, as before */
    if (!accumulate && op != GDL_UN_RELU && op != GDL_UN_GELU_ERF && n > 0) memset(gx, 0, (size_t)n * sizeof *gx);
    switch (op) {
    case GDL_UN_LEAKY_RELU:
        for (i = 0; i < n; i++) gx[i] += x[i] > 0 ? gy[i] : alpha * gy[i];
        break;
    case GDL_UN_CLAMP_MIN: /* a selection, as PyTorch's where: an infinite gradient outside stays out */
        for (i = 0; i < n; i++) gx[i] += x[i] >= alpha ? gy[i] : 0;
        break;
    case GDL_UN_CLAMP_MAX:
        for (i = 0; i < n; i++) gx[i] += x[i] <= alpha ? gy[i] : 0;
        break;
    case GDL_UN_SCALE:
        for (i = 0; i < n; i++) gx[i] += alpha * gy[i];
        break;
    case GDL_UN_ADD_SCALAR:
        for (i = 0; i < n; i++) gx[i] += gy[i];
        break;
    case GDL_UN_SIGMOID:
        for (i = 0; i < n; i++) gx[i] += gy[i] * y[i] * (1 - y[i]);
        break;
    case GDL_UN_TANH:
        for (i = 0; i < n; i++) gx[i] += gy[i] * (1 - y[i] * y[i]);
        break;
    default: {
        gdl__args a = gdl__args_none();
        a.op = op; a.x = x; a.y = y; a.gy = gy; a.out = gx; a.alpha = alpha; a.accumulate = accumulate;
        gdl__parallel_loop(n, n, gdl__unary_backward_part, &a);
        break;
    }
    }
    return 0;
}

/* Sums over N rows of S contiguous values (row n at x + n * stride), in one order whatever the thread
   count and CPU path: eight double running sums by position mod 8 over each row's first S - S % 8 values,
   the rest of each row in a ninth, the eight added pairwise and the ninth last. One running sum is a chain
   of dependent adds, 4 cycles a value: it was most of a batch norm's time, and a conv bias gradient's. With
   S < 8 all goes to the ninth: the order of the plain loop. gdl__rows_sum: sum x (sq = 0) or sum (x - mu)^2
   (sq = 1); gdl__bn_sums2 (batch norm's backward): sum gy and sum gy (x - mu) is, the same way. */
static double gdl__lanes_total(const double *l, double tail) {
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])) + tail;
}
static double gdl__rows_sum(const gdl_real *x, int64_t N, int64_t stride, int64_t S, double mu, int sq) {
    const int64_t S8 = S - S % 8;
    double l[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tail = 0;
    int64_t n, s;
    int k;
#if defined(GDL__GELU_AVX512)
    __m512d acc = _mm512_setzero_pd(), m = _mm512_set1_pd(mu);
#elif defined(GDL__GELU_AVX2)
    __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd(), m = _mm256_set1_pd(mu);
#endif
    for (n = 0; n < N; n++) {
        const gdl_real *r = x + n * stride;
        for (s = 0; s < S8; s += 8) {
#if defined(GDL__GELU_AVX512)
            __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(r + s));
            if (sq) v = _mm512_sub_pd(v, m), v = _mm512_mul_pd(v, v);
            acc = _mm512_add_pd(acc, v);
#elif defined(GDL__GELU_AVX2)
            __m256d v0 = _mm256_cvtps_pd(_mm_loadu_ps(r + s)), v1 = _mm256_cvtps_pd(_mm_loadu_ps(r + s + 4));
            if (sq) {
                v0 = _mm256_sub_pd(v0, m), v0 = _mm256_mul_pd(v0, v0);
                v1 = _mm256_sub_pd(v1, m), v1 = _mm256_mul_pd(v1, v1);
            }
            acc0 = _mm256_add_pd(acc0, v0), acc1 = _mm256_add_pd(acc1, v1);
#else
            for (k = 0; k < 8; k++) {
                double d = sq ? r[s + k] - mu : r[s + k];
                l[k] += sq ? d * d : d;
            }
#endif
        }
        for (; s < S; s++) {
            double d = sq ? r[s] - mu : r[s];
            tail += sq ? d * d : d;
        }
    }
#if defined(GDL__GELU_AVX512)
    _mm512_storeu_pd(l, acc);
#elif defined(GDL__GELU_AVX2)
    _mm256_storeu_pd(l, acc0), _mm256_storeu_pd(l + 4, acc1);
#endif
    (void)k;
    return gdl__lanes_total(l, tail);
}
/* [outer][n][inner] layouts: one part does the outer indices [lo, hi) */
static void gdl__reduce_part(gdl__args a, int64_t lo, int64_t hi) {
    const int64_t n = a.n, inner = a.inner;
    int64_t o, i, k;
    for (o = lo; o < hi; o++)
        for (i = 0; i < inner; i++) {
            const gdl_real *p = a.x + o * n * inner + i;
            gdl_real r;
            if (a.op == GDL_RED_MAX) {
                int64_t best = 0;
                for (k = 1; k < n; k++)
                    if (p[k * inner] > p[best * inner] || (p[k * inner] != p[k * inner] && p[best * inner] == p[best * inner]))
                        best = k; /* first max; NaN wins as in PyTorch */
                r = n ? p[best * inner] : (gdl_real)-INFINITY;
                if (a.idx) a.idx[o * inner + i] = (int32_t)best;
            } else {
                double s = 0;
                if (inner == 1) s = gdl__rows_sum(p, 1, 0, n, 0, 0);
                else
                    for (k = 0; k < n; k++) s += p[k * inner];
                r = (gdl_real)(a.op == GDL_RED_MEAN ? s / (double)n : s);
            }
            if (a.accumulate) a.out[o * inner + i] += r;
            else a.out[o * inner + i] = r;
        }
}
/* A sum (or mean) over n with inner > 1, such as a bias gradient (outer 1, n rows, inner columns):
   gdl__reduce_part walks each column down the rows, a cache line per element, one thread when outer
   is 1. Here a task takes a block of GDL__RED_COLS columns and adds whole row segments into one double
   per column: each column's sum is still s = 0, s += x[0], s += x[1], ... (the same bits), but the
   loads are contiguous, the adds vectorise and the blocks spread over the threads. Index t of the loop
   is (outer index, column block), so the work of an index does not depend on the thread count. */
#define GDL__RED_COLS 32
static void gdl__reduce_cols_block(const gdl__args *a, int64_t o, int64_t i0) {
    const int64_t n = a->n, inner = a->inner, w = inner - i0 < GDL__RED_COLS ? inner - i0 : GDL__RED_COLS;
    const gdl_real *p = a->x + o * n * inner + i0;
    gdl_real *out = a->out + o * inner + i0;
    double s[GDL__RED_COLS];
    int64_t i, k;
    for (i = 0; i < GDL__RED_COLS; i++) s[i] = 0;
    if (w == GDL__RED_COLS) /* a constant trip count: gcc vectorises it at -O2 */
        for (k = 0; k < n; k++)
            for (i = 0; i < GDL__RED_COLS; i++) s[i] += p[k * inner + i];
    else
        for (k = 0; k < n; k++)
            for (i = 0; i < w; i++) s[i] += p[k * inner + i];
    for (i = 0; i < w; i++) {
        const gdl_real r = (gdl_real)(a->op == GDL_RED_MEAN ? s[i] / (double)n : s[i]);
        if (a->accumulate) out[i] += r;
        else out[i] = r;
    }
}
static void gdl__reduce_cols_part(gdl__args a, int64_t lo, int64_t hi) {
    const int64_t nb = (a.inner + GDL__RED_COLS - 1) / GDL__RED_COLS;
    int64_t t;
    for (t = lo; t < hi; t++) gdl__reduce_cols_block(&a, t / nb, t % nb * GDL__RED_COLS);
}
static int gdl__cpu_reduce(int op, int64_t outer, int64_t n, int64_t inner, const gdl_real *x, gdl_real *y,
                           int32_t *idx, int accumulate) {
    gdl__args a = gdl__args_none();
    a.op = op; a.n = n; a.inner = inner; a.x = x; a.out = y; a.idx = idx; a.accumulate = accumulate;
    if (op != GDL_RED_MAX && inner > 1)
        gdl__parallel_units(outer * ((inner + GDL__RED_COLS - 1) / GDL__RED_COLS), outer * n * inner,
                            gdl__reduce_cols_part, &a);
    else
        gdl__parallel_loop(outer, outer * n * inner, gdl__reduce_part, &a);
    return 0;
}

/* Fused bias + activation (gdl_linear_act, gdl_conv2d_act). The arithmetic is
   the unfused ops' own (binary add in f32, then gdl__unary1; the backward's
   gdl__unary_grad1 product rounded and added to zero), so the fused path is
   bitwise the unfused one. */
/* y = out in place: y + bias, its copy in pre (when asked), then the activation act (< 0: none). The
   slots in locals: read from a, gcc does not unswitch the loop on them and leaves it scalar. */
static void gdl__bias_act_part(gdl__args a, int64_t lo, int64_t hi) {
    const int act = a.op;
    const int64_t C = a.C, inner = a.inner;
    const gdl_real *bias = a.bias;
    gdl_real *y = a.out, *pre = a.pre;
    int64_t i;
    for (i = lo; i < hi; i++) {
        gdl_real v = y[i];
        if (bias) v = v + bias[(i / inner) % C];
        if (pre) pre[i] = v;
        y[i] = act < 0 || act == GDL_UN_GELU_ERF ? v : act == GDL_UN_RELU ? (v > 0 ? v : 0) : gdl__unary1(act, v, 0);
    }
    if (act == GDL_UN_GELU_ERF) gdl__gelu_rows(y + lo, y + lo, hi - lo); /* in vectors, after the pass */
}
static int gdl__cpu_bias_act(int act, int64_t outer, int64_t C, int64_t inner, const gdl_real *bias, gdl_real *y,
                             gdl_real *pre) {
    gdl__args a = gdl__args_none();
    int64_t n = outer * C * inner;
    a.op = act; a.C = C; a.inner = inner ? inner : 1; a.bias = bias; a.out = y; a.pre = pre;
    gdl__parallel_loop(n, act == GDL_UN_GELU_TANH || act == GDL_UN_GELU_ERF ? 8 * n : n, gdl__bias_act_part, &a);
    return 0;
}
static int gdl__cpu_linear_act(int act, int M, int N, int K, const gdl_real *x, const gdl_real *w, const gdl_real *bias,
                               gdl_real *y, gdl_real *pre) {
#ifndef GDL__GEMM_CBLAS
    /* bias and act in the GEMM's epilogue, on each tile as it is stored: one pass over y fewer */
    gdl__gemm_args g;
    if (M <= 0 || N <= 0) return 0;
    gdl__gemm_args_init(&g, 0, 1, M, N, K, 1, x, K, w, K, 0, y, N);
    g.bias = bias;
    g.bias_col = 1;
    g.pre = pre;
    g.act = act;
    gdl__gemm_run(&g);
    return 0;
#else
    if (gdl__cpu_gemm(0, 1, M, N, K, 1, x, K, 0, w, K, 0, 0, y, N, 0, 1) < 0) return -1;
    return gdl__cpu_bias_act(act, M, N, 1, bias, y, pre);
#endif
}
/* x: the pre-activation */
static void gdl__act_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    int64_t i;
    if (a.op < 0)
        for (i = lo; i < hi; i++) a.out[i] = (gdl_real)0 + a.gy[i];
    else if (a.op == GDL_UN_RELU)
        gdl__relu_grad_rows(a.x + lo, a.gy + lo, a.out + lo, hi - lo, 0);
    else if (a.op == GDL_UN_GELU_ERF)
        gdl__gelu_grad_rows(a.x + lo, a.gy + lo, a.out + lo, hi - lo, 0);
    else
        for (i = lo; i < hi; i++)
            a.out[i] = (gdl_real)0 + (gdl_real)(a.gy[i] * gdl__unary_grad1(a.op, a.x[i], 0, 0));
}
static int gdl__cpu_act_backward_reduce(int act, int64_t outer, int64_t n, int64_t inner, const gdl_real *pre,
                                        const gdl_real *gy, gdl_real *gpre, gdl_real *sum, int accumulate) {
    gdl__args a = gdl__args_none();
    int64_t total = outer * n * inner;
    a.op = act; a.x = pre; a.gy = gy; a.out = gpre;
    gdl__parallel_loop(total, act == GDL_UN_GELU_TANH || act == GDL_UN_GELU_ERF ? 8 * total : total,
                       gdl__act_backward_part, &a);
    return sum ? gdl__cpu_reduce(GDL_RED_SUM, outer, n, inner, gpre, sum, NULL, accumulate) : 0;
}

static void gdl__reduce_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    const int64_t n = a.n, inner = a.inner;
    int64_t o, i, k;
    for (o = lo; o < hi; o++)
        for (i = 0; i < inner; i++) {
            gdl_real g = a.gy[o * inner + i];
            if (a.op == GDL_RED_MAX) {
                a.out[(o * n + a.argmax[o * inner + i]) * inner + i] += g;
            } else {
                if (a.op == GDL_RED_MEAN) g = (gdl_real)(g / (double)n);
                for (k = 0; k < n; k++) a.out[(o * n + k) * inner + i] += g;
            }
        }
}
static int gdl__cpu_reduce_backward(int op, int64_t outer, int64_t n, int64_t inner, const gdl_real *gy,
                                    const int32_t *idx, gdl_real *gx) {
    gdl__args a = gdl__args_none();
    a.op = op; a.n = n; a.inner = inner; a.gy = gy; a.argmax = idx; a.out = gx;
    gdl__parallel_loop(outer, outer * n * inner, gdl__reduce_backward_part, &a);
    return 0;
}

static int gdl__cpu_argmax(int64_t outer, int64_t n, int64_t inner, const gdl_real *x, int32_t *out) {
    int64_t o, i, k;
    for (o = 0; o < outer; o++)
        for (i = 0; i < inner; i++) {
            const gdl_real *p = x + o * n * inner + i;
            int64_t best = 0;
            for (k = 1; k < n; k++)
                if (p[k * inner] > p[best * inner] || (p[k * inner] != p[k * inner] && p[best * inner] == p[best * inner]))
                    best = k; /* first max; NaN wins, as in max_dim and PyTorch */
            out[o * inner + i] = (int32_t)best;
        }
    return 0;
}

/* op: log_softmax */
static void gdl__softmax_part(gdl__args a, int64_t lo, int64_t hi) {
    const int64_t n = a.n, inner = a.inner;
    int64_t o, i, k;
    for (o = lo; o < hi; o++)
        for (i = 0; i < inner; i++) {
            const gdl_real *p = a.x + o * n * inner + i;
            gdl_real *q = a.out + o * n * inner + i;
            double mx = -INFINITY, s = 0, lse;
            for (k = 0; k < n; k++)
                if (p[k * inner] > mx) mx = p[k * inner];
            for (k = 0; k < n; k++) s += exp(p[k * inner] - mx);
            lse = mx + log(s);
            for (k = 0; k < n; k++)
                q[k * inner] = (gdl_real)(a.op ? p[k * inner] - lse : exp(p[k * inner] - lse));
        }
}
static int gdl__cpu_softmax(int log_, int64_t outer, int64_t n, int64_t inner, const gdl_real *x, gdl_real *y) {
    gdl__args a = gdl__args_none();
    a.op = log_; a.n = n; a.inner = inner; a.x = x; a.out = y;
    gdl__parallel_loop(outer, outer * n * inner, gdl__softmax_part, &a);
    return 0;
}

static void gdl__softmax_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    const int64_t n = a.n, inner = a.inner;
    const gdl_real *y = a.y, *gy = a.gy;
    int64_t o, i, k;
    for (o = lo; o < hi; o++)
        for (i = 0; i < inner; i++) {
            int64_t base = o * n * inner + i;
            double s = 0;
            for (k = 0; k < n; k++)
                s += a.op ? gy[base + k * inner] : gy[base + k * inner] * y[base + k * inner];
            for (k = 0; k < n; k++) {
                int64_t j = base + k * inner;
                a.out[j] += (gdl_real)(a.op ? gy[j] - exp(y[j]) * s : y[j] * (gy[j] - s));
            }
        }
}
static int gdl__cpu_softmax_backward(int log_, int64_t outer, int64_t n, int64_t inner, const gdl_real *y,
                                     const gdl_real *gy, gdl_real *gx) {
    gdl__args a = gdl__args_none();
    a.op = log_; a.n = n; a.inner = inner; a.y = y; a.gy = gy; a.out = gx;
    gdl__parallel_loop(outer, outer * n * inner, gdl__softmax_backward_part, &a);
    return 0;
}


/* ---- indexing and copies: strided copies, gather / scatter-add, comparisons, where, tril/triu, cumsum ----
   Elements of any dtype move as bytes (a copy or a selection is exact in every dtype); what adds, adds in
   f32 (the f32 kernels' type) and rounds once. */

/* the offsets of element i (row-major over shape) in k strided operands */
static void gdl__elem_offsets(int ndim, const int64_t *shape, int64_t i, int k, const int64_t *const *str, int64_t *off) {
    int d, j;
    for (j = 0; j < k; j++) off[j] = 0;
    for (d = ndim - 1; d >= 0; d--) {
        int64_t id = i % shape[d];
        i /= shape[d];
        for (j = 0; j < k; j++) off[j] += id * str[j][d];
    }
}
static int64_t gdl__numel_of(int ndim, const int64_t *shape) {
    int64_t n = 1;
    int d;
    for (d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

/* the arguments of the strided loops below, through a.ctx */
typedef struct {
    int ndim, dim, op;
    const int64_t *shape, *s0, *s1, *s2;
    gdl_dtype t0, t1, dt;
    const void *p0, *p1, *p2;
    void *out;
    int64_t xn;
} gdl__strided_job;

static void gdl__strided_copy_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__strided_job *j = (const gdl__strided_job *)a.ctx;
    const int64_t *str[2];
    size_t es = gdl_dtype_size(j->dt);
    int64_t i, off[2];
    str[0] = j->s0;
    str[1] = j->s1;
    for (i = lo; i < hi; i++) {
        const char *src;
        char *dst;
        gdl__elem_offsets(j->ndim, j->shape, i, 2, str, off);
        src = (const char *)j->p0 + (size_t)off[0] * es;
        dst = (char *)j->out + (size_t)off[1] * es;
        if (!a.accumulate) memcpy(dst, src, es);
        else if (j->dt == GDL_F32) *(gdl_real *)dst += *(const gdl_real *)src;
        else gdl__store(dst, j->dt, (double)(float)(gdl__load(dst, j->dt) + gdl__load(src, j->dt)));
    }
}
static int gdl__cpu_strided_copy(gdl_dtype dt, int ndim, const int64_t *shape, const void *src, const int64_t *sstr,
                                 void *dst, const int64_t *dstr, int accumulate) {
    gdl__strided_job j;
    gdl__args a = gdl__args_none();
    int64_t n = gdl__numel_of(ndim, shape);
    memset(&j, 0, sizeof j);
    j.ndim = ndim; j.shape = shape; j.s0 = sstr; j.s1 = dstr; j.dt = dt; j.p0 = src; j.out = dst;
    a.ctx = &j;
    a.accumulate = accumulate;
    gdl__parallel_loop(n, n, gdl__strided_copy_part, &a);
    return 0;
}

/* gather's and scatter_add's element i: the offset in x (dim's coordinate from the index) and the index;
   -1 for an index outside [0, xn) */
static int64_t gdl__gather_offset(const gdl__strided_job *j, int64_t i) {
    int64_t rem = i, xo = 0, io = 0, c;
    int d;
    for (d = j->ndim - 1; d >= 0; d--) {
        int64_t id = rem % j->shape[d];
        rem /= j->shape[d];
        if (d != j->dim) xo += id * j->s0[d];
        io += id * j->s1[d];
    }
    c = ((const int32_t *)j->p1)[io];
    return c < 0 || c >= j->xn ? -1 : xo + c * j->s0[j->dim];
}
static void gdl__gather_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__strided_job *j = (const gdl__strided_job *)a.ctx;
    size_t es = gdl_dtype_size(j->dt);
    int64_t i;
    for (i = lo; i < hi; i++) {
        int64_t o = gdl__gather_offset(j, i);
        if (o < 0) memset((char *)j->out + (size_t)i * es, 0, es);
        else memcpy((char *)j->out + (size_t)i * es, (const char *)j->p0 + (size_t)o * es, es);
    }
}
static int gdl__cpu_gather(gdl_dtype dt, int ndim, const int64_t *shape, int dim, const void *x, const int64_t *xstr,
                           int64_t xn, const int32_t *idx, const int64_t *istr, void *out) {
    gdl__strided_job j;
    gdl__args a = gdl__args_none();
    int64_t n = gdl__numel_of(ndim, shape);
    memset(&j, 0, sizeof j);
    j.ndim = ndim; j.dim = dim; j.shape = shape; j.s0 = xstr; j.s1 = istr; j.dt = dt; j.p0 = x; j.p1 = idx;
    j.out = out; j.xn = xn;
    a.ctx = &j;
    gdl__parallel_loop(n, n, gdl__gather_part, &a);
    return 0;
}
/* serial: destinations repeat, and the sums keep one order (the same bits for any thread count) */
static int gdl__cpu_scatter_add(gdl_dtype st, int ndim, const int64_t *shape, int dim, const void *src,
                                const int32_t *idx, const int64_t *istr, gdl_real *dst, const int64_t *dstr, int64_t dn) {
    gdl__strided_job j;
    int64_t i, n = gdl__numel_of(ndim, shape);
    size_t es = gdl_dtype_size(st);
    memset(&j, 0, sizeof j);
    j.ndim = ndim; j.dim = dim; j.shape = shape; j.s0 = dstr; j.s1 = istr; j.p1 = idx; j.xn = dn;
    for (i = 0; i < n; i++) {
        int64_t o = gdl__gather_offset(&j, i);
        if (o >= 0)
            dst[o] += st == GDL_F32 ? ((const gdl_real *)src)[i] : (gdl_real)gdl__load((const char *)src + (size_t)i * es, st);
    }
    return 0;
}

/* a compare operand: integers exactly; an integer facing a float is rounded to f32 (PyTorch's promotion) */
static double gdl__cmp_load(const void *p, gdl_dtype dt, int64_t i, int as_float) {
    double v = gdl__load((const char *)p + (size_t)i * gdl_dtype_size(dt), dt);
    return as_float && dt == GDL_I32 ? (double)(float)v : v;
}
static int gdl__cmp1(int op, double a, double b) {
    switch (op) {
    case GDL_CMP_EQ: return a == b;
    case GDL_CMP_NE: return a != b;
    case GDL_CMP_LT: return a < b;
    case GDL_CMP_LE: return a <= b;
    case GDL_CMP_GT: return a > b;
    default: return a >= b; /* GDL_CMP_GE */
    }
}
static void gdl__compare_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__strided_job *j = (const gdl__strided_job *)a.ctx;
    const int64_t *str[2];
    int64_t i, off[2];
    int as_float = !((j->t0 == GDL_I32 || j->t0 == GDL_U8) && (j->t1 == GDL_I32 || j->t1 == GDL_U8));
    str[0] = j->s0;
    str[1] = j->s1;
    for (i = lo; i < hi; i++) {
        gdl__elem_offsets(j->ndim, j->shape, i, 2, str, off);
        ((uint8_t *)j->out)[i] = (uint8_t)gdl__cmp1(j->op, gdl__cmp_load(j->p0, j->t0, off[0], as_float),
                                                    gdl__cmp_load(j->p1, j->t1, off[1], as_float));
    }
}
static int gdl__cpu_compare(int op, int ndim, const int64_t *shape, gdl_dtype at, const void *a, const int64_t *astr,
                            gdl_dtype bt, const void *b, const int64_t *bstr, uint8_t *out) {
    gdl__strided_job j;
    gdl__args args = gdl__args_none();
    int64_t n = gdl__numel_of(ndim, shape);
    memset(&j, 0, sizeof j);
    j.op = op; j.ndim = ndim; j.shape = shape; j.s0 = astr; j.s1 = bstr; j.t0 = at; j.t1 = bt; j.p0 = a; j.p1 = b;
    j.out = out;
    args.ctx = &j;
    gdl__parallel_loop(n, n, gdl__compare_part, &args);
    return 0;
}

static void gdl__where_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__strided_job *j = (const gdl__strided_job *)a.ctx;
    const int64_t *str[3];
    size_t es = gdl_dtype_size(j->dt);
    int64_t i, off[3];
    str[0] = j->s0;
    str[1] = j->s1;
    str[2] = j->s2;
    for (i = lo; i < hi; i++) {
        gdl__elem_offsets(j->ndim, j->shape, i, 3, str, off);
        memcpy((char *)j->out + (size_t)i * es,
               ((const uint8_t *)j->p0)[off[0]] ? (const char *)j->p1 + (size_t)off[1] * es
                                                : (const char *)j->p2 + (size_t)off[2] * es,
               es);
    }
}
static int gdl__cpu_where(gdl_dtype dt, int ndim, const int64_t *shape, const uint8_t *cond, const int64_t *cstr,
                          const void *a, const int64_t *astr, const void *b, const int64_t *bstr, void *out) {
    gdl__strided_job j;
    gdl__args args = gdl__args_none();
    int64_t n = gdl__numel_of(ndim, shape);
    memset(&j, 0, sizeof j);
    j.ndim = ndim; j.shape = shape; j.s0 = cstr; j.s1 = astr; j.s2 = bstr; j.dt = dt;
    j.p0 = cond; j.p1 = a; j.p2 = b; j.out = out;
    args.ctx = &j;
    gdl__parallel_loop(n, n, gdl__where_part, &args);
    return 0;
}

static int gdl__cpu_tri(gdl_dtype dt, int upper, int64_t batch, int64_t R, int64_t C, int64_t k, const void *x, void *y,
                        int accumulate) {
    size_t es = gdl_dtype_size(dt);
    int64_t b, r, c;
    for (b = 0; b < batch; b++)
        for (r = 0; r < R; r++)
            for (c = 0; c < C; c++) {
                int64_t i = (b * R + r) * C + c;
                int keep = upper ? c - r >= k : c - r <= k;
                char *q = (char *)y + (size_t)i * es;
                const char *p = (const char *)x + (size_t)i * es;
                if (accumulate) {
                    if (!keep) continue;
                    if (dt == GDL_F32) *(gdl_real *)q += *(const gdl_real *)p;
                    else gdl__store(q, dt, (double)(float)(gdl__load(q, dt) + gdl__load(p, dt)));
                } else if (keep) {
                    memcpy(q, p, es);
                } else {
                    memset(q, 0, es);
                }
            }
    return 0;
}

/* sums in double, as the reductions */
static void gdl__cumsum_part(gdl__args a, int64_t lo, int64_t hi) {
    const int64_t n = a.n, inner = a.inner;
    int64_t o, i, k;
    for (o = lo; o < hi; o++)
        for (i = 0; i < inner; i++) {
            const gdl_real *p = a.x + o * n * inner + i;
            gdl_real *q = a.out + o * n * inner + i;
            double s = 0;
            for (k = 0; k < n; k++) {
                int64_t kk = a.op ? n - 1 - k : k;
                s += p[kk * inner];
                if (a.accumulate) q[kk * inner] += (gdl_real)s;
                else q[kk * inner] = (gdl_real)s;
            }
        }
}
static int gdl__cpu_cumsum(int64_t outer, int64_t n, int64_t inner, const gdl_real *x, gdl_real *y, int reverse,
                           int accumulate) {
    gdl__args a = gdl__args_none();
    a.op = reverse; a.n = n; a.inner = inner; a.x = x; a.out = y; a.accumulate = accumulate;
    gdl__parallel_loop(outer, outer * n * inner, gdl__cumsum_part, &a);
    return 0;
}
