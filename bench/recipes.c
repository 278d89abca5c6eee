/* recipes.c — the training recipes on Fashion-MNIST, timed end to end: --net mlp, cnn, resnet or resnet10
   (the nets and recipes of examples/recipe.h: augmentation, label smoothing, AdamW or SGD nesterov with
   warm-up + cosine, no decay on biases and norm weights, weight EMA, flip-averaged test passes). The test
   set is evaluated after each epoch (EMA weights); the clock runs from the program's start (reading the
   gzipped IDX files, the loaders' workers, every epoch and its test pass) and the time at which the test
   accuracy first reaches --target is reported, but the run goes on to the planned epochs (the schedule's
   length) and reports the final accuracy. bench/pytorch/recipes.py is PyTorch's side, with the same nets
   and recipes; bench/compare_recipes.sh runs both for 3 seeds.

   Aims (the targets' defaults): mlp 89.5 %, cnn 93.5 %, resnet and resnet10 94.5 % in 30 epochs of batch 128.

   CPU:   make build/recipes && build/recipes --net cnn
   CUDA:  make build/cuda_recipes && build/cuda_recipes --net resnet
   Flags: --net mlp|cnn|resnet|resnet10 [--target PERCENT] [--ema-decay D (default 0.999; 0: off)] [--eager (no CUDA
          graphs)] [--data DIR] [--epochs N] [--batch-size N] [--device D] [--seed N] [--train-subset N]
          [--test-subset N] [--profile (the first epoch's per-op profile)]
   Prints "result: net N final F target T reached_s S|nan total_s S" last, for the comparison script.
   Exit status 0 when the target was reached, 1 when not (or on an error), 2 for bad flags. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "../examples/example_args.h"
#include "../examples/recipe.h"

/* The aim of each net, the default --target. */
static double default_target(const char *net) { return !strcmp(net, "mlp") ? 89.5 : !strcmp(net, "cnn") ? 93.5 : 94.5; }

/* A number in [lo, hi] for flag, or -1 after saying what is wrong. */
static int number_flag(const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    *out = strtod(s, &end);
    if (*end || end == s || !(*out >= lo && *out <= hi)) {
        fprintf(stderr, "recipes: %s wants a number in [%g, %g], got '%s'\n", flag, lo, hi, s);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    double t0 = gdl_now(), t_data = 0, target = -1, ema_decay = -1, reached = -1, acc = 0;
    const ex_recipe *r = NULL;
    ex_args a;
    int k, failed = 1, eager = 0, parsed, ep, reached_epoch = 0, nrest = 1;
    char *rest[24], when[32];
    ex_run run;
    gdl_epoch_stats st, trained; /* an epoch's figures; the training samples and seconds of all */

    memset(&trained, 0, sizeof trained);
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* this program's own flags, taken out before the shared parser sees the rest */
    rest[0] = argv[0];
    for (k = 1; k < argc; k++) {
        if (!strcmp(argv[k], "--eager")) {
            eager = 1;
        } else if (!strcmp(argv[k], "--net") && k + 1 < argc) {
            if (!(r = ex_recipe_find(argv[++k]))) {
                fprintf(stderr, "recipes: --net wants mlp, cnn, resnet or resnet10, got '%s'\n", argv[k]);
                return 2;
            }
        } else if (!strcmp(argv[k], "--target") && k + 1 < argc) {
            if (number_flag("--target", argv[++k], 1e-9, 100, &target) < 0) return 2;
        } else if (!strcmp(argv[k], "--ema-decay") && k + 1 < argc) {
            if (number_flag("--ema-decay", argv[++k], 0, 1, &ema_decay) < 0) return 2;
        } else if (nrest < (int)(sizeof rest / sizeof rest[0])) {
            rest[nrest++] = argv[k];
        } else {
            fprintf(stderr, "recipes: too many arguments\n");
            return 2;
        }
    }
    if (!r) r = ex_recipe_find("cnn"); /* --help's defaults; a run needs --net (below) */
    a = ex_defaults(r->epochs, EX_RECIPE_BATCH);
    parsed = ex_parse(&a, nrest, rest, EX_DATA | EX_EPOCHS | EX_BATCH | EX_DEVICE | EX_SEED | EX_SUBSET | EX_PROFILE,
                      "Fashion-MNIST with the training recipes, timed end to end: --net mlp|cnn|resnet|resnet10 (needed), "
                      "--target PERCENT (default 89.5, 93.5, 94.5), --ema-decay D (default 0.999, 0: off), "
                      "--eager (no CUDA graphs).");
    if (parsed) return parsed == 1 ? 0 : 2;
    for (k = 1; k < argc && strcmp(argv[k], "--net"); k++) {}
    if (k == argc) {
        fprintf(stderr, "recipes: --net mlp|cnn|resnet|resnet10 is needed\n");
        return 2;
    }
    if (target < 0) target = default_target(r->net);
    if (ema_decay < 0) ema_decay = r->ema_decay;

    if (ex_recipe_setup(r, &a, ema_decay, &run) < 0) goto fail;
    t_data = gdl_now() - t0; /* the data read, the loaders' workers started, the net made */
    run.fo.epochs = 1; /* one at a time, to print and time each epoch's test accuracy */
    run.fo.verbose = 0;
    run.fo.cuda_graph = !eager;
    printf("net %s (%lld parameters), device %s (%s), batch %d, %d epochs, seed %llu, target %.1f %%, EMA %s, %s\n",
           r->net, (long long)gdl_module_num_params(run.model), gdl_device_str(a.device), gdl_device_name(a.device),
           a.batch_size, a.epochs, (unsigned long long)a.seed, target, run.ema ? "on" : "off",
           a.device.type == GDL_DEVICE_CUDA && !eager ? "CUDA graphs" : "eager");
    for (ep = 1; ep <= a.epochs; ep++) {
        if (ep == 1 && a.profile && gdl_profile_begin() < 0) goto fail;
        if (gdl_fit(run.model, run.tl, run.opt, &run.fo, &st) < 0) goto fail;
        trained.samples += st.samples; /* for the utilisation line */
        trained.seconds += st.seconds;
        if (ep == 1 && a.profile && ex_profile_print("the first epoch (training and test pass)", a.device) < 0) goto fail;
        acc = 100 * st.val_accuracy;
        printf("epoch %d: train loss %.4f, test accuracy %.2f %% at %.2f s\n", ep, st.loss, acc, gdl_now() - t0);
        if (acc >= target && reached < 0) {
            reached = gdl_now() - t0;
            reached_epoch = ep;
        }
    }
    printf("gdl recipes %s %s: final test accuracy %.2f %% after %d epochs, %.2f s end to end (set-up %.2f s); ", r->net,
           gdl_device_name(a.device), acc, a.epochs, gdl_now() - t0, t_data);
    if (reached < 0) printf("target %.1f %% not reached\n", target);
    else printf("target %.1f %% reached in %.2f s (epoch %d)\n", target, reached, reached_epoch);
    if (reached < 0) snprintf(when, sizeof when, "nan");
    else snprintf(when, sizeof when, "%.2f", reached);
    printf("result: net %s final %.2f target %.1f reached_s %s total_s %.2f\n", r->net, acc, target, when,
           gdl_now() - t0);
    ex_print_fit_flops(run.model, run.tl, &trained, 1, a.batch_size, a.device, GDL_F32);
    failed = 0;
fail:
    if (failed) fprintf(stderr, "recipes: %s\n", gdl_last_error());
    ex_recipe_free(&run);
    gdl_shutdown();
    return failed || reached < 0;
}
