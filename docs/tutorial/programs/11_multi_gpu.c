/* 11_multi_gpu.c — two ways to use several GPUs.
   Data parallel (DistributedDataParallel): every process holds the whole
   model and trains on its own shard of each batch; gradients are averaged
   across processes during backward, so every copy takes the same step.
   Model parallel: one model split across devices, the activations moved
   from one to the next (for a model too big for one GPU).
   This program does both on what it finds: started without a launcher it is
   a job of one process, and with fewer than two GPUs both halves of the
   split model share one device. The code is the one a multi-GPU job runs.

   Build and run from gpudl's repository root (Fashion-MNIST: `sh tools/fetch_data.sh`):
       cc -O2 -DGPUDL_ZLIB docs/tutorial/programs/11_multi_gpu.c -lz -lm -pthread -o multi_gpu && ./multi_gpu
   Several processes: build with MPI (mpicc -DGPUDL_MPI ...; CPU tensors) or
   CUDA (nvcc -DGPUDL_CUDA ...; NCCL), then e.g. `mpirun -np 2 ./multi_gpu`. */
#define GPUDL_IMPLEMENTATION
#include "../../../gpudl.h"

#define IMAGES 4000

/* Data parallel: one epoch of the 784-128-10 MLP under DDP on this process's shard. */
static int data_parallel(gdl_dataset *train) {
    int rank = gdl_dist_rank(), world = gdl_dist_world_size();
    gdl_device dev = gdl_dist_device(); /* cuda:(local rank) with GPUs, else the CPU */
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_loader *loader = NULL;
    gdl_module *layers[4], *model = NULL;
    gdl_optimizer *opt = NULL;
    gdl_ddp *ddp = NULL;
    gdl_tensor *x, *y;
    double loss_sum = 0;
    int64_t batches = 0;
    int got = -1;
    lo.batch_size = 32; /* per process, as in PyTorch: 2 processes step on 64 samples */
    lo.shuffle = 1;
    lo.num_replicas = world; /* DistributedSampler: this rank's shard of each epoch */
    lo.rank = rank;
    lo.device = dev;
    gdl_manual_seed(0);
    layers[0] = gdl_nn_flatten(1);
    layers[1] = gdl_nn_linear(784, 128, 1);
    layers[2] = gdl_nn_relu();
    layers[3] = gdl_nn_linear(128, 10, 1);
    if (!(loader = gdl_loader_new(train, &lo)) || !(model = gdl_nn_sequential(4, layers)) ||
        gdl_module_to(model, dev) < 0 || !(ddp = gdl_ddp_new(model, NULL)) || /* broadcasts rank 0's weights */
        !(opt = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0)) || gdl_optim_add_module(opt, model, 0) < 0)
        goto out;
    while ((got = gdl_loader_next(loader, &x, &y)) == 1) {
        gdl_tensor *loss;
        gdl_arena_reset();
        gdl_zero_grad(opt);
        loss = gdl_cross_entropy(gdl_ddp_forward(ddp, x), y);
        if (!loss || gdl_ddp_backward(ddp, loss) < 0 || gdl_step(opt) < 0) { /* backward averages the gradients */
            got = -1;
            break;
        }
        loss_sum += gdl_item(loss);
        batches++;
    }
    if (got == 0 && rank == 0)
        printf("data parallel: %d process%s on %s, %ld batches of 32 on rank 0, mean loss %.4f\n", world,
               world == 1 ? "" : "es", gdl_device_str(dev), (long)batches, loss_sum / (double)batches);
out:
    gdl_optim_free(opt);
    gdl_ddp_free(ddp);
    gdl_module_free(model);
    gdl_loader_free(loader);
    return got < 0 ? -1 : 0;
}

/* Model parallel: the first layer on d0, the rest on d1; one epoch. */
static int model_parallel(gdl_dataset *train) {
    int ngpu = gdl_cuda_device_count();
    gdl_device d0 = ngpu > 0 ? gdl_cuda(0) : gdl_cpu(), d1 = ngpu > 1 ? gdl_cuda(1) : d0;
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_loader *loader = NULL;
    gdl_module *l1[3], *l2[1], *first = NULL, *second = NULL;
    gdl_optimizer *opt = NULL;
    gdl_tensor *x, *y;
    double loss_sum = 0;
    int64_t batches = 0;
    int got = -1;
    lo.batch_size = 64;
    lo.shuffle = 1;
    gdl_manual_seed(0);
    l1[0] = gdl_nn_flatten(1);
    l1[1] = gdl_nn_linear(784, 128, 1);
    l1[2] = gdl_nn_relu();
    l2[0] = gdl_nn_linear(128, 10, 1);
    if (!(loader = gdl_loader_new(train, &lo)) || !(first = gdl_nn_sequential(3, l1)) ||
        !(second = gdl_nn_sequential(1, l2)) || gdl_module_to(first, d0) < 0 || gdl_module_to(second, d1) < 0 ||
        !(opt = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0)) || gdl_optim_add_module(opt, first, 0) < 0 ||
        gdl_optim_add_module(opt, second, 0) < 0)
        goto out;
    while ((got = gdl_loader_next(loader, &x, &y)) == 1) {
        gdl_tensor *h, *loss;
        gdl_arena_reset();
        gdl_zero_grad(opt);
        h = gdl_forward(first, gdl_to(x, d0));                     /* on the first device */
        loss = gdl_cross_entropy(gdl_forward(second, gdl_to(h, d1)), gdl_to(y, d1)); /* then the second */
        if (!loss || gdl_backward(loss) < 0 || gdl_step(opt) < 0) { /* gradients flow back through gdl_to */
            got = -1;
            break;
        }
        loss_sum += gdl_item(loss);
        batches++;
    }
    if (got == 0)
        printf("model parallel: first half on %s, second half on %s, %ld batches of 64, mean loss %.4f\n",
               gdl_device_str(d0), gdl_device_str(d1), (long)batches, loss_sum / (double)batches);
out:
    gdl_optim_free(opt);
    gdl_module_free(first);
    gdl_module_free(second);
    gdl_loader_free(loader);
    return got < 0 ? -1 : 0;
}

int main(void) {
    gdl_dataset *all = NULL, *train = NULL;
    int dist = 0, rc = 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (gdl_dist_init() < 0) goto fail; /* torch.distributed.init_process_group: reads the launcher's variables */
    dist = 1;
    if (gdl_dist_rank() == 0)
        printf("launcher: %s, world size %d, GPUs here: %d\n", gdl_dist_launcher(), gdl_dist_world_size(),
               gdl_cuda_device_count());
    if (!(all = gdl_dataset_fashion_mnist(NULL, 1)) || !(train = gdl_dataset_subset(all, 0, IMAGES))) goto fail;
    if (data_parallel(train) < 0) goto fail;
    if (gdl_dist_rank() == 0 && model_parallel(train) < 0) goto fail;
    rc = 0;
fail:
    if (rc) fprintf(stderr, "multi_gpu (rank %d): %s\n", gdl_dist_rank(), gdl_last_error());
    gdl_dataset_free(train);
    gdl_dataset_free(all);
    if (dist) gdl_dist_shutdown();
    gdl_shutdown();
    return rc;
}
