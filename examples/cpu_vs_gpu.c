/* cpu_vs_gpu.c — the same training on the CPU and on a GPU, side by side:
   fully connected nets of 10 and 50 hidden layers (Linear(512, 512) + ReLU,
   then Linear(512, 10)) trained with SGD (lr 0.01, momentum 0.9) on 1000
   random samples in batches of 100. It prints each device's time, the
   speed-up, and both final losses (the devices compute the same thing, so
   they agree to rounding).

   Build and run (from the repository root):
       cc -std=c99 -O2 -march=native examples/cpu_vs_gpu.c -lm -pthread -o cpu_vs_gpu && ./cpu_vs_gpu
       nvcc -O3 -arch=sm_90 -DGPUDL_CUDA examples/cpu_vs_gpu.c gpudl_cuda.cu -lcublas -lcublasLt -o cpu_vs_gpu
   Options: [--epochs N] [--device cpu|cuda|cuda:N] [--seed N] (--help lists them);
   --device names the GPU to compare against (default: the first one).

   Small nets like the 10-layer one are launch-bound on a GPU: each step is
   a few dozen small kernels, so the speed-up grows with the work per launch
   (the 50-layer net, bigger batches). On the CUDA-on-CPU emulator the GPU
   column is the emulator's time, which says nothing about a real GPU.
   Tutorial: docs/tutorial/08-cpu-vs-gpu.md (chapter 8). */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "example_args.h"

#define SAMPLES 1000
#define WIDTH 512
#define CLASSES 10
#define BATCH 100

static int fail(const char *what) {
    fprintf(stderr, "cpu_vs_gpu: %s: %s\n", what, gdl_last_error());
    return 1;
}

/* nn.Sequential(*[Linear(512, 512), ReLU()] * layers, Linear(512, 10)) */
static gdl_module *fc_stack(int layers) {
    gdl_module *seq = gdl_nn_sequential(0, NULL);
    int i;
    for (i = 0; i < layers && seq; i++)
        if (gdl_nn_sequential_add(seq, gdl_nn_linear(WIDTH, WIDTH, 1)) < 0 ||
            gdl_nn_sequential_add(seq, gdl_nn_relu()) < 0) {
            gdl_module_free(seq);
            return NULL;
        }
    if (seq && gdl_nn_sequential_add(seq, gdl_nn_linear(WIDTH, CLASSES, 1)) < 0) {
        gdl_module_free(seq);
        return NULL;
    }
    return seq;
}

/* Trains a fresh net (the same initial weights on every device: the seed is
   reset) for `epochs` over X, Y on dev. *seconds: the time of the epochs,
   after one untimed warm-up step (it pays for the GPU's and cuBLAS's set-up),
   up to the device finishing the last step. *loss: the last batch's loss. *flops: the timed steps'
   model FLOPs (gdl_flops_count). */
static int train(int layers, gdl_device dev, gdl_tensor *X_host, gdl_tensor *Y_host, int epochs,
                 uint64_t seed, double *seconds, double *loss, double *flops) {
    gdl_module *model;
    gdl_optimizer *opt;
    gdl_tensor *X = NULL, *Y = NULL, *last = NULL;
    double t0 = 0;
    int epoch, i, rc = -1;

    gdl_manual_seed(seed);
    model = fc_stack(layers);
    opt = gdl_sgd_new(0.01, 0.9, 0, 0, 0);
    if (!model || !opt || gdl_module_to(model, dev) < 0 || gdl_optim_add_module(opt, model, 0) < 0) goto out;
    if (!(X = gdl_to(X_host, dev)) || !(Y = gdl_to(Y_host, dev))) goto out;
    /* epoch 0 is a single warm-up step */
    for (epoch = 0; epoch <= epochs; epoch++) {
        for (i = 0; i < SAMPLES; i += BATCH) {
            gdl_arena_reset();
            gdl_zero_grad(opt);
            last = gdl_cross_entropy(gdl_forward(model, gdl_slice(X, i, i + BATCH)), gdl_slice(Y, i, i + BATCH));
            if (!last || gdl_backward(last) < 0 || gdl_step(opt) < 0) goto out;
            if (epoch == 0) break;
        }
        if (epoch == 0) {
            if (isnan(gdl_item(last))) goto out; /* waits for the device */
            gdl_flops_reset();
            t0 = gdl_now();
        }
    }
    *loss = gdl_item(last); /* waits for the device */
    *seconds = gdl_now() - t0;
    *flops = (double)gdl_flops_count(NULL, NULL);
    rc = isnan(*loss) ? -1 : 0;
out:
    gdl_free(X);
    gdl_free(Y);
    gdl_optim_free(opt);
    gdl_module_free(model);
    gdl_arena_reset();
    return rc;
}

