/* quantize.c — train a Fashion-MNIST net in f32, then make it int8 three ways,
   as PyTorch's torch.ao.quantization does, and print accuracy, size and
   inference speed side by side. The net (--net): mlp, 784-256-128-10 with
   ReLU; or cnn, examples/cnn.c's (conv 32 - ReLU - maxpool, conv 64 - ReLU -
   maxpool, Linear 128 - ReLU - dropout, Linear 10). The three ways:
     dynamic   gdl_quantize_dynamic: int8 weights, activations quantized per
               batch at run time (Linear only: a CNN's convolutions stay f32);
     static    gdl_quant_prepare -> gdl_quant_calibrate (32 training batches)
               -> gdl_quant_convert (Linear+ReLU and Conv2d+ReLU fused, as
               torch.ao.quantization.fuse_modules does);
     QAT       gdl_quant_prepare_qat -> training with fake quantization
               (observers frozen half way) -> gdl_quant_convert.
   Equal training for all: the f32 net trains --epochs epochs; QAT takes the
   f32 net after epochs - 1 and trains the last epoch with fake quantization
   instead (both with a fresh Adam, lr 1e-3, for that epoch), so QAT's figure
   is the cost or gain of quantization, not of more training. Each int8 model
   is saved to safetensors (quantize_*.safetensors in --out-dir: int8
   weights, f32 scales, i32 zero points) next to the f32 one, each file named
   as it is written, and the file sizes are printed. Speed: the test set's
   forward passes, batch 256, on --device (quantized Linear and Conv2d run on
   the CPU and on CUDA). --csv: the f32 net's epochs, gdl_fit's metrics CSV.

   CPU:   cc -O2 -march=native examples/quantize.c -DGPUDL_ZLIB -lz -lm -pthread -o quantize
   Run:   ./quantize [--net mlp|cnn] [--data DIR] [--epochs N] [--batch-size N] [--device D] [--seed N]
                     [--csv FILE] [--out-dir DIR] [--train-subset N] [--test-subset N]
   Data:  as mnist_mlp's (--data, $GPUDL_DATA, ./data, Debian's dataset-fashion-mnist). */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "example_args.h"

/* file size in bytes, -1 if it cannot be read */
static long long file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (f) fclose(f);
    return n;
}

/* test accuracy and the milliseconds of the test pass (forward only: gdl_evaluate); -1 on error */
static int measure(gdl_module *m, gdl_loader *test, double *acc, double *ms) {
    double t0 = gdl_now(), best = 1e30;
    int r;
    for (r = 0; r < 3; r++) { /* the fastest of 3 passes: less noise from other processes */
        t0 = gdl_now();
        if (gdl_evaluate(m, test, NULL, NULL, NULL, acc) < 0) return -1;
        if (gdl_now() - t0 < best) best = gdl_now() - t0;
    }
    *ms = 1000 * best;
    return 0;
}

/* epochs epochs of m with a fresh Adam, numbered from first of total in the lines printed and the rows of csv
   (when not NULL); the test pass of val after each. 0 / -1. */
static int train(gdl_module *m, gdl_loader *l, gdl_loader *val, int epochs, int first, int total, FILE *csv, double lr) {
    gdl_optimizer *opt = gdl_adam_new(lr, 0.9, 0.999, 1e-8, 0);
    gdl_fit_opts fo = gdl_fit_defaults();
    gdl_epoch_stats hist[2];
    int rc = -1, e;
    if (!opt || gdl_optim_add_module(opt, m, 0) < 0) {
        gdl_optim_free(opt);
        return -1;
    }
    fo.epochs = 1;
    fo.val = val;
    fo.verbose = 0; /* gdl_fit would number each call's epochs from 1: the lines are printed here */
    for (e = 0; e < epochs; e++) {
        if (gdl_fit(m, l, opt, &fo, hist) < 0) goto out;
        hist[0].epoch = first + e;
        gdl_print_epoch(stdout, total, &hist[0]);
        if (csv && gdl_metrics_csv_row(csv, &hist[0]) < 0) goto out;
    }
    rc = 0;
out:
    gdl_optim_free(opt);
    return rc;
}

