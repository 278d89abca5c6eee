/* bench_cpu.h — what the benchmarks print about the machine they ran on:
   the CPU's model (and whether it is emulated), the process's peak memory,
   the bandwidth gdl_add streams and the rate of a large square GEMM, for
   bench/RESULTS.md; and qsort's order for their repeats' times. Included
   after gpudl.h. */
#ifndef GPUDL_BENCH_CPU_H
#define GPUDL_BENCH_CPU_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The CPU's model as /proc/cpuinfo names it ("model name" on x86; on ARM
   boards "Model", else "Hardware", else the implementer/part codes), and
   the architecture compiled for. Benchmark records must say which CPU. */
static const char *bench_cpu_model(void) {
    static char out[320];
    static const char *const keys[] = {"model name", "Model", "Hardware", "CPU part"};
    char found[4][256], line[512];
    const char *arch =
#if defined(__x86_64__) || defined(_M_X64)
        "x86-64";
#elif defined(__aarch64__)
        "aarch64";
#else
        "other";
#endif
    FILE *f = fopen("/proc/cpuinfo", "r");
    int k;
    for (k = 0; k < 4; k++) found[k][0] = 0;
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        for (k = 0; k < 4; k++) {
            size_t n = strlen(keys[k]);
            if (!found[k][0] && strncmp(line, keys[k], n) == 0 && (line[n] == ' ' || line[n] == '\t')) {
                char *v = colon + 1;
                while (*v == ' ' || *v == '\t') v++;
                v[strcspn(v, "\n")] = 0;
                snprintf(found[k], sizeof found[k], "%s%s", k == 3 ? "CPU part " : "", v);
            }
        }
    }
    if (f) fclose(f);
    k = 0;
    while (k < 4 && !found[k][0]) k++;
    /* arm64 kernels print no "model name": seen here, it is an x86 host's
       file passed through by qemu-user */
    snprintf(out, sizeof out, "%s (%s%s)", k < 4 ? found[k] : "unknown CPU", arch,
             k == 0 && strcmp(arch, "aarch64") == 0 ? ", emulated on this host" : "");
    return out;
}

/* The process's peak resident set (VmHWM of /proc/self/status) in MiB; NAN
   where there is no such file. */
static inline double bench_peak_rss_mib(void) {
    char line[256];
    double kib = -1;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) kib = atof(line + 6);
    if (f) fclose(f);
    return kib < 0 ? NAN : kib / 1024;
}

/* qsort's order for doubles (the repeats' times, for a median or the fastest) */
static inline int bench_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The bandwidth gdl_add streams on dev, GB/s, timed by now: two 64 MiB inputs read, one output written,
   fastest of 5 (a write-allocate's read is not counted: the figure is what the elementwise kernels see). */
static inline double bench_add_bandwidth_gbs(gdl_device dev, double (*now)(void)) {
    int64_t n = (int64_t)16 << 20;
    gdl_tensor *a = gdl_randn(1, &n, dev), *c = gdl_randn(1, &n, dev);
    double best = 0;
    int r;
    for (r = 0; a && c && r < 6; r++) {
        double t0 = now(), t;
        gdl_tensor *s = gdl_add(a, c);
        if (!s) break; /* the CPU's ops are done when they return */
        t = now() - t0;
        if (r > 0 && (best == 0 || t < best)) best = t; /* r = 0: pages first touched */
        gdl_arena_reset();
    }
    gdl_free(a);
    gdl_free(c);
    return best > 0 ? 3.0 * 4 * (double)n / best * 1e-9 : NAN;
}

/* The rate of gdl_gemm_cpu on n x n x n (NN), GFLOP/s, timed by now: the fastest of 5 after a warm-up.
   What the FLOP ops of a net could reach on this machine at its thread count: a large square GEMM is
   the best case of the CPU's GEMM (the nets' shapes are smaller or thinner). NAN without memory. */
static inline double bench_gemm_gflops(int n, double (*now)(void)) {
    const size_t nn = (size_t)n * n;
    gdl_real *a = (gdl_real *)malloc(3 * nn * sizeof(gdl_real));
    double best = 0;
    size_t i;
    int r;
    if (!a) return NAN;
    for (i = 0; i < 3 * nn; i++) a[i] = (gdl_real)((i * 2654435761u) % 1024) / 1024 - (gdl_real)0.5;
    for (r = 0; r < 6; r++) {
        double t0 = now(), t;
        gdl_gemm_cpu(0, 0, n, n, n, 1, a, n, a + nn, n, 0, a + 2 * nn, n);
        t = now() - t0;
        if (r > 0 && (best == 0 || t < best)) best = t; /* r = 0: pages first touched, the pool started */
    }
    free(a);
    return best > 0 ? 2.0 * n * (double)nn / best * 1e-9 : NAN;
}

#endif
