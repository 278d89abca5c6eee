/* train.c — the program examples/cluster's sbatch scripts and examples/k8s's manifests run: a small
   classifier (6 features, 3 classes, Linear-Tanh-Linear, Adam) trained with gdl_fit under DDP on every
   process the launcher started (srun, mpirun, torchrun's variables, a Kubernetes Indexed Job, a
   Kubeflow PyTorchJob or MPIJob), on data it makes itself, so that it needs no download. It is
   preemption-safe: SIGUSR1 or SIGTERM (Slurm's --signal, scancel --signal, a preemption, Kubernetes
   killing a pod) makes gdl_fit finish the step, write a checkpoint to --ckpt and stop; the program then
   exits with GDL_EXIT_PREEMPTED (75), which train_*.sbatch turn into `scontrol requeue`, and the job
   started again resumes from the checkpoint, bit for bit.

   Build: mpicc -O2 -DGPUDL_MPI examples/cluster/train.c -lm -pthread -o train           (CPU, MPI)
          nvcc -O3 -arch=sm_90 -DGPUDL_CUDA examples/cluster/train.c gpudl_cuda.cu -lcublas -lcublasLt -lnccl \
               -o train                                                                     (GPUs, NCCL)
   Run:   train [--epochs N] [--batch-size N] [--samples N] [--ckpt DIR] [--every K] [--out FILE] [--csv FILE]
                [--out-dir DIR] [--pause-ms MS]   (--help lists them; the flags are example_args.h's)
     --batch-size samples per process and step (default 8): N processes at --batch-size B train what one
                  process at --batch-size N*B trains (--batch is the same option)
     --ckpt DIR   checkpoints (every --every steps, default 0: only when signalled) and resume from them
     --out FILE   rank 0 saves the final weights (safetensors) there
     --pause-ms   sleep this long in each step: a demonstration run lasts long enough to be signalled
   The device is the launcher's: cuda:(local rank) in a CUDA build with GPUs, else the CPU.
   Exit status: 0 done, 75 preempted (checkpoint saved: run again), 1 error, 2 a bad command line.
   Tutorial: docs/tutorial/12-clusters.md (chapter 12). */
#define _POSIX_C_SOURCE 200809L /* sigaction: the robust preemption handler; nanosleep */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define GPUDL_IMPLEMENTATION
#include "../../gpudl.h"
#include "../example_args.h"

static int pause_ms;

/* cross entropy, after --pause-ms (each step's forward calls it once) */
static gdl_tensor *slow_loss(gdl_tensor *out, gdl_tensor *y, void *user) {
    struct timespec ts;
    (void)user;
    ts.tv_sec = pause_ms / 1000;
    ts.tv_nsec = (pause_ms % 1000) * 1000000L;
    if (pause_ms > 0) nanosleep(&ts, NULL);
    return gdl_cross_entropy(out, y);
}

