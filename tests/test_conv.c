/* test_conv.c — the CPU convolution's two paths: the implicit
   GEMM (the columns gathered by the GEMM's packing, bias and activation in
   its epilogue, the input gradient a sample at a time) against im2col +
   GEMM + col2im, bit for bit, forward and both gradients, over strides,
   paddings, dilations, groups, kernel shapes, images smaller than the
   kernel's reach and the GEMM's tile and K-block edges, the input gradient
   both added to a zeroed one and written into one not yet set; the implicit path
   against a direct double loop; its bits at 1, 2 and 3 threads; its
   fallback when the GEMM's buffers are held by someone else; linear_act's
   epilogue against linear then the activation; the backend's bf16
   backwards set (not add to) an unset gradient when told; the bf16
   precision's convolutions (AMX or AVX512-BF16), with a kernel row's taps folded into the
   channels and not, against the direct loop and across thread counts. Also the 2x2 max
   pool's vector rows against a plain loop, and its backward. One translation
   unit with the implementation: it picks the path through gdl__conv_path. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CPU gdl_cpu()
#define NO_ACT -2 /* gdl_conv2d_ex; else a gdl_act for gdl_conv2d_act (square stride, padding, dilation) */

typedef struct {
    const char *name;
    int N, C, H, W, OC, KH, KW, sh, sw, ph, pw, dh, dw, groups, bias, act;
} conv_case;

