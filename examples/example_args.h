/* example_args.h — the command-line flags the examples share, parsed strictly.

   --data DIR        where Fashion-MNIST (or CIFAR-10, for cnn) is; default: the
                     search of gdl_dataset_fashion_mnist (GPUDL_DATA, ./data,
                     /usr/share/datasets/fashion-mnist)
   --epochs N        training epochs
   --batch-size N    training batch size
   --device D        cpu, cuda, cuda:N or auto (default: cuda:0 when there is
                     a GPU, else cpu)
   --seed N          the generator's seed (initial weights, shuffling, dropout)
   --csv FILE        per-epoch metrics as CSV
   --profile         a per-op time profile (gdl_profile_print), the FLOP ops'
                     share of it, and the memory summary (gdl_memory_summary);
                     no value
   --amp DT          mixed precision: forward and loss under autocast in DT,
                     bf16 or f16 (gdl_autocast_begin); default off (f32)
   --train-subset N  train on the first N training samples only (quick runs, tests)
   --test-subset N   test on the first N test samples only
   --out-dir DIR     where the files the example writes go (default: the
                     current directory); a relative FILE given to --csv or
                     to an example's own output option is taken inside it
   --fp32-precision P  the CPU's f32 matrix products (gdl_cpu_set_fp32_precision):
                     ieee (the default) or bf16; where the CPU has no bf16 path
                     a line says so and the run stays in ieee
   --help            the usage, exit status 0

   Every file an example will write (its CSV, saved models) is checked
   before any work starts: one that cannot be written is refused with the
   system's reason, exit status 2. Each file written is printed ("wrote
   PATH").

   An example's own options (char_gpt's --steps, --lr, ...) are ex_opt rows
   given to ex_parse_opts: a whole number, a real number, a text or an output
   file each, with its range, checked as strictly and listed by --help.

   Each example says which of these it takes. Values may follow the flag or
   an '=' (--epochs=3). A bad value, an unknown flag or a stray argument
   prints what is wrong and the usage, and the example exits with status 2;
   nothing is guessed (`./mnist_mlp 3` is refused, not read as a folder).
   Not part of gpudl's API: a helper of the example programs. */
#ifndef GPUDL_EXAMPLE_ARGS_H
#define GPUDL_EXAMPLE_ARGS_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EX_DATA = 1, EX_EPOCHS = 2, EX_BATCH = 4, EX_DEVICE = 8, EX_SEED = 16, EX_CSV = 32, EX_PROFILE = 64, EX_AMP = 128,
       EX_SUBSET = 256 /* --train-subset and --test-subset */, EX_OUT_DIR = 512,
       EX_PRECISION = 1024 /* --fp32-precision: gdl_cpu_set_fp32_precision, set by the parser */ };

#define EX_MAX_PATHS 8     /* output files an example names (its CSV, models) */
#define EX_PATH_MAX 1024

typedef struct ex_args {
    const char *data;  /* NULL: the default search */
    const char *csv;   /* NULL: none, unless the example has a default */
    int epochs, batch_size;
    gdl_device device;
    uint64_t seed;
    int profile;       /* --profile given */
    gdl_dtype amp;     /* --amp: GDL_BF16 or GDL_F16; GDL_F32 (0): off */
    int64_t train_subset, test_subset; /* --train-subset, --test-subset; 0: the whole set */
    const char *data_help; /* --help's text for --data when the data is not Fashion-MNIST; NULL: that one */
    const char *out_dir;   /* --out-dir; NULL: the current directory */
    const char *fp32_precision; /* --fp32-precision: "ieee" or "bf16"; NULL: not given (ieee) */
    char paths[EX_MAX_PATHS][EX_PATH_MAX]; /* output paths joined to out_dir (ex_out_path) */
    int n_paths;
} ex_args;

