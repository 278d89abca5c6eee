/* recipe.h — the training recipes for small nets on Fashion-MNIST: four nets (an MLP, the
   batch-normed CNN of bench/fmnist92.c, a small ResNet and a deeper one, resnet10, examples/resnet.c's) and for each its
   augmentation, loss, optimizer, schedule and weight EMA. examples/resnet.c and bench/recipes.c build
   from it; bench/pytorch/recipes.py is the same in PyTorch (keep the two in step).

   Every recipe: inputs normalised by 0.2860/0.3530, random horizontal flips, RandomErasing (value 0, on
   the normalised image; only for the mlp), cross entropy with label smoothing 0.1, the 0-D/1-D parameters (biases, norm
   weights) without weight decay, a linear warm-up from 0.1 x lr over the first 5 % of the steps then a
   cosine to 0 (stepped per batch), an EMA of the weights and BatchNorm statistics (used for every test
   pass; its decay is capped at 1 - 10 / (the run's steps), so that a short run averages over its last
   tenth or so rather than keep its initial weights), and at test time the outputs averaged with those of the flipped image.
     mlp     flatten, 784-512 BN ReLU dropout 0.2, 512-256 BN ReLU dropout 0.2, 256-10;
             AdamW lr 2e-3 weight decay 0.05; erasing p 0.25; 30 epochs
     cnn     bench/fmnist92.c's net (conv32-BN-ReLU-pool, conv64-BN-ReLU-pool, conv128-BN-ReLU,
             linear 6272-10); SGD nesterov 0.9 lr 0.05 weight decay 5e-4; random crop with padding 2,
             no erasing (seed 0: 93.78 % without it, 93.49 % with p 0.1, 93.43 % with p 0.25: with
             everything else this small net is short of capacity, not of regularisation); 30 epochs
     resnet  conv3x3 1-32 BN ReLU (28x28), BasicBlock 32-64 stride 2 (14x14), BasicBlock 64-128 stride 2
             (7x7), global average pool, linear 128-10; recipe as cnn but lr 0.1 (seed 0: 93.94 %, and
             93.89 % with erasing p 0.25: both short of the 94.5 % aim, the training loss still 0.62)
     resnet10 resnet with two BasicBlocks a stage (32-64 stride 2, 64-64; 64-128 stride 2, 128-128):
             10 weight layers, 658,922 parameters, 2.3x resnet's multiply-adds; recipe as resnet. The
             capacity the underfitting resnet lacked: seed 0 94.91 % (94.5 % from epoch 22)
   Batch 128 and EMA decay 0.999 for all. Not part of gpudl's API: a helper of the programs. */
#ifndef GPUDL_EXAMPLE_RECIPE_H
#define GPUDL_EXAMPLE_RECIPE_H

#include <string.h>

#include "example_args.h"
#include "nets.h"

typedef struct ex_recipe {
    const char *net;         /* mlp, cnn, resnet or resnet10 */
    int epochs;              /* planned (the schedule's length) */
    int sgd;                 /* 1: SGD nesterov, momentum 0.9; 0: AdamW (0.9, 0.999, 1e-8) */
    double lr, weight_decay;
    int crop_padding;        /* RandomCrop's padding; 0: no crop */
    double erase_p;          /* RandomErasing's probability */
    double label_smoothing, ema_decay;
} ex_recipe;

static const ex_recipe ex_recipes[] = {
    {"mlp", 30, 0, 2e-3, 0.05, 0, 0.25, 0.1, 0.999},
    {"cnn", 30, 1, 0.05, 5e-4, 2, 0, 0.1, 0.999},
    {"resnet", 30, 1, 0.1, 5e-4, 2, 0, 0.1, 0.999},
    {"resnet10", 30, 1, 0.1, 5e-4, 2, 0, 0.1, 0.999},
};
enum { EX_RECIPE_BATCH = 128 };

