/* bench/conv.c — the CPU convolution kernels one pass at a time: for each
   3x3 convolution of the speedrun's net (examples/speedrun.c, batch 256) and
   the CNN recipe's (bench/train.c rcnn, batch 128), resnet10's stride-1
   ones (three convolutions each, 84 % of its FLOPs) and examples/cnn.c's
   (batch 64), the forward, the input
   gradient and the weight gradient, in ms and as a share of the measured
   FMA peak of the threads (gdl_cpu_peak_gflops).

   Build and run (from the repository root):

       make build/bench_conv
       GPUDL_NUM_THREADS=2 build/bench_conv [name ...]

   Arguments pick the shapes whose name contains one of them; BENCH_CONV_PASS
   (forward, weight or input) one pass; BENCH_FP32_PRECISION=bf16 the tile
   unit's passes (gdl_cpu_set_fp32_precision; the %peak column stays the
   FMA peak's). Each pass is
   run as the op layer runs it (src/ops/conv_pool.h): the backend's
   conv_implicit (the direct kernel or the implicit GEMM, by shape), or,
   where it declines, im2col + the batched GEMM (+ col2im). The "path"
   column says which. Timing: one warm-up call, then the calls that last
   >= 40 ms, 5 such stretches; the fastest (on a machine shared with busy
   processes the least disturbed). The FLOPs are 2*N*OC*OH*OW*C*KH*KW
   a pass (what the products would cost without the padding's zeros), so
   a kernel that skips no zeros is charged for them. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "bench_cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    int N, C, OC, HW;
    int frozen, no_gx; /* no gradients (the speedrun's whitening); no input gradient (its input is the data's) */
} bench_conv_shape;

static const bench_conv_shape bench_conv_shapes[] = {
    {"speedrun 1->9 @28", 256, 1, 9, 28, 1, 1}, {"speedrun 9->32 @28", 256, 9, 32, 28, 0, 1},
    {"speedrun 32->32 @14", 256, 32, 32, 14, 0, 0}, {"speedrun 32->64 @14", 256, 32, 64, 14, 0, 0},
    {"speedrun 64->64 @7", 256, 64, 64, 7, 0, 0},   {"speedrun 64->128 @7", 256, 64, 128, 7, 0, 0},
    {"speedrun 128->128 @3", 256, 128, 128, 3, 0, 0}, {"rcnn 1->32 @28", 128, 1, 32, 28, 0, 1},
    {"rcnn 32->64 @14", 128, 32, 64, 14, 0, 0},     {"rcnn 64->128 @7", 128, 64, 128, 7, 0, 0},
    {"resnet10 64->64 @14", 128, 64, 64, 14, 0, 0}, {"resnet10 128->128 @7", 128, 128, 128, 7, 0, 0},
    {"cnn 1->32 @28", 64, 1, 32, 28, 0, 1},         {"cnn 32->64 @14", 64, 32, 64, 14, 0, 0},
};

typedef struct {
    gdl_conv_geom g;
    int OC;
    float *x, *w, *y, *gy, *gx, *gw, *col;
} bench_conv_data;

/* One pass as the op layer runs it; *path gets what ran: "direct/implicit" or "im2col". */
static void bench_conv_pass(bench_conv_data *d, int pass, const char **path) {
    const gdl_conv_geom *g = &d->g;
    const int CKK = g->C * g->KH * g->KW, OHW = g->OH * g->OW;
    const float *in = pass == 0 ? d->x : pass == 1 ? d->x : NULL;
    float *out = pass == 0 ? d->y : pass == 1 ? d->gw : d->gx;
    int rc;
    /* the input gradient as the op layer asks for it into a gradient not yet set: written (pass 3), or,
       where the path only adds, zeroed and added to */
    rc = gdl__cpu_conv_implicit(pass == 2 ? 3 : pass, g, 1, d->OC, -1, in, d->w, d->gy, NULL, out, NULL);
    if (rc == 1 && pass == 2) {
        memset(out, 0, sizeof(float) * (size_t)g->N * g->C * g->H * g->W);
        rc = gdl__cpu_conv_implicit(2, g, 1, d->OC, -1, in, d->w, d->gy, NULL, out, NULL);
    }
    if (rc == 0) {
        *path = "implicit GEMM";
#ifdef GDL__DCONV
        if (pass == 2 ? gdl__dconv_gx_pays(g, 1, d->OC)
                      : pass == 1 ? gdl__dconv_gw_pays(g, 1, d->OC) : gdl__dconv_pays(g, 1, d->OC))
            *path = "direct";
#endif
        return;
    }
    *path = "im2col+gemm";
    if (pass == 0) {
        gdl__cpu_im2col_f32(g, d->x, d->col);
        gdl__cpu_gemm_f32(0, 0, d->OC, OHW, CKK, 1, d->w, CKK, 0, d->col, OHW, (int64_t)CKK * OHW, 0, d->y, OHW,
                          (int64_t)d->OC * OHW, g->N);
    } else if (pass == 1) {
        gdl__cpu_im2col_f32(g, d->x, d->col);
        gdl__cpu_gemm_f32(0, 1, d->OC, CKK, OHW, 1, d->gy, OHW, (int64_t)d->OC * OHW, d->col, OHW, (int64_t)CKK * OHW,
                          1, d->gw, CKK, 0, g->N);
    } else {
        gdl__cpu_gemm_f32(1, 0, CKK, OHW, d->OC, 1, d->w, CKK, 0, d->gy, OHW, (int64_t)d->OC * OHW, 0, d->col, OHW,
                          (int64_t)CKK * OHW, g->N);
        gdl__cpu_col2im_f32(g, d->col, d->gx);
    }
}