/* An example's own option: --name VALUE. kind 'i' (int *value, a whole number in [lo, hi]), 'd'
   (double *value, a finite number in [lo, hi]), 's' (const char **value, non-empty) or 'o' (an output
   file: as 's', then taken inside --out-dir and checked writable before the example starts); or kind 'b', a
   switch: --name alone sets int *value to 1 (no value; lo and hi unused). --help prints "--name METAVAR"
   (NULL: N, X or TEXT by kind; a switch has none) and help, then the default (the value before parsing)
   unless help names its own or the option is a switch. */
typedef struct ex_opt {
    const char *name;
    char kind;
    void *value;
    double lo, hi;
    const char *help;
    const char *metavar;
} ex_opt;

/* The example's defaults: no --data (the default search), no CSV, seed 0, device auto. */
static inline ex_args ex_defaults(int epochs, int batch_size) { /* inline: no warning where unused */
    ex_args a;
    memset(&a, 0, sizeof a);
    a.epochs = epochs;
    a.batch_size = batch_size;
    a.device = gdl_default_device();
    return a;
}

static void ex_usage(FILE *f, const char *prog, const char *about, unsigned takes, const ex_args *defaults,
                     const ex_opt *extra, int n_extra) {
    int k;
    fprintf(f, "usage: %s [options]\n%s\n\noptions:\n", prog, about);
    if (takes & EX_DATA)
        fprintf(f, "  --data DIR        %s\n", defaults->data_help ? defaults->data_help
                    : "data folder (default: $GPUDL_DATA, ./data, /usr/share/datasets/fashion-mnist)");
    if (takes & EX_EPOCHS) fprintf(f, "  --epochs N        training epochs (default %d)\n", defaults->epochs);
    if (takes & EX_BATCH) fprintf(f, "  --batch-size N    training batch size (default %d)\n", defaults->batch_size);
    if (takes & EX_DEVICE) fprintf(f, "  --device D        cpu, cuda, cuda:N or auto (default auto: %s)\n", gdl_device_str(defaults->device));
    if (takes & EX_SEED) fprintf(f, "  --seed N          random seed (default %llu)\n", (unsigned long long)defaults->seed);
    if (takes & EX_CSV) fprintf(f, "  --csv FILE        per-epoch metrics as CSV (default %s)\n", defaults->csv ? defaults->csv : "none");
    if (takes & EX_PROFILE) fprintf(f, "  --profile         print a per-op time profile of the training and the memory summary\n");
    if (takes & EX_AMP) fprintf(f, "  --amp DT          mixed precision: autocast to bf16 or f16 (default off)\n");
    if (takes & EX_SUBSET) {
        fprintf(f, "  --train-subset N  train on the first N training samples only (default: all)\n");
        fprintf(f, "  --test-subset N   test on the first N test samples only (default: all)\n");
    }
    if (takes & EX_OUT_DIR) fprintf(f, "  --out-dir DIR     where the files it writes go (default: the current directory)\n");
    if (takes & EX_PRECISION)
        fprintf(f, "  --fp32-precision P\n%20sthe CPU's f32 matrix products: ieee, or bf16 (operands rounded to bf16; AMX or\n"
                   "%20sAVX512-BF16 where the CPU has one, else ieee) (default ieee)\n", "", "");
    for (k = 0; k < n_extra; k++) { /* defaults: the values before parsing */
        const ex_opt *o = &extra[k];
        char arg[64];
        if (o->kind == 'b') snprintf(arg, sizeof arg, "%s", o->name);
        else snprintf(arg, sizeof arg, "%s %s", o->name,
                      o->metavar ? o->metavar : o->kind == 's' ? "TEXT" : o->kind == 'o' ? "FILE" : o->kind == 'i' ? "N" : "X");
        if (strlen(arg) < 17) fprintf(f, "  %-17s %s", arg, o->help);
        else fprintf(f, "  %s\n%20s%s", arg, "", o->help); /* too long for the column */
        if (o->kind == 'b' || strstr(o->help, "(default")) fputc('\n', f);
        else if (o->kind == 'i') fprintf(f, " (default %d)\n", *(const int *)o->value);
        else if (o->kind == 'd') fprintf(f, " (default %g)\n", *(const double *)o->value);
        else fprintf(f, " (default %s)\n", *(const char *const *)o->value ? *(const char *const *)o->value : "none");
    }
    fprintf(f, "  --help            this text\n");
}

