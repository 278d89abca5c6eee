/* ddp.c — the Fashion-MNIST MLP (784-128-10, Adam 1e-3) trained by several
   processes at once with DistributedDataParallel: each process reads its
   shard of every epoch (the loader's num_replicas/rank, PyTorch's
   DistributedSampler), gradients are averaged across processes during
   backward (gdl_ddp), and rank 0 prints. The batch size is per process, as
   in PyTorch: 2 processes at --batch-size 32 step on 64 samples.

   Each process trains on gdl_dist_device(): cuda:(local rank) where there are GPUs (gradients over
   NCCL), else the CPU (gradients over MPI).
   Build: mpicc -O2 -march=native -DGPUDL_MPI -DGPUDL_ZLIB examples/ddp.c -lz -lm -pthread -o ddp   (CPU)
          (without mpicc and -DGPUDL_MPI it runs as one process)
          nvcc -O3 -arch=sm_90 -DGPUDL_CUDA -DGPUDL_ZLIB examples/ddp.c gpudl_cuda.cu -lcublas -lcublasLt -lnccl -lz \
               -o ddp                                                                          (GPUs, NCCL)
   Launch, any of:
     mpirun -np 2 ./ddp --epochs 2                       (OpenMPI; as root add --allow-run-as-root)
     srun -n 2 ./ddp --epochs 2                          (Slurm: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID)
     for r in 0 1; do RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \
         ./ddp --epochs 2 & done; wait                  (torchrun's variables: the nvcc build, one GPU per
                                                          process, no MPI; a CPU build needs MPI's processes)
   Run:   ./ddp [--data DIR] [--epochs N] [--batch-size N] [--seed N]
   A rank that stalls or dies: the others stop with an error naming it after
   GPUDL_DIST_TIMEOUT seconds (default 600; e.g. mpirun -x GPUDL_DIST_TIMEOUT=60)
   and exit 1, and the launcher ends the job.
   Tutorial: docs/tutorial/11-multi-gpu.md (chapter 11). */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "example_args.h"

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    ex_args a = ex_defaults(2, 32);
    gdl_dataset *train = NULL, *test = NULL;
    gdl_loader *loader = NULL, *test_loader = NULL;
    gdl_module *model = NULL;
    gdl_optimizer *opt = NULL;
    gdl_ddp *ddp = NULL;
    gdl_tensor *sums = NULL;
    gdl_loader_opts lo;
    int rc = 1, epoch, rank, world, dist = 0;
    int64_t two[1] = {2};
    gdl_device dev;
    double test_loss = 0, test_acc = 0;

    switch (ex_parse(&a, argc, argv, EX_DATA | EX_EPOCHS | EX_BATCH | EX_SEED,
                     "Trains the Fashion-MNIST MLP on several processes (DistributedDataParallel).")) {
    case 1: return 0;
    case 2: return 2;
    }
    if (gdl_dist_init() < 0) goto fail;
    dist = 1;
    rank = gdl_dist_rank();
    world = gdl_dist_world_size();
    if (rank == 0)
        printf("%d process%s (%s), %d samples per process and step\n", world, world > 1 ? "es" : "",
               gdl_dist_launcher(), a.batch_size);
    dev = gdl_dist_device();
    gdl_manual_seed(a.seed); /* the same model on every rank; gdl_ddp_new broadcasts rank 0's anyway */
    if (!(train = gdl_dataset_fashion_mnist(a.data, 1)) || !(test = gdl_dataset_fashion_mnist(a.data, 0))) goto fail;
    lo = gdl_loader_defaults();
    lo.batch_size = a.batch_size;
    lo.shuffle = 1;
    lo.seed = a.seed;
    lo.num_workers = 1;
    lo.num_replicas = world; /* this rank's shard of each epoch */
    lo.rank = rank;
    lo.device = dev;
    if (!(loader = gdl_loader_new(train, &lo))) goto fail;
    lo = gdl_loader_defaults();
    lo.batch_size = 1000;
    lo.device = dev;
    if (!(test_loader = gdl_loader_new(test, &lo))) goto fail;
    {
        gdl_module *layers[4];
        layers[0] = gdl_nn_flatten(1);
        layers[1] = gdl_nn_linear(784, 128, 1);
        layers[2] = gdl_nn_relu();
        layers[3] = gdl_nn_linear(128, 10, 1);
        if (!(model = gdl_nn_sequential(4, layers)) || gdl_module_to(model, dev) < 0) goto fail;
    }
    if (!(ddp = gdl_ddp_new(model, NULL))) goto fail;
    if (!(opt = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0)) || gdl_optim_add_module(opt, model, 0) < 0) goto fail;
    if (!(sums = gdl_zeros(1, two, GDL_F32, gdl_cpu()))) goto fail;

    for (epoch = 1; epoch <= a.epochs; epoch++) {
        gdl_tensor *x, *y;
        double t0 = gdl_now(), loss_sum = 0, train_secs;
        int64_t n = 0, steps = 0;
        int got;
        gdl_module_train(model, 1);
        gdl_flops_reset();
        while ((got = gdl_loader_next(loader, &x, &y)) == 1) {
            gdl_tensor *loss;
            gdl_arena_reset();
            gdl_zero_grad(opt);
            loss = gdl_cross_entropy(gdl_ddp_forward(ddp, x), y);
            if (!loss || gdl_ddp_backward(ddp, loss) < 0) goto fail; /* gradients: the mean over the ranks */
            if (gdl_step(opt) < 0) goto fail;
            loss_sum += gdl_item(loss) * (double)y->shape[0];
            n += y->shape[0];
            steps++;
        }
        if (got < 0) goto fail;
        train_secs = gdl_now() - t0;
        /* the epoch's mean loss over every rank's samples */
        ((gdl_real *)sums->data)[0] = (gdl_real)loss_sum;
        ((gdl_real *)sums->data)[1] = (gdl_real)n;
        { /* reduced on the training device: CPU tensors over MPI, CUDA tensors over NCCL */
            gdl_tensor *on = gdl_to(sums, dev), *back = NULL;
            int bad = !on || gdl_dist_all_reduce(on, GDL_SUM) < 0 || !(back = gdl_to(on, gdl_cpu()));
            if (!bad) memcpy(sums->data, back->data, 2 * sizeof(gdl_real));
            gdl_free(on), gdl_free(back);
            if (bad) goto fail;
        }
        if (gdl_evaluate(model, test_loader, NULL, NULL, &test_loss, &test_acc) < 0) goto fail;
        if (rank == 0)
            printf("epoch %d/%d: loss %.4f over %.0f samples, test accuracy %.2f%% (%.1f s)\n", epoch, a.epochs,
                   ((gdl_real *)sums->data)[0] / ((gdl_real *)sums->data)[1], ((gdl_real *)sums->data)[1],
                   100 * test_acc, gdl_now() - t0);
        /* this rank's training steps (its share of each batch) against its device's peak */
        if (rank == 0) ex_print_flops((double)gdl_flops_count(NULL, NULL), train_secs, (double)steps, dev, GDL_F32);
    }
    if (rank == 0) printf("test loss %.4f, test accuracy %.2f%%\n", test_loss, 100 * test_acc);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "ddp (rank %d): %s\n", gdl_dist_rank(), gdl_last_error());
    gdl_free(sums);
    gdl_ddp_free(ddp);
    gdl_optim_free(opt);
    gdl_module_free(model);
    gdl_loader_free(loader);
    gdl_loader_free(test_loader);
    gdl_dataset_free(train);
    gdl_dataset_free(test);
    if (dist) gdl_dist_shutdown();
    gdl_shutdown();
    return rc;
}
