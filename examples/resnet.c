/* resnet.c — a small ResNet on Fashion-MNIST with the resnet10 recipe of examples/recipe.h: a
   3x3 conv stem of 32 channels with BatchNorm and ReLU, two stages of two torchvision BasicBlocks (32-64
   stride 2 with a projection shortcut, 64-64; 64-128 stride 2 with a projection, 128-128), global average
   pool, linear 128-10: 658,922 parameters, 51.6 M multiply-adds per image. Trained with SGD nesterov
   (lr 0.1, weight decay 5e-4 off the biases and norm weights), warm-up + cosine per batch, label
   smoothing 0.1, random crop (padding 2) + flip, an EMA of the weights; each epoch's test pass uses the
   EMA weights and averages the outputs with the flipped image's. 30 epochs reach 94.91 % (seed 0; the
   PyTorch twin's figures are in bench/RESULTS.md); one epoch takes about 200 s on 2 CPU cores (not yet
   timed on a GPU). bench/recipes.c --net resnet10 times it against its PyTorch twin; --net resnet is the
   same net with one BasicBlock a stage (93.94 %).

   CPU:   cc -O2 -march=native examples/resnet.c -DGPUDL_ZLIB -lz -lm -pthread -o resnet
   CUDA:  nvcc -O3 -arch=sm_90 -DGPUDL_CUDA -DGPUDL_ZLIB examples/resnet.c gpudl_cuda.cu -lcublas -lcublasLt -lnccl -lz -o resnet
   Run:   ./resnet [--data DIR] [--epochs N (default 30)] [--batch-size N (default 128)] [--device cpu|cuda]
                   [--seed N] [--csv FILE (default resnet_metrics.csv; `make plot` draws such a file)] [--out-dir DIR]
                   [--train-subset N] [--test-subset N]   (the first N samples only: a quick run)
   Tutorial: docs/tutorial/13-cnn.md (chapter 13). */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "example_args.h"
#include "recipe.h"
#include <stdlib.h>

int main(int argc, char **argv) {
    const ex_recipe *r = ex_recipe_find("resnet10");
    ex_args a = ex_defaults(r->epochs, EX_RECIPE_BATCH);
    ex_run run;
    gdl_epoch_stats *hist = NULL;
    int64_t in_shape[4] = {1, 1, 28, 28};
    double secs = 0;
    int e, parsed, rc = 1;

    setvbuf(stdout, NULL, _IOLBF, 0); /* status lines and errors in the order they happen, also when piped */
    a.csv = "resnet_metrics.csv";
    parsed = ex_parse(&a, argc, argv, EX_DATA | EX_EPOCHS | EX_BATCH | EX_DEVICE | EX_SEED | EX_CSV | EX_SUBSET | EX_OUT_DIR |
                      EX_PRECISION,
                      "Trains a small ResNet on Fashion-MNIST with a full training recipe (see the source's top).");
    if (parsed) return parsed == 1 ? 0 : 2;
    printf("device: %s (%s)\n", gdl_device_str(a.device), gdl_device_name(a.device));
    if (ex_recipe_setup(r, &a, r->ema_decay, &run) < 0) goto fail;
    if (!(hist = (gdl_epoch_stats *)calloc((size_t)a.epochs, sizeof *hist))) goto fail;
    gdl_module_summary(run.model, 4, in_shape, stdout);
    run.fo.epochs = a.epochs;
    run.fo.csv_path = a.csv;
    if (gdl_fit(run.model, run.tl, run.opt, &run.fo, hist) < 0) goto fail;
    for (e = 0; e < a.epochs; e++) secs += hist[e].seconds;
    printf("test accuracy %.2f%% (EMA weights, flip-averaged) after %d epoch%s, %.2f s per training epoch on %s\n",
           100 * hist[a.epochs - 1].val_accuracy, a.epochs, a.epochs == 1 ? "" : "s", secs / a.epochs,
           gdl_device_str(a.device));
    ex_print_fit_flops(run.model, run.tl, hist, a.epochs, a.batch_size, a.device, GDL_F32);
    ex_wrote(a.csv);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "resnet: %s\n", gdl_last_error());
    ex_recipe_free(&run);
    free(hist);
    gdl_shutdown();
    return rc;
}
