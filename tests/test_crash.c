/* test_crash.c — checkpoints against a process that dies mid-save and a disk
   that fills up: a child that saves a large checkpoint again and again is
   killed with SIGKILL at random moments (120 trials), and every time the
   file on disk must still load, complete and equal to one whole save; the
   temporaries the dead children left are removed by the next save. A save
   that runs out of space (RLIMIT_FSIZE stands in for a full disk) fails with
   a message, leaves the previous checkpoint intact and no temporary behind.
   POSIX only (fork, kill, setrlimit). gpudl's thread pool is safe to use in a
   forked child (test_pool checks it); libgomp, used before, was not. */
#define _POSIX_C_SOURCE 200809L
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BIG 262144 /* floats in the big layer: a 1 MiB save, so a kill lands inside it often */

static char dir[256];

static const char *path_in(const char *name) {
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

/* Files in dir whose name contains ".tmp." (the saves' temporaries). */
static int count_temporaries(void) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".tmp.")) n++;
    if (d) closedir(d);
    return n;
}

/* A model of two linear layers, one of them large, with Adam state. */
static gdl_module *make_model(gdl_optimizer **opt) {
    gdl_module *layers[2], *m;
    layers[0] = gdl_nn_linear(512, BIG / 512, 1);
    layers[1] = gdl_nn_linear(BIG / 512, 3, 1);
    m = gdl_nn_sequential(2, layers);
    *opt = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0);
    if (!m || !*opt || gdl_optim_add_module(*opt, m, 0) < 0) return NULL;
    return m;
}

/* Every parameter of m set to value: a save is then recognisable by one number. */
static int set_all(gdl_module *m, double value) {
    gdl_tensor *t;
    const char *names[4] = {"0.weight", "0.bias", "1.weight", "1.bias"};
    int i;
    for (i = 0; i < 4; i++)
        if (!(t = gdl_module_tensor(m, names[i])) || gdl_fill_(t, value) < 0) return -1;
    return 0;
}

/* The value every parameter of m holds, or NaN if they differ (a torn file). */
static double common_value(gdl_module *m) {
    const char *names[4] = {"0.weight", "0.bias", "1.weight", "1.bias"};
    double v = NAN;
    int i;
    int64_t k;
    for (i = 0; i < 4; i++) {
        gdl_tensor *t = gdl_module_tensor(m, names[i]);
        const float *p = (const float *)t->data;
        for (k = 0; k < t->numel; k++) {
            if (v != v) v = p[k];
            else if (p[k] != v) return NAN;
        }
    }
    return v;
}

