/* test_gelu.c — the f32 build's exact GELU and its derivative on
   the CPU path this build selects (AVX-512, AVX2, NEON or portable C):
   against double erfc over a sweep of every 997th float bit pattern (all
   exponents and signs, mantissas spread), bit for bit against the scalar
   code the tails and the portable path use, and at the special values,
   where the results must be the double formula's. One translation unit with
   the implementation: the functions under test are static. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#define GPUDL_STATIC
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"

/* the bounds gdl__gelu_f32's comment states; measured over every 13th pattern: 5.56 and 3.93 */
#define GELU_MAX_ULP 6.0
#define GRAD_MAX_ULP 6.0 /* in ulps of max(|GELU'|, 1/8): absolute near GELU''s zero at x = -0.7518 */

static double ulp_of(double r) { /* the spacing of floats at |r| (subnormals: 2^-149) */
    int e;
    r = fabs(r);
    if (r < 0x1p-126) return 0x1p-149;
    frexp(r, &e);
    return ldexp(1.0, e - 24);
}
static double ref_gelu(double x) { return 0.5 * x * erfc(-x * 0.70710678118654752440); }
static double ref_grad(double x) {
    return 0.5 * erfc(-x * 0.70710678118654752440) + x * exp(-0.5 * x * x) * 0.39894228040143267794;
}
static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0 || (a != a && b != b); }

#define CHUNK 4096
TEST sweep(void) {
    static float x[CHUNK], y[CHUNK], g[CHUNK], one[CHUNK];
    double worst = 0, worst_g = 0, wx = 0, wgx = 0;
    uint64_t b = 0;
    int i, n;
    for (i = 0; i < CHUNK; i++) one[i] = 1;
    while (b < 0x100000000ull) {
        for (n = 0; n < CHUNK && b < 0x100000000ull; b += 997) {
            uint32_t u = (uint32_t)b;
            memcpy(&x[n], &u, sizeof u);
            if (x[n] == x[n] && !isinf(x[n])) n++;
        }
        gdl__gelu_rows(x, y, n);
        gdl__gelu_grad_rows(x, one, g, n, 0);
        for (i = 0; i < n; i++) {
            double r = ref_gelu(x[i]), rg = ref_grad(x[i]), e, eg;
            if (!same_bits(y[i], gdl__gelu_f32(x[i])) || !same_bits(g[i], gdl__gelu_grad_f32(x[i])))
                FAILf("x = %.9g: the vector loop gives %.9g, %.9g, the scalar code %.9g, %.9g", x[i], y[i], g[i],
                      gdl__gelu_f32(x[i]), gdl__gelu_grad_f32(x[i]));
            e = fabs(y[i] - r) / ulp_of(r);
            eg = fabs(g[i] - rg) / ulp_of(fabs(rg) > 0.125 ? rg : 0.125);
            if (!(e <= worst)) { worst = e; wx = x[i]; }
            if (!(eg <= worst_g)) { worst_g = eg; wgx = x[i]; }
        }
    }
    printf("gelu: max %.3f ulp (at %.9g), gelu': max %.3f ulp of max(|g|, 1/8) (at %.9g)\n", worst, wx, worst_g, wgx);
    ASSERT_LE(worst, GELU_MAX_ULP);
    ASSERT_LE(worst_g, GRAD_MAX_ULP);
    PASS();
}

/* the double formula gdl__unary1 had (and the GPUDL_DOUBLE build keeps), rounded to float */
static float formula(double x) { return (float)(0.5 * x * (1.0 + erf(x * 0.7071067811865476))); }
static float formula_grad(double x) {
    return (float)(0.5 * (1 + erf(x * 0.7071067811865476)) + x * exp(-0.5 * x * x) * 0.3989422804014327);
}

TEST specials(void) {
    /* where the double formula's value is exact (0, +-0, huge, infinite, NaN, subnormal halves) */
    const float xs[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e30f, -1e30f, FLT_MAX, -FLT_MAX, 20.0f,
                        -20.0f, 0x1p-149f, -0x1p-149f, 0x3p-149f, -0x3p-149f, 0x1p-126f, -0x1p-126f, 1e-20f, -1e-20f};
    float v[32], w[32], one[32];
    int i, n = (int)(sizeof xs / sizeof xs[0]);
    for (i = 0; i < n; i++) one[i] = 1;
    gdl__gelu_rows(xs, v, n);
    gdl__gelu_grad_rows(xs, one, w, n, 0);
    for (i = 0; i < n; i++) {
        if (!same_bits(v[i], formula(xs[i])) || !same_bits(v[i], gdl__gelu_f32(xs[i])))
            FAILf("GELU(%g) = %g (scalar %g), the formula gives %g", xs[i], v[i], gdl__gelu_f32(xs[i]), formula(xs[i]));
        /* GELU' equal in value: the formula's zero from -14.4 down is -0, then +0 past -38.6 (a rounding
           accident; it is added to a gradient), ours +0 throughout */
        if (!(w[i] == formula_grad(xs[i]) || (w[i] != w[i] && formula_grad(xs[i]) != formula_grad(xs[i]))) ||
            !same_bits(w[i], gdl__gelu_grad_f32(xs[i])))
            FAILf("GELU'(%g) = %g (scalar %g), the formula gives %g", xs[i], w[i], gdl__gelu_grad_f32(xs[i]),
                  formula_grad(xs[i]));
    }
    /* past the formula's reach (it gives -0 from x = -8.3): the true tail, then -0 once it underflows */
    ASSERT(gdl__gelu_f32(-10.0f) < 0);
    ASSERT(gdl__gelu_f32(-14.0f) < 0);
    ASSERT(gdl__gelu_f32(-15.0f) == 0 && signbit(gdl__gelu_f32(-15.0f)));
    ASSERT(gdl__gelu_grad_f32(-15.0f) == 0 && !signbit(gdl__gelu_grad_f32(-15.0f)));
    PASS();
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_TEST(specials);
    RUN_TEST(sweep);
    HARNESS_MAIN_END();
}