static const conv_case cases[] = {
    /* name            N   C   H   W  OC KH KW sh sw ph pw dh dw  g  b  act */
    {"basic",          2,  3,  7,  6,  4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, NO_ACT},
    {"stride2",        2,  2,  9,  8,  3, 3, 3, 2, 2, 0, 0, 1, 1, 1, 1, NO_ACT},
    {"stride3x2",      2,  3, 11, 10,  5, 3, 2, 3, 2, 1, 0, 1, 1, 1, 1, NO_ACT},
    {"pad2",           1,  2,  5,  5,  3, 3, 3, 1, 1, 2, 2, 1, 1, 1, 1, NO_ACT},
    {"pad_past_reach", 1,  1,  4,  4,  2, 2, 2, 1, 1, 3, 3, 1, 1, 1, 0, NO_ACT},
    {"pad_uneven",     2,  2,  6,  7,  3, 3, 3, 1, 2, 0, 2, 1, 1, 1, 1, NO_ACT},
    {"dilation2",      2,  2,  9,  9,  3, 3, 3, 1, 1, 2, 2, 2, 2, 1, 1, NO_ACT},
    {"dilation3x2",    1,  3, 10,  7,  4, 2, 3, 2, 1, 1, 2, 3, 2, 1, 0, NO_ACT},
    {"groups3",        2,  6,  7,  7,  6, 3, 3, 1, 1, 1, 1, 1, 1, 3, 1, NO_ACT},
    {"depthwise",      2,  4,  6,  6,  4, 3, 3, 1, 1, 1, 1, 1, 1, 4, 1, NO_ACT},
    {"groups2_s2",     2,  4,  8,  8, 10, 3, 3, 2, 2, 1, 1, 1, 1, 2, 1, NO_ACT},
    {"ragged_tiles",   3,  5, 13, 11,  9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, NO_ACT},
    {"k_256",          2, 16,  7,  7,  5, 4, 4, 1, 1, 2, 2, 1, 1, 1, 1, NO_ACT},
    {"k_270",          2, 30,  6,  5,  7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, NO_ACT},
    {"k_513_groups2",  2, 114, 5,  4,  6, 3, 3, 1, 1, 1, 1, 1, 1, 2, 1, NO_ACT},
    {"pixels_380",     2,  2, 20, 19,  3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, NO_ACT},
    {"batch5",         5,  3,  8,  8,  4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, NO_ACT},
    {"batch1",         1,  4, 12, 12,  8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, NO_ACT},
    {"1x1_stride2",    2,  3,  7,  7,  4, 1, 1, 2, 2, 0, 0, 1, 1, 1, 1, NO_ACT},
    {"1x1_padded",     1,  3,  4,  4,  2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, NO_ACT},
    {"1x1_direct",     2,  3,  5,  5,  4, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, NO_ACT},
    {"kernel_1x3",     2,  2,  6,  9,  3, 1, 3, 1, 1, 0, 1, 1, 1, 1, 1, NO_ACT},
    {"kernel_5x1",     2,  2,  9,  6,  3, 5, 1, 1, 2, 2, 0, 1, 1, 1, 1, NO_ACT},
    {"one_output",     2,  3,  4,  4,  5, 4, 4, 1, 1, 0, 0, 1, 1, 1, 1, NO_ACT},
    {"width1",         2,  2,  5,  1,  3, 3, 1, 1, 1, 1, 0, 1, 1, 1, 1, NO_ACT},
    {"no_bias",        2,  3,  7,  6,  4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, NO_ACT},
    {"relu",           3,  4,  9,  9,  8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, GDL_ACT_RELU},
    {"relu_groups2",   2,  4,  7,  7,  6, 3, 3, 2, 2, 1, 1, 1, 1, 2, 1, GDL_ACT_RELU},
    {"relu_no_bias",   2,  3,  6,  6,  4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, GDL_ACT_RELU},
    {"gelu_tanh",      2,  3,  6,  6,  4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, GDL_ACT_GELU_TANH},
    {"gelu_erf_d2",    2,  3,  8,  8,  4, 3, 3, 1, 1, 2, 2, 2, 2, 1, 0, GDL_ACT_GELU},
    {"act_none",       2,  2,  9,  8,  3, 3, 3, 2, 2, 0, 0, 2, 2, 1, 1, GDL_ACT_NONE},
    {"cnn_conv2",      4, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, GDL_ACT_RELU},
    /* samples side by side in one GEMM (gdl__conv_span): tiles across samples, a short last task, pre kept */
    {"span_groups",   13,  6,  5,  6,  8, 3, 3, 1, 1, 1, 1, 1, 1, 2, 1, GDL_ACT_GELU},
    {"span_k_270",     9, 30,  6,  5,  9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, GDL_ACT_RELU},
    /* the direct forward kernel (gdl__dconv_pays: >= 64 rows of col and >= 16 channels a group): channel
       tiles with a ragged last, pixel tiles across samples, strides and dilations, groups, two K blocks */
    {"direct_tiles",   5,  8,  9, 11, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, NO_ACT},
    {"direct_s2_d2",   3, 16, 12, 10, 17, 3, 3, 2, 2, 2, 1, 2, 1, 1, 1, NO_ACT},
    {"direct_groups2", 4, 16,  8,  8, 40, 3, 3, 1, 1, 1, 1, 1, 1, 2, 1, GDL_ACT_RELU},
    {"direct_k306",    3, 34,  6,  7, 33, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, GDL_ACT_GELU},
    {"direct_5x5",     2,  3, 11,  9, 16, 5, 5, 1, 1, 2, 2, 1, 1, 1, 1, GDL_ACT_GELU_TANH},
    /* the direct weight gradient where col has fewer rows (gdl__dconv_gw_pays: a vector tile of output
       channels): one work item (a one-channel input), two with a ragged last and a ragged channel tile,
       groups; 5 samples in spans of 2 (paths 3 and 4) */
    {"direct_gw_c1",   5,  1, 12, 11, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, GDL_ACT_RELU},
    {"direct_gw_c3",   5,  3,  9,  9, 40, 3, 3, 2, 1, 1, 1, 1, 2, 1, 0, NO_ACT},
    {"direct_gw_g2",   3,  4,  7,  8, 64, 3, 3, 1, 1, 1, 1, 1, 1, 2, 1, NO_ACT},
    /* ... and its input gradient (stride 1, >= 16 input channels a group): groups with dilation and padding
       short of the reach, output channels in two K blocks */
    {"direct_gx_d2",   3, 32,  9,  8, 40, 3, 3, 1, 1, 2, 1, 2, 1, 2, 1, NO_ACT},
    {"direct_gx_oc260", 2, 16, 5,  6, 260, 3, 3, 1, 1, 0, 1, 1, 1, 1, 1, NO_ACT},
    /* ... on maps under 16 pixels too (3x3 and 2x2 outputs), where the implicit GEMM would decline (and the
       weight gradient's sums stay in registers through a chunk: gdl__dconv_kernel_ns) */
    {"direct_gx_3x3",  5, 32,  3,  3, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, NO_ACT},
    {"direct_gx_2x2",  3, 16,  2,  2, 17, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, GDL_ACT_RELU},
    /* the bf16 precision's tile-unit convolutions (stride 1, one group, >= 8 input and 16 output channels):
       input channels padded to 32, output channels not a multiple of 32, dilation, no padding, 5x5, a
       one-pixel-wide map, the speedrun's second layer; the weight gradient's stacked samples (gdl__agw_group:
       16 3x3 maps a group, a chunk of 16 then one of 4; 7x7 maps 8 a group, the last group short) */
    {"amx_c33_o40",    5, 33,  9, 10, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, GDL_ACT_RELU},
    {"amx_d2_p2",      2, 16, 11,  9, 20, 3, 3, 1, 1, 2, 2, 2, 2, 1, 1, NO_ACT},
    {"amx_k5_p0",      3, 40,  8,  7, 16, 5, 5, 1, 1, 0, 0, 1, 1, 1, 0, NO_ACT},
    {"amx_width1",     2, 16,  5,  1, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, NO_ACT},
    {"amx_c9_28",      3,  9, 28, 28, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, NO_ACT},
    {"amx_3x3_n20",   20, 32,  3,  3, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, NO_ACT},
    {"amx_7x7_n11",   11, 24,  7,  7, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, GDL_ACT_GELU},
};

typedef struct {
    gdl_tensor *x, *w, *b, *r; /* r: the loss is sum(y * r), so that gy = r */
    int OH, OW;
} conv_io;

/* what one run gives, copied out */
typedef struct {
    float *y, *gx, *gw, *gb;
} conv_res;

static int out_size(int in, int p, int d, int k, int s) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

