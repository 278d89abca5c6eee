/* test_rnn_gates.c — the f32 build's LSTM / GRU gate math on the CPU path this build selects (AVX-512, AVX2,
   NEON or portable C): its sigmoid and tanh against double over a sweep of float bit patterns, the vector
   loops bit for bit against the scalar code the row tails and the portable path use, the special values, and
   the gate steps' forwards and backwards unit by unit against a double reference and against the same unit
   computed alone (where it falls in a scalar tail). One translation unit with the implementation: the
   functions under test are static. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#define GPUDL_STATIC
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"

/* measured over every 997th pattern: sigmoid 2.13 ulp, tanh 1.49 ulp */
#define SIG_MAX_ULP 3.0
#define TANH_MAX_ULP 3.0

static double ulp_of(double r) { /* the spacing of floats at |r| (subnormals: 2^-149) */
    int e;
    r = fabs(r);
    if (r < 0x1p-126) return 0x1p-149;
    frexp(r, &e);
    return ldexp(1.0, e - 24);
}
static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0 || (a != a && b != b); }
static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* the vector loop over n values where the path has one, the scalar code for the rest */
static void sigmoid_rows(const float *x, float *y, int n) {
    int i = 0;
#ifdef GDL__GV_N
    for (; i + GDL__GV_N <= n; i += GDL__GV_N) GDL__GV(storeu_ps)(y + i, gdl__rnn_vsigmoid(GDL__GV(loadu_ps)(x + i)));
#endif
    for (; i < n; i++) y[i] = gdl__rnn_sigmoid_f32(x[i]);
}
static void tanh_rows(const float *x, float *y, int n) {
    int i = 0;
#ifdef GDL__GV_N
    for (; i + GDL__GV_N <= n; i += GDL__GV_N) GDL__GV(storeu_ps)(y + i, gdl__rnn_vtanh(GDL__GV(loadu_ps)(x + i)));
#endif
    for (; i < n; i++) y[i] = gdl__rnn_tanh_f32(x[i]);
}

#define CHUNK 4096
TEST sweep(void) {
    static float x[CHUNK], s[CHUNK], t[CHUNK];
    double worst_s = 0, worst_t = 0, ws = 0, wt = 0;
    uint64_t b = 0, hash = 1469598103934665603ull; /* FNV-1a of every result's bits: equal on every path */
    int i, n;
    while (b < 0x100000000ull) {
        for (n = 0; n < CHUNK && b < 0x100000000ull; b += 997) {
            uint32_t u = (uint32_t)b;
            memcpy(&x[n], &u, sizeof u);
            if (x[n] == x[n]) n++;
        }
        sigmoid_rows(x, s, n);
        tanh_rows(x, t, n);
        for (i = 0; i < n; i++) {
            double rs = ref_sigmoid(x[i]), rt = tanh((double)x[i]), es, et;
            if (!same_bits(s[i], gdl__rnn_sigmoid_f32(x[i])) || !same_bits(t[i], gdl__rnn_tanh_f32(x[i])))
                FAILf("x = %.9g: the vector loop gives %.9g, %.9g, the scalar code %.9g, %.9g", x[i], s[i], t[i],
                      gdl__rnn_sigmoid_f32(x[i]), gdl__rnn_tanh_f32(x[i]));
            /* below -87 the exponent is clamped: sigmoid stays at 1/(1 + e^88), within 6.1e-39 of the truth */
            es = x[i] > -87 ? fabs(s[i] - rs) / ulp_of(rs) : fabs(s[i] - rs) <= 6.1e-39 ? 0 : INFINITY;
            et = fabs(t[i] - rt) / ulp_of(rt);
            {
                uint32_t u[2];
                int q;
                memcpy(&u[0], &s[i], 4), memcpy(&u[1], &t[i], 4);
                for (q = 0; q < 8; q++) hash = (hash ^ ((u[q / 4] >> (8 * (q % 4))) & 255)) * 1099511628211ull;
            }
            if (!(es <= worst_s)) { worst_s = es; ws = x[i]; }
            if (!(et <= worst_t)) { worst_t = et; wt = x[i]; }
        }
    }
    printf("sigmoid: max %.3f ulp (at %.9g), tanh: max %.3f ulp (at %.9g), results' hash %016llx\n", worst_s, ws,
           worst_t, wt, (unsigned long long)hash);
    ASSERT_LE(worst_s, SIG_MAX_ULP);
    ASSERT_LE(worst_t, TANH_MAX_ULP);
    PASS();
}

