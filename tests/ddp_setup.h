/* ddp_setup.h — the set-up the data-parallel tests share (src/api/dist.h):
   tests/test_dist.c (CPU tensors under MPI), tests/test_dist_nccl.c (CUDA
   tensors through NCCL) and tests/dist_faults.c (a rank that fails, an
   elastic restart).

     ddp_data, ddp_data_fill   samples of d features in 3 classes, from a formula
     ddp_mlp                   Linear(d, hidden) tanh Linear(hidden, 3) from a seed, on a device
     ddp_job, ddp_job_make     the dataset, the loader (this rank's shard), the
                               model, Adam and (optionally) the DDP wrapper
     ddp_job_fit, ddp_job_free gdl_fit of a job (checkpoints, resume), freeing it
     ddp_same_params           a model trained under DDP against one process's
     ddp_shared_dir, ddp_remove_dir  a checkpoint directory every rank names alike

   With harness.h included first, also the two cases both test programs run
   on their device: DDP steps (ddp_steps_case) and gdl_fit under DDP
   (ddp_fit_case), each against one process on the whole batch.

   Include after gpudl.h (with GPUDL_IMPLEMENTATION). Everything is static
   inline: a program uses what it needs. */
#ifndef GPUDL_DDP_SETUP_H
#define GPUDL_DDP_SETUP_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* rmdir */

/* ---- data ---- */

/* n samples of d features: the n*d values x[i] = wave(freq * i + phase), labels
   y[i] = (ya * i + i / yb) % 3 (yb 0: no second term) */
typedef struct ddp_data {
    int n, d;
    double (*wave)(double);
    double freq, phase;
    int ya, yb;
} ddp_data;

static inline void ddp_data_fill(const ddp_data *s, float *x, int32_t *y) {
    int i;
    for (i = 0; i < s->n * s->d; i++) x[i] = (float)s->wave(s->freq * i + s->phase);
    for (i = 0; i < s->n; i++) y[i] = (i * s->ya + (s->yb ? i / s->yb : 0)) % 3;
}

/* the data of the shared cases below (a batch of 8 for the steps, 48 samples for gdl_fit) and of the
   checkpoint and resume tests */
static const ddp_data ddp_step_data = {8, 6, sin, 0.37, 1, 2, 0};
static const ddp_data ddp_fit_data = {48, 6, cos, 0.23, 0.5, 7, 5};
static const ddp_data ddp_resume_data = {48, 6, cos, 0.19, 0.4, 5, 7};

/* ---- the model ---- */

/* Linear(d, hidden) tanh Linear(hidden, 3), initialised from gdl_manual_seed(seed), on dev; NULL + error */
static inline gdl_module *ddp_mlp(int d, int hidden, uint64_t seed, gdl_device dev) {
    gdl_module *mods[3], *m;
    gdl_manual_seed(seed);
    mods[0] = gdl_nn_linear(d, hidden, 1);
    mods[1] = gdl_nn_tanh();
    mods[2] = gdl_nn_linear(hidden, 3, 1);
    m = gdl_nn_sequential(3, mods);
    if (m && gdl_module_to(m, dev) < 0) {
        gdl_module_free(m);
        return NULL;
    }
    return m;
}

/* ---- a job: what gdl_fit trains ---- */

typedef struct ddp_job_spec {
    const ddp_data *data;
    int hidden;          /* the model: ddp_mlp(data->d, hidden, model_seed) */
    uint64_t model_seed;
    int batch;           /* per rank */
    uint64_t shuffle;    /* the loader's seed (it shuffles) */
    int shard;           /* 1: this rank's shard (num_replicas the world size); 0: every sample */
    int ddp;             /* 1: the model under gdl_ddp (default options) */
    gdl_loss_fn loss;    /* gdl_fit's loss (NULL: its default) */
} ddp_job_spec;

typedef struct ddp_job {
    gdl_dataset *ds;
    gdl_loader *l;
    gdl_module *m;
    gdl_optimizer *opt;    /* Adam, lr 1e-2 */
    gdl_scheduler *sched;  /* NULL, or one the caller adds (ddp_job_free frees it) */
    gdl_ddp *d;            /* NULL without DDP */
    gdl_loss_fn loss;
} ddp_job;