static int make_io(const conv_case *c, conv_io *io) {
    int64_t sx[4], sw[4], sb[1], sy[4];
    sx[0] = c->N; sx[1] = c->C; sx[2] = c->H; sx[3] = c->W;
    sw[0] = c->OC; sw[1] = c->C / c->groups; sw[2] = c->KH; sw[3] = c->KW;
    sb[0] = c->OC;
    io->OH = out_size(c->H, c->ph, c->dh, c->KH, c->sh);
    io->OW = out_size(c->W, c->pw, c->dw, c->KW, c->sw);
    sy[0] = c->N; sy[1] = c->OC; sy[2] = io->OH; sy[3] = io->OW;
    gdl_manual_seed(26);
    io->x = gdl_randn(4, sx, CPU);
    io->w = gdl_randn(4, sw, CPU);
    io->b = c->bias ? gdl_randn(1, sb, CPU) : NULL;
    io->r = gdl_randn(4, sy, CPU);
    if (!io->x || !io->w || (c->bias && !io->b) || !io->r) return -1;
    gdl_set_requires_grad(io->x, 1);
    gdl_set_requires_grad(io->w, 1);
    if (io->b) gdl_set_requires_grad(io->b, 1);
    return 0;
}

static void free_io(conv_io *io) {
    gdl_free(io->x); gdl_free(io->w); gdl_free(io->b); gdl_free(io->r);
}

static float *copy_of(const gdl_tensor *t) {
    float *p = (float *)malloc(sizeof(float) * (size_t)(t->numel ? t->numel : 1));
    if (p) memcpy(p, t->data, sizeof(float) * (size_t)t->numel);
    return p;
}

static void free_res(conv_res *r) {
    free(r->y); free(r->gx); free(r->gw); free(r->gb);
    memset(r, 0, sizeof *r);
}

/* One forward and backward on path (gdl__conv_path) with `threads` threads; the results copied into *res.
   fresh: the convolution's input is x times 1, an intermediate, whose gradient the backward writes rather
   than adds to (conv_implicit's pass 3); else x itself, whose gradient is zeros, added to (pass 2). */
static int run(const conv_case *c, conv_io *io, int path, int threads, int fresh, conv_res *res) {
    int s[2], p[2], d[2];
    gdl_tensor *x, *y, *loss;
    memset(res, 0, sizeof *res);
    gdl__conv_path = path >= 3 ? 1 : path;
#ifdef GDL__DCONV
    gdl__dconv_gw_span = path == 3 ? 2 : path == 4 ? 1 : 0;
#endif
    gdl_set_num_threads(threads);
    gdl_arena_reset();
    if (gdl_zero_grad_tensor(io->x) < 0 || gdl_zero_grad_tensor(io->w) < 0 || (io->b && gdl_zero_grad_tensor(io->b) < 0))
        return -1;
    s[0] = c->sh; s[1] = c->sw; p[0] = c->ph; p[1] = c->pw; d[0] = c->dh; d[1] = c->dw;
    if (!(x = fresh ? gdl_mul_scalar(io->x, 1.0) : io->x)) return -1;
    y = c->act == NO_ACT ? gdl_conv2d_ex(x, io->w, io->b, s, p, d, c->groups)
                         : gdl_conv2d_act(x, io->w, io->b, c->sh, c->ph, c->dh, c->groups, (gdl_act)c->act);
    loss = y ? gdl_sum(gdl_mul(y, io->r)) : NULL;
    if (!loss || gdl_backward(loss) < 0) return -1;
    res->y = copy_of(y);
    res->gx = copy_of(io->x->grad);
    res->gw = copy_of(io->w->grad);
    res->gb = io->b ? copy_of(io->b->grad) : NULL;
    gdl__conv_path = -1;
#ifdef GDL__DCONV
    gdl__dconv_gw_span = 0;
#endif
    return res->y && res->gx && res->gw && (!io->b || res->gb) ? 0 : -1;
}

/* the first index where a and b differ in their bits, or -1 */
static int64_t first_diff(const float *a, const float *b, int64_t n) {
    int64_t i;
    for (i = 0; i < n; i++)
        if (memcmp(a + i, b + i, sizeof(float))) return i;
    return -1;
}

static enum harness_result same_bits(const char *what, const conv_case *c, const conv_io *io, const conv_res *a,
                                     const conv_res *b) {
    const int64_t ny = (int64_t)c->N * c->OC * io->OH * io->OW;
    int64_t i;
    if ((i = first_diff(a->y, b->y, ny)) >= 0)
        FAILf("%s: %s: y[%lld] %.9g vs %.9g", c->name, what, (long long)i, a->y[i], b->y[i]);
    if ((i = first_diff(a->gx, b->gx, io->x->numel)) >= 0)
        FAILf("%s: %s: gx[%lld] %.9g vs %.9g", c->name, what, (long long)i, a->gx[i], b->gx[i]);
    if ((i = first_diff(a->gw, b->gw, io->w->numel)) >= 0)
        FAILf("%s: %s: gw[%lld] %.9g vs %.9g", c->name, what, (long long)i, a->gw[i], b->gw[i]);
    if (io->b && (i = first_diff(a->gb, b->gb, io->b->numel)) >= 0)
        FAILf("%s: %s: gb[%lld] %.9g vs %.9g", c->name, what, (long long)i, a->gb[i], b->gb[i]);
    PASS();
}

/* The direct loop in double: y before the activation; with gy (the
   gradient at the output, the activation's derivative applied) gx, gw and
   gb. Each with the sum of the absolute values of its terms, for the
   tolerance. */
typedef struct {
    double *y, *ya, *gx, *gxa, *gw, *gwa, *gb, *gba;
} conv_ref;

