/* 01_why_gpu.c — why deep learning runs on GPUs: nearly all of a network's
   work is matrix multiplication, which is millions of independent
   multiply-adds. This program times square matrix products of growing size
   on the CPU and prints the rate in GFLOP/s (billions of floating-point
   operations per second), next to the work one training step of a small
   MLP asks for.

   Build and run from gpudl's repository root:
       cc -O2 docs/tutorial/programs/01_why_gpu.c -lm -pthread -o why_gpu && ./why_gpu
   On a GPU build (nvcc ... -DGPUDL_CUDA ... gpudl_cuda.cu) the same gdl_matmul
   runs on cuda:0 when the tensors live there (chapter 3). */
#define GPUDL_IMPLEMENTATION
#include "../../../gpudl.h"

/* Seconds per n x n product on dev: one untimed warm-up, then `reps` timed. */
static double time_matmul(int64_t n, int reps, gdl_device dev) {
    gdl_tensor *a = gdl_randn(GDL_DIMS(n, n), dev), *b = gdl_randn(GDL_DIMS(n, n), dev);
    double t0 = 0, result = -1;
    int r;
    if (!a || !b) goto out;
    for (r = 0; r <= reps; r++) {
        gdl_tensor *c;
        if (r == 1) t0 = gdl_now();
        gdl_arena_reset(); /* the last product's result goes */
        if (!(c = gdl_matmul(a, b))) goto out;
        gdl_item(gdl_sum(c)); /* waits until the device has finished (a no-op wait on the CPU) */
    }
    result = (gdl_now() - t0) / reps;
out:
    gdl_free(a);
    gdl_free(b);
    gdl_arena_reset();
    return result;
}

int main(void) {
    static const int64_t sizes[] = {64, 256, 512};
    gdl_device dev = gdl_cpu();
    int k;
    setvbuf(stdout, NULL, _IOLBF, 0);
    gdl_manual_seed(0);
    /* one step of a 784-128-10 MLP on a batch of 64: forward 2*B*(784*128 + 128*10)
       multiply-adds counted as 2 FLOPs each, backward about twice that */
    printf("one training step of a 784-128-10 MLP, batch 64: %.1f million FLOPs\n",
           3.0 * 2 * 64 * (784.0 * 128 + 128.0 * 10) / 1e6);
    printf("CPU threads used by gpudl: %d\n\n", gdl_get_num_threads());
    printf("%-12s %14s %12s %10s\n", "matmul", "FLOPs", "seconds", "GFLOP/s");
    for (k = 0; k < 3; k++) {
        int64_t n = sizes[k];
        double flops = 2.0 * (double)n * (double)n * (double)n, s = time_matmul(n, 5, dev);
        char name[32];
        if (s < 0) {
            fprintf(stderr, "why_gpu: %s\n", gdl_last_error());
            return 1;
        }
        snprintf(name, sizeof name, "%ldx%ld", (long)n, (long)n);
        printf("%-12s %14.0f %12.6f %10.2f\n", name, flops, s, flops / s / 1e9);
    }
    gdl_shutdown();
    return 0;
}
