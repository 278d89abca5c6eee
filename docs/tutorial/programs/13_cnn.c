/* 13_cnn.c — convolutional networks on images: a small CNN (two blocks of
   convolution, ReLU and max pooling, then two linear layers) trained on
   Fashion-MNIST (1x28x28 grey images), then the same design on CIFAR-10
   (3x32x32 colour photos) with the usual augmentation (random crop, flip)
   and per-channel normalisation, when CIFAR-10 is on disk.

   Build and run from gpudl's repository root (Fashion-MNIST: `sh tools/fetch_data.sh`):
       cc -O2 -DGPUDL_ZLIB docs/tutorial/programs/13_cnn.c -lz -lm -pthread -o cnn && ./cnn [CIFAR10_DIR]
   CIFAR10_DIR holds data_batch_1.bin .. data_batch_5.bin and test_batch.bin
   (default: data/cifar-10-batches-bin); without it the CIFAR-10 part is
   skipped with a message saying how to get it. Convolutions are where a GPU
   pays off most: on a GPU build the same code runs them through cuBLAS. */
#define GPUDL_IMPLEMENTATION
#include "../../../gpudl.h"
#include <stdio.h>

#define TRAIN_IMAGES 2000
#define TEST_IMAGES 1000

/* conv(C->16) relu pool, conv(16->32) relu pool, flatten, linear(32*(side/4)^2 -> 64) relu, linear(64 -> 10) */
static gdl_module *small_cnn(int channels, int side) {
    gdl_module *l[10];
    l[0] = gdl_nn_conv2d(channels, 16, 3, 1, 1, 1, 1, 1); /* in, out, kernel 3, stride 1, padding 1, dilation, groups, bias */
    l[1] = gdl_nn_relu();
    l[2] = gdl_nn_maxpool2d(2, 2, 0);
    l[3] = gdl_nn_conv2d(16, 32, 3, 1, 1, 1, 1, 1);
    l[4] = gdl_nn_relu();
    l[5] = gdl_nn_maxpool2d(2, 2, 0);
    l[6] = gdl_nn_flatten(1);
    l[7] = gdl_nn_linear(32 * (side / 4) * (side / 4), 64, 1);
    l[8] = gdl_nn_relu();
    l[9] = gdl_nn_linear(64, 10, 1);
    return gdl_nn_sequential(10, l);
}

/* Trains the CNN on the first TRAIN_IMAGES (at most) of train_all for `epochs`, tests it on TEST_IMAGES of test_all.
   augment: CIFAR-10's normalisation, random crop and flip. */
static int train_and_test(const char *name, gdl_dataset *train_all, gdl_dataset *test_all, int epochs, int augment) {
    gdl_device dev = gdl_default_device();
    gdl_dataset *train = NULL, *test = NULL;
    gdl_loader *tl = NULL, *el = NULL;
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_fit_opts fo = gdl_fit_defaults();
    gdl_epoch_stats hist[8];
    gdl_module *model = NULL;
    gdl_optimizer *opt = NULL;
    int64_t in_shape[4] = {1, 0, 0, 0};
    int c, e, rc = -1;
    in_shape[1] = train_all->shape[0], in_shape[2] = train_all->shape[1], in_shape[3] = train_all->shape[2];
    gdl_manual_seed(0);
    if (!(train = gdl_dataset_subset(train_all, 0, train_all->n < TRAIN_IMAGES ? train_all->n : TRAIN_IMAGES)) ||
        !(test = gdl_dataset_subset(test_all, 0, test_all->n < TEST_IMAGES ? test_all->n : TEST_IMAGES)))
        goto out;
    lo.batch_size = 64;
    lo.shuffle = 1;
    lo.num_workers = 1;
    lo.pin_memory = 1;
    lo.device = dev;
    if (augment) { /* transforms.Normalize((0.5,)*3, (0.5,)*3), RandomCrop(32, padding=4), RandomHorizontalFlip() */
        lo.transform.normalize = 3;
        for (c = 0; c < 3; c++) lo.transform.mean[c] = 0.5, lo.transform.std[c] = 0.5;
        lo.transform.crop_padding = 4;
        lo.transform.hflip = 1;
    }
    if (!(tl = gdl_loader_new(train, &lo))) goto out;
    lo.shuffle = 0;
    lo.batch_size = 500;
    lo.transform.crop_padding = 0, lo.transform.hflip = 0; /* the test set: normalised only */
    if (!(el = gdl_loader_new(test, &lo))) goto out;
    if (!(model = small_cnn((int)in_shape[1], (int)in_shape[2])) || gdl_module_to(model, dev) < 0) goto out;
    printf("%s: %ld training and %ld test images of %ldx%ldx%ld, %ld parameters, on %s\n", name, (long)train->n,
           (long)test->n, (long)in_shape[1], (long)in_shape[2], (long)in_shape[3], (long)gdl_module_num_params(model),
           gdl_device_str(dev));
    if (!(opt = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0)) || gdl_optim_add_module(opt, model, 0) < 0) goto out;
    fo.epochs = epochs;
    fo.val = el;
    fo.verbose = 0;
    if (gdl_fit(model, tl, opt, &fo, hist) < 0) goto out;
    for (e = 0; e < epochs; e++)
        printf("  epoch %d: loss %.4f, test accuracy %.2f%% (%.2f s)\n", hist[e].epoch, hist[e].loss,
               100 * hist[e].val_accuracy, hist[e].seconds);
    rc = 0;
out:
    gdl_optim_free(opt);
    gdl_module_free(model);
    gdl_loader_free(tl), gdl_loader_free(el);
    gdl_dataset_free(train), gdl_dataset_free(test);
    return rc;
}

int main(int argc, char **argv) {
    const char *cifar_dir = argc > 1 ? argv[1] : "data/cifar-10-batches-bin";
    gdl_dataset *train = NULL, *test = NULL;
    char probe[1024];
    FILE *f;
    int rc = 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 2) {
        fprintf(stderr, "usage: %s [CIFAR10_DIR]\n", argv[0]);
        return 2;
    }
    /* 1. Fashion-MNIST */
    if (!(train = gdl_dataset_fashion_mnist(NULL, 1)) || !(test = gdl_dataset_fashion_mnist(NULL, 0)) ||
        train_and_test("Fashion-MNIST", train, test, 2, 0) < 0)
        goto fail;
    gdl_dataset_free(train), gdl_dataset_free(test);
    train = test = NULL;

    /* 2. CIFAR-10, when its files are there */
    snprintf(probe, sizeof probe, "%s/data_batch_1.bin", cifar_dir);
    if (!(f = fopen(probe, "rb"))) {
        printf("CIFAR-10: skipped, %s not found. Get the binary version (cifar-10-binary.tar.gz, 162 MiB)\n"
               "from the CIFAR-10 page and unpack it into data/, or name its folder: ./cnn DIR\n", probe);
        rc = 0;
        goto fail;
    }
    fclose(f);
    if (!(train = gdl_dataset_from_cifar10(cifar_dir, 1)) || !(test = gdl_dataset_from_cifar10(cifar_dir, 0)) ||
        train_and_test("CIFAR-10", train, test, 2, 1) < 0)
        goto fail;
    rc = 0;
fail:
    if (rc) fprintf(stderr, "cnn: %s\n", gdl_last_error());
    gdl_dataset_free(train), gdl_dataset_free(test);
    gdl_shutdown();
    return rc;
}
