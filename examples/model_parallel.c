/* model_parallel.c — a model too big for one device, split across two: the
   Fashion-MNIST MLP's first half (784-512, ReLU) on cuda:0, the second half
   (512-10) on cuda:1, the activations moved between them with gdl_to, and
   each batch cut into micro-batches that go through the two halves one after
   another, their gradients accumulating (GPipe's schedule; the loss of each
   micro-batch is scaled by 1/micro so the step equals the whole batch's).
   With fewer than two GPUs both halves run on what there is, the same code.

   CPU:   cc -O2 -march=native -DGPUDL_ZLIB examples/model_parallel.c -lz -lm -pthread -o model_parallel
   CUDA:  nvcc -O3 -arch=sm_90 -DGPUDL_CUDA -DGPUDL_ZLIB examples/model_parallel.c gpudl_cuda.cu -lcublas -lcublasLt -lnccl -lz -o model_parallel
   Run:   ./model_parallel [--data DIR] [--epochs N] [--batch-size N] [--seed N]
   Tutorial: docs/tutorial/11-multi-gpu.md (chapter 11). */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "example_args.h"

enum { MICRO = 4 }; /* micro-batches per batch */

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    ex_args a = ex_defaults(1, 64);
    gdl_device d0, d1;
    gdl_dataset *train = NULL, *test = NULL;
    gdl_loader *loader = NULL, *test_loader = NULL;
    gdl_module *first = NULL, *second = NULL;
    gdl_optimizer *opt = NULL;
    gdl_loader_opts lo;
    int rc = 1, epoch, ngpu = gdl_cuda_device_count();

    switch (ex_parse(&a, argc, argv, EX_DATA | EX_EPOCHS | EX_BATCH | EX_SEED,
                     "Trains an MLP split across two devices, GPipe-style micro-batches.")) {
    case 1: return 0;
    case 2: return 2;
    }
    d0 = ngpu > 0 ? gdl_cuda(0) : gdl_cpu();
    d1 = ngpu > 1 ? gdl_cuda(1) : d0;
    printf("first half on %s, second half on %s%s; %d micro-batches per batch\n", gdl_device_str(d0),
           gdl_device_str(d1), ngpu < 2 ? " (fewer than two GPUs: both on one device)" : "", MICRO);
    gdl_manual_seed(a.seed);
    if (!(train = gdl_dataset_fashion_mnist(a.data, 1)) || !(test = gdl_dataset_fashion_mnist(a.data, 0))) goto fail;
    lo = gdl_loader_defaults();
    lo.batch_size = a.batch_size;
    lo.shuffle = 1;
    lo.seed = a.seed;
    lo.drop_last = 1; /* every batch splits into MICRO equal micro-batches */
    if (!(loader = gdl_loader_new(train, &lo))) goto fail;
    lo.shuffle = 0;
    lo.drop_last = 0;
    lo.batch_size = 1000;
    if (!(test_loader = gdl_loader_new(test, &lo))) goto fail;
    {
        gdl_module *l1[3], *l2[1];
        l1[0] = gdl_nn_flatten(1);
        l1[1] = gdl_nn_linear(784, 512, 1);
        l1[2] = gdl_nn_relu();
        l2[0] = gdl_nn_linear(512, 10, 1);
        if (!(first = gdl_nn_sequential(3, l1)) || !(second = gdl_nn_sequential(1, l2))) goto fail;
    }
    if (gdl_module_to(first, d0) < 0 || gdl_module_to(second, d1) < 0) goto fail;
    if (!(opt = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0)) || gdl_optim_add_module(opt, first, 0) < 0 ||
        gdl_optim_add_module(opt, second, 0) < 0)
        goto fail;

    for (epoch = 1; epoch <= a.epochs; epoch++) {
        gdl_tensor *x, *y;
        double t0 = gdl_now(), loss_sum = 0, train_secs;
        int64_t n = 0, correct = 0, seen = 0, steps = 0;
        int got;
        gdl_flops_reset();
        while ((got = gdl_loader_next(loader, &x, &y)) == 1) {
            int64_t mb = x->shape[0] / MICRO, k;
            gdl_arena_reset();
            gdl_zero_grad(opt);
            for (k = 0; k < MICRO; k++) {
                /* micro-batch k: rows [k*mb, (k+1)*mb) through cuda:0, then cuda:1 */
                gdl_tensor *xm = gdl_to(gdl_slice(x, k * mb, (k + 1) * mb), d0);
                gdl_tensor *ym = gdl_to(gdl_slice(y, k * mb, (k + 1) * mb), d1);
                gdl_tensor *h = gdl_to(gdl_forward(first, xm), d1);
                gdl_tensor *loss = gdl_cross_entropy(gdl_forward(second, h), ym);
                if (!loss || gdl_backward(gdl_mul_scalar(loss, 1.0 / MICRO)) < 0) goto fail;
                loss_sum += gdl_item(loss) * (double)mb;
            }
            if (gdl_step(opt) < 0) goto fail;
            n += x->shape[0];
            steps++;
        }
        if (got < 0) goto fail;
        train_secs = gdl_now() - t0;
        gdl_module_train(first, 0), gdl_module_train(second, 0);
        while ((got = gdl_loader_next(test_loader, &x, &y)) == 1) { /* the test set, through both halves */
            gdl_tensor *logits, *pred;
            int64_t i;
            gdl_arena_reset();
            logits = gdl_forward(second, gdl_to(gdl_forward(first, gdl_to(x, d0)), d1));
            if (!(pred = gdl_to(gdl_argmax(logits, 1), gdl_cpu()))) goto fail;
            for (i = 0; i < y->numel; i++) correct += ((int32_t *)pred->data)[i] == ((int32_t *)y->data)[i];
            seen += y->numel;
        }
        if (got < 0) goto fail;
        gdl_module_train(first, 1), gdl_module_train(second, 1);
        printf("epoch %d/%d: loss %.4f, test accuracy %.2f%% (%.1f s)\n", epoch, a.epochs, loss_sum / (double)n,
               100.0 * (double)correct / (double)seen, gdl_now() - t0);
        /* the training steps against cuda:0's peak (the line names it; two GPUs together have twice it) */
        ex_print_flops((double)gdl_flops_count(NULL, NULL), train_secs, (double)steps, d0, GDL_F32);
    }
    rc = 0;
fail:
    if (rc) fprintf(stderr, "model_parallel: %s\n", gdl_last_error());
    ex_free_training(NULL, opt, first, loader, test_loader, train, test);
    gdl_module_free(second);
    gdl_shutdown();
    return rc;
}
