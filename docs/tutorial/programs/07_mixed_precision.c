/* 07_mixed_precision.c — mixed precision: the forward pass in 16-bit floats
   (bf16 or f16) under autocast, the loss and the weights in f32, and for
   f16 a gradient scaler so small gradients do not round to zero. Trains the
   same MLP three times on 6,000 Fashion-MNIST images (f32, bf16, f16 with a
   GradScaler) and compares losses, accuracies and memory.

   Build and run from gpudl's repository root (Fashion-MNIST: `sh tools/fetch_data.sh`):
       cc -O2 -DGPUDL_ZLIB docs/tutorial/programs/07_mixed_precision.c -lz -lm -pthread -o mixed_precision && ./mixed_precision
   A CPU has no fast 16-bit arithmetic: here the 16-bit runs show the numerics
   and the memory saved, not speed. On a GPU with tensor cores (V100 and later;
   bf16 from A100) the 16-bit matrix products are where the speed comes from. */
#define GPUDL_IMPLEMENTATION
#include "../../../gpudl.h"

#define EPOCHS 1
#define BATCH 64

/* Trains a fresh 784-256-10 MLP; amp is GDL_F32 (off), GDL_BF16 or GDL_F16 (then with a GradScaler). */
static int train(gdl_dataset *train_set, gdl_dataset *test_set, gdl_device dev, gdl_dtype amp) {
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_loader *tl = NULL, *el = NULL;
    gdl_module *layers[4], *model = NULL;
    gdl_optimizer *opt = NULL;
    gdl_grad_scaler *scaler = NULL;
    gdl_memory_status mem;
    double loss_sum = 0, acc = 0;
    int64_t batches = 0;
    int epoch, got = 0, rc = -1;
    gdl_dtype logits_dtype = GDL_F32, loss_dtype = GDL_F32;

    gdl_manual_seed(0); /* the same start for the three runs */
    lo.batch_size = BATCH;
    lo.shuffle = 1;
    lo.device = dev;
    layers[0] = gdl_nn_flatten(1);
    layers[1] = gdl_nn_linear(784, 256, 1);
    layers[2] = gdl_nn_relu();
    layers[3] = gdl_nn_linear(256, 10, 1);
    if (!(tl = gdl_loader_new(train_set, &lo)) || !(model = gdl_nn_sequential(4, layers)) ||
        gdl_module_to(model, dev) < 0 || !(opt = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0)) ||
        gdl_optim_add_module(opt, model, 0) < 0)
        goto out;
    if (amp == GDL_F16 && !(scaler = gdl_grad_scaler_new(NULL))) goto out; /* torch.amp.GradScaler() */
    gdl_memory_reset_peak(dev);
    for (epoch = 1; epoch <= EPOCHS; epoch++) {
        gdl_tensor *x, *y;
        loss_sum = 0, batches = 0;
        while ((got = gdl_loader_next(tl, &x, &y)) == 1) {
            gdl_tensor *logits, *loss;
            gdl_arena_reset();
            gdl_zero_grad(opt);
            if (amp != GDL_F32 && gdl_autocast_begin(amp) < 0) goto out; /* with torch.autocast(...): */
            logits = gdl_forward(model, x);                              /*   16-bit matrix products   */
            loss = gdl_cross_entropy(logits, y);                         /*   the loss in f32          */
            if (amp != GDL_F32) gdl_autocast_end();                      /* backward outside the region */
            if (!loss) goto out;
            logits_dtype = logits->dtype, loss_dtype = loss->dtype;
            if (scaler) { /* scaler.scale(loss).backward(); scaler.step(opt); scaler.update() */
                if (gdl_backward(gdl_grad_scaler_scale(scaler, loss)) < 0 || gdl_grad_scaler_step(scaler, opt) < 0 ||
                    gdl_grad_scaler_update(scaler) < 0)
                    goto out;
            } else if (gdl_backward(loss) < 0 || gdl_step(opt) < 0) {
                goto out;
            }
            loss_sum += gdl_item(loss);
            batches++;
        }
        if (got < 0) goto out;
    }
    if (gdl_memory_stats(dev, &mem) < 0) goto out;
    lo.shuffle = 0;
    lo.batch_size = 500;
    if (!(el = gdl_loader_new(test_set, &lo))) goto out;
    if (amp != GDL_F32 && gdl_autocast_begin(amp) < 0) goto out; /* evaluate in the same precision */
    rc = gdl_evaluate(model, el, NULL, NULL, NULL, &acc);
    if (amp != GDL_F32) gdl_autocast_end();
    if (rc < 0) goto out;
    printf("%-13s %-6s %-6s %10.4f %9.2f%% %10.1f KiB", amp == GDL_F32 ? "f32" : amp == GDL_BF16 ? "bf16" : "f16 + scaler",
           gdl_dtype_name(logits_dtype), gdl_dtype_name(loss_dtype), loss_sum / (double)batches, 100 * acc,
           mem.arena_used / 1024.0);
    if (scaler) printf("   scale %.0f", gdl_grad_scaler_get_scale(scaler));
    printf("\n");
    rc = 0;
out:
    gdl_grad_scaler_free(scaler);
    gdl_optim_free(opt);
    gdl_module_free(model);
    gdl_loader_free(tl);
    gdl_loader_free(el);
    return rc;
}

int main(void) {
    static const gdl_dtype modes[3] = {GDL_F32, GDL_BF16, GDL_F16};
    gdl_device dev = gdl_default_device();
    gdl_dataset *train_all = NULL, *test_all = NULL, *train_set = NULL, *test_set = NULL;
    int k, rc = 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!(train_all = gdl_dataset_fashion_mnist(NULL, 1)) || !(test_all = gdl_dataset_fashion_mnist(NULL, 0)) ||
        !(train_set = gdl_dataset_subset(train_all, 0, 6000)) || !(test_set = gdl_dataset_subset(test_all, 0, 2000)))
        goto fail;
    printf("device %s, %d epoch%s on 6000 images; last epoch's mean loss, test accuracy on 2000 images,\n"
           "and the arena (the step's temporaries: activations, saved tensors) after the last step\n\n",
           gdl_device_str(dev), EPOCHS, EPOCHS == 1 ? "" : "s");
    printf("%-13s %-6s %-6s %10s %10s %14s\n", "precision", "logits", "loss", "train loss", "test acc", "step memory");
    for (k = 0; k < 3; k++)
        if (train(train_set, test_set, dev, modes[k]) < 0) goto fail;
    rc = 0;
fail:
    if (rc) fprintf(stderr, "mixed_precision: %s\n", gdl_last_error());
    gdl_dataset_free(train_set), gdl_dataset_free(test_set), gdl_dataset_free(train_all), gdl_dataset_free(test_all);
    gdl_shutdown();
    return rc;
}
