/* fuzz_common.h — shared by gpudl's libFuzzer harnesses (tests/fuzz/fuzz_*.c)
   and their seed generator (make_seeds.c): in-memory files, and the small
   model, optimizer and scheduler that the checkpoint harnesses load into.
   gpudl's implementation is compiled once, in gpudl_impl.c, and linked into
   every harness. */
#ifndef GPUDL_FUZZ_COMMON_H
#define GPUDL_FUZZ_COMMON_H
#define _GNU_SOURCE /* memfd_create */
#include "../../gpudl.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

/* A file that lives in memory (memfd): its path is /proc/self/fd/N, so the
   parsers' own open/read code runs, without touching the disk. */
typedef struct fz_file {
    int fd;
    char path[64];
} fz_file;

static inline fz_file fz_file_new(void) {
    fz_file f;
    f.fd = memfd_create("gpudl-fuzz", 0);
    if (f.fd < 0) {
        perror("memfd_create");
        abort();
    }
    snprintf(f.path, sizeof f.path, "/proc/self/fd/%d", f.fd);
    return f;
}

/* A path in a fresh private directory on tmpfs when there is one, for files
   written the atomic way (temporary + rename), which a memfd cannot take. */
static char fz_dir[256];

static void fz_tmp_cleanup(void) {
    DIR *d = opendir(fz_dir);
    struct dirent *e;
    char path[600];
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", fz_dir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(fz_dir);
}

static inline const char *fz_tmp_path(const char *name) {
    char *dir = fz_dir;
    static char path[512];
    if (!dir[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(dir, sizeof fz_dir, "%s/gpudl-fuzz-XXXXXX", base);
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            abort();
        }
        atexit(fz_tmp_cleanup);
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

/* Make f hold exactly data[0, n). */
static inline void fz_file_set(const fz_file *f, const uint8_t *data, size_t n) {
    size_t off = 0;
    if (ftruncate(f->fd, 0) != 0) abort();
    while (off < n) {
        ssize_t w = pwrite(f->fd, data + off, n - off, (off_t)off);
        if (w <= 0) abort();
        off += (size_t)w;
    }
}

/* The checkpoint harnesses' training state: Linear(3,4) - BatchNorm1d(4) -
   ReLU - Linear(4,2), Adam, StepLR, after two steps (so every kind of state,
   moments and running statistics included, holds numbers). */
typedef struct fz_state {
    gdl_module *model;
    gdl_optimizer *opt;
    gdl_scheduler *sched;
} fz_state;

static fz_state fz_state_new(void) {
    fz_state s;
    gdl_module *layers[4];
    int64_t xs[2] = {5, 3};
    int32_t labels[5] = {0, 1, 1, 0, 1};
    int64_t ls[1] = {5};
    gdl_tensor *x, *y;
    int step;
    gdl_manual_seed(42);
    layers[0] = gdl_nn_linear(3, 4, 1);
    layers[1] = gdl_nn_batchnorm1d(4);
    layers[2] = gdl_nn_relu();
    layers[3] = gdl_nn_linear(4, 2, 1);
    s.model = gdl_nn_sequential(4, layers);
    s.opt = gdl_adam_new(1e-2, 0.9, 0.999, 1e-8, 0);
    if (!s.model || !s.opt || gdl_optim_add_module(s.opt, s.model, 0) < 0 || !(s.sched = gdl_steplr_new(s.opt, 1, 0.5))) {
        fprintf(stderr, "fuzz: cannot build the model: %s\n", gdl_last_error());
        abort();
    }
    x = gdl_randn(2, xs, gdl_cpu());
    y = gdl_from_array(labels, 1, ls, GDL_I32, gdl_cpu());
    for (step = 0; step < 2; step++) {
        gdl_tensor *loss;
        gdl_arena_reset();
        gdl_zero_grad(s.opt);
        loss = gdl_cross_entropy(gdl_forward(s.model, x), y);
        if (!loss || gdl_backward(loss) < 0 || gdl_step(s.opt) < 0 || gdl_scheduler_step(s.sched) < 0) abort();
    }
    gdl_arena_reset();
    gdl_free(x);
    gdl_free(y);
    return s;
}

#endif