static void ref_conv(const conv_case *c, const conv_io *io, const double *gy, conv_ref *R) {
    const float *x = (const float *)io->x->data, *w = (const float *)io->w->data;
    const float *b = io->b ? (const float *)io->b->data : NULL;
    const int Cg = c->C / c->groups, OCg = c->OC / c->groups;
    int n, oc, oh, ow, ci, kh, kw;
    for (n = 0; n < c->N; n++)
        for (oc = 0; oc < c->OC; oc++)
            for (oh = 0; oh < io->OH; oh++)
                for (ow = 0; ow < io->OW; ow++) {
                    const int64_t o = (((int64_t)n * c->OC + oc) * io->OH + oh) * io->OW + ow;
                    double acc = b ? b[oc] : 0, mag = b ? fabs(b[oc]) : 0;
                    for (ci = 0; ci < Cg; ci++)
                        for (kh = 0; kh < c->KH; kh++)
                            for (kw = 0; kw < c->KW; kw++) {
                                const int ih = oh * c->sh - c->ph + kh * c->dh, iw = ow * c->sw - c->pw + kw * c->dw;
                                const int cc = oc / OCg * Cg + ci;
                                int64_t xi, wi;
                                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                                xi = (((int64_t)n * c->C + cc) * c->H + ih) * c->W + iw;
                                wi = (((int64_t)oc * Cg + ci) * c->KH + kh) * c->KW + kw;
                                acc += (double)x[xi] * w[wi];
                                mag += fabs((double)x[xi] * w[wi]);
                                if (gy) {
                                    R->gx[xi] += gy[o] * w[wi];
                                    R->gxa[xi] += fabs(gy[o] * w[wi]);
                                    R->gw[wi] += gy[o] * x[xi];
                                    R->gwa[wi] += fabs(gy[o] * x[xi]);
                                }
                            }
                    R->y[o] = acc;
                    R->ya[o] = mag;
                    if (gy && b) {
                        R->gb[oc] += gy[o];
                        R->gba[oc] += fabs(gy[o]);
                    }
                }
}

/* The direct loop's tolerance, a fraction of the sum of the products' magnitudes: f32 sums; the bf16
   precision's test sets 8e-3 (bf16 keeps 8 significant bits: each operand within 2^-8 of its value, a
   product of two within 2^-7). */
static double near_tol = 1e-5;

static enum harness_result near(const char *c, const char *what, const float *got, const double *ref,
                                const double *mag, int64_t n) {
    int64_t i;
    for (i = 0; i < n; i++)
        if (!(fabs(got[i] - ref[i]) <= near_tol * mag[i] + 1e-6))
            FAILf("%s: %s[%lld] = %.9g, the direct loop's %.9g (its products' magnitudes %.9g)", c, what, (long long)i,
                  got[i], ref[i], mag[i]);
    PASS();
}

/* The implicit path against the direct loop: y, then gx, gw, gb from gy = r
   (times ReLU's derivative at the output). GELU is left to the bitwise
   comparison with im2col and to test_gradcheck's finite differences. */
static enum harness_result against_direct_loop(const conv_case *c, const conv_io *io, const conv_res *res) {
    const int64_t ny = (int64_t)c->N * c->OC * io->OH * io->OW, nx = io->x->numel, nw = io->w->numel;
    const float *r = (const float *)io->r->data;
    double *buf = (double *)calloc((size_t)(3 * ny + 2 * nx + 2 * nw + 2 * c->OC), sizeof(double));
    conv_ref R;
    enum harness_result hr = HARNESS_PASS;
    int64_t i;
    if (!buf) FAILm("out of memory");
    R.y = buf; R.ya = R.y + ny; R.gx = R.ya + ny; R.gxa = R.gx + nx; R.gw = R.gxa + nx; R.gwa = R.gw + nw;
    R.gb = R.gwa + nw; R.gba = R.gb + c->OC;
    {
        double *gy = R.gba + c->OC;
        for (i = 0; i < ny; i++) /* ReLU's derivative from the output itself: no tie with the double's sign */
            gy[i] = c->act == GDL_ACT_RELU && !(res->y[i] > 0) ? 0 : r[i];
        ref_conv(c, io, gy, &R);
        for (i = 0; i < ny && hr == HARNESS_PASS; i++) {
            const double want = c->act == GDL_ACT_RELU ? (R.y[i] > 0 ? R.y[i] : 0) : R.y[i];
            if (!(fabs(res->y[i] - want) <= near_tol * R.ya[i] + 1e-6)) {
                free(buf);
                FAILf("%s: y[%lld] = %.9g, the direct loop's %.9g", c->name, (long long)i, res->y[i], want);
            }
        }
    }
    hr = near(c->name, "gx", res->gx, R.gx, R.gxa, nx);
    if (hr == HARNESS_PASS) hr = near(c->name, "gw", res->gw, R.gw, R.gwa, nw);
    if (hr == HARNESS_PASS && io->b) hr = near(c->name, "gb", res->gb, R.gb, R.gba, c->OC);
    free(buf);
    return hr;
}

/* One case: im2col (2 threads) is the reference; the implicit path (with
   the direct kernels where they suit) at 1, 2 and 3 threads, the path
   chosen by shape and the implicit GEMM alone give its bits; the implicit
   path agrees with the direct loop. */