/* the data, the loader, the model and Adam, on dev; 0, or -1 + error (ddp_job_free frees what was made) */
static inline int ddp_job_make(ddp_job *j, const ddp_job_spec *s, gdl_device dev) {
    gdl_loader_opts lo = gdl_loader_defaults();
    int64_t s1[1];
    float *x = (float *)malloc(sizeof(float) * (size_t)(s->data->n * s->data->d));
    int32_t *y = (int32_t *)malloc(sizeof(int32_t) * (size_t)s->data->n);
    memset(j, 0, sizeof *j);
    j->loss = s->loss;
    s1[0] = s->data->d;
    lo.batch_size = s->batch;
    lo.shuffle = 1;
    lo.seed = s->shuffle;
    lo.device = dev;
    if (s->shard) {
        lo.num_replicas = gdl_dist_world_size();
        lo.rank = gdl_dist_rank();
    }
    if (x && y) {
        ddp_data_fill(s->data, x, y);
        j->ds = gdl_dataset_from_arrays(x, GDL_F32, 1, s1, y, s->data->n, 3); /* a copy */
    }
    free(x);
    free(y);
    if (!j->ds || !(j->m = ddp_mlp(s->data->d, s->hidden, s->model_seed, dev)) ||
        !(j->l = gdl_loader_new(j->ds, &lo)) || !(j->opt = gdl_adam_new(1e-2, 0.9, 0.999, 1e-8, 0)) ||
        gdl_optim_add_module(j->opt, j->m, 0) < 0 || (s->ddp && !(j->d = gdl_ddp_new(j->m, NULL))))
        return -1;
    return 0;
}

static inline void ddp_job_free(ddp_job *j) {
    gdl_ddp_free(j->d);
    gdl_scheduler_free(j->sched);
    gdl_optim_free(j->opt);
    gdl_module_free(j->m);
    gdl_loader_free(j->l);
    gdl_dataset_free(j->ds);
    memset(j, 0, sizeof *j);
    gdl_arena_reset();
}

/* gdl_fit for `epochs` (quietly), a checkpoint every `every` steps into dir (0: none), resuming from it */
static inline int ddp_job_fit(ddp_job *j, int epochs, int64_t every, int resume, const char *dir, gdl_epoch_stats *h) {
    gdl_fit_opts fo = gdl_fit_defaults();
    fo.epochs = epochs;
    fo.verbose = 0;
    fo.ddp = j->d;
    fo.scheduler = j->sched;
    fo.loss = j->loss;
    fo.checkpoint_every = every;
    fo.checkpoint_dir = dir;
    fo.resume = resume;
    return gdl_fit(j->m, j->l, j->opt, &fo, h);
}

/* ---- comparing models ---- */

/* 1 if a's parameters are b's: each value u of a within tol of b's v (|u - v| <= tol * (1 + |v|); NaN
   never is), or, with tol < 0, bit for bit. On any device (read through the host). msg: where they
   differ, or, when they agree within tol, the largest relative difference. */
static inline int ddp_same_params(gdl_module *a, gdl_module *b, double tol, char *msg, size_t len) {
    gdl_tensor *pa[8], *pb[8];
    int n = gdl_module_named_tensors(a, GDL_PARAMS, NULL, pa, 8), i, ok = 1;
    double worst = 0;
    int64_t k;
    snprintf(msg, len, "the models differ in their parameters");
    if (n < 0 || n > 8 || n != gdl_module_named_tensors(b, GDL_PARAMS, NULL, pb, 8)) return 0;
    for (i = 0; i < n && ok; i++) {
        size_t bytes = sizeof(float) * (size_t)pa[i]->numel;
        float *u = (float *)malloc(bytes), *v = (float *)malloc(bytes);
        if (pa[i]->numel != pb[i]->numel || !u || !v || gdl_copy_to_host(pa[i], u, bytes) < 0 ||
            gdl_copy_to_host(pb[i], v, bytes) < 0) {
            snprintf(msg, len, "parameter %d: not comparable (%.100s)", i, gdl_last_error());
            ok = 0;
        } else if (tol < 0) {
            if (memcmp(u, v, bytes) != 0) {
                snprintf(msg, len, "parameter %d: not the same bits", i);
                ok = 0;
            }
        } else {
            for (k = 0; k < pa[i]->numel && ok; k++) {
                double d = fabs(u[k] - v[k]);
                if (!(d <= tol * (1 + fabs(v[k])))) {
                    snprintf(msg, len, "parameter %d[%lld]: ddp %.9g, one process %.9g", i, (long long)k, u[k], v[k]);
                    ok = 0;
                } else if (d / (1 + fabs(v[k])) > worst) {
                    worst = d / (1 + fabs(v[k]));
                }
            }
        }
        free(u);
        free(v);
    }
    if (ok) snprintf(msg, len, tol < 0 ? "bit for bit" : "largest difference %.3g (relative)", worst);
    return ok;
}