int main(int argc, char **argv) {
    static const int nets[] = {10, 50};
    int64_t xs[2] = {SAMPLES, WIDTH}, n = SAMPLES;
    int32_t labels[SAMPLES];
    ex_args a = ex_defaults(10, BATCH);
    int parsed = ex_parse(&a, argc, argv, EX_EPOCHS | EX_DEVICE | EX_SEED,
                          "Trains 10- and 50-layer fully connected nets on 1000 random samples on the CPU and on a GPU\n"
                          "and prints both times and the speed-up.");
    gdl_device gpu = a.device;
    gdl_tensor *X, *Y;
    int k, i, have_gpu;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (parsed) return parsed == 1 ? 0 : 2;
    if (gpu.type != GDL_DEVICE_CUDA && gdl_cuda_is_available()) gpu = gdl_cuda(0);
    have_gpu = gpu.type == GDL_DEVICE_CUDA;

    /* X = torch.randn(1000, 512); Y = torch.randint(10, (1000,)) */
    gdl_manual_seed(a.seed);
    for (i = 0; i < SAMPLES; i++) labels[i] = (int32_t)(gdl_rng_next_u64() % CLASSES);
    X = gdl_randn(2, xs, gdl_cpu());
    Y = gdl_from_array(labels, 1, &n, GDL_I32, gdl_cpu());
    if (!X || !Y) return fail("data");

    printf("%d random samples of %d features, batch %d, SGD, %d epoch%s; GPU: %s\n", SAMPLES, WIDTH, BATCH, a.epochs,
           a.epochs == 1 ? "" : "s", have_gpu ? gdl_device_name(gpu) : "none (only the CPU column is measured)");
    printf("\n%-10s %10s %10s %9s %12s %12s\n", "net", "cpu s", have_gpu ? gdl_device_str(gpu) : "gpu", "speed-up",
           "cpu loss", "gpu loss");
    for (k = 0; k < (int)(sizeof nets / sizeof nets[0]); k++) {
        double tc, tg = 0, lc, lg = 0, fc, fg = 0, steps = (double)a.epochs * ((SAMPLES + BATCH - 1) / BATCH);
        char name[32];
        snprintf(name, sizeof name, "%d layers", nets[k]);
        if (train(nets[k], gdl_cpu(), X, Y, a.epochs, a.seed, &tc, &lc, &fc) < 0) return fail(name);
        if (have_gpu && train(nets[k], gpu, X, Y, a.epochs, a.seed, &tg, &lg, &fg) < 0) return fail(name);
        if (have_gpu)
            printf("%-10s %10.3f %10.3f %8.1fx %12.6f %12.6f\n", name, tc, tg, tc / tg, lc, lg);
        else
            printf("%-10s %10.3f %10s %9s %12.6f %12s\n", name, tc, "-", "-", lc, "-");
        printf("  cpu ");
        ex_print_flops(fc, tc, steps, gdl_cpu(), GDL_F32);
        if (have_gpu) {
            printf("  %s ", gdl_device_str(gpu));
            ex_print_flops(fg, tg, steps, gpu, GDL_F32);
        }
    }
    gdl_free(X);
    gdl_free(Y);
    gdl_shutdown();
    return 0;
}
