/* 06_dataloader.c — feeding the device: a DataLoader with worker threads
   and pinned memory. It runs one epoch of batches (normalise, random crop,
   random flip: the CPU work a loader does) over 6,000 Fashion-MNIST images
   with 0, 1 and 2 workers while a small MLP trains on them, times each, and
   checks that every worker count delivers exactly the same batches (the
   same losses, bit for bit).

   Build and run from gpudl's repository root (Fashion-MNIST: `sh tools/fetch_data.sh`):
       cc -O2 -DGPUDL_ZLIB docs/tutorial/programs/06_dataloader.c -lz -lm -pthread -o dataloader && ./dataloader
   On a GPU build the batches go to cuda:0, and pin_memory = 1 copies them
   from page-locked host memory on a stream of their own, overlapping the
   copy with the previous step's kernels. On the CPU pin_memory changes nothing. */
#define GPUDL_IMPLEMENTATION
#include "../../../gpudl.h"

#define IMAGES 6000

/* One epoch of training a fresh 784-128-10 MLP on batches from a loader with `workers` threads:
   *seconds, and *loss_sum, the sum of the batches' losses. Returns the number of batches, -1 on error. */
static int one_epoch(gdl_dataset *ds, int workers, gdl_device dev, double *seconds, double *loss_sum) {
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_loader *loader = NULL;
    gdl_module *layers[4], *model = NULL;
    gdl_optimizer *opt = NULL;
    gdl_tensor *x, *y;
    double t0, sum = 0;
    int got = -1, batches = 0;
    lo.batch_size = 128;
    lo.shuffle = 1;
    lo.seed = 7;
    lo.num_workers = workers;  /* DataLoader(num_workers=...) */
    lo.pin_memory = 1;         /* DataLoader(pin_memory=True) */
    lo.device = dev;           /* where the batches are delivered */
    lo.transform.normalize = 1;
    lo.transform.mean[0] = 0.2860; /* Fashion-MNIST's pixel mean and standard deviation */
    lo.transform.std[0] = 0.3530;
    lo.transform.crop_padding = 2;
    lo.transform.hflip = 1;
    gdl_manual_seed(0); /* the same initial weights for every worker count */
    layers[0] = gdl_nn_flatten(1);
    layers[1] = gdl_nn_linear(784, 128, 1);
    layers[2] = gdl_nn_relu();
    layers[3] = gdl_nn_linear(128, 10, 1);
    if (!(loader = gdl_loader_new(ds, &lo)) || !(model = gdl_nn_sequential(4, layers)) ||
        gdl_module_to(model, dev) < 0 || !(opt = gdl_sgd_new(0.05, 0.9, 0, 0, 0)) ||
        gdl_optim_add_module(opt, model, 0) < 0)
        goto out;
    t0 = gdl_now();
    /* while this step computes, the workers assemble the next batches */
    while ((got = gdl_loader_next(loader, &x, &y)) == 1) {
        gdl_tensor *loss;
        gdl_arena_reset();
        gdl_zero_grad(opt);
        loss = gdl_cross_entropy(gdl_forward(model, x), y);
        if (!loss || gdl_backward(loss) < 0 || gdl_step(opt) < 0) {
            got = -1;
            break;
        }
        sum += gdl_item(loss);
        batches++;
    }
    *seconds = gdl_now() - t0;
    *loss_sum = sum;
out:
    gdl_optim_free(opt);
    gdl_module_free(model);
    gdl_loader_free(loader);
    return got < 0 ? -1 : batches;
}

int main(void) {
    gdl_device dev = gdl_default_device();
    gdl_dataset *all = NULL, *ds = NULL;
    double first = 0;
    int workers, batches, rc = 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!(all = gdl_dataset_fashion_mnist(NULL, 1)) || !(ds = gdl_dataset_subset(all, 0, IMAGES))) goto fail;
    printf("%ld images of 1x28x28 %s pixels, delivered to %s in batches of 128\n", (long)ds->n,
           gdl_dtype_name(ds->dtype), gdl_device_str(dev));
    printf("%-8s %8s %10s %16s\n", "workers", "batches", "seconds", "sum of losses");
    for (workers = 0; workers <= 2; workers++) {
        double s, sum;
        if ((batches = one_epoch(ds, workers, dev, &s, &sum)) < 0) goto fail;
        if (workers == 0) first = sum;
        printf("%-8d %8d %10.3f %16.6f %s\n", workers, batches, s, sum, sum == first ? "(the same)" : "(DIFFERENT)");
    }
    rc = 0;
fail:
    if (rc) fprintf(stderr, "dataloader: %s\n", gdl_last_error());
    gdl_dataset_free(ds);
    gdl_dataset_free(all);
    gdl_shutdown();
    return rc;
}