/* Whether a profile row (gdl_profile_rows' name) is one of the ops that do a net's FLOPs: linear layers,
   matrix products, convolutions, attention, forward or backward. The rest (norms, activations, pooling,
   adds, the optimizer, the loader) are passes over memory: what bounds a net's utilisation when the FLOP
   ops run at the peak. inline: no warning where unused. */
static inline int ex_flop_op(const char *name) {
    static const char *const ops[] = {"linear", "matmul", "bmm", "conv", "attention", "sdpa"};
    size_t i;
    for (i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strstr(name, ops[i])) return 1;
    return 0;
}

/* --profile: the profile begun before the training, the FLOP ops' share of it (ex_flop_op), and the
   memory summary of dev. 0 / -1 + error. */
static inline int ex_profile_print(const char *what, gdl_device dev) { /* inline: no warning where unused */
    const gdl_profile_row *rows;
    const char *mem;
    double flop_ms = 0, total_ms = 0;
    int nr, i;
    if (gdl_profile_end() < 0 || (nr = gdl_profile_rows(&rows)) < 0 || !(mem = gdl_memory_summary(dev))) return -1;
    printf("\nprofile of %s on %s:\n", what, gdl_device_str(dev));
    if (gdl_profile_print(stdout) < 0) return -1;
    for (i = 0; i < nr; i++) {
        total_ms += rows[i].total_ms;
        if (ex_flop_op(rows[i].name)) flop_ms += rows[i].total_ms;
    }
    if (total_ms > 0)
        printf("FLOP ops (linear, matmul, convolution, attention): %.1f of the %.1f ms (%.1f %%), the other ops %.1f ms\n",
               flop_ms, total_ms, 100 * flop_ms / total_ms, total_ms - flop_ms);
    printf("%s\n", mem);
    return 0;
}

/* --train-subset / --test-subset: *ds replaced by its first n samples (n 0: left as it is; more than it
   holds: gdl_dataset_subset's error). inline: no warning where unused. 0 / -1 + error. */
/* The model FLOPs of one training step of model on a batch of l (gdl_flops_count: the forward, and the
   backward of the outputs' sum; a loss adds no GEMM), for the utilisation line of a run gdl_fit trained
   (whose steps cannot be counted one by one: validation runs between them, a CUDA graph's replay counts
   nothing). Run after training: it draws a batch (the loader's next epoch) and leaves gradients in the
   model. -1 + error. */
static inline double ex_step_flops(gdl_module *model, gdl_loader *l) { /* inline: no warning where unused */
    gdl_tensor *x, *y, *out;
    int64_t f;
    int got = gdl_loader_next(l, &x, &y);
    if (got == 0) got = gdl_loader_next(l, &x, &y); /* the end of an epoch: the next one's first batch */
    if (got != 1) return -1;
    gdl_arena_reset();
    gdl_module_train(model, 1);
    gdl_flops_reset();
    if (!(out = gdl_forward(model, x)) || gdl_backward(gdl_sum(out)) < 0) return -1;
    f = gdl_flops_count(NULL, NULL);
    gdl_arena_reset();
    return (double)f;
}

/* The utilisation line (gdl_flops_line) of `steps` training steps of `flops` FLOPs in all that took
   `seconds`, on dev in dtype dt (the autocast dtype, else f32) */
static inline void ex_print_flops(double flops, double seconds, double steps, gdl_device dev, gdl_dtype dt) {
    if (flops >= 0 && steps > 0 && seconds > 0)
        printf("utilisation: %s\n", gdl_flops_line(flops / steps, seconds / steps, dev, dt));
}

/* The utilisation line of a gdl_fit run of `epochs` epochs (hist: their training times and samples) in
   batches of `batch`, each step counted as ex_step_flops counts one on model and its train loader l */