/* the f32 net of --net */
static gdl_module *make_net(int cnn) {
    if (!cnn)
        return gdl_nn_sequential(6, (gdl_module *[]){gdl_nn_flatten(1), gdl_nn_linear(784, 256, 1), gdl_nn_relu(),
                                                      gdl_nn_linear(256, 128, 1), gdl_nn_relu(), gdl_nn_linear(128, 10, 1)});
    return gdl_nn_sequential(11, (gdl_module *[]){gdl_nn_conv2d(1, 32, 3, 1, 1, 1, 1, 1), gdl_nn_relu(),
                                                   gdl_nn_maxpool2d(2, 2, 0), gdl_nn_conv2d(32, 64, 3, 1, 1, 1, 1, 1),
                                                   gdl_nn_relu(), gdl_nn_maxpool2d(2, 2, 0), gdl_nn_flatten(1),
                                                   gdl_nn_linear(64 * 7 * 7, 128, 1), gdl_nn_relu(), gdl_nn_dropout(0.25),
                                                   gdl_nn_linear(128, 10, 1)});
}

/* one epoch of quantization-aware training of qat (the epoch-th of epochs); its observers frozen after half
   of it */
static int train_qat(gdl_module *qat, gdl_loader *l, double lr, int epoch, int epochs) {
    gdl_optimizer *opt = gdl_adam_new(lr, 0.9, 0.999, 1e-8, 0);
    gdl_tensor *x, *y;
    int64_t b = 0, n = 0, nb = gdl_loader_num_batches(l);
    double sum = 0, t0 = gdl_now();
    int got;
    if (!opt || gdl_optim_add_module(opt, qat, 0) < 0) {
        gdl_optim_free(opt);
        return -1;
    }
    gdl_module_train(qat, 1);
    while ((got = gdl_loader_next(l, &x, &y)) == 1) {
        gdl_tensor *loss;
        gdl_arena_reset();
        gdl_zero_grad(opt);
        loss = gdl_cross_entropy(gdl_forward(qat, x), y);
        if (!loss || gdl_backward(loss) < 0 || gdl_step(opt) < 0) got = -1;
        if (got < 0) break;
        sum += gdl_item(loss) * (double)y->shape[0];
        n += y->shape[0];
        if (++b == nb / 2 && gdl_quant_freeze_observers(qat, 1) < 0) {
            got = -1;
            break;
        }
    }
    gdl_optim_free(opt);
    if (got < 0) return -1;
    printf("QAT epoch %d/%d: loss %.4f, %.2fs\n", epoch, epochs, n ? sum / (double)n : NAN, gdl_now() - t0);
    return 0;
}

