/* mnist_mlp.c — the main job: an MLP on Fashion-MNIST, written as the PyTorch training loop
   (zero_grad, forward, loss, backward, step). Shows a live progress bar on a terminal, prints each
   epoch's loss, test accuracy and time, and writes them to a metrics CSV (mnist_mlp_metrics.csv;
   `make plot` draws it). Two nets, one loop:
     default    a 784-128-10 MLP with ReLU, Adam lr 1e-3, batch 64, 5 epochs: the bare loop (87 %)
     --recipe   what `make run` trains: the MLP recipe (examples/recipe.h, which bench/recipes.c
                times against PyTorch): 784-512 BN ReLU dropout, 512-256 BN ReLU dropout, 256-10;
                flips and random erasing, label smoothing 0.1, AdamW 2e-3 with weight decay off the
                biases and norm weights, a warm-up + cosine schedule stepped per batch, an EMA of the
                weights for the test passes, which average each image's outputs with its flip's;
                batch 128, 12 epochs (about 89.2 %, some 30 s on two cores)

   CPU:   cc -O2 -march=native examples/mnist_mlp.c -DGPUDL_ZLIB -lz -lm -pthread -o mnist_mlp
   CUDA:  nvcc -O3 -arch=sm_90 -DGPUDL_CUDA -DGPUDL_ZLIB examples/mnist_mlp.c gpudl_cuda.cu -lcublas -lcublasLt -lnccl -lz -o mnist_mlp
   Run:   ./mnist_mlp [--recipe] [--data DIR] [--epochs N] [--batch-size N] [--device cpu|cuda] [--seed N]
                      [--csv FILE] [--out-dir DIR]
                      [--profile]   (the first epoch's per-op time table and the memory summary)
                      [--amp bf16|f16]  (mixed precision: forward and loss under autocast)
   Data:  --data DIR if given, else $GPUDL_DATA if set, else ./data, then Debian's
          dataset-fashion-mnist (/usr/share/datasets/fashion-mnist); `make data`
          installs or downloads it (`make run` does that first).
   Tutorial: docs/tutorial/04-training-loop.md, 07-mixed-precision.md (--amp) and
   09-monitoring.md (--profile): chapters 4, 7 and 9. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "example_args.h"
#include "recipe.h"

/* The recipe's epochs when --recipe is given (the schedule's length): 12 reach 89 % within make run's minute */
enum { RECIPE_EPOCHS = 12 };

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* status lines and errors in the order they happen, also when piped */
    const ex_recipe *r = NULL;        /* --recipe: the MLP recipe of recipe.h */
    int recipe = 0, k;
    ex_args a;
    FILE *csv = NULL;
    int epochs, epoch;
    gdl_device dev;
    gdl_dataset *train = NULL, *test = NULL;
    gdl_loader *train_loader = NULL, *test_loader = NULL;
    gdl_module *model = NULL;
    gdl_optimizer *opt = NULL;
    gdl_scheduler *sched = NULL;
    gdl_ema *ema = NULL;
    gdl_ce_opts ce = gdl_ce_defaults();
    double total = 0, test_loss = 0, test_acc = 0, flops = 0, steps = 0; /* the training steps' FLOPs */
    int rc = 1;
    const ex_opt extra[] = {{"--recipe", 'b', &recipe, 0, 0,
                             "the MLP recipe (examples/recipe.h; what make run trains); its defaults: 12 "
                             "epochs, batch 128", NULL}};

    /* the defaults follow the net, so --recipe is looked for first (the parser takes no value starting "--") */
    for (k = 1; k < argc && strcmp(argv[k], "--recipe"); k++) {}
    a = k < argc ? ex_defaults(RECIPE_EPOCHS, EX_RECIPE_BATCH) : ex_defaults(5, 64);
    a.csv = "mnist_mlp_metrics.csv";
    switch (ex_parse_opts(&a, argc, argv, EX_DATA | EX_EPOCHS | EX_BATCH | EX_DEVICE | EX_SEED | EX_CSV | EX_PROFILE | EX_AMP | EX_OUT_DIR |
                          EX_PRECISION,
                          "Trains an MLP on Fashion-MNIST (784-128-10 with Adam, or with --recipe the MLP recipe) "
                          "and prints the test accuracy.", extra, 1)) {
    case 1: return 0;
    case 2: return 2;
    }
    if (recipe) r = ex_recipe_find("mlp");
    dev = a.device;
    epochs = a.epochs;
    printf("device: %s (%s)%s\n", gdl_device_str(dev), gdl_device_name(dev),
           dev.type == GDL_DEVICE_CPU && gdl_cuda_device_count() == 0 ? " - no GPU, training on the CPU" : "");
    if (r) printf("recipe: 784-512-256-10 MLP with batch norm and dropout; flips, random erasing, label smoothing, "
                  "AdamW, warm-up + cosine, weight EMA, flip-averaged tests (examples/recipe.h)\n");
    if (a.amp != GDL_F32) printf("mixed precision: autocast to %s\n", gdl_dtype_name(a.amp));
    /* the seed, the data, the loaders, the net, its optimizer: in this order, as ex_recipe_setup (the same bits) */
    gdl_manual_seed(a.seed);
    if (!(train = gdl_dataset_fashion_mnist(a.data, 1)) || !(test = gdl_dataset_fashion_mnist(a.data, 0))) goto fail;

    if (r) {
        if (ex_recipe_loaders(r, train, test, a.batch_size, a.seed, dev, &train_loader, &test_loader) < 0 ||
            !(model = ex_recipe_net(r)))
            goto fail;
    } else {
        gdl_loader_opts lo = gdl_loader_defaults();
        lo.batch_size = a.batch_size;
        lo.shuffle = 1;
        lo.num_workers = 1;
        lo.pin_memory = 1;
        lo.device = dev;
        if (!(train_loader = gdl_loader_new(train, &lo))) goto fail;
        lo.shuffle = 0;
        lo.batch_size = 1000;
        if (!(test_loader = gdl_loader_new(test, &lo))) goto fail;
        if (!(model = ex_mlp_net())) goto fail;
    }
    if (gdl_module_to(model, dev) < 0) goto fail;
    if (r) { /* AdamW + no decay on biases and norm weights, the schedule, the EMA; the loss smoothed */
        if (ex_recipe_optim(r, model, gdl_loader_num_batches(train_loader), epochs, r->ema_decay, &opt, &sched,
                            &ema) < 0)
            goto fail;
        ce.label_smoothing = r->label_smoothing;
    } else if (!(opt = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0)) || gdl_optim_add_module(opt, model, 0) < 0) {
        goto fail;
    }
    if (!(csv = gdl_metrics_csv_open(a.csv))) goto fail;

    for (epoch = 1; epoch <= epochs; epoch++) {
        gdl_tensor *x, *y;
        gdl_epoch_stats st;
        double t0 = gdl_now(), loss_sum = 0;
        int64_t n = 0, b = 0, nb = gdl_loader_num_batches(train_loader);
        int got;
        gdl_module_train(model, 1);
        gdl_flops_reset();
        if (a.profile && epoch == 1 && gdl_profile_begin() < 0) goto fail;
        while ((got = gdl_loader_next(train_loader, &x, &y)) == 1) {
            gdl_tensor *loss;
            gdl_arena_reset();                     /* the last step's temporaries go */
            gdl_zero_grad(opt);                    /* optimizer.zero_grad()          */
            if (a.amp != GDL_F32 && gdl_autocast_begin(a.amp) < 0) goto fail; /* with torch.autocast(...): */
            loss = gdl_cross_entropy_ex(gdl_forward(model, x), y, &ce); /* loss = crit(model(x), y) */
            if (a.amp != GDL_F32) gdl_autocast_end();            /* backward outside the region */
            if (!loss || gdl_backward(loss) < 0) goto fail;      /* loss.backward()  */
            if (gdl_step(opt) < 0) goto fail;                    /* optimizer.step() (and the EMA's update) */
            if (sched && gdl_scheduler_step(sched) < 0) goto fail; /* scheduler.step(), per batch */
            loss_sum += gdl_item(loss) * (double)y->shape[0];
            n += y->shape[0];
            gdl_progress_bar(stdout, epoch, epochs, ++b, nb, loss_sum / (double)n, NAN, n, t0);
        }
        if (got < 0) goto fail;
        flops += (double)gdl_flops_count(NULL, NULL); /* before the test pass */
        steps += (double)b;
        if (a.profile && epoch == 1 && ex_profile_print("epoch 1's training", dev) < 0) goto fail;
        memset(&st, 0, sizeof st);
        st.epoch = epoch;
        st.seconds = gdl_now() - t0; /* training only: the test pass below is not counted */
        st.samples = n;
        st.samples_per_sec = (double)n / st.seconds;
        st.loss = loss_sum / (double)n;
        st.accuracy = NAN;
        total += st.seconds;
        /* the test pass: with the EMA's weights swapped in (and back after), flip-averaged with the recipe */
        if (ema && gdl_ema_swap(ema) < 0) goto fail;
        if (a.amp != GDL_F32 && gdl_autocast_begin(a.amp) < 0) goto fail;
        rc = gdl_evaluate_ex(model, test_loader, gdl_loss_cross_entropy, &ce, r != NULL, &test_loss, &test_acc);
        if (a.amp != GDL_F32) gdl_autocast_end();
        if (ema && gdl_ema_swap(ema) < 0) rc = -1;
        if (rc < 0) {
            rc = 1;
            goto fail;
        }
        rc = 1;
        st.val_loss = test_loss;
        st.val_accuracy = test_acc;
        gdl_print_epoch(stdout, epochs, &st);
        if (gdl_metrics_csv_row(csv, &st) < 0) goto fail;
    }
    printf("test loss %.4f, test accuracy %.2f%% (%d epoch%s, %.2f s per epoch on %s)\n", test_loss, 100 * test_acc,
           epochs, epochs == 1 ? "" : "s", total / epochs, gdl_device_str(dev));
    ex_print_flops(flops, total, steps, dev, a.amp);
    ex_wrote(a.csv);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "mnist_mlp: %s\n", gdl_last_error());
    if (csv) fclose(csv);
    gdl_ema_free(ema);
    ex_free_training(sched, opt, model, train_loader, test_loader, train, test);
    gdl_shutdown();
    return rc;
}
