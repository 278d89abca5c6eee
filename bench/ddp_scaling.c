/* ddp_scaling.c — what data parallel costs, measured on the ranks at hand
   and modelled for 8 GPUs.

   Per net, on each rank's batch of random inputs (the medians of 7 timed
   repeats of 20 steps, after warm-up):
     t_fb    forward + backward without communication
     t_ar    one all-reduce of all the gradients (gdl_dist_all_reduce of a
             buffer of the gradients' size)
     t_ddp   forward + gdl_ddp_backward (buckets all-reduced as backward
             completes them)
     overlap the share of t_ar hidden behind backward: (t_fb + t_ar - t_ddp) / t_ar,
             clipped to [0, 1]
   Then the ring all-reduce model for 8 GPUs: t_comm = 2 (n-1)/n x bytes /
   bus bandwidth, and the efficiency t_step / (t_step + exposed t_comm),
   exposed = t_comm without overlap, max(0, t_comm - t_backward) with full
   overlap (t_backward ~ 2/3 of the step), for NVLink (H100 NVLink 4, about
   370 GB/s of all-reduce bus bandwidth in NCCL's tests) and PCIe Gen5 x16
   (about 50 GB/s), at this machine's measured step time and at the GPU
   step times given by --gpu-step-ms (no GPU measured here: assumptions).

   Build: mpicc -O3 -march=native -DGPUDL_MPI bench/ddp_scaling.c -lm -pthread -o ddp_scaling
   Run:   mpirun -np 2 ./ddp_scaling [mlp|wide ...] [--gpu-step-ms 0.3,1,3] */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "bench_cpu.h"
#include <stdlib.h>
#include <string.h>

enum { REPEATS = 7, STEPS = 20 };

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static gdl_module *mlp(int width, int layers) {
    gdl_module *seq = gdl_nn_sequential(0, NULL);
    int i;
    for (i = 0; i < layers; i++) {
        gdl_nn_sequential_add(seq, gdl_nn_linear(i == 0 ? 784 : width, width, 1));
        gdl_nn_sequential_add(seq, gdl_nn_relu());
    }
    gdl_nn_sequential_add(seq, gdl_nn_linear(width, 10, 1));
    return seq;
}

/* the median time of REPEATS x STEPS steps of: forward, backward (mode 0),
   all-reduce only (1), forward + DDP backward (2); per step, in seconds */
static double timed(int mode, gdl_module *m, gdl_ddp *d, gdl_tensor *x, gdl_tensor *y, gdl_tensor *flat) {
    double t[REPEATS];
    int r, s;
    for (r = -1; r < REPEATS; r++) { /* r == -1: warm-up */
        double t0;
        gdl_dist_barrier();
        t0 = gdl_now();
        for (s = 0; s < STEPS; s++) {
            gdl_arena_reset();
            if (mode == 1) {
                if (gdl_dist_all_reduce(flat, GDL_AVG) < 0) return -1;
            } else {
                gdl_tensor *loss = gdl_cross_entropy(mode == 2 ? gdl_ddp_forward(d, x) : gdl_forward(m, x), y);
                if (!loss || (mode == 2 ? gdl_ddp_backward(d, loss) : gdl_backward(loss)) < 0) return -1;
            }
        }
        if (r >= 0) t[r] = (gdl_now() - t0) / STEPS;
    }
    qsort(t, REPEATS, sizeof *t, cmp_double);
    return t[REPEATS / 2];
}

static void model(const char *label, double step, double bytes, int n) {
    static const struct { const char *name; double busbw; } links[2] = {{"NVLink 4", 370e9}, {"PCIe 5 x16", 50e9}};
    int k;
    for (k = 0; k < 2; k++) {
        double comm = 2.0 * (n - 1) / n * bytes / links[k].busbw, back = step * 2.0 / 3.0;
        double hidden = comm - back > 0 ? comm - back : 0;
        printf("  %-26s %-10s all-reduce %8.3f ms: efficiency %5.1f%% without overlap, %5.1f%% with\n", label,
               links[k].name, 1e3 * comm, 100 * step / (step + comm), 100 * step / (step + hidden));
    }
}

