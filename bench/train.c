/* train.c — training throughput of the benchmark nets, on the default device
   (a GPU when built with CUDA and one is present, else the CPU).

   Nets (the same as bench/pytorch/train.py):
     mlp     784-128-10, ReLU, Adam 1e-3, batch 64          (the Fashion-MNIST MLP)
     cnn     conv32-pool-conv64-pool-fc128-fc10, Adam, batch 64 (the Fashion-MNIST CNN)
     fc10    10 Linear(512,512)+ReLU layers, SGD, batch 100 (the seed's small net, 1000 samples)
     fc50    50 such layers                                  (the seed's large net)
     wide    4096-4096-4096-10 MLP, SGD, batch 512            (GEMM-bound)
     air     an airbench-shaped CIFAR-10 net, batch 1024, SGD nesterov: a 2x2 conv
             stem (24) + GELU, then three groups conv3x3-maxpool-BN-GELU-conv3x3-BN-GELU
             of 64, 256, 256 channels, maxpool 3, Linear(256, 10) (not in the default list:
             ~0.7 TFLOP a step, seconds on a CPU)
     rcnn    the CNN recipe's net (examples/recipe.h "cnn": bench/fmnist92.c's BN CNN), SGD
             nesterov, batch 128
     resnet10 examples/resnet.c's net (recipe.h "resnet10"), SGD nesterov, batch 128
   Modes, after the net's name (the same as bench/pytorch/train.py's):
   NET-graph: the same net with its whole step captured once as a CUDA graph
   (gdl_graph_capture) and replayed; on the CPU a replay is the eager step.
   NET-amp: forward and loss under bf16 autocast (gdl_autocast_begin), as
   PyTorch's torch.autocast; NET-amp-graph: both.
   Inputs are random (never zeros). Per net: warm-up steps, then the median of
   5 timed repeats of `steps` steps each; the device is synchronised by the
   loss read (gdl_item) at the end of each repeat. Prints time per step,
   samples/s, the FLOPs of a step (gdl_flops_count over one eager step) and
   the achieved GFLOP/s, then the utilisation line (gdl_flops_line: the
   fraction of the CPU's measured or the GPU's datasheet peak), peak GPU memory
   (CUDA), the host's time to queue a step (on a GPU the launch overhead that
   a graph removes) and the kernel launches of a step (a replay is one; from
   the profiler), the threads, the CPU model and the GEMM micro-kernel; on
   the CPU a line per net with the last step's arena and the peak RSS.

   CPU:   cc -O3 -march=native bench/train.c -lm -pthread -o bench_train
   CUDA:  nvcc -O3 -arch=sm_90 -DGPUDL_CUDA bench/train.c gpudl_cuda.cu -lcublas -lcublasLt -lnccl -o bench_train
   Run:   ./bench_train [net ...]      (default: mlp cnn fc10 fc50)
          BENCH_CONV=im2col (or implicit, or gemm: the implicit GEMM without the direct
          kernel) ./bench_train cnn: the CPU convolutions on one path (unset: the path the
          shape picks), for before/after in one build
          BENCH_BOUND=1: after each net, what bounds its utilisation: 10 profiled steps split into
          the ops that do the counted FLOPs (linear, matmul, convolution, attention, forward and
          backward) and all the others; the first group's GFLOP/s and share of the peak, the
          others' time and largest rows, the utilisation the net would reach if the first group
          ran at the peak and the others as they are, the same with the first group at the rate
          of a 1024^3 GEMM here (the CPU GEMM's best case), and the time the step arena's
          traffic (written once, read twice) takes at the bandwidth gdl_add streams
          BENCH_FP32_PRECISION=bf16: the CPU's GEMMs and convolutions on AMX's tile unit (or AVX512-BF16)
          (gdl_cpu_set_fp32_precision; the utilisation then against the bf16 products' peak)
          BENCH_CLOCK=cpu: the process's CPU time (clock()) instead of the wall clock, for
          before/after on a machine other processes keep busy; with GPUDL_NUM_THREADS=1 it is
          the step's work (with more threads it adds the threads' CPU time up, waits included)
   On the CPU each net also prints the cores its threads held while timed: the process's CPU
   time over the wall time of the 5 repeats (beside another busy process: how many cores the
   OS gave the step; bench/busy_cpu.sh prints it). */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "bench_cpu.h"
#include "../examples/recipe.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int cpu_clock; /* BENCH_CLOCK=cpu */

