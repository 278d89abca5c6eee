/* cnn.c — a small CNN as in the CIFAR-10 tutorials: two conv-relu-pool
   blocks, then two linear layers. Runs on Fashion-MNIST (1x28x28), or on
   CIFAR-10 (3x32x32, with random crop and flip) when given the folder that
   holds data_batch_1.bin .. test_batch.bin. Adam lr 1e-3, batch 64.

   CPU:   cc -O2 -march=native examples/cnn.c -DGPUDL_ZLIB -lz -lm -pthread -o cnn
   CUDA:  nvcc -O3 -arch=sm_90 -DGPUDL_CUDA -DGPUDL_ZLIB examples/cnn.c gpudl_cuda.cu -lcublas -lcublasLt -lnccl -lz -o cnn
   Run:   ./cnn [--data fashion_mnist_dir|cifar10_dir] [--epochs N] [--batch-size N] [--device cpu|cuda] [--seed N] [--csv FILE] [--out-dir DIR]
                [--train-subset N] [--test-subset N]
                [--profile]   (per-op times of the whole gdl_fit, validation included: try --epochs 1)
   Tutorial: docs/tutorial/13-cnn.md (chapter 13). */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "example_args.h"
#include "nets.h"
#include <stdlib.h>

static int is_cifar_dir(const char *dir) {
    char path[1024];
    FILE *f;
    if (!dir) return 0;
    snprintf(path, sizeof path, "%s/data_batch_1.bin", dir);
    if (!(f = fopen(path, "rb"))) return 0;
    fclose(f);
    return 1;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* status lines and errors in the order they happen, also when piped */
    ex_args a = ex_defaults(5, 64);
    int parsed = ex_parse(&a, argc, argv, EX_DATA | EX_EPOCHS | EX_BATCH | EX_DEVICE | EX_SEED | EX_CSV | EX_PROFILE | EX_OUT_DIR | EX_SUBSET |
                          EX_PRECISION,
                          "Trains a small CNN on Fashion-MNIST, or on CIFAR-10 when --data names its folder.");
    const char *dir = a.data;
    int epochs = a.epochs, cifar = is_cifar_dir(dir), C = cifar ? 3 : 1, side = cifar ? 32 : 28;
    gdl_device dev = a.device;
    gdl_dataset *train = NULL, *test = NULL;
    gdl_loader *tl = NULL, *vl = NULL;
    gdl_module *model = NULL;
    gdl_optimizer *opt = NULL;
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_fit_opts fo = gdl_fit_defaults();
    gdl_epoch_stats *hist = NULL;
    int64_t in_shape[4];
    double acc = 0, secs = 0;
    int e, rc = 1;

    if (parsed) return parsed == 1 ? 0 : 2;
    printf("device: %s (%s), data: %s\n", gdl_device_str(dev), gdl_device_name(dev), cifar ? "CIFAR-10" : "Fashion-MNIST");
    gdl_manual_seed(a.seed);
    train = cifar ? gdl_dataset_from_cifar10(dir, 1) : gdl_dataset_fashion_mnist(dir, 1);
    test = cifar ? gdl_dataset_from_cifar10(dir, 0) : gdl_dataset_fashion_mnist(dir, 0);
    if (!train || !test || ex_subset(&train, a.train_subset) < 0 || ex_subset(&test, a.test_subset) < 0 ||
        !(hist = (gdl_epoch_stats *)calloc((size_t)epochs, sizeof *hist)))
        goto fail;

    lo.batch_size = a.batch_size;
    lo.shuffle = 1;
    lo.num_workers = 1;
    lo.pin_memory = 1;
    lo.device = dev;
    if (cifar) { /* the tutorials' augmentation and normalisation */
        int c;
        lo.transform.normalize = 3;
        for (c = 0; c < 3; c++) {
            lo.transform.mean[c] = 0.5;
            lo.transform.std[c] = 0.5;
        }
        lo.transform.crop_padding = 4;
        lo.transform.hflip = 1;
    }
    if (!(tl = gdl_loader_new(train, &lo))) goto fail;
    lo.shuffle = 0;
    lo.batch_size = 500;
    memset(&lo.transform, 0, sizeof lo.transform);
    if (cifar) {
        int c;
        lo.transform.normalize = 3;
        for (c = 0; c < 3; c++) {
            lo.transform.mean[c] = 0.5;
            lo.transform.std[c] = 0.5;
        }
    }
    if (!(vl = gdl_loader_new(test, &lo))) goto fail;

    if (!(model = ex_cnn_net(C, side, 0.25)) || gdl_module_to(model, dev) < 0) goto fail;
    in_shape[0] = 1; in_shape[1] = C; in_shape[2] = side; in_shape[3] = side;
    gdl_module_summary(model, 4, in_shape, stdout);
    if (!(opt = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0)) || gdl_optim_add_module(opt, model, 0) < 0) goto fail;

    fo.epochs = epochs;
    fo.val = vl;
    fo.csv_path = a.csv;
    if (a.profile && gdl_profile_begin() < 0) goto fail;
    if (gdl_fit(model, tl, opt, &fo, hist) < 0) goto fail;
    if (a.profile && ex_profile_print("gdl_fit", dev) < 0) goto fail;
    for (e = 0; e < epochs; e++) secs += hist[e].seconds;
    acc = hist[epochs - 1].val_accuracy;
    printf("test accuracy %.2f%% after %d epoch%s, %.2f s per training epoch on %s\n", 100 * acc, epochs,
           epochs == 1 ? "" : "s", secs / epochs, gdl_device_str(dev));
    ex_print_fit_flops(model, tl, hist, epochs, a.batch_size, dev, GDL_F32);
    if (a.csv) ex_wrote(a.csv);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "cnn: %s\n", gdl_last_error());
    ex_free_training(NULL, opt, model, tl, vl, train, test);
    free(hist);
    gdl_shutdown();
    return rc;
}