static inline void ex_print_fit_flops(gdl_module *model, gdl_loader *l, const gdl_epoch_stats *hist, int epochs,
                                      int batch, gdl_device dev, gdl_dtype dt) { /* inline: no warning where unused */
    double f = ex_step_flops(model, l), samples = 0, seconds = 0;
    int e;
    for (e = 0; e < epochs; e++) {
        samples += (double)hist[e].samples;
        seconds += hist[e].seconds;
    }
    if (f < 0) printf("utilisation: not counted (%s)\n", gdl_last_error());
    else ex_print_flops(f * samples / batch, seconds, samples / batch, dev, dt);
}

static inline int ex_subset(gdl_dataset **ds, int64_t n) {
    gdl_dataset *sub;
    if (n <= 0) return 0;
    if (!(sub = gdl_dataset_subset(*ds, 0, n))) return -1;
    gdl_dataset_free(*ds);
    *ds = sub;
    return 0;
}

static inline int ex_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of t[from, n) (all of t when n <= from), sorting t: the examples' step times without the first
   steps' warm-up. inline: no warning where unused. */
static inline double ex_median(double *t, int n, int from) {
    if (n <= from) from = 0;
    qsort(t + from, (size_t)(n - from), sizeof *t, ex_cmp_double);
    return (n - from) % 2 ? t[from + (n - from) / 2] : (t[from + (n - from) / 2 - 1] + t[from + (n - from) / 2]) / 2;
}

/* Frees what an image-classification example trains with (any of them may be NULL: made or not). */
static inline void ex_free_training(gdl_scheduler *sched, gdl_optimizer *opt, gdl_module *model, gdl_loader *tl,
                                    gdl_loader *vl, gdl_dataset *train, gdl_dataset *test) { /* inline: no warning where unused */
    gdl_scheduler_free(sched);
    gdl_optim_free(opt);
    gdl_module_free(model);
    gdl_loader_free(tl);
    gdl_loader_free(vl);
    gdl_dataset_free(train);
    gdl_dataset_free(test);
}

/* The parameters of m (gdl_module_named_tensors' order) in a new array for clipping, their count in *np.
   NULL after printing "prog: out of memory", or on gdl's error. */
static inline gdl_tensor **ex_param_list(const char *prog, gdl_module *m, int *np) { /* inline: no warning where unused */
    gdl_tensor **ps;
    if ((*np = gdl_module_named_tensors(m, GDL_PARAMS, NULL, NULL, 0)) < 0) return NULL;
    if (!(ps = (gdl_tensor **)malloc(sizeof *ps * (size_t)(*np > 0 ? *np : 1)))) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return NULL;
    }
    if (gdl_module_named_tensors(m, GDL_PARAMS, NULL, ps, *np) != *np) {
        free(ps);
        return NULL;
    }
    return ps;
}

/* The sequence examples' step log: each step's loss and time summed until the next report. */
typedef struct {
    double sum, secs; /* the losses and step times since the last report */
    int rows;         /* the steps since the last report */
} ex_steplog;

/* One training step's loss and time into l, "step N: loss" printed every log_interval steps. -1 after an
   error naming prog when the loss is NaN (the run diverged); 1 when a report is due (every eval_interval
   steps and at the last of steps: the caller reports l's sums, then zeroes l); else 0. */
static inline int ex_steplog_add(ex_steplog *l, const char *prog, int step, int steps, double loss, double secs,
                                 int log_interval, int eval_interval) { /* inline: no warning where unused */
    if (loss != loss) {
        fprintf(stderr, "%s: the loss is NaN at step %d (diverged: try a smaller --lr)\n", prog, step);
        return -1;
    }
    l->sum += loss;
    l->secs += secs;
    l->rows++;
    if (step % log_interval == 0) printf("step %d: loss %.6f\n", step, loss);
    return step % eval_interval == 0 || step == steps;
}

