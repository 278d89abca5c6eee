/* dist_faults.c — what a distributed job does when a rank fails, and an
   elastic restart with fewer ranks (src/api/dist.h). One program, one scenario
   per run, driven by tests/test_dist_faults.sh under mpirun:

     stall            2 ranks, gdl_fit under DDP; rank 1 stops (SIGSTOP) in
                      its third batch: rank 0's gdl_fit must return -1 within
                      the timeout with an error naming the gradient all-reduce,
                      rank 1, the timeout and GPUDL_DIST_TIMEOUT; later
                      collectives fail at once; rank 0 exits 1
     stall3           3 ranks in gdl_dist_all_reduce, rank 2 stopped: ranks 0
                      and 1 time out (t unchanged), rank 0 names rank 2 as
                      missing and rank 1 as waiting in the all-reduce too
     train DIR        2 ranks x batch 8 (the shards of 96 samples), 1 epoch,
                      a checkpoint at its end in DIR
     kill DIR         2 ranks x batch 8, 2 epochs, a checkpoint every 2 steps
                      in DIR; rank 1 kills itself (SIGKILL) at epoch 2's
                      fourth batch: the job must end (the launcher's teardown,
                      or rank 0's timeout), the checkpoint of step 8 (epoch 2,
                      batch 2) stays
     resume DIR POS   1 rank x batch 16 resumes DIR's checkpoint (taken at POS,
                      "epoch E, batch B of NB, R ranks x batch S") for 2 epochs:
                      the sampler re-shards the rest of the epoch for one rank;
                      the weights must equal one process x batch 16 trained for
                      2 epochs from the start (to 1e-6: 2 x 8 averages two
                      half-batch means, 1 x 16 one mean, so the two agree to
                      rounding, not bit for bit), and so must the resumed
                      epoch's loss and sample count

   Each prints "ok: ..." or "FAIL: ..." lines; the script reads them.
   Build: mpicc -std=c99 -DGPUDL_MPI tests/dist_faults.c -lm -pthread -o build/dist_faults */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "ddp_setup.h"

static int fails, status; /* status: the exit status a program gives after a failed collective */

#define CHECK(cond, ...)                                                                                        \
    do {                                                                                                      \
        if (cond) {                                                                                           \
            printf("ok: rank %d: ", gdl_dist_rank());                                                         \
        } else {                                                                                              \
            printf("FAIL: rank %d: ", gdl_dist_rank());                                                       \
            fails++;                                                                                          \
        }                                                                                                     \
        printf(__VA_ARGS__);                                                                                  \
        printf("\n");                                                                                         \
    } while (0)

/* the loss gdl_fit calls; on rank `who`, at call `at`, the process stops or dies */
static int fault_rank = -1, fault_at, fault_sig, calls;
static gdl_tensor *faulty_loss(gdl_tensor *out, gdl_tensor *y, void *user) {
    if (gdl_dist_rank() == fault_rank && ++calls == fault_at) {
        fflush(stdout);
        raise(fault_sig);
    }
    return gdl_loss_cross_entropy(out, y, user);
}

/* the job of every scenario (tests/ddp_setup.h): 96 samples, Linear(6,16) tanh Linear(16,3), this rank's
   shard in batches of `batch`, Adam, under DDP or not, trained with faulty_loss */
static const ddp_data job_data = {96, 6, sin, 0.31, 0.2, 7, 3};

static int job_make(ddp_job *j, int batch, int ddp) {
    ddp_job_spec s = {.data = &job_data, .hidden = 16, .model_seed = 5, .batch = batch, .shuffle = 9, .shard = 1,
                      .ddp = ddp, .loss = faulty_loss};
    return ddp_job_make(j, &s, gdl_cpu());
}

static int contains(const char *s, const char *needle) { return strstr(s, needle) != NULL; }

static void stall(void) {
    ddp_job j;
    double t0, took;
    const char *e;
    fault_rank = 1, fault_at = 3, fault_sig = SIGSTOP;
    if (job_make(&j, 8, 1) < 0) {
        CHECK(0, "setup: %s", gdl_last_error());
        return;
    }
    t0 = gdl_now();
    CHECK(ddp_job_fit(&j, 1, 0, 0, NULL, NULL) == -1, "gdl_fit returns -1 when rank 1 stops");
    status = 3;
    took = gdl_now() - t0;
    e = gdl_last_error();
    printf("rank 0's error: %s\n", e);
    CHECK(contains(e, "gdl_ddp_backward: the all-reduce of gradient bucket") && contains(e, "timed out after 2 s") &&
              contains(e, "rank 1 did not arrive") && contains(e, "GPUDL_DIST_TIMEOUT"),
          "the error names the gradient all-reduce, the timeout, rank 1 and GPUDL_DIST_TIMEOUT");
    CHECK(took >= 2 && took < 10, "it came after %.2f s (timeout 2 s)", took);
    t0 = gdl_now();
    CHECK(gdl_dist_barrier() == -1 && contains(gdl_last_error(), "unusable after an earlier failure") &&
              gdl_now() - t0 < 0.5,
          "a later collective fails at once: %s", gdl_last_error());
    ddp_job_free(&j);
}