TEST specials(void) {
    const float xs[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e30f, -1e30f, FLT_MAX, -FLT_MAX, 88.0f, -88.0f,
                        0x1p-149f, -0x1p-149f, 0x1p-126f, 1e-20f, -1e-20f, 0.5625f, -0.5625f, 0.56249994f};
    float s[32], t[32];
    int i, n = (int)(sizeof xs / sizeof xs[0]);
    sigmoid_rows(xs, s, n);
    tanh_rows(xs, t, n);
    for (i = 0; i < n; i++)
        if (!same_bits(s[i], gdl__rnn_sigmoid_f32(xs[i])) || !same_bits(t[i], gdl__rnn_tanh_f32(xs[i])))
            FAILf("x = %g: the vector loop gives %g, %g, the scalar code %g, %g", xs[i], s[i], t[i],
                  gdl__rnn_sigmoid_f32(xs[i]), gdl__rnn_tanh_f32(xs[i]));
    ASSERT(s[0] == 0.5f && s[1] == 0.5f && s[2] == 1.0f && s[3] >= 0 && s[3] < 1e-38f && s[4] != s[4]);
    ASSERT(t[0] == 0 && !signbit(t[0]) && t[1] == 0 && signbit(t[1]) && t[2] == 1.0f && t[3] == -1.0f);
    ASSERT(t[4] != t[4] && t[7] == 1.0f && t[8] == -1.0f && t[11] == 0x1p-149f && t[14] == 1e-20f);
    PASS();
}

/* the gate steps: B rows of H units (vector loops and a scalar tail) against a double reference of each unit,
   and each unit against itself computed alone (H = 1: the scalar code) */
#define GB 3
#define GH 37
static float urand(uint64_t *s) { /* in [-4, 4): past the tanh's switch and into the sigmoids' tails */
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 40) / (double)(1ull << 24) * 8 - 4);
}
static void fill(float *p, int n, uint64_t *s) {
    int i;
    for (i = 0; i < n; i++) p[i] = urand(s);
}
/* unit (b, j) of a [B, G·H] tensor copied to a [1, G] one */
static void unit_of(const float *src, int G, int b, int j, float *dst) {
    int k;
    for (k = 0; k < G; k++) dst[k] = src[b * G * GH + k * GH + j];
}

TEST lstm_units(void) {
    static float gx[GB * 4 * GH], gh[GB * 4 * GH], cp[GB * GH], hc[2 * GB * GH], dhc[2 * GB * GH];
    static float dgx[GB * 4 * GH], dgh[GB * 4 * GH], dcp[GB * GH], dgx0[GB * 4 * GH], dcp0[GB * GH];
    uint64_t seed = 7;
    int b, j, k;
    fill(gx, GB * 4 * GH, &seed), fill(gh, GB * 4 * GH, &seed), fill(cp, GB * GH, &seed);
    fill(dhc, 2 * GB * GH, &seed), fill(dgx, GB * 4 * GH, &seed), fill(dcp, GB * GH, &seed);
    memset(dgh, 0, sizeof dgh);
    memcpy(dgx0, dgx, sizeof dgx), memcpy(dcp0, dcp, sizeof dcp); /* the backward adds to what is there */
    ASSERT_EQ(0, gdl__cpu_lstm_gates(GB, GH, gx, gh, cp, hc));
    ASSERT_EQ(0, gdl__cpu_lstm_gates_backward(GB, GH, gx, gh, cp, dhc, dgx, dgh, dcp));
    for (b = 0; b < GB; b++)
        for (j = 0; j < GH; j++) {
            float x1[4], h1[4], c1 = cp[b * GH + j], o1[2], d1[2] = {dhc[b * GH + j], dhc[(GB + b) * GH + j]};
            float dx1[4], dh1[4] = {0, 0, 0, 0}, dc1 = dcp0[b * GH + j];
            double pre[4], i, f, g, o, c, tc, dc, d[4];
            unit_of(gx, 4, b, j, x1), unit_of(gh, 4, b, j, h1), unit_of(dgx0, 4, b, j, dx1);
            gdl__cpu_lstm_gates(1, 1, x1, h1, &c1, o1);
            gdl__cpu_lstm_gates_backward(1, 1, x1, h1, &c1, d1, dx1, dh1, &dc1);
            if (!same_bits(o1[0], hc[b * GH + j]) || !same_bits(o1[1], hc[(GB + b) * GH + j]) ||
                !same_bits(dc1, dcp[b * GH + j]))
                FAILf("LSTM unit (%d, %d): alone %.9g %.9g %.9g, in its row %.9g %.9g %.9g", b, j, o1[0], o1[1], dc1,
                      hc[b * GH + j], hc[(GB + b) * GH + j], dcp[b * GH + j]);
            for (k = 0; k < 4; k++)
                if (!same_bits(dx1[k], dgx[b * 4 * GH + k * GH + j]) || !same_bits(dh1[k], dgh[b * 4 * GH + k * GH + j]))
                    FAILf("LSTM unit (%d, %d) gate %d: alone %.9g %.9g, in its row %.9g %.9g", b, j, k, dx1[k],
                          dh1[k], dgx[b * 4 * GH + k * GH + j], dgh[b * 4 * GH + k * GH + j]);
            for (k = 0; k < 4; k++) pre[k] = (double)x1[k] + h1[k];
            i = ref_sigmoid(pre[0]), f = ref_sigmoid(pre[1]), g = tanh(pre[2]), o = ref_sigmoid(pre[3]);
            c = f * c1 + i * g, tc = tanh(c);
            dc = d1[1] + d1[0] * o * (1 - tc * tc);
            d[0] = dc * g * i * (1 - i), d[1] = dc * c1 * f * (1 - f), d[2] = dc * i * (1 - g * g);
            d[3] = d1[0] * tc * o * (1 - o);
            ASSERT_IN_RANGE(o * tc, hc[b * GH + j], 1e-6);
            ASSERT_IN_RANGE(c, hc[(GB + b) * GH + j], 1e-6);
            for (k = 0; k < 4; k++) {
                ASSERT_IN_RANGE(d[k], dgh[b * 4 * GH + k * GH + j], 2e-6 * (1 + fabs(d[k])));
                ASSERT_IN_RANGE(d[k], (double)dgx[b * 4 * GH + k * GH + j] - dgx0[b * 4 * GH + k * GH + j], 2e-6 * (1 + fabs(d[k])));
            }
            ASSERT_IN_RANGE(dc * f, (double)dcp[b * GH + j] - dcp0[b * GH + j], 2e-6 * (1 + fabs(dc)));
        }
    PASS();
}

