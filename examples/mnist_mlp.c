/* mnist_mlp.c — the main job: a 784-128-10 MLP with ReLU on Fashion-MNIST,
   Adam lr 1e-3, batch 64, 5 epochs, written as the PyTorch training loop
   (zero_grad, forward, loss, backward, step). Shows a live progress bar on a
   terminal, prints each epoch's loss, test accuracy and time, and writes them
   to a metrics CSV (mnist_mlp_metrics.csv; `make plot` draws it).

   CPU:   cc -O2 -march=native examples/mnist_mlp.c -DGPUDL_ZLIB -lz -lm -pthread -o mnist_mlp
   CUDA:  nvcc -O3 -arch=sm_90 -DGPUDL_CUDA -DGPUDL_ZLIB examples/mnist_mlp.c gpudl_cuda.cu -lcublas -lcublasLt -lnccl -lz -o mnist_mlp
   Run:   ./mnist_mlp [--data DIR] [--epochs N] [--batch-size N] [--device cpu|cuda] [--seed N] [--csv FILE]
                      [--profile]   (the first epoch's per-op time table and the memory summary)
                      [--amp bf16|f16]  (mixed precision: forward and loss under autocast)
   Data:  --data DIR if given, else $GPUDL_DATA if set, else ./data, then Debian's
          dataset-fashion-mnist (/usr/share/datasets/fashion-mnist); `make data`
          installs or downloads it (`make run` does that first). */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "example_args.h"

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* status lines and errors in the order they happen, also when piped */
    ex_args a = ex_defaults(5, 64);
    FILE *csv = NULL;
    int epochs, epoch;
    gdl_device dev;
    gdl_dataset *train = NULL, *test = NULL;
    gdl_loader *train_loader = NULL, *test_loader = NULL;
    gdl_module *model = NULL;
    gdl_optimizer *opt = NULL;
    gdl_loader_opts lo;
    double total = 0, test_loss = 0, test_acc = 0;
    int rc = 1;

    a.csv = "mnist_mlp_metrics.csv";
    switch (ex_parse(&a, argc, argv, EX_DATA | EX_EPOCHS | EX_BATCH | EX_DEVICE | EX_SEED | EX_CSV | EX_PROFILE | EX_AMP,
                     "Trains a 784-128-10 MLP on Fashion-MNIST with Adam and prints the test accuracy.")) {
    case 1: return 0;
    case 2: return 2;
    }
    dev = a.device;
    epochs = a.epochs;
    printf("device: %s (%s)%s\n", gdl_device_str(dev), gdl_device_name(dev),
           dev.type == GDL_DEVICE_CPU && gdl_cuda_device_count() == 0 ? " - no GPU, training on the CPU" : "");
    if (a.amp != GDL_F32) printf("mixed precision: autocast to %s\n", gdl_dtype_name(a.amp));
    gdl_manual_seed(a.seed);
    if (!(train = gdl_dataset_fashion_mnist(a.data, 1)) || !(test = gdl_dataset_fashion_mnist(a.data, 0))) goto fail;

    lo = gdl_loader_defaults();
    lo.batch_size = a.batch_size;
    lo.shuffle = 1;
    lo.num_workers = 1;
    lo.pin_memory = 1;
    lo.device = dev;
    if (!(train_loader = gdl_loader_new(train, &lo))) goto fail;
    lo.shuffle = 0;
    lo.batch_size = 1000;
    if (!(test_loader = gdl_loader_new(test, &lo))) goto fail;

    {
        gdl_module *layers[4];
        layers[0] = gdl_nn_flatten(1);
        layers[1] = gdl_nn_linear(784, 128, 1);
        layers[2] = gdl_nn_relu();
        layers[3] = gdl_nn_linear(128, 10, 1);
        if (!(model = gdl_nn_sequential(4, layers))) goto fail;
    }
    if (gdl_module_to(model, dev) < 0) goto fail;
    if (!(opt = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0)) || gdl_optim_add_module(opt, model, 0) < 0) goto fail;
    if (!(csv = gdl_metrics_csv_open(a.csv))) goto fail;

    for (epoch = 1; epoch <= epochs; epoch++) {
        gdl_tensor *x, *y;
        gdl_epoch_stats st;
        double t0 = gdl_now(), loss_sum = 0;
        int64_t n = 0, b = 0, nb = gdl_loader_num_batches(train_loader);
        int got;
        gdl_module_train(model, 1);
        if (a.profile && epoch == 1 && gdl_profile_begin() < 0) goto fail;
        while ((got = gdl_loader_next(train_loader, &x, &y)) == 1) {
            gdl_tensor *loss;
            gdl_arena_reset();                     /* the last step's temporaries go */
            gdl_zero_grad(opt);                    /* optimizer.zero_grad()          */
            if (a.amp != GDL_F32 && gdl_autocast_begin(a.amp) < 0) goto fail; /* with torch.autocast(...): */
            loss = gdl_cross_entropy(gdl_forward(model, x), y); /* loss = crit(model(x), y) */
            if (a.amp != GDL_F32) gdl_autocast_end();            /* backward outside the region */
            if (!loss || gdl_backward(loss) < 0) goto fail;      /* loss.backward()  */
            if (gdl_step(opt) < 0) goto fail;                    /* optimizer.step() */
            loss_sum += gdl_item(loss) * (double)y->shape[0];
            n += y->shape[0];
            gdl_progress_bar(stdout, epoch, epochs, ++b, nb, loss_sum / (double)n, NAN, n, t0);
        }
        if (got < 0) goto fail;
        if (a.profile && epoch == 1 && ex_profile_print("epoch 1's training", dev) < 0) goto fail;
        memset(&st, 0, sizeof st);
        st.epoch = epoch;
        st.seconds = gdl_now() - t0; /* training only: the test pass below is not counted */
        st.samples = n;
        st.samples_per_sec = (double)n / st.seconds;
        st.loss = loss_sum / (double)n;
        st.accuracy = NAN;
        total += st.seconds;
        if (a.amp != GDL_F32 && gdl_autocast_begin(a.amp) < 0) goto fail;
        rc = gdl_evaluate(model, test_loader, NULL, NULL, &test_loss, &test_acc);
        if (a.amp != GDL_F32) gdl_autocast_end();
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
    printf("test loss %.4f, test accuracy %.2f%% (%d epochs, %.2f s per epoch on %s; metrics in %s)\n", test_loss,
           100 * test_acc, epochs, total / epochs, gdl_device_str(dev), a.csv);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "mnist_mlp: %s\n", gdl_last_error());
    if (csv) fclose(csv);
    gdl_optim_free(opt);
    gdl_module_free(model);
    gdl_loader_free(train_loader);
    gdl_loader_free(test_loader);
    gdl_dataset_free(train);
    gdl_dataset_free(test);
    gdl_shutdown();
    return rc;
}