/* The recipe of the net called name; NULL if there is none. */
static inline const ex_recipe *ex_recipe_find(const char *name) {
    size_t i;
    for (i = 0; i < sizeof ex_recipes / sizeof ex_recipes[0]; i++)
        if (!strcmp(ex_recipes[i].net, name)) return &ex_recipes[i];
    return NULL;
}

/* The net of r, on the CPU (PyTorch's default initialisation). NULL + error. */
static inline gdl_module *ex_recipe_net(const ex_recipe *r) {
    gdl_module *l[16];
    int k = 0;
    if (!strcmp(r->net, "mlp")) {
        l[k++] = gdl_nn_flatten(1);
        l[k++] = gdl_nn_linear(784, 512, 1);
        l[k++] = gdl_nn_batchnorm1d(512);
        l[k++] = gdl_nn_relu();
        l[k++] = gdl_nn_dropout(0.2);
        l[k++] = gdl_nn_linear(512, 256, 1);
        l[k++] = gdl_nn_batchnorm1d(256);
        l[k++] = gdl_nn_relu();
        l[k++] = gdl_nn_dropout(0.2);
        l[k++] = gdl_nn_linear(256, 10, 1);
    } else if (!strcmp(r->net, "cnn")) {
        k = ex_bn_cnn_layers(l, k);
    } else {
        const int two = !strcmp(r->net, "resnet10"); /* two BasicBlocks a stage */
        l[k++] = gdl_nn_conv2d(1, 32, 3, 1, 1, 1, 1, 0); /* no bias: BatchNorm follows, as in torchvision */
        l[k++] = gdl_nn_batchnorm2d(32);
        l[k++] = gdl_nn_relu();
        l[k++] = gdl_nn_basic_block(32, 64, 2);
        if (two) l[k++] = gdl_nn_basic_block(64, 64, 1);
        l[k++] = gdl_nn_basic_block(64, 128, 2);
        if (two) l[k++] = gdl_nn_basic_block(128, 128, 1);
        l[k++] = gdl_nn_global_avgpool2d();
        l[k++] = gdl_nn_flatten(1);
        l[k++] = gdl_nn_linear(128, 10, 1);
    }
    return gdl_nn_sequential(k, l);
}

/* t: no augmentation, inputs normalised by Fashion-MNIST's pixel mean and standard deviation */
static inline void ex_recipe_normalize(gdl_transform *t) {
    memset(t, 0, sizeof *t);
    t->normalize = 1;
    t->mean[0] = 0.2860;
    t->std[0] = 0.3530;
}

/* The training loader (shuffled, augmented) and the test loader (batches of 1000), both normalised,
   delivering to dev. 0 / -1 + error (a loader made is left in *tl / *vl for the caller to free). */
static inline int ex_recipe_loaders(const ex_recipe *r, gdl_dataset *train, gdl_dataset *test, int batch_size,
                                    uint64_t seed, gdl_device dev, gdl_loader **tl, gdl_loader **vl) {
    gdl_loader_opts lo = gdl_loader_defaults();
    lo.batch_size = batch_size;
    lo.shuffle = 1;
    lo.seed = seed;
    lo.num_workers = 2;
    lo.pin_memory = 1;
    lo.device = dev;
    ex_recipe_normalize(&lo.transform);
    lo.transform.crop_padding = r->crop_padding;
    lo.transform.hflip = 1;
    lo.transform.erase_p = r->erase_p; /* torchvision's scale (0.02, 0.33) and ratio (0.3, 3.3), value 0 */
    if (!(*tl = gdl_loader_new(train, &lo))) return -1;
    lo.shuffle = 0;
    lo.batch_size = 1000;
    ex_recipe_normalize(&lo.transform);
    return (*vl = gdl_loader_new(test, &lo)) ? 0 : -1;
}

/* The optimizer (no decay on biases and norm weights) over m, already on its device, the per-batch
   warm-up + cosine schedule over epochs x steps_per_epoch steps, and the EMA (ema_decay 0: none, *ema
   NULL; capped at 1 - 10 / steps). 0 / -1 + error (what was made is left in the outputs for the caller to free). */