TEST conv_paths_agree(const conv_case *c) {
    /* path 2: the implicit GEMM where path 1 would take a direct kernel; -1: the path the shape picks; 3 and
       4: path 1 with the direct weight gradient's spans of 2 samples and of 1 (several runs, a short last);
       fresh (run): the input gradient written, not added to a zeroed one */
    static const int threads[] = {1, 2, 3, 2, 2, 2, 3}, paths[] = {1, 1, 1, -1, 2, 3, 4}, fresh[] = {0, 1, 0, 1, 1, 0, 1};
    conv_io io;
    conv_res old, cur;
    enum harness_result hr = HARNESS_PASS;
    size_t t;
    char what[64];
    if (make_io(c, &io) < 0) FAILm(gdl_last_error());
    if (run(c, &io, 0, 2, 0, &old) < 0) {
        free_res(&old);
        free_io(&io); /* (frees set no error) */
        FAILf("%s: im2col: %s", c->name, gdl_last_error());
    }
    for (t = 0; t < sizeof threads / sizeof *threads && hr == HARNESS_PASS; t++) {
        if (run(c, &io, paths[t], threads[t], fresh[t], &cur) < 0) {
            hr = harness_fail_(__FILE__, __LINE__, "%s: path %d: %s", c->name, paths[t], gdl_last_error());
        } else {
            snprintf(what, sizeof what, "path %d at %d threads%s against im2col", paths[t], threads[t],
                     fresh[t] ? " (gx written)" : "");
            hr = same_bits(what, c, &io, &old, &cur);
            if (hr == HARNESS_PASS && t == 0 && c->act != GDL_ACT_GELU && c->act != GDL_ACT_GELU_TANH)
                hr = against_direct_loop(c, &io, &cur);
        }
        free_res(&cur);
    }
    free_res(&old);
    free_io(&io);
    gdl_set_num_threads(0);
    return hr;
}

/* The 2x2 stride-2 max pool's own path (selects by bit masks; 16 outputs at a time on AVX-512, 8 on AVX2,
   the last ones masked; tested here since this program runs on each CPU path) against a plain first-max,
   first-NaN loop, on planes full of ties, NaNs and zeros of both signs, with odd sizes (a last row and
   column left out): 5 outputs a row (one masked chunk), 18 (whole chunks and 2), 32 (whole ones), 14 (the
   CNNs' 28 -> 14). Its backward into an unset gradient against the adds into zeros. */
static int maxpool2x2_bad(int H, int W) {
    const int N = 3, C = 5, OH = H / 2, OW = W / 2;
    static const float vals[] = {0.0f, -0.0f, 1.0f, 1.0f, -2.0f, (float)NAN, -(float)NAN, (float)INFINITY,
                                 -(float)INFINITY, 3.0f};
    float *x = (float *)malloc(sizeof(float) * N * C * H * W), *y = (float *)malloc(sizeof(float) * N * C * OH * OW);
    float *gx = (float *)malloc(sizeof(float) * N * C * H * W), *want = (float *)malloc(sizeof(float) * N * C * H * W);
    int32_t *idx = (int32_t *)malloc(sizeof(int32_t) * N * C * OH * OW);
    gdl_conv_geom g;
    int i, p, oh, ow, bad = 0;
    uint64_t r = 9;
    if (!x || !y || !gx || !want || !idx) {
        free(x), free(y), free(gx), free(want), free(idx);
        return -1;
    }
    for (i = 0; i < N * C * H * W; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = vals[(r >> 33) % (sizeof vals / sizeof *vals)];
    }
    memset(&g, 0, sizeof g);
    g.N = N; g.C = C; g.H = H; g.W = W; g.KH = g.KW = 2; g.SH = g.SW = 2; g.DH = g.DW = 1; g.OH = OH; g.OW = OW;
    gdl__cpu_maxpool(GDL_F32, &g, x, y, idx);
    for (p = 0; p < N * C; p++)
        for (oh = 0; oh < OH; oh++)
            for (ow = 0; ow < OW; ow++) {
                const float *xp = x + p * H * W;
                int k, bi = 2 * oh * W + 2 * ow;
                float best = xp[bi], got = y[(p * OH + oh) * OW + ow];
                for (k = 1; k < 4; k++) {
                    int j = (2 * oh + k / 2) * W + 2 * ow + k % 2;
                    if (xp[j] > best || (xp[j] != xp[j] && best == best)) {
                        best = xp[j];
                        bi = j;
                    }
                }
                bad += idx[(p * OH + oh) * OW + ow] != bi || memcmp(&best, &got, sizeof best) != 0;
            }
    /* the backward into an unset gx against zeros and adds at the indices, with y (zeros of both signs,
       NaNs) as the output's gradient; gx starts as NaNs, so that an input left unwritten shows */
    for (i = 0; i < N * C * H * W; i++) {
        gx[i] = (float)NAN;
        want[i] = 0.0f;
    }
    for (p = 0; p < N * C; p++)
        for (i = 0; i < OH * OW; i++) want[p * H * W + idx[p * OH * OW + i]] += y[p * OH * OW + i];
    gdl__cpu_maxpool_backward(GDL_F32, &g, y, idx, gx, 0);
    bad += memcmp(gx, want, sizeof(float) * (size_t)N * C * H * W) != 0;
    free(x);
    free(y);
    free(gx);
    free(want);
    free(idx);
    return bad;
}
TEST maxpool2x2_path(void) {
    ASSERT_EQm("9 x 11: outputs (bits) or indices differ from the first-max, first-NaN rule, or gradients from the "
               "adds", 0, maxpool2x2_bad(9, 11));
    ASSERT_EQm("6 x 37: outputs, indices or gradients differ", 0, maxpool2x2_bad(6, 37));
    ASSERT_EQm("4 x 64: outputs, indices or gradients differ", 0, maxpool2x2_bad(4, 64));
    ASSERT_EQm("7 x 28: outputs, indices or gradients differ", 0, maxpool2x2_bad(7, 28));
    PASS();
}

