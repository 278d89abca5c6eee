/* 08_cpu_vs_gpu.c — the CPU-against-GPU timing table: the same training (an
   MLP of 4 hidden layers, on 1,024 random samples in batches of 256, SGD)
   at three widths, timed on the CPU and, when there is one, on the GPU. Both
   devices start from the same weights and see the same batches, so their
   final losses agree to rounding: a check that the GPU computes the same thing.

   Build and run from gpudl's repository root:
       cc -O2 docs/tutorial/programs/08_cpu_vs_gpu.c -lm -pthread -o cpu_vs_gpu && ./cpu_vs_gpu
   GPU build (fills the GPU column):
       nvcc -O3 -arch=sm_90 -DGPUDL_CUDA docs/tutorial/programs/08_cpu_vs_gpu.c gpudl_cuda.cu \
            -lcublas -lcublasLt -lnccl -o cpu_vs_gpu && ./cpu_vs_gpu */
#define GPUDL_IMPLEMENTATION
#include "../../../gpudl.h"

#define SAMPLES 1024
#define FEATURES 256
#define BATCH 256
#define EPOCHS 1
#define HIDDEN_LAYERS 4

/* nn.Sequential(Linear(256, w), ReLU(), [Linear(w, w), ReLU()] * 3, Linear(w, 10)) */
static gdl_module *mlp(int width) {
    gdl_module *seq = gdl_nn_sequential(0, NULL);
    int i;
    for (i = 0; i < HIDDEN_LAYERS && seq; i++)
        if (gdl_nn_sequential_add(seq, gdl_nn_linear(i == 0 ? FEATURES : width, width, 1)) < 0 ||
            gdl_nn_sequential_add(seq, gdl_nn_relu()) < 0) {
            gdl_module_free(seq);
            return NULL;
        }
    if (seq && gdl_nn_sequential_add(seq, gdl_nn_linear(width, 10, 1)) < 0) {
        gdl_module_free(seq);
        return NULL;
    }
    return seq;
}

/* Trains a fresh net of `width` on dev; *seconds excludes one untimed warm-up step, which pays for set-up
   (on a GPU: the context, cuBLAS's handles, the first kernels' loading). *loss: the last batch's. */
static int timed_training(int width, gdl_device dev, gdl_tensor *X_host, gdl_tensor *Y_host, double *seconds,
                          double *loss) {
    gdl_module *model;
    gdl_optimizer *opt = NULL;
    gdl_tensor *X = NULL, *Y = NULL, *last = NULL;
    double t0 = 0;
    int epoch, i, rc = -1;
    gdl_manual_seed(1); /* the same weights on every device */
    model = mlp(width);
    if (!model || gdl_module_to(model, dev) < 0 || !(opt = gdl_sgd_new(0.01, 0.9, 0, 0, 0)) ||
        gdl_optim_add_module(opt, model, 0) < 0)
        goto out;
    if (!(X = gdl_to(X_host, dev)) || !(Y = gdl_to(Y_host, dev))) goto out; /* the whole data set on dev, once */
    for (epoch = 0; epoch <= EPOCHS; epoch++) { /* epoch 0: the warm-up step */
        for (i = 0; i < SAMPLES; i += BATCH) {
            gdl_arena_reset();
            gdl_zero_grad(opt);
            last = gdl_cross_entropy(gdl_forward(model, gdl_slice(X, i, i + BATCH)), gdl_slice(Y, i, i + BATCH));
            if (!last || gdl_backward(last) < 0 || gdl_step(opt) < 0) goto out;
            if (epoch == 0) break;
        }
        if (epoch == 0) {
            gdl_item(last); /* GPU work is queued: wait for it before starting the clock */
            t0 = gdl_now();
        }
    }
    *loss = gdl_item(last); /* ... and before stopping it */
    *seconds = gdl_now() - t0;
    rc = 0;
out:
    gdl_free(X), gdl_free(Y);
    gdl_optim_free(opt);
    gdl_module_free(model);
    gdl_arena_reset();
    return rc;
}

int main(void) {
    static const int widths[] = {64, 256, 512};
    int32_t labels[SAMPLES];
    int64_t n = SAMPLES;
    int have_gpu = gdl_cuda_is_available(), i, k;
    gdl_tensor *X, *Y;
    setvbuf(stdout, NULL, _IOLBF, 0);
    gdl_manual_seed(0);
    for (i = 0; i < SAMPLES; i++) labels[i] = (int32_t)(gdl_rng_next_u64() % 10);
    X = gdl_randn(GDL_DIMS(SAMPLES, FEATURES), gdl_cpu());
    Y = gdl_from_array(labels, 1, &n, GDL_I32, gdl_cpu());
    if (!X || !Y) {
        fprintf(stderr, "cpu_vs_gpu: %s\n", gdl_last_error());
        return 1;
    }
    printf("%d samples, batch %d, %d epoch, %d hidden layers; CPU: %d threads; GPU: %s\n\n", SAMPLES,
           BATCH, EPOCHS, HIDDEN_LAYERS, gdl_get_num_threads(),
           have_gpu ? gdl_device_name(gdl_cuda(0)) : "none (only the CPU column is measured)");
    printf("%-6s %10s %10s %10s %9s %10s %10s\n", "width", "MFLOP/step", "cpu s", "gpu s", "speed-up", "cpu loss",
           "gpu loss");
    for (k = 0; k < 3; k++) {
        int w = widths[k];
        /* multiply-adds of one step: forward 2*B*(weights), backward about twice the forward */
        double weights = (double)FEATURES * w + (double)(HIDDEN_LAYERS - 1) * w * w + (double)w * 10;
        double mflop = 3.0 * 2.0 * BATCH * weights / 1e6, tc, lc, tg, lg;
        if (timed_training(w, gdl_cpu(), X, Y, &tc, &lc) < 0 ||
            (have_gpu && timed_training(w, gdl_cuda(0), X, Y, &tg, &lg) < 0)) {
            fprintf(stderr, "cpu_vs_gpu: width %d: %s\n", w, gdl_last_error());
            return 1;
        }
        if (have_gpu)
            printf("%-6d %10.1f %10.3f %10.3f %8.1fx %10.4f %10.4f\n", w, mflop, tc, tg, tc / tg, lc, lg);
        else
            printf("%-6d %10.1f %10.3f %10s %9s %10.4f %10s\n", w, mflop, tc, "-", "-", lc, "-");
    }
    gdl_free(X), gdl_free(Y);
    gdl_shutdown();
    return 0;
}