TEST gru_units(void) {
    static float gx[GB * 3 * GH], gh[GB * 3 * GH], hp[GB * GH], h[GB * GH], dh[GB * GH];
    static float dgx[GB * 3 * GH], dgh[GB * 3 * GH], dhp[GB * GH];
    uint64_t seed = 11;
    int b, j, k;
    fill(gx, GB * 3 * GH, &seed), fill(gh, GB * 3 * GH, &seed), fill(hp, GB * GH, &seed), fill(dh, GB * GH, &seed);
    memset(dgx, 0, sizeof dgx), memset(dgh, 0, sizeof dgh), memset(dhp, 0, sizeof dhp);
    ASSERT_EQ(0, gdl__cpu_gru_gates(GB, GH, gx, gh, hp, h));
    ASSERT_EQ(0, gdl__cpu_gru_gates_backward(GB, GH, gx, gh, hp, dh, dgx, dgh, dhp));
    for (b = 0; b < GB; b++)
        for (j = 0; j < GH; j++) {
            float x1[3], h1[3], p1 = hp[b * GH + j], o1, d1 = dh[b * GH + j];
            float dx1[3] = {0, 0, 0}, dh1[3] = {0, 0, 0}, dp1 = 0;
            double r, z, n, hn, d[3];
            unit_of(gx, 3, b, j, x1), unit_of(gh, 3, b, j, h1);
            gdl__cpu_gru_gates(1, 1, x1, h1, &p1, &o1);
            gdl__cpu_gru_gates_backward(1, 1, x1, h1, &p1, &d1, dx1, dh1, &dp1);
            if (!same_bits(o1, h[b * GH + j]) || !same_bits(dp1, dhp[b * GH + j]))
                FAILf("GRU unit (%d, %d): alone %.9g %.9g, in its row %.9g %.9g", b, j, o1, dp1, h[b * GH + j],
                      dhp[b * GH + j]);
            for (k = 0; k < 3; k++)
                if (!same_bits(dx1[k], dgx[b * 3 * GH + k * GH + j]) || !same_bits(dh1[k], dgh[b * 3 * GH + k * GH + j]))
                    FAILf("GRU unit (%d, %d) gate %d: alone %.9g %.9g, in its row %.9g %.9g", b, j, k, dx1[k],
                          dh1[k], dgx[b * 3 * GH + k * GH + j], dgh[b * 3 * GH + k * GH + j]);
            r = ref_sigmoid((double)x1[0] + h1[0]), z = ref_sigmoid((double)x1[1] + h1[1]), hn = h1[2];
            n = tanh(x1[2] + r * hn);
            ASSERT_IN_RANGE((1 - z) * n + z * p1, o1, 1e-6);
            d[2] = d1 * (1 - z) * (1 - n * n);
            d[0] = d[2] * hn * r * (1 - r), d[1] = d1 * (p1 - n) * z * (1 - z);
            for (k = 0; k < 3; k++) ASSERT_IN_RANGE(d[k], dx1[k], 2e-6 * (1 + fabs(d[k])));
            ASSERT_IN_RANGE(d[2] * r, dh1[2], 2e-6 * (1 + fabs(d[2])));
            ASSERT_IN_RANGE(d1 * z, dp1, 1e-6);
        }
    PASS();
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_TEST(specials);
    RUN_TEST(sweep);
    RUN_TEST(lstm_units);
    RUN_TEST(gru_units);
    HARNESS_MAIN_END();
}