int main(int argc, char **argv) {
    ex_args a; /* not ex_defaults: no CUDA probe before gdl_dist_init picks this rank's device */
    int batch = 0, samples = 96, every = 0, parsed;
    const char *ckpt = NULL, *out = NULL;
    const ex_opt extra[] = {
        {"--batch", 'i', &batch, 1, 1 << 20, "the same as --batch-size (default: that one)", "N"},
        {"--samples", 'i', &samples, 1, 1 << 24, "samples in the generated data set", "N"},
        {"--ckpt", 's', &ckpt, 0, 0, "checkpoints (and resume from them; a signal saves one and exits 75)", "DIR"},
        {"--every", 'i', &every, 0, 1 << 30, "a checkpoint every K optimizer steps (0: only when signalled)", "K"},
        {"--out", 'o', &out, 0, 0, "rank 0 saves the final weights there (safetensors)", "FILE"},
        {"--pause-ms", 'i', &pause_ms, 0, 600000, "sleep this long in each step (a demonstration run to signal)", "MS"}};
    gdl_dataset *ds = NULL;
    gdl_loader *l = NULL;
    gdl_module *m = NULL, *mods[3];
    gdl_optimizer *opt = NULL;
    gdl_ddp *ddp = NULL;
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_fit_opts fo = gdl_fit_defaults();
    float *x;
    int32_t *y;
    int64_t s1[1] = {6};
    int i, rc = 1, fit;
    gdl_device dev;
    setvbuf(stdout, NULL, _IOLBF, 0);
    memset(&a, 0, sizeof a);
    a.epochs = 3;
    a.batch_size = 8;
    parsed = ex_parse_opts(&a, argc, argv, EX_EPOCHS | EX_BATCH | EX_CSV | EX_OUT_DIR,
                           "Trains a small classifier with gdl_fit under DDP on every process its launcher started "
                           "(srun,\nmpirun, torchrun's variables, Kubernetes), on data it makes; preemption-safe "
                           "with --ckpt.", extra, (int)(sizeof extra / sizeof extra[0]));
    if (parsed) return parsed == 1 ? 0 : 2;
    if (batch) a.batch_size = batch;
    /* before anything slow: a signal from now on is a checkpoint and a stop, never a kill */
    if (ckpt && gdl_preempt_catch(1) < 0) goto fail;
    if (gdl_dist_init() < 0) goto fail;
    dev = gdl_dist_device();
    if (gdl_dist_rank() == 0)
        printf("train: %d process%s (%s) on %s, batch %d per process\n", gdl_dist_world_size(),
               gdl_dist_world_size() > 1 ? "es" : "", gdl_dist_launcher(), gdl_device_str(dev), a.batch_size);
    /* the data: a formula, the same on every rank */
    x = (float *)malloc(sizeof(float) * (size_t)samples * 6);
    y = (int32_t *)malloc(sizeof(int32_t) * (size_t)samples);
    if (!x || !y) {
        fprintf(stderr, "train: out of memory\n");
        return 1;
    }
    for (i = 0; i < samples * 6; i++) x[i] = (float)cos(0.23 * i + 0.5);
    for (i = 0; i < samples; i++) y[i] = (i * 7 + i / 5) % 3;
    ds = gdl_dataset_from_arrays(x, GDL_F32, 1, s1, y, samples, 3);
    free(x);
    free(y);
    lo.batch_size = a.batch_size;
    lo.shuffle = 1;
    lo.seed = 12;
    lo.device = dev;
    lo.num_replicas = gdl_dist_world_size(); /* this rank's shard of every epoch */
    lo.rank = gdl_dist_rank();
    gdl_manual_seed(8);
    mods[0] = gdl_nn_linear(6, 16, 1);
    mods[1] = gdl_nn_tanh();
    mods[2] = gdl_nn_linear(16, 3, 1);
    if (!ds || !(m = gdl_nn_sequential(3, mods)) || gdl_module_to(m, dev) < 0 || !(l = gdl_loader_new(ds, &lo)) ||
        !(opt = gdl_adam_new(1e-2, 0.9, 0.999, 1e-8, 0)) || gdl_optim_add_module(opt, m, 0) < 0)
        goto fail;
    if (gdl_dist_world_size() > 1 && !(ddp = gdl_ddp_new(m, NULL))) goto fail;
    fo.epochs = a.epochs;
    fo.csv_path = a.csv;
    fo.ddp = ddp;
    fo.loss = slow_loss;
    fo.checkpoint_dir = ckpt;
    fo.checkpoint_every = every;
    fo.resume = ckpt != NULL;
    fo.preempt = ckpt != NULL;
    fo.verbose = 1;
    if (gdl_dist_rank() == 0 && ckpt) printf("train: checkpoints go to %s/gdl_fit.safetensors\n", ckpt);
    if (gdl_dist_rank() == 0) printf("train: training\n");
    if ((fit = gdl_fit(m, l, opt, &fo, NULL)) < 0) goto fail;
    if (fit == GDL_FIT_PREEMPTED) {
        if (gdl_dist_rank() == 0)
            printf("train: preempted by signal %d at step %lld; exiting %d to be run again\n", gdl_preempt_signal(),
                   (long long)gdl_optim_get_step(opt), GDL_EXIT_PREEMPTED);
        rc = GDL_EXIT_PREEMPTED;
    } else {
        if (gdl_dist_rank() == 0) printf("train: done, %lld steps\n", (long long)gdl_optim_get_step(opt));
        if (out && gdl_dist_rank() == 0) {
            if (gdl_save_model(m, out) < 0) goto fail;
            ex_wrote(out);
        }
        if (a.csv && gdl_dist_rank() == 0) ex_wrote(a.csv);
        rc = 0;
    }
    if (0) {
    fail:
        fprintf(stderr, "train (rank %d): %s\n", gdl_dist_rank(), gdl_last_error());
        rc = 1;
    }
    gdl_ddp_free(ddp);
    gdl_optim_free(opt);
    gdl_module_free(m);
    gdl_loader_free(l);
    gdl_dataset_free(ds);
    /* after a failure the other ranks may be gone: no meeting that could wait (the launcher ends the job) */
    if (rc != 1) gdl_dist_shutdown();
    /* A preempted run keeps the handlers to its exit: the scheduler, mpirun or this script's trap may send
       the signal again, and with the default action back it would die by the signal instead of exiting 75,
       and would not be requeued. */
    if (ckpt && rc != GDL_EXIT_PREEMPTED) gdl_preempt_catch(0);
    return rc;
}
