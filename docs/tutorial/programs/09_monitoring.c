/* 09_monitoring.c — watching a training run: the GPU's utilisation and
   memory (what nvidia-smi shows, read through NVML), the memory gpudl's own
   allocators hold, and a per-op time profile of a few training steps.

   Build and run from gpudl's repository root:
       cc -O2 -DGPUDL_NVML docs/tutorial/programs/09_monitoring.c -lm -pthread -o monitoring && ./monitoring
   (glibc older than 2.34: add -ldl.) -DGPUDL_NVML lets a CPU build read the
   GPUs' figures too; a CUDA build (-DGPUDL_CUDA) has it anyway. Without an
   NVIDIA driver the GPU part says so and the rest runs on the CPU. */
#define GPUDL_IMPLEMENTATION
#include "../../../gpudl.h"
#include <stdlib.h>

#define STEPS 20

static int by_name(const void *a, const void *b) {
    return strcmp(((const gdl_profile_row *)a)->name, ((const gdl_profile_row *)b)->name);
}

int main(void) {
    gdl_device dev = gdl_default_device();
    gdl_module *layers[3], *model = NULL;
    gdl_optimizer *opt = NULL;
    gdl_tensor *x = NULL, *y = NULL;
    gdl_memory_status before, after;
    const gdl_profile_row *rows;
    gdl_profile_row sorted[64];
    int32_t labels[256];
    int64_t nl = 256;
    int n, i, step, rc = 1;
    setvbuf(stdout, NULL, _IOLBF, 0);

    /* 1. the GPUs, as nvidia-smi lists them */
    if ((n = gdl_gpu_count()) < 0) {
        printf("GPU figures: %s\n", gdl_last_error());
    } else {
        for (i = 0; i < n; i++) {
            gdl_gpu_status s;
            if (gdl_gpu_stats(i, &s) < 0) printf("GPU %d: %s\n", i, gdl_last_error());
            else printf("GPU %d: %s, utilisation %d%%, memory %.1f of %.1f GiB, %d C\n", i, s.name, s.utilization,
                        s.memory_used / 1073741824.0, s.memory_total / 1073741824.0, s.temperature);
        }
    }

    /* 2. gpudl's allocator on the training device: before and after a model and a training step */
    gdl_manual_seed(0);
    if (gdl_memory_stats(dev, &before) < 0) goto fail;
    layers[0] = gdl_nn_linear(512, 512, 1);
    layers[1] = gdl_nn_relu();
    layers[2] = gdl_nn_linear(512, 10, 1);
    for (i = 0; i < 256; i++) labels[i] = i % 10;
    if (!(model = gdl_nn_sequential(3, layers)) || gdl_module_to(model, dev) < 0 ||
        !(opt = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0)) || gdl_optim_add_module(opt, model, 0) < 0 ||
        !(x = gdl_randn(GDL_DIMS(256, 512), dev)) || !(y = gdl_from_array(labels, 1, &nl, GDL_I32, dev)))
        goto fail;

    /* 3. the profiler around a few steps (torch.profiler) */
    if (gdl_profile_begin() < 0) goto fail;
    for (step = 0; step < STEPS; step++) {
        gdl_tensor *loss;
        gdl_arena_reset();
        gdl_zero_grad(opt);
        loss = gdl_cross_entropy(gdl_forward(model, x), y);
        if (!loss || gdl_backward(loss) < 0 || gdl_step(opt) < 0) goto fail;
    }
    if (gdl_profile_end() < 0 || gdl_memory_stats(dev, &after) < 0) goto fail;
    printf("\nmemory on %s: %.2f MiB allocated before the model, %.2f MiB after %d steps (peak %.2f MiB);\n"
           "the arena of the step's temporaries holds %.2f MiB\n", gdl_device_str(dev), before.allocated / 1048576.0,
           after.allocated / 1048576.0, STEPS, after.peak_allocated / 1048576.0, after.arena_used / 1048576.0);

    /* the profile's rows, here sorted by name (gdl_profile_print sorts them by time) */
    if ((n = gdl_profile_rows(&rows)) < 0) goto fail;
    if (n > 64) n = 64;
    memcpy(sorted, rows, (size_t)n * sizeof *rows);
    qsort(sorted, (size_t)n, sizeof *sorted, by_name);
    printf("\n%-28s %-6s %6s %10s\n", "op", "device", "calls", "total ms");
    for (i = 0; i < n; i++)
        printf("%-28s %-6s %6ld %10.3f\n", sorted[i].name, gdl_device_str(sorted[i].device), (long)sorted[i].calls,
               sorted[i].total_ms);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "monitoring: %s\n", gdl_last_error());
    gdl_free(x), gdl_free(y);
    gdl_optim_free(opt);
    gdl_module_free(model);
    gdl_shutdown();
    return rc;
}