/* ---- checkpoint directories ---- */

/* dir = "/tmp/NAME-PID" or, with a tag, "/tmp/NAME-PID-TAG", PID rank 0's: a name every rank agrees on
   (a broadcast: every rank calls it). 0 / -1. */
static inline int ddp_shared_dir(char *dir, size_t len, const char *name, const char *tag) {
    int32_t pid = (int32_t)getpid();
    int64_t s1[1] = {1};
    gdl_tensor *t = gdl_from_array(&pid, 1, s1, GDL_I32, gdl_dist_device());
    int rc = t && gdl_dist_broadcast(t, 0) == 0 && gdl_copy_to_host(t, &pid, sizeof pid) == 0 ? 0 : -1;
    snprintf(dir, len, "/tmp/%s-%d%s%s", name, (int)pid, tag ? "-" : "", tag ? tag : "");
    gdl_free(t);
    return rc;
}

/* after a barrier (nobody reads it any more), rank 0 removes dir's checkpoint and dir; the barrier's 0 / -1 */
static inline int ddp_remove_dir(const char *dir) {
    char f[512];
    int rc = gdl_dist_barrier();
    if (gdl_dist_rank() == 0) {
        snprintf(f, sizeof f, "%s/gdl_fit.safetensors", dir);
        remove(f);
        rmdir(dir);
    }
    return rc;
}

/* ---- the cases test_dist.c (CPU) and test_dist_nccl.c (CUDA) both run ---- */

#ifdef HARNESS_H
/* A module under gdl_ddp on dev, this rank's part of each batch (half on two ranks, all of it on one),
   equals one process on the whole batch: SGD with momentum, buckets small enough (100 bytes) that there
   are several, `steps` steps of `micro` micro-batches per rank (no_sync for all but the last). On the
   CPU, the gradients under no_sync are still each rank's own; on a GPU, gdl_ddp_backward makes no host
   synchronisation (the buckets' copies and all-reduces are queued). */
static inline enum harness_result ddp_steps_case(gdl_device dev, int micro, int steps) {
    enum { B = 8, D = 6 };
    float xs[B * D];
    int32_t ys[B];
    int W = gdl_dist_world_size(), r = gdl_dist_rank(), step, mb, per = B / W / micro;
    int64_t sx[2] = {B, D}, sy[1] = {B}, mx[2], my[1];
    gdl_module *dm = ddp_mlp(D, 7, 8, dev), *om = ddp_mlp(D, 7, 8, dev);
    gdl_ddp_opts o = gdl_ddp_defaults();
    gdl_ddp *d;
    gdl_optimizer *dopt = gdl_sgd_new(0.1, 0.9, 0, 0, 0), *oopt = gdl_sgd_new(0.1, 0.9, 0, 0, 0);
    gdl_tensor *xall, *yall;
    char msg[256];
    ASSERT(micro >= 1 && micro <= 2);
    ASSERT(dm && om);
    mx[0] = per, mx[1] = D, my[0] = per;
    o.first_bucket_mb = o.bucket_cap_mb = 100.0 / 1048576; /* several buckets: all-reduces overlap backward */
    if (!(d = gdl_ddp_new(dm, &o))) FAILm(gdl_last_error());
    ASSERT(gdl_ddp_num_buckets(d) >= 3);
    ASSERT_EQ(0, gdl_optim_add_module(dopt, dm, 0));
    ASSERT_EQ(0, gdl_optim_add_module(oopt, om, 0));
    ddp_data_fill(&ddp_step_data, xs, ys);
    xall = gdl_from_array(xs, 2, sx, GDL_F32, dev);
    yall = gdl_from_array(ys, 1, sy, GDL_I32, dev);
    for (step = 0; step < steps; step++) {
        gdl_tensor *keep[2][2]; /* the tape reads each micro-batch's input until the arena is reset */
        gdl_arena_reset();
        gdl_zero_grad(dopt);
        for (mb = 0; mb < micro; mb++) {
            int first = r * (B / W) + mb * per;
            gdl_tensor *x = keep[mb][0] = gdl_from_array(xs + first * D, 2, mx, GDL_F32, dev);
            gdl_tensor *y = keep[mb][1] = gdl_from_array(ys + first, 1, my, GDL_I32, dev);
            gdl_tensor *loss = gdl_mul_scalar(gdl_cross_entropy(gdl_ddp_forward(d, x), y), 1.0 / micro);
            int64_t syncs;
            gdl_ddp_set_no_sync(d, mb < micro - 1);
            syncs = gdl_sync_count();
            if (gdl_ddp_backward(d, loss) < 0) FAILf("step %d: %s", step, gdl_last_error());
            if (dev.type == GDL_DEVICE_CUDA && step > 0 && gdl_sync_count() != syncs)
                FAILf("step %d: gdl_ddp_backward made %lld host synchronisations", step,
                      (long long)(gdl_sync_count() - syncs));
            if (dev.type == GDL_DEVICE_CPU && mb < micro - 1) { /* no_sync: the gradients are each rank's own */
                gdl_tensor *p0, *both;
                int64_t s2[1] = {2};
                gdl_module_named_tensors(dm, GDL_PARAMS, NULL, &p0, 1);
                both = gdl_zeros(1, s2, GDL_F32, gdl_cpu());
                ASSERT_EQ(0, gdl_dist_all_gather(both, gdl_slice(gdl_reshape(p0->grad, 1, &p0->grad->numel), 0, 1)));
                ASSERT(((float *)both->data)[0] != ((float *)both->data)[1]);
                gdl_free(both);
            }
        }
        ASSERT_EQ(0, gdl_step(dopt));
        gdl_zero_grad(oopt);
        ASSERT_EQ(0, gdl_backward(gdl_cross_entropy(gdl_forward(om, xall), yall)));
        ASSERT_EQ(0, gdl_step(oopt));
        gdl_arena_reset();
        for (mb = 0; mb < micro; mb++) gdl_free(keep[mb][0]), gdl_free(keep[mb][1]);
    }
    if (!ddp_same_params(dm, om, 1e-6, msg, sizeof msg)) FAILf("rank %d, %d micro-batches: %s", r, micro, msg);
    gdl_ddp_free(d);
    gdl_optim_free(dopt), gdl_optim_free(oopt);
    gdl_module_free(dm), gdl_module_free(om);
    gdl_free(xall), gdl_free(yall);
    gdl_arena_reset();
    PASS();
}

