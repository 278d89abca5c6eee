/* rnn_train.c — training step time of the recurrent core of examples/text_classify.c on the CPU: an LSTM (or
   GRU) (64 -> 128, batch_first) over a batch of 128 texts of 64 steps, the mean over time, Linear(128, 6),
   cross entropy, Adam 2e-3 — text_classify's model without the embedding (inputs are random [128, 64, 64]
   vectors, every text full length). bench/pytorch/rnn_train.py is the twin; bench/compare_rnn.sh runs both,
   interleaved. Per net: 2 warm-up steps, then the median of 5 timed repeats of ~0.5 s of steps; the FLOPs of
   a step (gdl_flops_count over one eager step), GFLOP/s and the utilisation line (gdl_flops_line).

   CPU:   cc -O3 -march=native bench/rnn_train.c -lm -pthread -o bench_rnn_train
   Run:   GPUDL_NUM_THREADS=1 ./bench_rnn_train [lstm|gru ...]   (default: lstm gru) */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "bench_cpu.h"
#include <stdlib.h>
#include <string.h>

enum { RB = 128, RT = 64, RIN = 64, RH = 128, RC = 6 };

typedef struct rnet {
    gdl_module *rnn, *head;
    gdl_optimizer *opt;
    gdl_tensor *x, *y, *loss;
} rnet;

static int rstep(rnet *n) {
    gdl_tensor *h;
    if (gdl_zero_grad(n->opt) < 0) return -1;
    h = gdl_forward(n->rnn, n->x);
    h = h ? gdl_mean_dim(h, 1, 0) : NULL;
    n->loss = gdl_cross_entropy(gdl_forward(n->head, h), n->y);
    return n->loss && gdl_backward(n->loss) == 0 && gdl_step(n->opt) == 0 ? 0 : -1;
}

static double rsteps(rnet *n, int steps) {
    int s;
    for (s = 0; s < steps; s++) {
        gdl_arena_reset();
        if (rstep(n) < 0) return NAN;
    }
    return gdl_item(n->loss);
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* one net timed and printed; 0, or -1 after the error */
static int run_net(const char *name, gdl_device dev) {
    int64_t xs[3] = {RB, RT, RIN}, nb = RB, i;
    int32_t labels[RB];
    rnet n;
    double t[5], flops, ms;
    int r, steps;
    memset(&n, 0, sizeof n);
    gdl_manual_seed(0);
    if (!strcmp(name, "lstm")) n.rnn = gdl_nn_lstm(RIN, RH, 1, 1, 1, 0, 0);
    else if (!strcmp(name, "gru")) n.rnn = gdl_nn_gru(RIN, RH, 1, 1, 1, 0, 0);
    else {
        fprintf(stderr, "bench_rnn_train: unknown net %s (lstm, gru)\n", name);
        return -2;
    }
    n.head = gdl_nn_linear(RH, RC, 1);
    n.opt = gdl_adam_new(2e-3, 0.9, 0.999, 1e-8, 0);
    for (i = 0; i < RB; i++) labels[i] = (int32_t)(gdl_rng_next_u64() % RC);
    n.y = gdl_from_array(labels, 1, &nb, GDL_I32, dev);
    n.x = gdl_randn(3, xs, dev);
    if (!n.rnn || !n.head || !n.opt || !n.x || !n.y || gdl_optim_add_module(n.opt, n.rnn, 0) < 0 ||
        gdl_optim_add_module(n.opt, n.head, 0) < 0)
        return -1;
    gdl_flops_reset();
    if (rstep(&n) < 0) return -1;
    flops = (double)gdl_flops_count(NULL, NULL);
    {
        double t0 = gdl_now();
        if (isnan(rsteps(&n, 2))) return -1;
        ms = (gdl_now() - t0) / 2;
        steps = ms > 0 ? (int)(0.5 / ms) : 100;
        if (steps < 2) steps = 2;
    }
    for (r = 0; r < 5; r++) {
        double t0 = gdl_now();
        if (isnan(rsteps(&n, steps))) return -1;
        t[r] = (gdl_now() - t0) / steps;
    }
    qsort(t, 5, sizeof t[0], cmpd);
    printf("%-6s %6d %12.3f %10.3f %10.1f\n", name, RB, 1e3 * t[2], flops * 1e-9, flops * 1e-9 / t[2]);
    printf("%-6s %s\n", "", gdl_flops_line(flops, t[2], dev, GDL_F32));
    printf("memory %s: step arena %.1f MiB, peak RSS %.1f MiB\n", name, gdl_arena_used() / 1048576.0,
           bench_peak_rss_mib());
    fflush(stdout);
    gdl_optim_free(n.opt);
    gdl_module_free(n.rnn);
    gdl_module_free(n.head);
    gdl_free(n.x);
    gdl_free(n.y);
    return 0;
}

int main(int argc, char **argv) {
    static const char *const defaults[] = {"lstm", "gru"};
    const char *const *nets = argc > 1 ? (const char *const *)(argv + 1) : defaults;
    int nnets = argc > 1 ? argc - 1 : 2, k, rc;
    gdl_device dev = gdl_cpu();
    printf("cpu: %s, %d threads, GEMM micro-kernel %s\n", bench_cpu_model(), gdl_get_num_threads(),
           gdl_gemm_kernel_name());
    printf("cpu peak: %.1f GFLOP/s\n", gdl_cpu_peak_gflops(0));
    printf("%-6s %6s %12s %10s %10s\n", "net", "batch", "ms/step", "GFLOP/step", "GFLOP/s");
    for (k = 0; k < nnets; k++)
        if ((rc = run_net(nets[k], dev)) < 0) {
            if (rc == -1) fprintf(stderr, "bench_rnn_train: %s: %s\n", nets[k], gdl_last_error());
            return 1;
        }
    gdl_shutdown();
    return 0;
}