/* seconds: the wall clock, or the process's CPU time under BENCH_CLOCK=cpu */
static double bench_now(void) { return cpu_clock ? (double)clock() / CLOCKS_PER_SEC : gdl_now(); }


typedef struct bnet {
    const char *name;
    gdl_module *m;
    gdl_optimizer *opt;
    gdl_tensor *x, *y, *loss;
    int64_t batch;
    double flops;     /* one step's, forward + backward, as gdl_flops_count counts them */
    gdl_graph *graph; /* NET-graph: the step captured once (gdl_graph_capture), replayed */
    int amp;          /* NET-amp: forward and loss in a bf16 autocast region */
} bnet;

static gdl_module *fc_stack(int layers, int width, int in, int out) {
    gdl_module *seq = gdl_nn_sequential(0, NULL);
    int i;
    for (i = 0; i < layers; i++) {
        gdl_nn_sequential_add(seq, gdl_nn_linear(i == 0 ? in : width, width, 1));
        gdl_nn_sequential_add(seq, gdl_nn_relu());
    }
    gdl_nn_sequential_add(seq, gdl_nn_linear(width, out, 1));
    return seq;
}

/* one training step on the net's fixed input: no host read, so it can be captured */
static int bstep(void *ctx) {
    bnet *b = (bnet *)ctx;
    if (gdl_zero_grad(b->opt) < 0 || (b->amp && gdl_autocast_begin(GDL_BF16) < 0)) return -1;
    b->loss = gdl_cross_entropy(gdl_forward(b->m, b->x), b->y);
    if (b->amp) gdl_autocast_end(); /* backward and the step outside the region, as with torch.autocast */
    return b->loss && gdl_backward(b->loss) == 0 && gdl_step(b->opt) == 0 ? 0 : -1;
}

static int make_net(bnet *b, const char *full, gdl_device dev) {
    int64_t xs[4];
    int nd = 2, graph = 0;
    char name[16];
    const char *dash = strchr(full, '-');
    memset(b, 0, sizeof *b);
    b->name = full;
    snprintf(name, sizeof name, "%.*s", dash ? (int)(dash - full) : (int)strlen(full), full);
    if (dash && (!strcmp(dash, "-graph") || !strcmp(dash, "-amp-graph"))) graph = 1;
    if (dash && (!strcmp(dash, "-amp") || !strcmp(dash, "-amp-graph"))) b->amp = 1;
    if (dash && !graph && !b->amp) {
        fprintf(stderr, "bench_train: unknown mode %s of %s (graph, amp, amp-graph)\n", dash + 1, full);
        return -2;
    }
    gdl_manual_seed(0);
    if (!strcmp(name, "mlp")) {
        b->m = fc_stack(1, 128, 784, 10);
        b->batch = 64;
        xs[1] = 784;
        b->opt = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0);
    } else if (!strcmp(name, "cnn")) {
        b->m = ex_cnn_net(1, 28, 0);
        b->batch = 64;
        nd = 4;
        xs[1] = 1; xs[2] = 28; xs[3] = 28;
        b->opt = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0);
    } else if (!strcmp(name, "fc10") || !strcmp(name, "fc50")) {
        int L = name[2] == '1' ? 10 : 50;
        b->m = fc_stack(L, 512, 512, 10);
        b->batch = 100;
        xs[1] = 512;
        b->opt = gdl_sgd_new(0.01, 0.9, 0, 0, 0);
    } else if (!strcmp(name, "wide")) {
        b->m = fc_stack(2, 4096, 4096, 10);
        b->batch = 512;
        xs[1] = 4096;
        b->opt = gdl_sgd_new(0.01, 0.9, 0, 0, 0);
    } else if (!strcmp(name, "air")) {
        static const int width[3] = {64, 256, 256};
        int g, cin = 24;
        gdl_module *seq = gdl_nn_sequential(0, NULL);
        gdl_nn_sequential_add(seq, gdl_nn_conv2d(3, 24, 2, 1, 0, 1, 1, 1)); /* 32x32 -> 31x31 */
        gdl_nn_sequential_add(seq, gdl_nn_gelu(0));
        for (g = 0; g < 3; g++) { /* 31 -> 15 -> 7 -> 3 */
            gdl_nn_sequential_add(seq, gdl_nn_conv2d(cin, width[g], 3, 1, 1, 1, 1, 0));
            gdl_nn_sequential_add(seq, gdl_nn_maxpool2d(2, 2, 0));
            gdl_nn_sequential_add(seq, gdl_nn_batchnorm2d(width[g]));
            gdl_nn_sequential_add(seq, gdl_nn_gelu(0));
            gdl_nn_sequential_add(seq, gdl_nn_conv2d(width[g], width[g], 3, 1, 1, 1, 1, 0));
            gdl_nn_sequential_add(seq, gdl_nn_batchnorm2d(width[g]));
            gdl_nn_sequential_add(seq, gdl_nn_gelu(0));
            cin = width[g];
        }
        gdl_nn_sequential_add(seq, gdl_nn_maxpool2d(3, 3, 0));
        gdl_nn_sequential_add(seq, gdl_nn_flatten(1));
        gdl_nn_sequential_add(seq, gdl_nn_linear(256, 10, 0));
        b->m = seq;
        b->batch = 1024;
        nd = 4;
        xs[1] = 3; xs[2] = 32; xs[3] = 32;
        b->opt = gdl_sgd_new(0.01, 0.9, 0, 5e-4, 1);
    } else if (!strcmp(name, "rcnn") || !strcmp(name, "resnet10")) {
        b->m = ex_recipe_net(ex_recipe_find(!strcmp(name, "rcnn") ? "cnn" : name));
        b->batch = EX_RECIPE_BATCH;
        nd = 4;
        xs[1] = 1; xs[2] = 28; xs[3] = 28;
        b->opt = gdl_sgd_new(0.05, 0.9, 0, 5e-4, 1);
    } else {
        fprintf(stderr, "bench_train: unknown net %s (mlp, cnn, fc10, fc50, wide, air, rcnn, resnet10)\n", name);
        return -2;
    }
    xs[0] = b->batch;
    {
        int32_t *labels = (int32_t *)malloc(sizeof(int32_t) * (size_t)b->batch);
        int64_t i;
        for (i = 0; i < b->batch; i++) labels[i] = (int32_t)(gdl_rng_next_u64() % 10);
        b->y = gdl_from_array(labels, 1, &b->batch, GDL_I32, dev);
        free(labels);
    }
    b->x = gdl_randn(nd, xs, dev);
    if (!b->m || !b->opt || !b->x || !b->y || gdl_module_to(b->m, dev) < 0 || gdl_optim_add_module(b->opt, b->m, 0) < 0)
        return -1;
    /* one eager step, counted (a graph's replay runs no op on the host); then the capture */
    gdl_flops_reset();
    if (bstep(b) < 0) return -1;
    b->flops = (double)gdl_flops_count(NULL, NULL);
    gdl_arena_reset();
    if (graph && !(b->graph = gdl_graph_capture(dev, bstep, b))) return -1;
    return 0;
}

