/* 12_resume.c — surviving failures on a cluster: checkpoints, preemption
   and resume. A scheduler (Slurm, Kubernetes) may stop a job at any time:
   it sends SIGTERM (or Slurm's SIGUSR1 before a time limit), waits a little,
   then kills it. gdl_fit with preempt = 1 catches the signal, finishes the
   step, writes a checkpoint and returns; started again with resume = 1 it
   carries on from there and ends with exactly the weights of a run that was
   never stopped. This program plays the whole story in one process:
     run 1: trains, and is "preempted" (it sends itself SIGTERM) mid-epoch;
     run 2: a fresh model, resumed from the checkpoint, finishes the training;
     run 3: the same training uninterrupted, to compare the weights with.

   Build and run from gpudl's repository root (Fashion-MNIST: `sh tools/fetch_data.sh`):
       cc -O2 -DGPUDL_ZLIB docs/tutorial/programs/12_resume.c -lz -lm -pthread -o resume && ./resume
   It writes its checkpoint to ./resume_ckpt/. On a GPU the same calls work;
   the checkpoint holds the weights and optimizer state whatever the device. */
#define GPUDL_IMPLEMENTATION
#include "../../../gpudl.h"
#include <signal.h>
#include <string.h>

#define EPOCHS 2
#define STOP_AT_STEP 40 /* run 1 is stopped after this many steps (of 63 per epoch) */
#define CKPT_DIR "resume_ckpt"

static long steps_seen, stop_at; /* run 1's "scheduler": a signal at step stop_at */

/* cross entropy, which also plays the scheduler: it raises SIGTERM once, at step stop_at */
static gdl_tensor *loss_and_signal(gdl_tensor *out, gdl_tensor *y, void *user) {
    (void)user;
    if (++steps_seen == stop_at) raise(SIGTERM); /* what `scancel` or a pod's eviction sends */
    return gdl_cross_entropy(out, y);
}

/* One run of gdl_fit on a fresh model; *model_out keeps the model. Returns gdl_fit's result. */
static int run(gdl_dataset *train, int resume, long signal_at, gdl_module **model_out) {
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_fit_opts fo = gdl_fit_defaults();
    gdl_loader *loader = NULL;
    gdl_module *layers[4], *model = NULL;
    gdl_optimizer *opt = NULL;
    int rc = -1;
    gdl_manual_seed(0);
    lo.batch_size = 32;
    lo.shuffle = 1;
    lo.device = gdl_default_device();
    layers[0] = gdl_nn_flatten(1);
    layers[1] = gdl_nn_linear(784, 64, 1);
    layers[2] = gdl_nn_relu();
    layers[3] = gdl_nn_linear(64, 10, 1);
    if (!(loader = gdl_loader_new(train, &lo)) || !(model = gdl_nn_sequential(4, layers)) ||
        gdl_module_to(model, lo.device) < 0 || !(opt = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0)) ||
        gdl_optim_add_module(opt, model, 0) < 0)
        goto out;
    fo.epochs = EPOCHS;
    fo.verbose = 0;
    fo.loss = loss_and_signal;
    fo.checkpoint_dir = CKPT_DIR; /* where checkpoints go, and where resume looks */
    fo.checkpoint_every = 20;     /* also save every 20 optimizer steps (a crash loses at most 20) */
    fo.preempt = 1;               /* SIGTERM / SIGUSR1: finish the step, save, return GDL_FIT_PREEMPTED */
    fo.resume = resume;           /* continue from CKPT_DIR's checkpoint when there is one */
    steps_seen = 0;
    stop_at = signal_at;
    rc = gdl_fit(model, loader, opt, &fo, NULL);
    printf("  gdl_fit returned %s after %ld steps in this run; optimizer step count %ld\n",
           rc == GDL_FIT_PREEMPTED ? "GDL_FIT_PREEMPTED" : rc == 0 ? "0 (finished)" : "-1 (error)", steps_seen,
           (long)gdl_optim_get_step(opt));
out:
    gdl_optim_free(opt);
    gdl_loader_free(loader);
    if (rc < 0) gdl_module_free(model), model = NULL;
    *model_out = model;
    return rc;
}

int main(void) {
    gdl_dataset *all = NULL, *train = NULL;
    gdl_module *stopped = NULL, *resumed = NULL, *straight = NULL;
    const char *names[8];
    gdl_tensor *a[8], *b[8];
    int n, i, same = 1, rc = 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    remove(CKPT_DIR "/gdl_fit.safetensors"); /* start clean: an old checkpoint would be resumed */
    if (!(all = gdl_dataset_fashion_mnist(NULL, 1)) || !(train = gdl_dataset_subset(all, 0, 2000))) goto fail;

    printf("run 1: training, SIGTERM arrives at step %d\n", STOP_AT_STEP);
    if (run(train, 0, STOP_AT_STEP, &stopped) != GDL_FIT_PREEMPTED) goto fail;
    printf("  a real program would now exit(GDL_EXIT_PREEMPTED), status %d, and be requeued\n", GDL_EXIT_PREEMPTED);
    printf("run 2: started again with resume = 1\n");
    if (run(train, 1, 0, &resumed) != 0) goto fail;
    remove(CKPT_DIR "/gdl_fit.safetensors");
    printf("run 3: the same training, never stopped\n");
    if (run(train, 0, 0, &straight) != 0) goto fail;

    /* compare run 2's weights with run 3's, bit for bit */
    n = gdl_module_named_tensors(resumed, GDL_PARAMS, names, a, 8);
    if (n < 0 || gdl_module_named_tensors(straight, GDL_PARAMS, names, b, 8) != n) goto fail;
    for (i = 0; i < n; i++) {
        gdl_tensor *ha = gdl_to(a[i], gdl_cpu()), *hb = gdl_to(b[i], gdl_cpu());
        if (!ha || !hb) goto fail;
        same &= memcmp(ha->data, hb->data, (size_t)ha->numel * sizeof(float)) == 0;
        gdl_free(ha), gdl_free(hb);
    }
    printf("resumed run against uninterrupted run: %d weight tensors, %s\n", n,
           same ? "identical bit for bit" : "DIFFERENT");
    rc = same ? 0 : 1;
fail:
    if (rc) fprintf(stderr, "resume: %s\n", gdl_last_error());
    gdl_module_free(stopped), gdl_module_free(resumed), gdl_module_free(straight);
    gdl_dataset_free(train);
    gdl_dataset_free(all);
    gdl_shutdown();
    return rc;
}
