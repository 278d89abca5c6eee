/* device_query.c — is CUDA available, how many devices, their names,
   compute capability, SMs, memory and clock (PyTorch's torch.cuda.*).

   CPU-only build:  cc -O2 examples/device_query.c -lm -o device_query
   CUDA build:      nvcc -O2 -arch=sm_90 -DGPUDL_CUDA examples/device_query.c gpudl_cuda.cu -lcublas -lcublasLt -lnccl -o device_query
   Tutorial: docs/tutorial/02-check-gpu.md (chapter 2).
*/
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "example_args.h"

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* status lines and errors in the order they happen, also when piped */
    ex_args a = ex_defaults(1, 1);
    int parsed = ex_parse(&a, argc, argv, 0, "Prints whether CUDA is available, and each device's name and memory.");
    int n = gdl_cuda_device_count(), i;
    gdl_device dev = gdl_default_device();
    if (parsed) return parsed == 1 ? 0 : 2;
    printf("gpudl %s\n", gdl_version());
    printf("CUDA available: %s\n", gdl_cuda_is_available() ? "yes" : "no");
    printf("CUDA devices:   %d\n", n);
#ifdef GPUDL_CUDA
    for (i = 0; i < n; i++) {
        char name[256];
        size_t total = 0, free_b = 0;
        int major = 0, minor = 0, sms = 0, clock_khz = 0;
        if (gdl_cuda_device_info(i, name, sizeof name, &total, &free_b, &major, &minor, &sms, &clock_khz) < 0) {
            printf("  cuda:%d: %s\n", i, gdl_last_error());
            continue;
        }
        printf("  cuda:%d: %s, compute capability %d.%d, %d SMs, %.0f MHz, memory %.1f GiB (%.1f GiB free)\n", i,
               name, major, minor, sms, clock_khz / 1000.0, total / 1073741824.0, free_b / 1073741824.0);
        { /* NVIDIA's datasheet figures (gdl_gpu_peak_gflops), the denominators of gdl_flops_line */
            double f32 = gdl_gpu_peak_gflops(i, GDL_F32), bf16 = f32 > 0 ? gdl_gpu_peak_gflops(i, GDL_BF16) : -1;
            if (f32 > 0 && bf16 > 0)
                printf("  cuda:%d: peak (datasheet, dense) f32 %.0f GFLOP/s, bf16 %.0f GFLOP/s\n", i, f32, bf16);
            else if (f32 > 0)
                printf("  cuda:%d: peak (datasheet, dense) f32 %.0f GFLOP/s, no bf16\n", i, f32);
            else printf("  cuda:%d: peak: %s\n", i, gdl_last_error());
        }
    }
    if (n == 0) printf("No GPU found: this CUDA build falls back to the CPU.\n");
#else
    (void)i;
    printf("This is a CPU-only build (compiled without -DGPUDL_CUDA): everything runs on the CPU.\n");
#endif
    printf("Default device: %s (%s)\n", gdl_device_str(dev), gdl_device_name(dev));
    return 0;
}