/* The bf16 precision (gdl_cpu_set_fp32_precision): the direct loop's results to bf16's rounding, the same
   bits at 1, 2 and 3 threads, and, where the tile unit's convolution takes the case, other bits than
   "ieee" (the path ran). Skipped where neither AMX nor AVX512-BF16 is. */
static enum harness_result bf16_case(const conv_case *c, int tile_unit) {
    conv_io io;
    conv_res ieee, one, cur;
    enum harness_result hr = HARNESS_PASS;
    int t;
    if (gdl_cpu_set_fp32_precision("bf16") < 0) SKIPm("no bf16 precision here (neither AMX nor AVX512-BF16)");
    gdl_cpu_set_fp32_precision("ieee");
    if (make_io(c, &io) < 0) FAILm(gdl_last_error());
    if (run(c, &io, -1, 2, 0, &ieee) < 0) FAILf("%s: ieee: %s", c->name, gdl_last_error());
    gdl_cpu_set_fp32_precision("bf16");
    if (run(c, &io, -1, 1, 0, &one) < 0) hr = harness_fail_(__FILE__, __LINE__, "%s: bf16: %s", c->name, gdl_last_error());
    if (hr == HARNESS_PASS && c->act != GDL_ACT_GELU && c->act != GDL_ACT_GELU_TANH) {
        near_tol = 8e-3;
        hr = against_direct_loop(c, &io, &one);
        near_tol = 1e-5;
    }
    for (t = 2; t <= 3 && hr == HARNESS_PASS; t++) {
        if (run(c, &io, -1, t, t == 3, &cur) < 0)
            hr = harness_fail_(__FILE__, __LINE__, "%s: bf16, %d threads: %s", c->name, t, gdl_last_error());
        else
            hr = same_bits(t == 2 ? "bf16 at 2 threads against 1" : "bf16 at 3 threads, gx written, against 1", c, &io, &one,
                           &cur);
        free_res(&cur);
    }
    if (hr == HARNESS_PASS && tile_unit && first_diff(one.y, ieee.y, (int64_t)c->N * c->OC * io.OH * io.OW) < 0)
        hr = harness_fail_(__FILE__, __LINE__, "%s: bf16 gave ieee's bits: the tile unit did not run", c->name);
    gdl_cpu_set_fp32_precision("ieee");
    free_res(&ieee);
    free_res(&one);
    free_io(&io);
    gdl_set_num_threads(0);
    return hr;
}
#ifdef GDL__GEMM_BF16
/* Where a kernel row's taps fold into an odd number of channels (gdl__aconv_fold), the forward's bits
   differ from the unfolded pass's: a dot step's pair of products straddles two taps. (With an even
   number the products come in the unfolded order, the same pairs, and the bits are the same.) */
static enum harness_result fold_ran(const conv_case *c) {
    conv_io io;
    conv_res fold, flat;
    enum harness_result hr = HARNESS_PASS;
    if (make_io(c, &io) < 0) FAILm(gdl_last_error());
    gdl_cpu_set_fp32_precision("bf16");
    if (run(c, &io, -1, 2, 0, &fold) < 0) hr = harness_fail_(__FILE__, __LINE__, "%s: %s", c->name, gdl_last_error());
    gdl__aconv_fold_on = 0;
    if (hr == HARNESS_PASS && run(c, &io, -1, 2, 0, &flat) < 0)
        hr = harness_fail_(__FILE__, __LINE__, "%s: unfolded: %s", c->name, gdl_last_error());
    gdl__aconv_fold_on = 1;
    if (hr == HARNESS_PASS && first_diff(fold.y, flat.y, (int64_t)c->N * c->OC * io.OH * io.OW) < 0)
        hr = harness_fail_(__FILE__, __LINE__, "%s: the folded forward gave the unfolded bits: no fold ran", c->name);
    gdl_cpu_set_fp32_precision("ieee");
    free_res(&fold);
    free_res(&flat);
    free_io(&io);
    gdl_set_num_threads(0);
    return hr;
}
#endif

/* ... on the path's own choice of where it pays, then, on AVX512-BF16 (whose floor keeps it off 3 x 3 maps:
   src/cpu/conv_pool.h), with every case it can take taken, as on the tile unit; where the taps of a kernel
   row fold into the channels, unfolded too */