/* `steps` steps; *issue: the host's time to queue them (all of it on the
   CPU, where the work is done in the call) */
static double run_steps(bnet *b, int steps, double *issue) {
    double t0 = bench_now();
    int s;
    for (s = 0; s < steps; s++) {
        if (b->graph) {
            if (gdl_graph_replay(b->graph) < 0) return NAN;
        } else {
            gdl_arena_reset();
            if (bstep(b) < 0) return NAN;
        }
    }
    if (issue) *issue = bench_now() - t0;
    return gdl_item(b->loss); /* waits for the device */
}

/* BENCH_BOUND=1: what bounds the net's utilisation (see the top). med: seconds a step, timed. */
static void print_bound(bnet *b, double med, double peak_gflops, double bw_gbs, double *gemm_gflops) {
    const gdl_profile_row *rows;
    double flop_ms = 0, total_ms, other_ms, ideal_s, gemm;
    int nr, i, steps = 10;
    double t0 = bench_now();
    if (gdl_profile_begin() < 0) return;
    run_steps(b, steps, NULL);
    total_ms = (bench_now() - t0) * 1e3 / steps;
    if (gdl_profile_end() < 0 || (nr = gdl_profile_rows(&rows)) < 0) return;
    for (i = 0; i < nr; i++)
        if (ex_flop_op(rows[i].name)) flop_ms += rows[i].total_ms / steps;
    other_ms = total_ms - flop_ms;
    ideal_s = b->flops / (peak_gflops * 1e9) + other_ms * 1e-3;
    printf("bound %s: profiled step %.3f ms (timed %.3f): FLOP ops %.3f ms at %.1f GFLOP/s (%.1f %% of peak), "
           "other ops and overhead %.3f ms (%.0f %%); with the FLOP ops at the peak: %.1f %% of peak\n",
           b->name, total_ms, med * 1e3, flop_ms, b->flops * 1e-6 / flop_ms, 100 * b->flops * 1e-6 / flop_ms / peak_gflops,
           other_ms, 100 * other_ms / total_ms, 100 * b->flops / ideal_s * 1e-9 / peak_gflops);
    /* the same at the rate the CPU's GEMM reaches at its best here, nearer what the kernels can do: timed
       again after each net and the fastest kept, since a shared VM can run 2 threads at 1 thread's speed
       for seconds (bench/RESULTS.md, the convolutions); never below the net's own FLOP ops' rate */
    gemm = bench_gemm_gflops(1024, bench_now);
    if (!(*gemm_gflops >= gemm)) *gemm_gflops = gemm;
    gemm = *gemm_gflops > b->flops * 1e-6 / flop_ms ? *gemm_gflops : b->flops * 1e-6 / flop_ms;
    ideal_s = b->flops / (gemm * 1e9) + other_ms * 1e-3;
    printf("bound %s: with the FLOP ops at the 1024^3 GEMM's %.1f GFLOP/s (%.1f %% of peak; the fastest timed so far): "
           "%.1f %% of peak\n", b->name, gemm, 100 * gemm / peak_gflops, 100 * b->flops / ideal_s * 1e-9 / peak_gflops);
    for (i = 0; i < nr && i < 8; i++)
        if (!ex_flop_op(rows[i].name))
            printf("bound %s:   %-36s %8.3f ms/step\n", b->name, rows[i].name, rows[i].total_ms / steps);
    /* the least traffic of a step's other ops: what the forward keeps for the backward (the step's
       arena) written once and read twice */
    printf("bound %s: the step arena (%.1f MiB) written once and read twice at gdl_add's %.1f GB/s: %.3f ms\n",
           b->name, gdl_arena_used() / 1048576.0, bw_gbs, 3.0 * (double)gdl_arena_used() / (bw_gbs * 1e9) * 1e3);
}

