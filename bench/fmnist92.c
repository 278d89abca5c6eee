/* fmnist92.c — the end-to-end target: Fashion-MNIST to >= 92 % test
   accuracy, timed from the program's start (reading the gzipped IDX files,
   making the device, the loader's workers, every epoch and its test pass).
   bench/pytorch/fmnist92.py is PyTorch's side, with the same net and recipe:
   conv32-BN-ReLU-pool, conv64-BN-ReLU-pool, conv128-BN-ReLU, flatten,
   linear 6272->10; SGD nesterov 0.9, weight decay 5e-4, OneCycle to lr 0.1
   (pct_start 0.25) over the planned epochs, batch 256, random horizontal
   flips, inputs normalised by 0.2860/0.3530. The test set is evaluated after
   each epoch; the clock stops at the first epoch that reaches the target.

   CPU:   make build/fmnist92 && build/fmnist92 --device cpu
   CUDA:  make build/cuda_fmnist92 && build/cuda_fmnist92 --amp bf16
   Flags: [--data DIR] [--epochs N (planned, default 5)] [--batch-size N] [--device D] [--seed N]
          [--amp bf16|f16] [--target PERCENT (default 92)] [--eager (no CUDA graphs)]
   Exit status 0 when the target was reached, 1 when not, 2 for bad flags. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "../examples/example_args.h"
#include "../examples/nets.h"

int main(int argc, char **argv) {
    double t0 = gdl_now(), t_data = 0, target = 92, reached = -1, acc = 0;
    ex_args a = ex_defaults(5, 256);
    int k, failed = 1, eager = 0, parsed, ep;
    char *rest[4];
    int nrest = 0;
    gdl_dataset *train = NULL, *test = NULL;
    gdl_loader *tl = NULL, *vl = NULL;
    gdl_module *model = NULL, *layers[13];
    gdl_optimizer *opt = NULL;
    gdl_scheduler *sched = NULL;
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_fit_opts fo = gdl_fit_defaults();
    gdl_epoch_stats st, trained; /* an epoch's figures; the training samples and seconds of all */

    memset(&trained, 0, sizeof trained);
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* the two flags of this program's own, taken out before the shared parser sees the rest */
    for (k = 1; k < argc; k++) {
        if (strcmp(argv[k], "--eager") == 0) {
            eager = 1;
        } else if (strcmp(argv[k], "--target") == 0 && k + 1 < argc) {
            char *end;
            target = strtod(argv[++k], &end);
            if (*end || !(target > 0 && target <= 100)) {
                fprintf(stderr, "fmnist92: --target wants a percentage in (0, 100], got %s\n", argv[k]);
                return 2;
            }
        } else if (nrest < 4) {
            rest[nrest++] = argv[k];
        } else {
            fprintf(stderr, "fmnist92: too many arguments\n");
            return 2;
        }
    }
    {
        char *av[6];
        av[0] = argv[0];
        for (k = 0; k < nrest; k++) av[k + 1] = rest[k];
        parsed = ex_parse(&a, nrest + 1, av, EX_DATA | EX_EPOCHS | EX_BATCH | EX_DEVICE | EX_SEED | EX_AMP,
                          "Fashion-MNIST to --target % test accuracy (default 92), timed end to end; also "
                          "--eager (no CUDA graphs).");
        if (parsed) return parsed == 1 ? 0 : 2;
    }
    gdl_manual_seed(a.seed);
    if (!(train = gdl_dataset_fashion_mnist(a.data, 1)) || !(test = gdl_dataset_fashion_mnist(a.data, 0))) goto fail;
    t_data = gdl_now() - t0;

    lo.batch_size = a.batch_size;
    lo.shuffle = 1;
    lo.seed = a.seed;
    lo.num_workers = 2;
    lo.pin_memory = 1;
    lo.device = a.device;
    lo.transform.normalize = 1;
    lo.transform.mean[0] = 0.2860;
    lo.transform.std[0] = 0.3530;
    lo.transform.hflip = 1;
    if (!(tl = gdl_loader_new(train, &lo))) goto fail;
    lo.shuffle = 0;
    lo.batch_size = 1000;
    lo.transform.hflip = 0;
    if (!(vl = gdl_loader_new(test, &lo))) goto fail;

    k = ex_bn_cnn_layers(layers, 0);
    if (!(model = gdl_nn_sequential(k, layers)) || gdl_module_to(model, a.device) < 0) goto fail;
    if (!(opt = gdl_sgd_new(0.1, 0.9, 0, 5e-4, 1)) || gdl_optim_add_module(opt, model, 0) < 0 ||
        !(sched = gdl_onecycle_lr_new_ex(opt, 0.1, a.epochs * (int)gdl_loader_num_batches(tl), 0.25, 25.0, 1e4, 1, 0.85, 0.95)))
        goto fail;

    fo.epochs = 1; /* one at a time, to stop at the target */
    fo.val = vl;
    fo.scheduler = sched;
    fo.scheduler_per_batch = 1;
    fo.verbose = 0;
    fo.autocast = a.amp;
    fo.cuda_graph = !eager;
    printf("device %s (%s), batch %d, %d epochs planned, autocast %s, %s\n", gdl_device_str(a.device),
           gdl_device_name(a.device), a.batch_size, a.epochs, a.amp == GDL_F32 ? "off" : gdl_dtype_name(a.amp),
           a.device.type == GDL_DEVICE_CUDA && !eager ? "CUDA graphs" : "eager");
    for (ep = 1; ep <= a.epochs; ep++) {
        if (gdl_fit(model, tl, opt, &fo, &st) < 0) goto fail;
        trained.samples += st.samples; /* for the utilisation line */
        trained.seconds += st.seconds;
        acc = 100 * st.val_accuracy;
        printf("epoch %d: train loss %.4f, test accuracy %.2f %% at %.2f s\n", ep, st.loss, acc, gdl_now() - t0);
        if (acc >= target) {
            reached = gdl_now() - t0;
            break;
        }
    }
    if (reached < 0)
        printf("gdl fmnist92 %s%s%s: target %.1f %% not reached in %d epochs (best last %.2f %%; data %.2f s)\n",
               gdl_device_name(a.device), a.amp == GDL_F32 ? "" : " ", a.amp == GDL_F32 ? "" : gdl_dtype_name(a.amp),
               target, a.epochs, acc, t_data);
    else
        printf("gdl fmnist92 %s%s%s: %.1f %% reached in %.2f s end to end (data %.2f s)\n", gdl_device_name(a.device),
               a.amp == GDL_F32 ? "" : " ", a.amp == GDL_F32 ? "" : gdl_dtype_name(a.amp), target, reached, t_data);
    ex_print_fit_flops(model, tl, &trained, 1, a.batch_size, a.device, a.amp);
    failed = 0;
fail:
    if (failed) fprintf(stderr, "fmnist92: %s\n", gdl_last_error());
    ex_free_training(sched, opt, model, tl, vl, train, test);
    gdl_shutdown();
    return failed || reached < 0;
}
