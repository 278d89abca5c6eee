/* bench/passes.c — the memory-bound ops of a CNN step (batch norm with its ReLU or GELU, the residual add, SGD)
   against the time their bytes take at the memory's speed.

   Build and run (from the repository root):

       make build/bench_passes
       GPUDL_NUM_THREADS=2 build/bench_passes [REPS]

   The bandwidth is gdl_add's (as bench/train.c's BENCH_BOUND=1): two 64 MiB inputs read, one output
   written, the fastest of 5, a write-allocate's read not counted. Each op runs on the CPU kernel directly
   at the shapes of examples/speedrun.c (batch 256: batch norm + GELU after each conv, one fused op; the
   unfused pair at its first shape for comparison) and of
   bench/train.c's rcnn (batch 128: batch norm with its ReLU fused) and resnet10 (the residual add), the
   median of REPS calls (default 15). "bytes" is what the op must read and write with the fewest passes the
   math allows: every input read once, every output written once (a batch norm channel's slice, at most
   0.4 MB, stays in the 2+ MB L2 between its passes, so its second read is not counted); "mem ms" that at
   the bandwidth; "x" the measured time over it; "cpu ms" the process's CPU time over the thread count (the
   op's cost where the cores are its own: a loaded machine's wall time waits for other processes too); "add
   GB" the rate gdl_add streams at the op's size (3 arrays of its n: these sizes stay in the last-level
   cache, faster than 64 MiB arrays) and "x" the op's time over its bytes at that rate. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "bench_cpu.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static float *buf_new(int64_t n, unsigned seed) { /* n values in [-2, 2), fixed */
    float *p = (float *)malloc((size_t)n * sizeof *p);
    int64_t i;
    if (!p) {
        fprintf(stderr, "bench_passes: out of memory for %lld floats\n", (long long)n);
        exit(1);
    }
    for (i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)(seed >> 8) / (float)(1u << 24) * 4.0f - 2.0f;
    }
    return p;
}

enum { OP_BN, OP_BN_BWD, OP_BN_RELU, OP_BN_RELU_BWD, OP_BN_GELU, OP_BN_GELU_BWD, OP_GELU, OP_GELU_BWD, OP_ADD, OP_SGD };
static const char *const op_names[] = {"batch_norm", "batch_norm bwd", "batch_norm_relu", "bn_relu bwd", "batch_norm_gelu",
                                       "bn_gelu bwd", "gelu",          "gelu bwd",        "add",         "sgd momentum"};
/* arrays of n floats read or written (the fused GELU's forward writes its input too, its backward reads it) */
static const int op_arrays[] = {2, 3, 2, 4, 3, 4, 2, 3, 3, 5};
/* the activation fused into batch norm */
static int op_act(int op) {
    return op == OP_BN_RELU || op == OP_BN_RELU_BWD ? GDL_ACT_RELU
           : op == OP_BN_GELU || op == OP_BN_GELU_BWD ? GDL_ACT_GELU
                                                      : GDL_ACT_NONE;
}

typedef struct {
    int op;
    int64_t N, C, S;
    float *x, *y, *gy, *gx, *gm, *bt, *mean, *invstd, *rm, *rv, *ggm, *gbt, *pre;
} bench_case;

