/* 02_check_gpu.c — the first thing to run on a new machine: is CUDA there,
   how many GPUs, what are they called, and which device will training use.
   gpudl's answers to PyTorch's torch.cuda.is_available(), device_count()
   and get_device_name().

   CPU build (any laptop):
       cc -O2 docs/tutorial/programs/02_check_gpu.c -lm -pthread -o check_gpu && ./check_gpu
   GPU build (a machine with CUDA and an NVIDIA GPU):
       nvcc -O2 -arch=sm_90 -DGPUDL_CUDA docs/tutorial/programs/02_check_gpu.c gpudl_cuda.cu \
            -lcublas -lcublasLt -lnccl -o check_gpu && ./check_gpu */
#define GPUDL_IMPLEMENTATION
#include "../../../gpudl.h"

int main(void) {
    int n = gdl_cuda_device_count(), i;
    gdl_device dev = gdl_default_device(); /* cuda:0 when there is a GPU, else the CPU */
    gdl_tensor *t;
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("gpudl %s\n", gdl_version());
    printf("CUDA available: %s\n", gdl_cuda_is_available() ? "yes" : "no");
    printf("GPUs: %d\n", n);
    for (i = 0; i < n; i++) printf("  %s: %s\n", gdl_device_str(gdl_cuda(i)), gdl_device_name(gdl_cuda(i)));
    printf("default device: %s (%s)\n", gdl_device_str(dev), gdl_device_name(dev));

    /* Asking for a GPU that is not there is an error you can read, not a crash. */
    t = gdl_zeros(GDL_DIMS(2, 3), GDL_F32, gdl_cuda(0));
    if (!t) printf("a tensor on cuda:0: %s\n", gdl_last_error());
    else printf("a tensor on cuda:0: %s, shape %s\n", gdl_device_str(t->device), gdl_shape_str(t));
    gdl_free(t);

    /* The portable pattern: put everything on `dev`, which falls back to the CPU. */
    t = gdl_zeros(GDL_DIMS(2, 3), GDL_F32, dev);
    if (!t) {
        fprintf(stderr, "check_gpu: %s\n", gdl_last_error());
        return 1;
    }
    printf("a tensor on the default device: %s, shape %s\n", gdl_device_str(t->device), gdl_shape_str(t));
    gdl_free(t);
    gdl_shutdown();
    return 0;
}