int main(int argc, char **argv) {
    static const char *names[4] = {"f32", "dynamic int8", "static int8", "QAT int8"};
    static const char *files[4] = {"quantize_f32.safetensors", "quantize_dynamic.safetensors",
                                   "quantize_static.safetensors", "quantize_qat.safetensors"};
    const char *paths[4];
    ex_args a = ex_defaults(3, 64);
    const char *net = "mlp";
    const ex_opt extra[] = {{"--net", 's', &net, 0, 0, "the net: mlp (784-256-128-10) or cnn (examples/cnn.c's)", "NET"}};
    gdl_dataset *train_ds = NULL, *test_ds = NULL;
    gdl_loader *train_l = NULL, *test_l = NULL;
    gdl_module *model = NULL, *q[4] = {NULL, NULL, NULL, NULL}, *prep = NULL, *qat = NULL;
    gdl_loader_opts lo;
    double acc[4], ms[4];
    FILE *csv = NULL;
    int i, cnn, rc = 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    a.device = gdl_cpu(); /* the int8 kernels' speed is what it shows: the CPU's unless --device says */
    switch (ex_parse_opts(&a, argc, argv, EX_DATA | EX_EPOCHS | EX_BATCH | EX_DEVICE | EX_SEED | EX_CSV | EX_OUT_DIR | EX_SUBSET,
                          "Trains a Fashion-MNIST net (an MLP or a CNN), quantizes it to int8 three ways (dynamic, "
                          "static, QAT) and prints accuracy, size and speed side by side.",
                          extra, (int)(sizeof extra / sizeof *extra))) {
    case 1: return 0;
    case 2: return 2;
    }
    if (strcmp(net, "mlp") != 0 && strcmp(net, "cnn") != 0) {
        fprintf(stderr, "quantize: --net '%s': expected mlp or cnn\n", net);
        return 2;
    }
    cnn = net[0] == 'c';
    for (i = 0; i < 4; i++) /* checked before the training: a file that cannot be written is refused now */
        if (!(paths[i] = ex_out_path(&a, files[i])) || ex_check_writable("quantize", "--out-dir", paths[i]) < 0) return 2;
    gdl_manual_seed(a.seed);
    if (!(train_ds = gdl_dataset_fashion_mnist(a.data, 1)) || !(test_ds = gdl_dataset_fashion_mnist(a.data, 0)) ||
        ex_subset(&train_ds, a.train_subset) < 0 || ex_subset(&test_ds, a.test_subset) < 0)
        goto fail;
    lo = gdl_loader_defaults();
    lo.batch_size = a.batch_size;
    lo.shuffle = 1;
    lo.transform.normalize = 1; /* the usual Fashion-MNIST mean and std */
    lo.transform.mean[0] = 0.2860;
    lo.transform.std[0] = 0.3530;
    lo.device = a.device;
    if (!(train_l = gdl_loader_new(train_ds, &lo))) goto fail;
    lo.shuffle = 0;
    lo.batch_size = 256;
    if (!(test_l = gdl_loader_new(test_ds, &lo))) goto fail;
    if (!(model = make_net(cnn)) || gdl_module_to(model, a.device) < 0) goto fail;
    if (a.csv && !(csv = gdl_metrics_csv_open(a.csv))) goto fail;
    printf("training the f32 %s on %s (%d epoch%s; QAT takes over for the last one)\n", net, gdl_device_str(a.device),
           a.epochs, a.epochs == 1 ? "" : "s");
    if (a.epochs > 1 && train(model, train_l, test_l, a.epochs - 1, 1, a.epochs, csv, 1e-3) < 0) goto fail;
    if (!(qat = gdl_quant_prepare_qat(model, NULL))) goto fail;
    if (train(model, train_l, test_l, 1, a.epochs, a.epochs, csv, 1e-3) < 0) goto fail; /* f32's last epoch */
    if (csv) {
        fclose(csv);
        csv = NULL;
        ex_wrote(a.csv);
    }
    gdl_loader_set_epoch(train_l, 100); /* a fresh epoch for QAT */
    printf("quantization-aware training (the last epoch, observers frozen after half of it)\n");
    if (train_qat(qat, train_l, 1e-3, a.epochs, a.epochs) < 0 || !(q[3] = gdl_quant_convert(qat))) goto fail;

    /* dynamic and static from the trained f32 net */
    if (!(q[1] = gdl_quantize_dynamic(model, NULL))) goto fail;
    if (!(prep = gdl_quant_prepare(model, NULL)) || gdl_quant_calibrate(prep, train_l, 32) < 0 ||
        !(q[2] = gdl_quant_convert(prep)))
        goto fail;

    q[0] = model;
    if (gdl_save_model(model, paths[0]) < 0) goto fail;
    ex_wrote(paths[0]);
    for (i = 1; i < 4; i++) {
        if (gdl_quant_save(q[i], paths[i]) < 0) goto fail;
        ex_wrote(paths[i]);
    }
    for (i = 0; i < 4; i++)
        if (measure(q[i], test_l, &acc[i], &ms[i]) < 0) goto fail;
    if (a.device.type == GDL_DEVICE_CPU)
        printf("\n%s on %lld test images; CPU: %d threads, int8 GEMM %s, f32 GEMM %s\n", net, (long long)test_ds->n,
               gdl_get_num_threads(), gdl_gemm_int8_kernel_name(), gdl_gemm_kernel_name());
    else
        printf("\n%s on %lld test images on %s (%s)\n", net, (long long)test_ds->n, gdl_device_str(a.device),
               gdl_device_name(a.device));
    printf("%-14s %9s %10s %14s %14s %9s\n", "model", "accuracy", "vs f32", "tensors (B)", "file (B)", "test ms");
    for (i = 0; i < 4; i++)
        printf("%-14s %8.2f%% %+9.2f %14lld %14lld %9.1f\n", names[i], 100 * acc[i], 100 * (acc[i] - acc[0]),
               (long long)gdl_module_nbytes(q[i]), file_size(paths[i]), ms[i]);
    printf("(file size of each int8 model / f32: %.2f, %.2f, %.2f; speed is noisy on a shared machine)\n",
           (double)file_size(paths[1]) / (double)file_size(paths[0]),
           (double)file_size(paths[2]) / (double)file_size(paths[0]),
           (double)file_size(paths[3]) / (double)file_size(paths[0]));
    rc = 0;
fail:
    if (rc) fprintf(stderr, "quantize: %s\n", gdl_last_error());
    if (csv) fclose(csv);
    for (i = 1; i < 4; i++) gdl_module_free(q[i]);
    gdl_module_free(prep);
    gdl_module_free(qat);
    gdl_module_free(model);
    gdl_loader_free(train_l);
    gdl_loader_free(test_l);
    gdl_dataset_free(train_ds);
    gdl_dataset_free(test_ds);
    gdl_shutdown();
    return rc;
}