static void run_op(bench_case *b) {
    const int64_t n = b->N * b->C * b->S;
    switch (b->op) {
    case OP_BN: case OP_BN_RELU: case OP_BN_GELU:
        gdl__cpu_batchnorm_f32(b->N, b->C, b->S, b->x, b->gm, b->bt, b->y, b->mean, b->invstd, b->rm, b->rv, 1, 0.1,
                               1e-5, op_act(b->op), b->pre);
        break;
    case OP_BN_BWD: case OP_BN_RELU_BWD: case OP_BN_GELU_BWD: /* ReLU's mask from y, GELU's input from pre */
        gdl__cpu_batchnorm_backward_f32(b->N, b->C, b->S, b->x, b->gy,
                                        b->op == OP_BN_RELU_BWD ? b->y : b->op == OP_BN_GELU_BWD ? b->pre : NULL, b->gm,
                                        b->mean, b->invstd, 1, b->gx, b->ggm, b->gbt, 0, op_act(b->op));
        break;
    case OP_GELU: gdl__cpu_unary_f32(GDL_UN_GELU_ERF, n, b->x, b->y, 0); break;
    case OP_GELU_BWD: gdl__cpu_unary_backward_f32(GDL_UN_GELU_ERF, n, b->x, b->y, b->gy, b->gx, 0, 0); break;
    case OP_ADD: {
        const int64_t one = 1;
        gdl__cpu_binary_f32(GDL_BIN_ADD, 1, &n, b->x, &one, b->gy, &one, b->y);
        break;
    }
    case OP_SGD: {
        static int32_t step = 1;
        gdl_opt_hyper h;
        gdl_opt_tensor t;
        gdl__cpu_opt_table *tab;
        memset(&h, 0, sizeof h);
        memset(&t, 0, sizeof t);
        h.lr = 1e-6, h.momentum = 0.9, h.weight_decay = 5e-4, h.nesterov = 1;
        t.p = b->y, t.g = b->gy, t.s1 = b->gx, t.n = n, t.hyper = &h, t.step = &step;
        tab = (gdl__cpu_opt_table *)gdl__cpu_opt_table_new(1, &t);
        if (tab) gdl__cpu_sgd_multi(tab);
        gdl__cpu_opt_table_free(tab);
        break;
    }
    }
}

/* the median of reps calls, seconds of wall time; *cpu: of the process's CPU time over the thread count
   (what the op costs when it has the cores: under load, the wall time waits for other processes too) */
static double time_case(bench_case *b, int reps, double *cpu) {
    double t[64], c[64];
    int r;
    if (reps > 64) reps = 64;
    run_op(b); /* pages touched */
    for (r = 0; r < reps; r++) {
        double t0 = gdl_now();
        clock_t c0 = clock();
        run_op(b);
        t[r] = gdl_now() - t0;
        c[r] = (double)(clock() - c0) / CLOCKS_PER_SEC / gdl_get_num_threads();
    }
    qsort(t, (size_t)reps, sizeof *t, bench_cmp_double);
    qsort(c, (size_t)reps, sizeof *c, bench_cmp_double);
    *cpu = c[reps / 2];
    return t[reps / 2];
}

typedef struct {
    const char *net;
    int op, count; /* count: calls per training step (0: a row for comparison, in no step) */
    int64_t N, C, S;
} shape_row;

