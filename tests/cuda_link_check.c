/* cuda_link_check.c — builds gpudl with the CUDA backend, links it, and runs
   one small computation on the GPU when there is one; without a GPU it says
   so and falls back to the CPU (this must still build, link and exit 0).

       nvcc -O2 -arch=sm_90 -DGPUDL_CUDA tests/cuda_link_check.c gpudl_cuda.cu -lcublas -lcublasLt -lnccl -o /tmp/clc && /tmp/clc

   nvcc compiles this .c file as C with the host compiler (no -x cu): the
   header's implementation is plain C99. With a GPU, the same randn tensor
   (generated on the host, so bit-identical) goes through relu and sum on
   cuda:0 and on the CPU, and the two results must agree. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"

#include <math.h>

static double relu_sum(gdl_device dev) {
    gdl_tensor *x, *s;
    double v;
    gdl_manual_seed(1234);
    x = gdl_randn(GDL_DIMS(64, 1000), dev);
    s = x ? gdl_sum(gdl_relu(x)) : NULL;
    v = s ? gdl_item(s) : NAN;
    gdl_free(x);
    gdl_arena_reset();
    return v;
}

int main(void) {
    gdl_device dev = gdl_default_device();
    printf("gdl_cuda_is_available() = %d\n", gdl_cuda_is_available());
    printf("gdl_cuda_device_count() = %d\n", gdl_cuda_device_count());
    printf("default device: %s (%s)\n", gdl_device_str(dev), gdl_device_name(dev));
    if (gdl_cuda_is_available()) {
        double gpu = relu_sum(gdl_cuda(0)), cpu = relu_sum(gdl_cpu());
        printf("sum(relu(randn(64,1000))) on cuda:0 = %.6f, on cpu = %.6f\n", gpu, cpu);
        if (isnan(gpu) || fabs(gpu - cpu) > 1e-4 * fabs(cpu)) {
            fprintf(stderr, "cuda_link_check: mismatch or error: %s\n", gdl_last_error());
            gdl_shutdown();
            return 1;
        }
    } else {
        printf("no CUDA device: falling back to the CPU, sum(relu(randn(64,1000))) = %.6f\n", relu_sum(gdl_cpu()));
    }
    gdl_shutdown();
    printf("cuda_link_check: ok\n");
    return 0;
}
