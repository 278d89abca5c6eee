/* 05_fit.c — Keras' model.summary(), fit(), evaluate() and save() in C:
   gdl_fit runs the loop of chapter 4 for you (with the progress bar, the
   validation pass, a metrics CSV and, if asked, checkpoints). The same MLP
   with batch norm and dropout, trained on 6,000 Fashion-MNIST images with
   1,000 held out for validation, then tested on 2,000 test images.

   Build and run from gpudl's repository root (Fashion-MNIST: `sh tools/fetch_data.sh`):
       cc -O2 -DGPUDL_ZLIB docs/tutorial/programs/05_fit.c -lz -lm -pthread -o fit && ./fit
   On a GPU build the loaders deliver to cuda:0 and the code is the same
   (gdl_fit captures a step as a CUDA graph where it can; this model's
   dropout keeps it eager, with one notice). */
#define GPUDL_IMPLEMENTATION
#include "../../../gpudl.h"
#include "fashion_data.h"

#define EPOCHS 3

int main(void) {
    gdl_device dev = gdl_default_device();
    gdl_dataset *train = NULL, *val = NULL, *test = NULL;
    gdl_loader *train_loader = NULL, *val_loader = NULL, *test_loader = NULL;
    gdl_fit_opts fo = gdl_fit_defaults();
    gdl_epoch_stats history[EPOCHS];
    gdl_module *model = NULL, *layers[7];
    gdl_optimizer *opt = NULL;
    int64_t input_shape[4] = {1, 1, 28, 28};
    double test_loss, test_acc, reloaded_acc;
    int e, rc = 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    gdl_manual_seed(0);
    /* data (fashion_data.h, as in chapter 4); the 1,000 training images after the first 6,000: validation */
    if (!(train = fashion_slice(1, 0, 6000)) || !(val = fashion_slice(1, 6000, 1000)) ||
        !(test = fashion_slice(0, 0, 2000)) || !(train_loader = fashion_loader(train, 64, 1, dev)) ||
        !(val_loader = fashion_loader(val, 500, 0, dev)) || !(test_loader = fashion_loader(test, 500, 0, dev)))
        goto fail;

    layers[0] = gdl_nn_flatten(1);
    layers[1] = gdl_nn_linear(784, 128, 1);
    layers[2] = gdl_nn_batchnorm1d(128);
    layers[3] = gdl_nn_relu();
    layers[4] = gdl_nn_dropout(0.2);
    layers[5] = gdl_nn_linear(128, 10, 1);
    if (!(model = gdl_nn_sequential(6, layers)) || gdl_module_to(model, dev) < 0) goto fail;
    gdl_module_summary(model, 4, input_shape, stdout); /* model.summary() */

    /* model.compile(optimizer=Adam(1e-3), loss=cross entropy): the loss is gdl_fit's default */
    if (!(opt = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0)) || gdl_optim_add_module(opt, model, 0) < 0) goto fail;

    /* model.fit(train, epochs=EPOCHS, validation_data=val) */
    fo.epochs = EPOCHS;
    fo.val = val_loader;
    fo.verbose = 0; /* this program prints its own lines from the history below */
    if (gdl_fit(model, train_loader, opt, &fo, history) < 0) goto fail;
    for (e = 0; e < EPOCHS; e++)
        printf("epoch %d: loss %.4f, accuracy %.2f%%, val_loss %.4f, val_accuracy %.2f%% (%.2f s, %.0f samples/s)\n",
               history[e].epoch, history[e].loss, 100 * history[e].accuracy, history[e].val_loss,
               100 * history[e].val_accuracy, history[e].seconds, history[e].samples_per_sec);

    /* model.evaluate(test) */
    if (gdl_evaluate(model, test_loader, NULL, NULL, &test_loss, &test_acc) < 0) goto fail;
    printf("test loss %.4f, test accuracy %.2f%%\n", test_loss, 100 * test_acc);

    /* model.save() and a load into the same architecture */
    if (gdl_save_model(model, "fit_model.safetensors") < 0 || gdl_load_model(model, "fit_model.safetensors") < 0 ||
        gdl_evaluate(model, test_loader, NULL, NULL, NULL, &reloaded_acc) < 0)
        goto fail;
    printf("saved fit_model.safetensors, loaded it back: test accuracy %.2f%%\n", 100 * reloaded_acc);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "fit: %s\n", gdl_last_error());
    gdl_optim_free(opt);
    gdl_module_free(model);
    gdl_loader_free(train_loader), gdl_loader_free(val_loader), gdl_loader_free(test_loader);
    gdl_dataset_free(train), gdl_dataset_free(val), gdl_dataset_free(test);
    gdl_shutdown();
    return rc;
}