int main(int argc, char **argv) {
    static const shape_row rows[] = {
        {"speedrun", OP_BN_GELU, 2, 256, 32, 196},     {"speedrun", OP_BN_GELU, 2, 256, 64, 49},
        {"speedrun", OP_BN_GELU, 2, 256, 128, 9},      {"speedrun", OP_BN_GELU_BWD, 2, 256, 32, 196},
        {"speedrun", OP_BN_GELU_BWD, 2, 256, 64, 49},  {"speedrun", OP_BN_GELU_BWD, 2, 256, 128, 9},
        {"unfused", OP_BN, 0, 256, 32, 196},           {"unfused", OP_BN_BWD, 0, 256, 32, 196},
        {"unfused", OP_GELU, 0, 256, 32, 196},         {"unfused", OP_GELU_BWD, 0, 256, 32, 196},
        {"rcnn", OP_BN_RELU, 1, 128, 32, 784},      {"rcnn", OP_BN_RELU, 1, 128, 64, 196},
        {"rcnn", OP_BN_RELU_BWD, 1, 128, 32, 784},  {"rcnn", OP_BN_RELU_BWD, 1, 128, 64, 196},
        {"resnet10", OP_ADD, 2, 128, 64, 196},      {"resnet10", OP_ADD, 2, 128, 128, 49},
        {"speedrun", OP_SGD, 1, 1, 1, 300000},
    };
    const int nrows = (int)(sizeof rows / sizeof rows[0]);
    int reps = argc > 1 ? atoi(argv[1]) : 15, k;
    double bw = bench_add_bandwidth_gbs(gdl_cpu(), gdl_now), tot_mem[3] = {0, 0, 0}, tot_t[3] = {0, 0, 0}, tot_cpu[3] = {0, 0, 0};
    if (reps < 1) reps = 15;
    printf("bench_passes: %s, %d threads, gdl_add streams %.1f GB/s; median of %d calls\n", bench_cpu_model(),
           gdl_get_num_threads(), bw, reps);
    printf("%-9s %-16s %-16s %7s %7s %7s %5s %7s %5s %6s %5s\n", "net", "op", "shape [N,C,S]", "MB", "mem ms", "ms",
           "x", "cpu ms", "x", "add GB", "x");
    for (k = 0; k < nrows; k++) {
        const shape_row *s = &rows[k];
        const int64_t n = s->N * s->C * s->S;
        bench_case b;
        double mb = op_arrays[s->op] * 4.0 * (double)n * 1e-6, mem = mb * 1e-3 / bw * 1e3, t, cpu, near_bw;
        char shape[48];
        int net = !strcmp(s->net, "speedrun") ? 0 : !strcmp(s->net, "rcnn") ? 1 : 2;
        memset(&b, 0, sizeof b);
        b.op = s->op, b.N = s->N, b.C = s->C, b.S = s->S;
        b.x = buf_new(n, 1), b.y = buf_new(n, 2), b.gy = buf_new(n, 3), b.gx = buf_new(n, 4);
        b.gm = buf_new(s->C, 5), b.bt = buf_new(s->C, 6), b.rm = buf_new(s->C, 7), b.rv = buf_new(s->C, 8);
        b.mean = buf_new(s->C, 9), b.invstd = buf_new(s->C, 10), b.ggm = buf_new(s->C, 11), b.gbt = buf_new(s->C, 12);
        b.pre = buf_new(n, 13);
        if (s->op == OP_BN_BWD || s->op == OP_BN_RELU_BWD || s->op == OP_BN_GELU_BWD) /* the forward's statistics */
            gdl__cpu_batchnorm_f32(s->N, s->C, s->S, b.x, b.gm, b.bt, b.y, b.mean, b.invstd, NULL, NULL, 1, 0.1, 1e-5,
                                   op_act(s->op), b.pre);
        t = time_case(&b, reps, &cpu) * 1e3;
        cpu *= 1e3;
        { /* add over n: the stream's rate at this size (the table's memory speed is at 64 MiB arrays) */
            bench_case ab = b;
            double acpu;
            ab.op = OP_ADD;
            near_bw = 3 * 4.0 * (double)n * 1e-6 / time_case(&ab, reps, &acpu) * 1e-3;
        }
        snprintf(shape, sizeof shape, "[%lld,%lld,%lld]", (long long)s->N, (long long)s->C, (long long)s->S);
        printf("%-9s %-16s %-16s %7.2f %7.3f %7.3f %5.2f %7.3f %5.2f %6.1f %5.2f\n", s->net, op_names[s->op], shape, mb,
               mem, t, t / mem, cpu, cpu / mem, near_bw, t / (mb / near_bw));
        tot_mem[net] += s->count * mem;
        tot_t[net] += s->count * t;
        tot_cpu[net] += s->count * cpu;
        free(b.x), free(b.y), free(b.gy), free(b.gx), free(b.gm), free(b.bt), free(b.rm), free(b.rv);
        free(b.mean), free(b.invstd), free(b.ggm), free(b.gbt), free(b.pre);
    }
    printf("a step's share (each shape times its calls a step):\n");
    for (k = 0; k < 3; k++)
        printf("  %-9s %7.3f ms at the memory's speed, %7.3f ms measured (%.2fx), %7.3f ms of CPU (%.2fx)\n",
               k == 0 ? "speedrun" : k == 1 ? "rcnn" : "resnet10", tot_mem[k], tot_t[k], tot_t[k] / tot_mem[k],
               tot_cpu[k], tot_cpu[k] / tot_mem[k]);
    return 0;
}