TEST kill_during_save(void) {
    gdl_optimizer *opt;
    gdl_module *m = make_model(&opt), *r;
    gdl_optimizer *ropt;
    const char *ck = path_in("ck.safetensors");
    int trial, torn = 0, killed_mid = 0;
    double seen_new = 0;
    ASSERT_NOT_NULL(m);
    ASSERT_NOT_NULL(r = make_model(&ropt));
    ASSERT_EQ(0, set_all(m, 1.0));
    ASSERT_EQ(0, gdl_checkpoint_save(m, opt, NULL, 0, ck));
    srand(12345);
    for (trial = 0; trial < 120; trial++) {
        pid_t pid;
        int status;
        struct timespec ts;
        double v, want = 2.0 + trial; /* this trial's child saves `want` */
        fflush(NULL);
        pid = fork();
        ASSERT(pid >= 0);
        if (pid == 0) {
            /* saves until killed; the first save is the one the kill may interrupt */
            if (set_all(m, want) < 0) _exit(3);
            for (;;)
                if (gdl_checkpoint_save(m, opt, NULL, trial, ck) < 0) _exit(2);
        }
        ts.tv_sec = 0;
        ts.tv_nsec = (long)(rand() % 30000) * 1000L; /* 0 to 30 ms: before, inside and after the first save */
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        ASSERT_EQ(pid, waitpid(pid, &status, 0));
        if (!WIFSIGNALED(status)) FAILf("trial %d: the child exited by itself (status %d): a save failed", trial, status);
        if (count_temporaries() > 0) killed_mid++;
        /* what is on disk must load, whole */
        if (gdl_checkpoint_load(r, ropt, NULL, NULL, ck) < 0)
            FAILf("trial %d: the checkpoint does not load after a kill: %s", trial, gdl_last_error());
        v = common_value(r);
        if (v != v) torn++;
        else if (v != 1.0 && (v < 2.0 || v > want)) FAILf("trial %d: loaded value %g was never saved", trial, v);
        if (v == want) seen_new++;
    }
    ASSERT_EQ(0, torn);
    /* the kills landed inside saves (temporaries left) and also after whole saves (new values) */
    ASSERT_GT(killed_mid, 0);
    ASSERT_GT(seen_new, 0);
    /* names that only look like temporaries are never touched; a temporary whose pid is dead here
       but whose lock is held (a writer in another PID namespace or on another host) stays too */
    {
        char decoy1[600], decoy2[600], locked[600];
        FILE *f;
        pid_t dead, holder;
        int status, pfd[2];
        char c;
        dead = fork();
        if (dead == 0) _exit(0);
        ASSERT_EQ(dead, waitpid(dead, &status, 0)); /* a pid nobody has now */
        snprintf(decoy1, sizeof decoy1, "%s.tmp.%ld.backup", ck, (long)dead);
        snprintf(decoy2, sizeof decoy2, "%s.tmp.4294967296.1", ck);
        snprintf(locked, sizeof locked, "%s.tmp.%ld.7", ck, (long)dead);
        ASSERT_NOT_NULL(f = fopen(decoy1, "wb"));
        fclose(f);
        ASSERT_NOT_NULL(f = fopen(decoy2, "wb"));
        fclose(f);
        ASSERT_EQ(0, pipe(pfd));
        holder = fork();
        if (holder == 0) { /* holds a write lock on `locked` until killed */
            struct flock lk;
            int fd = open(locked, O_RDWR | O_CREAT, 0644);
            memset(&lk, 0, sizeof lk);
            lk.l_type = F_WRLCK;
            lk.l_whence = SEEK_SET;
            if (fd < 0 || fcntl(fd, F_SETLK, &lk) < 0) _exit(1);
            if (write(pfd[1], "x", 1) != 1) _exit(1);
            for (;;) pause();
        }
        ASSERT_EQ(1, (int)read(pfd[0], &c, 1)); /* the lock is held */
        ASSERT_EQ(0, gdl_checkpoint_save(m, opt, NULL, 0, ck));
        ASSERT_EQ(0, access(decoy1, F_OK));
        ASSERT_EQ(0, access(decoy2, F_OK));
        ASSERT_EQ(0, access(locked, F_OK));
        kill(holder, SIGKILL);
        ASSERT_EQ(holder, waitpid(holder, &status, 0));
        ASSERT_EQ(0, gdl_checkpoint_save(m, opt, NULL, 0, ck));
        ASSERT(access(locked, F_OK) != 0); /* its writer gone, its lock too: removed */
        ASSERT_EQ(0, unlink(decoy1));
        ASSERT_EQ(0, unlink(decoy2));
        close(pfd[0]);
        close(pfd[1]);
    }
    /* the next save removes what the dead children left, and only that: a live process's
       temporary (the parent's pid stands in for a process still writing) and this one's stay */
    {
        char live[600], own[600];
        FILE *f;
        snprintf(live, sizeof live, "%s.tmp.%ld.1", ck, (long)getppid());
        snprintf(own, sizeof own, "%s.tmp.%ld.999", ck, (long)getpid());
        ASSERT_NOT_NULL(f = fopen(live, "wb"));
        fclose(f);
        ASSERT_NOT_NULL(f = fopen(own, "wb"));
        fclose(f);
        ASSERT_EQ(0, gdl_checkpoint_save(m, opt, NULL, 0, ck));
        ASSERT_EQ(2, count_temporaries());
        ASSERT_EQ(0, unlink(live));
        ASSERT_EQ(0, unlink(own));
    }
    ASSERT_EQ(0, count_temporaries());
    gdl_optim_free(opt);
    gdl_optim_free(ropt);
    gdl_module_free(m);
    gdl_module_free(r);
    PASS();
}

TEST disk_full_during_save(void) {
    gdl_optimizer *opt, *ropt;
    gdl_module *m = make_model(&opt), *r = make_model(&ropt);
    const char *ck = path_in("full.safetensors");
    struct rlimit old, lim;
    struct sigaction ign, was;
    int rc;
    ASSERT_NOT_NULL(m);
    ASSERT_NOT_NULL(r);
    ASSERT_EQ(0, set_all(m, 5.0));
    ASSERT_EQ(0, gdl_checkpoint_save(m, opt, NULL, 0, ck));
    ASSERT_EQ(0, set_all(m, 6.0));
    /* the file size limit stands in for a full disk: writes past it fail with EFBIG */
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    ASSERT_EQ(0, sigaction(SIGXFSZ, &ign, &was));
    ASSERT_EQ(0, getrlimit(RLIMIT_FSIZE, &old));
    lim = old;
    lim.rlim_cur = 100000;
    ASSERT_EQ(0, setrlimit(RLIMIT_FSIZE, &lim));
    rc = gdl_checkpoint_save(m, opt, NULL, 1, ck);
    setrlimit(RLIMIT_FSIZE, &old);
    sigaction(SIGXFSZ, &was, NULL);
    ASSERT_EQ(-1, rc);
    ASSERT_CONTAINS(gdl_last_error(), "full.safetensors");
    ASSERT_CONTAINS(gdl_last_error(), "File too large");
    ASSERT_EQ(0, count_temporaries());
    /* the previous checkpoint, intact */
    ASSERT_EQ(0, gdl_checkpoint_load(r, ropt, NULL, NULL, ck));
    ASSERT_IN_RANGE(5.0, common_value(r), 0);
    gdl_optim_free(opt);
    gdl_optim_free(ropt);
    gdl_module_free(m);
    gdl_module_free(r);
    PASS();
}

static void remove_dir(void) {
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') unlink(path_in(e->d_name));
    if (d) closedir(d);
    rmdir(dir);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    const char *base = getenv("TMPDIR");
    HARNESS_MAIN_BEGIN(argc, argv);
    snprintf(dir, sizeof dir, "%s/gpudl-crash-XXXXXX", base && base[0] ? base : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN_TEST(kill_during_save);
    RUN_TEST(disk_full_during_save);
    remove_dir();
    gdl_shutdown();
    HARNESS_MAIN_END();
}