TEST conv_bf16_precision(const conv_case *c) {
    const int tile_unit = c->sh == 1 && c->sw == 1 && c->groups == 1 && c->C >= 8 && c->OC >= 16;
#ifdef GDL__GEMM_BF16
    const int folds = tile_unit && (gdl__aconv_fold(c->C, c->KW) > 1 || gdl__aconv_fold(c->OC, c->KW) > 1);
    enum harness_result hr = bf16_case(c, tile_unit && gdl__aconv_fill_min == 0);
    gdl__aconv_fill_min = 0;
    if (hr == HARNESS_PASS && GDL__ACONV_FILL > 0) hr = bf16_case(c, tile_unit);
    if (hr == HARNESS_PASS && folds) {
        gdl__aconv_fold_on = 0;
        hr = bf16_case(c, tile_unit);
        gdl__aconv_fold_on = 1;
    }
    if (hr == HARNESS_PASS && folds && c->C % 2 && gdl__aconv_fold(c->C, c->KW) > 1 &&
        gdl_cpu_set_fp32_precision("bf16") == 0)
        hr = fold_ran(c);
    gdl__aconv_fill_min = GDL__ACONV_FILL;
    return hr;
#else
    return bf16_case(c, tile_unit);
#endif
}

/* With the GEMM's buffers held (another thread's GEMM, say), the entry
   declines and the op runs im2col: the same bits. */
TEST conv_falls_back_when_the_buffers_are_held(void) {
    const conv_case *c = &cases[11]; /* ragged_tiles */
    conv_io io;
    conv_res old, cur;
    enum harness_result hr;
    gdl_conv_geom g;
    float xs[4] = {1, 2, 3, 4}, ws[1] = {1}, ys[4] = {0, 0, 0, 0};
#ifndef GDL__POOL
    SKIPm("no thread pool in this build (GPUDL_NO_THREADS): the buffers are never held");
#endif
    if (make_io(c, &io) < 0) FAILm(gdl_last_error());
    if (run(c, &io, 0, 2, 0, &old) < 0) FAILf("im2col: %s", gdl_last_error());
    memset(&g, 0, sizeof g);
    g.N = 1; g.C = 1; g.H = g.W = 2; g.KH = g.KW = 1; g.SH = g.SW = g.DH = g.DW = 1; g.OH = g.OW = 2;
    ASSERT(gdl__pool_acquire());
    /* held: conv_implicit declines, having written nothing */
    gdl__conv_path = 1;
    ASSERT_EQ(1, gdl__cpu_conv_implicit(0, &g, 1, 1, -1, xs, ws, NULL, NULL, ys, NULL));
    gdl__conv_path = -1;
    ASSERT_IN_RANGE(0, ys[0] + ys[1] + ys[2] + ys[3], 0);
    hr = run(c, &io, 1, 2, 0, &cur) < 0 ? HARNESS_FAIL : HARNESS_PASS;
    gdl__pool_release();
    if (hr == HARNESS_PASS) hr = same_bits("implicit with the buffers held", c, &io, &old, &cur);
    else FAILf("implicit, buffers held: %s", gdl_last_error());
    free_res(&old);
    free_res(&cur);
    free_io(&io);
    return hr;
}

/* linear_act's epilogue (bias per column, pre kept for GELU) against
   linear then the activation, past a K block (K 300) and on ragged tiles. */
TEST linear_act_epilogue_matches_unfused(void) {
    static const int acts[] = {GDL_ACT_NONE, GDL_ACT_RELU, GDL_ACT_GELU_TANH, GDL_ACT_GELU};
    int64_t sx[2] = {37, 300}, sw[2] = {45, 300}, sb[1] = {45};
    gdl_tensor *x, *w, *b;
    size_t a;
    gdl_manual_seed(7);
    x = gdl_randn(2, sx, CPU); w = gdl_randn(2, sw, CPU); b = gdl_randn(1, sb, CPU);
    ASSERT(x && w && b);
    gdl_set_requires_grad(w, 1);
    for (a = 0; a < sizeof acts / sizeof *acts; a++) {
        gdl_tensor *f, *u;
        int64_t i;
        gdl_arena_reset();
        f = gdl_linear_act(x, w, b, (gdl_act)acts[a]);
        u = gdl_linear(x, w, b);
        if (acts[a] == GDL_ACT_RELU) u = gdl_relu(u);
        else if (acts[a] == GDL_ACT_GELU_TANH) u = gdl_gelu(u, 1);
        else if (acts[a] == GDL_ACT_GELU) u = gdl_gelu(u, 0);
        ASSERT(f && u);
        for (i = 0; i < f->numel; i++)
            if (memcmp((float *)f->data + i, (float *)u->data + i, sizeof(float)))
                FAILf("act %d: y[%lld] %.9g fused, %.9g unfused", acts[a], (long long)i, ((float *)f->data)[i],
                      ((float *)u->data)[i]);
    }
    gdl_free(x); gdl_free(w); gdl_free(b);
    PASS();
}

/* The fused ReLU's gradient (gdl__relu_grad_rows: in vectors on AVX2 and
   AVX-512, scalar on their tails and on the other paths) against relu's own
   backward: x, w and b's gradients bit for bit. 37 x 45 outputs: vector
   loops and their tails; about half the pre-activations negative. */
