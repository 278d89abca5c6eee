/* test_resume.c — gdl_fit's checkpoint_every / resume: a training process is
   killed with SIGKILL mid-epoch (at several points: just after a checkpoint,
   between two, on the last step of an epoch, twice in one run), started
   again with the same options, and must end with the weights of the
   uninterrupted run bit for bit, with the same per-epoch metrics in its CSV.
   The net has dropout and batch norm, the loader shuffles with worker
   threads and the scheduler steps per batch, so every piece of state that a
   resume must restore is exercised. POSIX: the child is fork()ed and dies by
   raise(SIGKILL). Windows (MinGW-w64 under Wine, tests/windows.mk, with
   tests/win_compat.h): the child is this program started again with
   CHILD_FLAG and train()'s arguments, and dies by TerminateProcess. */
#define _POSIX_C_SOURCE 200809L
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#ifndef _WIN32
#include <sys/wait.h>
#include <unistd.h>
#else
#include <windows.h>
#include <process.h>
#include <errno.h>
/* The parent turns the child's exit code into a POSIX wait status (in_child), so the tests below read the
   same on both: an exit code c is c << 8, TerminateProcess's KILLED_CODE is "killed by SIGKILL", and
   anything else (a crash's 0xC0000005...) is -1, which none of the checks accepts. */
#define CHILD_FLAG "--resume-child"
#define KILLED_CODE 137 /* 128 + 9, as a shell reports a SIGKILL; train() exits with 0 or 1 */
#define SIGKILL 9
#define WIFSIGNALED(s) ((s) >= 1 && (s) <= 0x7e)
#define WTERMSIG(s) (s)
#endif

#define N 600
#define BATCH 32 /* 19 batches per epoch, the last one short */
#define EPOCHS 3

static char dir[256];
#define CKPT_EVERY 7 /* steps between checkpoints */
static long kill_at;   /* the loss call that kills the process (0: none) */
static int batch_size = BATCH, epochs = EPOCHS; /* changed to make a checkpoint that does not fit */
static long loss_calls;

