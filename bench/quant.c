/* quant.c — the int8 Linear against our f32 Linear on the CPU (the
   target: K and N >= 256 at batch >= 32, int8 at most 0.6x the f32 time),
   side by side in one run: for each shape, REPS rounds of timed stretches
   (interleaved: each round times every variant in turn, so that they see the
   same load), the fastest stretch of a forward pass of gdl_linear (f32) and
   of the DynamicQuantizedLinear
   made from it (activations quantized per batch, the int8 GEMM, the f32
   dequantization: the whole layer), and of the int8 GEMM alone
   (gdl_gemm_u8s8_cpu on pre-quantized operands, including its packing of
   B). Prints the CPU's kernels, the thread count and the ratios: of the
   fastest stretches, and "med i/f", the median over the rounds of each
   round's int8 / f32.

   cc -O3 -march=native bench/quant.c -lm -pthread -o build/bench_quant && build/bench_quant
   (GPUDL_NUM_THREADS=1 for one thread)

   `build/bench_quant mlp BATCH...` times instead the inference of the
   dynamic-quantized 784-256-128-10 MLP (examples/quantize.c's net) and of its
   f32 model at each batch size, one line per size ("mlp BATCH f32_us int8_us"):
   bench/compare_quant.sh runs it beside PyTorch's quantize_dynamic model
   (bench/pytorch/quant_mlp.py), interleaved. `build/bench_quant mlp --device
   cuda BATCH...` (a CUDA build: make build/cuda_bench_quant) times the same two
   models on the GPU (the aim: int8 not slower than f32 at batch 1024). */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPS 7

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Times the nf functions of fn/ctx interleaved: REPS rounds, each a stretch of ~0.05 s of every function in
   turn, so that all see the same load. best[f]: the fastest stretch of f (seconds per call), the least
   disturbed by other processes; ratio[f] (f > 0): the median over the rounds of f's time over fn[0]'s in the
   same round. 0 / -1. */
static int time_interleaved(int nf, int (*const *fn)(void *), void *const *ctx, double *best, double *ratio) {
    double t[4][REPS], rr[REPS];
    int f, r, n, k;
    for (f = 0; f < nf; f++)
        for (k = 0; k < 3; k++) fn[f](ctx[f]); /* warm-up */
    for (r = 0; r < REPS; r++)
        for (f = 0; f < nf; f++) {
            double t0 = gdl_now();
            n = 0;
            do {
                gdl_arena_reset();
                if (fn[f](ctx[f]) < 0) return -1;
                n++;
            } while (gdl_now() - t0 < 0.05);
            t[f][r] = (gdl_now() - t0) / n;
        }
    for (f = 0; f < nf; f++) {
        if (f > 0) {
            for (r = 0; r < REPS; r++) rr[r] = t[f][r] / t[0][r];
            qsort(rr, REPS, sizeof rr[0], cmp);
            ratio[f] = rr[REPS / 2];
        }
        qsort(t[f], REPS, sizeof t[f][0], cmp);
        best[f] = t[f][0];
    }
    return 0;
}

typedef struct {
    gdl_module *m;
    gdl_tensor *x;
    int M, N, K;
    uint8_t *a;
    int8_t *b;
    int32_t *c;
} job;

static int run_module(void *p) {
    job *j = (job *)p;
    gdl_tensor *y = gdl_forward(j->m, j->x), *s;
    if (!y) return -1;
    if (j->x->device.type == GDL_DEVICE_CPU) return 0;
    /* a GPU's forward only queues its kernels: one value read back makes the time cover them */
    s = gdl_sum(y);
    return s && !isnan(gdl_item(s)) ? 0 : -1;
}
static int run_gemm(void *p) {
    job *j = (job *)p;
    return gdl_gemm_u8s8_cpu(j->M, j->N, j->K, j->a, j->K, j->b, j->K, j->c, j->N);
}