/* "median step time" of the steps' times t (without the first three, which warm up), printed; the median. */
static inline double ex_print_median_step(double *t, int steps) { /* inline: no warning where unused */
    double med = ex_median(t, steps, 3);
    printf("median step time %.2f ms (steps %d to %d)\n", 1e3 * med, steps > 3 ? 4 : 1, steps);
    return med;
}

/* name inside a->out_dir (name as it is without one, or when it is absolute): a path kept in a. NULL when
   name is NULL, the path is too long or a has no room left (then a message was printed). */
static const char *ex_out_path(ex_args *a, const char *name) {
    char *p;
    if (!name || !a->out_dir || name[0] == '/' || name[0] == '\\' || (name[0] && name[1] == ':')) return name;
    if (a->n_paths == EX_MAX_PATHS) {
        fprintf(stderr, "example: more than %d output files\n", EX_MAX_PATHS);
        return NULL;
    }
    p = a->paths[a->n_paths];
    if (snprintf(p, EX_PATH_MAX, "%s/%s", a->out_dir, name) >= EX_PATH_MAX) {
        fprintf(stderr, "example: the path %s/%s is too long\n", a->out_dir, name);
        return NULL;
    }
    a->n_paths++;
    return p;
}

/* Whether path can be written, found out before any work is done: opened for appending (which changes
   nothing) and removed again when it did not exist. 0, or -1 after printing flag, path and the system's
   reason. */
static int ex_check_writable(const char *prog, const char *flag, const char *path) {
    FILE *f = fopen(path, "rb");
    int existed = f != NULL;
    if (f) fclose(f);
    errno = 0;
    if (!(f = fopen(path, "ab"))) {
        fprintf(stderr, "%s: %s %s: cannot write it: %s\n", prog, flag, path, errno ? strerror(errno) : "unknown error");
        return -1;
    }
    fclose(f);
    if (!existed) remove(path);
    return 0;
}

/* The line every example prints for each file it wrote. */
static inline void ex_wrote(const char *path) { printf("wrote %s\n", path); } /* inline: no warning where unused */