static const char *path_in(const char *name) {
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

/* cross entropy, and the crash: SIGKILL, no cleanup, as the OOM killer or a preemption does it */
static gdl_tensor *loss_or_die(gdl_tensor *out, gdl_tensor *y, void *user) {
    (void)user;
    if (++loss_calls == kill_at) {
#ifdef _WIN32
        /* no cleanup either: no atexit, no stdio flush, the loader's threads stopped where they are */
        TerminateProcess(GetCurrentProcess(), KILLED_CODE);
        abort(); /* not reached: TerminateProcess on this process does not return */
#else
        raise(SIGKILL);
#endif
    }
    return gdl_cross_entropy(out, y);
}

/* WEIGHTS.calls: the loss calls of a run that finished, which shows whether it resumed (fewer calls
   than the uninterrupted run) or trained from the start; -1 when it cannot be written */
static int write_calls(const char *weights_file, long calls) {
    char p[600];
    FILE *f;
    snprintf(p, sizeof p, "%s.calls", weights_file);
    if (!(f = fopen(p, "w"))) return -1;
    fprintf(f, "%ld\n", calls);
    return fclose(f) == 0 ? 0 : -1;
}
static long read_calls(const char *weights_file) {
    char p[600];
    long calls = -1;
    FILE *f;
    snprintf(p, sizeof p, "%s.calls", weights_file);
    if (!(f = fopen(p, "r"))) return -1;
    if (fscanf(f, "%ld", &calls) != 1) calls = -1;
    fclose(f);
    return calls;
}

/* Trains in this process; 0 when fit returns, 1 on an error. The weights go to weights_file. */
static int train(const char *ckdir, int resume, long die_at, const char *weights_file, const char *csv) {
    float *x = (float *)malloc(sizeof(float) * N * 8);
    int32_t *lab = (int32_t *)malloc(sizeof(int32_t) * N);
    int64_t shape[1] = {8}, i;
    gdl_dataset *ds;
    gdl_loader *ld;
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_module *layers[6], *m;
    gdl_optimizer *opt;
    gdl_scheduler *sched;
    gdl_fit_opts fo = gdl_fit_defaults();
    int rc;
    gdl_manual_seed(5);
    for (i = 0; i < N; i++) {
        int c = (int)(gdl_rng_next_u64() % 3), k;
        lab[i] = c;
        for (k = 0; k < 8; k++) x[i * 8 + k] = (float)((k % 3 == c ? 2.0 : 0.0) + gdl_rng_uniform() - 0.5);
    }
    ds = gdl_dataset_from_arrays(x, GDL_F32, 1, shape, lab, N, 3);
    lo.batch_size = batch_size;
    lo.shuffle = 1;
    lo.num_workers = 2;
    lo.seed = 77;
    ld = gdl_loader_new(ds, &lo);
    layers[0] = gdl_nn_linear(8, 16, 1);
    layers[1] = gdl_nn_batchnorm1d(16);
    layers[2] = gdl_nn_relu();
    layers[3] = gdl_nn_dropout(0.3);
    layers[4] = gdl_nn_linear(16, 3, 1);
    m = gdl_nn_sequential(5, layers);
    opt = gdl_adam_new(1e-2, 0.9, 0.999, 1e-8, 0);
    if (!ds || !ld || !m || !opt || gdl_optim_add_module(opt, m, 0) < 0) return 1;
    sched = gdl_onecycle_lr_new(opt, 5e-2, (int)(EPOCHS * gdl_loader_num_batches(ld)));
    if (!sched) return 1;
    fo.epochs = epochs;
    fo.scheduler = sched;
    fo.scheduler_per_batch = 1;
    fo.loss = loss_or_die;
    fo.verbose = 0;
    fo.csv_path = csv;
    fo.checkpoint_every = ckdir ? CKPT_EVERY : 0;
    fo.checkpoint_dir = ckdir;
    fo.resume = resume;
    kill_at = die_at;
    loss_calls = 0;
    rc = gdl_fit(m, ld, opt, &fo, NULL);
    if (rc < 0) fprintf(stderr, "train: %s\n", gdl_last_error());
    if (rc == 0 && write_calls(weights_file, loss_calls) < 0) rc = -1;
    /* also after a failure: the test checks that a refused resume changed nothing */
    if (gdl_save_model(m, weights_file) < 0) rc = -1;
    gdl_scheduler_free(sched);
    gdl_optim_free(opt);
    gdl_module_free(m);
    gdl_loader_free(ld);
    gdl_dataset_free(ds);
    free(x);
    free(lab);
    return rc < 0;
}

#ifndef _WIN32
/* Runs train() in a child; returns its wait status. */
static int in_child(const char *ckdir, int resume, long die_at, const char *weights, const char *csv) {
    pid_t pid;
    int status;
    fflush(NULL);
    pid = fork();
    if (pid == 0) _exit(train(ckdir, resume, die_at, weights, csv));
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
    return status;
}
#else
/* a into out (cap bytes) quoted as the C runtime splits a command line into argv: backslashes are
   literal except in front of a quote (the closing one included), where they are doubled; _spawnv
   joins its arguments with spaces and quotes nothing itself. -1 when out is too small. */
static int quote_arg(char *out, size_t cap, const char *a) {
    size_t n = 0;
    out[n++] = '"';
    for (;;) {
        size_t bs = 0, reps;
        while (*a == '\\') {
            a++;
            bs++;
        }
        reps = (*a == '"' || *a == 0) ? 2 * bs : bs;
        if (n + reps + 4 > cap) return -1;
        while (reps--) out[n++] = '\\';
        if (!*a) break;
        if (*a == '"') out[n++] = '\\';
        out[n++] = *a++;
    }
    out[n++] = '"';
    out[n] = 0;
    return 0;
}

/* Runs train() in a child (this program again, with CHILD_FLAG: child_main); returns a wait status as
   POSIX's waitpid gives it. batch_size and epochs, which a forked child would inherit, go as arguments. */
static int in_child(const char *ckdir, int resume, long die_at, const char *weights, const char *csv) {
    enum { NARG = 9 };
    static char q[NARG][1200];
    char self[MAX_PATH], nums[4][24];
    const char *raw[NARG], *args[NARG + 1];
    DWORD len = GetModuleFileNameA(NULL, self, sizeof self);
    intptr_t code;
    int i;
    if (len == 0 || len >= sizeof self) return -1;
    snprintf(nums[0], sizeof nums[0], "%d", resume);
    snprintf(nums[1], sizeof nums[1], "%ld", die_at);
    snprintf(nums[2], sizeof nums[2], "%d", batch_size);
    snprintf(nums[3], sizeof nums[3], "%d", epochs);
    raw[0] = self, raw[1] = CHILD_FLAG, raw[2] = ckdir ? ckdir : "-", raw[3] = nums[0], raw[4] = nums[1];
    raw[5] = weights, raw[6] = csv ? csv : "-", raw[7] = nums[2], raw[8] = nums[3];
    for (i = 0; i < NARG; i++) {
        if (quote_arg(q[i], sizeof q[i], raw[i]) < 0) return -1;
        args[i] = q[i];
    }
    args[NARG] = NULL;
    /* a start that fails (-1: the child never ran, nothing of it to undo) is tried twice more: under a loaded
       Wine, _spawnv once failed to start a child that the next run started */
    for (i = 0;; i++) {
        fflush(NULL);
        errno = 0;
        code = _spawnv(_P_WAIT, self, args);
        if (code != -1) break;
        fprintf(stderr, "in_child: the child did not start (errno %d: %s)\n", errno, strerror(errno));
        if (i == 2) break;
        Sleep(500);
    }
    if (code == KILLED_CODE) return SIGKILL;
    if (code >= 0 && code <= 255) return (int)code << 8;
    if (code != -1) fprintf(stderr, "in_child: the child ended abnormally (%ld)\n", (long)code);
    return -1;
}

/* The child's side: argv as in_child builds it; "-" stands for NULL. */
static int child_main(char **argv) {
    batch_size = atoi(argv[7]);
    epochs = atoi(argv[8]);
    _exit(train(strcmp(argv[2], "-") ? argv[2] : NULL, atoi(argv[3]), atol(argv[4]), argv[5],
                strcmp(argv[6], "-") ? argv[6] : NULL));
}
#endif

static int same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int ca, cb, same = fa && fb;
    while (same) {
        ca = getc(fa);
        cb = getc(fb);
        if (ca != cb) same = 0;
        if (ca == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* The CSV without its timing columns (seconds, samples/s differ from run to run). */
static int same_metrics(const char *a, const char *b) {
    FILE *f[2];
    char la[512], lb[512];
    int same = 1, k;
    f[0] = fopen(a, "r");
    f[1] = fopen(b, "r");
    if (!f[0] || !f[1]) same = 0;
    while (same) {
        char *ra = fgets(la, sizeof la, f[0]), *rb = fgets(lb, sizeof lb, f[1]);
        if (!ra || !rb) {
            same = !ra && !rb;
            break;
        }
        for (k = 0; k < 5; k++) { /* epoch,loss,accuracy,val_loss,val_accuracy */
            ra = strchr(ra + 1, ',');
            rb = strchr(rb + 1, ',');
            if (!ra || !rb) break;
        }
        if (!ra || !rb || ra - la != rb - lb || strncmp(la, lb, (size_t)(ra - la))) same = 0;
    }
    for (k = 0; k < 2; k++)
        if (f[k]) fclose(f[k]);
    return same;
}

static void clear_dir(const char *d) {
    DIR *dd = opendir(d);
    struct dirent *e;
    char p[700];
    while (dd && (e = readdir(dd)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", d, e->d_name);
        unlink(p);
    }
    if (dd) closedir(dd);
}

TEST resume_after_kill(void *arg) {
    const long *kills = (const long *)arg; /* loss calls to die at, one per crash, 0-terminated */
    char ref[512], got[512], ck[512], refcsv[512], gotcsv[512];
    int status, k, checkpointed = 0;
    snprintf(ref, sizeof ref, "%s", path_in("ref.safetensors"));
    snprintf(got, sizeof got, "%s", path_in("got.safetensors"));
    snprintf(ck, sizeof ck, "%s", path_in("ck"));
    snprintf(refcsv, sizeof refcsv, "%s", path_in("ref.csv"));
    snprintf(gotcsv, sizeof gotcsv, "%s", path_in("got.csv"));
    status = in_child(NULL, 0, 0, ref, refcsv);
    ASSERT_EQ(0, status);
    mkdir(ck, 0777);
    clear_dir(ck);
    remove(got);
    for (k = 0; kills[k]; k++) {
        status = in_child(ck, 1, kills[k], got, gotcsv);
        if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
            FAILf("run %d: expected to die at loss call %ld, status %d", k, kills[k], status);
    }
    ASSERT_EQ(0, in_child(ck, 1, 0, got, gotcsv));
    /* Where a killed run had passed a checkpoint (a step is done when its loss call's successor comes),
       the last run resumed from one: it made fewer loss calls than the whole run. One that trained from
       the start would end with the same weights and pass the checks below. */
    for (k = 0; kills[k]; k++)
        if (kills[k] > CKPT_EVERY) checkpointed = 1;
    ASSERT_GT(read_calls(ref), 0);
    if (checkpointed) ASSERT_LT(read_calls(got), read_calls(ref));
    else ASSERT_EQ(read_calls(ref), read_calls(got)); /* killed before the first checkpoint: from the start */
    if (!same_file(ref, got)) FAILm("the resumed run's weights differ from the uninterrupted run's");
    if (!same_metrics(refcsv, gotcsv)) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "echo '--- uninterrupted:'; cat '%s'; echo '--- resumed:'; cat '%s'", refcsv, gotcsv);
        fflush(NULL);
        if (system(cmd) != 0) fprintf(stderr, "(cannot show the files)\n");
        FAILm("the resumed run's metrics CSV differs");
    }
    PASS();
}

/* A checkpoint taken with another batch size (or more epochs) is refused before anything changes:
   the weights after the refusal are the initial ones. */
TEST resume_other_config_refused(void) {
    char ck[512], init[512], got[512];
    int status;
    snprintf(ck, sizeof ck, "%s", path_in("ck-config"));
    snprintf(init, sizeof init, "%s", path_in("init.safetensors"));
    snprintf(got, sizeof got, "%s", path_in("refused.safetensors"));
    mkdir(ck, 0777);
    clear_dir(ck);
    epochs = 0; /* fit returns at once: the initial weights */
    ASSERT_EQ(0, in_child(NULL, 0, 0, init, NULL));
    epochs = EPOCHS;
    status = in_child(ck, 1, 10, got, NULL); /* dies after the checkpoint of step 7 */
    ASSERT(WIFSIGNALED(status));
    batch_size = 50;
    ASSERT_EQ(1 << 8, in_child(ck, 1, 0, got, NULL));
    batch_size = BATCH;
    epochs = 1; /* the checkpoint is in epoch 1: it fits, so this run resumes and finishes */
    ASSERT_EQ(0, in_child(ck, 1, 0, got, NULL));
    epochs = EPOCHS;
    /* and the refused run's weights: rerun it, then compare */
    batch_size = 50;
    ASSERT_EQ(1 << 8, in_child(ck, 1, 0, got, NULL));
    batch_size = BATCH;
    if (!same_file(init, got)) FAILm("a refused resume changed the model");
    clear_dir(ck);
    rmdir(ck);
    PASS();
}

/* A file that is not a gdl_fit checkpoint is refused with a message, before anything is changed. */
TEST resume_mismatch_refused(void) {
    char ck[512], p[700];
    FILE *f;
    snprintf(ck, sizeof ck, "%s", path_in("ck-mismatch"));
    mkdir(ck, 0777);
    clear_dir(ck);
    snprintf(p, sizeof p, "%s/gdl_fit.safetensors", ck);
    ASSERT_NOT_NULL(f = fopen(p, "wb"));
    fputs("not a checkpoint", f);
    fclose(f);
    ASSERT_EQ(1 << 8, in_child(ck, 1, 0, path_in("x.safetensors"), NULL)); /* exit status 1: an error */
    PASS();
}

static void remove_tree(void) {
    const char *subs[2] = {"ck", "ck-mismatch"};
    int i;
    for (i = 0; i < 2; i++) {
        char d[512];
        snprintf(d, sizeof d, "%s", path_in(subs[i]));
        clear_dir(d);
        rmdir(d);
    }
    clear_dir(dir);
    rmdir(dir);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    /* 19 steps per epoch, a checkpoint every 7 steps */
    static const long after_ckpt[] = {8, 0};          /* one step after the checkpoint of step 7 */
    static const long between[] = {26, 0};            /* epoch 2, between checkpoints */
    static const long epoch_end[] = {38, 0};          /* the last batch of epoch 2 */
    static const long twice[] = {12, 20, 0};          /* killed again after resuming once (loss calls restart) */
    static const long before_any[] = {3, 0};          /* before the first checkpoint: starts over */
    const char *base = getenv("TMPDIR");
#ifdef _WIN32
    if (argc == 9 && strcmp(argv[1], CHILD_FLAG) == 0) return child_main(argv);
#endif
    HARNESS_MAIN_BEGIN(argc, argv);
    snprintf(dir, sizeof dir, "%s/gpudl-resume-XXXXXX", base && base[0] ? base : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN_TEST_NAMED("resume_after_kill_after_checkpoint", resume_after_kill, (void *)after_ckpt);
    RUN_TEST_NAMED("resume_after_kill_between_checkpoints", resume_after_kill, (void *)between);
    RUN_TEST_NAMED("resume_after_kill_at_epoch_end", resume_after_kill, (void *)epoch_end);
    RUN_TEST_NAMED("resume_after_two_kills", resume_after_kill, (void *)twice);
    RUN_TEST_NAMED("resume_after_kill_before_any_checkpoint", resume_after_kill, (void *)before_any);
    RUN_TEST(resume_other_config_refused);
    RUN_TEST(resume_mismatch_refused);
    remove_tree();
    gdl_shutdown();
    HARNESS_MAIN_END();
}