static void stall3(void) {
    const char *e;
    int64_t s4[1] = {4};
    gdl_tensor *t = gdl_ones(1, s4, GDL_F32, gdl_cpu());
    if (gdl_dist_rank() == 2) raise(SIGSTOP);
    CHECK(gdl_dist_all_reduce(t, GDL_SUM) == -1, "gdl_dist_all_reduce fails with rank 2 stopped");
    CHECK(((float *)t->data)[0] == 1, "t is as it was");
    status = 3;
    e = gdl_last_error();
    if (gdl_dist_rank() == 0) {
        printf("rank 0's error: %s\n", e);
        CHECK(contains(e, "gdl_dist_all_reduce: the all-reduce of f32 [4]: timed out after 1 s") &&
                  contains(e, "rank 2 did not arrive") && contains(e, "rank 1 waits in the all-reduce of f32 [4]"),
              "the error names rank 2 as missing and rank 1 as waiting too");
    }
    gdl_free(t);
}

static void train(const char *dir, int kill) {
    ddp_job j;
    if (job_make(&j, 8, 1) < 0) {
        CHECK(0, "setup: %s", gdl_last_error());
        return;
    }
    CHECK(gdl_loader_num_batches(j.l) == 6, "6 batches of 8 per rank and epoch");
    if (kill) {
        fault_rank = 1, fault_at = 10, fault_sig = SIGKILL; /* epoch 2, batch 4 */
        CHECK(ddp_job_fit(&j, 2, 2, 0, dir, NULL) == 0, "gdl_fit ends (it should not: rank 1 was killed): %s",
              gdl_last_error());
    } else {
        CHECK(ddp_job_fit(&j, 1, 6, 0, dir, NULL) == 0, "epoch 1 on 2 ranks, checkpoint at its end: %s",
              gdl_last_error());
    }
    ddp_job_free(&j);
}

/* the checkpoint's gdl_fit position, as "epoch E, batch B of NB, R ranks x batch S" */
static void position(const char *dir, char *out, size_t len) {
    static const char *const k[5] = {"fit.epoch", "fit.batch", "fit.num_batches", "fit.replicas", "fit.batch_size"};
    const char *v[5] = {"?", "?", "?", "?", "?"};
    char path[512];
    gdl_st_file f;
    int i, j;
    snprintf(path, sizeof path, "%s/gdl_fit.safetensors", dir);
    if (gdl_st_read(path, &f) < 0) {
        snprintf(out, len, "unreadable: %.100s", gdl_last_error());
        return;
    }
    for (i = 0; i < 5; i++)
        for (j = 0; j < f.n_meta; j++)
            if (!strcmp(f.meta_keys[j], k[i])) v[i] = f.meta_vals[j];
    snprintf(out, len, "epoch %s, batch %s of %s, %s ranks x batch %s", v[0], v[1], v[2], v[3], v[4]);
    gdl_st_free(&f);
}

static void resume(const char *dir, const char *want) {
    ddp_job r, one;
    char pos[160], msg[256];
    gdl_epoch_stats hr[2], h1[2];
    if (job_make(&r, 16, 1) < 0 || job_make(&one, 16, 0) < 0) {
        CHECK(0, "setup: %s", gdl_last_error());
        return;
    }
    CHECK(gdl_dist_world_size() == 1, "one rank");
    position(dir, pos, sizeof pos);
    CHECK(!strcmp(pos, want), "the checkpoint was taken at %s (expected %s)", pos, want);
    if (ddp_job_fit(&r, 2, 2, 1, dir, hr) < 0) {
        CHECK(0, "resume: %s", gdl_last_error());
        return;
    }
    if (ddp_job_fit(&one, 2, 0, 0, NULL, h1) < 0) {
        CHECK(0, "one process: %s", gdl_last_error());
        return;
    }
    CHECK(ddp_same_params(r.m, one.m, 1e-6, msg, sizeof msg), "the weights equal 1 process x 16 for 2 epochs: %s",
          msg);
    CHECK(hr[1].samples == job_data.n && h1[1].samples == job_data.n &&
              fabs(hr[1].loss - h1[1].loss) <= 1e-6 * fabs(h1[1].loss),
          "epoch 2: %lld samples, loss %.9f (one process %.9f)", (long long)hr[1].samples, hr[1].loss, h1[1].loss);
    ddp_job_free(&r);
    ddp_job_free(&one);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    const char *dir = argc > 2 ? argv[2] : "";
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (gdl_dist_init() < 0) {
        printf("FAIL: gdl_dist_init: %s\n", gdl_last_error());
        return 2;
    }
    if (!strcmp(mode, "stall")) stall();
    else if (!strcmp(mode, "stall3")) stall3();
    else if (!strcmp(mode, "train")) train(dir, 0);
    else if (!strcmp(mode, "kill")) train(dir, 1);
    else if (!strcmp(mode, "resume")) resume(dir, argc > 3 ? argv[3] : "");
    else {
        printf("FAIL: unknown scenario '%s' (stall, stall3, train DIR, kill DIR, resume DIR)\n", mode);
        fails++;
    }
    gdl_dist_shutdown(); /* after a timeout: returns at once, MPI left to the launcher's teardown */
    gdl_shutdown();
    return fails ? 1 : status;
}
