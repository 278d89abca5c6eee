/* keras_style.c — Keras' model.summary() / compile / fit / evaluate, in C:
   a Sequential MLP with batch norm and dropout on Fashion-MNIST, SGD with
   Nesterov momentum and weight decay (none on biases and norms), a cosine
   learning-rate schedule, a validation split, per-epoch history and a
   metrics CSV, then a checkpoint saved as safetensors and loaded back.

   CPU:   cc -O2 -march=native examples/keras_style.c -DGPUDL_ZLIB -lz -lm -pthread -o keras_style
   CUDA:  nvcc -O3 -arch=sm_90 -DGPUDL_CUDA -DGPUDL_ZLIB examples/keras_style.c gpudl_cuda.cu -lcublas -lcublasLt -lnccl -lz -o keras_style
   Run:   ./keras_style [--data DIR] [--epochs N] [--batch-size N] [--device cpu|cuda] [--seed N] [--csv FILE]
                         [--save FILE] [--out-dir DIR]
   Tutorial: docs/tutorial/05-fit.md (chapter 5). */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "example_args.h"

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* status lines and errors in the order they happen, also when piped */
    ex_args a = ex_defaults(3, 128);
    int parsed, epochs, rc = 1;
    const char *save = "keras_style.safetensors";
    const ex_opt extra[] = {{"--save", 'o', &save, 0, 0, "the trained model, saved and loaded back (safetensors)", "FILE"}};
    gdl_device dev;
    gdl_dataset *all = NULL, *train = NULL, *val = NULL, *test = NULL;
    gdl_loader *tl = NULL, *vl = NULL, *el = NULL;
    gdl_module *model = NULL, *layers[9];
    gdl_optimizer *opt = NULL;
    gdl_scheduler *sched = NULL;
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_fit_opts fo = gdl_fit_defaults();
    gdl_epoch_stats *hist;
    int64_t in_shape[4] = {1, 1, 28, 28};
    double test_loss, test_acc, again;

    a.seed = 1;
    a.csv = "keras_style_metrics.csv";
    parsed = ex_parse_opts(&a, argc, argv, EX_DATA | EX_EPOCHS | EX_BATCH | EX_DEVICE | EX_SEED | EX_CSV | EX_OUT_DIR |
                           EX_PRECISION,
                           "Keras-style summary / fit / evaluate / save of an MLP with batch norm on Fashion-MNIST.",
                           extra, 1);
    if (parsed) return parsed == 1 ? 0 : 2;
    epochs = a.epochs;
    dev = a.device;
    hist = (gdl_epoch_stats *)calloc((size_t)epochs, sizeof *hist);
    gdl_manual_seed(a.seed);
    if (!hist || !(all = gdl_dataset_fashion_mnist(a.data, 1)) || !(test = gdl_dataset_fashion_mnist(a.data, 0))) goto fail;
    /* validation_split = 1/12 */
    if (!(train = gdl_dataset_subset(all, 0, 55000)) || !(val = gdl_dataset_subset(all, 55000, 5000))) goto fail;

    layers[0] = gdl_nn_flatten(1);
    layers[1] = gdl_nn_linear(784, 256, 1);
    layers[2] = gdl_nn_batchnorm1d(256);
    layers[3] = gdl_nn_relu();
    layers[4] = gdl_nn_dropout(0.2);
    layers[5] = gdl_nn_linear(256, 128, 1);
    layers[6] = gdl_nn_relu();
    layers[7] = gdl_nn_linear(128, 10, 1);
    if (!(model = gdl_nn_sequential(8, layers)) || gdl_module_to(model, dev) < 0) goto fail;
    gdl_module_summary(model, 4, in_shape, stdout); /* model.summary() */

    /* model.compile(optimizer=SGD(0.05, momentum=0.9, nesterov=True), loss=cross entropy) */
    if (!(opt = gdl_sgd_new(0.05, 0.9, 0, 5e-4, 1)) || gdl_optim_add_module(opt, model, 1) < 0) goto fail;
    if (!(sched = gdl_cosine_lr_new(opt, epochs, 0))) goto fail;

    lo.batch_size = a.batch_size;
    lo.shuffle = 1;
    lo.num_workers = 2;
    lo.device = dev;
    lo.pin_memory = 1;
    if (!(tl = gdl_loader_new(train, &lo))) goto fail;
    lo.shuffle = 0;
    lo.batch_size = 1000;
    if (!(vl = gdl_loader_new(val, &lo)) || !(el = gdl_loader_new(test, &lo))) goto fail;

    /* model.fit(x, y, epochs, batch_size, validation_data) */
    fo.epochs = epochs;
    fo.val = vl;
    fo.scheduler = sched;
    fo.csv_path = a.csv;
    if (gdl_fit(model, tl, opt, &fo, hist) < 0) goto fail;
    /* model.evaluate(x_test, y_test) */
    if (gdl_evaluate(model, el, NULL, NULL, &test_loss, &test_acc) < 0) goto fail;
    printf("test loss %.4f, test accuracy %.2f%%, last epoch %.0f samples/s\n", test_loss, 100 * test_acc,
           hist[epochs - 1].samples_per_sec);
    ex_wrote(a.csv);

    /* model.save / load */
    if (gdl_save_model(model, save) < 0 || gdl_load_model(model, save) < 0 ||
        gdl_evaluate(model, el, NULL, NULL, NULL, &again) < 0)
        goto fail;
    ex_wrote(save);
    printf("loaded %s back: test accuracy %.2f%%\n", save, 100 * again);
    /* the last epoch's utilisation (after the save: counting a step trains batch norm's statistics) */
    ex_print_fit_flops(model, tl, hist + epochs - 1, 1, a.batch_size, dev, GDL_F32);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "keras_style: %s\n", gdl_last_error());
    ex_free_training(sched, opt, model, tl, vl, train, test);
    gdl_loader_free(el);
    gdl_dataset_free(all);
    gdl_dataset_free(val);
    free(hist);
    gdl_shutdown();
    return rc;
}
