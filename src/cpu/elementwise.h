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

/* The vector loops: gdl__gelu_f32's and gdl__gelu_grad_f32's arithmetic, GDL__GV_N lanes at a time (16
   with AVX-512, 8 with AVX2), both branches computed and the lanes selected. They are written once over
   GDL__GV(op), the ISA's intrinsic (_mm512_op or _mm256_op); what is not spelled alike stays in each ISA's
   block: rounding, the integer cast, |x| and the sign flip, and the lane masks (AVX-512 mask registers,
   AVX2 compare vectors and blends). */
#if defined(__AVX512F__)
#include <immintrin.h>
#define GDL__GELU_AVX512 1
#define GDL__GV_N 16
#define GDL__GV(op) _mm512_##op
typedef __m512 gdl__gv;
typedef __m512i gdl__gvi;
typedef __mmask16 gdl__gvm;
#define GDL__GV_ROUND(v) _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define GDL__GV_AS_PS(i) _mm512_castsi512_ps(i)
#define GDL__GV_ABS(v) _mm512_abs_ps(v)
#define GDL__GV_FLIP(v) /* AVX-512F: no xor_ps */ \
    _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_castps_si512(_mm512_set1_ps(-0.0f))))
#define GDL__GV_CMP(a, b, pred) _mm512_cmp_ps_mask(a, b, pred)
#define GDL__GV_SEL(m, a, b) _mm512_mask_blend_ps(m, a, b) /* m ? b : a, per lane */
#define GDL__GV_KEEP(m, v) _mm512_maskz_mov_ps(m, v)      /* m ? v : 0, per lane */
#elif defined(__AVX2__) && (defined(__FMA__) || defined(_MSC_VER))
#include <immintrin.h>
#define GDL__GELU_AVX2 1
#define GDL__GV_N 8
#define GDL__GV(op) _mm256_##op
typedef __m256 gdl__gv;
typedef __m256i gdl__gvi;
typedef __m256 gdl__gvm;
#define GDL__GV_ROUND(v) _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define GDL__GV_AS_PS(i) _mm256_castsi256_ps(i)
#define GDL__GV_ABS(v) _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v)
#define GDL__GV_FLIP(v) _mm256_xor_ps(v, _mm256_set1_ps(-0.0f))
#define GDL__GV_CMP(a, b, pred) _mm256_cmp_ps(a, b, pred)
#define GDL__GV_SEL(m, a, b) _mm256_blendv_ps(a, b, m)
#define GDL__GV_KEEP(m, v) _mm256_and_ps(m, v)
#endif
#ifdef GDL__GV_N
#define GDL__GV1(c) GDL__GV(set1_ps)(c)
static gdl__gv gdl__gelu_vpoly(const float *c, int n, gdl__gv v) {
    gdl__gv p = GDL__GV1(c[n - 1]);
    int i;
    for (i = n - 2; i >= 0; i--) p = GDL__GV(fmadd_ps)(p, v, GDL__GV1(c[i]));
    return p;
}
static gdl__gv gdl__gelu_vpow2_neg(gdl__gvi k) {
    return GDL__GV_AS_PS(GDL__GV(slli_epi32)(GDL__GV(sub_epi32)(GDL__GV(set1_epi32)(127), k), 23));
}
static void gdl__gelu_vtail(gdl__gv a, gdl__gv *m, gdl__gvi *k, gdl__gv *r) {
    gdl__gv s = GDL__GV(mul_ps)(a, a), e = GDL__GV(fmsub_ps)(a, a, s), h = GDL__GV(mul_ps)(GDL__GV1(0.5f), s);
    gdl__gv kf = GDL__GV_ROUND(GDL__GV(mul_ps)(h, GDL__GV1(GDL__GELU_INV_LN2)));
    gdl__gv rr = GDL__GV(fnmadd_ps)(kf, GDL__GV1(GDL__GELU_LN2_HI), h), t;
    rr = GDL__GV(fnmadd_ps)(kf, GDL__GV1(GDL__GELU_LN2_LO), rr);
    rr = GDL__GV(fmadd_ps)(GDL__GV1(0.5f), e, rr);
    *m = gdl__gelu_vpoly(gdl__gelu_e, 8, rr);
    *k = GDL__GV(cvtps_epi32)(kf);
    t = GDL__GV(div_ps)(GDL__GV1(1.0f), GDL__GV(fmadd_ps)(GDL__GV1(0.5f), a, GDL__GV1(1.0f)));
    *r = GDL__GV(mul_ps)(t, gdl__gelu_vpoly(gdl__gelu_p, 13, t));
}
static gdl__gv gdl__gelu_vscale(gdl__gv v, gdl__gvi k) {
    gdl__gvi k1 = GDL__GV(srai_epi32)(k, 1);
    return GDL__GV(mul_ps)(GDL__GV(mul_ps)(v, gdl__gelu_vpow2_neg(k1)), gdl__gelu_vpow2_neg(GDL__GV(sub_epi32)(k, k1)));
}
static gdl__gv gdl__gelu_v(gdl__gv x) {
    gdl__gv a = GDL__GV_ABS(x), ac = GDL__GV(min_ps)(a, GDL__GV1(GDL__GELU_AMAX)), m, r, pos, neg, small;
    gdl__gvi k;
    gdl__gvm tiny = GDL__GV_CMP(a, GDL__GV1(GDL__GELU_T), _CMP_LT_OQ);
    gdl__gvm gt0 = GDL__GV_CMP(x, GDL__GV(setzero_ps)(), _CMP_GT_OQ);
    gdl__gvm nan = GDL__GV_CMP(x, x, _CMP_UNORD_Q);
    gdl__gvm ninf = GDL__GV_CMP(x, GDL__GV1(-INFINITY), _CMP_EQ_OQ);
    gdl__gelu_vtail(ac, &m, &k, &r);
    pos = GDL__GV(fnmadd_ps)(ac, gdl__gelu_vscale(GDL__GV(mul_ps)(r, m), k), a);
    neg = GDL__GV_FLIP(gdl__gelu_vscale(GDL__GV(mul_ps)(ac, GDL__GV(mul_ps)(r, m)), k));
    small = GDL__GV(mul_ps)(x, GDL__GV(fmadd_ps)(x, gdl__gelu_vpoly(gdl__gelu_q, 6, GDL__GV(mul_ps)(x, x)), GDL__GV1(0.5f)));
    r = GDL__GV_SEL(gt0, neg, pos);
    r = GDL__GV_SEL(tiny, r, small);
    r = GDL__GV_SEL(ninf, r, GDL__GV1(NAN));
    return GDL__GV_SEL(nan, r, GDL__GV(add_ps)(x, x));
}
static gdl__gv gdl__gelu_grad_v(gdl__gv x) {
    gdl__gv a = GDL__GV_ABS(x), ac = GDL__GV(min_ps)(a, GDL__GV1(GDL__GELU_AMAX)), m, r, d, small;
    gdl__gvi k;
    gdl__gvm tiny = GDL__GV_CMP(a, GDL__GV1(GDL__GELU_T), _CMP_LT_OQ);
    gdl__gvm gt0 = GDL__GV_CMP(x, GDL__GV(setzero_ps)(), _CMP_GT_OQ);
    gdl__gvm nan = GDL__GV_CMP(x, x, _CMP_UNORD_Q);
    gdl__gvm inf = GDL__GV_CMP(a, GDL__GV1(INFINITY), _CMP_EQ_OQ);
    gdl__gelu_vtail(ac, &m, &k, &r);
    d = gdl__gelu_vscale(GDL__GV(mul_ps)(GDL__GV(fmadd_ps)(ac, GDL__GV1(-GDL__GELU_INV_SQRT_2PI), r), m), k);
    small = GDL__GV(fmadd_ps)(x, gdl__gelu_vpoly(gdl__gelu_s, 6, GDL__GV(mul_ps)(x, x)), GDL__GV1(0.5f));
    r = GDL__GV_SEL(gt0, GDL__GV(add_ps)(d, GDL__GV(setzero_ps)()), GDL__GV(sub_ps)(GDL__GV1(1.0f), d));
    r = GDL__GV_SEL(tiny, r, small);
    r = GDL__GV_SEL(inf, r, GDL__GV1(NAN));
    return GDL__GV_SEL(nan, r, GDL__GV(add_ps)(x, x));
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
#ifdef GDL__GV_N
    for (; i + GDL__GV_N <= n; i += GDL__GV_N) GDL__GV(storeu_ps)(y + i, gdl__gelu_v(GDL__GV(loadu_ps)(x + i)));
#endif
    for (; i < n; i++) y[i] = gdl__gelu1(x[i]);
}
/* out = (accumulate ? out : 0) + gy GELU'(x) over n, the product rounded first, as gdl__unary_grad1's callers */
static void gdl__gelu_grad_rows(const gdl_real *x, const gdl_real *gy, gdl_real *out, int64_t n, int accumulate) {
    int64_t i = 0;
#ifdef GDL__GV_N
    for (; i + GDL__GV_N <= n; i += GDL__GV_N) {
        gdl__gv p = GDL__GV(mul_ps)(GDL__GV(loadu_ps)(gy + i), gdl__gelu_grad_v(GDL__GV(loadu_ps)(x + i)));
        GDL__GV(storeu_ps)(out + i, GDL__GV(add_ps)(accumulate ? GDL__GV(loadu_ps)(out + i) : GDL__GV(setzero_ps)(), p));
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
#ifdef GDL__GV_N
    for (; i + GDL__GV_N <= n; i += GDL__GV_N) {
        const gdl__gvm pos = GDL__GV_CMP(GDL__GV(loadu_ps)(x + i), GDL__GV(setzero_ps)(), _CMP_GT_OQ);
        GDL__GV(storeu_ps)(out + i, GDL__GV(add_ps)(accumulate ? GDL__GV(loadu_ps)(out + i) : GDL__GV(setzero_ps)(),
                                                    GDL__GV_KEEP(pos, GDL__GV(loadu_ps)(gy + i))));
    }
#endif
    for (; i < n; i++) out[i] = (accumulate ? out[i] : (gdl_real)0) + (x[i] > 0 ? gy[i] : 0);
}
/* y = x > 0 ? x : 0 over n (NaN and -0 give +0): max(x, 0) with x first, which returns its second operand
   unless x > 0 */
static void gdl__relu_rows(const gdl_real *x, gdl_real *y, int64_t n) {
    int64_t i = 0;
#ifdef GDL__GV_N
    for (; i + GDL__GV_N <= n; i += GDL__GV_N)
        GDL__GV(storeu_ps)(y + i, GDL__GV(max_ps)(GDL__GV(loadu_ps)(x + i), GDL__GV(setzero_ps)()));
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