static inline int ex_recipe_optim(const ex_recipe *r, gdl_module *m, int64_t steps_per_epoch, int epochs,
                                  double ema_decay, gdl_optimizer **opt, gdl_scheduler **sched, gdl_ema **ema) {
    int total = (int)(steps_per_epoch * epochs), warmup = total / 20 > 0 ? total / 20 : 1;
    *sched = NULL;
    *ema = NULL;
    *opt = r->sgd ? gdl_sgd_new(r->lr, 0.9, 0, r->weight_decay, 1)
                  : gdl_adamw_new(r->lr, 0.9, 0.999, 1e-8, r->weight_decay);
    if (!*opt || gdl_optim_add_module(*opt, m, 1) < 0) return -1;
    if (warmup >= total) warmup = total - 1; /* a run of one step: no warm-up */
    if (!(*sched = gdl_warmup_cosine_lr_new(*opt, warmup, 0.1, total - warmup, 0))) return -1;
    if (ema_decay > 1 - 10.0 / total) ema_decay = total > 10 ? 1 - 10.0 / total : 0;
    if (ema_decay > 0 && !(*ema = gdl_ema_new(*opt, m, ema_decay, 1))) return -1;
    return 0;
}

/* gdl_fit's options for the recipe: the loss (label smoothing from r, kept in *ce), the per-batch
   schedule, the test loader with flip averaging. */
static inline gdl_fit_opts ex_recipe_fit_opts(const ex_recipe *r, gdl_loader *vl, gdl_scheduler *sched,
                                              gdl_ce_opts *ce) {
    gdl_fit_opts fo = gdl_fit_defaults();
    *ce = gdl_ce_defaults();
    ce->label_smoothing = r->label_smoothing;
    fo.loss = gdl_loss_cross_entropy;
    fo.loss_user = ce;
    fo.val = vl;
    fo.val_tta_hflip = 1;
    fo.scheduler = sched;
    fo.scheduler_per_batch = 1;
    return fo;
}

/* What a recipe's run holds; ex_recipe_setup fills it, ex_recipe_free frees it (also half made). */
typedef struct ex_run {
    gdl_dataset *train, *test;
    gdl_loader *tl, *vl;
    gdl_module *model;
    gdl_optimizer *opt;
    gdl_scheduler *sched;
    gdl_ema *ema;
    gdl_ce_opts ce;
    gdl_fit_opts fo;    /* the recipe's (ex_recipe_fit_opts); epochs 1 */
} ex_run;

/* Fashion-MNIST (the subsets of a), the loaders, r's net on a's device, its optimizer, schedule for
   a->epochs and EMA (ema_decay, capped), and gdl_fit's options. 0 / -1 + error (free run either way). */
static inline int ex_recipe_setup(const ex_recipe *r, const ex_args *a, double ema_decay, ex_run *run) {
    memset(run, 0, sizeof *run);
    gdl_manual_seed(a->seed);
    if (!(run->train = gdl_dataset_fashion_mnist(a->data, 1)) || !(run->test = gdl_dataset_fashion_mnist(a->data, 0)) ||
        ex_subset(&run->train, a->train_subset) < 0 || ex_subset(&run->test, a->test_subset) < 0 ||
        ex_recipe_loaders(r, run->train, run->test, a->batch_size, a->seed, a->device, &run->tl, &run->vl) < 0 ||
        !(run->model = ex_recipe_net(r)) || gdl_module_to(run->model, a->device) < 0 ||
        ex_recipe_optim(r, run->model, gdl_loader_num_batches(run->tl), a->epochs, ema_decay, &run->opt, &run->sched,
                        &run->ema) < 0)
        return -1;
    run->fo = ex_recipe_fit_opts(r, run->vl, run->sched, &run->ce);
    return 0;
}

static inline void ex_recipe_free(ex_run *run) {
    gdl_ema_free(run->ema);
    ex_free_training(run->sched, run->opt, run->model, run->tl, run->vl, run->train, run->test);
    memset(run, 0, sizeof *run);
}

#endif