/* A whole decimal number in [lo, hi]; 0 on success. */
static int ex_number(const char *s, unsigned long long lo, unsigned long long hi, unsigned long long *out) {
    char *end;
    unsigned long long v;
    if (!s || !*s || *s < '0' || *s > '9') return -1; /* strtoull would accept " -1" */
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int ex_device(const char *s, gdl_device *out) {
    unsigned long long i = 0;
    if (!strcmp(s, "auto")) {
        *out = gdl_default_device();
        return 0;
    }
    if (!strcmp(s, "cpu")) {
        *out = gdl_cpu();
        return 0;
    }
    if (strcmp(s, "cuda") && (strncmp(s, "cuda:", 5) || ex_number(s + 5, 0, 63, &i) < 0)) return -1;
    if ((int)i >= gdl_cuda_device_count()) return -2;
    *out = gdl_cuda((int)i);
    return 0;
}

#define EX_MAX_EXTRA 32
typedef union ex_value { int i; double d; const char *s; } ex_value;

/* An example's own option o's value val into *out; 0, or -1 after printing what is wrong. */
static int ex_extra_value(const char *prog, const ex_opt *o, const char *val, ex_value *out) {
    unsigned long long n;
    char *end;
    if (o->kind == 's' || o->kind == 'o') {
        if (!*val) {
            fprintf(stderr, "%s: %s needs a non-empty value\n", prog, o->name);
            return -1;
        }
        out->s = val;
    } else if (o->kind == 'i') {
        if (ex_number(val, (unsigned long long)o->lo, (unsigned long long)o->hi, &n) < 0) {
            fprintf(stderr, "%s: %s '%s': expected a whole number from %.0f to %.0f\n", prog, o->name, val, o->lo, o->hi);
            return -1;
        }
        out->i = (int)n;
    } else {
        errno = 0;
        out->d = strtod(val, &end);
        if (!*val || *end || errno || !(out->d >= o->lo && out->d <= o->hi)) { /* NaN fails too */
            fprintf(stderr, "%s: %s '%s': expected a number from %g to %g\n", prog, o->name, val, o->lo, o->hi);
            return -1;
        }
    }
    return 0;
}

/* 0: run; 1: --help was printed (exit 0); 2: an error was printed (exit 2). The example's own options,
   extra[0, n_extra) (at most EX_MAX_EXTRA, int options with lo >= 0), are written only when every
   argument is right, so --help and the usage after an error show their defaults. */
static int ex_parse_opts(ex_args *a, int argc, char **argv, unsigned takes, const char *about, const ex_opt *extra,
                         int n_extra) {
    static const struct { const char *name; unsigned bit; } flags[] = {
        {"--data", EX_DATA}, {"--epochs", EX_EPOCHS}, {"--batch-size", EX_BATCH},
        {"--device", EX_DEVICE}, {"--seed", EX_SEED}, {"--csv", EX_CSV}, {"--profile", EX_PROFILE},
        {"--amp", EX_AMP}, {"--train-subset", EX_SUBSET}, {"--test-subset", EX_SUBSET}, {"--out-dir", EX_OUT_DIR},
        {"--fp32-precision", EX_PRECISION}};
    ex_value pending[EX_MAX_EXTRA];
    int given[EX_MAX_EXTRA] = {0}, x;
    const char *prog = argc > 0 ? argv[0] : "example";
    ex_args defaults = *a;
    int i, k;
    if (n_extra > EX_MAX_EXTRA) n_extra = EX_MAX_EXTRA;
    for (i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = NULL, *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        unsigned long long n;
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            ex_usage(stdout, prog, about, takes, &defaults, extra, n_extra);
            return 1;
        }
        for (k = 0; k < (int)(sizeof flags / sizeof flags[0]); k++)
            if ((takes & flags[k].bit) && strlen(flags[k].name) == len && !strncmp(arg, flags[k].name, len)) break;
        for (x = 0; k == (int)(sizeof flags / sizeof flags[0]) && x < n_extra; x++)
            if (strlen(extra[x].name) == len && !strncmp(arg, extra[x].name, len)) break;
        if (k == (int)(sizeof flags / sizeof flags[0]) && x == n_extra) {
            if (arg[0] == '-') fprintf(stderr, "%s: unknown option '%s'\n", prog, arg);
            else fprintf(stderr, "%s: unexpected argument '%s' (options are given by name: see --help)\n", prog, arg);
            ex_usage(stderr, prog, about, takes, &defaults, extra, n_extra);
            return 2;
        }
        if ((k < (int)(sizeof flags / sizeof flags[0]) && flags[k].bit == EX_PROFILE) ||
            (k == (int)(sizeof flags / sizeof flags[0]) && extra[x].kind == 'b')) { /* a switch: no value */
            if (eq) {
                fprintf(stderr, "%s: %.*s takes no value\n", prog, (int)len, arg);
                ex_usage(stderr, prog, about, takes, &defaults, extra, n_extra);
                return 2;
            }
            if (k < (int)(sizeof flags / sizeof flags[0])) a->profile = 1;
            else pending[x].i = 1, given[x] = 1;
            continue;
        }
        if (eq) val = eq + 1;
        else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) val = argv[++i];
        else {
            fprintf(stderr, "%s: %s needs a value\n", prog, arg);
            ex_usage(stderr, prog, about, takes, &defaults, extra, n_extra);
            return 2;
        }
        if (k == (int)(sizeof flags / sizeof flags[0])) { /* one of the example's own */
            if (ex_extra_value(prog, &extra[x], val, &pending[x]) < 0) return 2;
            given[x] = 1;
            continue;
        }
        switch (flags[k].bit) {
        case EX_DATA:
        case EX_CSV:
        case EX_OUT_DIR:
            if (!*val) {
                fprintf(stderr, "%s: %s needs a non-empty value\n", prog, flags[k].name);
                return 2;
            }
            if (flags[k].bit == EX_DATA) a->data = val;
            else if (flags[k].bit == EX_CSV) a->csv = val;
            else a->out_dir = val;
            break;
        case EX_EPOCHS:
            if (ex_number(val, 1, 100000, &n) < 0) {
                fprintf(stderr, "%s: --epochs '%s': expected a whole number from 1 to 100000\n", prog, val);
                return 2;
            }
            a->epochs = (int)n;
            break;
        case EX_BATCH:
            if (ex_number(val, 1, 1 << 20, &n) < 0) {
                fprintf(stderr, "%s: --batch-size '%s': expected a whole number from 1 to 1048576\n", prog, val);
                return 2;
            }
            a->batch_size = (int)n;
            break;
        case EX_SEED:
            if (ex_number(val, 0, UINT64_MAX, &n) < 0) {
                fprintf(stderr, "%s: --seed '%s': expected a whole number from 0 to 2^64-1\n", prog, val);
                return 2;
            }
            a->seed = (uint64_t)n;
            break;
        case EX_AMP:
            if (!strcmp(val, "bf16")) a->amp = GDL_BF16;
            else if (!strcmp(val, "f16")) a->amp = GDL_F16;
            else {
                fprintf(stderr, "%s: --amp '%s': expected bf16 or f16\n", prog, val);
                return 2;
            }
            break;
        case EX_PRECISION:
            if (strcmp(val, "ieee") && strcmp(val, "bf16")) {
                fprintf(stderr, "%s: --fp32-precision '%s': expected ieee or bf16\n", prog, val);
                return 2;
            }
            a->fp32_precision = val;
            break;
        case EX_SUBSET:
            if (ex_number(val, 1, (unsigned long long)1 << 40, &n) < 0) {
                fprintf(stderr, "%s: %s '%s': expected a whole number from 1 to 2^40\n", prog, flags[k].name, val);
                return 2;
            }
            if (!strcmp(flags[k].name, "--train-subset")) a->train_subset = (int64_t)n;
            else a->test_subset = (int64_t)n;
            break;
        case EX_DEVICE:
            switch (ex_device(val, &a->device)) {
            case -1:
                fprintf(stderr, "%s: --device '%s': expected cpu, cuda, cuda:N or auto\n", prog, val);
                return 2;
            case -2:
                fprintf(stderr, "%s: --device %s: %s\n", prog, val,
                        gdl_cuda_device_count() == 0
                            ? "no CUDA device here (a CPU-only build, or no GPU; `make emu` builds the examples "
                              "on the CUDA emulator)"
                            : "no such CUDA device");
                return 2;
            }
            break;
        }
    }
    for (x = 0; x < n_extra; x++) {
        if (!given[x]) continue;
        if (extra[x].kind == 'i' || extra[x].kind == 'b') *(int *)extra[x].value = pending[x].i;
        else if (extra[x].kind == 'd') *(double *)extra[x].value = pending[x].d;
        else *(const char **)extra[x].value = pending[x].s;
    }
    /* the output files: inside --out-dir, and writable, before any work */
    if ((takes & EX_CSV) && a->csv && (!(a->csv = ex_out_path(a, a->csv)) || ex_check_writable(prog, "--csv", a->csv) < 0))
        return 2;
    for (x = 0; x < n_extra; x++) {
        const char **p = (const char **)extra[x].value;
        if (extra[x].kind != 'o' || !*p) continue;
        if (!(*p = ex_out_path(a, *p)) || ex_check_writable(prog, extra[x].name, *p) < 0) return 2;
    }
    /* bf16 where the CPU has no path for it: a line, and the run goes on in ieee (what PyTorch's setting does) */
    if (a->fp32_precision && gdl_cpu_set_fp32_precision(a->fp32_precision) < 0) printf("%s: %s\n", prog, gdl_last_error());
    return 0;
}

/* ex_parse_opts without options of the example's own. */
static inline int ex_parse(ex_args *a, int argc, char **argv, unsigned takes, const char *about) { /* inline: no warning where unused */
    return ex_parse_opts(a, argc, argv, takes, about, NULL, 0);
}

#endif
