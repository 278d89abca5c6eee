/* 10_grad_accumulation.c — when a batch does not fit in memory: run it as
   several micro-batches, let their gradients add up, and step once. The
   program first shows that 4 micro-batches of 32, each loss scaled by 1/4,
   give the gradient of one batch of 128 (to rounding); then trains with
   gdl_fit's accumulate option, which does the same for you.

   Build and run from gpudl's repository root (Fashion-MNIST: `sh tools/fetch_data.sh`):
       cc -O2 -DGPUDL_ZLIB docs/tutorial/programs/10_grad_accumulation.c -lz -lm -pthread -o grad_accumulation && ./grad_accumulation
   Nothing changes on a GPU, where this matters most: device memory is
   smaller than a host's, and the activations grow with the batch. */
#define GPUDL_IMPLEMENTATION
#include "../../../gpudl.h"
#include <math.h>

#define BATCH 128
#define MICRO 4

static gdl_module *mlp(void) {
    gdl_module *layers[4];
    layers[0] = gdl_nn_flatten(1);
    layers[1] = gdl_nn_linear(784, 64, 1);
    layers[2] = gdl_nn_relu();
    layers[3] = gdl_nn_linear(64, 10, 1);
    return gdl_nn_sequential(4, layers);
}

/* The gradient of the first weight after one backward over the whole batch, or MICRO backwards over its
   parts each scaled by 1/MICRO; copied to out (784*64 floats). */
static int first_layer_grad(gdl_tensor *x, gdl_tensor *y, int micro, float *out) {
    gdl_module *model;
    gdl_tensor *w;
    int k, rc = -1;
    int64_t part = BATCH / micro;
    gdl_manual_seed(3);
    if (!(model = mlp())) return -1;
    w = gdl_module_tensor(model, "1.weight");
    for (k = 0; k < micro; k++) {
        gdl_tensor *loss = gdl_cross_entropy(gdl_forward(model, gdl_slice(x, k * part, (k + 1) * part)),
                                             gdl_slice(y, k * part, (k + 1) * part));
        /* loss / micro: the mean over the whole batch is the mean of the parts' means */
        if (!loss || gdl_backward(gdl_mul_scalar(loss, 1.0 / micro)) < 0) goto out; /* gradients add up */
    }
    rc = gdl_copy_to_host(w->grad, out, (size_t)w->numel * sizeof(float));
out:
    gdl_module_free(model);
    gdl_arena_reset();
    return rc;
}

int main(void) {
    static float whole[784 * 64], parts[784 * 64];
    gdl_dataset *all = NULL, *train = NULL;
    gdl_loader *loader = NULL;
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_fit_opts fo = gdl_fit_defaults();
    gdl_epoch_stats hist[2];
    gdl_module *model = NULL;
    gdl_optimizer *opt = NULL;
    gdl_tensor *x, *y;
    double worst = 0, largest = 0;
    int i, rc = 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!(all = gdl_dataset_fashion_mnist(NULL, 1)) || !(train = gdl_dataset_subset(all, 0, 3000))) goto fail;
    lo.batch_size = BATCH;
    if (!(loader = gdl_loader_new(train, &lo)) || gdl_loader_next(loader, &x, &y) != 1) goto fail;

    /* 1. one batch of 128 against 4 micro-batches of 32 */
    if (first_layer_grad(x, y, 1, whole) < 0 || first_layer_grad(x, y, MICRO, parts) < 0) goto fail;
    for (i = 0; i < 784 * 64; i++) {
        double d = fabs((double)whole[i] - parts[i]);
        if (d > worst) worst = d;
        if (fabs(whole[i]) > largest) largest = fabs(whole[i]);
    }
    printf("first layer's gradient: batch of %d against %d micro-batches of %d\n", BATCH, MICRO, BATCH / MICRO);
    printf("  largest entry %.6f, largest difference %.1e: %s\n", largest, worst,
           worst <= 1e-6 * (largest > 1 ? largest : 1) ? "the same to rounding" : "DIFFERENT");

    /* 2. gdl_fit with accumulate: batches of 32, a step every 4 of them (an effective batch of 128) */
    gdl_loader_free(loader);
    lo.batch_size = BATCH / MICRO;
    lo.shuffle = 1;
    lo.device = gdl_default_device();
    gdl_manual_seed(0);
    if (!(loader = gdl_loader_new(train, &lo)) || !(model = mlp()) || gdl_module_to(model, lo.device) < 0 ||
        !(opt = gdl_adam_new(2e-3, 0.9, 0.999, 1e-8, 0)) || gdl_optim_add_module(opt, model, 0) < 0)
        goto fail;
    fo.epochs = 2;
    fo.accumulate = MICRO; /* micro-batches per optimizer step; each loss scaled by 1/MICRO */
    fo.verbose = 0;
    if (gdl_fit(model, loader, opt, &fo, hist) < 0) goto fail;
    for (i = 0; i < 2; i++)
        printf("epoch %d: loss %.4f, accuracy %.2f%%\n", hist[i].epoch, hist[i].loss, 100 * hist[i].accuracy);
    printf("optimizer steps: %ld (%ld micro-batches of %d)\n", (long)gdl_optim_get_step(opt),
           (long)(2 * gdl_loader_num_batches(loader)), BATCH / MICRO);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "grad_accumulation: %s\n", gdl_last_error());
    gdl_optim_free(opt);
    gdl_module_free(model);
    gdl_loader_free(loader);
    gdl_dataset_free(train);
    gdl_dataset_free(all);
    gdl_shutdown();
    return rc;
}