int main(int argc, char **argv) {
    const char *nets[8];
    double gpu_ms[8];
    int nn = 0, ng = 0, i, rank;
    if (gdl_dist_init() < 0) {
        fprintf(stderr, "ddp_scaling: %s\n", gdl_last_error());
        return 1;
    }
    rank = gdl_dist_rank();
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gpu-step-ms") && i + 1 < argc) {
            char *p = argv[++i];
            while (*p && ng < 8) {
                gpu_ms[ng++] = strtod(p, &p);
                if (*p == ',') p++;
            }
        } else if (nn < 8) {
            nets[nn++] = argv[i];
        }
    }
    if (!nn) nets[nn++] = "mlp", nets[nn++] = "wide";
    if (!ng) gpu_ms[ng++] = 0.3, gpu_ms[ng++] = 1, gpu_ms[ng++] = 3;
    if (rank == 0)
        printf("ddp_scaling: %d ranks (%s), CPU %s, GEMM %s; %d x %d steps, medians\n", gdl_dist_world_size(),
               gdl_dist_launcher(), bench_cpu_model(), gdl_gemm_kernel_name(), REPEATS, STEPS);
    for (i = 0; i < nn; i++) {
        int wide = !strcmp(nets[i], "wide");
        int64_t B = 64, sx[2] = {64, 784}, sy[1] = {64}, sf[1];
        gdl_module *m;
        gdl_ddp *d;
        gdl_tensor *x, *y, *flat, *ps[16];
        double t_fb, t_ar, t_ddp, overlap, bytes = 0;
        int np, k;
        char label[64];
        if (!wide && strcmp(nets[i], "mlp")) {
            fprintf(stderr, "ddp_scaling: unknown net '%s' (mlp, wide)\n", nets[i]);
            return 2;
        }
        gdl_manual_seed(1);
        m = wide ? mlp(2048, 3) : mlp(128, 1);
        np = gdl_module_named_tensors(m, GDL_PARAMS, NULL, ps, 16);
        for (k = 0; k < np; k++) bytes += (double)ps[k]->numel * sizeof(gdl_real);
        sf[0] = (int64_t)(bytes / sizeof(gdl_real));
        x = gdl_randn(2, sx, gdl_cpu());
        y = gdl_zeros(1, sy, GDL_I32, gdl_cpu());
        flat = gdl_randn(1, sf, gdl_cpu());
        if (!m || !x || !y || !flat || !(d = gdl_ddp_new(m, NULL))) {
            fprintf(stderr, "ddp_scaling: %s\n", gdl_last_error());
            return 1;
        }
        t_fb = timed(0, m, d, x, y, flat);
        t_ar = timed(1, m, d, x, y, flat);
        t_ddp = timed(2, m, d, x, y, flat);
        if (t_fb < 0 || t_ar < 0 || t_ddp < 0) {
            fprintf(stderr, "ddp_scaling: %s\n", gdl_last_error());
            return 1;
        }
        overlap = (t_fb + t_ar - t_ddp) / t_ar;
        overlap = overlap < 0 ? 0 : overlap > 1 ? 1 : overlap;
        if (rank == 0) {
            printf("%s: batch %lld per rank, %.2f MB of gradients in %d buckets\n", nets[i], (long long)B, bytes / 1e6,
                   gdl_ddp_num_buckets(d));
            printf("  forward+backward %.3f ms, all-reduce %.3f ms, DDP step %.3f ms: %.0f%% of the all-reduce "
                   "hidden behind backward\n",
                   1e3 * t_fb, 1e3 * t_ar, 1e3 * t_ddp, 100 * overlap);
            printf("  8 GPUs, ring all-reduce model:\n");
            snprintf(label, sizeof label, "step %.3f ms (this CPU)", 1e3 * t_fb);
            model(label, t_fb, bytes, 8);
            for (k = 0; k < ng; k++) {
                snprintf(label, sizeof label, "step %.3f ms (assumed GPU)", gpu_ms[k]);
                model(label, gpu_ms[k] * 1e-3, bytes, 8);
            }
        }
        gdl_ddp_free(d);
        gdl_free(x), gdl_free(y), gdl_free(flat);
        gdl_module_free(m);
    }
    gdl_dist_shutdown();
    gdl_shutdown();
    return 0;
}