/* the MLP's inference, f32 and dynamic int8, at each batch size of argv (after an optional --device cpu|cuda) */
static int bench_mlp(int argc, char **argv) {
    gdl_module *mods[5], *mlp, *q;
    gdl_device dev = gdl_cpu();
    int i;
    if (argc >= 2 && strcmp(argv[0], "--device") == 0) {
        const int cuda = strcmp(argv[1], "cuda") == 0;
        if ((!cuda && strcmp(argv[1], "cpu") != 0) || (cuda && !gdl_cuda_is_available())) {
            fprintf(stderr, "bench_quant: --device %s: %s\n", argv[1],
                    cuda ? "no CUDA device (a CUDA build: make build/cuda_bench_quant)" : "expected cpu or cuda");
            return 2;
        }
        if (cuda) dev = gdl_cuda(0);
        argc -= 2;
        argv += 2;
    }
    mods[0] = gdl_nn_linear(784, 256, 1);
    mods[1] = gdl_nn_relu();
    mods[2] = gdl_nn_linear(256, 128, 1);
    mods[3] = gdl_nn_relu();
    mods[4] = gdl_nn_linear(128, 10, 1);
    mlp = gdl_nn_sequential(5, mods);
    q = mlp ? gdl_quantize_dynamic(mlp, NULL) : NULL;
    if (!q || gdl_module_to(mlp, dev) < 0 || gdl_module_to(q, dev) < 0) {
        fprintf(stderr, "bench_quant: %s\n", gdl_last_error());
        return 1;
    }
    if (dev.type == GDL_DEVICE_CPU)
        printf("# CPU GEMM kernels: f32 %s, int8 %s; %d threads\n", gdl_gemm_kernel_name(), gdl_gemm_int8_kernel_name(),
               gdl_get_num_threads());
    else
        printf("# on %s\n", gdl_device_str(dev));
    for (i = 0; i < argc; i++) {
        job jf, jq;
        int (*const fns[2])(void *) = {run_module, run_module};
        void *const ctxs[2] = {&jf, &jq};
        double best[2], ratio[2];
        const int batch = atoi(argv[i]);
        jf.x = jq.x = batch > 0 ? gdl_randn(GDL_DIMS(batch, 784), dev) : NULL;
        if (!jf.x) {
            fprintf(stderr, "bench_quant: batch '%s': %s\n", argv[i], batch > 0 ? gdl_last_error() : "not a size");
            return 1;
        }
        jf.m = mlp;
        jq.m = q;
        if (time_interleaved(2, fns, ctxs, best, ratio) < 0) {
            fprintf(stderr, "bench_quant: %s\n", gdl_last_error());
            return 1;
        }
        printf("mlp %d %.1f %.1f\n", batch, 1e6 * best[0], 1e6 * best[1]);
        gdl_free(jf.x);
    }
    gdl_module_free(q);
    gdl_module_free(mlp);
    gdl_shutdown();
    return 0;
}

int main(int argc, char **argv) {
    static const int shapes[][3] = {{32, 256, 256}, {64, 784, 256}, {64, 1024, 1024}, {256, 512, 512}, {1, 784, 128}};
    size_t s;
    gdl_set_grad_enabled(0);
    if (argc > 1 && strcmp(argv[1], "mlp") == 0) return bench_mlp(argc - 2, argv + 2);
    printf("CPU GEMM kernels: f32 %s, int8 %s; %d threads\n", gdl_gemm_kernel_name(), gdl_gemm_int8_kernel_name(),
           gdl_get_num_threads());
    printf("%-18s %10s %10s %10s %10s %10s %10s\n", "batch x K -> N", "f32 us", "int8 us", "GEMM us", "int8/f32",
           "GEMM/f32", "med i/f");
    for (s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
        gdl_module *lin = gdl_nn_linear(K, N, 1), *q = gdl_quantize_dynamic(lin, NULL);
        job jf, jq;
        int (*const fns[3])(void *) = {run_module, run_module, run_gemm};
        void *const ctxs[3] = {&jf, &jq, &jq};
        double best[3], ratio[3];
        size_t i;
        jf.x = jq.x = gdl_randn(GDL_DIMS(M, K), gdl_cpu());
        jf.m = lin;
        jq.m = q;
        jq.M = M; jq.N = N; jq.K = K;
        jq.a = (uint8_t *)malloc((size_t)M * K);
        jq.b = (int8_t *)malloc((size_t)N * K);
        jq.c = (int32_t *)malloc(sizeof(int32_t) * M * N);
        if (!lin || !q || !jf.x || !jq.a || !jq.b || !jq.c) {
            fprintf(stderr, "bench_quant: %s\n", gdl_last_error());
            return 1;
        }
        for (i = 0; i < (size_t)M * K; i++) jq.a[i] = (uint8_t)(rand() & 127);
        for (i = 0; i < (size_t)N * K; i++) jq.b[i] = (int8_t)((rand() & 255) - 128);
        if (time_interleaved(3, fns, ctxs, best, ratio) < 0) {
            fprintf(stderr, "bench_quant: %s\n", gdl_last_error());
            return 1;
        }
        printf("%4d x %4d -> %4d %10.1f %10.1f %10.1f %10.2f %10.2f %10.2f\n", M, K, N, 1e6 * best[0], 1e6 * best[1],
               1e6 * best[2], best[1] / best[0], best[2] / best[0], ratio[1]);
        gdl_module_free(lin);
        gdl_module_free(q);
        gdl_free(jf.x);
        free(jq.a);
        free(jq.b);
        free(jq.c);
    }
    gdl_shutdown();
    return 0;
}