/* gdl_fit under DDP on dev, each rank its shard (batch 4), equals gdl_fit in one process on the whole
   data (batch 8): the weights, and the epoch figures summed over the ranks. A DDP wrapper given with
   another module is refused. */
static inline enum harness_result ddp_fit_case(gdl_device dev) {
    static const ddp_job_spec one_spec = {.data = &ddp_fit_data, .hidden = 7, .model_seed = 8, .batch = 8,
                                          .shuffle = 12};
    static const ddp_job_spec ddp_spec = {.data = &ddp_fit_data, .hidden = 7, .model_seed = 8, .batch = 4,
                                          .shuffle = 12, .shard = 1, .ddp = 1};
    ddp_job one, dp;
    gdl_epoch_stats h1[2], h2[2];
    gdl_fit_opts fo = gdl_fit_defaults();
    int i, r = gdl_dist_rank();
    char msg[256];
    if (ddp_job_make(&one, &one_spec, dev) < 0 || ddp_job_make(&dp, &ddp_spec, dev) < 0) FAILm(gdl_last_error());
    if (ddp_job_fit(&one, 2, 0, 0, NULL, h1) < 0) FAILf("one process: %s", gdl_last_error());
    if (ddp_job_fit(&dp, 2, 0, 0, NULL, h2) < 0) FAILf("rank %d under DDP: %s", r, gdl_last_error());
    if (!ddp_same_params(dp.m, one.m, 1e-6, msg, sizeof msg)) FAILf("rank %d: %s", r, msg);
    for (i = 0; i < 2; i++) {
        ASSERT_EQ(ddp_fit_data.n, h2[i].samples);
        if (fabs(h1[i].loss - h2[i].loss) > 1e-6 * (1 + fabs(h1[i].loss)) || h1[i].accuracy != h2[i].accuracy)
            FAILf("epoch %d: one process loss %.8f acc %.4f, DDP loss %.8f acc %.4f", i + 1, h1[i].loss,
                  h1[i].accuracy, h2[i].loss, h2[i].accuracy);
    }
    fo.verbose = 0;
    fo.ddp = dp.d;
    ASSERT_EQ(-1, gdl_fit(one.m, dp.l, one.opt, &fo, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "opts.ddp wraps another module");
    ddp_job_free(&one);
    ddp_job_free(&dp);
    PASS();
}
#endif /* HARNESS_H */

#endif /* GPUDL_DDP_SETUP_H */
