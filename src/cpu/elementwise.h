/* src/cpu/elementwise.h — the CPU's elementwise kernels: binary ops with
   broadcasting, sum_to, and the unary ops with their gradients (GELU's and
   ReLU's rows in AVX-512 / AVX2 lanes, bit for bit the scalar loop). */


/* Walks `shape` in row-major order, advancing two strided offsets. */
typedef struct gdl__iter {
    int ndim;
    int64_t idx[GDL_MAX_DIMS];
} gdl__iter;

/* one element of a binary op (enum gdl_binary_op): src/api/op_math.h's, the CPU's definition */
static gdl_real gdl__bin1(int op, gdl_real a, gdl_real b) { return gdl_binary1_real((enum gdl_binary_op)op, a, b); }

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
        case GDL_BIN_DIV: for (i = 0; i < n; i++) o[i] = a[i] / b[i]; break;
        }
    } else if (sa == 1 && sb == 0) {
        const gdl_real v = b[0];
        switch (op) {
        case GDL_BIN_ADD: for (i = 0; i < n; i++) o[i] = a[i] + v; break;
        case GDL_BIN_SUB: for (i = 0; i < n; i++) o[i] = a[i] - v; break;
        case GDL_BIN_MUL: for (i = 0; i < n; i++) o[i] = a[i] * v; break;
        case GDL_BIN_DIV: for (i = 0; i < n; i++) o[i] = a[i] / v; break;
        }
    } else {
        switch (op) {
        case GDL_BIN_ADD: for (i = 0; i < n; i++) o[i] = a[i * sa] + b[i * sb]; break;
        case GDL_BIN_SUB: for (i = 0; i < n; i++) o[i] = a[i * sa] - b[i * sb]; break;
        case GDL_BIN_MUL: for (i = 0; i < n; i++) o[i] = a[i * sa] * b[i * sb]; break;
        case GDL_BIN_DIV: for (i = 0; i < n; i++) o[i] = a[i * sa] / b[i * sb]; break;
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

static int gdl__cpu_binary_f32(int op, int ndim, const int64_t *shape, const gdl_real *a, const int64_t *astr,
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

static int gdl__cpu_sum_to_f32(int ndim, const int64_t *shape, const gdl_real *src, gdl_real *dst,
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

#ifndef GPUDL_DOUBLE
/* Exact GELU in f32 without libm's double erf (libm's was a fifth of
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
#else /* GPUDL_DOUBLE: the erf formula of src/api/op_math.h in double (libm's erf), PyTorch's float64 numerics */
static gdl_real gdl__gelu1(gdl_real x) { return gdl_unary1_real(GDL_UN_GELU_ERF, x, 0); }
static double gdl__gelu_grad1(double x) { return gdl_unary_grad1_real(GDL_UN_GELU_ERF, x, 0, 0); }
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

/* y = f(x; alpha): src/api/op_math.h's, the CPU's definition, but for GELU (erf): the CPU's own gdl__gelu1
   (in f32 builds the polynomial gdl__gelu_f32; op_math.h says why it stays apart) */
static gdl_real gdl__unary1(int op, gdl_real x, gdl_real alpha) {
    if (op == GDL_UN_GELU_ERF) return gdl__gelu1(x);
    return gdl_unary1_real((enum gdl_unary_op)op, x, alpha);
}

/* d y / d x at x (y = f(x) given), in double, likewise */
static double gdl__unary_grad1(int op, double x, double y, double alpha) {
    if (op == GDL_UN_GELU_ERF) return gdl__gelu_grad1(x);
    return gdl_unary_grad1_real((enum gdl_unary_op)op, x, y, alpha);
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
static int gdl__cpu_unary_f32(int op, int64_t n, const gdl_real *x, gdl_real *y, gdl_real alpha) {
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
static int gdl__cpu_unary_backward_f32(int op, int64_t n, const gdl_real *x, const gdl_real *y, const gdl_real *gy,
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