/* the fastest of 5 stretches of >= 40 ms: one call's seconds */
static double bench_conv_time(bench_conv_data *d, int pass, const char **path) {
    double t[5], t0;
    int reps = 1, r, s;
    bench_conv_pass(d, pass, path);
    for (;;) {
        t0 = gdl_now();
        for (r = 0; r < reps; r++) bench_conv_pass(d, pass, path);
        if (gdl_now() - t0 >= 0.04) break;
        reps *= 2;
    }
    for (s = 0; s < 5; s++) {
        t0 = gdl_now();
        for (r = 0; r < reps; r++) bench_conv_pass(d, pass, path);
        t[s] = (gdl_now() - t0) / reps;
    }
    qsort(t, 5, sizeof t[0], bench_cmp_double);
    return t[0];
}

static float *bench_conv_rand(size_t n) {
    float *p = (float *)malloc(sizeof(float) * (n ? n : 1));
    size_t i;
    if (!p) {
        fprintf(stderr, "bench_conv: out of memory\n");
        exit(1);
    }
    static uint32_t state = 12345;
    for (i = 0; i < n; i++) { /* uniform in [-1, 1): an LCG's top 24 bits (rand() took longer than the passes) */
        state = state * 1664525u + 1013904223u;
        p[i] = (float)(state >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
    return p;
}

int main(int argc, char **argv) {
    const int threads = gdl_get_num_threads();
    const double peak = gdl_cpu_peak_gflops(threads);
    static const char *const pass_name[3] = {"forward", "weight grad", "input grad"};
    const char *only = getenv("BENCH_CONV_PASS"); /* a pass's name ("forward", "weight", "input"): only it */
    double total[3] = {0, 0, 0}, total_flops = 0;
    size_t s;
    int pass, a;
    if (getenv("BENCH_FP32_PRECISION") && gdl_cpu_set_fp32_precision(getenv("BENCH_FP32_PRECISION")) != 0) {
        fprintf(stderr, "%s\n", gdl_last_error());
        return 2;
    }
    printf("CPU: %s; GEMM kernel %s; %d threads, FMA peak %.0f GFLOP/s\n", bench_cpu_model(), gdl_gemm_kernel_name(),
           threads, peak);
    printf("%-22s %-12s %9s %7s  %s\n", "conv (3x3 pad 1)", "pass", "ms", "%peak", "path");
    for (s = 0; s < sizeof bench_conv_shapes / sizeof bench_conv_shapes[0]; s++) {
        const bench_conv_shape *sh = &bench_conv_shapes[s];
        bench_conv_data d;
        double flops;
        int want = argc < 2;
        for (a = 1; a < argc; a++)
            if (strstr(sh->name, argv[a])) want = 1;
        if (!want) continue;
        memset(&d, 0, sizeof d);
        d.g.N = sh->N; d.g.C = sh->C; d.g.H = d.g.W = sh->HW;
        d.g.KH = d.g.KW = 3; d.g.SH = d.g.SW = 1; d.g.PH = d.g.PW = 1; d.g.DH = d.g.DW = 1;
        d.g.OH = d.g.OW = sh->HW;
        d.OC = sh->OC;
        d.x = bench_conv_rand((size_t)sh->N * sh->C * sh->HW * sh->HW);
        d.gx = bench_conv_rand((size_t)sh->N * sh->C * sh->HW * sh->HW);
        d.w = bench_conv_rand((size_t)sh->OC * sh->C * 9);
        d.gw = bench_conv_rand((size_t)sh->OC * sh->C * 9);
        d.y = bench_conv_rand((size_t)sh->N * sh->OC * sh->HW * sh->HW);
        d.gy = bench_conv_rand((size_t)sh->N * sh->OC * sh->HW * sh->HW);
        d.col = bench_conv_rand((size_t)sh->N * sh->C * 9 * sh->HW * sh->HW);
        flops = 2.0 * sh->N * sh->OC * sh->HW * sh->HW * sh->C * 9;
        for (pass = 0; pass < 3; pass++) {
            const char *path = "";
            double t;
            if (pass > 0 && sh->frozen) continue;
            if (only && !strstr(pass_name[pass], only)) continue;
            if (pass == 2 && sh->no_gx) continue;
            t = bench_conv_time(&d, pass, &path);
            if (!strncmp(sh->name, "speedrun", 8)) {
                total[pass] += t;
                if (pass == 0) total_flops += flops;
            }
            printf("%-22s %-12s %9.3f %6.1f%%  %s\n", sh->name, pass_name[pass], 1e3 * t, 100.0 * flops / t / 1e9 / peak,
                   path);
            fflush(stdout);
        }
        free(d.x); free(d.gx); free(d.w); free(d.gw); free(d.y); free(d.gy); free(d.col);
    }
    if (total[0] > 0)
        printf("speedrun convs: forward %.2f ms, backward (weight + input grads) %.2f ms\n", 1e3 * total[0],
               1e3 * (total[1] + total[2]));
    (void)total_flops;
    gdl_shutdown();
    return 0;
}