int main(int argc, char **argv) {
    static const char *const defaults[] = {"mlp", "cnn", "fc10", "fc50"};
    const char *const *nets = argc > 1 ? (const char *const *)(argv + 1) : defaults;
    int nnets = argc > 1 ? argc - 1 : 4, k, threads = gdl_get_num_threads();
    double bound_bw = 0, bound_gemm = 0; /* BENCH_BOUND=1 on the CPU: gdl_add's bandwidth, the GEMM's best rate */
    gdl_device dev = gdl_default_device();
    if (getenv("BENCH_FP32_PRECISION") && gdl_cpu_set_fp32_precision(getenv("BENCH_FP32_PRECISION")) != 0) {
        fprintf(stderr, "%s\n", gdl_last_error());
        return 2;
    }
#ifndef GDL__GEMM_CBLAS
    /* BENCH_CONV=im2col: the CPU convolutions as before the implicit GEMM, =gemm: as before the direct
       kernel, to time them in one build */
    const char *conv = getenv("BENCH_CONV");
    if (conv && !strcmp(conv, "im2col")) gdl__conv_path = 0;
    else if (conv && !strcmp(conv, "implicit")) gdl__conv_path = 1;
    else if (conv && !strcmp(conv, "gemm")) gdl__conv_path = 2;
    else if (conv && *conv) {
        fprintf(stderr, "bench_train: BENCH_CONV=%s: im2col, implicit or gemm (unset: by shape)\n", conv);
        return 2;
    }
#endif
    cpu_clock = getenv("BENCH_CLOCK") && !strcmp(getenv("BENCH_CLOCK"), "cpu");
    if (cpu_clock) printf("clock: the process's CPU time (BENCH_CLOCK=cpu), not the wall clock\n");
    printf("device %s (%s), %d CPU threads\n", gdl_device_str(dev), gdl_device_name(dev), threads);
    printf("cpu: %s, GEMM micro-kernel %s\n", bench_cpu_model(), gdl_gemm_kernel_name());
    /* the CPU's FMA peak, measured here, before the nets, under the machine's present load */
    if (dev.type == GDL_DEVICE_CPU) printf("cpu peak: %.1f GFLOP/s on %d threads\n", gdl_cpu_peak_gflops(0), threads);
    if (getenv("BENCH_BOUND") && !strcmp(getenv("BENCH_BOUND"), "1") && dev.type == GDL_DEVICE_CPU) {
        bound_bw = bench_add_bandwidth_gbs(dev, bench_now);
        printf("gdl_add streams %.1f GB/s (two 64 MiB inputs, one output; fastest of 5)\n", bound_bw);
        bound_gemm = bench_gemm_gflops(1024, bench_now);
        printf("gdl_gemm_cpu at 1024^3 runs at %.1f GFLOP/s (fastest of 5)\n", bound_gemm);
    }
    printf("%-14s %6s %12s %12s %10s %10s %9s %11s %9s\n", "net", "batch", "ms/step", "samples/s", "GFLOP/step", "GFLOP/s",
           "peak MiB", "host us/st", "launch/st");
    for (k = 0; k < nnets; k++) {
        bnet b;
        double t[5], host[5], med, ms, cpu0, wall0, cores;
        int r, steps;
        if ((r = make_net(&b, nets[k], dev)) < 0) {
            if (r == -1) fprintf(stderr, "bench_train: %s\n", gdl_last_error()); /* -2: said */
            return 1;
        }
        /* warm up, and size the repeats to ~0.5 s each */
        {
            double t0 = bench_now();
            run_steps(&b, 3, NULL);
            ms = (bench_now() - t0) / 3;
            steps = ms > 0 ? (int)(0.5 / ms) : 100;
            if (steps < 3) steps = 3;
            if (steps > 2000) steps = 2000;
        }
#ifdef GPUDL_CUDA
        if (dev.type == GDL_DEVICE_CUDA) gdl_cuda_reset_peak_memory();
#endif
        cpu0 = (double)clock() / CLOCKS_PER_SEC;
        wall0 = gdl_now();
        for (r = 0; r < 5; r++) {
            double t0 = bench_now();
            if (isnan(run_steps(&b, steps, &host[r]))) {
                fprintf(stderr, "bench_train: %s: %s\n", b.name, gdl_last_error());
                return 1;
            }
            t[r] = (bench_now() - t0) / steps;
            host[r] /= steps;
        }
        cores = ((double)clock() / CLOCKS_PER_SEC - cpu0) / (gdl_now() - wall0);
        qsort(t, 5, sizeof t[0], bench_cmp_double);
        qsort(host, 5, sizeof host[0], bench_cmp_double);
        med = t[2];
        {
            double peak = NAN;     /* GPU memory held by tensors at the peak (PyTorch's max_memory_allocated) */
            double launches = NAN; /* kernel launches per step (a graph replay is one), from the profiler */
            const gdl_profile_row *rows;
            int nr, i;
#ifdef GPUDL_CUDA
            size_t alloc, maxa, res;
            if (dev.type == GDL_DEVICE_CUDA && gdl_cuda_memory_stats(&alloc, &maxa, &res) == 0) peak = maxa / 1048576.0;
#endif
            if (dev.type == GDL_DEVICE_CUDA && gdl_profile_begin() == 0) {
                run_steps(&b, 5, NULL);
                if (gdl_profile_end() == 0 && (nr = gdl_profile_rows(&rows)) >= 0)
                    for (launches = 0, i = 0; i < nr; i++)
                        if (rows[i].launches > 0) launches += (double)rows[i].launches / 5;
            }
            printf("%-14s %6lld %12.3f %12.0f %10.3f %10.1f %9.1f %11.1f %9.1f\n", b.name, (long long)b.batch, 1e3 * med,
                   (double)b.batch / med, b.flops * 1e-9, b.flops * 1e-9 / med, peak, 1e6 * host[2], launches);
            printf("%-14s %s\n", "", gdl_flops_line(b.flops, med, dev, b.amp ? GDL_BF16 : GDL_F32));
            /* the last step's arena (run_steps resets it before each step) and the process's peak so far */
            if (dev.type == GDL_DEVICE_CPU) {
                printf("memory %s: step arena %.1f MiB (held %.1f MiB), peak RSS %.1f MiB\n", b.name,
                       gdl_arena_used() / 1048576.0, gdl_arena_reserved() / 1048576.0, bench_peak_rss_mib());
                printf("cores %s: %.2f held by its %d threads while timed (CPU time / wall time)\n", b.name, cores,
                       threads);
            }
            if (bound_bw > 0) print_bound(&b, med, gdl_cpu_peak_gflops(0), bound_bw, &bound_gemm);
        }
        fflush(stdout);
        gdl_graph_free(b.graph);
        gdl_optim_free(b.opt);
        gdl_module_free(b.m);
        gdl_free(b.x);
        gdl_free(b.y);
    }
    gdl_shutdown();
    return 0;
}