TEST relu_gradient_matches_unfused(void) {
    int64_t sx[2] = {37, 300}, sw[2] = {45, 300}, sb[1] = {45}, sr[2] = {37, 45};
    gdl_tensor *x, *w, *b, *r, *t[2];
    float *g[2][3];
    int64_t n[3];
    int k, p;
    gdl_manual_seed(11);
    x = gdl_randn(2, sx, CPU); w = gdl_randn(2, sw, CPU); b = gdl_randn(1, sb, CPU); r = gdl_randn(2, sr, CPU);
    ASSERT(x && w && b && r);
    gdl_set_requires_grad(x, 1); gdl_set_requires_grad(w, 1); gdl_set_requires_grad(b, 1);
    for (k = 0; k < 2; k++) {
        gdl_arena_reset();
        ASSERT(gdl_zero_grad_tensor(x) == 0 && gdl_zero_grad_tensor(w) == 0 && gdl_zero_grad_tensor(b) == 0);
        t[k] = k == 0 ? gdl_linear_act(x, w, b, GDL_ACT_RELU) : gdl_relu(gdl_linear(x, w, b));
        ASSERT(t[k] && gdl_backward(gdl_sum(gdl_mul(t[k], r))) == 0);
        g[k][0] = copy_of(x->grad); g[k][1] = copy_of(w->grad); g[k][2] = copy_of(b->grad);
        ASSERT(g[k][0] && g[k][1] && g[k][2]);
    }
    n[0] = x->numel; n[1] = w->numel; n[2] = b->numel;
    for (p = 0; p < 3; p++) {
        int64_t i;
        for (i = 0; i < n[p]; i++)
            if (memcmp(g[0][p] + i, g[1][p] + i, sizeof(float)))
                FAILf("gradient %d [%lld]: %.9g fused, %.9g unfused", p, (long long)i, g[0][p][i], g[1][p][i]);
    }
    for (k = 0; k < 2; k++)
        for (p = 0; p < 3; p++) free(g[k][p]);
    gdl_free(x); gdl_free(w); gdl_free(b); gdl_free(r);
    PASS();
}

/* The backend's bf16 backwards that take accumulate (unary_backward, maxpool_backward's beta,
   batchnorm_backward): with 0, a gradient holding old values comes out as the one accumulated into
   zeros, bit for bit -- the old values are not read. */
static uint16_t bf16_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16); /* truncated: any bf16 values will do */
}
TEST lowp_backwards_set_when_not_accumulating(void) {
    const gdl_kernels *k = &gdl__cpu_backend()->k;
    enum { n = 48 };
    uint16_t x[n], y[n], gy[n], set[n], added[n];
    float mean[3], invstd[3];
    int32_t idx[n];
    gdl_conv_geom g = {1, 3, 4, 4, 2, 2, 2, 2, 0, 0, 1, 1, 2, 2};
    int i, which;
    for (i = 0; i < n; i++) {
        x[i] = bf16_of((float)((i * 7) % 11) - 5.25f);
        gy[i] = bf16_of(0.5f + (float)(i % 5));
    }
    for (which = 0; which < 3; which++) {
        for (i = 0; i < n; i++) set[i] = bf16_of(2.0f), added[i] = 0;
        if (which == 0) {
            ASSERT(k->unary(GDL_BF16, GDL_UN_SIGMOID, n, x, y, 0) == 0);
            ASSERT(k->unary_backward(GDL_BF16, GDL_UN_SIGMOID, n, x, y, gy, set, 0, 0) == 0);
            ASSERT(k->unary_backward(GDL_BF16, GDL_UN_SIGMOID, n, x, y, gy, added, 0, 1) == 0);
        } else if (which == 1) { /* 3 planes of 4 x 4, windows 2 x 2: gy's first 12 values */
            ASSERT(k->maxpool(GDL_BF16, &g, x, y, idx) == 0);
            ASSERT(k->maxpool_backward(GDL_BF16, &g, gy, idx, set, 0) == 0);
            ASSERT(k->maxpool_backward(GDL_BF16, &g, gy, idx, added, 1) == 0);
        } else { /* [2, 3, 8] */
            ASSERT(k->batchnorm(GDL_BF16, 2, 3, 8, x, NULL, NULL, y, mean, invstd, NULL, NULL, 1, 0.1, 1e-5, 0, NULL) == 0);
            ASSERT(k->batchnorm_backward(GDL_BF16, 2, 3, 8, x, gy, NULL, NULL, mean, invstd, 1, set, NULL, NULL, 0, 0) == 0);
            ASSERT(k->batchnorm_backward(GDL_BF16, 2, 3, 8, x, gy, NULL, NULL, mean, invstd, 1, added, NULL, NULL, 1, 0) ==
                   0);
        }
        for (i = 0; i < n; i++)
            if (set[i] != added[i]) FAILf("entry %d: gx[%d] 0x%04x set, 0x%04x added to zeros", which, i, set[i], added[i]);
    }
    PASS();
}

SUITE(conv) {
    size_t i;
    for (i = 0; i < sizeof cases / sizeof *cases; i++) RUN_TEST_NAMED(cases[i].name, conv_paths_agree, &cases[i]);
    for (i = 0; i < sizeof cases / sizeof *cases; i++) {
        char name[64];
        snprintf(name, sizeof name, "bf16_%s", cases[i].name);
        RUN_TEST_NAMED(name, conv_bf16_precision, &cases[i]);
    }
    RUN_TEST(conv_falls_back_when_the_buffers_are_held);
    RUN_TEST(linear_act_epilogue_matches_unfused);
    RUN_TEST(relu_gradient_matches_unfused);
    RUN_TEST(lowp_backwards_set_when_not_accumulating);
    RUN_TEST(maxpool2x2_path);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_SUITE(conv);
    gdl_shutdown();
    HARNESS_MAIN_END();
}
